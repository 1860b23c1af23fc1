"""The inverse of a workload: the fewest GPUs, and their layout (tensor parallel x replicas), that serve traffic
within latency targets, from the predicted speed of ``serving_speed``.

`serve MODEL --gpu G --input-len I --output-len O --request-rate R | --max-concurrency C --max-ttft S --max-tpot S`:
for each tensor-parallel degree a node allows (the workload model times all-reduces inside one node), a replica is
sized as vLLM sizes it (``serving.plan_serving``) and the traffic is split evenly over r replicas (a load balancer:
R / r requests/s, or C / r clients, each); the fewest replicas whose predicted mean TTFT and mean TPOT meet the
targets (aiconfigurator's SLA search reads the means too) are found by doubling, then bisection (the latencies fall
as the load per replica does). The answer is the layout of fewest GPUs (ties: the lower TTFT); every other degree
says why it loses: more GPUs, a replica that holds no request, or a target missed even at the lightest load.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..spec import ModelSpec
from .inference import check_tp
from .serving import ServeEstimate, plan_serving
from .serving_speed import Performance, Workload, plan_workload

TP_CHOICES = (1, 2, 4, 8)
MAX_GPUS = 4096  # the search stops there


@dataclass(frozen=True)
class Candidate:
    """One tensor-parallel degree's answer: `replicas` of `tp` GPUs (0: none meets the targets, `why` says so)."""

    tp: int
    replicas: int
    performance: Performance | None  # one replica's, at its share of the traffic
    why: str

    @property
    def n_gpus(self) -> int:
        return self.tp * self.replicas


@dataclass(frozen=True)
class SizingPlan:
    """`serve --max-ttft/--max-tpot` with a workload: the layouts tried and the fewest GPUs that meet the targets."""

    spec: ModelSpec
    accelerator: Accelerator
    work: Workload  # the whole traffic (all replicas)
    max_ttft: float | None
    max_tpot: float | None
    candidates: tuple[Candidate, ...]

    @property
    def best(self) -> Candidate | None:
        found = [c for c in self.candidates if c.replicas]
        if not found:
            return None
        return min(found, key=lambda c: (c.n_gpus, c.performance.run.ttft[0] if c.performance else math.inf))


def meets(perf: Performance, max_ttft: float | None, max_tpot: float | None) -> bool:
    """Mean TTFT and mean TPOT (vllm bench serve's) within the targets, and every request served."""
    run = perf.run
    return perf.fits and run.completed > 0 and (max_ttft is None or run.ttft[0] <= max_ttft) and (
        max_tpot is None or run.tpot[0] <= max_tpot)


def share_of(work: Workload, replicas: int) -> Workload:
    """One replica's part of the traffic: the rate or the clients split evenly, its share of the prompts."""
    clients = None if work.max_concurrency is None else max(1, math.ceil(work.max_concurrency / replicas))
    rate = None if work.request_rate is None else work.request_rate / replicas
    return Workload(work.input_len, work.output_len, max_concurrency=clients, request_rate=rate,
                    num_prompts=max(20, math.ceil(work.num_prompts / replicas)), dataset=work.dataset,
                    random_range_ratio=work.random_range_ratio)


def _fewest_replicas(est: ServeEstimate, work: Workload, targets: tuple[float | None, float | None],
                     limit: int) -> tuple[int, Performance | None, str]:
    """(replicas, one replica's performance, why not) for one replica layout: doubling, then bisection."""
    def run(r: int) -> Performance:
        return plan_workload(est, share_of(work, r))

    # the lightest load a replica can get: one client each, or the rate over every replica the search allows
    lightest = min(limit, work.max_concurrency) if work.max_concurrency is not None else limit
    light = run(lightest)
    if not meets(light, *targets):
        return 0, light, (f"misses the targets even at its lightest load ({lightest:,} replicas): TTFT "
                          f"{light.run.ttft[0] * 1e3:,.1f} ms, TPOT {light.run.tpot[0] * 1e3:,.2f} ms")
    lo, hi = 0, 1
    while hi < lightest and not meets(run(hi), *targets):
        lo, hi = hi, min(2 * hi, lightest)
    while hi - lo > 1:  # the least count in (lo, hi] that meets them
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(run(mid), *targets) else (mid, hi)
    return hi, run(hi), ""


def size_workload(spec: ModelSpec, accelerator: Accelerator, work: Workload, max_ttft: float | None = None,
                  max_tpot: float | None = None, progress: Callable[[], None] | None = None,
                  **settings: object) -> SizingPlan:
    """The fewest GPUs serving `work` (all replicas' traffic: `request_rate` or `max_concurrency` clients) within
    `max_ttft` and `max_tpot` seconds (module docstring); `settings`: serve's vLLM options and dtypes."""
    if work.request_rate is None and work.max_concurrency is None:
        raise LlmcalcError("--max-ttft/--max-tpot size for traffic: give --request-rate or --max-concurrency (offline, "
                           "every request at once, has no latency target)")
    if max_ttft is None and max_tpot is None:
        raise LlmcalcError("give --max-ttft or --max-tpot: the targets the layout must meet")
    from .kernels import device_for

    network = device_for(accelerator.key).network
    candidates = []
    for tp in TP_CHOICES:
        if progress is not None:
            progress()
        if tp > network.gpus_per_node:
            continue
        try:
            check_tp(spec, tp)
            est = plan_serving(spec, accelerator, tp, **settings)  # type: ignore[arg-type]
        except LlmcalcError as exc:
            candidates.append(Candidate(tp, 0, None, str(exc).split(";")[0]))
            continue
        one = plan_workload(est, share_of(work, 1))
        if not one.fits:
            candidates.append(Candidate(tp, 0, one, f"a replica of {tp} holds no request of "
                                                    f"{work.input_len + work.output_len:,} tokens"))
            continue
        replicas, perf, why = _fewest_replicas(est, work, (max_ttft, max_tpot), MAX_GPUS // tp)
        candidates.append(Candidate(tp, replicas, perf, why))
    return SizingPlan(spec, accelerator, work, max_ttft=max_ttft, max_tpot=max_tpot, candidates=tuple(candidates))
