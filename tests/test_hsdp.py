"""Hybrid sharding (HSDP, `--dp-shard N`; torchtitan's data_parallel_shard_degree, PyTorch FSDP's HYBRID_SHARD:
"FULL_SHARD within a node, and replicate parameters across nodes"): the weights, gradients and optimizer states are
sharded over the N innermost data-parallel ranks as plain ZeRO / FSDP shards them over N ranks, and each rank's
gradient shard is all-reduced with the ranks holding the same shard in the dp / N other replicas."""

import json

import pytest
from clirun import run

from llmcalc.analytic import comm
from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.memory import RECIPES
from llmcalc.analytic.params import count_params
from llmcalc.analytic.step.cache import per_call
from llmcalc.analytic.step.constants import DP_BUCKET_PARAMS, KERNEL_EFFICIENCY
from llmcalc.analytic.step.context import StepContext
from llmcalc.analytic.step.dp import one_rank_dp
from llmcalc.analytic.step.layout import layout_memory, make_layout
from llmcalc.spec import load_model

SPEC, H100, SEQ = load_model("llama-3.1-8b"), device_for("h100-sxm"), 4096


@pytest.mark.parametrize("zero", [1, 3])
def test_states_per_gpu_are_those_of_plain_sharding_over_the_shard_group(zero):
    """HSDP over 128 GPUs sharded 8 ways holds, per GPU, what ZeRO / FSDP over those 8 GPUs alone holds (the same
    micro-batch: the same activations); plain sharding over all 128 holds less."""
    hsdp = make_layout(SPEC, 128, SEQ, 256, zero=zero, dp_shard=8)
    alone = make_layout(SPEC, 8, SEQ, 16, zero=zero)
    plain = make_layout(SPEC, 128, SEQ, 256, zero=zero)
    peak = {name: layout_memory(SPEC, lay, SEQ, "none").peak for name, lay in
            (("hsdp", hsdp), ("alone", alone), ("plain", plain))}
    assert peak["hsdp"] == pytest.approx(peak["alone"], rel=1e-12)
    assert peak["plain"] < peak["hsdp"]


@per_call
def _dp(lay):
    ctx = StepContext(SPEC, H100, lay, SEQ, RECIPES["bf16-mixed"], attention="flash", dropout=False,
                      eff=KERNEL_EFFICIENCY)
    return one_rank_dp(ctx, count_params(SPEC).total, 0.0, SPEC.n_layers)


def test_the_replicas_all_reduce_each_ranks_gradient_shard():
    """ZeRO-1 HSDP on 16 nodes of 8, sharded within the node: the reduce-scatter is the 8-GPU run's (the same group,
    innermost), plus per bucket an all-reduce of the shard's gradients across the 16 replicas, one rank per node."""
    reduce_hsdp = _dp(make_layout(SPEC, 128, SEQ, 256, zero=1, dp_shard=8))[4]
    reduce_alone = _dp(make_layout(SPEC, 8, SEQ, 16, zero=1))[4]
    params = count_params(SPEC).total
    calls = -(-params // max(DP_BUCKET_PARAMS, 1e6 * 8))  # Megatron's buckets over the 8-rank shard group
    shard_bytes = params / 8 * RECIPES["bf16-mixed"].grad_bytes
    all_reduce = comm.Collective("replicas", "all_reduce", 16, shard_bytes / calls, count=calls, stride=8, per_node=1)
    assert all_reduce.bytes_per_rank == pytest.approx(2 * 15 / 16 * shard_bytes / calls)
    assert reduce_hsdp - reduce_alone == pytest.approx(calls * all_reduce.seconds(H100.network), rel=1e-9)


BASE = ("train", "llama-3.1-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 128, "--global-batch", 256)


def test_train_says_it_and_refuses_it_where_it_does_not_apply():
    out = json.loads(run(*BASE, "--zero", 3, "--dp-shard", 8, "--format", "json").stdout)
    assert "16 replicas" in out["assumptions"]["hsdp"]
    for bad in (("--zero", 0, "--dp-shard", 8), ("--zero", 3, "--dp-shard", 7), ("--zero", 3, "--dp-shard", 128)):
        r = run(*BASE, *bad)
        assert r.exit_code == 2 and "--dp-shard" in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1


def test_layout_pins_it_and_its_reproduce_lines_give_the_same_step_and_memory():
    """`layout --dp-shard 8` tries only layouts sharded 8 ways; the train and memory lines it prints for its best
    give that layout's step and memory (refused where 8 does not divide a layout's dp: those layouts are not
    tried)."""
    out = json.loads(run("layout", "llama-3.1-8b", "--gpu", "h100-sxm", "--n-gpus", 128, "--global-batch", 256,
                         "--dp-shard", 8, "--top", 1, "--format", "json").stdout)
    best, lines = out["layouts"][0], out["reproduce"]
    assert "--dp-shard 8" in lines["train"] and "--dp-shard 8" in lines["memory"]
    train = json.loads(run(*lines["train"].split()[1:], "--format", "json").stdout)
    assert train["step_seconds"] == pytest.approx(best["step_seconds"], rel=1e-9)
    memory = json.loads(run(*lines["memory"].split()[1:], "--format", "json").stdout)
    assert memory["per_gpu_bytes"] / 2**30 == pytest.approx(best["memory_gib"], rel=1e-9)


SLOW = ("layout", "llama-3.1-8b", "--gpu", "h100-sxm", "--n-gpus", 512, "--seq-len", SEQ, "--global-batch", 512,
        "--network", "100G-x1-fat-tree", "--zero", 3, "--tp", 1, "--cp", 1, "--pp", 1)


def test_layout_finds_hsdp_where_fsdp_spans_many_nodes_on_a_slow_network():
    """HSDP exists for this (Zhao et al., "PyTorch FSDP", VLDB 2023, section 3.2.2: hybrid sharding keeps the
    per-micro-batch all-gathers and reduce-scatters inside a host and sends only one gradient all-reduce across
    hosts): FSDP over 64 nodes with one 100 Gb/s NIC each (1.56 GB/s per GPU) gathers every layer's weights per
    micro-batch over that network. The search tries the shard groups of 1, 2, 4 ... nodes beside full FSDP, ranks an
    HSDP layout first, faster than full FSDP of the same degrees, and says it searched them; each layout it lists
    fits (memory's figure at most the H100's usable memory) and its reproduce lines give its step and memory."""
    out = json.loads(run(*SLOW, "--format", "json").stdout)
    rows, lines = out["layouts"], out["reproduce"]
    shards = {row["dp_shard"] for row in rows}
    assert shards >= {None, 8, 16} and out["counts"]["hsdp"] == 6  # 8, 16, ... 256 ranks: 1 to 32 nodes
    best, fsdp = rows[0], next(row for row in rows if row["dp_shard"] is None)
    assert best["dp_shard"] is not None and best["step_seconds"] < fsdp["step_seconds"]
    assert all(row["memory_gib"] * 2**30 <= H100.accelerator.usable_bytes for row in rows)
    assert f"--dp-shard {best['dp_shard']}" in lines["train"] and f"--dp-shard {best['dp_shard']}" in lines["memory"]
    train = json.loads(run(*lines["train"].split()[1:], "--format", "json").stdout)
    assert train["step_seconds"] == pytest.approx(best["step_seconds"], rel=1e-9)
    memory = json.loads(run(*lines["memory"].split()[1:], "--format", "json").stdout)
    assert memory["per_gpu_bytes"] / 2**30 == pytest.approx(best["memory_gib"], rel=1e-9)
    assert any("knobs searched:" in k and "HSDP" in k for k in out["knobs"])


def test_layout_tries_no_hsdp_where_zero_1_fits_or_dp_stays_in_a_node():
    """HSDP is searched only for layouts that fit as FSDP alone and whose data-parallel group spans nodes: ZeRO-1
    given, or 8 GPUs (one node), tries none; --dp-shard given is a knob given, not searched."""
    zero1 = json.loads(run(*SLOW[:-8], "--zero", 1, "--format", "json").stdout)
    assert zero1["counts"]["hsdp"] == 0 and all(row["dp_shard"] is None for row in zero1["layouts"])
    node = json.loads(run("layout", "llama-3.1-8b", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64,
                          "--zero", 3, "--format", "json").stdout)
    assert node["counts"]["hsdp"] == 0
    given = json.loads(run(*SLOW, "--dp-shard", 32, "--format", "json").stdout)
    assert {row["dp_shard"] for row in given["layouts"]} == {32} and given["counts"]["hsdp"] == 0
    assert any(k.startswith("knobs given:") and "--dp-shard" in k for k in given["knobs"])


def test_layout_refuses_a_shard_group_no_layout_has_in_one_line():
    for extra in (("--n-gpus", 8), ("--n-gpus", 64, "--zero", 0)):
        r = run("layout", "llama-3-8b", "--gpu", "h100-sxm", "--global-batch", 64, "--dp-shard", 8, *extra)
        assert r.exit_code == 2 and "--dp-shard 8" in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1
