"""Measure the reference model: virtually (FakeTensorMode, no memory) or for real (CPU or CUDA).

Virtual: one full training step (forward, backward, optimizer step) runs on fake tensors first,
to create the optimizer states; the next is watched by torch's MemTracker
(torch.distributed._tools.mem_tracker) for the peak by category, and one more by FlopCounterMode.
Real: warm-up steps, then the median of timed steps (CUDA synchronised; never timed under a
counter or tracker; a torch.compile step is timed on its own), peak memory from the CUDA
allocator or, on CPU, the process's resident-set high-water mark reset before the measured step.
Every measured figure is returned beside the formula that predicted it.
"""

from __future__ import annotations

import re
import statistics
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..analytic.flops import component_flops, counted_step_flops, forward_ops, step_flops
from ..analytic.memory import training_memory
from ..analytic.params import count_params
from ..dtypes import canonical_dtype
from ..errors import LlmcalcError
from ..records import dataclass
from ..results import Comparison, ProfileResult
from ..spec import ModelSpec
from ..validate import DEFAULT_SEQ_LEN
from . import peak_cache
from .counters import SdpaSpy, count_flops, fvcore_forward_flops, sdpa_backend_seen
from .model import build_model, measured_breakdown
from .step import batch_inputs, forward_only, make_optimizer, param_dtype, training_step

FLOP_TOLERANCE = 0.01  # 1 %: the bar for FLOPs
MEMORY_TOLERANCE = 0.10  # 10 % for peak memory


def global_peak(tracker: type) -> type:
    """`tracker` (torch's MemTracker or FSDPMemTracker) keeping only the global peak.

    MemTracker updates every tracked module's local peak on every op (``_update_peak_stats`` loops
    over all modules), which makes a 126-layer step take minutes; the profiler needs the global
    peak by category only, so that loop is skipped. Tensor tracking and categories are the tracker's."""
    from copy import deepcopy

    from torch.distributed._tools.mem_tracker import _TOTAL_KEY

    class GlobalPeak(tracker):  # a class chosen at run time
        def _update_peak_stats(self, peak_state) -> None:
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = deepcopy(dev_snap)

    GlobalPeak.__name__ = f"GlobalPeak{tracker.__name__}"
    return GlobalPeak


def _global_peak_tracker():
    """torch's MemTracker keeping only the global peak (``global_peak``)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    return global_peak(MemTracker)()


# MemTracker's reference types, grouped as the analytic model's categories.
MEMORY_GROUPS = {"param": "parameters (weights + masters)", "grad": "gradients", "opt": "optimizer states",
                 "act": "activations and temporaries", "temp": "activations and temporaries",
                 "buffer": "activations and temporaries", "oth": "activations and temporaries", "total": "total"}


def _memory_categories(snapshot: dict) -> dict[str, float]:
    """MemTracker's categories at the peak, in bytes (all devices summed), grouped as the formula's."""
    out: dict[str, float] = {}
    for stats in snapshot.values():
        for kind, value in stats.items():
            name = MEMORY_GROUPS.get(str(kind).split(".")[-1].lower(), str(kind))
            out[name] = out.get(name, 0.0) + value
    return out


def _analytic_memory(spec, batch, seq, recipe, recompute, attention):
    if spec.architecture != "decoder":
        return None  # the analytic activation model covers decoder-only models
    # the reference step runs AdamW's for-loop path, one tensor at a time (profiling/step.py)
    est = training_memory(spec, batch, seq, recipe, "adamw", recompute=recompute,
                          attention="flash" if attention == "sdpa" else "eager", optimizer_impl="for-loop")
    return est, memory_at_peak(est)


def memory_at_peak(est) -> dict[str, float]:
    """A MemoryEstimate's components alive at its peak, in the profiler's categories (MEMORY_GROUPS: MemTracker's
    param, grad, optstate, act/temp)."""
    alive = est.peak_components()
    states = {"weights", "master weights", "gradients", "optimizer states"}
    return {"parameters (weights + masters)": alive.get("weights", 0.0) + alive.get("master weights", 0.0),
            "gradients": alive.get("gradients", 0.0),
            "optimizer states": alive.get("optimizer states", 0.0),
            "activations and temporaries": sum(v for k, v in alive.items() if k not in states)}


def _compare(result: ProfileResult, spec: ModelSpec, batch: int, seq: int, recompute: str, params: int,
             forward, step, analytic_memory, measured_peak, recipe: str) -> None:
    """Fill `result.comparisons`: parameters, FLOPs (total and per component), memory."""
    ops = forward_ops(spec, batch, seq)
    model = step_flops(spec, batch, seq, recompute=recompute)
    recomputing = forward.recomputing_components()
    expected_step = counted_step_flops(ops, recompute, recomputing)
    rows = [
        Comparison("parameters", count_params(spec).total, params, "params", 0.0),
        Comparison("forward FLOPs", model.forward, forward.total, "FLOP", FLOP_TOLERANCE,
                   note="full S², matmuls only"),
        Comparison("train-step model FLOPs", model.model_flops, None, "FLOP", FLOP_TOLERANCE,
                   note="3 x forward: the MFU numerator; a counter sees hardware FLOPs"),
        Comparison("train-step FLOPs", sum(expected_step.values()), step.total, "FLOP", FLOP_TOLERANCE,
                   note="model FLOPs" + (" + full recomputation" if recompute == "full" else "")
                   + (" + the QKᵀ that flash-style sdpa recomputes in backward" if recomputing else "")),
    ]
    measured_fwd = forward.components()
    for name, value in component_flops(ops).items():
        rows.append(Comparison(f"forward FLOPs / {name}", value, measured_fwd.get(name, 0), "FLOP", FLOP_TOLERANCE))
    measured_step = step.components()
    if spec.parallel_residual:
        # Attention and MLP run side by side: FlopCounterMode's module tracking files one branch's
        # backward under both (which one depends on op order), so they are held to the formula together.
        merged = [k for k in expected_step if k.startswith(("attention", "FFN"))]
        expected_step = {"attention + FFN (blocks)": sum(expected_step.pop(k) for k in merged), **expected_step}
        measured_step["attention + FFN (blocks)"] = measured_step.get("blocks", 0)
    for name, value in expected_step.items():
        rows.append(Comparison(f"train-step FLOPs / {name}", value, measured_step.get(name, 0), "FLOP",
                               FLOP_TOLERANCE, note="compared as whole blocks: a parallel block's backward cannot "
                               "be split by module" if name == "attention + FFN (blocks)" else ""))
    if analytic_memory is not None:
        est, at_peak = analytic_memory
        rows.append(Comparison("peak memory", est.peak, measured_peak, "bytes", MEMORY_TOLERANCE,
                               note=f"analytic peak at the {est.peak_phase} ({recipe}, attention "
                               f"{'flash' if result.attention == 'sdpa' else 'eager'}, recompute {recompute})"))
        result.memory_analytic = at_peak
    else:
        rows.append(Comparison("peak memory", None, measured_peak, "bytes", MEMORY_TOLERANCE,
                               note="no analytic activation model for encoder and encoder-decoder models"))
    result.comparisons = rows


def _check(spec: ModelSpec, recompute: str, attention: str) -> None:
    if recompute not in ("none", "full"):
        raise LlmcalcError("the reference model recomputes none or full (a checkpoint per block); "
                           "selective recomputation is an analytic option only")
    if attention not in ("sdpa", "eager"):
        raise LlmcalcError(f"attention must be sdpa or eager, got {attention!r}")


FULL_DEPTH_LAYERS = 8  # a deeper single-stack model is measured on a few blocks and extrapolated (`sampling`)


def block_kinds(spec: ModelSpec) -> list[tuple]:
    """What tells the reference model's blocks apart (profiling/model.py: Block, Stack): a routed-expert or a dense
    FFN, and T5's relative-position table in block 0; each layer's attention span too, which the model does not
    read today, so that a model that does is never extrapolated across spans."""
    relative = spec.pos_emb == "relative"
    return [(spec.is_moe_layer(i), spec.attention_span(i), spec.span_tokens(i), relative and i == 0)
            for i in range(spec.n_layers)]


@dataclass(frozen=True)
class Sampling:
    """n_layers = head + period x repeats: `head` blocks of their own kinds, then one period of blocks repeated
    (a uniform stack: head 0, period 1). Measured at one and two periods after the head (`depths`)."""

    head: int
    period: int
    repeats: int

    @property
    def depths(self) -> tuple[int, int]:
        return self.head + self.period, self.head + 2 * self.period


def sampling(spec: ModelSpec) -> Sampling | None:
    """How a virtual profile measures `spec`: sampled (the decomposition whose two sample depths hold the fewest
    blocks), or None, every block (a model of at most FULL_DEPTH_LAYERS blocks, an encoder-decoder, a stack with
    no period repeated three times after its head)."""
    if spec.architecture == "encoder-decoder" or spec.n_layers <= FULL_DEPTH_LAYERS:
        return None
    kinds = block_kinds(spec)
    n, best = len(kinds), None
    for head in range(n):
        if best is not None and 2 * head >= best[0]:
            break
        for period in range(1, (n - head) // 3 + 1):
            if (n - head) % period == 0 and all(kinds[i] == kinds[head + (i - head) % period]
                                                for i in range(head, n)):
                cost = 2 * head + 3 * period  # blocks built at the two depths
                if best is None or cost < best[0]:
                    best = (cost, head, period)
                break
    if best is None or best[0] >= n:
        return None
    _, head, period = best
    return Sampling(head, period, (n - head) // period)


class Counted:
    """What a profile reads of a FlopCount (total, per component, the recomputing attention), measured or
    extrapolated."""

    def __init__(self, total: int, by_op: dict[str, int], parts: dict[str, int], recomputing: set[str]):
        self.total, self.by_op, self.parts, self.recomputing = total, by_op, parts, recomputing

    @classmethod
    def of(cls, count) -> Counted:
        return cls(count.total, dict(count.by_op), count.components(), count.recomputing_components())

    def components(self) -> dict[str, int]:
        return dict(self.parts)

    def recomputing_components(self) -> set[str]:
        return set(self.recomputing)


@dataclass
class _Measured:
    """One virtual step's figures: parameters, the forward's and the step's FLOPs, the sdpa backends seen, and
    the memory peak as MemTracker's snapshot ({reference type: bytes}, its total included); `segments`: the
    peak of each part of a sampled step (`_segment_tracker`)."""

    params: int
    forward: Counted
    step: Counted
    seen: set[str]
    peak: dict | None
    segments: dict | None = None


_BLOCK = re.compile(r"[^.]+\.body\.layers\.(\d+)")


def _segment_tracker(plan: Sampling, depth: int):
    """MemTracker keeping the global peak and the peak of each segment of the step, so that a sampled profile
    extrapolates each segment on its own: (phase, where), the phase told by training_step, `where` a head block,
    a block of the first or of the last period (by its place in the period: inside one phase a block's memory is
    affine in its index, so its peak over the blocks is at the first or the last period), the innermost other
    module, or outside every module (the loss); the optimizer step is one segment."""
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

    repeats = (depth - plan.head) // plan.period

    def block_keys(index: int) -> list:
        if index < plan.head:
            return [("head", index)]
        rank, place = divmod(index - plan.head, plan.period)
        return [(part, place) for part, at in (("first", 0), ("last", repeats - 1)) if rank == at]

    class SegmentPeaks(global_peak(MemTracker)):  # type: ignore[misc]  # a class chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.phase = "forward"
            self.segments: dict[tuple, tuple[int, int, dict]] = {}
            self.ops = 0

        def where(self) -> list:
            if self.phase == "optimizer":
                return ["step"]
            parents = [p for p in self._mod_tracker.parents if p != "Global"]
            for name in parents:
                match = _BLOCK.fullmatch(name)
                if match:
                    return block_keys(int(match.group(1)))
            return [max(parents, key=len)] if parents else ["outside"]

        def _update_peak_stats(self, peak_state) -> None:
            super()._update_peak_stats(peak_state)
            self.ops += 1
            snaps = list(self._curr_mem_snap.values())
            total = sum(snap[_TOTAL_KEY] for snap in snaps)
            for where in self.where():
                key = (self.phase, where)
                if key not in self.segments or self.segments[key][0] < total:
                    merged: dict = {}
                    for snap in snaps:
                        for kind, value in snap.items():
                            merged[kind] = merged.get(kind, 0) + value
                    self.segments[key] = (total, self.ops, merged)

    return SegmentPeaks()


def _measure_virtual(spec: ModelSpec, batch: int, seq: int, recipe: str, recompute: str, attention: str,
                     track_memory: bool, plan: Sampling | None = None) -> _Measured:
    """One virtual training step of `spec` (all its blocks), measured; `plan`: the sampling it is one depth of
    (the memory tracker then keeps each segment's peak)."""
    dtype = param_dtype(recipe)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model(spec, dtype, "cpu", attention, routing="balanced")
        model.set_checkpointing(recompute == "full")
        optimizer = make_optimizer(model, recipe)
        inputs = batch_inputs(model, batch, seq, "cpu")
        params = sum(measured_breakdown(model).values())
        spy = SdpaSpy()
        with spy:
            forward = count_flops(lambda: forward_only(model, inputs, recipe, "cpu"))
        training_step(model, optimizer, inputs, recipe, "cpu")  # creates the optimizer states
        peak: dict | None = None
        segments = None
        if track_memory:
            tracker = _global_peak_tracker() if plan is None else _segment_tracker(plan, spec.n_layers)
            tracker.track_external(model, *optimizer.tracked)

            def phase(name: str) -> None:
                tracker.phase = name

            with tracker:
                training_step(model, optimizer, inputs, recipe, "cpu", phase=phase)
            summed: dict = {}
            for stats in tracker.get_tracker_snapshot("peak").values():  # devices summed, as _memory_categories
                for kind, value in stats.items():
                    summed[kind] = summed.get(kind, 0) + value
            peak = summed
            segments = getattr(tracker, "segments", None)
        step = count_flops(lambda: training_step(model, optimizer, inputs, recipe, "cpu"))
    return _Measured(params, Counted.of(forward), Counted.of(step), set(spy.seen), peak=peak, segments=segments)


def _affine(a: int, b: int, k: int) -> int:
    """The value `k` periods past b, a being one period before it (ints stay ints: exact)."""
    return b + k * (b - a)


def _affine_dict(a: dict, b: dict, k: int) -> dict:
    return {key: _affine(a.get(key, 0), b.get(key, 0), k) for key in {**a, **b}}


def _extrapolate(a: _Measured, b: _Measured, k: int, spec: ModelSpec) -> _Measured:
    """The figures of the model `k` periods deeper than b, from a and b one period apart: every count is a sum
    over blocks (affine in the periods), and so is each segment's memory peak; the model's peak is the highest
    extrapolated segment (the earliest at b on a tie, as the tracker keeps the first)."""
    if a.forward.recomputing != b.forward.recomputing or a.seen != b.seen or (
            a.segments is not None and set(a.segments) != set(b.segments or {})):
        raise LlmcalcError(f"internal: the sampled profiles of {spec.name} differ in kind; use --all-layers")

    def counted(x: Counted, y: Counted) -> Counted:
        return Counted(_affine(x.total, y.total, k), _affine_dict(x.by_op, y.by_op, k),
                       _affine_dict(x.parts, y.parts, k), set(y.recomputing))

    peak = None
    if a.segments is not None and b.segments is not None:
        best: tuple[int, int, dict] | None = None
        for key, (total_b, when, categories_b) in b.segments.items():
            total_a, _, categories_a = a.segments[key]
            total = _affine(total_a, total_b, k)
            if best is None or total > best[0] or (total == best[0] and when < best[1]):
                best = (total, when, _affine_dict(categories_a, categories_b, k))
        peak = best[2] if best is not None else None
    return _Measured(_affine(a.params, b.params, k), counted(a.forward, b.forward), counted(a.step, b.step),
                     set(b.seen), peak=peak)


def _check_segments(measured: _Measured, spec: ModelSpec) -> None:
    """The segments cover the step: their highest peak is the tracker's global peak."""
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY

    if measured.segments is None or measured.peak is None:
        return
    if max(total for total, _, _ in measured.segments.values()) != measured.peak[_TOTAL_KEY]:
        raise LlmcalcError(f"internal: the segment peaks of {spec.name} miss the global peak; use --all-layers")


def virtual_profile(spec: ModelSpec, batch: int = 1, seq: int = DEFAULT_SEQ_LEN, recipe: str = "bf16-mixed",
                    recompute: str = "none", attention: str = "sdpa", track_memory: bool = True,
                    all_layers: bool = False) -> ProfileResult:
    """A training step on fake tensors: exact FLOP counts and MemTracker's peak, no real memory.

    A model deeper than FULL_DEPTH_LAYERS whose blocks repeat (`sampling`: a head, then a period) is measured at
    one and at two periods after its head and extrapolated to its depth: parameters and FLOPs are sums over
    blocks, and the memory peak is the highest of the step's segments' peaks, each affine in the number of
    periods (`_segment_tracker`); tests/test_profiling.py holds the result to a run of every block.
    `all_layers` measures every block."""
    _check(spec, recompute, attention)
    result = ProfileResult(spec.name, "virtual", "cpu (FakeTensorMode)", "fake tensors", recipe,
                           batch_size=batch, seq_len=seq, recompute=recompute, attention=attention,
                           sdpa_backend="", counter="torch")
    plan = None if all_layers else sampling(spec)
    if plan is None:
        measured = _measure_virtual(spec, batch, seq, recipe, recompute=recompute, attention=attention,
                                    track_memory=track_memory)
    else:
        samples = []
        for depth in plan.depths:
            sample = spec.with_layers(depth)
            if block_kinds(sample) != block_kinds(spec)[:depth]:
                raise LlmcalcError(f"internal: {spec.name} cut to {depth} blocks changes its blocks; use --all-layers")
            samples.append(_measure_virtual(sample, batch, seq, recipe, recompute=recompute, attention=attention,
                                            track_memory=track_memory, plan=plan))
            _check_segments(samples[-1], spec)
        measured = _extrapolate(samples[0], samples[1], plan.repeats - 2, spec)
    peak = None
    if measured.peak is not None:
        result.memory_measured = _memory_categories({"cpu": measured.peak})
        peak = result.memory_measured.pop("total", None)
    result.sdpa_backend = sdpa_backend_seen(measured.forward.by_op, measured.seen)
    _compare(result, spec, batch, seq, recompute, params=measured.params, forward=measured.forward,
             step=measured.step, analytic_memory=_analytic_memory(spec, batch, seq, recipe, recompute,
                                                                  attention=attention),
             measured_peak=peak, recipe=recipe)
    result.notes.append("MoE layers route tokens by a fixed balanced pattern on fake tensors (same FLOPs as "
                        "learned top-k routing)" if spec.is_moe else "virtual run: fake tensors, no memory allocated")
    if plan is not None:
        la, lb = plan.depths
        alike = ("every block is alike" if plan.head == 0 and plan.period == 1 else
                 f"after {plan.head} block{'s' if plan.head != 1 else ''} of their own, the blocks repeat every "
                 f"{plan.period}")
        result.notes.append(
            f"measured at {la} and {lb} blocks and extrapolated to {spec.n_layers} ({alike}): parameters and FLOPs "
            f"are sums over blocks, and the peak is the highest of the step's segment peaks (forward, backward, "
            f"optimizer step; by block or module), each affine in depth; --all-layers measures every block")
    return result


# --- real runs --------------------------------------------------------------------------------


def _proc_status(field_name: str) -> float | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return float(line.split()[1]) * 1024  # kB -> bytes
    except OSError:
        return None
    return None


def _reset_cpu_peak() -> bool:
    """Reset the process's resident-set high-water mark (Linux: 5 > /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no device visible"
        raise LlmcalcError(f"--device cuda: CUDA is not available (torch {torch.__version__}, {build}); "
                           f"use --device cpu or --virtual")
    if device not in ("cpu", "cuda"):
        raise LlmcalcError(f"--device must be auto, cpu or cuda; got {device!r}")
    return device


def available_memory(device: str) -> float | None:
    """Bytes a real run may use now: MemAvailable (Linux) for the CPU, free memory on a CUDA device."""
    if device == "cuda":
        return float(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def torch_dtype(name: str) -> torch.dtype:
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[canonical_dtype(name)]


def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def peak_for(device: str, dtype: str, peak_tflops: float | None = None) -> tuple[float, str]:
    """The peak FLOP/s MFU is measured against, and where it comes from: given, the catalog entry
    whose device_names match the GPU, or a calibrated matmul (CPUs and unknown GPUs)."""
    from ..spec import find_accelerator

    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise LlmcalcError(f"--peak-tflops must be positive, got {peak_tflops:g}")
        return peak_tflops * 1e12, "given with --peak-tflops"
    name = device_name(device)
    acc = find_accelerator(name) if device == "cuda" else None
    if acc is not None and dtype in acc.peak_flops:
        return acc.peak(dtype), f"{acc.key} datasheet, dense {dtype}"
    where = "this CPU" if device == "cpu" else f"{name} (not in the catalog)"
    flops, entry = calibrated_peak(device, dtype)
    return flops, f"calibrated {dtype} matmul on {where}, {peak_cache.describe(entry)}"


CALIBRATION_SECONDS = 2.0  # timed once per device, dtype, size, threads and torch version (peak_cache)


def calibrated_peak(device: str, dtype: str, size: int | None = None, seconds: float = CALIBRATION_SECONDS,
                    refresh: bool = False) -> tuple[float, dict]:
    """The achievable matmul FLOP/s of a device with no datasheet figure: measured once and cached with the
    conditions it was measured under (``peak_cache``), so that every profile's MFU uses the same peak; `refresh`
    (``llmcalc calibrate``) measures again and replaces the entry."""
    size = size or (8192 if device == "cuda" else 1024)
    name = peak_cache.cpu_model() if device == "cpu" else device_name(device)
    threads = torch.get_num_threads()
    entry_key = peak_cache.key(name, canonical_dtype(dtype), size, threads, torch.__version__)
    entry = None if refresh else peak_cache.lookup(entry_key)
    if entry is None:
        entry = peak_cache.store(entry_key, calibrate(device, torch_dtype(dtype), size, seconds), seconds, threads)
    return float(entry["flops_per_s"]), entry


def calibrate(device: str = "cpu", dtype: torch.dtype = torch.float32, size: int | None = None,
              seconds: float = 1.0) -> float:
    """Achievable dense matmul FLOP/s here: the best of timed (size x size) @ (size x size) runs."""
    size = size or (8192 if device == "cuda" else 1024)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b  # warm-up
    _sync(device)
    best, spent = float("inf"), 0.0
    while spent < seconds:
        start = time.perf_counter()
        a @ b
        _sync(device)
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
    return 2 * size**3 / best


def _reset_peak(device: str) -> float | None:
    """Start a fresh peak-memory window; returns the CUDA bytes allocated now (None on the CPU)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return float(torch.cuda.memory_allocated())
    _reset_cpu_peak()
    return None


def _read_peak(result: ProfileResult, device: str, baseline: float | None, rss_before: float | None) -> float | None:
    """The peak since `_reset_peak`, in bytes: CUDA's allocator peak, or on the CPU the resident-set
    high-water mark minus the process's size before the model was built. Records the raw figures."""
    if device == "cuda":
        peak = float(torch.cuda.max_memory_allocated())
        result.memory_measured = {"allocated before the step": float(baseline or 0.0), "peak allocated": peak}
        return peak
    hwm = _proc_status("VmHWM")
    if hwm is None or rss_before is None:
        return None
    result.memory_measured = {"process RSS before the model": rss_before, "process high-water mark": hwm}
    result.notes.append("CPU peak = the process's resident-set high-water mark during the timed steps "
                        "minus its size before the model was built; allocator caching and torch's "
                        "workspaces make it a loose match for the formula")
    return hwm - rss_before


def timed(step, device: str) -> float:
    """Wall-clock seconds of one call of `step`, the device synchronised at its end."""
    start = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - start


def time_steps(result: ProfileResult, step, device: str, steps: int, warmup: int,
                rss_before: float | None) -> tuple[list[float], float | None]:
    """Warm-up steps, then `steps` timed steps inside a fresh peak-memory window: (times, peak bytes)."""
    from ..render.progress import tick

    for _ in range(warmup):
        step()
        tick()
    _sync(device)
    baseline = _reset_peak(device)
    times = []
    for _ in range(steps):
        times.append(timed(step, device))
        tick()
    return times, _read_peak(result, device, baseline, rss_before)


def record_speed(result: ProfileResult, model_flops: float, times: list[float], hardware_flops: float,
                 peak_flops: float | None, peak_source: str) -> None:
    """Median step time, throughput, and MFU/HFU against `peak_flops` when one is known.

    MFU = `model_flops` (3 x forward: `step_flops`'s full S² as PaLM App. B, or halved, Megatron-LM's
    convention) / time / peak; HFU = the FLOPs the counter saw executed / time / peak."""
    median = statistics.median(times)
    result.step_times, result.step_seconds = times, median
    result.tokens_per_second = result.batch_size * result.seq_len / median
    result.achieved_flops_per_s = hardware_flops / median  # what the hardware executed (counter)
    if peak_flops:
        result.peak_flops_per_s, result.peak_source = peak_flops, peak_source
        result.mfu = model_flops / median / peak_flops
        result.hfu = hardware_flops / median / peak_flops
        if result.mfu > 1:  # faster than the peak: the peak is wrong, and a utilization above 1 means nothing
            raise LlmcalcError(f"the step ran {model_flops / median / 1e12:.3g} model TFLOP/s, above the peak of "
                               f"{peak_flops / 1e12:.3g} TFLOP/s ({peak_source}): MFU {result.mfu:.3g} > 1; give "
                               f"this device's dense peak with --peak-tflops, or run `llmcalc calibrate` again")


def _add_fvcore(result: ProfileResult, model, inputs) -> None:
    """fvcore's forward count beside torch's (a row inserted after the "forward FLOPs" row)."""
    total, _ = fvcore_forward_flops(model, inputs)
    result.notes.append(f"fvcore forward: {total:.6g} FLOPs (multiply-adds x 2; sdpa counted by a handle)")
    result.fvcore_forward_flops = total
    result.comparisons.insert(2, Comparison("forward FLOPs (fvcore)", result.find("forward FLOPs").analytic,
                                            total, "FLOP", FLOP_TOLERANCE, note="fvcore's multiply-adds x 2"))


def real_passes(steps: int, warmup: int, compile: bool) -> int:
    """The passes a real profile runs: the counted forward and training step, the compiling step, warm-up, timed."""
    return 2 + compile + warmup + steps


def real_profile(spec: ModelSpec, device: str = "auto", batch: int = 1, seq: int = DEFAULT_SEQ_LEN,
                 recipe: str = "fp32",
                 recompute: str = "none", attention: str = "sdpa", steps: int = 10, warmup: int = 2,
                 compile: bool = False, counter: str = "torch", peak_flops: float | None = None,
                 peak_source: str = "", causal_mfu: bool = False) -> ProfileResult:
    """Train for warm-up + `steps` steps on a real device and hold the measurements to the formulas. Each pass
    ticks the open ``render.progress.step_clock`` (``real_passes`` of them)."""
    from ..render.progress import tick

    _check(spec, recompute, attention)
    device = resolve_device(device)
    dtype = param_dtype(recipe)
    result = ProfileResult(spec.name, "real", device, device_name(device), recipe, batch_size=batch, seq_len=seq,
                           recompute=recompute, attention=attention, sdpa_backend="", counter=counter)
    torch.manual_seed(0)
    rss_before = _proc_status("VmRSS") if device == "cpu" else None
    try:
        model = build_model(spec, dtype, device, attention, routing="learned")
        model.set_checkpointing(recompute == "full")
        optimizer = make_optimizer(model, recipe)
        inputs = batch_inputs(model, batch, seq, device)
        params = sum(measured_breakdown(model).values())
        spy = SdpaSpy()
        with spy:
            forward = count_flops(lambda: forward_only(model, inputs, recipe, device))
        tick()
        step_count = count_flops(lambda: training_step(model, optimizer, inputs, recipe, device))
        tick()
        runner = torch.compile(model) if compile else model

        def step():
            training_step(runner, optimizer, inputs, recipe, device)

        if compile:
            result.compile_seconds = timed(step, device)  # the first compiled step compiles
            tick()
        times, peak = time_steps(result, step, device, steps=steps, warmup=warmup, rss_before=rss_before)
    except torch.OutOfMemoryError:
        raise LlmcalcError(f"CUDA out of memory profiling {spec.name} at batch {batch} x seq {seq}: try --virtual, "
                           f"fewer layers (--layers N) or a smaller --micro-batch/--seq-len") from None
    result.sdpa_backend = sdpa_backend_seen(forward.by_op, spy.seen)
    _compare(result, spec, batch, seq, recompute, params=params, forward=forward, step=step_count,
             analytic_memory=_analytic_memory(spec, batch, seq, recipe, recompute, attention=attention),
             measured_peak=peak, recipe=recipe)
    if counter in ("fvcore", "both"):
        _add_fvcore(result, model, inputs)
    model_flops = step_flops(spec, batch, seq, causal=causal_mfu, recompute=recompute).model_flops
    record_speed(result, model_flops, times, hardware_flops=step_count.total, peak_flops=peak_flops,
                 peak_source=peak_source)
    return result
