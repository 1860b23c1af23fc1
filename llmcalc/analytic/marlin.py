"""Marlin, the W4A16 GEMM kernel vLLM runs 4-bit weights with where the GPU has no FP4 tensor cores (Ampere), from
its published measurements: its compute ceiling (``marlin_rate``) and its 16-row blocks (``marlin_row_efficiency``),
and which of a model's GEMMs run it (``w4a16_gemms``); read by serving_speed.StepCost.linear_seconds."""

from __future__ import annotations

import math

from .inference import InferenceEstimate
from .kernels import Device

# Marlin (IST-DASLab/marlin), the W4A16 kernel vLLM runs 4-bit weights with where the GPU has no FP4 tensor cores:
# gptq_marlin / awq_marlin for dense layers, its fused MoE (fused_marlin_moe) for experts, and the MXFP4 experts of
# gpt-oss on SM80 (vllm/model_executor/layers/quantization/mxfp4.py get_mxfp4_backend: Marlin, the fallback where
# neither FlashInfer's SM90/SM100 paths nor Triton's matmul_ogs apply). It dequantizes the 4-bit weights into 16-bit
# tensor-core MMAs inside the kernel, and its tile holds at most 64 rows: "for batchsizes > 64, it will just run the
# batch 64 kernel repeatedly" (E. Frantar, IST-DASLab/marlin issue #2), dequantizing the weights again for every
# 64 rows, so its compute ceiling sits under the dense GEMM's. Measured (IST-DASLab/marlin bench.py, vllm-project/vllm
# PR #2497, comment of 2024-01-24): 139.7-141.4 TFLOP/s from batch 64 to 4,000, torch.matmul's FP16 GEMM 1/0.60-1/0.74
# times as fast there. The comment names no GPU; that FP16 GEMM, 141.4 / 0.60 = 236 TFLOP/s, is an A100's (SM80, 312
# TFLOP/s dense peak; an H100 runs it ~3x faster, Ampere/Ada workstation cards' FP32-accumulate peaks sit below it).
# Its share of the A100's dense 16-bit peak:
MARLIN_PEAK_SHARE = 141.4 / 312.0
MARLIN_ARCHS = ("ampere",)  # where it was measured (Hopper runs Machete / Triton's matmul_ogs for these weights)
MARLIN_ROW_BLOCK = 16  # rows per m-block (marlin_row_efficiency)
W4A16_DTYPES = ("int4", "mxfp4", "nvfp4")  # 4-bit weights with 16-bit activations there (no FP4 tensor cores)


def marlin_rate(dev: Device) -> float:
    """Marlin's W4A16 compute ceiling on `dev`, FLOP/s: MARLIN_PEAK_SHARE x the dense 16-bit peak (A100: 141.4
    TFLOP/s, vLLM PR #2497's bench.py run), capped at the device's own 16-bit MAMF."""
    return min(dev.gemm_rate("bf16"), MARLIN_PEAK_SHARE * dev.accelerator.peak("bf16"))


def w4a16_gemms(est: InferenceEstimate, dev: Device) -> tuple[bool, bool]:
    """(dense layers, experts): which GEMMs of `est` run Marlin's W4A16 kernel on `dev` (``MARLIN_ARCHS``): those
    whose weights are 4-bit (``W4A16_DTYPES``) with 16-bit activations; a checkpoint that quantizes only its experts
    (gpt-oss's MXFP4: quant.Quantization.experts_only) runs its attention projections as 16-bit GEMMs."""
    if dev.arch not in MARLIN_ARCHS or est.weight_dtype not in W4A16_DTYPES or est.compute_dtype in ("fp8", "fp4"):
        return False, False
    fmt = est.weight_format
    experts_only = fmt is not None and fmt.quant is not None and fmt.quant.experts_only
    return not experts_only, est.spec.is_moe


def marlin_row_efficiency(rows: float) -> float:
    """The useful share of Marlin's row blocks: `rows` padded to whole blocks of MARLIN_ROW_BLOCK (marlin.cu: a
    thread block holds 1 to 4 m-blocks of 16 rows; more than 64 rows run the 64-row kernel again; vLLM's
    fused_marlin_moe pads each expert's rows alike), so a decode GEMM of a few rows reads the 4-bit weights and
    little else: bench.py's batch 1 to 16 all 0.14 ms on A100 (vLLM PR #2497), 3.1 x the FP16 GEMM's speed."""
    return rows / (MARLIN_ROW_BLOCK * math.ceil(rows / MARLIN_ROW_BLOCK))


def marlin_words(est: InferenceEstimate, dev: Device) -> str:
    """What the step assumed of Marlin for `est` on `dev`, in words ("" where no GEMM runs it: ``w4a16_gemms``)."""
    dense, experts = w4a16_gemms(est, dev)
    if not (dense or experts):
        return ""
    which = "the layers' and experts'" if dense and experts else "the experts'" if experts else "the layers'"
    return (f"{which} 4-bit GEMMs run the Marlin W4A16 kernel (no FP4 tensor cores here): "
            f"{marlin_rate(dev) / 1e12:.0f} TFLOP/s at most (measured on A100, vLLM PR #2497), rows in blocks of "
            f"{MARLIN_ROW_BLOCK}")
