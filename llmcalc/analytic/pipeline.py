"""Pipeline schedules simulated rank by rank: gpipe, 1f1b, interleaved (virtual stages), zb-h1, zb-v.

Each pipeline rank gets an ordered action list (F = forward of one micro-batch on one model chunk,
B = its backward, W = the weight-gradient half of a backward in the zero-bubble schedules). An
event simulation runs the lists: an action starts when its rank is free and the action it depends
on (the same micro-batch one stage earlier for F, one stage later for B) has finished, plus the
point-to-point transfer time when that action ran on another rank. The makespan of the lists is the
pipeline's time; what a rank does not spend computing is its bubble.

Closed forms the simulation reproduces (with equal stages, no transfer time; tests check them):
- gpipe and 1f1b (Huang et al. 2019; Narayanan et al. 2019/2021): bubble fraction (p-1)/(m+p-1),
- interleaved with v chunks per rank (Narayanan et al. 2021 sec. 2.2.2): (p-1)/(v·m+p-1),
- zb-h1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1): bubble time (p-1)(T_F+T_B-T_W)
  against 1f1b's (p-1)(T_F+T_B+T_W), where T_B is the input-gradient half of a backward,
- zb-v (Qi et al. 2024, two chunks per rank in a V, greedy: backward before forward, weight gradients
  fill waits): with T_F = T_B = T_W per chunk the only idle time left is the warm-up the last rank
  cannot avoid, (p-1)·T_F of one chunk (half a stage's forward); otherwise its bubble is what the
  simulation finds (no closed form is claimed).
"""

from __future__ import annotations

import functools
import heapq
import math
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import LlmcalcError
from ..records import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v")
EXACT_ACTIONS = 8192  # p·v·m above which simulate() extends a shorter run at its steady slope (see there)


@dataclass(frozen=True)
class PipelineResult:
    schedule: str
    p: int  # pipeline ranks
    v: int  # model chunks per rank
    m: int  # micro-batches
    makespan: float  # seconds from the first forward to the last backward
    busy: tuple[float, ...]  # seconds each rank computes

    @property
    def bubble(self) -> float:
        """Idle seconds of the busiest rank (the rank that paces the pipeline)."""
        return self.makespan - max(self.busy)

    @property
    def bubble_fraction(self) -> float:
        return self.bubble / self.makespan if self.makespan else 0.0


def closed_form_bubble_fraction(schedule: str, p: int, m: int, v: int = 1) -> float:
    """The textbook bubble fraction for equal stages: (p-1)/(m+p-1), interleaved (p-1)/(v·m+p-1)."""
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    raise LlmcalcError(f"no single closed form for {schedule}; its bubble depends on T_F, T_B, T_W")


def chunks_per_rank(schedule: str, vpp: int) -> int:
    return 2 if schedule == "zb-v" else vpp if schedule == "interleaved" else 1


def stage_of(schedule: str, rank: int, chunk: int, p: int) -> int:
    """Which of the p·v model stages (0 = embedding side) chunk `chunk` of `rank` holds."""
    if schedule == "zb-v":
        return rank if chunk == 0 else 2 * p - 1 - rank
    return chunk * p + rank


def _one_f_one_b(warmup: int, m: int, chunks_f: list, chunks_b: list) -> list:
    """Warm-up forwards, then alternate one forward and one backward, then the remaining backwards."""
    total = len(chunks_f)
    warmup = min(warmup, total)
    out = [("F",) + chunks_f[i] for i in range(warmup)]
    b = 0
    for f in range(warmup, total):
        out.append(("F",) + chunks_f[f])
        out.append(("B",) + chunks_b[b])
        b += 1
    out += [("B",) + chunks_b[i] for i in range(b, total)]
    return out


def action_lists(schedule: str, p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Per rank, the ordered (kind, chunk, micro-batch) actions F and B (W are added by the simulator)."""
    lists = []
    for r in range(p):
        if schedule == "gpipe":
            lists.append([("F", 0, j) for j in range(m)] + [("B", 0, j) for j in range(m)])
        elif schedule in ("1f1b", "zb-h1"):
            lists.append(_one_f_one_b(p - r - 1, m, [(0, j) for j in range(m)], [(0, j) for j in range(m)]))
        elif schedule == "interleaved":
            # Megatron-LM's order: groups of p micro-batches run through chunk 0, 1, ..., v-1.
            fwd = [((k // p) % v, (k // (p * v)) * p + k % p) for k in range(m * v)]
            bwd = [(v - 1 - (k // p) % v, (k // (p * v)) * p + k % p) for k in range(m * v)]
            lists.append(_one_f_one_b((p - r - 1) * 2 + (v - 1) * p, m, fwd, bwd))
        elif schedule == "zb-v":
            lists.append([])  # chosen on the fly by _zbv_candidates
        else:
            raise LlmcalcError(f"unknown pipeline schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    return lists


def _zbv_candidates(r: int, p: int, m: int, nxt: dict, cap: list) -> list:
    """ZB-V (Qi et al. 2024): the actions rank r may run next, in priority order: backwards first
    (chunk 1, the later stage, before chunk 0), then forwards (chunk 1 before chunk 0); chunk-0
    forwards are held back once 2p-1 micro-batches are in flight on the rank, which bounds
    activation memory like 1F1B's."""
    out = []
    for kind, chunk in (("B", 1), ("B", 0), ("F", 1), ("F", 0)):
        j = nxt[(kind, chunk)]
        if j >= m:
            continue
        if kind == "B" and j >= nxt[("F", chunk)]:
            continue
        if kind == "F" and chunk == 1 and j >= nxt[("F", 0)]:
            continue
        if kind == "F" and chunk == 0 and j - nxt[("B", 0)] >= cap[r]:
            continue
        out.append((kind, chunk, j))
    return out


def simulate(schedule: str, p: int, m: int, f_time, b_time, w_time=None, vpp: int = 1,
             p2p_time: float = 0.0) -> PipelineResult:
    """Run every rank's action list; return the makespan and each rank's busy time.

    f_time(stage), b_time(stage), w_time(stage): seconds of one micro-batch's forward, backward
    (for zb-*: the input-gradient half only) and weight-gradient half on that model stage (0 .. p·v-1);
    for gpipe/1f1b/interleaved the weight gradient is part of b_time and w_time is ignored.
    p2p_time: seconds to send one activation (or its gradient) to the neighbouring rank.

    Long pipelines are not simulated micro-batch by micro-batch: when p·v·m exceeds EXACT_ACTIONS the
    lists are run for the largest n micro-batches within that budget (whole periods of the schedule: p
    micro-batches for interleaved), the steady pace is measured between micro-batches n/4 and 3n/4 (past
    the warm-up, before the cool-down) on the first stage's forwards (gpipe: the last stage's forwards
    plus the first stage's backwards), or is the busiest rank's own work per micro-batch when that is
    more, and the makespan is extended from n to m at that pace; busy time is exactly linear in m.
    After its warm-up a schedule repeats itself, so the extension is exact unless a slower dependency
    cycle takes over only after n/4 micro-batches; zb-v's greedy order may repeat only every tens of
    micro-batches. Tests hold the extension against the full run. This keeps a 1M-sequence global
    batch as cheap as a small one.
    """
    return simulate_pair(schedule, p, m, f_time, b_time, w_time=w_time, vpp=vpp, p2p_time=p2p_time, pair=False)[1]


def simulate_pair(schedule: str, p: int, m: int, f_time, b_time, w_time=None, vpp: int = 1, p2p_time: float = 0.0,
                  pair: bool = True) -> tuple[PipelineResult, PipelineResult]:
    """(the schedule without transfer time, simulate(...) with `p2p_time`): a step's pp_comm is the difference of the
    two, its bubble the first's idle time. Where the action lists are fixed (every schedule but zb-v) both in one
    sweep over them, the same floats as two simulate() calls, since each action's finish is the same arithmetic on
    each timeline. zb-v chooses its order on the fly, and not monotonically in the transfer time: its first is the
    second less the delay the transfers cause to the order chosen with them (_zb_v_pair), never later than the
    second. With `pair` False only the second is run (the first is returned as the same object)."""
    for name, value in (("pipeline degree", p), ("micro-batches", m), ("virtual stages", vpp)):
        if not isinstance(value, int) or value < 1:
            raise LlmcalcError(f"{name} must be a whole number >= 1, got {value!r}")
    if schedule not in SCHEDULES:
        raise LlmcalcError(f"unknown pipeline schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if schedule == "interleaved" and p > 1 and m % p:
        raise LlmcalcError(f"the interleaved schedule needs the micro-batches per step ({m}) to be a multiple of "
                           f"pp ({p}); change --global-batch or --micro-batch, or use --schedule 1f1b")
    v = chunks_per_rank(schedule, vpp)
    if p == 1 and v == 1:  # one rank: its actions back to back, nothing to wait for
        work = f_time(0) + b_time(0) + (w_time(0) if schedule.startswith("zb") else 0.0)
        one = PipelineResult(schedule, p, v, m, makespan=m * work, busy=(m * work,))
        return one, one
    period = p if schedule == "interleaved" else 1
    n = max(8 * period, 8 * p, EXACT_ACTIONS // (p * v))  # several periods past the warm-up (< 2p·v)
    n -= n % period
    times = (0.0, p2p_time) if pair else (p2p_time,)
    if schedule == "zb-v" and pair:
        return _zb_v_pair(p, m, n, f_time, b_time, w_time=w_time, p2p_time=p2p_time)
    timed = _simulate_exact(schedule, p, min(m, n), f_time, b_time, w_time=w_time, v=v, p2p_time=times)
    runs = [_extend(schedule, p, m, n, run=run, pace=_pace(schedule, n, period, run, firsts)) if m > n else run
            for run, firsts in timed]
    return runs[0], runs[-1]


def _zb_v_pair(p: int, m: int, n: int, f_time, b_time, w_time, p2p_time: float) -> tuple[PipelineResult,
                                                                                        PipelineResult]:
    """simulate_pair for zb-v: (its run without the transfers' delay, simulate()'s run with `p2p_time`).

    zb-v's order is chosen on the fly, and not monotonically in the transfer time: run again without transfers the
    loop may choose an order that finishes later than the one it chose with them, so the difference of the two runs
    (a step's exposed PP send/recv) could be negative. The delay the transfers cause is that of the order chosen
    with them: that order (_simulate_greedy's) timed with `p2p_time` and without (_replay), the second no later in
    every finish. The run without that delay is simulate()'s less it: the same work, never later than simulate()'s
    and never sooner than that order without transfers (the loop starts no action sooner than its own order
    timed with the transfer would: the rest is the loop's idle time, the bubble's). Long pipelines extend each of the
    three runs at its steady pace (simulate), where a run that finishes no action later than the next cannot keep a
    slower pace than it in the long run (each measured over a half that need not be one period of the greedy order)."""
    timed = _simulate_greedy("zb-v", p, min(m, n), f_time, b_time, w_time=w_time, v=2, p2p_time=p2p_time,
                             replay=(0.0, p2p_time))
    if m > n:
        paces = [_pace("zb-v", n, 1, run, firsts) for run, firsts in timed]
        paces[1] = min(paces[1], paces[2])
        paces[0] = min(paces[0], paces[1])
        runs = [_extend("zb-v", p, m, n, run=run, pace=pace) for (run, _), pace in zip(timed, paces, strict=True)]
    else:
        runs = [run for run, _ in timed]
    free, fixed, sent = runs
    plain = PipelineResult("zb-v", p, 2, m, makespan=sent.makespan - (fixed.makespan - free.makespan), busy=sent.busy)
    return plain, sent


def _pace(schedule: str, n: int, period: int, run: PipelineResult, firsts: tuple[list, ...]) -> float:
    """Seconds per micro-batch of simulate()'s run of n micro-batches in its steady state (see simulate)."""
    first_f, last_f, first_b = firsts
    j1, j2 = n // 4 - (n // 4) % period, n - n // 4 - (n - n // 4) % period  # the middle half, whole periods
    if schedule == "gpipe":  # all forwards, then all backwards: the two phases' paces add
        slope = (last_f[j2] - last_f[j1] + first_b[j2] - first_b[j1]) / (j2 - j1)
    else:
        slope = (first_f[j2] - first_f[j1]) / (j2 - j1)  # the first stage's steady pace
    return max(slope, max(run.busy) / n)  # never slower than the busiest rank's own work per micro-batch


def _extend(schedule: str, p: int, m: int, n: int, run: PipelineResult, pace: float) -> PipelineResult:
    """simulate()'s run of n micro-batches extended to m at `pace` (_pace's, see simulate)."""
    return PipelineResult(schedule, p, run.v, m, makespan=run.makespan + pace * (m - n),
                          busy=tuple(b * m / n for b in run.busy))


def _simulate_exact(schedule: str, p: int, m: int, f_time, b_time, w_time, v: int,
                    p2p_time: tuple[float, ...]) -> list[tuple[PipelineResult, tuple[list, ...]]]:
    """simulate() for every micro-batch, action by action (arguments checked by simulate), once per transfer time
    in `p2p_time`; each run also returns when each micro-batch's forward finished on the first and the last stage
    and its backward on the first."""
    if schedule == "zb-v":
        return [_simulate_greedy(schedule, p, m, f_time, b_time, w_time=w_time, v=v, p2p_time=c)[-1] for c in p2p_time]
    return _simulate_static(schedule, p, m, f_time, b_time, w_time=w_time, v=v, p2p_time=p2p_time)


@functools.lru_cache(maxsize=64)
def _static_program(schedule: str, p: int, m: int, v: int) -> _Program:
    """The fixed action lists (action_lists, every schedule but zb-v) compiled for _simulate_static: (actions,
    lasts, kinded, whole). Finishes are kept in one list, F of (stage s, micro-batch j) at s·m + j, B at
    (p·v + s)·m + j, W at (2·p·v + s)·m + j, then two spare slots never written: FREE (held at -inf) and ZERO (0.0);
    durations are indexed F of stage s at s, B at p·v + s, W at 2·p·v + s. `actions`: one sequence of (duration
    index, the slot of the finish it waits for, the slot its own finish is kept at, where a run of one rank's
    consecutive actions starts: the slot of the rank's previous finish, its clock then (ZERO before its first),
    else None), in an order every action's dependency precedes. The awaited slot is FREE where the dependency ran
    on the same rank or where there is none (F of stage 0, W): a rank's clock never goes back (durations >= 0), so
    those never bind (_simulate_static's sweep for negative durations reads them from their own slots: _awaited).
    `lasts`: each rank's last finish slot (its clock at the end). `kinded`, `whole`: each rank's durations in its
    own order as (getter, count) pieces (_pieces), from _stage_kinds' values and from the whole table. Each rank's
    actions come in its list's order (_rank_actions), the zero-bubble weight gradients where zb-h1 computes them (a
    rank keeps at most r pending, the rest last); the order across ranks is a sweep in which each rank runs ahead
    until it needs an action another rank has not reached (which actions are ready does not depend on the times),
    the ranks taken 0 to p-1, then p-1 down to 0, and so on (the backwards' dependencies run down the ranks: fewer,
    longer runs than always upwards)."""
    if schedule not in ("gpipe", "1f1b", "interleaved", "zb-h1"):
        raise LlmcalcError(f"no fixed action lists for pipeline schedule {schedule!r}")
    n = p * v
    home = [0] * n
    for r in range(p):
        for c in range(v):
            home[stage_of(schedule, r, c, p)] = r
    kinds = 3 if schedule.startswith("zb") else 2
    free = kinds * n * m
    zero = free + 1
    lists = [_rank_actions(schedule, p, m, v, r, home=home) for r in range(p)]
    spans = _sweep(lists, free=free, zero=zero)
    if spans is None:
        raise LlmcalcError(f"pipeline schedule {schedule} deadlocked for p={p}, m={m}, v={v} (a bug: please report)")
    starts: list[list[int | None]] = [[None] * len(acts[0]) for acts in lists]
    for r, start, _ in spans:
        starts[r][start] = lists[r][2][start - 1] if start else zero
    ranked = [tuple(zip(*acts, starts[r], strict=True)) for r, acts in enumerate(lists)]
    actions: list[tuple[int, int, int, int | None]] = []
    for r, start, i in spans:
        actions += ranked[r][start:i]
    ends = [1] * (kinds * n)  # each duration index's place among _stage_kinds' values
    for kind in range(kinds):
        ends[kind * n], ends[kind * n + n - 1] = 3 * kind, 3 * kind + 2
        ends[kind * n + 1:kind * n + n - 1] = [3 * kind + 1] * (n - 2)
    kinded = tuple(_pieces(list(map(ends.__getitem__, acts[0]))) for acts in lists)
    whole = tuple(((operator.itemgetter(*acts[0]), 1),) for acts in lists)
    return tuple(actions), tuple(acts[2][-1] for acts in lists), kinded, whole


def _sweep(lists: list, *, free: int, zero: int) -> list[tuple[int, int, int]] | None:
    """_static_program's sweep order of the ranks' action `lists` (each rank's (durations, awaited slots, own
    slots)): (rank, first, end) runs in which each rank runs ahead until it awaits a slot no rank has reached, the
    ranks taken 0 to p-1, then p-1 down to 0, and so on; None where some rank never finishes (a deadlock)."""
    p = len(lists)
    done = bytearray(zero + 1)
    done[free] = 1  # (ZERO is never done: it ends every rank's list of awaited slots)
    deps = [acts[1] + [zero] for acts in lists]
    pos = [0] * p
    spans: list[tuple[int, int, int]] = []
    progress, ahead, back = True, range(p), range(p - 1, -1, -1)
    while progress:
        progress = False
        for r in ahead:
            dep, own, i = deps[r], lists[r][2], pos[r]
            start = i
            while done[dep[i]]:
                done[own[i]] = 1
                i += 1
            if i != start:
                spans.append((r, start, i))
                pos[r], progress = i, True
        ahead, back = back, ahead
    return None if any(pos[r] < len(lists[r][0]) for r in range(p)) else spans


_Pick = Callable[[list[float]], Any]  # a duration pattern out of the table (a list or a tuple of floats)
_Sums = tuple[tuple[tuple[_Pick, int], ...], ...]  # per rank, (getter, count) pieces of its durations
_Program = tuple[tuple[tuple[int, int, int, int | None], ...], tuple[int, ...], _Sums, _Sums]


def _rank_actions(schedule: str, p: int, m: int, v: int, r: int,
                  home: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Rank r's actions as _static_program keeps them (duration indices, awaited slots, own slots: three lists), in
    the order of its action_lists list (each chunk's F and B of every micro-batch built from its stage's constants,
    then picked in _chunk_order's order and interleaved as _one_f_one_b does), the zero-bubble weight gradients
    inserted."""
    n = p * v
    last = n - 1
    free = (3 if schedule.startswith("zb") else 2) * n * m
    frees = [free] * m
    fk: list[int] = []
    fd: list[int] = []
    fo: list[int] = []
    bk: list[int] = []
    bd: list[int] = []
    bo: list[int] = []
    for c in range(v):
        st = stage_of(schedule, r, c, p)
        fk += [st] * m
        fd += range((st - 1) * m, st * m) if st and home[st - 1] != r else frees
        fo += range(st * m, (st + 1) * m)
        bk += [n + st] * m
        bd += range((n + st + 1) * m, (n + st + 2) * m) if st != last and home[st + 1] != r else frees
        bo += range((n + st) * m, (n + st + 1) * m)
    fwd, bwd = _chunk_order(schedule, p, m, v)
    if schedule == "interleaved" and v > 1:
        pick_f, pick_b = operator.itemgetter(*fwd), operator.itemgetter(*bwd)
        fk, fd, fo = list(pick_f(fk)), list(pick_f(fd)), list(pick_f(fo))
        bk, bd, bo = list(pick_b(bk)), list(pick_b(bd)), list(pick_b(bo))
    total = len(fk)
    warmup = min((p - r - 1) * 2 + (v - 1) * p if schedule == "interleaved" else m if schedule == "gpipe"
                 else p - r - 1, total)
    # _one_f_one_b: the warm-up forwards, then one forward and one backward in turn, then the remaining backwards
    out = []
    for fl, bl in ((fk, bk), (fd, bd), (fo, bo)):
        steady: list = [0] * (2 * (total - warmup))
        steady[0::2], steady[1::2] = fl[warmup:], bl[:total - warmup]
        out.append(fl[:warmup] + steady + bl[total - warmup:])
    ks, ds, os_ = out
    if not schedule.startswith("zb"):
        return ks, ds, os_
    return _with_weight_gradients(ks, ds, os_, r, n=n, m=m)


def _with_weight_gradients(ks: list[int], ds: list[int], os_: list[int], r: int, n: int,
                           m: int) -> tuple[list[int], list[int], list[int]]:
    """zb-h1: rank r's actions (_rank_actions' three lists) with each backward's weight gradient inserted where the
    rank has more than r pending (the oldest first), the rest at its end; a W of (stage s, micro-batch j) waits for
    nothing (FREE: its B ran before it on the same rank) and keeps its finish at (2n + s)·m + j."""
    free = 3 * n * m
    wk: list[int] = []
    wd: list[int] = []
    wo: list[int] = []
    pending: list[int] = []  # own slots of the backwards whose weight gradients are pending
    for k, d, o in zip(ks, ds, os_, strict=True):
        wk.append(k)
        wd.append(d)
        wo.append(o)
        if k >= n:  # a backward: its weight gradient waits until more than r are pending
            pending.append(o)
            while len(pending) > r:
                b = pending.pop(0)
                wk.append(b // m + n)
                wd.append(free)
                wo.append(b + n * m)
    for b in pending:  # the weight gradients still pending
        wk.append(b // m + n)
        wd.append(free)
        wo.append(b + n * m)
    return wk, wd, wo


def _pieces(ks: list[int]) -> tuple[tuple[_Pick, int], ...]:
    """A rank's duration indices `ks` as (getter, count) pieces: getter(table) * count, piece after piece, are the
    durations table[k] for k in ks in turn; each piece one index repeated or two alternating (so a rank's few
    hundred durations come in a few dozen pieces)."""
    out: list[tuple[_Pick, int]] = []
    i, end = 0, len(ks)
    while i < end:
        a = ks[i]
        j = i + 1
        while j < end and ks[j] == a:
            j += 1
        if j - i > 1 or j + 1 >= end:
            out.append((operator.itemgetter(slice(a, a + 1)), j - i))
            i = j
            continue
        b = ks[j]
        j += 1
        while j + 1 < end and ks[j] == a and ks[j + 1] == b:
            j += 2
        out.append((operator.itemgetter(a, b), (j - i) // 2))
        i = j
    return tuple(out)


# sum() of floats adds them one after the other, as `u += d` does, on CPython before 3.12 (3.12 compensates)
_SUM_IN_TURN = sys.implementation.name == "cpython" and sys.version_info < (3, 12)


def _sum_in_turn(values: Sequence[float], start: float) -> float:
    """((start + values[0]) + values[1]) + ...: sum() where it adds so, else functools.reduce."""
    return sum(values, start) if _SUM_IN_TURN else functools.reduce(operator.add, values, start)


@functools.lru_cache(maxsize=64)
def _chunk_order(schedule: str, p: int, m: int, v: int) -> tuple[list[int], list[int]]:
    """The order of a rank's forwards and of its backwards in action_lists, as indices chunk·m + micro-batch (the
    same on every rank): interleaved Megatron-LM's groups of p micro-batches through chunk 0, 1, ..., v-1 (the
    backwards from chunk v-1 down), else micro-batch by micro-batch."""
    if schedule != "interleaved":
        return list(range(m)), list(range(m))
    fwd = [((k // p) % v) * m + (k // (p * v)) * p + k % p for k in range(m * v)]
    return fwd, [(v - 1 - i // m) * m + i % m for i in fwd]


def _stage_kinds(table: list[float], n: int) -> list[float] | None:
    """Per kind of action (F, B, W), the durations of the first, a middle and the last stage, where every middle
    stage's are the same float (the layout search's stages: the embedding, equal layers, the LM head), else None."""
    out: list[float] = []
    for lo in range(0, len(table), n):
        mid = table[lo + 1] if n > 2 else 0.0
        if table[lo + 1:lo + n - 1].count(mid) != n - 2:
            return None
        out += (table[lo], mid, table[lo + n - 1])
    return out


_SCRATCH: list[list[float]] = []  # finish lists kept for the next sweep (see _simulate_static)
_SCRATCH_SLOTS = 1 << 16  # the longest kept


def _simulate_static(schedule: str, p: int, m: int, f_time, b_time, w_time, v: int,
                     p2p_time: tuple[float, ...]) -> list[tuple[PipelineResult, tuple[list, ...]]]:
    """The fixed action lists (every schedule but zb-v), once per transfer time: an action finishes at max(its
    rank's clock, its dependency's finish + the transfer when that ran on another rank) + its duration, whatever
    order the ranks are advanced in; _static_program gives one such order, the swept rank's clock kept in a local
    through a run of its actions (read from its previous finish where a run starts). With every duration >= 0 the
    awaited finish of a same-rank or absent dependency is the FREE slot (-inf: it never binds, as the rank's own
    earlier finish or 0.0 would not), so every action is the same arithmetic, with no test for a transfer. Without
    transfers and with (simulate_pair) share one sweep, the first skipping the addition of its zero transfer time
    (x + 0.0 is x). A rank's busy time is its durations added one after the other in its own order, as the sweep as
    first written added them, outside the sweep (sum() over _static_program's pieces where it adds in turn). The
    finish lists are kept for the next call (_SCRATCH): a sweep reads only slots it has written first, and the
    floats it overwrites go back to the allocator's free list for the next ones."""
    n = p * v
    actions, lasts, kinded, whole = _static_program(schedule, p, m, v)
    table = list(map(f_time, range(n))) + list(map(b_time, range(n)))
    if schedule.startswith("zb"):
        table += map(w_time, range(n))
    values = _stage_kinds(table, n)
    sums, values = (kinded, values) if values else (whole, table)
    busy = _busy(sums, values)
    free = (3 if schedule.startswith("zb") else 2) * n * m
    zero = free + 1
    kept = min(table) >= 0.0
    if not kept:  # a negative duration (never a real one): every dependency read from its own slot
        lists = [[0.0] * (zero + 1) for _ in p2p_time]
        for c, done in zip(p2p_time, lists, strict=True):
            _sweep_own_slots(actions, table, done, c, shape=(n, m, free, zero))
    else:
        lists = [_SCRATCH.pop() if _SCRATCH else [] for _ in p2p_time]
        for done in lists:
            if len(done) <= zero:
                done += [0.0] * (zero + 1 - len(done))
            done[free], done[zero] = -math.inf, 0.0
        if len(p2p_time) == 2 and not p2p_time[0]:  # without transfers and with, in one sweep
            _sweep_pair(actions, table, lists, p2p_time[1])
        else:
            for c, done in zip(p2p_time, lists, strict=True):
                _sweep_one(actions, table, done, c)
    last = n - 1
    out: list[tuple[PipelineResult, tuple[list, ...]]] = [
        (PipelineResult(schedule, p, v, m, makespan=max([done[s] for s in lasts]), busy=tuple(busy)),
         (done[:m], done[last * m:(last + 1) * m], done[n * m:(n + 1) * m])) for done in lists]
    if kept:
        _SCRATCH.extend(done for done in lists if len(done) <= _SCRATCH_SLOTS)
    return out


def _busy(sums: _Sums, values: list[float]) -> list[float]:
    """Each rank's busy time: its durations (its (getter, count) pieces of `values`) added one after the other."""
    add = sum if _SUM_IN_TURN else _sum_in_turn
    busy = []
    for pieces in sums:
        u = 0.0
        for pick, count in pieces:
            u = add(pick(values) * count, u)
        busy.append(u)
    return busy


def _sweep_one(actions: tuple, table: list[float], done: list[float], c: float) -> None:
    """_simulate_static's sweep with transfer time `c`: each action's finish into `done` (module docstring)."""
    t = 0.0
    for k, dep, own, prev in actions:
        if prev is not None:
            t = done[prev]
        if done[dep] + c > t:
            t = done[dep] + c
        t += table[k]
        done[own] = t


def _sweep_pair(actions: tuple, table: list[float], lists: list[list[float]], c: float) -> None:
    """_sweep_one without transfers (into lists[0]) and with `c` (into lists[1]) in one pass over the actions."""
    done, done2 = lists
    t = t2 = 0.0
    for k, dep, own, prev in actions:
        if prev is not None:
            t = done[prev]
            t2 = done2[prev]
        if done[dep] > t:  # (read again only where it is later than the clock)
            t = done[dep]
        if done2[dep] + c > t2:
            t2 = done2[dep] + c
        d = table[k]
        t += d
        done[own] = t
        t2 += d
        done2[own] = t2


def _sweep_own_slots(actions: tuple, table: list[float], done: list[float], c: float,
                     shape: tuple[int, int, int, int]) -> None:
    """_sweep_one where a duration is negative: a same-rank or absent dependency read from its own slot
    (_awaited), not the FREE slot; `shape` is (stages, micro-batches, FREE, ZERO)."""
    n, m, free, zero = shape
    t = 0.0
    for k, dep, own, prev in actions:
        if prev is not None:
            t = done[prev]
        ready = done[_awaited(k, own, n, m, zero)] if dep == free else done[dep] + c
        if ready > t:
            t = ready
        t += table[k]
        done[own] = t


def _awaited(k: int, own: int, n: int, m: int, zero: int) -> int:
    """The slot of the finish an action (duration index k, own slot) waits for on its own rank, or ZERO where it
    waits for none (F of stage 0, W): F of stage s > 0 waits for F of s - 1, B of the last stage for its F, B of s
    for B of s + 1 (the slots of _static_program)."""
    kind, st = divmod(k, n)
    if kind == 2 or (kind == 0 and st == 0):
        return zero
    return own - m if kind == 0 else own - n * m if st == n - 1 else own + m


def _simulate_greedy(schedule: str, p: int, m: int, f_time, b_time, w_time, v: int, p2p_time: float,
                     replay: tuple[float, ...] = ()) -> list[tuple[PipelineResult, tuple[list, ...]]]:
    """zb-v, whose next action depends on what is ready: an event loop over the ranks' clocks, with `p2p_time`.

    Returns its run last, after one run per transfer time in `replay`: the order the loop chose, each rank's actions
    in turn, timed again with that transfer time (_replay; see _zb_v_pair). The greedy choice is not monotone in
    the transfer time (a transfer can delay one action so that a better order follows), so the loop run again
    without transfers may finish later than with them; the same order with less transfer time never does (every
    start is a maximum of finishes that are no later)."""

    def duration(kind, stage):
        if kind == "F":
            return f_time(stage)
        if kind == "B":
            return b_time(stage)
        return w_time(stage)

    loop = _GreedyLoop(schedule, p, m, v, p2p_time=p2p_time, duration=duration)
    loop.run_all()
    if not all(loop.done):
        raise LlmcalcError(f"pipeline schedule {schedule} deadlocked for p={p}, m={m}, v={v} (a bug: please report)")
    n_stages = p * v
    first = tuple([loop.finish[(kind, stage, j)] for j in range(m)] for kind, stage in (("F", 0), ("F", n_stages - 1),
                                                                                       ("B", 0)))
    runs = [_replay(schedule, p, v, m, order=loop.order, dep=loop.dep, duration=duration, where=loop.where,
                    p2p_time=c) for c in replay]
    return runs + [(PipelineResult(schedule, p, v, m, makespan=max(loop.clock), busy=tuple(loop.busy)), first)]


class _GreedyLoop:
    """_simulate_greedy's event loop: the ranks' clocks on a heap, each rank taking its first ready candidate
    action, what each action waits for (``dep``), when and where each finished, and the order they ran in."""

    def __init__(self, schedule: str, p: int, m: int, v: int, *, p2p_time: float, duration) -> None:
        self.schedule, self.p, self.m, self.n_stages = schedule, p, m, p * v
        self.p2p_time, self.duration = p2p_time, duration
        self.zero_bubble = schedule.startswith("zb")
        self.lists = action_lists(schedule, p, m, v)
        self.finish: dict = {}
        self.where: dict = {}
        self.clock = [0.0] * p
        self.busy = [0.0] * p
        self.pos = [0] * p
        self.pending_w: list[list[tuple[int, int]]] = [[] for _ in range(p)]  # zero-bubble: weight gradients to do
        # zb-h1: rank r keeps at most r weight gradients pending and computes them when that is exceeded
        # (and at the end); this reproduces the paper's (p-1)(T_F+T_B-T_W) exactly. zb-v: at most p pending,
        # and a rank with nothing ready computes a pending one (the schedule's bubble filling).
        self.w_limit = [r if schedule == "zb-h1" else p if schedule == "zb-v" else 0 for r in range(p)]
        self.done = [False] * p
        self.heap = [(0.0, r) for r in range(p)]
        self.waiting: dict = {}  # key -> ranks blocked on it
        self.nxt = [{("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0} for _ in range(p)]  # zb-v: next micro-batch
        self.cap = [2 * p - 1] * p  # zb-v: chunk-0 forwards in flight at most (bounds activation memory like 1f1b)
        self.order: list[tuple[int, str, int, int]] = []  # (rank, kind, stage, micro-batch) in the order they ran

    def dep(self, kind, stage, j):
        """(kind, stage, micro-batch) this action waits for, or None."""
        if kind == "F":
            return None if stage == 0 else ("F", stage - 1, j)
        if kind == "B":
            return ("F", stage, j) if stage == self.n_stages - 1 else ("B", stage + 1, j)
        return ("B", stage, j)

    def run(self, r, kind, stage, j, start):
        end = start + self.duration(kind, stage)
        self.finish[(kind, stage, j)] = end
        self.where[(kind, stage, j)] = r
        self.order.append((r, kind, stage, j))
        self.busy[r] += end - start
        self.clock[r] = end
        for other in self.waiting.pop((kind, stage, j), []):
            heapq.heappush(self.heap, (self.clock[other], other))

    def run_all(self) -> None:
        """Each rank, at its clock, runs what it can (``act``) until the heap empties."""
        heap, clock, done = self.heap, self.clock, self.done
        while heap:
            t, r = heapq.heappop(heap)
            if done[r] or t != clock[r]:
                continue  # finished, or a stale entry (the rank's clock moved on)
            self.act(r)

    def choose(self, r, candidates):
        """(the first candidate ready at rank r's clock as (kind, chunk, j, stage), or None; the earliest time one
        becomes ready, or None; what the unready ones wait for that has not run yet)."""
        earliest, blocked_on = None, []
        for kind, chunk, j in candidates:  # in priority order
            stage = stage_of(self.schedule, r, chunk, self.p)
            need = self.dep(kind, stage, j)
            if need is not None and need not in self.finish:
                blocked_on.append(need)
                continue
            ready_at = self.clock[r] if need is None else \
                self.finish[need] + (self.p2p_time if self.where[need] != r else 0.0)
            if ready_at <= self.clock[r]:
                return (kind, chunk, j, stage), earliest, blocked_on
            earliest = ready_at if earliest is None else min(earliest, ready_at)
        return None, earliest, blocked_on

    def act(self, r) -> None:
        """Rank r at its clock: the first ready candidate (its deferred weight gradients as the rules say), else
        a deferred weight gradient (zb-v), else a wait until a candidate is ready or what blocks it has run."""
        p, clock, pending = self.p, self.clock, self.pending_w[r]
        if self.schedule == "zb-v":
            candidates = _zbv_candidates(r, p, self.m, self.nxt[r], self.cap)
        else:
            candidates = [self.lists[r][self.pos[r]]] if self.pos[r] < len(self.lists[r]) else []
        if not candidates:
            for w in pending:  # drain the remaining weight gradients
                self.run(r, "W", w[0], w[1], clock[r])
            self.pending_w[r] = []
            self.done[r] = True
            return
        chosen, earliest, blocked_on = self.choose(r, candidates)
        if chosen is not None:
            kind, chunk, j, stage = chosen
            self.run(r, kind, stage, j, clock[r])
            self.pos[r] += 1
            self.nxt[r][(kind, chunk)] = j + 1
            if kind == "B" and self.zero_bubble:
                pending.append((stage, j))
                while len(pending) > self.w_limit[r]:
                    w = pending.pop(0)
                    self.run(r, "W", w[0], w[1], clock[r])
            heapq.heappush(self.heap, (clock[r], r))
        elif self.schedule == "zb-v" and pending:  # fill the wait with a deferred weight gradient
            w = pending.pop(0)
            self.run(r, "W", w[0], w[1], clock[r])
            heapq.heappush(self.heap, (clock[r], r))
        elif earliest is not None:
            clock[r] = earliest
            heapq.heappush(self.heap, (clock[r], r))
        else:
            for need in blocked_on:
                self.waiting.setdefault(need, []).append(r)


def _replay(schedule: str, p: int, v: int, m: int, order: list[tuple[int, str, int, int]], dep, duration,
            where: dict, p2p_time: float) -> tuple[PipelineResult, tuple[list, ...]]:
    """The actions of `order` (each rank's in turn, every dependency before what waits for it) timed with
    `p2p_time`: each starts when its rank is free and its dependency has finished, plus the transfer where that ran
    on another rank (where[]); with the loop's own transfer time no action starts later than the loop started it."""
    finish: dict = {}
    clock = [0.0] * p
    busy = [0.0] * p
    for r, kind, stage, j in order:
        start = clock[r]
        need = dep(kind, stage, j)
        if need is not None:
            ready = finish[need] + (p2p_time if where[need] != r else 0.0)
            if ready > start:
                start = ready
        end = finish[(kind, stage, j)] = clock[r] = start + duration(kind, stage)
        busy[r] += end - start  # as the loop adds it
    last = p * v - 1
    first = tuple([finish[(kind, stage, j)] for j in range(m)] for kind, stage in (("F", 0), ("F", last), ("B", 0)))
    return PipelineResult(schedule, p, v, m, makespan=max(clock), busy=tuple(busy)), first


def path_bound(schedule: str, p: int, m: int, f: list[float], b: list[float], w: list[float] | None = None,
               vpp: int = 1, p2p_time: float = 0.0) -> tuple[float, bool]:
    """(a lower bound of the makespan, whether it is the makespan) for stage times f, b (and w for the zero-bubble
    schedules), without simulating.

    The bound is the longest of p paths through the schedule's dependency graph, one per rank r: the first micro-
    batch's forward through the stages before r's first chunk (each hop between ranks paying `p2p_time`), all of
    r's own work back to back, then the last micro-batch's backward from r's first chunk down to stage 0. Every
    path is a chain of dependencies, so no schedule finishes sooner; the simulator's makespan is the longest path
    of all.

    It is the makespan, exactly (tests hold it to the simulator), where the timeline is known in closed form:
    - one rank: m x (F + B + W);
    - gpipe / 1f1b / interleaved with equal stages and transfers shorter than a tenth of a stage's forward:
      interleaved (v·m + p - 1)(T_F + T_B) + 2(p·v - 1)·c (Narayanan et al. 2021 sec. 2.2.2 with each of the
      first forward's and last backward's p·v - 1 hops paying c); 1f1b with m a multiple of p
      (m + p - 1)(T_F + T_B) + (2(p - 2) + 2m(p - 1)/p)·c (the steady state cannot hide the transfers: each
      micro-batch's cycle pays 2c(p - 1)/p on average);
    - 1f1b and interleaved whose stages are equal but for a lighter first and a heavier last stage (the embedding
      and the LM head), without transfer time, and 1f1b with it where the last stage's extra work is at least two
      transfers: the last rank paces and never waits, so the bound through it is the makespan.
    Elsewhere (a heavier middle stage, zero-bubble schedules, ...) only a bound: simulate() gives the makespan."""
    bound, exact, _ = path_bounds(schedule, p, m, f, b, w=w, vpp=vpp, p2p_time=p2p_time)
    return bound, exact


@functools.lru_cache(maxsize=256)
def _path_plan(schedule: str, p: int, v: int) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...]]:
    """Per rank its stages and its first stage, and the prefix counts of rank changes along the stages (path_bound's
    structure, which depends on the schedule's shape only)."""
    n = p * v
    home = [0] * n
    ranks = []
    for r in range(p):
        stages = tuple(stage_of(schedule, r, c, p) for c in range(v))
        for st in stages:
            home[st] = r
        ranks.append(stages)
    hop = [0]
    for st in range(n - 1):
        hop.append(hop[-1] + (home[st] != home[st + 1]))
    return tuple(ranks), tuple(min(stages) for stages in ranks), tuple(hop)


def path_bounds(schedule: str, p: int, m: int, f: list[float], b: list[float], w: list[float] | None = None,
                vpp: int = 1, p2p_time: float = 0.0,
                ranks: Sequence[int] | None = None) -> tuple[float, bool, float]:
    """path_bound with `p2p_time` and without it, in one pass: (bound, whether it is the makespan, the bound with
    no transfer time), each the float path_bound(...) returns.

    `ranks`: the ranks whose paths are taken (default all): a caller whose ranks come in groups with the same stage
    times chunk by chunk names the last of each group. That rank's path dominates the group's, float for float:
    its own work is the same sum, and the first forward reaching it has passed through at least the stages and the
    hops before any other's (prefix sums of non-negative times are non-decreasing, in floating point too), so the
    maxima are the same floats. With a negative time or transfer (never a real one) every rank is taken.

    The arithmetic is path_bound's as first written, term for term: the prefix sums only as far as the furthest
    first stage taken, each added one term at a time ((pre + f) + b), and the closed forms' checks of the stage
    times (_stage_shape) once for both transfer times."""
    v = 2 if schedule == "zb-v" else vpp if schedule == "interleaved" else 1  # chunks_per_rank
    zb = schedule.startswith("zb")
    ww = w if (zb and w is not None) else None
    if p == 1 and v == 1:
        one = m * (f[0] + b[0] + (ww[0] if ww is not None else 0.0))
        return one, True, one
    plan, firsts, hop = _path_plan(schedule, p, v)
    f_min = min(f)
    taken = range(p) if ranks is None or p2p_time < 0.0 or f_min < 0.0 or min(b) < 0.0 else ranks
    best, plain = _rank_paths(f, b, ww, m=m, p2p_time=p2p_time, structure=(plan, firsts, hop), taken=taken)
    if zb:
        return best, False, plain
    shape = _stage_shape(f, b, p * v)
    plain = _closed_form(schedule, p, m, shape, f_min, v=v, p2p_time=0.0, best=plain)[1]
    if schedule == "gpipe" and p2p_time:
        return best, False, plain
    exact, best = _closed_form(schedule, p, m, shape, f_min, v=v, p2p_time=p2p_time, best=best)
    return best, exact, plain


def _rank_paths(f: list[float], b: list[float], ww: list[float] | None, *, m: int, p2p_time: float,
                structure: tuple, taken: Sequence[int]) -> tuple[float, float]:
    """path_bounds' longest path over the `taken` ranks, with `p2p_time` and without it: each rank's first forward
    through the stages before its first chunk, its own work, and its hops' transfers (`structure`: _path_plan's)."""
    plan, firsts, hop = structure
    v = len(plan[0])
    # prefix sums of f + b up to the furthest first stage taken, a running total: ((pre + f) + b)
    reach = 0
    for r in taken:
        if firsts[r] > reach:
            reach = firsts[r]
    pre = [0.0] * (reach + 1)
    total = 0.0
    for st in range(reach):
        total = total + f[st] + b[st]
        pre[st + 1] = total
    # each rank's sums added in turn from 0.0 as sum() adds them (one chunk: the term itself, 0 + x is x), the maxima
    # max()'s (a later value only where greater)
    best = plain = 0.0
    for r in taken:
        stages, s0 = plan[r], firsts[r]
        if v == 1:
            busy = m * (f[s0] + b[s0])
        else:
            work = 0.0
            for st in stages:
                work += f[st] + b[st]
            busy = m * work
        if ww is not None:  # zb: weight gradients may trail
            work = 0.0
            for st in stages:
                work += ww[st]
            own = busy + m * work
        else:
            own = busy + 0.0
        through = pre[s0] + busy
        sent = through + 2 * hop[s0] * p2p_time
        if sent > best:
            best = sent
        if own > best:
            best = own
        sent = through + 2 * hop[s0] * 0.0
        if sent > plain:
            plain = sent
        if own > plain:
            plain = own
    return best, plain


def _stage_shape(f: list[float], b: list[float], n: int) -> tuple[float, float, bool, bool, bool, float]:
    """(T_F, T_B of stage 1, whether every middle stage has them, whether every stage does, whether the first stage
    is no heavier and the last no lighter, the last stage's extra work f + b over stage 1's) for _closed_form: the
    middle stages within a relative 1e-12 of stage 1 (|x - f0| is largest at the largest and the smallest x,
    rounding being monotone, so the extremes decide for all), the ends the same or within 1e-12 of each other."""
    f0, b0 = f[min(1, n - 1)], b[min(1, n - 1)]
    tol_f, tol_b = 1e-12 * abs(f0), 1e-12 * abs(b0)
    same = lambda x, y: abs(x - y) <= 1e-12 * max(abs(x), abs(y), 1e-30)  # noqa: E731
    fm, bm = f[1:n - 1], b[1:n - 1]
    # every middle stage's times equal to stage 1's finite ones (count: one pass in C) passes the tests below
    middle = (fm.count(f0) == len(fm) and bm.count(b0) == len(bm) and math.isfinite(f0) and math.isfinite(b0)) or (
        not fm or (max(fm) - f0 <= tol_f and f0 - min(fm) <= tol_f and max(bm) - b0 <= tol_b and b0 - min(bm) <= tol_b))
    uniform = middle and same(f[0], f0) and same(b[0], b0) and same(f[-1], f0) and same(b[-1], b0)
    ends = middle and f[0] <= f0 and b[0] <= b0 and f[-1] >= f0 and b[-1] >= b0
    return f0, b0, middle, uniform, ends, f[-1] + b[-1] - f0 - b0


def _closed_form(schedule: str, p: int, m: int, shape: tuple[float, float, bool, bool, bool, float], f_min: float,
                 v: int, p2p_time: float, best: float) -> tuple[bool, float]:
    """(whether the makespan is known, the makespan or `best`) for path_bounds: the closed forms of path_bound, from
    the stage times' _stage_shape and their least forward `f_min`."""
    n = p * v
    f0, b0, _, uniform, ends, extra = shape
    if uniform and p2p_time <= 0.1 * f_min:
        T = f0 + b0
        if schedule == "interleaved":
            return True, (v * m + p - 1) * T + (2 * (n - 1) * p2p_time if p > 1 else 0.0)
        if schedule in ("1f1b", "gpipe") and m % p == 0 and (schedule == "1f1b" or not p2p_time):
            extra_c = (2 * (p - 2) + 2 * m * (p - 1) / p) * p2p_time if schedule == "1f1b" else 0.0
            return True, (m + p - 1) * T + extra_c
    slack = extra >= 2 * p2p_time  # the last stage's extra work absorbs the transfers
    if ends and schedule in ("1f1b", "interleaved") and (not p2p_time or schedule == "1f1b" and slack):
        return True, best
    return False, best
