"""Read (and write) Hugging Face config.json dicts as ModelSpecs.

Two tables do all the work:
- ``HF_KEYS`` maps HF key names (and their per-family aliases) to ModelSpec fields.
- ``FAMILIES`` says, per ``model_type``, what HF leaves implicit in the modelling code (gated MLP,
  norm kind, which linears carry biases, position embeddings), and the HF class defaults that
  apply when a config.json omits a key. Each entry names the transformers file it mirrors.
Nothing is inferred from a model's name.

A config whose model_type is not in FAMILIES still works when it states the implicit facts itself
with llmcalc's own keys (``REQUIRED_FOR_UNKNOWN``), e.g. ``"mlp": "swiglu", "norm": "rmsnorm"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable

from .spec import ModelSpec, SpecError

# ModelSpec field -> HF keys, first present (and not null) wins.
HF_KEYS: dict[str, tuple[str, ...]] = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers"),
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "n_heads": ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "d_head": ("head_dim", "d_kv"),
    "d_ff": ("intermediate_size", "n_inner", "ffn_hidden_size", "d_ff", "encoder_ffn_dim"),
    "vocab_size": ("vocab_size",),
    "max_seq_len": ("max_position_embeddings", "n_positions"),
    "tie_embeddings": ("tie_word_embeddings",),
    "n_decoder_layers": ("num_decoder_layers", "decoder_layers"),
    "type_vocab_size": ("type_vocab_size",),
    "rel_pos_buckets": ("relative_attention_num_buckets",),
    "n_experts": ("num_local_experts", "n_routed_experts"),
    "n_experts_per_token": ("num_experts_per_tok",),
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
_SPEC_FIELDS = {f.name for f in fields(ModelSpec)}


@dataclass(frozen=True)
class Family:
    """What one HF model_type leaves implicit. `source` names the modelling file it mirrors."""

    source: str
    implicit: dict  # ModelSpec fields fixed by the modelling code
    defaults: dict = field(default_factory=dict)  # HF config-class defaults for absent keys
    derive: Callable[[dict, dict], None] | None = None  # (hf config, spec kwargs) -> fills kwargs
    gated: bool = True  # FFN with gate/up/down (SwiGLU/GeGLU) rather than up/down


def _attention_bias(hf: dict, kw: dict) -> None:
    # LlamaAttention & co.: one `attention_bias` flag on q/k/v/o; `mlp_bias` on the MLP.
    bias = bool(hf.get("attention_bias", False))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False)))


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


def _deepseek(hf: dict, kw: dict) -> None:
    _attention_bias(hf, kw)
    if hf.get("n_routed_experts") is None:  # a dense DeepSeek: no MoE fields at all
        for key in ("n_experts", "n_experts_per_token", "n_shared_experts", "d_ff_expert", "n_dense_layers"):
            kw.pop(key, None)
    kw["n_kv_heads"] = kw["n_heads"]  # MLA: one latent serves per-head keys and values


def _marian(hf: dict, kw: dict) -> None:
    # MarianConfig has separate encoder_*/decoder_* sizes; llmcalc models symmetric stacks.
    for enc, dec in (("encoder_ffn_dim", "decoder_ffn_dim"), ("encoder_attention_heads", "decoder_attention_heads")):
        if hf.get(dec) is not None and hf.get(enc) is not None and hf[dec] != hf[enc]:
            raise SpecError(f"{enc} ({hf[enc]}) differs from {dec} ({hf[dec]}); llmcalc needs symmetric stacks")
    if hf.get("decoder_vocab_size") not in (None, hf.get("vocab_size")) or not hf.get(
        "share_encoder_decoder_embeddings", True
    ):
        raise SpecError("separate encoder and decoder vocabularies are not supported; share the embeddings")



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
        "models/deepseek_v3/modeling_deepseek_v3.py: MLA + MoE; e_score_correction_bias is a buffer",
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


def _mlp_kind(activation: str, gated: bool) -> str:
    act = activation.lower()
    if act in ("silu", "swish"):
        return "swiglu" if gated else "silu"
    if act.startswith("gelu"):
        return "geglu" if gated else "gelu"
    if act == "relu" and not gated:
        return "relu"
    raise SpecError(f"activation {activation!r} is not supported for a {'gated' if gated else 'plain'} MLP")


def _first(hf: dict, keys: tuple[str, ...]):
    for key in keys:
        if hf.get(key) is not None:
            return hf[key]
    return None


# Config keys read as flags: JSON true/false only ("false" as a string would read as true).
BOOL_KEYS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "new_decoder_architecture", "multi_query",
             "bias", "parallel_attn", "alibi", "use_parallel_residual", "share_encoder_decoder_embeddings")
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
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpecError(f"{key} must be a whole number, got {value!r:.60}")
    for key in ACTIVATION_KEYS:
        if hf.get(key) is not None and not isinstance(hf[key], str):
            raise SpecError(f"{key} must be an activation name such as \"silu\" or \"gelu\", got {hf[key]!r:.60}")
    proj = hf.get("feed_forward_proj")
    if proj is not None and proj not in T5_PROJECTIONS:
        raise SpecError(f"feed_forward_proj must be one of {', '.join(T5_PROJECTIONS)}; got {proj!r:.60}")


def spec_from_hf(hf: dict, name: str = "custom") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json dict (unchanged, as published)."""
    check_config_values(hf)
    model_type = hf.get("model_type")
    family = FAMILIES.get(model_type)
    if family is None:
        missing = [k for k in REQUIRED_FOR_UNKNOWN if k not in hf]
        if missing:
            raise SpecError(
                f"unknown model_type {model_type!r} (known: {', '.join(sorted(FAMILIES))}); "
                f"to describe it anyway add the llmcalc keys {', '.join(missing)} to the config "
                f"(e.g. \"mlp\": \"swiglu\", \"norm\": \"rmsnorm\", \"pos_emb\": \"rope\")"
            )
        family = Family("explicit llmcalc keys", {}, {}, _attention_bias, gated=hf["mlp"] in ("swiglu", "geglu"))
    merged = {**family.defaults, **{k: v for k, v in hf.items() if v is not None}}
    kw: dict = {}
    for spec_field, keys in HF_KEYS.items():
        value = _first(merged, keys)
        if value is not None:
            kw[spec_field] = value
    missing = [k for k in ("n_layers", "d_model", "n_heads", "vocab_size") if k not in kw]
    if missing:
        names = ", ".join(f"{k} ({'/'.join(HF_KEYS[k])})" for k in missing)
        raise SpecError(f"config is missing {names}")
    activation = _first(merged, ACTIVATION_KEYS)
    if activation is not None:
        kw["mlp"] = _mlp_kind(activation, family.gated)
    elif not family.gated:
        kw["mlp"] = "gelu"
    kw.update(family.implicit)
    if family.derive is not None:
        family.derive(merged, kw)
    # Explicit llmcalc keys in the file win over everything (how an unknown model_type is described).
    kw.update({k: v for k, v in hf.items() if k in _SPEC_FIELDS and k not in ("name", "model_type")})
    kw["name"] = name
    kw["model_type"] = model_type
    return ModelSpec(**kw)

