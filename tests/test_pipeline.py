"""Pipeline simulator (issue 24): the compiled action program and the one-pass bounds held to the straightforward
references of tests/test_steptime.py (the rank-by-rank sweep and path_bound as first written), float for float, on
many random stage-time vectors shaped like the ones the layout search meets (equal stages; a lighter or heavier
first and last stage around equal middle ones, the embedding and the LM head; a heavy middle stage; every stage
different), with and without transfer time."""

import random

import pytest
from test_steptime import _straightforward_path_bound, _straightforward_sweep

from llmcalc.analytic import pipeline
from llmcalc.analytic.pipeline import action_lists, chunks_per_rank, path_bounds, simulate_pair, stage_of

STATIC = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 4), ("zb-h1", 1)]


def _stage_times(rng: random.Random, n: int, pattern: str) -> list[float]:
    """Forward seconds of n stages: equal, light/heavy ends (first and last) around equal middle stages, one heavy
    middle stage, or every stage drawn."""
    x = rng.uniform(0.05, 2.0)
    f = [x] * n
    if pattern == "random":
        return [rng.uniform(0.05, 2.0) for _ in range(n)]
    if pattern == "middle" and n > 2:
        f[n // 2] = x * rng.uniform(1.05, 2.0)
    elif pattern in ("LL", "LH", "HL", "HH") and n > 1:
        f[0] = x * (rng.uniform(0.3, 0.97) if pattern[0] == "L" else rng.uniform(1.03, 2.5))
        f[-1] = x * (rng.uniform(0.3, 0.97) if pattern[1] == "L" else rng.uniform(1.03, 2.5))
    return f


def _draws(schedule: str, vpp: int, count: int, seed: int):
    """(p, m, f, b, w, c) drawn with a fixed seed: pipeline degrees 2-16, micro-batch counts around p (whole rounds
    for interleaved), transfer times from none to a third of a stage's forward."""
    rng = random.Random(seed)
    v = chunks_per_rank(schedule, vpp)
    for _ in range(count):
        p = rng.choice([2, 3, 4, 8, 16])
        m = p * rng.choice([1, 2, 4]) if schedule == "interleaved" else rng.choice([1, p - 1, p, 2 * p, 3 * p + 1])
        n = p * v
        f = _stage_times(rng, n, rng.choice(["equal", "LL", "LH", "HL", "HH", "middle", "random"]))
        b = [x * rng.uniform(1.5, 2.5) for x in f]
        w = [x * rng.uniform(0.3, 0.6) for x in b] if schedule.startswith("zb") else None
        c = rng.choice([0.0, 1e-4 * f[1 % n], 0.02 * f[1 % n], 0.3 * f[1 % n]])
        yield p, m, f, b, w, c


@pytest.mark.parametrize("schedule, vpp", STATIC)
def test_simulate_pair_is_the_straightforward_sweep_on_random_vectors(schedule, vpp):
    """Both timelines of simulate_pair (and simulate_pair(pair=False), simulate's path) are the rank-by-rank sweep as
    first written, to the last bit: the same additions and comparisons in each rank's order."""
    v = chunks_per_rank(schedule, vpp)
    for p, m, f, b, w, c in _draws(schedule, vpp, count=60, seed=33):
        wt = w.__getitem__ if w else None
        plain, sent = simulate_pair(schedule, p, m, f.__getitem__, b.__getitem__, wt, vpp=vpp, p2p_time=c)
        alone = simulate_pair(schedule, p, m, f.__getitem__, b.__getitem__, wt, vpp=vpp, p2p_time=c, pair=False)[1]
        want_plain = _straightforward_sweep(schedule, p, m, f, b, w, v, 0.0)
        want_sent = _straightforward_sweep(schedule, p, m, f, b, w, v, c)
        assert (plain.makespan, plain.busy) == want_plain, (p, m, c, f)
        assert (sent.makespan, sent.busy) == (alone.makespan, alone.busy) == want_sent, (p, m, c, f)


@pytest.mark.parametrize("schedule, vpp", STATIC)
def test_the_compiled_program_is_each_ranks_action_list_in_a_dependency_order(schedule, vpp):
    """_static_program's actions, read back as (rank, kind, stage, micro-batch), are each rank's action_lists list
    in order (zero-bubble: each B followed by the weight gradients zb-h1 computes then, a rank keeping at most r
    pending, the rest at its end), and every action's dependency (F: the same micro-batch one stage earlier, B: one
    stage later, or the last stage's F) comes earlier in the sequence, read from its slot where it ran on another
    rank, else from FREE (a dependency on the same rank, or none). A run of one rank's actions starts from the slot
    of that rank's previous finish (ZERO before its first), the others continue the run before them; `lasts` are
    each rank's last finish slot; the busy-time pieces give each rank's durations in its order."""
    v = chunks_per_rank(schedule, vpp)
    rng = random.Random(5)
    for p in (1, 2, 3, 4, 8):
        for m in (p, 2 * p, 3 * p) if schedule == "interleaved" else (1, p, 2 * p + 1):
            n = p * v
            kinds = 3 if schedule.startswith("zb") else 2
            free, zero = kinds * n * m, kinds * n * m + 1
            actions, lasts, kinded, whole = pipeline._static_program(schedule, p, m, v)
            got: list[list] = [[] for _ in range(p)]
            durations: list[list] = [[] for _ in range(p)]
            seen = set()
            last: list = [zero] * p
            cur = None
            for k, dep, own, prev in actions:
                kind, st = "FBW"[k // n], k % n
                j = own % m
                r = _home(schedule, p, v, st)
                assert own // m == k, (kind, st, j)  # F of (s, j) at s·m + j, B at (n + s)·m + j, W at (2n + s)·m + j
                if prev is None:
                    assert r == cur, (r, kind, st, j)  # the run goes on
                else:
                    assert prev == last[r], (r, kind, st, j)  # a run starts from the rank's clock
                    cur = r
                if kind == "F":
                    need = ("F", st - 1, j) if st else None
                else:
                    need = None if kind == "W" else ("F", st, j) if st == n - 1 else ("B", st + 1, j)
                assert need is None or need in seen, (r, kind, st, j)
                slot = (need[1] + (n if need[0] == "B" else 0)) * m + need[2] if need else None
                cross = need is not None and _home(schedule, p, v, need[1]) != r
                assert dep == (slot if cross else free), (r, kind, st, j)  # where the finish waited for is kept
                if not cross:
                    assert pipeline._awaited(k, own, n, m, zero) == (zero if slot is None else slot)
                seen.add((kind, st, j))
                got[r].append((kind, st) if kind == "W" else (kind, st, j))
                durations[r].append(k)
                last[r] = own
            assert list(lasts) == last
            for r in range(p):
                want, pending = [], []
                for kind, chunk, j in action_lists(schedule, p, m, v)[r]:
                    st = stage_of(schedule, r, chunk, p)
                    want.append((kind, st, j))
                    if kind == "B" and schedule.startswith("zb"):
                        pending.append(st)
                        while len(pending) > r:
                            want.append(("W", pending.pop(0)))
                want += [("W", st) for st in pending]
                assert got[r] == want, (p, m, r)
            # the busy-time pieces: each rank's durations in turn, from the whole table and from the stage kinds
            table = [rng.uniform(0.1, 1.0) for _ in range(kinds * n)]
            for kind in range(kinds if n > 2 else 0):  # equal middle stages, as _stage_kinds wants them
                table[kind * n + 1:kind * n + n - 1] = [table[kind * n + 1]] * (n - 2)
            values = pipeline._stage_kinds(table, n)
            assert (values is None) == (n == 1)  # (one stage: simulate_pair does not sweep it)
            for r in range(p):
                want_d = [table[k] for k in durations[r]]
                assert [x for pick, count in whole[r] for x in pick(table) * count] == want_d
                if values is not None:
                    assert [x for pick, count in kinded[r] for x in pick(values) * count] == want_d


def test_pieces_and_sums_in_turn():
    """_pieces' (getter, count) pieces repeat back to the indices they were made from (runs of one index and of two
    alternating ones, whatever comes between), and _sum_in_turn (sum() where it adds in turn, else reduce) is the
    running total `u += x` on this interpreter, to the last bit."""
    rng = random.Random(9)
    table = [rng.uniform(0.001, 3.0) for _ in range(12)]
    for _ in range(300):
        ks: list[int] = []
        while len(ks) < rng.randrange(1, 60):
            shape = rng.choice(["one", "two", "any"])
            a, b = rng.randrange(12), rng.randrange(12)
            ks += [a] * rng.randrange(1, 6) if shape == "one" else [a, b] * rng.randrange(1, 6) if shape == "two" \
                else [rng.randrange(12) for _ in range(rng.randrange(1, 4))]
        pieces = pipeline._pieces(ks)
        assert [x for pick, count in pieces for x in pick(table) * count] == [table[k] for k in ks]
        u = 0.0
        for k in ks:
            u += table[k]
        got = 0.0
        for pick, count in pieces:
            got = pipeline._sum_in_turn(pick(table) * count, got)
        assert got == u
        assert pipeline._sum_in_turn([table[k] for k in ks], 0.0) == u


@pytest.mark.parametrize("schedule, vpp", STATIC)
def test_simulate_pair_with_a_negative_duration_is_the_straightforward_sweep(schedule, vpp):
    """A negative duration (never a real one) lets a rank's clock go back, so a dependency on the same rank can bind:
    simulate_pair then reads every awaited finish from its own slot (_awaited) and is still the sweep as first
    written (where no clock drops below zero: the reference waits for nothing where there is no dependency)."""
    v = chunks_per_rank(schedule, vpp)
    for p, m, f, b, w, c in _draws(schedule, vpp, count=30, seed=41):
        n = p * v
        f = [x + 10.0 for x in f]  # clocks start high enough that one negative duration keeps them above zero
        f[n // 2] = -0.5 * min(f)
        wt = w.__getitem__ if w else None
        plain, sent = simulate_pair(schedule, p, m, f.__getitem__, b.__getitem__, wt, vpp=vpp, p2p_time=c)
        assert (plain.makespan, plain.busy) == _straightforward_sweep(schedule, p, m, f, b, w, v, 0.0), (p, m, c)
        assert (sent.makespan, sent.busy) == _straightforward_sweep(schedule, p, m, f, b, w, v, c), (p, m, c)


def _home(schedule: str, p: int, v: int, stage: int) -> int:
    return next(r for r in range(p) for c in range(v) if stage_of(schedule, r, c, p) == stage)


@pytest.mark.parametrize("schedule, vpp", STATIC + [("zb-v", 1)])
def test_path_bounds_are_the_straightforward_bound_on_random_vectors(schedule, vpp):
    """path_bounds (prefix sums only as far as the furthest first stage taken, the closed forms' checks once for
    both transfer times) returns the floats of path_bound as first written, with and without transfers, over every
    rank and over the last rank of each group of identical ranks (what the layout search passes)."""
    v = chunks_per_rank(schedule, vpp)
    for p, m, f, b, w, c in _draws(schedule, vpp, count=80, seed=24):
        want = _straightforward_path_bound(schedule, p, m, f, b, w, vpp, c)
        plain = _straightforward_path_bound(schedule, p, m, f, b, w, vpp, 0.0)[0]
        assert path_bounds(schedule, p, m, f, b, w, vpp, c) == (*want, plain), (p, m, c, f)
        last = {tuple((f[st], b[st]) for st in (stage_of(schedule, r, ch, p) for ch in range(v))): r for r in range(p)}
        assert path_bounds(schedule, p, m, f, b, w, vpp, c, ranks=sorted(last.values())) == (*want, plain)


def test_stage_shape_middle_test_is_the_extremes_test():
    """_stage_shape's middle-stage test (a count of stage 1's finite times first) says what the extremes' test alone
    says (max and min of the middle stages within 1e-12 of stage 1), on equal middles (one float object or equal
    ones), middles 1 ulp apart, signed zeros, NaN and infinities."""
    import math

    def extremes(f, b, n):
        f0, b0 = f[min(1, n - 1)], b[min(1, n - 1)]
        tol_f, tol_b = 1e-12 * abs(f0), 1e-12 * abs(b0)
        fm, bm = f[1:n - 1], b[1:n - 1]
        return not fm or (max(fm) - f0 <= tol_f and f0 - min(fm) <= tol_f and max(bm) - b0 <= tol_b
                          and b0 - min(bm) <= tol_b)
    rng = random.Random(3)
    odd = [0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1.0, math.nextafter(1.0, 2.0)]
    for _ in range(3000):
        n = rng.choice([1, 2, 3, 4, 7, 16])
        x = rng.choice(odd + [rng.uniform(0.01, 2.0)])
        f = [x] * n if rng.random() < 0.5 else [float(str(x)) for _ in range(n)]  # one object, or equal copies
        b = [2 * x] * n
        for _ in range(rng.choice([0, 0, 1, 2])):
            (f if rng.random() < 0.5 else b)[rng.randrange(n)] = rng.choice(odd + [x * (1 + 1e-13), x * 1.5])
        got = pipeline._stage_shape(f, b, n)[2]
        assert got == extremes(f, b, n), (f, b)


@pytest.mark.parametrize("schedule, vpp", STATIC + [("zb-v", 1)])
def test_path_bounds_never_exceed_the_simulated_makespan(schedule, vpp):
    """The bound is a lower bound of the simulated makespan on every draw (and the makespan itself where it says
    so, to a relative 1e-9: the closed forms sum in their own order)."""
    for p, m, f, b, w, c in _draws(schedule, vpp, count=40, seed=7):
        bound, exact, plain_bound = path_bounds(schedule, p, m, f, b, w, vpp, c)
        plain, sent = simulate_pair(schedule, p, m, f.__getitem__, b.__getitem__, w.__getitem__ if w else None,
                                    vpp=vpp, p2p_time=c)
        assert bound <= sent.makespan * (1 + 1e-12) and plain_bound <= plain.makespan * (1 + 1e-12), (p, m, c, f)
        if exact:
            assert bound == pytest.approx(sent.makespan, rel=1e-9), (p, m, c, f)
