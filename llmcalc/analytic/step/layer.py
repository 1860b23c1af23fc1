"""One layer's cost: its GEMMs by part, attention, elementwise bytes, MoE and collectives, in order; the embedding,
LM head and MTP modules."""

from __future__ import annotations

from dataclasses import replace

from ...records import dataclass
from ...spec import ModelSpec
from ..flops import has_backward, layer_ops
from ..kernels import Device, device_for, stream_seconds
from ..memory import RECIPES, lookup
from . import constants
from .attention import _attention_core, _indexer_scores_seconds, _scan_seconds
from .cache import per_call
from .collectives import OverlapGemms, add_ep_comm, add_tp_comm
from .context import ExpertLayout, LayerLayout, StageTimes, StepContext, layer_kind
from .layout import FUSED_GEMMS, REPLICATED, ROW_PARALLEL, STREAMED, Layout
from .moe import _moe_cost


def _part_shape(spec: ModelSpec, group: str, part: str, flops: float, tokens: float) -> tuple[float, float, str]:
    """(k, n, style) of op `group/part` whose forward FLOPs over `tokens` tokens are `flops`: the input width k,
    the output width n, and how tensor parallelism splits it: "column" (n), "row" (k) or "replicated"."""
    D = spec.d_model
    if part in ROW_PARALLEL:
        return flops / (2 * tokens * D), D, "row"
    k: float = D
    if group == "shared_block" and part in ("q_proj", "k_proj", "v_proj"):
        k = 2 * D  # Zamba2's shared block reads [hidden, embeddings]
    elif part == "q_b_proj" and spec.mla is not None:
        k = spec.mla.q_lora_rank
    elif part == "kv_b_proj" and spec.mla is not None:
        k = spec.mla.kv_lora_rank
    elif part == "dt_proj":
        k = spec.ssm_dt_rank
    return k, flops / (2 * tokens * k), "replicated" if part in REPLICATED else "column"


@per_call
def layer_times(spec: ModelSpec, layer: int, lay: Layout, seq_len: int, causal: bool = True, recompute: str = "none",
                dev: Device | None = None, act_bytes: float = 2, attention: str = "flash", dropout: bool = False,
                recipe: str = "bf16-mixed") -> StageTimes:
    """One layer's StageTimes on one rank for one micro-batch of `lay`, as ``predict`` costs it (the same terms,
    at KERNEL_EFFICIENCY), for callers outside a prediction and tests; `causal` counts FLOPs only (the kernel runs
    what a decoder computes); `act_bytes` replaces the recipe's activation bytes; `dev`: H100 SXM unless given."""
    rec = lookup(RECIPES, "recipe", recipe)
    ctx = StepContext(spec, dev or device_for("h100-sxm"), lay, seq_len, replace(rec, act_bytes=act_bytes),
                      attention=attention, dropout=dropout, eff=constants.KERNEL_EFFICIENCY)
    return _layer_cost(ctx, layer, _recomputes(lay, recompute, layer, 0))


def _recomputes(lay: Layout, recompute: str, layer: int, first_in_chunk: int) -> frozenset[str]:
    """What layer `layer` (the chunk starting at `first_in_chunk`) re-runs in its backward: "block" (full), or
    module names."""
    if recompute == "full":
        if lay.recompute_layers and layer - first_in_chunk >= lay.recompute_layers:
            return frozenset()
        return frozenset({"block"})
    if recompute == "selective":
        return frozenset(lay.recompute_modules or ("core_attn",))
    return frozenset()


@dataclass(frozen=True)
class LayerKey:
    """What one layer's cost reads beside the ``StepInputs`` its table is kept under: the layer's kind (mixers, FFN,
    attention span: ``context.layer_kind``), what it recomputes, the layout's layer fields, and for a layer with
    routed experts the expert mesh (None for the others, whose cost reads no expert setting)."""

    kind: tuple
    recompute: frozenset[str]
    layout: LayerLayout
    experts: ExpertLayout | None


def layer_key(ctx: StepContext, i: int, rec: frozenset[str]) -> LayerKey:
    """The ``LayerKey`` of layer `i` recomputing `rec` in this context."""
    kinds = ctx.table("model").get("kinds")
    if kinds is None:
        kinds = ctx.table("model")["kinds"] = _kinds_of(ctx.spec)
    kind = kinds[0][i]
    return LayerKey(kind, rec, ctx.layer_layout, ctx.expert_layout if kind[1] == "moe" else None)


def _layer_cost(ctx: StepContext, i: int, rec: frozenset[str]) -> StageTimes:
    """Layer `i`'s cost (``_layer_cost_uncached``), memoized per ``LayerKey``: layers of one kind cost the same; its
    terms before the MoE block (``_layer_prefix``), which read no expert setting, per the key without its expert
    mesh, so that an MoE layer's expert meshes, dispatchers and EP overlaps share them."""
    key = layer_key(ctx, i, rec)
    table = ctx.table("layer")
    cost = table.get(key)
    if cost is None:
        plans = ctx.table("layer ops")  # the layer's ops, whatever tp: once per layer and tokens
        plan = plans.get((i, ctx.tokens))
        if plan is None:
            plan = plans[i, ctx.tokens] = _layer_ops_plan(ctx.spec, i, ctx.tokens)
        prefixes = ctx.table("layer prefix")
        dense = key if key.experts is None else LayerKey(key.kind, rec, key.layout, None)
        prefix = prefixes.get(dense)
        if prefix is None:
            prefix = prefixes[dense] = _layer_prefix(ctx, i, rec, plan)
        cost = table[key] = _layer_cost_uncached(ctx, i, rec, plan, prefix)
    return cost


def _layer_cost_uncached(ctx: StepContext, i: int, rec: frozenset[str],  # long: one layer's terms in order
                         plan: tuple | None = None, prefix: tuple | None = None) -> StageTimes:
    """Layer `i`'s StageTimes on this rank, recomputing `rec`: its GEMMs, attention cores and scans, MoE block,
    elementwise passes, TP, CP and EP collectives, summed in that order (`plan`: ``_layer_ops_plan``'s, where the
    caller has it; `prefix`: ``_layer_prefix``'s)."""
    spec, lay = ctx.spec, ctx.lay
    tp, T, D, act = lay.tp, ctx.tokens, spec.d_model, ctx.act
    sp = tp if lay.sequence_parallel else 1
    mixers, ffn = spec.layer_parts(i)
    moe = ffn == "moe"
    if plan is None:
        plan = _layer_ops_plan(spec, i, T)
    if prefix is None:
        prefix = _layer_prefix(ctx, i, rec, plan)
    fwd, dgrad, wgrad, redo, moe_parts, elem_fwd, attn_f, attn_b, cp_f, cp_b, overlap = prefix
    t = StageTimes()
    # MoE
    ep_fwd = ep_bwd = 0.0
    if moe:
        m = _moe_cost(ctx, moe_parts, rec)
        fwd, dgrad, wgrad = fwd + m["fwd"], dgrad + m["dgrad"], wgrad + m["wgrad"]
        elem_fwd += m["elem"]
        ep_fwd, ep_bwd = m["ep_fwd"], m["ep_bwd"]
        redo += m["redo"]
    # memory-bound elementwise work, bytes per layer forward (backward twice that)
    norms = spec.norms_in_layer(i) if spec.is_hybrid else spec.norms_per_layer
    blocks = len(mixers) + (ffn is not None)
    elem_norm = norms * 2 * T * D / sp * act
    elem_fwd += elem_norm + blocks * 3 * T * D / sp * act
    if "attention" in mixers:
        heads = (spec.n_heads + spec.n_kv_heads) / tp
        if spec.pos_emb == "rope":
            rope_width = (spec.n_heads + 1) * spec.mla.qk_rope_head_dim / tp if spec.mla else heads * spec.d_head
            elem_fwd += 2 * T * rope_width * act
        if spec.qk_norm != "none":
            elem_fwd += 2 * T * heads * spec.d_head * act
    if ffn == "mlp":
        act_mlp = (3 if spec.gated else 2) * T * spec.d_ff / tp * act
        elem_fwd += act_mlp
        if rec & {"mlp_act", "mlp"}:
            redo += ctx.stream(act_mlp)
    for kind in mixers:
        if kind in ("mamba", "mamba2", "gated_deltanet"):
            elem_fwd += 3 * T * spec.ssm_d_inner / tp * act  # gated norm: read y and z, write
    elem = ctx.stream(elem_fwd)
    if rec & {"layernorm"}:
        redo += ctx.stream(elem_norm)
    if "core_attn" in rec:
        redo += attn_f
    if "alternate_mm" in rec:
        redo += fwd / 2
    t.fwd = fwd + attn_f + elem
    t.gemm_fwd = fwd
    t.bwd_weight = wgrad
    t.bwd_input = dgrad + attn_b + 2 * elem
    passes = 2
    if "block" in rec:
        t.bwd_input += t.fwd
        passes = 3
    else:
        t.bwd_input += redo
    # TP collectives: an all-gather before and a reduce-scatter after each sub-block (all-reduce without SP)
    if tp > 1:
        tp_blocks = len(mixers) + (ffn == "mlp") + (moe and (not lay.alltoall or spec.n_shared_experts > 0))
        add_tp_comm(t, ctx, D, tp_blocks, passes, fwd=fwd, bwd=dgrad + wgrad, gemms=overlap)
    t.cp = cp_f + cp_b
    t.comm_fwd += cp_f
    if moe and lay.alltoall:
        if "block" in rec or "moe" in rec:
            ep_bwd += ep_fwd  # the recomputed forward dispatches and combines again
        add_ep_comm(t, ctx, ep_fwd, ep_bwd)
    return t


def _layer_prefix(ctx: StepContext, i: int, rec: frozenset[str], plan: tuple) -> tuple:
    """_layer_cost_uncached's terms up to the MoE block: (forward, input-gradient and weight-gradient GEMM seconds,
    recomputed forward seconds, the MoE block's FLOPs by part, elementwise forward bytes, attention-core and scan
    forward and backward seconds, exposed CP forward and backward), all read from the layout's dense fields; of `rec`
    only whether it holds mla_up_proj and mlp. The ops' shapes are `plan` (_layer_ops_plan's, whatever tp), each
    GEMM timed and summed in the ops' order."""
    spec, lay = ctx.spec, ctx.lay
    tp, T = lay.tp, ctx.tokens
    mixers, _ = spec.layer_parts(i)
    gemms, streamed, moe_parts = plan
    fwd = dgrad = wgrad = 0.0  # GEMMs
    redo = 0.0  # forward work recomputation repeats
    mla_up, mlp = "mla_up_proj" in rec, "mlp" in rec
    for style, k, n, backward, redone in gemms:
        if style == "column":
            f, d, w = ctx.gemm(T, k, n / tp)
        elif style == "row":
            f, d, w = ctx.gemm(T, k / tp, n)
        else:
            f, d, w = ctx.gemm(T, k, n)
        if not backward:  # the lightning indexer's projections: forward only (flops.NO_BACKWARD)
            d = w = 0.0
        fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
        if redone == "mla_up_proj" and mla_up or redone == "mlp" and mlp:
            redo += f
    elem_fwd = 0.0  # bytes
    for nbytes in streamed:  # depthwise conv over its channels: read + write
        elem_fwd += nbytes / tp * ctx.act
    # attention cores and scans
    attn_f = attn_b = cp_f = cp_b = 0.0
    for kind in mixers:
        if kind in ("attention", "shared_block"):
            a = _attention_core(ctx, i, kind)
            attn_f, attn_b, cp_f, cp_b = attn_f + a[0], attn_b + a[1], cp_f + a[2], cp_b + a[3]
            if kind == "attention" and spec.has_indexer(i):
                attn_f += _indexer_scores_seconds(ctx, i)
        elif kind in ("mamba2", "gated_deltanet", "mamba"):
            s_f, s_b = _scan_seconds(ctx, kind)
            attn_f, attn_b = attn_f + s_f, attn_b + s_b
    overlap = _overlap_gemms(ctx, gemms) if lay.tp_overlap and tp > 1 else None
    return fwd, dgrad, wgrad, redo, dict(moe_parts), elem_fwd, attn_f, attn_b, cp_f, cp_b, overlap


def _overlap_gemms(ctx: StepContext, gemms: tuple) -> OverlapGemms:
    """The layer's tensor-parallel GEMMs (`gemms`: _layer_ops_plan's) whole and as --tp-overlap splits them along
    the tokens (``collectives.OverlapGemms``): column-parallel forwards and row-parallel input gradients in tp
    chunks, row-parallel forwards in TP_OVERLAP_SPLITS chunks (``_split_seconds``)."""
    tp, T = ctx.lay.tp, ctx.tokens
    splits = constants.TP_OVERLAP_SPLITS
    sums = dict.fromkeys(("cf", "cd", "cw", "rf", "rd", "cfs", "rfs", "rds"), 0.0)
    for style, k, n, backward, _ in gemms:
        if not backward:  # the lightning indexer's projections (replicated in Megatron-Core): no TP collective
            continue
        if style == "column":
            f, d, w = ctx.gemm(T, k, n / tp)
            sums["cf"] += f
            sums["cd"] += d
            sums["cw"] += w
            sums["cfs"] += _split_seconds(ctx, tp, (T, k, n / tp))[0]
        elif style == "row":
            f, d, _w = ctx.gemm(T, k / tp, n)
            sums["rf"] += f
            sums["rd"] += d
            sums["rfs"] += _split_seconds(ctx, splits, (T, k / tp, n))[0]
            sums["rds"] += _split_seconds(ctx, tp, (T, k / tp, n))[1]
    return OverlapGemms(column_fwd=sums["cf"], column_dgrad=sums["cd"], column_wgrad=sums["cw"], row_fwd=sums["rf"],
                        row_dgrad=sums["rd"], column_fwd_split=sums["cfs"], row_fwd_split=sums["rfs"],
                        row_dgrad_split=sums["rds"])


def _layer_ops_plan(spec: ModelSpec, i: int, T: float) -> tuple:
    """Layer `i`'s ops (``flops.layer_ops`` over `T` tokens) as _layer_prefix times them, whatever tp: the GEMMs in
    its order, each (how tp splits it, k, n before that split, whether it has a backward, what recomputation of
    `rec` repeats its forward: "mla_up_proj", "mlp" or None), the separate GEMMs in the ops' order then the fused
    ones (QKV, gate+up) in the order they first appear; the depthwise convolutions' bytes (2·T·channels, before tp
    and the activation bytes); the MoE block's FLOPs by part."""
    D = spec.d_model
    ops = layer_ops(spec, i, 1, int(round(T)) or 1, causal=True)  # FLOPs of this rank's tokens (before tp)
    gemms: list[tuple] = []
    streamed: list[float] = []
    fused: dict[tuple[str, str], float] = {}
    moe_parts: dict[str, float] = {}
    for name, flops in ops.items():
        group, part = name.split("/")
        if part in ("scores", "values", "indexer_scores") or part == "scan":
            continue  # the attention core, the lightning indexer's scores and the scans: _layer_prefix's own
        if group == "moe" and part in ("router", "experts", "shared_experts"):
            moe_parts[part] = flops
            continue
        if part in STREAMED:  # depthwise conv over its channels: read + write
            streamed.append(2 * T * (flops / (2 * T * spec.ssm_conv_kernel)))
            continue
        if part in FUSED_GEMMS:
            key = (group, FUSED_GEMMS[part])
            fused[key] = fused.get(key, 0.0) + flops
            continue
        k, n, style = _part_shape(spec, group, part, flops, T)
        gemms.append((style, k, n, has_backward(name), "mla_up_proj" if part in ("q_b_proj", "kv_b_proj") else None))
    for (group, _), fused_flops in fused.items():
        width = D * (2 if group == "shared_block" else 1)  # Zamba2's shared block reads [hidden, embeddings]
        gemms.append(("column", width, fused_flops / (2 * T * width), True, "mlp" if group == "mlp" else None))
    return tuple(gemms), tuple(streamed), moe_parts


def _split_seconds(ctx: StepContext, parts: int, shape: tuple[float, float, float]) -> tuple[float, float, float]:
    """A linear of `shape` (m tokens, k, n) split along its tokens into `parts` chunks, as TE's comm+GEMM overlap runs
    them: round robin on TP_OVERLAP_STREAMS compute streams, so that up to that many chunks run at once and share
    the SMs as one GEMM of their rows would:

        seconds = parts / s x linear(m x s / parts, k, n),  s = min(parts, TP_OVERLAP_STREAMS)

    (each chunk alone would leave waves of SMs idle where m / parts rows make few tiles), never less than the whole
    linear's: the same FLOPs in smaller tiles run no faster."""
    m, k, n = shape
    streams = min(parts, constants.TP_OVERLAP_STREAMS)
    scale = parts / streams
    split = ctx.gemm(m * streams / parts, k, n)
    whole = ctx.gemm(m, k, n)
    return max(split[0] * scale, whole[0]), max(split[1] * scale, whole[1]), max(split[2] * scale, whole[2])


def _head_times(ctx: StepContext) -> StageTimes:
    """LM head matmul (vocab split over tp) and the softmax/cross-entropy over the logits (fp32: written, read,
    gradient written), and the embedding lookup's gather and scatter-add."""
    spec, lay = ctx.spec, ctx.lay
    T = ctx.tokens
    f, d, w = ctx.gemm(T, spec.d_model, spec.vocab_size / lay.tp)
    loss = loss_seconds(T, spec.vocab_size, lay.tp, ctx.dev, ctx.eff)
    return StageTimes(fwd=f + loss, bwd_input=d, bwd_weight=w, gemm_fwd=f)


def loss_seconds(tokens: float, vocab: float, tp: int, dev: Device, efficiency: float) -> float:
    """The softmax / cross-entropy over one rank's logits (`vocab` / `tp` of them per token, fp32): the logits
    written, read, and their gradient written, T·V/tp·4 B·3 at the HBM rate (memory-bound)."""
    return stream_seconds(tokens * vocab / tp * 4 * 3, dev, efficiency)


def _embedding_times(ctx: StepContext) -> StageTimes:
    return embedding_times(ctx.tokens, ctx.spec.d_model, ctx.act, ctx.dev, ctx.eff)


def embedding_times(tokens: float, d_model: float, act: float, dev: Device, efficiency: float) -> StageTimes:
    """The embedding lookup of one micro-batch: the forward gathers T rows of `d_model` (T·D·act bytes); the
    backward's scatter-add of their gradients into the table reads and writes, 3·T·D·act bytes, both at the HBM
    rate."""
    nbytes = tokens * d_model * act
    return StageTimes(fwd=stream_seconds(nbytes, dev, efficiency), bwd_weight=stream_seconds(3 * nbytes, dev,
                                                                                            efficiency))


def _mtp_times(ctx: StepContext, recompute: str) -> StageTimes:
    """One multi-token-prediction module (DeepSeek-V3 sec. 2.2, Megatron-Core's MTP on the last stage): two norms,
    the projection of [h; emb] (2D -> D), one decoder layer like the model's last, the shared LM head again."""
    spec = ctx.spec
    t = StageTimes()
    t.add(_layer_cost(ctx, spec.n_layers - 1, _recomputes(ctx.lay, recompute, spec.n_layers - 1, spec.n_layers - 1)))
    f, d, w = ctx.gemm(ctx.tokens, 2 * spec.d_model, spec.d_model)
    t.add(StageTimes(fwd=f, bwd_input=d, bwd_weight=w, gemm_fwd=f))
    t.add(_head_times(ctx))
    return t


def _kinds_of(spec: ModelSpec) -> tuple[list[tuple], dict[tuple, int], list[tuple[int, int, tuple]]]:
    """Each layer's layer_kind, each kind's representative (its first layer), and the maximal runs of consecutive
    layers of one kind as (first layer, end, kind), in layer order."""
    kinds = [layer_kind(spec, i) for i in range(spec.n_layers)]
    first: dict[tuple, int] = {}
    segments: list[tuple[int, int, tuple]] = []
    for i, kind in enumerate(kinds):
        first.setdefault(kind, i)
        if segments and segments[-1][2] == kind:
            segments[-1] = (segments[-1][0], i + 1, kind)
        else:
            segments.append((i, i + 1, kind))
    return kinds, first, segments
