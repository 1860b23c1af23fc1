"""`layout`'s best layout as the `train`, `memory` and `report` command lines that reproduce it (issue 41: one layout
everywhere): the layout's degrees, micro-batch, global batch, recomputation, ZeRO stage and schedule, plus every option
typed to `layout` that the other command takes, rendered back as flags. Each line, run as printed, gives the best
row's step time (train), memory per GPU and fit (memory, train, report) and plans that layout (report)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..analytic.step.search import LayoutSearch

TOKENS = "1T"  # train needs a token count; the step it predicts does not depend on it
# of layout's options, what memory and report read besides the layout itself
MEMORY_TAKES = ("recipe", "optimizer", "dtype", "reserve_gib", "sequence_parallel", "first_stage_layers",
                "last_stage_layers", "pipeline_layout", "dp_shard")
REPORT_TAKES = ("recipe", "dtype", "reserve_gib", "causal", "tp", "cp", "pp", "vpp", "ep", "etp", "micro_batch",
                "zero", "sequence_parallel", "first_stage_layers", "last_stage_layers", "pipeline_layout")
TRAIN_SKIPS = ("model", "top", "exhaustive", "fmt", "global_batch", "global_batch_tokens", "recompute", "reserve_gib",
               "n_gpus", "gpu", "seq_len", "causal", "tp_overlap", "tp", "cp", "pp", "vpp", "ep", "etp",
               "micro_batch", "zero")  # written from the layout itself, or layout's own


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


def _report(ctx: click.Context, model: str, where: list[str], batch: list[str], recompute: str) -> tuple[str | None,
                                                                                                         str | None]:
    """The report planning the best layout (report's --plan-layout best runs layout's search: the same best), or
    None and why where layout was given an option report does not take."""
    sources = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    other = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) in sources
             and p.name not in (*REPORT_TAKES, "model", "gpu", "n_gpus", "seq_len", "global_batch",
                                "global_batch_tokens", "recompute", "top", "exhaustive", "fmt")]
    if other:
        return None, f"report takes no {', '.join(other)}: its plan is layout's without them"
    line = ["llmcalc", "report", model, *where, *batch, "--recompute", recompute, *_typed(ctx, REPORT_TAKES)]
    return shlex.join(line), None


def reproduce(ctx: click.Context, model: str, search: LayoutSearch) -> dict[str, str | None]:
    """{"train": the train command predicting the best layout's step (and its memory and fit), "memory": the memory
    command giving its per-GPU figure and fit, "report": the report that plans it, or None and "report_why"}."""
    pred, _ = search.ranked[0]
    lay = pred.layout
    where = ["--gpu", search.gpu, "--n-gpus", str(search.n_gpus), "--seq-len", str(search.seq_len)]
    batch = ["--global-batch", str(search.global_batch)]
    degrees = ["--tp", str(lay.tp), "--cp", str(lay.cp), "--pp", str(lay.pp), "--vpp", str(lay.vpp)] \
        + (["--ep", str(lay.ep)] if lay.ep > 1 else []) \
        + (["--etp", str(lay.expert_tp)] if lay.expert_tp != lay.tp else [])
    searched = [p.name for p in ctx.command.params if p.name in ("ep_dispatcher", "ep_overlap")]
    expert = [f for name in searched if ctx.get_parameter_source(name) not in _SOURCES  # what layout chose
              and getattr(lay, name) != ctx.params[name] for f in _flag(ctx, name, getattr(lay, name))]
    hsdp = ["--dp-shard", str(lay.dp_shard)] if lay.dp_shard and ctx.get_parameter_source("dp_shard") not in _SOURCES \
        else []  # the HSDP shard group layout chose
    stages = [f for name in ("first_stage_layers", "last_stage_layers")  # the uneven split layout chose
              if getattr(lay, name) and ctx.get_parameter_source(name) not in _SOURCES
              for f in _flag(ctx, name, getattr(lay, name))]
    common = ["--micro-batch", str(lay.micro_batch), "--zero", str(lay.zero), "--recompute", pred.recompute, *hsdp,
              *stages]
    train = ["llmcalc", "train", model, "--tokens", TOKENS, *where, *batch, *degrees, *common,
             "--schedule", lay.schedule, *expert, *_flag(ctx, "causal", ctx.params["causal"]),
             *_flag(ctx, "tp_overlap", lay.tp_overlap), *_typed(ctx, ["reserve_gib"]),
             *_typed(ctx, [p.name for p in ctx.command.params if p.name not in TRAIN_SKIPS])]
    memory = ["llmcalc", "memory", model, *where, *batch, *degrees, *common,
              *_typed(ctx, [name for name in MEMORY_TAKES if name != "sequence_parallel"]),
              *_typed(ctx, ["sequence_parallel"])]
    report, why = _report(ctx, model, where, batch, pred.recompute)
    return {"train": shlex.join(train), "memory": shlex.join(memory), "report": report, "report_why": why}
