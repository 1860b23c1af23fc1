"""What `params` shows: the exact count by component beside the classic approximations; for a model only
transformers can build, its counted components (the fallback section); with --finetune, the adapters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analytic.params import approximations, reconcile
from ..fallback import METHOD_TRANSFORMERS, FallbackModel
from ..render.tables import Column, Document, Table
from ..units import count_label, count_prefixes, fmt_count, fmt_int, fmt_pct

if TYPE_CHECKING:
    from ..analytic.finetune import Finetune
    from ..analytic.params import Approximation, ParamCount

PARAM_CONVENTIONS = (
    "counts are the tensors the checkpoint stores: unique parameters (a tied LM head is counted once, in "
    "embedding/tokens), frozen ones and persistent buffers (a router's score-correction bias) included; rotary "
    "tables, masks and tables the class rebuilds on load (sinusoidal positions) are not",
    "{prefixes}",
    "non-embedding = total - token/position/type tables - untied LM head (Kaplan et al. 2020)",
)


def param_conventions() -> list[str]:
    """The notes under every parameter table, the prefixes as counts print now (`units.count_style`)."""
    return [line.format(prefixes=f"prefixes: {count_prefixes()}") for line in PARAM_CONVENTIONS]


def _share(value: float) -> str:
    return f"{value * 100:.2f} %"


def document(count: ParamCount | FallbackModel, source: str, ft: Finetune | None = None) -> Document:
    """`params`' answer: analytic (with its --finetune adapters, if any) or counted by transformers."""
    if isinstance(count, FallbackModel):
        return fallback_params_document(count, source)
    doc = params_document(count, source)
    return doc if ft is None else add_adapters(doc, ft)


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
            Column("params_si", count_label("params"), csv=False),
            Column("fraction_of_total", "share of total (%)", _share),
        ],
        [{**r, "params_si": fmt_count(r["params"])} for r in rows],
        param_conventions()
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
        [Column("term", "term", align="left"), Column("params", "params (exact)"), Column("si", count_label("params"))],
        rows,
    )


# --- the transformers fallback: a model_type llmcalc has no formula for -----------------------------

def method_line(model: FallbackModel) -> str:
    why = (f"llmcalc's {model.model_type} formula does not cover this config (the note says what)" if model.no_formula
           else f"llmcalc has no analytic family for model_type {model.model_type!r}")
    return (f"method: transformers — these numbers come from transformers {model.counted['transformers_version']}'s "
            f"modelling code ({model.cls} built from the config without weights), not from an llmcalc formula: "
            f"{why}")


def fallback_params_document(model: FallbackModel, source: str) -> Document:
    total = model.total
    active = model.active_per_token
    notes = [
        "components: each unique parameter filed by the name of the module holding it (attention, mlp, moe, "
        "norm, embedding, head); a name no rule recognises is kept as its module path (layer index as *)",
        *param_conventions()[:2],
        f"keys the config leaves out take {model.counted['config_class']}'s defaults, as when transformers loads it"
        + (": " + ", ".join(f"{k} = {v:,}" for k, v in model.counted["defaulted"].items())
           if model.counted["defaulted"] else ""),
    ]
    if model.counted["frozen"]:
        notes.append(f"{model.counted['frozen']:,} of them are stored but not trained (frozen parameters and "
                     "persistent buffers: no gradient)")
    if model.routing:
        k, e = model.routing
        notes.append(f"active_per_token = total - routed expert params x (1 - {k}/{e}): k and E from the config")
    notes += model.notes
    data = {
        "model": model.name, "model_type": model.model_type, "method": METHOD_TRANSFORMERS, "source": source,
        "transformers_class": model.cls, "transformers_version": model.counted["transformers_version"],
        "total": total, "non_embedding": model.non_embedding, "embedding": model.embedding,
        "active_per_token": active, "tied_embeddings": model.counted["tied_embeddings"],
        "frozen": model.counted["frozen"], "defaulted_by_config_class": model.counted["defaulted"],
        "components": dict(model.components), "groups": model.groups(),
        "notes": notes,
    }
    rows: list[dict[str, Any]] = [{"kind": "component", "name": k, "params": v, "fraction_of_total": v / total}
            for k, v in model.components.items()]
    rows.append({"kind": "total", "name": "total", "params": total, "fraction_of_total": 1.0})
    rows.append({"kind": "total", "name": "non_embedding", "params": model.non_embedding,
                 "fraction_of_total": model.non_embedding / total})
    if active is not None and active != total:
        rows.append({"kind": "total", "name": "active_per_token", "params": active,
                     "fraction_of_total": active / total})
    table = Table(
        "parameters by component",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("params", "params (exact)", fmt_int),
         Column("params_si", count_label("params"), csv=False),
         Column("fraction_of_total", "share of total (%)", _share)],
        [{**r, "params_si": fmt_count(r["params"])} for r in rows], notes,
    )
    return Document(f"{model.name}: {model.describe()}", data, [table],
                    preamble=([f"source: {source}"] if source else []) + [method_line(model)])


# --- --finetune lora|qlora: the adapters ---------------------------------------------------------------

def finetune_config(ft: Finetune) -> dict:
    cfg = ft.config
    return {"method": cfg.method, "rank": cfg.rank, "targets": list(cfg.targets), "target_label": cfg.target_label,
            "base_dtype": cfg.base_dtype, "double_quant": cfg.double_quant, "adapter_dtype": "fp32"}


def adapter_table(ft: Finetune) -> Table:
    rows = [{"name": k, "params": v, "params_si": fmt_count(v)} for k, v in ft.components.items()]
    rows.append({"name": "trainable (adapters)", "params": ft.trainable, "params_si": fmt_count(ft.trainable)})
    rows.append({"name": "frozen (base model)", "params": ft.frozen, "params_si": fmt_count(ft.frozen)})
    share = ft.trainable_share
    return Table(
        f"{ft.config.method} adapters, rank {ft.config.rank}, targets {ft.config.target_label}",
        [Column("name", "component", align="left"), Column("params", "params (exact)", fmt_int),
         Column("params_si", count_label("params"), csv=False)],
        rows, ft.notes()[:1] + [f"trainable share {share * 100:.3f} % of all parameters (adapters + base), "
                                 "as peft's print_trainable_parameters reports it"],
    )


def add_adapters(doc: Document, ft: Finetune) -> Document:
    """--finetune: the adapters' table under the components, their counts in the data."""
    doc.data.update({"finetune": finetune_config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
                     "trainable_components": ft.components})
    doc.tables.insert(1, adapter_table(ft))
    return doc
