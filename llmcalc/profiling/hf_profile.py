"""`profile` of a model without a formula: transformers' model, built from the config as the fallback builds it
(``hf_fallback``: the causal LM, else seq2seq or base class; sdpa attention, batched_mm experts), runs one training
step as ``measure`` runs the reference model, and every figure is held to what the other commands answer for it.

Virtual: the model built on the meta device, cast to the recipe's dtype and faked (``to_empty`` under
FakeTensorMode); a first step creates the optimizer states, the next is watched by torch's MemTracker for the peak
by category, one more by FlopCounterMode; the forward is counted as the fallback counts it (no graph). Every layer
is built and run (the fallback's counts run a prefix of the stack and scale it: the profile holds them to the
whole). Real (``--device cpu``, or cuda): the model built for real (transformers' initialisation, seeded), warm-up
steps, the median of timed steps, the peak as ``measure.real_profile`` reads it.

The "analytic" column is what `params`, `flops` and `memory` answer for the model: the parameters and the forward
FLOPs the fallback counted (batch 1, scaled linearly to the micro-batch), a training step as 3 x that forward (plus
the QKᵀ a flash-style sdpa backward recomputes, by torch's sdpa_backward_flop_count), and `memory`'s estimate from
what transformers measured (tensors and saved activations). The loss is transformers' own (labels = the ids), or
for a model without an LM head the mean of its output.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..errors import LlmcalcError
from ..fallback import FallbackModel, step_flops
from ..records import dataclass
from ..results import Comparison, ProfileResult
from .counters import RECOMPUTING_BACKENDS, SDPA_OPS, count_flops, inference_forward
from .measure import (
    FLOP_TOLERANCE,
    MEMORY_TOLERANCE,
    _global_peak_tracker,
    _memory_categories,
    _proc_status,
    device_name,
    memory_at_peak,
    record_speed,
    time_steps,
)
from .step import autocast_for, make_optimizer, param_dtype

if TYPE_CHECKING:
    from ..analytic.memory import MemoryEstimate


@dataclass(frozen=True)
class Expected:
    """What the other commands answer for the model, the profile's "analytic" column: `memory`'s estimate (None,
    with `memory_note` saying why, where `memory` refuses the profile's set-up)."""

    model: FallbackModel
    batch: int
    seq_len: int
    recipe: str
    memory: MemoryEstimate | None
    memory_note: str


def build(model: FallbackModel, recipe: str, device: str) -> torch.nn.Module:
    """transformers' model of `model.config` in the recipe's parameter dtype, as hf_fallback builds it: on the meta
    device (`device` "fake": `to_empty` under FakeTensorMode fakes it), or built for real on `device`, seeded."""
    from .hf_fallback import _build, _config, _quiet, _token_embedding
    from .hf_measure import failure

    _quiet()
    config = _config(model.config)
    try:
        if device == "fake":
            with torch.device("meta"):
                net = _build(config)
            net = net.to(param_dtype(recipe))
        else:
            with torch.random.fork_rng(), torch.device(device):
                torch.manual_seed(0)
                net = _build(config).to(param_dtype(recipe))
    except LlmcalcError:
        raise
    except Exception as exc:
        raise failure("build", f"transformers could not build {config.model_type!r} for a profile", exc) from None
    _token_embedding(net, config)
    return net.train()


def fake(net: torch.nn.Module) -> torch.nn.Module:
    """The meta model faked (call under FakeTensorMode): `to_empty` swaps each parameter for a new one, which unties
    a tied LM head from the token embedding; the ties are made again (one tensor, as a checkpoint stores it)."""
    names: dict[int, list[str]] = {}
    for name, p in net.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    net = net.to_empty(device="cpu")
    for first, *rest in (group for group in names.values() if len(group) > 1):
        shared = net.get_parameter(first)
        for name in rest:
            module, _, attr = name.rpartition(".")
            setattr(net.get_submodule(module), attr, shared)
    return net


def _inputs(net: torch.nn.Module, batch: int, seq: int, device: str) -> dict:
    ids = torch.zeros(batch, seq, dtype=torch.long, device="cpu" if device == "fake" else device)
    kwargs: dict[str, torch.Tensor | bool] = {"input_ids": ids}
    if getattr(net.config, "is_encoder_decoder", False):
        kwargs["decoder_input_ids"] = ids
    if "use_cache" in net.forward.__code__.co_varnames:
        kwargs["use_cache"] = False
    return kwargs


def _step(net, optimizer, kwargs: dict, recipe: str, device: str) -> None:
    """Forward with the loss, backward, optimizer step, zero_grad(set_to_none=True)."""
    with autocast_for(recipe, "cpu" if device == "fake" else device):
        out = net(**kwargs, labels=kwargs["input_ids"])
        loss = out.loss if getattr(out, "loss", None) is not None else out[0].float().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _forward(net, kwargs: dict) -> None:
    with inference_forward(net):
        net(**kwargs)


def _measure(net, expected: Expected, device: str):
    """(parameters, forward count, step count, MemTracker's peak snapshot or None, the optimizer, the inputs) of one
    training step; an exception of transformers' forward or backward one line (hf_measure.failure), a forward that
    needs tensor values (an expert loop over the experts hit) saying so."""
    from .hf_measure import _reason, data_dependent, failure

    try:
        return _measure_step(net, expected, device)
    except LlmcalcError:
        raise
    except Exception as exc:
        if device == "fake" and data_dependent(exc):
            raise LlmcalcError(f"transformers' training step of {type(net).__name__} needs tensor values (an expert "
                               f"loop over the experts hit, a .item()), which fake tensors do not have: drop --virtual "
                               f"to run it for real (--device cpu) where it fits ({_reason(exc)})") from None
        raise failure("profile step", f"transformers' training step of {type(net).__name__} failed on {device}",
                      exc) from None


def _measure_step(net, expected: Expected, device: str):
    from .hf_fallback import stored_tensors

    kwargs = _inputs(net, expected.batch, expected.seq_len, device)
    optimizer = make_optimizer(net, expected.recipe)
    params = sum(t.numel() for _, t in stored_tensors(net))
    forward = count_flops(lambda: _forward(net, kwargs))
    step = count_flops(lambda: _step(net, optimizer, kwargs, expected.recipe, device))  # creates the states too
    peak: dict | None = None
    if device == "fake":
        tracker = _global_peak_tracker()
        tracker.track_external(net, *optimizer.tracked)
        with tracker:
            _step(net, optimizer, kwargs, expected.recipe, device)
        summed: dict = {}
        for stats in tracker.get_tracker_snapshot("peak").values():
            for kind, value in stats.items():
                summed[kind] = summed.get(kind, 0) + value
        peak = summed
    return params, forward, step, peak, optimizer, kwargs


def _quietly():
    """transformers' and torch's module trackers' warnings off stderr (the profile's notes say what matters)."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def counted_profile(expected: Expected, device: str = "fake", steps: int = 10, warmup: int = 2,
                    peak_flops: float | None = None, peak_source: str = "") -> ProfileResult:
    """One training step of transformers' model of `expected.model`, virtual (`device` "fake") or real, held to
    what `params`, `flops` and `memory` answer for it."""
    model = expected.model
    virtual = device == "fake"
    result = ProfileResult(model.name, "virtual" if virtual else "real",
                           "cpu (FakeTensorMode)" if virtual else device,
                           "fake tensors" if virtual else device_name(device), expected.recipe,
                           batch_size=expected.batch, seq_len=expected.seq_len, recompute="none",
                           attention=str(model.counted.get("attn_implementation") or "sdpa"), sdpa_backend="",
                           counter="torch")
    rss_before = _proc_status("VmRSS") if device == "cpu" else None
    times: list[float] = []
    with _quietly():
        net = build(model, expected.recipe, device)
    with _quietly(), FakeTensorMode(allow_non_fake_inputs=True) if virtual else contextlib.nullcontext():
        if virtual:
            net = fake(net)
        params, forward, step, peak, optimizer, kwargs = _measure(net, expected, device)
        if not virtual:
            times, peak_bytes = time_steps(result, lambda: _step(net, optimizer, kwargs, expected.recipe, device),
                                           device, steps=steps, warmup=warmup, rss_before=rss_before)
    if virtual:
        result.memory_measured = _memory_categories({"cpu": peak or {}})
        peak_bytes = result.memory_measured.pop("total", None)
    backends = {SDPA_OPS[op] for op in forward.by_op if op in SDPA_OPS}
    result.sdpa_backend = ", ".join(sorted(backends)) or "none (no sdpa kernel)"
    _compare(result, expected, net, params=params, forward=forward, step=step, peak=peak_bytes)
    if not virtual:
        record_speed(result, step_flops(model, expected.batch, False, "none")["total_flops"], times,
                     hardware_flops=step.total, peak_flops=peak_flops, peak_source=peak_source)
    result.notes[:0] = [f"{model.describe()}: the analytic column is what `params`, `flops` and `memory` answer for "
                        "it (the fallback's counts, no formula); the profile builds and runs every layer"]
    result.notes.extend(model.notes)
    return result


def _compare(result: ProfileResult, expected: Expected, net, params: int, forward, step,
             peak: float | None) -> None:
    """`result.comparisons`: parameters, forward FLOPs (total and by group), the step's FLOPs, peak memory."""
    from .hf_fallback import flop_groups

    model, batch = expected.model, expected.batch
    counted = step_flops(model, batch, False, "none")
    by_op = model.flops["by_op"] if model.flops else {}
    recomputed = batch * sum(v for op, v in by_op.items() if SDPA_OPS.get(op) in RECOMPUTING_BACKENDS) // 2
    rows = [
        Comparison("parameters", model.total, params, "params", 0.0,
                   note="the tensors a checkpoint stores, as `params` counts them"),
        Comparison("forward FLOPs", counted["forward_flops"], forward.total, "FLOP", FLOP_TOLERANCE,
                   note=f"`flops`: the fallback's forward at batch 1 x {batch} (full S², matmuls only)"),
        Comparison("train-step model FLOPs", counted["total_flops"], None, "FLOP", FLOP_TOLERANCE,
                   note="3 x forward: the MFU numerator; a counter sees hardware FLOPs"),
        Comparison("train-step FLOPs", counted["total_flops"] + recomputed, step.total, "FLOP", FLOP_TOLERANCE,
                   note="3 x forward" + (" + the QKᵀ that flash-style sdpa recomputes in backward" if recomputed
                                         else "")),
    ]
    measured_groups, _ = flop_groups(net, forward)
    for name, value in counted["groups"].items():
        rows.append(Comparison(f"forward FLOPs / {name}", value, measured_groups.get(name, 0), "FLOP",
                               FLOP_TOLERANCE))
    est = expected.memory
    if est is not None:
        rows.append(Comparison("peak memory", est.peak, peak, "bytes", MEMORY_TOLERANCE,
                               note=f"`memory` of the measured model at its {est.peak_phase} ({expected.recipe}, "
                               "adamw for-loop, one GPU)"))
        result.memory_analytic = memory_at_peak(est)
    else:
        rows.append(Comparison("peak memory", None, peak, "bytes", MEMORY_TOLERANCE, note=expected.memory_note))
    result.comparisons = rows
