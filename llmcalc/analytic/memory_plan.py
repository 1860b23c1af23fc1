"""`llmcalc memory`: the request as given, checked and turned into one estimate with its notes.

Full training: the fewest GPUs that hold the layout when --n-gpus is not given (tp x dp must hold ep x etp),
``memory.training_memory`` on that layout, and, when it does not fit the device, the smallest ZeRO stage or
GPU count that would (``memory.smallest_fit``). With --finetune: ``finetune.finetune_memory``, which models one
GPU holding the whole frozen base, so the layout options are refused.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..spec import ModelSpec
from ..units import GIB
from ..validate import DEFAULT_SEQ_LEN, DEFAULT_ZERO
from .finetune_request import FinetuneRequest
from .memory import MemoryEstimate, Optimizer, custom_optimizer, smallest_fit, training_memory
from .parallel import Parallel

if TYPE_CHECKING:  # imported where used: `memory` on a preset without --finetune loads neither
    from .finetune import FinetuneMemory, LoraConfig
    from .measured import MeasuredModel


@dataclass(frozen=True)
class MemoryRequest:
    """What `memory` is asked (None: not given, the default applies)."""

    batch: int = 1
    seq_len: int = DEFAULT_SEQ_LEN
    recipe: str = "bf16-mixed"
    optimizer: str = "adamw"
    optimizer_bytes: float | None = None  # instead of `optimizer`: state bytes per parameter
    optimizer_impl: str = "fused"
    recompute: str = "none"
    attention: str = "flash"
    dropout: bool = False
    n_gpus: int | None = None  # default: the fewest that hold the layout
    zero: int | None = None  # default DEFAULT_ZERO
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None  # default tp
    sequence_parallel: bool = True
    reserve_gib: float = 0.0
    finetune: FinetuneRequest = field(default_factory=FinetuneRequest)
    loss_impl: str = "full"  # the LM head's cross-entropy: vocabulary.LOSS_IMPLS (fused: with --finetune)

    @property
    def optimizer_or_bytes(self) -> str | Optimizer:
        return custom_optimizer(self.optimizer_bytes) if self.optimizer_bytes is not None else self.optimizer

    def parallel(self) -> Parallel:
        """The layout: tp x dp must hold ep x etp, so without --n-gpus the fewest GPUs that do,
        pp x lcm(tp, ep x etp)."""
        etp = self.etp or self.tp
        folded = math.lcm(self.tp, self.ep * etp)
        zero = DEFAULT_ZERO if self.zero is None else self.zero
        return Parallel.over(self.n_gpus or self.pp * folded, tp=self.tp, pp=self.pp, zero=zero,
                             sequence_parallel=self.sequence_parallel, ep=self.ep, etp=self.etp or 0)


@dataclass
class MemoryPlan:
    """`memory`'s answer: the estimate (full training or fine-tuning), the device it is held against (or None)
    with the memory kept free, the notes the layout adds, and how to make it fit where it does not."""

    estimate: MemoryEstimate | FinetuneMemory
    device: Accelerator | None = None
    reserve: float = 0.0  # bytes kept free on the device
    notes: list[str] = field(default_factory=list)
    fit_advice: dict[str, Any] | None = None
    fit: list[dict[str, Any]] | None = None  # --finetune with --gpu: the largest micro-batch and length per recompute
    cuda_context: float = 0.0


def plan_memory(spec: ModelSpec | MeasuredModel, request: MemoryRequest,
                device: Accelerator | None = None) -> MemoryPlan:
    """`llmcalc memory`: training (or --finetune) memory per GPU of `spec`, held against `device`; a model
    transformers measured (``measured.MeasuredModel``) takes ``measured_training_memory``."""
    reserve = request.reserve_gib * GIB
    if device is not None and reserve >= device.memory_bytes:
        raise LlmcalcError(f"--reserve-gib {request.reserve_gib:g} leaves nothing of {device.key}'s "
                           f"{device.memory_bytes / GIB:g} GiB")
    opt = request.optimizer_or_bytes
    if request.loss_impl != "full" and request.finetune.config() is None:
        raise LlmcalcError(f"--loss-impl {request.loss_impl} is modelled with --finetune lora|qlora (a frozen LM head: "
                           "Liger's fused loss then allocates no head gradient); for full training drop it")
    if not isinstance(spec, ModelSpec):  # a MeasuredModel
        from .measured import measured_training_memory

        if request.finetune.config() is not None:
            raise LlmcalcError(f"--finetune needs llmcalc's formula for the layers it adapts; {spec.model_type} is "
                               "measured by transformers' modelling code")
        est = measured_training_memory(spec, request.batch, request.seq_len, recipe=request.recipe, optimizer=opt,
                                       recompute=request.recompute, attention=request.attention,
                                       dropout=request.dropout, parallel=request.parallel(),
                                       optimizer_impl=request.optimizer_impl)
        return MemoryPlan(est, device, reserve)
    cfg = request.finetune.config()
    if cfg is not None:
        from .finetune import finetune_memory

        _refuse_with_finetune(request)
        cfg = shipped_base(spec, cfg, typed=request.finetune.base_dtype is not None)
        est = finetune_memory(spec, cfg, request.batch, request.seq_len, optimizer=opt, recompute=request.recompute,
                              attention=request.attention, dropout=request.dropout, loss_impl=request.loss_impl)
        if device is None:
            return MemoryPlan(est, device, reserve)
        context = cuda_context_bytes(device)
        fit = finetune_fit(spec, cfg, request, device.usable_bytes - context - reserve)
        return MemoryPlan(est, device, reserve + context, fit=fit, cuda_context=context)
    parallel = request.parallel()
    settings: dict[str, Any] = dict(batch=request.batch, seq_len=request.seq_len, recipe=request.recipe,
                                    optimizer=opt, recompute=request.recompute, attention=request.attention,
                                    dropout=request.dropout, optimizer_impl=request.optimizer_impl)
    spec, uneven = _even_stages(spec, parallel.pp)
    plan = MemoryPlan(training_memory(spec, parallel=parallel, **settings), device, reserve)
    if uneven:
        plan.notes.append(uneven)
    tp, kv_heads = request.tp, spec.n_kv_heads
    if not spec.is_mla and tp > kv_heads:
        plan.notes.append(f"tp {tp} > {kv_heads} key/value heads: each KV head's projection is replicated on "
                          f"{tp // kv_heads} GPUs (Megatron-LM); its weights and activations are counted per GPU as "
                          f"if split, a slight underestimate")
    if device is not None and plan.estimate.peak > device.memory_bytes - reserve:
        plan.fit_advice = smallest_fit(spec, parallel, device.memory_bytes - reserve, **settings)
        plan.notes.append(plan.fit_advice["text"])
    return plan


def _even_stages(spec: ModelSpec, pp: int) -> tuple[ModelSpec, str]:
    """`spec` and no note where pp divides its layers; else the copy of ceil(L / pp) layers on every stage (the most
    loaded stage of the step model's split, which takes the shortfall from the first and last stages: what `layout`
    checks, search_memory._least_that_fits) and the note saying so."""
    if pp <= 1 or spec.n_layers % pp == 0:
        return spec, ""
    per = -(-spec.n_layers // pp)
    return spec.with_layers(per * pp), (
        f"pp {pp} does not divide {spec.n_layers} layers: sized as a {per * pp}-layer copy, {per} layers on every "
        f"stage (ceil({spec.n_layers} / {pp}), the most loaded stage; the step model's split puts "
        f"{spec.n_layers - per * (pp - 2)} on the first and last together), as `layout` checks it")


def _refuse_with_finetune(request: MemoryRequest) -> None:
    """The options fine-tuning memory does not model: one GPU holds the whole frozen base (its dtype is
    --base-dtype, the adapters are fp32), so no layout, recipe or optimizer implementation applies."""
    clash = [name for name, off in (("--tp", request.tp == 1), ("--pp", request.pp == 1), ("--ep", request.ep == 1),
                                    ("--etp", request.etp is None), ("--zero", request.zero in (None, 0)),
                                    ("--recipe", request.recipe == "bf16-mixed"),
                                    ("--optimizer-impl", request.optimizer_impl == "fused")) if not off]
    if clash:
        raise LlmcalcError(f"{', '.join(clash)} not modelled with --finetune (each data-parallel GPU holds the "
                           "whole frozen base; the base dtype is --base-dtype, adapters are fp32); drop them")


def shipped_base(spec: ModelSpec, cfg: LoraConfig, typed: bool) -> LoraConfig:
    """The frozen base of a pre-quantized checkpoint as it ships (a QLoRA of an unsloth *-bnb-4bit, a LoRA on
    gpt-oss's MXFP4 or DeepSeek's FP8): bitsandbytes configs set the base dtype and double quantisation, other
    formats their stored bytes (analytic/quant.py); a typed --base-dtype wins."""
    if typed or spec.quantization_config is None:
        return cfg
    from .quant import weight_format

    fmt = weight_format(spec)
    q = fmt.quant
    if q is None:
        return cfg
    if q.method == "bitsandbytes":  # the dtype as the config was read (spec/quantization.py), not read again
        return replace(cfg, base_dtype=q.storage, double_quant=q.format.double_quant)
    return replace(cfg, stored_base_bytes=sum(fmt.component_bytes(spec).values()), stored_label=fmt.describe())


# The CUDA context (and cuBLASLt workspace) a training process holds before its first tensor, per GPU generation:
# ~400 MB with lazy module loading (ptrblck, pytorch/pytorch#109888: "around 400MB if CUDA >= 11.7"), 256 MiB on an
# RTX 3090 (invoke-ai/InvokeAI#9413: "256 MiB is the characteristic size of a bare CUDA context"), 426 MiB on an RTX
# 6000 Ada (unslothai/unsloth-zoo PR #1053, torch.cuda.mem_get_info); plus PyTorch's cuBLASLt workspace, 32 MiB on
# sm90 and later, 4 MiB on Ampere (pytorch/pytorch PR #120925). research/mechanisms/mechanisms.md sec. 7.
CUDA_CONTEXT = {"ampere": 256 * 2**20 + 4 * 2**20, "ada": 426 * 2**20 + 4 * 2**20,
                "hopper": 400e6 + 32 * 2**20, "blackwell": 400e6 + 32 * 2**20}
CUDA_CONTEXT_DEFAULT = 400e6  # other generations: ptrblck's figure


def cuda_context_bytes(device: Accelerator) -> float:
    from .vllm import generation

    return CUDA_CONTEXT.get(generation(device), CUDA_CONTEXT_DEFAULT)


MAX_FIT_BATCH = 4096


def finetune_fit(spec: ModelSpec, cfg: LoraConfig, request: MemoryRequest, capacity: float) -> list[dict[str, Any]]:
    """Per recompute mode: the largest micro-batch at --seq-len, and the longest sequence at micro-batch 1 (a multiple
    of 256, up to the model's max_position_embeddings or 1M), that fit in `capacity` bytes."""
    from .finetune import finetune_memory

    opt = request.optimizer_or_bytes

    def peak(batch: int, seq: int, recompute: str) -> float:
        return finetune_memory(spec, cfg, batch, seq, optimizer=opt, recompute=recompute, attention=request.attention,
                               dropout=request.dropout, loss_impl=request.loss_impl).peak

    def largest(fits: Any, hi: int) -> int:
        lo = 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo

    rows = []
    longest = spec.max_seq_len or 2**20
    for recompute in ("none", "selective", "full"):
        batch = largest(lambda b, r=recompute: peak(b, request.seq_len, r) <= capacity, MAX_FIT_BATCH)
        units = largest(lambda u, r=recompute: peak(1, 256 * u, r) <= capacity, max(1, longest // 256))
        rows.append({"recompute": recompute, "largest_micro_batch": batch, "seq_len": request.seq_len,
                     "longest_seq_len": 256 * units})
    return rows
