"""Issue 24: the layout search's memory check and DP/optimizer pieces against the straightforward path, bit for bit."""

import itertools
import math

import pytest

from llmcalc.analytic import kernels
from llmcalc.analytic.activations import ActivationEstimate, Saved, kept_terms, layer_saved, layer_terms, scaled
from llmcalc.analytic.memory import (
    OPTIMIZERS,
    RECIPES,
    MemoryEstimate,
    _layer_params,
    routed_expert_params,
    zero3_gathered,
)
from llmcalc.analytic.parallel import Parallel
from llmcalc.analytic.params import count_params, largest_tensor, layer_blocks
from llmcalc.analytic.step import cache, constants, layout, search_memory
from llmcalc.analytic.step import dp as step_dp
from llmcalc.spec import load_model, model_names


def _decoders():
    for name in model_names():
        try:
            spec = load_model(name)
            layout.check_modelled(spec)
        except Exception:  # not a model the step model covers
            continue
        if spec.architecture == "decoder":
            yield name, spec


def test_activation_sums_are_the_stage_dicts_sums_on_every_preset():
    """_activation_sums (its plan: each kind's terms once, counted, summed as the dicts add them) is the sum of
    _stage_acts' per_layer values and its other parts, float for float, on every decoder preset (hybrids with
    repeated names, MoE models with dense first layers), each stage shape, recomputation, tp and micro-batch."""
    checked = 0
    for name, spec in _decoders():
        n = spec.n_layers
        for pp in (1, 2, 3, 4):
            per = n // pp
            if per == 0:
                continue
            ranges = [(0, n, 1, True)] if pp == 1 else [(0, per, pp, False), (n - per, n, 1, True),
                                                        (per, 2 * per, 3, True)]
            for (start, stop, in_flight, head), rc, tp, mb, sp in itertools.product(
                    ranges, ("none", "selective", "full"), (1, 2, 8), (1, 2), (True, False)):
                got = search_memory._activation_sums(spec, mb, 2048, 2, rc, tp, sp, start, stop, in_flight, head)
                _, values, _, logits, largest, own, head_saved = search_memory._stage_acts(
                    spec, mb, 2048, 2, rc, tp=tp, sp=sp, start=start, stop=stop, in_flight=in_flight, head=head)
                assert got == (sum(values), logits, head_saved, in_flight, own, largest), (name, start, stop, rc)
                checked += 1
    assert checked > 10_000


def test_activation_sums_with_a_name_twice_in_a_layer():
    """_activation_sums' plans where a layer saves a name twice (no preset does: attention beside Zamba2's shared
    block, whose attention saves the same names), alone, after and before layers that save each name once: the
    stage dicts' sums, float for float."""
    import dataclasses

    spec = load_model("nemotron-h-8b")
    types = list(spec.layer_types)
    for i in (3, 9, 20):
        types[i] = "attention|shared_block+mlp"
    spec = dataclasses.replace(spec, layer_types=tuple(types), shared_adapter_rank=8, shared_blocks=1)
    layout.check_modelled(spec)
    n = spec.n_layers
    for (start, stop, in_flight, head), rc, tp in itertools.product(
            [(0, n, 1, True), (0, n // 2, 2, False), (n // 2, n, 1, True), (2, 6, 3, True), (3, 4, 2, False),
             (1, 12, 4, True)], ("none", "selective", "full"), (1, 2)):
        got = search_memory._activation_sums(spec, 2, 2048, 2, rc, tp, True, start, stop, in_flight, head)
        _, values, _, logits, largest, own, head_saved = search_memory._stage_acts(
            spec, 2, 2048, 2, rc, tp=tp, sp=True, start=start, stop=stop, in_flight=in_flight, head=head)
        assert got == (sum(values), logits, head_saved, in_flight, own, largest), (start, stop, rc, tp)


def test_kept_terms_are_layer_terms_as_first_written():
    """activations.kept_terms (each item's per-rank bytes once) is layer_terms as first written: scaled() twice."""
    for name in ("llama-3-8b", "deepseek-v3", "nemotron-h-8b", "gemma-2-9b", "mixtral-8x7b"):
        spec = load_model(name)
        for layer, rc, tp, sp, attention in itertools.product(range(min(spec.n_layers, 6)),
                                                              ("none", "selective", "full"), (1, 3, 8),
                                                              (True, False), ("flash", "eager")):
            items = layer_saved(spec, layer, 2, 4096, 2, attention=attention, dropout=attention == "eager")
            whole = scaled(items, tp, sp)
            if rc == "full":
                kept = [Saved("block input (full recomputation checkpoint)", 2 * 4096 * spec.d_model * 2,
                              "sequence_parallel")]
            else:
                kept = [s for s in items if rc == "none" or s.scope != "attention_scores"]
            want = [(s.name, s.per_rank(tp, sp)) for s in kept], whole, scaled(kept, tp, sp)
            assert kept_terms(spec, items, 2 * 4096, 2, recompute=rc, tp=tp, sequence_parallel=sp) == want
            assert layer_terms(spec, layer, 2, 4096, 2, recompute=rc, attention=attention,
                               dropout=attention == "eager", tp=tp, sequence_parallel=sp) == want


@pytest.mark.parametrize("model, recipe, optimizer", [
    ("llama-3-8b", "bf16-mixed", "adamw"), ("llama-3-8b", "fp8", "muon"), ("mixtral-8x7b", "mxfp8", "adam8bit"),
    ("deepseek-v3", "fp8-blockwise", "adamw"), ("gemma-2-9b", "fp32", "sgd"), ("nemotron-h-8b", "bf16", "lion"),
])
def test_stage_states_are_the_estimates_state_terms(model, recipe, optimizer):
    """_stage_states (no MemoryEstimate built: memory.state_terms_of) are MemoryEstimate(...).state_terms() of the
    stages training_memory builds, as the search first built them, for every degree set tried."""
    spec = load_model(model)
    rec, opt = RECIPES[recipe], OPTIMIZERS[optimizer]
    comps = count_params(spec).components
    layer0, norms, emb, head, final = _layer_params(spec, comps)
    for tp, cp, pp, dp, ep, etp, zero in itertools.product((1, 2, 8), (1, 2), (1, 4), (1, 16), (1, 8), (0, 1),
                                                           (1, 3)):
        par = Parallel(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, sequence_parallel=True, zero=zero)
        if par.expert_dp < 1 or spec.n_layers % pp:  # not a layout the search checks
            continue
        etp_ = par.expert_tp
        per_stage = spec.n_layers // pp
        routed = routed_expert_params(spec, comps) / spec.n_layers
        own = ep > 1 or etp_ != tp
        layer = layer0 - (routed if own else 0.0)
        experts = per_stage * routed / (etp_ * ep) if own else 0.0
        blocks = per_stage * (layer / tp + norms)
        gathered = (zero3_gathered(layer_blocks(spec), tp, etp_ * ep if own else None, rec.weight_bytes)
                    if zero == 3 and dp > 1 else 0.0)  # training_memory's (tests/test_memory.py: its blocks)
        tied = spec.lm_head and spec.tie_embeddings
        late = (emb - (comps.get("embedding/tokens", 0) if tied else 0)) / tp
        if pp == 1:
            stages = [("only", emb / tp + blocks + final + (head / tp if not spec.tie_embeddings else 0),
                       head / tp + final, late)]
        else:
            stages = [("first", emb / tp + blocks, 0.0, emb / tp),
                      ("last", blocks + final + head / tp, head / tp + final, 0.0)]
        none = ActivationEstimate({}, 0.0, 0.0)
        want = [MemoryEstimate(spec=spec, recipe=rec, optimizer=opt, parallel=par, batch=1, seq_len=1,
                               recompute="none", attention="flash", params_on_gpu=params, activations=none, stage=n,
                               zero3_gathered=gathered, largest_tensor=largest_tensor(spec) / tp,
                               expert_params_on_gpu=experts, head_params_on_gpu=head_p,
                               late_params_on_gpu=late_p).state_terms()
                for n, params, head_p, late_p in stages]
        assert search_memory._stage_states(spec, recipe, optimizer, (tp, cp, pp, dp, ep, etp, zero)) == want


def test_dp_seconds_scale_zero3_counts_by_micro_batches():
    """_dp_seconds keeps ZeRO-3's per-call seconds once whatever the micro-batches: the same (kind, seconds,
    calls) as its collectives built for those micro-batches."""
    net = kernels.device_for("h100-sxm").network
    rec = RECIPES["bf16-mixed"]
    for params, group, zero, stride, members, m, units in itertools.product(
            (3e8, 7.5e9), (8, 64), (1, 3), (1, 8), (1, 8), (1, 3, 16), (0, 17)):
        want = tuple((c.kind, c.seconds(net), c.count) for c in step_dp._dp_colls(
            params, rec, group, zero, stride, members=members, m=m, units=units))
        assert step_dp._dp_seconds(params, rec, group, zero, stride, members=members, m=m, units=units,
                                    net=net) == want


def test_dp_colls_are_the_collectives_init_builds():
    """_dp_colls builds its per-bucket Collectives without __init__ (parallel._built): each is the Collective that
    comm.Collective(...) builds from the same fields (equal, the same fields in the same order, the same seconds)."""
    from llmcalc.analytic import comm
    net = kernels.device_for("h100-sxm").network
    for recipe in ("bf16-mixed", "fp8"):
        rec = RECIPES[recipe]
        for params, group, zero, stride, members, m, units, gather in itertools.product(
                (3e8, 7.5e9), (1, 8, 64), (0, 1, 3), (1, 8), (1, 8), (1, 16), (0, 17), (None, 1.0)):
            got = step_dp._dp_colls(params, rec, group, zero, stride, members=members, m=m, units=units,
                                     gather_bytes=gather)
            weight = min(rec.weight_bytes, 2.0) if gather is None else gather
            calls = units or max(1, math.ceil(params / max(constants.DP_BUCKET_PARAMS, 1e6 * group)))
            want = [comm.Collective(c.name, c.kind, c.group, c.buffer_bytes / calls, c.count * calls, stride=c.stride,
                                    per_node=members)
                    for c in comm.dp_collectives(params, rec.grad_bytes, weight, group, zero=zero, stride=stride,
                                                 micro_batches=m)]
            assert got == want
            assert [list(vars(c).items()) for c in got] == [list(vars(c).items()) for c in want]
            assert [c.seconds(net) for c in got] == [c.seconds(net) for c in want]


def test_resized_at_its_own_layer_count_is_the_model():
    """_resized keeps the model itself at its own layer count: with_layers would build an equal copy (every preset),
    and the copy checks the same memory as the model."""
    for name in model_names():
        try:
            spec = load_model(name)
        except Exception:  # a preset that does not load alone
            continue
        cache.clear_caches()
        assert search_memory._resized(spec, spec.n_layers) is spec
        assert spec.with_layers(spec.n_layers) == spec, name


def test_head_acts_are_activation_memory_without_layers():
    """_head_acts (nothing at all without the head, not computed) is activation_memory over no layer, with and
    without the head."""
    from llmcalc.analytic.activations import activation_memory

    for name in ("llama-3.1-405b", "deepseek-v3", "nemotron-h-8b", "gemma-2-9b"):
        spec = load_model(name)
        for head, rc, tp, sp in itertools.product((True, False), ("none", "full"), (1, 8), (True, False)):
            common = (cache._token(spec), 2, 4096, 2, rc, tp, sp)
            assert search_memory._head_acts(spec, common, head) == activation_memory(
                spec, 2, 4096, 2, rc, tp=tp, sequence_parallel=sp, layers=range(0), head=head)
