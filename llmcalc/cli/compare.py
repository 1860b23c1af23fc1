"""`compare` and `report`: several models under one scenario, side by side or as a report to hand on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .common import emit, load_any, load_hardware, warn
from .options import (
    LAYOUT_OPTIONS,
    POSITIVE_INT,
    finetune_options,
    format_option,
    given,
    models_argument,
    recipe_of,
    report_serving_options,
    scenario_options,
)
from .types import Choice

if TYPE_CHECKING:
    from ..analytic.finetune_request import FinetuneRequest
    from ..analytic.summary import Scenario


def make_scenario(ctx: click.Context, seq_len: int, tokens: float, gpu: str, n_gpus: int, mfu: float,
                  usd_per_gpu_hour: float | None, recipe: str, dtype: str, recompute: str, causal: bool,
                  **layout: Any) -> Scenario:
    """The scenario options as the analytic Scenario, with the accelerator loaded: --mfu against the dense --dtype
    peak, and without --recipe the recipe --dtype names (fp8: Transformer Engine's default on --gpu), said on
    stderr; the shared layout options (options.layout_options) as its layout, checked as train checks them."""
    from ..analytic.summary import Scenario
    from .common import exact_batch_tokens
    from .options import given_names

    recipe, notes = recipe_of(ctx, recipe, dtype, gpu)
    for note in notes:
        warn(note)
    tokens_per_step = exact_batch_tokens(layout.pop("global_batch_tokens"), seq_len)
    if tokens_per_step is not None:
        if layout["global_batch"] is not None:
            raise click.UsageError("give --global-batch (sequences) or --global-batch-tokens, not both")
        layout["global_batch"] = int(tokens_per_step // seq_len)
    typed = tuple(given_names(ctx, *layout))
    layout = {k: (0 if v is None and k != "pipeline_layout" else "" if v is None else v) for k, v in layout.items()}
    return Scenario(seq_len, tokens, load_hardware(gpu), n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour,
                    dtype=dtype, recipe=recipe, recompute=recompute, causal=causal, given=typed,
                    goodput=ctx.meta["goodput"], **layout)  # --goodput: scenario_goodput_option keeps it there


TRAINING_OPTIONS = ("tokens", "mfu", "usd_per_gpu_hour", "n_gpus", "recipe", "recompute", "goodput", *LAYOUT_OPTIONS)


@click.command()
@models_argument
@scenario_options
@click.option("--sort", "sort_key", default=None, help="Order the models by a column (e.g. gpu_hours).")
@click.option("--reverse", is_flag=True, help="Sort descending.")
@format_option
@click.pass_context
def compare(ctx: click.Context, models: tuple[str, ...], seq_len: int, tokens: float, gpu: str, n_gpus: int,
            mfu: float, usd_per_gpu_hour: float | None, recipe: str, dtype: str, recompute: str, causal: bool,
            sort_key: str | None, reverse: bool, fmt: str, **layout: Any) -> None:
    """MODELS side by side: size, context length, KV cache, serving on --gpu (default h100-sxm), FLOPs; training
    time, cost and memory when --tokens (or another training option) is given."""
    from ..analytic.summary import compare_models
    from ..views.compare import document

    scenario = make_scenario(ctx, seq_len, tokens, gpu, n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour,
                             recipe=recipe, dtype=dtype, recompute=recompute, causal=causal, **layout)
    records = compare_models(load_any(models, seq_len), scenario, sort_key, reverse,
                             training=bool(given(ctx, *TRAINING_OPTIONS)), serving=True)
    emit(document(records, scenario), fmt)


@click.command()
@models_argument
@scenario_options
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Report directory (default: reports/<model names>).")
@click.option("--force", is_flag=True,
              help="Replace an earlier llmcalc report in --out (a folder holding its llmcalc-report.json; any "
                   "other folder is refused).")
@click.option("--profile", "profile_mode", type=Choice(["none", "virtual", "real"]), default="none",
              show_default=True, help="Also profile each model and show formulas against measurements.")
@click.option("--serve", "serving", is_flag=True,
              help="Add a serving section: the fewest GPUs meeting the latency targets for the workload below.")
@report_serving_options
@finetune_options
@click.option("--sharded-profile", "sharded_world", type=POSITIVE_INT, default=None,
              help="Add a virtual sharded profile at this world size (FSDP2 over dp x DTensor TP with --tp, fake "
                   "process group): every rank's figures against the formulas. Slow (seconds to minutes).")
@format_option
@click.pass_context
def report(ctx: click.Context, models: tuple[str, ...], seq_len: int, tokens: float, gpu: str, n_gpus: int,
           mfu: float, usd_per_gpu_hour: float | None, recipe: str, dtype: str, recompute: str, causal: bool,
           out: str | None, force: bool, profile_mode: str, serving: bool, finetune: FinetuneRequest,
           sharded_world: int | None, fmt: str, **options: Any) -> None:
    """A planning report for MODELS: report.md, self-contained report.html, figures (PNG), tables (CSV)."""
    from ..profiling.run import ReportProfiles
    from ..report.interrupts import signals_as_interrupts
    from ..report.run import ReportRequest, run_report
    from ..views.report import document

    def announce(written: Path, files: list[str]) -> None:
        click.echo(f"llmcalc: report written to {written}/ ({len(files)} files)", err=True)
        emit(document(written, files, seq_len), fmt)

    cfg = finetune.config()
    with signals_as_interrupts():  # Ctrl-C: exit 130, SIGTERM: 143; the old report or the new one, whole
        layout = {k: options.pop(k) for k in LAYOUT_OPTIONS}
        request = ReportRequest(models, out=out, force=force, serve=serving, finetune=cfg,
                                argv=getattr(ctx.find_root().command, "argv", sys.argv[1:]), **_report_plan(**options))
        scenario = make_scenario(ctx, seq_len, tokens, gpu, n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour,
                                 recipe=recipe, dtype=dtype, recompute=recompute, causal=causal, **layout)
        profiler = ReportProfiles(profile_mode, sharded_world, tp=scenario.tp, micro_batch=scenario.micro_batch,
                                  seq_len=seq_len, recompute=recompute)
        run_report(request, load_any(models, seq_len), scenario, profiler, announce)


def _report_plan(plan_layout: str, input_len: int, output_len: int, max_concurrency: tuple[int, ...],
                 ttft: float, tpot: float) -> dict:
    """report's --plan-layout and serving workload, as ReportRequest's fields."""
    from ..report.workload import ServingWorkload

    return {"given_layout": plan_layout == "given",
            "serve_work": ServingWorkload(input_len, output_len, max_concurrency, max_ttft=ttft, max_tpot=tpot)}


COMMANDS = (compare, report)
