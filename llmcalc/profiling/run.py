"""`llmcalc profile` and the report's measured sections: which kind of run a request asks for, the refusals
each kind needs first, and the run. Torch-free at import (the CLI imports it before checking torch is
installed); the profiling modules are imported by the runs that need them.

Four kinds: a sharded run (``--world-size`` virtual or ``--nproc`` real: ``launch.sharded_profile``), a virtual
fine-tuning step (``lora.virtual_finetune_profile``), a virtual step (``measure.virtual_profile``) and a real
one (``measure.real_profile``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..errors import LlmcalcError
from ..records import dataclass
from ..results import Calibration, ProfileResult
from ..spec import ModelSpec
from ..units import GIB
from ..validate import DEFAULT_SEQ_LEN, MAX_PROFILE_LAYERS

if TYPE_CHECKING:
    from ..analytic.finetune import LoraConfig
    from ..analytic.finetune_request import FinetuneRequest
    from ..analytic.memory import MemoryEstimate
    from ..fallback import FallbackModel
    from ..render.progress import Progress

VIRTUAL_RECIPES = {"fp32": "fp32", "fp16": "fp16-mixed"}  # --dtype -> recipe of a virtual run (else bf16-mixed)
REAL_RECIPES = {"fp32": "fp32", "bf16": "bf16-mixed", "fp16": "fp16-mixed"}


def need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        raise LlmcalcError("profiling needs torch: pip install 'llmcalc[profile]' (on a CPU-only machine install "
                           "torch==2.13.0 first)") from None


def check_profile_size(specs: list[ModelSpec], batch: int, seq_len: int, virtual: bool, recipe: str = "fp32",
                       device: str = "cpu") -> None:
    """Refuse, with the estimate, a profile this machine cannot hold (real) or build in seconds (virtual)."""
    from ..analytic.memory import training_memory

    for spec in specs:
        if spec.total_layers > MAX_PROFILE_LAYERS:
            raise LlmcalcError(f"{spec.name} has {spec.total_layers:,} layers; a profile builds every one: use "
                               f"--layers N (at most {MAX_PROFILE_LAYERS:,})")
        if virtual or spec.architecture != "decoder":
            continue
        from .measure import available_memory

        need = training_memory(spec, batch, seq_len, recipe, "adamw", optimizer_impl="for-loop").peak
        have = available_memory(device)
        if have is not None and need > 0.8 * have:
            raise LlmcalcError(
                f"a real {device} profile of {spec.name} at micro-batch {batch} x seq {seq_len:,} ({recipe}) needs "
                f"about {need / GIB:,.1f} GiB, and this machine has {have / GIB:,.1f} GiB available: use "
                f"--virtual, or fewer layers (--layers 2) or a shorter --seq-len")


@dataclass(frozen=True)
class ProfileRequest:
    """What `profile` is asked; the option-presence refusals (--steps with --virtual, ...) are the CLI's."""

    model: str  # as typed: a real sharded run's ranks load it again
    virtual: bool = False
    device: str = "auto"
    dtype: str = "auto"
    recipe: str | None = None
    batch: int = 1
    seq_len: int = DEFAULT_SEQ_LEN
    steps: int = 10
    warmup: int = 2
    compile: bool = False
    counter: str = "torch"
    recompute: str = "none"
    attention: str = "flash"
    layers: int | None = None
    peak_tflops: float | None = None
    world_size: int | None = None
    nproc: int | None = None
    tp: int = 1
    all_layers: bool = False
    finetune: FinetuneRequest | None = field(default=None)

    def __post_init__(self) -> None:
        if self.virtual and self.counter != "torch":
            raise LlmcalcError("--counter: fvcore traces real tensors; with --virtual use --counter torch")

    @property
    def sharded(self) -> bool:
        return self.world_size is not None or self.nproc is not None

    @property
    def internal_attention(self) -> str:
        """The reference model's name for the kernel: sdpa (flash) or eager."""
        return "sdpa" if self.attention == "flash" else "eager"


def run_profile(spec: ModelSpec | FallbackModel, request: ProfileRequest) -> ProfileResult | dict[str, Any]:
    """`llmcalc profile`: the run the request asks for, each kind's refusals first; a sharded run's result is
    its JSON (every rank's figures), the others a ProfileResult. A model without a formula (fallback.FallbackModel)
    is profiled as transformers builds it (`_counted`)."""
    need_torch()
    if not isinstance(spec, ModelSpec):
        return _counted(spec, request)
    from .model import check_buildable

    check_buildable(spec)
    base = spec
    spec = _with_layers(spec, request.layers)
    cfg = None if request.finetune is None else request.finetune.config()
    if request.sharded:
        return _sharded(base, request, cfg)
    if request.tp != 1:
        raise LlmcalcError("--tp needs a sharded run: add --virtual --world-size N or --nproc N")
    if cfg is not None:
        return _finetune(spec, request, cfg)
    if request.virtual:
        return _virtual(spec, request)
    return _real(spec, request)


def _with_layers(spec: ModelSpec, layers: int | None) -> ModelSpec:
    """The model cut to its first `layers` blocks (to fit a real run), or as it is."""
    if layers is None:
        return spec
    if layers > spec.n_layers:
        raise LlmcalcError(f"--layers {layers} exceeds {spec.name}'s {spec.n_layers} layers")
    return spec.with_layers(layers, name=f"{spec.name} ({layers} layers)",
                            n_decoder_layers=layers if spec.n_decoder_layers else 0)


def _sharded(spec: ModelSpec, request: ProfileRequest, cfg: LoraConfig | None) -> dict[str, Any]:
    if cfg is not None:
        raise LlmcalcError("sharded profiles train the full model; drop --finetune or --world-size/--nproc")
    if request.recipe is not None or request.recompute != "none":
        raise LlmcalcError("sharded profiles fix their precision with --dtype (bf16: FSDP2 mixed precision, or "
                           "fp32) and do not recompute; drop --recipe/--recompute")
    from .distributed import with_layers
    from .launch import sharded_profile

    layers = request.layers
    if layers is not None:  # keeps n_kv_heads (ModelSpec.replace would derive MHA again)
        spec = with_layers(spec, layers, name=f"{spec.name} ({layers} layers)")
    return sharded_profile(spec, request.model, layers, request.virtual, request.world_size, nproc=request.nproc,
                           tp=request.tp, device=request.device, dtype=request.dtype, batch=request.batch,
                           seq=request.seq_len, steps=request.steps, warmup=request.warmup,
                           attention=request.internal_attention, peak_tflops=request.peak_tflops,
                           all_layers=request.all_layers)


def _finetune(spec: ModelSpec, request: ProfileRequest, cfg: LoraConfig) -> ProfileResult:
    if not request.virtual:
        raise LlmcalcError("fine-tuning profiles run virtually: add --virtual")
    if request.all_layers:
        raise LlmcalcError("--all-layers: a fine-tuning profile measures every block already; drop it")
    from .lora import virtual_finetune_profile

    return virtual_finetune_profile(spec, cfg, request.batch, request.seq_len, request.recompute)


def _virtual(spec: ModelSpec, request: ProfileRequest) -> ProfileResult:
    check_profile_size([spec], request.batch, request.seq_len, virtual=True)
    from .measure import virtual_profile

    recipe = request.recipe or VIRTUAL_RECIPES.get(request.dtype, "bf16-mixed")
    return virtual_profile(spec, request.batch, request.seq_len, recipe, recompute=request.recompute,
                           attention=request.internal_attention, all_layers=request.all_layers)


def _real(spec: ModelSpec, request: ProfileRequest) -> ProfileResult:
    from ..render.progress import step_clock
    from .measure import peak_for, real_passes, real_profile, resolve_device

    device = resolve_device(request.device)
    dtype = ("bf16" if device == "cuda" else "fp32") if request.dtype == "auto" else request.dtype
    recipe = request.recipe or REAL_RECIPES[dtype]
    check_profile_size([spec], request.batch, request.seq_len, virtual=False, recipe=recipe, device=device)
    compute_dtype = "fp32" if recipe == "fp32" else "fp16" if recipe == "fp16-mixed" else "bf16"
    peak, source = peak_for(device, compute_dtype, request.peak_tflops)
    with step_clock(real_passes(request.steps, request.warmup, request.compile),
                    predicted_step_seconds(spec, request, peak)):
        return real_profile(spec, device, request.batch, request.seq_len, recipe=recipe,
                            recompute=request.recompute, attention=request.internal_attention, steps=request.steps,
                            warmup=request.warmup, compile=request.compile, counter=request.counter, peak_flops=peak,
                            peak_source=source)


def predicted_step_seconds(spec: ModelSpec, request: ProfileRequest, peak: float | None) -> float | None:
    """A training step's time before one is measured, for the ETA: its FLOPs (with recomputation) over the peak the
    profile measures its MFU against (the calibrated one on a CPU); a lower bound, replaced by the measured mean
    as soon as a step has run."""
    if not peak:
        return None
    from ..analytic.flops import step_flops

    return step_flops(spec, request.batch, request.seq_len, recompute=request.recompute).hardware_flops / peak


def _counted(model: FallbackModel, request: ProfileRequest) -> ProfileResult:
    """A model without a formula: transformers' model profiled (hf_profile), virtually or on a real device, each
    option it cannot take refused in one line."""
    from ..fallback import refuse_finetune

    refuse_finetune(model, None if request.finetune is None else request.finetune.config())
    sharded = "a sharded profile shards llmcalc's reference model"
    refused = [(request.sharded, "--world-size/--nproc", sharded), (request.tp != 1, "--tp", sharded),
               (request.layers is not None, "--layers", "it cuts llmcalc's reference model; transformers' model "
                                                        "keeps every layer"),
               (request.all_layers, "--all-layers", "every layer is measured already"),
               (request.recompute != "none", f"--recompute {request.recompute}",
                "the fallback's FLOPs and memory are measured without activation checkpointing"),
               (request.attention != "flash", f"--attention {request.attention}",
                "transformers' model runs the attention the fallback counted (sdpa where it has one)"),
               (request.counter != "torch", f"--counter {request.counter}", "it is counted by FlopCounterMode only"),
               (request.compile, "--compile", "torch.compile of transformers' models is not measured")]
    for bad, option, reason in refused:
        if bad:
            raise LlmcalcError(f"{option}: {model.model_type} has no llmcalc formula and is profiled as transformers "
                               f"builds it; {reason}")
    from .hf_profile import Expected, counted_profile

    if request.virtual:
        recipe = request.recipe or VIRTUAL_RECIPES.get(request.dtype, "bf16-mixed")
        memory, note = _memory(request, recipe)
        return counted_profile(Expected(model, request.batch, request.seq_len, recipe, memory=memory,
                                        memory_note=note))
    from .measure import peak_for, resolve_device

    device = resolve_device(request.device)
    dtype = ("bf16" if device == "cuda" else "fp32") if request.dtype == "auto" else request.dtype
    recipe = request.recipe or REAL_RECIPES[dtype]
    memory, note = _memory(request, recipe)
    _check_counted_size(model, memory, request, device)
    compute_dtype = "fp32" if recipe == "fp32" else "fp16" if recipe == "fp16-mixed" else "bf16"
    peak, source = peak_for(device, compute_dtype, request.peak_tflops)
    return counted_profile(Expected(model, request.batch, request.seq_len, recipe, memory=memory, memory_note=note),
                           device=device,
                           steps=request.steps, warmup=request.warmup, peak_flops=peak, peak_source=source)


def _memory(request: ProfileRequest, recipe: str) -> tuple[MemoryEstimate | None, str]:
    """`memory`'s estimate of the profiled step (one GPU, AdamW's for-loop path as the profile runs it), or None
    and why `memory` refuses it."""
    from ..analytic.memory_plan import MemoryRequest, plan_memory
    from ..fallback import load_measured

    measured = load_measured(request.model, request.seq_len)
    try:
        plan = plan_memory(measured, MemoryRequest(batch=request.batch, seq_len=request.seq_len, recipe=recipe,
                                                   optimizer_impl="for-loop", n_gpus=1))
    except LlmcalcError as exc:
        return None, f"`memory` refuses this set-up: {exc}"
    from ..analytic.memory import MemoryEstimate

    assert isinstance(plan.estimate, MemoryEstimate), "a full training step's estimate (no --finetune)"
    return plan.estimate, ""


def _check_counted_size(model: FallbackModel, memory: MemoryEstimate | None, request: ProfileRequest,
                        device: str) -> None:
    """Refuse a real run of a model without a formula that `memory` says this machine cannot hold."""
    from .measure import available_memory

    if memory is None:
        raise LlmcalcError(f"a real profile of {model.name} needs `memory`'s estimate to check it fits, and "
                           f"`memory` refuses this set-up; use --virtual")
    have = available_memory(device)
    if have is not None and memory.peak > 0.8 * have:
        raise LlmcalcError(
            f"a real {device} profile of {model.name} at micro-batch {request.batch} x seq {request.seq_len:,} "
            f"needs about {memory.peak / GIB:,.1f} GiB, and this machine has {have / GIB:,.1f} GiB available: use "
            f"--virtual or a shorter --seq-len")


# --- the report's measured sections (`report --profile virtual|real`, `--sharded-profile N`) ---------------


@dataclass(frozen=True)
class ReportProfiles:
    """What `report` measures besides its formulas: a profile per model (`mode` virtual or real) and a virtual
    sharded profile per model at `sharded_world` ranks; `report.run` calls these without importing profiling."""

    mode: str = "none"  # none, virtual, real
    sharded_world: int | None = None
    tp: int = 1
    micro_batch: int = 1
    seq_len: int = DEFAULT_SEQ_LEN
    recompute: str = "none"

    def steps(self, n_models: int) -> int:
        """Progress steps these add: one per model and kind."""
        return (n_models if self.mode != "none" else 0) + (n_models if self.sharded_world else 0)

    def check_size(self, specs: list[ModelSpec]) -> None:
        if self.mode != "none":
            check_profile_size(specs, self.micro_batch, self.seq_len, virtual=self.mode == "virtual")

    def check_sharded(self, specs: list[ModelSpec]) -> None:
        """Refuse, before any work, a sharded profile a model cannot take."""
        if self.sharded_world is None:
            return
        need_torch()
        from .distributed import check_layout
        from .model import check_buildable

        for spec in specs:
            check_buildable(spec)
            check_layout(spec, self.sharded_world, self.tp)

    def profiles(self, specs: list[ModelSpec], recipe: str, progress: Progress) -> dict[str, ProfileResult] | None:
        """Each model's profile: virtual in the report's recipe, or a real 3-step fp32 run on the CPU."""
        if self.mode == "none":
            return None
        need_torch()
        from .measure import peak_for, real_profile, virtual_profile

        out = {}
        for spec in specs:
            progress.step(f"profiling {spec.name}")
            if self.mode == "virtual":
                out[spec.name] = virtual_profile(spec, self.micro_batch, self.seq_len, recipe,
                                                 "full" if self.recompute == "full" else "none")
            else:
                peak, source = peak_for("cpu", "fp32")
                out[spec.name] = real_profile(spec, "cpu", self.micro_batch, self.seq_len, "fp32", steps=3, warmup=1,
                                              peak_flops=peak, peak_source=source)
        return out

    def sharded(self, specs: list[ModelSpec], progress: Progress) -> dict[str, dict[str, Any]] | None:
        """Each model's virtual sharded profile (bf16 FSDP2 mixed precision), as `profile --virtual --world-size`."""
        if not self.sharded_world:
            return None
        from .distributed import virtual_distributed_profile

        out = {}
        for spec in specs:
            progress.step(f"sharded profile of {spec.name}")
            out[spec.name] = virtual_distributed_profile(spec, self.sharded_world, self.tp, self.micro_batch,
                                                         seq=self.seq_len, mixed=True, attention="sdpa").to_json()
        return out


# --- `llmcalc calibrate` ---------------------------------------------------------------------------------


def run_calibration(device: str = "auto", dtype: str = "fp32", size: int | None = None,
                    seconds: float = 2.0) -> Calibration:
    """Time repeated square matmuls (`size`: 8192 on CUDA, 1024 on a CPU, by default) for `seconds`, and find
    the datasheet peak of a CUDA device's preset; the measurement replaces the cached peak that profiles of a
    device without a datasheet figure measure their MFU against (``peak_cache``)."""
    need_torch()
    from ..spec import find_accelerator
    from .measure import calibrated_peak, device_name, resolve_device

    device = resolve_device(device)
    size = size or (8192 if device == "cuda" else 1024)
    flops, entry = calibrated_peak(device, dtype, size, seconds, refresh=True)  # the peak later profiles use
    catalog = None
    acc = find_accelerator(device_name(device)) if device == "cuda" else None
    if acc is not None and dtype in acc.peak_flops:
        catalog = {"preset": acc.key, "peak_flops_per_s": acc.peak(dtype)}
    from .peak_cache import describe

    return Calibration(device_name(device), dtype, size, flops, catalog, cached=describe(entry))
