"""Accelerator: dense peak FLOP/s per dtype, memory, bandwidth, power, price.

Preset files (presets/hardware/*.json) carry units in their key names (``dense_tflops``,
``memory_gib``, ``cuda_visible_gib``, ``memory_bandwidth_gb_per_s``, ``tdp_watts``, ``usd_per_hour``); an Accelerator
holds base units (FLOP/s, bytes, bytes/s, W, USD/h). Peaks are dense: no 2:4-sparsity figures.
"""

from __future__ import annotations

from dataclasses import field

from .dtypes import DTYPE_ALIASES, canonical_dtype
from .errors import LlmcalcError
from .records import dataclass, short_repr
from .units import GIB
from .validate import GPU_MEMORY, positive_number  # noqa: F401 (GPU_MEMORY: read from here too)


@dataclass(frozen=True)
class Accelerator:

    __repr__ = short_repr(("key", "name", "memory_bytes"))  # a handful of fields
    key: str  # preset name, e.g. "h100-sxm"
    name: str  # display name, e.g. "NVIDIA H100 SXM5 80GB"
    peak_flops: dict[str, float]  # dtype -> dense FLOP/s
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    tdp_watts: float | None = None
    interconnect_bandwidth: float | None = None  # bytes/s
    usd_per_hour: float | None = None
    vendor: str = ""
    source: str = field(default="", compare=False)
    cuda_visible_bytes: float = 0.0  # what the runtime reports (torch.cuda.get_device_properties().total_memory)
    cuda_visible_source: str = field(default="", compare=False)

    @property
    def usable_bytes(self) -> float:
        """Device memory a program can allocate against: the total the CUDA (ROCm, XLA) runtime reports, a
        little below the nominal size (the driver keeps some: H100 80 GB reports 79.19 GiB); the nominal size
        where a preset gives no such figure."""
        return self.cuda_visible_bytes or self.memory_bytes

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for `dtype`; a clear error when the device has no such rate."""
        dtype = canonical_dtype(dtype)
        if dtype not in self.peak_flops:
            raise LlmcalcError(
                f"{self.key} has no published dense {dtype} peak; it lists {', '.join(self.peak_flops)}"
            )
        return self.peak_flops[dtype]


def accelerator_from_preset(key: str, data: dict) -> Accelerator:
    """An Accelerator from a preset dict (units in key names) -> base units."""
    try:
        tflops = data["dense_tflops"]
        peaks = {canonical_dtype(k): positive_number(f"{key} dense_tflops.{k}", v) * 1e12 for k, v in tflops.items()
                 if v is not None and k in DTYPE_ALIASES}
        positive_number(f"{key} memory_gib", data["memory_gib"])
        positive_number(f"{key} memory_bandwidth_gb_per_s", data["memory_bandwidth_gb_per_s"])
        bandwidth = data.get("interconnect_gb_per_s")
        return Accelerator(
            key=key,
            name=data.get("name", key),
            peak_flops=peaks,
            memory_bytes=float(data["memory_gib"]) * GIB,
            memory_bandwidth=float(data["memory_bandwidth_gb_per_s"]) * 1e9,
            tdp_watts=data.get("tdp_watts"),
            interconnect_bandwidth=None if bandwidth is None else float(bandwidth) * 1e9,
            usd_per_hour=data.get("usd_per_hour"),
            vendor=data.get("vendor", ""),
            source=data.get("_source", ""),
            cuda_visible_bytes=float(data.get("cuda_visible_gib") or 0) * GIB,
            cuda_visible_source=data.get("cuda_visible_gib_source", ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LlmcalcError(f"hardware preset {key!r} is malformed: {exc!r}") from None


def custom_accelerator(peak_flops_per_s: float, memory_bytes: float = float("inf"),
                       memory_bandwidth: float = float("inf"), dtype: str = "bf16") -> Accelerator:
    """An ad-hoc device from a peak figure (e.g. a calibrated CPU)."""
    return Accelerator("custom", "custom device", {canonical_dtype(dtype): peak_flops_per_s}, memory_bytes,
                       memory_bandwidth)


@dataclass(frozen=True)
class MemoryOnly(Accelerator):
    """A GPU known by its memory alone (`--gpu-memory 24GB`): what `memory` needs; any FLOP rate is refused in one line
    naming the presets of that memory (`alternatives`)."""

    alternatives: tuple[str, ...] = ()

    def peak(self, dtype: str = "bf16") -> float:
        presets = ", ".join(self.alternatives) or "see `llmcalc presets`"
        raise LlmcalcError(f"--gpu-memory gives a GPU's memory, not its speed, which this answer needs; give --gpu "
                           f"with a preset instead ({self.memory_bytes / GIB:g} GiB: {presets})")


def memory_only(memory_bytes: float, alternatives: tuple[str, ...] = ()) -> MemoryOnly:
    """A generic GPU of `memory_bytes` (nominal: the runtime reports a little less, 0.3-1.8 GiB, which the presets'
    cuda_visible_gib records), with no speed."""
    gib = f"{memory_bytes / GIB:g} GiB"
    return MemoryOnly(f"{gib} GPU", f"a {gib} GPU (--gpu-memory; nominal size)", {}, memory_bytes, 0.0,
                      alternatives=alternatives)
