"""`infer` and `serve`: a model answering requests, on a roofline and as vLLM sizes it."""

from __future__ import annotations

import click

from ..validate import MAX_GENERATE
from .common import emit, load_hardware, load_model
from .options import LENGTH, MFU, POSITIVE_INT, format_option, gpu_option, model_argument, serving_options
from .types import Count


@click.command()
@model_argument
@gpu_option(required=True)
@click.option("--prompt", type=LENGTH, default="2k", show_default=True, help="Prompt tokens per sequence.")
@click.option("--generate", type=Count(whole=True, maximum=MAX_GENERATE), default=256, show_default=True,
              help=f"Tokens to generate (at most {MAX_GENERATE:,}: the roofline sums every decode step).")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True, help="Concurrent sequences.")
@serving_options
@format_option
def infer(model: str, gpu: str, prompt: int, generate: int, batch_size: int, weight_dtype: str, kv_dtype: str | None,
          compute_dtype: str | None, n_gpus: int, fmt: str) -> None:
    """Prefill and decode time and tokens/s of MODEL on a GPU: a roofline, an upper bound on speed."""
    from ..analytic.inference import plan_inference
    from ..views.infer import document

    est = plan_inference(load_model(model), load_hardware(gpu), batch_size, prompt, generate,
                         weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype, n_gpus=n_gpus)
    emit(document(est), fmt, est.warnings)


@click.command()
@model_argument
@gpu_option(required=True)
@serving_options
@click.option("--max-model-len", type=LENGTH, default=None,
              help="Tokens per request the KV cache must hold (default: the model's max_position_embeddings).")
@click.option("--gpu-memory-utilization", type=MFU, default=0.9, show_default=True,
              help="Share of each GPU's memory vLLM may use (weights, activations, KV cache).")
@click.option("--block-size", type=POSITIVE_INT, default=16, show_default=True, help="Tokens per paged-KV block.")
@format_option
def serve(model: str, gpu: str, weight_dtype: str, kv_dtype: str | None, compute_dtype: str | None, n_gpus: int,
          max_model_len: int | None, gpu_memory_utilization: float, block_size: int, fmt: str) -> None:
    """Serving MODEL on N GPUs (tensor parallel), sized as vLLM sizes it: weights and paged KV cache per
    GPU, concurrent sequences at the max length, throughput and latency against concurrency."""
    from ..analytic.serving import plan_serving
    from ..views.serve import document

    est = plan_serving(load_model(model), load_hardware(gpu), n_gpus, max_model_len,
                       gpu_memory_utilization=gpu_memory_utilization, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                       compute_dtype=compute_dtype, block_size=block_size)
    emit(document(est), fmt, est.warnings)


COMMANDS = (infer, serve)
