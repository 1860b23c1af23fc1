"""`infer` and `serve`: a model answering requests, on a roofline and as vLLM sizes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

import click

from ..errors import LlmcalcError
from ..validate import MAX_GENERATE
from .common import emit, load_hardware, load_measured
from .options import (
    LENGTH,
    POSITIVE_INT,
    format_option,
    gpu_option,
    model_argument,
    refuse_unused,
    serving_options,
    vllm_options,
    workload_options,
)
from .types import Count

if TYPE_CHECKING:
    from ..spec import ModelSpec as ModelSpec


@click.command()
@model_argument
@gpu_option(required=True)
@click.option("--prompt", "--input-len", "prompt", type=LENGTH, default="2k", show_default=True,
              help="Prompt tokens per sequence (--input-len: vllm bench latency's spelling).")
@click.option("--generate", "--output-len", "generate", type=Count(whole=True, maximum=MAX_GENERATE), default=256,
              show_default=True, help=f"Tokens to generate (at most {MAX_GENERATE:,}: the roofline sums every decode "
                                      "step; --output-len: vllm bench latency's spelling).")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True, help="Concurrent sequences.")
@serving_options
@format_option
def infer(model: str, gpu: str, prompt: int, generate: int, batch_size: int, weight_dtype: str | None,
          kv_dtype: str | None,
          compute_dtype: str | None, n_gpus: int, fmt: str) -> None:
    """Time to first token, decode and tokens/s of a static batch of MODEL: as vLLM runs it, and on a roofline."""
    from ..analytic.measured_inference import plan_inference
    from ..analytic.static_batch import predict_static
    from ..views.infer import document

    est = plan_inference(load_measured(model), load_hardware(gpu), batch_size, prompt, generate,
                         weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype, n_gpus=n_gpus)
    emit(document(est, predict_static(est)), fmt, est.warnings)


WORKLOAD = ("input_len", "output_len", "max_concurrency", "request_rate", "num_prompts", "tpot", "engine",
            "engine_version", "dataset", "random_range_ratio", "num_scheduler_steps")


@click.command()
@model_argument
@gpu_option(required=True)
@serving_options
@vllm_options
@workload_options
@format_option
@click.pass_context
def serve(ctx: click.Context, model: str, gpu: str, weight_dtype: str | None, kv_dtype: str | None,
          compute_dtype: str | None, n_gpus: int, fmt: str, **vllm: Any) -> None:
    """Serving MODEL with vLLM: weights as shipped, memory per GPU, hybrid KV cache, concurrency, throughput.

    Weights as the checkpoint ships them, the memory vLLM sees per GPU and its hybrid paged KV cache, concurrent
    sequences at the max length, throughput against concurrency; with --input-len and --output-len, the throughput,
    TTFT, TPOT and latency of that workload (closed loop, request rate or offline); with --concurrency, the fewest
    GPUs and the layout that serve it."""
    from ..analytic.serving import plan_capacity, plan_serving
    from ..views.serve import capacity_document, document

    spec, device = _load(model, gpu, vllm["max_model_len"], vllm["engine"])
    dtypes: dict[str, Any] = dict(weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    targets = {k: vllm.pop(k) for k in ("concurrency", "ttft", "tokens_per_second")}
    work = {k: vllm.pop(k) for k in WORKLOAD}
    if work["input_len"] is not None or work["output_len"] is not None:
        return _workload(ctx, spec, device, n_gpus, fmt=fmt, dtypes=dtypes, vllm=vllm, work={**work, **targets})
    refuse_unused(ctx, WORKLOAD[2:], "without --input-len and --output-len (the workload they describe)")
    if targets["concurrency"] is None:
        refuse_unused(ctx, ("ttft", "tokens_per_second"), "without --concurrency (the targets of its search)")
    if not _is_formula(spec, targets["concurrency"] and "--concurrency"):
        return _measured(spec, device, n_gpus, fmt=fmt, dtypes=dtypes, vllm=vllm)
    if targets["concurrency"] is None:
        est = plan_serving(spec, device, n_gpus, **dtypes, **vllm)
        est.check_starts()
        return emit(document(est), fmt, est.warnings)
    refuse_unused(ctx, ("n_gpus", "pp", "dp", "expert_parallel"), "with --concurrency (its search answers them)")
    plan = plan_capacity(spec, device, vllm.pop("max_model_len") or spec.max_seq_len or 0, targets["concurrency"],
                         ttft_seconds=targets["ttft"], tokens_per_second=targets["tokens_per_second"], **dtypes,
                         **{k: v for k, v in vllm.items() if k not in ("pp", "dp", "expert_parallel")})
    emit(capacity_document(plan), fmt, plan.best.warnings)


def _load(model: str, gpu: str, max_model_len: int | None, engine: str) -> tuple[Any, Any]:
    """The model and the GPU; a --max-model-len past the config's positions refused as vLLM refuses it (TensorRT-LLM
    builds for the length it is given: `bench_max_seq_len`)."""
    from ..analytic.vllm import check_max_model_len

    spec = load_measured(model)
    if max_model_len is not None and engine != "trtllm":
        check_max_model_len(max_model_len, spec.max_seq_len)
    return spec, load_hardware(gpu)


def bench_max_seq_len(work: dict[str, Any]) -> int:
    """TensorRT-LLM's max_seq_len where --max-model-len is not given: the workload's longest request (prompt plus
    output), whatever the config's max_position_embeddings (past it, with the usual warning).

    trtllm-bench builds its engine for the dataset's longest request, not the config's positions
    (NVIDIA/TensorRT-LLM@000a01de:tensorrt_llm/bench/build/build.py: ``max_seq_len =
    metadata.max_sequence_length`` ... ``BuildConfig(max_batch_size=max_batch_size, max_seq_len=max_seq_len,
    max_num_tokens=max_num_tokens)``): a 20,000/2,000 run of a 4,096-position Llama 2 is served where vLLM refuses
    it, and Llama 4 Scout's 10M-token config length does not leave one GPU without room for a single request."""
    from ..analytic.serving_speed import Workload

    shape = Workload(work["input_len"], work["output_len"], num_prompts=work["num_prompts"], dataset=work["dataset"],
                     random_range_ratio=work["random_range_ratio"] or 0.0)
    return max([shape.input_len + shape.output_len, *(i + o for i, o in shape.requests() or ())])


def _is_formula(spec: Any, refused: str | None) -> TypeGuard[ModelSpec]:
    """Whether llmcalc's formulas describe `spec` (else transformers measured it); `refused`: an option that needs
    the formulas, refused in one line for a measured model."""
    from ..spec import ModelSpec

    if isinstance(spec, ModelSpec):
        return True
    if refused:
        raise LlmcalcError(f"{refused}: {spec.model_type} is measured by transformers (this answer runs on "
                           f"llmcalc's formulas); drop {refused} and pass --n-gpus")
    return False


def _measured(spec: Any, device: Any, n_gpus: int, fmt: str, dtypes: dict[str, Any], vllm: dict[str, Any]) -> None:
    """`serve` of a model transformers measured (analytic.measured is not imported otherwise)."""
    from ..analytic.measured_serving import measured_serving
    from ..views.serve import document

    measured = measured_serving(spec, device, n_gpus, **dtypes, **vllm)
    measured.check_starts()
    emit(document(measured), fmt, measured.warnings)


def _workload(ctx: click.Context, spec: Any, device: Any, n_gpus: int, fmt: str, dtypes: dict[str, Any],
              vllm: dict[str, Any], work: dict[str, Any]) -> None:
    """`serve --input-len --output-len`: the workload's speed on one replica (analytic/serving_speed.py), or with
    --max-ttft / --max-tpot the fewest GPUs that serve it within them (analytic/serving_sizing.py)."""
    from ..analytic.engine_versions import default_kv_dtype
    from ..analytic.serving import plan_serving
    from ..analytic.serving_speed import plan_workloads
    from ..analytic.vllm import vllm_version
    from ..hardware import MemoryOnly
    from ..render.progress import Progress
    from ..views.serve import workload_document

    if isinstance(device, MemoryOnly):  # --gpu-memory: a workload's speed needs a preset; the line names them
        device.peak()
    if work["input_len"] is None or work["output_len"] is None:
        raise click.UsageError("--input-len and --output-len go together: the workload's prompt and generated "
                               "tokens per request")
    refuse_unused(ctx, ("concurrency", "tokens_per_second"),
                  "with --input-len (--max-concurrency or --request-rate set the workload)")
    _is_formula(spec, "--input-len")
    version, targets = work.pop("engine_version"), (work.pop("ttft"), work.pop("tpot"))
    work.pop("concurrency"), work.pop("tokens_per_second")
    if work["engine"] == "vllm":
        if version and vllm["version"] and version != vllm["version"]:
            raise click.UsageError(f"--engine-version {version} and --vllm-version {vllm['version']} disagree; "
                                   "give one")
        if version:
            vllm_version(version, option="--engine-version")  # refused in its own option's name
        vllm["version"], version = vllm["version"] or version, None
    work["engine_version"] = version
    if work["engine"] == "trtllm" and vllm["max_model_len"] is None:
        vllm["max_model_len"] = bench_max_seq_len(work)
    if targets != (None, None):
        return _sizing(ctx, spec, device, fmt=fmt, dtypes=dtypes, vllm=vllm, work=work, targets=targets)
    est = plan_serving(spec, device, n_gpus, **dtypes, **vllm)
    kv = None if dtypes["kv_dtype"] else default_kv_dtype(work["engine"], est.weights)
    if kv:  # TensorRT-LLM's FP8 KV cache for FP8 / NVFP4 weights (analytic/engine_versions.py)
        est = plan_serving(spec, device, n_gpus, **{**dtypes, "kv_dtype": kv}, **vllm)
    bar = Progress(len(work["max_concurrency"] or (None,)), "simulating the workload")  # on a terminal only
    try:
        plan = plan_workloads(est, **work, progress=bar.step)  # a request the KV cache cannot hold is refused there
    finally:
        bar.close()
    if work["engine"] == "vllm":  # and a max length it cannot hold once, as vLLM refuses to start
        est.check_starts()
    emit(workload_document(plan), fmt, est.warnings)


def _sizing(ctx: click.Context, spec: Any, device: Any, fmt: str, dtypes: dict[str, Any], vllm: dict[str, Any],
            work: dict[str, Any], targets: tuple[float | None, float | None]) -> None:
    """`serve --input-len --output-len --max-ttft/--max-tpot` with traffic: the fewest GPUs and their layout."""
    from ..analytic.serving_sizing import TP_CHOICES, size_workload
    from ..analytic.serving_speed import Workload
    from ..render.progress import Progress
    from ..views.serve import sizing_document

    refuse_unused(ctx, ("n_gpus", "pp", "dp", "expert_parallel"), "with --max-ttft/--max-tpot (the search answers "
                                                                  "the GPUs and the layout)")
    clients = work.pop("max_concurrency")
    if clients is not None and len(clients) > 1:
        raise click.UsageError("--max-concurrency: one count with --max-ttft/--max-tpot (the traffic to size for)")
    if work.pop("num_scheduler_steps") != 1:
        raise click.UsageError("--num-scheduler-steps: the search for the fewest GPUs sizes vLLM V1 replicas; leave "
                               "it out with --max-ttft/--max-tpot")
    if work.pop("engine") != "vllm" or work.pop("engine_version"):
        raise click.UsageError("--engine: the search for the fewest GPUs sizes vLLM replicas; leave out --engine "
                               "and --engine-version with --max-ttft/--max-tpot")
    settings = {k: v for k, v in vllm.items() if k not in ("pp", "dp", "expert_parallel")}
    bar = Progress(len(TP_CHOICES), "sizing: tensor-parallel degrees")
    try:
        plan = size_workload(spec, device, Workload(max_concurrency=clients[0] if clients else None, **work),
                             max_ttft=targets[0], max_tpot=targets[1], progress=bar.step, **dtypes, **settings)
    finally:
        bar.close()
    emit(sizing_document(plan), fmt, [])


COMMANDS = (infer, serve)
