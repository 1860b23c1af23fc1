"""The content of a planning report for one or several models: summary, inputs, conventions,
parameters, FLOPs against sequence length, time and cost against GPU count, memory, KV cache,
compute-optimal view, and (with profile results) formulas against measurements."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..analytic.flops import step_flops
from ..analytic.params import count_params
from ..analytic.rules import six_n
from ..analytic.summary import Scenario
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..render.tables import Column, Table
from ..results import ProfileResult
from ..spec import ModelSpec
from ..units import GIB, count_prefixes, fmt_count, fmt_flops, fmt_flops_rate, fmt_usd
from ..views.compare import compare_document
from ..views.flops import FLOP_CONVENTIONS, flops_document
from ..views.memory import training_memory_document
from ..views.params import params_document
from ..views.profile import profile_document
from ..views.train import train_document
from . import plots, sweeps
from .document import Report, safe_name
from .plan import ModelPlan, ReportPlan, layout_label, make_plan
from .plots import gib
from .sections import finetune_section, fp8_section, serving_section, sharded_section, steptime_section


def _summary_lines(spec: ModelSpec, plan: ReportPlan) -> list[str]:
    """The model's headline under the plan: size, compute, time at the assumed MFU (with the step model's
    prediction beside it, labelled), cost, and the plan layout's memory with its one fit verdict."""
    scenario = plan.scenario
    m = plan.models[spec.name]
    record = m.record
    count = count_params(spec)
    gpu = scenario.accelerator
    price = scenario.usd_per_gpu_hour if scenario.usd_per_gpu_hour is not None else gpu.usd_per_hour
    lines = [
        f"Size: {fmt_count(count.total)} parameters ({fmt_count(count.non_embedding)} non-embedding"
        + (f", {fmt_count(count.active_per_token)} active per token" if spec.is_moe else "") + f"); {spec.summary()}.",
        f"Compute: {fmt_count(scenario.tokens)} tokens x {fmt_flops(record['training_flops_per_token'])} per token = "
        f"{fmt_flops(record['training_flops'])} (6·N·D: {fmt_flops(six_n(count) * scenario.tokens)}).",
        f"Time: {m.training.wall_clock_days:,.1f} days on {scenario.n_gpus:,} x {gpu.name} at the assumed "
        f"{scenario.mfu:.0%} MFU ({m.training.gpu_hours:,.0f} GPU-hours; the headline's MFU)" + _predicted(m, plan),
        "Cost: " + (f"{fmt_usd(m.training.cost_usd)} at {fmt_usd(price)} per GPU-hour ("
                    + ("given on the command line" if scenario.usd_per_gpu_hour is not None else
                       f"{gpu.key} preset's dated list price") + "), at the assumed MFU."
                    if m.training.cost_usd is not None and price is not None
                    else "no price known for this accelerator."),
    ]
    if m.memory is not None:
        lines.append(f"Memory: {gib(m.memory.peak)} per GPU on the plan's layout ({plan.layout_text}, "
                     f"{scenario.recipe} + {scenario.optimizer}, seq {scenario.seq_len:,}): "
                     f"{'fits' if m.fits else 'does NOT fit'} in {gpu.key}'s {gpu.memory_bytes / GIB:g} GiB"
                     + _other_layouts(m) + ".")
    else:
        lines.append(f"Memory: not modelled for this {spec.architecture} model (the activation model covers "
                     "decoder-only models).")
    return lines


def _predicted(m: ModelPlan, plan: ReportPlan) -> str:
    """'; the step model predicts 23.9 % MFU for the best layout that fits (...): 3.6 days' (or why not)."""
    chosen = m.predicted
    if chosen is None:
        return "." if not m.prediction_note else f"; no step-time prediction ({m.prediction_note})."
    which, pred = chosen
    days = m.at(pred, plan.scenario).wall_clock_days
    where = "" if which == "the plan's layout" else f" ({layout_label(pred)}; {m.prediction_note})"
    return (f"; the step model predicts {pred.mfu * 100:.1f} % MFU for {which}{where}: {days:,.1f} days at that "
            f"MFU.")


def _other_layouts(m: ModelPlan) -> str:
    """Where the plan's layout does not fit: how many layouts of the same GPUs and batch do, and the best."""
    if m.fits or m.counts is None:
        return ""
    if not m.ranked:
        return f"; none of the {m.counts['searched']:,} other layouts of these GPUs and this batch fits either"
    best_peak = m.ranked[0][1]
    return (f"; {m.counts['fit']:,} other layouts of these GPUs and this batch fit (step-time section), the best "
            f"{layout_label(m.ranked[0][0])} at {gib(best_peak)} per GPU")


def price_source(gpu: Accelerator, given: float | None) -> tuple[float | None, str]:
    """$/GPU-hour and where it comes from: given, or the preset's dated list price and its source."""
    if given is not None:
        return given, "given on the command line"
    if gpu.usd_per_hour is None:
        return None, f"no dated public price in the {gpu.key} preset"
    from ..spec import hardware_config

    notes = hardware_config(gpu.key).get("notes", "")
    match = re.search(r"Price: (.*?)(?:\s*Price source: (.*))?$", notes)
    if not match:
        return gpu.usd_per_hour, f"{gpu.key} preset"
    what, where = match.group(1).strip(), (match.group(2) or "").strip()
    return gpu.usd_per_hour, f"{gpu.key} preset: {what}" + (f" Source: {where}" if where else "")


def plan_table(plan: ReportPlan, names: list[str]) -> Table:
    scenario = plan.scenario
    par = scenario.parallel
    batch = plan.global_batch
    tokens_per_step = batch * scenario.seq_len
    steps = math.ceil(scenario.tokens / tokens_per_step)
    gpu = scenario.accelerator
    price, source = price_source(gpu, scenario.usd_per_gpu_hour)
    rows = [
        ("models", ", ".join(names)),
        ("training tokens", f"{fmt_count(scenario.tokens)} tokens ({scenario.tokens:,.0f})"),
        ("sequence length", f"{scenario.seq_len:,} tokens"),
        ("GPUs", f"{scenario.n_gpus:,} x {gpu.name} ({gpu.key})"),
        ("layout DP x TP x PP", f"{par.dp:,} x {par.tp} x {par.pp}; ZeRO-{par.zero} over the {par.dp:,} data-parallel "
                                "ranks"),
        ("micro-batch per GPU", f"{scenario.micro_batch} sequence{'s' if scenario.micro_batch > 1 else ''}"),
        ("global batch", f"{batch:,} sequences = {fmt_count(tokens_per_step)} tokens ({tokens_per_step:,})"),
        ("tokens per step", f"{tokens_per_step:,}"),
        ("optimizer steps", f"{steps:,} (tokens / tokens per step, rounded up)"),
        ("MFU assumed (the headline)", f"{scenario.mfu:.0%} of the dense {scenario.dtype} peak"),
    ]
    for name in names:
        m = plan.models[name]
        label = f"{name}: " if len(names) > 1 else ""
        chosen = m.predicted
        rows.append((f"{label}MFU predicted", "n/a: " + (m.prediction_note or "no prediction") if chosen is None else
                     f"{chosen[1].mfu * 100:.1f} % for {chosen[0]} (step-time model)"))
        if m.memory is not None:
            rows.append((f"{label}memory per GPU", f"{gib(m.memory.peak)}: "
                         f"{'fits' if m.fits else 'does NOT fit'} in {gpu.memory_bytes / GIB:g} GiB"))
    rows += [
        ("precision and optimizer", f"{scenario.recipe} + {scenario.optimizer}, recompute {scenario.recompute}"),
        ("price", "no price" if price is None else
         f"{fmt_usd(price)} per GPU-hour (" + ("given on the command line" if scenario.usd_per_gpu_hour is not None
                                              else f"{gpu.key} preset; source in the table below") + ")"),
    ]
    return Table("the plan", [Column("quantity", "quantity", align="left"), Column("value", "value", align="left")],
                 [{"quantity": q, "value": v} for q, v in rows],
                 ["global batch = micro-batch x data-parallel ranks, no gradient accumulation; tensor-parallel ranks "
                  "share a micro-batch; every section uses this layout, batch and fit verdict, and the assumed MFU for "
                  "time and cost (the predicted MFU is shown beside it, not used)"])


def accelerator_table(gpus: list[Accelerator], scenario: Scenario) -> Table:
    rows = []
    for gpu in gpus:
        price, source = price_source(gpu, scenario.usd_per_gpu_hour if gpu.key == scenario.accelerator.key else None)
        rows.append({"key": gpu.key + (" (plan)" if gpu.key == scenario.accelerator.key else ""), "name": gpu.name,
                     "peak": gpu.peak(scenario.dtype), "memory": f"{gpu.memory_bytes / GIB:g}",
                     "price": "n/a" if price is None else fmt_usd(price), "source": source})
    return Table("accelerators in this report",
                 [Column("key", "preset", align="left"), Column("name", "accelerator", align="left"),
                  Column("peak", f"dense {scenario.dtype} peak", fmt_flops_rate), Column("memory", "memory (GiB)"),
                  Column("price", "$/GPU-hour"), Column("source", "price source", align="left")],
                 rows, ["peaks are dense (no 2:4 sparsity); prices are dated on-demand list prices, not quotes"])


@dataclass
class _Context:
    """What every step of a report reads: the models, the scenario, and the one plan (``report.plan``)."""

    specs: list[ModelSpec]
    sources: dict[str, str]
    scenario: Scenario
    load_hardware: Callable
    plan: ReportPlan
    names: list[str] = field(init=False)
    by_name: dict[str, ModelSpec] = field(init=False)
    records: dict[str, dict] = field(init=False)
    gpus: list[Accelerator] = field(init=False)

    def __post_init__(self):
        self.names = [s.name for s in self.specs]
        self.by_name = dict(zip(self.names, self.specs, strict=True))
        self.records = {name: m.record for name, m in self.plan.models.items()}
        self.gpus = sweeps.accelerators_shown(self.by_name, self.scenario, self.load_hardware)


def _provenance(report: Report, ctx: _Context, meta: dict) -> None:
    report.paragraph(f"Generated by llmcalc {meta['llmcalc_version']} on {meta['date']} with this command:")
    report.code(meta["command"])
    shown = {**meta["sources"], **{g.key: g.source for g in ctx.gpus}}
    report.paragraph("Preset sources:")
    report.bullets([f"{name}: {source or 'custom'}" for name, source in shown.items()])


def _summary(report: Report, ctx: _Context) -> None:
    specs, scenario = ctx.specs, ctx.scenario
    gpu = scenario.accelerator
    report.heading("Summary")
    for spec in specs:
        if len(specs) > 1:
            report.paragraph(f"{spec.name}:")
        report.bullets(_summary_lines(spec, ctx.plan))
    if len(specs) > 1:
        report.document(compare_document(list(ctx.records.values()), scenario), "compare")
    report.table(plan_table(ctx.plan, ctx.names))
    report.table(accelerator_table(ctx.gpus, scenario))
    report.heading("Inputs and conventions", 3)
    report.bullets([f"scenario: {scenario.describe()}"]
                   + [f"{name}: {ctx.sources.get(name) or 'custom'}" for name in ctx.names]
                   + [f"accelerator: {gpu.name} ({gpu.key}), dense {scenario.dtype} peak "
                      f"{fmt_flops_rate(gpu.peak(scenario.dtype))}, {gpu.memory_bytes / GIB:g} GiB"]
                   + FLOP_CONVENTIONS
                   + ["time and cost assume the given MFU at every GPU count (linear scaling); the step-time model's "
                      "prediction is shown beside it; energy and cost count GPU time only",
                      f"memory in GiB (2^30 bytes), MiB below 1 GiB; counts with {count_prefixes()}; FLOPs with SI "
                      f"prefixes (G = 10^9, T = 10^12, Z = 10^21)"])


def _parameters(report: Report, ctx: _Context) -> None:
    report.heading("Parameters")
    moe = any(s.is_moe for s in ctx.specs)
    counts = {n: count_params(s) for n, s in ctx.by_name.items()}
    report.figure("params", plots.params_breakdown(sweeps.params_groups(counts), ctx.plan.models_line()),
                  "Parameters by component group (exact counts); a dense MLP and MoE experts share the row "
                  "'MLP / experts'" + ("; MoE models' active parameters per token drawn dark inside the total"
                                       if moe else ""))
    for spec in ctx.specs:
        report.heading(spec.name, 3)
        report.document(params_document(counts[spec.name], ctx.sources.get(spec.name, "")),
                        f"params-{safe_name(spec.name)}")


def _flops(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    report.heading("FLOPs")
    flops_frame, crossovers = sweeps.flops_vs_seq(ctx.by_name, scenario.causal)
    report.csv("flops_vs_seq", flops_frame)
    past = bool(flops_frame["past_max_positions"].any())
    report.figure("flops_vs_seq", plots.flops_vs_seq(flops_frame, crossovers, scenario.seq_len, ctx.plan.flops_line()),
                  f"Training FLOPs per token by component against sequence length; dashed line: the plan's sequence "
                  f"length ({scenario.seq_len:,}); dotted: where attention's S² work overtakes the Q/K/V/O projections"
                  + ("; faded, past a model's max_position_embeddings (what the shapes would cost; the model was not "
                     "trained that long)" if past else ""))
    for spec in ctx.specs:
        report.heading(f"{spec.name} at seq {scenario.seq_len:,}", 3)
        doc = flops_document(step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute),
                             count_params(spec))
        report.document(doc, f"flops-{safe_name(spec.name)}")


def _time_figure(report: Report, ctx: _Context) -> None:
    scenario, plan = ctx.scenario, ctx.plan
    time_frame = sweeps.time_vs_gpus(ctx.by_name, scenario, ctx.load_hardware)
    report.csv("time_vs_gpus", time_frame)
    stars = {"n_gpus": scenario.n_gpus,
             "series": {f"{n} on {scenario.accelerator.key}": (plan.models[n].training.wall_clock_days,
                                                               plan.models[n].training.cost_usd, plan.models[n].fits)
                        for n in ctx.names}}
    prices = {}
    for series, device in dict(zip(time_frame["series"], time_frame["device"], strict=True)).items():
        gpu = next(g for g in ctx.gpus if g.key == device)
        price, _ = price_source(gpu, scenario.usd_per_gpu_hour if device == scenario.accelerator.key else None)
        prices[series] = "no price" if price is None else f"{fmt_usd(price)}/GPU-hour"
    infeasible = not time_frame["fits"].dropna().all()
    never = [s for s, sub in time_frame.groupby("series", sort=False) if (sub["fits"] == False).all()]  # noqa: E712
    report.figure("time_cost", plots.time_and_cost(time_frame, stars, prices, plan.training_line()),
                  f"Wall-clock against GPU count at the assumed {scenario.mfu:.0%} MFU (left; the star is the plan: "
                  f"{scenario.n_gpus:,} x {scenario.accelerator.key}, dp x tp {scenario.parallel.dp:,} x "
                  f"{scenario.tp}, ZeRO-{scenario.zero}, micro-batch {scenario.micro_batch})"
                  + ("; red crosses: the model does not fit in GPU memory at that count with this layout"
                     if infeasible else "")
                  + "; right: the cost of the run at that MFU and the price per GPU-hour it assumes (prices and "
                    "sources in the accelerator table above)"
                  + (f"; hatched: {', '.join(never)} fits at none of these GPU counts with this layout, so its cost "
                     "prices a run that cannot start" if never else ""))


def _time_and_cost(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    report.heading("Training time and cost")
    _time_figure(report, ctx)
    for spec in ctx.specs:
        est = ctx.plan.models[spec.name].training
        inputs = {"model": spec.name, "tokens": scenario.tokens, "seq_len": scenario.seq_len,
                  "causal": scenario.causal, "recompute": scenario.recompute,
                  "flops_basis": f"training FLOPs = exact per-op count per token at seq {scenario.seq_len:,} x tokens"}
        report.heading(spec.name, 3)
        report.document(train_document(est, inputs, six_n(count_params(spec)) * scenario.tokens),
                        f"train-{safe_name(spec.name)}")


def _memory(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    gpu = scenario.accelerator
    report.heading("Memory")
    memory_frame, skipped = sweeps.memory_vs_batch(ctx.by_name, scenario)
    if len(memory_frame):
        report.csv("memory_vs_batch", memory_frame)
        report.figure("memory", plots.memory_vs_batch(memory_frame, gpu.memory_bytes, gpu.key,
                                                      scenario.micro_batch, skipped=skipped,
                                                      scenario=ctx.plan.memory_line()),
                      f"Training memory per GPU against micro-batch, every micro-batch up to the first that does not "
                      f"fit, at seq {scenario.seq_len:,} ({scenario.recipe}, ZeRO-{scenario.zero} over "
                      f"{scenario.n_gpus:,} GPUs); the plan's micro-batch ({scenario.micro_batch}) outlined"
                      + (f"; not shown: {', '.join(skipped)} (no activation model)" if skipped else ""))
    for spec in ctx.specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: the analytic activation model covers decoder-only models.")
            continue
        report.heading(spec.name, 3)
        estimate = ctx.plan.models[spec.name].memory
        assert estimate is not None  # a decoder: the plan has its memory
        report.document(training_memory_document(estimate, gpu), f"memory-{safe_name(spec.name)}")
    kv_frame = sweeps.kv_vs_context(ctx.by_name, scenario.kv_dtype)
    stateless = [s.name for s in ctx.specs if s.architecture != "encoder" and s.name not in set(kv_frame["model"])]
    why = f"{', '.join(stateless)}: no KV cache (a recurrent state that does not grow with context)"
    if len(kv_frame):
        report.csv("kv_vs_context", kv_frame)
        past = bool(kv_frame["past_max_positions"].any())
        report.figure("kv_cache", plots.kv_vs_context(kv_frame, gpu.memory_bytes, gpu.key,
                                                      scenario.seq_len, ctx.plan.kv_line()),
                      f"Inference KV cache ({scenario.kv_dtype}) for one sequence against context length; dashed "
                      f"line: the plan's context ({scenario.seq_len:,} tokens)"
                      + ("; solid up to each model's max_position_embeddings (a bar marks the last context it was "
                         "trained for), faint and dotted past it" if past else "")
                      + (f"; not shown: {why}" if stateless else ""))
    elif stateless:
        report.paragraph(f"No KV-cache figure: {why}.")


def _compute_optimal(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    report.heading("Compute-optimal view")
    points = {s.name: {"params": count_params(s).total, "active": count_params(s).active_per_token,
                       "tokens": scenario.tokens} for s in ctx.specs}
    frontiers = sweeps.frontiers()
    labels = dict(zip(frontiers, ["≈20 tokens per parameter (Hoffmann et al. 2022, Approaches 1-2): the reference",
                                  "Hoffmann et al. 2022 Approach 3 fit (for comparison)"], strict=False))
    moe = any(s.is_moe for s in ctx.specs)
    report.figure("compute_optimal", plots.compute_optimal({labels.get(k, k): v for k, v in frontiers.items()}, points,
                                                            ctx.plan.tokens_line()),
                  "Parameters against training tokens. The reference is the ~20 tokens per parameter rule (Hoffmann et "
                  "al. 2022, Approaches 1 and 2); Approach 3's parametric fit favours smaller models and is shown for "
                  "comparison only (Besiroglu et al. 2024 traced the gap to the fit)"
                  + ("; MoE models at their total (hollow) and active (filled) parameters" if moe else ""))
    items = []
    for n, p in points.items():
        ratio = scenario.tokens / p["active"]
        items.append(f"{n}: {ratio:,.0f} tokens per {'active ' if p['active'] != p['params'] else ''}parameter"
                     + (f" ({scenario.tokens / p['params']:,.0f} per total parameter)" if p["active"] != p["params"]
                        else "")
                     + f"; compute-optimal ≈ 20, so {ratio / 20:,.1f}x the compute-optimal tokens for this size")
    report.bullets(items)


def _measurements(report: Report, ctx: _Context, profiles: dict[str, ProfileResult]) -> None:
    report.heading("Formulas against measurements")
    rows = [{"model": name, "name": c.name, "unit": c.unit, "analytic": c.analytic, "measured": c.measured,
             "rel_error": c.rel_error} for name, result in profiles.items() for c in result.comparisons]
    first = next(iter(profiles.values()))
    mode = (f"virtual single-device profile (FakeTensorMode), batch {first.batch_size} x seq {first.seq_len}"
            if first.mode == "virtual" else f"real profile on {first.device_name}, batch {first.batch_size} x "
            f"seq {first.seq_len}")
    sharded = ctx.scenario.n_gpus > 1
    report.figure("parity", plots.parity(rows, mode, ctx.plan.models_line(list(profiles))),
                  f"Analytic against measured FLOPs (left) and every comparison's relative error (right): a {mode}"
                  + (f"; the plan shards the model over {ctx.scenario.n_gpus:,} GPUs, which this profile does not "
                     "model (one device holds the whole model)" if sharded else ""))
    for name, result in profiles.items():
        report.heading(name, 3)
        report.document(profile_document(result), f"profile-{safe_name(name)}")


@dataclass(frozen=True)
class Extras:
    """The report's optional sections: measured profiles, serving, fine-tuning (a LoRA/QLoRA set-up),
    and the virtual sharded profile's result (``profile --virtual --world-size`` JSON) per model."""

    profiles: dict[str, ProfileResult] | None = None
    serve: bool = False
    finetune: Any = None  # analytic.finetune.LoraConfig
    sharded: dict[str, dict] | None = None
    measured: list = field(default_factory=list)  # fallback.MeasuredPair: models without a formula


def _steps(ctx: _Context, extras: Extras) -> list[tuple[str | None, Callable[[Report], None]]]:
    """The report's sections in order, each with its progress label (None: no tick of its own)."""
    
    scenario = ctx.scenario
    steps: list[tuple[str | None, Callable[[Report], None]]] = [
        ("summary", lambda r: _summary(r, ctx)),
        ("parameters", lambda r: _parameters(r, ctx)),
        ("FLOPs", lambda r: _flops(r, ctx)),
        ("time and cost", lambda r: _time_and_cost(r, ctx)),
        (None, lambda r: steptime_section(r, ctx.plan)),  # step time and MFU by layout, for the plan's batch
        ("memory", lambda r: _memory(r, ctx)),
    ]
    if scenario.recipe.startswith("fp8"):
        steps.append((None, lambda r: fp8_section(r, ctx.specs, scenario, ctx.plan.memory_line())))
    if extras.finetune is not None:
        steps.append(("fine-tuning", lambda r: finetune_section(r, ctx.specs, scenario, extras.finetune,
                                                                 ctx.plan.models_line())))
    if extras.serve:
        steps.append(("serving", lambda r: serving_section(r, ctx.specs, scenario)))
    steps.append(("compute-optimal", lambda r: _compute_optimal(r, ctx)))
    profiles, sharded = extras.profiles, extras.sharded  # bound here: a lambda does not see a narrowed attribute
    if profiles:
        steps.append((None, lambda r: _measurements(r, ctx, profiles)))
    if sharded:
        steps.append((None, lambda r: sharded_section(r, sharded, ctx.plan.models_line(list(sharded)))))
    return steps


def measured_section(report: Report, pairs: list, scenario: Scenario) -> None:
    """Models without a formula (fallback.MeasuredPair): what `compare`, `params`, `flops` and `memory` answer for
    each, from what transformers counted and measured; the sections that need llmcalc's formula are skipped, and
    the report says so."""
    from ..analytic.memory_plan import MemoryRequest, plan_memory
    from ..analytic.summary import compare_models
    from ..fallback import step_flops as counted_step
    from ..views.flops import fallback_flops_document
    from ..views.memory import document as memory_document
    from ..views.params import document as params_document

    report.heading("Models without a formula")
    names = ", ".join(p.name for p in pairs)
    report.paragraph(f"{names}: no llmcalc formula for the model_type; the figures below are what transformers "
                     "counted and measured on the model it built from the config. Skipped for them, as they need "
                     "llmcalc's per-op formula: FLOPs against sequence length, step time by layout, the "
                     "compute-optimal view, serving, fine-tuning and profiles.")
    report.document(compare_document(compare_models(pairs, scenario), scenario), "compare_measured")
    request = MemoryRequest(batch=scenario.micro_batch, seq_len=scenario.seq_len, recipe=scenario.recipe,
                            optimizer=scenario.optimizer, recompute=scenario.recompute, n_gpus=scenario.n_gpus,
                            zero=scenario.zero, tp=scenario.tp)
    for pair in pairs:
        report.heading(pair.name, 3)
        slug = safe_name(pair.name)
        report.document(params_document(pair.counted, ""), f"{slug}_params")
        step = counted_step(pair.counted, 1, scenario.causal, scenario.recompute)
        report.document(fallback_flops_document(pair.counted, step, 1, scenario.causal, scenario.recompute),
                        f"{slug}_flops")
        try:
            plan = plan_memory(pair.measured, request)
        except LlmcalcError as exc:
            report.paragraph(f"Memory: skipped ({exc}).")
            continue
        report.document(memory_document(plan), f"{slug}_memory")


def build_report(specs: list[ModelSpec], sources: dict[str, str], scenario: Scenario, load_hardware,
                 extras: Extras | None = None, progress=None, meta: dict | None = None) -> Report:
    """The planning report: the plan (``report.plan``, worked out once), provenance, then each section of
    ``_steps`` in order; the figures its sections share go to plan.json (``ReportPlan.to_json``); models without
    a formula (`extras.measured`) in a section of their own (``measured_section``)."""
    extras = extras or Extras()
    if not specs:  # every model without a formula: their section alone
        report = Report(f"Planning report: {', '.join(p.name for p in extras.measured)}")
        if meta:
            report.paragraph(f"Generated by llmcalc {meta['llmcalc_version']} on {meta['date']} with this command:")
            report.code(meta["command"])
        report.bullets([f"scenario: {scenario.describe()}"])
        measured_section(report, extras.measured, scenario)
        return report
    plan = make_plan(specs, scenario, tick=None if progress is None else progress.step)
    ctx = _Context(specs, sources, scenario, load_hardware, plan)
    report = Report(f"Planning report: {', '.join(ctx.names)}")
    report.files["plan.json"] = (json.dumps(plan.to_json(), indent=1) + "\n").encode()
    if meta:
        _provenance(report, ctx, meta)
    for label, step in _steps(ctx, extras):
        step(report)
        if label is not None and progress is not None:
            progress.step(label)
    if extras.measured:
        measured_section(report, extras.measured, scenario)
    return report
