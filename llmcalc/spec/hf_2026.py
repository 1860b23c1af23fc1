"""2026's model_types for ``llmcalc.spec.hf_families.FAMILIES`` (issue 22): DeepSeek Sparse Attention (DeepSeek-V3.2,
GLM-5), GLM-4.7-Flash, DeepSeek-V4 and Gemma 4's text model.

Each derive step reads the config exactly as its transformers 5.24 config class lays it out
(configuration_<type>.py: the class defaults for absent keys, the ``__post_init__`` rules that fill
``layer_types``, ``mlp_layer_types`` and friends) and names the modelling file it mirrors. Formulas:
``llmcalc.analytic.params`` / ``flops`` (``_indexer``, ``_compressor``, ``_hyper_connections``,
``_per_layer_input``) and ``inference.kv_layers``.
"""

from __future__ import annotations

from .draft import SpecError
from .hf_family import Family, NoFormula, deepseek_mla

# The published per-layer kinds, in llmcalc's names.
_DSA_MLP = {"dense": "mlp", "sparse": "moe"}
_V4_ATTENTION = {"sliding_attention": "none", "compressed_sparse_attention": "csa",
                 "heavily_compressed_attention": "hca"}
_V4_RATIOS = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def _mlp_layer_types(hf: dict, kw: dict, dense_first: int) -> None:
    """MoE layers from HF's ``mlp_layer_types`` ("dense"/"sparse") when the config gives it, else the class rule:
    the first `dense_first` layers dense (DeepseekV32Config / GlmMoeDsaConfig / Glm4MoeLiteConfig.__post_init__)."""
    if "n_experts" not in kw:  # a dense config: no MoE fields (deepseek_mla dropped them)
        return
    L = kw["n_layers"]
    types = hf.get("mlp_layer_types")
    if isinstance(types, list):
        unknown = sorted({t for t in types if t not in _DSA_MLP})
        if unknown or len(types) != L:
            raise SpecError(f"mlp_layer_types must give \"dense\" or \"sparse\" for each of the {L} layers; "
                            f"got {len(types)} entries{f' with {unknown}' if unknown else ''}")
        kw["moe_layers"] = tuple(i for i, t in enumerate(types) if t == "sparse")
    else:
        kw["moe_layers"] = tuple(range(min(dense_first, L), L))
    kw.pop("n_dense_layers", None)


def _indexer_keys(hf: dict, kw: dict, heads: int, width: int, topk: int) -> None:
    kw.update(index_n_heads=hf.get("index_n_heads", heads), index_head_dim=hf.get("index_head_dim", width),
              index_topk=hf.get("index_topk", topk))


def _deepseek_v32(hf: dict, kw: dict) -> None:
    # modeling_deepseek_v32.py DeepseekV32Attention: MLA with the low-rank query always ("Qlora rank formulation is
    # dropped") and a DeepseekV32Indexer in every layer; DeepSeek-V3's MoE; mlp_layer_types default
    # first_k_dense_replace x "dense" (configuration_deepseek_v32.py __post_init__).
    deepseek_mla(hf, kw)
    _mlp_layer_types(hf, kw, hf.get("first_k_dense_replace", 3))
    _indexer_keys(hf, kw, 64, 128, 2048)


def glm_indexer_layers(hf: dict, n_layers: int) -> tuple[int, ...]:
    """The layers with an indexer of their own (GlmMoeDsaConfig.__post_init__, indexer_types "full"): HF's
    indexer_types when given, else index_topk_pattern ("F" full / "S" shared), else layer i is full when
    max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (defaults 2 and 1: every layer)."""
    types, pattern = hf.get("indexer_types"), hf.get("index_topk_pattern")
    if isinstance(types, list):
        kinds = ["F" if t == "full" else "S" if t == "shared" else "?" for t in types]
    elif isinstance(pattern, str):
        kinds = list(pattern)
    else:
        freq, offset = hf.get("index_topk_freq", 1), hf.get("index_skip_topk_offset", 2)
        if not isinstance(freq, int) or freq < 1:
            raise SpecError(f"index_topk_freq must be a positive whole number, got {freq!r}")
        kinds = ["F" if max(i - offset + 1, 0) % freq == 0 else "S" for i in range(n_layers)]
    if len(kinds) != n_layers or set(kinds) - {"F", "S"} or kinds[:1] != ["F"]:
        raise SpecError(f"glm_moe_dsa indexer_types / index_topk_pattern must give \"full\" (F) or \"shared\" (S) for "
                        f"each of the {n_layers} layers, the first full (a shared layer reuses the previous top-k)")
    return tuple(i for i, k in enumerate(kinds) if k == "F")


def _glm_moe_dsa(hf: dict, kw: dict) -> None:
    # modeling_glm_moe_dsa.py GlmMoeDsaAttention: DeepSeek-V3.2's layer, with an indexer only where indexer_types
    # says "full"; "shared" layers reuse the previous full layer's top-k.
    deepseek_mla(hf, kw)
    _mlp_layer_types(hf, kw, hf.get("first_k_dense_replace", 3))
    _indexer_keys(hf, kw, 32, 128, 2048)
    layers = glm_indexer_layers(hf, kw["n_layers"])
    if len(layers) < kw["n_layers"]:
        kw["index_layers"] = layers


def _glm4_moe_lite(hf: dict, kw: dict) -> None:
    # modeling_glm4_moe_lite.py: DeepSeek-V3's MLA (q_lora_rank nullable: a plain q_proj) and MoE; the class has no
    # first_k_dense_replace field: mlp_layer_types defaults to one dense layer (configuration_glm4_moe_lite.py).
    deepseek_mla(hf, kw)
    _mlp_layer_types(hf, kw, 1)
    if hf.get("first_k_dense_replace", 1) != 1 and not isinstance(hf.get("mlp_layer_types"), list):
        kw["notes"] = kw.get("notes", ()) + (
            f"first_k_dense_replace {hf['first_k_dense_replace']} is ignored, as transformers' Glm4MoeLiteConfig "
            f"does: one dense layer unless mlp_layer_types says otherwise",)


def _deepseek_v4(hf: dict, kw: dict) -> None:  # long: the config class's legacy keys, one by one
    # modeling_deepseek_v4.py DeepseekV4Attention: q_a_proj/q_a_norm/q_b_proj (q_b_norm unweighted), one K = V head
    # (kv_proj D -> d_head, kv_norm), sinks, a grouped low-rank output, a compressor (CSA with an indexer, or HCA) on
    # every layer but the sliding-only ones; DeepseekV4SparseMoeBlock in every layer (router, routed experts, one
    # shared expert of moe_intermediate_size whatever n_shared_experts says); mHC hyper-connections.
    # configuration_deepseek_v4.py __post_init__: layer_types from the legacy compress_ratios (L+1 entries, the
    # last the MTP layer's) else 2 x HCA then CSA/HCA; compress_rates {CSA: 4, HCA: 128} unless given.
    L = kw["n_layers"]
    types = hf.get("layer_types")
    if not isinstance(types, list):
        ratios = hf.get("compress_ratios")
        if isinstance(ratios, list):
            unknown = sorted({r for r in ratios if r not in _V4_RATIOS}, key=str)
            if unknown:
                raise SpecError(f"deepseek_v4 compress_ratios may be 0, 4 or 128; got {unknown}")
            types = [_V4_RATIOS[r] for r in ratios]
        else:
            types = ["heavily_compressed_attention"] * min(L, 2) + [
                "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(L - 2)]
    types = types[:L]
    unknown = sorted({t for t in types if t not in _V4_ATTENTION})
    if unknown or len(types) != L:
        raise SpecError(f"deepseek_v4 layer_types must give one of {', '.join(_V4_ATTENTION)} for each of the {L} "
                        f"layers; got {len(types)}{f' with {unknown}' if unknown else ''}")
    rates = hf.get("compress_rates") or {}
    csa = rates.get("compressed_sparse_attention", hf.get("compress_rate_csa", 4))
    hca = rates.get("heavily_compressed_attention", hf.get("compress_rate_hca", 128))
    window = hf.get("sliding_window", 128)
    if not isinstance(window, int) or window < 1:
        raise SpecError(f"deepseek_v4 sliding_window must be a positive whole number (every layer attends a window), "
                        f"got {window!r}")
    width = hf.get("moe_intermediate_size", 2048)
    kw.update(
        n_kv_heads=hf.get("num_key_value_heads", 1), d_head=hf.get("head_dim", 512), k_eq_v="all", qk_norm="key",
        attention_sinks=True, o_groups=hf.get("o_groups", 8), o_lora_rank=hf.get("o_lora_rank", 1024),
        kv_compress=tuple(_V4_ATTENTION[t] for t in types), attention_spans=("sliding",) * L,
        attention_window=window, hc_mult=hf.get("hc_mult", 4), n_experts=hf.get("n_routed_experts", 256),
        n_experts_per_token=hf.get("num_experts_per_tok", 6), d_ff_expert=width, n_shared_experts=1,
        d_ff_shared=width, n_dense_layers=0, mlp_bias=bool(hf.get("mlp_bias", False)),
        qkv_bias=bool(hf.get("attention_bias", False)), out_bias=bool(hf.get("attention_bias", False)),
    )
    if "csa" in kw["kv_compress"]:
        kw["kv_compress_csa"] = csa
        _indexer_keys(hf, kw, 64, 128, 512)
    if "hca" in kw["kv_compress"]:
        kw["kv_compress_hca"] = hca
    kw["moe_hash_layers"] = _v4_hash_layers(hf, L) or None
    kw.pop("d_ff", None)  # attribute_map: intermediate_size is moe_intermediate_size; no dense MLP
    kw.pop("qk_rope_head_dim", None)  # DeepseekV4Config folds it into partial_rotary_factor (no parameters)
    if kw["n_kv_heads"] != 1:
        raise SpecError(f"deepseek_v4 num_key_value_heads must be 1 (its kv_proj is one K = V head), got "
                        f"{kw['n_kv_heads']}")


def _v4_hash_layers(hf: dict, n_layers: int) -> int:
    """How many first layers route by token id (configuration_deepseek_v4.py __post_init__: mlp_layer_types, else
    the legacy num_hash_layers "hash_moe" layers then "moe", default 3); hash layers anywhere but first: no formula."""
    types = hf.get("mlp_layer_types")
    if not isinstance(types, list):
        hashed = hf.get("num_hash_layers", 3)
        if not isinstance(hashed, int) or isinstance(hashed, bool) or hashed < 0:
            raise SpecError(f"deepseek_v4 num_hash_layers must be a whole number >= 0, got {hashed!r}")
        return min(hashed, n_layers)
    types = types[:n_layers]
    if set(types) - {"hash_moe", "moe"}:
        raise SpecError(f"deepseek_v4 mlp_layer_types may hold hash_moe or moe, got {sorted(set(types), key=str)}")
    hashed = types.count("hash_moe")
    if types[:hashed] != ["hash_moe"] * hashed:
        raise NoFormula("deepseek_v4 with hash_moe layers after moe layers: no formula for hash routing past the "
                        "first layers")
    return hashed


def _gemma4(hf: dict, kw: dict) -> None:  # long: the config class's per-layer rules, one by one
    # modeling_gemma4.py Gemma4TextAttention / Gemma4TextDecoderLayer / Gemma4TextModel; configuration_gemma4.py
    # Gemma4TextConfig.__post_init__: layer_types default 5 sliding : 1 full with the last layer forced full; the
    # full layers get global_head_dim (default 512) and, with attention_k_eq_v, num_global_key_value_heads and no
    # v_proj; the last num_kv_shared_layers layers reuse K/V ("reuse": no k/v/k_norm, no cache; double-wide MLP with
    # use_double_wide_mlp); per-layer embeddings when hidden_size_per_layer_input > 0; with enable_moe_block a
    # router (proj, scale, per_expert_scale) and experts run beside the dense MLP in every layer.
    L = kw["n_layers"]
    types = hf.get("layer_types")
    if not isinstance(types, list):
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(L)]
    types = list(types)
    if len(types) != L or set(types) - {"sliding_attention", "full_attention"}:
        raise SpecError(f"gemma4 layer_types must give sliding_attention or full_attention for each of the {L} layers")
    types[-1] = "full_attention"  # Gemma4TextConfig forces the last layer to full attention
    window = hf.get("sliding_window", 512)
    if "sliding_attention" in types and (not isinstance(window, int) or window < 1):
        raise SpecError(f"gemma4 sliding_window must be a positive whole number for its sliding layers, got {window!r}")
    if "sliding_attention" in types and hf.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1  # Gemma4TextConfig: bidirectional attention halves the window
    k_eq_v = bool(hf.get("attention_k_eq_v", False))
    global_kv = hf.get("num_global_key_value_heads") if k_eq_v else None
    bias = bool(hf.get("attention_bias", False))
    kw.update(qk_norm="head", norms_per_layer=4, layer_scalar=True, qkv_bias=bias, out_bias=bias,
              d_head_global=hf.get("global_head_dim", 512), k_eq_v="global" if k_eq_v else "none",
              kv_shared_layers=hf.get("num_kv_shared_layers", 0) or 0)
    if global_kv is not None:
        kw["n_kv_heads_global"] = global_kv
    if "sliding_attention" in types:
        kw.update(attention_spans=tuple("sliding" if t == "sliding_attention" else "full" for t in types),
                  attention_window=window)
    if kw["kv_shared_layers"] and hf.get("use_double_wide_mlp"):
        kw["d_ff_kv_shared"] = 2 * kw["d_ff"]
    ple = hf.get("hidden_size_per_layer_input", 256)
    if ple:
        kw.update(per_layer_embed_dim=ple, per_layer_embed_vocab=hf.get("vocab_size_per_layer_input", 262144))
    if hf.get("enable_moe_block"):
        experts, top_k, width = hf.get("num_experts"), hf.get("top_k_experts"), hf.get("moe_intermediate_size")
        if not all(isinstance(v, int) and v > 0 for v in (experts, top_k, width)):
            raise SpecError("gemma4 enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size "
                            "(positive whole numbers)")
        kw.update(n_experts=experts, n_experts_per_token=top_k, d_ff_expert=width, moe_dense_parallel=True,
                  router_scales=True)
    else:
        for key in ("n_experts", "n_experts_per_token", "d_ff_expert"):
            kw.pop(key, None)


RECENT_FAMILIES: dict[str, Family] = {
    "deepseek_v32": Family(
        "models/deepseek_v32/modeling_deepseek_v32.py: MLA + DeepSeek Sparse Attention's lightning indexer in every "
        "layer (run under no_grad) + DeepSeek-V3's MoE; e_score_correction_bias a stored buffer",
        {}, {"tie_word_embeddings": False, "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
             "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "q_lora_rank": 1536,
             "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
             "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1}, _deepseek_v32,
        aliases={"num_local_experts": "n_routed_experts"}),
    "glm_moe_dsa": Family(
        "models/glm_moe_dsa/modeling_glm_moe_dsa.py: DeepSeek-V3.2's MLA + indexer layer, the indexer on its "
        "\"full\" layers only (indexer_types), MTP layer not built",
        {}, {"tie_word_embeddings": False, "vocab_size": 154880, "hidden_size": 6144, "intermediate_size": 12288,
             "moe_intermediate_size": 2048, "num_hidden_layers": 78, "num_attention_heads": 64, "q_lora_rank": 2048,
             "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "v_head_dim": 256,
             "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1}, _glm_moe_dsa,
        aliases={"num_local_experts": "n_routed_experts"}),
    "glm4_moe_lite": Family(
        "models/glm4_moe_lite/modeling_glm4_moe_lite.py: DeepSeek-V3's MLA and MoE under a GLM name, one dense layer "
        "by default (mlp_layer_types)",
        {}, {"tie_word_embeddings": False, "vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240,
             "moe_intermediate_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 20, "q_lora_rank": 768,
             "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "v_head_dim": 256,
             "n_routed_experts": 64, "num_experts_per_tok": 4, "n_shared_experts": 1}, _glm4_moe_lite,
        keep_null=("q_lora_rank",), aliases={"num_local_experts": "n_routed_experts", "head_dim": "qk_rope_head_dim"}),
    "deepseek_v4": Family(
        "models/deepseek_v4/modeling_deepseek_v4.py: one K = V head over a sliding window plus compressed KV "
        "(CSA with a lightning indexer, HCA), grouped low-rank output, sinks, mHC hyper-connections, MoE with a "
        "shared expert in every layer (the first hash-routed); MTP layer not built",
        {}, {"tie_word_embeddings": False, "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43,
             "num_attention_heads": 64, "q_lora_rank": 1024}, _deepseek_v4,
        aliases={"num_local_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size"}),
    "gemma4_text": Family(
        "models/gemma4/modeling_gemma4.py (Gemma4ForCausalLM): sandwich norms, per-head QK-norm, sliding and "
        "global layers of their own head widths (global K = V), KV-shared last layers, per-layer embeddings, MoE "
        "beside the dense MLP; tied",
        {}, {"tie_word_embeddings": True, "vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216,
             "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh"}, _gemma4),
}
