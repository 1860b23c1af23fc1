"""The `llmcalc` command line: thin click commands over the analytic core.

Data goes to stdout, messages to stderr. Bad input (an ``LlmcalcError`` or a click usage error) is
one line on stderr and exit code 2, never a traceback. Heavy modules (torch, pandas, matplotlib)
are imported inside the commands that need them, so `llmcalc params <preset>` starts fast.
"""

from __future__ import annotations

import sys

import click

from .errors import LlmcalcError
from .report.tables import FORMATS, render
from .units import UnitError, fmt_count, parse_count, parse_length

EXIT_BAD_INPUT = 2


class LlmcalcGroup(click.Group):
    """A click group whose errors are one line on stderr with a non-zero exit."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            click.echo(f"llmcalc: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("llmcalc: aborted", err=True)
            sys.exit(1)
        except LlmcalcError as exc:
            click.echo(f"llmcalc: error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv


class Quantity(click.ParamType):
    """A count typed the human way: 7B, 1.5T, 300k, 2e12 (SI; B = billion)."""

    name = "quantity"

    def convert(self, value, param, ctx):
        try:
            return parse_count(value, param.name.replace("_", "-") if param else "quantity")
        except UnitError as exc:
            self.fail(str(exc), param, ctx)


class Length(click.ParamType):
    """A sequence length in tokens: 2048, 4k (= 4096), 32k."""

    name = "length"

    def convert(self, value, param, ctx):
        try:
            length = parse_length(value, param.name.replace("_", "-") if param else "length")
        except UnitError as exc:
            self.fail(str(exc), param, ctx)
        if length <= 0:
            self.fail(f"must be a positive number of tokens, got {value}", param, ctx)
        return length


QUANTITY, LENGTH = Quantity(), Length()
POSITIVE_INT = click.IntRange(min=1)


def format_option(func):
    return click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
        help="table for terminals; markdown, csv (the main table, raw numbers) or json (everything).",
    )(func)


def emit(doc, fmt: str) -> None:
    click.echo(render(doc, fmt), nl=False)


@click.group(cls=LlmcalcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmcalc")
def cli() -> None:
    """How big is a Transformer, how many FLOPs, how much memory, how long and how much to train."""


@cli.command()
@format_option
def presets(fmt: str) -> None:
    """Every model and accelerator preset, one line each."""
    from .report.views_params import presets_document

    emit(presets_document(), fmt)


@cli.command()
@click.argument("model")
@format_option
def params(model: str, fmt: str) -> None:
    """Exact parameter count of MODEL by component, beside the classic approximations.

    MODEL is a preset name (see `llmcalc presets`), a Hugging Face config.json, or a folder
    holding one.
    """
    from .analytic.params import count_params
    from .presets import load_model, model_source
    from .report.views_params import params_document

    spec = load_model(model)
    emit(params_document(count_params(spec), model_source(model)), fmt)


def seq_options(func):
    func = click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none",
                        show_default=True, help="Activation recomputation: adds hardware FLOPs, not model FLOPs.")(func)
    func = click.option("--causal", is_flag=True,
                        help="Halve the attention S² terms (Megatron/NeMo convention). Default: full S².")(func)
    func = click.option("--seq-len", type=LENGTH, default="2048", show_default=True,
                        help="Tokens per sequence (4k = 4096).")(func)
    return func


@cli.command()
@click.argument("model")
@seq_options
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True, help="Sequences per step.")
@click.option("--decoder-seq-len", type=LENGTH, default=None,
              help="Encoder-decoder models: decoder tokens per sequence (default: --seq-len).")
@format_option
def flops(model, seq_len, causal, recompute, batch_size, decoder_seq_len, fmt):
    """Forward and backward FLOPs of one step of MODEL, per operation, with the rules of thumb."""
    from .analytic.flops import step_flops
    from .analytic.params import count_params
    from .presets import load_model
    from .report.views_compute import flops_document

    spec = load_model(model)
    step = step_flops(spec, batch_size, seq_len, causal, recompute, decoder_seq_len)
    emit(flops_document(step, count_params(spec)), fmt)


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
        click.option("--ep", **ints, help="Expert-parallel degree, carved from dp (MoE models)."),
        click.option("--schedule", type=click.Choice(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"]), default=None,
                     help="Pipeline schedule (default 1f1b; interleaved with --vpp)."),
        click.option("--zero", type=click.IntRange(0, 3), default=None, help="ZeRO stage over dp (default 1; 3 = FSDP)."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="TP with sequence parallelism (default on)."),
        click.option("--dp-overlap/--no-dp-overlap", default=None, help="Overlap DP reduction with backward (default on)."),
        click.option("--tokens-per-second", type=QUANTITY, default=None,
                     help="Cluster-wide throughput of a past run: its achieved MFU/HFU."),
    ]):
        func = option(func)
    return func


@cli.command()
@click.argument("model", required=False)
@click.option("--params", "n_params", type=QUANTITY, help="No model: a parameter count for 6·N·T (e.g. 7B).")
@click.option("--tokens", type=QUANTITY, required=True, help="Training tokens (e.g. 2T).")
@click.option("--gpu", required=True, help="Accelerator preset (see `llmcalc presets`).")
@click.option("--n-gpus", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--mfu", type=float, help="Model FLOPs utilization in (0, 1], e.g. 0.4.")
@click.option("--achieved-tflops", type=float,
              help="Instead of --mfu: achieved TFLOP/s per GPU (hardware FLOPs, recomputation included).")
@click.option("--usd-per-gpu-hour", type=float, help="Price per GPU-hour (default: the preset's, if any).")
@click.option("--dtype", default="bf16", show_default=True, help="Which peak to use: bf16, fp16, fp8, tf32, fp32.")
@seq_options
@layout_options
@format_option
def train(model, n_params, tokens, gpu, n_gpus, mfu, achieved_tflops, usd_per_gpu_hour, dtype, seq_len, causal,
          recompute, fmt, **layout):
    """Training FLOPs, GPU-hours, wall-clock, cost and energy for TOKENS on N GPUs."""
    from .analytic.training import TrainingEstimate
    from .hardware import canonical_dtype
    from .presets import load_hardware
    from .report.views_compute import train_document

    if (model is None) == (n_params is None):
        raise LlmcalcError("give a MODEL (preset or config.json) or --params N, not both")
    if tokens <= 0:
        raise LlmcalcError(f"--tokens must be positive, got {tokens:g}")
    accelerator = load_hardware(gpu)
    inputs = {"model": model or f"{fmt_count(n_params)} params", "tokens": tokens, "seq_len": seq_len, "causal": causal,
              "recompute": recompute}
    if model is not None:
        from .analytic.flops import step_flops
        from .analytic.params import count_params
        from .presets import load_model

        spec = load_model(model)
        step = step_flops(spec, 1, seq_len, causal, recompute)
        n = count_params(spec).active_per_token
        model_flops = step.model_flops_per_token * tokens
        hardware_flops = step.hardware_flops_per_token * tokens
        inputs["flops_basis"] = (f"training FLOPs = exact per-op count per token at seq {seq_len} "
                                 f"({'causal' if causal else 'full S²'}) x tokens; 6·N·T with N = {n:,} "
                                 f"{'active ' if spec.is_moe else ''}params")
    else:
        if n_params <= 0:
            raise LlmcalcError(f"--params must be positive, got {n_params:g}")
        if recompute == "selective":
            raise LlmcalcError("--recompute selective needs a MODEL (its attention shapes); use none or full")
        n = n_params
        model_flops = 6 * n * tokens
        hardware_flops = model_flops + (2 * n * tokens if recompute == "full" else 0)
        inputs["flops_basis"] = "training FLOPs = 6·N·T (no model given; full recomputation adds 2·N·T)"
    from .analytic.steptime import train_steptime

    mfu, pred, measured = train_steptime(model and spec, gpu, n_gpus, mfu, achieved_tflops, canonical_dtype(dtype),
                                         seq_len, causal, recompute, model_flops / tokens, hardware_flops / tokens,
                                         accelerator, layout)
    est = TrainingEstimate(
        tokens=tokens, model_flops=model_flops, hardware_flops=hardware_flops, accelerator=accelerator,
        dtype=canonical_dtype(dtype), n_gpus=n_gpus, mfu=mfu,
        achieved_flops_per_s=None if achieved_tflops is None else achieved_tflops * 1e12,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )
    emit(train_document(est, inputs, 6 * n * tokens, pred, measured), fmt)


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Accelerator preset with a network block (see `llmcalc presets`).")
@click.option("--n-gpus", type=POSITIVE_INT, required=True, help="GPUs in all.")
@click.option("--seq-len", type=LENGTH, default="4k", show_default=True)
@click.option("--global-batch", type=POSITIVE_INT, default=None, help="Sequences per optimizer step.")
@click.option("--global-batch-tokens", type=QUANTITY, default=None, help="Instead: tokens per step (e.g. 4M).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default=None,
              help="Default: the least recomputation that fits, per layout.")
@click.option("--causal", is_flag=True, help="Halve the attention S² FLOPs (Megatron convention).")
@click.option("--top", type=POSITIVE_INT, default=10, show_default=True, help="How many layouts to list.")
@format_option
def layout(model, gpu, n_gpus, seq_len, global_batch, global_batch_tokens, recompute, causal, top, fmt):
    """Rank the parallel layouts of MODEL on N GPUs that fit in memory, by predicted throughput."""
    from .analytic.steptime import search_layouts
    from .presets import load_model
    from .report.document import Progress
    from .report.views_steptime import layout_document

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
        ranked, losers, counts = search_layouts(spec, gpu, n_gpus, seq_len, global_batch, causal, recompute,
                                                progress=progress)
    finally:
        for bar in bars:
            bar.close()
    if not ranked:
        raise LlmcalcError(f"no layout of {spec.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{global_batch} ({counts['oom']} do not fit in memory, {counts['invalid']} contradict the "
                           f"model): use more GPUs or a larger --global-batch")
    emit(layout_document(spec.name, gpu, n_gpus, seq_len, global_batch, ranked, losers, counts, top), fmt)


@cli.command()
@click.option("--compute", type=QUANTITY, help="A compute budget in FLOPs (e.g. 1e24).")
@click.option("--gpu", help="Or: the cluster's accelerator preset ...")
@click.option("--n-gpus", type=POSITIVE_INT, help="... how many ...")
@click.option("--days", type=float, help="... for how long ...")
@click.option("--mfu", type=float, help="... at which model FLOPs utilization.")
@click.option("--dtype", default="bf16", show_default=True)
@format_option
def plan(compute, gpu, n_gpus, days, mfu, dtype, fmt):
    """Compute-optimal model size and tokens for a FLOP budget, or for what a cluster delivers."""
    from .analytic.training import cluster_compute, compute_optimal
    from .presets import load_hardware
    from .report.views_compute import plan_document

    cluster = (gpu, n_gpus, days, mfu)
    if compute is not None and any(v is not None for v in cluster):
        raise LlmcalcError("give --compute, or --gpu/--n-gpus/--days/--mfu, not both")
    if compute is None:
        missing = [n for n, v in zip(("--gpu", "--n-gpus", "--days", "--mfu"), cluster) if v is None]
        if missing:
            raise LlmcalcError(f"give --compute FLOPS, or a cluster: missing {', '.join(missing)}")
        accelerator = load_hardware(gpu)
        compute = cluster_compute(accelerator, n_gpus, days * 86400.0, mfu, dtype)
        basis = (f"budget = {n_gpus:,} x {accelerator.key} at {accelerator.peak(dtype) / 1e12:g} TFLOP/s "
                 f"dense {dtype} x MFU {mfu:g} x {days:g} days")
        inputs = {"gpu": gpu, "n_gpus": n_gpus, "days": days, "mfu": mfu, "dtype": dtype, "basis": basis}
    else:
        inputs = {"basis": f"budget = {compute:.3g} FLOPs (given)"}
    emit(plan_document(compute, compute_optimal(compute), inputs), fmt)


@cli.command()
@click.argument("model")
@click.option("--seq-len", type=LENGTH, default="2048", show_default=True, help="Training: tokens per sequence.")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True, help="Micro-batch (sequences per GPU).")
@click.option("--recipe", default="bf16-mixed", show_default=True,
              help="Precision recipe: fp32, bf16-mixed, bf16-mixed-fp32-grads, fp16-mixed, bf16, amp.")
@click.option("--optimizer", default="adamw", show_default=True, help="adamw, adam, sgd, lion, adam8bit.")
@click.option("--optimizer-bytes", type=float, help="Instead of --optimizer: optimizer bytes per parameter.")
@click.option("--optimizer-impl", type=click.Choice(["fused", "foreach", "for-loop"]), default="fused",
              show_default=True, help="Optimizer-step scratch: fused none, torch foreach a copy of every state.")
@click.option("--recompute", default="none", show_default=True, help="Activation recomputation: none, selective, full.")
@click.option("--attention", default="flash", show_default=True,
              help="flash (sdpa, no S² buffers) or eager (keeps the B·H·S² softmax output).")
@click.option("--dropout", is_flag=True, help="Count dropout masks (GPT-3-style training; off for modern LLMs).")
@click.option("--gpu", help="Accelerator preset: say whether it fits, and the largest micro-batch that does.")
@click.option("--n-gpus", type=int, default=None, help="GPUs in all (default tp x pp): dp = n / (tp x pp).")
@click.option("--zero", type=int, default=0, show_default=True, help="ZeRO stage over data parallelism: 0-3.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel degree (1F1B).")
@click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True)
@click.option("--reserve-gib", type=float, default=0.0, show_default=True,
              help="Memory to keep free on the GPU (CUDA context, fragmentation).")
@click.option("--inference", is_flag=True, hidden=True, help="Moved: serving memory is `llmcalc serve`.")
@click.option("--context", "--weight-dtype", "--kv-dtype", "--prefill-chunk", "moved_option", hidden=True,
              help="Options of the moved --inference mode (kept so that old command lines reach its message).")
@format_option
def memory(model, seq_len, batch_size, recipe, optimizer, optimizer_bytes, optimizer_impl, recompute, attention,
           dropout, gpu, n_gpus, zero, tp, pp, sequence_parallel, reserve_gib, inference, moved_option, fmt):
    """Training memory per GPU of MODEL, and whether it fits (serving memory: `llmcalc serve`)."""
    from .presets import load_hardware, load_model

    if inference or moved_option is not None:
        raise LlmcalcError("memory --inference has moved: use `llmcalc serve MODEL --gpu G --n-gpus N "
                           "--max-model-len L` (weights, KV cache and blocks per GPU, concurrency)")
    spec = load_model(model)
    device = load_hardware(gpu) if gpu else None
    if reserve_gib < 0:
        raise LlmcalcError(f"--reserve-gib must be >= 0, got {reserve_gib:g}")
    reserve = reserve_gib * 2**30
    from .analytic.memory import Parallel, custom_optimizer, training_memory
    from .report.views_memory import training_memory_document

    opt = custom_optimizer(optimizer_bytes) if optimizer_bytes is not None else optimizer
    est = training_memory(spec, batch_size, seq_len, recipe, opt, recompute, attention,
                          Parallel(n_gpus or tp * pp, tp, pp, zero, sequence_parallel), dropout, optimizer_impl)
    emit(training_memory_document(est, device, reserve), fmt)


def _warn(line: str | None) -> None:
    if line:
        click.echo(f"llmcalc: warning: {line}", err=True)


def serving_options(func):
    options = [
        click.option("--weight-dtype", default="bf16", show_default=True,
                     help="bf16, fp16, fp8, int8, int4 (group-wise scales, group 128) or fp32."),
        click.option("--kv-dtype", default=None, help="KV cache dtype (default: the activation dtype, bf16 or fp16)."),
        click.option("--compute-dtype", default=None,
                     help="Which peak to use (default: fp8 for fp8 weights where the device has it, else bf16)."),
        click.option("--n-gpus", type=POSITIVE_INT, default=1, show_default=True, help="Tensor-parallel GPUs."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Accelerator preset.")
@click.option("--prompt", type=LENGTH, default="2k", show_default=True, help="Prompt tokens per sequence.")
@click.option("--generate", type=POSITIVE_INT, default=256, show_default=True, help="Tokens to generate.")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True)
@serving_options
@format_option
def infer(model, gpu, prompt, generate, batch_size, weight_dtype, kv_dtype, compute_dtype, n_gpus, fmt):
    """Prefill and decode time and tokens/s of MODEL on a GPU: a roofline, an upper bound on speed."""
    from .analytic.inference import InferenceEstimate, check_inference, context_warning, resolve_dtypes
    from .presets import load_hardware, load_model
    from .report.views_memory import infer_document

    spec = load_model(model)
    accelerator = load_hardware(gpu)
    check_inference(batch_size, prompt, generate)
    weight_dtype, kv_dtype, compute_dtype = resolve_dtypes(accelerator, weight_dtype, kv_dtype, compute_dtype)
    est = InferenceEstimate(spec, accelerator, batch_size, prompt, generate, weight_dtype, kv_dtype, compute_dtype,
                            n_gpus)
    _warn(context_warning(spec, prompt + generate))
    emit(infer_document(est), fmt)


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Accelerator preset.")
@serving_options
@click.option("--max-model-len", type=LENGTH, default=None,
              help="Tokens per request the KV cache must hold (default: the model's max_position_embeddings).")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
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
    from .report.views_serve import serve_document

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
    est = ServeEstimate(spec, accelerator, n_gpus, max_model_len, gpu_memory_utilization, weight_dtype, kv_dtype,
                        compute_dtype, block_size)
    _warn(context_warning(spec, max_model_len))
    emit(serve_document(est), fmt)


def scenario_options(func):
    options = [
        click.option("--seq-len", type=LENGTH, default="4k", show_default=True),
        click.option("--tokens", type=QUANTITY, default="2T", show_default=True, help="Training tokens."),
        click.option("--gpu", default="h100-sxm", show_default=True, help="Accelerator preset."),
        click.option("--n-gpus", type=POSITIVE_INT, default=256, show_default=True),
        click.option("--mfu", type=float, default=0.4, show_default=True, help="Model FLOPs utilization assumed."),
        click.option("--usd-per-gpu-hour", type=float, default=None, help="Default: the preset's price, if any."),
        click.option("--recipe", default="bf16-mixed", show_default=True, help="Memory: precision recipe."),
        click.option("--zero", type=int, default=3, show_default=True, help="Memory: ZeRO stage over the GPUs."),
        click.option("--tp", type=int, default=1, show_default=True, help="Memory: tensor-parallel degree."),
        click.option("--micro-batch", type=POSITIVE_INT, default=1, show_default=True, help="Memory: sequences per GPU."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none",
                     show_default=True),
        click.option("--causal", is_flag=True, help="Halve the attention S² FLOPs (Megatron convention)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_scenario(seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
                  causal):
    from .analytic.summary import Scenario
    from .presets import load_hardware

    if tokens <= 0:
        raise LlmcalcError(f"--tokens must be positive, got {tokens:g}")
    if not 0 < mfu <= 1:
        raise LlmcalcError(f"MFU must be in (0, 1], got {mfu}")
    return Scenario(seq_len, tokens, load_hardware(gpu), n_gpus, mfu, usd_per_gpu_hour, recipe=recipe, zero=zero,
                    tp=tp, micro_batch=micro_batch, recompute=recompute, causal=causal)


@cli.command()
@click.argument("models", nargs=-1, required=True)
@scenario_options
@click.option("--sort", "sort_key", default=None, help="Order the models by a column (e.g. gpu_hours).")
@click.option("--reverse", is_flag=True, help="Sort descending.")
@format_option
def compare(models, seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
            causal, sort_key, reverse, fmt):
    """MODELS side by side: size, FLOPs, KV cache, training time and cost, memory per GPU."""
    from .analytic.summary import model_record
    from .presets import load_model
    from .report.views_compare import compare_document, sort_records

    scenario = make_scenario(seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch,
                             recompute, causal)
    specs = [load_model(m) for m in models]  # every name checked before any work
    records = sort_records([model_record(spec, scenario) for spec in specs], sort_key, reverse)
    emit(compare_document(records, scenario), fmt)


@cli.command()
@click.argument("models", nargs=-1, required=True)
@scenario_options
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Report directory (default: reports/<model names>).")
@click.option("--force", is_flag=True, help="Replace an existing report in --out.")
@click.option("--profile", "profile_mode", type=click.Choice(["none", "virtual", "real"]), default="none",
              show_default=True, help="Also profile each model and show formulas against measurements.")
@click.option("--serve", "serving", is_flag=True,
              help="Add serving figures: KV blocks, concurrency and throughput at --seq-len tokens per request.")
@format_option
def report(models, seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch, recompute,
           causal, out, force, profile_mode, serving, fmt):
    """A planning report for MODELS: report.md, self-contained report.html, figures (PNG), tables (CSV)."""
    from pathlib import Path

    from .presets import load_hardware, load_model, model_source
    from .report.document import Progress, check_destination, safe_name, write_report
    from .report.tables import Column, Document, Table

    _need_report_libraries()
    scenario = make_scenario(seq_len, tokens, gpu, n_gpus, mfu, usd_per_gpu_hour, recipe, zero, tp, micro_batch,
                             recompute, causal)
    specs = [load_model(m) for m in models]  # every name checked before any work
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise LlmcalcError(f"models must differ; got {', '.join(models)}")
    target = Path(out) if out else Path("reports") / "+".join(safe_name(n) for n in names)
    check_destination(target, force)
    sources = {s.name: model_source(m) for s, m in zip(specs, models)}
    profiles = None
    steps = 6 + (len(specs) if profile_mode != "none" else 0) + serving
    progress = Progress(steps, "report")
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
        from .report.planning import build_report

        built = build_report(specs, sources, scenario, load_hardware, profiles, progress, serving)
    finally:
        progress.close()
    written = write_report(built, target, force)
    files = sorted(["report.md", "report.html", *built.files])
    click.echo(f"llmcalc: report written to {written}/ ({len(files)} files)", err=True)
    doc = Document(f"report {written}", {"out": str(written), "files": files},
                   [Table("files", [Column("file", "file", align="left")], [{"file": f} for f in files])])
    emit(doc, fmt)


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


@cli.command()
@click.argument("model")
@click.option("--virtual", is_flag=True, help="FakeTensorMode: any size, no real memory, exact counts.")
@click.option("--device", default="auto", show_default=True, help="Real runs: auto (cuda if present), cpu, cuda.")
@click.option("--dtype", default="auto", show_default=True,
              help="fp32, bf16 or fp16 (auto: bf16 virtual or on CUDA, fp32 on CPU); picks the recipe.")
@click.option("--recipe", default=None, help="fp32, bf16, bf16-mixed, fp16-mixed, amp (default from --dtype).")
@click.option("--batch-size", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--seq-len", type=LENGTH, default="2048", show_default=True)
@click.option("--steps", type=POSITIVE_INT, default=10, show_default=True, help="Real runs: timed steps (median).")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Real runs: untimed steps.")
@click.option("--compile", "compile_", is_flag=True, help="Real runs: torch.compile (its first step timed apart).")
@click.option("--counter", type=click.Choice(["torch", "fvcore", "both"]), default="torch", show_default=True,
              help="FlopCounterMode, fvcore (real runs) or both.")
@click.option("--recompute", type=click.Choice(["none", "full"]), default="none", show_default=True,
              help="full: one activation checkpoint per block.")
@click.option("--attention", type=click.Choice(["sdpa", "eager"]), default="sdpa", show_default=True)
@click.option("--layers", type=POSITIVE_INT, default=None, help="Use only this many layers (to fit a real run).")
@click.option("--peak-tflops", type=float, default=None, help="Peak for MFU (default: catalog or calibration).")
@click.option("--world-size", type=POSITIVE_INT, default=None,
              help="With --virtual: profile rank 0 of this many ranks (FSDP2 over dp x DTensor TP, fake process group).")
@click.option("--nproc", type=POSITIVE_INT, default=None,
              help="Real runs: launch this many ranks with torch.distributed.run (gloo on CPU, nccl on CUDA).")
@click.option("--tp", type=POSITIVE_INT, default=1, show_default=True,
              help="Sharded runs: tensor-parallel degree; dp = world size / tp.")
@click.option("--all-layers", is_flag=True,
              help="Virtual sharded runs: measure every block (default past 8: 2 and 4 blocks, extrapolated).")
@format_option
def profile(model, virtual, device, dtype, recipe, batch_size, seq_len, steps, warmup, compile_, counter, recompute,
            attention, layers, peak_tflops, world_size, nproc, tp, all_layers, fmt):
    """Build MODEL in PyTorch, measure FLOPs, memory and speed, and hold every formula against them."""
    _need_torch()
    from .presets import load_model
    from .report.views_profile import profile_document

    spec = load_model(model)
    if layers is not None:
        spec = spec.replace(n_layers=layers, name=f"{spec.name} ({layers} layers)",
                            n_dense_layers=min(spec.n_dense_layers, layers),
                            n_decoder_layers=layers if spec.n_decoder_layers else None)
    if world_size is not None or nproc is not None:
        from .profiling.launch import sharded_profile
        from .report.views_distributed import distributed_document

        emit(distributed_document(sharded_profile(spec, model, layers, virtual, world_size, nproc, tp, device, dtype,
                                                  batch_size, seq_len, steps, warmup, attention, peak_tflops, all_layers)), fmt)
        return
    if tp != 1:
        raise LlmcalcError("--tp needs a sharded run: add --virtual --world-size N or --nproc N")
    if virtual:
        from .profiling.measure import virtual_profile

        if counter != "torch":
            raise LlmcalcError("fvcore traces real tensors; with --virtual use --counter torch")
        recipe = recipe or {"fp32": "fp32", "fp16": "fp16-mixed"}.get(dtype, "bf16-mixed")
        emit(profile_document(virtual_profile(spec, batch_size, seq_len, recipe, recompute, attention)), fmt)
        return
    from .profiling.measure import peak_for, real_profile, resolve_device

    device = resolve_device(device)
    if dtype == "auto":
        dtype = "bf16" if device == "cuda" else "fp32"
    recipe = recipe or {"fp32": "fp32", "bf16": "bf16-mixed", "fp16": "fp16-mixed"}.get(dtype)
    if recipe is None:
        raise LlmcalcError(f"--dtype must be fp32, bf16 or fp16; got {dtype!r}")
    compute_dtype = "fp32" if recipe == "fp32" else "fp16" if recipe == "fp16-mixed" else "bf16"
    peak, source = peak_for(device, compute_dtype, peak_tflops)
    result = real_profile(spec, device, batch_size, seq_len, recipe, recompute, attention, steps, warmup, compile_,
                          counter, peak, source)
    emit(profile_document(result), fmt)


@cli.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("--size", type=POSITIVE_INT, default=None, help="Matrix size (default 1024 on CPU, 8192 on CUDA).")
@click.option("--seconds", type=float, default=2.0, show_default=True, help="How long to keep timing.")
@format_option
def calibrate(device, dtype, size, seconds, fmt):
    """Achievable matmul FLOP/s on this device: the peak `profile` uses for CPUs and unknown GPUs."""
    _need_torch()
    from .presets import find_accelerator
    from .profiling.measure import calibrate as run
    from .profiling.measure import device_name, resolve_device, torch_dtype
    from .report.views_profile import calibrate_document

    if seconds <= 0:
        raise LlmcalcError(f"--seconds must be positive, got {seconds:g}")
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
