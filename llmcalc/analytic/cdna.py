"""AMD Instinct (CDNA 3: MI300X, MI325X; CDNA 4: MI355X) kernels as measured: FP8 GEMMs' compute rate by rows, and
vLLM's custom all-reduce over the Infinity Fabric mesh.

The step model's GEMM (kernels.gemm_timer, serving_speed.StepCost.linear_seconds) is a smooth roofline of a compute
time at the maximum achievable matmul rate (MAMF, rows padded to whole tiles) and the bytes at the achievable HBM
bandwidth. On NVIDIA the MAMF and the tile model come from measurements (mamf-finder, DeepGEMM's H800 table). No FP8
MAMF has been published for CDNA (ml-engineering's table has BF16 rows only), and twice the BF16 MAMF (MI300X: 2 x
668.4 = 1,337 TFLOP/s) is not what FP8 GEMMs reach there: AMD's own kernel library measures far less, and much less
again at the tens to hundreds of rows a decode step multiplies.

``FP8_TFLOPS_BY_OUTPUT``: the compute rate of FP8 GEMMs by the size of their output, M·N elements, from AITER's
tuned-GEMM tables (github.com/ROCm/aiter @e404860, 2026-08-22, MIT license; aiter/configs/model_configs/
a8w8_blockscale_tuned_gemm_{qwen36_27b,qwen3_vl_32b,qwen3_vl_235b,glm5_1,ds_v3}.csv for gfx942 with 304 CUs =
MI300X; aiter/configs/a8w8_blockscale_tuned_gemm.csv and the same model_configs files for gfx950 with 256 CUs =
MI355X): each row is the time (us) AITER measured for the fastest of its FP8 (block-scaled, 1 x 128 / 128 x 128)
kernels at that (M, N, K). ``benchmarks/extract_aiter_gemm.py`` keeps the shapes of >= 20 M weight elements and >= 64
rows, takes from each time its HBM part on the smooth roofline, t_c = (t^p - t_m^p)^(1/p) (p = kernels.ROOFLINE_P,
bytes at 0.9 x the datasheet bandwidth), and gives the median compute rate 2·M·N·K / t_c in bins of M·N (powers of
two with >= 20 points). The rate follows the output's size, however it splits into rows and columns (MI300X at 2^20
outputs: 64 x 17,408 rows x columns reach 0.48 of the plateau, 128 x 8,704 0.50, 256 x 4,096 0.47; the middle half of
each bin within +-10 %): its tiles spread over the CUs. MI300X: 253 TFLOP/s at 2^19 outputs (a decode step of 64
sequences through an 8,192-column GEMM), 567 at 2^22, 828 from 2^26 on (32 % of the 2,614.9 FP8 peak, where twice
the BF16 MAMF gave 1,337).

``stack_rate`` applies it to a layer's GEMMs as vLLM fuses and splits them over tensor parallelism (QKV in one
column-parallel GEMM, gate and up in one, O and down row-parallel: ``layer_columns``), each at its own output size.

Assumptions, stated: vLLM's per-tensor and per-channel FP8 GEMMs on ROCm (hipBLASLt, or AITER's CK kernels) run at
the block-scaled kernels' measured rates (the only FP8 rates AITER measured on a 304-CU MI300X); MI325X is the
MI300X die (304 CUs, the same kernels; its higher power limit is left out); outside the measured sizes the rate stays
at the nearest bin's (below 2^19 outputs the measured times are bound by each kernel's fixed latency and by weights
that AITER's tuning loop reads from MI300X's 256 MB Infinity Cache, neither of which is compute: the step model keeps
the weights' HBM reads and the per-layer floor as their own terms).

``custom_allreduce_seconds``: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, hipified for ROCm) on a fully
connected xGMI mesh, where each GPU has one link to each peer (64 GB/s per direction on MI300X/MI325X, 76.5 on
MI355X; presets' network.link_gb_per_s). Its one-stage kernel has every rank read each peer's whole buffer, S bytes
over each link at once: t = latency + S / link; the two-stage one reduce-scatters then all-gathers, S/tp over each
link twice: t = latency_2 + 2·S / (tp·link). vLLM runs one stage below 512 KB at tp <= 4 and below 64 KB at tp 8
on ROCm (vllm-project/vllm PR #39080, 2026-04-06, its "Before" column: "algo threshold (TP<=4) | 1stage if
bytes<512KB", "(TP<=8) | 1stage if bytes<=64KB"). The link's share and the latencies are read from vLLM's own
kernel benchmark on MI300 at tp 4 (PR #19744 "[Feature][Rocm] add quick all reduce for rocm", 2025-06-17, its
"baseline" column, us: 2 KB 7.18, 16 KB 7.26, 256 KB 14.39, 512 KB 14.65, 1 MB 22.91, 2 MB 36.64, 4 MB 63.86,
8 MB 118.31): one stage 7.2 us at a few KB; the two-stage slope from 4 to 8 MB, 13.6 us per MB = 2 / (4 x 38.5
GB/s), a link at 38.5 of its 64 GB/s (60 %; RCCL's measured share is "approximately 48 GB/s per link ... about 75 %",
AMD ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X"); the two-stage latency
what is left at 4 MB, 9.4 us. The other link speeds at the same share.
"""

from __future__ import annotations

import math

from ..spec import ModelSpec

# {arch: ((log2 of the output elements M·N, compute TFLOP/s), ...)}: benchmarks/extract_aiter_gemm.py's output
FP8_TFLOPS_BY_OUTPUT = {
    "cdna3": ((19, 253.0), (20, 337.0), (21, 435.0), (22, 567.0), (23, 683.0), (24, 765.0), (25, 808.0),
              (26, 824.0), (27, 828.0), (28, 821.0), (29, 826.0), (30, 828.0), (31, 825.0)),
    "cdna4": ((19, 372.0), (20, 514.0), (21, 681.0), (22, 867.0), (23, 1045.0), (24, 1232.0), (25, 1341.0),
              (26, 1441.0), (27, 1526.0), (28, 1558.0), (29, 2095.0)),
}


def has_fp8_rates(arch: str) -> bool:
    """Whether FP8 GEMMs on this generation take the measured rates below (CDNA 3 and 4)."""
    return arch in FP8_TFLOPS_BY_OUTPUT


def fp8_compute_rate(arch: str, outputs: float) -> float:
    """FLOP/s of an FP8 GEMM's compute on `arch` with `outputs` = M·N output elements: FP8_TFLOPS_BY_OUTPUT linear in
    log2(outputs) between its bins, held at the first below them and at the last above (module docstring)."""
    table = FP8_TFLOPS_BY_OUTPUT[arch]
    x = math.log2(max(outputs, 1.0))
    if x <= table[0][0]:
        return table[0][1] * 1e12
    for (x0, r0), (x1, r1) in zip(table, table[1:], strict=False):
        if x <= x1:
            return (r0 + (x - x0) / (x1 - x0) * (r1 - r0)) * 1e12
    return table[-1][1] * 1e12


def layer_columns(spec: ModelSpec, tp: int) -> tuple[tuple[float, float], ...]:
    """(output columns N per rank, weight elements per rank) of a decoder layer's dense GEMMs as vLLM runs them over
    `tp` ranks: QKV fused and column-parallel (N = (H + 2·KV)·d_head / tp), O row-parallel (N = D), gate and up fused
    and column-parallel (N = 2·d_ff / tp, d_ff / tp without a gate), down row-parallel (N = D); a layer without those
    (MLA, no dense FFN) as one GEMM of D columns."""
    d, dh = spec.d_model, spec.d_head
    if spec.mla is not None:
        return ((float(d), 1.0),)
    qkv = (spec.n_heads + 2 * spec.n_kv_heads) * dh / tp
    out = [(qkv, qkv * d), (float(d), spec.n_heads * dh / tp * d)]
    if spec.d_ff:
        up = (2 if spec.gated else 1) * spec.d_ff / tp
        out += [(up, up * d), (float(d), spec.d_ff / tp * d)]
    return tuple(out)


def expert_columns(spec: ModelSpec, tp: int) -> tuple[tuple[float, float], ...]:
    """layer_columns for one routed expert split over `tp` ranks: gate and up fused (N = 2·d_ff_expert / tp), down
    (N = D)."""
    up = (2 if spec.gated else 1) * spec.d_ff_expert / tp
    return ((up, up * spec.d_model), (float(spec.d_model), spec.d_ff_expert / tp * spec.d_model))


def stack_rate(arch: str, rows: float, columns: tuple[tuple[float, float], ...]) -> float:
    """FLOP/s of GEMMs of `rows` rows over `columns` ((N, weight elements), ...: their FLOPs in proportion to the
    weights), each at fp8_compute_rate of its own output rows·N: total work over the sum of the times."""
    total = sum(w for _, w in columns)
    return total / sum(w / fp8_compute_rate(arch, rows * n) for n, w in columns)


# vLLM's custom all-reduce on the xGMI mesh (module docstring): the share of a link's rate it reaches, its latencies
# (seconds) and where it switches from one stage to two (bytes, by the largest tp it applies to)
ALLREDUCE_LINK_SHARE = 38.5 / 64
ONE_STAGE_LATENCY = 7.2e-6
TWO_STAGE_LATENCY = 9.4e-6
ONE_STAGE_BELOW = ((4, 512 * 1024), (8, 64 * 1024))


def custom_allreduce_seconds(nbytes: float, tp: int, link_bytes_per_s: float) -> float:
    """vLLM's custom all-reduce of `nbytes` over `tp` GPUs of a fully connected xGMI mesh whose links carry
    `link_bytes_per_s` each way (module docstring): one stage, t = latency + S / link, below ONE_STAGE_BELOW (always
    at tp 2); else two, t = latency_2 + 2·S / (tp·link); link = ALLREDUCE_LINK_SHARE x the datasheet rate."""
    link = link_bytes_per_s * ALLREDUCE_LINK_SHARE
    below = next((limit for most, limit in ONE_STAGE_BELOW if tp <= most), 0)
    if tp == 2 or nbytes < below:
        return ONE_STAGE_LATENCY + nbytes / link
    return TWO_STAGE_LATENCY + 2 * nbytes / (tp * link)
