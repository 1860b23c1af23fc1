"""Training budgets: tokens -> FLOPs -> device-seconds -> wall time, GPU-hours, cost, energy.

Device time comes from one of two figures, never a hidden constant:
- MFU (model FLOPs utilization, PaLM App. B): device-seconds = model FLOPs / (peak x MFU), where
  model FLOPs exclude recomputation;
- achieved FLOP/s per device, as papers report them (Narayanan et al. 2021: "140 TFLOP/s per
  A100"): device-seconds = hardware FLOPs / achieved, where hardware FLOPs include recomputation.
Energy is device power only (TDP x device-hours), no cooling or host overhead (PUE 1.0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..validate import fraction, positive_int, positive_number

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class TrainingEstimate:
    tokens: float
    model_flops: float  # forward + backward, no recomputation
    hardware_flops: float  # plus recomputation
    accelerator: Accelerator
    dtype: str
    n_gpus: int
    mfu: float | None = None  # given
    achieved_flops_per_s: float | None = None  # given: hardware FLOP/s per device
    usd_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        check_positive("tokens", self.tokens)
        positive_int("n_gpus", self.n_gpus)
        if (self.mfu is None) == (self.achieved_flops_per_s is None):
            raise LlmcalcError("give exactly one of an MFU (--mfu, e.g. 0.4) or an achieved FLOP/s per GPU "
                               "(--achieved-tflops)")
        if self.mfu is not None:
            fraction("MFU", self.mfu)
        if self.achieved_flops_per_s is not None:
            check_positive("achieved FLOP/s", self.achieved_flops_per_s)
            if self.achieved_flops_per_s > self.peak:
                raise LlmcalcError(
                    f"achieved {self.achieved_flops_per_s / 1e12:.4g} TFLOP/s exceeds {self.accelerator.key}'s "
                    f"dense {self.dtype} peak of {self.peak / 1e12:.4g} TFLOP/s"
                )
        if self.usd_per_gpu_hour is not None:
            check_positive("price per GPU-hour", self.usd_per_gpu_hour)

    @property
    def peak(self) -> float:
        return self.accelerator.peak(self.dtype)

    @property
    def gpu_seconds(self) -> float:
        if self.mfu is not None:
            return self.model_flops / (self.peak * self.mfu)
        assert self.achieved_flops_per_s is not None  # __post_init__: exactly one of the two is given
        return self.hardware_flops / self.achieved_flops_per_s

    @property
    def effective_mfu(self) -> float:
        return self.model_flops / (self.gpu_seconds * self.peak)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilization: recomputation counted as useful work."""
        return self.hardware_flops / (self.gpu_seconds * self.peak)

    @property
    def wall_seconds(self) -> float:
        return self.gpu_seconds / self.n_gpus

    @property
    def wall_clock_days(self) -> float:
        return self.wall_seconds / SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / SECONDS_PER_HOUR

    @property
    def price(self) -> float | None:
        """USD per GPU-hour: the one given, else the preset's, else unknown."""
        return self.usd_per_gpu_hour if self.usd_per_gpu_hour is not None else self.accelerator.usd_per_hour

    @property
    def cost_usd(self) -> float | None:
        return None if self.price is None else self.gpu_hours * self.price

    @property
    def energy_kwh(self) -> float | None:
        tdp = self.accelerator.tdp_watts
        return None if tdp is None else self.gpu_hours * tdp / 1000.0

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens / self.gpu_seconds

    @property
    def model_flops_per_s_per_gpu(self) -> float:
        return self.model_flops / self.gpu_seconds


check_positive = positive_number  # the shared validator (llmcalc.validate)


# --- compute-optimal sizing (Hoffmann et al. 2022, "Chinchilla") ------------------------------


@dataclass(frozen=True)
class ComputeOptimal:
    method: str
    params: float
    tokens: float
    source: str

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    @property
    def compute(self) -> float:
        return 6 * self.params * self.tokens


def tokens_per_param_rule(compute: float, ratio: float = 20.0) -> ComputeOptimal:
    """C = 6·N·D with D = ratio·N  =>  N = sqrt(C / (6·ratio))."""
    check_positive("compute", compute)
    params = math.sqrt(compute / (6 * ratio))
    return ComputeOptimal(f"≈{ratio:g} tokens per parameter", params, ratio * params,
                          "Hoffmann et al. 2022: compute-optimal models see about 20 tokens per parameter")


def parametric_fit(compute: float, A: float, B: float, alpha: float, beta: float, method: str,
                   source: str) -> ComputeOptimal:
    """Minimise L(N, D) = E + A/N^α + B/D^β subject to 6·N·D = C (Hoffmann et al. 2022, eq. 4):
    N_opt = G·(C/6)^(β/(α+β)), D_opt = (C/6)/N_opt, G = (α·A / (β·B))^(1/(α+β))."""
    check_positive("compute", compute)
    g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    params = g * (compute / 6) ** (beta / (alpha + beta))
    return ComputeOptimal(method, params, compute / 6 / params, source)


def compute_optimal(compute: float) -> list[ComputeOptimal]:
    return [
        tokens_per_param_rule(compute),
        parametric_fit(compute, 406.4, 410.7, 0.34, beta=0.28, method="Hoffmann et al. fit (Approach 3)",
                       source="Hoffmann et al. 2022, Approach 3 (sec. 3.3): E=1.69, A=406.4, B=410.7, α=0.34, β=0.28"),
        parametric_fit(compute, 482.01, 2085.43, 0.3478, beta=0.3658, method="Besiroglu et al. refit",
                       source="Besiroglu et al. 2024 (Epoch AI replication of Approach 3): A=482.01, B=2085.43, "
                       "α=0.3478, β=0.3658"),
    ]


def cluster_compute(accelerator: Accelerator, n_gpus: int, seconds: float, mfu: float,
                    dtype: str = "bf16") -> float:
    """Model FLOPs a cluster delivers: n x peak x MFU x seconds."""
    fraction("MFU", mfu)
    check_positive("days", seconds)
    positive_int("n_gpus", n_gpus)
    return n_gpus * accelerator.peak(dtype) * mfu * seconds
