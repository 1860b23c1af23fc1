"""Config reading for ``llmcalc.spec.hf``: which HF keys name each spec field (``HF_KEYS``, with the per-family
aliases), which may be given per layer (``PER_LAYER_FIELDS``), and the checks on a config's values before anything
reads them (``check_config_values``: JSON types; ``check_sizes``: the formula path's maxima, also for a config
transformers is about to build).
"""

from __future__ import annotations

import math
from typing import Any

from .checks import check_maximum
from .draft import SpecError

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

# Spec fields a config may give per layer (a JSON list of whole numbers where HF_KEYS reads one): MiMo-V2-Flash's
# and MiniMax-M3's moe_layer_freq masks, HunYuan-MoE's moe_topk, Gemma 3n's intermediate_size, ERNIE-4.5-VL's
# moe_intermediate_size. moe_layer_freq's list is read as the per-layer MoE mask (hf_layers.moe_layer_mask); a
# family reads its own (Family.per_layer); any other has no formula (NoFormula: transformers counts the model).
PER_LAYER_FIELDS = ("n_heads", "n_kv_heads", "d_head", "d_ff", "n_experts", "n_experts_per_token", "n_shared_experts",
                    "d_ff_expert", "moe_layer_freq")
PER_LAYER_KEYS = frozenset(k for f in PER_LAYER_FIELDS for k in HF_KEYS[f])


def whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shown(values: list) -> str:
    """A per-layer list as a line shows it: its first entries and its length."""
    head = ", ".join(str(v) for v in values[:4])
    return f"[{head}{', ...' if len(values) > 4 else ''}] ({len(values)} entries)"


def first(hf: dict, keys: tuple[str, ...]) -> Any:
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
        if value is None or whole(value):
            continue
        if key in PER_LAYER_KEYS and isinstance(value, list) and value and all(whole(v) for v in value):
            continue  # one per layer: read by per_layer_lists, moe_layer_mask, or transformers
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
