"""`train`, `plan` and `layout`: what a training run takes, what a budget buys, how to lay a model out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..validate import MAX_COMPUTE, MAX_DAYS
from .common import emit, exact_batch_tokens, load_counted, load_hardware, load_measured
from .options import (
    MFU,
    MODEL_NAME,
    PARAMS,
    POSITIVE_INT,
    TFLOPS,
    TOKENS,
    TOKENS_HELP,
    causal_option,
    finetune_options,
    format_option,
    given,
    goodput_option,
    gpu_option,
    layout_options,
    model_argument,
    n_gpus_option,
    peak_dtype_option,
    price_option,
    recompute_option,
    refuse_unused,
    seq_len_option,
    sequence_options,
    step_model_options,
    step_options,
    tp_overlap_option,
    typed,
)
from .types import Count, Number

if TYPE_CHECKING:
    from ..analytic.finetune_request import FinetuneRequest
    from ..analytic.measured import MeasuredModel


@click.command()
@click.argument("model", type=MODEL_NAME, required=False)
@click.option("--params", "n_params", type=PARAMS, help="No model: a parameter count for 6·N·T (e.g. 7B).")
@click.option("--tokens", type=TOKENS, required=True, help=TOKENS_HELP)
@gpu_option(required=True)
@n_gpus_option(default=1)
@click.option("--mfu", type=MFU, help="Model FLOPs utilization in (0, 1]: 0.4 or 40%.")
@click.option("--achieved-tflops", type=TFLOPS,
              help="Instead of --mfu: achieved TFLOP/s per GPU (hardware FLOPs, recomputation included).")
@price_option
@goodput_option
@peak_dtype_option
@sequence_options
@finetune_options
@step_options
@format_option
@click.pass_context
def train(ctx: click.Context, model: str | None, n_params: float | None, tokens: float, gpu: str, n_gpus: int,
          mfu: float | None, achieved_tflops: float | None, usd_per_gpu_hour: float | None, goodput: float, dtype: str,
          seq_len: int, causal: bool, recompute: str, finetune: FinetuneRequest, fmt: str, **step: Any) -> None:
    """Training FLOPs, GPU-hours, wall-clock, cost and energy for TOKENS on N GPUs.

    Without --mfu or --global-batch, the MFU is predicted on the layout `llmcalc layout` recommends."""
    from ..analytic.training import TrainRequest, plan_training
    from ..spec import ModelSpec
    from ..views.train import document

    step["global_batch_tokens"] = exact_batch_tokens(step["global_batch_tokens"], seq_len)
    request = TrainRequest(tokens, gpu, model=model, n_params=n_params, n_gpus=n_gpus, dtype=dtype, seq_len=seq_len,
                           causal=causal, recompute=recompute, mfu=mfu, achieved_tflops=achieved_tflops,
                           usd_per_gpu_hour=usd_per_gpu_hour, finetune=finetune, layout=typed(ctx, step),
                           goodput=goodput, recompute_given=bool(given(ctx, "recompute")))
    accelerator = load_hardware(gpu)
    if model is None:
        refuse_unused(ctx, ("seq_len", "causal"), "with --params (6·N·T has no sequence length); give a MODEL")
    counted = None if model is None else load_counted(model, seq_len)
    steps = None
    if model is not None and not isinstance(counted, ModelSpec) and request.predicts_step:
        measured = load_measured(model, seq_len)  # what train's step model times of a model without a formula
        steps = None if isinstance(measured, ModelSpec) else measured
    plan = plan_training(request, counted, accelerator, steps)
    emit(document(plan), fmt, plan.warnings)


@click.command()
@click.option("--compute", type=Count(maximum=MAX_COMPUTE), help="A compute budget in FLOPs (e.g. 1e24).")
@gpu_option(help="Or: the cluster's accelerator preset ...")
@n_gpus_option(help="... how many (1k = 1,000) ...")
@click.option("--days", type=Number(maximum=MAX_DAYS), help="... for how long (days) ...")
@click.option("--mfu", type=MFU, help="... at which model FLOPs utilization (0.4 or 40%).")
@goodput_option
@peak_dtype_option
@format_option
@click.pass_context
def plan(ctx: click.Context, compute: float | None, gpu: str | None, n_gpus: int | None, days: float | None,
         mfu: float | None, goodput: float, dtype: str, fmt: str) -> None:
    """Compute-optimal model size and tokens for a FLOP budget, or for what a cluster delivers."""
    from ..analytic.training import ComputeBudget, plan_budget
    from ..views.plan import document

    budget = ComputeBudget(compute=compute, gpu=gpu, n_gpus=n_gpus, days=days, mfu=mfu, dtype=dtype, goodput=goodput)
    if compute is not None:
        refuse_unused(ctx, ("dtype", "goodput"), "with --compute (they turn a cluster's days into FLOPs)")
    emit(document(plan_budget(budget, None if gpu is None else load_hardware(gpu))), fmt)


@click.command()
@model_argument
@gpu_option(help="Accelerator preset with a network block (see `llmcalc presets`).", required=True)
@n_gpus_option(required=True)
@seq_len_option
@layout_options
@recompute_option(default=None, help="Activation recomputation: none, selective (attention) or full (one checkpoint "
                                     "per block). Default: the least that fits, per layout.")
@causal_option
@tp_overlap_option
@step_model_options
@peak_dtype_option
@click.option("--top", type=POSITIVE_INT, default=10, show_default=True, help="How many layouts to list.")
@click.option("--exhaustive", is_flag=True, help="Evaluate every layout (memory, stages, DP) instead of only those "
                                                 "whose lower bound can beat the best: the counts and the losers' "
                                                 "table then read them all.")
@format_option
@click.pass_context
def layout(ctx: click.Context, model: str, gpu: str, n_gpus: int, seq_len: int, global_batch: int | None,
           global_batch_tokens: float | None, recompute: str | None, causal: bool, tp_overlap: bool, dtype: str,
           reserve_gib: float, top: int, exhaustive: bool, fmt: str, **step: Any) -> None:
    """Rank the parallel layouts of MODEL on N GPUs that fit in memory, by predicted throughput (a layout option
    given, --tp 8 say, fixes that degree: only layouts with it are tried)."""
    from ..analytic.pipeline_layout import layout_options as layout_given
    from ..analytic.precision import step_recipe
    from ..analytic.step.search import rank_layouts
    from ..analytic.step.train import global_batch_sequences
    from ..render.progress import progress_bars
    from ..spec import ModelSpec
    from ..views.layout import document
    from .reproduce import reproduce

    global_batch_tokens = exact_batch_tokens(global_batch_tokens, seq_len)
    global_batch_sequences(global_batch, global_batch_tokens, seq_len, required=True)  # before any model is built
    spec = load_measured(model, seq_len)
    step, notes = step_recipe(dtype if given(ctx, "dtype") else None, gpu,
                              layout_given(typed(ctx, step)))  # --dtype fp8: FP8
    search_args = dict(global_batch=global_batch, global_batch_tokens=global_batch_tokens, causal=causal,
                       recompute=recompute, tp_overlap=tp_overlap if given(ctx, "tp_overlap") else None, top=top,
                       dtype=dtype, reserve_gib=reserve_gib, **step)
    with progress_bars("layouts") as progress:
        if isinstance(spec, ModelSpec):
            search = rank_layouts(spec, gpu, n_gpus, seq_len, progress=progress, exhaustive=exhaustive,
                                  **search_args)
        else:  # a model_type without a formula: what transformers measured of it
            search = _measured_layouts(model, spec, gpu, n_gpus, seq_len, progress=progress, **search_args)
    emit(document(search, top, recompute, reproduce(ctx, model, search)), fmt, notes)


def _measured_layouts(model: str, measured: MeasuredModel, gpu: str, n_gpus: int, seq_len: int, **search: Any) -> Any:
    """`layout`'s search for a model transformers measured, MFU's FLOPs from its counted forward (fallback)."""
    from ..analytic.measured_step import rank_measured_layouts
    from ..fallback import FallbackModel, step_flops

    counted = load_counted(model, seq_len)
    assert isinstance(counted, FallbackModel)  # the same config: no formula either
    flops = step_flops(counted, 1, search["causal"], "none")
    search["tp_overlap"] = bool(search["tp_overlap"])  # the measured search times the overlap as given (off if not)
    return rank_measured_layouts(measured, gpu, n_gpus, seq_len, model_flops_per_token=flops["flops_per_token"],
                                 hardware_flops_per_token=flops["hardware_flops_per_token"], **search)


COMMANDS = (train, plan, layout)
