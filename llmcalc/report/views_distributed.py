"""What a sharded (`profile --world-size/--nproc`) run shows: every rank's figures beside the formulas."""

from __future__ import annotations

from dataclasses import replace

from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_bytes, fmt_flops

FIGURES = (("param_bytes", "params"), ("grad_bytes", "grads"), ("optimizer_bytes", "AdamW states"),
           ("peak_memory_bytes", "peak"))


def _gib(value) -> str:
    return "" if value is None else f"{value / GIB:,.3f}"


def _err(p: dict) -> str:
    e = p.get("rel_error")
    return "" if e is None else ("0 %" if e == 0 else f"{e * 100:+.3g} %")


def _merge_identical(rows: list[dict]) -> list[dict]:
    """Consecutive ranks with the same figures as one row "a-b" (64 identical rows say nothing more)."""
    out: list[dict] = []
    for row in rows:
        same = out and ({k: v for k, v in out[-1].items() if k != "rank"}
                        == {k: v for k, v in row.items() if k != "rank"})
        if same:
            first = str(out[-1]["rank"]).split("-")[0]
            out[-1]["rank"] = f"{first}-{row['rank']}"
        else:
            out.append(dict(row))
    return out


def distributed_document(data: dict) -> Document:
    ranks = data["ranks"]
    rows, cols = [], [Column("rank", "rank")]
    for key, label in FIGURES:
        cols += [Column(f"{key}_a", f"{label} analytic (GiB)", _gib),
                 Column(f"{key}_m", f"{label} measured (GiB)", _gib),
                 Column(f"{key}_e", f"{label} error (%)")]
    kinds = sorted({k for r in ranks for k in r["collectives"]})
    for kind in kinds:
        cols += [Column(f"{kind}_a", f"{kind} sent analytic (GiB)", _gib),
                 Column(f"{kind}_m", f"{kind} sent measured (GiB)", _gib), Column(f"{kind}_e", f"{kind} error (%)")]
    cols += [Column("flops_a", "FLOPs analytic (GFLOP)", lambda v: f"{v / 1e9:,.4g}"),
             Column("flops_m", "FLOPs measured (GFLOP)", lambda v: f"{v / 1e9:,.4g}")]
    real = "step_seconds" in ranks[0]
    if real:
        cols += [Column("step_seconds", "step (s, median)", lambda v: f"{v:.4g}"),
                 Column("tokens_per_second", "tokens/s", lambda v: f"{v:,.0f}"),
                 Column("mfu", "MFU (%)", lambda v: "n/a" if v is None else f"{v * 100:.2f}")]
    for r in ranks:
        row = {"rank": r["rank"]}
        for key, _ in FIGURES:
            row.update({f"{key}_a": r[key]["analytic"], f"{key}_m": r[key]["measured"], f"{key}_e": _err(r[key])})
        for kind in kinds:
            p = r["collectives"].get(kind, {"analytic": 0.0, "measured": 0.0, "rel_error": None})
            row.update({f"{kind}_a": p["analytic"], f"{kind}_m": p["measured"], f"{kind}_e": _err(p)})
        row.update({"flops_a": r["flops"]["analytic"], "flops_m": r["flops"]["measured"]})
        if real:
            row.update({k: r.get(k) for k in ("step_seconds", "tokens_per_second", "mfu")})
        rows.append(row)
    tables = [Table("per rank: analytic vs measured (ranks with identical figures share a row)", cols,
                    _merge_identical(rows), list(data["notes"]))]
    if data.get("memory_by_category"):
        tables.append(Table("rank 0 memory at the peak, by FSDPMemTracker category",
                            [Column("name", "category", align="left"), Column("bytes", "memory (GiB)", _gib)],
                            [{"name": k, "bytes": v} for k, v in data["memory_by_category"].items()]))
    if data.get("collective_calls"):
        tables.append(Table("rank 0 collectives recorded in one step",
                            [Column("kind", "kind", align="left"), Column("group", "group (ranks)"),
                             Column("calls", "calls"), Column("buffer_bytes", "buffers (GiB, unsharded)", _gib),
                             Column("bytes_per_rank", "sent by the rank (GiB)", _gib)], data["collective_calls"]))
    mesh = data["mesh"]
    title = (f"{data['model']}: {data['mode']} sharded profile, world {data['world_size']} = dp {mesh['dp']} x "
             f"tp {mesh['tp']} (FSDP2 over dp, DTensor TP), batch {data['batch_size']} per dp rank x seq "
             f"{data['seq_len']}, {data['precision']}")
    return Document(title, data, tables)


def rank_figure(data: dict, scenario: str = ""):
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


def sharded_section(report, results: dict[str, dict], line: str) -> None:
    """`report --sharded-profile N`: each model's virtual sharded profile (FSDP2 over dp x DTensor TP on a fake
    process group), every rank's figures beside the formulas, rank 0 as a figure."""
    from .document import safe_name

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
        doc = distributed_document(data)
        report.paragraph(doc.title + ".")
        wide = doc.tables[0]  # one column per figure: the CSV keeps it, people read it long-form
        doc.tables[0] = replace(wide, for_people=False)
        doc.tables.insert(1, long_table(data, wide.title, wide.notes))
        report.document(doc, f"sharded-{safe_name(name)}")


def long_table(data: dict, title: str, notes: list[str]) -> Table:
    """The per-rank comparison one row per (ranks, figure): analytic, measured, error; ranks with identical
    figures share a row, as in the wide table."""
    rows = []
    for r in data["ranks"]:
        figures = [(label, r[key]) for key, label in FIGURES]
        figures += [(f"{kind} sent", p) for kind, p in sorted(r["collectives"].items())]
        for label, p in figures:
            rows.append({"rank": r["rank"], "figure": label, "analytic": _bytes(p["analytic"]),
                         "measured": _bytes(p["measured"]), "error": _err(p)})
        rows.append({"rank": r["rank"], "figure": "FLOPs of one step", "analytic": fmt_flops(r["flops"]["analytic"]),
                     "measured": fmt_flops(r["flops"]["measured"]), "error": ""})
    per_rank = len(rows) // len(data["ranks"])
    blocks = _merge_identical([{"rank": rows[i * per_rank]["rank"], "rows": tuple(
        tuple((k, v) for k, v in row.items() if k != "rank") for row in rows[i * per_rank:(i + 1) * per_rank])}
        for i in range(len(data["ranks"]))])
    shown = [{"rank": b["rank"], **dict(row)} for b in blocks for row in b["rows"]]
    return Table(title, [Column("rank", "rank(s)"), Column("figure", "figure", align="left"),
                         Column("analytic", "analytic"), Column("measured", "measured"), Column("error", "error (%)")],
                 shown, [*notes, "memory and bytes sent in GiB (2^30 bytes), MiB below 1 GiB; FLOPs with SI prefixes"])


def _bytes(value) -> str:
    return "" if value is None else fmt_bytes(value)
