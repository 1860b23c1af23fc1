"""One prediction's fixed inputs (StepContext): model, device, layout, sequence, recipe; the GEMM and HBM-stream times
they imply; StageTimes, the seconds of one micro-batch on one stage by part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any

from ...records import dataclass
from ...spec import ModelSpec
from .. import kernels
from ..kernels import Device, stream_seconds
from ..memory import Recipe
from . import constants
from .cache import current
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
    """The memo of linear times under `inputs` in the running call's tables (one per record) and the GEMM timer they
    imply (``kernels.gemm_timer``)."""
    tables = current().table("gemm")
    found = tables.get(inputs)
    if found is None:
        timer = kernels.gemm_timer(dev, inputs.in_bytes, batch=inputs.batch, rate=inputs.rate,
                                   out_bytes=inputs.out_bytes, efficiency=inputs.efficiency)
        found = tables[inputs] = ({}, timer, inputs)
    return found


@dataclass(frozen=True, eq=False)
class StepInputs:
    """What every memo point of a prediction reads beside the layout: the model, the device (its rates and network),
    the sequence, the recipe, the attention implementation and dropout, and the in-step kernel efficiency. Two are
    equal where they hold the same model, device and recipe objects (hashing a ModelSpec costs 12 us: an equal
    model built anew gets tables of its own, a miss, never a wrong hit) and equal values of the rest; the tables
    keyed by it keep those objects alive, so that their ids stand while the tables do."""

    spec: ModelSpec
    dev: Device
    seq: int
    recipe: Recipe
    attention: str
    dropout: bool
    efficiency: float

    def _identity(self) -> tuple:
        return (id(self.spec), id(self.dev), id(self.recipe), self.seq, self.attention, self.dropout, self.efficiency)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepInputs) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


def astuple_shallow(record: object) -> tuple:
    """The values of a record's fields, in order (dataclasses.astuple without its deep copy)."""
    getter = _GETTERS.get(type(record))
    if getter is None:
        getter = _GETTERS[type(record)] = attrgetter(*(f.name for f in fields(record)))  # type: ignore[arg-type]
    return getter(record)


_GETTERS: dict[type, attrgetter] = {}  # astuple_shallow's, per record class


def hash_once(record: object) -> int:
    """A frozen record's hash over its fields (``astuple_shallow``), computed on first use and kept on the record:
    a record that many memo keys hold (a layout's, a plan's stage composition) is hashed once."""
    found = record.__dict__.get("_hash")
    if found is None:
        found = hash(astuple_shallow(record))
        object.__setattr__(record, "_hash", found)
    return found


@dataclass(frozen=True)
class LayerLayout:
    """What a layer's cost reads of the layout beside its expert mesh: tp, cp and the micro-batch (the tokens and
    heads on this rank), sequence parallelism, TP overlap, the CP exchange (and its all-to-all group), the attention
    kernel and its FP8 mode, fused elementwise kernels, and where the TP and CP groups sit (their strides in the rank
    order; 0 for a degree of 1, which has no collectives)."""

    tp: int
    cp: int
    micro_batch: int
    sequence_parallel: bool
    tp_overlap: bool
    cp_comm: str
    cp_a2a_size: int
    attention_kernel: str
    fp8_attention: bool
    fused_elementwise: bool
    tp_stride: int
    cp_stride: int

    __hash__ = hash_once  # many memo keys hold it

    @classmethod
    def of(cls, lay: Layout) -> LayerLayout:
        return cls(tp=lay.tp, cp=lay.cp, micro_batch=lay.micro_batch, sequence_parallel=lay.sequence_parallel,
                   tp_overlap=lay.tp_overlap, cp_comm=lay.cp_comm, cp_a2a_size=lay.cp_a2a_size,
                   attention_kernel=lay.attention_kernel, fp8_attention=lay.fp8_attention,
                   fused_elementwise=lay.fused_elementwise, tp_stride=_stride(lay, "tp") if lay.tp > 1 else 0,
                   cp_stride=_stride(lay, "cp") if lay.cp > 1 else 0)


@dataclass(frozen=True)
class ExpertLayout:
    """What an MoE layer's cost reads more of the layout: the expert mesh (ep, expert tp), the all-to-all overlap (and
    the schedule, whose V shape makes it DualPipeV's) and dispatcher, the routing imbalance, and where the EP and
    expert-TP groups sit."""

    ep: int
    expert_tp: int
    ep_overlap: bool
    v_shaped: bool
    ep_dispatcher: str
    moe_imbalance: float
    ep_stride: int
    etp_stride: int

    __hash__ = hash_once  # many memo keys hold it

    @classmethod
    def of(cls, lay: Layout) -> ExpertLayout:
        return cls(ep=lay.ep, expert_tp=lay.expert_tp, ep_overlap=lay.ep_overlap, v_shaped=lay.schedule == "zb-v",
                   ep_dispatcher=lay.ep_dispatcher,
                   moe_imbalance=lay.moe_imbalance, ep_stride=_stride(lay, "ep", True),
                   etp_stride=_stride(lay, "tp", True))


def step_tables(inputs: StepInputs) -> dict[str, dict]:
    """The running call's memo tables for `inputs`, by name (``cache.current``)."""
    tables = current().table("step")
    found = tables.get(inputs)
    if found is None:
        found = tables[inputs] = {}
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

    @property
    def inputs(self) -> StepInputs:
        return StepInputs(self.spec, self.dev, seq=self.seq, recipe=self.recipe, attention=self.attention,
                          dropout=self.dropout, efficiency=self.eff)

    def table(self, name: str) -> dict:
        """The running call's memo table `name` for this context's ``StepInputs``."""
        tables = self.__dict__.get("_tables")
        if tables is None:
            tables = self.__dict__["_tables"] = step_tables(self.inputs)
        found = tables.get(name)
        if found is None:
            found = tables[name] = {}
        return found

    @property
    def layer_layout(self) -> LayerLayout:
        """``LayerLayout.of`` the layout, one object per value in the call (keys holding the same object compare at
        once)."""
        found = self.__dict__.get("_layer_layout")
        if found is None:
            found = self.__dict__["_layer_layout"] = _canonical(LayerLayout.of(self.lay))
        return found

    @property
    def expert_layout(self) -> ExpertLayout:
        found = self.__dict__.get("_expert_layout")
        if found is None:
            found = self.__dict__["_expert_layout"] = _canonical(ExpertLayout.of(self.lay))
        return found

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


def layer_kind(spec: ModelSpec, i: int) -> tuple:
    """What makes two layers cost the same, all a layer's cost reads of its index: its mixers and FFN, its attention
    span (which sets its head width and K/V heads), whether it reads an earlier layer's K/V (no K/V projections, its
    own FFN width: Gemma 4's KV-shared layers), how it compresses its KV and whether it runs a lightning indexer
    (DeepSeek-V3.2 / V4). tests/test_step_caches.py holds every layer of a kind to its first one's cost."""
    mixers, ffn = spec.layer_parts(i)
    return (mixers, ffn, spec.attention_span(i) if "attention" in mixers else "", spec.kv_shared(i),
            spec.compression(i), spec.has_indexer(i))


def _context(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, rec: Recipe, attention: str = "flash",
             dropout: bool = False) -> StepContext:
    """The prediction context of `lay` (_prepare's; the search's floors read the same, with flash attention and no
    dropout), at today's KERNEL_EFFICIENCY."""
    return StepContext(spec, dev, lay, seq_len, rec, attention=attention, dropout=dropout,
                       eff=constants.KERNEL_EFFICIENCY)


def _context_in(inputs: tuple, lay: Layout, fields: tuple[LayerLayout, ExpertLayout] | None = None) -> StepContext:
    """_context of `lay` from `inputs` (spec, device, sequence, recipe), as the layout search builds each layout's;
    `fields`: the layout's (LayerLayout, ExpertLayout) where the caller has them."""
    spec, dev, seq_len, rec = inputs
    ctx = StepContext(spec, dev, lay, seq_len, rec, eff=constants.KERNEL_EFFICIENCY)
    if fields is not None:
        ctx.__dict__["_layer_layout"], ctx.__dict__["_expert_layout"] = fields
    return ctx


def _canonical(record: Any) -> Any:
    """The running call's one object equal to `record` (itself, the first time)."""
    return current().table("records").setdefault(record, record)
