"""The fine-grained MoE terms of the step model (llmcalc/analytic/step/moe.py) against independent references: a
simulation of balanced top-k routing and Megatron-Core's dispatchers' message sizes. (The grouped GEMM's rate by rows
per expert is held to DeepGEMM's published table in test_steptime.py.)"""

from __future__ import annotations

import json
import random

import pytest
from clirun import run

from llmcalc.analytic import comm
from llmcalc.analytic.step import moe


def _simulated_max_load(tokens_per_rank: int, ranks: int, n_experts: int, top_k: int, trials: int) -> float:
    """Monte Carlo: every token of every rank picks top_k distinct experts uniformly; experts sit E/ranks per rank;
    the mean over trials of (rows on the most loaded rank) / (mean rows per rank)."""
    rng = random.Random(1234)
    per = n_experts // ranks
    total = 0.0
    for _ in range(trials):
        load = [0] * ranks
        for _ in range(tokens_per_rank * ranks):
            for e in rng.sample(range(n_experts), top_k):
                load[e // per] += 1
        total += max(load) / (tokens_per_rank * top_k)
    return total / trials


@pytest.mark.parametrize("tokens, ranks, experts, k", [(64, 8, 128, 8), (32, 16, 64, 6), (256, 4, 8, 2)])
def test_expected_max_load_matches_simulated_routing(tokens, ranks, experts, k):
    """The most loaded rank under balanced routing (binomial-like loads, Blom's expected maximum) against a
    simulation of the routing itself: the excess over the mean within 15 %."""
    simulated = _simulated_max_load(tokens, ranks, experts, k, trials=300)
    predicted = moe.expected_max_load(tokens * k, ranks, experts, k)
    assert predicted - 1 == pytest.approx(simulated - 1, rel=0.15)
    assert moe.expected_max_load(tokens * k, 1, experts, k) == 1.0


def test_allgather_dispatcher_moves_bytes_that_do_not_grow_with_top_k():
    """Megatron-Core's allgather dispatcher gathers every rank's [T, D] tokens over EP x ETP and reduce-scatters
    the outputs: per rank (n - 1)/n of the gathered buffer, T·D·(n - 1) bytes, whatever top-k; the alltoall
    dispatcher sends T·k·D·(n - 1)/n. With top-8 on ep 2 the allgather moves a quarter of the alltoall's bytes."""
    T, D = 4096, 2048
    gather, scatter = moe.allgather_collectives(T, D, 2, ep=2, etp=1, stride=1)
    assert gather.bytes_per_rank == pytest.approx(T * D * 2 * (2 - 1))
    assert scatter.bytes_per_rank == gather.bytes_per_rank
    a2a = comm.ep_collectives(T, 8, D, 2, ep=2, stride=1, passes=1)[0]
    assert a2a.bytes_per_rank == pytest.approx(4 * gather.bytes_per_rank)
    base = ("train", "qwen3-30b-a3b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64,
            "--ep", 2)
    allgather, alltoall = (json.loads(run(*base, *extra, "--format", "json").stdout)["breakdown_seconds"]
                           for extra in (("--ep-dispatcher", "allgather"), ()))
    assert 0 < allgather["ep_comm"] < alltoall["ep_comm"]


def test_permutations_and_router_are_charged():
    """The alltoall dispatcher's permute, chunk sorts and unpermute: (1 + k)·T·W each way plus 2·k·T·W per sort
    (two sorts with several local experts, none with one or with DeepEP); the router's fp32 score passes."""
    W = 2048 * 2
    one = moe.permute_bytes(100, 8, 2048, 2, local_experts=1, ep=8, dispatcher="alltoall")
    many = moe.permute_bytes(100, 8, 2048, 2, local_experts=16, ep=8, dispatcher="alltoall")
    assert one == 2 * 9 * 100 * W and many == one + 4 * 8 * 100 * W
    assert moe.permute_bytes(100, 8, 2048, 2, local_experts=16, ep=8, dispatcher="deepep") == one
    assert moe.router_bytes(4096, 128) == 2 * moe.ROUTER_SCORE_PASSES * 4096 * 128 * 4


LAYOUT_MOE = ("layout", "qwen3-235b-a22b", "--gpu", "b200", "--n-gpus", 64, "--global-batch", 256, "--format", "json")


def test_layout_searches_the_dispatcher_and_the_overlap_where_they_apply():
    """`layout` tries, for each expert mesh with all-to-alls, the dispatchers that can move fewer bytes (allgather
    where ep x etp <= top-k, deepep where the EP group leaves the node) and --ep-overlap where there are 2 or more
    micro-batches; its reproduce line names what it chose and `train` gives the same step. Options typed are kept."""
    out = json.loads(run(*LAYOUT_MOE).stdout)
    rows = out["layouts"]
    assert {r["ep_dispatcher"] for r in rows} >= {"allgather"} and any(r["ep_overlap"] for r in rows)
    for r in rows:
        if r["ep_dispatcher"] == "allgather":
            assert r["ep"] * r["etp"] <= 8  # Qwen3-235B-A22B: top-8
    best = rows[0]
    line = out["reproduce"]["train"]
    assert (f"--ep-dispatcher {best['ep_dispatcher']}" in line) == (best["ep_dispatcher"] != "alltoall")
    train = json.loads(run(*line.split()[1:], "--format", "json").stdout)
    assert train["step_seconds"] == pytest.approx(best["step_seconds"], rel=1e-9)
    fixed = json.loads(run(*LAYOUT_MOE, "--ep-dispatcher", "alltoall", "--no-ep-overlap").stdout)["layouts"]
    assert {(r["ep_dispatcher"], r["ep_overlap"]) for r in fixed} == {("alltoall", False)}


def test_memory_sizes_uneven_pipeline_stages_as_layout_checks_them():
    """94 layers over pp 16 (Qwen3-235B-A22B): `memory` sizes the most loaded stage, ceil(94/16) = 6 layers, says
    so, and prints the peak `layout`'s memory check finds for the same layout (step/layout.py:layout_memory, the one
    training memory model both use)."""
    from llmcalc.analytic.step.layout import layout_memory, make_layout
    from llmcalc.spec import load_model

    args = ("memory", "qwen3-235b-a22b", "--gpu", "b200", "--n-gpus", 256, "--pp", 16, "--ep", 16, "--seq-len",
            4096, "--micro-batch", 1, "--recompute", "full")
    text = run(*args)
    assert text.exit_code == 0, text.output
    assert "the most loaded (6 layers" in text.stdout
    out = json.loads(run(*args, "--format", "json").stdout)
    spec = load_model("qwen3-235b-a22b")
    lay = make_layout(spec, 256, 4096, 16, pp=16, ep=16)
    assert out["per_gpu_bytes"] == pytest.approx(layout_memory(spec, lay, 4096, "full").peak, rel=1e-9)


def test_dualpipe_hides_the_all_to_alls_that_1f1b_overlap_leaves_exposed():
    """--ep-overlap under the V-shaped schedule (zb-v's placement: DualPipeV, DualPipe cut in half) pairs a forward
    and a backward chunk, which "ensures that both all-to-all and PP communication can be fully hidden" (DeepSeek-V3
    report, arXiv 2412.19437 sec. 3.2.1): what stays of a layer's all-to-alls is only the SMs the communication
    holds (20 of the GPU's: sec. 3.2.2), where Megatron-Core's 1F1B A2A overlap leaves (1 - 0.4) of them exposed
    (its one published pair, 19.7 -> 17.6 s). Held on one MoE layer whose all-to-alls take less than its compute."""
    from llmcalc.analytic import kernels
    from llmcalc.analytic.step import collectives, layer
    from llmcalc.analytic.step.layout import make_layout
    from llmcalc.spec import load_model

    spec, dev = load_model("qwen3-30b-a3b"), kernels.device_for("h100-sxm")
    def one_layer(**opts):
        lay = make_layout(spec, 16, 4096, 64, pp=2, ep=8, etp=1, **opts)
        return layer.layer_times(spec, 0, lay, 4096, dev=dev)
    plain, v_plain = one_layer(), one_layer(schedule="zb-v")
    assert v_plain.ep == pytest.approx(plain.ep)  # the schedule alone hides nothing
    comm = plain.ep
    assert 0 < comm < plain.fwd + plain.bwd_input + plain.bwd_weight
    sms = 20 / dev.sm_count
    assert one_layer(schedule="zb-v", ep_overlap=True).ep == pytest.approx(comm * sms)
    assert one_layer(ep_overlap=True).ep == pytest.approx(comm - 0.4 * comm + 0.4 * comm * sms)
    assert collectives.ep_overlap_share("zb-v") == 1.0 and collectives.ep_overlap_share("1f1b") == 0.4
