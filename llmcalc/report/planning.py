"""The content of a planning report for one or several models: summary, inputs, conventions,
parameters, FLOPs against sequence length, time and cost against GPU count, memory, KV cache,
compute-optimal view, and (with profile results) formulas against measurements."""

from __future__ import annotations

from ..analytic.flops import step_flops
from ..analytic.params import count_params
from ..analytic.summary import Scenario, model_record, scenario_memory, scenario_training
from ..results import ProfileResult
from ..spec import ModelSpec
from ..units import fmt_count, fmt_flops, fmt_usd
from . import plots, sweeps
from .document import Report, safe_name
from .steptime_figures import steptime_section
from .views_compare import compare_document
from .views_compute import FLOP_CONVENTIONS, flops_document, train_document
from .views_memory import training_memory_document
from .views_params import params_document
from .views_profile import profile_document


def _summary_lines(spec: ModelSpec, scenario: Scenario, record: dict) -> list[str]:
    count = count_params(spec)
    gpu = scenario.gpu
    lines = [
        f"Size: {fmt_count(count.total)} parameters ({fmt_count(count.non_embedding)} non-embedding"
        + (f", {fmt_count(count.active_per_token)} active per token" if spec.is_moe else "") + f"); {spec.summary()}.",
        f"Compute: {fmt_count(scenario.tokens)} tokens x {fmt_flops(record['training_flops_per_token'])} per token = "
        f"{record['training_flops']:.3g} FLOPs (6·N·D: {6 * count.active_per_token * scenario.tokens:.3g}).",
        f"Time: {record['wall_clock_days']:,.1f} days on {scenario.n_gpus:,} x {gpu.name} at {scenario.mfu:.0%} MFU "
        f"({record['gpu_hours']:,.0f} GPU-hours).",
        "Cost: " + (f"{fmt_usd(record['cost_usd'])} at "
                    f"${(scenario.usd_per_gpu_hour or gpu.usd_per_hour):g} per GPU-hour"
                    + (" (given)." if scenario.usd_per_gpu_hour is not None else
                       f" ({gpu.key} preset's dated list price; set --usd-per-gpu-hour).")
                    if record.get("cost_usd") is not None else "no price given (--usd-per-gpu-hour)."),
    ]
    if "memory_per_gpu_bytes" in record:
        lines.append(f"Memory: {record['memory_per_gpu_bytes'] / 2**30:,.1f} GiB per GPU ({scenario.recipe} + "
                     f"{scenario.optimizer}, ZeRO-{scenario.zero}, micro-batch {scenario.micro_batch} at seq "
                     f"{scenario.seq_len:,}): {'fits' if record['fits'] else 'does NOT fit'} in {gpu.key}'s "
                     f"{gpu.memory_bytes / 2**30:g} GiB.")
    else:
        lines.append("Memory: the analytic activation model covers decoder-only models.")
    return lines


def build_report(specs: list[ModelSpec], sources: dict[str, str], scenario: Scenario, load_hardware,
                 profiles: dict[str, ProfileResult] | None = None, progress=None, serve: bool = False) -> Report:
    names = [s.name for s in specs]
    by_name = dict(zip(names, specs, strict=True))
    title = f"Planning report: {', '.join(names)}"
    report = Report(title)
    records = {s.name: model_record(s, scenario) for s in specs}

    def tick(label):
        if progress is not None:
            progress.step(label)

    report.heading("Summary")
    for spec in specs:
        if len(specs) > 1:
            report.paragraph(f"{spec.name}:")
        report.bullets(_summary_lines(spec, scenario, records[spec.name]))
    if len(specs) > 1:
        report.document(compare_document(list(records.values()), scenario), "compare")
    report.heading("Inputs and conventions", 3)
    report.bullets([f"scenario: {scenario.describe()}"]
                   + [f"{name}: {sources.get(name) or 'custom'}" for name in names]
                   + [f"accelerator: {scenario.gpu.name} ({scenario.gpu.key}), dense {scenario.dtype} peak "
                      f"{scenario.gpu.peak(scenario.dtype) / 1e12:,.4g} "
                      f"TFLOP/s, {scenario.gpu.memory_bytes / 2**30:g} GiB"]
                   + FLOP_CONVENTIONS
                   + ["time assumes the given MFU at every GPU count (linear scaling); energy and cost count GPU "
                      "time only", "memory in GiB (2^30 bytes); counts and FLOPs with SI prefixes (G = 10^9)"])
    tick("summary")

    report.heading("Parameters")
    counts = {n: count_params(s) for n, s in by_name.items()}
    report.figure("params", plots.params_breakdown(sweeps.params_groups(counts)),
                  "Parameters by component group (exact counts)")
    for spec in specs:
        report.heading(spec.name, 3)
        report.document(params_document(count_params(spec), sources.get(spec.name, "")),
                        f"params-{safe_name(spec.name)}")
    tick("parameters")

    report.heading("FLOPs")
    flops_frame, crossovers = sweeps.flops_vs_seq(by_name, scenario.causal)
    report.csv("flops_vs_seq", flops_frame)
    report.figure("flops_vs_seq", plots.flops_vs_seq(flops_frame, crossovers),
                  "Training FLOPs per token by component against sequence length; vertical lines: where attention's "
                  "S² work overtakes the Q/K/V/O projections")
    for spec in specs:
        report.heading(f"{spec.name} at seq {scenario.seq_len:,}", 3)
        doc = flops_document(step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute),
                             count_params(spec))
        report.document(doc, f"flops-{safe_name(spec.name)}")
    tick("FLOPs")

    report.heading("Training time and cost")
    time_frame, costs = sweeps.time_vs_gpus(by_name, scenario, load_hardware)
    report.csv("time_vs_gpus", time_frame)
    report.figure("time_cost", plots.time_and_cost(time_frame, costs),
                  "Wall-clock against GPU count at the given MFU (left) and the cost of the run (right)")
    for spec in specs:
        est = scenario_training(spec, scenario)
        inputs = {"model": spec.name, "tokens": scenario.tokens, "seq_len": scenario.seq_len,
                  "causal": scenario.causal, "recompute": scenario.recompute,
                  "flops_basis": f"training FLOPs = exact per-op count per token at seq {scenario.seq_len:,} x tokens"}
        report.heading(spec.name, 3)
        report.document(train_document(est, inputs, 6 * count_params(spec).active_per_token * scenario.tokens),
                        f"train-{safe_name(spec.name)}")
    tick("time and cost")
    steptime_section(report, specs, scenario)  # issue 10: predicted step time and MFU by layout

    report.heading("Memory")
    memory_frame = sweeps.memory_vs_batch(by_name, scenario)
    if len(memory_frame):
        report.csv("memory_vs_batch", memory_frame)
        report.figure("memory", plots.memory_vs_batch(memory_frame, scenario.gpu.memory_bytes, scenario.gpu.key),
                      f"Training memory per GPU against micro-batch at seq {scenario.seq_len:,} "
                      f"({scenario.recipe}, ZeRO-{scenario.zero} over {scenario.n_gpus:,} GPUs)")
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: the analytic activation model covers decoder-only models.")
            continue
        est = scenario_memory(spec, scenario)
        report.heading(spec.name, 3)
        report.document(training_memory_document(est, scenario.gpu), f"memory-{safe_name(spec.name)}")
    kv_frame = sweeps.kv_vs_context(by_name, scenario.kv_dtype)
    if len(kv_frame):
        report.csv("kv_vs_context", kv_frame)
        report.figure("kv_cache", plots.kv_vs_context(kv_frame, scenario.gpu.memory_bytes, scenario.gpu.key),
                      f"Inference KV cache ({scenario.kv_dtype}) for one sequence against context length")
    tick("memory")

    if serve:
        from .views_serve import serving_section

        serving_section(report, specs, scenario)
        tick("serving")

    report.heading("Compute-optimal view")
    points = {s.name: (count_params(s).active_per_token, scenario.tokens) for s in specs}
    report.figure("compute_optimal", plots.compute_optimal(sweeps.frontiers(), points),
                  "Parameters against training tokens: the ~20 tokens per parameter rule, Hoffmann et al.'s "
                  "Approach 3 frontier, and these models")
    report.bullets([f"{n}: {scenario.tokens / p:,.0f} tokens per parameter (compute-optimal ≈ 20)"
                    for n, (p, _) in points.items()])
    tick("compute-optimal")

    if profiles:
        report.heading("Formulas against measurements")
        rows = [{"model": name, "name": c.name, "unit": c.unit, "analytic": c.analytic, "measured": c.measured,
                 "rel_error": c.rel_error} for name, result in profiles.items() for c in result.comparisons]
        report.figure("parity", plots.parity(rows),
                      "Analytic against measured FLOPs (left) and every comparison's relative error (right)")
        for name, result in profiles.items():
            report.heading(name, 3)
            report.document(profile_document(result), f"profile-{safe_name(name)}")
    return report
