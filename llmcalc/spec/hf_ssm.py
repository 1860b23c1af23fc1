"""Hybrid and state-space model_types for ``llmcalc.spec.hf_families.FAMILIES`` (issue 9, part 2).

Each entry reads the per-layer mixer layout (``layer_types``) and the Mamba mixer shapes exactly
as its transformers modelling file builds them, with the config-class defaults for absent keys
(configuration_<type>.py). Formulas: ``llmcalc.analytic.ssm``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .draft import SpecError
from .hf_family import Family, NoFormula, mlp_kind

# These models have no attention (mamba, mamba2) or read heads only in their attention layers; the
# spec still needs a head count, so a config without one gets a single placeholder head.
_NO_HEADS = {"num_attention_heads": 1}


def _no_ffn_width(kw: dict) -> None:
    """Published Mamba configs carry intermediate_size = the mixer width; no layer has an MLP."""
    kw.pop("d_ff", None)


def _mamba(hf: dict, kw: dict) -> None:
    # configuration_mamba.py: intermediate_size = int(expand * hidden_size); time_step_rank "auto"
    # = ceil(hidden_size / 16). modeling_mamba.py MambaBlock: one RMSNorm + MambaMixer per layer.
    D = kw["d_model"]
    rank = hf.get("time_step_rank", "auto")
    kw.update(
        layer_types=("mamba",) * kw["n_layers"], ssm_d_inner=int(hf.get("expand", 2) * D),
        ssm_d_state=hf.get("state_size", 16), ssm_dt_rank=math.ceil(D / 16) if rank == "auto" else int(rank),
        ssm_conv_kernel=hf.get("conv_kernel", 4), ssm_conv_bias=bool(hf.get("use_conv_bias", True)),
        ssm_proj_bias=bool(hf.get("use_bias", False)),
    )
    _no_ffn_width(kw)


def _mamba2(hf: dict, kw: dict) -> None:
    # modeling_mamba2.py Mamba2Mixer: intermediate = int(expand * hidden_size), num_heads heads,
    # n_groups groups, use_bias on in/out_proj, a gated RMSNorm over the intermediate width.
    kw.update(
        layer_types=("mamba2",) * kw["n_layers"], ssm_d_inner=int(hf.get("expand", 2) * kw["d_model"]),
        ssm_d_state=hf.get("state_size", 128), ssm_n_heads=hf.get("num_heads", 128),
        ssm_n_groups=hf.get("n_groups", 8), ssm_conv_kernel=hf.get("conv_kernel", 4),
        ssm_conv_bias=bool(hf.get("use_conv_bias", True)), ssm_proj_bias=bool(hf.get("use_bias", False)),
    )
    _no_ffn_width(kw)


def _jamba(hf: dict, kw: dict) -> None:
    # configuration_jamba.py: layer i is attention when i % attn_layer_period == attn_layer_offset,
    # else Mamba-1; its FFN is MoE when i % expert_layer_period == expert_layer_offset (and
    # num_experts > 1), else a dense SwiGLU MLP. Every layer: input_layernorm + pre_ff_layernorm.
    # JambaMambaMixer: expand x hidden, dt_rank "auto" = ceil(hidden/16), RMSNorms on dt, B and C.
    L, D = kw["n_layers"], kw["d_model"]
    attn_p, attn_o = hf.get("attn_layer_period", 8), hf.get("attn_layer_offset", 4)
    exp_p, exp_o = hf.get("expert_layer_period", 2), hf.get("expert_layer_offset", 1)
    experts = hf.get("num_experts", 16)
    kw["layer_types"] = tuple(
        ("attention" if i % attn_p == attn_o else "mamba") + ("+moe" if experts > 1 and i % exp_p == exp_o else "+mlp")
        for i in range(L))
    if experts > 1:
        kw.update(n_experts=experts, n_experts_per_token=hf.get("num_experts_per_tok", 2))
    else:  # one "expert" is a dense MLP (num_experts is read generically as n_experts)
        kw.pop("n_experts_per_token", None)
        kw.pop("n_experts", None)
    rank = hf.get("mamba_dt_rank", "auto")
    kw.update(
        ssm_d_inner=hf.get("mamba_expand", 2) * D, ssm_d_state=hf.get("mamba_d_state", 16),
        ssm_dt_rank=math.ceil(D / 16) if rank == "auto" else int(rank), ssm_conv_kernel=hf.get("mamba_d_conv", 4),
        ssm_conv_bias=bool(hf.get("mamba_conv_bias", True)), ssm_proj_bias=bool(hf.get("mamba_proj_bias", False)),
        ssm_dt_norms=True,
    )


def _bamba(hf: dict, kw: dict) -> None:
    # configuration_bamba.py: attention at attn_layer_indices, Mamba-2 elsewhere; every layer has a
    # SwiGLU MLP (feed_forward) and two RMSNorms. BambaMixer: intermediate = mamba_expand x hidden.
    L, D = kw["n_layers"], kw["d_model"]
    attention = set(hf.get("attn_layer_indices") or ())
    kw["layer_types"] = tuple(("attention" if i in attention else "mamba2") + "+mlp" for i in range(L))
    kw.update(
        ssm_d_inner=int(hf.get("mamba_expand", 2) * D), ssm_d_state=hf.get("mamba_d_state", 256),
        ssm_n_heads=hf.get("mamba_n_heads", 128), ssm_n_groups=hf.get("mamba_n_groups", 1),
        ssm_conv_kernel=hf.get("mamba_d_conv", 4), ssm_conv_bias=bool(hf.get("mamba_conv_bias", True)),
        ssm_proj_bias=bool(hf.get("mamba_proj_bias", False)),
        qkv_bias=bool(hf.get("attention_bias", False)), out_bias=bool(hf.get("attention_bias", False)),
        mlp_bias=bool(hf.get("mlp_bias", False)),
    )


def _translate(where: str, entries: Sequence[str], kinds: dict[str, str], what: str = "entries",
               known: str | None = None) -> list[str]:
    """A config's per-layer kinds (`where`: family and key) in llmcalc's names; one line for unknown ones."""
    unknown = sorted({t for t in entries if t not in kinds})
    if unknown:
        raise SpecError(f"{where} has unknown {what} {unknown}; known: {known or ', '.join(kinds)}")
    return [kinds[t] for t in entries]


# configuration_nemotron_h.py: hybrid_override_pattern characters and layers_block_type names.
_NEMOTRON_PATTERN = {"M": "mamba2", "*": "attention", "-": "mlp", "E": "moe"}
_NEMOTRON_TYPES = {"mamba": "mamba2", "linear_attention": "mamba2", "attention": "attention",
                   "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def _nemotron_h_moe(hf: dict, kw: dict) -> None:
    # modeling_nemotron_h.py NemotronHMoE: a router Linear(D, n_routed_experts) without bias (its
    # e_score_correction_bias a stored buffer, counted: hf.py SCORE_BIAS_STORED), n_routed_experts non-gated experts
    # (up/down of moe_intermediate_size, mlp_hidden_act), and one shared NemotronHMLP of
    # moe_shared_expert_intermediate_size, always built whatever n_shared_experts says. Nemotron 3 Super/Ultra
    # (moe_latent_size): fc1_latent_proj Linear(D, latent) before the routed experts, whose up/down then read and
    # write the latent, and fc2_latent_proj Linear(latent, D) after; the router and the shared expert stay on D.
    if hf.get("mlp_bias"):
        raise NoFormula("nemotron_h with mlp_bias true in its MoE layers: no formula for a biased shared expert "
                        "beside bias-free routed experts")
    kw.update(n_experts=hf.get("n_routed_experts", 8), n_experts_per_token=hf.get("num_experts_per_tok", 2),
              d_ff_expert=hf.get("moe_intermediate_size", 7688), n_shared_experts=1,
              d_ff_shared=hf.get("moe_shared_expert_intermediate_size", 7688),
              moe_latent_size=hf.get("moe_latent_size"))


def _nemotron_h(hf: dict, kw: dict) -> None:
    # modeling_nemotron_h.py NemotronHBlock: one RMSNorm and one mixer per layer (Mamba-2, attention
    # without biases, a squared-ReLU MLP up/down, or MoE). The layout comes from layers_block_type,
    # else hybrid_override_pattern, else the class default; num_hidden_layers is then ignored.
    # NemotronHMamba2Mixer: intermediate = mamba_num_heads x mamba_head_dim.
    if hf.get("layers_block_type") is not None:
        layers = _translate("nemotron_h layers_block_type", hf["layers_block_type"], _NEMOTRON_TYPES)
    elif hf.get("hybrid_override_pattern") is not None:
        layers = _translate("nemotron_h hybrid_override_pattern", hf["hybrid_override_pattern"], _NEMOTRON_PATTERN,
                            what="characters", known="M (Mamba-2), * (attention), - (MLP), E (MoE)")
    else:
        layers = ["mamba2", "moe", "attention", "mlp"]
    if "moe" in layers:
        _nemotron_h_moe(hf, kw)
    # num_nextn_predict_layers: NemotronHPreTrainedModel ignores the checkpoint's mtp.* weights
    # (_keys_to_ignore_on_load_unexpected), so the multi-token-prediction layers are not part of the
    # model, as for DeepSeek-V3; spec_from_hf notes that they are left out.
    kw["n_layers"] = len(layers)
    kw["layer_types"] = tuple(layers)
    heads, head_dim = hf.get("mamba_num_heads", 128), hf.get("mamba_head_dim", 64)
    kw.update(
        ssm_d_inner=heads * head_dim, ssm_d_state=hf.get("ssm_state_size", 128), ssm_n_heads=heads,
        ssm_n_groups=hf.get("n_groups", hf.get("mamba_n_groups", 8)),
        ssm_conv_kernel=hf.get("conv_kernel", hf.get("mamba_d_conv", 4)),
        ssm_conv_bias=bool(hf.get("use_conv_bias", hf.get("mamba_conv_bias", True))),
        ssm_proj_bias=bool(hf.get("use_bias", False)), mlp_bias=bool(hf.get("mlp_bias", False)),
        mlp=mlp_kind(hf.get("mlp_hidden_act", "relu2"), gated=False),
    )
    if "mlp" not in layers:
        kw.pop("d_ff", None)


def _falcon_h1(hf: dict, kw: dict) -> None:
    # modeling_falcon_h1.py FalconH1DecoderLayer: attention and a Mamba-2 mixer read the same
    # input_layernorm output in parallel, then a SwiGLU MLP after pre_ff_layernorm. FalconH1Mixer:
    # intermediate = mamba_d_ssm (or mamba_expand x hidden), in_proj bias mamba_proj_bias, out_proj
    # bias projectors_bias, its gated RMSNorm only when mamba_rms_norm; the muP vector is a buffer.
    D = kw["d_model"]
    inner = hf.get("mamba_d_ssm", 1024)  # FalconH1Config default 1024; an explicit null means expand x hidden
    if inner is None:
        inner = int(hf.get("mamba_expand", 2) * D)
    bias = bool(hf.get("attention_bias", False))
    kw.update(
        layer_types=("attention|mamba2+mlp",) * kw["n_layers"], ssm_d_inner=inner,
        ssm_d_state=hf.get("mamba_d_state", 256), ssm_n_heads=hf.get("mamba_n_heads", 128),
        ssm_n_groups=hf.get("mamba_n_groups", 1), ssm_conv_kernel=hf.get("mamba_d_conv", 4),
        ssm_conv_bias=bool(hf.get("mamba_conv_bias", True)), ssm_proj_bias=bool(hf.get("mamba_proj_bias", False)),
        ssm_out_bias=bool(hf.get("projectors_bias", False)), ssm_norm=bool(hf.get("mamba_rms_norm", False)),
        qkv_bias=bias, out_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False)),
    )


def _lfm2(hf: dict, kw: dict) -> None:
    # modeling_lfm2.py Lfm2DecoderLayer: operator_norm + (Lfm2Attention with q/k_layernorm, or
    # Lfm2ShortConv), ffn_norm + Lfm2MLP (w1, w3, w2: SwiGLU). Layout from layer_types, else
    # full_attn_idxs (default: every layer attention). Lfm2MLP's width: int(2F/3) when
    # block_auto_adjust_ff_dim, then x block_ffn_dim_multiplier rounded up to block_multiple_of.
    L = kw["n_layers"]
    if hf.get("layer_types") is not None:
        mixers = _translate("lfm2 layer_types", hf["layer_types"],
                            {"full_attention": "attention", "conv": "short_conv"})
    else:
        attention = hf.get("full_attn_idxs")
        mixers = ["attention" if attention is None or i in attention else "short_conv" for i in range(L)]
    kw["layer_types"] = tuple(m + "+mlp" for m in mixers)
    width = hf.get("intermediate_size", 12288) if hf.get("block_ff_dim") is None else hf["block_ff_dim"]
    if hf.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        step = hf.get("block_multiple_of", 256)  # Lfm2Config types the multiplier as a number: never null
        width = step * ((int(hf.get("block_ffn_dim_multiplier", 1.0) * width) + step - 1) // step)
    kw.update(d_ff=width, ssm_conv_kernel=hf.get("conv_L_cache", 3), ssm_conv_bias=bool(hf.get("conv_bias", False)),
              qk_norm="head", mlp="swiglu")
    if hf.get("tie_embedding") is not None:  # Lfm2Config.__post_init__: the legacy key wins
        kw["tie_embeddings"] = bool(hf["tie_embedding"])


def _qwen3_next(hf: dict, kw: dict) -> None:
    # modeling_qwen3_next.py Qwen3NextDecoderLayer: Gated DeltaNet ("linear_attention") or gated
    # attention ("full_attention": q_proj emits queries and an output gate, QK-norm over d_head);
    # layer_types default: full attention every full_attention_interval (4) layers. FFN: the sparse
    # MoE block when num_experts > 0, (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers.
    L = kw["n_layers"]
    if hf.get("layer_types") is not None:
        mixers = _translate("qwen3_next layer_types", hf["layer_types"],
                            {"linear_attention": "gated_deltanet", "full_attention": "attention"})
    else:
        interval = hf.get("full_attention_interval", 4)
        mixers = ["gated_deltanet" if (i + 1) % interval else "attention" for i in range(L)]
    experts, step = hf.get("num_experts", 512), hf.get("decoder_sparse_step", 1)
    dense = set(hf.get("mlp_only_layers") or ())
    ffns = ["moe" if experts > 0 and i not in dense and (i + 1) % step == 0 else "mlp" for i in range(L)]
    if "moe" in ffns:  # Qwen3NextSparseMoeBlock: router, routed experts, one gated shared expert
        kw.update(n_experts=experts, n_experts_per_token=hf.get("num_experts_per_tok", 10),
                  d_ff_expert=hf.get("moe_intermediate_size", 512), n_shared_experts=1,
                  d_ff_shared=hf.get("shared_expert_intermediate_size", 512), shared_expert_gate=True)
    else:
        for key in ("n_experts", "n_experts_per_token", "d_ff_expert"):
            kw.pop(key, None)
    # not strict: a layer_types list of the wrong length is reported by the spec checks with one clear line
    kw["layer_types"] = tuple(f"{m}+{f}" for m, f in zip(mixers, ffns, strict=False))
    bias = bool(hf.get("attention_bias", False))
    k_heads, v_heads = hf.get("linear_num_key_heads", 16), hf.get("linear_num_value_heads", 32)
    kw.update(
        qkv_bias=bias, out_bias=bias, qk_norm="head", attn_output_gate=True,
        ssm_n_heads=v_heads, ssm_n_groups=k_heads, ssm_d_state=hf.get("linear_key_head_dim", 128),
        ssm_d_inner=v_heads * hf.get("linear_value_head_dim", 128), ssm_conv_kernel=hf.get("linear_conv_kernel_dim", 4),
        ssm_conv_bias=False,
    )


def _qwen3_5(hf: dict, kw: dict, moe: bool) -> None:
    # models/qwen3_5/modeling_qwen3_5.py, models/qwen3_5_moe/modeling_qwen3_5_moe.py: Qwen3-Next's Gated DeltaNet
    # and gated attention layers (the same parameters: in_proj_qkv + in_proj_z = qwen3_next's in_proj_qkvz, in_proj_b
    # + in_proj_a = in_proj_ba); Qwen3_5DecoderLayer always a dense SwiGLU MLP, Qwen3_5MoeDecoderLayer always the
    # sparse MoE block (router, experts, one gated shared expert; no decoder_sparse_step, mlp_only_layers not read).
    # The recurrent state: in fp32 where the checkpoint says mamba_ssm_dtype "float32" (vLLM's hook for Qwen3.5;
    # transformers' LinearAttentionLayer keeps it in fp32 always).
    values = {k: v for k, v in hf.items() if k not in ("decoder_sparse_step", "mlp_only_layers")}
    values["num_experts"] = hf.get("num_experts", 256) if moe else 0
    _qwen3_next(values, kw)
    kw["ssm_split_in_proj"] = True  # in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3_5GatedDeltaNet)
    if hf.get("mamba_ssm_dtype") in ("float32", "fp32"):
        kw["ssm_state_dtype"] = "fp32"


def _qwen3_5_dense(hf: dict, kw: dict) -> None:
    _qwen3_5(hf, kw, moe=False)


def _qwen3_5_moe(hf: dict, kw: dict) -> None:
    _qwen3_5(hf, kw, moe=True)


def _kimi_linear(hf: dict, kw: dict) -> None:
    # models/kimi_linear/modeling_kimi_linear.py: per layer KDA (KimiLinearDeltaAttention) or MLA without RoPE
    # (KimiLinearAttention: q_proj unless q_lora_rank, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), then
    # a dense MLP (mlp_layer_types "dense") or DeepSeek-style MoE (router with a buffer bias, experts, shared experts
    # of moe_intermediate_size x num_shared_experts). configuration_kimi_linear.py: layer_types from
    # linear_attn_config's full_attn_layers / kda_layers, 1-indexed (absent: full when i and i % 4 == 0);
    # mlp_layer_types: the first first_k_dense_replace (default 1) dense; head_dim = qk_rope_head_dim (the config's
    # head_dim is not read); attribute_map num_experts, num_experts_per_token, num_shared_experts. Never tied
    # (_tied_weights_keys is empty). KDA's recurrent state is fp32 (transformers, vLLM's kda_state_dtype).
    L = kw["n_layers"]
    linear = hf.get("linear_attn_config") or {}
    if not isinstance(linear, dict):
        raise SpecError("kimi_linear linear_attn_config must be an object (full_attn_layers, head_dim, num_heads, ...)")
    full = linear.get("full_attn_layers")
    if full is not None:
        if not isinstance(full, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= L
                                             for i in full):
            raise SpecError(f"kimi_linear linear_attn_config.full_attn_layers must be layer numbers 1..{L} (1-indexed)")
        attention = {i - 1 for i in full}
    else:
        attention = {i for i in range(L) if i and i % 4 == 0}
    dense = hf.get("first_k_dense_replace", 1)
    experts = hf.get("num_experts", 256)
    ffns = ["mlp" if i < dense or not experts else "moe" for i in range(L)]
    kw["layer_types"] = tuple(("attention" if i in attention else "kda") + "+" + f for i, f in enumerate(ffns))
    heads, head_dim = linear.get("num_heads", 32), linear.get("head_dim", 128)
    kw.update(ssm_n_heads=heads, ssm_n_groups=heads, ssm_d_state=head_dim, ssm_d_inner=heads * head_dim,
              ssm_conv_kernel=linear.get("short_conv_kernel_size", 4), ssm_conv_bias=False, ssm_state_dtype="fp32",
              n_kv_heads=kw["n_heads"], tie_embeddings=False, pos_emb="none", n_dense_layers=0)
    if isinstance(hf.get("model_max_length"), int):
        kw["max_seq_len"] = hf["model_max_length"]
    kw.pop("d_head", None)  # MLA: qk_nope_head_dim + qk_rope_head_dim
    if "moe" in ffns:
        kw.update(n_experts=experts, n_experts_per_token=hf.get("num_experts_per_token", 8),
                  d_ff_expert=hf.get("moe_intermediate_size", 1024), n_shared_experts=hf.get("num_shared_experts", 1))
    else:
        for key in ("n_experts", "n_experts_per_token", "n_shared_experts", "d_ff_expert"):
            kw.pop(key, None)
    bias = bool(hf.get("attention_bias", False))  # its MLA's q_a_proj, kv_a_proj_with_mqa and o_proj
    kw.update(qkv_bias=bias, out_bias=bias)


# configuration_zamba2.py: the default layers_block_type (54 layers, 9 hybrid) and the legacy name
# "mamba" (remap_legacy_layer_types: "linear_attention").
_ZAMBA2_DEFAULT_LAYERS = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7
                          + ["linear_attention"] * 4 + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"]
                          + ["linear_attention"] * 2)
_ZAMBA2_TYPES = {"mamba": "mamba2", "linear_attention": "mamba2", "hybrid": "shared_block|mamba2"}


def _zamba2(hf: dict, kw: dict) -> None:
    # modeling_zamba2.py Zamba2Model.get_layers: one Zamba2MambaDecoderLayer (RMSNorm + Mamba-2 mixer)
    # per entry of layers_block_type (as many as num_hidden_layers); a "hybrid" entry adds, before
    # it, a use of the shared block (Zamba2AttentionDecoderLayer) and a Linear(D, D). Zamba2Config
    # .__post_init__: attention input 2D, head dim 2D // heads, intermediate_size default 4D.
    # Zamba2MambaMixer: conv1d bias always on (use_conv_bias is not read), in/out_proj bias
    # add_bias_linear, gated RMSNorm over E.
    types = hf.get("layers_block_type") or hf.get("layer_types") or _ZAMBA2_DEFAULT_LAYERS
    layers = _translate("zamba2 layers_block_type", types, _ZAMBA2_TYPES, known="mamba, hybrid")
    if len(types) != kw["n_layers"]:  # Zamba2Config's validate_layer_type refuses it too
        raise SpecError(f"zamba2 num_hidden_layers ({kw['n_layers']}) must equal the number of layers_block_type "
                        f"entries ({len(types)}); give both (the default list has 54)")
    D, bias = kw["d_model"], bool(hf.get("add_bias_linear", False))
    if hf.get("use_shared_attention_adapter") and kw["n_kv_heads"] != kw["n_heads"]:
        raise SpecError("zamba2 with use_shared_attention_adapter needs num_key_value_heads == num_attention_heads: "
                        "its k and v adapters output 2 x hidden_size, which transformers adds to the smaller "
                        "GQA projections and fails")
    kw.update(
        layer_types=tuple(layers), d_head=2 * D // kw["n_heads"],
        d_ff=hf.get("intermediate_size") or 4 * D, mlp_bias=bias, pos_emb="rope" if hf.get("use_mem_rope") else "none",
        shared_blocks=hf.get("num_mem_blocks", 1), shared_adapter_rank=hf.get("adapter_rank", 128),
        shared_attention_adapters=bool(hf.get("use_shared_attention_adapter", False)),
        ssm_d_inner=int(hf.get("mamba_expand", 2) * D), ssm_d_state=hf.get("mamba_d_state", 64),
        ssm_n_heads=hf.get("n_mamba_heads", 8), ssm_n_groups=hf.get("mamba_ngroups", 1),
        ssm_conv_kernel=hf.get("mamba_d_conv", 4), ssm_conv_bias=True, ssm_proj_bias=bias,
    )
    if not kw["tie_embeddings"] and "hybrid" in types:
        kw["notes"] = kw.get("notes", ()) + (
            "tie_word_embeddings false: transformers then ties nothing, not even the shared blocks, so every "
            "hybrid layer holds its own copy of its block (counted as such)",)


SSM_FAMILIES: dict[str, Family] = {
    "mamba": Family(
        "models/mamba/modeling_mamba.py: RMSNorm + MambaMixer (Mamba-1 selective scan) per layer",
        {"pos_emb": "none"}, {"tie_word_embeddings": True, "vocab_size": 50280, "hidden_size": 768,
                              "num_hidden_layers": 32, **_NO_HEADS}, _mamba),
    "mamba2": Family(
        "models/mamba2/modeling_mamba2.py: RMSNorm + Mamba2Mixer (SSD) per layer",
        {"pos_emb": "none"}, {"tie_word_embeddings": False, "vocab_size": 32768, "hidden_size": 4096,
                              "num_hidden_layers": 64, **_NO_HEADS}, _mamba2),
    "jamba": Family(
        "models/jamba/modeling_jamba.py: Mamba-1 and attention layers, MoE every other layer",
        {"pos_emb": "none"}, {"tie_word_embeddings": False, "vocab_size": 65536, "hidden_size": 4096,
                              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                              "num_key_value_heads": 8}, _jamba),
    "bamba": Family(
        "models/bamba/modeling_bamba.py: Mamba-2 and attention layers, each with a SwiGLU MLP",
        {}, {"tie_word_embeddings": False, "vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}, _bamba),
    "falcon_h1": Family(
        "models/falcon_h1/modeling_falcon_h1.py: attention and Mamba-2 in parallel in every layer, then an MLP",
        {}, {"tie_word_embeddings": False, "vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}, _falcon_h1,
        keep_null=("mamba_d_ssm",)),
    "lfm2": Family(
        "models/lfm2/modeling_lfm2.py: gated short-conv and attention (QK-norm) layers, each with a SwiGLU MLP; "
        "the final norm is called embedding_norm",
        {}, {"tie_word_embeddings": True, "vocab_size": 65536, "hidden_size": 2560, "intermediate_size": 12288,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}, _lfm2),
    "qwen3_next": Family(
        "models/qwen3_next/modeling_qwen3_next.py: Gated DeltaNet and gated attention (QK-norm) layers",
        {}, {"tie_word_embeddings": False, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
             "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256},
             _qwen3_next),
    "qwen3_5_text": Family(
        "models/qwen3_5/modeling_qwen3_5.py (Qwen3_5ForCausalLM): Qwen3-Next's Gated DeltaNet and gated attention "
        "layers, each with a dense SwiGLU MLP (MTP layers not built)",
        {}, {"tie_word_embeddings": False, "vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288,
             "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256},
        _qwen3_5_dense),
    "qwen3_5_moe_text": Family(
        "models/qwen3_5_moe/modeling_qwen3_5_moe.py (Qwen3_5MoeForCausalLM): Qwen3-Next's layers, every one with "
        "the sparse MoE block (MTP layers not built)",
        {}, {"tie_word_embeddings": False, "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
             "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "num_experts_per_tok": 8,
             "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512}, _qwen3_5_moe),
    "kimi_linear": Family(
        "models/kimi_linear/modeling_kimi_linear.py: KDA (Kimi Delta Attention) and NoPE MLA layers, DeepSeek-style "
        "MoE after the first dense layer; never tied",
        {}, {"tie_word_embeddings": False, "vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216,
             "num_hidden_layers": 27, "num_attention_heads": 32, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
             "qk_nope_head_dim": 128, "v_head_dim": 128}, _kimi_linear,
        aliases={"max_position_embeddings": "model_max_length", "norm_topk_prob": "moe_renormalize",
                 "n_group": "num_expert_group", "num_local_experts": "num_experts",
                 "num_experts_per_tok": "num_experts_per_token", "n_shared_experts": "num_shared_experts"}),
    "zamba2": Family(
        "models/zamba2/modeling_zamba2.py: Mamba-2 layers; every \"hybrid\" layer first runs one of "
        "num_mem_blocks shared attention + MLP blocks (on [hidden, embeddings]) with its own LoRA adapters "
        "and Linear(D, D)",
        {}, {"tie_word_embeddings": True, "vocab_size": 32000, "hidden_size": 2560, "num_hidden_layers": 54,
             "num_attention_heads": 32, "hidden_act": "gelu"}, _zamba2),
    "nemotron_h": Family(
        "models/nemotron_h/modeling_nemotron_h.py: one mixer per layer (Mamba-2 M, attention *, MLP -, MoE E); "
        "_tied_weights_keys is empty, so the LM head is never tied, whatever tie_word_embeddings says",
        {"pos_emb": "none", "tie_embeddings": False}, {"tie_word_embeddings": False, "vocab_size": 131072,
                                                       "hidden_size": 4096,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                              "intermediate_size": 21504, "num_hidden_layers": 52}, _nemotron_h, gated=False),
}
