"""The one plan a report is about, worked out once: every section, figure and headline reads it, so that they
agree on the layout, the batch, the MFU and whether the model fits.

The run is what the command line gives: `--n-gpus` GPUs of `--gpu`, a global batch of `--micro-batch` x
n-gpus / `--tp` sequences, `--recompute`. Each decoder model is planned on the layout `llmcalc layout` recommends
for those GPUs, that global batch and that recomputation (``search_layouts``, the first of its ranked layouts:
tp, cp, pp, vpp, dp, micro-batch with gradient accumulation, ZeRO stage) unless the report is told to use the
given layout (`report --plan-layout given`: dp = n / `--tp`, ZeRO `--zero`, no gradient accumulation), or no
layout fits, or the GPU has no step-time block (the given layout then, and the plan says why). For each model it
holds what the CLI answers on that layout (the same entry points, so `train`, `memory` and `layout` give the same
numbers): the memory and its fit verdict (``scenario_memory``, as `memory`), the step model's prediction
(``train_steptime``, as `train --global-batch`), the training budget at the predicted MFU (the headline) and at
the assumed `--mfu` (the stated alternative), and the ranked layouts (as `layout --global-batch --recompute`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, replace
from typing import Any

from ..analytic.kernels import steptime_presets
from ..analytic.memory import MemoryEstimate
from ..analytic.step.layout import make_layout
from ..analytic.step.prediction import StepPrediction
from ..analytic.step.search import search_layouts, simulated
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
    """One model under the plan: its planned layout (``scenario``), that layout's figures, memory and prediction,
    and the layout search."""

    spec: ModelSpec
    scenario: Scenario  # the run on this model's planned layout (tp, cp, pp, vpp, ZeRO, micro-batch)
    record: dict[str, Any]  # compare's figures (analytic.summary.model_record) on the planned layout
    training: TrainingEstimate  # at the assumed MFU: the stated alternative
    memory: MemoryEstimate | None = None  # the planned layout's (decoder-only models)
    prediction: StepPrediction | None = None  # the step model on the planned layout (when it fits)
    prediction_note: str = ""  # why there is no prediction of the planned layout
    ranked: Ranked = field(default_factory=list)  # layouts of the plan's GPUs and batch that fit
    losers: list[Any] = field(default_factory=list)
    counts: dict[str, int] | None = None
    search_note: str = ""  # why no layout was searched
    recommended: bool = False  # the planned layout is the search's best (else the given one)
    choice_note: str = ""  # why the given layout is planned

    @property
    def fits(self) -> bool | None:
        """The planned layout's verdict (None where memory is not modelled: encoders, encoder-decoders)."""
        return self.record.get("fits")

    @property
    def best(self) -> StepPrediction | None:
        return self.ranked[0][0] if self.ranked else None

    @property
    def layout_text(self) -> str:
        """'tp 2 cp 2 pp 4 (vpp 4) dp 128, micro-batch 1, ZeRO-1, recompute none': the planned layout."""
        if self.prediction is not None:
            return layout_label(self.prediction)
        s, par = self.scenario, self.scenario.parallel
        return (f"tp {par.tp} cp {par.cp} pp {par.pp}" + (f" (vpp {par.vpp})" if par.vpp > 1 else "")
                + f" dp {par.dp:,}, micro-batch {s.micro_batch}, ZeRO-{par.zero}, recompute {s.recompute}")

    @property
    def layout_source(self) -> str:
        """Where the planned layout comes from, in a few words."""
        if self.recommended:
            return "recommended by llmcalc layout"
        return "the given layout" + (f": {self.choice_note}" if self.choice_note
                                                                   else "")

    def at(self, prediction: StepPrediction, scenario: Scenario) -> TrainingEstimate:
        """The run's budget at a predicted layout's MFU (its own FLOPs per token, recomputation included)."""
        scale = scenario.tokens / prediction.tokens_per_step  # steps in the run
        return TrainingEstimate(tokens=scenario.tokens, model_flops=prediction.model_flops * scale,
                                hardware_flops=prediction.hardware_flops * scale,
                                accelerator=scenario.accelerator, dtype=scenario.dtype, n_gpus=scenario.n_gpus,
                                mfu=prediction.mfu, usd_per_gpu_hour=scenario.usd_per_gpu_hour,
                                goodput=scenario.goodput)

    @property
    def headline(self) -> TrainingEstimate:
        """The run's one time and cost: at the planned layout's predicted MFU, else at the assumed one."""
        return self.training if self.prediction is None else self.at(self.prediction, self.scenario)

    @property
    def headline_basis(self) -> str:
        """'the predicted 47.7 % MFU of the planned layout and goodput 0.9' or 'the assumed 40% MFU and goodput
        0.9' (wall time = compute time / goodput)."""
        goodput = f" and goodput {self.scenario.goodput:g}"
        if self.prediction is not None:
            return f"the step model's predicted {self.prediction.mfu * 100:.1f} % MFU of the planned layout{goodput}"
        return f"the assumed {self.scenario.mfu:.0%} MFU{goodput}"


@dataclass
class ReportPlan:
    scenario: Scenario  # the run as given (each model's planned layout: ModelPlan.scenario)
    models: dict[str, ModelPlan]
    global_batch: int  # sequences per optimizer step: --global-batch, else --micro-batch x dp

    @property
    def layout_text(self) -> str:
        """One model's planned layout, or 'each model on its planned layout (summary)'."""
        texts = {m.layout_text for m in self.models.values()}
        return texts.pop() if len(texts) == 1 else "each model on its planned layout (see the summary)"

    # --- the line under each figure's title: what that figure shows, and only that ---------------------------

    def models_line(self, names: list[str] | None = None) -> str:
        names = list(self.models) if names is None else names
        return ", ".join(names) if len(names) <= 3 else f"{len(names)} models"

    def training_line(self) -> str:
        """Time and cost: the run, at the headline MFU, on the planned layouts."""
        s = self.scenario
        return (f"{self.models_line()} · {fmt_count(s.tokens)} tokens at seq {s.seq_len:,} · {s.n_gpus:,} x "
                f"{s.accelerator.key} · {self.layout_text}")

    def memory_line(self) -> str:
        s = self.scenario
        return (f"{self.models_line()} · seq {s.seq_len:,} · {s.recipe} + {s.optimizer} · {s.n_gpus:,} x "
                f"{s.accelerator.key} · {self.layout_text}")

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
        out: dict[str, Any] = {"global_batch": self.global_batch, "mfu_assumed": s.mfu, "goodput": s.goodput,
                               "models": {}}
        for name, m in self.models.items():
            head = m.headline
            par = m.scenario.parallel
            entry: dict[str, Any] = {
                "params": m.record["params"], "training_flops": m.record["training_flops"],
                "layout": {"tp": par.tp, "cp": par.cp, "pp": par.pp, "vpp": par.vpp, "dp": par.dp, "ep": par.ep,
                           "etp": par.expert_tp, "zero": par.zero,
                           "micro_batch": m.scenario.micro_batch, "recompute": m.scenario.recompute,
                           "ep_dispatcher": m.scenario.ep_dispatcher, "ep_overlap": m.scenario.ep_overlap,
                           "tp_overlap": m.scenario.tp_overlap, "dp_shard": m.scenario.dp_shard or None,
                           "source": "recommended" if m.recommended else "given"},
                "headline_mfu": "predicted" if m.prediction is not None else "assumed", "mfu": head.mfu,
                "gpu_hours": head.gpu_hours, "wall_clock_days": head.wall_clock_days, "cost_usd": head.cost_usd,
                "compute_gpu_hours": head.compute_gpu_hours, "compute_wall_clock_days": head.compute_wall_clock_days,
                "at_assumed_mfu": {"mfu": s.mfu, "gpu_hours": m.training.gpu_hours,
                                   "wall_clock_days": m.training.wall_clock_days, "cost_usd": m.training.cost_usd},
                "memory_per_gpu_bytes": m.record.get("memory_per_gpu_bytes"), "fits": m.fits,
                "predicted_mfu": m.prediction.mfu if m.prediction else None,
                "prediction_note": m.prediction_note or None,
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
            "step_seconds": p.step_seconds, "mfu": p.mfu, "global_batch": lay.global_batch,
            "ep_dispatcher": lay.ep_dispatcher, "ep_overlap": lay.ep_overlap, "dp_shard": lay.dp_shard or None,
            "tp_overlap": lay.tp_overlap and lay.tp > 1, "first_stage_layers": lay.first_stage_layers or None,
            "last_stage_layers": lay.last_stage_layers or None}


def same_layout(a: StepPrediction, b: StepPrediction) -> bool:
    """The same degrees, micro-batch, ZeRO stage and recomputation (what a layout search varies)."""
    return describe(a) | {"step_seconds": 0, "mfu": 0} == describe(b) | {"step_seconds": 0, "mfu": 0}


def layout_label(p: StepPrediction) -> str:
    """'tp 2 cp 4 pp 16 dp 8 ep 8, micro-batch 2, ZeRO-1, recompute none'."""
    lay = p.layout
    degrees = f"tp {lay.tp} cp {lay.cp} pp {lay.pp}" + (f" (vpp {lay.vpp})" if lay.vpp > 1 else "") + \
        f" dp {lay.dp}" + (f" ep {lay.ep}" if lay.ep > 1 else "") + \
        (f" etp {lay.expert_tp}" if lay.expert_tp != lay.tp else "")
    expert = "" if (lay.ep_dispatcher, lay.ep_overlap) == ("alltoall", False) else \
        f", {lay.ep_dispatcher} dispatcher" + (", EP overlap" if lay.ep_overlap else "")
    hsdp = f" (HSDP: sharded over dp {lay.dp_shard})" if lay.dp_shard else ""
    overlap = (", TP overlap" if lay.tp_overlap and lay.tp > 1 else "") \
        + (f", first stage {lay.first_stage_layers} layers" if lay.first_stage_layers else "") \
        + (f", last stage {lay.last_stage_layers} layers" if lay.last_stage_layers else "")
    return f"{degrees}, micro-batch {lay.micro_batch}, ZeRO-{lay.zero}{hsdp}, recompute {p.recompute}{expert}{overlap}"


def planned_scenario(scenario: Scenario, best: StepPrediction) -> Scenario:
    """The run on a searched layout: its degrees, ZeRO stage, micro-batch, global batch and recomputation."""
    lay = best.layout
    return replace(scenario, tp=lay.tp, cp=lay.cp, pp=lay.pp, vpp=lay.vpp, ep=lay.ep,
                   etp=lay.expert_tp if lay.expert_tp != lay.tp else 0, zero=lay.zero,
                   micro_batch=lay.micro_batch, recompute=best.recompute, global_batch=lay.global_batch,
                   ep_dispatcher=lay.ep_dispatcher, ep_overlap=lay.ep_overlap, dp_shard=lay.dp_shard,
                   tp_overlap=lay.tp_overlap, first_stage_layers=lay.first_stage_layers,
                   last_stage_layers=lay.last_stage_layers)


PINS = ("tp", "cp", "pp", "vpp", "ep", "etp", "micro_batch", "zero", "sequence_parallel")  # (step/layout.py:PINNED)
STAGES = ("first_stage_layers", "last_stage_layers", "pipeline_layout")


def layout_settings(scenario: Scenario, names: tuple[str, ...] = PINS) -> dict[str, Any]:
    """The scenario's layout as `train` and `layout` take it: the degrees `names` (those typed, where a search is
    pinned) and the pipeline's stage layers where set (--pipeline-layout's --vpp and MTP layers as Megatron reads
    them: pipeline_layout.layout_options)."""
    from ..analytic.pipeline_layout import layout_options

    out = {k: getattr(scenario, k) for k in names if k in PINS}
    out.update({k: getattr(scenario, k) for k in STAGES if getattr(scenario, k)})
    if (scenario.ep_dispatcher, scenario.ep_overlap) != ("alltoall", False):  # a planned MoE layout's choice
        out.update(ep_dispatcher=scenario.ep_dispatcher, ep_overlap=scenario.ep_overlap)
    if scenario.dp_shard:  # a planned layout's HSDP shard group
        out["dp_shard"] = scenario.dp_shard
    if scenario.tp_overlap:  # a planned layout's TP overlap
        out["tp_overlap"] = True
    if "etp" in out and not out["etp"]:
        out.pop("etp")
    return layout_options(out) if scenario.pipeline_layout else out


def _plan_prediction(spec: ModelSpec, scenario: Scenario, global_batch: int,
                     memory: MemoryEstimate | None) -> tuple[StepPrediction | None, str]:
    """The step model on the given layout, as `train --global-batch --tp --zero --micro-batch` predicts it;
    a layout that does not fit is not predicted (the note says why)."""
    gpu = scenario.accelerator
    if memory is not None and memory.peak > scenario.capacity:
        return None, (f"the given layout does not fit ({memory.peak / GIB:,.1f} GiB per GPU > "
                      f"{scenario.capacity / GIB:.4g} GiB usable), so it is not timed")
    step = scenario_training(spec, scenario)
    options = {"global_batch": global_batch, "recipe": scenario.recipe, **layout_settings(scenario)}
    try:
        _, pred, _ = train_steptime(spec, gpu.key, scenario.n_gpus, None, None, dtype=scenario.dtype,
                                    seq_len=scenario.seq_len, causal=scenario.causal, recompute=scenario.recompute,
                                    model_flops_per_token=step.model_flops / scenario.tokens,
                                    hardware_flops_per_token=step.hardware_flops / scenario.tokens,
                                    accelerator=gpu, options=options)
    except LlmcalcError as exc:
        return None, f"the step model cannot time the given layout: {exc}"
    return pred, ""


def _search(plan: ModelPlan, scenario: Scenario, global_batch: int, pinned: bool = True) -> None:
    """The layouts of the plan's GPUs, batch and recomputation, ranked (`layout --exhaustive`'s search), the layout
    options typed to report fixing theirs (`layout --tp 8`'s pins) and its stage layers and memory reserve applied."""
    settings = layout_settings(scenario, scenario.given if pinned else ())  # --plan-layout given: the others, unpinned
    pins = {k: settings.pop(k) for k in PINS if k in settings}
    try:
        plan.ranked, plan.losers, plan.counts = search_layouts(
            plan.spec, scenario.accelerator.key, scenario.n_gpus, scenario.seq_len, global_batch=global_batch,
            causal=scenario.causal, recompute=scenario.recompute, dtype=scenario.dtype, recipe=scenario.recipe,
            reserve_gib=scenario.reserve_gib, pins=pins, exhaustive=True,  # its slowest bar reads all
            tp_overlap=settings.pop("tp_overlap", None),  # --tp-overlap, the expert dispatchers and EP overlap
            **settings)  # searched as `layout` searches them (planned_scenario keeps them)
    except LlmcalcError as exc:
        plan.search_note = str(exc)


def _on_layout(plan: ModelPlan, scenario: Scenario) -> None:
    """The planned layout's figures: compare's record, the budget at the assumed MFU, memory."""
    plan.scenario = scenario
    plan.record = model_record(plan.spec, scenario)
    plan.training = scenario_training(plan.spec, scenario)
    if plan.spec.architecture == "decoder":
        plan.memory = scenario_memory(plan.spec, scenario)


def plan_model(spec: ModelSpec, scenario: Scenario, global_batch: int, recommend: bool = True) -> ModelPlan:
    """Everything the report says of one model under the plan (see the module docstring)."""
    if spec.architecture == "decoder" and set(scenario.given) & {*PINS, *STAGES}:  # refused as train refuses them
        make_layout(spec, scenario.n_gpus, scenario.seq_len, global_batch, **layout_settings(scenario))
    plan = ModelPlan(spec, scenario, {}, scenario_training(spec, scenario))
    _on_layout(plan, scenario)
    if spec.architecture != "decoder":
        plan.prediction_note = plan.search_note = f"the step-time model covers decoder-only models; {spec.name} " \
                                                  f"is {spec.architecture}"
        return plan
    gpu = scenario.accelerator
    if gpu.key not in steptime_presets():
        plan.prediction_note = plan.search_note = (f"{gpu.key} has no network/matmul block, so no step-time "
                                                   f"prediction")
        plan.choice_note = plan.search_note
        return plan
    _search(plan, scenario, global_batch, pinned=recommend)
    if recommend and plan.best is not None:  # the layout `layout` recommends, uneven pipelines included
        plan.recommended = True
        plan.prediction = simulated(plan.best)  # train's figures (the search keeps a bound where it cannot win)
        _on_layout(plan, planned_scenario(scenario, plan.best))
        return plan
    plan.choice_note = ("as asked" if not recommend else
                        plan.search_note or "no layout of these GPUs and this batch fits")
    plan.prediction, plan.prediction_note = _plan_prediction(spec, scenario, global_batch, plan.memory)
    return plan


def make_plan(specs: list[ModelSpec], scenario: Scenario, tick: Callable[[str], None] | None = None,
              recommend: bool = True) -> ReportPlan:
    """The report's plan for every model; `tick(label)` after each (the layout search takes seconds);
    `recommend`: plan on the recommended layout (else the given one)."""
    models = {}
    global_batch = scenario.batch
    scenario = replace(scenario, global_batch=global_batch)  # the plan's step: memory's micro-batches in flight
    for spec in specs:
        models[spec.name] = plan_model(spec, scenario, global_batch, recommend)
        if tick is not None:
            tick(f"plan of {spec.name}")
    return ReportPlan(scenario, models, global_batch)
