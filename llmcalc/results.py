"""Plain result records passed from the profiler to the report layer (which never imports torch).

A ``Comparison`` is one figure predicted by a formula beside its measurement. A ``ProfileResult``
is everything one ``llmcalc profile`` run found; its ``to_json`` is the command's JSON output.
"""

from __future__ import annotations

from dataclasses import asdict, field

from .records import dataclass


@dataclass
class Comparison:
    name: str  # what is compared, e.g. "forward FLOPs / attention S²"
    analytic: float | None
    measured: float | None
    unit: str  # "FLOP", "bytes", "params"
    tolerance: float  # relative error past which the row is flagged
    note: str = ""

    @property
    def rel_error(self) -> float | None:
        if self.analytic in (None, 0) or self.measured is None:
            return None if self.measured not in (0, None) or self.analytic not in (0, None) else 0.0
        return (self.measured - self.analytic) / self.analytic

    @property
    def flagged(self) -> bool:
        err = self.rel_error
        return err is not None and abs(err) > self.tolerance


@dataclass
class ProfileResult:
    model: str
    mode: str  # "virtual" (FakeTensorMode) or "real"
    device: str  # "cpu", "cuda", or "fake cpu" for virtual runs
    device_name: str
    recipe: str
    batch_size: int
    seq_len: int
    recompute: str
    attention: str  # "sdpa" or "eager"
    sdpa_backend: str
    counter: str  # "torch", "fvcore" or "both"
    comparisons: list[Comparison] = field(default_factory=list)
    memory_measured: dict[str, float] = field(default_factory=dict)  # category -> bytes at the peak
    memory_analytic: dict[str, float] = field(default_factory=dict)  # category -> bytes at the analytic peak
    step_seconds: float | None = None
    step_times: list[float] = field(default_factory=list)
    compile_seconds: float | None = None
    tokens_per_second: float | None = None
    achieved_flops_per_s: float | None = None
    peak_flops_per_s: float | None = None
    peak_source: str = ""
    mfu: float | None = None
    hfu: float | None = None
    fvcore_forward_flops: float | None = None
    notes: list[str] = field(default_factory=list)

    def find(self, name: str) -> Comparison:
        for c in self.comparisons:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict:
        def pair(name):
            c = self.find(name)
            return {"analytic": c.analytic, "measured": c.measured, "rel_error": c.rel_error}

        data = {k: v for k, v in asdict(self).items() if k not in ("comparisons",)}
        data["params"] = pair("parameters")
        data["forward_flops"] = pair("forward FLOPs")
        step = self.find("train-step FLOPs")
        data["train_step_flops"] = {"analytic_model": self.find("train-step model FLOPs").analytic,
                                    "analytic_hardware": step.analytic, "measured": step.measured,
                                    "rel_error": step.rel_error}
        data["peak_memory_bytes"] = pair("peak memory")
        data["components"] = [
            {"name": c.name, "unit": c.unit, "analytic": c.analytic, "measured": c.measured, "rel_error": c.rel_error,
             "flagged": c.flagged, "tolerance": c.tolerance, "note": c.note}
            for c in self.comparisons
        ]
        return data


@dataclass(frozen=True)
class Calibration:
    """What `llmcalc calibrate` measured: the achieved matmul FLOP/s, beside the datasheet peak of the device's
    preset where one is known (`catalog`: {"preset", "peak_flops_per_s"})."""

    device: str  # the device's name, as torch gives it
    dtype: str
    size: int  # of the square matrices
    flops_per_s: float
    catalog: dict | None = None
    cached: str = ""  # how the measurement is kept for later profiles (peak_cache.describe), "" if not
