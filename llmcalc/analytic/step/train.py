"""`train --global-batch`'s entry: the layout from the options, its prediction, the global batch in sequences or
tokens."""

from __future__ import annotations

import math

from ...errors import LlmcalcError
from ...hardware import Accelerator
from ...spec import ModelSpec
from ...units import plural
from ...validate import DEFAULT_ZERO, MAX_BATCH
from ..flops import utilization
from ..kernels import Device, device_for
from .layout import STEP_DEFAULTS, Layout, make_layout
from .prediction import StepPrediction, predict


def mfu_from_throughput(model_flops_per_token: float, hardware_flops_per_token: float, tokens_per_second: float,
                        n_gpus: int, peak: float) -> tuple[float, float]:
    """Achieved (MFU, HFU) of a run that processed `tokens_per_second` across `n_gpus` (PaLM App. B)."""
    if not (tokens_per_second > 0 and math.isfinite(tokens_per_second)):
        raise LlmcalcError(f"--tokens-per-second must be a positive number, got {tokens_per_second!r}")
    return (utilization(model_flops_per_token * tokens_per_second, 1.0, n_gpus, peak),
            utilization(hardware_flops_per_token * tokens_per_second, 1.0, n_gpus, peak))


def global_batch_sequences(global_batch: int | None, global_batch_tokens: float | None, seq_len: int,
                           required: bool = False) -> int | None:
    """Sequences per optimizer step, from --global-batch or --global-batch-tokens (a whole multiple of
    --seq-len); `required` (layout): exactly one of them, else (train) at most one."""
    if required and (global_batch is None) == (global_batch_tokens is None):
        raise LlmcalcError("give --global-batch (sequences) or --global-batch-tokens, one of them")
    if global_batch is not None and global_batch_tokens is not None:
        raise LlmcalcError("give --global-batch (sequences) or --global-batch-tokens, not both")
    if global_batch_tokens is None:
        return global_batch
    if global_batch_tokens > MAX_BATCH * seq_len:  # --global-batch's bound, in tokens
        raise LlmcalcError(f"--global-batch-tokens must be at most {MAX_BATCH * seq_len:,} ({MAX_BATCH:,} sequences "
                           f"of --seq-len {seq_len:,}), got {global_batch_tokens:,.0f}")
    if global_batch_tokens <= 0 or global_batch_tokens % seq_len:
        low = max(1, int(global_batch_tokens // seq_len))  # the multiples of seq_len on either side
        nearest = " or ".join(f"{n * seq_len:,} ({plural(n, 'sequence')})" for n in dict.fromkeys((low, low + 1)))
        raise LlmcalcError(f"--global-batch-tokens {global_batch_tokens:,.0f} is not a multiple of --seq-len "
                           f"{seq_len:,}; the nearest: {nearest}, or give --global-batch in sequences")
    return int(global_batch_tokens // seq_len)


LAYOUT_DEFAULTS = {"micro_batch": 1, "tp": 1, "cp": 1, "pp": 1, "vpp": 1, "ep": 1, "schedule": None,
                   "zero": DEFAULT_ZERO, "sequence_parallel": True, "dp_overlap": True, "tp_overlap": False}
# The step settings as `train` and `layout` name them (the keys their options pass): predict's recipe, and the
# Layout fields of STEP_DEFAULTS.


PREDICT_OPTIONS = ("recipe", "network")


STEP_OPTIONS = tuple(STEP_DEFAULTS) + PREDICT_OPTIONS


def networked_device(gpu: str, dtype: str, network: str | None, n_gpus: int) -> Device:
    """``device_for`` with --network's fabric, refused in one line where the run never leaves one node (the fabric
    then carries nothing)."""
    dev = device_for(gpu, dtype, network=network)
    if network is not None and n_gpus <= dev.network.gpus_per_node:
        raise LlmcalcError(f"--network describes the fabric between nodes; {n_gpus:,} GPUs fit in one "
                           f"{dev.network.gpus_per_node}-GPU {gpu} node: drop it, or give more --n-gpus")
    return dev


def option_flag(key: str) -> str:
    return "--" + {"order": "rank-order"}.get(key, key).replace("_", "-")


def train_steptime(spec: ModelSpec | None, gpu: str, n_gpus: int, mfu: float | None, achieved_tflops: float | None,
                   dtype: str, seq_len: int, causal: bool, recompute: str, model_flops_per_token: float,
                   hardware_flops_per_token: float, accelerator: Accelerator,
                   options: dict) -> tuple[float | None, StepPrediction | None, dict | None]:
    """What `train` uses for device time: (mfu, prediction or None, measured dict or None).

    --mfu / --achieved-tflops win (mfu_source "given"); --tokens-per-second turns a past run's throughput
    into its MFU (also "given"); otherwise a layout with --global-batch(-tokens) is predicted ("predicted").
    """
    options = dict(options)
    tps = options.pop("tokens_per_second", None)
    attention = options.pop("attention", None)
    gb = global_batch_sequences(options.pop("global_batch", None), options.pop("global_batch_tokens", None), seq_len)
    step = {k: options.pop(k) for k in STEP_OPTIONS if options.get(k) is not None}
    given = {k: v for k, v in options.items() if v is not None}
    if sum(x is not None for x in (mfu, achieved_tflops, tps)) > 1:
        raise LlmcalcError("give exactly one of an MFU (--mfu), --achieved-tflops or --tokens-per-second")
    measured = None
    if tps is not None:
        m, h = mfu_from_throughput(model_flops_per_token, hardware_flops_per_token, tps, n_gpus,
                                   accelerator.peak(dtype))
        if m > 1:
            raise LlmcalcError(f"--tokens-per-second {tps:g} on {n_gpus:,} x {accelerator.key} would need MFU "
                               f"{m * 100:.0f} % > 100 %; check the throughput (cluster-wide tokens/s) and --n-gpus")
        measured = {"tokens_per_second": tps, "mfu": m, "hfu": h}
        mfu = m
    if mfu is not None or achieved_tflops is not None:
        if attention is not None:
            raise LlmcalcError("--attention picks the kernel the step-time model times; with a given MFU, achieved "
                               "TFLOP/s or throughput nothing is timed: drop it, or drop those to predict")
        if step:
            raise LlmcalcError(f"{', '.join(option_flag(k) for k in step)} shape{'s' if len(step) == 1 else ''} the "
                               f"predicted step; with a given MFU, achieved TFLOP/s or throughput nothing is timed: "
                               f"drop {'it' if len(step) == 1 else 'them'}, or drop those to predict")
        if given and gb is None:
            raise LlmcalcError(f"layout options ({', '.join('--' + k.replace('_', '-') for k in given)}) need "
                               f"--global-batch to predict a step; or drop them")
        if gb is not None:  # a given MFU with a layout: the step follows from the given throughput
            lay = make_layout(spec, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **given}) if spec is not None else \
                Layout(dp=n_gpus, global_batch=gb)
            measured = {**(measured or {}), "layout": lay}
        return mfu, None, measured
    if gb is None:
        if given or attention is not None or step:
            raise LlmcalcError("a layout needs --global-batch (sequences) or --global-batch-tokens to predict the "
                               "step time; or give --mfu")
        raise LlmcalcError("give exactly one of an MFU (--mfu 0.4), --achieved-tflops or --tokens-per-second, or a "
                           "layout with --global-batch (sequences per step) to predict the MFU")
    if spec is None:
        raise LlmcalcError("predicting the step time needs a MODEL (its shapes), not --params")
    recipe = step.pop("recipe", "bf16-mixed")
    dev = networked_device(gpu, dtype, step.pop("network", None), n_gpus)
    lay = make_layout(spec, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **given}, **step)
    if lay.cp_comm != "p2p" and lay.cp == 1:  # `layout` applies it to the layouts with cp > 1
        raise LlmcalcError(f"--cp-comm {lay.cp_comm} picks how context-parallel ranks exchange K/V: it needs --cp > 1")
    pred = predict(spec, dev, lay, seq_len, causal=causal, recompute=recompute,
                   recipe=recipe, attention=attention or "flash")
    return pred.mfu, pred, measured
