"""The `llmcalc` command line: thin click commands over the analytic core.

Data goes to stdout, messages to stderr. Bad input (an ``LlmcalcError`` or a click usage error) is
one line on stderr and exit code 2, never a traceback. Heavy modules (torch, pandas, matplotlib)
are imported inside the commands that need them, so `llmcalc params <preset>` starts fast.
"""

from __future__ import annotations

import math
import os
import sys

import click

from .analytic.memory import OPTIMIZER_IMPLS, OPTIMIZERS, RECIPES
from .errors import LlmcalcError
from .options import Choice, Count, DType, Fraction, Length, Name, Number, flush_warnings, refuse_unused, warn
from .render.tables import FORMATS, render
from .report.interrupts import Interrupted
from .units import GIB, fmt_tokens
from .validate import (
    DEFAULT_SEQ_LEN,
    MAX_BATCH,
    MAX_CALIBRATE_SECONDS,
    MAX_CALIBRATE_SIZE,
    MAX_COMPUTE,
    MAX_DAYS,
    MAX_GENERATE,
    MAX_GPUS,
    MAX_PARAMS,
    MAX_PROFILE_LAYERS,
    MAX_PROFILE_STEPS,
    MAX_SEQ_LEN,
    MAX_TFLOPS,
    MAX_TOKENS,
    MAX_USD_PER_GPU_HOUR,
    MIN_UTILIZATION,
)

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in llmcalc, not in the input

# Commands in the order a user needs them (`llmcalc` alone lists them so); new commands go last
# unless placed here.
WORKFLOW = ("presets", "params", "flops", "train", "plan", "memory", "infer", "serve", "layout", "compare",
            "report", "profile", "calibrate")


class LlmcalcGroup(click.Group):
    """A click group whose errors are one line on stderr with a non-zero exit."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = sys.argv[1:] if args is None else list(args)
        self.argv = list(args)  # as typed: a report's provenance
        flush_warnings(show=False)
        if not args:  # bare `llmcalc`: the help, and success
            with click.Context(self, info_name=prog_name or "llmcalc") as ctx:
                click.echo(self.get_help(ctx))
            sys.exit(0)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            click.echo(f"llmcalc: error: {one_line(exc.format_message())}", err=True)
            sys.exit(EXIT_BAD_INPUT if exc.exit_code in (1, 2) else exc.exit_code)
        except click.exceptions.Abort as exc:
            interrupted = isinstance(exc.__context__, KeyboardInterrupt)
            click.echo("llmcalc: interrupted" if interrupted else "llmcalc: aborted", err=True)
            sys.exit(130 if interrupted else 1)  # 128 + SIGINT, the shell convention
        except LlmcalcError as exc:
            click.echo(f"llmcalc: error: {one_line(str(exc))}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Interrupted as exc:  # SIGINT/SIGTERM where a command asked for them (report)
            click.echo(f"llmcalc: {exc.message()}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # the disk or the system, not the input: ENOSPC, EACCES, EROFS ...
            where = f" ({exc.filename})" if exc.filename else ""
            click.echo(f"llmcalc: error: {exc.strerror or exc.__class__.__name__}{where}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (OverflowError, RecursionError, MemoryError) as exc:
            if os.environ.get("LLMCALC_DEBUG"):
                raise
            click.echo(f"llmcalc: error: the numbers are too large to compute ({exc.__class__.__name__}); "
                       f"use smaller sizes", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # never a traceback for a user; LLMCALC_DEBUG=1 shows it
            if os.environ.get("LLMCALC_DEBUG"):
                raise
            click.echo(f"llmcalc: internal error: {exc.__class__.__name__}: {one_line(str(exc))} (a bug: please "
                       f"report it with the command; LLMCALC_DEBUG=1 shows the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv

    def list_commands(self, ctx):
        order = {name: i for i, name in enumerate(WORKFLOW)}
        return sorted(self.commands, key=lambda n: order.get(n, len(WORKFLOW)))

    def format_commands(self, ctx, formatter):
        """Each command with its whole first sentence (click cuts summaries at 45 characters)."""
        rows = [(name, self.commands[name].get_short_help_str(limit=200)) for name in self.list_commands(ctx)
                if not self.commands[name].hidden]
        if rows:
            with formatter.section("Commands (in the order a plan needs them)"):
                formatter.write_dl(rows, col_max=12)


def one_line(text: str) -> str:
    """A message as one line: click's usage errors carry the usage text and a hint line."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return "; ".join(lines) if lines else "invalid input"


SEQ_HELP = f"Tokens per training sequence (4k = 4,096); the same default, {DEFAULT_SEQ_LEN:,}, in every command."
LENGTH = Length(MAX_SEQ_LEN)
POSITIVE_INT = Count(whole=True, maximum=MAX_BATCH)
GPUS = Count(whole=True, maximum=MAX_GPUS)
DEGREE = Count(whole=True, maximum=MAX_GPUS)
TOKENS = Count(maximum=MAX_TOKENS)
QUANTITY = Count()
MFU = Fraction()
PRICE = Number(maximum=MAX_USD_PER_GPU_HOUR, minimum=1e-6)
NAME = Name()
RECOMPUTE = Choice(["none", "selective", "full"])
ATTENTION = Choice(["flash", "eager"], aliases={"sdpa": "flash"})
ATTENTION_HELP = "flash (sdpa: no S² buffers) or eager (keeps the B·H·S² softmax); sdpa is accepted for flash."


def format_option(func):
    return click.option(
        "--format", "fmt", type=Choice(FORMATS), default="table", show_default=True,
        help="table for terminals; markdown, csv (the main table, raw numbers) or json (everything).",
    )(func)


def emit(doc, fmt: str) -> None:
    """The answer on stdout; the warnings gathered on the way, on stderr (only with an answer: a refusal
    stays one line)."""
    text = render(doc, fmt)
    flush_warnings()
    click.echo(text, nl=False)


def load_model(name: str, seq_len: int | None = None, what: str = "--seq-len"):
    """The model MODEL names; warns (stderr) when `seq_len` exceeds its max_position_embeddings."""
    from .presets import load_model as load

    spec = load(name)
    if seq_len is not None and spec.max_seq_len and seq_len > spec.max_seq_len:
        warn(f"{what} {seq_len:,} exceeds {spec.name}'s max_position_embeddings ({spec.max_seq_len:,}); "
             f"the figures assume the model could run that long")
    return spec


def finetune_options(func):
    options = [
        click.option("--finetune", type=click.Choice(["lora", "qlora"]), default=None,
                     help="LoRA or QLoRA: frozen base, trainable low-rank adapters (default: full training)."),
        click.option("--lora-rank", type=POSITIVE_INT, default=None, help="LoRA rank r (default 16)."),
        click.option("--lora-targets", default=None,
                     help="all-linear (default) or a comma list of q,k,v,o,gate,up,down."),
        click.option("--base-dtype", type=click.Choice(["bf16", "fp16", "fp32", "int8", "nf4", "fp4"]), default=None,
                     help="Frozen base weights (default: bf16 for lora, nf4 for qlora)."),
        click.option("--double-quant/--no-double-quant", default=True, show_default=True,
                     help="nf4/fp4: quantise the block scales again (bitsandbytes compress_statistics)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _no_finetune(model, cfg) -> None:
    if cfg is not None:
        raise LlmcalcError(f"--finetune needs llmcalc's formula for the layers it adapts; {model.model_type} is "
                           "counted by transformers' modelling code")


def make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant):
    """The LoRA set-up the options describe, or None for full training."""
    if finetune is None:
        given = [n for n, v in (("--lora-rank", lora_rank), ("--lora-targets", lora_targets),
                                ("--base-dtype", base_dtype)) if v is not None]
        if given or not double_quant:
            raise LlmcalcError(f"{', '.join(given) or '--no-double-quant'} needs --finetune lora or qlora")
        return None
    from .analytic.finetune import lora_config

    return lora_config(finetune, lora_rank or 16, lora_targets or "all-linear", base_dtype, double_quant)


@click.group(cls=LlmcalcGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
@click.version_option(package_name="llmcalc")
def cli() -> None:
    """How big is a Transformer, how many FLOPs, how much memory, how long and how much to train.

    MODEL is a preset name (any case; `llmcalc presets` lists them), the Hugging Face repo id a preset
    comes from (meta-llama/Meta-Llama-3-8B), a config.json, or a folder holding one. Counts take SI
    suffixes (7B, 15T, 1k); sequence lengths binary ones (4k = 4,096).
    """


@cli.command()
@format_option
def presets(fmt: str) -> None:
    """Every model and accelerator preset, one line each."""
    from .views.presets import presets_document

    emit(presets_document(), fmt)


@cli.command()
@click.argument("model", type=NAME)
@finetune_options
@format_option
def params(model: str, finetune, lora_rank, lora_targets, base_dtype, double_quant, fmt: str) -> None:
    """Exact parameter count of MODEL by component, beside the classic approximations.

    MODEL is a preset name (see `llmcalc presets`), a Hugging Face config.json, or a folder
    holding one.
    """
    from .analytic.params import count_params
    from .fallback import FallbackModel, load_counted
    from .presets import model_source
    from .views.params import analytic_params_document as params_document

    cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
    spec = load_counted(model)
    if isinstance(spec, FallbackModel):
        from .views.params import fallback_params_document

        _no_finetune(spec, cfg)
        emit(fallback_params_document(spec, model_source(model)), fmt)
        return
    doc = params_document(count_params(spec), model_source(model))
    if cfg is not None:
        from .analytic.finetune import finetune as build
        from .views.params import add_adapters as add_to_params

        doc = add_to_params(doc, build(spec, cfg))
    emit(doc, fmt)


def seq_options(func):
    func = click.option("--recompute", type=RECOMPUTE, default="none", show_default=True,
                        help="Activation recomputation: adds hardware FLOPs, not model FLOPs.")(func)
    func = click.option("--causal", is_flag=True,
                        help="Halve the attention S² terms (Megatron/NeMo convention). Default: full S².")(func)
    func = click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP)(func)
    return func


@cli.command()
@click.argument("model", type=NAME)
@seq_options
@click.option("--micro-batch", "--batch-size", "batch_size", type=POSITIVE_INT, default=1, show_default=True,
              help="Sequences per step (--batch-size is the old name).")
@click.option("--decoder-seq-len", type=LENGTH, default=None,
              help="Encoder-decoder models: decoder tokens per sequence (default: --seq-len).")
@finetune_options
@format_option
@click.pass_context
def flops(ctx, model, seq_len, causal, recompute, batch_size, decoder_seq_len, finetune, lora_rank, lora_targets,
          base_dtype, double_quant, fmt):
    """Forward and backward FLOPs of one step of MODEL, per operation, with the rules of thumb."""
    from .analytic.flops import step_flops
    from .analytic.params import count_params
    from .fallback import FallbackModel, load_counted
    from .views.flops import flops_document

    cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
    spec = load_counted(model, seq_len)
    if isinstance(spec, FallbackModel):
        from .fallback import step_flops as fallback_step
        from .views.flops import fallback_flops_document

        _no_finetune(spec, cfg)
        if decoder_seq_len is not None:
            raise LlmcalcError(f"--decoder-seq-len: {spec.model_type} is counted by transformers' modelling code, "
                               "which runs the decoder on --seq-len tokens")
        emit(fallback_flops_document(spec, fallback_step(spec, batch_size, causal, recompute), batch_size, causal,
                                     recompute), fmt)
        return
    spec = load_model(model, seq_len)  # the analytic spec, with the --seq-len check
    if decoder_seq_len is not None and spec.architecture != "encoder-decoder":
        raise click.UsageError(f"--decoder-seq-len is for encoder-decoder models; {spec.name} is a {spec.architecture}")
    step = step_flops(spec, batch_size, seq_len, causal=causal, recompute=recompute, decoder_seq_len=decoder_seq_len)
    doc = flops_document(step, count_params(spec))
    if cfg is not None:
        from .analytic.finetune import FinetuneFlops
        from .analytic.finetune import finetune as build
        from .views.flops import add_finetune_step as add_to_flops

        ft = build(spec, cfg)
        doc = add_to_flops(doc, ft, FinetuneFlops(ft, step))
    emit(doc, fmt)


MFU_MISSING = ("give --mfu (model FLOPs utilization, e.g. 0.4 or 40%) or --achieved-tflops (TFLOP/s per GPU), "
               "or --global-batch to predict the MFU from the layout")


def layout_options(func):
    """The parallel layout and what the step-time model needs (issue 10); every option optional."""
    ints = dict(type=POSITIVE_INT, default=None)
    for option in reversed([
        click.option("--global-batch", **ints, help="Sequences per optimizer step: predicts step time and MFU."),
        click.option("--global-batch-tokens", type=QUANTITY, default=None, help="Instead: tokens per step (e.g. 16M)."),
        click.option("--micro-batch", **ints, help="Sequences per GPU per micro-batch (default 1)."),
        click.option("--tp", **ints, help="Tensor-parallel degree (default 1)."),
        click.option("--cp", **ints, help="Context-parallel degree (default 1)."),
        click.option("--pp", **ints, help="Pipeline-parallel degree (default 1)."),
        click.option("--vpp", **ints, help="Virtual stages (model chunks) per pipeline rank (interleaved)."),
        click.option("--ep", **ints, help="Expert-parallel degree (MoE models)."),
        click.option("--etp", **ints, help="Expert tensor-parallel degree (MoE; default = tp); ep x etp fold over "
                                           "tp x dp."),
        click.option("--schedule", type=click.Choice(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"]), default=None,
                     help="Pipeline schedule (default 1f1b; interleaved with --vpp)."),
        click.option("--zero", type=click.IntRange(0, 3), default=None,
                     help="ZeRO stage over dp (default 1; 3 = FSDP)."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                     help="TP with sequence parallelism (default on)."),
        click.option("--dp-overlap/--no-dp-overlap", default=None,
                     help="Overlap DP reduction with backward (default on)."),
        click.option("--tp-overlap/--no-tp-overlap", default=None,
                     help="Hide TP all-gather/reduce-scatter under the GEMMs (TransformerEngine, async TP; "
                          "default off)."),
        click.option("--attention", type=click.Choice(["flash", "eager"]), default=None,
                     help="Attention kernel the step is timed with: flash (default) or eager (S² scores "
                          "materialised, pre-2022 Megatron-LM)."),
        click.option("--tokens-per-second", type=QUANTITY, default=None,
                     help="Cluster-wide throughput of a past run: its achieved MFU/HFU."),
    ]):
        func = option(func)
    return func


@cli.command()
@click.argument("model", type=NAME, required=False)
@click.option("--params", "n_params", type=Count(maximum=MAX_PARAMS),
              help="No model: a parameter count for 6·N·T (e.g. 7B).")
@click.option("--tokens", type=TOKENS, required=True, help="Training tokens (e.g. 2T, 15t).")
@click.option("--gpu", type=NAME, required=True, help="Accelerator preset (see `llmcalc presets`).")
@click.option("--n-gpus", type=GPUS, default=1, show_default=True, help="GPUs in all (1k = 1,000).")
@click.option("--mfu", type=MFU, help="Model FLOPs utilization in (0, 1]: 0.4 or 40%.")
@click.option("--achieved-tflops", type=Number(maximum=MAX_TFLOPS),
              help="Instead of --mfu: achieved TFLOP/s per GPU (hardware FLOPs, recomputation included).")
@click.option("--usd-per-gpu-hour", type=PRICE, help="Price per GPU-hour (default: the preset's, if any).")
@click.option("--dtype", type=DType(), default="bf16", show_default=True,
              help="Which dense peak of the GPU to use (bf16, fp16, fp8, tf32, fp32; bfloat16 = bf16).")
@seq_options
@finetune_options
@layout_options
@format_option
@click.pass_context
def train(ctx, model, n_params, tokens, gpu, n_gpus, mfu, achieved_tflops, usd_per_gpu_hour, dtype, seq_len, causal,
          recompute, finetune, lora_rank, lora_targets, base_dtype, double_quant, fmt,
          **layout):  # long: the flags' checks, then each figure in the order printed
    """Training FLOPs, GPU-hours, wall-clock, cost and energy for TOKENS on N GPUs."""
    from .analytic.training import TrainingEstimate
    from .presets import load_hardware
    from .views.train import train_document

    if (model is None) == (n_params is None):
        raise click.UsageError("give a MODEL (preset or config.json) or --params N, not both")
    if mfu is not None and achieved_tflops is not None:
        raise click.UsageError("give --mfu or --achieved-tflops, not both")
    accelerator = load_hardware(gpu)
    inputs = {"model": model or fmt_tokens(n_params, "params"), "tokens": tokens, "seq_len": seq_len, "causal": causal,
              "recompute": recompute}
    inputs["method"] = "analytic"
    if model is not None:
        from .analytic.flops import step_flops
        from .analytic.params import count_params
        from .fallback import METHOD_TRANSFORMERS, FallbackModel, load_counted
        from .fallback import step_flops as fallback_step

        cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
        spec = load_counted(model, seq_len)
        if isinstance(spec, FallbackModel):
            _no_finetune(spec, cfg)
            step = fallback_step(spec, 1, causal, recompute)
            n = spec.active_per_token
            if n is None:
                raise LlmcalcError(f"{spec.model_type}: the config names no top-k and expert count, so the active "
                                   "parameters per token (N of 6·N·T) are unknown")
            model_flops = step["flops_per_token"] * tokens
            hardware_flops = step["hardware_flops_per_token"] * tokens
            inputs["method"] = METHOD_TRANSFORMERS
            inputs["flops_basis"] = (
                f"training FLOPs = 3 x forward FLOPs per token counted by torch's FlopCounterMode on transformers' "
                f"{spec.cls} at seq {seq_len} ({'causal' if causal else 'full S²'}; no llmcalc formula for "
                f"{spec.model_type}) x tokens; 6·N·T with N = {n:,} {'active ' if n != spec.total else ''}params "
                f"counted on the same model")
        else:
            spec = load_model(model, seq_len)  # the analytic spec, with the --seq-len check
            step = step_flops(spec, 1, seq_len, causal, recompute)
            n = count_params(spec).active_per_token
            model_flops = step.model_flops_per_token * tokens
            hardware_flops = step.hardware_flops_per_token * tokens
            inputs["flops_basis"] = (f"training FLOPs = exact per-op count per token at seq {seq_len:,} "
                                     f"({'causal' if causal else 'full S²'}) x tokens; 6·N·T with N = {n:,} "
                                     f"{'active ' if spec.is_moe else ''}params")
            if cfg is not None:
                from .analytic.finetune import FinetuneFlops
                from .analytic.finetune import finetune as build

                ft = build(spec, cfg)
                fl = FinetuneFlops(ft, step)
                model_flops = fl.model_flops_per_token * tokens
                hardware_flops = fl.hardware_flops_per_token * tokens
                inputs["finetune"] = {"method": cfg.method, "rank": cfg.rank, "targets": list(cfg.targets),
                                      "trainable": ft.trainable, "frozen": ft.frozen,
                                      "rule_flops": fl.rule() * tokens}
                inputs["flops_basis"] = (
                    f"{cfg.method} r{cfg.rank} on {cfg.target_label}: training FLOPs = exact per-op count per token "
                    f"at seq {seq_len} with frozen weights (backward: activation gradients only) and "
                    f"{ft.trainable:,} adapter params x tokens ≈ 4·N_frozen + 6·N_adapter = "
                    f"{fl.rule() * tokens:.4g}; 6·N·T (full training) shown for comparison")
    else:
        refuse_unused(ctx, ("seq_len", "causal"), "with --params (6·N·T has no sequence length); give a MODEL")
        if finetune is not None:
            raise click.UsageError("--finetune needs a MODEL (its linear shapes), not --params")
        if recompute == "selective":
            raise click.UsageError("--recompute selective needs a MODEL (its attention shapes); use none or full")
        n = n_params
        model_flops = 6 * n * tokens
        hardware_flops = model_flops + (2 * n * tokens if recompute == "full" else 0)
        inputs["seq_len"] = None
        inputs["flops_basis"] = "training FLOPs = 6·N·T (no model given; full recomputation adds 2·N·T)"
    peak = accelerator.peak(dtype)
    if achieved_tflops is not None and achieved_tflops * 1e12 < MIN_UTILIZATION * peak:
        raise click.UsageError(f"--achieved-tflops {achieved_tflops:g} is below {MIN_UTILIZATION:.2%} of "
                               f"{accelerator.key}'s dense {dtype} peak ({peak / 1e12:,.4g} TFLOP/s); is it a typo?")

    from .analytic.steptime import train_steptime

    shapes = model and spec
    if model is not None and isinstance(spec, FallbackModel):
        shapes = None  # no formula for its shapes: only a given MFU or throughput times it
        if mfu is None and achieved_tflops is None and layout.get("tokens_per_second") is None:
            raise LlmcalcError(f"predicting the step time needs llmcalc's formula for the shapes; {spec.model_type} is "
                               "counted by transformers: give --mfu, --achieved-tflops or --tokens-per-second")
    mfu, pred, measured = train_steptime(shapes, gpu, n_gpus, mfu, achieved_tflops=achieved_tflops, dtype=dtype,
                                         seq_len=seq_len, causal=causal, recompute=recompute,
                                         model_flops_per_token=model_flops / tokens,
                                         hardware_flops_per_token=hardware_flops / tokens,
                                         accelerator=accelerator, options=layout)
    if mfu is None and achieved_tflops is None:
        raise click.UsageError(MFU_MISSING)
    timing_only = [k for k in ("schedule", "zero", "sequence_parallel", "dp_overlap", "tp_overlap")
                   if layout.get(k) is not None]
    if pred is None and timing_only:  # a given MFU sets the step; these shape only a predicted one
        warn(f"{', '.join('--' + k.replace('_', '-') for k in timing_only)} shape the predicted step only; with a "
             f"given MFU, achieved TFLOP/s or throughput they are recorded in the layout, not used")
    est = TrainingEstimate(
        tokens=tokens, model_flops=model_flops, hardware_flops=hardware_flops, accelerator=accelerator,
        dtype=dtype, n_gpus=n_gpus, mfu=mfu,
        achieved_flops_per_s=None if achieved_tflops is None else achieved_tflops * 1e12,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )
    from .views.train import add_both_peaks

    emit(add_both_peaks(train_document(est, inputs, 6 * n * tokens, pred, measured), est), fmt)


@cli.command()
@click.argument("model", type=NAME)
@click.option("--gpu", type=NAME, required=True,
              help="Accelerator preset with a network block (see `llmcalc presets`).")
@click.option("--n-gpus", type=GPUS, required=True, help="GPUs in all (1k = 1,000).")
@click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP)
@click.option("--global-batch", type=POSITIVE_INT, default=None, help="Sequences per optimizer step.")
@click.option("--global-batch-tokens", type=QUANTITY, default=None, help="Instead: tokens per step (e.g. 4M).")
@click.option("--recompute", type=RECOMPUTE, default=None,
              help="Default: the least recomputation that fits, per layout.")
@click.option("--causal", is_flag=True, help="Halve the attention S² FLOPs (Megatron convention).")
@click.option("--tp-overlap", is_flag=True,
              help="Time every layout with TP all-gather/reduce-scatter hidden under the GEMMs (TransformerEngine, "
                   "async TP).")
@click.option("--top", type=POSITIVE_INT, default=10, show_default=True, help="How many layouts to list.")
@format_option
def layout(model, gpu, n_gpus, seq_len, global_batch, global_batch_tokens, recompute, causal, tp_overlap, top,
           fmt):
    """Rank the parallel layouts of MODEL on N GPUs that fit in memory, by predicted throughput."""
    from .analytic.steptime import search_layouts
    from .presets import load_model
    from .render.progress import Progress
    from .views.layout import layout_document

    spec = load_model(model)
    if (global_batch is None) == (global_batch_tokens is None):
        raise LlmcalcError("give --global-batch (sequences) or --global-batch-tokens, one of them")
    if global_batch_tokens is not None:
        if global_batch_tokens <= 0 or global_batch_tokens % seq_len:
            raise LlmcalcError(f"--global-batch-tokens {global_batch_tokens:g} is not a positive multiple of "
                               f"--seq-len {seq_len}")
        global_batch = int(global_batch_tokens // seq_len)
    bars = []

    def progress(total):
        bars.append(Progress(total, "layouts"))
        return bars[0].step

    try:
        ranked, losers, counts = search_layouts(spec, gpu, n_gpus, seq_len, global_batch=global_batch, causal=causal,
                                                recompute=recompute, tp_overlap=tp_overlap,
                                                progress=progress)
    finally:
        for bar in bars:
            bar.close()
    if not ranked:
        raise LlmcalcError(f"no layout of {spec.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{global_batch} ({counts['oom']} do not fit in memory, {counts['invalid']} contradict the "
                           f"model): use more GPUs or a larger --global-batch")
    emit(layout_document(spec.name, gpu, n_gpus, seq_len, global_batch=global_batch, ranked=ranked, losers=losers,
                         counts=counts, top=top), fmt)


@cli.command()
@click.option("--compute", type=Count(maximum=MAX_COMPUTE), help="A compute budget in FLOPs (e.g. 1e24).")
@click.option("--gpu", type=NAME, help="Or: the cluster's accelerator preset ...")
@click.option("--n-gpus", type=GPUS, help="... how many (1k = 1,000) ...")
@click.option("--days", type=Number(maximum=MAX_DAYS), help="... for how long (days) ...")
@click.option("--mfu", type=MFU, help="... at which model FLOPs utilization (0.4 or 40%).")
@click.option("--dtype", type=DType(), default="bf16", show_default=True,
              help="Cluster budget: which dense peak of the GPU (bfloat16 = bf16).")
@format_option
@click.pass_context
def plan(ctx, compute, gpu, n_gpus, days, mfu, dtype, fmt):
    """Compute-optimal model size and tokens for a FLOP budget, or for what a cluster delivers."""
    from .analytic.training import cluster_compute, compute_optimal
    from .presets import load_hardware
    from .views.plan import plan_document

    cluster = (gpu, n_gpus, days, mfu)
    if compute is not None and any(v is not None for v in cluster):
        raise click.UsageError("give --compute, or --gpu/--n-gpus/--days/--mfu, not both")
    if compute is None:
        missing = [n for n, v in zip(("--gpu", "--n-gpus", "--days", "--mfu"), cluster, strict=True) if v is None]
        if missing:
            raise click.UsageError(f"give --compute FLOPS, or a cluster: missing {', '.join(missing)}")
        accelerator = load_hardware(gpu)
        compute = cluster_compute(accelerator, n_gpus, days * 86400.0, mfu, dtype)
        basis = (f"budget = {n_gpus:,} x {accelerator.key} at {accelerator.peak(dtype) / 1e12:,.6g} TFLOP/s "
                 f"dense {dtype} x MFU {mfu:g} x {days:,g} days")
        inputs = {"gpu": accelerator.key, "n_gpus": n_gpus, "days": days, "mfu": mfu, "dtype": dtype, "basis": basis}
    else:
        refuse_unused(ctx, ("dtype",), "with --compute (it picks the GPU peak of a cluster budget)")
        inputs = {"basis": "budget given with --compute"}
    emit(plan_document(compute, compute_optimal(compute), inputs), fmt)
STORAGE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")


@cli.command()
@click.argument("model", type=NAME)
@click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP)
@click.option("--micro-batch", "--batch-size", "batch_size", type=POSITIVE_INT, default=1, show_default=True,
              help="Training: sequences per GPU per step (micro-batch); with --inference: concurrent sequences.")
@click.option("--recipe", type=Choice(list(RECIPES)), default="bf16-mixed", show_default=True,
              help="Precision recipe (weights, gradients, master copy, optimizer states, activations).")
@click.option("--optimizer", type=Choice(list(OPTIMIZERS)), default="adamw", show_default=True,
              help="Optimizer whose states are counted.")
@click.option("--optimizer-bytes", type=Number(maximum=64),
              help="Instead of --optimizer: optimizer-state bytes per parameter (e.g. 12 for fp32 Adam + master).")
@click.option("--optimizer-impl", type=Choice(list(OPTIMIZER_IMPLS)), default="fused",
              show_default=True, help="Optimizer-step scratch: fused none, torch foreach a copy of every state.")
@click.option("--recompute", type=RECOMPUTE, default="none", show_default=True,
              help="Activation recomputation: none, selective (attention), full (one checkpoint per block).")
@click.option("--attention", type=ATTENTION, default="flash", show_default=True, help=ATTENTION_HELP)
@click.option("--dropout", is_flag=True, help="Count dropout masks (GPT-3-style training; off for modern LLMs).")
@click.option("--gpu", type=NAME,
              help="Accelerator preset: say whether it fits, and the largest micro-batch that does.")
@click.option("--n-gpus", type=GPUS, default=None, help="GPUs in all (default tp x pp): dp = n / (tp x pp).")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True,
              help="ZeRO stage over data parallelism: 0-3.")
@click.option("--tp", type=DEGREE, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=DEGREE, default=1, show_default=True, help="Pipeline-parallel degree (1F1B).")
@click.option("--ep", type=DEGREE, default=1, show_default=True,
              help="Expert-parallel degree (MoE): routed experts split over ep GPUs.")
@click.option("--etp", type=DEGREE, default=None,
              help="Expert tensor-parallel degree (MoE; default = tp): each routed expert split over etp GPUs; "
                   "ep x etp fold over the tp x dp GPUs.")
@click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
              help="With --tp > 1: shard the norm and dropout activations over the tensor-parallel group.")
@click.option("--reserve-gib", type=Number(zero=True, maximum=1e6), default=0.0, show_default=True,
              help="With --gpu: memory to keep free on the GPU (CUDA context, fragmentation).")
@click.option("--inference", is_flag=True, hidden=True, help="Moved: serving memory is `llmcalc serve`.")
@click.option("--context", "--weight-dtype", "--kv-dtype", "--prefill-chunk", "moved_option", hidden=True,
              help="Options of the moved --inference mode (kept so that old command lines reach its message).")
@finetune_options
@format_option
@click.pass_context
def memory(ctx, model, seq_len, batch_size, recipe, optimizer, optimizer_bytes, optimizer_impl, recompute, attention,
           dropout, gpu, n_gpus, zero, tp, pp, ep, etp, sequence_parallel, reserve_gib, inference, moved_option,
           finetune, lora_rank, lora_targets, base_dtype, double_quant, fmt):
    """Training memory per GPU of MODEL, and whether it fits (serving memory: `llmcalc serve`)."""
    from .presets import load_hardware

    if inference or moved_option is not None:
        raise LlmcalcError("memory --inference has moved: use `llmcalc serve MODEL --gpu G --n-gpus N "
                           "--max-model-len L` (weights, KV cache and blocks per GPU, concurrency)")
    device = load_hardware(gpu) if gpu else None
    if device is None:
        refuse_unused(ctx, ("reserve_gib",), "without --gpu")
    elif reserve_gib * GIB >= device.memory_bytes:
        raise click.UsageError(f"--reserve-gib {reserve_gib:g} leaves nothing of {device.key}'s "
                               f"{device.memory_bytes / GIB:g} GiB")
    reserve = reserve_gib * GIB
    if optimizer_bytes is not None:
        refuse_unused(ctx, ("optimizer",), "with --optimizer-bytes (which replaces it)")
    spec = load_model(model, seq_len)
    from .analytic.memory import Parallel, custom_optimizer, smallest_fit, training_memory
    from .views.memory import training_memory_document

    opt = custom_optimizer(optimizer_bytes) if optimizer_bytes is not None else optimizer
    cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
    if cfg is not None:
        from .analytic.finetune import finetune_memory
        from .views.memory import finetune_memory_document

        clash = [name for name, off in (("--tp", tp == 1), ("--pp", pp == 1), ("--ep", ep == 1), ("--etp", etp is None),
                                        ("--zero", zero == 0),
                                        ("--recipe", recipe == "bf16-mixed"), ("--optimizer-impl", optimizer_impl ==
                                                                               "fused")) if not off]
        if clash:
            raise LlmcalcError(f"{', '.join(clash)} not modelled with --finetune (each data-parallel GPU holds the "
                               "whole frozen base; the base dtype is --base-dtype, adapters are fp32); drop them")
        est = finetune_memory(spec, cfg, batch_size, seq_len, optimizer=opt, recompute=recompute, attention=attention,
                              dropout=dropout)
        emit(finetune_memory_document(est, device, reserve), fmt)
        return
    folded = math.lcm(tp, ep * (etp or tp))  # tp x dp must hold ep x etp: the fewest GPUs that do
    parallel = Parallel(n_gpus or pp * folded, tp, pp, zero, sequence_parallel, ep=ep, etp=etp or 0)
    settings = dict(batch=batch_size, seq_len=seq_len, recipe=recipe, optimizer=opt, recompute=recompute,
                    attention=attention, dropout=dropout, optimizer_impl=optimizer_impl)
    est = training_memory(spec, parallel=parallel, **settings)
    doc = training_memory_document(est, device, reserve)
    if not spec.is_mla and tp > spec.n_kv_heads:
        doc.tables[0].notes.append(f"tp {tp} > {spec.n_kv_heads} key/value heads: each KV head's projection is "
                                   f"replicated on {tp // spec.n_kv_heads} GPUs (Megatron-LM); its weights and "
                                   f"activations are counted per GPU as if split, a slight underestimate")
    if device is not None and est.peak > device.memory_bytes - reserve:
        advice = smallest_fit(spec, parallel, device.memory_bytes - reserve, **settings)
        doc.data["fit_advice"] = advice
        doc.tables[0].notes.append(advice["text"])
    emit(doc, fmt)


def _warn(line: str | None) -> None:
    if line:
        warn(line)


def serving_options(func):
    options = [
        click.option("--weight-dtype", type=DType(STORAGE_DTYPES), default="bf16", show_default=True,
                     help="bf16, fp16, fp8, int8, int4 (group-wise scales, group 128) or fp32."),
        click.option("--kv-dtype", type=DType(STORAGE_DTYPES), default=None,
                     help="KV cache dtype (default: the activation dtype, bf16 or fp16)."),
        click.option("--compute-dtype", type=DType(), default=None,
                     help="Which peak to use (default: fp8 for fp8 weights where the device has it, else bf16)."),
        click.option("--n-gpus", type=DEGREE, default=1, show_default=True,
                     help="GPUs serving one replica, tensor parallel (the total for that replica)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@cli.command()
@click.argument("model", type=NAME)
@click.option("--gpu", type=NAME, required=True, help="Accelerator preset.")
@click.option("--prompt", type=LENGTH, default="2k", show_default=True, help="Prompt tokens per sequence.")
@click.option("--generate", type=Count(whole=True, maximum=MAX_GENERATE), default=256, show_default=True,
              help=f"Tokens to generate (at most {MAX_GENERATE:,}: the roofline sums every decode step).")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True, help="Concurrent sequences.")
@serving_options
@format_option
def infer(model, gpu, prompt, generate, batch_size, weight_dtype, kv_dtype, compute_dtype, n_gpus, fmt):
    """Prefill and decode time and tokens/s of MODEL on a GPU: a roofline, an upper bound on speed."""
    from .analytic.inference import InferenceEstimate, check_inference, context_warning, resolve_dtypes
    from .presets import load_hardware
    from .views.infer import infer_document

    spec = load_model(model)
    accelerator = load_hardware(gpu)
    check_inference(batch_size, prompt, generate)
    weight_dtype, kv_dtype, compute_dtype = resolve_dtypes(accelerator, weight_dtype, kv_dtype, compute_dtype)
    est = InferenceEstimate(spec, accelerator, batch_size, prompt, generate=generate, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                            n_gpus=n_gpus)
    _warn(context_warning(spec, prompt + generate))
    emit(infer_document(est), fmt)


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Accelerator preset.")
@serving_options
@click.option("--max-model-len", type=LENGTH, default=None,
              help="Tokens per request the KV cache must hold (default: the model's max_position_embeddings).")
@click.option("--gpu-memory-utilization", type=MFU, default=0.9, show_default=True,
              help="Share of each GPU's memory vLLM may use (weights, activations, KV cache).")
@click.option("--block-size", type=POSITIVE_INT, default=16, show_default=True, help="Tokens per paged-KV block.")
@format_option
def serve(model, gpu, weight_dtype, kv_dtype, compute_dtype, n_gpus, max_model_len, gpu_memory_utilization,
          block_size, fmt):
    """Serving MODEL on N GPUs (tensor parallel), sized as vLLM sizes it: weights and paged KV cache per
    GPU, concurrent sequences at the max length, throughput and latency against concurrency."""
    from .analytic.inference import check_tp, context_warning, resolve_dtypes
    from .analytic.serving import ServeEstimate
    from .presets import load_hardware, load_model
    from .views.serve import serve_document

    spec = load_model(model)
    accelerator = load_hardware(gpu)
    if spec.architecture != "decoder":
        raise LlmcalcError(f"serve covers decoder-only models; {spec.name} is {spec.architecture}")
    check_tp(spec, n_gpus)
    weight_dtype, kv_dtype, compute_dtype = resolve_dtypes(accelerator, weight_dtype, kv_dtype, compute_dtype)
    if max_model_len is None:
        if spec.max_seq_len is None:
            raise LlmcalcError(f"{spec.name}'s config gives no max_position_embeddings; pass --max-model-len")
        max_model_len = spec.max_seq_len
    est = ServeEstimate(spec, accelerator, n_gpus, max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                        compute_dtype=compute_dtype, block_size=block_size)
    _warn(context_warning(spec, max_model_len))
    emit(serve_document(est), fmt)


def scenario_options(func):
    options = [
        click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP),
        click.option("--tokens", type=TOKENS, default="2T", show_default=True, help="Training tokens."),
        click.option("--gpu", type=NAME, default="h100-sxm", show_default=True, help="Accelerator preset."),
        click.option("--n-gpus", type=GPUS, default=256, show_default=True, help="GPUs in all (1k = 1,000)."),
        click.option("--mfu", type=MFU, default=0.4, show_default=True,
                     help="Model FLOPs utilization assumed (0.4 or 40%)."),
        click.option("--usd-per-gpu-hour", type=PRICE, default=None, help="Default: the preset's price, if any."),
        click.option("--recipe", type=Choice(list(RECIPES)), default="bf16-mixed", show_default=True,
                     help="Memory: precision recipe."),
        click.option("--zero", type=click.IntRange(0, 3), default=3, show_default=True,
                     help="Memory: ZeRO stage over the GPUs."),
        click.option("--tp", type=DEGREE, default=1, show_default=True, help="Memory: tensor-parallel degree."),
        click.option("--micro-batch", type=POSITIVE_INT, default=1, show_default=True,
                     help="Memory: sequences per GPU."),
        click.option("--recompute", type=RECOMPUTE, default="none", show_default=True,
                     help="Activation recomputation (FLOPs and memory)."),
        click.option("--causal", is_flag=True, help="Halve the attention S² FLOPs (Megatron convention)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_scenario(seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
                  causal):
    from .analytic.summary import Scenario
    from .presets import load_hardware

    return Scenario(seq_len, tokens, load_hardware(gpu), n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour,
                    recipe=recipe, zero=zero,
                    tp=tp, micro_batch=micro_batch, recompute=recompute, causal=causal)


def load_models(models, seq_len):
    """Every model named, each checked before any work."""
    return [load_model(m, seq_len) for m in models]


@cli.command()
@click.argument("models", nargs=-1, required=True, type=NAME)
@scenario_options
@click.option("--sort", "sort_key", default=None, help="Order the models by a column (e.g. gpu_hours).")
@click.option("--reverse", is_flag=True, help="Sort descending.")
@format_option
def compare(models, seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
            causal, sort_key, reverse, fmt):
    """MODELS side by side: size, FLOPs, KV cache, training time and cost, memory per GPU."""
    from .analytic.summary import model_record
    from .views.compare import compare_document, sort_records

    scenario = make_scenario(seq_len, tokens, gpu, n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour, recipe=recipe,
                             zero=zero, tp=tp, micro_batch=micro_batch,
                             recompute=recompute, causal=causal)
    specs = load_models(models, seq_len)
    sort_records([], sort_key)  # an unknown column is refused before any work
    records = sort_records([model_record(spec, scenario) for spec in specs], sort_key, reverse)
    emit(compare_document(records, scenario), fmt)


@cli.command()
@click.argument("models", nargs=-1, required=True, type=NAME)
@scenario_options
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Report directory (default: reports/<model names>).")
@click.option("--force", is_flag=True,
              help="Replace an earlier llmcalc report in --out (a folder holding its llmcalc-report.json; any "
                   "other folder is refused).")
@click.option("--profile", "profile_mode", type=Choice(["none", "virtual", "real"]), default="none",
              show_default=True, help="Also profile each model and show formulas against measurements.")
@click.option("--serve", "serving", is_flag=True,
              help="Add serving figures: KV blocks, concurrency and throughput at --seq-len tokens per request.")
@finetune_options
@click.option("--sharded-profile", "sharded_world", type=POSITIVE_INT, default=None,
              help="Add a virtual sharded profile at this world size (FSDP2 over dp x DTensor TP with --tp, fake "
                   "process group): every rank's figures against the formulas. Slow (seconds to minutes).")
@format_option
def report(models, seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
           causal, out, force, profile_mode, serving, finetune, lora_rank, lora_targets, base_dtype, double_quant,
           sharded_world, fmt):
    """A planning report for MODELS: report.md, self-contained report.html, figures (PNG), tables (CSV)."""
    from .report.interrupts import signals_as_interrupts

    cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
    with signals_as_interrupts():  # Ctrl-C: exit 130, SIGTERM: 143; the old report or the new one, whole
        _report(models, seq_len, tokens, gpu, n_gpus=n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour,
                recipe=recipe, zero=zero, tp=tp, micro_batch=micro_batch,
                recompute=recompute, causal=causal, out=out, force=force, profile_mode=profile_mode, serving=serving,
                finetune_cfg=cfg, sharded_world=sharded_world, fmt=fmt)


def _check_report_extras(specs, finetune_cfg, sharded_world, tp) -> None:
    """Refuse, before any work, a fine-tuning set-up or a sharded profile that a model cannot take."""
    if finetune_cfg is not None:
        from .analytic.finetune import finetune

        for spec in specs:
            finetune(spec, finetune_cfg)  # a target set that adapts no linear of the model is refused
    if sharded_world is not None:
        _need_torch()
        from .profiling.distributed import check_layout
        from .profiling.model import check_buildable

        for spec in specs:
            check_buildable(spec)
            check_layout(spec, sharded_world, tp)


def _sharded_profiles(specs, world, tp, micro_batch, seq_len, progress=None) -> dict[str, dict]:
    """Each model's virtual sharded profile (bf16 FSDP2 mixed precision), as `profile --virtual --world-size`."""
    from .profiling.distributed import virtual_distributed_profile

    out = {}
    for spec in specs:
        if progress is not None:
            progress.step(f"sharded profile of {spec.name}")
        out[spec.name] = virtual_distributed_profile(spec, world, tp, micro_batch, seq=seq_len, mixed=True,
                                                     attention="sdpa").to_json()
    return out


def _report(models, seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
            causal, out, force, profile_mode, serving, fmt, finetune_cfg=None,
            sharded_world=None):  # long: the report's steps, each a checkpoint
    from pathlib import Path

    from .presets import load_hardware, model_source
    from .render.progress import Progress
    from .render.tables import Column, Document, Table
    from .report.document import MARKER, check_destination, outcome, provenance, safe_name, write_report
    from .report.interrupts import checkpoint, interrupt_behind, settle, signal_pending, signals_deferred

    if out is not None and not out.strip():
        raise LlmcalcError("--out is empty; give a directory for the report (default: reports/<model names>)")
    _need_report_libraries()
    scenario = make_scenario(seq_len, tokens, gpu, n_gpus, mfu=mfu, usd_per_gpu_hour=usd_per_gpu_hour, recipe=recipe,
                             zero=zero, tp=tp, micro_batch=micro_batch,
                             recompute=recompute, causal=causal)
    specs = load_models(models, seq_len)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise click.UsageError(f"models must differ; got {', '.join(models)}")
    if profile_mode != "none":
        _check_profile_size(specs, micro_batch, seq_len, virtual=profile_mode == "virtual")
    _check_report_extras(specs, finetune_cfg, sharded_world, tp)
    target = Path(out) if out else Path("reports") / "+".join(safe_name(n) for n in names)
    check_destination(target, force)
    sources = {s.name: model_source(m) for s, m in zip(specs, models, strict=True)}
    meta = provenance(getattr(click.get_current_context().find_root().command, "argv", sys.argv[1:]), sources,
                      scenario)
    profiles = None
    steps = (6 + (len(specs) if profile_mode != "none" else 0) + serving + (finetune_cfg is not None)
             + (len(specs) if sharded_world else 0))
    progress = Progress(steps, "report")
    try:
        try:
            if profile_mode != "none":
                _need_torch()
                from .profiling.measure import peak_for, real_profile, virtual_profile

                profiles = {}
                for spec in specs:
                    progress.step(f"profiling {spec.name}")
                    if profile_mode == "virtual":
                        profiles[spec.name] = virtual_profile(spec, micro_batch, seq_len, recipe, "full" if recompute ==
                                                              "full" else "none")
                    else:
                        peak, source = peak_for("cpu", "fp32")
                        profiles[spec.name] = real_profile(spec, "cpu", micro_batch, seq_len, "fp32", steps=3, warmup=1,
                                                           peak_flops=peak, peak_source=source)
            sharded = (_sharded_profiles(specs, sharded_world, tp, micro_batch, seq_len, progress=progress)
                       if sharded_world else None)
            from .report.planning import Extras, build_report

            extras = Extras(profiles=profiles, serve=serving, finetune=finetune_cfg, sharded=sharded)
            built = build_report(specs, sources, scenario, load_hardware, progress=progress, meta=meta, extras=extras)
        finally:
            progress.close()
        written = write_report(built, target, force, meta)
        with signals_deferred():  # the success message only when no signal came: one outcome, one message
            checkpoint()  # one that came earlier and whose exception Python dropped
            if not signal_pending():
                settle()  # success from here on: a later signal cannot turn it into a second message
                files = sorted(["report.md", "report.html", MARKER, *built.files])
                click.echo(f"llmcalc: report written to {written}/ ({len(files)} files)", err=True)
                doc = Document(f"report {written}: seq {seq_len:,}", {"out": str(written), "files": files},
                               [Table("files", [Column("file", "file", align="left")], [{"file": f} for f in files])])
                emit(doc, fmt)
    except (Interrupted, Exception) as exc:  # an error raised while an interrupt unwound is that interrupt
        interrupt = interrupt_behind(exc)
        if interrupt is None:
            raise
        interrupt.state = interrupt.state or outcome(target, meta)  # write_report says when it knows
        raise interrupt from None


def _need_report_libraries():
    import importlib.util

    missing = [m for m in ("pandas", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise LlmcalcError(f"reports need {' and '.join(missing)}: pip install 'llmcalc[report]'")


def _need_torch():
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise LlmcalcError("profiling needs torch: pip install 'llmcalc[profile]' (on a CPU-only machine install "
                           "torch==2.13.0 first)") from None


def _check_profile_size(specs, batch, seq_len, virtual, recipe="fp32", device="cpu"):
    """Refuse, with the estimate, a profile this machine cannot hold (real) or build in seconds (virtual)."""
    from .analytic.memory import training_memory

    for spec in specs:
        if spec.total_layers > MAX_PROFILE_LAYERS:
            raise click.UsageError(f"{spec.name} has {spec.total_layers:,} layers; a profile builds every one: use "
                                   f"--layers N (at most {MAX_PROFILE_LAYERS:,})")
        if virtual or spec.architecture != "decoder":
            continue
        from .profiling.measure import available_memory

        need = training_memory(spec, batch, seq_len, recipe, "adamw", optimizer_impl="for-loop").peak
        have = available_memory(device)
        if have is not None and need > 0.8 * have:
            raise click.UsageError(
                f"a real {device} profile of {spec.name} at micro-batch {batch} x seq {seq_len:,} ({recipe}) needs "
                f"about {need / GIB:,.1f} GiB, and this machine has {have / GIB:,.1f} GiB available: use "
                f"--virtual, or fewer layers (--layers 2) or a shorter --seq-len")


@cli.command()
@click.argument("model", type=NAME)
@click.option("--virtual", is_flag=True, help="FakeTensorMode: any size, no real memory, exact counts.")
@click.option("--device", type=Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Real runs: auto (cuda if present), cpu, cuda.")
@click.option("--dtype", type=DType(("fp32", "bf16", "fp16"), extra=("auto",)), default="auto", show_default=True,
              help="fp32, bf16 or fp16 (auto: bf16 virtual or on CUDA, fp32 on CPU); picks the recipe.")
@click.option("--recipe", type=Choice(["fp32", "bf16", "bf16-mixed", "fp16-mixed", "amp"]), default=None,
              help="Instead of --dtype: fp32, bf16, bf16-mixed, fp16-mixed, amp.")
@click.option("--micro-batch", "--batch-size", "batch_size", type=POSITIVE_INT, default=1, show_default=True,
              help="Sequences per step (--batch-size is the old name).")
@click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP)
@click.option("--steps", type=Count(whole=True, maximum=MAX_PROFILE_STEPS), default=10, show_default=True,
              help="Real runs: timed steps (median).")
@click.option("--warmup", type=click.IntRange(0, 100), default=2, show_default=True, help="Real runs: untimed steps.")
@click.option("--compile", "compile_", is_flag=True, help="Real runs: torch.compile (its first step timed apart).")
@click.option("--counter", type=Choice(["torch", "fvcore", "both"]), default="torch", show_default=True,
              help="FlopCounterMode, fvcore (real runs) or both.")
@click.option("--recompute", type=Choice(["none", "full"]), default="none", show_default=True,
              help="full: one activation checkpoint per block (the reference model has no selective mode).")
@click.option("--attention", type=ATTENTION, default="flash", show_default=True, help=ATTENTION_HELP)
@click.option("--layers", type=Count(whole=True, maximum=MAX_PROFILE_LAYERS), default=None,
              help="Use only this many layers (to fit a real run).")
@click.option("--peak-tflops", type=Number(maximum=MAX_TFLOPS), default=None,
              help="Real runs: peak for MFU (default: catalog or calibration).")
@click.option("--world-size", type=POSITIVE_INT, default=None,
              help="With --virtual: profile rank 0 of this many ranks (FSDP2 over dp x DTensor TP, "
                   "fake process group).")
@click.option("--nproc", type=POSITIVE_INT, default=None,
              help="Real runs: launch this many ranks with torch.distributed.run (gloo on CPU, nccl on CUDA).")
@click.option("--tp", type=POSITIVE_INT, default=1, show_default=True,
              help="Sharded runs: tensor-parallel degree; dp = world size / tp.")
@click.option("--all-layers", is_flag=True,
              help="Virtual sharded runs: measure every block (default past 8: 2 and 4 blocks, extrapolated).")
@finetune_options
@format_option
@click.pass_context
def profile(ctx, model, virtual, device, dtype, recipe, batch_size, seq_len, steps, warmup, compile_, counter,
            recompute, attention, layers, peak_tflops, finetune, lora_rank, lora_targets, base_dtype, double_quant,
            world_size, nproc, tp, all_layers, fmt):  # long: one dispatch over the profile kinds, each refusal first
    """Build MODEL in PyTorch, measure FLOPs, memory and speed, and hold every formula against them."""
    from .views.profile import profile_document

    if recipe is not None:
        refuse_unused(ctx, ("dtype",), "with --recipe (the recipe fixes the dtypes)")
    if virtual:
        refuse_unused(ctx, ("steps", "warmup", "compile_", "peak_tflops", "device"),
                      "with --virtual (nothing runs on a device)")
        if counter != "torch":
            raise click.UsageError("--counter: fvcore traces real tensors; with --virtual use --counter torch")
    spec = load_model(model, seq_len)
    _need_torch()
    from .profiling.model import check_buildable

    check_buildable(spec)
    if layers is not None:
        if layers > spec.n_layers:
            raise click.UsageError(f"--layers {layers} exceeds {spec.name}'s {spec.n_layers} layers")
        spec = spec.replace(n_layers=layers, name=f"{spec.name} ({layers} layers)",
                            n_dense_layers=min(spec.n_dense_layers, layers),
                            moe_layers=None if spec.moe_layers is None
                            else tuple(i for i in spec.moe_layers if i < layers),
                            n_decoder_layers=layers if spec.n_decoder_layers else None)
    internal_attention = "sdpa" if attention == "flash" else "eager"
    cfg = make_finetune(finetune, lora_rank, lora_targets, base_dtype, double_quant)
    if world_size is not None or nproc is not None:
        if cfg is not None:
            raise LlmcalcError("sharded profiles train the full model; drop --finetune or --world-size/--nproc")
        if recipe is not None or recompute != "none":
            raise LlmcalcError("sharded profiles fix their precision with --dtype (bf16: FSDP2 mixed precision, or "
                               "fp32) and do not recompute; drop --recipe/--recompute")
        _need_torch()
        from .profiling.distributed import with_layers
        from .profiling.launch import sharded_profile
        from .views.profile import distributed_document

        if layers is not None:  # keeps n_kv_heads (ModelSpec.replace would derive MHA again)
            base = load_model(model, seq_len)
            spec = with_layers(base, layers, name=f"{base.name} ({layers} layers)")

        emit(distributed_document(sharded_profile(
            spec, model, layers, virtual, world_size, nproc=nproc, tp=tp, device=device, dtype=dtype,
            batch=batch_size, seq=seq_len, steps=steps, warmup=warmup, attention=internal_attention,
            peak_tflops=peak_tflops, all_layers=all_layers)), fmt)
        return
    if tp != 1:
        raise LlmcalcError("--tp needs a sharded run: add --virtual --world-size N or --nproc N")
    if cfg is not None:
        if not virtual:
            raise LlmcalcError("fine-tuning profiles run virtually: add --virtual")
        from .profiling.lora import virtual_finetune_profile

        emit(profile_document(virtual_finetune_profile(spec, cfg, batch_size, seq_len, recompute)), fmt)
        return
    if virtual:
        _check_profile_size([spec], batch_size, seq_len, virtual=True)
        _need_torch()
        from .profiling.measure import virtual_profile

        recipe = recipe or {"fp32": "fp32", "fp16": "fp16-mixed"}.get(dtype, "bf16-mixed")
        emit(profile_document(virtual_profile(spec, batch_size, seq_len, recipe, recompute=recompute,
                                              attention=internal_attention)), fmt)
        return
    _need_torch()
    from .profiling.measure import peak_for, real_profile, resolve_device

    device = resolve_device(device)
    if dtype == "auto":
        dtype = "bf16" if device == "cuda" else "fp32"
    recipe = recipe or {"fp32": "fp32", "bf16": "bf16-mixed", "fp16": "fp16-mixed"}[dtype]
    _check_profile_size([spec], batch_size, seq_len, virtual=False, recipe=recipe, device=device)
    compute_dtype = "fp32" if recipe == "fp32" else "fp16" if recipe == "fp16-mixed" else "bf16"
    peak, source = peak_for(device, compute_dtype, peak_tflops)
    result = real_profile(spec, device, batch_size, seq_len, recipe=recipe, recompute=recompute,
                          attention=internal_attention, steps=steps, warmup=warmup,
                          compile=compile_, counter=counter, peak_flops=peak, peak_source=source)
    emit(profile_document(result), fmt)


@cli.command()
@click.option("--device", type=Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto, cpu or cuda.")
@click.option("--dtype", type=DType(("fp32", "bf16", "fp16")), default="fp32", show_default=True,
              help="Matmul dtype (bfloat16 = bf16).")
@click.option("--size", type=Count(whole=True, minimum=16, maximum=MAX_CALIBRATE_SIZE), default=None,
              help="Matrix size (default 1024 on CPU, 8192 on CUDA).")
@click.option("--seconds", type=Number(maximum=MAX_CALIBRATE_SECONDS, minimum=1e-3), default=2.0,
              show_default=True, help=f"How long to keep timing (at most {MAX_CALIBRATE_SECONDS:g} s).")
@format_option
def calibrate(device, dtype, size, seconds, fmt):
    """Achievable matmul FLOP/s on this device: the peak `profile` uses for CPUs and unknown GPUs."""
    _need_torch()
    from .presets import find_accelerator
    from .profiling.measure import calibrate as run
    from .profiling.measure import device_name, resolve_device, torch_dtype
    from .views.calibrate import calibrate_document

    device = resolve_device(device)
    size = size or (8192 if device == "cuda" else 1024)
    flops = run(device, torch_dtype(dtype), size, seconds)
    catalog = None
    acc = find_accelerator(device_name(device)) if device == "cuda" else None
    if acc is not None and dtype in acc.peak_flops:
        catalog = {"preset": acc.key, "peak_flops_per_s": acc.peak(dtype)}
    emit(calibrate_document(device_name(device), dtype, size, flops, catalog), fmt)


def main() -> None:
    cli(prog_name="llmcalc")
