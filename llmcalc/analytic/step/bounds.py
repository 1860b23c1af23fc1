"""The layout search's floors: a lower bound of each layout's step before it is evaluated, from its work, the
pipeline's dependency paths and the optimizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...records import dataclass
from ...spec import ModelSpec
from ..kernels import Device
from ..memory import RECIPES, Recipe, lookup
from ..pipeline import chunks_per_rank, stage_of
from .cache import current, per_call
from .collectives import p2p_seconds
from .context import ExpertLayout, LayerLayout, StageTimes, StepContext, _context, _context_in, layer_kind
from .dp import RankDpKey, _dp_layout, _holdings, _param_summary, _rank_dp, _rank_optimizer
from .layer import _embedding_times, _head_times, _layer_cost, _mtp_times
from .layout import Layout
from .stages import Composition, StagePlan, _stage_cost, stage_plan

FLOOR_MARGIN = 1e-9  # _step_floor's relative margin below its path sums: no rounding lifts it above a step


def _work_floor(ctx: StepContext) -> float:
    """The first, cheapest floor of a layout's step (search_layouts orders every layout by it): its micro-batches'
    work at recompute none spread evenly over the pipeline ranks, m x (every layer's forward, backward and weight
    gradient + the embedding, LM head and MTP layers) / pp. The busiest rank does at least the average of all ranks'
    work, and no rank finishes before its own work is done, so it is at most _step_floor's bound (whose paths
    include each rank's own work); FLOOR_MARGIN below, the sums being in another order. The whole model's work is
    one stage composition's (one cost per layer kind x its count), cached with the layer costs."""
    lay = ctx.lay
    floors = ctx.table("floors")
    key = (ctx.layer_layout, ctx.expert_layout, _work_key(lay))
    work = floors.get(key)
    if work is None:
        pass_, wgt = _composition_passes(ctx, _whole(ctx.spec, lay.mtp_layers), "none")
        work = floors[key] = pass_ + (wgt if wgt is not None else 0.0)
    return _spread_work(lay, work)


def _whole(spec: ModelSpec, mtp_layers: int) -> Composition:
    """The whole model as one stage's composition (stage_plan's form), once per model in the call's tables."""
    table = current().of(spec, "whole model")
    found = table.get(mtp_layers)
    if found is None:
        runs: dict[tuple, list[int]] = {}
        for i in range(spec.n_layers):
            runs.setdefault(layer_kind(spec, i), [i, 0])[1] += 1
        found = table[mtp_layers] = Composition(tuple((i, frozenset(), count) for i, count in runs.values()), True,
                                                True, mtp_layers)
    return found


def _work_key(lay: Layout) -> tuple:
    """The key of the whole model's work (_work_floor's) beside the layout's layer fields."""
    return ("work", lay.mtp_layers, lay.schedule)


def _spread_work(lay: Layout, work: float) -> float:
    """_work_floor from the whole model's work of one micro-batch: m x work / pp, FLOOR_MARGIN below."""
    return lay.grad_accum * work / lay.pp * (1 - FLOOR_MARGIN)


def _step_floor(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, rec: Recipe,
                recompute: str, ctx: StepContext | None = None) -> tuple[float, StepContext, FloorPaths]:
    """(a lower bound of the makespan of `lay`'s pipeline (flash attention) at recomputation `recompute` or more,
    whatever its ZeRO stage; the context and the stage structure _optimizer_floor reads). The bound is the longest
    of the dependency paths of pipeline.path_bound, one per group of identical pipeline ranks: the first micro-batch's
    forward and the last one's backward through the stages before the rank's first chunk, each hop paying the
    activation send twice, plus all of the rank's own work (or only its own work, weight gradients included); each
    stage's times at `recompute`. Why it is a floor of the step search_layouts predicts:
    - every path is a chain of dependencies, so no simulated schedule finishes sooner, and path_bounds' closed
      forms are makespans; a layout the search does not simulate keeps path_bounds' own bound, the longest of the
      same paths at its own stage times;
    - recomputation only adds work (none < selective < full: a forward re-run inside the backward), so each
      stage's forward, backward and weight-gradient times at `recompute` are at most those at more recomputation,
      and a path's sum of them is non-decreasing in each;
    - the layer costs do not read the ZeRO stage (layer.LayerKey), and DP and the optimizer add to the
      makespan (_optimizer_floor: at least what they add);
    - the sums are taken FLOOR_MARGIN below, against rounding in another order than path_bounds'.
    tests/test_layout_prune.py holds it at or below the full evaluation of every candidate of several searches.
    `ctx`: `lay`'s _context, where the caller has it."""
    if ctx is None or ctx.lay is not lay:
        ctx = _context(spec, dev, lay, seq_len, rec)
    floors = ctx.table("floors")
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    key = (ctx.layer_layout, ctx.expert_layout, "paths", recompute, n_stages, lay.pp, lay.schedule,
           lay.first_stage_layers, lay.last_stage_layers, lay.mtp_layers, lay.pipeline_layout)
    paths = floors.get(key)
    if paths is None:
        paths = floors[key] = _floor_paths(ctx, n_stages, v, recompute)
    m = lay.grad_accum
    p2p = p2p_seconds(ctx) if lay.pp > 1 else 0.0
    floor = 0.0
    for before, busy, own, hops in paths.ranks:  # max(floor, path, own): a later value only where greater
        path = before + m * busy + hops * p2p
        if path > floor:
            floor = path
        own *= m
        if own > floor:
            floor = own
    return floor * (1 - FLOOR_MARGIN), ctx, paths


def _rank_floor(ctx: StepContext) -> float:
    """A floor of `ctx`'s layout's step between _work_floor's and _step_floor's at recompute none, far cheaper than
    the latter: _step_floor's paths without their activation sends (p2p >= 0), each stage's passes summed piece by
    piece (a layer kind with its recomputation, the embedding, the LM head, an MTP layer: each piece's passes once
    per layer fields, times its count on the stage, _rank_pieces) instead of per distinct stage composition. The
    same sums of the same terms (every StageTimes field >= 0, comm_fwd at most tp + cp + ep) in another order:
    2 x FLOOR_MARGIN below, against the rounding of both. Also at least the work floor (the busiest rank's own work
    is at least the average) up to that rounding. (search_layouts takes max(work floor, rank floor) of every layout
    from the search's table of floors: _first_floors.)"""
    shape = _floor_shape(ctx.spec, ctx.lay)
    return _ranks_floor(shape.ranks, _piece_list(ctx, shape), shape.zb, ctx.lay.grad_accum)


@dataclass(frozen=True)
class FloorShape:
    """What the work and rank floors of a layout read beside its layer fields and micro-batch count (_floor_shape):
    the work floor's key in the table of floors, _rank_pieces' ranks (their counts as floats) and pieces, the key of
    those pieces' passes in that table (_piece_list), whether the schedule splits off the weight gradients."""

    work_key: tuple
    ranks: tuple
    pieces: tuple
    list_key: tuple
    zb: bool


def _floor_shape(spec: ModelSpec, lay: Layout) -> FloorShape:
    """`lay`'s FloorShape: the same for every layout of one search with the same pp, vpp and schedule."""
    v = chunks_per_rank(lay.schedule, lay.vpp)
    zb = lay.schedule.startswith("zb")
    ranks, pieces = _rank_pieces(spec, lay.pp * v, lay, v)  # (its counts are floats: _floor_ranks' are)
    return FloorShape(_work_key(lay), ranks, pieces, list_key=("piece list", pieces, zb), zb=zb)


def _first_floors(floors: dict, inputs: tuple, lay: Layout, fields: tuple[LayerLayout, ExpertLayout],
                  shape: FloorShape, ranks: bool = False) -> float:
    """_work_floor of `lay` (the floor search_layouts orders every layout by first), or with `ranks` its _rank_floor
    (taken second), from the search's table of floors (`floors`: its contexts' "floors" table), the layout's layer
    fields (`fields`) and _floor_shape (`shape`), the same floats; its StepContext is built only where the table
    lacks the whole model's work or the pieces' passes. `inputs`: _context's (spec, device, sequence, recipe)."""
    found = floors.get((*fields, shape.list_key if ranks else shape.work_key))
    if found is None:
        ctx = _context_in(inputs, lay, fields)
        return _ranks_floor(shape.ranks, _piece_list(ctx, shape), shape.zb, lay.grad_accum) if ranks else \
            _work_floor(ctx)
    if ranks:
        return _ranks_floor(shape.ranks, found, shape.zb, lay.grad_accum)
    return _spread_work(lay, found)


def _ranks_floor(ranks: tuple, passes: list, zb: bool, m: int) -> float:
    """_rank_floor's bound from its ranks (_rank_pieces'), the pieces' passes (_piece_list) and the micro-batch
    count `m`: each rank's sums by _rank_sums; the max is max()'s (a later value only where greater)."""
    floor = 0.0
    for before, mine in ranks:
        path, busy, own = _rank_sums(before, mine, passes, zb)
        path += m * busy
        if path > floor:
            floor = path
        own *= m
        if own > floor:
            floor = own
    return floor * (1 - 2 * FLOOR_MARGIN)


def _piece_list(ctx: StepContext, shape: FloorShape) -> list[tuple[float, float]]:
    """The passes of _floor_shape's pieces (_piece_passes) for `ctx`'s layer fields, in their order: a list per
    distinct tuple of pieces, each piece's once per layer fields, in the call's table of floors."""
    pieces, list_key, zb = shape.pieces, shape.list_key, shape.zb
    floors = ctx.table("floors")
    fields = (ctx.layer_layout, ctx.expert_layout)
    passes = floors.get((*fields, list_key))
    if passes is None:
        passes = []
        for piece in pieces:
            key = (*fields, "piece", piece, zb)
            done = floors.get(key)
            if done is None:
                done = floors[key] = _piece_passes(ctx, piece, zb)
            passes.append(done)
        floors[fields + (list_key,)] = passes
    return passes


def _piece_passes(ctx: StepContext, piece: tuple, zb: bool) -> tuple[float, float]:
    """(forward + backward, weight gradient: 0 unless `zb` splits it off) of one micro-batch of one piece of a stage
    (_rank_pieces'), stage_passes' sums of its StageTimes (_passes)."""
    what = piece[0]
    if what == "embedding":
        s = _embedding_times(ctx)
    elif what == "head":
        s = _head_times(ctx)
    elif what == "mtp":
        s = _mtp_times(ctx, "none")
    else:
        s = _layer_cost(ctx, what, piece[1])
    both, weight = _passes(s, zb)
    return both, 0.0 if weight is None else weight


def _rank_pieces(spec: ModelSpec, n_stages: int, lay: Layout, v: int) -> tuple:
    """_floor_ranks' paths at recompute none as counts of pieces: per group of identical ranks (its last rank) the
    pieces of the stages before its first chunk and its own, each as (index, count); the pieces: a layer's
    (representative layer, what it recomputes), ("embedding",), ("head",), ("mtp",). Once per model and what the
    stage plan at recompute none reads, in the call's tables."""
    def make() -> tuple:
        plan = stage_plan(spec, n_stages, lay, "none")
        ranks = _floor_ranks(plan, lay.schedule, lay.pp, v)[0]
        index: dict[tuple, int] = {}
        compositions = plan.compositions

        def counted(stages: tuple) -> tuple:
            out: dict[int, int] = {}
            for j, n in stages:
                runs, embedding, head, mtp = (compositions[j].runs, compositions[j].embedding, compositions[j].head,
                                              compositions[j].mtp)
                found: list[tuple[tuple, int]] = [((i, rc), count) for i, rc, count in runs]
                found += [(("embedding",), 1)] * embedding + [(("head",), 1)] * head
                found += [(("mtp",), mtp)] * (mtp > 0)
                for piece, count in found:
                    k = index.setdefault(piece, len(index))
                    out[k] = out.get(k, 0) + n * count
            return tuple(out.items())
        ranks = tuple((counted(before), counted(mine)) for before, mine, _ in ranks)
        return ranks, tuple(index)
    # what the plan at recompute none reads (its recompute_layers and _modules change nothing without recomputation)
    table = current().of(spec, "rank pieces")
    key = (n_stages, lay.pp, lay.schedule, lay.first_stage_layers, lay.last_stage_layers, v, lay.mtp_layers,
           lay.pipeline_layout)
    found = table.get(key)
    if found is None:
        found = table[key] = make()
    return found


@dataclass(frozen=True)
class FloorPaths:
    """_floor_paths' answer: per group of identical ranks (path before its first chunk, its own forward + backward,
    the same with its weight gradients, its send/receive count), the stage split, each group's first rank."""

    ranks: tuple[tuple[float, float, float, int], ...]
    split: tuple[int, ...]
    firsts: list[int]


def _floor_paths(ctx: StepContext, n_stages: int, v: int, recompute: str) -> FloorPaths:
    """_step_floor's paths of one layout's layer fields and stage plan, whatever the micro-batch count: per group of
    identical ranks (its last rank: pipeline.path_bounds' `ranks`) the forward and backward of the stages before its
    first chunk, its own forward + backward of one micro-batch, the same with its weight gradients, and its number of
    send/receive pairs (2 per hop between ranks); then the stage split and each group's first rank (_rank_dp's).
    Each sum is of the distinct stage compositions' times, each times its count (_floor_ranks)."""
    lay = ctx.lay
    plan = stage_plan(ctx.spec, n_stages, lay, recompute)
    passes = []
    for composition in plan.compositions:
        passes.append(_composition_passes(ctx, composition, recompute))
    zb = lay.schedule.startswith("zb")
    ranks, split, firsts = _floor_ranks(plan, lay.schedule, lay.pp, v)
    out = []
    for before, mine, hops in ranks:
        path, busy, own = _rank_sums(before, mine, passes, zb)
        out.append((path, busy, own, hops))
    return FloorPaths(tuple(out), split, firsts)


def _rank_sums(before: Sequence[tuple[int, float]], mine: Sequence[tuple[int, float]], passes: Sequence[tuple],
               zb: bool) -> tuple[float, float, float]:
    """One pipeline rank's sums of (index, count) terms over `passes` ((forward + backward, weight gradient) per
    index: _floor_paths' compositions, _ranks_floor's pieces): (the forward + backward of the stages before its first
    chunk, its own forward + backward, the same with its weight gradients where `zb`, else that forward + backward).
    Each sum is sum()'s of its terms, added in turn from 0.0 (loops: a generator or list comprehension costs a call
    each on CPython 3.11)."""
    busy = 0.0
    for k, n in mine:
        busy += passes[k][0] * n
    own = busy  # (busy + 0.0 without weight gradients)
    if zb:
        weight = 0.0
        for k, n in mine:
            weight += passes[k][1] * n
        own = busy + weight
    path = 0.0
    for k, n in before:
        path += passes[k][0] * n
    return path, busy, own


def _composition_passes(ctx: StepContext, composition: Composition, recompute: str) -> tuple[float, Any]:
    """(forward + backward, weight gradient or None) of one micro-batch on a stage of this composition, as
    stage_passes gives them for the layout's schedule (the weight gradient split off by a zero-bubble one, else
    None), from the stage's cost (``stages._stage_cost``)."""
    return _passes(_stage_cost(ctx, composition, recompute), ctx.lay.schedule.startswith("zb"))


def _passes(s: StageTimes, zb: bool) -> tuple[float, float | None]:
    """stage_passes([s], [0], schedule)'s sums of one stage: its forward + backward, and its weight gradient where a
    zero-bubble schedule (`zb`) splits it off (else None); the same additions in the same order."""
    comm = s.tp + s.cp + s.ep - s.comm_fwd
    if zb:
        return s.fwd + s.comm_fwd + (s.bwd_input + comm), s.bwd_weight
    return s.fwd + s.comm_fwd + (s.bwd_input + s.bwd_weight + comm), None


def _floor_ranks(plan: StagePlan, schedule: str, pp: int, v: int) -> tuple:
    """The shape of _floor_paths' paths for one stage plan (stage_plan's) and schedule: per group of identical ranks
    (its last rank) the distinct compositions before its first chunk and its own, each as (index, count: a float,
    so that _floor_paths' products are float ones), and its send/receive count; the stage split; each group's first
    rank. Kept with the plan."""
    key = ("floor ranks", schedule, pp, v)
    found = plan.memo.get(key)
    if found is None:
        found = plan.memo[key] = _floor_ranks_uncached(plan, schedule, pp, v)
    return found


def _floor_ranks_uncached(plan: StagePlan, schedule: str, pp: int, v: int) -> tuple:
    split, ids = plan.split, plan.ids
    rank_groups, lasts = plan.groups(schedule, pp)
    n_stages = len(split)
    home = [0] * n_stages  # each stage's rank
    for r in range(pp):
        for c in range(v):
            home[stage_of(schedule, r, c, pp)] = r

    def counted(stages: Sequence[int]) -> tuple:  # the counts as floats: x * n is x * float(n) (exact)
        out: dict[int, float] = {}
        for st in stages:
            out[ids[st]] = out.get(ids[st], 0.0) + 1.0
        return tuple(out.items())
    ranks = []
    for r in lasts:
        stages = [stage_of(schedule, r, c, pp) for c in range(v)]
        s0 = min(stages)
        hops = sum(home[st] != home[st + 1] for st in range(s0))
        ranks.append((counted(range(s0)), counted(stages), 2 * hops))
    return tuple(ranks), tuple(split), [r for r, _ in rank_groups]


def _optimizer_floor(ctx: StepContext, paths: FloorPaths, with_dp: bool = True) -> tuple[float, float]:
    """(the optimizer step of the layout in `ctx`, at least its exposed DP communication), each the most loaded
    rank's as dp_and_optimizer takes them. The optimizer step is the same with ZeRO-1 and ZeRO-3 (one_rank_dp
    shards it over dp x cp either way), so ZeRO-1's is taken whatever the layout's stage; the DP floor is the
    layout's own stage's: the last bucket's reduction and the first's gather (overlapped ZeRO-1/2), one FSDP unit's
    transfers per micro-batch (ZeRO-3), every collective (not overlapped), the parts dp_and_optimizer's exposed
    time is at least whatever the stage times. `with_dp` False: the optimizer alone (`_rank_optimizer`, without the
    collectives _rank_dp prices), DP floor 0."""
    lay = ctx.lay
    split, firsts = paths.split, paths.firsts
    v = chunks_per_rank(lay.schedule, lay.vpp)
    fields = _dp_layout(ctx, zero=1)
    floors = ctx.table("floors")
    key = (fields, "optimizer", split, v, lay.schedule, tuple(firsts))  # the most loaded first rank's, once
    opt = floors.get(key)
    if opt is None:
        per_layer = _param_summary(ctx.spec)[0]
        table = ctx.table("rank optimizer")
        opt = 0.0
        for r in firsts:  # ZeRO-1's whatever the layout's stage
            held = _holdings(ctx, split, v, r)
            rank_key = RankDpKey(fields, *held)
            seconds = table.get(rank_key)
            if seconds is None:
                seconds = table[rank_key] = _rank_optimizer(ctx, *held, per_layer, zero=1)
            opt = max(opt, seconds)
        floors[key] = opt
    if not with_dp:
        return opt, 0.0
    dp = 0.0
    own = _rank_dp(ctx, split, v, firsts)
    for _, zero3, per_f, per_b, reduce, gather, last, first, _ in own.values():
        if zero3 and lay.dp_overlap:
            exposed = lay.grad_accum * (per_f + per_b)
        elif lay.dp_overlap and not zero3:
            exposed = last + first if reduce or gather else 0.0
        else:
            exposed = reduce + gather
        dp = max(dp, exposed)
    return opt, dp


@dataclass(frozen=True)
class LayoutFloors:
    """Lower bounds of one layout's step (flash attention, no dropout) in the order the pruned search
    (``search.search_layouts``) tightens them, each at most the next (up to FLOOR_MARGIN's rounding) and all at most
    the step ``prediction.predict`` gives the layout at the recomputation they are taken for, simulated or with
    the pipeline's bound (``simulated=False``): the search stops once the least floor left cannot beat its `top`-th
    step, so a floor above a step would drop a layout that wins."""

    work: float  # every rank's average work at recompute none: m x the whole model's passes / pp (_work_floor)
    ranks: float  # the pipeline's dependency paths without their sends, summed piece by piece (_rank_floor)
    paths: float  # the pipeline's dependency paths at recompute none, sends included (_step_floor)
    optimizer: float  # paths + the optimizer step (the same whatever the ZeRO stage)
    setting: float  # the paths at `recompute` + the optimizer step
    step: float  # setting + the DP communication that stays exposed at the layout's own ZeRO stage


@per_call
def layout_floors(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, recipe: str = "bf16-mixed",
                  recompute: str = "none") -> LayoutFloors:
    """The floors of `lay`'s step the pruned search takes in turn (``LayoutFloors``), by the same terms as the
    search and ``predict`` (``_context``), in the tables of its own call (``cache.per_call``); `recompute`: the
    recomputation the last two are taken at (the search's: the least that fits)."""
    rec = lookup(RECIPES, "recipe", recipe)
    margin = 1 - FLOOR_MARGIN
    ctx = _context(spec, dev, lay, seq_len, rec)
    work, ranks = _work_floor(ctx), _rank_floor(ctx)
    paths, ctx, structure = _step_floor(spec, dev, lay, seq_len, rec, recompute="none", ctx=ctx)
    optimizer = paths + _optimizer_floor(ctx, structure, with_dp=False)[0] * margin
    floor, ctx, structure = _step_floor(spec, dev, lay, seq_len, rec, recompute=recompute, ctx=ctx)
    opt, dp = _optimizer_floor(ctx, structure)
    return LayoutFloors(work=work, ranks=ranks, paths=paths, optimizer=optimizer, setting=floor + opt * margin,
                        step=floor + (opt + dp) * margin)
