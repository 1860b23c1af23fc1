"""One prediction's fixed inputs (StepContext): model, device, layout, sequence, recipe; the GEMM and HBM-stream times
they imply; StageTimes, the seconds of one micro-batch on one stage by part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from ...records import dataclass
from ...spec import ModelSpec
from .. import kernels
from ..kernels import Device, stream_seconds
from ..memory import Recipe
from . import constants
from .cache import _CACHES, _cached, _cached_in, _token
from .layout import Layout, _stride


@dataclass
class StageTimes:
    """Seconds of one micro-batch on one pipeline stage (one model chunk), by part."""

    fwd: float = 0.0  # compute
    bwd_input: float = 0.0  # input gradients, attention backward, elementwise backward, recomputation
    bwd_weight: float = 0.0  # weight gradients
    tp: float = 0.0  # exposed, forward + backward
    cp: float = 0.0
    ep: float = 0.0
    comm_fwd: float = 0.0  # the part of tp + cp + ep exposed in the forward pass
    gemm_fwd: float = 0.0  # forward GEMMs (what TP overlap hides behind)

    @property
    def compute(self) -> float:
        return self.fwd + self.bwd_input + self.bwd_weight

    @property
    def total(self) -> float:
        return self.compute + self.tp + self.cp + self.ep

    def add(self, other: StageTimes, times: float = 1.0) -> None:
        """Add `times` x `other`, part by part."""
        self.fwd += times * other.fwd
        self.bwd_input += times * other.bwd_input
        self.bwd_weight += times * other.bwd_weight
        self.tp += times * other.tp
        self.cp += times * other.cp
        self.ep += times * other.ep
        self.comm_fwd += times * other.comm_fwd
        self.gemm_fwd += times * other.gemm_fwd


_GEMM_BYTES = {"fp8": 1.0, "fp4": 0.5 + 1 / 16, "fp32": 4.0}  # bytes per GEMM input element by GEMM dtype (else act)


@dataclass(frozen=True)
class GemmInputs:
    """Everything ``linear_seconds`` reads beside a linear's shape: the device's achievable HBM bandwidth (bytes/s) and
    SM count, the GEMM's FLOP rate (the recipe's GEMM dtype MAMF, block-scaled share included), bytes per input and
    output element, how many GEMMs run as one grouped GEMM (`batch`), the in-step efficiency (KERNEL_EFFICIENCY), and
    the bytes per element of each FP8/FP4 quantization pass (``kernels.QUANT_BYTES`` of the recipe's scaling mode:
    delayed, current, blockwise, MXFP8, NVFP4; 0 without one). The memo of linear times is keyed by it."""

    hbm: float
    sm_count: int
    rate: float
    in_bytes: float
    out_bytes: float
    batch: float
    efficiency: float
    quant_bytes: float


def linear_seconds(m: float, k: float, n: float, inputs: GemmInputs,
                   timer: Callable[[float, float, float], float]) -> tuple[float, float, float]:
    """(forward, input-gradient, weight-gradient) seconds of one linear of m tokens, k inputs and n outputs, each
    GEMM its own shape (Y = X·W is m x k x n, dX = dY·Wᵀ is m x n x k, dW = Xᵀ·dY is k x m x n) on the smooth
    roofline (`timer`: ``kernels.gemm_timer`` of `inputs`); FP8/FP4 recipes add the quantization of the input
    (forward: batch·m·k elements) and of the output gradient (backward: batch·m·n), each a memory-bound pass of
    quant_bytes per element at efficiency x HBM, and their input-gradient GEMM runs QUANT_DGRAD_SLOWDOWN slower
    (TransformerEngine's gemm_profiling, ``kernels.QUANT_BYTES``)."""
    fwd, dgrad, wgrad = timer(m, k, n), timer(m, n, k), timer(k, m, n)
    q = inputs.quant_bytes
    if q:
        hbm = inputs.hbm * inputs.efficiency
        fwd += inputs.batch * m * k * q / hbm
        dgrad = dgrad * kernels.QUANT_DGRAD_SLOWDOWN + inputs.batch * m * n * q / hbm
    return fwd, dgrad, wgrad


def gemm_table(inputs: GemmInputs, dev: Device) -> tuple[dict, Callable[[float, float, float], float], GemmInputs]:
    """The memo of linear times under `inputs` (a table per record, shared by every context of the process that
    builds an equal one) and the GEMM timer they imply (``kernels.gemm_timer``)."""
    found = _CACHES["kernels"].get(inputs)
    if found is None:
        timer = kernels.gemm_timer(dev, inputs.in_bytes, batch=inputs.batch, rate=inputs.rate,
                                   out_bytes=inputs.out_bytes, efficiency=inputs.efficiency)
        found = _CACHES["kernels"][inputs] = ({}, timer, inputs)
    return found


@dataclass
class StepContext:
    """One prediction's fixed inputs, the rates they imply, and the per-layer-kind cache."""

    spec: ModelSpec
    dev: Device
    lay: Layout
    seq: int
    recipe: Recipe
    attention: str = "flash"
    dropout: bool = False
    eff: float = constants.KERNEL_EFFICIENCY
    cache: dict = field(default_factory=dict)
    dense_cache: dict = field(default_factory=dict)  # the layers without routed experts: fewer fields in their key

    @property
    def act(self) -> float:
        return self.recipe.act_bytes

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on this rank's sequence shard (b·S/cp)."""
        return self.lay.micro_batch * self.seq / self.lay.cp

    @property
    def gemm_rate(self) -> float:
        rate = self.dev.gemm_rate(self.recipe.gemm_dtype)
        return rate * kernels.BLOCK_SCALED.get(self.recipe.name, 1.0)

    @property
    def gemm_bytes(self) -> float:
        return _GEMM_BYTES.get(self.recipe.gemm_dtype, self.act)

    def gemm(self, m: float, k: float, n: float, batch: float = 1) -> tuple[float, float, float]:
        """``linear_seconds`` of one linear (m tokens, k in, n out; `batch` of them as one grouped GEMM) under this
        context's device and recipe, memoized per ``GemmInputs`` (the record of everything it reads beside the
        shape) and shape."""
        memo = self.__dict__.get("_gemm_memo")  # per batch: the record's table and timer, once per context
        if memo is None:
            memo = self.__dict__["_gemm_memo"] = {}
        found = memo.get(batch)
        if found is None:
            found = memo[batch] = gemm_table(self.gemm_inputs(batch), self.dev)
        table, timer, inputs = found
        shape = (m, k, n)
        times = table.get(shape)
        if times is None:
            if len(table) > 200_000:
                table.clear()
            times = table[shape] = linear_seconds(m, k, n, inputs, timer)
        return times

    def gemm_inputs(self, batch: float = 1) -> GemmInputs:
        """What a linear's time reads of this context beside its shape (``GemmInputs``)."""
        rec = self.recipe
        return GemmInputs(hbm=self.dev.hbm, sm_count=self.dev.sm_count, rate=self.gemm_rate, in_bytes=self.gemm_bytes,
                          out_bytes=self.act, batch=batch, efficiency=self.eff,
                          quant_bytes=kernels.QUANT_BYTES[rec.fp8] if rec.fp8 else 0.0)

    def stream(self, nbytes: float) -> float:
        return stream_seconds(nbytes * (1 if self.lay.fused_elementwise else 2), self.dev, self.eff)


def _layer_kind(spec: ModelSpec, i: int) -> tuple:
    """What makes two layers cost the same: their mixers, FFN and attention span."""
    mixers, ffn = spec.layer_parts(i)
    return mixers, ffn, spec.attention_span(i) if "attention" in mixers else ""


def _layer_cache(spec: ModelSpec, dev: Device, lay: Layout, seq: int, rec: Recipe, attention: str,
                 dropout: bool) -> tuple[dict, dict]:
    """The per-layer-kind cost caches shared by every layout whose layer costs are the same: same device, recipe,
    sequence, and the layout fields a layer's cost reads (tp, cp, micro-batch, the kernels and overlaps, the
    strides its collectives take, and for the MoE layers the expert mesh and its settings). Two caches: the MoE
    layers', and the other layers', whose key leaves out the expert fields (dense layers cost the same whatever
    ep, etp and the all-to-all settings); the MoE layers' is kept in the other's, under the expert fields."""
    dense = (_token(spec), dev.accelerator.key, dev.mamf, dev.mamf_fp8, dev.sm_count, dev.arch, dev.fp4_peak,
             _token(dev.network), seq, rec.name, rec.act_bytes, attention, dropout, constants.KERNEL_EFFICIENCY,
             lay.tp, lay.cp, lay.micro_batch, lay.sequence_parallel, lay.tp_overlap, lay.cp_comm, lay.cp_a2a_size,
             lay.attention_kernel, lay.fp8_attention, lay.fused_elementwise, lay.recompute_modules, _stride(lay, "cp"),
             _stride(lay, "tp"))
    dense_cache = _cached("layers", dense, dict)
    experts = ("experts", lay.ep, lay.expert_tp, lay.ep_overlap, lay.ep_dispatcher, lay.moe_imbalance,
               _stride(lay, "ep", True), _stride(lay, "tp", True))
    return _cached_in(dense_cache, experts, dict), dense_cache


def _context(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, rec: Recipe, attention: str = "flash",
             dropout: bool = False) -> StepContext:
    """The prediction context of `lay` with its layer-cost caches (_prepare's; the search's floors read the same,
    with flash attention and no dropout)."""
    caches = _layer_cache(spec, dev, lay, seq_len, rec, attention=attention, dropout=dropout)
    return _context_in((spec, dev, seq_len, rec), lay, caches, attention=attention, dropout=dropout)


def _context_in(inputs: tuple, lay: Layout, caches: tuple[dict, dict], attention: str = "flash",
                dropout: bool = False) -> StepContext:
    """_context of `lay` with the layer-cost caches it was given (`caches`: _layer_cache's; `inputs`: (spec, device,
    sequence, recipe)), as the layout search builds each layout's."""
    spec, dev, seq_len, rec = inputs
    return StepContext(spec, dev, lay, seq_len, rec, attention=attention, dropout=dropout,
                       eff=constants.KERNEL_EFFICIENCY, cache=caches[0], dense_cache=caches[1])
