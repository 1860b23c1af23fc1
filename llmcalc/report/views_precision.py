"""FP8 training: MFU against both the bf16 and the fp8 dense peak, each labelled (torchtitan#560 asks which)."""

from __future__ import annotations

from ..analytic.training import TrainingEstimate
from ..render.tables import Column, Document, Table
from ..units import GIB

FP8_NOTE = ("FP8 training: the same model FLOP/s against the dense bf16 and the dense fp8 peak; the fp8 figure is the "
            "stricter one (only the GEMMs run in FP8; attention, norms and the optimizer do not), the bf16 one "
            "compares with bf16 runs")


def both_peaks(acc, achieved: float) -> dict[str, float]:
    """Achieved model FLOP/s per GPU as a share of the accelerator's dense bf16 and fp8 peaks."""
    return {dtype: achieved / acc.peak(dtype) for dtype in ("bf16", "fp8")}


def add_both_peaks(doc: Document, est: TrainingEstimate) -> Document:
    """With --dtype fp8: the same achieved model FLOP/s as a share of the dense bf16 and fp8 peaks."""
    acc = est.accelerator
    if est.dtype != "fp8" or not {"bf16", "fp8"} <= set(acc.peak_flops):
        return doc
    both = both_peaks(acc, est.model_flops_per_s_per_gpu)
    doc.data["mfu_vs_bf16_peak"] = both["bf16"]
    doc.data["mfu_vs_fp8_peak"] = both["fp8"]
    table = doc.tables[0]
    at = next(i for i, r in enumerate(table.rows) if r["key"] == "mfu") + 1
    for dtype in ("bf16", "fp8"):
        table.rows.insert(at, {"key": f"mfu_vs_{dtype}_peak",
                               "quantity": f"MFU vs dense {dtype} peak ({acc.peak(dtype) / 1e12:,.4g} TFLOP/s)",
                               "value": both[dtype], "text": f"{both[dtype] * 100:.1f} %"})
        at += 1
    table.notes.append(FP8_NOTE)
    return doc


# The report's FP8 section (`report --recipe fp8|fp8-current|fp8-torchao`).
BASELINE = "bf16-mixed"
FP8_RECIPES = ("fp8", "fp8-current", "fp8-torchao")


def _recipe_label(recipe: str, plan: str) -> str:
    return recipe + (" · plan" if recipe == plan else " (baseline)" if recipe == BASELINE else "")


def fp8_memory_document(spec, scenario) -> tuple[Document, dict]:
    """Memory per GPU by component (GiB) under bf16-mixed and each FP8 recipe, on the plan's layout."""
    from dataclasses import replace

    from ..analytic.memory import RECIPES
    from ..analytic.summary import scenario_memory

    ests = {_recipe_label(r, scenario.recipe): scenario_memory(spec, replace(scenario, recipe=r))
            for r in (BASELINE, *FP8_RECIPES)}
    keys = list(dict.fromkeys(k for est in ests.values() for k in est.components()))
    rows = [{"name": k, **{est.recipe.name: est.components().get(k) for est in ests.values()}}
            for k in keys if any(est.components().get(k) for est in ests.values())]
    rows.append({"name": "peak per GPU", **{est.recipe.name: est.peak for est in ests.values()}})
    cap = scenario.gpu.memory_bytes
    notes = [f"{r}: {RECIPES[r].description}" for r in (BASELINE, *FP8_RECIPES)]
    notes += [f"{label}: peak at the {est.peak_phase}; {'fits' if est.peak <= cap else 'does NOT fit'} in "
              f"{scenario.gpu.key}'s {cap / GIB:g} GiB" for label, est in ests.items()]
    notes += [f"the plan's layout for every recipe: ZeRO-{scenario.zero} over {scenario.n_gpus:,} GPUs, tp "
              f"{scenario.tp}; memory in GiB (2^30 bytes)"]
    table = Table(f"memory per GPU at micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}",
                  [Column("name", "component", align="left")]
                  + [Column(est.recipe.name, f"{label} (GiB)", _gib) for label, est in ests.items()], rows, notes)
    data = {"model": spec.name, "recipes": {label: {"per_gpu_bytes": est.peak, "peak_phase": est.peak_phase,
                                                    "components": est.components()} for label, est in ests.items()}}
    return Document(f"{spec.name}: FP8 training memory", data, [table]), ests



def _gib(value: float) -> str:
    return f"{value / GIB:,.2f}"


def fp8_mfu_table(scenario) -> Table:
    """The plan's achieved model FLOP/s per GPU (its MFU of the dense peak it names) against both peaks."""
    acc = scenario.gpu
    achieved = scenario.mfu * acc.peak(scenario.dtype)
    rows = [{"quantity": f"achieved model FLOP/s per GPU (plan: {scenario.mfu:.0%} of the dense {scenario.dtype} "
                         "peak)", "value": f"{achieved / 1e12:,.4g} TFLOP/s"}]
    notes = [FP8_NOTE]
    if {"bf16", "fp8"} <= set(acc.peak_flops):
        for dtype, share in both_peaks(acc, achieved).items():
            rows.append({"quantity": f"MFU vs dense {dtype} peak ({acc.peak(dtype) / 1e12:,.4g} TFLOP/s)",
                         "value": f"{share * 100:.1f} %"})
        notes.append("the report's time and cost use the plan's MFU as given: an FP8 run that is faster shows as a "
                     "higher MFU against the bf16 peak")
    else:
        notes.append(f"{acc.key} has no dense fp8 rate in its preset: its GEMMs cannot run in FP8, so only the "
                     "memory figures apply")
    return Table(f"MFU of the plan on {acc.key}, against both peaks",
                 [Column("quantity", "quantity", align="left"), Column("value", "value", align="left")], rows, notes)


def fp8_section(report, specs, scenario, line: str) -> None:
    """`report --recipe fp8*`: memory per GPU under bf16-mixed and the three FP8 recipes on the plan's
    layout (one figure for all models), and the plan's MFU against the bf16 and the fp8 peak."""
    from .document import safe_name
    from .memory_bars import memory_bars

    report.heading("FP8 training")
    report.paragraph(f"The plan trains with the {scenario.recipe} recipe; below, its memory beside bf16-mixed and the "
                     "other FP8 recipes on the same layout, and its MFU against both dense peaks.")
    report.table(fp8_mfu_table(scenario))
    decoders = [s for s in specs if s.architecture == "decoder"]
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: FP8 memory needs the activation model, which covers decoder-only models.")
    docs = {s.name: fp8_memory_document(s, scenario) for s in decoders}
    if not docs:
        return
    bars = {(label if len(docs) == 1 else f"{name}: {label}"): est.peak_components()
            for name, (_, ests) in docs.items() for label, est in ests.items()}
    report.figure("fp8_memory", memory_bars(bars, scenario.gpu.memory_bytes, scenario.gpu.key,
                                            "Memory per GPU: bf16-mixed against the FP8 recipes", line),
                  f"Memory per GPU at the peak, by component group, for bf16-mixed and each FP8 recipe on the plan's "
                  f"layout (ZeRO-{scenario.zero} over {scenario.n_gpus:,} GPUs, tp {scenario.tp}); the plan's recipe "
                  f"marked 'plan'; dashed: {scenario.gpu.key}'s capacity")
    for name, (doc, _) in docs.items():
        report.heading(name, 3)
        report.document(doc, f"fp8-{safe_name(name)}")
