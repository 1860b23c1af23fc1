"""What one kernel of a training step costs on one accelerator: GEMMs, attention, memory-bound passes.

Every rate is a published measurement of that kernel (the source beside each constant), never a fit to
training runs. The one constant fitted to whole training steps, ``KERNEL_EFFICIENCY`` (the share of these
isolated-kernel rates kept inside a step: clocks under sustained power load, launch gaps), lives in
``steptime`` with its leave-one-source-out error.

- GEMM (``gemm_seconds``): a smooth roofline t = (t_c^p + t_m^p)^(1/p) of the compute time at the accelerator's
  maximum achievable matmul rate for the GEMM dtype (MAMF, preset "matmul" block: S. Bekman's mamf-finder
  table, bf16 and fp8 separately: fp8 MAMF is below 2 x bf16's) and the operand + result bytes at the
  achievable HBM bandwidth. The compute time carries tile and wave quantization (NVIDIA "Matrix
  Multiplication Background User's Guide": output tiles rounded up, one tile per SM per wave; the best of
  four tilings 256x128, 128x256, 128x128, 64x128, as cuBLAS and CUTLASS heuristics pick) and an epilogue
  worth ``GEMM_EPILOGUE_K`` extra steps of the K loop. p = ``ROOFLINE_P``, the epilogue and the tiling set are
  fitted once to DeepGEMM's published H800 FP8 table (dense M = 64..4096 and grouped 256..8192 rows per
  expert, deepseek-ai/DeepGEMM README @989c9e3): 6 % rms over the shapes with >= 256 rows, against the 29 % of
  a sharp roofline with 256x128/128x128 tiles only. A grouped GEMM (MoE experts) is the same model with all
  groups' tiles in one set of waves (DeepGEMM's contiguous layout, Megatron-Core's grouped GEMM).
- FP8 / FP4 GEMMs: the rate of the recipe's GEMM dtype (``gemm_rate``); block-scaled variants at their
  measured share of it (``BLOCK_SCALED``); the quantization of each GEMM input (activations in the forward,
  output gradients in the backward, row- and column-wise) as memory-bound passes of ``QUANT_BYTES`` bytes per
  element, the effective bytes TE's own profiling measured between autocast and pre-quantized runs.
- Attention (``attention_seconds``): the kernel's measured TFLOP/s by head dimension, sequence length and mask:
  today's cuDNN (Transformer Engine's default) from NVIDIA's cudnn-frontend SDPA training benchmark on H200, GB200
  and GB300 (``CUDNN_MEASURED``, 2k-32k, causal and not, forward and backward); FlashAttention-2, FlashAttention-3
  and the 2024 cuDNN ("cudnn-2024") from the FlashAttention-3 paper (Shah et al. 2024, H100 SXM5 figures: forward
  by head dim 64/128/256, causal and not, and backward by head dim 64/128), scaled to other generations by their
  measured ratios (``ATTENTION_SCALE``). The work is what the kernel runs: causal pairs for
  a decoder, the window for sliding layers, chunks for chunked attention (``ModelSpec.attended_pairs``);
  attention stays BF16 under FP8 recipes (Transformer Engine's default, fp8_dpa off) unless asked.
- Memory-bound passes (``stream_seconds``): bytes over the achievable HBM bandwidth (``HBM_EFFICIENCY``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from . import comm

# Streaming kernels reach ~90 % of the datasheet HBM bandwidth: H100 STREAM triad 3,089 and device copy 3,024 GB/s
# of 3,350 (92 % / 90 %; a published JSON benchmark record, see the mechanisms notes), and "within roughly
# 85-90 % of your card's theoretical maximum" (pantheongpu.com HBM write test).
HBM_EFFICIENCY = 0.9
# GEMM shape model, fitted once to DeepGEMM's H800 FP8 table (module docstring).
TILES = ((256, 128), (128, 256), (128, 128), (64, 128))
GEMM_EPILOGUE_K = 256
# The epilogue stores each output tile: a bandwidth-bound pass whose length in K-steps is its store time over one
# K-step's MMA time, so it scales with the GEMM's FLOP/s over the HBM bandwidth. GEMM_EPILOGUE_K is the fit's device,
# H800 FP8 (the H100 SXM's MAMF 1,402.6 TFLOP/s over its achievable 0.9 x 3,350 GB/s); a BF16 GEMM on H100 stores
# in ~145 K-steps' time, FP16 on A100 in ~80: Megatron 2021's attention bmm with K = d_head 96 was charged 2.7 x its
# K loop in epilogue before.
EPILOGUE_FLOP_PER_BYTE = 1402.6e12 / (3350e9 * 0.9)
ROOFLINE_P = 1.5
# Block-scaled GEMMs at their measured share of the per-tensor FP8 rate: TE gemm_profiling (docs/examples/
# gemm_profiling/gemm_profiling.rst @d0067d0) on H200 NVL, per-layer Fprop 6.503 ms (FP8 current, autocast) vs
# 7.425 ms (FP8 block), the same quantization passes: the block-scaled GEMMs take 0.85 x the rate; on B300
# MXFP8 kernel-only runs 1.83 x BF16 against an FP8 MAMF of 1.90 x BF16 MAMF (3,353 / 1,769): 0.965.
BLOCK_SCALED = {"fp8-blockwise": 0.85, "mxfp8": 0.965}
# NVFP4 GEMMs: TE gemm_profiling on B300, kernel-only (pre-quantized) NVFP4 runs 3.48 x BF16 and MXFP8 1.83 x on the
# same shapes: NVFP4 = 1.90 x the MXFP8 kernel, 1.835 x the per-tensor FP8 rate (MXFP8 = 0.965 x FP8, above). The
# lift is below the 3:1 FP4:FP8 peak ratio of Blackwell Ultra (what binds is not the tensor cores), and within
# B200's / GB200's 2:1; it is applied on every FP4 part, capped at its FP4:FP8 peak ratio.
NVFP4_OVER_FP8 = 3.48 / 1.83 * 0.965
# Backward input-gradient GEMMs of quantized recipes run slower than their forward: "While BF16 Dgrad is within 2% of
# Fprop, quantized formats show 5--13% slower Dgrad sums" (TE gemm_profiling, B300 and H200 NVL): the middle, 9 %.
QUANT_DGRAD_SLOWDOWN = 1.09
# Effective bytes per quantized element (read + writes + amax passes, at HBM_EFFICIENCY), from TE gemm_profiling's
# autocast-minus-pre-quantized gap over the elements each recipe quantizes (M = 15,872 tokens, hidden 4,096, FFN
# 16,384: 454 M activation and 201 M weight elements per layer Fprop): FP8 current scaling ~17 % of 6.503 ms on
# H200 NVL (4.8 TB/s) -> 7.3 B; delayed scaling (amax fused into the cast, 6.188 ms, same GEMMs) -> 5.2 B; MXFP8
# on B300 (2.848 ms autocast vs 4.197 / 1.83 kernel-only, 8 TB/s) -> 6.2 B; NVFP4 (1.932 vs 4.197 / 3.48) ->
# 8.2 B. Blockwise FP8 scales per 1x128 / 128x128 block in the cast kernel, no global amax pass: as delayed.
# torchao's tensorwise dynamic scaling takes an amax pass and a cast per tensor: as current scaling.
QUANT_BYTES = {"te-delayed": 5.2, "te-current": 7.3, "torchao": 7.3, "te-blockwise": 5.2, "te-mxfp8": 6.2,
               "te-nvfp4": 8.2}

# --- attention kernels -----------------------------------------------------------------------------------

# Sequence lengths of the FlashAttention-3 paper's figures (batch x seq = 16k tokens, 2,048 hidden).
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
# H100 SXM5 forward TFLOP/s (BF16), {kernel: {head dim: (non-causal, causal)}}; Shah et al. 2024 (arXiv 2407.08608)
# Figures 5-6 as transcribed in the mechanisms notes (causal TFLOP/s count the causal half of the work).
FORWARD = {
    "fa2": {64: ((282, 306, 318, 321, 322, 324), (180, 229, 262, 284, 295, 299)),
            128: ((309, 350, 362, 368, 370, 370), (191, 260, 298, 319, 333, 335)),
            256: ((275, 313, 321, 323, 324, 326), (208, 251, 278, 293, 297, 298))},
    "cudnn-2024": {64: ((335, 373, 395, 408, 412, 413), (225, 288, 334, 363, 379, 388)),
              128: ((497, 574, 617, 609, 600, 595), (315, 410, 484, 518, 529, 539)),
              256: ((470, 546, 580, 581, 580, 581), (308, 391, 450, 483, 497, 509))},
    "fa3": {64: ((333, 392, 460, 476, 496, 497), (197, 265, 371, 420, 460, 473)),
            128: ((467, 565, 625, 638, 646, 648), (292, 423, 521, 579, 602, 616)),
            256: ((482, 639, 707, 736, 746, 756), (286, 427, 537, 612, 628, 642))},
}
# H100 SXM5 backward TFLOP/s (BF16, without a mask; the paper gives head dim 64 and 128); causal backward takes
# the forward's causal/non-causal ratio at the same length, head dim 256 the 128 figures.
BACKWARD = {
    "fa2": {64: (198, 238, 264, 279, 287, 291), 128: (214, 260, 291, 310, 318, 322)},
    "cudnn-2024": {64: (266, 348, 395, 417, 432, 433), 128: (305, 408, 465, 499, 518, 516)},
    "fa3": {64: (272, 363, 422, 453, 472, 474), 128: (316, 424, 501, 542, 559, 561)},
}
H100_BF16_PEAK = 989.4  # TFLOP/s, the figures' device
# cuDNN as Transformer Engine runs it today ("cudnn", the default on Hopper and Blackwell), measured by NVIDIA's
# cudnn-frontend SDPA training benchmark (benchmark/sdpa_benchmark_training, results @3929da2; TFLOP/s of the
# pairs computed, the causal half under the causal mask: benchmark_single_sdpa.py flops()), BF16, at 2k..32k:
# - Hopper: H200, cuDNN 9.19.1 (results/h200_919_only_cudnn/llama3.1_20260227_034703.csv): the Llama 3.1 shape, 64
#   query / 8 KV heads, head dim 128, batch 1. The H200 has the H100 SXM's SMs, clocks, 700 W and 989.4 TFLOP/s
#   BF16 peak; attention is compute-bound, so the rates are H100's. Against the FlashAttention-3 paper's cuDNN curve
#   ("cudnn-2024", above) they agree at 2k (484 causal forward both) and pull ahead with length (673 against 539
#   at 16k): the later cuDNN releases' long-sequence kernels.
# - Blackwell (B200, GB200): GB200, cuDNN 9.22 (results/llama3.1/gb200/llama3.1_20260424_100750.csv, head dim 128,
#   batch 2; results/dsv3/gb200/dsv3_20260424_101009.csv, DeepSeek-V3's MLA shape, 128 heads, head dims 192/128:
#   head dim 160 here, as the step model averages Q·K and P·V widths); Blackwell Ultra (B300, GB300): the same
#   files for gb300. Each is a share of the measured GPU's dense BF16 peak (GB200 and GB300: 2,500 TFLOP/s),
#   applied to the device's own peak.
# Sliding-window layers (the same benchmark's gpt_oss config: head dim 64, causal with a window, TFLOP/s of the
# window's pairs): H200 cuDNN 9.19, window 1,024 (results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv): 355
# forward, 303 backward at 16k; GB200 / GB300 cuDNN 9.22, window 128 (results/gpt_oss/{gb200,gb300}/...): 167 / 188
# and 173 / 200 at 16k (the rate is the same from 2k to 16k: a windowed kernel's work per query does not grow with
# the length). A window of 128 runs at a fraction of a causal kernel over 128 tokens: every 128-query tile visits
# the diagonal key tile and the one before it, half of it masked, for the tile's fixed loads and rescaling. Other
# windows and head dims take the 2024 cuDNN curve's causal ratio from the measured point (window as the length).
CUDNN_WINDOWED = {"hopper": (1024, 355.0, 303.0), "blackwell": (128, 167.0, 188.0),
                  "blackwell-ultra": (128, 173.0, 200.0)}  # {arch: (window, forward, backward TFLOP/s)}, head dim 64
# Head dims outside the measured ones take the FlashAttention-3 paper's cuDNN ratio between head dims at the same
# length; lengths below 2k its cuDNN length dependence; lengths above 32k the 32k rate.
CUDNN_SEQS = (2048, 4096, 8192, 16384, 32768)
CUDNN_MEASURED = {  # {arch: (measured GPU's BF16 peak, {head dim: {pass: (non-causal, causal) TFLOP/s by CUDNN_SEQS}})}
    "hopper": (989.4, {128: {"fwd": ((633, 671, 691, 702, 693), (484, 591, 644, 673, 688)),
                             "bwd": ((504, 560, 594, 612, 572), (370, 474, 541, 579, 581))}}),
    "blackwell": (2500.0, {128: {"fwd": ((1433, 1599, 1771, 1697, 1634), (1097, 1408, 1574, 1708, 1622)),
                                 "bwd": ((1124, 1350, 1404, 1374, 1262), (885, 1148, 1332, 1328, 1226))},
                           160: {"fwd": ((1492, 1666, 1759, 1812, 1584), (1072, 1406, 1585, 1678, 1743)),
                                 "bwd": ((1048, 1175, 1125, 1088, 1086), (846, 1057, 1193, 1134, 1076))}}),
    "blackwell-ultra": (2500.0, {128: {"fwd": ((1805, 1900, 2017, 2014, 1836), (1373, 1703, 1856, 1915, 1953)),
                                       "bwd": ((1213, 1429, 1531, 1536, 1427), (967, 1248, 1435, 1507, 1490))},
                                 160: {"fwd": ((1770, 1937, 2021, 2032, 1917), (1285, 1590, 1825, 1967, 1991)),
                                       "bwd": ((1117, 1267, 1301, 1254, 1246), (914, 1143, 1291, 1302, 1289))}}),
}
# Each generation's attention rate as a share of its own dense BF16 peak, relative to the H100 figures above:
# - Ampere (A100): FlashAttention-2 "reaching 50-73 % of the theoretical maximum FLOPs/s on A100" (Dao 2023,
#   abstract): the H100 FA2 curve's shape, its best point (370 TFLOP/s, 37 % of H100's peak) set to 73 %;
# - Ada (L40S, L40, L4, RTX 4090): FlashAttention-2's SM80 kernels, which run there unchanged (FA3 needs Hopper): the
#   Ampere share, an assumption (no published FA2 rate on Ada found);
# - Hopper: the H100 figures;
# - Blackwell (B200, GB200, B300, GB300): FlashAttention-4 "up to 1.3x speedup over cuDNN 9.13 ... reaching up
#   to 1613 TFLOPs/s (71 % utilization)" on B200 (FlashAttention-4 paper, arXiv 2603.05451, abstract): cuDNN at
#   1,241 TFLOP/s = 55 %
#   of B200's peak against cuDNN's best 617 = 62 % on H100 -> 0.884; FA3 (Hopper-only) maps to FA4 at 1.3 x;
# - CDNA (MI300X, MI355X): no published attention kernel table; the Hopper shares scaled by the ratio of matmul
#   efficiencies (MAMF / peak: MI300X 51.4 %, MI355X 62.2 % against H100's 80.3 %) - an assumption, stated.
ATTENTION_SCALE = {"ampere": 0.73 / (370 / H100_BF16_PEAK), "ada": 0.73 / (370 / H100_BF16_PEAK),
                   "hopper": 1.0, "blackwell": 1241.0 / 2250 / (617 / 989.4),
                   "blackwell-ultra": 1241.0 / 2250 / (617 / 989.4), "cdna3": 0.514 / 0.803, "cdna4": 0.622 / 0.803}
# Blackwell Ultra (B300, GB300) doubles the special-function units' exponent throughput ("Attention acceleration
# (SFU EX2) 10.7 TeraExponentials/s" against 5 on B200/GB200, verda.com GB300 NVL72 architecture table), which bounds
# B200's forward ("the forward pass isn't compute-bound at all on B200 - it's bottlenecked by exponential
# calculations in softmax", FA4 summary); with the bound lifted, the forward reaches what FlashAttention-4 gets by
# emulating exponentials on B200 (1613 / 1241 TFLOP/s). The backward is bound by shared-memory traffic: unchanged.
FORWARD_LIFT = {"blackwell-ultra": 1613.0 / 1241.0}
# The kernel frameworks run by default (what "flash" means per generation): Transformer Engine's cuDNN fused
# attention on Hopper and Blackwell (Megatron-Core; NVIDIA's recipes set NVTE_FUSED_ATTN), FlashAttention-2 on
# Ampere (cuDNN is slower there: transformers PR #48163 measured 0.82x on A100), the CK/aiter kernels on CDNA (timed
# as the 2024 cuDNN curve at CDNA's share, ATTENTION_SCALE; so is "cudnn" on Ampere, which CUDNN_MEASURED lacks).
DEFAULT_KERNEL = {"ampere": "fa2", "ada": "fa2", "hopper": "cudnn", "blackwell": "cudnn", "blackwell-ultra": "cudnn",
                  "cdna3": "cudnn", "cdna4": "cudnn"}
ATTENTION_KERNELS = ("auto", "cudnn", "cudnn-2024", "fa2", "fa3")
# FP8 attention (TE fp8_dpa): cuDNN "can achieve up to 1.2 PFLOPS in FP8" on H200 (NVIDIA blog "Accelerating
# Transformers with NVIDIA cuDNN 9"), 61 % of the FP8 peak, as its BF16 kernel's 617 is 62 % of the BF16 peak:
# FP8 attention runs at the BF16 shares of the FP8 peak.
GENERATIONS = tuple(ATTENTION_SCALE)


@dataclass(frozen=True)
class Device:
    """What the step model needs of an accelerator: peaks, matmul ceilings per dtype, SMs, HBM, network."""

    accelerator: Accelerator
    dtype: str  # the dense peak MFU is quoted against
    mamf: float  # bf16 maximum achievable matmul FLOP/s
    sm_count: int
    network: comm.Network
    mamf_fp8: float = 0.0  # 0: not measured (scaled from bf16 by the peak ratio, see gemm_rate)
    arch: str = "hopper"
    fp4_peak: float = 0.0  # dense FP4 FLOP/s (0: no FP4 tensor cores)

    @property
    def peak(self) -> float:
        return self.accelerator.peak(self.dtype)

    @property
    def hbm(self) -> float:
        """Achievable HBM bandwidth, bytes/s."""
        return self.accelerator.memory_bandwidth * HBM_EFFICIENCY

    def gemm_rate(self, dtype: str) -> float:
        """MAMF for GEMMs whose inputs are `dtype` ("bf16", "fp16", "fp8", "fp4", "fp32"): measured where the preset
        has it; fp8 without a measurement at the bf16 MAMF's share of the fp8 peak; fp4 from NVFP4_OVER_FP8."""
        acc = self.accelerator
        if dtype in ("bf16", "fp16"):
            return self.mamf
        if dtype == "fp32":
            return self.mamf * acc.peak("tf32") / acc.peak("bf16") if "tf32" in acc.peak_flops else self.mamf / 8
        fp8 = self.mamf_fp8 or self.mamf * acc.peak("fp8") / acc.peak("bf16")
        if dtype == "fp8":
            return fp8
        if dtype == "fp4":
            if not self.fp4_peak:
                raise LlmcalcError(f"{acc.key} has no FP4 tensor cores (no dense fp4 peak): NVFP4 recipes need "
                                   f"Blackwell (b200, gb200, b300, gb300)")
            return fp8 * min(NVFP4_OVER_FP8, self.fp4_peak / acc.peak("fp8"))
        raise LlmcalcError(f"no GEMM rate for dtype {dtype!r}")

    def attention_rate(self, kernel: str, head_dim: float, seq: float, causal: bool, backward: bool,
                       fp8: bool = False, windowed: bool = False) -> float:
        """FLOP/s of the attention kernel at this shape (module docstring: the measured cuDNN tables, the H100 tables
        scaled by generation); `windowed`: a sliding window of `seq` keys over a longer sequence."""
        kernel = DEFAULT_KERNEL[self.arch] if kernel == "auto" else kernel
        peak = self.accelerator.peak("fp8" if fp8 else "bf16")
        if kernel == "cudnn" and windowed and self.arch in CUDNN_WINDOWED:
            window, fwd, bwd = CUDNN_WINDOWED[self.arch]
            shape = (_table_rate("cudnn-2024", head_dim, seq, True, backward)
                     / _table_rate("cudnn-2024", 64, window, True, backward))
            return (bwd if backward else fwd) / CUDNN_MEASURED[self.arch][0] * shape * peak
        if kernel == "cudnn" and self.arch in CUDNN_MEASURED:
            return _cudnn_share(self.arch, head_dim, seq, causal, backward) * peak
        if kernel == "cudnn":
            kernel = "cudnn-2024"
        if self.arch.startswith("blackwell") and kernel == "fa3":
            scale = ATTENTION_SCALE[self.arch] * 1.3 * 617 / 648  # FlashAttention-4: 1.3 x cuDNN 9.13
            kernel = "cudnn-2024"
        else:
            scale = ATTENTION_SCALE[self.arch]
        h100 = _table_rate(kernel, head_dim, seq, causal, backward)
        lift = 1.0 if backward else FORWARD_LIFT.get(self.arch, 1.0)
        return h100 / (H100_BF16_PEAK * 1e12) * scale * peak * lift


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise linear in log(x) inside the table; below its first point a power law through the first two
    (short windows run shorter tiles), above its last flat."""
    lx = math.log(x)
    logs = _LOGS.get(xs)
    if logs is None:
        logs = _LOGS[xs] = [math.log(v) for v in xs]
    if lx <= logs[0]:
        slope = math.log(ys[1] / ys[0]) / (logs[1] - logs[0])
        return ys[0] * math.exp(slope * (lx - logs[0]))
    if lx >= logs[-1]:
        return ys[-1]
    for i in range(len(xs) - 1):
        if lx <= logs[i + 1]:
            w = (lx - logs[i]) / (logs[i + 1] - logs[i])
            return ys[i] + w * (ys[i + 1] - ys[i])
    return ys[-1]


_LOGS: dict[Sequence[float], list[float]] = {}  # _interp's log(x) of each table's lengths (SEQS, CUDNN_SEQS): a pure
# function of the (tuple) lengths


def _by_head_dim(table: Mapping[int, Sequence[float]], head_dim: float, seq: float) -> float:
    dims = sorted(table)
    if head_dim <= dims[0]:
        return _interp(SEQS, table[dims[0]], seq)
    if head_dim >= dims[-1]:
        return _interp(SEQS, table[dims[-1]], seq)
    for lo, hi in zip(dims, dims[1:], strict=False):
        if head_dim <= hi:
            w = (head_dim - lo) / (hi - lo)
            return (1 - w) * _interp(SEQS, table[lo], seq) + w * _interp(SEQS, table[hi], seq)
    return _interp(SEQS, table[dims[-1]], seq)


def _table_rate(kernel: str, head_dim: float, seq: float, causal: bool, backward: bool) -> float:
    """H100 TFLOP/s of `kernel` (FORWARD / BACKWARD tables) at this head dim, length and mask."""
    if kernel not in FORWARD:
        raise LlmcalcError(f"unknown attention kernel {kernel!r}; use one of {', '.join(ATTENTION_KERNELS)}")
    plain_table, masked_table = _FORWARD_BY_MASK[kernel]
    plain = _by_head_dim(plain_table, head_dim, seq)
    masked = _by_head_dim(masked_table, head_dim, seq)
    if not backward:
        return (masked if causal else plain) * 1e12
    bwd = _by_head_dim(BACKWARD[kernel], head_dim, seq)
    return (bwd * masked / plain if causal else bwd) * 1e12


_FORWARD_BY_MASK = {kernel: ({d: v[0] for d, v in fwd.items()}, {d: v[1] for d, v in fwd.items()})
                    for kernel, fwd in FORWARD.items()}  # FORWARD's (non-causal, causal) tables of each kernel


def _cudnn_share(arch: str, head_dim: float, seq: float, causal: bool, backward: bool) -> float:
    """Today's cuDNN rate as a share of the BF16 peak (CUDNN_MEASURED): the measured curve at the nearest measured
    head dims (linear between them), the 2024 curve's head-dim ratio outside them and its length dependence below
    2k."""
    peak, table = CUDNN_MEASURED[arch]
    dims = sorted(table)
    ref = min(max(head_dim, dims[0]), dims[-1])
    at = min(max(seq, CUDNN_SEQS[0]), CUDNN_SEQS[-1])

    def measured(d: int) -> float:
        return _interp(CUDNN_SEQS, table[d]["bwd" if backward else "fwd"][1 if causal else 0], at)
    lo = max(d for d in dims if d <= ref)
    hi = min(d for d in dims if d >= ref)
    rate = measured(lo) if hi == lo else measured(lo) + (ref - lo) / (hi - lo) * (measured(hi) - measured(lo))
    if seq < CUDNN_SEQS[0]:
        rate *= _table_rate("cudnn-2024", ref, seq, causal, backward) / _table_rate("cudnn-2024", ref, at, causal,
                                                                                     backward)
    if head_dim != ref:
        near = min(seq, SEQS[-1])
        rate *= _table_rate("cudnn-2024", head_dim, near, causal, backward) / _table_rate("cudnn-2024", ref, near,
                                                                                           causal, backward)
    return rate / peak


def attention_seconds(dev: Device, kernel: str, flops: float, head_dim: float, seq: float, causal: bool,
                      backward: bool, fp8: bool = False, efficiency: float = 1.0, windowed: bool = False) -> float:
    """Seconds of `flops` of attention-kernel work (the pairs it computes) at the kernel's rate for this shape;
    `efficiency`: the in-step share of isolated-kernel rates (step.constants.KERNEL_EFFICIENCY); `windowed`: `seq` is a
    sliding window over a longer sequence."""
    if flops <= 0:
        return 0.0
    return flops / (dev.attention_rate(kernel, head_dim, seq, causal, backward, fp8=fp8, windowed=windowed)
                    * efficiency)


# --- GEMMs ------------------------------------------------------------------------------------------------


def tile_wave_efficiency(m: float, n: float, sms: int, batch: float = 1) -> float:
    """Useful fraction of the GEMM work after tile and wave quantization (NVIDIA Matrix Multiplication
    Background guide): output tiles rounded up, tiles run in waves of one per SM; a strided batched or grouped
    GEMM of `batch` matrices runs all their tiles in the same waves; the best of the TILES tilings. Kept per shape
    (a layout search's three GEMMs of each linear share their output shapes with others')."""
    key = (m, n, sms, batch, type(m), type(n), type(batch))  # (an int and its float are equal keys, not sums)
    best = _WAVES.get(key)
    if best is None:
        best = 0.0
        work = batch * m * n
        ceil = math.ceil
        for tm, tn in TILES:
            waves = ceil(batch * ceil(m / tm) * ceil(n / tn) / sms)
            share = work / (waves * sms * tm * tn)
            if share > best:  # max(best, share)
                best = share
        if len(_WAVES) > 100_000:
            _WAVES.clear()
        _WAVES[key] = best
    return best


_WAVES: dict[tuple, float] = {}  # tile_wave_efficiency per (m, n, SMs, batch) and their types: a pure function


def gemm_seconds(m: float, k: float, n: float, dev: Device, in_bytes: float, batch: float = 1,
                 rate: float | None = None, out_bytes: float | None = None, efficiency: float = 1.0) -> float:
    """`batch` (m x k) @ (k x n) matmuls (one batched or grouped GEMM) on the smooth roofline (module docstring):
    compute at `rate` (default the bf16 MAMF) x tile/wave quantization x `efficiency`, with the epilogue's
    GEMM_EPILOGUE_K; memory: operands of `in_bytes` per element and the result of `out_bytes` (default
    in_bytes) at the achievable HBM bandwidth."""
    return gemm_timer(dev, in_bytes, batch=batch, rate=rate, out_bytes=out_bytes, efficiency=efficiency)(m, k, n)


def gemm_timer(dev: Device, in_bytes: float, batch: float = 1, rate: float | None = None,
               out_bytes: float | None = None, efficiency: float = 1.0) -> Callable[[float, float, float], float]:
    """gemm_seconds with these arguments as a function of the shape (m, k, n): what reads no shape (the rates, the
    epilogue's K-steps) worked out once, for a caller that times many shapes (step.context.StepContext.gemm)."""
    rate = dev.mamf if rate is None else rate
    out = in_bytes if out_bytes is None else out_bytes
    hbm = dev.hbm
    epilogue = GEMM_EPILOGUE_K * rate / hbm / EPILOGUE_FLOP_PER_BYTE
    flop_rate, byte_rate, sms = rate * efficiency, hbm * efficiency, dev.sm_count

    def seconds(m: float, k: float, n: float) -> float:
        if m <= 0 or k <= 0 or n <= 0:
            return 0.0
        compute = 2 * m * n * (k + epilogue) * batch / (flop_rate * tile_wave_efficiency(m, n, sms, batch))
        memory = batch * (in_bytes * (m * k + k * n) + out * m * n) / byte_rate
        return (compute ** ROOFLINE_P + memory ** ROOFLINE_P) ** (1 / ROOFLINE_P)
    return seconds


def stream_seconds(nbytes: float, dev: Device, efficiency: float = 1.0) -> float:
    """A memory-bound pass over `nbytes` (reads + writes) at the achievable HBM bandwidth."""
    return nbytes / (dev.hbm * efficiency)


# --- the accelerator presets ---------------------------------------------------------------------------------


def device_for(key: str, dtype: str = "bf16", gpus_per_node: int | None = None, network: str | None = None) -> Device:
    """The accelerator preset plus its "matmul" and "network" blocks; one clear error when absent.
    `dtype`: the dense peak MFU is quoted against; `gpus_per_node`: a scale-up domain other than the preset's
    (a cluster built with 4-GPU nodes); `network`: --network, the cluster's inter-node fabric
    (``fabric.parse_network``, applied by ``fabric.apply_fabric``)."""
    from ..spec import hardware_config, load_hardware

    acc = load_hardware(key)
    data = hardware_config(key)
    net = comm.network_from_preset(key, data)
    mm = data.get("matmul")
    if net is None or mm is None:
        raise LlmcalcError(f"{key} has no network/matmul block for the step-time model (presets with one: "
                           f"{', '.join(steptime_presets())}); pass --mfu or --achieved-tflops instead")
    acc.peak(dtype)  # one clear line when the device has no such peak
    if gpus_per_node is not None:
        if gpus_per_node < 1:
            raise LlmcalcError(f"GPUs per node must be >= 1, got {gpus_per_node}")
        from dataclasses import replace

        net = replace(net, gpus_per_node=gpus_per_node)
    if network is not None:
        from .fabric import apply_fabric, parse_network

        net = apply_fabric(net, parse_network(network))
    arch = mm.get("arch", "hopper")
    if arch not in GENERATIONS:
        raise LlmcalcError(f"hardware preset {key!r}: matmul.arch {arch!r} is not one of {', '.join(GENERATIONS)}")
    fp4 = data.get("dense_tflops", {}).get("fp4") or 0
    return Device(acc, dtype, float(mm["mamf_bf16_tflops"]) * 1e12, int(mm["sm_count"]), net,
                  mamf_fp8=float(mm.get("mamf_fp8_tflops") or 0) * 1e12, arch=arch, fp4_peak=float(fp4) * 1e12)


def steptime_presets() -> list[str]:
    from ..spec import hardware_config, hardware_names

    return [k for k in hardware_names() if "network" in hardware_config(k) and "matmul" in hardware_config(k)]
