"""`profile` and `calibrate`: the model built in PyTorch and measured, and the device's achievable matmul rate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..validate import MAX_CALIBRATE_SECONDS, MAX_CALIBRATE_SIZE, MAX_PROFILE_LAYERS, MAX_PROFILE_STEPS
from .common import emit, load_counted
from .options import (
    POSITIVE_INT,
    TFLOPS,
    attention_option,
    device_option,
    finetune_options,
    format_option,
    micro_batch_option,
    model_argument,
    recompute_option,
    refuse_unused,
    seq_len_option,
)
from .types import Choice, Count, DType, Number

if TYPE_CHECKING:
    from ..analytic.finetune_request import FinetuneRequest

@click.command()
@model_argument
@click.option("--virtual", is_flag=True, help="FakeTensorMode: any size, no real memory, exact counts.")
@device_option
@click.option("--dtype", type=DType(("fp32", "bf16", "fp16"), extra=("auto",)), default="auto", show_default=True,
              help="fp32, bf16 or fp16 (auto: bf16 virtual or on CUDA, fp32 on CPU); picks the recipe.")
@click.option("--recipe", type=Choice(["fp32", "bf16", "bf16-mixed", "fp16-mixed", "amp"]), default=None,
              help="Instead of --dtype: fp32, bf16, bf16-mixed, fp16-mixed, amp.")
@micro_batch_option
@seq_len_option
@click.option("--steps", type=Count(whole=True, maximum=MAX_PROFILE_STEPS), default=10, show_default=True,
              help="Real runs: timed steps (median).")
@click.option("--warmup", type=click.IntRange(0, 100), default=2, show_default=True, help="Real runs: untimed steps.")
@click.option("--compile", "compile_", is_flag=True, help="Real runs: torch.compile (its first step timed apart).")
@click.option("--counter", type=Choice(["torch", "fvcore", "both"]), default="torch", show_default=True,
              help="FlopCounterMode, fvcore (real runs) or both.")
@recompute_option(help="none or full: one activation checkpoint per block (the reference model has no selective "
                       "mode).", choices=("none", "full"))
@attention_option
@click.option("--layers", type=Count(whole=True, maximum=MAX_PROFILE_LAYERS), default=None,
              help="Use only this many layers (to fit a real run).")
@click.option("--peak-tflops", type=TFLOPS, default=None,
              help="Real runs: peak for MFU (default: catalog or calibration).")
@click.option("--world-size", type=POSITIVE_INT, default=None,
              help="With --virtual: profile rank 0 of this many ranks (FSDP2 over dp x DTensor TP, "
                   "fake process group).")
@click.option("--nproc", type=POSITIVE_INT, default=None,
              help="Real runs: launch this many ranks with torch.distributed.run (gloo on CPU, nccl on CUDA).")
@click.option("--tp", type=POSITIVE_INT, default=1, show_default=True,
              help="Sharded runs: tensor-parallel degree; dp = world size / tp.")
@click.option("--all-layers", is_flag=True,
              help="Virtual runs: measure every block (default past 8: a few blocks, extrapolated exactly).")
@finetune_options
@format_option
@click.pass_context
def profile(ctx: click.Context, model: str, virtual: bool, device: str, dtype: str, recipe: str | None,
            micro_batch: int, seq_len: int, steps: int, warmup: int, compile_: bool, counter: str, recompute: str,
            attention: str, layers: int | None, peak_tflops: float | None, world_size: int | None,
            nproc: int | None, tp: int, all_layers: bool, finetune: FinetuneRequest, fmt: str) -> None:
    """Build MODEL in PyTorch, measure FLOPs, memory and speed, and hold every formula against them (a model
    without a formula: transformers' model, held to what `params`, `flops` and `memory` answer)."""
    from ..profiling.run import ProfileRequest, run_profile
    from ..render.progress import activity
    from ..views.profile import document

    if recipe is not None:
        refuse_unused(ctx, ("dtype",), "with --recipe (the recipe fixes the dtypes)")
    if virtual:
        refuse_unused(ctx, ("steps", "warmup", "compile_", "peak_tflops", "device"),
                      "with --virtual (nothing runs on a device)")
    else:
        refuse_unused(ctx, ("all_layers",), "without --virtual (a real run measures every block)")
    request = ProfileRequest(model, virtual=virtual, device=device, dtype=dtype, recipe=recipe, batch=micro_batch,
                             seq_len=seq_len, steps=steps, warmup=warmup, compile=compile_, counter=counter,
                             recompute=recompute, attention=attention, layers=layers, peak_tflops=peak_tflops,
                             world_size=world_size, nproc=nproc, tp=tp, all_layers=all_layers, finetune=finetune)
    spec = load_counted(model, seq_len)  # a model without a formula: what transformers counted
    with activity(f"profiling {spec.name} {profile_kind(virtual, world_size, nproc, device)}"):
        result = run_profile(spec, request)
    emit(document(result), fmt)


def profile_kind(virtual: bool, world_size: int | None, nproc: int | None, device: str) -> str:
    """How the profile runs, for its progress line: 'virtually', '(2 ranks, torchrun)', 'on cpu'."""
    if nproc:
        return f"({nproc} ranks, torchrun)"
    if virtual:
        return f"virtually ({world_size} ranks)" if world_size else "virtually"
    return "on the device" if device == "auto" else f"on {device}"


@click.command()
@device_option
@click.option("--dtype", type=DType(("fp32", "bf16", "fp16")), default="fp32", show_default=True,
              help="Matmul dtype (bfloat16 = bf16).")
@click.option("--size", type=Count(whole=True, minimum=16, maximum=MAX_CALIBRATE_SIZE), default=None,
              help="Matrix size (default 1024 on CPU, 8192 on CUDA).")
@click.option("--seconds", type=Number(maximum=MAX_CALIBRATE_SECONDS, minimum=1e-3), default=2.0,
              show_default=True, help=f"How long to keep timing (at most {MAX_CALIBRATE_SECONDS:g} s).")
@format_option
def calibrate(device: str, dtype: str, size: int | None, seconds: float, fmt: str) -> None:
    """Achievable matmul FLOP/s on this device: the peak `profile` uses for CPUs and unknown GPUs."""
    from ..profiling.run import run_calibration
    from ..render.progress import activity
    from ..views.calibrate import document

    with activity(f"calibrating {device} {dtype} matmuls"):
        result = run_calibration(device, dtype, size, seconds)
    emit(document(result), fmt)


COMMANDS = (profile, calibrate)
