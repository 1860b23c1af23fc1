"""One way to cache (issue 37): every memo of the step model is keyed by what the function it memoizes reads.

For each field of the model, device, recipe and layout (and the prediction's own arguments), a prediction made
after another one in the same process (the caches warm with the base's entries) is the same prediction made from
cold caches: no field outside a key changes a cached result. The holes issue 37 names fail it when the fields
reach the physics without reaching the keys: the TP group's stride (the rank order, `order` below) and the FP8
scaling mode (the recipes fp8 / fp8-current, which share the GEMM dtype and rate but not the quantization bytes)."""

import dataclasses
import functools
from dataclasses import replace

import pytest

from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.memory import RECIPES
from llmcalc.analytic.step.cache import clear_caches, current, per_call
from llmcalc.analytic.step.constants import KERNEL_EFFICIENCY
from llmcalc.analytic.step.context import StepContext, gemm_table, layer_kind, linear_seconds
from llmcalc.analytic.step.dp import _rank_holdings, one_rank_dp, rank_dp_key
from llmcalc.analytic.step.layer import _layer_cost, _layer_cost_uncached, layer_key
from llmcalc.analytic.step.layout import make_layout
from llmcalc.analytic.step.prediction import predict
from llmcalc.analytic.step.search import search_layouts
from llmcalc.analytic.step.stages import stage_key, stage_plan, stage_times
from llmcalc.errors import LlmcalcError
from llmcalc.spec import load_model

MODEL, N, SEQ, BATCH = "deepseek-v2-lite", 32, 4096, 64  # MoE with MLA and a dense first layer
BASE_LAYOUT = {"tp": 2, "pp": 2, "ep": 4}
BASE = {"gpu": "h100-sxm", "recipe": "bf16-mixed", "recompute": "none", "seq": SEQ, "causal": True,
        "attention": "flash", "dropout": False, "model": MODEL, "gpus_per_node": None, "network": None}

LAYOUT_VARIATIONS = [  # every field of Layout, each changed alone (a few need a companion to be valid)
    {"tp": 4}, {"tp": 1}, {"cp": 2}, {"pp": 1}, {"pp": 4}, {"vpp": 3}, {"ep": 8}, {"ep": 2}, {"etp": 1},
    {"zero": 0}, {"zero": 3}, {"sequence_parallel": False}, {"micro_batch": 2}, {"schedule": "interleaved"},
    {"schedule": "zb-v"}, {"dp_overlap": False}, {"tp_overlap": True}, {"ep_overlap": True},
    {"schedule": "zb-v", "ep_overlap": True},
    {"order": "dp-tp-cp-ep-pp"}, {"order": "tp-cp-ep-pp-dp"}, {"order": "tp-dp-cp-ep-pp"},
    {"cp": 2, "cp_comm": "all-gather"}, {"cp": 2, "cp_comm": "a2a"},
    {"cp": 4, "cp_comm": "a2a+p2p", "cp_a2a_size": 2},
    {"recompute_layers": 2, "recompute": "full"},
    {"recompute_modules": ("mla_up_proj", "moe"), "recompute": "selective"},
    {"mtp_layers": 1}, {"first_stage_layers": 12}, {"last_stage_layers": 12},
    {"fp8_param_gather": True, "zero": 1, "recipe": "fp8"}, {"dp_shard": 4}, {"dp_shard": 2, "zero": 3},
    {"attention_kernel": "fa2"}, {"fp8_attention": True, "recipe": "fp8"}, {"moe_imbalance": 1.3},
    {"ep_dispatcher": "deepep"}, {"ep_dispatcher": "allgather"}, {"fused_elementwise": False}, {"optimizer": "muon"},
]
OTHER_VARIATIONS = [  # the device, the recipe, the model and the prediction's arguments
    {"gpu": "h200"}, {"gpu": "b200"}, {"gpu": "a100-80gb-sxm"}, {"gpu": "mi300x"}, {"gpus_per_node": 4},
    {"network": "jean-zay-a100"}, {"network": "nic=400G,nics=4,topology=fat-tree,oversub=4,leaf=4,latency-us=20"},
    {"recipe": "fp8"}, {"recipe": "fp8-current"}, {"recipe": "fp8-blockwise"}, {"recipe": "mxfp8", "gpu": "b200"},
    {"recipe": "nvfp4", "gpu": "b200"}, {"recipe": "fp16-mixed"}, {"recipe": "fp8-torchao"},
    {"recompute": "full"}, {"recompute": "selective"}, {"seq": 8192}, {"causal": False},
    {"attention": "eager"}, {"attention": "eager", "dropout": True},
    {"model": "qwen3-30b-a3b"}, {"model": "deepseek-v2-lite-wider"},
]


@functools.cache  # one object per model and device: the caches' keys hold them by identity, as a search's do
def _model(name: str):
    if name == "deepseek-v2-lite-wider":  # the same name, another expert width: an equal-looking spec must not hit
        spec = load_model(MODEL)
        return dataclasses.replace(spec, d_ff_expert=spec.d_ff_expert * 2)
    return load_model(name)


@functools.cache
def _device(gpu: str, gpus_per_node: int | None, network: str | None):
    return device_for(gpu, gpus_per_node=gpus_per_node, network=network)


def _predict(change: dict):
    args = {**BASE, **{k: v for k, v in change.items() if k in BASE}}
    lay = {**BASE_LAYOUT, **{k: v for k, v in change.items() if k not in BASE}}
    spec = _model(args["model"])
    layout = make_layout(spec, N, args["seq"], BATCH, **lay)
    dev = _device(args["gpu"], args["gpus_per_node"], args["network"])
    return predict(spec, dev, layout, args["seq"], causal=args["causal"], recompute=args["recompute"],
                   recipe=args["recipe"], attention=args["attention"], dropout=args["dropout"])


@per_call
def _after(first: dict, then: dict):
    """The prediction of `then` made after that of `first` in one call's tables (the second finds the first's
    entries: what a search's layouts share)."""
    _predict(first)
    return _predict(then)


@pytest.mark.parametrize("change", LAYOUT_VARIATIONS + OTHER_VARIATIONS, ids=str)
def test_a_warm_prediction_is_the_cold_one(change):
    """predict's memos (a layer's cost, a stage's, a rank's DP and optimizer, the GEMM and attention rates, the
    stage plans, the FLOPs) give after the base prediction, in the same tables, what they give from nothing."""
    clear_caches()
    try:
        cold = _predict(change)
    except LlmcalcError as exc:
        pytest.fail(f"not a valid variation: {exc}")
    warm = _after({}, change)
    assert warm == cold
    assert warm != _predict({})  # the field matters to the prediction (else this variation tests no key)


@pytest.mark.parametrize("first, then", [({"recipe": "fp8"}, {"recipe": "fp8-current"}),
                                         ({"order": "cp-tp-ep-dp-pp"}, {"order": "cp-dp-tp-ep-pp"})])
def test_the_holes_issue_37_names_stay_closed(first, then):
    """The FP8 scaling mode and the TP group's stride, each after the other in one call's tables (the two orders
    place cp alike: only where the TP group sits, in one node or across two, tells the dense layers' costs apart)."""
    cold = _predict(then)
    assert _after(first, then) == cold != _predict(first)


def test_predictions_share_nothing_across_calls():
    """Each predict call opens its own tables and drops them: a second call finds none of the first's entries."""
    seen = []
    per_call(lambda: seen.append(current()))()
    per_call(lambda: seen.append(current()))()
    assert seen[0] is not seen[1] and current() is not current()  # and after them, no call's tables stand


def test_a_search_after_another_is_the_search_alone():
    """The layout search's per-search tables and the process's caches: a search with other settings first changes
    nothing of the next one."""
    spec = load_model("llama-3.2-1b")

    def search(**step):
        return search_layouts(spec, "h100-sxm", 16, 4096, global_batch=64, top=5, **step)[0]
    clear_caches()
    cold = search(order="dp-tp-cp-ep-pp", recipe="fp8-current")
    clear_caches()
    search(recipe="fp8")
    assert search(order="dp-tp-cp-ep-pp", recipe="fp8-current") == cold


# --- one test per memo point: every field of the model, device, recipe and layout varied, and no field outside the
# point's key changes what it memoizes (its function computed afresh on either side, compared where the keys agree)

def _context(change: dict):
    """The base context with `change` applied (a fresh one: outside a call nothing is shared), and its layout."""
    args = {**BASE, **{k: v for k, v in change.items() if k in BASE}}
    lay = make_layout(_model(args["model"]), N, args["seq"], BATCH,
                      **{**BASE_LAYOUT, **{k: v for k, v in change.items() if k not in BASE}})
    rec = RECIPES[args["recipe"]]
    dev = _device(args["gpu"], args["gpus_per_node"], args["network"])
    return StepContext(_model(args["model"]), dev, lay, args["seq"], rec, attention=args["attention"],
                       dropout=args["dropout"], eff=KERNEL_EFFICIENCY), args["recompute"]


# each variation against the base, and the holes issue 37 names: fp8 then fp8-current (the recipes share the GEMM
# dtype and rate, not the quantization bytes), two orders that place cp alike and TP in one node or across two; and
# two selective recomputations that differ in their modules alone (what an MTP layer re-runs); the EP overlap under
# 1F1B and under zb-v (DualPipeV's: it hides all of the all-to-alls)
VARIATIONS = [pytest.param({}, change, id=str(change)) for change in LAYOUT_VARIATIONS + OTHER_VARIATIONS] + [
    pytest.param(first, then, id=f"{first} then {then}")
    for first, then in (({"recipe": "fp8"}, {"recipe": "fp8-current"}),
                        ({"order": "cp-tp-ep-dp-pp"}, {"order": "cp-dp-tp-ep-pp"}),
                        ({"recompute": "selective"}, {"recompute": "selective", "recompute_modules": ("moe",)}),
                        ({"ep_overlap": True}, {"ep_overlap": True, "schedule": "zb-v"}))]
RECOMPUTES = [frozenset(), frozenset({"block"}), frozenset({"core_attn"}), frozenset({"mla_up_proj", "moe"})]


def _keyed_alike(base_ctx, ctx, base_key, key) -> bool:
    return base_ctx.inputs == ctx.inputs and base_key == key


@pytest.mark.parametrize("first, change", VARIATIONS)
def test_a_layer_cost_reads_only_its_key(first, change):
    """layer.LayerKey (with the StepInputs it is kept under): where a variation leaves it as it is, every layer of
    every kind costs what it costs in the base, for each recomputation."""
    base, _ = _context(first)
    ctx, _ = _context(change)
    alike = 0
    for i in (0, 1, base.spec.n_layers - 1):  # the dense first layer, MoE layers
        for rec in RECOMPUTES:
            if _keyed_alike(base, ctx, layer_key(base, i, rec), layer_key(ctx, i, rec)):
                alike += 1
                assert _layer_cost_uncached(ctx, i, rec) == _layer_cost_uncached(base, i, rec)
    if not first and change in ({"zero": 0}, {"dp_overlap": False}, {"pp": 4}, {"optimizer": "muon"}):
        assert alike  # fields a layer does not read leave the key as it is


@pytest.mark.parametrize("first, change", VARIATIONS)
def test_a_layer_cost_after_the_base_is_its_own(first, change):
    """The layer memo's shared part, the terms before the MoE block kept per the LayerKey without its expert mesh
    (the expert meshes, dispatchers and EP overlaps a search tries share it): in one call's tables, each layer's
    memoized cost after the base's is its cost computed afresh, for each recomputation."""
    per_call(_layers_after_the_base)(first, change)


def _layers_after_the_base(first: dict, change: dict) -> None:
    base, _ = _context(first)
    ctx, _ = _context(change)
    for i in (0, 1, base.spec.n_layers - 1):
        for rec in RECOMPUTES:
            if i < ctx.spec.n_layers:
                _layer_cost(base, i, rec)
                assert _layer_cost(ctx, i, rec) == _layer_cost_uncached(ctx, i, rec)


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "gpt-oss-20b", "gemma-3-27b", "deepseek-v3.2",
                                   "deepseek-v4-flash", "gemma-4-e2b-it", "nemotron-h-8b", "kimi-linear-48b-a3b",
                                   "llama-4-scout"])
def test_layers_of_one_kind_cost_the_same(model):
    """The layer key holds the layer's kind, not its index: every layer of a kind costs what its first one does."""
    spec = _model(model)
    lay = make_layout(spec, 8, SEQ, 8, tp=1)
    ctx = StepContext(spec, _device("h100-sxm", None, None), lay, SEQ, RECIPES["bf16-mixed"], eff=KERNEL_EFFICIENCY)
    first: dict = {}
    for i in range(spec.n_layers):
        cost = _layer_cost_uncached(ctx, i, frozenset())
        assert first.setdefault(layer_kind(spec, i), cost) == cost, f"layer {i}"


@pytest.mark.parametrize("first, change", VARIATIONS)
def test_a_stage_cost_reads_only_its_key(first, change):
    """stages.StageKey: where a variation leaves it as it is, each stage of the base plan costs what it costs in the
    base (its layers, the embedding, the LM head, its MTP layers)."""
    base, recompute = _context(first)
    ctx, recompute_var = _context(change)
    plan = stage_plan(base.spec, base.lay.pp * base.lay.vpp, base.lay, recompute)
    for composition in plan.compositions:
        for mtp in (0, 1):
            composition = replace(composition, mtp=mtp)
            key = stage_key(ctx, composition, recompute_var)
            if _keyed_alike(base, ctx, stage_key(base, composition, recompute), key):
                assert stage_times(ctx, composition, recompute_var) == stage_times(base, composition, recompute)


@pytest.mark.parametrize("first, change", VARIATIONS)
def test_a_rank_dp_cost_reads_only_its_key(first, change):
    """dp.RankDpKey: where a variation leaves it as it is, each pipeline rank's DP collectives and optimizer step
    cost what they cost in the base."""
    base, _ = _context(first)
    ctx, _ = _context(change)
    for r in range(base.lay.pp):
        held = _rank_holdings(base, tuple(stage_plan(base.spec, base.lay.pp, base.lay, "none").split), 1, r)
        if _keyed_alike(base, ctx, rank_dp_key(base, held), rank_dp_key(ctx, held)):
            assert one_rank_dp(ctx, *held) == one_rank_dp(base, *held)


@pytest.mark.parametrize("first, change", VARIATIONS)
def test_a_gemm_reads_only_its_key(first, change):
    """context.GemmInputs (and the shape): where a variation leaves it as it is, a linear's three GEMMs take what
    they take in the base, each timed afresh from its own device (``kernels.gemm_timer`` reads the device: the
    record must hold all it reads of it)."""
    base, _ = _context(first)
    ctx, _ = _context(change)
    for batch in (1, 8):
        inputs = ctx.gemm_inputs(batch)
        if inputs == base.gemm_inputs(batch):
            for m, k, n in ((4096, 2048, 1408), (37.5, 2048, 64), (8192, 11008, 4096)):
                fresh = [gemm_table(i, c.dev)[1] for i, c in ((inputs, ctx), (base.gemm_inputs(batch), base))]
                assert linear_seconds(m, k, n, inputs, fresh[0]) == linear_seconds(m, k, n, inputs, fresh[1])
