"""What `profile` shows: every measured figure beside the formula that predicted it; for a sharded run
(--world-size/--nproc), every rank's figures beside the ZeRO-3/TP formulas (the sharded section)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_bytes, fmt_flops, fmt_flops_rate, fmt_int, fmt_pct, fmt_seconds, si

if TYPE_CHECKING:
    from ..results import Comparison, ProfileResult


def _value(unit: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if unit == "bytes":
        return fmt_bytes(value, "GiB")
    if unit == "params":
        return fmt_int(value)
    return f"{si(value).strip()}{unit}"


def _error(c: Comparison) -> str:
    err = c.rel_error
    if err is None:
        return ""
    text = fmt_pct(err)
    return text + ("  <-- past ±" + f"{c.tolerance * 100:g} %" if c.flagged else "")


PROFILE_CONVENTIONS = [
    "FLOPs from torch's FlopCounterMode (matmuls; a multiply-add is 2 FLOPs); analytic figures in the same "
    "full-S² convention",
    "measured forward+backward are hardware FLOPs: flash-style sdpa recomputes QKᵀ in its backward (2.5x its "
    "forward) and full recomputation re-runs each block; the MFU numerator is the model FLOPs (3 x forward)",
]


def document(result: ProfileResult | dict) -> Document:
    """`profile`'s answer: one run's figures against the formulas, or every rank's of a sharded run (its JSON)."""
    return distributed_document(result) if isinstance(result, dict) else profile_document(result)


def profile_document(r: ProfileResult) -> Document:
    rows: list[dict[str, Any]] = [{"name": c.name, "unit": c.unit, "analytic": c.analytic, "measured": c.measured,
             "rel_error": c.rel_error, "flagged": c.flagged, "comparison": c, "note": c.note}
            for c in r.comparisons]
    compare = Table(
        "analytic vs measured",
        [Column("name", "quantity", align="left"),
         Column("analytic", "analytic", show=False),
         Column("a_text", "analytic (unit)", csv=False), Column("m_text", "measured (unit)", csv=False),
         Column("measured", "measured", csv=True, show=False),
         Column("rel_error", "error", csv=True, show=False), Column("e_text", "error (%)", csv=False, align="left"),
         Column("unit", "unit", show=False)],
        [{**row, "a_text": _value(row["unit"], row["analytic"]), "m_text": _value(row["unit"], row["measured"]),
          "e_text": _error(row["comparison"])} for row in rows],
        PROFILE_CONVENTIONS + [f"{c.name}: {c.note}" for c in r.comparisons if c.note],
    )
    tables = [compare]
    if r.mode == "real":
        step, achieved = r.step_seconds, r.achieved_flops_per_s
        assert step is not None and achieved is not None, "a real run times its steps"
        speed = [
            ("step time (median)", fmt_seconds(step)
             + (f" (min {fmt_seconds(min(r.step_times))}, max {fmt_seconds(max(r.step_times))}, "
                f"{len(r.step_times)} steps)" if r.step_times else "")),
            ("compile step", fmt_seconds(r.compile_seconds) if r.compile_seconds else "not compiled"),
            ("tokens/s", f"{r.tokens_per_second:,.0f}"),
            ("achieved FLOP/s (counted, hardware)", fmt_flops_rate(achieved)),
            ("peak FLOP/s", fmt_flops_rate(r.peak_flops_per_s) + f" ({r.peak_source})" if r.peak_flops_per_s else
             "unknown"),
            ("MFU (model FLOPs / time / peak)", f"{r.mfu * 100:.1f} %" if r.mfu is not None else "n/a"),
            ("HFU (counted FLOPs / time / peak)", f"{r.hfu * 100:.1f} %" if r.hfu is not None else "n/a"),
        ]
        tables.append(Table("speed", [Column("quantity", "quantity", align="left"),
                                      Column("value", "value (with unit)", align="left")],
                            [{"quantity": q, "value": v} for q, v in speed]))
    if r.memory_measured or r.memory_analytic:
        names = list(dict.fromkeys(list(r.memory_measured) + list(r.memory_analytic)))
        tables.append(Table(
            "memory at the peak, by category" if r.mode == "virtual" else "memory",
            [Column("name", "category", align="left"), Column("measured", "measured (GiB)", _gib),
             Column("analytic", "analytic (GiB)", _gib)],
            [{"name": n, "measured": r.memory_measured.get(n), "analytic": r.memory_analytic.get(n)} for n in names],
            ["measured categories are MemTracker's (param, grad, opt, act, temp, ...); analytic ones are the "
             "formula's at its own peak phase"] if r.mode == "virtual" else [],
        ))
    title = (f"{r.model}: {r.mode} profile on {r.device_name} ({r.device}), micro-batch {r.batch_size:,} "
             f"x seq {r.seq_len:,}, "
             f"{r.recipe}, recompute {r.recompute}, attention {r.attention} (sdpa backend: {r.sdpa_backend})")
    return Document(title, r.to_json(), tables, list(r.notes))


def _gib(value: float | None) -> str:
    return "" if value is None else f"{value / GIB:,.2f}"


# --- sharded runs (--world-size, --nproc): every rank against the formulas -------------------------------

FIGURES = (("param_bytes", "params"), ("grad_bytes", "grads"), ("optimizer_bytes", "AdamW states"),
           ("peak_memory_bytes", "peak"))


def _gib3(value: float | None) -> str:
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
        cols += [Column(f"{key}_a", f"{label} analytic (GiB)", _gib3),
                 Column(f"{key}_m", f"{label} measured (GiB)", _gib3),
                 Column(f"{key}_e", f"{label} error (%)")]
    kinds = sorted({k for r in ranks for k in r["collectives"]})
    for kind in kinds:
        cols += [Column(f"{kind}_a", f"{kind} sent analytic (GiB)", _gib3),
                 Column(f"{kind}_m", f"{kind} sent measured (GiB)", _gib3), Column(f"{kind}_e", f"{kind} error (%)")]
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
    wide = Table("per rank: analytic vs measured (ranks with identical figures share a row)", cols,
                 _merge_identical(rows), list(data["notes"]), for_people=False)  # the CSV's: one column per figure
    tables = [wide, long_table(data, wide.title, wide.notes)]  # people read it long-form, within 120 columns
    if data.get("memory_by_category"):
        tables.append(Table("rank 0 memory at the peak, by FSDPMemTracker category",
                            [Column("name", "category", align="left"), Column("bytes", "memory (GiB)", _gib3)],
                            [{"name": k, "bytes": v} for k, v in data["memory_by_category"].items()]))
    if data.get("collective_calls"):
        tables.append(Table("rank 0 collectives recorded in one step",
                            [Column("kind", "kind", align="left"), Column("group", "group (ranks)"),
                             Column("calls", "calls"), Column("buffer_bytes", "buffers (GiB, unsharded)", _gib3),
                             Column("bytes_per_rank", "sent by the rank (GiB)", _gib3)], data["collective_calls"]))
    mesh = data["mesh"]
    title = (f"{data['model']}: {data['mode']} sharded profile, world {data['world_size']} = dp {mesh['dp']} x "
             f"tp {mesh['tp']} (FSDP2 over dp, DTensor TP), batch {data['batch_size']} per dp rank x seq "
             f"{data['seq_len']}, {data['precision']}")
    return Document(title, data, tables)


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
        if "step_seconds" in r:  # a real run: its speed, measured only
            mfu = r.get("mfu")
            rows += [{"rank": r["rank"], "figure": label, "analytic": "", "measured": text, "error": ""}
                     for label, text in (("step (s, median)", f"{r['step_seconds']:.4g}"),
                                         ("tokens/s", f"{r['tokens_per_second']:,.0f}"),
                                         ("MFU (%)", "n/a" if mfu is None else f"{mfu * 100:.2f}"))]
    per_rank = len(rows) // len(data["ranks"])
    blocks = _merge_identical([{"rank": rows[i * per_rank]["rank"], "rows": tuple(
        tuple((k, v) for k, v in row.items() if k != "rank") for row in rows[i * per_rank:(i + 1) * per_rank])}
        for i in range(len(data["ranks"]))])
    shown = [{"rank": b["rank"], **dict(row)} for b in blocks for row in b["rows"]]
    return Table(title, [Column("rank", "rank(s)"), Column("figure", "figure", align="left"),
                         Column("analytic", "analytic"), Column("measured", "measured"), Column("error", "error (%)")],
                 shown, [*notes, "memory and bytes sent in GiB (2^30 bytes), MiB below 1 GiB; FLOPs with SI prefixes"])


def _bytes(value: float | None) -> str:
    return "" if value is None else fmt_bytes(value)
