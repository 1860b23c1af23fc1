"""`presets`, `params` and `flops`: what a model is, before any hardware."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .common import emit, load_counted
from .options import LENGTH, finetune_options, format_option, micro_batch_option, model_argument, sequence_options

if TYPE_CHECKING:
    from ..analytic.finetune_request import FinetuneRequest


@click.command()
@format_option
def presets(fmt: str) -> None:
    """Every model and accelerator preset, one line each."""
    from ..views.presets import document

    emit(document(), fmt)


@click.command()
@model_argument
@finetune_options
@format_option
def params(model: str, finetune: FinetuneRequest, fmt: str) -> None:
    """Exact parameter count of MODEL by component, beside the classic approximations.

    MODEL is a preset name (see `llmcalc presets`), a Hugging Face config.json, or a folder
    holding one.
    """
    from ..fallback import count_model
    from ..spec import model_source
    from ..views.params import document

    cfg = finetune.config()
    count, ft = count_model(load_counted(model), cfg)
    emit(document(count, model_source(model), ft), fmt)


@click.command()
@model_argument
@sequence_options
@micro_batch_option
@click.option("--decoder-seq-len", type=LENGTH, default=None,
              help="Encoder-decoder models: decoder tokens per sequence (default: --seq-len).")
@finetune_options
@format_option
def flops(model: str, seq_len: int, causal: bool, recompute: str, micro_batch: int, decoder_seq_len: int | None,
          finetune: FinetuneRequest, fmt: str) -> None:
    """Forward and backward FLOPs of one step of MODEL, per operation, with the rules of thumb."""
    from ..fallback import model_flops
    from ..views.flops import document

    cfg = finetune.config()
    answer = model_flops(load_counted(model, seq_len), micro_batch, seq_len, causal=causal, recompute=recompute,
                         decoder_seq_len=decoder_seq_len, cfg=cfg)
    emit(document(answer), fmt)


COMMANDS = (presets, params, flops)
