"""matplotlib figures for planning reports (Agg backend): titles, axes with units, SI ticks, legends.

Each function takes plain data (pandas DataFrames built in ``report.sweeps``) and returns a Figure;
``save`` writes it as PNG. One colour per model throughout a report.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from ..units import si  # noqa: E402

COLOURS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
SI = FuncFormatter(lambda v, _: si(v, 3).strip() if v else "0")
TOKENS = FuncFormatter(lambda v, _: f"{v / 1024:g}k" if v >= 1024 else f"{v:g}")


def colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def _figure(title: str, ncols: int = 1, width: float = 7.5):
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, 4.6), layout="constrained")
    fig.suptitle(title, fontsize=12)
    return fig, axes


def _log_axes(ax, xlabel: str, ylabel: str) -> None:
    """Log-log axes with SI tick labels, labels with units, a legend and a light grid."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(SI)
    ax.yaxis.set_major_formatter(SI)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(which="both", alpha=0.25)


def save(fig, path) -> None:
    fig.savefig(path, dpi=110)
    plt.close(fig)


def params_breakdown(df):
    """Horizontal bars: parameters per group, one bar per model in each group. df: model, group, params."""
    models = list(dict.fromkeys(df["model"]))
    groups = list(dict.fromkeys(df["group"]))
    fig, ax = _figure("Parameters by component")
    height = 0.8 / len(models)
    for i, model in enumerate(models):
        sub = df[df["model"] == model].set_index("group").reindex(groups)
        ax.barh([g + (i - (len(models) - 1) / 2) * height for g in range(len(groups))], sub["params"].fillna(0),
                height=height, color=colour(i), label=model)
    ax.set_yticks(range(len(groups)), groups)
    ax.invert_yaxis()
    ax.set_xlabel("parameters (SI: k, M, G)")
    ax.xaxis.set_major_formatter(SI)
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return fig


def flops_vs_seq(df, crossovers: dict[str, float]):
    """FLOPs per training token by component against sequence length (log x). df: model, seq_len,
    component, flops_per_token. One model: a colour per component; several: a colour per model, total
    solid and attention S² dashed. A vertical line marks where S² overtakes the projections."""
    models = list(dict.fromkeys(df["model"]))
    fig, ax = _figure("Training FLOPs per token against sequence length")
    single = len(models) == 1
    components = ["total", "attention projections", "attention S²", "FFN", "LM head"]
    for i, model in enumerate(models):
        sub = df[df["model"] == model]
        for j, component in enumerate(components):
            part = sub[sub["component"] == component]
            if not len(part) or not part["flops_per_token"].any() or (
                    not single and component not in ("total", "attention S²")):
                continue
            style = dict(color="black" if component == "total" else colour(j), linestyle="-",
                         linewidth=2 if component == "total" else 1.4) if single else \
                dict(color=colour(i), linestyle="-" if component == "total" else "--")
            ax.plot(part["seq_len"], part["flops_per_token"], label=component if single else f"{model}: {component}",
                    **style)
    at: dict[float, list[str]] = {}  # models sharing a crossover get one line and one label
    for model, x in crossovers.items():
        at.setdefault(x, []).append(model)
    for k, (x, names) in enumerate(sorted(at.items())):
        tint = "dimgrey" if single else colour(models.index(names[0]))
        ax.axvline(x, color=tint, linewidth=0.8, linestyle=":")
        who = "" if single else f" ({', '.join(names)})"
        ax.annotate(f"S² = projections at {x:,.0f} tokens{who}", (x, 0.03 + 0.07 * k),
                    xycoords=("data", "axes fraction"), xytext=(4, 0), textcoords="offset points", fontsize=7,
                    color=tint, va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(TOKENS)
    ax.yaxis.set_major_formatter(SI)
    ax.set_xlabel("sequence length (tokens, log scale)")
    ax.set_ylabel("FLOPs per token, forward + backward (log scale)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(which="both", alpha=0.25)
    return fig


def time_and_cost(df, costs):
    """Left: wall-clock days against GPU count (log-log), one line per (model, accelerator).
    Right: cost per series (GPU-hours do not change with the count under linear scaling)."""
    fig, (left, right) = _figure("Training time and cost", ncols=2, width=6.2)
    for i, (label, sub) in enumerate(df.groupby("series", sort=False)):
        left.plot(sub["n_gpus"], sub["wall_clock_days"], marker="o", markersize=3, color=colour(i), label=label)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    left.set_xlabel("GPUs (log scale)")
    left.set_ylabel("wall-clock (days, log scale)")
    left.legend(fontsize=7)
    left.grid(which="both", alpha=0.25)
    labels = list(costs)
    values = [costs[k] if costs[k] is not None else 0 for k in labels]
    right.barh(range(len(labels)), values, color=[colour(i) for i in range(len(labels))])
    right.set_yticks(range(len(labels)), labels, fontsize=7)
    right.invert_yaxis()
    right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${si(v, 3).strip()}"))
    right.set_xlabel("cost (USD, any GPU count)")
    right.grid(axis="x", alpha=0.3)
    return fig


def memory_vs_batch(df, capacity: float, device: str):
    """Per-GPU memory against micro-batch: stacked components at the peak (one model) or each model's
    peak (several), in GiB, with the device capacity. df: model, micro_batch, component, bytes."""
    models = list(dict.fromkeys(df["model"]))
    fig, ax = _figure("Training memory per GPU against micro-batch size")
    gib = 2**30
    if len(models) == 1:
        parts = df[df["component"] != "peak"]
        pivot = parts.pivot_table(index="micro_batch", columns="component", values="bytes", sort=False).fillna(0) / gib
        bottom = None
        for j, component in enumerate(pivot.columns):
            ax.bar(range(len(pivot)), pivot[component], bottom=bottom, color=colour(j), label=component)
            bottom = pivot[component] if bottom is None else bottom + pivot[component]
        ax.set_xticks(range(len(pivot)), [str(b) for b in pivot.index])
    else:
        for i, model in enumerate(models):
            sub = df[(df["model"] == model) & (df["component"] == "peak")]
            ax.plot([str(b) for b in sub["micro_batch"]], sub["bytes"] / gib, marker="o", color=colour(i), label=model)
    ax.axhline(capacity / gib, color="black", linestyle="--", linewidth=1, label=f"{device}: {capacity / gib:g} GiB")
    ax.set_xlabel("micro-batch (sequences per GPU)")
    ax.set_ylabel("memory per GPU at the peak (GiB)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return fig


def kv_vs_context(df, capacity: float, device: str):
    """KV cache (batch 1) against context length, one line per model, with the device capacity."""
    fig, ax = _figure("Inference KV cache against context length (batch 1)")
    for i, (model, sub) in enumerate(df.groupby("model", sort=False)):
        ax.plot(sub["context"], sub["kv_cache_bytes"], marker="o", markersize=3, color=colour(i), label=model)
    ax.axhline(capacity, color="black", linestyle="--", linewidth=1, label=f"{device} capacity")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.xaxis.set_major_formatter(TOKENS)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 2**30:g}"))
    ax.set_xlabel("context (tokens, log scale)")
    ax.set_ylabel("KV cache (GiB, log scale)")
    ax.legend(fontsize=7)
    ax.grid(which="both", alpha=0.25)
    return fig


def compute_optimal(frontiers, points):
    """Parameters against training tokens (log-log): the ~20 tokens/parameter line and Hoffmann's
    Approach 3 frontier, with each model's (params, tokens). frontiers: method -> (N list, D list)."""
    fig, ax = _figure("Where the models sit against compute-optimal training")
    for j, (method, (n, d)) in enumerate(frontiers.items()):
        ax.plot(n, d, color="grey", linestyle=["-", "--", ":"][j % 3], label=method)
    for i, (model, (n, d)) in enumerate(points.items()):
        ax.scatter([n], [d], color=colour(i), zorder=3, label=f"{model}: {d / n:,.0f} tokens/param")
    _log_axes(ax, "parameters (log scale)", "training tokens (log scale)")
    return fig


def parity(rows):
    """Analytic against measured FLOPs (log-log, y = x) and every comparison's relative error.
    rows: dicts with model, name, unit, analytic, measured, rel_error."""
    fig, (left, right) = _figure("Formulas against measurements", ncols=2, width=6.2)
    models = list(dict.fromkeys(r["model"] for r in rows))
    flops = [r for r in rows if r["unit"] == "FLOP" and r["analytic"] and r["measured"]]
    for i, model in enumerate(models):
        mine = [r for r in flops if r["model"] == model]
        left.scatter([r["analytic"] for r in mine], [r["measured"] for r in mine], color=colour(i), s=14, label=model)
    if flops:
        low = min(min(r["analytic"], r["measured"]) for r in flops)
        high = max(max(r["analytic"], r["measured"]) for r in flops)
        left.plot([low, high], [low, high], color="black", linewidth=0.8, label="measured = analytic")
    _log_axes(left, "analytic (FLOP)", "measured by FlopCounterMode (FLOP)")
    errors = [r for r in rows if r["rel_error"] is not None]
    labels = [f"{r['model']}: {r['name']}" if len(models) > 1 else r["name"] for r in errors]
    right.barh(range(len(errors)), [r["rel_error"] * 100 for r in errors],
               color=[colour(models.index(r["model"])) for r in errors])
    right.set_yticks(range(len(errors)), labels, fontsize=6)
    right.invert_yaxis()
    right.axvline(0, color="black", linewidth=0.8)
    right.set_xlabel("relative error, measured vs analytic (%)")
    right.grid(axis="x", alpha=0.3)
    return fig
