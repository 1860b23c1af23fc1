"""The checks of a spec: every contradiction is one ``SpecError`` naming the fields, in a fixed order.

They read a ``SpecDraft`` whose derived values are filled in (``resolve`` fills them, then checks; a
``ModelSpec`` checks its own ``to_draft()`` on every construction, ``dataclasses.replace`` included), so
there is one copy of each rule and of each message.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..validate import MAX_LAYERS, MAX_WIDTH
from .draft import (
    ARCHITECTURES,
    ATTENTION_SPANS,
    LAYER_FFNS,
    LAYER_MIXERS,
    MLPS,
    NORMS,
    POS_EMBS,
    QK_NORMS,
    REQUIRED,
    SpecDraft,
    SpecError,
    is_moe_layer,
    parse_layer,
)

INT_FIELDS = tuple(f.name for f in fields(SpecDraft) if f.type in ("int", "int | None"))
BOOL_FIELDS = tuple(f.name for f in fields(SpecDraft) if f.type in ("bool", "bool | None"))
CHOICES = (("architecture", ARCHITECTURES), ("mlp", MLPS), ("norm", NORMS), ("pos_emb", POS_EMBS),
           ("qk_norm", QK_NORMS))


def check(draft: SpecDraft) -> None:
    """Types first (a formula must not meet a string), then every shape rule."""
    check_types(draft)
    validate(draft)


def check_types(spec: SpecDraft) -> None:
    """Whole numbers where the spec counts, JSON booleans for flags, known names for the choices."""
    for name in INT_FIELDS:
        value = getattr(spec, name)
        if value is None and name not in REQUIRED:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{name} must be a whole number, got {value!r}")
    for name in BOOL_FIELDS:
        value = getattr(spec, name)
        if value is not None and not isinstance(value, bool):
            raise SpecError(f"{name} must be true or false, got {value!r}")
    if spec.quantization_config is not None and not isinstance(spec.quantization_config, dict):
        raise SpecError(f"quantization_config must be a JSON object, got {spec.quantization_config!r:.60}")
    if spec.checkpoint_dtype is not None and not isinstance(spec.checkpoint_dtype, str):
        raise SpecError(f"checkpoint_dtype must be a dtype name such as \"bfloat16\", got "
                        f"{spec.checkpoint_dtype!r:.60}")
    for name, allowed in CHOICES:
        if getattr(spec, name) not in allowed:
            raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {getattr(spec, name)!r}")


def positive(spec: SpecDraft, name: str) -> int:
    """The field `name` as a whole number >= 1, or the one SpecError that says it is not."""
    value: Any = getattr(spec, name)
    if value is None:
        raise SpecError(f"{name} must be a positive whole number; none is given")
    if value <= 0:
        raise SpecError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


def validate(spec: SpecDraft) -> None:
    """Every contradiction in a (derived) draft is one SpecError naming the fields; checked in this order."""
    _validate_ranges(spec)
    if spec.layer_types is not None:
        _validate_layers(spec)
    _validate_block(spec)
    _validate_moe(spec)
    _validate_mla(spec)
    _validate_spans(spec)


def _validate_spans(spec: SpecDraft) -> None:
    """Windowed attention: one span per decoder layer, each with its window or chunk size."""
    for name in ("attention_window", "attention_chunk"):
        if getattr(spec, name) < 0:
            raise SpecError(f"{name} must be zero or positive, got {getattr(spec, name)}")
    spans = spec.attention_spans
    if spans is None:
        return
    if not isinstance(spans, tuple) or not all(isinstance(s, str) for s in spans):
        raise SpecError(f"attention_spans must be a list of strings, got {spans!r:.80}")
    if spec.architecture != "decoder":
        raise SpecError("attention_spans (sliding-window and chunked layers) are supported in decoder-only models")
    if len(spans) != spec.n_layers:
        raise SpecError(f"attention_spans has {len(spans)} entries for n_layers={spec.n_layers}; give one per layer")
    bad = sorted({s for s in spans if s not in ATTENTION_SPANS})
    if bad:
        raise SpecError(f"attention_spans may name {', '.join(ATTENTION_SPANS)}; got {', '.join(map(repr, bad))}")
    for kind, size in (("sliding", "attention_window"), ("chunked", "attention_chunk")):
        if kind in spans and getattr(spec, size) <= 0:
            raise SpecError(f"{kind} layers need {size} > 0 (tokens), got {getattr(spec, size)}")


def _ffn(spec: SpecDraft, index: int) -> str | None:
    """The FFN kind of layer `index` ("mlp", "moe" or None), by the same rule as ModelSpec.layer_parts."""
    if spec.layer_types is not None:
        return parse_layer(spec.layer_types[index])[1]
    return "moe" if _is_moe_layer(spec, index) else "mlp"


def _is_moe_layer(spec: SpecDraft, index: int) -> bool:
    return is_moe_layer(index, layer_types=spec.layer_types, moe_layers=spec.moe_layers, n_experts=spec.n_experts,
                        n_dense_layers=spec.n_dense_layers, moe_layer_freq=spec.moe_layer_freq)


def _validate_ranges(spec: SpecDraft) -> None:
    """Required sizes positive, optional ones positive when given, counts non-negative, all below sane maxima."""
    for name in ("n_layers", "d_model", "n_heads", "vocab_size", "n_kv_heads", "d_head"):
        positive(spec, name)
    for name in INT_FIELDS:  # sane maxima: short loops, finite sums
        limit = MAX_LAYERS if name in ("n_layers", "n_decoder_layers", "n_dense_layers") else MAX_WIDTH
        value = getattr(spec, name) or 0
        if value > limit:
            shown = f"{value:,}" if value < 10**15 else f"a {len(str(value))}-digit number"
            raise SpecError(f"{name} ({shown}) is beyond the sane maximum of {limit:,}")
    for name in ("d_ff", "max_seq_len", "n_decoder_layers", "n_positions", "q_lora_rank", "d_embed", "d_ff_shared"):
        if getattr(spec, name) is not None:
            positive(spec, name)
    for name in ("type_vocab_size", "rel_pos_buckets", "n_experts", "n_shared_experts", "n_dense_layers"):
        if getattr(spec, name) < 0:
            raise SpecError(f"{name} must be zero or positive, got {getattr(spec, name)}")


def _validate_block(spec: SpecDraft) -> None:
    """Head grouping, the block's norm layout, the architecture and the position embedding."""
    n_kv_heads = positive(spec, "n_kv_heads")  # derived before the checks (default: n_heads)
    if spec.n_heads % n_kv_heads:
        raise SpecError(
            f"n_heads ({spec.n_heads}) must be a multiple of n_kv_heads ({spec.n_kv_heads}): "
            f"each key/value head serves a whole group of query heads"
        )
    if spec.parallel_residual and spec.norms_per_layer not in (1, 2):
        raise SpecError(f"a parallel-residual block has 1 or 2 norms, got norms_per_layer={spec.norms_per_layer}")
    if not spec.parallel_residual and spec.norms_per_layer not in (2, 4):
        raise SpecError(f"a sequential block has 2 norms (4 with Gemma-2's sandwich norms), "
                        f"got norms_per_layer={spec.norms_per_layer}")
    if spec.post_norm and (spec.parallel_residual or spec.norms_per_layer != 2):
        raise SpecError("post_norm blocks are sequential with 2 norms")
    if spec.architecture == "encoder-decoder":
        if spec.n_decoder_layers is None:
            raise SpecError("an encoder-decoder needs n_decoder_layers")
    elif spec.n_decoder_layers is not None:
        raise SpecError(f"n_decoder_layers ({spec.n_decoder_layers}) is only for encoder-decoder models")
    if spec.pos_emb == "learned" and spec.n_positions is None:
        raise SpecError("learned position embeddings need n_positions (or max_seq_len)")
    if spec.pos_emb == "relative" and spec.rel_pos_buckets <= 0:
        raise SpecError("relative position bias needs rel_pos_buckets > 0")


def _validate_moe(spec: SpecDraft) -> None:
    """Mixture-of-experts fields: consistent when n_experts > 0, absent otherwise; d_ff where MLPs are dense."""
    is_moe = spec.n_experts > 0
    if is_moe:
        if spec.architecture != "decoder":
            raise SpecError("mixture-of-experts layers are supported in decoder-only models")
        if not 1 <= spec.n_experts_per_token <= spec.n_experts:
            raise SpecError(
                f"n_experts_per_token ({spec.n_experts_per_token}) must be between 1 and "
                f"n_experts ({spec.n_experts})"
            )
        positive(spec, "d_ff_expert")
        positive(spec, "moe_layer_freq")
        if spec.n_dense_layers > spec.n_layers:
            raise SpecError(f"n_dense_layers ({spec.n_dense_layers}) exceeds n_layers ({spec.n_layers})")
        if spec.moe_layers is not None:
            bad = [i for i in spec.moe_layers if isinstance(i, bool) or not isinstance(i, int)
                   or not 0 <= i < spec.n_layers]
            if bad:
                raise SpecError(f"moe_layers must be layer indices in 0..{spec.n_layers - 1}, got {bad}")
        if spec.layer_types is not None:  # a Mamba-only layer has no FFN at all
            dense = any(_ffn(spec, i) == "mlp" for i in range(spec.n_layers))
        else:
            dense = sum(_is_moe_layer(spec, i) for i in range(spec.n_layers)) < spec.n_layers
        if dense and spec.d_ff is None:
            raise SpecError("dense layers in an MoE model need d_ff")
    elif spec.layer_types is None or any(_ffn(spec, i) == "mlp" for i in range(spec.n_layers)):
        positive(spec, "d_ff")
    if not is_moe:
        if spec.n_experts_per_token or spec.n_shared_experts:
            raise SpecError("n_experts_per_token/n_shared_experts given but n_experts is 0")
        if spec.router_bias or spec.expert_bias or spec.shared_expert_gate or spec.moe_layers:
            raise SpecError("router_bias/expert_bias/shared_expert_gate/moe_layers given but n_experts is 0")


def _validate_mla(spec: SpecDraft) -> None:
    """Multi-head latent attention (DeepSeek-V2): its ranks and head widths, and what it excludes."""
    if spec.kv_lora_rank is not None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            positive(spec, name)
        nope, rope = positive(spec, "qk_nope_head_dim"), positive(spec, "qk_rope_head_dim")
        if spec.d_head != nope + rope:
            raise SpecError(
                f"with MLA, d_head ({spec.d_head}) must be qk_nope_head_dim + qk_rope_head_dim "
                f"({spec.qk_nope_head_dim} + {spec.qk_rope_head_dim})"
            )
        if spec.n_kv_heads != spec.n_heads:
            raise SpecError("with MLA every query head has its own key/value head: n_kv_heads = n_heads")
        if spec.qk_norm != "none" or spec.attention_sinks:
            raise SpecError("qk_norm and attention_sinks are not modelled with MLA")
    elif spec.q_lora_rank is not None:
        raise SpecError("q_lora_rank is only used with MLA (set kv_lora_rank too)")


def _validate_layers(spec: SpecDraft) -> None:
    types = spec.layer_types
    if not isinstance(types, tuple) or not all(isinstance(t, str) for t in types):
        raise SpecError(f"layer_types must be a list of strings, got {types!r}")
    if len(types) != spec.n_layers:
        raise SpecError(f"layer_types has {len(types)} entries for n_layers={spec.n_layers}; give one per layer")
    if spec.architecture != "decoder":
        raise SpecError("layer_types (hybrid and state-space layers) are supported in decoder-only models")
    for i, entry in enumerate(types):
        parts = entry.split("+")
        mixers = [m for p in parts if p not in LAYER_FFNS for m in p.split("|")]
        ffns = [p for p in parts if p in LAYER_FFNS]
        if not entry or len(ffns) > 1 or len(parts) - len(ffns) > 1 or any(m not in LAYER_MIXERS for m in mixers) \
                or len(set(mixers)) != len(mixers):
            raise SpecError(
                f"layer_types[{i}] = {entry!r} is not '<mixer>+<ffn>' with mixers {', '.join(LAYER_MIXERS)} "
                f"(parallel ones joined by '|') and FFNs {', '.join(LAYER_FFNS)}"
            )
        if "moe" in ffns and not spec.n_experts > 0:
            raise SpecError(f"layer_types[{i}] = {entry!r} has an MoE FFN but n_experts is 0")
    kinds = {m for entry in types for m in parse_layer(entry)[0]}
    if "short_conv" in kinds:
        positive(spec, "ssm_conv_kernel")
    if kinds & {"mamba", "mamba2", "gated_deltanet"}:
        for name in ("ssm_d_inner", "ssm_d_state", "ssm_conv_kernel"):
            positive(spec, name)
    if "mamba" in kinds:
        positive(spec, "ssm_dt_rank")
    if "shared_block" in kinds:
        positive(spec, "shared_blocks")
    if kinds & {"mamba2", "gated_deltanet"}:
        heads, groups = positive(spec, "ssm_n_heads"), positive(spec, "ssm_n_groups")
        if positive(spec, "ssm_d_inner") % heads or heads % groups:
            raise SpecError(
                f"Mamba-2/Gated DeltaNet: ssm_d_inner ({spec.ssm_d_inner}) must be a multiple of ssm_n_heads "
                f"({spec.ssm_n_heads}), itself a multiple of ssm_n_groups ({spec.ssm_n_groups})"
            )
