"""matplotlib figures for planning reports (Agg backend): titles, axes with units, SI ticks, legends.

Each function takes plain data (pandas DataFrames built in ``report.sweeps``) and returns a Figure;
``save`` writes it as PNG at 2x (``DPI``) for HiDPI screens; the HTML shows it at half its pixel size,
so a font of ``MIN_POINTS`` is at least 10 CSS px there. One colour per model throughout a report.

Reusable pieces for new figures: ``figure`` (title + the scenario line every figure carries),
``legend_outside`` (legends never cover data), ``mark_x`` (the plan's own value as a labelled
vertical line), ``bar_values`` (value labels on bars), ``distinguish`` (lines that coincide get
dashes, markers and a "same as" label), ``day_axis``/``gib_axis`` (human tick labels).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from ..units import GIB, count_style, fmt_count, fmt_usd, si  # noqa: E402

DPI = 200  # PNG pixels per inch: 2x the 100 CSS px per inch the HTML shows them at
MIN_POINTS = 9  # smallest font: 9 pt x 200/72 / 2 = 12.5 CSS px, >= 10 px even scaled to fit 1100 px
MAX_WIDTH_IN = 10.8  # widest figure: 1080 CSS px, inside the HTML's 1100 px column
plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9,
                     "ytick.labelsize": 9, "legend.fontsize": 9, "figure.titlesize": 12})

COLOURS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
def si_tick(value: float) -> str:
    """An axis tick with an SI prefix and no trailing zeros: 1e9 -> '1 G', 2.5e9 -> '2.5 G'."""
    if not value:
        return "0"
    text = si(value, 3).strip()
    return re.sub(r"\.?0+(?= |$)", "", text) if "." in text.split(" ")[0] else text


SI = FuncFormatter(lambda v, _: si_tick(v))


def count_tick(value: float) -> str:
    """A parameter-count tick in the convention the counts print in (units.fmt_count: '20 B' for 2e10, or '20 G'
    with --units si)."""
    text = si_tick(value)
    return text[:-1] + "B" if count_style() == "ml" and text.endswith(" G") else text


COUNTS = FuncFormatter(lambda v, _: count_tick(v))
TOKENS = FuncFormatter(lambda v, _: f"{v / 1024:g}k" if v >= 1024 else f"{v:g}")
WARN = "#c62828"  # does not fit
STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 1)), "P")]


def colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def figure(title: str, scenario: str = "", ncols: int = 1, width: float = 8.4, height: float = 4.8):
    """A figure with its title and, under it, the scenario line (model, tokens, seq, GPUs, ...)."""
    width = min(width, MAX_WIDTH_IN)
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), layout="constrained")
    line = textwrap.fill(scenario, int(width * 11.5), break_on_hyphens=False) if scenario else ""
    fig.suptitle(title + (f"\n{line}" if line else ""), fontsize=11)
    return fig, axes


def legend_outside(ax, where: str = "right", **kwargs) -> None:
    """The legend beside (right) or under (below) the axes, never over the data."""
    if where == "right":
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kwargs)
    else:  # a figure legend under everything: constrained layout makes room for it
        handles, labels = ax.get_legend_handles_labels()
        fig = ax.figure
        ncol = kwargs.pop("ncol", 2)
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kwargs)
        rend = renderer(fig)
        while ncol > 1 and legend.get_window_extent(rend).width > fig.bbox.width * 0.98:  # too wide: fewer columns
            legend.remove()
            ncol -= 1
            legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kwargs)
            rend = renderer(fig)
        rows = -(-len(labels) // ncol)
        if rows > 3:  # a tall legend: the figure grows by it rather than squeezing the axes
            width, height = fig.get_size_inches()
            fig.set_size_inches(width, height + 0.2 * (rows - 3))


def mark_x(ax, x: float, label: str, colour_: str = "black", y: float = 0.97) -> None:
    """The plan's own value: a vertical line with its label (inside the axes, not clipped)."""
    ax.axvline(x, color=colour_, linewidth=1.2, linestyle=(0, (4, 2)), zorder=1)
    xmin, xmax = ax.get_xlim()
    right_half = (x > (xmin * xmax) ** 0.5) if ax.get_xscale() == "log" and xmin > 0 else x > (xmin + xmax) / 2
    ax.annotate(label, (x, y), xycoords=("data", "axes fraction"), xytext=(-4 if right_half else 4, 0),
                textcoords="offset points", ha="right" if right_half else "left", va="top", color=colour_,
                fontsize=MIN_POINTS, bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))


def capacity_label(ax, y: float, text: str) -> None:
    """A horizontal capacity line at `y` (data) with its label where no data marker and no other text is: above
    or below the line, at its left or its right end."""
    ax.axhline(y, color=WARN, linestyle="--", linewidth=1.2)
    label = ax.annotate(text, (0.01, y), xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", color=WARN, fontsize=MIN_POINTS, va="bottom", ha="left",
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    spots = []
    for side in (0.01, 0.99, 0.5, 0.25, 0.75):
        ha = "left" if side < 0.4 else "right" if side > 0.6 else "center"
        spots += [((side, y), 0, 3, ha, "bottom"), ((side, y), 0, -3, ha, "top")]
    rend = renderer(ax.figure)
    label.set_gid("label")
    others = [box for _, artist, box in _boxes(ax.figure, rend) if artist is not label]
    points, frame = _data_points(ax), ax.get_window_extent(rend)
    bars = [p.get_window_extent(rend) for p in ax.patches if p.get_visible() and p.get_width() and p.get_height()]
    for xy, dx, dy, ha, va in spots:
        label.xy, label.xyann = xy, (dx, dy)
        label.set_ha(ha)
        label.set_va(va)
        box = label.get_window_extent(rend)
        if (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                and not any(_overlap_area(box, o) > 0 for o in others + bars)
                and not any(box.x0 < px < box.x1 and box.y0 < py < box.y1 for px, py in points)):
            return
    label.xy, label.xyann = spots[0][0], spots[0][1:3]
    label.set_ha("left")
    label.set_va("bottom")


def bar_values(ax, bars, texts: list[str], horizontal: bool = True) -> None:
    """A value label at the end of each bar."""
    for bar, text in zip(bars, texts, strict=False):
        if horizontal:
            ax.annotate(text, (bar.get_x() + bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                        textcoords="offset points", va="center", ha="left", fontsize=MIN_POINTS)
        else:
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height()), xytext=(0, 2),
                        textcoords="offset points", va="bottom", ha="center", fontsize=MIN_POINTS)


def distinguish(series: dict[str, list[float]]) -> dict[str, tuple[int, str]]:
    """For lines that may coincide: label -> (style index, label suffix). A line equal (within 0.1 %) to
    an earlier one gets the next dash/marker style and ' (same as X)'."""
    out: dict[str, tuple[int, str]] = {}
    seen: list[tuple[str, list[float]]] = []
    for label, values in series.items():
        twins = [other for other, vals in seen if len(vals) == len(values)
                 and all(abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-300) for a, b in zip(vals, values, strict=True))]
        out[label] = (len(twins) % len(STYLES), f" (same as {twins[0]})" if twins else "")
        seen.append((label, values))
    return out


def day_axis(axis) -> None:
    """Durations in days on a log axis, read as people say them: '0.1 d', '1 d', '10 d', '1,000 d'."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: "" if v <= 0 else f"{v:,.0f} d" if v >= 1 else f"{v:g} d"))


def gib(value: float) -> str:
    """Bytes for people: GiB from 1 GiB on, MiB below; three significant digits, whole numbers from 1,000 on
    (2,080 GiB, not 2.08e+03)."""
    scaled, unit = (value / GIB, "GiB") if value >= GIB else (value / 2**20, "MiB")
    return f"{scaled:,.0f} {unit}" if scaled >= 1000 else f"{scaled:,.3g} {unit}"


def gib_axis(axis) -> None:
    axis.set_major_formatter(FuncFormatter(lambda v, _: gib(v) if v > 0 else "0"))


# --- text that never collides: placing labels, and the check the tests run on every figure --------------------

def renderer(fig):
    """The figure laid out (constrained layout runs on draw) and its renderer, for measuring text. The draw lays
    out and measures every artist but paints no pixel (matplotlib's draw_without_rendering: the renderer's drawing
    calls are disabled), so placing labels costs a layout, not a raster; the Agg renderer it measures with is the
    one the figure is saved with (same dpi), so the boxes are the saved figure's."""
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()


def _boxes(fig, rend) -> list[tuple[str, Any, Any]]:
    """(label, artist, display bbox) of every visible text: a legend as one box, each other text its own."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    legends = [a for a in fig.findobj(Legend) if a.get_visible()]
    inside = {id(t) for leg in legends for t in leg.findobj(Text)} | _undrawn_ticks(fig)
    out = [(f"legend ({len(leg.get_texts())} entries)", leg, leg.get_window_extent(rend)) for leg in legends]
    for text in fig.findobj(Text):
        if id(text) in inside or not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent(rend)
        if box.width > 0 and box.height > 0:
            out.append((text.get_text().replace("\n", " ")[:50], text, box))
    return out


def _undrawn_ticks(fig) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: those of ticks outside the axis' view interval."""
    out = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not low - 1e-9 * abs(high - low) <= loc <= high + 1e-9 * abs(high - low):
                    out |= {id(tick.label1), id(tick.label2)}
    return out


def _data_points(ax) -> list[tuple[float, float]]:
    """Display coordinates of the markers drawn in `ax` (line markers and scatter points)."""
    import numpy as np

    points: list[tuple[float, float]] = []
    for line in ax.get_lines():
        if line.get_visible() and line.get_marker() not in (None, "None", "", " "):
            xy = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
            points += [tuple(p) for p in xy if np.isfinite(p).all()]
    for coll in ax.collections:
        if coll.get_visible() and len(coll.get_offsets()):
            xy = coll.get_offset_transform().transform(coll.get_offsets())
            points += [tuple(p) for p in xy if np.isfinite(p).all()]
    return points


def collisions(fig, tolerance: float = 0.5) -> list[str]:
    """What a reader would see as a smear: two texts (legends as one box) that overlap, a text that runs off the
    figure, and a label placed inside the axes over a data marker. [] for a clean figure."""
    rend = renderer(fig)
    boxes = _boxes(fig, rend)
    canvas = fig.bbox
    found = []
    for i, (name, _, box) in enumerate(boxes):
        if (box.x0 < canvas.x0 - tolerance or box.y0 < canvas.y0 - tolerance or box.x1 > canvas.x1 + tolerance
                or box.y1 > canvas.y1 + tolerance):
            found.append(f"{name!r} runs off the figure")
        for other, _, obox in boxes[i + 1:]:
            if box.expanded(1, 1).overlaps(obox) and _overlap_area(box, obox) > tolerance ** 2:
                found.append(f"{name!r} overlaps {other!r}")
    for ax in fig.axes:
        points = _data_points(ax)
        frame = ax.get_window_extent(rend)
        for name, artist, box in boxes:
            if getattr(artist, "axes", None) is ax and getattr(artist, "get_gid", lambda: None)() == "label":
                if any(box.x0 < p[0] < box.x1 and box.y0 < p[1] < box.y1 for p in points):
                    found.append(f"{name!r} sits on a data point")
                if (box.x0 < frame.x0 - tolerance or box.x1 > frame.x1 + tolerance or box.y0 < frame.y0 - tolerance
                        or box.y1 > frame.y1 + tolerance):
                    found.append(f"{name!r} runs out of its axes")
    return found


def _overlap_area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def place(ax, annotation, offsets: Sequence[tuple[float, float, str, str]], avoid_points: bool = True) -> None:
    """Move an annotation (text in offset points from its anchor) to the first of `offsets` ((dx, dy, ha, va))
    where it stays inside the axes and touches no other text and no data marker; the first offset if none is
    free. The label is tagged so that ``collisions`` checks it against the markers."""
    rend = renderer(ax.figure)
    annotation.set_gid("label")
    others = [box for _, artist, box in _boxes(ax.figure, rend) if artist is not annotation]
    points = _data_points(ax) if avoid_points else []
    frame = ax.get_window_extent(rend)
    for dx, dy, ha, va in offsets:
        annotation.xyann = (dx, dy)
        annotation.set_ha(ha)
        annotation.set_va(va)
        box = annotation.get_window_extent(rend)
        if (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                and not any(_overlap_area(box, o) > 0 for o in others)
                and not any(box.x0 < x < box.x1 and box.y0 < y < box.y1 for x, y in points)):
            return
    dx, dy, ha, va = offsets[0]
    annotation.xyann = (dx, dy)
    annotation.set_ha(ha)
    annotation.set_va(va)


LABEL_BOX = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8)  # a label readable over a line
AROUND = [(6, 6, "left", "bottom"), (6, -6, "left", "top"), (-6, 6, "right", "bottom"), (-6, -6, "right", "top"),
          (6, 18, "left", "bottom"), (6, -18, "left", "top"), (-6, 18, "right", "bottom"), (-6, -18, "right", "top"),
          (0, 30, "center", "bottom"), (0, -30, "center", "top")]  # offsets around a point, nearest first


def save(fig, path) -> None:
    for ax in fig.axes:  # log axes: labels on the decades only, never a crowd of 2x10^8, 3x10^8 ...
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_minor_formatter(NullFormatter())
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def params_breakdown(df, scenario: str = ""):
    """Horizontal bars: parameters per group (dense MLP and MoE experts in one row, 'MLP / experts'),
    one bar per model, the value at its end; MoE models' active-per-token part drawn dark inside the
    total. df: model, group, params, active."""
    models = list(dict.fromkeys(df["model"]))
    groups = list(dict.fromkeys(df["group"]))
    fig, ax = figure("Parameters by component (exact counts)", scenario,
                     height=max(3.2, 1.6 + (0.32 if len(models) == 1 else 0.21) * len(groups) * len(models)))
    totals = df[df["group"] == "total"]["params"]
    log = totals.max() / totals.min() > 20  # sizes too far apart for one linear axis
    height = 0.8 / len(models)
    any_moe = bool((df["active"] != df["params"]).any())
    for i, model in enumerate(models):
        sub = df[df["model"] == model].set_index("group")[["params", "active"]].reindex(groups).fillna(0)
        ys = [g + (i - (len(models) - 1) / 2) * height for g in range(len(groups))]
        moe = bool((sub["active"] != sub["params"]).any())
        bars = ax.barh(ys, sub["params"], height=height * 0.92, color=colour(i), alpha=0.45 if moe else 1.0,
                       label=f"{model}: total" if moe else model)
        if moe:
            ax.barh(ys, sub["active"], height=height * 0.92, color=colour(i), label=f"{model}: active per token")
        bar_values(ax, bars, [("" if not p else fmt_count(p) + (f" (active {fmt_count(a)})" if a != p else ""))
                              for p, a in zip(sub["params"], sub["active"], strict=True)])
    ax.set_yticks(range(len(groups)), groups)
    ax.invert_yaxis()
    prefixes = "k, M, B = 10^9, T" if count_style() == "ml" else "SI: k, M, G, T"
    ax.set_xlabel(f"parameters ({prefixes}" + (", log scale)" if log else ")"))
    if log:
        ax.set_xscale("log")
        ax.set_xlim(df["params"][df["params"] > 0].min() / 2, df["params"].max() * 30)  # room for the labels
    else:
        ax.set_xlim(0, df["params"].max() * 1.35)
    ax.xaxis.set_major_formatter(COUNTS)
    ax.grid(axis="x", alpha=0.3)
    if len(models) > 1 or any_moe:
        legend_outside(ax, "below", ncol=min(3, 2 * len(models)))
    return fig


def _past(ax, part, x: str, y: str, tint: str) -> None:
    """The stretch of a line past its model's max_position_embeddings: faint and dotted, from the last trained
    point on, with a bar marking where the trained positions end."""
    if "past_max_positions" not in part or not part["past_max_positions"].any():
        return
    trained = part[~part["past_max_positions"]]  # the rows come in increasing length: trained ones first
    joined = part.iloc[max(len(trained) - 1, 0):]  # from the last trained point on
    ax.plot(joined[x], joined[y], color=tint, linestyle=":", linewidth=1.2, alpha=0.45, zorder=1)
    if len(trained):
        ax.plot(trained[x].iloc[-1:], trained[y].iloc[-1:], color=tint, marker="|", markersize=12,
                markeredgewidth=2, linestyle="none", zorder=3)


def _past_legend(ax, df) -> None:
    """A legend entry for the faded stretches, where there are any."""
    if "past_max_positions" in df and df["past_max_positions"].any():
        ax.plot([], [], color="grey", linestyle=":", alpha=0.6, marker="|", markersize=10,
                label="past max_position_embeddings (| = the last trained)")


def flops_vs_seq(df, crossovers: dict[str, float], seq_len: int | None = None, scenario: str = ""):
    """FLOPs per training token by component against sequence length (log x). df: model, seq_len,
    component, flops_per_token. One model: a colour per component; several: a colour per model, total
    solid and attention S² dashed. A dotted line marks where S² overtakes the projections, a dashed
    one the plan's sequence length."""
    models = list(dict.fromkeys(df["model"]))
    fig, ax = figure("Training FLOPs per token against sequence length", scenario)
    single = len(models) == 1
    components = ["total", "attention projections", "attention S²", "FFN", "LM head"]
    lines = {}
    for i, model in enumerate(models):
        sub = df[df["model"] == model]
        for j, component in enumerate(components):
            part = sub[sub["component"] == component]
            if not len(part) or not part["flops_per_token"].any() or (
                    not single and component not in ("total", "attention S²")):
                continue
            label = component if single else f"{model}: {component}"
            lines[label] = (part, "black" if single and component == "total" else colour(j if single else i),
                            "--" if not single and component != "total" else "-")
    styles = distinguish({k: list(v[0]["flops_per_token"]) for k, v in lines.items()})
    for label, (part, tint, dash) in lines.items():
        k, same = styles[label]
        trained = part[~part["past_max_positions"]] if "past_max_positions" in part else part
        ax.plot(trained["seq_len"], trained["flops_per_token"], color=tint, linestyle=STYLES[k][0] if k else dash,
                marker=STYLES[k][1] if k else None, markersize=4, linewidth=2 if "total" in label else 1.5,
                label=label + same)
        _past(ax, part, "seq_len", "flops_per_token", tint)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _past_legend(ax, df)
    if seq_len:
        mark_x(ax, seq_len, f"plan: seq {seq_len:,}")
    at: dict[float, list[str]] = {}  # models sharing a crossover get one line and one label
    for model, x in crossovers.items():
        at.setdefault(x, []).append(model)
    for k, (x, names) in enumerate(sorted(at.items())):
        tint = "dimgrey" if single else colour(models.index(names[0]))
        ax.axvline(x, color=tint, linewidth=0.9, linestyle=":")
        who = "" if single else f" ({', '.join(names)})"
        ax.annotate(f"S² = projections at {x:,.0f}{who}", (x, 0.03 + 0.08 * k), xycoords=("data", "axes fraction"),
                    xytext=(4, 0), textcoords="offset points", fontsize=MIN_POINTS, color=tint, va="bottom",
                    gid="crossover", bbox=LABEL_BOX)
    ax.xaxis.set_major_formatter(TOKENS)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{si_tick(v)}FLOP" if v else "0"))
    ax.set_xlabel("sequence length (tokens, log scale)")
    ax.set_ylabel("FLOPs per token, fwd + bwd (log scale)")
    legend_outside(ax, "below", ncol=2)  # under the axes: the full width is left for the lines and their labels
    ax.grid(which="both", alpha=0.25)
    for label in [t for t in ax.texts if t.get_gid() == "crossover"]:
        place(ax, label, [(dx, dy, ha, "bottom") for dy in (0, 14, 28, 42) for dx, ha in ((4, "left"), (-4, "right"))],
              avoid_points=False)
    return fig


def time_and_cost(df, plan: dict, prices: dict[str, str], scenario: str = ""):
    """Left: wall-clock days against GPU count (log-log), one line per series (model on accelerator);
    the plan's series thick and on top, its point starred and labelled; points whose memory does not
    fit on the device drawn as red crosses on a faint line. Right: each series' cost (it does not
    depend on the GPU count under linear scaling) with its $/GPU-hour.
    df: series, device, n_gpus, wall_clock_days, cost_usd, fits; plan: n_gpus and series -> (days, cost,
    fits) for the plan's own series (with several, the stars carry no label: the comparison table has them);
    prices: series -> '$3.99/GPU-hour (preset)' or 'no price'."""
    fig, (left, right) = figure("Training time and cost", scenario, ncols=2, width=10.8, height=5.4)
    order = list(dict.fromkeys(df["series"]))
    styles = distinguish({s: list(df[df["series"] == s]["wall_clock_days"]) for s in order})
    for i, label in enumerate(order):
        sub = df[df["series"] == label]
        k, same = styles[label]
        chosen = label in plan["series"]
        ok = sub[sub["fits"] != False]  # noqa: E712  (None: memory not modelled, drawn as feasible)
        bad = sub[sub["fits"] == False]  # noqa: E712
        left.plot(sub["n_gpus"], sub["wall_clock_days"], color=colour(i), alpha=0.35, linewidth=1,
                  linestyle=STYLES[k][0], zorder=2)
        left.plot(ok["n_gpus"], ok["wall_clock_days"], color=colour(i), linestyle=STYLES[k][0],
                  marker=STYLES[k][1], markersize=5 if chosen else 4, linewidth=2.6 if chosen else 1.4,
                  markerfacecolor="white" if k else colour(i), zorder=5 if k else 4 if chosen else 3,
                  label=label + (" (the plan)" if chosen and len(order) > 1 and
                                                            len(plan["series"]) == 1 else "") + same)
        if len(bad):
            left.scatter(bad["n_gpus"], bad["wall_clock_days"], marker="x", color=WARN, s=30, zorder=5,
                         label="does not fit in GPU memory" if "does not fit in GPU memory" not in
                         left.get_legend_handles_labels()[1] else None)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    n = plan["n_gpus"]
    for j, (_label, (days, cost, fits)) in enumerate(plan["series"].items()):
        left.scatter([n], [days], marker="*", s=240, color="gold" if fits is not False else "white",
                     edgecolor="black" if fits is not False else WARN, linewidth=1.2, zorder=6,
                     label=f"the plan: {n:,} GPUs" if j == 0 else None)
        if len(plan["series"]) == 1:
            text = (f"plan: {n:,} GPUs\n{days:,.1f} days" + ("" if cost is None else f", {fmt_usd(cost)}")
                    + ("\ndoes not fit in memory" if fits is False else ""))
            left.annotate(text, (n, days), xytext=(12, 10), textcoords="offset points", fontsize=MIN_POINTS,
                          color=WARN if fits is False else "black",
                          bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="grey", alpha=0.9), zorder=7)
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    day_axis(left.yaxis)
    left.set_xlabel("GPUs (log scale)")
    left.set_ylabel("wall-clock (log scale)")
    left.grid(which="both", alpha=0.25)
    legend_outside(left, "below", ncol=2)
    _cost_bars(right, df, order, prices)
    return fig


def _cost_bars(right, df, order: list[str], prices: dict[str, str]) -> None:
    """The right panel of time_and_cost: each series' cost, hatched where the run fits at no GPU count shown."""
    costs = [df[df["series"] == s]["cost_usd"].iloc[0] for s in order]
    values = [c if c is not None and c == c else 0 for c in costs]
    never = [bool((df[df["series"] == s]["fits"] == False).all()) for s in order]  # noqa: E712
    bars = right.barh(range(len(order)), values, color=[colour(i) for i in range(len(order))])
    for bar, no in zip(bars, never, strict=True):
        if no:  # a run that cannot start at any GPU count shown: its cost is hypothetical
            bar.set_alpha(0.35)
            bar.set_hatch("//")
            bar.set_edgecolor(WARN)
    bar_values(right, bars, [(fmt_usd(c) if c else "no price") + ("\n(fits at no count)" if no else "")
                             for c, no in zip(values, never, strict=True)])
    right.set_yticks(range(len(order)), [f"{s}\n{prices[s]}" for s in order])
    right.invert_yaxis()
    right.set_xlim(0, max(values + [1]) * 1.45)
    right.xaxis.set_major_locator(MaxNLocator(4))
    right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${si_tick(v)}"))
    right.set_xlabel("cost of the run (USD, any GPU count)")
    right.grid(axis="x", alpha=0.3)


def memory_vs_batch(df, capacity: float, device: str, micro_batch: int, skipped: dict[str, str] | None = None,
                    scenario: str = ""):
    """Per-GPU memory against micro-batch, every micro-batch up to the first that does not fit.
    One model: stacked components (those under 2 % of the tallest bar merged into 'other'), the total
    on each bar, bars past the capacity hatched red, the plan's micro-batch outlined. Several models:
    each model's peak. The capacity line carries its label; models without an activation model are
    named in a note, never dropped silently. df: model, micro_batch, component, bytes."""
    models = list(dict.fromkeys(df["model"]))
    fig, ax = figure("Training memory per GPU against micro-batch size", scenario)
    cap = capacity / GIB
    one = len(models) == 1
    top = _memory_bars(ax, df, cap, micro_batch) if one else _memory_peak_lines(ax, df, models, cap, micro_batch)
    ax.set_ylim(0, top * 1.22)
    ax.set_xlabel("micro-batch (sequences per GPU)")
    ax.set_ylabel("memory per GPU at the peak (GiB)")
    ax.grid(axis="y", alpha=0.3)
    if skipped:
        ax.set_title("not shown: " + "; ".join(f"{m} ({why})" for m, why in skipped.items()), fontsize=MIN_POINTS,
                     color="dimgrey", loc="left")
    legend_outside(ax, "below", ncol=2 if one else 3)
    above = [(0, 3 + 13 * k, "center", "bottom") for k in range(5)]
    for label in [t for t in ax.texts if t.get_gid() == "bar total"]:  # neighbours of one height stack up
        place(ax, label, above, avoid_points=False)
    stacked = [(dx, -4 - 14 * k, ha, "top") for k in range(6) for dx, ha in ((6, "left"), (-6, "right"))]
    for label in [t for t in ax.texts if t.get_gid() == "off scale"]:  # models off scale at one micro-batch
        place(ax, label, stacked, avoid_points=False)
    capacity_label(ax, cap, f"{device} capacity: {cap:g} GiB")  # last: it steers clear of every bar and label
    return fig


def _memory_bars(ax, df, cap: float, micro_batch: int) -> float:
    """One model: a stacked bar of components (GiB) per micro-batch, those under 2 % of the tallest bar
    merged into 'other'; each total labelled, past `cap` hatched red, the plan's outlined. Returns the top."""
    parts = df[df["component"] != "peak"]
    pivot = parts.pivot_table(index="micro_batch", columns="component", values="bytes", sort=False).fillna(0)
    pivot = pivot / GIB
    small = [c for c in pivot.columns if pivot[c].max() < 0.02 * pivot.sum(axis=1).max()]
    if len(small) > 1:
        pivot["other (" + ", ".join(small) + ")"] = pivot[small].sum(axis=1)
        pivot = pivot.drop(columns=small)
    x = list(range(len(pivot)))
    bottom = None
    for j, component in enumerate(pivot.columns):
        ax.bar(x, pivot[component], bottom=bottom, color=colour(j), label=component, width=0.7)
        bottom = pivot[component] if bottom is None else bottom + pivot[component]
    totals = pivot.sum(axis=1)
    for xi, (batch, total) in zip(x, totals.items(), strict=False):
        over = total > cap
        if over:
            ax.bar([xi], [total], width=0.7, fill=False, hatch="//", edgecolor=WARN, linewidth=0)
        digits = 2 if abs(total - cap) < 0.01 * cap else 1  # 79.99 fits, 80.01 does not: both shown apart
        ax.annotate(f"{total:,.{digits}f}" + ("\ndoes not fit" if over else ""), (xi, total), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=MIN_POINTS,
                    color=WARN if over else "black", fontweight="bold" if over else "normal", gid="bar total")
        if batch == micro_batch:
            ax.bar([xi], [total], width=0.78, fill=False, edgecolor="black", linewidth=2)
    labels = [f"{b}\n(plan)" if b == micro_batch else str(b) for b in pivot.index]
    ax.set_xticks(x, labels)
    return max(totals.max(), cap)


def _memory_peak_lines(ax, df, models: list[str], cap: float, micro_batch: int) -> float:
    """Several models: each one's peak (GiB) per micro-batch, points past `cap` crossed; points past twice
    the capacity drawn at the edge and labelled with their value. Returns the top."""
    peaks = df[df["component"] == "peak"]
    top = min(max(cap, peaks["bytes"].max() / GIB), 2 * cap)  # far-off points drawn at the edge, labelled
    for i, model in enumerate(models):
        sub = peaks[peaks["model"] == model]
        values = sub["bytes"] / GIB
        shown = values.clip(upper=top)
        ax.plot(sub["micro_batch"], shown, marker=STYLES[i % len(STYLES)][1], color=colour(i), label=model)
        over = values > cap
        ax.scatter(sub["micro_batch"][over], shown[over], marker="x", s=40, color=WARN, zorder=4)
        for b, v in zip(sub["micro_batch"][values > top], values[values > top], strict=True):
            ax.annotate(f"{model}: {v:,.0f} GiB (off scale)", (b, top), xytext=(6, -4), textcoords="offset points",
                        fontsize=MIN_POINTS, color=colour(i), va="top", gid="off scale")
    batches = sorted(set(peaks["micro_batch"]))
    if len(batches) <= 12:
        ax.set_xticks(batches)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0.5, peaks["micro_batch"].max() + 0.5)
    mark_x(ax, micro_batch, f"plan: micro-batch {micro_batch}")
    return top


def kv_vs_context(df, capacity: float, device: str, context: int | None = None, scenario: str = ""):
    """KV cache (batch 1) against context length, one line per model (coinciding ones dashed and
    labelled 'same as'), with the device capacity and the plan's context."""
    fig, ax = figure("Inference KV cache against context length (batch 1)", scenario)
    order = list(dict.fromkeys(df["model"]))
    styles = distinguish({m: list(df[df["model"] == m]["kv_cache_bytes"]) for m in order})
    for i, model in enumerate(order):
        sub = df[df["model"] == model]
        k, same = styles[model]
        trained = sub[~sub["past_max_positions"]] if "past_max_positions" in sub else sub
        ax.plot(trained["context"], trained["kv_cache_bytes"], marker=STYLES[k][1], markersize=4,
                linestyle=STYLES[k][0], color=colour(i), label=model + same)
        _past(ax, sub, "context", "kv_cache_bytes", colour(i))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    top = max(df["kv_cache_bytes"].max(), capacity) * 2
    ax.set_ylim(df["kv_cache_bytes"].min() / 2, top)
    _past_legend(ax, df)
    if context:
        mark_x(ax, context, f"plan context: {context:,}", y=0.85)
    ax.xaxis.set_major_formatter(TOKENS)
    gib_axis(ax.yaxis)
    ax.set_xlabel("context (tokens, log scale)")
    ax.set_ylabel("KV cache per sequence (log scale)")
    ax.grid(which="both", alpha=0.25)
    legend_outside(ax, "below", ncol=2)
    capacity_label(ax, capacity, f"{device} capacity: {capacity / GIB:g} GiB")  # once the legend has its room
    return fig


def compute_optimal(frontiers, points, scenario: str = ""):
    """Parameters against training tokens (log-log): the references (named with their source) and each
    model at its parameters; MoE models at both their total and their active parameters, joined.
    frontiers: label -> (N list, D list); points: model -> {'params', 'active', 'tokens'}."""
    fig, ax = figure("Where the models sit against compute-optimal training", scenario,
                     height=4.6 + 0.2 * (len(points) + sum(p["active"] != p["params"] for p in points.values())))
    named = len(points) <= 3  # more: the legend names them, labels on the points would collide
    labels = []
    for j, (method, (n, d)) in enumerate(frontiers.items()):
        ax.plot(n, d, color="grey", linestyle=["-", "--", ":"][j % 3], label=method)
    for i, (model, p) in enumerate(points.items()):
        tokens = p["tokens"]
        if p["active"] != p["params"]:
            ax.plot([p["active"], p["params"]], [tokens, tokens], color=colour(i), linewidth=1, zorder=2)
            ax.scatter([p["params"]], [tokens], facecolor="white", edgecolor=colour(i), s=50, zorder=3,
                       label=f"{model}, total {fmt_count(p['params'])}: "
                             f"{tokens / p['params']:,.0f} tokens/param (hollow)")
            if named:
                labels.append(ax.annotate(f"{model} (total)", (p["params"], tokens), xytext=(6, -12),
                                          textcoords="offset points", fontsize=MIN_POINTS, color=colour(i),
                                          bbox=LABEL_BOX))
        ax.scatter([p["active"]], [tokens], color=colour(i), s=50, zorder=3,
                   label=f"{model}" + (", active" if p["active"] != p["params"] else "")
                   + f" {fmt_count(p['active'])}: {tokens / p['active']:,.0f} tokens/param"
                   + (" (filled)" if p["active"] != p["params"] else ""))
        if named:
            labels.append(ax.annotate(model + (" (active)" if p["active"] != p["params"] else ""),
                                      (p["active"], tokens), xytext=(6, 6), textcoords="offset points",
                                      fontsize=MIN_POINTS, color=colour(i), bbox=LABEL_BOX))
    _log_log(ax, "parameters (log scale)", "training tokens (log scale)")
    legend_outside(ax, "below", ncol=1)
    for label in labels:  # one at a time: each steers clear of the ones placed before it
        place(ax, label, AROUND)
    return fig


def _log_log(ax, xlabel: str, ylabel: str) -> None:
    """Both axes logarithmic with SI tick labels, and a grid on every decade's ticks."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(SI)
    ax.yaxis.set_major_formatter(SI)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(which="both", alpha=0.25)


def parity(rows, title_note: str = "", scenario: str = ""):
    """Analytic against measured FLOPs (log-log, y = x) and the relative error of every comparison
    that has one. rows: dicts with model, name, unit, analytic, measured, rel_error."""
    errors = [r for r in rows if r["rel_error"] is not None]
    fig, (left, right) = figure("Formulas against measurements" + (f": {title_note}" if title_note else ""),
                                scenario, ncols=2, width=10.8, height=max(4.6, 1.6 + 0.22 * len(errors)))
    models = list(dict.fromkeys(r["model"] for r in rows))
    flops = [r for r in rows if r["unit"] == "FLOP" and r["analytic"] and r["measured"]]
    for i, model in enumerate(models):
        mine = [r for r in flops if r["model"] == model]
        left.scatter([r["analytic"] for r in mine], [r["measured"] for r in mine], color=colour(i), s=22, label=model)
    if flops:
        low = min(min(r["analytic"], r["measured"]) for r in flops)
        high = max(max(r["analytic"], r["measured"]) for r in flops)
        left.plot([low, high], [low, high], color="black", linewidth=0.8, label="measured = analytic")
    _log_log(left, "analytic (FLOP)", "measured by FlopCounterMode (FLOP)")
    legend_outside(left, "below", ncol=2)
    labels = [f"{r['model']}: {r['name']}" if len(models) > 1 else r["name"] for r in errors]
    bars = right.barh(range(len(errors)), [r["rel_error"] * 100 for r in errors],
                      color=[colour(models.index(r["model"])) for r in errors])
    from ..units import fmt_pct

    bar_values(right, bars, [fmt_pct(r["rel_error"]) for r in errors])
    right.set_yticks(range(len(errors)), labels)
    right.invert_yaxis()
    right.axvline(0, color="black", linewidth=0.8)
    lo, hi = right.get_xlim()
    span = max(abs(lo), abs(hi), 1e-3)
    right.set_xlim(min(lo, 0) - 0.05 * span, hi + 0.6 * span)
    right.set_xlabel("relative error, measured vs analytic (%)")
    right.grid(axis="x", alpha=0.3)
    return fig
