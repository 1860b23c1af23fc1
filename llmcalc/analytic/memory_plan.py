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
    cp: int = 1
    vpp: int = 1
    global_batch: int | None = None  # sequences per step (default: the steady state, enough micro-batches)
    first_stage_layers: int | None = None  # the pipeline's stage layers as train takes them (rank_layers)
    last_stage_layers: int | None = None
    pipeline_layout: str | None = None
    dp_shard: int | None = None  # HSDP: the ranks ZeRO shards over (the step layout's dp_shard)
    sequence_parallel: bool = True
    reserve_gib: float = 0.0
    finetune: FinetuneRequest = field(default_factory=FinetuneRequest)
    loss_impl: str = "full"  # the LM head's cross-entropy: vocabulary.LOSS_IMPLS (fused: with --finetune)

    @property
    def optimizer_or_bytes(self) -> str | Optimizer:
        return custom_optimizer(self.optimizer_bytes) if self.optimizer_bytes is not None else self.optimizer

    def parallel(self) -> Parallel:
        """The layout: tp x cp x dp must hold ep x etp, so without --n-gpus the fewest GPUs that do,
        pp x lcm(tp x cp, ep x etp)."""
        etp = self.etp or self.tp
        folded = math.lcm(self.tp * self.cp, self.ep * etp)
        zero = DEFAULT_ZERO if self.zero is None else self.zero
        return Parallel.over(self.n_gpus or self.pp * folded, tp=self.tp, cp=self.cp, pp=self.pp, vpp=self.vpp,
                             zero=zero, sequence_parallel=self.sequence_parallel, ep=self.ep, etp=self.etp or 0)

    @property
    def pipeline_given(self) -> bool:
        """Whether the layout names more than tp, pp and the experts: a global batch, cp, vpp or the pipeline's stage
        layers (the step model's make_layout then checks it)."""
        return self.global_batch is not None or self.vpp > 1 or self.cp > 1 or bool(self.first_stage_layers or
                                                                     self.last_stage_layers or self.pipeline_layout
                                                                     or self.dp_shard)

    def stepped(self, spec: ModelSpec) -> tuple[Parallel, tuple[int, ...] | None, int | None]:
        """(the layout, each pipeline rank's layers or None, micro-batches per step or None) as `train --global-batch`
        takes them: checked by the step model's make_layout (the same refusals as train and layout), the global batch
        the steady state's (one micro-batch per data-parallel rank) where none is given."""
        from .pipeline_layout import layout_options, rank_layers
        from .step.layout import make_layout

        par = self.parallel()
        if not self.pipeline_given:
            return par, None, None
        pipeline = {k: v for k, v in (("first_stage_layers", self.first_stage_layers),
                                      ("last_stage_layers", self.last_stage_layers),
                                      ("pipeline_layout", self.pipeline_layout)) if v}
        given = layout_options({"pp": self.pp, "vpp": self.vpp if self.vpp > 1 else None, **pipeline})
        step: dict[str, Any] = {k: v for k, v in given.items() if k in pipeline or k == "mtp_layers"}
        if self.dp_shard:
            step["dp_shard"] = self.dp_shard
        lay = make_layout(spec, par.n_gpus, self.seq_len, self.global_batch or par.dp * self.batch, tp=self.tp,
                          cp=self.cp, pp=self.pp, vpp=given.get("vpp") or 1, ep=self.ep, etp=self.etp,
                          micro_batch=self.batch, zero=par.zero, sequence_parallel=self.sequence_parallel, **step)
        stages = rank_layers(spec.n_layers, lay.pp, lay.first_stage_layers, lay.last_stage_layers,
                             lay.pipeline_layout)
        return lay, stages, lay.grad_accum if self.global_batch is not None else None


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
    if device is not None and reserve >= device.usable_bytes:
        raise LlmcalcError(f"--reserve-gib {request.reserve_gib:g} leaves nothing of {device.key}'s "
                           f"{device.usable_bytes / GIB:.4g} GiB usable")
    opt = request.optimizer_or_bytes
    if request.loss_impl != "full" and request.finetune.config() is None:
        raise LlmcalcError(f"--loss-impl {request.loss_impl} is modelled with --finetune lora|qlora (a frozen LM head: "
                           "Liger's fused loss then allocates no head gradient); for full training drop it")
    if not isinstance(spec, ModelSpec):  # a MeasuredModel
        from .measured import measured_training_memory

        if request.finetune.config() is not None:
            raise LlmcalcError(f"--finetune needs llmcalc's formula for the layers it adapts; {spec.model_type} is "
                               "measured by transformers' modelling code")
        if request.dp_shard:
            raise LlmcalcError(f"--dp-shard (HSDP) is sized by llmcalc's formula; {spec.model_type} is measured by "
                               "transformers' modelling code: drop it")
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
    parallel, stages, micro_batches = request.stepped(spec)
    settings: dict[str, Any] = dict(batch=request.batch, seq_len=request.seq_len, recipe=request.recipe,
                                    optimizer=opt, recompute=request.recompute, attention=request.attention,
                                    dropout=request.dropout, optimizer_impl=request.optimizer_impl,
                                    stage_layers=stages, micro_batches=micro_batches)
    plan = MemoryPlan(training_memory(spec, parallel=parallel, **settings), device, reserve)
    tp, kv_heads = request.tp, spec.n_kv_heads
    if not spec.is_mla and tp > kv_heads:
        plan.notes.append(f"tp {tp} > {kv_heads} key/value heads: each KV head's projection is replicated on "
                          f"{tp // kv_heads} GPUs (Megatron-LM); its weights and activations are counted per GPU as "
                          f"if split, a slight underestimate")
    if device is not None and plan.estimate.peak > device.usable_bytes - reserve:  # layout's and train's capacity
        plan.fit_advice = smallest_fit(spec, parallel, device.usable_bytes - reserve, **settings)
        plan.notes.append(plan.fit_advice["text"])
    return plan


def _refuse_with_finetune(request: MemoryRequest) -> None:
    """The options fine-tuning memory does not model: one GPU holds the whole frozen base (its dtype is
    --base-dtype, the adapters are fp32), so no layout, recipe or optimizer implementation applies."""
    clash = [name for name, off in (("--tp", request.tp == 1), ("--pp", request.pp == 1), ("--ep", request.ep == 1),
                                    ("--etp", request.etp is None), ("--zero", request.zero in (None, 0)),
                                    ("--cp", request.cp == 1), ("--vpp", request.vpp == 1),
                                    ("--global-batch", request.global_batch is None),
                                    ("--first-stage-layers", request.first_stage_layers is None),
                                    ("--last-stage-layers", request.last_stage_layers is None),
                                    ("--pipeline-layout", request.pipeline_layout is None),
                                    ("--dp-shard", request.dp_shard is None),
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
