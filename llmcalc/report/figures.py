"""The report's section figures (the sweeps' figures are in ``plots``): memory per set-up as stacked bars
(fine-tuning methods, precision recipes), the predicted step by layout, a sharded rank against its formulas;
and the line under every figure's title."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analytic.step.prediction import StepPrediction
from ..units import GIB
from ..views.profile import FIGURES, _err
from ..views.train import BREAKDOWN_LABELS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Component keys of analytic.memory and analytic.finetune, gathered into the few groups a bar shows.
GROUPS = {
    "weights (stored base / bf16 copy)": ("weights",),
    "master weights and adapters (fp32)": ("master weights", "adapters"),
    "gradients": ("gradients",),
    "optimizer states and temporaries": ("optimizer states", "optimizer temporaries"),
    "activations (saved, recompute, logits and loss)": ("activations", "recompute working set", "logits and loss"),
}
OTHER = "other (weight caches, gathered layer, FP8 scales, dequantised weight)"


def grouped(components: dict[str, float]) -> dict[str, float]:
    """Bytes per group; every key not named in GROUPS goes to OTHER, so the groups sum to the input."""
    out = {group: sum(components.get(k, 0.0) for k in keys) for group, keys in GROUPS.items()}
    named = {k for keys in GROUPS.values() for k in keys}
    out[OTHER] = sum(v for k, v in components.items() if k not in named)
    return out


def memory_bars(setups: dict[str, dict[str, float]], capacity: float, device: str, title: str,
                scenario: str = "") -> Figure:
    """setups: bar label -> the components alive at its peak (bytes); the plan's bar is labelled so by
    the caller. Each bar carries its peak in GiB; bars past the capacity are labelled in red."""
    from . import plots

    labels = list(setups)
    fig, ax = plots.figure(title, scenario, width=9.6, height=1.9 + 0.55 * len(labels))
    by_group = {label: grouped(parts) for label, parts in setups.items()}
    left = [0.0] * len(labels)
    for i, group in enumerate([*GROUPS, OTHER]):
        widths = [by_group[label][group] / GIB for label in labels]
        if not any(widths):
            continue
        ax.barh(labels, widths, left=left, color=plots.colour(i), label=group, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    cap = capacity / GIB
    for y, total in enumerate(left):
        over = total > cap
        ax.text(total, y, f"  {total:,.1f} GiB" + (" (does not fit)" if over else ""), va="center",
                fontsize=plots.MIN_POINTS, color=plots.WARN if over else "black")
    ax.axvline(cap, color=plots.WARN, linestyle="--", linewidth=1.2)
    ax.annotate(f"{device} capacity: {cap:g} GiB", (cap, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                textcoords="offset points", color=plots.WARN, fontsize=plots.MIN_POINTS, va="bottom", ha="center")
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(left), cap) * 1.3)
    ax.set_xlabel("memory per GPU at the peak (GiB)")
    ax.grid(axis="x", alpha=0.25)
    fig.legend(loc="outside lower center", ncols=2)
    return fig


def breakdown_bars(predictions: list[tuple[str, StepPrediction]], title: str, scenario: str = "") -> Figure:
    """One horizontal stacked bar per layout: seconds of compute, exposed communication, bubble, optimizer."""
    from . import plots

    parts = [k for k in BREAKDOWN_LABELS if any(p.breakdown[k] for _, p in predictions)]
    legend_rows = -(-len(parts) // 3)
    fig, ax = plots.figure(title, scenario, width=10.8, height=2.0 + 0.42 * len(predictions) + 0.28 * legend_rows)
    rows = list(range(len(predictions)))  # numeric rows: two layouts with one label stay two bars
    left = [0.0] * len(predictions)
    for i, part in enumerate(BREAKDOWN_LABELS):
        widths = [p.breakdown[part] for _, p in predictions]
        if not any(widths):
            continue
        ax.barh(rows, widths, left=left, color=plots.colour(i), label=BREAKDOWN_LABELS[part])
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(rows, [label for label, _ in predictions])
    for y, (_, p) in enumerate(predictions):
        ax.annotate(f"MFU {p.mfu * 100:.1f} %", (left[y], y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=plots.MIN_POINTS)
    ax.invert_yaxis()
    ax.set_xlabel("predicted step time (s)")
    ax.set_xlim(0, max(left) * 1.18 if left else 1)
    fig.legend(loc="outside lower center", ncols=3)
    ax.grid(axis="x", alpha=0.25)
    return fig


def rank_figure(data: dict, scenario: str = "") -> Figure:
    """Rank 0's sharded figures, analytic beside measured (GiB), with the relative error over each pair."""
    from . import plots

    rank = data["ranks"][0]
    pairs = [(label, rank[key]) for key, label in FIGURES]
    pairs += [(f"{kind} sent", p) for kind, p in sorted(rank["collectives"].items())]
    mesh = data["mesh"]
    fig, ax = plots.figure(f"{data['model']}: rank 0 of world {data['world_size']} (dp {mesh['dp']} x tp "
                           f"{mesh['tp']}), formulas against the virtual sharded profile", scenario, width=9.6)
    x = list(range(len(pairs)))
    width = 0.38
    analytic = [p["analytic"] for _, p in pairs]
    measured = [p["measured"] or 0.0 for _, p in pairs]
    ax.bar([i - width / 2 for i in x], analytic, width, color=plots.colour(0), label="analytic (formula)")
    bars = ax.bar([i + width / 2 for i in x], measured, width, color=plots.colour(1), label="measured (virtual)")
    plots.bar_values(ax, bars, [_err(p) or "n/a" for _, p in pairs], horizontal=False)
    ax.set_xticks(x, [label for label, _ in pairs], rotation=20, ha="right")
    ax.set_ylabel("held or sent per rank (GiB; MiB below 1 GiB)")
    plots.gib_axis(ax.yaxis)
    ax.set_ylim(0, max(analytic + measured) * 1.2)
    ax.grid(axis="y", alpha=0.3)
    plots.legend_outside(ax, "below", ncol=2)
    return fig
