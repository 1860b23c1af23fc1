"""The sharded profiler (FSDP2 over dp x DTensor TP): shard sizes, per-rank figures, bad input.

References are independent of the code under test: torch.chunk and torch's own DTensor shards for
the sharding rule, hand arithmetic of llmcalc-tiny's parameters for the per-rank bytes, and the
nccl-tests bus factors written out for the collective volumes.
"""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from llmcalc.cli import cli

torch = pytest.importorskip("torch")

# llmcalc-tiny (presets/models/llmcalc-tiny.json): D 256, 8 heads of 32, 2 KV heads, SwiGLU d_ff 704,
# vocab 8000, 4 layers, tied embeddings. Per layer, TP-sharded matrices: q, o 256x256; k, v 256x64;
# gate, up, down 256x704; replicated norms: 2 x 256. Embedding (= head) 8000 x 256; final norm 256.
TINY_LAYER = 2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 704  # 704,512
TINY_SHARDED = 4 * TINY_LAYER + 8000 * 256  # split by tp
TINY_REPLICATED = 4 * 2 * 256 + 256  # norms: whole on every TP rank


def tiny_rank_params(tp: int, dp: int) -> float:
    return (TINY_SHARDED / tp + TINY_REPLICATED) / dp


def run(*args, env=None):
    return CliRunner(env=env).invoke(cli, [str(a) for a in args])


def bad(*args):
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcalc: error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize("length,parts", [(8000, 3), (10, 4), (3, 8), (16, 4)])
def test_chunk_sizes_are_torch_chunk(length, parts):
    from llmcalc.profiling.distributed import chunk_sizes

    expected = [len(c) for c in torch.chunk(torch.arange(length), parts)]
    assert chunk_sizes(length, parts) == expected + [0] * (parts - len(expected))


def test_sharding_rule_matches_torch_shards_on_every_rank():
    """Uneven dp = 3: the rule's bytes for each rank equal the local shards torch builds as that rank."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from llmcalc.profiling.distributed import build_sharded, check_layout, make_mesh, param_layout, rank_param_bytes
    from llmcalc.spec import load_model

    spec = load_model("llmcalc-tiny")
    layout = check_layout(spec, 6, 2)
    rule = None
    for rank in (0, 3, 5):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=6)
        try:
            model = build_sharded(spec, make_mesh("cpu", layout), mixed=True)
            rule = rule or rank_param_bytes(param_layout(model), layout)
            local = sum(p.to_local().numel() * 4 for p in model.parameters())
        finally:
            dist.destroy_process_group()
        assert local == rule[rank]
    assert len(set(rule)) > 1  # 8000 / 2 / 3 and friends are uneven: ranks differ
    assert sum(rule) == (TINY_SHARDED + 2 * TINY_REPLICATED) * 4  # all shards: the model, norms on both TP ranks


@pytest.fixture(scope="module")
def virtual_tiny(built_once):
    def profile():
        result = run("profile", "llmcalc-tiny", "--virtual", "--world-size", 8, "--tp", 2, "--seq-len", 64,
                     "--format", "json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)
    return built_once("virtual-tiny-world-8", profile)  # once, not once per worker


def test_virtual_contract_and_exact_sharded_state(virtual_tiny):
    data = virtual_tiny
    assert data["world_size"] == 8 and data["mesh"] == {"dp": 4, "tp": 2}
    assert [r["rank"] for r in data["ranks"]] == list(range(8))
    params = tiny_rank_params(2, 4)  # 608,832 parameters per rank, fp32 sharded (FSDP2 mixed precision)
    for r in data["ranks"]:
        for key in ("param_bytes", "grad_bytes", "optimizer_bytes", "peak_memory_bytes"):
            assert set(r[key]) >= {"analytic", "measured"}
        assert r["param_bytes"]["measured"] == r["param_bytes"]["analytic"] == params * 4
        assert r["grad_bytes"]["measured"] == params * 4
        assert r["optimizer_bytes"]["measured"] == params * 8  # AdamW: two fp32 moments
        assert r["peak_memory_bytes"]["measured"] > 3 * params * 4


def test_virtual_collectives_against_bus_factors(virtual_tiny):
    rank = virtual_tiny["ranks"][0]["collectives"]
    tokens, per_tp_rank = 64, tiny_rank_params(2, 1)
    # FSDP2 over dp=4: all-gather of the bf16 weights in forward and backward, fp32 reduce-scatter: (n-1)/n
    fsdp_gather, fsdp_scatter = 2 * per_tp_rank * 2 * 3 / 4, per_tp_rank * 4 * 3 / 4
    # TP over 2: 2 all-reduces of [tokens, 256] bf16 per layer and pass: 2(n-1)/n = 1
    tp_reduce = 4 * 2 * 2 * tokens * 256 * 2 * 1
    assert rank["reduce_scatter"]["measured"] == rank["reduce_scatter"]["analytic"] == fsdp_scatter
    assert rank["all_gather"]["analytic"] == fsdp_gather
    # measured adds the LM head's logit all-gather over tp (tokens x 8000 bf16, (n-1)/n = 1/2)
    assert rank["all_gather"]["measured"] == fsdp_gather + tokens * 8000 * 2 / 2
    assert rank["all_reduce"]["analytic"] == tp_reduce
    # and two more TP all-reduces: the vocab-parallel embedding's output, the head's input gradient
    assert rank["all_reduce"]["measured"] == tp_reduce * 18 / 16


def test_virtual_flops_per_rank_are_a_tp_share(virtual_tiny):
    flops = virtual_tiny["ranks"][0]["flops"]
    assert flops["measured"] == flops["analytic"]


@pytest.mark.parametrize("args,words", [
    (("--virtual", "--world-size", 6, "--tp", 4), "= 4 does not divide --world-size/--nproc 6"),
    (("--virtual", "--world-size", 8, "--tp", 8), "does not divide the heads"),
    (("--virtual", "--nproc", 4), "--world-size"),
    (("--nproc", 3, "--tp", 2, "--device", "cpu"), "does not divide --world-size/--nproc 3"),
    (("--tp", 2, "--device", "cpu"), "sharded run"),
])
def test_bad_layouts(args, words):
    assert words in bad("profile", "llmcalc-tiny", *args)


def test_nproc_beyond_cuda_devices():
    if torch.cuda.is_available():
        line = bad("profile", "llmcalc-tiny", "--device", "cuda", "--nproc", torch.cuda.device_count() + 1)
        assert "CUDA devices present" in line
    else:
        assert "CUDA is not available" in bad("profile", "llmcalc-tiny", "--device", "cuda", "--nproc", 2)


def _workers_alive() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "llmcalc.profiling.worker" in ln and "ps -eo" not in ln]


@pytest.mark.slow
def test_real_gloo_nproc4_tp2():
    """A real 4-rank run (dp 2 x tp 2, gloo, fp32): every rank measured; sharded state exact."""
    result = subprocess.run([sys.executable, "-m", "llmcalc", "profile", "llmcalc-tiny", "--device", "cpu",
                             "--nproc", "4", "--tp", "2", "--steps", "2", "--warmup", "1", "--seq-len", "128",
                             "--format", "json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["mesh"] == {"dp": 2, "tp": 2} and len(data["ranks"]) == 4
    params, tokens = tiny_rank_params(2, 2), 128
    for r in data["ranks"]:
        assert r["param_bytes"]["measured"] == r["param_bytes"]["analytic"] == params * 4
        assert r["grad_bytes"]["measured"] == params * 4 and r["optimizer_bytes"]["measured"] == params * 8
        c = r["collectives"]
        per_tp_rank = tiny_rank_params(2, 1)
        assert c["reduce_scatter"]["measured"] == per_tp_rank * 4 / 2  # fp32, (n-1)/n over dp 2
        assert c["all_gather"]["measured"] == 2 * per_tp_rank * 4 / 2 + tokens * 8000 * 4 / 2
        assert c["all_reduce"]["measured"] == 18 * tokens * 256 * 4  # 2(n-1)/n = 1 over tp 2
        assert r["step_seconds"] > 0 and r["tokens_per_second"] == pytest.approx(tokens / r["step_seconds"])
        assert 0 < r["mfu"] < 1
    assert not _workers_alive()


@pytest.mark.slow
def test_real_rank_failure_is_one_line_and_leaves_no_orphans():
    env = {**os.environ, "LLMCALC_FAIL_RANKS": "1"}
    result = subprocess.run([sys.executable, "-m", "llmcalc", "profile", "llmcalc-tiny", "--device", "cpu",
                             "--nproc", "2", "--steps", "1", "--seq-len", "32", "--format", "json"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "torchrun failed" in lines[0] and "rank 1" in lines[0], result.stderr
    assert not _workers_alive()
