"""AMD Instinct kernels (llmcalc/analytic/cdna.py) held to their published measurements: FP8 GEMMs to AITER's
measured times, vLLM's custom all-reduce on the xGMI mesh to vLLM's kernel benchmarks on MI300 and MI355X."""

import statistics

import pytest

from llmcalc.analytic import cdna
from llmcalc.analytic.kernels import HBM_EFFICIENCY, device_for
from llmcalc.analytic.serving_speed import smooth_roofline
from llmcalc.spec import load_model

# AITER's measured FP8 (block-scaled) GEMM times, github.com/ROCm/aiter @e404860 (MIT), rows "gfx, cu_num, M, N, K,
# ..., us": MI300X (gfx942, 304 CUs, 5.3 TB/s) from
# aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen36_27b.csv (N = 8,192 and 17,408) and
# ..._qwen3_vl_32b.csv (N = 25,600); MI355X (gfx950, 256 CUs, 8 TB/s) from
# aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv: shapes near their output size's median and
# its extremes (MI355X's rate follows the depth K too).
MEASURED = [  # (arch, datasheet HBM GB/s, M, N, K, us)
    ("cdna3", 5300, 256, 8192, 5120, 53.1088), ("cdna3", 5300, 1024, 8192, 5120, 123.0092),
    ("cdna3", 5300, 16384, 8192, 5120, 1653.0537), ("cdna3", 5300, 256, 17408, 5120, 83.4581),
    ("cdna3", 5300, 1024, 25600, 5120, 361.022), ("cdna3", 5300, 16384, 25600, 5120, 5095.2003),
    ("cdna4", 8000, 256, 7168, 16384, 89.7873), ("cdna4", 8000, 1024, 7168, 16384, 216.3222),
    ("cdna4", 8000, 16384, 7168, 16384, 1682.9186), ("cdna4", 8000, 256, 14336, 1536, 17.292),
    ("cdna4", 8000, 1024, 14336, 1536, 54.4605), ("cdna4", 8000, 16384, 14336, 1536, 643.287),
]


def _error(arch: str, hbm: float, m: int, n: int, k: int, us: float) -> float:
    """The step model's FP8 GEMM time on CDNA (the measured compute rate by output size on the smooth roofline,
    operand and result bytes at the achievable bandwidth) over AITER's measured time, - 1."""
    compute = 2 * m * n * k / cdna.fp8_compute_rate(arch, m * n)
    memory = (n * k + m * k + 2 * m * n) / (hbm * 1e9 * HBM_EFFICIENCY)
    return smooth_roofline(compute, memory) / (us * 1e-6) - 1


def test_fp8_gemm_times_match_aiters_measurements():
    """The table is one median over many shapes per output size: MI300X's shapes within 10 % of AITER's time; MI355X's
    spread wider, its rate following the depth K too (7,168 x 16,384 x 16,384 runs at 2,290 TFLOP/s where its bin's
    median is 1,526: predicted +52 %; K = 1,536 slower than the median, -13 % to -27 %), within 55 %; the median
    |error| of all these within 10 %."""
    errors = [_error(*row) for row in MEASURED]
    assert all(abs(e) < (0.10 if row[0] == "cdna3" else 0.55) for e, row in zip(errors, MEASURED, strict=True)), errors
    assert statistics.median(abs(e) for e in errors) < 0.10, errors


def test_fp8_rates_follow_the_output_size():
    """MI300X's FP8 GEMMs reach 828 TFLOP/s from 2^26 output elements (32 % of its 2,614.9 TFLOP/s FP8 peak, 62 % of
    twice its 668.4 BF16 MAMF) and 337 at 2^20 (64 decode rows x 16,384 columns); held flat outside the measured
    sizes; NVIDIA generations have none (their GEMMs keep the MAMF and tile model)."""
    rates = [cdna.fp8_compute_rate("cdna3", x) for x in (1, 2 ** 19, 2 ** 20, 3e6, 2 ** 26, 2 ** 31, 1e12)]
    assert rates[0] == rates[1] == pytest.approx(253e12) and rates[2] == pytest.approx(337e12)
    assert rates[4] == pytest.approx(824e12) and rates[-1] == rates[-2] == pytest.approx(825e12)
    assert not cdna.has_fp8_rates("hopper") and not cdna.has_fp8_rates("blackwell")


def test_layer_columns_fuse_and_split_as_vllm():
    """Llama 3.1 405B over 8 ranks: QKV (128 + 2 x 8 heads of 128) / 8 = 2,304 columns, O 16,384, gate and up
    2 x 53,248 / 8 = 13,312, down 16,384; their weights sum to the layer's linear weights over 8."""
    spec = load_model("llama-3.1-405b")
    cols = cdna.layer_columns(spec, 8)
    assert [n for n, _ in cols] == [2304, 16384, 13312, 16384]
    weights = (16384 * (128 + 16) * 128 + 16384 * 16384 + 3 * 16384 * 53248) / 8
    assert sum(w for _, w in cols) == pytest.approx(weights)


# vLLM's custom all-reduce measured on AMD Instinct, us by message bytes: vllm-project/vllm PR #19744 (2025-06-17,
# "[Feature][Rocm] add quick all reduce for rocm", kernel benchmark "TP=4", its "baseline" column, MI300) and PR #39080
# (2026-04-06, "[ROCM] Optimize all-reduce performances", "TP8 (bf16, dim=3072)", its "vllm/us" column, MI355X).
ALLREDUCE = [  # (preset, tp, bytes, us)
    ("mi300x", 4, 2 * 1024, 7.18), ("mi300x", 4, 16 * 1024, 7.26), ("mi300x", 4, 256 * 1024, 14.39),
    ("mi300x", 4, 512 * 1024, 14.65), ("mi300x", 4, 1024 ** 2, 22.91), ("mi300x", 4, 2 * 1024 ** 2, 36.64),
    ("mi300x", 4, 4 * 1024 ** 2, 63.86), ("mi300x", 4, 8 * 1024 ** 2, 118.31),
    ("mi355x", 8, 24 * 1024, 6.3), ("mi355x", 8, 48 * 1024, 6.7), ("mi355x", 8, 96 * 1024, 7.6),
    ("mi355x", 8, 192 * 1024, 10.0), ("mi355x", 8, 384 * 1024, 13.1), ("mi355x", 8, 768 * 1024, 16.0),
    ("mi355x", 8, 1536 * 1024, 24.2),
]


@pytest.mark.parametrize(("gpu", "tp", "nbytes", "us"), ALLREDUCE)
def test_custom_allreduce_matches_vllms_rocm_benchmarks(gpu, tp, nbytes, us):
    """One- and two-stage custom all-reduce over the preset's xGMI links: the MI300 table (its source of the link's
    share and the latencies) within 12 %, MI355X's eight GPUs (the same constants, its own links) within 40 %
    (predicted 15 % to 34 % faster above 192 KB, at 1.5 MB 17 against 24 us)."""
    link = device_for(gpu).network.link_bandwidth
    got = cdna.custom_allreduce_seconds(nbytes, tp, link)
    assert got == pytest.approx(us * 1e-6, rel=0.12 if gpu == "mi300x" else 0.40)
