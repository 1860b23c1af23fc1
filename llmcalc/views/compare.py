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
    "tokens": lambda v: f"{v:,} tokens", "int": lambda v: f"{v:,}", "rate": lambda v: f"{v:,.0f} tokens/s",
}


def _label(key: str) -> str:
    """A record key's label for people: a count's names the prefixes it prints with (B = 10^9 or SI)."""
    label, kind = COLUMNS[key]
    return count_label(label) if kind == "count" else label


def document(records: list[dict], scenario: Scenario) -> Document:
    return compare_document(records, scenario)


def compare_document(records: list[dict], scenario: Scenario, notes: list[str] | None = None) -> Document:
    """Models side by side; `notes` replace the scenario's (the report states its own plan)."""
    keys = [k for k in COLUMNS if any(r.get(k) is not None for r in records)]
    per_model = Table("models", [Column(k, _label(k)) for k in keys], records, for_people=False)
    training = "training_flops" in keys
    serving = any("serve_gpus" in r for r in records)
    gpu = scenario.gpu.key if scenario.gpu else "no GPU"
    default_notes = [
        f"scenario: {scenario.describe()}" if training else f"sequence length {scenario.seq_len:,} tokens; GPU {gpu}"
        + (" (the default; --gpu names another)" if gpu == "h100-sxm" else ""),
        "context length: the model's max_position_embeddings; KV cache per token in its "
        f"{scenario.kv_dtype} cache, all layers",
    ]
    if serving:
        default_notes.append(f"serving: vLLM's defaults on the fewest {gpu} GPUs (tensor parallel) that hold one "
                             f"{scenario.seq_len:,}-token request, weights as shipped; concurrency = such requests "
                             "the KV cache holds at once; decode speeds are the roofline's (an upper bound), "
                             "every request at the full context (`llmcalc serve` for a workload)")
    if training:
        default_notes.append("training FLOPs are the exact per-op count at this sequence length; GPU-hours at the MFU "
                             f"above and goodput {scenario.goodput:g} (wall = compute / goodput; --goodput 1 for "
                             "compute alone); memory is the peak per GPU for a micro-batch (see `llmcalc memory`); "
                             "attention S² share is of forward matmul FLOPs")
    else:
        default_notes.append("training time, cost and memory: give --tokens (e.g. --tokens 2T) or another training "
                             "option (--n-gpus, --mfu, --tp ...) to price a run")
    side_by_side = Table(
        "comparison",
        [Column("quantity", "quantity", align="left")] + [Column(f"m{i}", r["model"]) for i, r in enumerate(records)],
        [{"quantity": _label(k), **{f"m{i}": ("n/a" if r.get(k) is None else FORMATTERS[COLUMNS[k][1]](r[k]))
                                        for i, r in enumerate(records)}}
         for k in keys if k != "model"],
        (default_notes if notes is None else notes)
        + ["--sort KEY orders the models by any of: " + ", ".join(k for k in keys if k != "model")]
        + [f"{r['model']}: no llmcalc formula; its figures are what transformers counted (`params`, `flops`) and "
           "measured (`memory`, `infer`), n/a where `memory` refuses the scenario" for r in records
           if r.get("method") == "transformers"],
    )
    return Document(f"compare {plural(len(records), 'model')} at seq {scenario.seq_len:,}"
                    + ("" if training else f" on {gpu}"),
                    {"scenario": scenario.to_dict(), "models": records},
                    [per_model, side_by_side])
