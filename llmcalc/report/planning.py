"""The content of a planning report for one or several models: summary, inputs, conventions,
parameters, FLOPs against sequence length, time and cost against GPU count, memory, KV cache,
compute-optimal view, and (with profile results) formulas against measurements."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import field, replace
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
from ..views.train import goodput_note, train_document
from . import plots, sweeps
from .document import Report, report_note, safe_name, short_source
from .plan import ModelPlan, ReportPlan, layout_label, make_plan
from .plots import gib
from .sections import finetune_section, fp8_section, serving_section, sharded_section, steptime_section
from .workload import ServingWorkload


def _summary_lines(spec: ModelSpec, plan: ReportPlan) -> list[str]:
    """The model's headline: size, compute, the planned layout with its one fit verdict, the one time and cost
    (at the planned layout's predicted MFU where there is one; the assumed MFU as the stated alternative)."""
    scenario = plan.scenario
    m = plan.models[spec.name]
    record = m.record
    count = count_params(spec)
    gpu = scenario.accelerator
    price, _ = price_source(gpu, scenario.usd_per_gpu_hour)
    head = m.headline
    lines = [
        f"Size: {fmt_count(count.total)} parameters ({fmt_count(count.non_embedding)} non-embedding"
        + (f", {fmt_count(count.active_per_token)} active per token" if spec.is_moe else "") + f"); {spec.summary()}.",
        f"Compute: {fmt_count(scenario.tokens)} tokens x {fmt_flops(record['training_flops_per_token'])} per token = "
        f"{fmt_flops(record['training_flops'])} (6·N·D: {fmt_flops(six_n(count) * scenario.tokens)}).",
        _layout_line(m, plan),
        f"Time: {head.wall_clock_days:,.1f} days on {scenario.n_gpus:,} x {gpu.name} at {m.headline_basis} "
        f"({head.gpu_hours:,.0f} GPU-hours)"
        + ("" if m.prediction is None else
           f"; at the assumed {scenario.mfu:.0%} MFU instead: {m.training.wall_clock_days:,.1f} days") + ".",
        "Cost: " + (f"{fmt_usd(head.cost_usd)} at {fmt_usd(price)} per GPU-hour ("
                    + ("given on the command line" if scenario.usd_per_gpu_hour is not None else
                       f"{gpu.key}'s dated list price") + ")."
                    if head.cost_usd is not None and price is not None
                    else "no price known for this accelerator."),
    ]
    return lines


def _layout_line(m: ModelPlan, plan: ReportPlan) -> str:
    """'Layout: tp 2 ... (the layout `llmcalc layout` recommends ...): 74.2 GiB per GPU, fits in h100-sxm's 80 GiB.'"""
    gpu = plan.scenario.accelerator
    if m.memory is None:
        return (f"Layout: {m.layout_text}, {m.layout_source}; memory not modelled for this {m.spec.architecture} "
                "model (the activation model covers decoder-only models).")
    among = f": the fastest of {m.counts['fit']:,} that fit" if m.recommended and m.counts else ""
    return (f"Layout: {m.layout_text} ({m.layout_source}{among}; global batch {plan.global_batch:,} sequences, "
            f"{m.scenario.recipe} + {m.scenario.optimizer}): {gib(m.memory.peak)} per GPU, "
            f"{'fits' if m.fits else 'does NOT fit'} in {gpu.key}'s {m.scenario.capacity / GIB:.4g} GiB usable"
            + _other_layouts(m) + ".")


def _other_layouts(m: ModelPlan) -> str:
    """Where the planned (given) layout does not fit: how many layouts of the same GPUs and batch do, and the best."""
    if m.fits or m.counts is None:
        return ""
    if not m.ranked:
        return f"; none of the {m.counts['searched']:,} layouts of these GPUs and this batch fits either"
    return (f"; {m.counts['fit']:,} other layouts of these GPUs and this batch fit, the best "
            f"{layout_label(m.ranked[0][0])} at {gib(m.ranked[0][1])} per GPU (the recommended layout)")


def price_source(gpu: Accelerator, given: float | None) -> tuple[float | None, str]:
    """$/GPU-hour and where it comes from, in a few words: given, or the preset's dated list price ("Lambda list
    price, read 2026-09-20, [lambda.ai/instances](...)"); the full provenance stays in the preset's notes."""
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
    date = re.search(r"read (\d{4}-\d{2}-\d{2})", what)
    link = short_source(where) if where else ""
    return gpu.usd_per_hour, (f"{what.split()[0]} list price" + (f", read {date.group(1)}" if date else "")
                              + (f", {link}" if link and link != "custom" else ""))


def plan_table(plan: ReportPlan, names: list[str]) -> Table:
    scenario = plan.scenario
    batch = plan.global_batch
    tokens_per_step = batch * scenario.seq_len
    steps = math.ceil(scenario.tokens / tokens_per_step)
    gpu = scenario.accelerator
    price, _ = price_source(gpu, scenario.usd_per_gpu_hour)
    rows = [
        ("models", ", ".join(names)),
        ("training tokens", f"{fmt_count(scenario.tokens)} tokens ({scenario.tokens:,.0f})"),
        ("sequence length", f"{scenario.seq_len:,} tokens"),
        ("GPUs", f"{scenario.n_gpus:,} x {gpu.name} ({gpu.key})"),
        ("global batch", f"{batch:,} sequences = {fmt_count(tokens_per_step)} tokens ({tokens_per_step:,})"),
        ("optimizer steps", f"{steps:,} (tokens / tokens per step, rounded up)"),
    ]
    for name in names:
        m = plan.models[name]
        label = f"{name}: " if len(names) > 1 else ""
        rows.append((f"{label}layout", f"{m.layout_text} ({'recommended' if m.recommended else 'given'})"))
        if m.memory is not None:
            rows.append((f"{label}memory per GPU", f"{gib(m.memory.peak)}: "
                         f"{'fits' if m.fits else 'does NOT fit'} in {m.scenario.capacity / GIB:.4g} GiB usable"))
        rows.append((f"{label}MFU", "n/a: " + (m.prediction_note or "no prediction") + f"; assumed {scenario.mfu:.0%}"
                     if m.prediction is None else
                     f"{m.prediction.mfu * 100:.1f} % predicted (the time and cost); {scenario.mfu:.0%} assumed "
                     "(the alternative)"))
    rows += [
        ("precision and optimizer", f"{scenario.recipe} + {scenario.optimizer}, recompute {scenario.recompute}"),
        ("price", "no price" if price is None else
         f"{fmt_usd(price)} per GPU-hour (" + ("given on the command line" if scenario.usd_per_gpu_hour is not None
                                              else f"{gpu.key}'s dated list price; source below") + ")"),
    ]
    return Table("the plan", [Column("quantity", "quantity", align="left"), Column("value", "value", align="left")],
                 [{"quantity": q, "value": v} for q, v in rows],
                 ["global batch = micro-batch x data-parallel ranks x gradient-accumulation steps; every section uses "
                  "each model's planned layout, this batch and its fit verdict; time and cost at the planned layout's "
                  "predicted MFU (the assumed MFU where there is no prediction)"])


def accelerator_table(gpus: list[Accelerator], scenario: Scenario) -> Table:
    rows = []
    for gpu in gpus:
        price, source = price_source(gpu, scenario.usd_per_gpu_hour if gpu.key == scenario.accelerator.key else None)
        rows.append({"key": gpu.key + (" (plan)" if gpu.key == scenario.accelerator.key else ""), "name": gpu.name,
                     "peak": gpu.peak(scenario.dtype), "memory": f"{gpu.memory_bytes / GIB:g}",
                     "price": "n/a" if price is None else fmt_usd(price), "source": _LINK_TEXT.sub(r"\2", source)})
    return Table("accelerators in this report",
                 [Column("key", "preset", align="left"), Column("name", "accelerator", align="left"),
                  Column("peak", f"dense {scenario.dtype} peak", fmt_flops_rate), Column("memory", "memory (GiB)"),
                  Column("price", "$/GPU-hour"), Column("source", "price source", align="left")],
                 rows, ["peaks are dense (no 2:4 sparsity); prices are dated on-demand list prices, not quotes"])


_LINK_TEXT = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")  # a markdown link, as its address in a table cell


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
        self.records = {name: {**m.record, "gpu_hours": m.headline.gpu_hours,
                               "wall_clock_days": m.headline.wall_clock_days, "cost_usd": m.headline.cost_usd}
                        for name, m in self.plan.models.items()}  # the one time and cost: the headline's
        self.gpus = sweeps.accelerators_shown(self.by_name, self.scenario, self.load_hardware)


def _provenance(report: Report, ctx: _Context, meta: dict) -> None:
    report.paragraph(f"Generated by llmcalc {meta['llmcalc_version']} on {meta['date']} with this command:")
    report.code(meta["command"])
    shown = {**meta["sources"], **{g.key: g.source for g in ctx.gpus}}
    report.paragraph("Sources: " + "; ".join(f"{name}: {short_source(source)}" for name, source in shown.items())
                     + " (the full provenance is in each preset's file).")


def _summary(report: Report, ctx: _Context) -> None:
    specs, scenario = ctx.specs, ctx.scenario
    gpu = scenario.accelerator
    report.heading("Summary")
    for spec in specs:
        if len(specs) > 1:
            report.paragraph(f"{spec.name}:")
        report.bullets(_summary_lines(spec, ctx.plan))
    if len(specs) > 1:
        report.document(compare_document(list(ctx.records.values()), scenario, notes=[
            "each model on its planned layout (summary): GPU-hours, wall-clock and cost at that layout's predicted MFU "
            f"(the assumed MFU where there is none) and goodput {scenario.goodput:g} (wall = compute / goodput), "
            "memory per GPU on that layout",
            "training FLOPs are the exact per-op count at this sequence length; attention S² share is of forward "
            "matmul FLOPs"]), "compare")
    report.table(plan_table(ctx.plan, ctx.names))
    report.table(accelerator_table(ctx.gpus, scenario))
    report.heading("Inputs and conventions", 3)
    report.bullets([f"the run: {fmt_count(scenario.tokens)} tokens at seq {scenario.seq_len:,} on {scenario.n_gpus:,} "
                    f"x {gpu.key}, {scenario.recipe} + {scenario.optimizer}, recompute {scenario.recompute}, "
                    f"{'causal' if scenario.causal else 'full S²'} FLOPs; each model on its planned layout (summary)"]
                   + [f"accelerator: {gpu.name} ({gpu.key}), dense {scenario.dtype} peak "
                      f"{fmt_flops_rate(gpu.peak(scenario.dtype))}, {gpu.memory_bytes / GIB:g} GiB"]
                   + FLOP_CONVENTIONS
                   + ["time and cost at the planned layout's predicted MFU, held at every GPU count of the time figure "
                      "(linear scaling); energy and cost count GPU time only",
                      report_note(goodput_note(scenario.goodput)),
                      f"memory in binary units (GiB = 2^30 bytes), one unit per column; counts with "
                      f"{count_prefixes()}; FLOPs with SI prefixes (G = 10^9, T = 10^12, Z = 10^21)"])


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
    at_headline = {n: replace(m.scenario, mfu=m.headline.mfu or m.scenario.mfu) for n, m in plan.models.items()}
    time_frame = sweeps.time_vs_gpus(ctx.by_name, at_headline, ctx.load_hardware)
    report.csv("time_vs_gpus", time_frame)
    stars = {"n_gpus": scenario.n_gpus,
             "series": {f"{n} on {scenario.accelerator.key}": (plan.models[n].headline.wall_clock_days,
                                                               plan.models[n].headline.cost_usd, plan.models[n].fits)
                        for n in ctx.names}}
    prices = {}
    for series, device in dict(zip(time_frame["series"], time_frame["device"], strict=True)).items():
        gpu = next(g for g in ctx.gpus if g.key == device)
        price, _ = price_source(gpu, scenario.usd_per_gpu_hour if device == scenario.accelerator.key else None)
        prices[series] = "no price" if price is None else f"{fmt_usd(price)}/GPU-hour"
    infeasible = not time_frame["fits"].dropna().all()
    never = [s for s, sub in time_frame.groupby("series", sort=False) if (sub["fits"] == False).all()]  # noqa: E712
    mfus = "; ".join(f"{n} {m.headline.mfu:.1%}" for n, m in plan.models.items())
    report.figure("time_cost", plots.time_and_cost(time_frame, stars, prices, plan.training_line()),
                  f"Wall-clock against GPU count, each model on its planned layout's tensor, context and pipeline "
                  f"degrees with data parallelism growing with the GPUs, at the MFU of the headline ({mfus}) held at "
                  f"every count (left; the star is the plan: {scenario.n_gpus:,} x {scenario.accelerator.key})"
                  + ("; red crosses: the model does not fit in GPU memory at that count with these degrees, or the "
                     "count does not divide into them" if infeasible else "")
                  + "; right: the cost of the planned run and the price per GPU-hour it assumes (prices and "
                    "sources in the accelerator table above)"
                  + (f"; hatched: {', '.join(never)} fits at none of these GPU counts with these degrees, so its cost "
                     "prices a run that cannot start" if never else ""))


def _time_and_cost(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    report.heading("Training time and cost")
    _time_figure(report, ctx)
    for spec in ctx.specs:
        m = ctx.plan.models[spec.name]
        inputs = {"model": spec.name, "tokens": scenario.tokens, "seq_len": scenario.seq_len,
                  "causal": scenario.causal, "recompute": m.scenario.recompute,
                  "flops_basis": f"training FLOPs = exact per-op count per token at seq {scenario.seq_len:,} x tokens"}
        report.heading(spec.name, 3)
        report.paragraph(f"At {m.headline_basis} ({m.layout_text})"
                         + ("" if m.prediction is None else
                            f"; at the assumed {scenario.mfu:.0%} MFU the run would take "
                            f"{m.training.wall_clock_days:,.1f} days, {m.training.gpu_hours:,.0f} GPU-hours")
                         + ".")
        report.document(train_document(m.headline, inputs, six_n(count_params(spec)) * scenario.tokens),
                        f"train-{safe_name(spec.name)}")


def _memory(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    gpu = scenario.accelerator
    report.heading("Memory")
    planned = {n: m.scenario for n, m in ctx.plan.models.items()}
    memory_frame, skipped = sweeps.memory_vs_batch(ctx.by_name, planned)
    if len(memory_frame):
        report.csv("memory_vs_batch", memory_frame)
        batches = sorted({m.scenario.micro_batch for m in ctx.plan.models.values()})
        report.figure("memory", plots.memory_vs_batch(memory_frame, gpu.memory_bytes, gpu.key,
                                                      batches[0], skipped=skipped,
                                                      scenario=ctx.plan.memory_line()),
                      f"Training memory per GPU against micro-batch, every micro-batch up to the first that does not "
                      f"fit, at seq {scenario.seq_len:,} ({scenario.recipe}), each model on its planned layout; the "
                      f"plan's micro-batch ({', '.join(map(str, batches))}) outlined"
                      + (f"; not shown: {', '.join(skipped)} (no activation model)" if skipped else ""))
    for spec in ctx.specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: the analytic activation model covers decoder-only models.")
            continue
        report.heading(spec.name, 3)
        m = ctx.plan.models[spec.name]
        assert m.memory is not None  # a decoder: the plan has its memory
        report.paragraph(f"On the planned layout: {m.layout_text} ({m.layout_source}).")
        report.document(training_memory_document(m.memory, gpu), f"memory-{safe_name(spec.name)}")
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
    serve_work: ServingWorkload | None = None  # the workload the serving section sizes for (default: its own)
    given_layout: bool = False  # plan on --tp/--zero/--micro-batch as given, not the recommended layout


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
        steps.append((None, lambda r: fp8_section(r, ctx.specs, scenario, ctx.plan.memory_line(),
                                                  {n: m.scenario for n, m in ctx.plan.models.items()})))
    if extras.finetune is not None:
        steps.append(("fine-tuning", lambda r: finetune_section(r, ctx.specs, scenario, extras.finetune,
                                                                 ctx.plan.models_line())))
    if extras.serve:
        steps.append(("serving", lambda r: serving_section(r, ctx.specs, scenario, extras.serve_work)))
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
    plan = make_plan(specs, scenario, tick=None if progress is None else progress.step,
                     recommend=not extras.given_layout)
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
