"""What `--dtype` means for a predicted training step, and the peaks its MFU is quoted against.

`--dtype` names the dense peak MFU is quoted against (`train`, `plan`, `layout`). Where llmcalc also times the
step (`train --global-batch`, `layout`), a run whose peak is FP8 is an FP8 run: without `--recipe`, `--dtype`
picks the recipe whose GEMMs run in that dtype, and says which (`recipe_for_dtype`). For FP8 that is Transformer
Engine's own default, the recipe `te.fp8_autocast()` (`te.autocast()`) uses when given none:
``get_default_fp8_recipe`` returns ``MXFP8BlockScaling()`` where MXFP8 is supported (compute capability >= 10.0,
Blackwell) and ``DelayedScaling()`` otherwise (NVIDIA/TransformerEngine, transformer_engine/pytorch/quantization.py,
``get_default_fp8_recipe``; fp8.py before TE 2.8). Megatron-LM's ``--fp8-recipe`` also defaults to ``delayed``
(megatron/training/arguments.py) on Hopper.

MFU has two conventions for a low-precision run (torchtitan#560; NVIDIA's Megatron performance tables quote
model TFLOP/s per GPU, which readers divide by the BF16 peak): against the peak of the dtype its GEMMs run in
(the recipe's own: FP8 5 PFLOP/s on GB300) and against the BF16 peak, which compares with BF16 runs and exceeds
100 % where an FP8 or FP4 run beats the BF16 peak. A prediction is never refused for it (`mfu_conventions`); a
given `--mfu` keeps its (0, 1] check (`validate.fraction`).
"""

from __future__ import annotations

from ..errors import LlmcalcError
from ..hardware import Accelerator

# The recipe whose GEMMs run in each --dtype (memory.RECIPES: gemm_dtype). fp8 depends on the generation
# (default_fp8_recipe); a dtype missing here has no training recipe that llmcalc times from --dtype alone.
DTYPE_RECIPES = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "fp32": "fp32", "tf32": "fp32"}
# Transformer Engine's default FP8 recipe by generation (quantization.py:get_default_fp8_recipe): MXFP8 where the
# tensor cores take block-scaled FP8 (Blackwell, sm100+), per-tensor delayed scaling elsewhere (Hopper, Ada; on
# ROCm TE's default is the same DelayedScaling).
MXFP8_ARCHS = ("blackwell", "blackwell-ultra")
FP8_DEFAULT = {"mxfp8": "mxfp8 (Transformer Engine's default FP8 recipe on Blackwell: MXFP8BlockScaling)",
               "fp8": "fp8 (Transformer Engine's default FP8 recipe before Blackwell: DelayedScaling)"}
# The dense peak a recipe's GEMM dtype is quoted against (memory.Recipe.gemm_dtype -> the preset's dense_tflops key):
# the step model times fp32 GEMMs on the TF32 tensor cores (kernels.Device.gemm_rate).
GEMM_PEAK = {"fp8": "fp8", "fp4": "fp4", "fp16": "fp16", "bf16": "bf16", "fp32": "tf32"}


def default_fp8_recipe(arch: str) -> str:
    """Transformer Engine's default FP8 recipe on a GPU generation (`kernels.GENERATIONS`): mxfp8 on Blackwell,
    fp8 (delayed scaling) before it."""
    return "mxfp8" if arch in MXFP8_ARCHS else "fp8"


def recipe_for_dtype(dtype: str, gpu: str | None) -> tuple[str, str | None]:
    """The recipe a run is sized and timed with when `--dtype` is given and `--recipe` is not: (recipe, the line
    that says which, or None where it is the default bf16-mixed). A dtype without a training recipe, and fp8
    without a GPU to pick Transformer Engine's default for, are refused with the fix."""
    if dtype == "fp8":
        from ..spec import hardware_config

        if gpu is None:
            raise LlmcalcError("--dtype fp8 picks Transformer Engine's default FP8 recipe, which depends on the GPU: "
                               "give --gpu, or --recipe fp8 (delayed scaling, Hopper's default) or mxfp8 "
                               "(Blackwell's)")
        arch = str(hardware_config(gpu).get("matmul", {}).get("arch", "hopper"))
        fp8 = default_fp8_recipe(arch)
        return fp8, (f"--dtype fp8 without --recipe: recipe {FP8_DEFAULT[fp8]} on {gpu}; "
                        f"--recipe fp8, fp8-current, fp8-blockwise or mxfp8 sets another")
    recipe = DTYPE_RECIPES.get(dtype)
    if recipe is None:
        raise LlmcalcError(f"--dtype {dtype}: no training recipe llmcalc sizes and times runs its GEMMs in {dtype}; "
                           f"give --recipe (e.g. bf16-mixed or fp8) with it, or --dtype bf16, fp16, fp32 or fp8")
    tf32 = " (its GEMMs at the TF32 tensor-core rate)" if recipe == "fp32" else ""
    return recipe, (None if recipe == "bf16-mixed" else
                    f"--dtype {dtype} without --recipe: recipe {recipe}{tf32}; --recipe sets another")


def gemm_peak(accelerator: Accelerator, gemm_dtype: str, fp4_peak: float = 0.0) -> tuple[str, float] | None:
    """(dtype, dense FLOP/s) of the peak a recipe's GEMM dtype runs at; FP4's from the kernel model's device
    (`kernels.Device.fp4_peak`: the preset's dense fp4, which `Accelerator` does not list); None where unknown."""
    key = GEMM_PEAK.get(gemm_dtype)
    if key == "fp4":
        return ("fp4", fp4_peak) if fp4_peak > 0 else None
    if key is None or key not in accelerator.peak_flops:
        return None
    return key, accelerator.peak_flops[key]


def mfu_conventions(model_flops_per_s: float, accelerator: Accelerator, dtype: str,
                    recipe_peak: tuple[str, float] | None) -> dict[str, float]:
    """MFU = model FLOP/s per GPU / a dense peak, for each peak a run's MFU is quoted against, in order: the
    --dtype peak, the BF16 peak, the recipe's GEMM peak (each once). Values may exceed 1 (an FP4 run against the
    BF16 peak): a convention, not a range to check."""
    peaks: dict[str, float] = {dtype: accelerator.peak(dtype)}
    if "bf16" in accelerator.peak_flops:
        peaks.setdefault("bf16", accelerator.peak_flops["bf16"])
    if recipe_peak is not None:
        peaks.setdefault(*recipe_peak)
    return {key: model_flops_per_s / peak for key, peak in peaks.items()}


def step_recipe(dtype: str | None, gpu: str | None, step: dict) -> tuple[dict, list[str]]:
    """The step model's options (`step`, as typed) with the recipe `--dtype` names where --recipe is not typed
    (`recipe_for_dtype`), and the line that says which; `dtype` None (not typed) or bf16 (the default recipe):
    `step` unchanged."""
    if dtype is None or step.get("recipe") is not None:
        return step, []
    recipe, note = recipe_for_dtype(dtype, gpu)
    if note is None:  # bf16: the default recipe, nothing to say
        return step, []
    return {**step, "recipe": recipe}, [note]
