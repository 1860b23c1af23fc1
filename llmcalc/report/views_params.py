"""What each command shows: analytic results -> Document (JSON data + tables with units and notes)."""

from __future__ import annotations

from typing import Any

from ..analytic.params import Approximation, ParamCount, approximations, reconcile
from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_count, fmt_int, fmt_pct

PARAM_CONVENTIONS = (
    "counts are unique parameters (a tied LM head is counted once, in embedding/tokens); "
    "buffers (rotary tables, masks, frozen sinusoidal tables) are not parameters",
    "SI prefixes: k = 10^3, M = 10^6, G = 10^9 (billion), T = 10^12",
    "non-embedding = total - token/position/type tables - untied LM head (Kaplan et al. 2020)",
)


def _share(value: float) -> str:
    return f"{value * 100:.2f} %"


def params_document(count: ParamCount, source: str) -> Document:
    spec = count.spec
    approx = approximations(count)
    recon = reconcile(count)
    data = {
        "model": spec.name,
        "model_type": spec.model_type,
        "method": "analytic",
        "source": source,
        "spec": spec.to_dict(),
        "total": count.total,
        "non_embedding": count.non_embedding,
        "embedding": count.embedding,
        "active_per_token": count.active_per_token,
        "components": dict(count.components),
        "groups": count.groups(),
        "approximations": [
            {"name": a.name, "formula": a.formula, "value": a.value, "compared_with": a.compared_with,
             "exact": a.exact, "rel_error": a.rel_error, "source": a.source}
            for a in approx
        ],
        "reconciliation": [{"term": label, "params": value} for label, value in recon],
    }
    return Document(
        title=f"{spec.name}: {spec.describe()}",
        data=data,
        tables=[_component_table(count), _approximation_table(approx), _reconciliation_table(recon, count.total)],
        preamble=([f"source: {source}"] if source else []) + [f"note: {n}" for n in spec.notes],
    )


def _component_table(count: ParamCount) -> Table:
    """Exact count per component, then the totals (all, non-embedding, and active per token for MoE)."""
    spec, total = count.spec, count.total
    rows: list[dict[str, Any]] = [{"kind": "component", "name": k, "params": v, "fraction_of_total": v / total}
            for k, v in count.components.items()]
    rows.append({"kind": "total", "name": "total", "params": total, "fraction_of_total": 1.0})
    rows.append({"kind": "total", "name": "non_embedding", "params": count.non_embedding,
                 "fraction_of_total": count.non_embedding / total})
    if spec.is_moe:
        rows.append({"kind": "total", "name": "active_per_token", "params": count.active_per_token,
                     "fraction_of_total": count.active_per_token / total})
    return Table(
        "parameters by component",
        [
            Column("kind", "kind", align="left", show=False),
            Column("name", "component", align="left"),
            Column("params", "params (exact)", fmt_int),
            Column("params_si", "params (SI)", csv=False),
            Column("fraction_of_total", "share of total (%)", _share),
        ],
        [{**r, "params_si": fmt_count(r["params"])} for r in rows],
        list(PARAM_CONVENTIONS)
        + ([f"active_per_token: {spec.n_experts_per_token} of {spec.n_experts} routed experts"
            + (f" plus {spec.n_shared_experts} shared" if spec.n_shared_experts else "")
            + " per MoE layer; embeddings and head included"] if spec.is_moe else []),
    )


def _approximation_table(approx: list[Approximation]) -> Table:
    return Table(
        "classic approximations",
        [
            Column("formula", "formula", align="left"),
            Column("value", "estimate (params)", fmt_count),
            Column("compared_with", "compared with", align="left"),
            Column("exact", "exact (params)", fmt_count),
            Column("rel_error", "error (%)", fmt_pct),
        ],
        [{"formula": a.formula, "value": a.value, "compared_with": a.compared_with.replace("_", "-"),
          "exact": a.exact, "rel_error": a.rel_error} for a in approx],
        [f"{a.name}: {a.source}" for a in approx[:1]]
        + ["L = all blocks (encoder + decoder), D = d_model, F = d_ff, V = vocab_size"],
    )


def _reconciliation_table(recon: list[tuple[str, int]], total: int) -> Table:
    """12·L·D² plus each term it leaves out, summing to the exact total."""
    rows = [{"term": label, "params": f"{value:,}" if i == 0 else f"{value:+,}", "si": fmt_count(value)}
            for i, (label, value) in enumerate(recon)]
    rows.append({"term": "= exact total", "params": f"{total:,}", "si": fmt_count(total)})
    return Table(
        "why 12·L·D² differs from the exact total",
        [Column("term", "term", align="left"), Column("params", "params (exact)"), Column("si", "params (SI)")],
        rows,
    )


def presets_document() -> Document:
    """Every model and hardware preset, one row each."""
    from ..analytic.params import count_params
    from ..presets import hardware_names, load_hardware, load_model, model_config, model_names

    rows = []
    for name in model_names():
        spec = load_model(name)
        count = count_params(spec)
        rows.append({
            "kind": "model", "name": name, "model_type": spec.model_type, "architecture": spec.architecture,
            "params": count.total, "active_params": count.active_per_token,
            "summary": spec.summary(), "source": model_config(name).get("_source", ""),
        })
    for name in hardware_names():
        acc = load_hardware(name)
        dtype = "bf16" if "bf16" in acc.peak_flops else "fp16"
        rows.append({
            "kind": "hardware", "name": name,
            "summary": f"{acc.name}: {acc.peak(dtype) / 1e12:,.4g} TFLOP/s dense {dtype}, "
                       f"{acc.memory_bytes / GIB:g} GiB, {acc.memory_bandwidth / 1e12:.3g} TB/s",
            "peak_flops_per_s": acc.peak_flops, "memory_bytes": acc.memory_bytes, "source": acc.source,
        })
    table = Table(
        "presets",
        [
            Column("kind", "kind", align="left"),
            Column("name", "name", align="left"),
            Column("params", "params (SI)", fmt_count),
            Column("summary", "summary", align="left"),
        ],
        rows,
        ["pass a name to any command; a path to a Hugging Face config.json works as a model too"],
    )
    return Document("llmcalc presets", {"presets": rows}, [table])
