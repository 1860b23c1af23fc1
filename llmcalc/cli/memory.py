"""`memory`: training memory per GPU, and whether it fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..vocabulary import LOSS_IMPLS, OPTIMIZER_IMPLS
from .common import emit, load_hardware, load_measured
from .options import (
    POSITIVE_INT,
    attention_option,
    finetune_options,
    format_option,
    given,
    gpu_option,
    layout_options,
    model_argument,
    n_gpus_option,
    optimizer_option,
    recipe_dtype_option,
    recipe_of,
    recipe_option,
    recompute_option,
    refuse_unused,
    seq_len_option,
)
from .types import Choice, Number

if TYPE_CHECKING:
    from ..analytic.finetune_request import FinetuneRequest

MOVED = ("memory --inference has moved: use `llmcalc serve MODEL --gpu G --n-gpus N --max-model-len L` (weights, KV "
         "cache and blocks per GPU, concurrency)")


@click.command()
@model_argument
@seq_len_option
@recipe_option
@recipe_dtype_option
@optimizer_option
@click.option("--optimizer-bytes", type=Number(maximum=64),
              help="Instead of --optimizer: optimizer-state bytes per parameter (e.g. 12 for fp32 Adam + master).")
@click.option("--optimizer-impl", type=Choice(list(OPTIMIZER_IMPLS)), default="fused",
              show_default=True, help="Optimizer-step scratch: fused none, torch foreach a copy of every state.")
@recompute_option()
@attention_option
@click.option("--dropout", is_flag=True, help="Count dropout masks (GPT-3-style training; off for modern LLMs).")
@gpu_option(help="Accelerator preset: say whether it fits, and the largest micro-batch that does.")
@n_gpus_option(help="GPUs in all (default tp x cp x pp): dp = n / (tp x cp x pp).")
@layout_options
@click.option("--loss-impl", type=Choice(list(LOSS_IMPLS)), default="full", show_default=True,
              help="With --finetune: the LM head's cross-entropy: full (HF Trainer: the whole tokens x vocab logits "
                   "in fp32) or fused (Liger-Kernel's fused linear cross-entropy: one chunk of logits at a time).")
@click.option("--inference", is_flag=True, hidden=True, help="Moved: serving memory is `llmcalc serve`.")
@click.option("--context", "--weight-dtype", "--kv-dtype", "--prefill-chunk", "moved_option", hidden=True,
              help="Options of the moved --inference mode (kept so that old command lines reach its message).")
@click.option("--dp-shard", type=POSITIVE_INT, default=None,
              help="HSDP: shard weights and states over this many data-parallel ranks, replicate over the rest "
                   "(torchtitan's data_parallel_shard_degree).")
@finetune_options
@format_option
@click.pass_context
def memory(ctx: click.Context, model: str, seq_len: int, recipe: str, dtype: str | None, optimizer: str,
           optimizer_bytes: float | None, optimizer_impl: str, recompute: str, attention: str, dropout: bool,
           gpu: str | None, n_gpus: int | None, loss_impl: str, inference: bool, moved_option: str | None,
           finetune: FinetuneRequest, fmt: str, **layout: Any) -> None:
    """Training memory per GPU of MODEL, and whether it fits (serving memory: `llmcalc serve`)."""
    from ..analytic.memory_plan import MemoryRequest, plan_memory
    from ..views.memory import document

    if inference or moved_option is not None:
        raise click.UsageError(MOVED)
    device = load_hardware(gpu) if gpu else None
    if device is None:
        refuse_unused(ctx, ("reserve_gib",), "without --gpu")
    if optimizer_bytes is not None:
        refuse_unused(ctx, ("optimizer",), "with --optimizer-bytes (which replaces it)")
    refuse_unused(ctx, ("dtype",) if given(ctx, "recipe") else (), "with --recipe (memory reads --dtype only as the "
                  "recipe it names)")
    recipe, notes = recipe_of(ctx, recipe, dtype, gpu)
    layout = memory_layout(ctx, layout, seq_len)
    request = MemoryRequest(layout.pop("micro_batch"), seq_len, recipe, optimizer, optimizer_bytes,
                            optimizer_impl=optimizer_impl, recompute=recompute, attention=attention, dropout=dropout,
                            n_gpus=n_gpus, finetune=finetune, loss_impl=loss_impl, **layout)
    emit(document(plan_memory(load_measured(model, seq_len), request, device)), fmt, notes)


def memory_layout(ctx: click.Context, layout: dict[str, Any], seq_len: int) -> dict[str, Any]:
    """The shared layout options (options.layout_options) as MemoryRequest's fields: --zero only where typed (its
    default depends on --finetune), the global batch in sequences."""
    from .common import exact_batch_tokens

    tokens = exact_batch_tokens(layout.pop("global_batch_tokens"), seq_len)
    if tokens is not None:
        if layout["global_batch"] is not None:
            raise click.UsageError("give --global-batch (sequences) or --global-batch-tokens, not both")
        layout["global_batch"] = int(tokens // seq_len)
    layout["zero"] = layout["zero"] if given(ctx, "zero") else None
    return layout


COMMANDS = (memory,)
