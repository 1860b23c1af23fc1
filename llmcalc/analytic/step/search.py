"""`llmcalc layout`: every layout tried, the pruned search best first, the losers' table."""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable
from typing import Any

from ...errors import LlmcalcError
from ...records import dataclass, replaced
from ...spec import ModelSpec
from ...units import GIB
from ...validate import DEFAULT_ZERO
from ..memory import RECIPES, MemoryTables, lookup
from ..pipeline import chunks_per_rank, stage_of
from . import constants
from .bounds import FLOOR_MARGIN, FloorShape, _first_floors, _floor_shape, _optimizer_floor, _step_floor, _whole
from .cache import per_call
from .context import ExpertLayout, LayerLayout, StepContext, StepInputs, _context_in, step_tables
from .layer import _embedding_times, _head_times, _layer_cost, _mtp_times
from .layout import (
    ORDER,
    PINNED,
    STEP_DEFAULTS,
    Layout,
    _check_stage_layers,
    _describe,
    _layout_maker,
    _order_dims,
    _stride,
    _with_zero,
    check_modelled,
    layout_candidates,
    layout_memory,
    make_layout,
    stage_split,
)
from .prediction import LOWER_BOUND, Prepared, StepPrediction, _finish, _prepare, predict
from .train import global_batch_sequences, networked_device, option_flag


@per_call
def search_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int, causal: bool = False,
                   recompute: str | None = None, dtype: str = "bf16", progress: Callable[[int], Callable[[], None]]
                   | None = None, tp_overlap: bool | None = False, recipe: str = "bf16-mixed", top: int = 10,
                   exhaustive: bool = False, reserve_gib: float = 0.0, pins: dict[str, Any] | None = None,
                   **step: Any) -> tuple[list, list, dict]:  # long: the search's phases
    """Every layout tp x cp x pp (x vpp, micro-batch, recomputation) of `n_gpus`, checked against the memory
    model and ranked by predicted throughput. Returns (ranked [(prediction, peak bytes)], losers, counts).

    tp runs over the divisors of GPUs per node (TP stays on NVLink), pp up to 64 (memory checked for the
    most loaded stage, ceil(L/pp) layers), cp over powers of two up to 16 keeping >= 1k tokens per rank;
    ZeRO-1 with the least of none, selective, full recomputation that fits (only `recompute` if given), else
    ZeRO-3 (FSDP) the same way. `recipe` and `step` (STEP_DEFAULTS' settings) apply to every layout.
    A layout fits where its peak is at most the GPU's usable memory less `reserve_gib` (--reserve-gib, as memory).
    `pins`: the degrees, micro-batch (layout.PINNED), ZeRO stage and sequence parallelism `layout` was given: only
    layouts with those are tried.
    `progress(total)` (optional) returns a function called once per layout tried; `tp_overlap` True times every
    layout with TransformerEngine's comm+GEMM overlap (collectives.add_tp_comm), False without it, None tries both
    where the overlap applies (`_tp_variants`).

    Pruned (the default): every valid layout first gets `_step_floor`, a lower bound of its step whatever
    recomputation and ZeRO stage it would get; in order of that floor the layouts are evaluated in full (memory,
    stages, DP, optimizer) until the next floor cannot beat the `top`-th exact step; the rest are counted
    `bounded` and never evaluated (nor checked for memory). `exhaustive` evaluates every layout (the ranked list,
    losers and counts then read all of them; `bounded` is 0). Either way the `top` best are exactly the exhaustive
    search's, in order: a layout among them has a floor at most its step, at most the `top`-th step.

    Each distinct piece is evaluated once (per-layer-kind costs per (tp, cp, micro-batch, recompute, ...), the
    FLOPs per recomputation, memory per layout but vpp, the parameters per model), and the pipeline is simulated
    only where it can change the ranking: every evaluated layout first gets pipeline.path_bound (its exact
    makespan where the timeline is known in closed form, else a lower bound); the layouts are then simulated only
    while that bound can beat the `top`-th exact step. The others keep their bound (say so in their
    assumptions), but for the few losers shown (why_they_lose), simulated: their figures are train's."""
    check_modelled(spec)
    _order_dims(step.get("order", ORDER))  # refused once, as train refuses it, not layout by layout
    if step.get("recompute_layers") or step.get("recompute_modules"):
        raise LlmcalcError("layout checks memory with --recompute none, selective or full; time a partial "
                           "recomputation (--recompute-layers, --recompute-modules) with `llmcalc train`")
    dev = networked_device(gpu, dtype, step.pop("network", None), n_gpus)
    capacity = reserved_capacity(dev.accelerator, reserve_gib)
    per_node = dev.network.gpus_per_node
    tries = [recompute] if recompute else ["none", "selective", "full"]
    counts = {"searched": 0, "fit": 0, "oom": 0, "invalid": 0, "bounded": 0, "hsdp": 0}  # hsdp: of searched
    pins = dict(pins or {})
    zero_pin, sp_pin = pins.pop("zero", None), pins.pop("sequence_parallel", True)
    candidates = layout_candidates(spec, n_gpus, seq_len, global_batch, per_node, pins=pins)
    tick = progress(len(candidates)) if progress else None
    oom: list = []
    rec = lookup(RECIPES, "recipe", recipe)
    optimizer = step.get("optimizer", "adamw")
    peaks: dict[tuple, Any] = {("tables",): MemoryTables()}  # this search's memory checks (_least_that_fits)
    moe_only = {"ep_overlap": False, "ep_dispatcher": "alltoall", "moe_imbalance": 1.0}
    for key, off in moe_only.items():
        if step.get(key, off) != off and not spec.is_moe:
            raise LlmcalcError(f"{option_flag(key)} needs a mixture-of-experts model; {spec.name} is dense")
    # the expert all-to-all settings apply to the layouts that have all-to-alls (and micro-batches to overlap)
    plain_step = {k: v for k, v in step.items() if k not in ("ep_overlap", "ep_dispatcher")}
    # make_layout of each candidate with the step settings, else (where they differ) without the all-to-all ones
    options = dict(schedule=None, zero=DEFAULT_ZERO if zero_pin is None else zero_pin, sequence_parallel=sp_pin,
                   dp_overlap=True, tp_overlap=False)  # the overlap where it applies: _tp_variants
    makers: list[Callable[[tuple, bool], Layout] | None] = []
    for given in [step] + ([plain_step] if plain_step != step else []):
        try:
            makers.append(_layout_maker(spec, n_gpus, seq_len, global_batch, options=options,
                                            step=given))
        except LlmcalcError:  # refuses every layout
            makers.append(None)
    layouts: list = []  # (floor, candidate index, tier, layout, what adds the optimizer) of the valid layouts
    # each layout's layer fields (LayerLayout, ExpertLayout) per maker and degrees but vpp (which they do not read)
    fields_of: dict[tuple, tuple[LayerLayout, ExpertLayout]] = {}
    shapes: dict[tuple, FloorShape] = {}  # per pp, vpp, schedule and stage split (the rest it reads: the search's)
    inputs = (spec, dev, seq_len, rec)
    floors = step_tables(StepInputs(spec, dev, seq=seq_len, recipe=rec, attention="flash", dropout=False,
                                    efficiency=constants.KERNEL_EFFICIENCY)).setdefault("floors", {})  # (ctx.table)
    slot = 0  # each layout tried (a candidate's expert settings are layouts of their own): its place in the order
    # the uneven pipeline splits tried where the command line fixes none (_stage_splits), around the balance of the
    # first layout of each tp, cp and micro-batch (stage_balance: the layer and head costs of those tokens on a rank)
    fixed_stages = any(step.get(k) for k in ("first_stage_layers", "last_stage_layers", "pipeline_layout"))
    balances: dict[tuple, tuple[float, float]] = {}
    splits: dict[tuple, list[tuple[int, int]]] = {}

    def stage_variants(lay: Layout) -> list[Layout]:  # lay and its uneven splits (_stage_splits), memoized
        if fixed_stages or lay.pp < 2:
            return [lay]
        balance = balances.get((lay.tp, lay.cp, lay.micro_batch))
        if balance is None:
            balance = balances[lay.tp, lay.cp, lay.micro_batch] = stage_balance(
                _context_in(inputs, lay, (LayerLayout.of(lay), ExpertLayout.of(lay))))
        key = (lay.pp, lay.vpp, lay.schedule, balance)
        pairs = splits.get(key)
        if pairs is None:
            pairs = splits[key] = _stage_splits(spec, lay, balance)
        return [lay] + [replaced(lay, {"first_stage_layers": f, "last_stage_layers": la}) for f, la in pairs]
    for tp, cp, pp, vpp, mb, ep, etp in candidates:
        if tick:
            tick()
        lay, which = None, 0
        for which in range(len(makers)):
            make = makers[which]
            if make is not None:
                try:
                    lay = make((tp, cp, pp, vpp, mb, ep, etp or None), False)  # (layout_candidates' degrees)
                    break
                except LlmcalcError:
                    continue
        if lay is None:
            counts["invalid"] += 1
            slot += 1
            continue
        for variant in [s for t in _tp_variants(lay, tp_overlap, per_node)
                        for e in _expert_variants(spec, t, step, per_node)
                        for s in stage_variants(e)]:
            index, slot, lay = slot, slot + 1, variant
            if exhaustive:
                layouts.append((0.0, index, _MEMORY, lay, None))
                continue
            # its work floor (_first_floors)
            degrees = (which, tp, cp, pp, mb, ep, etp, lay.ep_dispatcher, lay.ep_overlap, lay.tp_overlap)
            fields = fields_of.get(degrees)
            if fields is None:
                fields = fields_of[degrees] = (LayerLayout.of(lay), ExpertLayout.of(lay))
            split = (pp, vpp, lay.schedule, lay.first_stage_layers, lay.last_stage_layers)
            shape = shapes.get(split)
            if shape is None:
                shape = shapes[split] = _floor_shape(spec, lay)
            layouts.append((_first_floors(floors, inputs, lay, fields, shape), index, _RANKS, lay, (fields, shape)))
    counts["searched"] = slot
    # best first: the least floor is taken and made tighter (its pipeline's paths; its optimizer step; then its
    # memory: the recomputation and ZeRO stage that fit and their stage times; their DP floor; then its stages, DP
    # and path bound: _prepare), or
    # once it is a prepared layout's, that layout is timed; once the least floor left cannot beat the `top`-th exact
    # step, neither can any other layout (their steps are at least their floors): those left are `bounded`
    heapq.heapify(layouts)

    def no_fit(lay: Layout, peak: float, zero: int) -> None:  # an evaluated layout that does not fit
        counts["oom"] += 1
        oom.append((lay, peak, tries[-1] + (" and ZeRO-3" if zero == 3 else "")))

    def fit(lay: Layout, rc: str) -> Prepared:  # an evaluated layout that fits, with its stages, DP and bound
        counts["fit"] += 1
        return _prepare(spec, dev, lay, seq_len, causal, recompute=rc, recipe=recipe, attention="flash",
                        dropout=False)
    prepared: list[tuple[Prepared, float, int, StepPrediction | None]] = []
    best: list[float] = []  # the `top` smallest exact steps so far, ascending
    bounds: dict[int, Prepared] = {}  # the predictions that are their pipeline's lower bound (by id): their layout

    def finish(prep: Prepared, simulated: bool) -> StepPrediction:  # _finish, its lower bounds kept in `bounds`
        pred = _finish(prep, simulated=simulated)
        if not (simulated or prep.exact):
            bounds[id(pred)] = prep
        return pred
    while layouts:
        # the least floor, left on the heap: a next tier takes its place there (at the root where it is still the
        # least, else heapreplace: one sift instead of a pop's and a push's); the entries' (floor, candidate index)
        # are all distinct, so they come off in the same order
        floor, index, tier, lay, more = layouts[0]
        if len(best) >= top and floor > best[-1]:
            break
        if tier == _RANKS:  # at most its path floor, at a fraction of its cost: most layouts stop here
            ranks = _first_floors(floors, inputs, lay, more[0], more[1], ranks=True)
            entry = (max(floor, ranks), index, _PATHS, lay, more[0])
        elif tier == _PATHS:  # its context (_context's, with the layer fields it was given) and path floor
            ctx = _context_in(inputs, lay, more)
            floor, ctx, paths = _step_floor(spec, dev, lay, seq_len, rec, recompute="none", ctx=ctx)
            entry = (floor, index, _OPTIMIZER, lay, (ctx, paths))
        elif tier == _OPTIMIZER:
            ctx, paths = more
            floor += _optimizer_floor(ctx, paths, with_dp=False)[0] * (1 - FLOOR_MARGIN)
            entry = (floor, index, _MEMORY, lay, more)
        elif tier == _MEMORY:
            rc, zero, peak = _least_that_fits(spec, lay, seq_len, tries, capacity, settings=(recipe, optimizer),
                                              peaks=peaks, zero_pin=3 if lay.dp_shard else zero_pin)
            if rc is None:
                heapq.heappop(layouts)
                no_fit(lay, peak, zero)
                continue
            hsdp = _hsdp_shards(lay, per_node) if zero == 3 and not (lay.dp_shard or "dp_shard" in step) else []
            base = lay
            lay = lay if zero == lay.zero else _with_zero(lay, zero)
            if exhaustive:
                entry = (floor, index, _PREPARE, lay, (rc, peak))
            else:  # the floor of the recomputation and ZeRO stage that fit, its DP floor next
                ctx = more[0]
                if ctx.lay is not lay:  # the same layer fields (they read no ZeRO stage)
                    ctx = _context_in(inputs, lay, (ctx.layer_layout, ctx.expert_layout))
                floor, ctx, paths = _step_floor(spec, dev, lay, seq_len, rec, recompute=rc, ctx=ctx)
                opt = _optimizer_floor(ctx, paths, with_dp=False)[0]
                entry = (floor + opt * (1 - FLOOR_MARGIN), index, _DP, lay, (rc, peak, floor, ctx, paths))
            for shard in hsdp:  # FSDP's HSDP shard groups, each a layout of its own, at this floor (_hsdp_shards)
                heapq.heappush(layouts, (entry[0], slot, _MEMORY, replaced(base, {"dp_shard": shard}), more))
                slot += 1
                counts["searched"] += 1
                counts["hsdp"] += 1
        elif tier == _DP:  # the same floor as with its DP floor at once, at or above the one it was taken at
            rc, peak, floor, ctx, paths = more
            opt, dp = _optimizer_floor(ctx, paths)
            entry = (floor + (opt + dp) * (1 - FLOOR_MARGIN), index, _PREPARE, lay, (rc, peak))
        elif tier == _PREPARE:
            rc, peak = more
            prep = fit(lay, rc)
            if exhaustive:  # simulated below, in order of the pipeline bounds
                heapq.heappop(layouts)
                prepared.append((prep, peak, index, None))
                continue
            entry = (prep.step_bound, index, _TIME, lay, (prep, peak))
        else:
            heapq.heappop(layouts)
            prep, peak = more  # a prepared layout's turn: simulated while it can still be among the `top`
            can_win = len(best) < top or prep.step_bound < best[-1]
            pred = finish(prep, simulated=can_win)
            if can_win:
                best = sorted(best + [pred.step_seconds])[:top]
            prepared.append((prep, peak, index, pred))
            continue
        n = len(layouts)
        if (n < 2 or entry < layouts[1]) and (n < 3 or entry < layouts[2]):  # below the root's children: its root
            layouts[0] = entry
        else:
            heapq.heapreplace(layouts, entry)
    # what the search stopped before: the prepared layouts fit (their bound is their step), a few extremes are
    # evaluated for the losers' table (_extremes: for each kind of loss the most extreme that fits, of the first
    # EXTREME_TRIES; none can win, so each keeps its bound), the rest are bounded
    left = {}
    for _, index, tier, lay, more in layouts:
        if tier == _TIME:
            prep, peak = more
            prepared.append((prep, peak, index, finish(prep, simulated=False)))
        else:
            left[index] = (tier, lay, more)
    fits: dict[int, bool] = {}
    for order in _extremes([(index, lay) for index, (_, lay, _) in left.items()]):
        for index in order[:EXTREME_TRIES]:
            if index not in fits:
                tier, lay, more = left[index]
                if tier in (_DP, _PREPARE):  # its memory checked
                    rc, peak = more[:2]
                else:
                    rc, zero, peak = _least_that_fits(spec, lay, seq_len, tries, capacity,
                                                      settings=(recipe, optimizer), peaks=peaks,
                                                      zero_pin=3 if lay.dp_shard else zero_pin)
                    if rc is not None:
                        lay = lay if zero == lay.zero else _with_zero(lay, zero)
                fits[index] = rc is not None
                if rc is None:
                    no_fit(lay, peak, zero)
                else:
                    prep = fit(lay, rc)
                    prepared.append((prep, peak, index, finish(prep, simulated=False)))
            if fits[index]:
                break
    counts["bounded"] = len(left) - len(fits)
    # in order of the pipeline bounds (ties in candidate order), as the exhaustive search simulates them: equal
    # steps keep this order in the ranking whichever layouts were evaluated
    prepared.sort(key=lambda pp: (pp[0].step_bound, pp[2]))
    ranked = []
    for prep, peak, _, done in prepared:
        if done is None:
            can_win = len(best) < top or prep.step_bound < best[-1]
            done = finish(prep, simulated=can_win)
            if can_win:
                best = sorted(best + [done.step_seconds])[:top]
        ranked.append((done, peak))
    ranked.sort(key=lambda pm: -pm[0].tokens_per_second)
    exact: dict[int, StepPrediction] = {}  # the losers shown, simulated: their figures are what train predicts

    def exact_of(pred: StepPrediction) -> StepPrediction:  # simulated(pred), from its prepared layout
        if id(pred) not in bounds:
            return pred
        if id(pred) not in exact:
            exact[id(pred)] = _finish(bounds[id(pred)])
        return exact[id(pred)]
    losers = why_they_lose(ranked, oom, capacity, exact_of)
    return ranked, losers, counts


def _least_that_fits(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str], capacity: float,
                     settings: tuple[str, str], peaks: dict[tuple, Any],
                     zero_pin: int | None = None) -> tuple[str | None, int, float]:
    """(recompute, ZeRO stage, peak bytes) of the cheapest setting whose peak (`memory`'s: layout.layout_memory)
    fits `capacity`: ZeRO-1 with the least recomputation of `tries`, else ZeRO-3 (FSDP: weights and gradients
    sharded too) where dp > 1; (None, the last stage tried, the peak of its last recomputation) when nothing fits.
    The last of `tries` (the most recomputation) is checked first: no recomputation peaks below it (full saves less
    at every point of the step than selective, selective than none: memory.MemoryEstimate.phase_components), so
    where it does not fit, no other does. `settings` = (recipe, optimizer); `peaks` holds this search's peaks by
    what layout_memory reads of a layout, and its memory.MemoryTables under "tables"; `zero_pin`: the one ZeRO
    stage to try (`layout --zero`)."""
    zeros = (zero_pin,) if zero_pin is not None else (1, 3) if lay.dp > 1 else (1,)
    recipe, optimizer = settings

    def peak_of(zero: int, rc: str) -> float:
        key = (lay.tp, lay.cp, lay.pp, lay.vpp, lay.dp, lay.dp_shard, lay.ep, lay.etp, zero, lay.sequence_parallel,
               lay.micro_batch, min(lay.grad_accum, lay.pp + 1), rc,  # (in_flight: m > pp caps nothing)
               lay.first_stage_layers, lay.last_stage_layers)
        found = peaks.get(key)
        if found is None:
            trial = lay if zero == lay.zero else _with_zero(lay, zero)
            found = peaks[key] = layout_memory(spec, trial, seq_len, rc, recipe=recipe, optimizer=optimizer,
                                               tables=peaks[("tables",)]).phase_peak()
        return found
    peak, zero = 0.0, 1
    for zero in zeros:
        peak = peak_of(zero, tries[-1])
        if peak > capacity:
            continue
        for rc in tries[:-1]:
            if peak_of(zero, rc) <= capacity:
                return rc, zero, peak_of(zero, rc)
        return tries[-1], zero, peak
    return None, zero, peak


def _expert_variants(spec: ModelSpec, lay: Layout, step: dict[str, Any], per_node: int) -> list[Layout]:
    """The layouts `layout` tries for one candidate's expert mesh: where tokens travel between EP ranks
    (``lay.alltoall``) and the command line left them open, each dispatcher that can move fewer bytes or hops than
    the all-to-all and each EP overlap that applies, else `lay` alone:

    - deepep where the EP group spans nodes (one copy per remote node instead of one per expert there);
    - allgather where the expert group is at most top-k ranks (every rank's tokens, (n - 1)·T·D each way, is then
      no more than the all-to-all's (n - 1)/n·k·T·D);
    - --ep-overlap where there are 2 or more micro-batches per pipeline (its condition), at its SMs' cost."""
    if not (spec.is_moe and lay.alltoall):
        return [lay]
    dispatchers = [lay.ep_dispatcher]
    if "ep_dispatcher" not in step:
        if lay.ep * _stride(lay, "ep", True) > per_node:
            dispatchers.append("deepep")
        if lay.ep * lay.expert_tp <= spec.n_experts_per_token:
            dispatchers.append("allgather")
    overlaps = [lay.ep_overlap] + ([True] if "ep_overlap" not in step and lay.grad_accum >= 2 else [])
    return [lay if (d, o) == (lay.ep_dispatcher, lay.ep_overlap) else replaced(lay, {"ep_dispatcher": d,
                                                                                     "ep_overlap": o})
            for d in dispatchers for o in overlaps]


def _tp_variants(lay: Layout, tp_overlap: bool | None, per_node: int) -> list[Layout]:
    """The layouts `layout` tries for one candidate (`lay`, made without the overlap) by --tp-overlap: given
    (`tp_overlap` True), the layout with it where tp > 1 (tp 1 has no TP collective); left open (None), where the
    overlap applies (tp > 1, sequence parallelism on: TransformerEngine's userbuffers overlap the all-gathers and
    reduce-scatters SP runs; the TP group inside one node of `per_node` GPUs: CUDA IPC handles), the layout without
    and with it (each at its cost: collectives.add_tp_comm); else `lay` alone."""
    if tp_overlap is False or lay.tp == 1:
        return [lay]
    on = replaced(lay, {"tp_overlap": True})
    if tp_overlap:
        return [on]
    if not lay.sequence_parallel or lay.tp * _stride(lay, "tp") > per_node:
        return [lay]
    return [lay, on]


def stage_balance(ctx: StepContext) -> tuple[float, float]:
    """(e, h): the first pipeline stage's extra work (the embedding) and the last stage's (the LM head and loss, and
    the MTP modules Megatron-Core places there), each in layers' worth of one micro-batch's work at recompute none
    under `ctx` (forward, backward, weight gradients and exposed communication, StageTimes.total):

        e = embedding / mean layer,  h = (head + loss + MTP) / mean layer

    (the mean over the model's layers: hybrid and MoE stacks mix kinds). A pipeline runs at its slowest stage's
    pace: with f layers on the first rank, l on the last and m on each other, every rank is equally loaded where
    f + e = m = l + h (_stage_variants rounds this to Megatron's splits)."""
    spec = ctx.spec
    layer = sum(_layer_cost(ctx, i, rec).total * count for i, rec, count in _whole(spec, 0).runs) / spec.n_layers
    last = _head_times(ctx).total + (_mtp_times(ctx, "none").total * ctx.lay.mtp_layers if ctx.lay.mtp_layers else 0)
    return _embedding_times(ctx).total / layer, last / layer


STAGE_VARIANTS = 2  # how many uneven splits _stage_splits keeps per pipeline shape: the best balanced


def _stage_splits(spec: ModelSpec, lay: Layout, balance: tuple[float, float]) -> list[tuple[int, int]]:
    """The uneven splits, (first, last) rank layers (0: as the others), `layout` tries beside `lay`'s even split
    (pp >= 2; --first/--last-stage-layers and --pipeline-layout not given; what it reads of `lay`: pp, vpp and the
    schedule): Megatron-Core's num_layers_in_first/last_pipeline_stage around the balanced point
    of the stages' own costs (`balance` = (e, h), stage_balance's), not every split. The balanced middle rank holds
    m* = (L + e + h) / pp layers; for m the multiples of the v chunks per rank on either side of m*: the last rank
    alone lighter (l = L - (pp - 1) m), the first alone (f = L - (pp - 1) m), and both, the L - (pp - 2) m layers of
    the two split so that f + e = l + h (f - l = h - e, rounded to whole chunks). A split is kept where Megatron's
    rules take it (each rank's layers whole chunks, the middle ranks' evenly: layout._check_stage_layers) and its
    busiest rank's load (layers, + e on the first rank, + h on the last: _rank_loads) is below the even split's;
    the STAGE_VARIANTS least loaded, each a layout of its own that the search bounds and evaluates as the others."""
    e, h = balance
    n, pp = spec.n_layers, lay.pp
    v = chunks_per_rank(lay.schedule, lay.vpp)
    target = (n + e + h) / pp / v
    even = max(_rank_loads(lay, stage_split(n, lay, pp * v), balance))
    found: dict[tuple, tuple[float, int, Layout]] = {}
    for m in (math.floor(target) * v, math.ceil(target) * v):
        if m <= 0:
            continue
        rest, both = n - (pp - 1) * m, n - (pp - 2) * m
        last = round((both + e - h) / 2 / v) * v
        for first_layers, last_layers in ((0, rest), (rest, 0), (both - last, last)):
            if first_layers < 0 or last_layers < 0 or first_layers == last_layers == 0:
                continue
            variant = replaced(lay, {"first_stage_layers": first_layers, "last_stage_layers": last_layers})
            try:
                _check_stage_layers(spec, variant)
            except LlmcalcError:
                continue
            split = stage_split(n, variant, pp * v)
            load = max(_rank_loads(variant, split, balance))
            if load < even * (1 - 1e-9) and tuple(split) not in found:
                found[tuple(split)] = (load, len(found), variant)
    return [(variant.first_stage_layers, variant.last_stage_layers)
            for _, _, variant in sorted(found.values())[:STAGE_VARIANTS]]


def _rank_loads(lay: Layout, split: list[int], balance: tuple[float, float]) -> list[float]:
    """Each pipeline rank's work in layers' worth: its chunks' layers (`split`: stage_split's, chunk c of rank r at
    pipeline.stage_of), + e on the rank of the first stage (the embedding), + h on the rank of the last (LM head,
    loss, MTP; under zb-v's V the first rank's): stage_balance's (e, h)."""
    v = len(split) // lay.pp
    loads = [0.0] * lay.pp
    for r in range(lay.pp):
        for c in range(v):
            stage = stage_of(lay.schedule, r, c, lay.pp)
            loads[r] += split[stage] + (balance[0] if stage == 0 else 0.0) \
                + (balance[1] if stage == len(split) - 1 else 0.0)
    return loads


def _hsdp_shards(lay: Layout, per_node: int) -> list[int]:
    """The HSDP shard groups `layout` tries for a layout that fits only as ZeRO-3 (FSDP) whose data-parallel group
    spans nodes: the dp ranks of 1, 2, 4, ... whole nodes (PyTorch FSDP's HYBRID_SHARD: "FULL_SHARD within a node,
    and replicate parameters across nodes"; torchtitan's data_parallel_shard_degree), each dividing dp and below it.
    HSDP trades memory (weights, gradients and states sharded over fewer ranks) for weight all-gathers and gradient
    reduce-scatters inside the shard group and one gradient all-reduce across the replicas (step/dp.py:
    _replica_colls). Its step is at least the FSDP layout's floor after its memory check, before its DP: the same
    stages at as much recomputation or more (it holds more), and an optimizer step over a larger shard
    (dp.py:_rank_optimizer), so the search queues each at that floor (exhaustive: with the rest).
    None where the shard group of one node is not whole dp ranks (the dp stride does not divide a node)."""
    stride = lay.strides()["dp"]
    if stride >= per_node or per_node % stride or lay.dp * stride <= per_node:
        return []
    shards, shard = [], per_node // stride
    while shard < lay.dp:
        if lay.dp % shard == 0:
            shards.append(shard)
        shard *= 2
    return shards


def simulated(pred: StepPrediction) -> StepPrediction:
    """A ranked prediction with the figures `train --global-batch` gives its layout: itself where its pipeline was
    simulated (or is exact in closed form), else (the search kept the lower bound of a layout that could not win)
    predicted again with the pipeline simulated. The search times every layout with flash attention, no dropout."""
    if pred.assumptions.get("pipeline") != LOWER_BOUND:
        return pred
    return predict(pred.spec, pred.device, pred.layout, pred.seq_len, causal=pred.causal, recompute=pred.recompute,
                   recipe=pred.recipe, attention=pred.attention)


EXTREME_TRIES = 3  # how many of the most extreme layouts of a kind _extremes' caller tries for one that fits


def _extremes(left: list[tuple[int, Layout]]) -> list[list[int]]:
    """The layouts a pruned search evaluates beyond those that can win, so that `layout`'s "why the others lose"
    shows each kind of loss at its strongest: of the layouts it stopped before (`left`: candidate index, layout),
    per kind of loss their indices, most extreme first: the largest closed-form bubble fraction (pp - 1) / (vpp x
    micro-batches) (the pipeline bubble), the largest tp then cp (TP communication: the least work per rank beside
    it), the largest cp then tp (CP communication), the largest dp (DP communication), the largest pp x vpp (PP
    sends); candidate order on ties."""
    ordered = sorted(left, key=operator.itemgetter(0))  # (distinct indices: sorted(left)'s order)
    lays = [lay for _, lay in ordered]
    picks: tuple[list[Any], ...] = (
        [(lay.pp - 1) / (lay.vpp * lay.grad_accum) for lay in lays], [(lay.tp, lay.cp) for lay in lays],
        [(lay.cp, lay.tp) for lay in lays], [lay.dp for lay in lays], [lay.pp * lay.vpp for lay in lays])
    out = []
    # per key the positions by key, largest first, equal keys in their order (heapq.nlargest with the key, its docs'
    # sorted(..., reverse=True)[:n]): the largest keys alone (nlargest, no key call per layout), each found at its
    # first position, a repeated one at the next
    for keys in picks:
        found: list[int] = []
        last, at = None, -1
        for value in heapq.nlargest(EXTREME_TRIES, keys):
            at = keys.index(value, at + 1 if value == last else 0)
            found.append(ordered[at][0])
            last = value
        out.append(found)
    return out


_RANKS, _PATHS, _OPTIMIZER, _MEMORY, _DP, _PREPARE, _TIME = range(7)  # what search_layouts does next to a layout off
# its heap


def why_they_lose(ranked: list, oom: list, capacity: float,
                  exact: Callable[[StepPrediction], StepPrediction] | None = None) -> list:
    """A few representative losers: for each kind of loss the layout that suffers it most, and what did
    not fit (the one closest to fitting, which would otherwise have been a candidate). `exact`: a ranked
    prediction as simulated (where the search kept a layout's pipeline at its lower bound), so that each loser shown
    has the figures `train` gives it; it is chosen by the figures ranked."""
    out: list[tuple[str, StepPrediction | None, str]] = []
    shown = exact or (lambda pred: pred)
    if ranked:
        best = ranked[0][0]
        for key, label in (("pp_bubble", "pipeline bubble"), ("tp_comm", "exposed TP communication"),
                           ("cp_comm", "exposed CP communication"), ("dp_comm", "exposed DP communication"),
                           ("pp_comm", "exposed PP send/recv")):
            worst = max(ranked[1:], key=lambda pm: pm[0].breakdown[key] / pm[0].step_seconds, default=None)
            if worst is None or worst[0].breakdown[key] <= best.breakdown[key] * 1.05 + 1e-9:
                continue
            p = shown(worst[0])
            if p.breakdown[key] <= best.breakdown[key] * 1.05 + 1e-9:
                continue
            out.append((f"{label}: {p.breakdown[key] / p.step_seconds * 100:.1f} % of its step (best: "
                        f"{best.breakdown[key] / best.step_seconds * 100:.1f} %)", p, _describe(p.layout, p.recompute)))
        slow = [pm for pm in ranked[1:] if pm[0].recompute != best.recompute]
        if slow:
            p = shown(slow[0][0])
            out.append((f"recompute {p.recompute} re-runs work (HFU {p.hfu * 100:.1f} % vs MFU {p.mfu * 100:.1f} %)",
                        p, _describe(p.layout, p.recompute)))
    if oom:
        lay, peak, rc = min(oom, key=lambda o: o[1])
        digits = 1 if f"{peak / GIB:.1f}" != f"{capacity / GIB:.1f}" else 3  # never "80.0 GiB > 80 GiB"
        out.append((f"does not fit: {peak / GIB:.{digits}f} GiB per GPU > {capacity / GIB:.{digits}f} GiB even "
                    f"with recompute {rc}"
                    f" ({len(oom)} such layouts)", None, _describe(lay)))
    return out


def reserved_capacity(accelerator: Any, reserve_gib: float) -> float:
    """Bytes a layout may use per GPU: the accelerator's usable memory less --reserve-gib (kept free, as `memory`
    keeps it); a reserve that leaves nothing is refused naming the option."""
    capacity = accelerator.usable_bytes - reserve_gib * GIB
    if capacity <= 0:
        raise LlmcalcError(f"--reserve-gib {reserve_gib:g} leaves nothing of {accelerator.key}'s "
                           f"{accelerator.usable_bytes / GIB:.2f} GiB usable: reserve less")
    return capacity


@dataclass(frozen=True)
class LayoutSearch:
    """What `layout` prints: the layouts that fit, ranked by predicted throughput, and the rest with why."""

    spec: ModelSpec
    gpu: str
    n_gpus: int
    seq_len: int
    global_batch: int
    ranked: list  # [(StepPrediction, peak bytes per GPU)], fastest first
    losers: list  # [(reason, StepPrediction or None, layout text)]
    counts: dict  # searched, fit, oom, invalid, bounded (search_layouts)
    recipe: str = "bf16-mixed"
    optimizer: str = "adamw"
    reserve_gib: float = 0.0  # GiB kept free per GPU (--reserve-gib)
    knobs: tuple[str, ...] = ()  # what the search varied, what it took as given, and why (searched_knobs)


def searched_knobs(spec: ModelSpec, pins: dict[str, Any], step: dict[str, Any], recompute: str | None,
                   tp_overlap: bool | None, best: Layout | None = None) -> tuple[str, ...]:
    """`layout`'s knobs in three lines: those it searched (the degrees and micro-batch not pinned; the recomputation
    and ZeRO stage that fit; HSDP shard groups of the FSDP layouts; for MoE models the expert dispatcher and EP
    overlap where the command line left them open; --tp-overlap and the uneven pipeline splits where they were left
    open, saying what the best layout (`best`) took), those taken as given, and those it does not vary and why."""
    degrees = [k.replace("_", "-") for k in PINNED if k not in pins and (spec.is_moe or k not in ("ep", "etp"))]
    searched = degrees + ([] if recompute else ["recompute none/selective/full"]) \
        + ([] if "zero" in pins else ["ZeRO-1 else ZeRO-3 (FSDP)"]) \
        + ([] if "dp_shard" in step or pins.get("zero") in (0, 1, 2) else
           ["HSDP shard groups of 1, 2, 4 ... nodes where only FSDP fits across nodes (--dp-shard)"]) \
        + [option_flag(k) for k in ("ep_dispatcher", "ep_overlap") if spec.is_moe and k not in step] \
        + ([] if tp_overlap is not None else
           ["--tp-overlap on/off where tp > 1 inside one node (the best: "
            + ("on" if best is not None and best.tp_overlap else "off" if best is not None and best.tp > 1
               else "tp 1, none") + ")"]) \
        + ([] if any(k in step for k in ("first_stage_layers", "last_stage_layers", "pipeline_layout")) else
           [f"--first/--last-stage-layers: up to {STAGE_VARIANTS} uneven splits where pp > 1, around the balance of "
            "the embedding's and the LM head's cost against a layer's (the best: " + _split_text(best) + ")"])
    given = [option_flag(k) for k in (*PINNED, "zero", "dp_shard", "ep_dispatcher", "ep_overlap", "cp_comm",
                                      "first_stage_layers", "last_stage_layers", "pipeline_layout",
                                      "fp8_param_gather") if k in pins or k in step]
    if tp_overlap is not None:
        given.append(f"--tp-overlap {'on (where tp > 1)' if tp_overlap else 'off'}")
    return (f"knobs searched: {'; '.join(searched)}",
            "knobs given: " + (", ".join(given) if given else "none"),
            "knobs not searched: --pipeline-layout (a recipe's own stage layout), "
            "--cp-comm, --fp8-param-gather (recipe facts, applied as given); partial recompute (--recompute-layers, "
            "--recompute-modules: time it with `llmcalc train`)")


def _split_text(best: Layout | None) -> str:
    """The best layout's pipeline split in words, for searched_knobs."""
    if best is None or best.pp < 2:
        return "pp 1, none"
    if not (best.first_stage_layers or best.last_stage_layers):
        return "even"
    return f"first {best.first_stage_layers or 'even'}, last {best.last_stage_layers or 'even'}"


@per_call
def rank_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int | None = None,
                 global_batch_tokens: float | None = None, causal: bool = False, recompute: str | None = None,
                 tp_overlap: bool | None = None, progress: Callable[[int], Callable[[], None]] | None = None,
                 top: int = 10, exhaustive: bool = False, reserve_gib: float = 0.0, **step: Any) -> LayoutSearch:
    """`llmcalc layout`: search_layouts for the global batch given in sequences or tokens; no layout that fits
    is an error naming what to change. `step`: the recipe and STEP_DEFAULTS' settings, for every layout; `top`:
    how many layouts are listed, each of them exact (search_layouts; at least the ten best are, whose figures the
    losers' table compares); `exhaustive`: evaluate every layout (search_layouts); `tp_overlap` None: tried both
    ways where it applies (search_layouts)."""
    batch = global_batch_sequences(global_batch, global_batch_tokens, seq_len, required=True)
    assert batch is not None  # required: exactly one of the two was given
    pins = {k: step.pop(k) for k in (*PINNED, "zero", "sequence_parallel") if step.get(k) is not None}
    if pins.keys() & set(PINNED):  # the given degrees refused as train refuses them, before any search
        make_layout(spec, n_gpus, seq_len, batch, **{k: v for k, v in pins.items() if k != "vpp" or v > 1},
                    **{k: v for k, v in step.items() if k in STEP_DEFAULTS and v is not None})
    if tp_overlap and pins.get("tp") == 1:
        raise LlmcalcError("--tp-overlap overlaps the tensor-parallel collectives with the GEMMs; --tp 1 has none: "
                           "give --tp 2 or more, or leave --tp-overlap out (layout then tries it where tp > 1)")
    if tp_overlap and pins.get("sequence_parallel") is False:
        raise LlmcalcError("--tp-overlap splits the all-gather / reduce-scatter of sequence parallelism around "
                           "the GEMMs; it needs --sequence-parallel (drop --no-sequence-parallel)")
    if step.get("cp_comm") == "a2a+p2p":
        raise LlmcalcError("--cp-comm a2a+p2p needs its all-to-all size for one cp degree (train --cp-a2a-size); "
                           "layout tries many: use p2p, all-gather or a2a here")
    ranked, losers, counts = search_layouts(spec, gpu, n_gpus, seq_len, global_batch=batch, causal=causal,
                                            recompute=recompute, tp_overlap=tp_overlap, progress=progress,
                                            top=max(top, 10), exhaustive=exhaustive, reserve_gib=reserve_gib,
                                            pins=pins, **{k: v for k, v in step.items() if v is not None})
    shard = step.get("dp_shard")
    if not ranked and shard and counts["invalid"] == counts["searched"]:  # the shard group no layout has
        raise LlmcalcError(f"--dp-shard {shard} shards over {shard} of the data-parallel ranks (HSDP): no layout of "
                           f"{n_gpus:,} GPUs has a dp above it that it divides, with --zero 1-3; give a smaller "
                           "--dp-shard, more GPUs, or leave it out (layout then tries HSDP where FSDP spans nodes)")
    if not ranked:
        raise LlmcalcError(f"no layout of {spec.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{batch} (of the layouts tried, {counts['oom']:,} do not fit in memory and "
                           f"{counts['invalid']:,} contradict the model): use more GPUs or a larger --global-batch"
                           + (f" (or a smaller --reserve-gib than {reserve_gib:g})" if reserve_gib else ""))
    return LayoutSearch(spec=spec, gpu=gpu, n_gpus=n_gpus, seq_len=seq_len, global_batch=batch, ranked=ranked,
                        losers=losers, counts=counts, recipe=step.get("recipe") or "bf16-mixed",
                        optimizer=step.get("optimizer") or "adamw", reserve_gib=reserve_gib,
                        knobs=searched_knobs(spec, pins, {k: v for k, v in step.items() if v is not None},
                                             recompute, tp_overlap, best=ranked[0][0].layout))
