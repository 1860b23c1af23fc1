"""resolve(draft) -> ModelSpec: what a draft leaves out is derived, then every rule is checked.

Derivations, each only where the draft says nothing (a given value is never overwritten):
n_kv_heads = n_heads (MHA); d_head = d_model / n_heads (MLA: qk_nope_head_dim + qk_rope_head_dim);
norm_bias = (norm is layernorm); n_decoder_layers = n_layers (encoder-decoder); n_positions =
max_seq_len (learned positions); d_ff_expert = d_ff (MoE); d_ff_shared = n_shared_experts·d_ff_expert;
ssm_out_bias = ssm_proj_bias; d_ff_kv_shared = d_ff (KV-shared layers); per_layer_embed_vocab = vocab_size
(per-layer embeddings); JSON lists become tuples. The checks (``checks.validate``) then refuse
every contradiction with one ``SpecError``; what is still absent becomes 0 or ``mla=None`` (see
``llmcalc.spec.model``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..records import construct, replaced
from .checks import check_types, positive, validate
from .draft import REQUIRED, SpecDraft, SpecError
from .model import MLA, MLA_FIELDS, ZERO_IS_NONE, ModelSpec
from .quantization import check_quantization_config


def derive(draft: SpecDraft) -> SpecDraft:
    """The draft with every derivable value that it leaves out filled in (types checked first)."""
    spec = draft
    derived: dict[str, Any] = {}
    if spec.n_kv_heads is None:
        derived["n_kv_heads"] = spec.n_heads
    if spec.d_head is None:
        if spec.kv_lora_rank is not None:
            derived["d_head"] = positive(spec, "qk_nope_head_dim") + positive(spec, "qk_rope_head_dim")
        elif spec.d_model % spec.n_heads == 0:
            derived["d_head"] = spec.d_model // spec.n_heads
        else:
            raise SpecError(
                f"d_model ({spec.d_model}) is not a multiple of n_heads ({spec.n_heads}); "
                f"give d_head (head_dim) explicitly"
            )
    if spec.norm_bias is None:
        derived["norm_bias"] = spec.norm == "layernorm"
    if spec.architecture == "encoder-decoder" and spec.n_decoder_layers is None:
        derived["n_decoder_layers"] = spec.n_layers
    if spec.pos_emb == "learned" and spec.n_positions is None:
        derived["n_positions"] = spec.max_seq_len
    if spec.n_experts and spec.d_ff_expert is None:
        derived["d_ff_expert"] = spec.d_ff
    if isinstance(spec.moe_layers, list):  # from JSON
        derived["moe_layers"] = tuple(spec.moe_layers)
    if isinstance(spec.notes, list):
        derived["notes"] = tuple(spec.notes)
    d_ff_expert = spec.d_ff if spec.n_experts and spec.d_ff_expert is None else spec.d_ff_expert
    if spec.n_shared_experts and spec.d_ff_shared is None and d_ff_expert is not None:
        derived["d_ff_shared"] = spec.n_shared_experts * d_ff_expert
    if spec.ssm_out_bias is None:
        derived["ssm_out_bias"] = spec.ssm_proj_bias
    if isinstance(spec.layer_types, list):  # from JSON: keep the spec hashable and frozen
        derived["layer_types"] = tuple(spec.layer_types)
    if isinstance(spec.attention_spans, list):
        derived["attention_spans"] = tuple(spec.attention_spans)
    for name in ("kv_compress", "index_layers"):
        if isinstance(getattr(spec, name), list):
            derived[name] = tuple(getattr(spec, name))
    if spec.kv_shared_layers and spec.d_ff_kv_shared is None:
        derived["d_ff_kv_shared"] = spec.d_ff
    if spec.per_layer_embed_dim and spec.per_layer_embed_vocab is None:
        derived["per_layer_embed_vocab"] = spec.vocab_size
    return replaced(draft, derived)  # dataclasses.replace(draft, **derived), without SpecDraft's 97-argument __init__


# the draft's fields that the ModelSpec keeps as they are (the MLA ones become its MLA record), in field order
_KEPT = tuple(f.name for f in dataclasses.fields(SpecDraft) if f.name not in MLA_FIELDS)


def resolve(draft: SpecDraft) -> ModelSpec:
    """The ModelSpec a draft describes, or the one SpecError that says why it cannot be one."""
    check_types(draft)
    positive(draft, "n_heads")  # before d_model // n_heads
    filled = derive(draft)
    validate(filled)
    values: dict[str, Any] = {name: getattr(filled, name) for name in _KEPT}
    for name in ZERO_IS_NONE:
        if values[name] is None:
            values[name] = 0
    if filled.kv_lora_rank is None:
        values["query_rank"] = filled.q_lora_rank or 0
    else:
        values["mla"] = MLA(kv_lora_rank=filled.kv_lora_rank, qk_rope_head_dim=positive(filled, "qk_rope_head_dim"),
                            qk_nope_head_dim=positive(filled, "qk_nope_head_dim"),
                            v_head_dim=positive(filled, "v_head_dim"), q_lora_rank=filled.q_lora_rank or 0)
    return construct(ModelSpec, values, _checked=round_trips(filled))  # ModelSpec(**values, _checked=...)


def round_trips(filled: SpecDraft) -> bool:
    """Whether the ModelSpec resolve makes of `filled` (checked) gives `filled` back as its to_draft(), every field
    the same, so that the spec's own check would check `filled` again. It does unless the draft says 0 where the
    spec's 0 reads back as None (ZERO_IS_NONE, and q_lora_rank, kept as the MLA's or query_rank's 0), or gives MLA
    widths without kv_lora_rank (the spec keeps no MLA record then); every other value is copied as it is."""
    return (all(getattr(filled, name) != 0 for name in ZERO_IS_NONE) and filled.q_lora_rank != 0
            and (filled.kv_lora_rank is not None
                 or all(getattr(filled, name) is None for name in MLA_FIELDS if name != "q_lora_rank")))


def spec_of(**fields: Any) -> ModelSpec:
    """A ModelSpec from SpecDraft's keyword arguments: ``spec_of(n_layers=2, d_model=64, n_heads=4,
    vocab_size=100, d_ff=128)`` (tests, benchmarks, and callers that build a model by hand)."""
    return resolve(SpecDraft(**fields))


def draft_from_dict(values: dict, name: str = "custom") -> SpecDraft:
    """A SpecDraft from llmcalc's own field names (a native spec file); unknown keys are an error."""
    known = {f.name for f in dataclasses.fields(SpecDraft)}
    unknown = sorted(k for k in values if k not in known and not k.startswith("_"))
    if unknown:
        raise SpecError(f"unknown spec keys: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise SpecError(f"spec is missing {', '.join(missing)}")
    check_quantization_config(values.get("quantization_config"))
    kwargs = {k: v for k, v in values.items() if k in known}
    kwargs.setdefault("name", name)
    return SpecDraft(**kwargs)


def spec_from_dict(values: dict, name: str = "custom") -> ModelSpec:
    """A ModelSpec from llmcalc's own field names (a native spec file); unknown keys are an error."""
    return resolve(draft_from_dict(values, name))
