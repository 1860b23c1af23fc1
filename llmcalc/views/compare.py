"""What `compare` shows: one record per model (CSV/JSON), models side by side for people."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..analytic.summary import COLUMNS
from ..render.tables import Column, Document, Table
from ..units import GIB, count_label, fmt_bytes, fmt_count, fmt_flops, fmt_usd, plural

if TYPE_CHECKING:
    from ..analytic.summary import Scenario

FORMATTERS: dict[str, Callable[[Any], str]] = {
    "text": str, "count": fmt_count, "flops": fmt_flops, "pct": lambda v: f"{v * 100:.1f} %",
    "bytes": fmt_bytes, "hours": lambda v: f"{v:,.0f} h", "days": lambda v: f"{v:,.1f} days", "usd": fmt_usd,
    "gib": lambda v: f"{v / GIB:,.1f} GiB", "bool": lambda v: "yes" if v else "no",
}


def _label(key: str) -> str:
    """A record key's label for people: a count's names the prefixes it prints with (B = 10^9 or SI)."""
    label, kind = COLUMNS[key]
    return count_label(label) if kind == "count" else label


def document(records: list[dict], scenario: Scenario) -> Document:
    return compare_document(records, scenario)


def compare_document(records: list[dict], scenario: Scenario) -> Document:
    keys = [k for k in COLUMNS if any(r.get(k) is not None for r in records)]
    per_model = Table("models", [Column(k, _label(k)) for k in keys], records, for_people=False)
    side_by_side = Table(
        "comparison",
        [Column("quantity", "quantity", align="left")] + [Column(f"m{i}", r["model"]) for i, r in enumerate(records)],
        [{"quantity": _label(k), **{f"m{i}": ("n/a" if r.get(k) is None else FORMATTERS[COLUMNS[k][1]](r[k]))
                                        for i, r in enumerate(records)}}
         for k in keys if k != "model"],
        [f"scenario: {scenario.describe()}",
         "training FLOPs are the exact per-op count at this sequence length; GPU-hours at the MFU above; memory is "
         "the peak per GPU for a micro-batch (see `llmcalc memory`); attention S² share is of forward matmul FLOPs",
         "--sort KEY orders the models by any of: " + ", ".join(k for k in keys if k != "model")]
        + [f"{r['model']}: no llmcalc formula; its figures are what transformers counted (`params`, `flops`) and "
           "measured (`memory`, `infer`), n/a where `memory` refuses the scenario" for r in records
           if r.get("method") == "transformers"],
    )
    return Document(f"compare {plural(len(records), 'model')} at seq {scenario.seq_len:,}",
                    {"scenario": scenario.to_dict(), "models": records},
                    [per_model, side_by_side])
