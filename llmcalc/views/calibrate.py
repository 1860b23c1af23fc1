"""What `calibrate` shows: the achievable matmul FLOP/s, beside the datasheet peak where one is known."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..render.tables import Column, Document, Table
from ..units import fmt_flops_rate

if TYPE_CHECKING:
    from ..results import Calibration


def document(calibration: Calibration) -> Document:
    device, dtype, size = calibration.device, calibration.dtype, calibration.size
    flops_per_s, catalog = calibration.flops_per_s, calibration.catalog
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
                  ["best of repeated timed matmuls; `profile` uses this as the peak for CPUs and unknown devices"]
                  + ([f"peak {calibration.cached}"] if calibration.cached else []))
    if calibration.cached:
        data["cached"] = calibration.cached
    return Document(f"calibrate: {device}", data, [table])
