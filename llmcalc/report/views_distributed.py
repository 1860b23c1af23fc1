"""What a sharded (`profile --world-size/--nproc`) run shows: every rank's figures beside the formulas."""

from __future__ import annotations

from ..units import GIB
from .tables import Column, Document, Table

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
