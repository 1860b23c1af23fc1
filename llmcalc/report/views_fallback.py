"""What `params` and `flops` show for a model counted by transformers' modelling code (no formula)."""

from __future__ import annotations

from typing import Any

from ..fallback import METHOD_TRANSFORMERS, FallbackModel
from ..render.tables import Column, Document, Table
from ..units import fmt_count, fmt_int, si
from .views_compute import FLOP_CONVENTIONS
from .views_params import PARAM_CONVENTIONS


def method_line(model: FallbackModel) -> str:
    return (f"method: transformers — these numbers come from transformers {model.counted['transformers_version']}'s "
            f"modelling code ({model.cls} built from the config without weights), not from an llmcalc formula: "
            f"llmcalc has no analytic family for model_type {model.model_type!r}")


def _share(value: float) -> str:
    return f"{value * 100:.2f} %"


def fallback_params_document(model: FallbackModel, source: str) -> Document:
    total = model.total
    active = model.active_per_token
    notes = [
        "components: each unique parameter filed by the name of the module holding it (attention, mlp, moe, "
        "norm, embedding, head); a name no rule recognises is kept as its module path (layer index as *)",
        PARAM_CONVENTIONS[0], PARAM_CONVENTIONS[1],
        f"keys the config leaves out take {model.counted['config_class']}'s defaults, as when transformers loads it"
        + (": " + ", ".join(f"{k} = {v:,}" for k, v in model.counted["defaulted"].items())
           if model.counted["defaulted"] else ""),
    ]
    if model.counted["frozen"]:
        notes.append(f"{model.counted['frozen']:,} frozen parameters (requires_grad=False) are not counted")
    if model.routing:
        k, e = model.routing
        notes.append(f"active_per_token = total - routed expert params x (1 - {k}/{e}): k and E from the config")
    notes += model.notes
    data = {
        "model": model.name, "model_type": model.model_type, "method": METHOD_TRANSFORMERS, "source": source,
        "transformers_class": model.cls, "transformers_version": model.counted["transformers_version"],
        "total": total, "non_embedding": total - model.embedding, "embedding": model.embedding,
        "active_per_token": active, "tied_embeddings": model.counted["tied_embeddings"],
        "frozen": model.counted["frozen"], "defaulted_by_config_class": model.counted["defaulted"],
        "components": dict(model.components), "groups": model.groups(),
        "notes": notes,
    }
    rows: list[dict[str, Any]] = [{"kind": "component", "name": k, "params": v, "fraction_of_total": v / total}
            for k, v in model.components.items()]
    rows.append({"kind": "total", "name": "total", "params": total, "fraction_of_total": 1.0})
    rows.append({"kind": "total", "name": "non_embedding", "params": total - model.embedding,
                 "fraction_of_total": (total - model.embedding) / total})
    if active is not None and active != total:
        rows.append({"kind": "total", "name": "active_per_token", "params": active,
                     "fraction_of_total": active / total})
    table = Table(
        "parameters by component",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("params", "params (exact)", fmt_int),
         Column("params_si", "params (SI)", csv=False), Column("fraction_of_total", "share of total (%)", _share)],
        [{**r, "params_si": fmt_count(r["params"])} for r in rows], notes,
    )
    return Document(f"{model.name}: {model.describe()}", data, [table],
                    preamble=([f"source: {source}"] if source else []) + [method_line(model)])


def fallback_flops_document(model: FallbackModel, step: dict, batch: int, causal: bool, recompute: str) -> Document:
    counted = model.flops
    assert counted is not None, "a FallbackModel loaded without FLOPs"  # narrows the Optional for mypy
    seq = counted["seq_len"]
    conventions = FLOP_CONVENTIONS[:1] + [
        "backward = 2 x forward (llmcalc's convention, as for analytic models); the LM head is whatever "
        "the modelling code runs on every position",
        f"forward counted by torch's FlopCounterMode on one fake batch-1 x {seq} forward of {model.cls} "
        f"(sdpa kernels counted with torch's sdpa formulas), scaled linearly to batch {batch}",
        "causal: the attention core (sdpa kernels and the batched matmuls of an attention module) halved"
        if causal else "full S² (what torch's FlopCounterMode counts); --causal halves the attention core",
    ]
    if model.counted.get("experts_implementation") == "batched_mm":
        conventions.append("MoE: experts run by transformers' batched_mm implementation, which multiplies only "
                           "the k experts each token is routed to: the FLOPs are those of the routed experts")
    data = {"model": model.name, "model_type": model.model_type, "method": METHOD_TRANSFORMERS,
            "transformers_class": model.cls, "batch_size": batch, "seq_len": seq, "causal": causal,
            "recompute": recompute, **step, "by_aten_op_forward_batch_1": counted["by_op"],
            "conventions": conventions}
    forward = step["forward_flops"]
    group_table = Table(
        "forward FLOPs by component",
        [Column("component", "component", align="left"), Column("forward", "forward (FLOP)", _flop),
         Column("share", "share (%)", _share)],
        [{"component": g, "forward": v, "share": v / forward} for g, v in step["groups"].items() if v],
        conventions,
    )
    totals = [
        ("forward", forward), ("backward", step["backward_flops"]),
        ("model (fwd+bwd, MFU numerator)", step["total_flops"]),
        (f"recomputation ({recompute})", step["recompute_flops"]),
        ("hardware (model + recomputation, HFU numerator)", step["hardware_flops"]),
    ]
    total_table = Table(
        f"totals (batch {batch} x seq {seq} = {step['tokens']:,} tokens)",
        [Column("quantity", "quantity", align="left"), Column("step", "per step (FLOP)", _flop),
         Column("per_token", "per token (FLOP)", _flop)],
        [{"quantity": q, "step": v, "per_token": v / step["tokens"]} for q, v in totals],
    )
    return Document(f"{model.name}: FLOPs for batch {batch} x seq {seq}, {'causal' if causal else 'full S²'}, "
                    f"recompute {recompute}", data, [group_table, total_table],
                    preamble=[model.describe(), method_line(model)])


def _flop(v: float) -> str:
    return si(v).strip()
