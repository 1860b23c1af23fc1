"""`infer`'s static batch predicted: its B sequences sent at once through vLLM's LLM.generate (offline, no API
server), the engine's steps timed from kernels and its continuous batching simulated (serving_speed.plan_workload on
a replica sized as `serve` sizes it: max_model_len = prompt + generate, tp = --n-gpus, the same dtypes).

The figures keep the roofline's names (``KEYS``): time to first token = the batch's mean TTFT (chunked prefill gives
some requests their first token before others); decode seconds per token = the mean TPOT ((latency - TTFT) /
(generate - 1), None for one generated token: no decode step); total = the run's duration, until the last request
ends (for a batch that prefills in one step every request ends then, so it is each request's latency too);
tokens/s = batch x generate / total; prefill tokens/s = batch x prompt / the time until the last request's first
token (the whole batch's prefill; batch x prompt / TTFT when it prefills in one step).

Where no prediction can be made the answer is a reason instead (``predict_static``): the roofline stands alone.
"""

from __future__ import annotations

from ..errors import LlmcalcError
from ..records import dataclass
from .inference import InferenceEstimate

KEYS = ("time_to_first_token_seconds", "decode_seconds_per_token", "total_seconds", "tokens_per_second",
        "prefill_tokens_per_second")


def roofline_record(est: InferenceEstimate) -> dict[str, float]:
    """The roofline's figures under ``KEYS``: the batch prefilled in one step, then every decode step."""
    return {"time_to_first_token_seconds": est.prefill.seconds,
            "decode_seconds_per_token": est.decode_seconds_per_token, "total_seconds": est.total_seconds,
            "tokens_per_second": est.tokens_per_second,
            "prefill_tokens_per_second": est.batch * est.prompt / est.prefill.seconds}


@dataclass(frozen=True)
class StaticPrediction:
    """The simulated offline run of the batch (serving_speed.Performance) and what it assumed."""

    batch: int
    prompt: int
    generate: int
    engine_version: str
    kv_requests: int  # requests of prompt + generate tokens the KV cache holds at once
    max_num_batched_tokens: int
    measured_tables: bool  # the GPU's measured kernel tables timed attention and all-reduces
    ttft: float
    tpot: float | None
    total: float
    last_first_token: float

    def record(self) -> dict[str, float | None]:
        return {"time_to_first_token_seconds": self.ttft, "decode_seconds_per_token": self.tpot,
                "total_seconds": self.total, "tokens_per_second": self.batch * self.generate / self.total,
                "prefill_tokens_per_second": self.batch * self.prompt / self.last_first_token}

    def describe(self) -> str:
        """The JSON's "prediction": what the top-level figures are."""
        return (f"vllm {self.engine_version} offline batch (LLM.generate): engine steps timed from kernels, "
                "continuous batching simulated (analytic/serving_speed.py)")


def predict_static(est: InferenceEstimate) -> StaticPrediction | str:
    """`infer`'s batch as vLLM runs it, or why it cannot be predicted (one line: a model transformers measured, a GPU
    preset without matmul and network blocks, a KV cache or max_num_seqs that cannot hold the whole batch)."""
    from .measured_inference import MeasuredInference

    if isinstance(est, MeasuredInference):
        return "a model transformers measured (the workload model runs on llmcalc's formulas)"
    from .kernels import device_for, steptime_presets

    try:
        device_for(est.accelerator.key)
    except LlmcalcError:
        return (f"{est.accelerator.key}'s preset has no matmul and network blocks, which the engine's step time "
                f"needs (presets with them: {', '.join(steptime_presets())})")
    from . import kernel_tables
    from .serving import plan_serving
    from .serving_speed import Workload, kv_requests, plan_workload

    length = est.prompt + est.generate
    try:  # the weights as infer read them: as shipped unless typed (est.weight_format is None when typed)
        serve = plan_serving(est.spec, est.accelerator, est.n_gpus, max_model_len=length,
                             weight_dtype=est.weight_dtype if est.weight_format is None else None,
                             kv_dtype=est.kv_dtype, compute_dtype=est.compute_dtype)
        held, (tokens, seqs) = kv_requests(serve, length), serve.batch_defaults
    except LlmcalcError as exc:
        return str(exc).splitlines()[0]
    if held < 1:
        return (f"vLLM's default share of the GPU (--gpu-memory-utilization {serve.utilization:g}) leaves no KV cache "
                f"for one request of {length:,} tokens (`llmcalc serve` says it does NOT fit)")
    if held < est.batch:
        return (f"vLLM's KV cache holds {held:,} request{'s' if held != 1 else ''} of {length:,} tokens at once "
                f"(--gpu-memory-utilization {serve.utilization:g}), not the batch of {est.batch:,}")
    if seqs < est.batch:
        return (f"vLLM runs at most max_num_seqs {seqs:,} sequences at once on {est.accelerator.key}, not the batch "
                f"of {est.batch:,}")
    perf = plan_workload(serve, Workload(est.prompt, est.generate, num_prompts=est.batch, served=False))
    run = perf.run
    return StaticPrediction(batch=est.batch, prompt=est.prompt, generate=est.generate,
                            engine_version=perf.engine_version, kv_requests=held, max_num_batched_tokens=tokens,
                            measured_tables=kernel_tables.has_tables(est.accelerator.key), ttft=run.ttft[0],
                            tpot=run.tpot[0] if est.generate > 1 else None, total=run.duration,
                            last_first_token=run.last_first_token)
