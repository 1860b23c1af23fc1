"""`layout`'s best layout as the `train` and `memory` command lines that reproduce it (issue 41: one layout
everywhere): the layout's degrees, micro-batch, recomputation, ZeRO stage and schedule, plus every option typed to
`layout` that the other command takes, rendered back as flags."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..analytic.step.search import LayoutSearch

TOKENS = "1T"  # train needs a token count; the step it predicts does not depend on it
MEMORY_TAKES = ("recipe", "optimizer", "dtype", "reserve_gib")  # of layout's options, what memory reads
TRAIN_SKIPS = ("model", "top", "exhaustive", "fmt", "global_batch", "global_batch_tokens", "recompute", "reserve_gib",
               "n_gpus", "gpu", "seq_len", "causal", "tp_overlap")  # written from the layout itself, or layout's own


def _flag(ctx: click.Context, name: str, value: Any) -> list[str]:
    """One typed option of `ctx`'s command as the flags that give it again (--x/--no-x by value)."""
    param = next(p for p in ctx.command.params if p.name == name)
    if isinstance(param, click.Option) and param.is_flag:
        return [param.opts[0]] if value else list(param.secondary_opts[:1])
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return [param.opts[0], str(value)]


_SOURCES = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)  # typed


def _typed(ctx: click.Context, names: Any) -> list[str]:
    out: list[str] = []
    for name in names:
        if ctx.get_parameter_source(name) in _SOURCES:
            out += _flag(ctx, name, ctx.params[name])
    return out


def reproduce(ctx: click.Context, model: str, search: LayoutSearch) -> dict[str, str | None]:
    """{"train": the train command predicting the best layout's step, "memory": the memory command giving its
    per-GPU figure, or None where memory cannot take the layout (cp or vpp > 1: memory has no --cp, --vpp),
    "memory_why": why not}."""
    pred, _ = search.ranked[0]
    lay = pred.layout
    where = ["--gpu", search.gpu, "--n-gpus", str(search.n_gpus), "--seq-len", str(search.seq_len)]
    degrees = ["--tp", str(lay.tp), "--pp", str(lay.pp)] + (["--ep", str(lay.ep)] if lay.ep > 1 else []) \
        + (["--etp", str(lay.expert_tp)] if lay.expert_tp != lay.tp else [])
    searched = [p.name for p in ctx.command.params if p.name in ("ep_dispatcher", "ep_overlap")]
    expert = [f for name in searched if ctx.get_parameter_source(name) not in _SOURCES  # what layout chose
              and getattr(lay, name) != ctx.params[name] for f in _flag(ctx, name, getattr(lay, name))]
    common = ["--micro-batch", str(lay.micro_batch), "--zero", str(lay.zero), "--recompute", pred.recompute]
    train = ["llmcalc", "train", model, "--tokens", TOKENS, *where, "--global-batch", str(search.global_batch),
             *degrees, "--vpp", str(lay.vpp), "--cp", str(lay.cp), *common, "--schedule", lay.schedule, *expert,
             *_flag(ctx, "causal", ctx.params["causal"]), *_flag(ctx, "tp_overlap", ctx.params["tp_overlap"]),
             *_typed(ctx, [p.name for p in ctx.command.params if p.name not in TRAIN_SKIPS])]
    out: dict[str, str | None] = {"train": shlex.join(train), "memory": None, "memory_why": None}
    if lay.cp > 1 or lay.vpp > 1:
        out["memory_why"] = ("memory takes no " + " or ".join(f"--{k} ({k} {v})" for k, v in
                                                              (("cp", lay.cp), ("vpp", lay.vpp)) if v > 1)
                             + ": its figure is layout's memory column")
    else:
        out["memory"] = shlex.join(["llmcalc", "memory", model, *where, *degrees, *common,
                                    *_typed(ctx, MEMORY_TAKES)])
    return out
