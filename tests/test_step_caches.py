"""One way to cache (issue 37): every memo of the step model is keyed by what the function it memoizes reads.

For each field of the model, device, recipe and layout (and the prediction's own arguments), a prediction made
after another one in the same process (the caches warm with the base's entries) is the same prediction made from
cold caches: no field outside a key changes a cached result. The holes issue 37 names fail it when the fields
reach the physics without reaching the keys: the TP group's stride (the rank order, `order` below) and the FP8
scaling mode (the recipes fp8 / fp8-current, which share the GEMM dtype and rate but not the quantization bytes)."""

import dataclasses
import functools

import pytest

from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.step.cache import clear_caches
from llmcalc.analytic.step.layout import make_layout
from llmcalc.analytic.step.prediction import predict
from llmcalc.analytic.step.search import search_layouts
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
    {"order": "dp-tp-cp-ep-pp"}, {"order": "tp-cp-ep-pp-dp"}, {"order": "tp-dp-cp-ep-pp"},
    {"cp": 2, "cp_comm": "all-gather"}, {"cp": 2, "cp_comm": "a2a"},
    {"cp": 4, "cp_comm": "a2a+p2p", "cp_a2a_size": 2},
    {"recompute_layers": 2, "recompute": "full"},
    {"recompute_modules": ("mla_up_proj", "moe"), "recompute": "selective"},
    {"mtp_layers": 1}, {"first_stage_layers": 12}, {"last_stage_layers": 12},
    {"fp8_param_gather": True, "zero": 1, "recipe": "fp8"},
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


@pytest.mark.parametrize("change", LAYOUT_VARIATIONS + OTHER_VARIATIONS, ids=str)
def test_a_warm_prediction_is_the_cold_one(change):
    """predict's memos (a layer's cost, a stage's, a rank's DP and optimizer, the GEMM, attention and collective
    times, the stage plans, the FLOPs) give after the base prediction what they give from nothing."""
    clear_caches()
    try:
        cold = _predict(change)
    except LlmcalcError as exc:
        pytest.fail(f"not a valid variation: {exc}")
    clear_caches()
    _predict({})
    warm = _predict(change)
    assert warm == cold
    assert warm != _predict({})  # the field matters to the prediction (else this variation tests no key)


@pytest.mark.parametrize("first, then", [({"recipe": "fp8"}, {"recipe": "fp8-current"}),
                                         ({"order": "cp-tp-ep-dp-pp"}, {"order": "cp-dp-tp-ep-pp"})])
def test_the_holes_issue_37_names_stay_closed(first, then):
    """The FP8 scaling mode and the TP group's stride, each after the other in one process (the two orders place
    cp alike: only where the TP group sits, in one node or across two, tells the dense layers' costs apart)."""
    clear_caches()
    cold = _predict(then)
    clear_caches()
    _predict(first)
    assert _predict(then) == cold != _predict(first)


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
