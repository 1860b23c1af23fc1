"""Predicted step time by layout for planning reports: a stacked bar per layout and its table.

Self-contained (its own figure function and one hook, ``steptime_section``) so the report package can
be reorganised around it: ``build_report`` calls the hook once; nothing else here is shared.
"""

from __future__ import annotations

from ..analytic.steptime import StepPrediction, search_layouts, steptime_presets
from ..analytic.training import TrainingEstimate
from ..errors import LlmcalcError
from ..units import GIB, fmt_usd
from .views_steptime import BREAKDOWN_LABELS, layout_document

DEFAULT_TOKENS_PER_STEP = 4 * 2**20  # 4 Mi tokens per optimizer step when no global batch is given


def breakdown_bars(predictions: list[tuple[str, StepPrediction]], title: str, scenario: str = ""):
    """One horizontal stacked bar per layout: seconds of compute, exposed communication, bubble, optimizer."""
    from . import plots

    fig, ax = plots.figure(title, scenario, width=9.0)
    labels = [label for label, _ in predictions]
    left = [0.0] * len(predictions)
    for i, part in enumerate(BREAKDOWN_LABELS):
        widths = [p.breakdown[part] for _, p in predictions]
        if not any(widths):
            continue
        ax.barh(labels, widths, left=left, color=plots.colour(i), label=BREAKDOWN_LABELS[part])
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, (_, p) in enumerate(predictions):
        ax.text(left[y], y, f"  MFU {p.mfu * 100:.1f} %", va="center", fontsize=plots.MIN_POINTS)
    ax.invert_yaxis()
    ax.set_xlabel("predicted step time (s)")
    ax.set_xlim(0, max(left) * 1.25 if left else 1)
    fig.legend(loc="outside lower center", ncols=3)
    ax.grid(axis="x", alpha=0.25)
    return fig


def steptime_section(report, specs, scenario, global_batch: int | None = None, top: int = 6) -> None:
    """The report's "Predicted step time by layout" section: for each decoder model, the best layouts
    that fit on the scenario's cluster, their breakdown as stacked bars, and the run's time and cost
    at the best layout's predicted MFU (beside the assumed one)."""
    from .document import safe_name

    report.heading("Predicted step time by layout")
    gpu = scenario.gpu
    if gpu.key not in steptime_presets():
        report.paragraph(f"{gpu.key} has no network/matmul block, so no step-time prediction (presets with one: "
                         f"{', '.join(steptime_presets())}).")
        return
    batch = global_batch or max(1, DEFAULT_TOKENS_PER_STEP // scenario.seq_len)
    report.paragraph(f"Global batch {batch} sequences x {scenario.seq_len:,} tokens"
                     + ("" if global_batch else " (4 Mi tokens per step; `llmcalc layout` takes any --global-batch)")
                     + f" on {scenario.n_gpus:,} x {gpu.key}; layouts ranked by predicted throughput "
                       "(`llmcalc layout`).")
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: the step-time model covers decoder-only models.")
            continue
        try:
            ranked, losers, counts = search_layouts(spec, gpu.key, scenario.n_gpus, scenario.seq_len,
                                                    global_batch=batch, causal=scenario.causal)
        except LlmcalcError as exc:
            report.paragraph(f"{spec.name}: {exc}")
            continue
        report.heading(spec.name, 3)
        if not ranked:
            report.paragraph(f"no layout fits in {gpu.memory_bytes / GIB:g} GiB per GPU "
                             f"({counts['oom']} tried do not fit).")
            continue
        shown = [(f"tp{p.layout.tp} cp{p.layout.cp} pp{p.layout.pp} dp{p.layout.dp} mb{p.layout.micro_batch} "
                  f"{p.recompute}", p) for p, _ in ranked[:top]]
        worst = ranked[-1][0]
        if len(ranked) > top:
            shown.append((f"slowest: tp{worst.layout.tp} cp{worst.layout.cp} pp{worst.layout.pp} "
                          f"dp{worst.layout.dp} mb{worst.layout.micro_batch} {worst.recompute}", worst))
        name = f"steptime-{safe_name(spec.name)}"
        report.figure(name, breakdown_bars(shown, f"{spec.name}: predicted step time by layout",
                                           scenario.line([spec.name])),
                      "Where each layout's step goes (compute, exposed communication, pipeline bubble, optimizer), "
                      "best layouts first and the slowest that fits last")
        best = ranked[0][0]
        est = TrainingEstimate(tokens=scenario.tokens, model_flops=best.model_flops / best.tokens_per_step *
                               scenario.tokens, hardware_flops=best.hardware_flops / best.tokens_per_step *
                               scenario.tokens, accelerator=gpu, dtype=scenario.dtype, n_gpus=scenario.n_gpus,
                               mfu=best.mfu, usd_per_gpu_hour=scenario.usd_per_gpu_hour)
        cost = "" if est.cost_usd is None else f", {fmt_usd(est.cost_usd)}"
        report.bullets([f"best layout predicts MFU {best.mfu * 100:.1f} % (the report's other sections assume "
                        f"{scenario.mfu * 100:.0f} %): {scenario.tokens:.3g} tokens take {est.wall_clock_days:,.1f} "
                        f"days, {est.gpu_hours:,.0f} GPU-hours{cost}"])
        report.document(layout_document(spec.name, gpu.key, scenario.n_gpus, scenario.seq_len, global_batch=batch,
                                        ranked=ranked, losers=losers, counts=counts, top=top), name)
