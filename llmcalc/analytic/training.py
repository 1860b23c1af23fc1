"""Training budgets: tokens -> FLOPs -> device-seconds -> wall time, GPU-hours, cost, energy.

Device time comes from one of two figures, never a hidden constant:
- MFU (model FLOPs utilization, PaLM App. B): device-seconds = model FLOPs / (peak x MFU), where
  model FLOPs exclude recomputation;
- achieved FLOP/s per device, as papers report them (Narayanan et al. 2021: "140 TFLOP/s per
  A100"): device-seconds = hardware FLOPs / achieved, where hardware FLOPs include recomputation.
Wall time is compute time over the goodput, the share of the run's wall-clock spent training (restarts, failures,
checkpoints and slow nodes take the rest): GPU-hours, wall-clock days, cost and energy are the wall figures (what
a model card's GPU-hours and a bill count), the compute figures beside them (`compute_gpu_hours`,
`compute_wall_clock_days`); MFU, HFU and tokens/s are while training.
Energy is device power only (TDP x device-hours), no cooling or host overhead (PUE 1.0).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..spec import ModelSpec
from ..units import fmt_tokens
from ..validate import (
    DEFAULT_GOODPUT,
    DEFAULT_SEQ_LEN,
    MIN_UTILIZATION,
    fraction,
    goodput,
    positive_int,
    positive_number,
)
from .finetune_request import FinetuneRequest
from .flops import utilization
from .rules import six_n

if TYPE_CHECKING:
    from .measured import MeasuredModel
    from .step.prediction import StepPrediction

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class TrainingEstimate:
    tokens: float
    model_flops: float  # forward + backward, no recomputation
    hardware_flops: float  # plus recomputation
    accelerator: Accelerator
    dtype: str
    n_gpus: int
    mfu: float | None = None  # given
    achieved_flops_per_s: float | None = None  # given: hardware FLOP/s per device
    usd_per_gpu_hour: float | None = None
    mfu_given: bool = True  # False: predicted by the step model, a figure in whichever convention, never refused
    goodput: float = 1.0  # share of the wall-clock spent training (--goodput; 1: compute time only)

    def __post_init__(self) -> None:
        check_positive("tokens", self.tokens)
        goodput(self.goodput)
        positive_int("n_gpus", self.n_gpus)
        if (self.mfu is None) == (self.achieved_flops_per_s is None):
            raise LlmcalcError("give exactly one of an MFU (--mfu, e.g. 0.4) or an achieved FLOP/s per GPU "
                               "(--achieved-tflops)")
        if self.mfu is not None and self.mfu_given:
            fraction("MFU", self.mfu)
        if self.achieved_flops_per_s is not None:
            check_positive("achieved FLOP/s", self.achieved_flops_per_s)
            if self.achieved_flops_per_s > self.peak:
                raise LlmcalcError(
                    f"achieved {self.achieved_flops_per_s / 1e12:.4g} TFLOP/s exceeds {self.accelerator.key}'s "
                    f"dense {self.dtype} peak of {self.peak / 1e12:.4g} TFLOP/s"
                )
        if self.usd_per_gpu_hour is not None:
            check_positive("price per GPU-hour", self.usd_per_gpu_hour)

    @property
    def peak(self) -> float:
        return self.accelerator.peak(self.dtype)

    @property
    def compute_gpu_seconds(self) -> float:
        """GPU-seconds spent training: model FLOPs / (peak x MFU), or hardware FLOPs / achieved FLOP/s."""
        if self.mfu is not None:
            return self.model_flops / (self.peak * self.mfu)
        assert self.achieved_flops_per_s is not None  # __post_init__: exactly one of the two is given
        return self.hardware_flops / self.achieved_flops_per_s

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds of wall-clock: compute / goodput (the GPUs are held through restarts and failures too)."""
        return self.compute_gpu_seconds / self.goodput

    @property
    def effective_mfu(self) -> float:
        return utilization(self.model_flops, self.compute_gpu_seconds, 1, self.peak)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilization: recomputation counted as useful work."""
        return utilization(self.hardware_flops, self.compute_gpu_seconds, 1, self.peak)

    @property
    def compute_wall_seconds(self) -> float:
        return self.compute_gpu_seconds / self.n_gpus

    @property
    def wall_seconds(self) -> float:
        """Wall-clock seconds: compute time / goodput."""
        return self.gpu_seconds / self.n_gpus

    @property
    def wall_clock_days(self) -> float:
        return self.wall_seconds / SECONDS_PER_DAY

    @property
    def compute_wall_clock_days(self) -> float:
        return self.compute_wall_seconds / SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of wall-clock (compute / goodput): what a model card states and a bill charges."""
        return self.gpu_seconds / SECONDS_PER_HOUR

    @property
    def compute_gpu_hours(self) -> float:
        return self.compute_gpu_seconds / SECONDS_PER_HOUR

    @property
    def price(self) -> float | None:
        """USD per GPU-hour: the one given, else the preset's, else unknown."""
        return self.usd_per_gpu_hour if self.usd_per_gpu_hour is not None else self.accelerator.usd_per_hour

    @property
    def cost_usd(self) -> float | None:
        return None if self.price is None else self.gpu_hours * self.price

    @property
    def energy_kwh(self) -> float | None:
        tdp = self.accelerator.tdp_watts
        return None if tdp is None else self.gpu_hours * tdp / 1000.0

    @property
    def tokens_per_second_per_gpu(self) -> float:
        """While training (compute time)."""
        return self.tokens / self.compute_gpu_seconds

    @property
    def model_flops_per_s_per_gpu(self) -> float:
        return self.model_flops / self.compute_gpu_seconds

    @property
    def hardware_flops_per_s_per_gpu(self) -> float:
        """Hardware FLOP/s per GPU (recomputation counted as work) = HFU x the dense peak."""
        return self.hfu * self.peak

    @property
    def tokens_per_second(self) -> float:
        """Cluster-wide throughput while training: tokens / compute wall-clock seconds."""
        return self.tokens / self.compute_wall_seconds

    def step_seconds(self, global_batch: int, seq_len: int) -> float:
        """One optimizer step of `global_batch` sequences of `seq_len` tokens at this run's throughput:
        global batch x seq / tokens per second."""
        return global_batch * seq_len / self.tokens_per_second

    def mfu_against(self, dtype: str) -> float:
        """The run's model FLOP/s per GPU as a share of the accelerator's dense `dtype` peak (an FP8 run against
        its bf16 and its fp8 peak: torchtitan#560 asks which)."""
        return self.model_flops_per_s_per_gpu / self.accelerator.peak(dtype)


check_positive = positive_number  # the shared validator (llmcalc.validate)


# --- compute-optimal sizing (Hoffmann et al. 2022, "Chinchilla") ------------------------------


@dataclass(frozen=True)
class ComputeOptimal:
    method: str
    params: float
    tokens: float
    source: str

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    @property
    def compute(self) -> float:
        """C = 6·N·D (Kaplan et al. 2020; rules.six_n)."""
        return six_n(self.params) * self.tokens


def tokens_per_param_rule(compute: float, ratio: float = 20.0) -> ComputeOptimal:
    """C = 6·N·D with D = ratio·N  =>  N = sqrt(C / (6·ratio))."""
    check_positive("compute", compute)
    params = math.sqrt(compute / (6 * ratio))
    return ComputeOptimal(f"≈{ratio:g} tokens per parameter", params, ratio * params,
                          "Hoffmann et al. 2022: compute-optimal models see about 20 tokens per parameter")


def parametric_fit(compute: float, A: float, B: float, alpha: float, beta: float, method: str,
                   source: str) -> ComputeOptimal:
    """Minimise L(N, D) = E + A/N^α + B/D^β subject to 6·N·D = C (Hoffmann et al. 2022, eq. 4):
    N_opt = G·(C/6)^(β/(α+β)), D_opt = (C/6)/N_opt, G = (α·A / (β·B))^(1/(α+β))."""
    check_positive("compute", compute)
    g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    params = g * (compute / 6) ** (beta / (alpha + beta))
    return ComputeOptimal(method, params, compute / 6 / params, source)


def compute_optimal(compute: float) -> list[ComputeOptimal]:
    return [
        tokens_per_param_rule(compute),
        parametric_fit(compute, 406.4, 410.7, 0.34, beta=0.28, method="Hoffmann et al. fit (Approach 3)",
                       source="Hoffmann et al. 2022, Approach 3 (sec. 3.3): E=1.69, A=406.4, B=410.7, α=0.34, β=0.28"),
        parametric_fit(compute, 482.01, 2085.43, 0.3478, beta=0.3658, method="Besiroglu et al. refit",
                       source="Besiroglu et al. 2024 (Epoch AI replication of Approach 3): A=482.01, B=2085.43, "
                       "α=0.3478, β=0.3658"),
    ]


def cluster_compute(accelerator: Accelerator, n_gpus: int, seconds: float, mfu: float,
                    dtype: str = "bf16") -> float:
    """Model FLOPs a cluster delivers: n x peak x MFU x seconds."""
    fraction("MFU", mfu)
    check_positive("days", seconds)
    positive_int("n_gpus", n_gpus)
    return n_gpus * accelerator.peak(dtype) * mfu * seconds


# --- `llmcalc plan`: a budget given in FLOPs or as a cluster ------------------------------------------------


@dataclass(frozen=True)
class ComputeBudget:
    """What `plan` is asked: a budget in FLOPs, or a cluster (GPU, how many, how long, at which MFU)."""

    compute: float | None = None
    gpu: str | None = None
    n_gpus: int | None = None
    days: float | None = None
    mfu: float | None = None
    dtype: str = "bf16"
    goodput: float = DEFAULT_GOODPUT  # share of the days spent training (--goodput)

    def __post_init__(self) -> None:
        goodput(self.goodput)
        cluster = (self.gpu, self.n_gpus, self.days, self.mfu)
        if self.compute is not None and any(v is not None for v in cluster):
            raise LlmcalcError("give --compute, or --gpu/--n-gpus/--days/--mfu, not both")
        if self.compute is None:
            missing = [n for n, v in zip(("--gpu", "--n-gpus", "--days", "--mfu"), cluster, strict=True) if v is None]
            if missing:
                raise LlmcalcError(f"give --compute FLOPS, or a cluster: missing {', '.join(missing)}")


@dataclass(frozen=True)
class BudgetPlan:
    """`plan`'s answer: the budget, the compute-optimal sizes for it, and what it was computed from."""

    compute: float
    plans: list[ComputeOptimal]
    inputs: dict[str, Any]


def plan_budget(budget: ComputeBudget, accelerator: Accelerator | None = None) -> BudgetPlan:
    """`llmcalc plan`: the compute-optimal model size and tokens for the FLOPs given, or for those the cluster
    delivers (`accelerator`: the loaded --gpu preset)."""
    if budget.compute is not None:
        return BudgetPlan(budget.compute, compute_optimal(budget.compute), {"basis": "budget given with --compute"})
    assert accelerator is not None and budget.n_gpus is not None and budget.days is not None \
        and budget.mfu is not None  # ComputeBudget: a whole cluster
    n_gpus, days, mfu, dtype = budget.n_gpus, budget.days, budget.mfu, budget.dtype
    compute = cluster_compute(accelerator, n_gpus, days * SECONDS_PER_DAY * budget.goodput, mfu, dtype)
    basis = (f"budget = {n_gpus:,} x {accelerator.key} at {accelerator.peak(dtype) / 1e12:,.6g} TFLOP/s "
             f"dense {dtype} x MFU {mfu:g} x {days:,g} days x goodput {budget.goodput:g} (the share of the days spent "
             f"training; --goodput 1 for none lost)")
    inputs = {"gpu": accelerator.key, "n_gpus": n_gpus, "days": days, "mfu": mfu, "dtype": dtype,
              "goodput": budget.goodput, "basis": basis}
    return BudgetPlan(compute, compute_optimal(compute), inputs)


# --- `llmcalc train`: the request, how its FLOPs are counted, and the plan --------------------------------

MFU_MISSING = ("give --mfu (model FLOPs utilization, e.g. 0.4 or 40%) or --achieved-tflops (TFLOP/s per GPU), "
               "or --global-batch to predict the MFU from the layout")
DEFAULT_BATCH_TOKENS = 4 * 2**20  # a step of ~4M tokens: GPT-3 175B 3.2M (Brown et al. 2020), Llama 2 4M (Touvron 2023)
DEFAULT_TOKENS_PER_GPU = 1024  # on larger clusters: Llama 3 405B's 16M tokens on 16,384 H100 (Meta 2024, §3.3.2)
SEARCH_SETTINGS = ("recipe", "tp_overlap")  # with STEP_DEFAULTS: options the layout search applies to every layout
TIMING_ONLY = ("schedule", "zero", "sequence_parallel", "dp_overlap", "tp_overlap")  # shape a predicted step only


@dataclass(frozen=True)
class TrainRequest:
    """What `train` is asked: a model (its name as typed; the caller loads it) or a parameter count, the
    tokens, the cluster, and one of an MFU, an achieved TFLOP/s, a past run's throughput or a layout whose
    step is predicted (`layout`: the step model's options, None where not given)."""

    tokens: float
    gpu: str
    model: str | None = None
    n_params: float | None = None
    n_gpus: int = 1
    dtype: str = "bf16"
    seq_len: int = DEFAULT_SEQ_LEN
    causal: bool = False
    recompute: str = "none"
    mfu: float | None = None
    achieved_tflops: float | None = None
    usd_per_gpu_hour: float | None = None
    finetune: FinetuneRequest = field(default_factory=FinetuneRequest)
    layout: Mapping[str, Any] = field(default_factory=dict)
    goodput: float = DEFAULT_GOODPUT  # share of the wall-clock spent training (--goodput)
    recompute_given: bool = True  # False: a layout search picks the least recomputation that fits

    def __post_init__(self) -> None:
        goodput(self.goodput)
        if (self.model is None) == (self.n_params is None):
            raise LlmcalcError("give a MODEL (preset or config.json) or --params N, not both")
        if self.mfu is not None and self.achieved_tflops is not None:
            raise LlmcalcError("give --mfu or --achieved-tflops, not both")

    @property
    def label(self) -> str:
        """The model as the answer names it: as typed, or the parameter count."""
        if self.model is not None:
            return self.model
        assert self.n_params is not None  # __post_init__: a model or --params
        return fmt_tokens(self.n_params, "params")

    def _s2(self) -> str:
        return "causal" if self.causal else "full S²"

    @property
    def predicts_step(self) -> bool:
        """Whether the step is predicted from the layout: a global batch, and no MFU, achieved TFLOP/s or
        throughput given."""
        layout = self.layout
        return (self.mfu is None and self.achieved_tflops is None and layout.get("tokens_per_second") is None
                and (layout.get("global_batch") is not None or layout.get("global_batch_tokens") is not None))

    @property
    def needs_layout(self) -> bool:
        """No MFU, achieved TFLOP/s, throughput or global batch: the step is predicted at the default global batch
        (`default_global_batch`) on the layout `llmcalc layout` recommends, or on the degrees given."""
        layout = self.layout
        return (self.mfu is None and self.achieved_tflops is None and layout.get("tokens_per_second") is None
                and layout.get("global_batch") is None and layout.get("global_batch_tokens") is None)


@dataclass(frozen=True)
class FlopsBasis:
    """The run's training FLOPs and how they were counted: `text` is the note printed under the budget."""

    model_flops: float  # forward + backward, no recomputation
    hardware_flops: float  # plus recomputation
    n: float  # the N of 6·N·T shown beside them
    text: str
    method: str = "analytic"
    shapes: ModelSpec | None = None  # the shapes a step prediction can time (None: --params, a counted model)
    finetune: dict[str, Any] | None = None


class CountedModel(Protocol):
    """A model llmcalc has no formula for, counted by transformers (llmcalc.fallback.FallbackModel)."""

    name: str
    model_type: str

    def train_basis(self, request: TrainRequest) -> FlopsBasis: ...


def analytic_basis(spec: ModelSpec, request: TrainRequest) -> FlopsBasis:
    """Exact per-op FLOPs per token at the request's sequence length x tokens (with --finetune: frozen weights,
    activation gradients only, and the adapters)."""
    from .flops import step_flops
    from .params import count_params

    cfg = request.finetune.config()
    tokens, seq_len = request.tokens, request.seq_len
    step = step_flops(spec, 1, seq_len, request.causal, request.recompute)
    n = count_params(spec).active_per_token
    text = (f"training FLOPs = exact per-op count per token at seq {seq_len:,} ({request._s2()}) x tokens; "
            f"6·N·T with N = {n:,} {'active ' if spec.is_moe else ''}params")
    if cfg is None:
        return FlopsBasis(step.model_flops_per_token * tokens, step.hardware_flops_per_token * tokens, n, text,
                          shapes=spec)
    from .finetune import FinetuneFlops, finetune  # only with --finetune: keeps `train`'s start-up lighter

    ft = finetune(spec, cfg)
    fl = FinetuneFlops(ft, step)
    text = (f"{cfg.method} r{cfg.rank} on {cfg.target_label}: training FLOPs = exact per-op count per token at seq "
            f"{seq_len} with frozen weights (backward: activation gradients only) and {ft.trainable:,} adapter params "
            f"x tokens ≈ 4·N_frozen + 6·N_adapter = {fl.rule() * tokens:.4g}; 6·N·T (full training) shown for "
            f"comparison")
    info = {"method": cfg.method, "rank": cfg.rank, "targets": list(cfg.targets), "trainable": ft.trainable,
            "frozen": ft.frozen, "rule_flops": fl.rule() * tokens}
    return FlopsBasis(fl.model_flops_per_token * tokens, fl.hardware_flops_per_token * tokens, n, text, shapes=spec,
                      finetune=info)


def six_n_basis(request: TrainRequest) -> FlopsBasis:
    """No model, only --params N: 6·N·T, and full recomputation's extra forward 2·N·T."""
    if request.finetune.method is not None:
        raise LlmcalcError("--finetune needs a MODEL (its linear shapes), not --params")
    if request.recompute == "selective":
        raise LlmcalcError("--recompute selective needs a MODEL (its attention shapes); use none or full")
    n = request.n_params
    assert n is not None  # TrainRequest: a model or --params
    model_flops = six_n(n) * request.tokens
    hardware_flops = model_flops + (2 * n * request.tokens if request.recompute == "full" else 0)
    return FlopsBasis(model_flops, hardware_flops, n,
                      "training FLOPs = 6·N·T (no model given; full recomputation adds 2·N·T)")


@dataclass
class TrainingPlan:
    """`train`'s answer: the budget, the inputs it was computed from (with the FLOPs' basis), 6·N·T beside it,
    the predicted step (or None) and what a given throughput or layout implies (or None)."""

    estimate: TrainingEstimate
    inputs: dict[str, Any]
    six_n_t: float
    prediction: StepPrediction | None = None
    measured: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    # MFU against each dense peak it is quoted against (precision.mfu_conventions: the --dtype peak, bf16, the
    # recipe's GEMM dtype), and which of them is the recipe's (None: no step predicted, or its peak unknown)
    mfu_by_peak: dict[str, float] = field(default_factory=dict)
    recipe_peak: str | None = None
    # without --mfu or --global-batch: the layout the step was predicted on and why (`choose_layout`)
    layout_choice: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None  # the predicted layout's memory per GPU and fit, as `memory` and `layout` say


def plan_training(request: TrainRequest, model: ModelSpec | CountedModel | None,
                  accelerator: Accelerator, steps: MeasuredModel | None = None) -> TrainingPlan:
    """`llmcalc train`: FLOPs by the model's formula (or transformers' count, or 6·N·T), device time from the
    given MFU, achieved TFLOP/s or throughput, or from the step predicted for a layout (for a counted model,
    `steps`: what transformers measured of it, timed by measured_step.py); every combination the figures cannot
    honour is refused with one line. A predicted step without --recipe times the recipe --dtype names
    (precision.recipe_for_dtype: FP8 is Transformer Engine's default), and says so."""
    request, choice = _with_layout(request, model)
    if model is None:
        basis = six_n_basis(request)
    elif isinstance(model, ModelSpec):
        basis = analytic_basis(model, request)
    else:
        basis = model.train_basis(request)
    tokens = request.tokens
    options, warnings = _step_options(request)
    pred: StepPrediction | None
    mfu: float | None
    measured: dict[str, Any] | None
    if steps is not None and request.predicts_step:
        from .measured_step import train_measured_steptime

        pred = train_measured_steptime(steps, request.gpu, request.n_gpus, dtype=request.dtype,
                                       seq_len=request.seq_len, causal=request.causal, recompute=request.recompute,
                                       model_flops_per_token=basis.model_flops / tokens,
                                       hardware_flops_per_token=basis.hardware_flops / tokens, options=options)
        mfu, measured = pred.mfu, None
    elif (request.mfu is None) != (request.achieved_tflops is None) and not any(
            v is not None for v in request.layout.values()):
        # a given MFU or TFLOP/s and no layout option: nothing to time or check, as train_steptime answers it
        # (mfu, None, None); the step model is not imported (train's start-up)
        _check_device_time(request, model, basis, accelerator)
        mfu, pred, measured = request.mfu, None, None
    else:
        from .step.train import train_steptime

        _check_device_time(request, model, basis, accelerator)
        mfu, pred, measured = train_steptime(basis.shapes, request.gpu, request.n_gpus, request.mfu,
                                             achieved_tflops=request.achieved_tflops, dtype=request.dtype,
                                             seq_len=request.seq_len, causal=request.causal,
                                             recompute=request.recompute,
                                             model_flops_per_token=basis.model_flops / tokens,
                                             hardware_flops_per_token=basis.hardware_flops / tokens,
                                             accelerator=accelerator, options=options)
    if mfu is None and request.achieved_tflops is None:
        raise LlmcalcError(MFU_MISSING)
    est = TrainingEstimate(tokens=tokens, model_flops=basis.model_flops, hardware_flops=basis.hardware_flops,
                           accelerator=accelerator, dtype=request.dtype, n_gpus=request.n_gpus, mfu=mfu,
                           achieved_flops_per_s=None if request.achieved_tflops is None
                           else request.achieved_tflops * 1e12, usd_per_gpu_hour=request.usd_per_gpu_hour,
                           mfu_given=pred is None, goodput=request.goodput)
    name = None if model is None else model.name  # canonical: "LLAMA-3-8B" and " llama-3-8b " answer as llama-3-8b
    inputs = _inputs(request, basis, name, options.get("recipe") if "recipe" not in request.layout else None)
    recipe_peak = _recipe_peak(accelerator, pred)
    return TrainingPlan(estimate=est, inputs=inputs, six_n_t=six_n(basis.n) * tokens, prediction=pred,
                        measured=measured, warnings=warnings + _timing_only_warning(request, pred),
                        mfu_by_peak=_mfu_by_peak(est, recipe_peak),
                        recipe_peak=None if recipe_peak is None else recipe_peak[0], layout_choice=choice,
                        memory=_layout_memory(model, pred, request.layout.get("reserve_gib")))


def _with_layout(request: TrainRequest, model: ModelSpec | CountedModel | None
                 ) -> tuple[TrainRequest, dict[str, Any] | None]:
    """The request as it is timed: without an MFU, a throughput or a global batch, on the layout `choose_layout`
    picks (a model with a formula); refused in one line where nothing can be predicted (--params, a counted model)."""
    if not request.needs_layout:
        return request, None
    if isinstance(model, ModelSpec):
        return choose_layout(request, model)
    if not any(v is not None for v in request.layout.values()):
        raise LlmcalcError(("with --params (no shapes to predict a step from): give --mfu (e.g. 0.4 or 40%) or "
                            "--achieved-tflops") if model is None else
                           f"{request.model} is counted by transformers (no formula to search layouts with): give "
                           f"--mfu (e.g. 0.4 or 40%), --achieved-tflops, or --global-batch with a layout")
    return request, None  # layout options without a global batch: refused by train_steptime, naming them


def default_global_batch(n_gpus: int, seq_len: int) -> tuple[int, str]:
    """The global batch a run without one is predicted at, in sequences, and the sentence that says why: ~4M tokens
    per step, as published recipes use (GPT-3 175B 3.2M tokens, Brown et al. 2020 Table 2.1; Llama 2 4M, Touvron et
    al. 2023), and 1,024 tokens per GPU on clusters past 4,096 GPUs (Llama 3 405B: 16M tokens on 16,384 H100, Meta
    2024 §3.3.2); rounded up to a multiple of the odd factor of the GPU count, so data parallelism divides it."""
    tokens = max(DEFAULT_BATCH_TOKENS, DEFAULT_TOKENS_PER_GPU * n_gpus)
    odd = n_gpus // (n_gpus & -n_gpus)
    sequences = -(-max(1, round(tokens / seq_len)) // odd) * odd
    why = (f"global batch {sequences:,} sequences ({fmt_tokens(sequences * seq_len)} per step) by default: ~4M "
           f"tokens as published recipes use (GPT-3 175B 3.2M, Llama 2 4M), 1k per GPU past 4k GPUs (Llama 3 405B: "
           f"16M on 16k H100); --global-batch sets yours")
    return sequences, why


def choose_layout(request: TrainRequest, spec: ModelSpec) -> tuple[TrainRequest, dict[str, Any]]:
    """`train` without --mfu or --global-batch: the request at the default global batch (`default_global_batch`), on
    the layout `llmcalc layout` ranks first for it (step/search.py:rank_layouts: the degrees, micro-batch, ZeRO
    stage, schedule and the least recomputation that fits, unless --recompute is given), or on the degrees given
    (--tp, --pp, ...: that layout, not searched). Returns the request to predict and what to say of the choice."""
    from .step.layout import STEP_DEFAULTS

    if request.finetune.method is not None:
        raise LlmcalcError("--finetune: give --mfu or --global-batch (the layout search sizes full training, not "
                           "adapters)")
    batch, why = default_global_batch(request.n_gpus, request.seq_len)
    layout = {**request.layout, "global_batch": batch}
    searched = set(STEP_DEFAULTS) | set(SEARCH_SETTINGS)
    if any(k not in searched and k != "reserve_gib" for k in request.layout):  # degrees given: that layout
        return replace(request, layout=layout), {"global_batch": batch, "global_batch_why": why, "source": "given"}
    options, _ = _step_options(replace(request, layout=layout))
    settings = {k: v for k, v in options.items() if k in searched and k != "tp_overlap"}
    settings["reserve_gib"] = request.layout.get("reserve_gib") or 0.0  # fits as `layout --reserve-gib` says
    search = _search(request, spec, batch, settings,  # --tp-overlap not given: searched, as layout searches it
                     bool(options.get("tp_overlap")) if "tp_overlap" in request.layout else None)
    best = search.ranked[0][0]
    lay = best.layout
    degrees = dict(tp=lay.tp, cp=lay.cp, pp=lay.pp, vpp=lay.vpp, ep=lay.ep, etp=lay.expert_tp,
                   micro_batch=lay.micro_batch, zero=lay.zero, schedule=lay.schedule)
    layout.update({k: v for k, v in degrees.items() if (k, v) not in (("ep", 1), ("etp", lay.tp))})  # a dense model
    chosen = {k: getattr(lay, k) for k in ("dp_shard", "ep_dispatcher", "ep_overlap", "tp_overlap",  # also tried
                                           "first_stage_layers", "last_stage_layers")
              if getattr(lay, k) != {**STEP_DEFAULTS, "tp_overlap": False}[k]}
    layout.update(chosen)
    choice = {"global_batch": batch, "global_batch_why": why, "source": "recommended", **degrees, **chosen,
              "dp": lay.dp, "recompute": best.recompute, "layouts_that_fit": search.counts["fit"],
              "command": _layout_command(request, spec, batch)}
    return replace(request, layout=layout, recompute=best.recompute), choice


def _search(request: TrainRequest, spec: ModelSpec, batch: int, settings: dict[str, Any],
            tp_overlap: bool | None) -> Any:
    """`layout`'s search at `batch` sequences, its best layout first; none that fits: one line with the fixes."""
    from .step.search import rank_layouts

    try:
        return rank_layouts(spec, request.gpu, request.n_gpus, request.seq_len, global_batch=batch,
                            causal=request.causal, recompute=request.recompute if request.recompute_given else None,
                            tp_overlap=tp_overlap, top=1, dtype=request.dtype, **settings)
    except LlmcalcError as exc:
        raise LlmcalcError(f"{exc}; or give --mfu (e.g. 0.4 or 40%) or --achieved-tflops to answer at an assumed "
                           f"utilization") from None


def _layout_command(request: TrainRequest, spec: ModelSpec, batch: int) -> str:
    """The `llmcalc layout` command that lists this search's layouts (the options train was given that it takes)."""
    words = ["llmcalc", "layout", request.model or spec.name, "--gpu", request.gpu, "--n-gpus", str(request.n_gpus),
             "--seq-len", str(request.seq_len), "--global-batch", str(batch)]
    words += ["--dtype", request.dtype] if request.dtype != "bf16" else []
    words += ["--causal"] if request.causal else []
    words += ["--recompute", request.recompute] if request.recompute_given else []
    for key, value in request.layout.items():
        name = {"order": "rank-order"}.get(key, key).replace("_", "-")
        words += ([f"--{name}"] if value is True else [f"--no-{name}"] if value is False
                  else [f"--{name}", ",".join(value) if isinstance(value, tuple) else str(value)])
    return shlex.join(words)




def _layout_memory(model: ModelSpec | CountedModel | None, pred: StepPrediction | None,
                   reserve_gib: float | None) -> dict[str, Any] | None:
    """The predicted layout's training memory per GPU (step/layout.py:layout_memory: memory.training_memory, what
    `memory` and `layout` give for it) and whether it fits the GPU less --reserve-gib (layout's capacity,
    step/search.py:reserved_capacity); None without a prediction of a formula model (--reserve-gib then refused)."""
    if pred is None or not isinstance(model, ModelSpec):
        if reserve_gib is not None:
            raise LlmcalcError("--reserve-gib sizes the predicted layout's memory: it needs a MODEL with a formula and "
                               "--global-batch (no --mfu); or drop it")
        return None
    from .step.layout import layout_memory
    from .step.search import reserved_capacity

    peak = layout_memory(pred.spec, pred.layout, pred.seq_len, pred.recompute, recipe=pred.recipe,
                         optimizer=pred.layout.optimizer, attention=pred.attention).peak
    capacity = reserved_capacity(pred.device.accelerator, reserve_gib or 0.0)
    return {"memory_per_gpu_bytes": peak, "capacity_bytes": capacity, "fits": peak <= capacity}


def _step_options(request: TrainRequest) -> tuple[dict[str, Any], list[str]]:
    """The step model's options, with --pipeline-layout's --vpp and --mtp-layers, and the recipe --dtype names where
    the step is predicted and --recipe is not given (precision.recipe_for_dtype), and the line that says which."""
    from .pipeline_layout import layout_options

    options = layout_options(dict(request.layout))  # --pipeline-layout: --vpp and --mtp-layers follow from it
    options.pop("reserve_gib", None)  # not the step's: the memory it is held against (_layout_memory)
    if not request.predicts_step:
        return options, []
    from .precision import step_recipe

    return step_recipe(request.dtype, request.gpu, options)


def _recipe_peak(accelerator: Accelerator, pred: StepPrediction | None) -> tuple[str, float] | None:
    """The dense peak of the predicted recipe's GEMM dtype (None without a prediction)."""
    if pred is None:
        return None
    from .memory import RECIPES
    from .precision import gemm_peak

    return gemm_peak(accelerator, RECIPES[pred.recipe].gemm_dtype, pred.device.fp4_peak)


def _mfu_by_peak(est: TrainingEstimate, recipe_peak: tuple[str, float] | None) -> dict[str, float]:
    from .precision import mfu_conventions

    return mfu_conventions(est.model_flops_per_s_per_gpu, est.accelerator, est.dtype, recipe_peak)


def _check_device_time(request: TrainRequest, model: ModelSpec | CountedModel | None, basis: FlopsBasis,
                       accelerator: Accelerator) -> None:
    """An achieved TFLOP/s that reads as a typo (a counted model's step is timed by measured_step.py)."""
    peak = accelerator.peak(request.dtype)
    achieved = request.achieved_tflops
    if achieved is not None and achieved * 1e12 < MIN_UTILIZATION * peak:
        raise LlmcalcError(f"--achieved-tflops {achieved:g} is below {MIN_UTILIZATION:.2%} of {accelerator.key}'s "
                           f"dense {request.dtype} peak ({peak / 1e12:,.4g} TFLOP/s); is it a typo?")


def _inputs(request: TrainRequest, basis: FlopsBasis, name: str | None = None,
            recipe_from_dtype: str | None = None) -> dict[str, Any]:
    inputs: dict[str, Any] = {"model": name or request.label, "tokens": request.tokens,
                              "seq_len": None if request.model is None else request.seq_len,
                              "causal": request.causal, "recompute": request.recompute, "method": basis.method,
                              "flops_basis": basis.text}
    if basis.finetune is not None:
        inputs["finetune"] = basis.finetune
    if recipe_from_dtype is not None:  # the recipe --dtype named (precision.recipe_for_dtype)
        inputs["recipe_from_dtype"] = recipe_from_dtype
    return inputs


def _timing_only_warning(request: TrainRequest, pred: StepPrediction | None) -> list[str]:
    """A given MFU, achieved TFLOP/s or throughput sets the step: the options that shape only a predicted one
    are recorded in the layout, not used."""
    named = [k for k in TIMING_ONLY if request.layout.get(k) is not None]
    if pred is not None or not named:
        return []
    return [f"{', '.join('--' + k.replace('_', '-') for k in named)} shape the predicted step only; with a given "
            f"MFU, achieved TFLOP/s or throughput they are recorded in the layout, not used"]
