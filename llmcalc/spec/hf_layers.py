"""Per-layer structure read from a config for ``llmcalc.spec.hf``: lists given per layer (``per_layer_lists``,
``moe_layer_mask``) and windowed attention laid out layer by layer as each transformers config class lays it out
(``WINDOWED``, ``attention_spans``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .draft import SpecError
from .hf_family import Family, NoFormula
from .hf_keys import PER_LAYER_FIELDS, shown


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


def attention_spans(model_type: str | None, hf: dict, n_layers: int) -> dict[str, Any]:
    """attention_spans, attention_window, attention_chunk of a family with windowed layers (WINDOWED), or {}."""
    rule = WINDOWED.get(model_type or "")
    if rule is None:
        return {}
    key, default, span_of = rule
    size = hf.get(key, default)  # the config's own value, null included, else the class default
    if isinstance(size, list):
        raise NoFormula(f"{model_type} with {key} given per layer {shown(size)}: no formula for a window per layer")
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


def per_layer_lists(family: Family, model_type: str | None, kw: dict, sources: dict[str, str]) -> None:
    """Per-layer lists before the derive step reads the fields: the family's own (Family.per_layer) left to it,
    moe_layer_freq to moe_layer_mask, any other NoFormula (no formula reads that width, head count or expert
    count per layer; transformers' modelling code decides what it means)."""
    for spec_field in PER_LAYER_FIELDS:
        value, key = kw.get(spec_field), sources.get(spec_field, "")
        if not isinstance(value, list) or spec_field == "moe_layer_freq":
            continue
        if key in family.per_layer:
            kw.pop(spec_field)  # the derive step reads the list from the config itself
            continue
        raise NoFormula(f"{model_type} with {key} given per layer {shown(value)}: no formula for a per-layer {key}")


def moe_layer_mask(kw: dict, sources: dict[str, str]) -> None:
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
                        f"{n_layers} layers, got {shown(mask)}")
    if kw.get("n_experts") and kw.get("moe_layers") is None:
        dense = kw.get("n_dense_layers") or 0
        kw["moe_layers"] = tuple(i for i, v in enumerate(mask) if v and i >= dense)
