"""Issue 38 item 4: what `--dtype` means where a step is timed or memory sized, and MFU in both conventions.

References: Transformer Engine's default FP8 recipe (transformer_engine/pytorch/quantization.py,
get_default_fp8_recipe: MXFP8BlockScaling where MXFP8 is supported, compute capability >= 10.0, else
DelayedScaling); Megatron-LM's --fp8-recipe default 'delayed' (megatron/training/arguments.py); the dense peaks of
the presets' datasheets (H100 SXM 989.4 / 1978.9 TFLOP/s bf16 / fp8; GB300 2.5 / 5 / 15 PFLOP/s bf16 / fp8 / fp4);
Megatron-Bridge's Performance Tuning Guide (FP8 1.2-1.5x over BF16); NVIDIA's NeMo performance summary (Llama3-8B on
8 GB200 reaches 1,838 model TFLOP/s per GPU in FP8: 73.5 % of the 2.5 PFLOP/s BF16 peak, 36.8 % of the FP8 one).
"""

from __future__ import annotations

import pytest
from clirun import cli_json, one_line_error, run

from llmcalc.analytic.precision import default_fp8_recipe, recipe_for_dtype
from llmcalc.analytic.training import TrainingEstimate
from llmcalc.errors import LlmcalcError
from llmcalc.spec import hardware_config, load_hardware

TRAIN = ("train", "llama-3-8b", "--tokens", "1T", "--n-gpus", "8", "--global-batch", "64", "--seq-len", "4096")


@pytest.mark.parametrize("gpu, te_default", [
    ("h100-sxm", "fp8"), ("h200", "fp8"),  # Hopper (sm90): DelayedScaling
    ("b200", "mxfp8"), ("gb200", "mxfp8"), ("b300", "mxfp8"), ("gb300", "mxfp8"),  # Blackwell (sm100): MXFP8
])
def test_dtype_fp8_is_transformer_engines_default_recipe(gpu, te_default):
    assert recipe_for_dtype("fp8", gpu)[0] == te_default
    assert default_fp8_recipe(hardware_config(gpu)["matmul"]["arch"]) == te_default


def test_train_dtype_fp8_times_the_fp8_recipe_and_says_which():
    typed = run(*TRAIN, "--gpu", "h100-sxm", "--dtype", "fp8", "--format", "json")
    assert typed.exit_code == 0, typed.output
    assert "--dtype fp8 without --recipe: recipe fp8" in typed.stderr and "DelayedScaling" in typed.stderr
    explicit = cli_json(*TRAIN, "--gpu", "h100-sxm", "--dtype", "fp8", "--recipe", "fp8")
    implied = cli_json(*TRAIN, "--gpu", "h100-sxm", "--dtype", "fp8")
    assert implied["recipe"] == "fp8" and implied["recipe_from_dtype"] == "fp8"
    assert implied["tokens_per_second_per_gpu"] == explicit["tokens_per_second_per_gpu"]
    bf16 = cli_json(*TRAIN, "--gpu", "h100-sxm")
    # Megatron-Bridge's Performance Tuning Guide (docs.nvidia.com/nemo/megatron-bridge/latest/performance-guide.html,
    # "Low Precision Training"): the default FP8 recipe, FP8 in the Transformer block's linear layers only,
    # "typically achiev[es] a speedup of 1.2-1.5X" over BF16 (Megatron-LM#396: a 13B GPT on H100, 0.34 -> 0.24 s
    # per step, 1.42x). The issue: --dtype fp8 used to time the BF16 run (1.0x).
    assert 1.2 <= implied["tokens_per_second_per_gpu"] / bf16["tokens_per_second_per_gpu"] <= 1.5
    assert "recipe_from_dtype" not in explicit


def test_mfu_in_both_conventions_for_a_predicted_fp8_run():
    d = cli_json(*TRAIN, "--gpu", "gb200", "--recipe", "mxfp8")
    assert d["dtype"] == "bf16" and d["recipe_peak_dtype"] == "fp8"
    # the same model FLOP/s against GB200's 2.5 (bf16) and 5 (fp8) dense PFLOP/s
    assert d["mfu_vs_bf16_peak"] == pytest.approx(d["model_tflops_per_gpu"] / 2500)
    assert d["mfu_vs_recipe_peak"] == d["mfu_vs_fp8_peak"] == pytest.approx(d["model_tflops_per_gpu"] / 5000)
    assert d["mfu"] == d["mfu_vs_bf16_peak"]  # `mfu` stays against --dtype's peak
    table = run(*TRAIN, "--gpu", "gb200", "--recipe", "mxfp8").stdout
    assert "MFU vs dense bf16 peak (2,500 TFLOP/s)" in table
    assert "MFU vs dense fp8 peak (5,000 TFLOP/s) (the recipe's GEMM dtype)" in table


def test_nvfp4_on_gb300_against_its_fp4_peak():
    d = cli_json(*TRAIN, "--gpu", "gb300", "--recipe", "nvfp4")
    assert d["recipe_peak_dtype"] == "fp4"
    assert d["mfu_vs_fp4_peak"] == pytest.approx(d["model_tflops_per_gpu"] / 15000)
    assert d["mfu_vs_bf16_peak"] == pytest.approx(d["model_tflops_per_gpu"] / 2500)


def test_a_prediction_above_a_peak_is_a_figure_not_an_error():
    """A predicted MFU above 1 in one convention (an NVFP4 run against the BF16 peak; here an fp32 run, its GEMMs
    on TF32 tensor cores, against the non-tensor FP32 peak) is printed; a given --mfu keeps its (0, 1] check."""
    acc = load_hardware("gb300")
    est = TrainingEstimate(tokens=1e12, model_flops=6e21, hardware_flops=6e21, accelerator=acc, dtype="bf16",
                           n_gpus=8, mfu=1.24, mfu_given=False)
    assert est.effective_mfu == pytest.approx(1.24)
    with pytest.raises(LlmcalcError, match="MFU"):
        TrainingEstimate(tokens=1e12, model_flops=6e21, hardware_flops=6e21, accelerator=acc, dtype="bf16",
                         n_gpus=8, mfu=1.24)
    d = cli_json(*TRAIN, "--gpu", "b200", "--dtype", "fp32")
    assert d["recipe"] == "fp32" and d["mfu"] > 1 and d["mfu_vs_tf32_peak"] < 1
    assert "--mfu" in one_line_error("train", "llama-3-8b", "--tokens", "1T", "--gpu", "b200", "--mfu", "1.2")


def test_dtype_refusals_name_the_fix():
    assert "--recipe" in one_line_error(*TRAIN, "--gpu", "b200", "--dtype", "int8")
    assert "give --gpu" in one_line_error("memory", "llama-3-8b", "--dtype", "fp8")
    assert "--dtype" in one_line_error("memory", "llama-3-8b", "--dtype", "fp8", "--recipe", "fp8")


def test_memory_layout_compare_read_dtype_as_train_does():
    assert cli_json("memory", "llama-3-8b", "--dtype", "fp8", "--gpu", "b200") == cli_json(
        "memory", "llama-3-8b", "--recipe", "mxfp8", "--gpu", "b200")
    layout = ("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", "8", "--global-batch", "64", "--top", "2")
    implied, explicit = cli_json(*layout, "--dtype", "fp8"), cli_json(*layout, "--dtype", "fp8", "--recipe", "fp8")
    # the same layouts; the reproduce lines repeat the options as typed (--recipe fp8 only where it was given)
    lines = explicit.pop("reproduce"), implied.pop("reproduce")
    assert "--recipe fp8" in lines[0]["memory"] and "--recipe" not in lines[1]["memory"]
    assert implied == explicit
    best = implied["layouts"][0]
    # MFU (%) against the fp8 peak; against bf16 twice that (H100 SXM: 1978.9 / 989.4)
    assert best["mfu"] == best["mfu_vs_fp8_peak"] == best["mfu_vs_recipe_peak"]
    assert best["mfu_vs_bf16_peak"] == pytest.approx(best["mfu"] * 1978.9 / 989.4, rel=1e-4)
    scenario = cli_json("compare", "llama-3-8b", "--dtype", "fp8")["scenario"]
    assert (scenario["dtype"], scenario["recipe"]) == ("fp8", "fp8")


def test_report_sets_beside_the_gpu_only_accelerators_with_that_peak():
    """`report --dtype fp8`: the A100 has no dense fp8 peak (its datasheet lists none), so it is not set beside."""
    from llmcalc.analytic.summary import Scenario
    from llmcalc.report.sweeps import accelerators_shown

    spec = {"llama-3-8b": None}
    fp8 = accelerators_shown(spec, Scenario(gpu=load_hardware("h100-sxm"), dtype="fp8"), load_hardware)
    bf16 = accelerators_shown(spec, Scenario(gpu=load_hardware("h100-sxm")), load_hardware)
    assert "a100-80gb-sxm" in [a.key for a in bf16] and "a100-80gb-sxm" not in [a.key for a in fp8]
    assert len(fp8) == len(bf16) == 4 and all("fp8" in a.peak_flops for a in fp8)
