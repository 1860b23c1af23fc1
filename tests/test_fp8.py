"""FP8 training recipes: bytes per parameter by recipe (with their sources), FP8-saved inputs, MFU vs both peaks."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmcalc.analytic.memory import RECIPES, training_memory
from llmcalc.cli import cli
from llmcalc.spec import load_model


@pytest.mark.parametrize("recipe, weights, grads, master, adam, fp8_copies", [
    # Megatron-LM + Transformer Engine: bf16 params, fp32 main grads, fp32 master, 2 fp32 Adam states
    # (Megatron's distributed optimizer docs: 18 bytes/param), plus TE's FP8 weight and transpose (1 + 1 B).
    ("fp8", 2, 4, 4, 8, 2),
    ("fp8-current", 2, 4, 4, 8, 2),
    # torchao float8 as torchtitan runs it (torchtitan/config/configs.py: training.dtype float32, bf16 only as
    # FSDP2's param_dtype or autocast): fp32 params (the master), fp32 grads, fp32 Adam; FP8 casts per GEMM, not kept.
    ("fp8-torchao", 4, 4, 0, 8, 0),
])
def test_bytes_per_parameter(recipe, weights, grads, master, adam, fp8_copies):
    spec = load_model("llama-2-7b")
    est = training_memory(spec, 1, 2048, recipe)
    n = est.params_on_gpu
    c = est.components()
    assert (c["weights"], c["gradients"], c["master weights"], c["optimizer states"]) == (
        weights * n, grads * n, master * n, adam * n)
    assert c.get("FP8 weight copies", 0) == fp8_copies * n
    assert RECIPES[recipe].fp8 and RECIPES[recipe].description


def test_te_saves_linear_inputs_in_fp8():
    """The 5 linear inputs per block go from 2 to 1 byte per element; everything else is unchanged.
    Llama-2-7B, seq 2048: attention input, MLP input, O-proj input are 2048·4096 each, down-proj input
    2048·11008, per block; the saving is half of their bf16 bytes over 32 blocks."""
    spec = load_model("llama-2-7b")
    bf16 = training_memory(spec, 1, 2048, "bf16-mixed-fp32-grads").activations
    fp8 = training_memory(spec, 1, 2048, "fp8").activations
    saved = 32 * (3 * 2048 * 4096 + 2048 * 11008)  # bytes saved: one per element
    assert sum(bf16.per_layer.values()) - sum(fp8.per_layer.values()) == saved
    torchao = training_memory(spec, 1, 2048, "fp8-torchao").activations
    assert torchao.per_layer == training_memory(spec, 1, 2048, "bf16-mixed").activations.per_layer


def test_delayed_scaling_state():
    """TE (DelayedScalingRecipeState): per GEMM 5 quantizers (3 forward, 2 backward), each an fp32 scale and an
    fp32 amax history of 1024; per block 4 linear GEMMs + the 3 whose state DotProductAttention allocates.
    Current scaling and torchao's dynamic scaling keep no state."""
    spec = load_model("llama-2-7b")
    est = training_memory(spec, 1, 2048, "fp8")
    assert est.fp8_state == 32 * (4 + 3) * 5 * (1024 + 1) * 4
    assert est.peak == max(est.forward_end, est.optimizer_step)
    assert training_memory(spec, 1, 2048, "fp8-current").fp8_state == 0
    assert training_memory(spec, 1, 2048, "fp8-torchao").fp8_state == 0


def test_te_weight_copies_are_cached_across_steps():
    """Megatron passes is_first_microbatch to TE (parameter transpose cache on by default), so TE keeps the FP8
    weight and its transpose in the module between steps: they are alive at the optimizer step too."""
    est = training_memory(load_model("llama-2-7b"), 1, 2048, "fp8", optimizer_impl="fused")
    n = est.params_on_gpu
    assert est.optimizer_step == (2 + 4 + 4 + 8 + 2) * n + est.fp8_state
    torchao = training_memory(load_model("llama-2-7b"), 1, 2048, "fp8-torchao", optimizer_impl="fused")
    assert torchao.optimizer_step == (4 + 4 + 8) * torchao.params_on_gpu


def test_mfu_against_both_peaks():
    r = CliRunner().invoke(cli, ["train", "llama-2-7b", "--tokens", "1B", "--gpu", "h100-sxm", "--mfu", "0.3",
                                 "--dtype", "fp8", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    # H100 SXM dense: 989.4 TFLOP/s bf16, 1978.9 fp8 (NVIDIA datasheet): 30 % of the fp8 peak is ~60 % of bf16
    assert d["mfu_vs_fp8_peak"] == pytest.approx(0.3)
    assert d["mfu_vs_bf16_peak"] == pytest.approx(0.3 * 1978.9 / 989.4)
    table = CliRunner().invoke(cli, ["train", "llama-2-7b", "--tokens", "1B", "--gpu", "h100-sxm", "--mfu", "0.3",
                                     "--dtype", "fp8"]).output
    assert "MFU vs dense bf16 peak" in table and "MFU vs dense fp8 peak" in table
