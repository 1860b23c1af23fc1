"""One figure for the report's side-by-side memory sections (fine-tuning methods, precision recipes):
a horizontal stacked bar per set-up, of the components alive at its peak, against the GPU's capacity."""

from __future__ import annotations

from ..units import GIB

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


def memory_bars(setups: dict[str, dict[str, float]], capacity: float, device: str, title: str, scenario: str = ""):
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
