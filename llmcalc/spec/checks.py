"""The checks of a spec: every contradiction is one ``SpecError`` naming the fields, in a fixed order.

They read a ``SpecDraft`` whose derived values are filled in (``resolve`` fills them, then checks; a
``ModelSpec`` checks its own ``to_draft()`` on every construction, ``dataclasses.replace`` included), so
there is one copy of each rule and of each message.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..dtypes import DTYPES
from ..validate import MAX_LAYERS, MAX_WIDTH
from .draft import (
    ARCHITECTURES,
    ATTENTION_SPANS,
    K_EQ_V,
    KV_COMPRESS,
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
           ("qk_norm", QK_NORMS), ("k_eq_v", K_EQ_V))


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
    if spec.ssm_state_dtype is not None and spec.ssm_state_dtype not in DTYPES:
        raise SpecError(f"ssm_state_dtype must be one of {', '.join(DTYPES)} (or null); got {spec.ssm_state_dtype!r}")


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
    _validate_attention_kinds(spec)


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


def check_maximum(name: str, value: int) -> None:
    """The sane maximum of the whole-number field `name` (layer counts: MAX_LAYERS, any other size: MAX_WIDTH), or
    the one SpecError that names it; the transformers fallback holds a config's keys to it too (hf.check_sizes)."""
    limit = MAX_LAYERS if name in ("n_layers", "n_decoder_layers", "n_dense_layers") else MAX_WIDTH
    if value > limit:
        shown = f"{value:,}" if value < 10**15 else f"a {len(str(value))}-digit number"
        raise SpecError(f"{name} ({shown}) is beyond the sane maximum of {limit:,}")


def _validate_ranges(spec: SpecDraft) -> None:
    """Required sizes positive, optional ones positive when given, counts non-negative, all below sane maxima."""
    for name in ("n_layers", "d_model", "n_heads", "vocab_size", "n_kv_heads", "d_head"):
        positive(spec, name)
    for name in INT_FIELDS:  # sane maxima: short loops, finite sums
        check_maximum(name, getattr(spec, name) or 0)
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
    elif spec.q_lora_rank is not None and spec.k_eq_v != "all":
        raise SpecError("q_lora_rank is only used with MLA (set kv_lora_rank too) or with DeepSeek-V4's shared K=V "
                        "head (k_eq_v \"all\")")


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


def _indices(spec: SpecDraft, name: str) -> None:
    value = getattr(spec, name)
    if value is None:
        return
    if not isinstance(value, tuple) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < spec.n_layers
                                           for i in value):
        raise SpecError(f"{name} must be layer indices in 0..{spec.n_layers - 1}, got {value!r:.80}")


def _validate_attention_kinds(spec: SpecDraft) -> None:  # long: one rule per new field, read top to bottom
    """Issue 22's attention kinds: per-span geometry, K = V, KV-shared layers, per-layer embeddings, the lightning
    indexer, DeepSeek-V4's grouped output, compressed KV and hyper-connections; each needs its widths."""
    for name in ("d_head_global", "n_kv_heads_global", "d_ff_kv_shared", "per_layer_embed_dim",
                 "per_layer_embed_vocab", "o_groups", "o_lora_rank", "kv_compress_csa", "kv_compress_hca", "hc_mult"):
        if getattr(spec, name) is not None:
            positive(spec, name)
    if spec.n_kv_heads_global is not None and spec.n_heads % spec.n_kv_heads_global:
        raise SpecError(f"n_heads ({spec.n_heads}) must be a multiple of n_kv_heads_global ({spec.n_kv_heads_global})")
    uniform = spec.architecture == "decoder" and spec.layer_types is None
    given = (("d_head_global", spec.d_head_global), ("n_kv_heads_global", spec.n_kv_heads_global),
             ("kv_shared_layers", spec.kv_shared_layers), ("kv_compress", spec.kv_compress), ("hc_mult", spec.hc_mult),
             ("per_layer_embed_dim", spec.per_layer_embed_dim), ("k_eq_v", spec.k_eq_v != "none"),
             ("o_groups", spec.o_groups))
    extras = [name for name, on in given if on]
    if extras and not uniform:
        raise SpecError(f"{', '.join(extras)}: supported in decoder-only models whose layers are all attention + FFN "
                        f"(no layer_types)")
    if spec.kv_lora_rank is not None and extras:
        raise SpecError(f"{', '.join(extras)} are not modelled with MLA")
    if not 0 <= spec.kv_shared_layers < spec.n_layers:
        raise SpecError(f"kv_shared_layers ({spec.kv_shared_layers}) must be between 0 and n_layers - 1 "
                        f"({spec.n_layers - 1}): some layer must compute its own K/V")
    if spec.kv_shared_layers:
        spans = spec.attention_spans or ("full",) * spec.n_layers
        first = spec.n_layers - spec.kv_shared_layers
        missing = sorted(set(spans[first:]) - set(spans[:first]))
        if missing:
            raise SpecError(f"kv_shared_layers: the shared layers' spans {missing} have no earlier layer of the same "
                            f"span to read K/V from")
    if spec.moe_dense_parallel and not (spec.n_experts > 0 and spec.d_ff):
        raise SpecError("moe_dense_parallel (a dense FFN beside the experts) needs n_experts > 0 and d_ff")
    if (spec.router_scales or spec.router_score_bias) and not spec.n_experts > 0:
        raise SpecError("router_scales/router_score_bias given but n_experts is 0")
    latent = spec.moe_latent_size
    if latent is not None and not (spec.n_experts and isinstance(latent, int) and latent > 0):
        raise SpecError(f"moe_latent_size (the routed experts' latent width) must be a positive whole number in a "
                        f"model with experts; got {latent!r}")
    hashed = spec.moe_hash_layers
    if hashed is not None and not (spec.n_experts and isinstance(hashed, int) and 0 < hashed <= spec.n_layers):
        raise SpecError(f"moe_hash_layers (the first layers routing by token id) must be 1 to n_layers "
                        f"({spec.n_layers}) in a model with experts; got {hashed!r}")
    _validate_indexer(spec)
    _validate_v4(spec)


def _validate_indexer(spec: SpecDraft) -> None:
    given = [n for n in ("index_n_heads", "index_head_dim", "index_topk") if getattr(spec, n) is not None]
    if given and len(given) < 3:
        raise SpecError("the lightning indexer needs index_n_heads, index_head_dim and index_topk together")
    _indices(spec, "index_layers")
    if not given:
        if spec.index_layers is not None:
            raise SpecError("index_layers given but no indexer (index_n_heads, index_head_dim, index_topk)")
        return
    for name in given:
        positive(spec, name)
    if not (spec.q_lora_rank or 0) > 0:
        raise SpecError("the lightning indexer reads the low-rank query latent: it needs q_lora_rank")


def _validate_v4(spec: SpecDraft) -> None:
    if (spec.o_groups is None) != (spec.o_lora_rank is None):
        raise SpecError("a grouped low-rank output needs o_groups and o_lora_rank together")
    if spec.o_groups is not None and (spec.n_heads * (spec.d_head or 0)) % spec.o_groups:
        raise SpecError(f"o_groups ({spec.o_groups}) must divide n_heads x d_head ({spec.n_heads} x {spec.d_head})")
    compress = spec.kv_compress
    if compress is None:
        return
    if not isinstance(compress, tuple) or len(compress) != spec.n_layers or any(c not in KV_COMPRESS for c in compress):
        raise SpecError(f"kv_compress must give one of {', '.join(KV_COMPRESS)} per layer ({spec.n_layers}); "
                        f"got {compress!r:.80}")
    for kind, rate in (("csa", "kv_compress_csa"), ("hca", "kv_compress_hca")):
        if kind in compress:
            positive(spec, rate)
    if "csa" in compress and spec.index_n_heads is None:
        raise SpecError("kv_compress \"csa\" layers pick their compressed entries with a lightning indexer: give "
                        "index_n_heads, index_head_dim and index_topk")
