"""FP8 GEMMs on AMD Instinct (CDNA 3: MI300X, MI325X; CDNA 4: MI355X) as measured: their compute rate by rows.

The step model's GEMM (kernels.gemm_timer, serving_speed.StepCost.linear_seconds) is a smooth roofline of a compute
time at the maximum achievable matmul rate (MAMF, rows padded to whole tiles) and the bytes at the achievable HBM
bandwidth. On NVIDIA the MAMF and the tile model come from measurements (mamf-finder, DeepGEMM's H800 table). No FP8
MAMF has been published for CDNA (ml-engineering's table has BF16 rows only), and twice the BF16 MAMF (MI300X: 2 x
668.4 = 1,337 TFLOP/s) is not what FP8 GEMMs reach there: AMD's own kernel library measures far less, and much less
again at the tens to hundreds of rows a decode step multiplies.

``FP8_COMPUTE_TFLOPS``: the compute rate of FP8 GEMMs by rows M, from AITER's tuned-GEMM tables (github.com/ROCm/
aiter @e404860, 2026-08-22, MIT license; aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_{qwen36_27b,
qwen3_vl_32b,ds_v3}.csv for gfx942 with 304 CUs = MI300X; aiter/configs/a8w8_blockscale_tuned_gemm.csv and the
model_configs files for gfx950 with 256 CUs = MI355X): each row is the time (us) AITER measured for the fastest of
its FP8 (block-scaled, 1 x 128 / 128 x 128) kernels at that (M, N, K). ``benchmarks/extract_aiter_gemm.py`` keeps the
shapes of >= 20 M weight elements (16 shapes each, N x K from 4,096 x 5,120 to 25,600 x 5,120), takes from each
time its HBM part on the smooth roofline, t_c = (t^p - t_m^p)^(1/p) (p = kernels.ROOFLINE_P, bytes at 0.9 x the
datasheet bandwidth), and gives the median compute rate 2·M·N·K / t_c over the shapes. MI300X: 194 TFLOP/s at 64
rows, 401 at 256, 838 at 16,384 (32 % of the 2,614.9 FP8 peak); for a Llama-3.1-405B decode step at 256 sequences
on 8 GPUs that is 65 ms of GEMMs where 2 x the BF16 MAMF gave 19 ms.

Assumptions, stated: vLLM's per-tensor and per-channel FP8 GEMMs on ROCm (hipBLASLt, or AITER's CK kernels) run at
the block-scaled kernels' measured rates (the only FP8 rates AITER measured on a 304-CU MI300X); MI325X is the
MI300X die (304 CUs, the same kernels; its higher power limit is left out); below 64 rows the rate stays at its
64-row value (there the measured times are bound by each kernel's fixed latency and by weights that AITER's tuning
loop reads from MI300X's 256 MB Infinity Cache, neither of which is compute: the step model keeps the weights' HBM
reads and the per-layer floor as their own terms).
"""

from __future__ import annotations

import math

# {arch: ((rows M, compute TFLOP/s), ...)}: benchmarks/extract_aiter_gemm.py's output (module docstring)
FP8_COMPUTE_TFLOPS = {
    "cdna3": ((64, 194.0), (128, 322.0), (256, 401.0), (512, 498.0), (1024, 611.0), (2048, 755.0), (4096, 806.0),
              (8192, 833.0), (16384, 838.0)),
    "cdna4": ((64, 326.0), (128, 546.0), (256, 710.0), (512, 911.0), (1024, 1071.0), (2048, 1169.0),
              (4096, 1339.0), (8192, 1821.0), (16384, 1910.0)),
}


def has_fp8_rates(arch: str) -> bool:
    """Whether FP8 GEMMs on this generation take the measured rates below (CDNA 3 and 4)."""
    return arch in FP8_COMPUTE_TFLOPS


def fp8_compute_rate(arch: str, rows: float) -> float:
    """FLOP/s of an FP8 GEMM's compute on `arch` at `rows` rows: FP8_COMPUTE_TFLOPS linear in log(rows) between the
    measured row counts, held at the first below it and at the last above it (module docstring)."""
    table = FP8_COMPUTE_TFLOPS[arch]
    if rows <= table[0][0]:
        return table[0][1] * 1e12
    if rows >= table[-1][0]:
        return table[-1][1] * 1e12
    for (m0, r0), (m1, r1) in zip(table, table[1:], strict=False):
        if rows <= m1:
            w = math.log(rows / m0) / math.log(m1 / m0)
            return (r0 + w * (r1 - r0)) * 1e12
    return table[-1][1] * 1e12
