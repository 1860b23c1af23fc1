"""Read Hugging Face config.json dicts as SpecDrafts (and so as ModelSpecs).

Two tables do all the work:
- ``HF_KEYS`` maps HF key names (and their per-family aliases) to spec fields.
- ``FAMILIES`` says, per ``model_type``, what HF leaves implicit in the modelling code (gated MLP,
  norm kind, which linears carry biases, position embeddings), and the HF class defaults that
  apply when a config.json omits a key. Each entry names the transformers file it mirrors. The
  hybrid and state-space families live in ``hf_ssm``; both build ``hf_family.Family`` entries.
Nothing is inferred from a model's name.

A config whose model_type is not in FAMILIES still works when it states the implicit facts itself
with llmcalc's own keys (``REQUIRED_FOR_UNKNOWN``), e.g. ``"mlp": "swiglu", "norm": "rmsnorm"``.
Otherwise ``UnknownModelType`` is raised: `params`, `flops` and `train` then count the model with
transformers' modelling code (``llmcalc.fallback``); commands that need a formula report it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from ..records import construct
from .checks import check_maximum
from .draft import SpecDraft, SpecError
from .hf_2026 import RECENT_FAMILIES
from .hf_family import Family, NoFormula, attention_bias, deepseek_mla, mlp_kind
from .hf_ssm import SSM_FAMILIES
from .model import ModelSpec
from .quantization import check_quantization_config
from .resolve import resolve

# spec field -> HF keys, first present (and not null) wins.
HF_KEYS: dict[str, tuple[str, ...]] = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers"),
    "d_model": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "n_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "d_head": ("head_dim", "d_kv"),
    "d_ff": ("intermediate_size", "n_inner", "ffn_hidden_size", "d_ff", "encoder_ffn_dim"),
    "vocab_size": ("vocab_size",),
    "max_seq_len": ("max_position_embeddings", "n_positions", "max_seq_len"),
    "tie_embeddings": ("tie_word_embeddings",),
    "n_decoder_layers": ("num_decoder_layers", "decoder_layers"),
    "type_vocab_size": ("type_vocab_size",),
    "rel_pos_buckets": ("relative_attention_num_buckets",),
    "n_experts": ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"),
    "n_experts_per_token": ("num_experts_per_tok", "moe_k", "moe_topk"),
    "n_shared_experts": ("n_shared_experts",),
    "d_ff_expert": ("moe_intermediate_size",),
    "n_dense_layers": ("first_k_dense_replace",),
    "moe_layer_freq": ("moe_layer_freq",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
}
ACTIVATION_KEYS = ("hidden_act", "activation_function", "hidden_activation")

# The llmcalc keys a config of an unknown model_type must carry (with the HF shape keys above).
REQUIRED_FOR_UNKNOWN = ("mlp", "norm", "pos_emb")
_SPEC_FIELDS = {f.name for f in fields(SpecDraft)}


class UnknownModelType(SpecError):
    """A model_type with no analytic family and no llmcalc keys; carries the config for the fallback, and `outer`, the
    config as given when `config` is its text_config (for the fallback to hold against transformers' config class)."""

    def __init__(self, message: str, config: dict, name: str, outer: dict | None = None, note: str | None = None):
        super().__init__(message)
        self.config, self.name, self.outer = config, name, outer
        self.note = note  # a known model_type with a part no formula covers: what, for the counted model's notes


_attention_bias = attention_bias


def _falcon(hf: dict, kw: dict) -> None:
    # modeling_falcon.py: n_kv = num_kv_heads (new arch) | 1 (multi_query) | n_heads; one `bias` flag.
    new_arch = hf.get("new_decoder_architecture", False)
    if new_arch:
        kw["n_kv_heads"] = hf.get("num_kv_heads") or kw["n_heads"]
    else:
        kw["n_kv_heads"] = 1 if hf.get("multi_query", True) else kw["n_heads"]
    # FalconMLP reads ffn_hidden_size only (default 4 * hidden_size), never intermediate_size.
    kw["d_ff"] = hf.get("ffn_hidden_size") or 4 * kw["d_model"]
    bias = bool(hf.get("bias", False))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    # FalconDecoderLayer: two norms unless attention and MLP run in parallel; then one shared norm,
    # or ln_attn + ln_mlp when num_ln_in_parallel_attn == 2 (its default under the new architecture).
    parallel = hf.get("parallel_attn", True)
    n_ln = hf.get("num_ln_in_parallel_attn") or (2 if new_arch else None)
    kw["norms_per_layer"] = 2 if not parallel or n_ln == 2 else 1
    kw["parallel_residual"] = bool(parallel or new_arch)
    kw["pos_emb"] = "alibi" if hf.get("alibi", False) else "rope"


def _gpt2(hf: dict, kw: dict) -> None:
    if hf.get("n_inner") is None:
        kw["d_ff"] = 4 * kw["d_model"]  # GPT2MLP: inner_dim = n_inner or 4 * n_embd


def _gpt_neox(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("attention_bias", True))  # GPTNeoXConfig.attention_bias defaults to True
    kw.update(qkv_bias=bias, out_bias=bias, parallel_residual=bool(hf.get("use_parallel_residual", True)))


def _t5(hf: dict, kw: dict) -> None:
    # T5: feed_forward_proj "relu" | "gelu" | "gated-gelu" | "gated-silu" (configuration_t5.py).
    proj = hf.get("feed_forward_proj", "relu")
    act = proj.split("-")[-1]
    if proj.startswith("gated-"):  # check_config_values admits gelu, gelu_new and silu only
        kw["mlp"] = "swiglu" if act == "silu" else "geglu"
    else:
        kw["mlp"] = "relu" if act == "relu" else "gelu" if "gelu" in act else "silu"


_deepseek = deepseek_mla


def _marian(hf: dict, kw: dict) -> None:
    # MarianConfig has separate encoder_*/decoder_* sizes; llmcalc models symmetric stacks.
    for enc, dec in (("encoder_ffn_dim", "decoder_ffn_dim"), ("encoder_attention_heads", "decoder_attention_heads")):
        if hf.get(dec) is not None and hf.get(enc) is not None and hf[dec] != hf[enc]:
            raise NoFormula(f"marian with {enc} {hf[enc]} and {dec} {hf[dec]}: no formula for asymmetric "
                            f"encoder and decoder stacks (llmcalc's are symmetric)")
    if hf.get("decoder_vocab_size") not in (None, hf.get("vocab_size")) or not hf.get(
        "share_encoder_decoder_embeddings", True
    ):
        raise NoFormula("marian with separate encoder and decoder vocabularies: no formula for unshared embeddings")
    kw["lm_head_bias"] = True  # MarianMTModel.final_logits_bias (1, V): a persistent buffer the checkpoint stores



FAMILIES: dict[str, Family] = {
    "llama": Family("models/llama/modeling_llama.py", {}, {"tie_word_embeddings": False}, _attention_bias),
    "mistral": Family("models/mistral/modeling_mistral.py", {}, {"tie_word_embeddings": False}),
    "mixtral": Family("models/mixtral/modeling_mixtral.py", {}, {"tie_word_embeddings": False}),
    "qwen2": Family(
        "models/qwen2/modeling_qwen2.py: q/k/v bias=True, o_proj bias=False",
        {"qkv_bias": True}, {"tie_word_embeddings": False},
    ),
    "gemma": Family("models/gemma/modeling_gemma.py", {}, {"tie_word_embeddings": True}, _attention_bias),
    "gemma2": Family(
        "models/gemma2/modeling_gemma2.py: input, post-attention, pre- and post-feedforward norms",
        {"norms_per_layer": 4}, {"tie_word_embeddings": True}, _attention_bias,
    ),
    "phi3": Family("models/phi3/modeling_phi3.py: fused qkv_proj and gate_up_proj, no biases", {},
                   {"tie_word_embeddings": False}),
    "olmo": Family(
        "models/olmo/modeling_olmo.py: OlmoLayerNorm has no weight or bias",
        {"norm": "layernorm", "norm_affine": False}, {"tie_word_embeddings": False}, _attention_bias,
    ),
    "gpt_neox": Family(
        "models/gpt_neox/modeling_gpt_neox.py: biased linears, LayerNorm, untied embed_out",
        {"norm": "layernorm", "mlp_bias": True}, {"tie_word_embeddings": False}, _gpt_neox, gated=False,
    ),
    "falcon": Family(
        "models/falcon/modeling_falcon.py", {"norm": "layernorm"}, {"tie_word_embeddings": True}, _falcon,
        gated=False,
    ),
    "gpt2": Family(
        "models/gpt2/modeling_gpt2.py: Conv1D with biases, learned wpe, LayerNorm",
        {"norm": "layernorm", "pos_emb": "learned", "qkv_bias": True, "out_bias": True, "mlp_bias": True},
        {"tie_word_embeddings": True, "n_positions": 1024, "activation_function": "gelu_new"}, _gpt2,
        gated=False,
    ),
    "deepseek_v2": Family(
        "models/deepseek_v2/modeling_deepseek_v2.py: MLA + MoE with shared experts",
        {}, {"tie_word_embeddings": False, "first_k_dense_replace": 0, "n_shared_experts": 2}, _deepseek,
    ),
    "deepseek_v3": Family(
        "models/deepseek_v3/modeling_deepseek_v3.py: MLA + MoE; e_score_correction_bias a stored buffer",
        {}, {"tie_word_embeddings": False, "first_k_dense_replace": 3, "n_shared_experts": 1}, _deepseek,
    ),
    "bert": Family(
        "models/bert/modeling_bert.py (BertModel): post-LN, embedding LayerNorm, token types, pooler",
        {"architecture": "encoder", "norm": "layernorm", "pos_emb": "learned", "qkv_bias": True,
         "out_bias": True, "mlp_bias": True, "final_norm": False, "embedding_norm": True,
         "lm_head": False, "pooler": True, "post_norm": True},
        {"type_vocab_size": 2, "max_position_embeddings": 512, "tie_word_embeddings": True}, gated=False,
    ),
    "t5": Family(
        "models/t5/modeling_t5.py: shared embedding, T5LayerNorm (weight only), relative bias in block 0",
        {"architecture": "encoder-decoder", "pos_emb": "relative"},
        {"tie_word_embeddings": True, "relative_attention_num_buckets": 32}, _t5, gated=False,
    ),
    "marian": Family(
        "models/marian/modeling_marian.py: post-LN, biased linears, sinusoidal positions, no final norm",
        {"architecture": "encoder-decoder", "norm": "layernorm", "pos_emb": "sinusoidal", "qkv_bias": True,
         "out_bias": True, "mlp_bias": True, "final_norm": False, "post_norm": True},
        {"tie_word_embeddings": True, "activation_function": "gelu"}, _marian, gated=False,
    ),
}


# --- Current-generation decoders (issue 9 part 1). Defaults are the HF config-class defaults of
# transformers 5 for every size/tying/bias key a published config may omit. ---


def _qk_norm_head(hf: dict, kw: dict) -> None:
    _attention_bias(hf, kw)
    kw["qk_norm"] = "head"  # q_norm/k_norm = RMSNorm(head_dim), shared by all heads


def _moe_every(hf: dict, kw: dict, expert_width_key: str = "moe_intermediate_size") -> None:
    """The routed-expert width and, Qwen-MoE's rule, which layers are MoE: layer i unless listed in
    mlp_only_layers, and only every decoder_sparse_step-th ((i + 1) % step == 0)."""
    kw["d_ff_expert"] = hf.get(expert_width_key) or kw.get("d_ff")
    step = hf.get("decoder_sparse_step") or 1
    only = set(hf.get("mlp_only_layers") or ())
    kw["moe_layers"] = tuple(i for i in range(kw["n_layers"]) if i not in only and (i + 1) % step == 0)


def _qwen3_moe(hf: dict, kw: dict) -> None:
    _qk_norm_head(hf, kw)
    _moe_every(hf, kw)


def _qwen2_moe(hf: dict, kw: dict) -> None:
    # Qwen2MoeAttention: q/k/v bias = config.qkv_bias (default True), o_proj bias-free; one shared
    # expert of shared_expert_intermediate_size behind a sigmoid gate Linear(D, 1).
    kw["qkv_bias"] = bool(hf.get("qkv_bias", True))
    _moe_every(hf, kw)
    kw.update(n_shared_experts=1, d_ff_shared=hf["shared_expert_intermediate_size"], shared_expert_gate=True)


def _llama4(hf: dict, kw: dict) -> None:
    # Llama4TextDecoderLayer: MoE in config.moe_layers (default every interleave_moe_layer_step-th,
    # counting from step - 1), experts and the shared expert of intermediate_size, dense layers of
    # intermediate_size_mlp. The QK-norm is an L2 norm without weights (no parameters).
    _attention_bias(hf, kw)
    L, width = kw["n_layers"], hf["intermediate_size"]
    step = hf.get("interleave_moe_layer_step") or 1
    layers = hf.get("moe_layers")
    kw["moe_layers"] = tuple(layers) if layers is not None else tuple(range(step - 1, L, step))
    kw.update(d_ff=hf["intermediate_size_mlp"], d_ff_expert=width, n_shared_experts=1, d_ff_shared=width)


def _gpt_oss(hf: dict, kw: dict) -> None:
    # GptOssAttention: biased q/k/v/o (attention_bias, default True) and a learned sink per head;
    # GptOssTopKRouter: Linear with bias; GptOssExperts: gate_up/down with biases, width intermediate_size.
    _attention_bias(hf, kw)
    kw.update(attention_sinks=True, router_bias=True, expert_bias=True, d_ff_expert=hf["intermediate_size"])


def _olmo2(hf: dict, kw: dict) -> None:
    _attention_bias(hf, kw)
    kw["qk_norm"] = "full"  # q_norm = RMSNorm(H·d_head), k_norm = RMSNorm(KV·d_head)


def _olmoe(hf: dict, kw: dict) -> None:
    _olmo2(hf, kw)
    kw["d_ff_expert"] = hf["intermediate_size"]  # OlmoeExperts use intermediate_size


def _experts_of_width_ffn(hf: dict, kw: dict) -> None:
    # Granite-MoE, PhiMoE: every layer MoE, experts of intermediate_size.
    _attention_bias(hf, kw)
    kw["d_ff_expert"] = hf["intermediate_size"]


def _granitemoeshared(hf: dict, kw: dict) -> None:
    _experts_of_width_ffn(hf, kw)
    if hf.get("shared_intermediate_size"):  # GraniteMoeSharedMLP, only when shared_intermediate_size > 0
        kw.update(n_shared_experts=1, d_ff_shared=hf["shared_intermediate_size"])


def _phi(hf: dict, kw: dict) -> None:
    # PhiDecoderLayer: one input_layernorm feeds attention and MLP in parallel; qk_layernorm is
    # LayerNorm(head_dim) with bias, shared by the heads.
    if hf.get("qk_layernorm"):
        kw.update(qk_norm="head", qk_norm_bias=True)


def _phimoe(hf: dict, kw: dict) -> None:
    _experts_of_width_ffn(hf, kw)
    kw["lm_head_bias"] = bool(hf.get("lm_head_bias", False))
    # modeling_phimoe.sparsemixer picks a first and a second expert whatever num_experts_per_tok says.
    if kw.get("n_experts", 0) >= 2 and kw.get("n_experts_per_token") != 2:
        kw["notes"] = kw.get("notes", ()) + (
            f"num_experts_per_tok {kw.get('n_experts_per_token')} is ignored, as transformers' PhiMoE "
            f"sparsemixer routes every token to 2 experts",)
        kw["n_experts_per_token"] = 2


def _four_d(hf: dict, kw: dict, key: str) -> None:
    if hf.get(key) is None:  # GPT-J n_inner, GPT-Neo intermediate_size: None means 4·d_model
        kw["d_ff"] = 4 * kw["d_model"]


def _gptj(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "n_inner")


def _gpt_neo(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "intermediate_size")


def _gpt_bigcode(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "n_inner")
    kw["n_kv_heads"] = 1 if hf.get("multi_query", True) else kw["n_heads"]  # c_attn: D + 2·d_head with MQA


def _opt(hf: dict, kw: dict) -> None:
    # OPTDecoder: positions table of max_position_embeddings + 2 rows (the offset of 2), biases from
    # enable_bias, ffn_dim wide fc1/fc2, post-LN without a final norm when do_layer_norm_before is
    # false (OPT-350m), project_in/out when word_embed_proj_dim differs from hidden_size.
    kw["n_positions"] = hf["max_position_embeddings"] + 2
    kw["d_ff"] = hf["ffn_dim"]
    bias = bool(hf.get("enable_bias", True))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    kw["norm_affine"] = bool(hf.get("layer_norm_elementwise_affine", True))
    pre = bool(hf.get("do_layer_norm_before", True))
    kw["post_norm"] = not pre
    kw["final_norm"] = pre and not hf.get("_remove_final_layer_norm", False)
    proj = hf.get("word_embed_proj_dim")
    if proj is not None and proj != kw["d_model"]:
        kw["d_embed"] = proj


def _bloom(hf: dict, kw: dict) -> None:
    kw["d_ff"] = 4 * kw["d_model"]  # BloomMLP: dense_h_to_4h is always 4·hidden_size


def _starcoder2(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("use_bias", True))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)


def _stablelm(hf: dict, kw: dict) -> None:
    # StableLmAttention: q/k/v bias = use_qkv_bias; qk_layernorm is one bias-free LayerNorm(head_dim)
    # per head; use_parallel_residual drops post_attention_layernorm (one shared norm).
    kw["qkv_bias"] = bool(hf.get("use_qkv_bias", False))
    if hf.get("qk_layernorm"):
        kw["qk_norm"] = "full"
    if hf.get("use_parallel_residual"):
        kw.update(parallel_residual=True, norms_per_layer=1)


def _cohere(hf: dict, kw: dict) -> None:
    # CohereDecoderLayer: attention and MLP in parallel off one input_layernorm; CohereLayerNorm has a
    # weight only; use_qk_norm is a CohereLayerNorm over (heads, head_dim): a weight per head.
    _attention_bias(hf, kw)
    if hf.get("use_qk_norm"):
        kw["qk_norm"] = "full"


def _mpt(hf: dict, kw: dict) -> None:
    # MptBlock: Wqkv (3·D) and out_proj bias-free, norms with their bias set to None, ALiBi, and an
    # FFN of 4·d_model whatever expansion_ratio says (modeling_mpt.py MptMLP).
    kw["d_ff"] = 4 * kw["d_model"]
    ratio = hf.get("expansion_ratio", 4)
    if ratio != 4:
        kw["notes"] = kw.get("notes", ()) + (
            f"expansion_ratio {ratio} is ignored, as transformers' MptMLP does: its FFN is 4·d_model",)


def _dbrx(hf: dict, kw: dict) -> None:
    # DbrxAttention: Wqkv of D + 2·kv_n_heads·d_head, no biases; DbrxExperts w1/v1/w2 of ffn_hidden_size.
    attn, ffn = hf.get("attn_config") or {}, hf.get("ffn_config") or {}
    kw["n_kv_heads"] = attn.get("kv_n_heads", 1)
    width = ffn.get("ffn_hidden_size", 3584)
    kw.update(n_experts=ffn.get("moe_num_experts", 4), n_experts_per_token=ffn.get("moe_top_k", 1),
              d_ff_expert=width, d_ff=width)
    act = (ffn.get("ffn_act_fn") or {}).get("name", "silu")
    kw["mlp"] = mlp_kind(act, True)


def _glm(hf: dict, kw: dict) -> None:
    kw["qkv_bias"] = bool(hf.get("attention_bias", True))  # GlmAttention: o_proj is bias-free


def _glm4_moe(hf: dict, kw: dict) -> None:
    # Glm4MoeAttention: q/k/v bias = attention_bias, o_proj bias-free, optional per-head QK RMSNorm;
    # DeepSeek-style MoE (first_k_dense_replace dense layers, shared experts). The MTP layers of
    # num_nextn_predict_layers are not part of the transformers model and are not counted.
    kw["qkv_bias"] = bool(hf.get("attention_bias", False))
    if hf.get("use_qk_norm"):
        kw["qk_norm"] = "head"


def _ernie(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("use_bias", False))  # every linear (Ernie4_5ForCausalLM's LM head excepted)
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)


def _ernie_moe(hf: dict, kw: dict) -> None:
    # Ernie4_5_MoeDecoderLayer: MoE when (i + 1) % moe_layer_interval == 0 and start <= i <= end
    # (end -1 = the last layer); shared experts of moe_intermediate_size·moe_num_shared_experts.
    _ernie(hf, kw)
    kw["lm_head_bias"] = kw["mlp_bias"]  # Ernie4_5_MoeForCausalLM: lm_head bias=config.use_bias
    L = kw["n_layers"]
    start, end = hf.get("moe_layer_start_index", 1), hf.get("moe_layer_end_index", -1)
    end = L - 1 if end == -1 else end
    step = hf.get("moe_layer_interval", 1)
    kw["moe_layers"] = tuple(i for i in range(L) if (i + 1) % step == 0 and start <= i <= end)
    kw["n_shared_experts"] = hf.get("moe_num_shared_experts", 2) or 0
    kw["router_score_bias"] = bool(kw.get("n_experts"))  # Ernie4_5_MoeStatics: e_score_correction_bias, frozen


def _seed_oss(hf: dict, kw: dict) -> None:
    kw.update(qkv_bias=bool(hf.get("attention_bias", True)), out_bias=bool(hf.get("attention_out_bias", False)),
              mlp_bias=bool(hf.get("mlp_bias", False)))


def _per_layer(hf: dict, key: str, default: Any) -> Any:
    """Hunyuan-MoE keys may be one value or one per layer (HunYuanMoEV1Moe reads config.moe_topk[layer_idx]); the
    formula models one MoE shape, so a list whose entries differ has none (NoFormula)."""
    value = hf.get(key, default)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise NoFormula(f"hunyuan_v1_moe with {key} differing between layers ({sorted(set(value))}): no formula "
                            f"for MoE layers of different shapes")
        value = value[0]
    return value


def _hunyuan_moe(hf: dict, kw: dict) -> None:
    # HunYuanMoEV1Moe: every layer MoE; experts and one shared_mlp of intermediate_size; router wg bias-free.
    _qk_norm_head(hf, kw)
    kw.update(n_experts=_per_layer(hf, "num_experts", 1), n_experts_per_token=_per_layer(hf, "moe_topk", 1),
              d_ff_expert=hf["intermediate_size"], n_shared_experts=1, d_ff_shared=hf["intermediate_size"])


def _sizes(**keys: Any) -> dict:
    return keys


FAMILIES.update({
    "qwen3": Family(
        "models/qwen3/modeling_qwen3.py: per-head QK RMSNorm, attention_bias on q/k/v/o",
        {}, _sizes(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False),
        _qk_norm_head,
    ),
    "qwen3_moe": Family(
        "models/qwen3_moe/modeling_qwen3_moe.py: per-head QK-norm, top-k experts, mlp_only_layers",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                   num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False, num_experts=128,
                   num_experts_per_tok=8, moe_intermediate_size=768), _qwen3_moe,
    ),
    "qwen2_moe": Family(
        "models/qwen2_moe/modeling_qwen2_moe.py: q/k/v bias, gated shared expert",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                   num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False, num_experts=60,
                   num_experts_per_tok=4, moe_intermediate_size=1408, shared_expert_intermediate_size=5632),
        _qwen2_moe,
    ),
    "gemma3_text": Family(
        "models/gemma3/modeling_gemma3.py (Gemma3ForCausalLM): sandwich norms, per-head QK-norm, tied",
        {"norms_per_layer": 4}, _sizes(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                                       num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                                       head_dim=256, tie_word_embeddings=True,
                                       hidden_activation="gelu_pytorch_tanh"), _qk_norm_head,
    ),
    "llama4_text": Family(
        "models/llama4/modeling_llama4.py (Llama4ForCausalLM): interleaved MoE with a shared expert",
        {}, _sizes(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                   num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                   tie_word_embeddings=False, num_local_experts=16, num_experts_per_tok=1), _llama4,
    ),
    "gpt_oss": Family(
        "models/gpt_oss/modeling_gpt_oss.py: attention sinks, biased attention, router and experts",
        {}, _sizes(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
                   attention_bias=True, num_local_experts=128, num_experts_per_tok=4), _gpt_oss,
    ),
    "olmo2": Family(
        "models/olmo2/modeling_olmo2.py: QK RMSNorm over all heads, norms after each sublayer",
        {}, _sizes(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _olmo2,
    ),
    "olmo3": Family(
        "models/olmo3/modeling_olmo3.py: as OLMo-2, with sliding-window layers",
        {}, _sizes(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _olmo2,
    ),
    "olmoe": Family(
        "models/olmoe/modeling_olmoe.py: QK-norm over all heads, experts of intermediate_size",
        {}, _sizes(vocab_size=50304, hidden_size=2048, intermediate_size=2048, num_hidden_layers=16,
                   num_attention_heads=16, tie_word_embeddings=False, num_experts=64, num_experts_per_tok=8),
        _olmoe,
    ),
    "granite": Family(
        "models/granite/modeling_granite.py: Llama with scalar multipliers (no parameters)",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _attention_bias,
    ),
    "granitemoe": Family(
        "models/granitemoe/modeling_granitemoe.py: every layer MoE, experts of intermediate_size",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False, num_local_experts=8,
                   num_experts_per_tok=2), _experts_of_width_ffn,
    ),
    "granitemoeshared": Family(
        "models/granitemoeshared/modeling_granitemoeshared.py: Granite-MoE plus a shared MLP",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False, num_local_experts=8,
                   num_experts_per_tok=2), _granitemoeshared,
    ),
    "phi": Family(
        "models/phi/modeling_phi.py: parallel block with one LayerNorm, biased linears and LM head",
        {"norm": "layernorm", "parallel_residual": True, "norms_per_layer": 1, "qkv_bias": True, "out_bias": True,
         "mlp_bias": True, "lm_head_bias": True},
        _sizes(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
               num_attention_heads=32, tie_word_embeddings=False, hidden_act="gelu_new"), _phi, gated=False,
    ),
    "phimoe": Family(
        "models/phimoe/modeling_phimoe.py: LayerNorm, biased attention (attention_bias), optional LM-head bias",
        {"norm": "layernorm"}, _sizes(vocab_size=32064, hidden_size=4096, intermediate_size=6400,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                      tie_word_embeddings=False, num_local_experts=16, num_experts_per_tok=2),
        _phimoe,
    ),
    "gptj": Family(
        "models/gptj/modeling_gptj.py: parallel block with one LayerNorm, bias-free attention, LM-head bias",
        {"norm": "layernorm", "parallel_residual": True, "norms_per_layer": 1, "mlp_bias": True,
         "lm_head_bias": True},
        _sizes(vocab_size=50400, n_embd=4096, n_layer=28, n_head=16, n_positions=2048, tie_word_embeddings=False,
               activation_function="gelu_new"), _gptj, gated=False,
    ),
    "gpt_neo": Family(
        "models/gpt_neo/modeling_gpt_neo.py: learned positions, bias-free q/k/v, biased out_proj and MLP",
        {"norm": "layernorm", "pos_emb": "learned", "out_bias": True, "mlp_bias": True},
        _sizes(vocab_size=50257, hidden_size=2048, num_layers=24, num_heads=16, max_position_embeddings=2048,
               tie_word_embeddings=True, activation_function="gelu_new"), _gpt_neo, gated=False,
    ),
    "opt": Family(
        "models/opt/modeling_opt.py: learned positions with an offset of 2, project_in/out, ffn_dim",
        {"norm": "layernorm", "pos_emb": "learned"},
        _sizes(vocab_size=50272, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072,
               max_position_embeddings=2048, tie_word_embeddings=True, activation_function="relu"),
        _opt, gated=False,
    ),
    "bloom": Family(
        "models/bloom/modeling_bloom.py: ALiBi, embedding LayerNorm, fused biased qkv, 4·D MLP",
        {"norm": "layernorm", "pos_emb": "alibi", "embedding_norm": True, "qkv_bias": True, "out_bias": True,
         "mlp_bias": True},
        _sizes(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True), _bloom,
        gated=False,
    ),
    "gpt_bigcode": Family(
        "models/gpt_bigcode/modeling_gpt_bigcode.py: GPT-2 with multi-query attention (multi_query)",
        {"norm": "layernorm", "pos_emb": "learned", "qkv_bias": True, "out_bias": True, "mlp_bias": True},
        _sizes(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024, tie_word_embeddings=True,
               activation_function="gelu_pytorch_tanh"), _gpt_bigcode, gated=False,
    ),
    "starcoder2": Family(
        "models/starcoder2/modeling_starcoder2.py: LayerNorm, use_bias on every linear, plain GELU MLP",
        {"norm": "layernorm"}, _sizes(vocab_size=49152, hidden_size=3072, intermediate_size=12288,
                                      num_hidden_layers=30, num_attention_heads=24, num_key_value_heads=2,
                                      tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh"),
        _starcoder2, gated=False,
    ),
    "stablelm": Family(
        "models/stablelm/modeling_stablelm.py: LayerNorm, use_qkv_bias, per-head qk_layernorm, parallel option",
        {"norm": "layernorm"}, _sizes(vocab_size=50304, hidden_size=2560, intermediate_size=6912,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                      tie_word_embeddings=False), _stablelm,
    ),
    "cohere": Family(
        "models/cohere/modeling_cohere.py: parallel block, one bias-free LayerNorm, QK-norm per head, tied",
        {"norm": "layernorm", "norm_bias": False, "parallel_residual": True, "norms_per_layer": 1},
        _sizes(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, tie_word_embeddings=True), _cohere,
    ),
    "cohere2": Family(
        "models/cohere2/modeling_cohere2.py: Cohere's parallel block with sliding-window layers, tied",
        {"norm": "layernorm", "norm_bias": False, "parallel_residual": True, "norms_per_layer": 1},
        _sizes(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, tie_word_embeddings=True), _attention_bias,
    ),
    "mpt": Family(
        "models/mpt/modeling_mpt.py: ALiBi, no biases at all (norms included), FFN of 4·d_model",
        {"norm": "layernorm", "norm_bias": False, "pos_emb": "alibi"},
        _sizes(vocab_size=50368, d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, tie_word_embeddings=True),
        _mpt, gated=False,
    ),
    "dbrx": Family(
        "models/dbrx/modeling_dbrx.py: fused GQA Wqkv, bias-free LayerNorm, every layer MoE",
        {"norm": "layernorm", "norm_bias": False},
        _sizes(vocab_size=32000, d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048,
               tie_word_embeddings=False), _dbrx,
    ),
    "glm": Family(
        "models/glm/modeling_glm.py: q/k/v bias, fused gate_up_proj",
        {}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                   num_attention_heads=32, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False), _glm,
    ),
    "glm4": Family(
        "models/glm4/modeling_glm4.py: GLM with post-attention and post-MLP norms (4 per block)",
        {"norms_per_layer": 4}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=13696,
                                       num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2,
                                       head_dim=128, tie_word_embeddings=False), _glm,
    ),
    "glm4_moe": Family(
        "models/glm4_moe/modeling_glm4_moe.py: DeepSeek-style MoE, q/k/v bias, optional QK-norm (MTP not built)",
        {}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
                   num_attention_heads=96, num_key_value_heads=8, tie_word_embeddings=False,
                   moe_intermediate_size=1408, n_shared_experts=1, n_routed_experts=128, num_experts_per_tok=8,
                   first_k_dense_replace=1), _glm4_moe,
    ),
    "ernie4_5": Family(
        "models/ernie4_5/modeling_ernie4_5.py: use_bias on every linear and the LM head, tied",
        {}, _sizes(vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
                   num_attention_heads=16, num_key_value_heads=2, head_dim=128, tie_word_embeddings=True), _ernie,
    ),
    "ernie4_5_moe": Family(
        "models/ernie4_5_moe/modeling_ernie4_5_moe.py: MoE from moe_layer_start_index, shared experts",
        {}, _sizes(vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
                   num_attention_heads=20, num_key_value_heads=4, tie_word_embeddings=True,
                   moe_intermediate_size=1536, moe_num_experts=64, moe_k=6), _ernie_moe,
    ),
    "exaone4": Family(
        "models/exaone4/modeling_exaone4.py: per-head QK-norm, norms after each sublayer, no biases",
        {"qk_norm": "head"}, _sizes(vocab_size=102400, hidden_size=4096, intermediate_size=16384,
                                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                    tie_word_embeddings=False),
    ),
    "smollm3": Family(
        "models/smollm3/modeling_smollm3.py: Llama with NoPE layers (no parameters), tied",
        {}, _sizes(vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                   num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=True), _attention_bias,
    ),
    "seed_oss": Family(
        "models/seed_oss/modeling_seed_oss.py: q/k/v bias (attention_bias), o bias (attention_out_bias)",
        {}, _sizes(vocab_size=155136, hidden_size=4096, intermediate_size=27648, num_hidden_layers=64,
                   num_attention_heads=80, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
        _seed_oss,
    ),
    "hunyuan_v1_dense": Family(
        "models/hunyuan_v1_dense/modeling_hunyuan_v1_dense.py: per-head query/key RMSNorm",
        {}, _sizes(vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _qk_norm_head,
    ),
    "hunyuan_v1_moe": Family(
        "models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py: per-head QK-norm, experts plus one shared MLP",
        {}, _sizes(vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _hunyuan_moe,
        per_layer=("num_experts", "moe_topk"),
    ),
    "ministral": Family(
        "models/ministral/modeling_ministral.py: Mistral with sliding-window layers, no biases",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    ),
    "nemotron": Family(
        "models/nemotron/modeling_nemotron.py: Nemotron-4, LayerNorm1P (weight and bias), a plain relu2 MLP "
        "(up/down), partial rotary, untied head",
        {"norm": "layernorm"}, _sizes(vocab_size=256000, hidden_size=6144, intermediate_size=24576,
                                      num_hidden_layers=32, num_attention_heads=48, hidden_act="relu2",
                                      tie_word_embeddings=False), _attention_bias, gated=False,
    ),
})
# Kimi-K2's published config says model_type "kimi_k2" and loads DeepseekV3 classes (auto_map); Kimi_K25Config's
# __post_init__ reads a text_config "kimi_k2" as deepseek_v3 too (models/kimi_k25/configuration_kimi_k25.py).
FAMILIES["kimi_k2"] = FAMILIES["deepseek_v3"]


def _glm4v_moe_text(hf: dict, kw: dict) -> None:
    # Glm4vMoeTextAttention (models/glm4v_moe/modeling_glm4v_moe.py): q/k/v bias = attention_bias (default True),
    # o_proj bias-free, no QK-norm whatever use_qk_norm says; head_dim from the key when given, else D // H.
    kw["qkv_bias"] = bool(hf.get("attention_bias", True))


def _minimax_m2(hf: dict, kw: dict) -> None:
    # MiniMaxM2Attention: q_norm = RMSNorm(H·d_head), k_norm = RMSNorm(KV·d_head), always built (use_qk_norm is
    # not read); every layer MoE with experts of intermediate_size, no shared expert (shared_intermediate_size
    # is not read); the router's e_score_correction_bias is a stored buffer (SCORE_BIAS_STORED).
    _olmoe(hf, kw)


# 2026's relabels: families whose layers an existing entry already describes, with their own config-class defaults
# (configuration_<type>.py of transformers 5.24).
FAMILIES.update({
    "minimax_m2": Family(
        "models/minimax_m2/modeling_minimax_m2.py: QK RMSNorm over all heads, every layer MoE with experts of "
        "intermediate_size, untied (MTP modules not built)",
        {}, _sizes(vocab_size=200064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
                   num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                   num_local_experts=256, num_experts_per_tok=8), _minimax_m2,
        aliases={"num_experts": "num_local_experts"},
    ),
    "ministral3": Family(
        "models/ministral3/modeling_ministral3.py: Mistral's layers (its llama-4 query scale has no parameters), an "
        "optional sliding window on every layer",
        {}, _sizes(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=34,
                   num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    ),
    "qwen3_vl_text": Family(
        "models/qwen3_vl/modeling_qwen3_vl.py (Qwen3VLTextModel): Qwen3's layers (per-head QK-norm, attention_bias "
        "on q/k/v/o); M-RoPE and DeepStack have no text parameters",
        {}, _sizes(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False),
        _qk_norm_head,
    ),
    "qwen3_vl_moe_text": Family(
        "models/qwen3_vl_moe/modeling_qwen3_vl_moe.py (Qwen3VLMoeTextModel): Qwen3-MoE's layers",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                   num_attention_heads=16, num_key_value_heads=16, head_dim=128, tie_word_embeddings=False,
                   num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408), _qwen3_moe,
        aliases={"num_experts": "num_local_experts"},
    ),
    "glm4v_moe_text": Family(
        "models/glm4v_moe/modeling_glm4v_moe.py (Glm4vMoeTextModel): GLM-4.5's MoE layers with q/k/v bias on by "
        "default and no QK-norm",
        {}, _sizes(vocab_size=151424, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
                   num_attention_heads=96, num_key_value_heads=8, tie_word_embeddings=False,
                   moe_intermediate_size=1408, n_shared_experts=1, n_routed_experts=128, num_experts_per_tok=8,
                   first_k_dense_replace=1), _glm4v_moe_text,
        aliases={"num_local_experts": "n_routed_experts"},
    ),
})
FAMILIES.update(RECENT_FAMILIES)

# Windowed attention per family, laid out as its transformers config class lays it out (configuration_<family>.py,
# transformers 5): HF's own `layer_types` ("sliding_attention", "chunked_attention", "full_attention") where the
# config gives it, else the class's rule below. Each entry: (size key, class default of that key, the rule
# (layer index, merged config) -> span of that layer, with the class defaults of the keys it reads).
def _every(pattern_key: str, default: int) -> Callable[[int, dict], str]:
    """Sliding except every n-th layer (Gemma 2/3, Cohere2, OLMo 3, gpt-oss: (i + 1) % n != 0 -> sliding)."""
    def rule(i: int, hf: dict) -> str:
        n = hf.get(pattern_key) or default
        if isinstance(n, str):  # EXAONE 4's "LLLG": L local, G global, repeated from layer 0
            return "sliding" if n[i % len(n)] == "L" else "full"
        return "sliding" if (i + 1) % n else "full"
    return rule


def _all_sliding(i: int, hf: dict) -> str:
    return "sliding"


def _qwen_sliding(i: int, hf: dict) -> str:
    """Qwen2/Qwen3: with use_sliding_window, the layers from max_window_layers (default 28) on."""
    return "sliding" if hf.get("use_sliding_window") and i >= hf.get("max_window_layers", 28) else "full"


def _qwen2_moe_sliding(i: int, hf: dict) -> str:
    """Qwen2-MoE: with use_sliding_window, every other layer below max_window_layers."""
    return "sliding" if hf.get("use_sliding_window") and (i + 1) % 2 and i < hf.get("max_window_layers", 28) \
        else "full"


def _qwen3_moe_sliding(i: int, hf: dict) -> str:
    return "sliding" if hf.get("use_sliding_window") else "full"


def _smollm3_sliding(i: int, hf: dict) -> str:
    """SmolLM3: with use_sliding_window, the NoPE layers (no_rope_layers[i] == 0; every 4th by default)."""
    rope = hf.get("no_rope_layers")
    has_rope = rope[i] if isinstance(rope, list) and i < len(rope) else int((i + 1) % hf.get(
        "no_rope_layer_interval", 4) != 0)
    return "sliding" if hf.get("use_sliding_window") and not has_rope else "full"


def _llama4_chunked(i: int, hf: dict) -> str:
    """Llama 4: the RoPE layers (no_rope_layers[i] == 1; all but every 4th by default) attend within chunks."""
    rope = hf.get("no_rope_layers")
    uses_rope = rope[i] if isinstance(rope, list) and i < len(rope) else int((i + 1) % hf.get(
        "no_rope_layer_interval", 4) != 0)
    return "chunked" if uses_rope else "full"


def _gpt_neo_local(i: int, hf: dict) -> str:
    """GPT-Neo: attention_types [[["global", "local"], 12]] expanded layer by layer; "local" = a window."""
    types = hf.get("attention_types") or [[["global", "local"], 12]]
    kinds = [kind for item in types for _ in range(item[1]) for kind in item[0]]
    return "sliding" if i < len(kinds) and kinds[i] == "local" else "full"


WINDOWED: dict[str, tuple[str, int | None, Callable[[int, dict], str]]] = {
    "gpt_oss": ("sliding_window", 128, _every("_alternate", 2)),
    "gemma2": ("sliding_window", 4096, _every("_alternate", 2)),
    "gemma3_text": ("sliding_window", 4096, _every("sliding_window_pattern", 6)),
    "cohere2": ("sliding_window", 4096, _every("sliding_window_pattern", 4)),
    "olmo3": ("sliding_window", 4096, _every("_every_fourth", 4)),
    "exaone4": ("sliding_window", 4096, _every("sliding_window_pattern", 4)),
    "ministral": ("sliding_window", 4096, _all_sliding),
    "mistral": ("sliding_window", 4096, _all_sliding),
    "ministral3": ("sliding_window", None, _all_sliding),
    "mixtral": ("sliding_window", None, _all_sliding),
    "phi3": ("sliding_window", None, _all_sliding),
    "starcoder2": ("sliding_window", None, _all_sliding),
    "qwen2": ("sliding_window", 4096, _qwen_sliding),
    "qwen3": ("sliding_window", 4096, _qwen_sliding),
    "qwen2_moe": ("sliding_window", 4096, _qwen2_moe_sliding),
    "qwen3_moe": ("sliding_window", 4096, _qwen3_moe_sliding),
    "smollm3": ("sliding_window", None, _smollm3_sliding),
    "llama4_text": ("attention_chunk_size", 8192, _llama4_chunked),
    "gpt_neo": ("window_size", 256, _gpt_neo_local),
}
HF_SPANS = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}


def _attention_spans(model_type: str | None, hf: dict, n_layers: int) -> dict[str, Any]:
    """attention_spans, attention_window, attention_chunk of a family with windowed layers (WINDOWED), or {}."""
    rule = WINDOWED.get(model_type or "")
    if rule is None:
        return {}
    key, default, span_of = rule
    size = hf.get(key, default)  # the config's own value, null included, else the class default
    if isinstance(size, list):
        raise NoFormula(f"{model_type} with {key} given per layer {_shown(size)}: no formula for a window per layer")
    if not size:  # the window switched off (sliding_window: null)
        return {}
    given = hf.get("layer_types")
    if isinstance(given, list) and len(given) == n_layers and all(t in HF_SPANS for t in given):
        spans = tuple(HF_SPANS[t] for t in given)
    else:
        spans = tuple(span_of(i, hf) for i in range(n_layers))
    if all(s == "full" for s in spans):
        return {}
    out: dict[str, Any] = {"attention_spans": spans}
    out["attention_chunk" if "chunked" in spans else "attention_window"] = size
    return out


# Multimodal checkpoints whose language model llmcalc counts from text_config (and its text model_type when
# text_config names none), and the outer config class's tie_word_embeddings default, which transformers 5 applies
# when the outer config says nothing: the wrapper ties lm_head to the language model's embeddings iff the outer
# config does (modeling_utils.py PreTrainedModel.get_expanded_tied_weights_keys reads self.config), whatever
# text_config says. Sources: each configuration_<type>.py's class field.
MULTIMODAL_TEXT = {"gemma3": "gemma3_text", "llama4": "llama4_text", "gemma4": "gemma4_text", "mistral3": "mistral",
                   "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text", "glm4v_moe": "glm4v_moe_text",
                   "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "kimi_k25": "deepseek_v3"}
OUTER_TIE = {"gemma3": True, "llama4": False, "gemma4": True, "mistral3": True, "qwen3_vl": False,
             "qwen3_vl_moe": False, "glm4v_moe": False, "qwen3_5": False, "qwen3_5_moe": False, "kimi_k25": True}


def _outer_tie(model_type: str | None, outer: dict, text: dict) -> tuple[bool | None, str | None]:
    """(tie_word_embeddings of a multimodal checkpoint, a note where the outer class default is overruled): the outer
    config's own value; else, where the outer config says nothing, the text config's (its own key, else its class
    default), which is what the checkpoint ships: Mistral-Small-3.1 (mistral3, no tie key anywhere) stores a separate
    lm_head.weight, and transformers 5.25's from_pretrained, finding both tensors in the checkpoint with different
    values, does not tie them (modeling_utils.py tie_weights) whatever Mistral3Config's default (true) says; else
    the outer class default (OUTER_TIE). Glm4vMoeConfig.__post_init__ also ties when text_config says so (its
    backward-compatibility rule). None: a wrapper llmcalc does not know, text_config decides."""
    given = outer.get("tie_word_embeddings")
    if model_type == "glm4v_moe" and not given and text.get("tie_word_embeddings"):
        return True, None
    if given is not None:
        return bool(given), None
    default = OUTER_TIE.get(model_type or "")
    if default is None:
        return None, None
    family = FAMILIES.get(text.get("model_type") or "")
    text_tie = text.get("tie_word_embeddings", family.defaults.get("tie_word_embeddings") if family else None)
    if text_tie is None or bool(text_tie) == default:
        return default, None
    whose = "text_config's" if "tie_word_embeddings" in text else f"the text model's ({text.get('model_type')}) default"
    return bool(text_tie), (
        f"tie_word_embeddings is absent from the top level: {whose} {str(bool(text_tie)).lower()} is counted, as the "
        f"checkpoint ships it ({'one shared table' if text_tie else 'a separate lm_head'}), not transformers' "
        f"{model_type} class default ({str(default).lower()}), which from_pretrained overrules when the checkpoint "
        f"says otherwise")


def _first(hf: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if hf.get(key) is not None:
            return hf[key]
    return None


# Config keys read as flags: JSON true/false only ("false" as a string would read as true).
BOOL_KEYS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "new_decoder_architecture", "multi_query",
             "bias", "parallel_attn", "alibi", "use_parallel_residual", "share_encoder_decoder_embeddings",
             "attention_out_bias", "qkv_bias", "lm_head_bias", "enable_bias", "use_bias", "use_qkv_bias",
             "layer_norm_elementwise_affine", "do_layer_norm_before", "qk_layernorm", "use_qk_norm",
             "_remove_final_layer_norm")
# feed_forward_proj values T5Config accepts for the activations llmcalc models ("gated-" = GeGLU/SwiGLU).
T5_PROJECTIONS = ("relu", "gelu", "gelu_new", "silu", "gated-gelu", "gated-gelu_new", "gated-silu")


def check_config_values(hf: dict) -> None:
    """Refuse, naming the key, config values of the wrong JSON type before anything reads them:
    flags must be real booleans, shapes whole numbers, activations known strings, numbers finite."""
    if not isinstance(hf, dict):
        raise SpecError("a config must be a JSON object")
    if not isinstance(hf.get("model_type", ""), (str, type(None))):
        raise SpecError(f"model_type must be a string, got {hf['model_type']!r:.60}")
    for key, value in hf.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{key} must be a finite number, got {value}")
    for key in BOOL_KEYS:
        if hf.get(key) is not None and not isinstance(hf[key], bool):
            raise SpecError(f"{key} must be true or false (a JSON boolean), got {hf[key]!r:.60}")
    for key in {k for keys in HF_KEYS.values() for k in keys} - {"tie_word_embeddings"}:
        value = hf.get(key)
        if value is None or _whole(value):
            continue
        if key in PER_LAYER_KEYS and isinstance(value, list) and value and all(_whole(v) for v in value):
            continue  # one per layer: read by _per_layer_lists, _moe_layer_mask, or transformers
        per_layer = " (or a list of them, one per layer)" if key in PER_LAYER_KEYS else ""
        raise SpecError(f"{key} must be a whole number{per_layer}, got {value!r:.60}")
    for key in ACTIVATION_KEYS:
        if hf.get(key) is not None and not isinstance(hf[key], str):
            raise SpecError(f"{key} must be an activation name such as \"silu\" or \"gelu\", got {hf[key]!r:.60}")
    proj = hf.get("feed_forward_proj")
    if proj is not None and proj not in T5_PROJECTIONS:
        raise SpecError(f"feed_forward_proj must be one of {', '.join(T5_PROJECTIONS)}; got {proj!r:.60}")


def check_sizes(hf: dict) -> None:
    """The formula path's sane maxima (10,000 layers, 2**24 for any width: checks.check_maximum) on a config's own
    shape keys (HF_KEYS, every alias) and on those of its sub-configs (text_config, vision_config, ...), for a config
    transformers is about to build: the same one line as the formula path, before anything is built. A value that
    is not a whole number is left to check_config_values and transformers."""
    for spec_field, keys in HF_KEYS.items():
        for key in keys:
            value = hf.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                check_maximum(spec_field, value)
    for key, value in hf.items():
        if isinstance(value, dict) and key.endswith("_config") and key != "quantization_config":
            check_sizes(value)


def spec_from_hf(hf: dict, name: str = "custom") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json dict (unchanged, as published); a rule the resolved shapes
    break names the config key it comes from (intermediate_size, not llmcalc's d_ff)."""
    draft = draft_from_hf(hf, name)
    try:
        return resolve(draft)
    except SpecError as exc:
        field, _, rest = str(exc).partition(" ")
        keys = HF_KEYS.get(field)
        if keys and type(exc) is SpecError and rest.startswith("must be a positive whole number"):
            key = next((k for k in keys if k in hf), keys[0])
            rest = rest.replace("none is given", "the config has none" if key not in hf else "it is null")
            raise SpecError(f"config key {key} (llmcalc's {field}) {rest}") from None
        raise


# Families whose router holds a per-expert score-correction bias (E) that the checkpoint stores, a persistent buffer
# in transformers (nn.Buffer: in the state_dict, so save_pretrained writes it): modeling_deepseek_v3.py,
# modeling_deepseek_v32.py, modeling_glm_moe_dsa.py, modeling_glm4_moe.py, modeling_glm4_moe_lite.py,
# modeling_glm4v_moe.py, modeling_kimi_linear.py, modeling_minimax_m2.py (on the MoE block), modeling_nemotron_h.py
# (e_score_correction_bias, every MoE layer), modeling_deepseek_v4.py (its "moe" layers; its first "hash_moe" layers
# keep a token-id table tid2eid, vocab x top-k, instead: not counted yet); ERNIE-4.5 (a frozen parameter) sets it
# in its own derive step.
SCORE_BIAS_STORED = frozenset({"deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe", "glm4_moe_lite",
                               "glm4v_moe_text", "kimi_linear", "minimax_m2", "nemotron_h", "deepseek_v4"})


def draft_from_hf(hf: dict, name: str = "custom") -> SpecDraft:  # long: HF key mapping, read against config.json
    """A SpecDraft from a Hugging Face config.json dict (unchanged, as published)."""
    check_config_values(hf)
    given = hf  # the config as given (text_config and all)
    notes: tuple[str, ...] = ()
    quant = hf.get("quantization_config")
    check_quantization_config(quant)  # refused here, once, for every command (params included)
    if isinstance(hf.get("text_config"), dict):
        check_quantization_config(hf["text_config"].get("quantization_config"))
    if quant is not None:
        notes += (f"quantization_config ({quant.get('quant_method', 'unnamed')}): parameters are counted as in the "
                  f"unquantized model (one each, whatever their storage); serve, infer, memory --finetune, compare and "
                  f"report size the weights as the checkpoint stores them",)
    stored = hf.get("torch_dtype", hf.get("dtype"))
    model_type = hf.get("model_type")
    outer: dict | None = None
    single = [k for k in ("text_config", "vision_config", "audio_config") if isinstance(hf.get(k), dict)]
    if model_type in FAMILIES and single:  # one text model (no formula family has sub-configs): the top-level keys
        notes += (f"{' and '.join(single)} ignored: transformers' {model_type} config has no text, vision or audio "
                  f"sub-config, so the top-level keys are the model, as its modelling code builds it",)
    elif isinstance(hf.get("text_config"), dict):  # a multimodal checkpoint: count its language model
        outer, hf = hf, {**hf["text_config"]}
        check_config_values(hf)
        hf.setdefault("model_type", MULTIMODAL_TEXT.get(model_type, model_type) if model_type else model_type)
        tie, tie_note = _outer_tie(model_type, outer, hf)
        if tie is not None:  # the top-level class ties the LM head
            hf["tie_word_embeddings"] = tie
        elif outer.get("tie_word_embeddings") is not None:
            hf["tie_word_embeddings"] = outer["tie_word_embeddings"]
        if tie_note:
            notes += (tie_note,)
        if outer.get("quantization_config") is not None:
            hf["quantization_config"] = outer["quantization_config"]
        if isinstance(outer.get("vision_config"), dict):  # the tower vLLM loads beside the language model
            hf["vision_config"] = outer["vision_config"]
        notes += (f"multimodal config ({model_type}): the language model from text_config is counted; "
                  f"the vision tower and multimodal projector are left out",)
        model_type = hf["model_type"]
    elif any(isinstance(hf.get(k), dict) for k in ("vision_config", "audio_config")):
        raise SpecError(f"multimodal config ({model_type}) without a text_config: nothing to count as a "
                        f"language model; give a config.json whose text_config describes its decoder")
    if model_type is None and not any(k in hf for keys in HF_KEYS.values() for k in keys):
        raise SpecError("not a model config: no model_type and no model shape keys (hidden_size, "
                        "num_hidden_layers, ...); give a Hugging Face config.json or an llmcalc spec")
    family = FAMILIES.get(model_type) if model_type else None
    if family is None:
        missing = [k for k in REQUIRED_FOR_UNKNOWN if k not in hf]
        if missing:
            describe = (f"or add llmcalc's keys {', '.join(missing)} to the config (e.g. \"mlp\": \"swiglu\", "
                        f"\"norm\": \"rmsnorm\", \"pos_emb\": \"rope\")")
            known = f"not one of the {len(FAMILIES)} with a formula (README, 'What is covered')"
            if isinstance(model_type, str) and model_type:
                check_sizes(given)  # the fallback builds the model: the formula path's limits first
                raise UnknownModelType(
                    f"unknown model_type {model_type!r}, {known}: a ModelSpec needs its shapes (every command "
                    f"counts it with transformers instead); {describe}", hf, name, outer)
            raise SpecError(f"unknown model_type {model_type!r}, {known}; {describe}")
        family = Family("explicit llmcalc keys", {}, {}, _attention_bias, gated=hf["mlp"] in ("swiglu", "geglu"))
    raw = hf  # the config transformers builds, should no formula cover a part of it
    try:
        hf, merged, kw = _read_family(family, model_type, hf)
    except NoFormula as exc:
        if model_type not in FAMILIES:  # explicit llmcalc keys: nothing else counts it
            raise SpecError(str(exc)) from None
        check_sizes(given)  # the fallback builds the model: the formula path's limits first
        raise UnknownModelType(f"{exc}: a ModelSpec needs llmcalc's formula (every command counts the model with "
                               f"transformers instead)", raw, name, outer,
                               note=f"{exc}; counted by transformers") from None
    if model_type in SCORE_BIAS_STORED and kw.get("n_experts"):
        kw["router_score_bias"] = True
    spans = kw.get("attention_spans")
    if spans is not None and any(t != "full" for t in spans):
        chunked = "chunked" in spans
        size = kw["attention_chunk" if chunked else "attention_window"]
        local = sum(1 for t in spans if t != "full")
        notes += (f"{local} of {len(spans)} layers use {'chunked' if chunked else 'sliding-window'} attention "
                  f"({'chunks' if chunked else 'a window'} of {size:,} tokens): FLOPs count their S² terms in "
                  f"full, as the masked eager attention (and torch's FlopCounterMode) does; a windowed kernel "
                  f"does less",)
    notes += _sparse_attention_notes(kw)
    mtp = merged.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and mtp > 0:  # DeepSeek-V3, GLM-4.5, Kimi-K2, Nemotron-H: mtp.* weights not loaded
        notes += (f"num_nextn_predict_layers {mtp}: the multi-token-prediction layers are not part of the "
                  f"transformers model and are not counted (nor their FLOPs)",)
    kw["name"] = name
    kw["model_type"] = model_type
    kw["notes"] = tuple(kw.get("notes", ())) + notes
    # The checkpoint as stored (analytic/quant.py): its quantization_config, the dtype of what it leaves
    # unquantized, and the MTP layers it holds beyond transformers' model (num_nextn_predict_layers: DeepSeek-V3,
    # GLM-4.5; mtp_num_hidden_layers: Qwen3-Next).
    kw["quantization_config"] = quant if quant is not None else hf.get("quantization_config")
    if isinstance(stored, str):
        kw["checkpoint_dtype"] = stored
    n_mtp = merged.get("num_nextn_predict_layers", merged.get("mtp_num_hidden_layers"))
    if isinstance(n_mtp, int) and not isinstance(n_mtp, bool) and n_mtp > 0:
        kw["n_mtp_layers"] = n_mtp
    return construct(SpecDraft, kw)  # SpecDraft(**kw), without its 97-argument __init__


def _read_family(family: Family, model_type: str | None, hf: dict) -> tuple[dict, dict, dict]:
    """(the config unaliased, merged with the class defaults, the SpecDraft fields) of one family's config: HF_KEYS,
    the activation, the derive step, per-layer lists and windows; NoFormula where no formula covers a part."""
    hf = family.unalias(hf)
    merged = {**family.defaults, **{k: v for k, v in hf.items() if v is not None or k in family.keep_null}}
    kw: dict = {}
    sources: dict[str, str] = {}
    present = {k: v for k, v in hf.items() if v is not None}
    for spec_field, keys in HF_KEYS.items():  # the config's own key (any alias) before a class default
        value = _first(present, keys)
        value = _first(merged, keys) if value is None else value
        if value is not None:
            kw[spec_field] = value
            sources[spec_field] = next((k for k in keys if present.get(k) is not None), keys[0])
    missing = [k for k in ("n_layers", "d_model", "n_heads", "vocab_size") if k not in kw]
    if missing:
        names = ", ".join(f"{k} ({'/'.join(HF_KEYS[k])})" for k in missing)
        raise SpecError(f"config is missing {names}")
    activation = _first(merged, ACTIVATION_KEYS)
    if activation is not None:
        kw["mlp"] = mlp_kind(activation, family.gated)
    elif not family.gated:
        kw["mlp"] = "gelu"
    kw.update(family.implicit)
    _per_layer_lists(family, model_type, kw, sources)
    if family.derive is not None:
        family.derive(merged, kw)
    # Explicit llmcalc keys in the file win over everything (how an unknown model_type is described).
    # HF's own `layer_types` (Gemma 3 / gpt-oss "sliding_attention", LFM2 "conv", Qwen3-Next
    # "linear_attention") means something else: a known family translates it in its derive step.
    hf_owned = ("name", "model_type") + (("layer_types",) if model_type in FAMILIES else ())
    kw.update({k: v for k, v in hf.items() if k in _SPEC_FIELDS and k not in hf_owned})
    _moe_layer_mask(kw, sources)
    if "attention_spans" not in kw and isinstance(kw.get("n_layers"), int):
        kw.update(_attention_spans(model_type, hf, kw["n_layers"]))  # the config as given: null is not absent
    return hf, merged, kw


# Spec fields a config may give per layer (a JSON list of whole numbers where HF_KEYS reads one): MiMo-V2-Flash's
# and MiniMax-M3's moe_layer_freq masks, HunYuan-MoE's moe_topk, Gemma 3n's intermediate_size, ERNIE-4.5-VL's
# moe_intermediate_size. moe_layer_freq's list is read as the per-layer MoE mask (_moe_layer_mask); a family reads
# its own (Family.per_layer); any other has no formula (NoFormula: transformers counts the model).
PER_LAYER_FIELDS = ("n_heads", "n_kv_heads", "d_head", "d_ff", "n_experts", "n_experts_per_token", "n_shared_experts",
                    "d_ff_expert", "moe_layer_freq")
PER_LAYER_KEYS = frozenset(k for f in PER_LAYER_FIELDS for k in HF_KEYS[f])


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(values: list) -> str:
    """A per-layer list as a line shows it: its first entries and its length."""
    head = ", ".join(str(v) for v in values[:4])
    return f"[{head}{', ...' if len(values) > 4 else ''}] ({len(values)} entries)"


def _per_layer_lists(family: Family, model_type: str | None, kw: dict, sources: dict[str, str]) -> None:
    """Per-layer lists before the derive step reads the fields: the family's own (Family.per_layer) left to it,
    moe_layer_freq to _moe_layer_mask, any other NoFormula (no formula reads that width, head count or expert
    count per layer; transformers' modelling code decides what it means)."""
    for spec_field in PER_LAYER_FIELDS:
        value, key = kw.get(spec_field), sources.get(spec_field, "")
        if not isinstance(value, list) or spec_field == "moe_layer_freq":
            continue
        if key in family.per_layer:
            kw.pop(spec_field)  # the derive step reads the list from the config itself
            continue
        raise NoFormula(f"{model_type} with {key} given per layer {_shown(value)}: no formula for a per-layer {key}")


def _moe_layer_mask(kw: dict, sources: dict[str, str]) -> None:
    """moe_layer_freq given per layer, read as the per-layer MoE mask: layer i (from the first n_dense_layers on,
    as the whole-number rule) is MoE where its entry is 1 (MiMo-V2-Flash, MiniMax-M3: configuration_minimax_m3_vl.py
    and configuration_step3p7.py map it to mlp_layer_types "sparse"/"dense"; configuration_dots3_note.py reads it
    with first_k_dense_replace as here). A family that lays out its MoE layers itself (moe_layers) keeps its rule."""
    mask = kw.get("moe_layer_freq")
    if not isinstance(mask, list):
        return
    kw.pop("moe_layer_freq")
    n_layers = kw["n_layers"]
    if len(mask) != n_layers or any(v not in (0, 1) for v in mask):
        raise SpecError(f"{sources['moe_layer_freq']} given per layer must hold 0 (dense) or 1 (MoE) for each of the "
                        f"{n_layers} layers, got {_shown(mask)}")
    if kw.get("n_experts") and kw.get("moe_layers") is None:
        dense = kw.get("n_dense_layers") or 0
        kw["moe_layers"] = tuple(i for i, v in enumerate(mask) if v and i >= dense)


def _sparse_attention_notes(kw: dict) -> tuple[str, ...]:
    """What a sparse-attention step computes beside what the FLOPs count (the masked eager attention, as torch's
    FlopCounterMode sees it): DeepSeek Sparse Attention's indexer and top-k (modeling_deepseek_v32.py,
    modeling_glm_moe_dsa.py), DeepSeek-V4's compressed entries (modeling_deepseek_v4.py)."""
    topk, compress = kw.get("index_topk"), kw.get("kv_compress")
    if compress is not None:
        csa, hca = compress.count("csa"), compress.count("hca")
        return (f"DeepSeek-V4 attention: every layer attends its window of {kw['attention_window']:,} keys, and "
                f"{csa} CSA layers (one entry per {kw.get('kv_compress_csa', 0)} tokens, a lightning indexer picks "
                f"the {topk or 0:,} best) and {hca} HCA layers (one entry per {kw.get('kv_compress_hca', 0)} tokens, "
                f"all read) add compressed keys; FLOPs count every query against the whole window mask and every "
                f"compressed entry, as the masked eager attention (and torch's FlopCounterMode) does; a sparse "
                f"kernel reads window + top-k (CSA) or window + S/{kw.get('kv_compress_hca', 0)} (HCA) keys per "
                f"query",)
    if topk:
        layers = kw.get("index_layers")
        n = len(layers) if layers is not None else kw["n_layers"]
        return (f"DeepSeek Sparse Attention: {n} of {kw['n_layers']} layers run a lightning indexer "
                f"({kw['index_n_heads']} heads of {kw['index_head_dim']}) over every earlier key"
                f"{' (the others reuse the previous top-k)' if n < kw['n_layers'] else ''}; attention then reads the "
                f"{topk:,} best keys per query. FLOPs count the indexer "
                f"and the attention's S² terms in full, as the masked eager attention (and torch's "
                f"FlopCounterMode) does; a DSA kernel's attention reads min(S, {topk:,}) keys per query",)
    return ()


# Hybrid and state-space model_types (Mamba, Mamba-2, Jamba, Bamba, Nemotron-H, ...): hf_ssm.py.
FAMILIES.update(SSM_FAMILIES)
