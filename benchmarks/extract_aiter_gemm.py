"""Derive llmcalc's CDNA FP8 GEMM compute rates (llmcalc/analytic/cdna.py) from AMD AITER's tuned-GEMM tables.

AITER (github.com/ROCm/aiter, MIT license) ships, per GPU, the kernel it picked for each GEMM shape and the time it
measured for it (aiter/configs/**/a8w8_blockscale_tuned_gemm*.csv: gfx, cu_num, M, N, K, ..., us, kernelName,
tflops, bw). This script reads those CSVs (give their paths; a checkout of ROCm/aiter), keeps one GPU's rows
(gfx942 with 304 CUs = MI300X / MI325X; gfx950 with 256 CUs = MI355X) of at least 64 rows for the shapes of at least
20 M weight elements, takes from each measured time the part left after the weights' and activations' HBM time on
llmcalc's smooth roofline, t_c = (t^p - t_m^p)^(1/p) (kernels.ROOFLINE_P, the achievable bandwidth 0.9 x the
datasheet's: kernels.HBM_EFFICIENCY), and prints the median compute rate 2·M·N·K / t_c in TFLOP/s by the GEMM's
output elements M·N (bins of powers of two, those with at least 20 points): the rate follows the output's size
(its tiles over the CUs), whatever the split between rows and columns.

    python benchmarks/extract_aiter_gemm.py gfx942 304 5300 aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_*.csv
    python benchmarks/extract_aiter_gemm.py gfx950 256 8000 aiter/configs/a8w8_blockscale_tuned_gemm.csv \
        aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_*.csv

Standard library only; run by hand when the tables move, its output pasted into cdna.py with the commit read.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections import defaultdict

MIN_WEIGHTS = 20e6
MIN_ROWS = 64
MIN_POINTS = 20
P = 1.5


def rates(gfx: str, cus: int, hbm_gbs: float, paths: list[str]) -> dict[int, float]:
    """{log2(M·N): median compute TFLOP/s} (module docstring)."""
    best: dict[tuple[int, int, int], float] = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("gfx") != gfx or int(row["cu_num"]) != cus:
                    continue
                m, n, k, us = int(row["M"]), int(row["N"]), int(row["K"]), float(row["us"])
                if n * k >= MIN_WEIGHTS and m >= MIN_ROWS:
                    best[(m, n, k)] = min(us, best.get((m, n, k), us))
    hbm = 0.9 * hbm_gbs * 1e9
    bins: dict[int, list[float]] = defaultdict(list)
    for (m, n, k), us in best.items():
        t, tm = us * 1e-6, (n * k + m * k + 2 * m * n) / hbm
        if t > tm:
            bins[round(math.log2(m * n))].append(2 * m * n * k / (t ** P - tm ** P) ** (1 / P) / 1e12)
    out = {b: statistics.median(v) for b, v in sorted(bins.items()) if len(v) >= MIN_POINTS}
    for b, r in out.items():
        print(f"M·N = 2^{b}: {r:7.0f} TFLOP/s (median of {len(bins[b])} points)")
    return out


if __name__ == "__main__":
    rates(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
