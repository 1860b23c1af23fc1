"""The planning report's sections beyond the core five (summary, parameters, FLOPs, time and cost, memory, in
``planning``): predicted step time by layout, FP8 training, fine-tuning, serving and the sharded profile. Each
section is one function ``build_report`` calls; its tables are the commands' Documents (``llmcalc.views``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..analytic.finetune import FinetuneFlops, FinetuneMemory, LoraConfig, finetune
from ..analytic.kernels import steptime_presets
from ..analytic.memory import MemoryEstimate
from ..analytic.rules import six_n
from ..analytic.serving import plan_serving
from ..analytic.step.prediction import StepPrediction
from ..analytic.summary import Scenario
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..render.tables import Column, Document, Table
from ..spec import ModelSpec
from ..units import GIB, count_label, fmt_count, fmt_gib, fmt_usd, si
from ..views.layout import layout_document
from ..views.params import adapter_table, finetune_config
from ..views.profile import distributed_document
from ..views.train import FP8_NOTE
from .document import Report, safe_name
from .figures import breakdown_bars, memory_bars, rank_figure
from .plan import ModelPlan, ReportPlan, layout_label, same_layout
from .plots import gib
from .workload import ServingWorkload

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analytic.serving_speed import WorkloadPlan


def steptime_section(report: Report, plan: ReportPlan, top: int = 6) -> None:
    """The report's "Predicted step time by layout" section, for the plan's GPUs, global batch and recomputation:
    per decoder model, the plan's own layout as the step model times it (or why not), the best layouts that fit
    (``ReportPlan``: the search `llmcalc layout` runs), their breakdown as stacked bars with the plan's layout
    among them, and the run's time and cost at each predicted MFU beside the assumed one."""

    scenario = plan.scenario
    gpu = scenario.accelerator
    report.heading("Predicted step time by layout")
    if gpu.key not in steptime_presets():
        report.paragraph(f"{gpu.key} has no network/matmul block, so no step-time prediction (presets with one: "
                         f"{', '.join(steptime_presets())}).")
        return
    report.paragraph(f"The plan's global batch, {plan.global_batch:,} sequences x {scenario.seq_len:,} tokens, on "
                     f"{scenario.n_gpus:,} x {gpu.key} with recompute {scenario.recompute}: every layout of these GPUs "
                     "ranked by the step-time model's predicted throughput, as llmcalc layout ranks them. The "
                     "planned layout is the first unless the report was told to plan on the given one; its "
                     "predicted MFU sets the report's time and cost.")
    for name, m in plan.models.items():
        if m.spec.architecture != "decoder":
            report.paragraph(f"{name}: the step-time model covers decoder-only models.")
            continue
        report.heading(name, 3)
        report.bullets(_steptime_bullets(m, plan))
        if m.search_note:
            report.paragraph(f"{name}: {m.search_note}")
            continue
        assert m.counts is not None  # searched
        if not m.ranked:
            report.paragraph(f"no layout fits in {gpu.memory_bytes / GIB:g} GiB per GPU with recompute "
                             f"{scenario.recompute} ({m.counts['oom']:,} tried do not fit).")
            continue
        figure = f"steptime-{safe_name(name)}"
        report.figure(figure, breakdown_bars(_bars(m, top), f"{name}: predicted step time by layout",
                                             plan.steptime_line(name)),
                      "Where each layout's step goes (compute, exposed communication, pipeline bubble, optimizer), "
                      "best layouts first" + (", then the planned layout" if m.prediction is not None and not any(
                          same_layout(p, m.prediction) for p, _ in m.ranked[:top]) else "")
                      + " and the slowest that fits last; each bar's predicted MFU at its end")
        report.document(layout_document(name, gpu.key, scenario.n_gpus, scenario.seq_len,
                                        global_batch=plan.global_batch, ranked=m.ranked, losers=m.losers,
                                        counts=m.counts, top=top, recompute=scenario.recompute), figure)


def _bars(m: ModelPlan, top: int) -> list[tuple[str, StepPrediction]]:
    """The bars of the breakdown figure: the best `top`, the plan's own layout, the slowest that fits."""
    def label(p: StepPrediction) -> str:
        lay = p.layout
        return (f"tp{lay.tp} cp{lay.cp} pp{lay.pp}" + (f" vpp{lay.vpp}" if lay.vpp > 1 else "") + f" dp{lay.dp}"
                + (f" ep{lay.ep}" if lay.ep > 1 else "") + (f" etp{lay.expert_tp}" if lay.expert_tp != lay.tp else "")
                + f" mb{lay.micro_batch} ZeRO-{lay.zero}")

    shown = [(label(p), p) for p, _ in m.ranked[:top]]
    if m.prediction is not None and not any(same_layout(p, m.prediction) for p, _ in m.ranked[:top]):
        shown.append((f"the plan: {label(m.prediction)}", m.prediction))
    worst = m.ranked[-1][0]
    if len(m.ranked) > top:
        shown.append((f"slowest: {label(worst)}", worst))
    return shown


def _steptime_bullets(m: ModelPlan, plan: ReportPlan) -> list[str]:
    """The planned layout and, where it is not the best, the best one, each with its predicted MFU and the run."""
    scenario = plan.scenario
    items = []
    if m.prediction is not None:
        est = m.at(m.prediction, scenario)
        items.append(f"the planned layout ({m.layout_text}): predicted MFU {m.prediction.mfu * 100:.1f} %, "
                     f"{fmt_count(scenario.tokens)} tokens in {est.wall_clock_days:,.1f} days at goodput "
                     f"{scenario.goodput:g}, "
                     f"{est.gpu_hours:,.0f} GPU-hours" + ("" if est.cost_usd is None else f", {fmt_usd(est.cost_usd)}"))
    else:
        items.append(f"the planned layout ({m.layout_text}): {m.prediction_note}")
    if m.best is not None and m.prediction is not None and same_layout(m.best, m.prediction):
        items[-1] += "; the fastest layout of these GPUs and this batch that fits"
    elif m.best is not None:
        est = m.at(m.best, scenario)
        items.append(f"the fastest layout that fits ({layout_label(m.best)}, {gib(m.ranked[0][1])} per GPU): "
                     f"predicted MFU {m.best.mfu * 100:.1f} %, {est.wall_clock_days:,.1f} days at goodput "
                     f"{scenario.goodput:g}, "
                     f"{est.gpu_hours:,.0f} GPU-hours" + ("" if est.cost_usd is None else f", {fmt_usd(est.cost_usd)}"))
    return items


# The report's FP8 section (`report --recipe fp8|fp8-current|fp8-torchao`).
BASELINE = "bf16-mixed"
FP8_RECIPES = ("fp8", "fp8-current", "fp8-torchao")


def _recipe_label(recipe: str, plan: str) -> str:
    return recipe + (" · plan" if recipe == plan else " (baseline)" if recipe == BASELINE else "")


def fp8_memory_document(spec: ModelSpec, scenario: Scenario) -> tuple[Document, dict[str, MemoryEstimate]]:
    """Memory per GPU by component (GiB) under bf16-mixed and each FP8 recipe, on the plan's layout."""

    from ..analytic.memory import RECIPES
    from ..analytic.summary import scenario_memory

    ests = {_recipe_label(r, scenario.recipe): scenario_memory(spec, replace(scenario, recipe=r))
            for r in (BASELINE, *FP8_RECIPES)}
    keys = list(dict.fromkeys(k for est in ests.values() for k in est.components()))
    rows = [{"name": k, **{est.recipe.name: est.components().get(k) for est in ests.values()}}
            for k in keys if any(est.components().get(k) for est in ests.values())]
    rows.append({"name": "peak per GPU", **{est.recipe.name: est.peak for est in ests.values()}})
    cap = scenario.accelerator.memory_bytes
    notes = [f"{r}: {RECIPES[r].description}" for r in (BASELINE, *FP8_RECIPES)]
    notes += [f"{label}: peak at the {est.peak_phase}; {'fits' if est.peak <= cap else 'does NOT fit'} in "
              f"{scenario.accelerator.key}'s {cap / GIB:g} GiB" for label, est in ests.items()]
    par = scenario.parallel
    notes += [f"the planned layout for every recipe: tp {par.tp} cp {par.cp} pp {par.pp} dp {par.dp:,}, "
              f"ZeRO-{par.zero}; memory in GiB (2^30 bytes)"]
    table = Table(f"memory per GPU at micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}",
                  [Column("name", "component", align="left")]
                  + [Column(est.recipe.name, f"{label} (GiB)", fmt_gib) for label, est in ests.items()], rows, notes)
    data = {"model": spec.name, "recipes": {label: {"per_gpu_bytes": est.peak, "peak_phase": est.peak_phase,
                                                    "components": est.components()} for label, est in ests.items()}}
    return Document(f"{spec.name}: FP8 training memory", data, [table]), ests




def both_peaks(acc: Accelerator, achieved: float) -> dict[str, float]:
    """Achieved model FLOP/s per GPU as a share of the accelerator's dense bf16 and fp8 peaks (the plan has an MFU,
    not a TrainingEstimate and its mfu_against)."""
    return {dtype: achieved / acc.peak(dtype) for dtype in ("bf16", "fp8")}


def fp8_mfu_table(scenario: Scenario) -> Table:
    """The plan's achieved model FLOP/s per GPU (its MFU of the dense peak it names) against both peaks."""
    acc = scenario.accelerator
    achieved = scenario.mfu * acc.peak(scenario.dtype)
    rows = [{"quantity": f"achieved model FLOP/s per GPU (plan: {scenario.mfu:.0%} of the dense {scenario.dtype} "
                         "peak)", "value": f"{achieved / 1e12:,.4g} TFLOP/s"}]
    notes = [FP8_NOTE]
    if {"bf16", "fp8"} <= set(acc.peak_flops):
        for dtype, share in both_peaks(acc, achieved).items():
            rows.append({"quantity": f"MFU vs dense {dtype} peak ({acc.peak(dtype) / 1e12:,.4g} TFLOP/s)",
                         "value": f"{share * 100:.1f} %"})
        notes.append("the report's time and cost use the plan's MFU as given: an FP8 run that is faster shows as a "
                     "higher MFU against the bf16 peak")
    else:
        notes.append(f"{acc.key} has no dense fp8 rate in its preset: its GEMMs cannot run in FP8, so only the "
                     "memory figures apply")
    return Table(f"MFU of the plan on {acc.key}, against both peaks",
                 [Column("quantity", "quantity", align="left"), Column("value", "value", align="left")], rows, notes)


def fp8_section(report: Report, specs: list[ModelSpec], scenario: Scenario, line: str,
                planned: dict[str, Scenario] | None = None) -> None:
    """`report --recipe fp8*`: memory per GPU under bf16-mixed and the three FP8 recipes on each model's planned
    layout (`planned`, per model; else the scenario's), one figure for all models, and the plan's MFU against the
    bf16 and the fp8 peak."""

    report.heading("FP8 training")
    report.paragraph(f"The plan trains with the {scenario.recipe} recipe; below, its memory beside bf16-mixed and the "
                     "other FP8 recipes on the same layout, and its MFU against both dense peaks.")
    report.table(fp8_mfu_table(scenario))
    decoders = [s for s in specs if s.architecture == "decoder"]
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: FP8 memory needs the activation model, which covers decoder-only models.")
    planned = planned or {}
    docs = {s.name: fp8_memory_document(s, planned.get(s.name, scenario)) for s in decoders}
    if not docs:
        return
    bars = {(label if len(docs) == 1 else f"{name}: {label}"): est.peak_components()
            for name, (_, ests) in docs.items() for label, est in ests.items()}
    report.figure("fp8_memory", memory_bars(bars, scenario.accelerator.memory_bytes, scenario.accelerator.key,
                                            "Memory per GPU: bf16-mixed against the FP8 recipes", line),
                  f"Memory per GPU at the peak, by component group, for bf16-mixed and each FP8 recipe on each "
                  f"model's planned layout ({scenario.n_gpus:,} GPUs); the plan's recipe marked 'plan'; dashed: "
                  f"{scenario.accelerator.key}'s capacity")
    for name, (doc, _) in docs.items():
        report.heading(name, 3)
        report.document(doc, f"fp8-{safe_name(name)}")


# The report's fine-tuning section (`report --finetune lora|qlora`): full / LoRA / QLoRA side by side.

def _methods(cfg: LoraConfig) -> dict[str, LoraConfig | None]:
    """Full training (None) and LoRA and QLoRA at the chosen rank and targets; the chosen method keeps its
    --base-dtype, the other its default base (bf16 for LoRA, nf4 for QLoRA)."""

    from ..analytic.finetune import lora_config

    out: dict[str, LoraConfig | None] = {"full": None}
    for method in ("lora", "qlora"):
        out[method] = cfg if cfg.method == method else replace(lora_config(method, cfg.rank, cfg.targets),
                                                                double_quant=cfg.double_quant)
    return out


def _label(method: str, cfg: LoraConfig | None, chosen: str) -> str:
    if cfg is None:
        return "full (bf16-mixed, unsharded)"
    name = "LoRA" if method == "lora" else "QLoRA"
    return f"{name} ({cfg.base_dtype} base)" + (" · plan" if method == chosen else "")


Setups = dict[str, tuple[MemoryEstimate | FinetuneMemory, LoraConfig | None]]  # label -> (estimate, set-up)


def finetune_setups(spec: ModelSpec, scenario: Scenario, cfg: LoraConfig) -> Setups:
    """Label -> (memory estimate, LoraConfig or None) for full training and both methods, each GPU holding
    the whole model (data parallel, no ZeRO or TP) at the plan's micro-batch, sequence and recompute."""
    from ..analytic.finetune import finetune_memory
    from ..analytic.memory import training_memory

    out = {}
    for method, c in _methods(cfg).items():
        est: MemoryEstimate | FinetuneMemory
        if c is None:
            est = training_memory(spec, scenario.micro_batch, scenario.seq_len, "bf16-mixed",
                                  optimizer=scenario.optimizer, recompute=scenario.recompute)
        else:
            est = finetune_memory(spec, c, scenario.micro_batch, scenario.seq_len, optimizer=scenario.optimizer,
                                  recompute=scenario.recompute)
        out[_label(method, c, cfg.method)] = (est, c)
    return out


def side_by_side_document(spec: ModelSpec, scenario: Scenario, setups: Setups) -> Document:
    """Memory per GPU by component (GiB), one column per set-up; the peak and whether it fits below."""
    keys = list(dict.fromkeys(k for est, _ in setups.values() for k in est.components()))
    labels = list(setups)
    ids = [cfg.method if cfg is not None else "full" for _, cfg in setups.values()]  # CSV headers
    cols = [Column("name", "component", align="left")] + [
        Column(ident, f"{label} (GiB)", fmt_gib) for ident, label in zip(ids, labels, strict=True)]
    rows = []
    for key in keys:
        values = [est.components().get(key) for est, _ in setups.values()]
        if any(values):
            rows.append({"name": key, **dict(zip(ids, values, strict=True))})
    rows.append({"name": "peak per GPU", **dict(zip(ids, (est.peak for est, _ in setups.values()), strict=True))})
    cap = scenario.accelerator.memory_bytes
    adapter = next(est for est, c in setups.values() if isinstance(est, FinetuneMemory))
    per_adapter = adapter.bytes_per_adapter_param["total"]
    notes = [f"{label}: peak at the {est.peak_phase}; {'fits' if est.peak <= cap else 'does NOT fit'} in "
             f"{scenario.accelerator.key}'s {cap / GIB:g} GiB" for label, (est, _) in setups.items()]
    notes += ["each GPU holds the whole model (data parallel, no ZeRO or tensor parallelism): the plan's sharded "
              "full training is in the Memory section", "full: bf16 weights and gradients, fp32 master weights and "
              "AdamW states (2 + 2 + 4 + 8 = 16 B/param); LoRA/QLoRA: the frozen base in its dtype, fp32 adapters "
              f"with their gradients and {adapter.optimizer.name} states ({per_adapter:g} B per adapter parameter)",
              "a blank cell: the set-up has no such component; memory in GiB (2^30 bytes)"]
    data = {"model": spec.name, "batch_size": scenario.micro_batch, "seq_len": scenario.seq_len,
            "setups": {label: {"per_gpu_bytes": est.peak, "peak_phase": est.peak_phase,
                               "components": est.components()} for label, (est, _) in setups.items()}}
    return Document(f"{spec.name}: memory per GPU, full training against LoRA and QLoRA", data,
                    [Table(f"memory per GPU at micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}, "
                           f"recompute {scenario.recompute}", cols, rows, notes)])


def flops_table(spec: ModelSpec, scenario: Scenario, setups: Setups) -> Table:
    """Model FLOPs per token (exact per-op count at the plan's sequence length) and the rule beside it."""
    from ..analytic.flops import step_flops
    from ..analytic.params import count_params

    step = step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute)
    count = count_params(spec)
    n = count.active_per_token
    rows, notes = [], []
    for label, (_, cfg) in setups.items():
        if cfg is None:
            rows.append({"setup": label, "trainable": count.total, "exact": step.model_flops_per_token,
                         "rule": float(six_n(n)), "rule_name": "6·N"})
            continue
        fl = FinetuneFlops(finetune(spec, cfg), step)
        notes = fl.notes()
        rows.append({"setup": label, "trainable": fl.ft.trainable, "exact": fl.model_flops_per_token,
                     "rule": fl.rule(), "rule_name": "4·N_frozen + 6·N_adapter"})
    return Table(f"training FLOPs per token at seq {scenario.seq_len:,} ({'causal' if scenario.causal else 'full S²'})",
                 [Column("setup", "set-up", align="left"),
                  Column("trainable", count_label("trainable params"), fmt_count),
                  Column("exact", "model FLOPs per token (exact, FLOP)", lambda v: si(v).strip()),
                  Column("rule", "rule (FLOP per token, no S²)", lambda v: si(v).strip()),
                  Column("rule_name", "rule", align="left")],
                 rows, notes + [
                     "QLoRA's FLOPs equal LoRA's: dequantising the nf4 base is memory traffic, not matmul FLOPs",
                     "full: forward 2·N, backward 4·N (6·N per token), plus the attention S² terms"])


def finetune_section(report: Report, specs: list[ModelSpec], scenario: Scenario, cfg: LoraConfig, line: str) -> None:
    """`report --finetune lora|qlora`: per decoder model, trainable against frozen parameters, memory per GPU
    of full training, LoRA and QLoRA side by side (one figure for all), and FLOPs per token."""

    report.heading("Fine-tuning (LoRA and QLoRA)")
    scales = ", double-quantised scales" if cfg.base_dtype in ("nf4", "fp4") and cfg.double_quant else ""
    report.paragraph(f"The plan's fine-tuning set-up: {cfg.method} rank {cfg.rank} on {cfg.target_label}, "
                     f"{cfg.base_dtype} base{scales}, micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}, "
                     f"recompute {scenario.recompute}, "
                     f"{scenario.optimizer}; compared with full training and the other method at the same rank and "
                     f"targets, each on one {scenario.accelerator.key} holding the whole model.")
    decoders = [s for s in specs if s.architecture == "decoder"]
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: fine-tuning memory needs the activation model, which covers decoder-only "
                             "models.")
    all_setups = {s.name: finetune_setups(s, scenario, cfg) for s in decoders}
    if not all_setups:
        return
    bars = {(label if len(all_setups) == 1 else f"{name}: {label}"): est.peak_components()
            for name, setups in all_setups.items() for label, (est, _) in setups.items()}
    report.figure("finetune_memory", memory_bars(bars, scenario.accelerator.memory_bytes, scenario.accelerator.key,
                                                 "Memory per GPU: full training, LoRA and QLoRA (each GPU holds "
                                                 "the whole model)", line),
                  f"Memory per GPU at the peak, by component group: full training (bf16-mixed + "
                  f"{scenario.optimizer}, no sharding) against {cfg.method} rank {cfg.rank} on {cfg.target_label} "
                  f"and the other method at the same rank; the plan's set-up marked 'plan'; dashed: "
                  f"{scenario.accelerator.key}'s capacity")
    for spec in decoders:
        setups = all_setups[spec.name]
        ft = finetune(spec, cfg)
        report.heading(spec.name, 3)
        doc = side_by_side_document(spec, scenario, setups)
        doc.tables += [adapter_table(ft), flops_table(spec, scenario, setups)]
        doc.data.update({"finetune": finetune_config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
                         "trainable_components": ft.components})
        report.document(doc, f"finetune-{safe_name(spec.name)}")


# The report's serving section (`report --serve`).

def serving_section(report: Report, specs: list[ModelSpec], scenario: Scenario,
                    work: ServingWorkload | None = None) -> None:
    """`report --serve`: each decoder model's deployment on the scenario's GPU for a stated workload (the fewest
    GPUs and tensor-parallel layout meeting its latency targets: ``serving_sizing.size_workload``, as `serve
    --input-len --output-len --max-concurrency --max-ttft --max-tpot` answers), and with several concurrencies the
    sized replica's throughput against latency (``serving_speed.plan_workloads``)."""
    from ..analytic.serving_sizing import size_workload
    from ..analytic.serving_speed import Workload, plan_workloads
    from ..views.serve import sizing_document, workload_document

    work = work or ServingWorkload()
    gpu = scenario.accelerator
    report.heading("Serving")
    report.paragraph(f"Each model deployed on {gpu.key} with vLLM's defaults ({scenario.kv_dtype} KV cache, weights as "
                     f"the checkpoint ships them) for this workload: {work.describe()}; the fewest GPUs (replicas of "
                     "a tensor-parallel group within a node) that meet the targets, as `llmcalc serve` answers with "
                     "the same workload.")
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: serving covers decoder-only models.")
            continue
        traffic = Workload(work.input_len, work.output_len, max_concurrency=max(work.concurrency))
        try:
            sizing = size_workload(spec, gpu, traffic, max_ttft=work.max_ttft, max_tpot=work.max_tpot)
        except LlmcalcError as exc:
            report.paragraph(f"{spec.name}: not sized ({exc}).")
            continue
        best = sizing.best
        report.heading(f"{spec.name}: " + (f"{best.n_gpus} x {gpu.key} (tp {best.tp} x {best.replicas} "
                                            f"replica{'s' if best.replicas > 1 else ''})" if best else
                                            "no deployment meets the targets"), 3)
        report.document(sizing_document(sizing), f"serve-{safe_name(spec.name)}")
        if best is None or len(work.concurrency) < 2:
            continue
        curve = plan_workloads(plan_serving(spec, gpu, best.tp), work.input_len, work.output_len,
                               max_concurrency=tuple(sorted(work.concurrency)))
        report.figure(f"serve-curve-{safe_name(spec.name)}",
                      throughput_latency(curve, f"{spec.name}: throughput against latency, one replica",
                                         f"tp {best.tp} on {gpu.key} · {work.input_len:,} in / {work.output_len:,} out",
                                         work.max_tpot),
                      "One replica's output tokens per second (all its clients) against the mean time per output "
                      "token, at each number of concurrent clients; the latency target dashed")
        speed = workload_document(curve)
        speed.tables = [t for t in speed.tables if t.title.startswith("workload")]  # the memory: serve's own
        report.document(speed, f"serve-curve-{safe_name(spec.name)}")


def throughput_latency(plan: WorkloadPlan, title: str, line: str, max_tpot: float | None = None) -> Figure:
    """Output tokens/s of one replica against mean TPOT (ms), one point per concurrency, labelled; the TPOT
    target dashed."""
    from . import plots

    fig, ax = plots.figure(title, line, width=8.4, height=4.2)
    points = [(p.run.tpot[0] * 1000, p.output_tokens_per_second, p.work.max_concurrency) for p in plan.performance
              if p.fits and p.run.completed]
    ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o", color=plots.colour(0))
    for x, y, c in points:
        ax.annotate(f"{c} clients", (x, y), xytext=(6, 4), textcoords="offset points", fontsize=plots.MIN_POINTS)
    if max_tpot is not None:
        ax.axvline(max_tpot * 1000, color=plots.WARN, linestyle="--", linewidth=1.2,
                   label=f"target: mean TPOT {max_tpot * 1000:g} ms")
        ax.legend(loc="lower right", fontsize=plots.MIN_POINTS)
    ax.set_xlabel("mean time per output token (ms)")
    ax.set_ylabel("output tokens/s per replica")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.margins(x=0.15, y=0.12)
    ax.grid(True, alpha=0.3)
    return fig


# The report's sharded profile (`report --sharded-profile N`).

def sharded_section(report: Report, results: dict[str, dict], line: str) -> None:
    """`report --sharded-profile N`: each model's virtual sharded profile (FSDP2 over dp x DTensor TP on a fake
    process group), every rank's figures beside the formulas, rank 0 as a figure."""

    report.heading("Sharded profile (virtual)")
    first = next(iter(results.values()))
    report.paragraph(f"Each model built in PyTorch and trained for one step (forward, backward, AdamW) under "
                     f"FakeTensorMode on a fake process group of {first['world_size']} ranks: FSDP2 fully_shard "
                     f"over dp {first['mesh']['dp']} and DTensor tensor parallelism over tp {first['mesh']['tp']}, "
                     f"{first['precision']}. Per rank, the sharded parameter, gradient and optimizer bytes, the "
                     "peak and the bytes each collective sends, against the ZeRO-3/TP formulas and the parallel "
                     "time model's communication volumes.")
    for name, data in results.items():
        report.heading(name, 3)
        report.figure(f"sharded-{safe_name(name)}", rank_figure(data, line),
                      "Rank 0's sharded state, peak and collective bytes: the formula (left bar) and the virtual "
                      "profile (right bar), the relative error over each pair; every rank in the table below")
        doc = distributed_document(data)  # one column per figure in the CSV, long-form for people
        report.paragraph(doc.title + ".")
        report.document(doc, f"sharded-{safe_name(name)}")
