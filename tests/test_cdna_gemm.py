"""FP8 GEMMs on AMD Instinct (llmcalc/analytic/cdna_gemm.py) held to AITER's measured kernel times, and the serving
step that reads them held to published MI300X runs."""

import statistics

import pytest

from llmcalc.analytic import cdna_gemm
from llmcalc.analytic.kernels import HBM_EFFICIENCY
from llmcalc.analytic.serving_speed import smooth_roofline

# AITER's measured FP8 (block-scaled) GEMM times, github.com/ROCm/aiter @e404860 (MIT), rows "gfx, cu_num, M, N, K,
# ..., us": MI300X (gfx942, 304 CUs, 5.3 TB/s) from aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen36_27b.csv
# (N = 8,192 and 17,408) and ..._qwen3_vl_32b.csv (N = 25,600); MI355X (gfx950, 256 CUs, 8 TB/s) from
# aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv. Two shapes each near the table's median and its
# extremes at the same rows (the table is one median over 16 shapes; wide ones run faster at few rows, K = 1,536 runs
# slower at many).
MEASURED = [  # (arch, datasheet HBM GB/s, M, N, K, us)
    ("cdna3", 5300, 256, 8192, 5120, 53.1088), ("cdna3", 5300, 1024, 8192, 5120, 123.0092),
    ("cdna3", 5300, 16384, 8192, 5120, 1653.0537), ("cdna3", 5300, 256, 17408, 5120, 83.4581),
    ("cdna3", 5300, 1024, 25600, 5120, 361.022), ("cdna3", 5300, 16384, 25600, 5120, 5095.2003),
    ("cdna4", 8000, 256, 7168, 16384, 89.7873), ("cdna4", 8000, 1024, 7168, 16384, 216.3222),
    ("cdna4", 8000, 16384, 7168, 16384, 1682.9186), ("cdna4", 8000, 256, 14336, 1536, 17.292),
    ("cdna4", 8000, 1024, 14336, 1536, 54.4605), ("cdna4", 8000, 16384, 14336, 1536, 643.287),
]


def _error(arch: str, hbm: float, m: int, n: int, k: int, us: float) -> float:
    """The step model's FP8 GEMM time on CDNA (the measured compute rate by rows on the smooth roofline, operand and
    result bytes at the achievable bandwidth) over AITER's measured time, - 1."""
    compute = 2 * m * n * k / cdna_gemm.fp8_compute_rate(arch, m)
    memory = (n * k + m * k + 2 * m * n) / (hbm * 1e9 * HBM_EFFICIENCY)
    return smooth_roofline(compute, memory) / (us * 1e-6) - 1


def test_fp8_gemm_times_match_aiters_measurements():
    """Each shape within 45 % of AITER's time (the spread over all 48 MI300X and 48 MI355X points the table reads is
    -17..+43 % and -38..+46 %), the median |error| of these within 15 %."""
    errors = [_error(*row) for row in MEASURED]
    assert all(abs(e) < 0.45 for e in errors), errors
    assert statistics.median(abs(e) for e in errors) < 0.15, errors


def test_fp8_rates_rise_with_rows_and_stay_below_the_peak():
    """MI300X's FP8 GEMMs reach 838 TFLOP/s at 16k rows (32 % of its 2,614.9 TFLOP/s FP8 peak, 63 % of twice its
    668.4 BF16 MAMF) and about half of that at a decode step's 256 rows; held flat outside the measured rows."""
    rates = [cdna_gemm.fp8_compute_rate("cdna3", m) for m in (1, 64, 100, 256, 1000, 16384, 1e6)]
    assert rates == sorted(rates)
    assert rates[0] == rates[1] and rates[-1] == rates[-2] == pytest.approx(838e12)
    assert rates[3] == pytest.approx(401e12)
    assert not cdna_gemm.has_fp8_rates("hopper") and not cdna_gemm.has_fp8_rates("blackwell")
