"""One training memory model: the layout search asks memory.training_memory (pipelines: interleaving, few micro-batches,
uneven stages); and the search's DP collectives against comm's."""

import itertools
import math

import pytest

from llmcalc.analytic import kernels
from llmcalc.analytic.activations import Saved, kept_terms, layer_saved, layer_terms, scaled
from llmcalc.analytic.memory import RECIPES, MemoryTables, in_flight, training_memory
from llmcalc.analytic.parallel import Parallel
from llmcalc.analytic.pipeline_layout import rank_layers
from llmcalc.analytic.step import constants, layout, search
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


CASES = [  # pp, vpp, tp, cp, ep, etp, ZeRO, micro-batch, recomputation, recipe, optimizer
    (1, 1, 1, 1, 1, 0, 1, 1, "none", "bf16-mixed", "adamw"), (2, 1, 2, 1, 1, 0, 3, 2, "selective", "fp8", "muon"),
    (3, 1, 8, 2, 1, 0, 1, 1, "full", "bf16-mixed", "adam8bit"), (4, 2, 2, 1, 8, 1, 1, 2, "none", "mxfp8", "adamw"),
    (4, 1, 1, 1, 8, 0, 3, 1, "full", "fp8-blockwise", "sgd"), (5, 3, 1, 2, 1, 0, 1, 1, "selective", "bf16", "adamw")]


def test_memory_tables_change_no_estimate_on_any_preset():
    """One training memory model: the layout search asks memory.training_memory with a MemoryTables (its per-search
    memo); on every decoder preset (hybrids, MoE models with dense first layers, DeepSeek-V4's compressors, Gemma 4's
    KV-shared layers) over stage counts that do and do not divide the layers, vpp, tp, cp, ep and etp, ZeRO,
    micro-batches, recomputation, recipes and optimizers, one table shared across every call gives each call's
    estimate exactly as a fresh one does."""
    tables = MemoryTables()
    checked = 0
    for name, spec in _decoders():
        for pp, vpp, tp, cp, ep, etp, zero, mb, rc, recipe, optimizer in CASES:
            if spec.n_layers < pp * vpp or ep > 1 and (not spec.is_moe or spec.n_experts % ep):
                continue
            par = Parallel(tp=tp, cp=cp, pp=pp, vpp=vpp, dp=8, ep=ep, etp=etp, sequence_parallel=True, zero=zero)
            settings = dict(recipe=recipe, optimizer=optimizer, recompute=rc, parallel=par)
            try:
                want = training_memory(spec, mb, 2048, **settings)
            except LlmcalcError:  # a layout the model refuses (tp not dividing its heads, ...)
                continue
            got = training_memory(spec, mb, 2048, tables=tables, **settings)
            assert got == want, (name, pp, vpp, tp, cp, ep, zero, mb, rc, recipe)
            checked += 1
    assert checked > 300


def _first(spec, **degrees) -> float:
    """The first pipeline stage's block activations (every micro-batch in flight), bytes per GPU."""
    est = training_memory(spec, 1, 4096, parallel=Parallel(dp=8, zero=1, **degrees))
    assert est.stage == "first"
    return sum(est.activations.per_layer.values())


@pytest.mark.parametrize("pp, vpp", [(4, 2), (8, 4), (16, 2)])
def test_interleaved_first_stage_holds_korthikantis_extra_share(pp, vpp):
    """Interleaved 1F1B's first stage holds 1 + (p - 1) / (p m) times the activations of 1F1B's p micro-batches
    (Korthikanti et al. 2022, sec. 4.2.3, m the model chunks per device; Narayanan et al. 2021, sec. 2.2.2)."""
    spec = load_model("llama-3-8b")
    factor = _first(spec, pp=pp, vpp=vpp) / _first(spec, pp=pp)
    assert factor == pytest.approx(1 + (pp - 1) / (pp * vpp), rel=1e-12)
    assert [in_flight(pp, 1, r) for r in range(pp)] == list(range(pp, 0, -1))  # 1F1B: p - rank in flight


def test_few_micro_batches_leave_fewer_in_flight():
    """With fewer micro-batches per step than pipeline stages the warm-up stops early (Megatron-Core's
    num_warmup_microbatches = min(..., num_microbatches)): one micro-batch per step holds one in flight."""
    spec = load_model("llama-3-8b")
    one = training_memory(spec, 1, 4096, parallel=Parallel(pp=4, dp=8, zero=1), micro_batches=1)
    whole = training_memory(spec, 1, 4096, parallel=Parallel(pp=1, dp=8, zero=1))
    stage = sum(one.activations.per_layer.values()) - one.activations.head_saved
    assert stage == pytest.approx((sum(whole.activations.per_layer.values()) - whole.activations.head_saved) / 4)


def test_an_uneven_pipeline_is_sized_on_its_most_loaded_stage():
    """pp 16 over Llama-3.1-405B's 126 layers: every rank sized as the most loaded, ceil(126 / 16) = 8 layers, the
    memory of the same model at 128 layers split evenly (its layers are all alike)."""
    spec = load_model("llama-3.1-405b")
    par = Parallel(tp=8, pp=16, dp=8, zero=1)
    got = training_memory(spec, 1, 8192, parallel=par)
    want = training_memory(spec.with_layers(128), 1, 8192, parallel=par)
    assert got.peak == want.peak and got.stage == want.stage


def test_stage_layers_load_the_ranks_they_name():
    """--first-stage-layers / --pipeline-layout: the first rank's activations scale with the layers it holds, and a
    middle rank that holds more layer-micro-batches than the first is the one sized."""
    spec = load_model("llama-3-8b")  # 32 layers
    par = Parallel(pp=4, dp=8, zero=1)
    even = training_memory(spec, 1, 4096, parallel=par)
    light = training_memory(spec, 1, 4096, parallel=par, stage_layers=rank_layers(32, 4, first=2, last=2))
    assert rank_layers(32, 4, first=2, last=2) == (2, 14, 14, 2)
    assert light.stage == "rank 1"
    per_layer = (sum(even.activations.per_layer.values())) / (8 * 4)  # 8 layers x 4 in flight
    assert sum(light.activations.per_layer.values()) == pytest.approx(14 * 3 * per_layer)
    assert rank_layers(32, 2, text="Et*3|t*13|t*3|t*13,L") == (6, 26)
    with pytest.raises(LlmcalcError, match="summing to"):
        training_memory(spec, 1, 4096, parallel=par, stage_layers=(1, 2, 3, 4))


@pytest.mark.parametrize("model, n, batch", [("gemma-4-e2b-it", 8, 64), ("deepseek-v4-flash", 256, 512)])
def test_the_search_memory_column_is_memorys(model, n, batch):
    """Every ranked layout's memory is memory.training_memory's of that layout (layout_memory), on the presets the
    search's former copy of the memory model fell short on (up to 7 %: DeepSeek-V4, Gemma 4)."""
    spec = load_model(model)
    ranked, _, _ = search.search_layouts(spec, "h100-sxm", n, 4096, global_batch=batch, top=5)
    assert ranked
    for pred, peak in ranked:
        assert layout.layout_memory(spec, pred.layout, 4096, pred.recompute).peak == peak


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


