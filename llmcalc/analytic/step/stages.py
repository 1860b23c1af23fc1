"""Stage plans: which layers each pipeline stage holds, its cost from its layers', and the passes the pipeline times."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import field

from ...records import dataclass
from ...spec import ModelSpec
from .. import pipeline_layout
from ..pipeline import stage_of
from .cache import current
from .context import ExpertLayout, LayerLayout, StageTimes, StepContext, hash_once
from .layer import _embedding_times, _head_times, _kinds_of, _layer_cost, _mtp_times, _recomputes
from .layout import Layout, stage_split


def stage_passes(distinct: list[StageTimes], ids: Sequence[int], schedule: str
                 ) -> tuple[list[float], list[float], list[float] | None]:
    """(forward, backward, weight-gradient) seconds of each pipeline stage (stage k is distinct[ids[k]]) for the
    schedule's simulator: the forward with its exposed communication, the backward with the rest; a zero-bubble
    schedule splits the weight-gradient half (W) off the backward (else None). The formula path and the measured
    step model both build the pipeline's inputs here."""
    fwd_d = [s.fwd + s.comm_fwd for s in distinct]
    bwd_comm = [s.tp + s.cp + s.ep - s.comm_fwd for s in distinct]
    wgt: list[float] | None
    if schedule.startswith("zb"):  # the weight-gradient half (W) is split off the backward
        bwd_d = [s.bwd_input + c for s, c in zip(distinct, bwd_comm, strict=True)]
        wgt = [distinct[j].bwd_weight for j in ids]
    else:
        bwd_d = [s.bwd_input + s.bwd_weight + c for s, c in zip(distinct, bwd_comm, strict=True)]
        wgt = None
    return [fwd_d[j] for j in ids], [bwd_d[j] for j in ids], wgt


@dataclass(frozen=True)
class Composition:
    """What one pipeline stage holds: the runs of (a representative layer of one kind, what it recomputes, how many),
    whether it holds the embedding and the LM head, and its MTP layers."""

    runs: tuple[tuple[int, frozenset[str], int], ...]
    embedding: bool
    head: bool
    mtp: int

    __hash__ = hash_once  # many memo keys hold it


@dataclass(frozen=True)
class StageKey:
    """What one stage's cost reads beside the ``StepInputs`` its table is kept under: its composition (stage_plan's:
    the runs of (a representative layer, what it recomputes, how many), whether it holds the embedding and the LM
    head, its MTP layers), what its MTP layers recompute (none without them), and the layout's layer fields and
    expert mesh."""

    composition: Composition
    mtp_recomputes: frozenset[str]
    layout: LayerLayout
    experts: ExpertLayout


def _stage_cost(ctx: StepContext, composition: Composition, recompute: str) -> StageTimes:
    """One stage's StageTimes (``stage_times``), memoized per ``StageKey``: stages made of the same layers cost the
    same, in this layout and in every other with the same layer fields."""
    key = stage_key(ctx, composition, recompute)
    table = ctx.table("stage")
    total = table.get(key)
    if total is None:
        total = table[key] = stage_times(ctx, composition, recompute)
    return total


def stage_key(ctx: StepContext, composition: Composition, recompute: str) -> StageKey:
    """The ``StageKey`` of a stage of `composition` at `recompute` in this context."""
    last = ctx.spec.n_layers - 1
    return StageKey(composition, _recomputes(ctx.lay, recompute, last, last) if composition.mtp else frozenset(),
                    ctx.layer_layout, ctx.expert_layout)


def stage_times(ctx: StepContext, composition: Composition, recompute: str) -> StageTimes:
    """One stage's StageTimes from its composition: its layers' costs times their counts, the embedding and the LM
    head (and MTP layers) where it holds them."""
    total = StageTimes()
    for i, rc, count in composition.runs:
        total.add(_layer_cost(ctx, i, rc), count)
    if composition.embedding:
        total.add(_embedding_times(ctx))
    if composition.head:
        total.add(_head_times(ctx))
    for _ in range(composition.mtp):  # on the last stage, or where --pipeline-layout puts them
        total.add(_mtp_times(ctx, recompute))
    return total


def _mtp_stage(lay: Layout, n_stages: int) -> int:
    """The model stage holding the MTP layers: the last (with the LM head), or where --pipeline-layout puts them."""
    if lay.pipeline_layout:
        found = pipeline_layout.parse(lay.pipeline_layout, lay.pp).mtp_stage
        return n_stages - 1 if found is None else found
    return n_stages - 1


@dataclass(frozen=True)
class PlanKey:
    """What a stage plan reads of the layout beside the model: the stage count, the recomputation and its partial
    forms, the MTP layers, and (only where the first or last stage's layers or a pipeline layout are set: stage_split
    reads them only then) those, pp and the schedule."""

    n_stages: int
    recompute: str
    recompute_layers: int
    recompute_modules: tuple
    mtp_layers: int
    fixed: tuple  # (first_stage_layers, last_stage_layers, pipeline_layout, pp, schedule), or () where none is set

    @classmethod
    def of(cls, lay: Layout, n_stages: int, recompute: str) -> PlanKey:
        fixed = (lay.first_stage_layers, lay.last_stage_layers, lay.pipeline_layout, lay.pp, lay.schedule)
        return cls(n_stages, recompute, recompute_layers=lay.recompute_layers,
                   recompute_modules=lay.recompute_modules, mtp_layers=lay.mtp_layers,
                   fixed=fixed if any(fixed[:3]) else ())


@dataclass
class StagePlan:
    """Which layers each pipeline stage holds: the layers per stage (`split`), the first layer of each (`starts`),
    each stage's composition as an index (`ids`) into the distinct compositions (`compositions`); a composition is the
    runs of (a representative layer of one kind, what it recomputes, how many), whether the stage holds the embedding
    / the LM head, and its MTP layers."""

    split: list[int]
    starts: list[int]
    ids: list[int]
    compositions: list[Composition]
    memo: dict = field(default_factory=dict)  # what the call derives of the plan: its rank groups, floor ranks

    def groups(self, schedule: str, pp: int) -> tuple[list, list[int]]:
        """The pipeline ranks whose chunks have the same compositions, once, each as (its first rank, that rank's
        stages), in rank order (such ranks cost the same in every respect); and the last rank of each such group
        (whose path dominates the group's in pipeline.path_bounds)."""
        found = self.memo.get(("groups", schedule, pp))
        if found is None:
            found = self.memo["groups", schedule, pp] = _rank_groups(self.ids, schedule, pp)
        return found


def _rank_groups(ids: list[int], schedule: str, pp: int) -> tuple[list, list[int]]:
    seen: dict[tuple, tuple[int, tuple[int, ...]]] = {}
    last: dict[tuple, int] = {}
    v = len(ids) // pp
    for r in range(pp):
        # stage_of(schedule, r, c, pp) of each chunk c: c x pp + r but for zb-v
        stages = tuple(range(r, v * pp, pp)) if schedule != "zb-v" else \
            tuple([stage_of(schedule, r, c, pp) for c in range(v)])
        held = tuple(map(ids.__getitem__, stages))
        seen.setdefault(held, (r, stages))
        last[held] = r
    return list(seen.values()), sorted(last.values())


def stage_plan(spec: ModelSpec, n_stages: int, lay: Layout, recompute: str) -> StagePlan:
    """The stage plan of `spec` over `n_stages` stages (``StagePlan``), once per model and ``PlanKey`` in the running
    call's tables."""
    key = PlanKey.of(lay, n_stages, recompute)
    table = current().of(spec, "stage plans")
    found = table.get(key)
    if found is None:
        found = table[key] = _plan_stages(spec, n_stages, lay, recompute)
    return found


def _plan_stages(spec: ModelSpec, n_stages: int, lay: Layout, recompute: str) -> StagePlan:
    split = stage_split(spec.n_layers, lay, n_stages)
    starts = list(itertools.accumulate(split[:-1], initial=0))  # sum(split[:k]) of each stage k
    kinds, first, segments = _kinds_of(spec)
    # what each layer recomputes: the same for all but a partial full recomputation (_recomputes)
    same = None if recompute == "full" and lay.recompute_layers else _recomputes(lay, recompute, 0, 0)
    plan = []
    j = 0  # the first run of one kind (_kinds_of's segments) not before this stage
    for k in range(n_stages):
        runs: dict[tuple, list] = {}  # layers of the same kind and recomputation: one cost times their count
        a, b = starts[k], starts[k] + split[k]
        if same is None:
            for i in range(a, b):
                rc = _recomputes(lay, recompute, i, a)
                runs.setdefault((kinds[i], rc), [first[kinds[i]], 0])[1] += 1
        elif b > a:  # the same counts, in the same order, as layer by layer: each run's layers in [a, b) at once
            while j < len(segments) and segments[j][1] <= a:
                j += 1
            for start, stop, kind in segments[j:]:
                if start >= b:
                    break
                runs.setdefault((kind, same), [first[kind], 0])[1] += min(b, stop) - max(a, start)
        plan.append((tuple((i, rc, count) for (_, rc), (i, count) in runs.items()), k == 0, k == n_stages - 1,
                     lay.mtp_layers if k == _mtp_stage(lay, n_stages) else 0))
    index: dict[tuple, int] = {}
    ids = [index.setdefault(composition, len(index)) for composition in plan]
    return StagePlan(split, starts, ids, [Composition(*composition) for composition in index])
