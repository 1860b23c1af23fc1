"""Derive llmcalc's CDNA FP8 GEMM compute rates (llmcalc/analytic/cdna_gemm.py) from AMD AITER's tuned-GEMM tables.

AITER (github.com/ROCm/aiter, MIT license) ships, per GPU, the kernel it picked for each GEMM shape and the time it
measured for it (aiter/configs/**/a8w8_blockscale_tuned_gemm*.csv: gfx, cu_num, M, N, K, ..., us, kernelName,
tflops, bw). This script reads those CSVs (give their paths; a checkout of ROCm/aiter), keeps one GPU's rows
(gfx942 with 304 CUs = MI300X / MI325X; gfx950 with 256 CUs = MI355X) for the shapes of at least 20 M weight
elements (a 405B or 70B model's tensor-parallel shards are larger still), takes from each measured time the part
left after the weights' and activations' HBM time on llmcalc's smooth roofline, t_c = (t^p - t_m^p)^(1/p)
(kernels.ROOFLINE_P, the achievable bandwidth 0.9 x the datasheet's: kernels.HBM_EFFICIENCY), and prints, by rows
M, the median compute rate over those shapes in TFLOP/s:

    python benchmarks/extract_aiter_gemm.py gfx942 304 5300 aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_*.csv
    python benchmarks/extract_aiter_gemm.py gfx950 256 8000 aiter/configs/a8w8_blockscale_tuned_gemm.csv \
        aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_*.csv

Standard library only; run by hand when the tables move, its output pasted into cdna_gemm.py with the commit read.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict

ROWS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MIN_WEIGHTS = 20e6
P = 1.5


def rates(gfx: str, cus: int, hbm_gbs: float, paths: list[str]) -> dict[int, float]:
    """{M: median compute TFLOP/s} over the shapes of >= MIN_WEIGHTS weight elements (module docstring)."""
    best: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("gfx") != gfx or int(row["cu_num"]) != cus:
                    continue
                m, n, k, us = int(row["M"]), int(row["N"]), int(row["K"]), float(row["us"])
                if n * k >= MIN_WEIGHTS:
                    shape = best[(n, k)]
                    shape[m] = min(us, shape.get(m, us))
    hbm = 0.9 * hbm_gbs * 1e9
    out: dict[int, float] = {}
    for m in ROWS:
        found = []
        for (n, k), times in best.items():
            if m in times:
                t, tm = times[m] * 1e-6, (n * k + m * k + 2 * m * n) / hbm
                if t > tm:
                    found.append(2 * m * n * k / (t ** P - tm ** P) ** (1 / P) / 1e12)
        if found:
            out[m] = statistics.median(found)
            print(f"M={m:>6}: {out[m]:7.0f} TFLOP/s (median of {len(found)} shapes)")
    return out


if __name__ == "__main__":
    rates(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
