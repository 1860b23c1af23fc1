"""Training memory for the layout search: memory.training_memory's peak with each distinct piece evaluated once."""

from __future__ import annotations

import math

from ...records import dataclass
from ...spec import ModelSpec
from ..activations import ActivationEstimate, activation_memory, kept_terms, layer_saved
from ..memory import (
    OPTIMIZERS,
    RECIPES,
    _fp8_inputs,
    _layer_params,
    fp8_state_bytes,
    peak_from,
    peak_of,
    routed_expert_params,
    state_terms_of,
    zero3_gathered,
)
from ..parallel import Parallel, _build
from ..params import count_params, layer_blocks
from .cache import _cached_in, current, per_call
from .layout import Layout


@dataclass(frozen=True)
class ActsKey:
    """What a layer kind's saved activations read beside the model family (whose tables hold them, _family): the
    micro-batch, the sequence on this rank, bytes per activation, the recomputation, tp and sequence parallelism."""

    batch: int
    seq: int
    act_bytes: float
    recompute: str
    tp: int
    sp: bool

    def __hash__(self) -> int:  # hashed once: every key of the stage's terms holds it
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.batch, self.seq, self.act_bytes, self.recompute, self.tp, self.sp))
            object.__setattr__(self, "_hash", found)
        return found


def _family(spec: ModelSpec) -> ModelSpec:
    """The model `spec` was resized from (_resized), else itself: a family's tables hold the per-layer terms its
    copies share."""
    return current().table("family").get(id(spec), (spec, spec))[1]


def _of(spec: ModelSpec, name: str) -> dict:
    """The running call's table `name` of the model `spec` (cache.Tables.of)."""
    return current().of(spec, name)


@per_call
def _least_that_fits(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str], capacity: float,
                     recipe: str = "bf16-mixed", optimizer: str = "adamw") -> tuple[str | None, int, float]:
    """(recompute, ZeRO stage, peak bytes) of the cheapest setting whose most loaded stage (ceil(L / pp) layers
    on every stage) fits `capacity`: ZeRO-1 with the least recomputation, else ZeRO-3 (FSDP: weights and
    gradients sharded too, at three weight/gradient transfers per micro-batch) where dp > 1;
    (None, last stage tried, its peak) when nothing fits. Memory is `memory.training_memory`'s, computed through
    `training_peak` (the same arithmetic, each distinct layer kind's activations once). Once per model, degrees,
    micro-batch and settings: what it reads of `lay` (the layouts that differ in vpp alone, say, share it)."""
    key = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, lay.micro_batch, seq_len, tuple(tries), capacity, recipe,
           optimizer)
    return _cached_in(_of(spec, "fits"), key, lambda: _least_that_fits_uncached(spec, lay, seq_len, tries, capacity,
                                                                                 recipe=recipe, optimizer=optimizer))


def _least_that_fits_uncached(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str], capacity: float,
                              recipe: str, optimizer: str) -> tuple[str | None, int, float]:
    layers = math.ceil(spec.n_layers / lay.pp) * lay.pp  # pp values with the same count share the resized spec
    even = _cached_in(_of(spec, "resized"), layers, lambda: _resized(spec, layers))
    rec = RECIPES[recipe]
    peak, zero = 0.0, 1
    zeros = (1, 3) if lay.dp > 1 else (1,)
    # each recomputation's stage activations (_stage_sums): the same at either ZeRO stage, and for the layouts that
    # differ in ep or etp alone
    sums = _cached_in(_of(even, "check sums"), (lay.micro_batch, seq_len, rec.act_bytes, lay.tp, lay.cp, lay.pp), dict)
    for zero in zeros:
        # _training_peak's terms, without its cache: no other layout's check asks for these degrees and micro-batch
        states = _stage_states(even, recipe, optimizer, (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, zero))
        # every phase_peak is at least its optimizer step's sum, the same for every micro-batch and recomputation:
        # above the capacity no recomputation fits (the last try of the last stage is still computed: its peak is
        # the one reported)
        hopeless = max(s.step for s in states) > capacity
        none_peak = None
        for rc in (tries[-1:] if zero == zeros[-1] else []) if hopeless else tries:
            if rc == "selective" and none_peak is not None:
                # flash attention keeps no S² buffer, the only tensors selective recomputation drops
                # (activations.layer_terms): the same bytes as none, which did not fit
                peak = none_peak
                continue
            if rec.fp8_saved_inputs:
                par = _build(Parallel, tp=lay.tp, cp=lay.cp, pp=lay.pp, dp=lay.dp, ep=lay.ep, etp=lay.etp,
                             sequence_parallel=True, zero=zero)  # Parallel(...), without __init__'s setattr
                peak = _training_peak(even, lay.micro_batch, seq_len, recipe, optimizer, recompute=rc, parallel=par)
            else:
                acts = sums.get(rc)
                if acts is None:
                    acts = sums[rc] = _stage_sums(even, lay.micro_batch, seq_len // lay.cp, rec.act_bytes, rc,
                                                  mesh=(lay.tp, True, lay.pp))
                peak = max(map(peak_from, states, acts))  # the stages pair up (_stage_ranges)
            if peak <= capacity:
                return rc, zero, peak
            none_peak = peak if rc == "none" else None
    return None, zero, peak


def _degrees(par: Parallel) -> tuple:
    """A Parallel's fields as a plain tuple, for cache keys (hashing and comparing the dataclass takes longer)."""
    return par.tp, par.cp, par.pp, par.dp, par.ep, par.etp, par.vpp, par.zero, par.sequence_parallel


def _resized(spec: ModelSpec, n_layers: int) -> ModelSpec:
    """spec.with_layers(n_layers), of `spec`'s family: the activation caches share their per-layer terms
    (_layer_signature) and the head's. `spec` itself at its own layer count where with_layers would change no field
    (its per-layer lists are validated to n_layers entries; tests hold it on every preset): building and validating
    the copy is most of a memory check's cost."""
    same = n_layers == spec.n_layers and spec.n_dense_layers <= n_layers and \
        all(i < n_layers for i in (*(spec.moe_layers or ()), *(spec.index_layers or ())))
    out = spec if same else spec.with_layers(n_layers)
    current().table("family")[id(out)] = (out, _family(spec))  # (kept with its id)
    return out


@per_call
def training_peak(spec: ModelSpec, batch: int, seq_len: int, recipe: str, optimizer: str, recompute: str,
                  parallel: Parallel) -> float:
    """`memory.training_memory(...).peak` (flash attention, no dropout, fused optimizer), evaluated with each distinct
    piece once: the parameters per model, each layer kind's saved activations per (micro-batch, sequence, tp,
    recompute), then summed by count (tests hold it equal to training_memory)."""
    key = (batch, seq_len, recipe, optimizer, recompute, *_degrees(parallel))
    return _cached_in(_of(spec, "peaks"), key, lambda: _training_peak(spec, batch, seq_len, recipe, optimizer,
                                                                      recompute=recompute, parallel=parallel))


def _training_peak(spec: ModelSpec, batch: int, seq_len: int, recipe: str, optimizer: str, recompute: str,
                   parallel: Parallel) -> float:
    seq = seq_len // parallel.cp
    rec = RECIPES[recipe]
    tp, pp, sp = parallel.tp, parallel.pp, parallel.sequence_parallel
    states = _stage_states(spec, recipe, optimizer, (tp, parallel.cp, pp, parallel.dp, parallel.ep, parallel.etp,
                                                     parallel.zero))
    if rec.fp8_saved_inputs:
        args = (spec, batch, seq, rec.act_bytes, recompute, tp, sp)
        acts = [_fp8_inputs(_activations(*args, *r), rec.act_bytes, rec.saved_input_bytes)
                for r in _stage_ranges(spec.n_layers, pp)]
        return max(peak_of(s, a) for s, a in zip(states, acts, strict=True))
    sums = _stage_sums(spec, batch, seq, rec.act_bytes, recompute, mesh=(tp, sp, pp))
    return max([peak_from(s, a) for s, a in zip(states, sums, strict=True)])


def _stage_ranges(n_layers: int, pp: int) -> list[tuple[int, int, int, bool]]:
    """memory.training_memory's most loaded stages as (first layer, stop, micro-batches in flight, head?): pp 1 the
    only stage; else the first (pp in flight, 1F1B) and the last (the head)."""
    if pp == 1:
        return [(0, n_layers, 1, True)]
    per_stage = n_layers // pp
    return [(0, per_stage, pp, False), (n_layers - per_stage, n_layers, 1, True)]


def _stage_sums(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, mesh: tuple) -> list:
    """_activation_sums of each of _stage_ranges' stages, `mesh` = (tp, sequence parallel, pp): the stages' layer kinds
    and signatures once per model, pp and sequence (_stages_signed), then each stage's plan by one key."""
    tp, sp, pp = mesh
    stages = _cached_in(_of(spec, "stages"), (pp, seq), lambda: _stages_signed(spec, pp, seq))
    common = ActsKey(batch, seq, act_bytes, recompute, tp=tp, sp=sp)
    return [_summed(spec, common, kinds, signed, in_flight, head=head) for kinds, signed, in_flight, head in stages]


def _stages_signed(spec: ModelSpec, pp: int, seq: int) -> list[tuple[list, tuple, int, bool]]:
    """Per stage of _stage_ranges: its layer kinds and their signatures (_kinds_signed), the micro-batches in flight
    and whether it holds the head."""
    out = []
    for start, stop, in_flight, head in _stage_ranges(spec.n_layers, pp):
        kinds, signatures = _kinds_signed(spec, start, stop, seq)
        out.append((kinds, signatures, in_flight, head))
    return out


def _stage_states(spec: ModelSpec, recipe: str, optimizer: str, degrees: tuple) -> list:
    """memory.training_memory's most loaded stages (pp 1: the only one; else the first and the last), each as the
    MemoryEstimate.state_terms of its parameters: the same whatever the micro-batch and recomputation, so once per
    model, recipe, optimizer and `degrees` = (tp, cp, pp, dp, ep, etp, ZeRO stage) (what they read of a Parallel)."""
    return _cached_in(_of(spec, "states"), (recipe, optimizer, *degrees),
                      lambda: _stage_states_uncached(spec, recipe, optimizer, degrees))


def _stage_states_uncached(spec: ModelSpec, recipe: str, optimizer: str,
                           degrees: tuple) -> list:  # long: memory.training_memory's assembly, step by step
    rec = RECIPES[recipe]
    opt = OPTIMIZERS[optimizer]
    tp, cp, pp, dp, ep, etp, zero = degrees
    etp = etp or tp  # Parallel.expert_tp

    def make() -> tuple:  # once per model: its components, per-layer split, routed experts and blocks
        comps = count_params(spec).components
        return comps, _layer_params(spec, comps), routed_expert_params(spec, comps), layer_blocks(spec)
    comps, split, routed, each_block = _cached_in(_of(spec, "components"), "components", make)
    layer, norms, emb, head, final = split
    per_stage = spec.n_layers // pp
    routed = routed / spec.n_layers
    own = ep > 1 or etp != tp
    layer -= routed if own else 0.0
    experts = per_stage * routed / (etp * ep) if own else 0.0
    blocks = per_stage * (layer / tp + norms)
    gathered = zero3_gathered(each_block, tp, etp * ep if own else None, rec.weight_bytes) if zero == 3 and dp > 1 \
        else 0.0
    tied = spec.lm_head and spec.tie_embeddings  # the head's gradient is the token table's, made first
    late = (emb - (comps.get("embedding/tokens", 0) if tied else 0)) / tp
    if pp == 1:
        stages = [(emb / tp + blocks + final + (head / tp if not spec.tie_embeddings else 0), head / tp + final, late)]
    else:
        stages = [(emb / tp + blocks, 0.0, emb / tp), (blocks + final + head / tp, head / tp + final, 0.0)]
    # MemoryEstimate(...).state_terms() of each stage, without the estimate: a fused optimizer (no temporaries)
    fp8_state = fp8_state_bytes(rec, spec.n_layers, pp)
    return [state_terms_of(rec, opt, zero=zero, dp=dp, expert_dp=tp * cp * dp // (etp * ep), params=params,
                           experts=experts, gathered=gathered, temporaries=0.0, fp8_state=fp8_state,
                           blocks=bool(spec.n_layers), head=head_p, late=late_p)
            for params, head_p, late_p in stages]


def _activations(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                 start: int, stop: int, in_flight: int, head: bool) -> ActivationEstimate:
    """activations.activation_memory over layers start..stop, each distinct layer kind (layer_parts, MoE or not)
    computed on one layer and counted (activation_memory sums the same per-layer tensors): _stage_acts' parts as an
    ActivationEstimate."""
    parts = _stage_acts(spec, batch, seq, act_bytes, recompute, tp=tp, sp=sp, start=start, stop=stop,
                        in_flight=in_flight, head=head)
    names, values, working, logits, largest, own, head_saved = parts
    return ActivationEstimate(dict(zip(names, values, strict=True)), working, logits, largest_layer=largest,
                              own_layer=own, head_saved=head_saved, in_flight=in_flight)


def _activation_sums(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                     start: int, stop: int, in_flight: int, head: bool) -> tuple[float, float, float, int, float,
                                                                                 float]:
    """What memory.peak_from reads of _activations(...): (the sum of its per_layer values in their order,
    logits_and_loss, head_saved, in_flight, own_layer, largest_layer), summed from _sums_plan's constants (once per
    model family, micro-batch, sequence, tp, recomputation and the stage's layer kinds, whatever their counts and the
    micro-batches in flight) as _stage_acts' dicts add them up (see _sums_plan; _summed). Not cached: a layout
    search asks for each stage once (_stage_sums, per memory check)."""
    kinds, signatures = _kinds_signed(spec, start, stop, seq)
    common = ActsKey(batch, seq, act_bytes, recompute, tp=tp, sp=sp)
    return _summed(spec, common, kinds, signatures, in_flight, head=head)


def _summed(spec: ModelSpec, common: ActsKey, kinds: list, signatures: tuple, in_flight: int,
            head: bool) -> tuple[float, float, float, int, float, float]:
    """_activation_sums of a stage of these layer kinds (`signatures`: theirs), from its plan (_sums_plan, once per
    model family, `common`, signatures and head)."""
    cache = _of(_family(spec), "acts")
    key = ("plan", common, signatures, head)
    plan = cache.get(key)
    if plan is None:
        plan = cache[key] = _sums_plan(spec, kinds, common, head)
    simple, flat, slots, tail, logits, head_saved, largest, own = plan
    # _stage_acts' 0.0 + x per name and per kind (the dicts' get(name, 0.0) + x) is left out below: it is x, but
    # for a -0.0 made 0.0, and what takes these values (the sum from 0, an accumulator from 0.0, never -0.0) adds
    # either zero alike
    if simple is not None:  # one kind, each name once and not the head's
        count = kinds[0][1]
        values = [value * in_flight * count for value in simple]
        return sum(values + tail), logits, head_saved, in_flight, own, largest
    counts = [count for _, count in kinds]
    if flat is not None:  # each layer's names once each: the loop below, kind by kind over every name
        columns, heads = flat
        sums = [0.0] * len(columns[0])
        for column, count in zip(columns, counts, strict=True):
            sums = [acc if value is None else acc + value * in_flight * count
                    for acc, value in zip(sums, column, strict=True)]
        if heads is not None:
            sums = [acc if value is None else acc + value for acc, value in zip(sums, heads, strict=True)]
        return sum(sums + tail), logits, head_saved, in_flight, own, largest
    sums = []
    for slot in slots:
        acc = 0.0
        for j, terms in slot:
            if j < 0:  # the head's bytes
                acc = acc + terms
                continue
            one = 0.0
            for value in terms:  # _kind_terms' one[name]: the name's terms of one layer, x in flight
                one = one + value * in_flight
            acc = acc + one * counts[j]
        sums.append(acc)
    return sum(sums + tail), logits, head_saved, in_flight, own, largest


def _kinds_signed(spec: ModelSpec, start: int, stop: int, seq: int) -> tuple[list, tuple]:
    """(_kinds_between(spec, start, stop), each kind's _layer_signature at `seq`)."""
    kinds = _cached_in(_of(spec, "kinds"), (start, stop), lambda: _kinds_between(spec, start, stop))
    return kinds, tuple([_signature(spec, i, seq) for i, _ in kinds])


def _signature(spec: ModelSpec, i: int, seq: int) -> tuple:
    """_layer_signature(spec, i, seq), once per model, layer and sequence."""
    return _cached_in(_of(spec, "signatures"), (i, seq), lambda: _layer_signature(spec, i, seq))


def _sums_plan(spec: ModelSpec, kinds: list, common: ActsKey, head: bool) -> tuple:
    """_activation_sums' constants of a stage of these layer kinds ([first layer, count] each, in layer order;
    `common` as _kind_terms'), whatever their counts and the micro-batches in flight: (the one kind's term bytes in
    order where the stage has one kind and each name once, not the head's, else None; where each kind's layer saves
    each of its names once, (per kind, its bytes of each of per_layer's names in their order (_stage_acts': each
    kind's names in turn, then the head's) or None where it has none; the head's the same way, or None without a
    head), else None; else per_layer's names in their order, each as its (kind, that kind's bytes of the name in
    order) in kind order, and (-1, bytes) for the head's; the head's 0.0 + bytes per name where simple, else [];
    logits and loss; head saved; the first largest layer and its own, as _stage_acts takes them). Each name
    sums to _stage_acts' float: 0.0, + per kind (0.0 + each of its bytes x in flight, in order) x its count, + the
    head's bytes (0.0 + x is x: the dicts' get(name, 0.0) + x whether or not the name is there yet)."""
    whole = _head_acts(spec, common, head)
    seq = common.seq
    heads = whole.per_layer
    if len(kinds) == 1:  # the usual stage: its names once each and not the head's
        terms, full, kept = _layer_kept(spec, kinds[0][0], common, _signature(spec, kinds[0][0], seq))
        names = [name for name, _ in terms]
        if len(set(names)) == len(names) and heads.keys().isdisjoint(names):
            largest, own = (full, kept) if full > 0.0 else (0.0, 0.0)
            return (tuple([value for _, value in terms]), True, (), [0.0 + value for value in heads.values()],
                    whole.logits_and_loss, whole.head_saved, largest, own)
    kept_of, largest, own = [], 0.0, 0.0
    for i, _ in kinds:
        terms, full, kept = _layer_kept(spec, i, common, _signature(spec, i, seq))
        kept_of.append(terms)
        if full > largest:  # (full, kept) if full > 0.0, as _kind_terms takes them; the first largest kind
            largest, own = full, kept
    if all(len({name for name, _ in terms}) == len(terms) for terms in kept_of):  # each layer's names once each
        index: dict[str, int] = {}
        for terms in kept_of:
            for name, _ in terms:
                index.setdefault(name, len(index))
        for name in heads:
            index.setdefault(name, len(index))
        columns = []  # per kind, then the head's: its bytes of each name in per_layer's order, None where it has none
        for terms in [*kept_of, list(heads.items())] if heads else kept_of:
            column: list[float | None] = [None] * len(index)
            for name, value in terms:
                column[index[name]] = value
            columns.append(tuple(column))
        flat = (tuple(columns[:len(kinds)]), columns[len(kinds)] if heads else None)
        return None, flat, (), [], whole.logits_and_loss, whole.head_saved, largest, own
    slots: dict[str, list] = {}
    for j, terms in enumerate(kept_of):
        per_name: dict[str, list[float]] = {}
        for name, value in terms:
            per_name.setdefault(name, []).append(value)
        for name, values in per_name.items():
            slots.setdefault(name, []).append((j, tuple(values)))
    for name, value in heads.items():
        slots.setdefault(name, []).append((-1, value))
    return (None, None, tuple(tuple(slot) for slot in slots.values()), [], whole.logits_and_loss, whole.head_saved,
            largest, own)


def _kinds_between(spec: ModelSpec, start: int, stop: int) -> list:
    """Each distinct layer kind of layers start..stop (layer_parts, MoE or not): its first layer and how many, in
    order of first layers (read off the model's runs of one kind, _layer_runs)."""
    kinds: dict[tuple, list[int]] = {}
    for lo, hi, kind in _layer_runs(spec):
        if hi <= start:
            continue
        if lo >= stop:
            break
        lo, hi = max(lo, start), min(hi, stop)
        entry = kinds.get(kind)
        if entry is None:
            kinds[kind] = [lo, hi - lo]
        else:
            entry[1] += hi - lo
    return list(kinds.values())


def _layer_runs(spec: ModelSpec) -> list[tuple[int, int, tuple]]:
    """The maximal runs of consecutive layers of one kind (layer_parts, MoE or not) as (first layer, end, kind), in
    layer order, once per model: each layer's parts read once whatever the stages asked for."""
    def make() -> list[tuple[int, int, tuple]]:
        runs: list[tuple[int, int, tuple]] = []
        for i in range(spec.n_layers):
            kind = (spec.layer_parts(i), spec.is_moe_layer(i))
            if runs and runs[-1][2] == kind:
                runs[-1] = (runs[-1][0], i + 1, kind)
            else:
                runs.append((i, i + 1, kind))
        return runs
    return _cached_in(_of(spec, "runs"), "runs", make)


def _stage_acts(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                start: int, stop: int, in_flight: int, head: bool) -> tuple:  # long: one loop per layer kind
    """_activations' parts: (per_layer's names and values in its order, recompute working set, logits and loss,
    largest layer, own layer, head saved). Each layer kind's terms once per (micro-batch, sequence, tp,
    recomputation) and model family, times the micro-batches in flight once per such count (_kind_terms), then
    summed by count; a stage of one layer kind whose names are distinct from the head's takes them as lists (the
    same floats as the dicts: each name's 0.0 + its bytes)."""
    common = ActsKey(batch, seq, act_bytes, recompute, tp=tp, sp=sp)

    # the final norm, LM head and loss: the same whatever the micro-batches in flight
    whole = _head_acts(spec, common, head)
    kinds = _cached_in(_of(spec, "kinds"), (start, stop), lambda: _kinds_between(spec, start, stop))
    if len(kinds) == 1:
        i, count = kinds[0]
        names, one, working_set, largest_layer, own_layer = _kind_terms(spec, i, common, in_flight)
        if whole.per_layer.keys().isdisjoint(names):  # each name's 0.0 + its bytes, as the dicts below add them
            values = [0.0 + value * count for value in one]
            values += [0.0 + value for value in whole.per_layer.values()]
            biggest, own = (largest_layer, own_layer) if largest_layer > 0.0 else (0.0, 0.0)
            return (names + tuple(whole.per_layer), values, max(0.0, working_set), whole.logits_and_loss, biggest,
                    own, whole.head_saved)
    per_layer: dict[str, float] = {}
    largest = biggest = own = 0.0  # as activation_memory: the first largest block (layer order) and its own
    for i, count in kinds:
        names, one, working_set, largest_layer, own_layer = _kind_terms(spec, i, common, in_flight)
        if per_layer:
            for name, value in zip(names, one, strict=True):
                per_layer[name] = per_layer.get(name, 0.0) + value * count
        else:  # the first kind: each name's 0.0 + its bytes, as the loop above adds them
            per_layer = {name: 0.0 + value * count for name, value in zip(names, one, strict=True)}
        largest = max(largest, working_set)
        if largest_layer > biggest:
            biggest, own = largest_layer, own_layer
    for name, value in whole.per_layer.items():
        per_layer[name] = per_layer.get(name, 0.0) + value
    return tuple(per_layer), list(per_layer.values()), largest, whole.logits_and_loss, biggest, own, whole.head_saved


def _kind_terms(spec: ModelSpec, i: int, common: ActsKey, in_flight: int) -> tuple:
    """activation_memory over layer i alone, `common` its ActsKey (in the model family's tables): (its names, in
    order, once each; their bytes times the micro-batches in flight; the recompute working set; the largest layer;
    its own layer). The layer's terms once whatever the micro-batches in flight (a name that repeats adds up as
    activation_memory adds it); once per layer signature and model family (_layer_signature: layers that read the
    same per-layer fields of models that differ only in their layer count have the same terms)."""
    recompute, seq = common.recompute, common.seq
    signature = _signature(spec, i, seq)

    def make() -> tuple:
        terms, whole, kept = _layer_kept(spec, i, common, signature)
        one: dict[str, float] = {}
        for name, value in terms:
            one[name] = one.get(name, 0.0) + value * in_flight
        largest, own = (whole, kept) if whole > 0.0 else (0.0, 0.0)
        return tuple(one), list(one.values()), largest if recompute == "full" else 0.0, largest, own
    return _cached_in(_of(_family(spec), "acts"), ("kind terms", common, signature, in_flight), make)


def _layer_kept(spec: ModelSpec, i: int, common: ActsKey, signature: tuple) -> tuple:
    """activations.layer_terms of layer i (flash attention, no dropout; `common` as _kind_terms'), once per
    `common` and layer signature; the layer's saved tensors (layer_saved) once per model family, micro-batch,
    sequence and activation bytes: they are the same whatever the recomputation and tp (kept_terms), and their
    per-rank bytes once per tp and sequence parallelism besides: the same whatever the recomputation."""
    batch, seq, act_bytes, recompute, tp, sp = (common.batch, common.seq, common.act_bytes, common.recompute,
                                                common.tp, common.sp)
    acts = _of(_family(spec), "acts")

    def make() -> tuple:
        items = _cached_in(acts, ("saved", batch, seq, act_bytes, signature),
                           lambda: layer_saved(spec, i, batch, seq, act_bytes=act_bytes, attention="flash",
                                               dropout=False))
        ranks = _cached_in(acts, ("ranks", batch, seq, act_bytes, tp, sp, signature),
                           lambda: [s.per_rank(tp, sp) for s in items])  # the same for every recomputation
        return kept_terms(spec, items, batch * seq, act_bytes, recompute=recompute, tp=tp, sequence_parallel=sp,
                          ranks=ranks)
    return _cached_in(acts, ("terms", common, signature), make)


def _head_acts(spec: ModelSpec, common: ActsKey, head: bool) -> ActivationEstimate:
    """activation_memory over no layer (the final norm, LM head and loss when `head`; `common` as _kind_terms'),
    once per model family, micro-batch, sequence, activation bytes and tp: without layers the recomputation
    changes nothing (no working set, no largest layer); without the head, nothing at all (its estimate: no bytes)."""
    if not head:
        return ActivationEstimate({}, 0.0, 0.0)
    batch, seq, act_bytes, tp, sp = common.batch, common.seq, common.act_bytes, common.tp, common.sp
    return _cached_in(_of(_family(spec), "acts"), ("head", batch, seq, act_bytes, tp, sp),
                      lambda: activation_memory(spec, batch, seq, act_bytes, common.recompute, tp=tp,
                                                sequence_parallel=sp, layers=range(0), head=True))


def _layer_signature(spec: ModelSpec, i: int, seq: int) -> tuple:
    """Every per-layer field activations.layer_saved reads of layer i (mixers and FFN, routed experts, head width,
    K/V heads, K/V sharing, KV compression and its entries at `seq`, dense FFN width, norms): layers of one
    signature save the same tensors, float for float, in a model and in the same model cut or extended to another
    layer count (ModelSpec.with_layers changes nothing else that layer_saved reads)."""
    return (spec.layer_parts(i), spec.is_moe_layer(i), spec.layer_d_head(i), spec.layer_kv_heads(i), spec.kv_shared(i),
            spec.compression(i), spec.compressed_entries(i, seq), spec.layer_d_ff(i),
            spec.norms_in_layer(i) if spec.is_hybrid else 0)
