"""FP8 training: MFU against both the bf16 and the fp8 dense peak, each labelled (torchtitan#560 asks which)."""

from __future__ import annotations

from ..analytic.training import TrainingEstimate
from .tables import Document


def add_both_peaks(doc: Document, est: TrainingEstimate) -> Document:
    """With --dtype fp8: the same achieved model FLOP/s as a share of the dense bf16 and fp8 peaks."""
    acc = est.accelerator
    if est.dtype != "fp8" or not {"bf16", "fp8"} <= set(acc.peak_flops):
        return doc
    achieved = est.model_flops_per_s_per_gpu
    both = {dtype: achieved / acc.peak(dtype) for dtype in ("bf16", "fp8")}
    doc.data["mfu_vs_bf16_peak"] = both["bf16"]
    doc.data["mfu_vs_fp8_peak"] = both["fp8"]
    table = doc.tables[0]
    at = next(i for i, r in enumerate(table.rows) if r["key"] == "mfu") + 1
    for dtype in ("bf16", "fp8"):
        table.rows.insert(at, {"key": f"mfu_vs_{dtype}_peak",
                               "quantity": f"MFU vs dense {dtype} peak ({acc.peak(dtype) / 1e12:,.4g} TFLOP/s)",
                               "value": both[dtype], "text": f"{both[dtype] * 100:.1f} %"})
        at += 1
    table.notes.append("FP8 training: the same model FLOP/s against the dense bf16 and the dense fp8 peak; the fp8 "
                       "figure is the stricter one (only the GEMMs run in FP8; attention, norms and the optimizer "
                       "do not), the bf16 one compares with bf16 runs")
    return doc
