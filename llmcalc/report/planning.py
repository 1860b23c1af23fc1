"""The content of a planning report for one or several models: summary, inputs, conventions,
parameters, FLOPs against sequence length, time and cost against GPU count, memory, KV cache,
compute-optimal view, and (with profile results) formulas against measurements."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..analytic.flops import step_flops
from ..analytic.params import count_params
from ..analytic.rules import six_n
from ..analytic.summary import Scenario, model_record, scenario_memory, scenario_training
from ..hardware import Accelerator
from ..render.tables import Column, Table
from ..results import ProfileResult
from ..spec import ModelSpec
from ..units import GIB, fmt_count, fmt_flops, fmt_flops_rate, fmt_usd
from ..views.compare import compare_document
from ..views.flops import FLOP_CONVENTIONS, flops_document
from ..views.memory import training_memory_document
from ..views.params import params_document
from ..views.profile import profile_document
from ..views.train import train_document
from . import plots, sweeps
from .document import Report, safe_name
from .plots import gib
from .sections import finetune_section, fp8_section, serving_section, sharded_section, steptime_section


def _summary_lines(spec: ModelSpec, scenario: Scenario, record: dict) -> list[str]:
    count = count_params(spec)
    gpu = scenario.accelerator
    price = scenario.usd_per_gpu_hour if scenario.usd_per_gpu_hour is not None else gpu.usd_per_hour
    lines = [
        f"Size: {fmt_count(count.total)} parameters ({fmt_count(count.non_embedding)} non-embedding"
        + (f", {fmt_count(count.active_per_token)} active per token" if spec.is_moe else "") + f"); {spec.summary()}.",
        f"Compute: {fmt_count(scenario.tokens)} tokens x {fmt_flops(record['training_flops_per_token'])} per token = "
        f"{fmt_flops(record['training_flops'])} (6·N·D: {fmt_flops(six_n(count) * scenario.tokens)}).",
        f"Time: {record['wall_clock_days']:,.1f} days on {scenario.n_gpus:,} x {gpu.name} at {scenario.mfu:.0%} MFU "
        f"({record['gpu_hours']:,.0f} GPU-hours).",
        "Cost: " + (f"{fmt_usd(record['cost_usd'])} at {fmt_usd(price)} per GPU-hour ("
                    + ("given on the command line" if scenario.usd_per_gpu_hour is not None else
                       f"{gpu.key} preset's dated list price") + ")."
                    if record.get("cost_usd") is not None and price is not None
                    else "no price known for this accelerator."),
    ]
    if "memory_per_gpu_bytes" in record:
        lines.append(f"Memory: {gib(record['memory_per_gpu_bytes'])} per GPU ({scenario.recipe} + "
                     f"{scenario.optimizer}, ZeRO-{scenario.zero}, micro-batch {scenario.micro_batch} at seq "
                     f"{scenario.seq_len:,}): {'fits' if record['fits'] else 'does NOT fit'} in {gpu.key}'s "
                     f"{gpu.memory_bytes / GIB:g} GiB.")
    else:
        lines.append(f"Memory: not modelled for this {spec.architecture} model (the activation model covers "
                     "decoder-only models).")
    return lines


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


def plan_table(scenario: Scenario, names: list[str]) -> Table:
    par = scenario.parallel
    batch = scenario.micro_batch * par.dp
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
        ("MFU assumed", f"{scenario.mfu:.0%} of the dense {scenario.dtype} peak"),
        ("precision and optimizer", f"{scenario.recipe} + {scenario.optimizer}, recompute {scenario.recompute}"),
        ("price", "no price" if price is None else
         f"{fmt_usd(price)} per GPU-hour (" + ("given on the command line" if scenario.usd_per_gpu_hour is not None
                                              else f"{gpu.key} preset; source in the table below") + ")"),
    ]
    return Table("the plan", [Column("quantity", "quantity", align="left"), Column("value", "value", align="left")],
                 [{"quantity": q, "value": v} for q, v in rows],
                 ["global batch = micro-batch x data-parallel ranks, no gradient accumulation; tensor-parallel ranks "
                  "share a micro-batch"])


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
    """What every step of a report reads: the models, the scenario, and each model's record."""

    specs: list[ModelSpec]
    sources: dict[str, str]
    scenario: Scenario
    load_hardware: Callable
    names: list[str] = field(init=False)
    by_name: dict[str, ModelSpec] = field(init=False)
    records: dict[str, dict] = field(init=False)
    gpus: list[Accelerator] = field(init=False)
    line: str = field(init=False)

    def __post_init__(self):
        self.names = [s.name for s in self.specs]
        self.by_name = dict(zip(self.names, self.specs, strict=True))
        self.records = {s.name: model_record(s, self.scenario) for s in self.specs}
        self.gpus = sweeps.accelerators_shown(self.by_name, self.scenario, self.load_hardware)
        self.line = self.scenario.line(self.names)


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
        report.bullets(_summary_lines(spec, scenario, ctx.records[spec.name]))
    if len(specs) > 1:
        report.document(compare_document(list(ctx.records.values()), scenario), "compare")
    report.table(plan_table(scenario, ctx.names))
    report.table(accelerator_table(ctx.gpus, scenario))
    report.heading("Inputs and conventions", 3)
    report.bullets([f"scenario: {scenario.describe()}"]
                   + [f"{name}: {ctx.sources.get(name) or 'custom'}" for name in ctx.names]
                   + [f"accelerator: {gpu.name} ({gpu.key}), dense {scenario.dtype} peak "
                      f"{fmt_flops_rate(gpu.peak(scenario.dtype))}, {gpu.memory_bytes / GIB:g} GiB"]
                   + FLOP_CONVENTIONS
                   + ["time assumes the given MFU at every GPU count (linear scaling); energy and cost count GPU "
                      "time only", "memory in GiB (2^30 bytes), MiB below 1 GiB; counts and FLOPs with SI prefixes "
                      "(k = 10^3, M = 10^6, G = 10^9, T = 10^12, Z = 10^21)"])


def _parameters(report: Report, ctx: _Context) -> None:
    report.heading("Parameters")
    moe = any(s.is_moe for s in ctx.specs)
    counts = {n: count_params(s) for n, s in ctx.by_name.items()}
    report.figure("params", plots.params_breakdown(sweeps.params_groups(counts), ctx.line),
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
    report.figure("flops_vs_seq", plots.flops_vs_seq(flops_frame, crossovers, scenario.seq_len, ctx.line),
                  f"Training FLOPs per token by component against sequence length; dashed line: the plan's sequence "
                  f"length ({scenario.seq_len:,}); dotted: where attention's S² work overtakes the Q/K/V/O projections")
    for spec in ctx.specs:
        report.heading(f"{spec.name} at seq {scenario.seq_len:,}", 3)
        doc = flops_document(step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute),
                             count_params(spec))
        report.document(doc, f"flops-{safe_name(spec.name)}")


def _time_figure(report: Report, ctx: _Context) -> None:
    scenario, records = ctx.scenario, ctx.records
    time_frame = sweeps.time_vs_gpus(ctx.by_name, scenario, ctx.load_hardware)
    report.csv("time_vs_gpus", time_frame)
    plan = {"n_gpus": scenario.n_gpus,
            "series": {f"{n} on {scenario.accelerator.key}": (records[n]["wall_clock_days"], records[n]["cost_usd"],
                                                              records[n].get("fits")) for n in ctx.names}}
    prices = {}
    for series, device in dict(zip(time_frame["series"], time_frame["device"], strict=True)).items():
        gpu = next(g for g in ctx.gpus if g.key == device)
        price, _ = price_source(gpu, scenario.usd_per_gpu_hour if device == scenario.accelerator.key else None)
        prices[series] = "no price" if price is None else f"{fmt_usd(price)}/GPU-hour"
    infeasible = not time_frame["fits"].dropna().all()
    report.figure("time_cost", plots.time_and_cost(time_frame, plan, prices, ctx.line),
                  f"Wall-clock against GPU count at {scenario.mfu:.0%} MFU (left; the star is the plan: "
                  f"{scenario.n_gpus:,} x {scenario.accelerator.key})"
                  + ("; red crosses: the model does not fit in GPU memory at that count" if infeasible else "")
                  + "; right: the cost of the run and the price per GPU-hour it assumes (prices and sources in the "
                    "accelerator table above)")


def _time_and_cost(report: Report, ctx: _Context) -> None:
    scenario = ctx.scenario
    report.heading("Training time and cost")
    _time_figure(report, ctx)
    for spec in ctx.specs:
        est = scenario_training(spec, scenario)
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
                                                      scenario.micro_batch, skipped=skipped, scenario=ctx.line),
                      f"Training memory per GPU against micro-batch, every micro-batch up to the first that does not "
                      f"fit, at seq {scenario.seq_len:,} ({scenario.recipe}, ZeRO-{scenario.zero} over "
                      f"{scenario.n_gpus:,} GPUs); the plan's micro-batch ({scenario.micro_batch}) outlined"
                      + (f"; not shown: {', '.join(skipped)} (no activation model)" if skipped else ""))
    for spec in ctx.specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: the analytic activation model covers decoder-only models.")
            continue
        report.heading(spec.name, 3)
        report.document(training_memory_document(scenario_memory(spec, scenario), gpu),
                        f"memory-{safe_name(spec.name)}")
    kv_frame = sweeps.kv_vs_context(ctx.by_name, scenario.kv_dtype)
    if len(kv_frame):
        report.csv("kv_vs_context", kv_frame)
        report.figure("kv_cache", plots.kv_vs_context(kv_frame, gpu.memory_bytes, gpu.key,
                                                      scenario.seq_len, ctx.line),
                      f"Inference KV cache ({scenario.kv_dtype}) for one sequence against context length; dashed "
                      f"line: the plan's context ({scenario.seq_len:,} tokens)")


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
                                                            ctx.line),
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
    report.figure("parity", plots.parity(rows, mode, ctx.line),
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


def _steps(ctx: _Context, extras: Extras) -> list[tuple[str | None, Callable[[Report], None]]]:
    """The report's sections in order, each with its progress label (None: no tick of its own)."""
    
    scenario = ctx.scenario
    steps: list[tuple[str | None, Callable[[Report], None]]] = [
        ("summary", lambda r: _summary(r, ctx)),
        ("parameters", lambda r: _parameters(r, ctx)),
        ("FLOPs", lambda r: _flops(r, ctx)),
        ("time and cost", lambda r: _time_and_cost(r, ctx)),
        (None, lambda r: steptime_section(r, ctx.specs, scenario)),  # issue 10: step time and MFU by layout
        ("memory", lambda r: _memory(r, ctx)),
    ]
    if scenario.recipe.startswith("fp8"):
        steps.append((None, lambda r: fp8_section(r, ctx.specs, scenario, ctx.line)))
    if extras.finetune is not None:
        steps.append(("fine-tuning", lambda r: finetune_section(r, ctx.specs, scenario, extras.finetune, ctx.line)))
    if extras.serve:
        steps.append(("serving", lambda r: serving_section(r, ctx.specs, scenario)))
    steps.append(("compute-optimal", lambda r: _compute_optimal(r, ctx)))
    profiles, sharded = extras.profiles, extras.sharded  # bound here: a lambda does not see a narrowed attribute
    if profiles:
        steps.append((None, lambda r: _measurements(r, ctx, profiles)))
    if sharded:
        steps.append((None, lambda r: sharded_section(r, sharded, ctx.line)))
    return steps


def build_report(specs: list[ModelSpec], sources: dict[str, str], scenario: Scenario, load_hardware,
                 extras: Extras | None = None, progress=None, meta: dict | None = None) -> Report:
    """The planning report: provenance, then each section of ``_steps`` in order."""
    ctx = _Context(specs, sources, scenario, load_hardware)
    report = Report(f"Planning report: {', '.join(ctx.names)}")
    if meta:
        _provenance(report, ctx, meta)
    for label, step in _steps(ctx, extras or Extras()):
        step(report)
        if label is not None and progress is not None:
            progress.step(label)
    return report
