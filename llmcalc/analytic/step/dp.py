"""Data parallelism and the optimizer step: each rank's gradient reduction and weight gathering, and its AdamW or Muon
step."""

from __future__ import annotations

import math
from typing import Any

from ...records import dataclass
from ...spec import ModelSpec
from .. import comm, kernels
from ..kernels import stream_seconds
from ..memory import OPTIMIZERS, Recipe, _layer_params, routed_expert_params
from ..parallel import _built
from ..params import count_params
from ..pipeline import stage_of
from .cache import current
from .constants import DP_BUCKET_PARAMS, MUON_NS_STEPS
from .context import StageTimes, StepContext, _canonical, hash_once
from .layout import Layout, _group_per_node


def dp_and_optimizer(ctx: StepContext, stages: list[StageTimes], split: list[int], starts: list[int],
                      v: int, groups: list, infos: dict[int, tuple] | None = None) -> tuple[float, float]:
    """(exposed DP communication, optimizer seconds) of the rank holding the most parameters: each rank's
    collectives and optimizer step (``_rank_dp``, the same for every layout of these degrees) against its own
    forward and backward of one micro-batch; once per group of ranks whose chunks are the same (`groups`,
    stage_plan's: they hold the same layers and parameters); `infos`: each rank's ``one_rank_dp`` where the caller
    counted its parameters (a model transformers measured), else ``_rank_dp``'s."""
    lay = ctx.lay
    worst_dp = worst_opt = 0.0
    if infos is None:
        infos = _rank_dp(ctx, tuple(split), v, [r for r, _ in groups])
    for r, rank_stages in groups:
        n_layers, zero3, per_f, per_b, reduce, gather, last, first, opt = infos[r]
        fwd_one = sum(stages[st].fwd for st in rank_stages)
        bwd_one = sum(stages[st].bwd_input + stages[st].bwd_weight for st in rank_stages)
        m = lay.grad_accum
        if zero3:  # FSDP: each layer's transfers under the previous layer's compute (prefetch)
            layer_f, layer_b = fwd_one / n_layers, bwd_one / n_layers
            exposed = m * (n_layers * (max(0.0, per_f - layer_f) + max(0.0, per_b - layer_b)) + per_f + per_b)
            if not lay.dp_overlap:
                exposed = reduce + gather
        elif lay.dp_overlap:  # the last bucket's reduction and the first bucket's gather stay exposed
            exposed = max(last, reduce - bwd_one) + max(first, gather - fwd_one) if reduce or gather else 0.0
        else:
            exposed = reduce + gather
        worst_dp = max(worst_dp, exposed)
        worst_opt = max(worst_opt, opt)
    return worst_dp, worst_opt


@dataclass(frozen=True)
class DpLayout:
    """What a rank's data-parallel collectives and optimizer step read of the layout: the degrees (tp, cp, pp, dp,
    ep, expert tp: the groups and their strides), the ZeRO stage, the rank order, the micro-batches (ZeRO-3's
    per-micro-batch transfers only: 0 otherwise), the optimizer, FP8 parameter gathers and HSDP's shard group."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    expert_tp: int
    zero: int
    order: str
    micro_batches: int
    optimizer: str
    fp8_param_gather: bool
    dp_shard: int

    __hash__ = hash_once  # many memo keys hold it

    @classmethod
    def of(cls, lay: Layout, zero: int | None = None) -> DpLayout:
        """`lay`'s; `zero`: with this ZeRO stage instead of its own."""
        zero = lay.zero if zero is None else zero
        return cls(tp=lay.tp, cp=lay.cp, pp=lay.pp, dp=lay.dp, ep=lay.ep, expert_tp=lay.expert_tp, zero=zero,
                   order=lay.order, micro_batches=lay.grad_accum if zero == 3 else 0, optimizer=lay.optimizer,
                   fp8_param_gather=lay.fp8_param_gather, dp_shard=lay.dp_shard)


@dataclass(frozen=True)
class RankDpKey:
    """What one pipeline rank's data-parallel collectives and optimizer step read beside the ``StepInputs`` its table
    is kept under: the layout's DP fields (``DpLayout``) and what the rank holds: parameters, routed-expert
    parameters, layers."""

    layout: DpLayout
    params: float
    experts: float
    layers: int


def _dp_layout(ctx: StepContext, zero: int | None = None) -> DpLayout:
    """``DpLayout.of`` the context's layout (`zero`: with this ZeRO stage instead), one object per value in the call
    (keys holding the same object compare at once), kept with the context."""
    name = f"_dp_layout_{zero}"
    found = ctx.__dict__.get(name)
    if found is None:
        found = ctx.__dict__[name] = _canonical(DpLayout.of(ctx.lay, zero))
    return found


def rank_dp_key(ctx: StepContext, held: tuple[float, float, int], zero: int | None = None) -> RankDpKey:
    """The ``RankDpKey`` of a rank holding `held` (_rank_holdings') in this context (`zero`: at this ZeRO stage)."""
    return RankDpKey(_dp_layout(ctx, zero), *held)


def _rank_dp(ctx: StepContext, split: tuple[int, ...], v: int, ranks: list[int]) -> dict[int, tuple]:
    """For pipeline ranks `ranks`, what each one's data-parallel reductions and optimizer step cost, whatever the
    stage times (``one_rank_dp``), memoized per ``RankDpKey``: ranks holding the same parameters cost the same, in
    this layout or another."""
    table = ctx.table("rank dp")
    out = {}
    for r in ranks:
        held = _holdings(ctx, split, v, r)
        key = rank_dp_key(ctx, held)
        info = table.get(key)
        if info is None:
            info = table[key] = one_rank_dp(ctx, *held)
        out[r] = info
    return out


def _holdings(ctx: StepContext, split: tuple[int, ...], v: int, r: int) -> tuple[float, float, int]:
    """_rank_holdings of rank `r`, once per stage split, chunks per rank, schedule and rank in the call's tables."""
    table = ctx.table("holdings")
    key = (split, v, ctx.lay.schedule, ctx.lay.pp, r)
    found = table.get(key)
    if found is None:
        found = table[key] = _rank_holdings(ctx, split, v, r)
    return found


def _rank_holdings(ctx: StepContext, split: tuple[int, ...], v: int, r: int) -> tuple[float, float, int]:
    """(parameters, routed-expert parameters, layers) pipeline rank `r` holds over its chunks (stage split `split`)."""
    spec, lay = ctx.spec, ctx.lay
    per_layer, emb, head, final, experts_per_layer, moe_before = _param_summary(spec)
    n_stages = len(split)
    starts = [sum(split[:i]) for i in range(n_stages)]
    params = experts = 0.0
    n_layers = 0
    for c in range(v):
        st = stage_of(lay.schedule, r, c, lay.pp)
        lo, hi = starts[st], starts[st] + split[st]
        n_layers += hi - lo
        params += (hi - lo) * per_layer + (emb if st == 0 else 0.0)
        if st == n_stages - 1:
            params += final + (head if not (spec.tie_embeddings and st == 0) else 0)  # pp > 1: a tied copy
        experts += experts_per_layer * (moe_before[hi] - moe_before[lo])
    return params, experts, n_layers


def one_rank_dp(ctx: StepContext, params: float, experts: float, n_layers: int,
                per_layer: float | None = None) -> tuple:
    """_rank_dp for one rank holding `params` parameters (`experts` of them routed experts) in `n_layers` layers
    (`per_layer`: one layer's parameters, for Muon's matrices; default the spec's)."""
    spec, lay, dev, rec = ctx.spec, ctx.lay, ctx.dev, ctx.recipe
    per_layer = _param_summary(spec)[0] if per_layer is None else per_layer
    experts_given = experts
    net = dev.network
    dense_group, dense_members, dense_stride, expert_stride, expert_members = _dp_mesh(lay, net.gpus_per_node)
    m = lay.grad_accum
    dense = (params - experts) / lay.tp
    experts = experts / lay.expert_tp / lay.ep  # routed experts: split over ep, each over etp
    units = max(1, n_layers) + 1 if lay.zero == 3 else 0  # FSDP: one unit per layer, + embedding/head
    gather_bytes = 1.0 if lay.fp8_param_gather else None
    secs = list(_dp_seconds(dense, rec, dense_group, lay.zero, dense_stride, members=dense_members, m=m, units=units,
                            net=net, gather_bytes=gather_bytes))
    if experts:
        secs += _dp_seconds(experts, rec, lay.expert_dp, lay.zero, expert_stride, members=expert_members, m=m,
                            units=units, net=net, gather_bytes=gather_bytes)
    if dense_group == 1 and lay.expert_dp == 1:
        secs = []
    secs += _replica_seconds(lay, rec, dense, dense_group, units=units, net=net)
    reduces, gathers = [], []  # each kind's calls (seconds of one, calls), in their order
    for k, t, n in secs:
        if k == "all_gather":
            gathers.append((t, n))
        elif k in ("all_reduce", "reduce_scatter"):
            reduces.append((t, n))
    reduce = sum([t * n for t, n in reduces])
    gather = sum([t * n for t, n in gathers])
    last = max([t for t, _ in reduces], default=0.0)
    first = max([t for t, _ in gathers], default=0.0)
    per_f = per_b = 0.0  # one FSDP unit's forward and backward transfers (ZeRO-3 only)
    if lay.zero == 3:
        per_f = gather / m / 2 / (max(1, n_layers) + 1)
        per_b = (gather / m / 2 + reduce / m) / (max(1, n_layers) + 1)
    opt = _rank_optimizer(ctx, params, experts_given, n_layers, per_layer)
    return max(1, n_layers), lay.zero == 3, per_f, per_b, reduce, gather, last, first, opt


def _dp_mesh(lay: Layout, per_node: int) -> tuple[int, int, int, int, int]:
    """one_rank_dp's groups: (the dense gradients' group, dp x cp: CP ranks hold the same weights; with --dp-shard
    (HSDP) cp x the shard group, the innermost dp_shard of the dp ranks; its members per node; its stride; the routed
    experts' data-parallel stride; its members per node)."""
    strides, estrides = lay.strides(), lay.expert_strides()
    shard = lay.dp_shard or lay.dp
    dense_members = _group_per_node([(lay.cp, strides["cp"]), (shard, strides["dp"])], per_node)
    dense_stride = strides["cp"] if lay.cp > 1 else strides["dp"]
    expert_members = _group_per_node([(lay.expert_dp, estrides["dp"])], per_node)
    return shard * lay.cp, dense_members, dense_stride, estrides["dp"], expert_members


def _replica_seconds(lay: Layout, rec: Recipe, dense: float, shard_group: int, *, units: int,
                     net: Any) -> list[tuple[str, float, float]]:
    """(kind, seconds of one call, calls) of HSDP's all-reduce across replicas (``_replica_colls``; none without
    --dp-shard): once per step, ZeRO-3's once per micro-batch as its reduce-scatters."""
    replicas = lay.dp // (lay.dp_shard or lay.dp)
    if replicas == 1:
        return []
    stride = _replica_stride(lay)
    colls = _replica_colls(dense, rec, shard_group, replicas, stride=stride,
                           members=_group_per_node([(replicas, stride)], net.gpus_per_node), units=units)
    m = lay.grad_accum if lay.zero == 3 else 1
    return [(c.kind, c.seconds(net), c.count * m) for c in colls]


def _replica_stride(lay: Layout) -> int:
    """HSDP's replica group: every dp_shard-th dp rank (the shard group innermost in dp, torchtitan's
    dp_replicate x dp_shard mesh)."""
    return lay.strides()["dp"] * (lay.dp_shard or lay.dp)


def _replica_colls(params: float, rec: Recipe, shard_group: int, replicas: int, *, stride: int, members: int,
                   units: int = 0) -> list[comm.Collective]:
    """HSDP's all-reduce of the gradients across the `replicas` (torchtitan's data_parallel_replicate_degree; PyTorch
    FSDP HYBRID_SHARD: "FULL_SHARD within a node, and replicate parameters across nodes"): each rank's reduced
    shard, `params` / `shard_group` gradients of rec.grad_bytes, all-reduced with the ranks holding the same shard
    in the other replicas, in the calls _dp_colls makes (its buckets, or one per FSDP unit): 2 (R - 1)/R of the
    shard's bytes per rank."""
    calls = units or max(1, math.ceil(params / max(DP_BUCKET_PARAMS, 1e6 * shard_group)))
    shard = params / shard_group * rec.grad_bytes
    return [_built(comm.Collective, {"name": "DP all-reduce across replicas (HSDP)", "kind": "all_reduce",
                                     "group": replicas, "buffer_bytes": shard / calls, "count": calls,
                                     "stride": stride, "per_node": members})]


def _rank_optimizer(ctx: StepContext, params: float, experts: float, n_layers: int, per_layer: float,
                    zero: int | None = None) -> float:
    """one_rank_dp's optimizer step: the rank's dense and routed-expert shards (`params`, `experts` of them routed,
    in `n_layers` layers of `per_layer` parameters), each ZeRO-sharded over its data-parallel group (ZeRO >= 1);
    `zero`: that of the layout with this ZeRO stage instead of its own (nothing else here reads the stage)."""
    lay = ctx.lay
    zero = lay.zero if zero is None else zero
    dense_group = (lay.dp_shard or lay.dp) * lay.cp  # HSDP: the states sharded over the shard group only
    dense = (params - experts) / lay.tp
    experts = experts / lay.expert_tp / lay.ep
    shard = dense_group if zero >= 1 else 1
    expert_shard = lay.expert_dp if zero >= 1 else 1
    local = dense / shard + experts / expert_shard
    return _optimizer_seconds(ctx, local, (per_layer, n_layers), dense_group if zero >= 1 else 1,
                              dense + experts)


def _param_summary(spec: ModelSpec) -> tuple[float, float, float, float, float, list[int]]:
    """Per spec, once per call: parameters of one layer (its sharded part and norms, memory._layer_params' average), the
    embedding, the LM head, the final norm, the routed experts of one MoE layer, and how many MoE layers come
    before each layer index (prefix sums)."""
    def make() -> tuple[float, float, float, float, float, list[int]]:
        comps = count_params(spec).components
        layer, norms, emb, head, final = _layer_params(spec, comps)
        experts = routed_expert_params(spec, comps) / spec.n_moe_layers if spec.n_moe_layers else 0.0
        before = [0]
        for i in range(spec.n_layers):
            before.append(before[-1] + spec.is_moe_layer(i))
        return layer + norms, emb, head, final, experts, before
    table = current().of(spec, "parameter summary")
    found = table.get("summary")
    if found is None:
        found = table["summary"] = make()
    return found


def _dp_seconds(params: float, rec: Recipe, group: int, zero: int, stride: int, members: int, m: int, units: int,
                net: Any, gather_bytes: float | None = None) -> tuple[tuple[str, float, float], ...]:
    """(kind, seconds of one call, calls) of each of _dp_colls' collectives: those of one micro-batch, whose calls
    ZeRO-3 makes once per micro-batch."""
    once: tuple[tuple[str, float, float], ...] = tuple((c.kind, c.seconds(net), c.count) for c in _dp_colls(
        params, rec, group, zero, stride, members=members, m=1, units=units, gather_bytes=gather_bytes))
    # ZeRO-3's collectives run once per micro-batch (dp_collectives' count): the same calls, m times as many
    return tuple((kind, seconds, count * m) for kind, seconds, count in once) if zero == 3 else once


def _dp_colls(params: float, rec: Recipe, group: int, zero: int, stride: int, members: int, m: int,
              units: int = 0, gather_bytes: float | None = None) -> list[comm.Collective]:
    """The DP collectives of `params` parameters, one call per bucket: Megatron's distributed optimizer buckets
    max(DP_BUCKET_PARAMS, 1 M x dp) parameters; ZeRO-3 (FSDP) one unit per layer (`units`). Each call pays its
    ring latency ((n-1) steps), which across hundreds of ranks outweighs the bytes of a small bucket.
    `gather_bytes`: bytes per parameter of the weight all-gather (default the weights', at most 2 bytes: the BF16
    copy); 1 with Megatron's --fp8-param-gather (arguments.py: "Keep the compute param in fp8 ... and perform the
    param all-gather in fp8"; with the distributed optimizer or FSDP). Each call's Collective is built as its
    __init__ builds it (its fields in field order; it has no __post_init__), without the setattr per field."""
    weight = min(rec.weight_bytes, 2.0) if gather_bytes is None else gather_bytes
    colls = comm.dp_collectives(params, rec.grad_bytes, weight, group, zero=zero, stride=stride,
                                micro_batches=m)
    calls = units or max(1, math.ceil(params / max(DP_BUCKET_PARAMS, 1e6 * group)))
    return [_built(comm.Collective, {"name": c.name, "kind": c.kind, "group": c.group,
                                     "buffer_bytes": c.buffer_bytes / calls, "count": c.count * calls,
                                     "stride": c.stride, "per_node": members})
            for c in colls]


def _optimizer_seconds(ctx: StepContext, local: float, layers: tuple[float, int], shards: int, on_gpu: float) -> float:
    """The optimizer step over this GPU's `local` parameters: memory-bound (gradient, master weights and the
    optimizer's states read and written, the new weights written: AdamW's two states), and for Muon (one momentum
    state, and MUON_NS_STEPS Newton-Schulz iterations per weight matrix, 4·m²·n + 2·m³ FLOPs each for an m x n
    matrix, m <= n: X·Xᵀ, its square, their product with X; each matrix on one of the `shards` data-parallel ranks,
    Moonlight's distributed Muon; `layers`: (one layer's parameters, the layers));
    FP8/FP4 recipes then cast the `on_gpu` weights this GPU computes with (QUANT_BYTES per element; Transformer
    Engine casts them at the first micro-batch and keeps the casts for the rest)."""
    rec, dev = ctx.recipe, ctx.dev
    opt = OPTIMIZERS[ctx.lay.optimizer]
    nbytes = local * (rec.grad_bytes + 2 * (rec.master_bytes + opt.bytes_per_param(rec)) + rec.weight_bytes)
    seconds = stream_seconds(nbytes, dev, ctx.eff)
    if ctx.lay.optimizer == "muon":
        spec = ctx.spec
        D = spec.d_model
        flops = 0.0
        p, count = layers
        n = p / ctx.lay.tp / D  # the layer's matrices, as D x (p / D) blocks of this rank's TP shard
        lo, hi = min(D, n), max(D, n)
        per = MUON_NS_STEPS * (4 * lo * lo * hi + 2 * lo ** 3)
        for _ in range(count):  # added layer by layer, as a sum over the layers' list
            flops += per
        seconds += flops / shards / (dev.mamf * ctx.eff)
    if rec.fp8:
        seconds += stream_seconds(on_gpu * kernels.QUANT_BYTES[rec.fp8], dev, ctx.eff)
    return seconds
