"""Where a parallel group's ranks sit reaches its collectives (issue 37): a TP, ETP or CP group laid across nodes by
the rank order pays the network (comm.Collective.seconds at the group's stride), and --tp-overlap hides only what
TransformerEngine's userbuffer overlap can, inside one NVLink domain (NVIDIA/TransformerEngine#1071: "only possible
with single-node tensor-parallelism")."""

import pytest

from llmcalc.analytic import comm
from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.step.layout import make_layout
from llmcalc.analytic.step.prediction import predict
from llmcalc.spec import load_model

H100 = device_for("h100-sxm")
ACROSS = "dp-tp-cp-ep-pp"  # dp innermost: with dp 8, each TP group's 8 members sit in 8 nodes


def _tp_comm(order: str, tp_overlap: bool = False, seq: int = 4096) -> float:
    spec = load_model("llama-3-70b")
    lay = make_layout(spec, 64, seq, 64, tp=8, order=order, tp_overlap=tp_overlap)
    return predict(spec, H100, lay, seq, causal=True).breakdown["tp_comm"]


def test_tp_across_nodes_pays_the_network():
    """The issue's example (llama-3-70b on 64 H100, tp 8, global batch 64): with dp innermost every TP collective
    crosses InfiniBand, one NIC per member (50 GB/s at 90 % against NVLink's 450 at 78 %): at least twice the
    in-node time, and the ratio is the collectives' own at those strides."""
    inside, across = _tp_comm("tp-cp-ep-dp-pp"), _tp_comm(ACROSS)
    assert across >= 2 * inside
    net = H100.network
    s = 4096 * 8192 * 2  # one micro-batch's [tokens, d_model] activation (bf16)
    one = [comm.Collective("ag", "all_gather", 8, s, stride=1), comm.Collective("ag", "all_gather", 8, s, stride=8)]
    assert one[0].intra_node(net) and not one[1].intra_node(net)
    assert across / inside == pytest.approx(one[1].seconds(net) / one[0].seconds(net), rel=0.05)


def test_tp_overlap_hides_nothing_across_nodes():
    """--tp-overlap hides TP collectives under the GEMMs inside a node, none across nodes."""
    assert _tp_comm("tp-cp-ep-dp-pp", tp_overlap=True) < _tp_comm("tp-cp-ep-dp-pp")
    assert _tp_comm(ACROSS, tp_overlap=True) == _tp_comm(ACROSS)


def test_expert_tp_across_nodes_pays_the_network():
    """An expert's ETP ranks follow the rank order too (Megatron-Core's expert RankGenerator: tp -> etp): placed
    across nodes, the routed tokens' all-gather and the outputs' reduce-scatter cost more."""
    spec = load_model("mixtral-8x7b")

    def ep_comm(order: str) -> float:
        lay = make_layout(spec, 64, 4096, 64, tp=8, ep=2, etp=4, order=order)
        return predict(spec, H100, lay, 4096, causal=True).breakdown["ep_comm"]
    assert ep_comm(ACROSS) > 1.5 * ep_comm("tp-cp-ep-dp-pp")


@pytest.mark.parametrize("recipe, element_bytes", [("fp8", 1.0), ("fp8-blockwise", 1 + 4 / 128),
                                                   ("mxfp8", 1 + 1 / 32), ("nvfp4", 0.5 + 1 / 16)])
def test_sequence_parallel_all_gathers_move_the_quantized_input(recipe, element_bytes):
    """Transformer Engine quantizes a linear's input before sequence parallelism's all-gather (forward, and again
    for the weight gradient) and gathers the output gradient with the grad-output quantizer
    (transformer_engine/pytorch/distributed.py gather_along_first_dim, module/layernorm_linear.py, module/base.py
    grad_output_preprocess, @d0067d0): the all-gathers move the recipe's elements, data and scales (FP8 1 byte;
    blockwise FP8 1 + one fp32 scale per 128; MXFP8 1 + one E8M0 scale per 32; NVFP4 half a byte + one E4M3 scale per
    16), the reduce-scatters the BF16 activation. One layer's TP time on B200, tp 8 in one node, is the time of
    those collectives."""
    from llmcalc.analytic.memory import RECIPES
    from llmcalc.analytic.step.layer import layer_times

    spec, T = load_model("llama-3-70b"), 4096
    lay = make_layout(spec, 8, T, 8, tp=8)
    act = RECIPES[recipe].act_bytes
    b200 = device_for("b200")
    t = layer_times(spec, 0, lay, T, dev=b200, recipe=recipe, act_bytes=act)
    colls = comm.tp_collectives(T, spec.d_model, act, 8, sequence_parallel=True, passes=2,
                                gather_bytes=element_bytes)
    assert colls[0].kind == "all_gather" and colls[0].buffer_bytes == T * spec.d_model * element_bytes
    assert colls[1].buffer_bytes == T * spec.d_model * act
    assert t.tp == pytest.approx(comm.total_seconds(colls, b200.network), rel=1e-9)
    bf16 = layer_times(spec, 0, lay, T, dev=b200, recipe="bf16-mixed", act_bytes=2)
    assert t.tp < bf16.tp
