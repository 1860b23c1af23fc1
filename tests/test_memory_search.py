"""The layout search's memory check against memory.training_memory, and its DP collectives against comm's."""

import itertools
import math

import pytest

from llmcalc.analytic import kernels
from llmcalc.analytic.activations import Saved, kept_terms, layer_saved, layer_terms, scaled
from llmcalc.analytic.memory import (
    RECIPES,
    training_memory,
)
from llmcalc.analytic.parallel import Parallel
from llmcalc.analytic.step import constants, layout, search_memory
from llmcalc.analytic.step import dp as step_dp
from llmcalc.errors import LlmcalcError
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


def _peaks_agree(spec, cases) -> int:
    """search_memory.training_peak against memory.training_memory(...).peak (flash attention, no dropout), each
    layout of `cases` a (pp, tp, cp, ep, etp, zero, micro-batch, recompute, recipe, optimizer); returns how many."""
    checked = 0
    for pp, tp, cp, ep, etp, zero, mb, rc, recipe, optimizer in cases:
        if spec.n_layers < pp or ep > 1 and (not spec.is_moe or spec.n_experts % ep):
            continue
        even = spec.with_layers(math.ceil(spec.n_layers / pp) * pp)
        par = Parallel(tp=tp, cp=cp, pp=pp, dp=8, ep=ep, etp=etp, sequence_parallel=True, zero=zero)
        try:
            want = training_memory(even, mb, 2048, recipe=recipe, optimizer=optimizer, recompute=rc,
                                   attention="flash", parallel=par).peak
        except LlmcalcError:  # a layout the model refuses (tp not dividing its heads, ...)
            continue
        got = search_memory.training_peak(even, mb, 2048, recipe, optimizer, recompute=rc, parallel=par)
        assert got == pytest.approx(want, rel=1e-12), (spec.name, pp, tp, cp, ep, etp, zero, mb, rc, recipe)
        checked += 1
    return checked


CASES = [(1, 1, 1, 1, 0, 1, 1, "none", "bf16-mixed", "adamw"), (2, 2, 1, 1, 0, 3, 2, "selective", "fp8", "muon"),
         (3, 8, 2, 1, 0, 1, 1, "full", "bf16-mixed", "adam8bit"), (4, 2, 1, 8, 1, 1, 2, "none", "mxfp8", "adamw"),
         (4, 1, 1, 8, 0, 3, 1, "full", "fp8-blockwise", "sgd")]


# The search's own copy of the training memory model (issue 37 asks for one model) misses part of these presets'
# memory (up to 7 % of the peak: DeepSeek-V4's compressor state and window, Gemma 4's per-layer inputs and
# KV-shared layers); held below as a known divergence until the search asks memory.py itself.
DIVERGENT = ("deepseek-v4-flash", "deepseek-v4-pro", "gemma-4-26b-a4b-it", "gemma-4-31b-it", "gemma-4-e2b-it")


def test_search_memory_is_training_memory_on_every_preset():
    """The layout search's memory check (each layer kind's activations and the parameter states once per degrees,
    summed by count) is memory.training_memory's peak on every decoder preset (hybrids with repeated names, MoE
    models with dense first layers) over stage counts, tp, cp, ep and etp, ZeRO, micro-batches, recomputation,
    recipes and optimizers, in any order of calls (the caches warm with other presets first)."""
    checked = 0
    for name, spec in _decoders():
        if name not in DIVERGENT:
            checked += _peaks_agree(spec, CASES)
    assert checked > 250


@pytest.mark.xfail(strict=True, reason="the search's copy of the memory model misses part of these presets' memory")
@pytest.mark.parametrize("model", DIVERGENT)
def test_search_memory_of_the_divergent_presets(model):
    _peaks_agree(load_model(model), CASES)


def test_search_memory_with_a_name_twice_in_a_layer():
    """A layer that saves a name twice (no preset does: attention beside Zamba2's shared block, whose attention saves
    the same names), alone, after and before layers that save each name once: training_memory's peak."""
    import dataclasses

    spec = load_model("nemotron-h-8b")
    types = list(spec.layer_types)
    for i in (3, 9, 20):
        types[i] = "attention|shared_block+mlp"
    spec = dataclasses.replace(spec, layer_types=tuple(types), shared_adapter_rank=8, shared_blocks=1)
    layout.check_modelled(spec)
    assert _peaks_agree(spec, CASES) >= 3


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


