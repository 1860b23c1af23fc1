"""A workload's question and answer on one replica (`serve --input-len --output-len`): ``Workload``, `vllm bench
serve`'s workload (lengths, load, dataset); ``Simulated``, what `vllm bench serve` would report of the run
serving_speed.simulate runs; ``Performance``, the answer with its roofline and what it assumed, whose ``record()`` is
the JSON contract's "performance" (issue 36: keys exactly as `vllm bench serve` names them, seconds and tokens/s in
SI)."""

from __future__ import annotations

import math

from ..errors import LlmcalcError
from ..records import dataclass
from . import engines
from .engine_versions import OFFLINE_WORDS
from .request_lengths import DATASETS, random_lengths, sharegpt_lengths


@dataclass(frozen=True)
class Workload:
    """`vllm bench serve`'s workload: requests of input_len prompt tokens generating output_len (its random dataset,
    fixed lengths by default, uniform within --random-range-ratio of them otherwise), or lengths drawn as its ShareGPT
    sample draws them at those means (``dataset="sharegpt"``), or the varied `lengths` given."""

    input_len: int
    output_len: int
    max_concurrency: int | None = None  # None: as many as the engine admits
    request_rate: float | None = None  # None: all requests at once (vllm bench's inf)
    num_prompts: int = 1000
    served: bool = True  # through the API server (`vllm bench serve`); False: LLM.generate's offline batch
    dataset: str = "random"
    random_range_ratio: float = 0.0
    lengths: tuple[tuple[int, int], ...] | None = None  # (prompt, output) of request i % len, in the order sent
    # the API server's host work per request before the engine sees it, beyond REQUEST_SECONDS (a served run's TTFT
    # and e2e; engine_versions.chat_intake_seconds: vLLM 0.11.0's chat-template parse), seconds
    intake_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_prompts"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise LlmcalcError(f"--{name.replace('_', '-')} must be a whole number >= 1, got "
                                   f"{getattr(self, name)!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise LlmcalcError(f"--max-concurrency must be >= 1, got {self.max_concurrency}; leave it out for the "
                               "offline maximum throughput")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise LlmcalcError(f"--request-rate must be a positive number of requests per second, got "
                               f"{self.request_rate}")
        if not (self.intake_seconds >= 0 and math.isfinite(self.intake_seconds)):
            raise LlmcalcError(f"intake_seconds must be a number of seconds >= 0, got {self.intake_seconds!r}")
        if self.dataset not in DATASETS:
            raise LlmcalcError(f"--dataset {self.dataset}: llmcalc draws lengths for {', '.join(DATASETS)}")
        if not 0 <= self.random_range_ratio < 1 or (self.random_range_ratio and self.dataset != "random"):
            raise LlmcalcError(f"--random-range-ratio {self.random_range_ratio:g}: a fraction in [0, 1) of the "
                               "random dataset's lengths (vllm bench's); leave it out with --dataset sharegpt")

    def requests(self) -> tuple[tuple[int, int], ...] | None:
        """Each request's (prompt, output) tokens in the order sent, or None where every request is alike."""
        if self.lengths is not None:
            return self.lengths
        if self.dataset == "sharegpt":
            return sharegpt_lengths(self.input_len, self.output_len, self.num_prompts)
        if self.random_range_ratio:
            return random_lengths(self.input_len, self.output_len, self.num_prompts, self.random_range_ratio)
        return None


@dataclass(frozen=True)
class Simulated:
    """What `vllm bench serve` reports of one run (seconds, tokens/s, requests/s), per replica."""

    duration: float
    completed: int
    ttft: tuple[float, float, float]  # mean, median, p99
    tpot: tuple[float, float]  # mean, median
    itl: tuple[float, float]
    e2e: tuple[float, float]
    mean_running: float  # sequences in the average step, time-weighted
    output_tokens: int
    input_tokens: int
    steps: int
    last_first_token: float = 0.0  # when the last request's first token came (its TTFT; the whole burst's prefill)


@dataclass(frozen=True)
class Performance:
    """A workload's predicted speed on one replica (`vllm bench serve`'s figures), with its roofline and what it
    assumed; ``record()`` is the JSON's "performance"."""

    engine: str
    engine_version: str
    work: Workload
    kv_requests: int  # requests of input_len + output_len tokens the KV cache holds at once
    max_num_seqs: int
    max_num_batched_tokens: int
    run: Simulated
    roofline_ttft: float  # one prompt's prefill alone, the roofline's
    roofline_tpot: float  # a decode step of the mean running sequences at the mean context, the roofline's
    scheduler: str = ""  # the engine's scheduler in words (engines.EngineProfile); "" for vLLM V1's
    kv_share: float = 1.0  # the engine's KV cache over vLLM's (engines.kv_share)
    chunked: bool = True  # the scheduler split prompts across steps (SchedulerPolicy.chunked)
    w4a16: str = ""  # the 4-bit GEMMs Marlin runs, in words (marlin.marlin_words); "" where none
    fp8_kv: str = ""  # the FP8 KV cache's attention kernels, in words (StepCost.fp8_kv_words); "" for 16 bits
    frontend_token_seconds: float = 0.0  # the API server's pace per streamed token (serving_speed's, measured)
    # the fitted constants the step read, by their JSON names (serving_speed's ENGINE_STEP_SECONDS, ...)
    fitted: tuple[tuple[str, float], ...] = ()

    @property
    def fits(self) -> bool:
        return self.kv_requests >= 1

    @property
    def output_tokens_per_second(self) -> float:
        return self.run.output_tokens / self.run.duration

    @property
    def total_tokens_per_second(self) -> float:
        return (self.run.output_tokens + self.run.input_tokens) / self.run.duration

    @property
    def requests_per_second(self) -> float:
        return self.run.completed / self.run.duration

    def record(self) -> dict:
        w, r = self.work, self.run
        prof = engines.profile(self.engine, None if self.engine == "vllm" else self.engine_version)
        running = max(r.mean_running, 1.0)
        return {
            "engine": self.engine, "engine_version": self.engine_version, "input_len": w.input_len,
            "output_len": w.output_len, "max_concurrency": w.max_concurrency, "request_rate": w.request_rate,
            "num_prompts": w.num_prompts, "mean_running_sequences": r.mean_running,
            "output_tokens_per_second": self.output_tokens_per_second,
            "total_tokens_per_second": self.total_tokens_per_second, "requests_per_second": self.requests_per_second,
            "ttft_seconds": dict(zip(("mean", "median", "p99"), r.ttft, strict=True)),
            "tpot_seconds": dict(zip(("mean", "median"), r.tpot, strict=True)),
            "itl_seconds": dict(zip(("mean", "median"), r.itl, strict=True)),
            "e2e_seconds": dict(zip(("mean", "median"), r.e2e, strict=True)),
            "roofline": {"ttft_seconds": self.roofline_ttft, "tpot_seconds": self.roofline_tpot,
                         "output_tokens_per_second": running / self.roofline_tpot},
            "assumptions": {
                "scheduler": self.scheduler or "vLLM V1: running requests first (a decode token each, or the next "
                             "prefill chunk), then waiting ones first come first served; chunked prefill within "
                             "max_num_batched_tokens",
                "admission": prof.admission,
                "lengths": ("vllm bench's ShareGPT sample: exponential at input_len and output_len's means within "
                            "vLLM's filter (prompt <= 1024, prompt + output <= 2048), seeded" if w.dataset == "sharegpt"
                            else f"uniform within {w.random_range_ratio:g} of input_len and output_len, seeded"
                            if w.random_range_ratio else "every request alike" if w.lengths is None
                            else "as given per request"),
                "frontend_token_seconds": self.frontend_token_seconds if w.served else 0.0,
                "arrivals": ("closed loop of max_concurrency clients" if w.max_concurrency and not w.request_rate
                             else f"Poisson at {w.request_rate:g} requests/s, seeded" if w.request_rate
                             else OFFLINE_WORDS.get(self.engine, "") if not w.served else "")
                            or "all requests at once (offline)",
                "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                "kv_cache_requests": self.kv_requests,
                **engines.assumptions(prof, self.kv_share, chunked=self.chunked,
                                      offline=w.max_concurrency is None and w.request_rate is None
                                      and not w.served),
                **dict(self.fitted),
                **({"intake_seconds": w.intake_seconds} if w.intake_seconds else {}),
                **({"w4a16_gemms": self.w4a16} if self.w4a16 else {}),
                **({"fp8_kv_cache": self.fp8_kv} if self.fp8_kv else {}),
            },
        }
