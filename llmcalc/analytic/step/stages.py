"""Stage plans: which layers each pipeline stage holds, its cost from its layers', and the passes the pipeline times."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ...spec import ModelSpec
from .. import pipeline_layout
from ..pipeline import stage_of
from .cache import _CACHES, _cached, _cached_in, _interned, _token
from .context import StageTimes, StepContext
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


def _stage_cost(ctx: StepContext, composition: tuple, recompute: str, cid: int | None = None) -> StageTimes:
    """One stage's StageTimes from its composition (_stage_plan's): its layers' costs times their counts, the
    embedding and the LM head (and MTP layers) where it holds them. Stages made of the same layers cost the same,
    in this layout and in every other with the same layer costs (kept in the layers' cost cache, under the
    composition's _interned id: `cid` where the caller has it, _stage_plan's)."""
    key = ("stage", _interned(composition) if cid is None else cid, recompute, ctx.lay.mtp_layers)
    total = ctx.cache.get(key)
    if total is None:
        runs, embedding, head, mtp = composition
        total = StageTimes()
        for i, rc, count in runs:
            total.add(_layer_cost(ctx, i, rc), count)
        if embedding:  # the same for every stage plan of these layer costs (cached with the dense layers')
            total.add(_cached_in(ctx.dense_cache, ("embedding",), lambda: _embedding_times(ctx)))
        if head:
            total.add(_cached_in(ctx.dense_cache, ("head",), lambda: _head_times(ctx)))
        for _ in range(mtp):  # on the last stage, or where --pipeline-layout puts them
            total.add(_mtp_times(ctx, recompute))
        ctx.cache[key] = total
    return total


def _mtp_stage(lay: Layout, n_stages: int) -> int:
    """The model stage holding the MTP layers: the last (with the LM head), or where --pipeline-layout puts them."""
    if lay.pipeline_layout:
        found = pipeline_layout.parse(lay.pipeline_layout, lay.pp).mtp_stage
        return n_stages - 1 if found is None else found
    return n_stages - 1


def _stage_plan(spec: ModelSpec, n_stages: int, lay: Layout,
                recompute: str) -> tuple[list[int], list[int], list[int], list, Callable[[str, int], tuple], tuple]:
    """(layers per stage, first layer of each, each stage's composition as an index into the distinct compositions,
    the distinct compositions, the rank groups, each distinct composition's _interned id): a composition is the runs
    of (a representative layer of one kind, what it recomputes, how many), whether the stage holds the embedding /
    the LM head, and its MTP layers; `groups(schedule, pp)` lists the pipeline ranks whose chunks have the same
    compositions once, each as (its first rank, that rank's stages), in rank order (such ranks cost the same in every
    respect), and the last rank of each such group (whose path dominates the group's in pipeline.path_bounds). Cached
    per model, stage count, recomputation and MTP layers (and pp and schedule where the first or last stage's layers
    or a pipeline layout are set: stage_split reads them only then)."""
    fixed = (lay.first_stage_layers, lay.last_stage_layers, lay.pipeline_layout, lay.pp, lay.schedule)
    key = (_token(spec), n_stages, recompute, lay.recompute_layers, lay.recompute_modules, lay.mtp_layers,
           *(fixed if any(fixed[:3]) else ()))
    found = _CACHES["params"].get(key)  # (a hit makes no closures)
    if found is not None:
        return found

    def make() -> tuple[list[int], list[int], list[int], list, Callable[[str, int], tuple], tuple]:
        split = stage_split(spec.n_layers, lay, n_stages)
        starts = list(itertools.accumulate(split[:-1], initial=0))  # sum(split[:k]) of each stage k
        kinds, first, segments = _cached("params", ("kinds", _token(spec)), lambda: _kinds_of(spec))
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

        def groups(schedule: str, pp: int) -> tuple[list, list[int]]:
            def make_groups() -> tuple[list, list[int]]:
                seen: dict[tuple, tuple[int, tuple[int, ...]]] = {}
                last: dict[tuple, int] = {}
                v = n_stages // pp
                for r in range(pp):
                    # stage_of(schedule, r, c, pp) of each chunk c: c x pp + r but for zb-v
                    stages = tuple(range(r, v * pp, pp)) if schedule != "zb-v" else \
                        tuple([stage_of(schedule, r, c, pp) for c in range(v)])
                    held = tuple(map(ids.__getitem__, stages))
                    seen.setdefault(held, (r, stages))
                    last[held] = r
                return list(seen.values()), sorted(last.values())
            return _cached("params", ("groups", *key, schedule, pp), make_groups)
        return split, starts, ids, list(index), groups, tuple(_interned(composition) for composition in index)
    return _cached("params", key, make)
