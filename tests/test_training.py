"""Training budgets and compute-optimal sizing: the worked examples people quote, computed right."""

import json
import math

import pytest
from click.testing import CliRunner

from llmcalc.analytic.params import count_params
from llmcalc.analytic.training import TrainingEstimate, compute_optimal, tokens_per_param_rule
from llmcalc.cli import cli
from llmcalc.errors import LlmcalcError
from llmcalc.spec import hardware_names, load_hardware, load_model, model_config


def run_json(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args] + ["--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def bad(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_classic_worked_example():
    """7e9 params, 1T tokens, H100 989 TFLOP/s, MFU 45 %, 512 GPUs: 4.2e22 FLOPs, ~26,200 GPU-hours,
    ~2.1 days. The seed texts are wrong twice: 4.2e22 / (989e12 x 0.45) = 9.4e7 GPU-seconds = 26,214
    GPU-hours; "94,000 GPU-hours / 7.7 days" divides the seconds by 1,000 instead of 3,600, and
    "5.8 days" starts from 2.6e8 single-GPU seconds instead of 9.4e7. The example counts computing time alone
    (--goodput 1)."""
    data = run_json("train", "--params", "7e9", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 512, "--mfu", 0.45,
                    "--goodput", 1)
    assert data["total_flops"] == pytest.approx(4.2e22)
    peak = load_hardware("h100-sxm").peak("bf16")
    assert peak == pytest.approx(989.4e12, rel=1e-3)
    assert data["gpu_hours"] == pytest.approx(4.2e22 / (peak * 0.45) / 3600)
    assert round(data["gpu_hours"], -2) == 26_200
    assert round(data["wall_clock_days"], 1) == 2.1
    assert data["gpu_hours"] / 512 / 24 == pytest.approx(data["wall_clock_days"])


def test_narayanan_gpt3_34_days(tmp_path):
    """Narayanan et al. 2021 sec. 5.1: GPT-3 175B (V = 51,200 padded), 300B tokens, 1024 A100s at
    140 TFLOP/s each with full recomputation: about 34 days."""
    config = {k: v for k, v in model_config("gpt3-175b").items() if k != "_source"}
    config["vocab_size"] = 51200
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = run_json("train", path, "--tokens", "300B", "--gpu", "a100-80gb-sxm", "--n-gpus", 1024,
                    "--achieved-tflops", 140, "--recompute", "full", "--seq-len", 2048)  # their days: computing
    # Their eq. 3: F = 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration, T = 8·T_tokens·P/(n·X) ~ this.
    s, h, L, V = 2048, 12288, 96, 51200
    per_token = 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert data["hardware_flops"] == pytest.approx(per_token * 300e9, rel=1e-9)
    assert 34 <= data["compute_wall_clock_days"] < 35
    assert data["wall_clock_days"] == pytest.approx(data["compute_wall_clock_days"] / 0.9)  # the default goodput


def test_gpt3_parameter_count():
    assert round(count_params(load_model("gpt3-175b")).total / 1e9) == 175  # Brown et al. 2020, Table 2.1


def test_model_flops_are_exact_and_six_n_t_is_beside_them():
    data = run_json("train", "llama-2-7b", "--tokens", "2T", "--gpu", "h100-sxm", "--n-gpus", 512, "--mfu", 0.45,
                    "--usd-per-gpu-hour", 2.5, "--seq-len", 4096)
    assert data["six_n_t_flops"] == pytest.approx(6 * 6_738_415_616 * 2e12)
    # By hand, per token: 6 x the matmul weights (all but the 32,000 x 4,096 embedding and the (2·32 + 1)
    # x 4,096 norm gains) + 12·L·D·S for QKᵀ and AV at full S² (PaLM's 6N + 12·L·H·Q·T), times 2T tokens.
    per_token = 6 * (6_738_415_616 - 32000 * 4096 - 65 * 4096) + 12 * 32 * 4096 * 4096
    assert data["total_flops"] == pytest.approx(per_token * 2e12, rel=1e-12)
    seconds = per_token * 2e12 / (989.4e12 * 0.45)  # H100 SXM dense bf16 at 45 % MFU, one GPU
    assert data["compute_gpu_hours"] == pytest.approx(seconds / 3600, rel=1e-3)
    wall = seconds / 0.9  # the default goodput: Llama 3's > 90 % effective training time
    assert data["gpu_hours"] == pytest.approx(wall / 3600, rel=1e-3)
    assert data["wall_clock_days"] == pytest.approx(wall / 512 / 86400, rel=1e-3)
    assert data["cost_usd"] == pytest.approx(wall / 3600 * 2.5, rel=1e-3)
    assert data["energy_kwh"] == pytest.approx(wall / 3600 * 700 / 1000, rel=1e-3)  # 700 W TDP
    assert data["tokens_per_second_per_gpu"] == pytest.approx(2e12 / seconds, rel=1e-3)  # per GPU: 1-GPU seconds


def test_achieved_tflops_gives_mfu_and_hfu():
    data = run_json("train", "llama-2-7b", "--tokens", "1T", "--gpu", "a100-80gb-sxm", "--n-gpus", 64,
                    "--achieved-tflops", 156, "--recompute", "full")
    assert data["hfu"] == pytest.approx(156 / 312)
    assert data["mfu"] < data["hfu"]  # recomputation is work, not model progress


def test_compute_optimal_chinchilla():
    """Chinchilla: 70B parameters on 1.4T tokens, C = 6·N·D = 5.88e23 FLOPs, 20 tokens per parameter."""
    rule = tokens_per_param_rule(5.88e23)
    assert rule.params == pytest.approx(70e9, rel=1e-3) and rule.tokens == pytest.approx(1.4e12, rel=1e-3)
    for plan in compute_optimal(1e24):
        assert plan.compute == pytest.approx(1e24)
    data = run_json("plan", "--compute", "1e24")
    assert data["plans"][0]["params"] == pytest.approx(math.sqrt(1e24 / 120))


def test_plan_from_a_cluster():
    data = run_json("plan", "--gpu", "h100-sxm", "--n-gpus", 1024, "--days", 30, "--mfu", 0.4)
    peak = load_hardware("h100-sxm").peak("bf16")
    assert data["compute_flops"] == pytest.approx(1024 * peak * 0.4 * 30 * 86400 * 0.9)  # 90 % of the days training


@pytest.mark.parametrize("args, message", [
    (["--mfu", "0"], "'--mfu': must be in (0, 1]"),
    (["--mfu", "1.5"], "'--mfu': must be in (0, 1]"),
    (["--mfu", "-0.1"], "'--mfu': must be in (0, 1]"),
    ([], "with --params (no shapes to predict a step from): give --mfu (e.g. 0.4 or 40%) or --achieved-tflops"),
    (["--mfu", "0.4", "--achieved-tflops", "100"], "give --mfu or --achieved-tflops, not both"),
    (["--achieved-tflops", "2000"], "exceeds h100-sxm's dense bf16 peak"),
])
def test_bad_utilisation(args, message):
    assert message in bad("train", "--params", "7B", "--tokens", "1T", "--gpu", "h100-sxm", *args)


def test_bad_quantities_and_names():
    assert "'--tokens': cannot read a count '1.5X'" in bad("train", "--params", "7B", "--tokens", "1.5X", "--gpu",
                                                           "h100-sxm",
                                              "--mfu", "0.4")
    assert "'--tokens': must be at least 1, got -1T" in bad("train", "--params", "7B", "--tokens", "-1T", "--gpu",
                                                            "h100-sxm",
                                              "--mfu", "0.4")
    line = bad("train", "--params", "7B", "--tokens", "1T", "--gpu", "h100", "--mfu", "0.4")
    assert "unknown hardware preset 'h100'" in line and "h100-sxm" in line
    assert "not both" in bad("train", "gpt2", "--params", "7B", "--tokens", "1T", "--gpu", "h100-sxm", "--mfu", "0.4")
    assert "missing --days" in bad("plan", "--gpu", "h100-sxm", "--n-gpus", "8", "--mfu", "0.4")


def test_estimate_validates_itself():
    acc = load_hardware("h100-sxm")
    with pytest.raises(LlmcalcError, match="n_gpus"):
        TrainingEstimate(1e12, 6e21, 6e21, acc, "bf16", 0, mfu=0.4)
    with pytest.raises(LlmcalcError, match="unknown dtype 'int3'"):
        acc.peak("int3")
    with pytest.raises(LlmcalcError, match="h100-sxm has no published dense int4 peak"):
        acc.peak("int4")
    with pytest.raises(LlmcalcError, match="tpu-v5e has no published dense fp8 peak"):
        load_hardware("tpu-v5e").peak("fp8")


# --- the accelerator catalog ---------------------------------------------------------------------

REQUIRED_HARDWARE = {"a100-40gb-sxm", "a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie", "h100-sxm", "h100-pcie",
                     "h100-nvl", "h200", "b200", "l4", "l40s", "rtx-4090", "mi300x", "tpu-v5e", "tpu-v5p",
                     "rtx-3090", "a10", "a10g", "rtx-a5000", "rtx-a6000", "l40", "h800-sxm", "h800-pcie"}
# Dense bf16 TFLOP/s from the vendors' datasheets (sparse figures are twice these).
# L40S: the datasheet prints "362.05 | 733*" for BF16, which is not a factor of two; 362.05 is the L40's
# figure carried over, and half the sparse 733 (366.5) is what its FP8 733 and TF32 183 imply.
DATASHEET_BF16 = {"a100-80gb-sxm": 312, "h100-sxm": 989.4, "h100-pcie": 756, "h200": 989.4, "l4": 121,
                  "l40s": 733 / 2, "mi300x": 1307.4, "mi325x": 1307.4, "tpu-v5e": 197, "tpu-v5p": 459,
                  # issue 41: the 24-96 GB cards and H800 (datasheets: dense = half the starred sparse figures; the
                  # RTX 3090's is the whitepaper's FP32-accumulate rate; the A10G's as AWS's partners quote it)
                  "rtx-3090": 71, "a10": 125, "a10g": 70, "rtx-a5000": 222.2 / 2, "rtx-a6000": 309.7 / 2,
                  "l40": 362.1 / 2, "h800-sxm": 1979 / 2, "h800-pcie": 1513 / 2}


def test_catalog_covers_the_issue():
    assert set(hardware_names()) >= REQUIRED_HARDWARE


@pytest.mark.parametrize("name", sorted(DATASHEET_BF16))
def test_dense_bf16_peaks(name):
    assert load_hardware(name).peak("bf16") == pytest.approx(DATASHEET_BF16[name] * 1e12, rel=2e-3)


@pytest.mark.parametrize("name", hardware_names())
def test_every_accelerator_is_consistent(name):
    acc = load_hardware(name)
    assert acc.source and acc.memory_bytes > 0 and acc.memory_bandwidth > 0
    peaks = acc.peak_flops
    half = peaks.get("bf16", peaks.get("fp16"))  # V100 has fp16 tensor cores and no bf16
    assert half > peaks.get("fp32", 0)
    if "fp8" in peaks:  # fp8 tensor throughput is twice bf16 on every generation that has it
        assert peaks["fp8"] == pytest.approx(2 * half, rel=0.01)
    if "tf32" in peaks and acc.vendor == "NVIDIA":
        assert peaks["tf32"] == pytest.approx(half / 2, rel=0.01)  # NVIDIA tensor cores: TF32 = BF16 / 2


@pytest.mark.parametrize("name", hardware_names())
def test_every_accelerator_states_what_its_runtime_reports(name):
    """The memory the CUDA (ROCm, XLA) runtime reports, with where the figure comes from: a little below the
    nominal size (the driver keeps 0.4-1.3 GiB), never above it."""
    acc = load_hardware(name)
    assert acc.cuda_visible_source
    assert 0.9 * acc.memory_bytes < acc.usable_bytes <= acc.memory_bytes
