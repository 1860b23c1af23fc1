"""The pruned layout search (search.search_layouts) through its public functions: each floor the search takes of a
layout (bounds.layout_floors) is at most the step predict gives it, simulated or bounded, whatever recomputation and
ZeRO stage; the pruned search's best are the exhaustive search's, in order and bit for bit, on dense, MoE, hybrid and
long-sequence models from 8 to 16,384 GPUs; its counts add up with the layouts it bounded; `layout` says what it
evaluated; the caches a search shares give each layout its own figures."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from llmcalc.analytic import comm, kernels, pipeline
from llmcalc.analytic.memory import RECIPES
from llmcalc.analytic.step import attention, bounds, cache, collectives, context, layer, layout, search, stages
from llmcalc.analytic.step.bounds import layout_floors
from llmcalc.analytic.step.prediction import predict
from llmcalc.errors import LlmcalcError
from llmcalc.spec import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_layout import CASES as LAYOUT_CASES  # noqa: E402  (bench_layout.py's five cases)
from clirun import run  # noqa: E402

SMALL = [("llama-3.2-1b", 16, 4096, 64),  # dense: pp, vpp, ZeRO-3, every recomputation
         ("deepseek-v2-lite", 32, 4096, 256),  # MoE: MLA, a dense first layer, ep and folded etp
         ("nemotron-h-8b", 8, 4096, 64),  # hybrid: Mamba-2 and attention layers, one node
         ("llama-3-8b", 32, 16384, 64)]  # cp up to 16 beside tp, pp and vpp


def valid_layouts(spec, n, seq, batch, dev, tp_overlap=False):
    """The search's candidates (layout.layout_candidates) that make a valid layout (make_layout refuses the rest)."""
    for c in layout.layout_candidates(spec, n, seq, batch, dev.network.gpus_per_node):
        try:
            yield layout.make_layout(spec, n, seq, batch, tp=c.tp, cp=c.cp, pp=c.pp, vpp=c.vpp, ep=c.ep,
                                     micro_batch=c.micro_batch, etp=c.etp or None, tp_overlap=tp_overlap)
        except LlmcalcError:
            continue


def _floors_hold(model: str, n: int, seq: int, batch: int, tp_overlap: bool = False) -> int:
    """For every valid candidate of the search and every recomputation and ZeRO stage it could get: the floors the
    search takes in turn never decrease (work <= ranks <= paths <= + optimizer <= the floor of that setting <= + its
    DP), up to their rounding margin, and the last is at most both the step predict gives the layout with the
    pipeline's bound (what the search keeps for a layout it does not simulate) and its simulated step (what `train
    --global-batch` prints). Returns how many settings were checked."""
    spec = load_model(model)
    dev = kernels.device_for("h100-sxm")
    checked = 0
    for lay in valid_layouts(spec, n, seq, batch, dev, tp_overlap):
        first = layout_floors(spec, dev, lay, seq)
        assert first.work * (1 - 2e-9) <= first.ranks <= first.paths <= first.optimizer, (lay, first)
        for rc in ("none", "selective", "full"):
            for zero in (1, 3) if lay.dp > 1 else (1,):
                z = replace(lay, zero=zero)
                try:
                    step = predict(spec, dev, z, seq, recompute=rc).step_seconds
                except LlmcalcError:
                    continue
                bound = predict(spec, dev, z, seq, recompute=rc, simulated=False).step_seconds
                floors = layout_floors(spec, dev, z, seq, recompute=rc)
                what = (z, rc, floors, bound, step)
                assert first.optimizer <= floors.setting <= floors.step <= min(bound, step), what
                assert bound <= step * (1 + 1e-12), what  # path_bounds' sums may round an ulp above the simulator
                checked += 1
    cache.clear_caches()
    return checked


@pytest.mark.parametrize("model, n, seq, batch", SMALL[:3])
def test_floor_is_at_most_every_full_evaluation(model, n, seq, batch):
    assert _floors_hold(model, n, seq, batch) > 100


def test_floor_holds_with_tp_overlap():
    """--tp-overlap's layouts (the SMs it holds, split GEMMs, the exposed chunks: collectives.add_tp_comm) keep every
    floor the search takes at most their step."""
    assert _floors_hold("llama-3.2-1b", 16, 4096, 64, tp_overlap=True) > 100


@pytest.mark.slow
@pytest.mark.parametrize("model, n, seq, batch", SMALL[3:] + LAYOUT_CASES[:1] + LAYOUT_CASES[3:4])
def test_floor_is_at_most_every_full_evaluation_on_larger_searches(model, n, seq, batch):
    assert _floors_hold(model, n, seq, batch) > 100


def _same_top(model: str, n: int, seq: int, batch: int, top: int = 10, **step) -> None:
    spec = load_model(model)
    pruned, _, counts = search.search_layouts(spec, "h100-sxm", n, seq, global_batch=batch, top=top, **step)
    cache.clear_caches()
    whole, _, all_counts = search.search_layouts(spec, "h100-sxm", n, seq, global_batch=batch, top=top,
                                                   exhaustive=True, **step)
    cache.clear_caches()
    assert pruned[:top] == whole[:top]  # the predictions (steps, breakdowns, assumptions) and peaks, in order
    assert counts["fit"] + counts["oom"] + counts["invalid"] + counts["bounded"] == counts["searched"]
    assert len(pruned) == counts["fit"] and counts["bounded"] > 0
    assert all_counts["bounded"] == 0 and len(whole) == all_counts["fit"]
    # the HSDP shard groups are layouts of the FSDP layouts evaluated (search._hsdp_shards): the rest are the same
    assert all_counts["searched"] - all_counts["hsdp"] == counts["searched"] - counts["hsdp"]
    assert all_counts["invalid"] == counts["invalid"] and counts["hsdp"] <= all_counts["hsdp"]
    assert counts["fit"] <= all_counts["fit"] and counts["oom"] <= all_counts["oom"]
    # what was not bounded is what the exhaustive search has, with the same memory; layouts it did not simulate
    # keep their bound
    both = {(p.layout, p.recompute): peak for p, peak in whole}
    assert all(both[p.layout, p.recompute] == peak for p, peak in pruned)


@pytest.mark.parametrize("model, n, seq, batch, top, step", [
    ("llama-3.2-1b", 16, 4096, 64, 10, {}),
    ("deepseek-v2-lite", 32, 4096, 256, 10, {}),
    ("llama-3-8b", 32, 16384, 64, 25, {}),  # cp and vpp layouts among the best; a longer list
    ("mixtral-8x7b", 64, 4096, 256, 10, {"ep_overlap": True}),  # MoE, ZeRO-3 among the best
    ("llama-3.2-1b", 16, 4096, 64, 10, {"order": "dp-tp-cp-ep-pp"}),  # TP groups across nodes: strides read pp
    ("deepseek-v2-lite", 32, 4096, 256, 10, {"order": "tp-dp-cp-ep-pp"}),  # cp and ep outside dp
    ("nemotron-h-8b", 8, 4096, 64, 10, {}),  # hybrid (Mamba-2 and attention) on one node
    ("llama-3-8b", 64, 131072, 64, 10, {}),  # a long sequence: cp up to 16, most layouts out of memory
    ("qwen3-30b-a3b", 2048, 4096, 4096, 10, {}),  # MoE on 2,048 GPUs
    ("deepseek-v3", 2048, 4096, 4096, 10, {}),  # MLA, MTP and 256 experts on 2,048 GPUs (bench_layout's case)
    ("llama-3.1-405b", 16384, 8192, 2048, 10, {}),  # dense on 16,384 GPUs (bench_layout's case)
    ("llama-3-8b", 256, 4096, 256, 10, {"network": "100G-x1-fat-tree", "pins": {"zero": 3}}),  # FSDP: HSDP best
    ("llama-3.2-1b", 16, 4096, 64, 10, {"tp_overlap": None}),  # --tp-overlap searched: on and off where tp > 1
    ("llama-3-70b", 64, 8192, 512, 10, {"tp_overlap": None}),  # ... and chosen by the best
])
def test_pruned_search_has_the_exhaustive_searchs_best(model, n, seq, batch, top, step):
    _same_top(model, n, seq, batch, top, **step)


@pytest.mark.slow
@pytest.mark.parametrize("model, n, seq, batch", LAYOUT_CASES)
def test_pruned_search_has_the_exhaustive_searchs_best_on_the_benchmark_cases(model, n, seq, batch):
    _same_top(model, n, seq, batch)


def test_layout_says_what_it_evaluated():
    """The text names the bounded layouts and the losers' scope; --exhaustive prints today's counts line (no
    bounded) over every layout; the JSON's counts keep their keys and add `bounded`."""
    base = ("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 64, "--seq-len", 8192, "--global-batch", 512,
            "--no-tp-overlap")
    pruned, whole = run(*base), run(*base, "--exhaustive")
    assert pruned.exit_code == 0 and whole.exit_code == 0
    assert "bounded (not evaluated" in pruned.stdout and "layouts evaluated:" in pruned.stdout
    data = json.loads(run(*base, "--format", "json").stdout)
    counts = data["counts"]
    n = counts["searched"]  # 435 candidates and the uneven pipeline splits tried beside those with pp > 1
    assert n > 435 and f"searched {n:,} layouts: {n:,} fit, 0 do not fit in memory, 0 contradict" in whole.stdout
    assert "bounded" not in whole.stdout and f"(top 10 of {n:,} that fit)" in whole.stdout
    assert set(counts) == {"searched", "fit", "oom", "invalid", "bounded", "hsdp"}
    assert counts["fit"] + counts["oom"] + counts["invalid"] + counts["bounded"] == n
    full = json.loads(run(*base, "--exhaustive", "--format", "json").stdout)
    assert full["layouts"] == data["layouts"] and full["counts"]["bounded"] == 0


def test_nothing_to_compare_is_said_in_one_line_not_an_empty_table():
    """3 GPUs and a global batch of 7 sequences leave llama-3-8b one layout (pp 3: 7 is prime, tp and cp need
    head and sequence divisors that 3 does not give here; its stage split given, so no uneven one is tried): no
    losers' table with a header and no rows, a note."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from clirun import cli_json, run

    args = ("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", "3", "--global-batch", "7",
            "--first-stage-layers", "11", "--last-stage-layers", "10")
    data = cli_json(*args)
    assert data["counts"]["fit"] == 1 and data["losers"] == []
    text = run(*args).stdout
    assert "why the others lose: no other layout fits" in text
    assert "\nwhy the others lose\n" not in text and "searched 1 layout:" in text


def test_layout_defaults_are_the_step_defaults():
    """make_layout passes Layout only the step settings given (the rest are Layout's defaults, which must be
    STEP_DEFAULTS'): all of them given gives the same layout as none."""
    spec = load_model("deepseek-v2-lite")
    shape = dict(tp=2, pp=2, vpp=2, ep=4, micro_batch=1)
    given = layout.make_layout(spec, 32, 4096, 256, **shape, **layout.STEP_DEFAULTS)
    assert layout.make_layout(spec, 32, 4096, 256, **shape) == given
    assert {k: getattr(given, k) for k in layout.STEP_DEFAULTS} == layout.STEP_DEFAULTS


@pytest.mark.parametrize("model, n, seq, batch", [("deepseek-v2-lite", 32, 4096, 256), ("llama-3-8b", 32, 16384, 64),
                                              ("nemotron-h-8b", 8, 4096, 64)])
def test_shared_layer_costs_are_each_layouts_own(model, n, seq, batch):
    """The memo tables a search shares between layouts (a layer's cost per LayerKey, a stage's per StageKey, the
    floors per layer fields): after a whole search has filled them, in the same call, every candidate's layer
    costs, stage passes and work floor are those of a context computed afresh, float for float."""
    cache.per_call(_shared_layer_costs_are_each_layouts_own)(model, n, seq, batch)


def _shared_layer_costs_are_each_layouts_own(model, n, seq, batch):
    spec = load_model(model)
    dev = kernels.device_for("h100-sxm")
    rec = RECIPES["bf16-mixed"]
    search.search_layouts(spec, "h100-sxm", n, seq, global_batch=batch, exhaustive=True)
    checked = 0
    for lay in valid_layouts(spec, n, seq, batch, dev):
        shared = context._context(spec, dev, lay, seq, rec)
        # its own tables (another recipe object: StepInputs)
        own = context.StepContext(spec, dev, lay, seq, replace(rec))
        for rc in ("none", "selective", "full"):
            plan = stages.stage_plan(spec, lay.pp * pipeline.chunks_per_rank(lay.schedule, lay.vpp), lay, rc)
            for composition in plan.compositions:
                for i, layer_rc, _ in composition.runs:
                    assert layer._layer_cost(shared, i, layer_rc) == layer._layer_cost_uncached(own, i, layer_rc)
                assert bounds._composition_passes(shared, composition, rc) == \
                    bounds._composition_passes(own, composition, rc)
                for schedule in (lay.schedule, "zb-h1"):  # stage_passes' sums, each schedule's
                    fwd, bwd, wgt = stages.stage_passes([stages.stage_times(own, composition, rc)], [0], schedule)
                    assert bounds._composition_passes(replace(own, lay=replace(lay, schedule=schedule)),
                                                        composition, rc) == (fwd[0] + bwd[0], wgt[0] if wgt else None)
        assert bounds._work_floor(shared) == bounds._work_floor(own)
        if lay.pp > 1:  # comm's own figure
            assert collectives.p2p_seconds(shared) == comm.total_seconds(comm.pp_collectives(
                own.tokens, spec.d_model, own.act, lay.tp, sequence_parallel=lay.sequence_parallel,
                stride=lay.strides()["pp"]), dev.network)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("gpu, recipe", [("h100-sxm", "bf16-mixed"), ("a100-80gb-sxm", "bf16-mixed"),
                                         ("h100-sxm", "fp8")])
def test_context_gemm_is_gemm_seconds(gpu, recipe):
    """StepContext.gemm keys its shapes in the table of its per-batch GemmInputs: each of its three GEMMs is
    kernels.gemm_seconds of its own shape, float for float, whatever shapes and batches came before (1 and 1.0
    alike)."""
    from llmcalc.analytic import kernels

    spec = load_model("llama-3-8b")
    dev = kernels.device_for(gpu)
    rec = RECIPES[recipe]
    lay = layout.make_layout(spec, 8, 4096, 64, tp=2)
    cache.clear_caches()
    ctx = context.StepContext(spec, dev, lay, 4096, rec)
    shapes = ((4096, 4096, 6144.0, 1), (4096.0, 4096, 6144, 1.0), (512, 1024, 2048, 8), (4096, 4096, 6144.0, 1.0))
    for m, k, n, batch in shapes:
        fwd, dgrad, wgrad = (kernels.gemm_seconds(*shape, dev=dev, in_bytes=ctx.gemm_bytes, batch=batch,
                                                  rate=ctx.gemm_rate, out_bytes=ctx.act, efficiency=ctx.eff)
                             for shape in ((m, k, n), (m, n, k), (k, m, n)))
        if rec.fp8:
            q = kernels.QUANT_BYTES[rec.fp8]
            fwd += kernels.stream_seconds(batch * m * k * q, dev, ctx.eff)
            dgrad = dgrad * kernels.QUANT_DGRAD_SLOWDOWN + kernels.stream_seconds(batch * m * n * q, dev, ctx.eff)
        assert ctx.gemm(m, k, n, batch) == (fwd, dgrad, wgrad)
        again = context.StepContext(spec, dev, lay, 4096, rec)  # a new context
        assert again.gemm(m, k, n, batch) == (fwd, dgrad, wgrad)
    cache.clear_caches()


def test_layouts_built_without_init_are_the_constructors():
    """Parallel.over builds its instance field by field without the dataclass __init__ (parallel._build): the same
    fields in the same order as the constructor's, equal, with the same hash, and refusing an unknown field."""
    from llmcalc.analytic.parallel import Parallel

    for cls, degrees in ((Parallel, dict(tp=2, pp=4, zero=3)),
                         (layout.Layout, dict(tp=8, cp=2, pp=16, vpp=4, ep=4, micro_batch=2, global_batch=2048,
                                                schedule="interleaved", cp_comm="a2a", recompute_modules=("mlp",)))):
        built = cls.over(2048, **degrees)
        made = cls(dp=2048 // (degrees["tp"] * degrees.get("cp", 1) * degrees["pp"]), **degrees)
        assert type(built) is cls and list(vars(built).items()) == list(vars(made).items())
        assert built == made and hash(built) == hash(made) and replace(built, zero=1) == replace(made, zero=1)
        with pytest.raises(TypeError):
            cls.over(64, tp=2, bogus=1)
    # make_layout builds its Layout from a template of the fields: Layout.over's
    spec = load_model("deepseek-v3")
    step = dict(cp_comm="a2a", recompute_modules="mlp, moe_act", optimizer="muon")
    made = layout.make_layout(spec, 2048, 4096, 4096, tp=4, cp=2, pp=8, vpp=2, ep=8, etp=1, micro_batch=2,
                                zero=3, dp_overlap=False, tp_overlap=True, **step)
    built = layout.Layout.over(2048, tp=4, cp=2, pp=8, vpp=2, ep=8, etp=1, micro_batch=2, zero=3, dp_overlap=False,
                                 tp_overlap=True, global_batch=4096, schedule="interleaved", sequence_parallel=True,
                                 **{**step, "recompute_modules": ("mlp", "moe_act")})
    assert list(vars(made).items()) == list(vars(built).items())
    for bad in (dict(vpp=True), dict(tp=0), dict(pp=3), dict(ep=5), dict(etp=0), dict(micro_batch=2.0)):
        with pytest.raises(LlmcalcError):
            layout.make_layout(spec, 2048, 4096, 4096, **{"tp": 4, **bad})


@pytest.mark.parametrize("model, n, seq, batch", SMALL + [("deepseek-v3", 2048, 4096, 4096),
                                                      ("llama-3.1-405b", 16384, 8192, 2048)])
def test_the_searchs_layouts_are_make_layouts(model, n, seq, batch):
    """search_layouts builds its candidates without the checks their degrees already pass: the layouts it ranks are
    make_layout's of the same degrees (the same fields in the same order, but the ZeRO stage that fit and the expert
    dispatcher and EP overlap the search tries for an MoE model's all-to-alls; its uneven pipeline splits are
    make_layout's with those --first/--last-stage-layers), and the candidates it counts invalid are those make_layout
    refuses, with the search's step settings or without."""
    spec = load_model(model)
    dev = kernels.device_for("h100-sxm")
    for step in ({}, {"cp_comm": "a2a"}):
        made, refused = {}, 0
        for c in layout.layout_candidates(spec, n, seq, batch, dev.network.gpus_per_node):
            try:
                lay = layout.make_layout(spec, n, seq, batch, tp=c.tp, cp=c.cp, pp=c.pp, vpp=c.vpp, ep=c.ep,
                                         micro_batch=c.micro_batch, etp=c.etp or None, **step)
            except LlmcalcError:
                refused += 1
                continue
            made[lay.tp, lay.cp, lay.pp, lay.vpp, lay.micro_batch, lay.ep, lay.etp] = lay
        ranked, _, counts = search.search_layouts(spec, "h100-sxm", n, seq, global_batch=batch, exhaustive=True,
                                                  **step)
        assert counts["invalid"] == refused and counts["fit"] + counts["oom"] == counts["searched"] - refused
        for pred, _ in ranked:
            got = pred.layout
            want = made[got.tp, got.cp, got.pp, got.vpp, got.micro_batch, got.ep, got.etp]
            if got.first_stage_layers or got.last_stage_layers:  # an uneven split: make_layout takes it
                want = layout.make_layout(spec, n, seq, batch, tp=got.tp, cp=got.cp, pp=got.pp, vpp=got.vpp,
                                          ep=got.ep, micro_batch=got.micro_batch, etp=want.etp or None,
                                          first_stage_layers=got.first_stage_layers,
                                          last_stage_layers=got.last_stage_layers, **step)
            tried = replace(want, zero=got.zero, ep_dispatcher=got.ep_dispatcher, ep_overlap=got.ep_overlap,
                            dp_shard=got.dp_shard)
            assert list(vars(got).items()) == list(vars(tried).items())
            assert got.dp_shard == 0 or got.zero == 3 and got.dp % got.dp_shard == 0  # HSDP of FSDP layouts
            assert (got.ep_dispatcher, got.ep_overlap) == ("alltoall", False) or spec.is_moe and got.alltoall
    cache.clear_caches()


def test_attention_rates_cached_per_shape_give_attention_seconds():
    """attention._attention_seconds memoizes the kernel's rate per AttentionShape (not per FLOPs): the seconds are
    kernels.attention_seconds', float for float, whatever FLOPs share a memoized rate."""
    from llmcalc.analytic.kernels import attention_seconds
    from llmcalc.analytic.step.context import StepContext
    from llmcalc.analytic.step.layout import Layout

    spec = load_model("llama-3-8b")
    for gpu in ("h100-sxm", "b200"):
        dev = kernels.device_for(gpu)
        ctx = StepContext(spec, dev, Layout(dp=1, global_batch=1), 4096, RECIPES["bf16-mixed"], eff=0.73)
        for kernel in ("auto", "cudnn", "fa2"):
            for head_dim, seq in ((64, 512), (128, 4096), (192, 8192), (100, 3000)):
                for causal, backward, fp8, windowed in ((True, False, False, False), (True, True, False, True),
                                                        (False, True, True, False), (False, False, True, True)):
                    shape = attention.AttentionShape(kernel, head_dim, seq, causal, backward, fp8, windowed)
                    for flops in (0.0, 3e9, 7.123e12, 1e15):
                        assert attention._attention_seconds(ctx, flops, shape) == attention_seconds(
                            dev, kernel, flops, head_dim=head_dim, seq=seq, causal=causal, backward=backward,
                            fp8=fp8, efficiency=0.73, windowed=windowed)