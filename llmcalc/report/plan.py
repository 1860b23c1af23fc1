"""The one plan a report is about, worked out once: every section, figure and headline reads it, so that they
agree on the layout, the batch, the MFU and whether the model fits.

The plan is what the command line gives: `--n-gpus` GPUs of `--gpu` as dp = n / tp data-parallel ranks of `--tp`
tensor-parallel GPUs, ZeRO `--zero`, `--micro-batch` sequences per GPU and no gradient accumulation, so a global
batch of micro-batch x dp sequences; `--recompute`; the time at the assumed `--mfu` (the headline). For each model
it holds what the CLI answers for that plan (the same entry points, so `train`, `memory` and `layout` give the
same numbers): the training budget at the assumed MFU (``scenario_training``, as `train --mfu`), the memory of
the plan's layout and its fit verdict (``scenario_memory``, as `memory --n-gpus --tp --zero`), the step model's
prediction for the plan's own layout (``train_steptime``, as `train --global-batch` without --mfu), and the
ranked layouts of the same GPUs, global batch and recomputation (``search_layouts``, as `layout --global-batch
--recompute`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..analytic.kernels import steptime_presets
from ..analytic.memory import MemoryEstimate
from ..analytic.step.prediction import StepPrediction
from ..analytic.step.search import search_layouts
from ..analytic.step.train import train_steptime
from ..analytic.summary import Scenario, model_record, scenario_memory, scenario_training
from ..analytic.training import TrainingEstimate
from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from ..units import GIB, fmt_count

Ranked = list[tuple[StepPrediction, float]]  # (prediction, peak bytes per GPU), fastest first


@dataclass
class ModelPlan:
    """One model under the plan: its figures, the plan layout's memory and prediction, and the layout search."""

    spec: ModelSpec
    record: dict[str, Any]  # compare's figures (analytic.summary.model_record) under the plan
    training: TrainingEstimate  # at the assumed MFU: the headline
    memory: MemoryEstimate | None = None  # the plan's layout (decoder-only models)
    prediction: StepPrediction | None = None  # the step model on the plan's own layout (when it fits)
    prediction_note: str = ""  # why there is no prediction of the plan's layout
    ranked: Ranked = field(default_factory=list)  # layouts of the plan's GPUs and batch that fit
    losers: list[Any] = field(default_factory=list)
    counts: dict[str, int] | None = None
    search_note: str = ""  # why no layout was searched

    @property
    def fits(self) -> bool | None:
        """The plan layout's verdict (None where memory is not modelled: encoders, encoder-decoders)."""
        return self.record.get("fits")

    @property
    def best(self) -> StepPrediction | None:
        return self.ranked[0][0] if self.ranked else None

    def at(self, prediction: StepPrediction, scenario: Scenario) -> TrainingEstimate:
        """The run's budget at a predicted layout's MFU (its own FLOPs per token, recomputation included)."""
        scale = scenario.tokens / prediction.tokens_per_step  # steps in the run
        return TrainingEstimate(tokens=scenario.tokens, model_flops=prediction.model_flops * scale,
                                hardware_flops=prediction.hardware_flops * scale,
                                accelerator=scenario.accelerator, dtype=scenario.dtype, n_gpus=scenario.n_gpus,
                                mfu=prediction.mfu, usd_per_gpu_hour=scenario.usd_per_gpu_hour)

    @property
    def predicted(self) -> tuple[str, StepPrediction] | None:
        """The prediction to set beside the assumed MFU: the plan's layout where it fits, else the best layout
        that does, with which it is."""
        if self.prediction is not None:
            return "the plan's layout", self.prediction
        if self.best is not None:
            return "the best layout that fits", self.best
        return None


@dataclass
class ReportPlan:
    scenario: Scenario
    models: dict[str, ModelPlan]

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro-batch x data-parallel ranks (no gradient accumulation)."""
        return self.scenario.micro_batch * self.scenario.parallel.dp

    @property
    def layout_text(self) -> str:
        """'dp 1,024 x tp 1, ZeRO-1, micro-batch 1, recompute none': the plan's own layout."""
        s, par = self.scenario, self.scenario.parallel
        return (f"dp {par.dp:,} x tp {par.tp}, ZeRO-{par.zero}, micro-batch {s.micro_batch}, recompute "
                f"{s.recompute}")

    # --- the line under each figure's title: what that figure shows, and only that ---------------------------

    def models_line(self, names: list[str] | None = None) -> str:
        names = list(self.models) if names is None else names
        return ", ".join(names) if len(names) <= 3 else f"{len(names)} models"

    def training_line(self) -> str:
        """Time and cost: the run, at the assumed MFU, on the plan's layout."""
        s = self.scenario
        return (f"{self.models_line()} · {fmt_count(s.tokens)} tokens at seq {s.seq_len:,} · {s.n_gpus:,} x "
                f"{s.accelerator.key} at the assumed {s.mfu:.0%} MFU · plan layout {self.layout_text}")

    def memory_line(self) -> str:
        s = self.scenario
        par = s.parallel
        return (f"{self.models_line()} · seq {s.seq_len:,} · {s.recipe} + {s.optimizer} · ZeRO-{par.zero} over dp "
                f"{par.dp:,}, tp {par.tp} ({s.n_gpus:,} x {s.accelerator.key}) · recompute {s.recompute}")

    def flops_line(self) -> str:
        s = self.scenario
        return (f"{self.models_line()} · per training token, forward + backward · "
                f"{'causal (half the S² terms)' if s.causal else 'full S²'} attention · recompute not counted")

    def kv_line(self) -> str:
        return f"{self.models_line()} · inference, one sequence · KV cache in {self.scenario.kv_dtype}"

    def tokens_line(self) -> str:
        return f"{self.models_line()} · {fmt_count(self.scenario.tokens)} training tokens"

    def steptime_line(self, name: str) -> str:
        s = self.scenario
        return (f"{name} · {s.n_gpus:,} x {s.accelerator.key} · global batch {self.global_batch:,} sequences x seq "
                f"{s.seq_len:,} (the plan's) · recompute {s.recompute} · ZeRO-1, else ZeRO-3 where it does not fit")

    def to_json(self) -> dict[str, Any]:
        """The figures the report's sections share, per model (what the consistency tests hold to the CLI)."""
        s = self.scenario
        out: dict[str, Any] = {"global_batch": self.global_batch, "layout": self.layout_text,
                               "mfu_assumed": s.mfu, "headline_mfu": "assumed", "models": {}}
        for name, m in self.models.items():
            entry: dict[str, Any] = {
                "params": m.record["params"], "training_flops": m.record["training_flops"],
                "gpu_hours": m.training.gpu_hours, "wall_clock_days": m.training.wall_clock_days,
                "cost_usd": m.training.cost_usd, "mfu": s.mfu,
                "memory_per_gpu_bytes": m.record.get("memory_per_gpu_bytes"), "fits": m.fits,
                "plan_layout_predicted_mfu": m.prediction.mfu if m.prediction else None,
                "plan_layout_prediction_note": m.prediction_note or None,
                "layouts_that_fit": m.counts["fit"] if m.counts else None,
                "layouts_searched": m.counts["searched"] if m.counts else None,
            }
            if m.best is not None:
                best = m.best
                entry["best_layout"] = {**describe(best), "memory_per_gpu_bytes": m.ranked[0][1],
                                        "wall_clock_days": m.at(best, s).wall_clock_days}
            out["models"][name] = entry
        return out


def describe(p: StepPrediction) -> dict[str, Any]:
    lay = p.layout
    return {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "vpp": lay.vpp, "dp": lay.dp, "ep": lay.ep,
            "etp": lay.expert_tp, "micro_batch": lay.micro_batch, "zero": lay.zero, "recompute": p.recompute,
            "step_seconds": p.step_seconds, "mfu": p.mfu, "global_batch": lay.global_batch}


def same_layout(a: StepPrediction, b: StepPrediction) -> bool:
    """The same degrees, micro-batch, ZeRO stage and recomputation (what a layout search varies)."""
    return describe(a) | {"step_seconds": 0, "mfu": 0} == describe(b) | {"step_seconds": 0, "mfu": 0}


def layout_label(p: StepPrediction) -> str:
    """'tp 2 cp 4 pp 16 dp 8 ep 8, micro-batch 2, ZeRO-1, recompute none'."""
    lay = p.layout
    degrees = f"tp {lay.tp} cp {lay.cp} pp {lay.pp}" + (f" (vpp {lay.vpp})" if lay.vpp > 1 else "") + \
        f" dp {lay.dp}" + (f" ep {lay.ep}" if lay.ep > 1 else "") + \
        (f" etp {lay.expert_tp}" if lay.expert_tp != lay.tp else "")
    return f"{degrees}, micro-batch {lay.micro_batch}, ZeRO-{lay.zero}, recompute {p.recompute}"


def _plan_prediction(spec: ModelSpec, scenario: Scenario, global_batch: int,
                     memory: MemoryEstimate | None) -> tuple[StepPrediction | None, str]:
    """The step model on the plan's own layout, as `train --global-batch --tp --zero --micro-batch` predicts it;
    a layout that does not fit is not predicted (the note says why)."""
    gpu = scenario.accelerator
    if memory is not None and memory.peak > gpu.memory_bytes:
        return None, (f"the plan's layout does not fit ({memory.peak / GIB:,.1f} GiB per GPU > "
                      f"{gpu.memory_bytes / GIB:g} GiB), so it is not timed")
    step = scenario_training(spec, scenario)
    options = {"global_batch": global_batch, "tp": scenario.tp, "zero": scenario.zero,
               "micro_batch": scenario.micro_batch}
    try:
        _, pred, _ = train_steptime(spec, gpu.key, scenario.n_gpus, None, None, dtype=scenario.dtype,
                                    seq_len=scenario.seq_len, causal=scenario.causal, recompute=scenario.recompute,
                                    model_flops_per_token=step.model_flops / scenario.tokens,
                                    hardware_flops_per_token=step.hardware_flops / scenario.tokens,
                                    accelerator=gpu, options=options)
    except LlmcalcError as exc:
        return None, f"the step model cannot time the plan's layout: {exc}"
    return pred, ""


def plan_model(spec: ModelSpec, scenario: Scenario, global_batch: int) -> ModelPlan:
    """Everything the report says of one model under the plan (see the module docstring)."""
    record = model_record(spec, scenario)
    plan = ModelPlan(spec, record, scenario_training(spec, scenario))
    if spec.architecture != "decoder":
        plan.prediction_note = plan.search_note = f"the step-time model covers decoder-only models; {spec.name} " \
                                                  f"is {spec.architecture}"
        return plan
    plan.memory = scenario_memory(spec, scenario)
    gpu = scenario.accelerator
    if gpu.key not in steptime_presets():
        plan.prediction_note = plan.search_note = (f"{gpu.key} has no network/matmul block, so no step-time "
                                                   f"prediction")
        return plan
    plan.prediction, plan.prediction_note = _plan_prediction(spec, scenario, global_batch, plan.memory)
    try:
        plan.ranked, plan.losers, plan.counts = search_layouts(
            spec, gpu.key, scenario.n_gpus, scenario.seq_len, global_batch=global_batch, causal=scenario.causal,
            recompute=scenario.recompute, dtype=scenario.dtype, exhaustive=True)  # its slowest bar reads all
    except LlmcalcError as exc:
        plan.search_note = str(exc)
    return plan


def make_plan(specs: list[ModelSpec], scenario: Scenario,
              tick: Callable[[str], None] | None = None) -> ReportPlan:
    """The report's plan for every model; `tick(label)` after each (the layout search takes seconds)."""
    models = {}
    global_batch = scenario.micro_batch * scenario.parallel.dp
    for spec in specs:
        models[spec.name] = plan_model(spec, scenario, global_batch)
        if tick is not None:
            tick(f"plan of {spec.name}")
    return ReportPlan(scenario, models)
