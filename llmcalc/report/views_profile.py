"""What `profile` and `calibrate` show: every measured figure beside the formula that predicted it."""

from __future__ import annotations

from typing import Any

from ..render.tables import Column, Document, Table
from ..results import Comparison, ProfileResult
from ..units import GIB, fmt_bytes, fmt_flops_rate, fmt_int, fmt_pct, fmt_seconds, si


def _value(unit: str, value) -> str:
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


def _gib(value) -> str:
    return "" if value is None else f"{value / GIB:,.2f}"


def calibrate_document(device: str, dtype: str, size: int, flops_per_s: float, catalog: dict | None) -> Document:
    data = {"device": device, "dtype": dtype, "matmul_size": size, "achieved_flops_per_s": flops_per_s}
    rows = [{"quantity": f"achieved {dtype} matmul ({size} x {size} x {size})", "value": fmt_flops_rate(flops_per_s)}]
    if catalog:
        data.update(catalog)
        rows.append({"quantity": f"datasheet dense {dtype} peak ({catalog['preset']})",
                     "value": fmt_flops_rate(catalog["peak_flops_per_s"])})
        rows.append({"quantity": "achieved / datasheet",
                     "value": f"{flops_per_s / catalog['peak_flops_per_s'] * 100:.1f} %"})
    table = Table("calibration", [Column("quantity", "quantity", align="left"),
                                  Column("value", "value (with unit)", align="left")], rows,
                  ["best of repeated timed matmuls; `profile` uses this as the peak for CPUs and unknown devices"])
    return Document(f"calibrate: {device}", data, [table])
