"""The scheduler's queue that serving_speed.simulate runs, one engine step at a time: requests grouped by state
(``Group``), the KV cache as the scheduler counts it (``KvBudget``), vLLM V1's recompute preemption (``preempt``), the
running requests scheduled first (``schedule_running``), the waiting ones admitted while sequences, the token budget
and KV blocks last (``Slots``, ``admit``), decode runs advanced together (``decode_run``), and SGLang's retraction
(``retracted_ratio``). Each engine's switches are its engines.SchedulerPolicy; the sources are cited where each
rule is applied."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from ..records import dataclass
from .engines import SchedulerPolicy


class Group:
    """Requests in the same state (admitted together, alike in length): `n` of them, each of `n_in` prompt tokens
    generating `n_out`; `target` tokens to prefill (the prompt, or after a preemption the prompt and the tokens
    generated so far, recomputed)."""

    __slots__ = ("n", "arrival", "prefilled", "generated", "first", "chunk", "n_in", "n_out", "target")

    def __init__(self, n: int, arrival: float, n_in: int, n_out: int) -> None:
        self.n, self.arrival, self.prefilled, self.generated, self.first, self.chunk = n, arrival, 0, 0, 0.0, 0
        self.n_in, self.n_out, self.target = n_in, n_out, n_in

    def split(self, n: int) -> Group:
        """The first `n` of the group as a group of their own (this one keeps the rest)."""
        other = Group(n, self.arrival, self.n_in, self.n_out)
        other.prefilled, other.generated, other.first, other.target = (self.prefilled, self.generated, self.first,
                                                                       self.target)
        self.n -= n
        return other

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.target

    def held(self, kv: KvBudget, ahead: int = 0) -> int:
        """Blocks each of these requests holds `ahead` decode steps on: while prefilling, its whole prefill from
        admission, or (KvBudget.reach, vLLM V1) what it has prefilled and its next chunk; then its prompt and
        generated tokens."""
        if self.prefilled >= self.target:  # decoding
            return kv.need(self.n_in + self.generated + ahead)
        return kv.need(self.target if kv.reach is None else min(self.target, self.prefilled + kv.reach))

    def reserved(self, kv: KvBudget, policy: SchedulerPolicy, ratio: float) -> int:
        """Blocks the engine's admission counts as taken by each of these running requests (SchedulerPolicy): what
        they hold after the next step (vLLM), their whole length (TensorRT-LLM's GUARANTEED_NO_EVICT), or what they
        hold and new_token_ratio of their remaining output (SGLang)."""
        if policy.admission == "whole":
            return kv.need(self.n_in + self.n_out)
        if policy.admission == "ratio":
            left = min(self.n_out - self.generated, policy.clip_new_tokens)
            return kv.need(max(self.target, self.n_in + self.generated) + math.ceil(ratio * left))
        return self.held(kv, 1)

    def admission(self, kv: KvBudget, policy: SchedulerPolicy, chunk: int | None = None) -> int:
        """Blocks each of these waiting requests must find free to be admitted: its prompt's (vLLM; V1, KvBudget.reach:
        those of the `chunk` it is scheduled now), with its whole output (TensorRT-LLM), or with its output up to
        SGLang's clip (a new request is charged in full)."""
        if policy.admission == "prompt":
            return kv.need(self.prefilled + chunk) if kv.reach is not None and chunk else self.held(kv)
        return kv.need(self.target + min(self.n_out - self.generated, policy.clip_new_tokens))

    def state(self) -> tuple:
        return STATE(self)


STATE_FIELDS = ("prefilled", "generated", "first", "arrival", "n_in", "n_out", "target")  # what makes groups alike
STATE = operator.attrgetter(*STATE_FIELDS)  # Group.state


@dataclass(frozen=True)
class KvBudget:
    """The KV cache as the scheduler sees it: `blocks` in all, and the blocks a request of a given length holds
    (vLLM's kv_cache_utils: every group's blocks, the most over the pipeline stages)."""

    blocks: int
    need: Callable[[int], int]
    # vLLM V1 (SchedulerPolicy.chunk_blocks): a prefilling request holds blocks for what it has prefilled and at most
    # this many tokens more, the step's chunk (the token budget); None: for its whole prompt from admission
    reach: int | None = None
    # (P, g) where need(length + P) = need(length) + g for every length >= 0 (whole-context blocks: P the blocks'
    # tokens, g the blocks each P tokens add), which lets a BlockTally sum the decodes' blocks from their lengths
    # modulo P; None where need has no such period (a window's blocks stop growing)
    period: tuple[int, int] | None = None

    def memoized(self) -> KvBudget:
        """The same budget with `need` remembered by length (it reads nothing else, ``BlocksByLength``): a
        simulation asks it for the same few thousand lengths millions of times."""
        return KvBudget(blocks=self.blocks, need=BlocksByLength(self.need).__getitem__, reach=self.reach,
                        period=self.period)

    @classmethod
    def requests(cls, count: int) -> KvBudget:
        """A cache that holds `count` requests whatever their length (one block each)."""
        return cls(blocks=count, need=one_block, period=(1, 0))


class BlocksByLength(dict):
    """KvBudget.need remembered by length: blocks[length], computed on first use (a dict's own lookup, C-level, is
    ~40 % faster than an lru_cache's call on the hot path: preempt's block sum, decode_run's passes)."""

    __slots__ = ("need",)

    def __init__(self, need: Callable[[int], int]) -> None:
        super().__init__()
        self.need = need

    def __missing__(self, length: int) -> int:
        blocks = self[length] = self.need(length)
        return blocks


def one_block(length: int) -> int:
    return 1


class BlockTally:
    """The blocks decoding requests hold, summed from their lengths modulo the cache's period (KvBudget.period
    (P, g): need(q·P + r) = need(r) + q·g): `counts[r]` requests of length ≡ r (mod P) and `quotient` = Σ n·(length
    // P); ``blocks(j)``, what they hold j tokens on, is then Σ_r counts[r]·need((r + j) mod P) + g·(quotient +
    Σ_r counts[r]·((r + j) // P)), integers as Σ n·need(length + j) over the requests is: the same sum, in P terms
    instead of one a group (decode_run's search asks it at several j; ``shift`` advances every length at once).
    With j = a·P + b (b < P): (r + j) mod P is the residues turned by b, and (r + j) // P is a, plus 1 for the b
    residues r >= P - b that wrap."""

    __slots__ = ("counts", "quotient", "period", "growth", "needs")

    def __init__(self, kv: KvBudget) -> None:
        assert kv.period is not None
        self.period, self.growth = kv.period
        self.needs = [kv.need(r) for r in range(self.period)]  # need(r) for each residue
        self.counts, self.quotient = [0] * self.period, 0

    def add(self, n: int, length: int) -> None:
        """`n` requests of `length` tokens join (a negative `n`: leave)."""
        q, r = divmod(length, self.period)
        self.counts[r] += n
        self.quotient += n * q

    def blocks(self, j: int) -> int:
        """Σ n·need(length + j) over the requests."""
        a, b = divmod(j, self.period)
        counts, needs, cut = self.counts, self.needs, self.period - b
        wraps = a * sum(counts) + sum(counts[cut:])
        return sum(map(operator.mul, counts, needs[b:] + needs[:b])) + self.growth * (self.quotient + wraps)

    def shift(self, j: int) -> None:
        """Every request's length grows by `j` tokens."""
        a, b = divmod(j, self.period)
        counts, cut = self.counts, self.period - b
        self.quotient += a * sum(counts) + sum(counts[cut:])
        self.counts = counts[cut:] + counts[:cut]


class Held:
    """The running groups as one pass over them counts them (``preempt``'s, which needs their blocks anyway): the KV
    `blocks` they hold `ahead` decode steps on (Group.held), the requests in all (`count`), the groups prefilling,
    and of the decoding requests their number, cached tokens, the fewest tokens any has left to generate and the
    groups yet to give their first token. A step in which every running request decodes is scheduled from these
    (StepLoad.all_decoding) without a pass of its own."""

    __slots__ = ("blocks", "count", "prefilling", "decodes", "kv_tokens", "least_left", "unstarted", "tally")

    def __init__(self, running: list[Group], kv: KvBudget, ahead: int) -> None:
        blocks, need = 0, kv.need  # (the hot path: one plain loop over hundreds of groups every step)
        count = prefilling = decodes = kv_tokens = unstarted = 0
        least: float = math.inf
        # the decodes' lengths tallied by the cache's period (KvBudget.period): their blocks in P terms, for
        # decode_run's search too; else each group's need
        tally = self.tally = BlockTally(kv) if kv.period else None
        period, counts, quotient = (tally.period, tally.counts, 0) if tally else (0, [], 0)
        for g in running:
            n = g.n
            count += n
            if g.prefilled >= g.target:  # decoding: Group.held's case written out
                generated = g.generated
                length = g.n_in + generated
                if period:
                    counts[length % period] += n
                    quotient += n * (length // period)
                else:
                    blocks += n * need(length + ahead)
                decodes += n
                kv_tokens += n * length
                if g.n_out - generated < least:
                    least = g.n_out - generated
                if not generated:
                    unstarted += 1
                continue
            blocks += n * g.held(kv, ahead)
            prefilling += 1
        if tally:
            tally.quotient = quotient
            blocks += tally.blocks(ahead)
        self.blocks, self.count, self.prefilling, self.decodes = blocks, count, prefilling, decodes
        self.kv_tokens, self.least_left, self.unstarted = kv_tokens, least, unstarted

    def advanced(self, jump: int, ended: list[Group], running: list[Group], ahead: int,
                 joined: list[Group] | None = None) -> Held:
        """The next step's count after one in which every group counted (none prefilling) decoded `jump` tokens,
        the `joined` groups, admitted in that step, prefilled whole and now decode, and the `ended` groups finished
        and left `running`: the same decodes, each `jump` tokens longer (the tally shifted, BlockTally.shift), with
        the joined and less the ended at their lengths now; what a fresh pass over `running` counts (tests hold the
        two equal at every step of simulated runs) without the pass (a running total: the queue's O(groups) pass
        every step)."""
        tally = self.tally
        assert tally is not None and not self.prefilling
        tally.shift(jump)
        count, kv_tokens = self.count, self.kv_tokens + self.decodes * jump
        least, unstarted = self.least_left - jump, 0  # (each counted decoded a token: none is yet to give its first)
        for g in joined or ():
            length = g.n_in + g.generated
            tally.add(g.n, length)
            count += g.n
            kv_tokens += g.n * length
            least = min(least, g.n_out - g.generated)
            unstarted += not g.generated
        for g in ended:
            length = g.n_in + g.generated
            tally.add(-g.n, length)
            count -= g.n
            kv_tokens -= g.n * length
            unstarted -= not g.generated
        held = Held.__new__(Held)
        held.tally, held.count, held.decodes, held.kv_tokens = tally, count, count, kv_tokens
        held.prefilling, held.unstarted = 0, unstarted
        held.least_left = min([g.n_out - g.generated for g in running], default=math.inf) if ended else least
        held.blocks = tally.blocks(ahead)
        return held

    def leave(self, g: Group, k: int, each: int) -> bool:
        """`k` of group `g`'s requests, holding `each` blocks, leave the running (before their state changes);
        True when the fewest tokens left may have gone with them (the caller counts it again)."""
        self.blocks -= k * each
        self.count -= k
        whole = k == g.n
        if g.prefilled < g.target:
            self.prefilling -= whole
            return False
        self.decodes -= k
        self.kv_tokens -= k * (g.n_in + g.generated)
        if self.tally:
            self.tally.add(-k, g.n_in + g.generated)
        self.unstarted -= whole and not g.generated
        return whole and g.n_out - g.generated == self.least_left


def reserved_blocks(running: list[Group], kv: KvBudget, policy: SchedulerPolicy, ratio: float) -> int:
    """The blocks the engine's admission counts as taken by the running requests, Σ n·Group.reserved; TensorRT-LLM's
    whole lengths (GUARANTEED_NO_EVICT: need(n_in + n_out), the same every step) summed without a method call a
    group (a pass over hundreds of groups every step)."""
    if policy.admission == "whole":
        need = kv.need
        return sum([g.n * need(g.n_in + g.n_out) for g in running])
    return sum(g.n * g.reserved(kv, policy, ratio) for g in running)


def preempt(running: list[Group], waiting: list[Group], kv: KvBudget, keep_prefill: bool = False,
            ahead: int = 1, *, counted: Held | None = None) -> Held:
    """vLLM V1's recompute preemption (v1/core/sched/scheduler.py schedule): when the next step's tokens need more
    KV blocks than are free, the lowest-priority running request (the last admitted) is preempted, its blocks freed
    and its computed tokens dropped; it waits at the head of the queue and later prefills its prompt and the tokens
    it had generated again. With `keep_prefill` (SchedulerPolicy.prefix_cache) a request preempted in its prefill
    keeps what it had prefilled: its freed blocks stay in the prefix cache and its re-admission finds them. Returns
    the running requests counted (``Held``): the blocks they hold for the next step (`ahead` steps: vLLM V0's
    multi-step pass, whose decodes each reserve SchedulerPolicy.multi_step - 1 lookahead slots, core/scheduler.py
    _append_slots), their number and their decodes; `counted`: them already counted (Held.advanced)."""
    held = counted or Held(running, kv, ahead)
    recount = False
    while held.blocks > kv.blocks and len(running) > 1 or (running and running[0].n > 1 and held.blocks > kv.blocks):
        g = running[-1]
        each = g.held(kv, ahead)
        k = min(g.n, -(-(held.blocks - kv.blocks) // each))
        if k == g.n and len(running) == 1:
            k -= 1  # the first request in line keeps running (vLLM refuses a request no cache could hold)
        recount = held.leave(g, k, each) or recount
        part = g.split(k) if k < g.n else running.pop()
        if not (keep_prefill and not part.decoding):
            part.prefilled, part.target = 0, part.n_in + part.generated
        part.chunk = 0
        waiting.insert(0, part)
    if recount:
        held.least_left = min((g.n_out - g.generated for g in running if g.prefilled >= g.target), default=math.inf)
    return held


class StepLoad:
    """One engine step's scheduled groups: those prefilling and those decoding (in the order scheduled), and what
    StepCost.seconds reads of them: the scheduled `tokens`, the `rows` that sample (every decode, and a prefill's
    last chunk unless the engine samples its first token in a decode step, `first_in_decode`), the decoding
    sequences and their cached tokens, the prefill chunks' causal (query, key) `pairs` and their prompts' mean
    `length` weighted by chunk tokens; and of the decodes, the fewest tokens any has left to generate and whether any
    has yet to give its first. ``schedule_running`` counts the decodes it schedules whole as it goes (the step's
    bulk, hundreds of groups: one pass for both); ``tally`` the rest."""

    __slots__ = ("prefilling", "decoding", "tokens", "rows", "decodes", "kv_tokens", "pairs", "length",
                 "least_left", "first_token", "first_in_decode", "rest", "seen")

    def __init__(self, first_in_decode: bool) -> None:
        self.prefilling: list[Group] = []
        self.decoding: list[Group] = []
        self.tokens = self.rows = self.decodes = self.kv_tokens = 0
        self.pairs, self.length, self.least_left, self.first_token = 0.0, 0.0, math.inf, False
        self.first_in_decode = first_in_decode
        self.rest: list[Group] = []  # what schedule_running scheduled and did not count (prefill chunks, a split)
        self.seen = 0  # the scheduled groups schedule_running saw: those after it, admitted, are counted by tally

    @classmethod
    def all_decoding(cls, running: list[Group], held: Held, first_in_decode: bool) -> StepLoad:
        """The step in which every running group decodes (none prefilling, the token budget holds them all),
        ``schedule_running``'s every group a decode token, in order, counted from `held` (each decode's chunk of one
        token is implied: a chunk is read only where schedule_running or admit set it)."""
        load = cls(first_in_decode)
        load.decoding = list(running)
        load.tokens = load.decodes = held.decodes
        load.kv_tokens, load.least_left, load.first_token = held.kv_tokens, held.least_left, held.unstarted > 0
        load.seen = len(running)
        return load

    def tally(self, scheduled: list[Group]) -> StepLoad:
        """Counts the scheduled groups that ``schedule_running`` did not (``rest``, then those scheduled after it)."""
        decode, prefill = self.decoding.append, self.prefilling.append
        tokens, rows, decodes, kv_tokens = self.tokens, 0, self.decodes, self.kv_tokens
        chunks = weighted = 0
        pairs, least, first = self.pairs, self.least_left, self.first_token
        for g in self.rest + scheduled[self.seen:]:
            n, chunk = g.n, g.chunk
            tokens += n * chunk
            generated = g.generated
            if g.prefilled >= g.target:  # decoding
                decode(g)
                decodes += n
                kv_tokens += n * (g.n_in + generated)
                if g.n_out - generated < least:
                    least = g.n_out - generated
                if not generated:
                    first = True
                continue
            prefill(g)
            chunks += n * chunk
            weighted += n * chunk * g.target
            pairs += n * (chunk * g.prefilled + chunk * (chunk + 1) / 2)
            if g.prefilled + chunk >= g.target and (g.generated or not self.first_in_decode):
                rows += n
        self.tokens, self.rows, self.decodes, self.kv_tokens = tokens, rows + decodes, decodes, kv_tokens
        self.pairs, self.length = pairs, weighted / chunks if chunks else 0.0
        self.least_left, self.first_token = least, first
        return self


def schedule_running(running: list[Group], budget: int, load: StepLoad,
                     decodes: bool = True) -> tuple[list[Group], int]:
    """vLLM V1 schedules the running requests first, in order: a decode token each, or a prefill's next chunk (whole
    while the token budget lasts, then one partial chunk); returns the scheduled groups and the budget left. Without
    `decodes`, only the prefills' chunks (a prefill-only step, SchedulerPolicy.mixed False). The decodes scheduled
    whole are counted into `load` as they are scheduled, the other groups left to StepLoad.tally (``load.rest``)."""
    scheduled: list[Group] = []
    decoding, rest = load.decoding, load.rest
    count = kv_tokens = 0
    least, first = load.least_left, load.first_token
    for g in list(running):
        if budget <= 0:
            break
        need = g.target - g.prefilled  # its prompt's rest, or none left: decoding, one token
        if need <= 0:
            if not decodes:
                continue
            n = g.n
            if budget >= n:  # (the common case first: every request of the group decodes)
                g.chunk, budget = 1, budget - n
                scheduled.append(g)
                decoding.append(g)
                count += n
                generated = g.generated
                kv_tokens += n * (g.n_in + generated)
                if g.n_out - generated < least:
                    least = g.n_out - generated
                if not generated:
                    first = True
                continue
            need = 1
        full = budget // need
        if full >= g.n:
            g.chunk, budget = need, budget - need * g.n
            scheduled.append(g)
            rest.append(g)
            continue
        if full:
            part = g.split(full)
            running.insert(running.index(g), part)
            part.chunk, budget = need, budget - need * full
            scheduled.append(part)
            rest.append(part)
        if budget and need > 1:  # one more request takes a partial chunk
            part = g.split(1) if g.n > 1 else g
            if part is not g:
                running.insert(running.index(g), part)
            part.chunk, budget = budget, 0
            scheduled.append(part)
            rest.append(part)
        break
    load.tokens, load.decodes, load.kv_tokens = count, count, kv_tokens
    load.least_left, load.first_token, load.seen = least, first, len(scheduled)
    return scheduled, budget


class Slots:
    """What admission may still take: sequences below `limit` and KV blocks not reserved (KvBudget, the engine's
    SchedulerPolicy)."""

    __slots__ = ("running", "limit", "free", "kv", "policy")

    def __init__(self, running: int, limit: int, kv: KvBudget, used: int, policy: SchedulerPolicy) -> None:
        self.running, self.limit, self.kv, self.free, self.policy = running, limit, kv, kv.blocks - used, policy

    def take(self, g: Group, chunk: int | None = None) -> int:
        return min(g.n, self.limit - self.running, self.free // max(1, g.admission(self.kv, self.policy, chunk)))


def admit(waiting: list[Group], running: list[Group], scheduled: list[Group], budget: int,
           slots: Slots, whole_below: int = 0) -> int:
    """Then the waiting requests, first come first served, each with its first chunk (whole prompts while the budget
    lasts, then one part), while sequences and KV blocks for their prompts last (`slots`); returns how many run.
    Prompts of at most `whole_below` tokens are never split (no context chunking): one that the budget left cannot
    hold whole waits for the next step."""
    while waiting and budget > 0:
        g = waiting[0]
        chunk = g.target - g.prefilled
        take = slots.take(g, min(chunk, budget))
        if take < 1 or (budget < chunk <= whole_below):
            break
        if budget // chunk < take:
            take, chunk = (budget // chunk, chunk) if budget >= chunk else (1, budget)
        part = g.split(take) if take < g.n else waiting.pop(0)
        part.chunk, budget = chunk, budget - chunk * take
        running.append(part)
        scheduled.append(part)
        slots.running += take
        slots.free -= take * part.admission(slots.kv, slots.policy, chunk)
    return slots.running


def decode_run(decoding: list[Group], kv: KvBudget, held: int, steps: int, alone: bool = False, *,
               tally: BlockTally | None = None) -> int:
    """The most decode steps, up to `steps`, that the `decoding` requests take before their blocks outgrow the cache
    (`held`: the blocks every running request holds after one step; `alone`: the decoding requests are every running
    one, so that the others hold none; `tally`: theirs, ``BlockTally``, which sums their blocks in P terms)."""
    if tally is not None:
        held_after = tally.blocks
    else:
        need, counts = kv.need, [g.n for g in decoding]
        lengths = [g.n_in + g.generated for g in decoding]  # each holds need(length + j) after j steps

        def held_after(j: int) -> int:
            return sum(map(operator.mul, counts, map(need, map(j.__add__, lengths))))

    base = 0 if alone else held - held_after(1)  # what the others hold meanwhile

    def fits(j: int) -> bool:
        return base + held_after(j) <= kv.blocks

    if steps == 1 or not fits(2):  # (a full cache, requests preempted and readmitted: one step, in one pass)
        return 1
    if fits(steps):
        return steps
    lo, hi = 2, steps - 1  # fits(lo), not fits(hi + 1): the cache fills within a few blocks' worth of steps:
    while 2 * lo <= hi:  # gallop up, then bisect
        if not fits(2 * lo):
            hi = 2 * lo - 1
            break
        lo *= 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def merged(running: list[Group]) -> list[Group]:
    """Groups now alike as one: neighbours in the same state, and decoding groups in the same state wherever they
    stand (a decode's place in the queue changes nothing; split apart by a budget, they would stay apart). No two
    in the same state (most steps: each request its own arrival, or its own first token): every group as it is,
    found by one set of their states (a merge changes only the count `n`, outside the state)."""
    states = [(g.prefilled, g.generated, g.first, g.arrival, g.n_in, g.n_out, g.target) for g in running]  # STATE
    if len(set(states)) == len(states):
        return list(running)
    merged: list[Group] = []
    decoding: dict[tuple, Group] = {}  # the first decoding group in each state
    last = None  # the state of merged[-1]
    for g, key in zip(running, states, strict=True):
        if key == last:
            merged[-1].n += g.n
            continue
        if g.prefilled >= g.target:  # decoding
            first = decoding.setdefault(key, g)
            if first is not g:
                first.n += g.n
                continue
        merged.append(g)
        last = key
    return merged


def retracted_ratio(running: list[Group], policy: SchedulerPolicy) -> float:
    """SGLang's new_token_ratio after a retraction (schedule_batch.py retract_decode): (the tokens the requests left
    running have decoded + SGLANG_RETRACT_DECODE_STEPS each) / their max_new_tokens, at most 1."""
    out = sum(g.n * g.n_out for g in running)
    if not out:
        return policy.init_ratio
    return min(1.0, (sum(g.n * g.generated for g in running) + policy.retract_steps * sum(g.n for g in running)) / out)


RATIO_JUMP = 16  # decode steps advanced at once at most while SGLang's decaying ratio may admit a waiting request
