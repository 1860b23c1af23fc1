"""The sweeps a planning report plots, as pandas DataFrames (one row per point, base units)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..analytic.flops import step_flops
from ..analytic.inference import kv_cache_bytes_per_token
from ..analytic.params import ParamCount
from ..analytic.rules import crossover
from ..analytic.summary import Scenario, model_record, scenario_memory, scenario_training
from ..analytic.training import compute_optimal
from ..errors import LlmcalcError
from ..spec import ModelSpec

SEQ_LENGTHS = [2**k for k in range(7, 18)]  # 128 .. 128k tokens
GPU_COUNTS = [2**k for k in range(3, 15)]  # 8 .. 16,384
CONTEXTS = [2**k for k in range(10, 18)]  # 1k .. 128k tokens
NEIGHBOURS = ["a100-80gb-sxm", "h100-sxm", "h200", "b200", "mi300x"]  # accelerators to set beside the chosen one
COMPONENTS = ["attention projections", "attention S²", "FFN", "LM head"]


def params_group(name: str) -> str:
    """One row per kind of component across models: encoder/decoder prefixes dropped, cross-attention
    with attention, a dense MLP and MoE experts (routed + shared) in one row, 'MLP / experts'."""
    group = name.split(".")[-1]
    return {"cross_attention": "attention", "mlp": "MLP / experts", "moe": "MLP / experts"}.get(group, group)


def params_groups(counts: dict[str, ParamCount]) -> pd.DataFrame:
    """model, group, params, active: exact parameters per group, and those one token uses (MoE: the
    routed experts it is not sent to are the only parameters it does not use)."""
    rows = []
    for model, count in counts.items():
        groups: dict[str, int] = {}
        for group, value in count.groups().items():
            groups[params_group(group)] = groups.get(params_group(group), 0) + value
        idle = count.total - count.active_per_token
        for group, value in groups.items():
            rows.append({"model": model, "group": group, "params": value,
                         "active": value - idle if group == "MLP / experts" else value})
        rows.append({"model": model, "group": "total", "params": count.total, "active": count.active_per_token})
    return pd.DataFrame(rows, columns=["model", "group", "params", "active"])


def lengths(spec: ModelSpec, grid: list[int]) -> list[int]:
    """The grid, with the model's max_position_embeddings added where it falls between two points (so that a
    line can end exactly there)."""
    limit = spec.max_seq_len
    extra = [limit] if limit and grid[0] < limit < grid[-1] and limit not in grid else []
    return sorted(grid + extra)


def past_positions(spec: ModelSpec, length: int) -> bool:
    """Whether `length` tokens run past the model's max_position_embeddings (never, where it has none)."""
    return spec.max_seq_len is not None and length > spec.max_seq_len


def flops_vs_seq(specs: dict[str, ModelSpec], causal: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """model, seq_len, component, flops_per_token, past_max_positions (the figure draws those rows faded)."""
    rows, crossovers = [], {}
    for model, spec in specs.items():
        for seq in lengths(spec, SEQ_LENGTHS):
            step = step_flops(spec, 1, seq, causal)
            groups = step.groups()
            past = past_positions(spec, seq)
            for component in COMPONENTS:
                rows.append({"model": model, "seq_len": seq, "component": component,
                             "flops_per_token": 3 * groups.get(component, 0) / step.tokens, "past_max_positions": past})
            rows.append({"model": model, "seq_len": seq, "component": "total",
                         "flops_per_token": step.model_flops_per_token, "past_max_positions": past})
        cross = crossover(spec, causal) if spec.architecture == "decoder" else None
        if cross is not None:
            crossovers[model] = cross.vs_projections
    return pd.DataFrame(rows), crossovers


def accelerators_shown(specs: dict[str, ModelSpec], scenario: Scenario, load_hardware) -> list:
    """The chosen accelerator, and with one model three neighbours to set beside it (of those with a dense peak in
    the scenario's dtype: `report --dtype fp8` sets no A100 beside an H100)."""
    gpu = scenario.accelerator
    if len(specs) > 1:
        return [gpu]
    others = [load_hardware(k) for k in NEIGHBOURS if k != gpu.key]
    return [gpu] + [acc for acc in others if scenario.dtype in acc.peak_flops][:3]


def time_vs_gpus(specs: dict[str, ModelSpec], scenarios: dict[str, Scenario], load_hardware) -> pd.DataFrame:
    """Wall-clock against GPU count: one model on the chosen accelerator and its neighbours, or every
    model on the chosen accelerator, each on its own planned layout (`scenarios`, per model: its tp x cp x pp,
    ZeRO, micro-batch and MFU, dp growing with the GPUs). `fits`: whether the per-GPU training memory fits on the
    device at that count (False where the count does not divide into the layout's tp x cp x pp; None where memory
    is not modelled: encoders, encoder-decoders)."""
    first = next(iter(scenarios.values()))
    gpus, plan_gpu = accelerators_shown(specs, first, load_hardware), first.accelerator
    series = ([(f"{next(iter(specs))} on {g.key}", next(iter(specs.values())), g) for g in gpus] if len(specs) == 1
              else [(f"{model} on {plan_gpu.key}", spec, plan_gpu) for model, spec in specs.items()])
    rows = []
    for label, spec, gpu in series:
        scenario = scenarios[spec.name]
        price = scenario.usd_per_gpu_hour if gpu.key == plan_gpu.key else None
        for n in sorted(set(GPU_COUNTS + [scenario.n_gpus])):
            at = replace(scenario, gpu=gpu, n_gpus=n, usd_per_gpu_hour=price)
            est = scenario_training(spec, at)
            try:
                fits = model_record(spec, at).get("fits")
            except LlmcalcError:  # n does not divide into the layout's model-parallel group
                fits = False
            rows.append({"series": label, "model": spec.name, "device": gpu.key, "n_gpus": n,
                         "wall_clock_days": est.wall_clock_days, "gpu_hours": est.gpu_hours,
                         "cost_usd": est.cost_usd, "fits": fits})
    return pd.DataFrame(rows)


def micro_batches(largest: int) -> list[int]:
    """Every micro-batch up to the first that does not fit (`largest` + 1); past 24 bars, every one
    up to 8 and then about a dozen geometrically spaced, always ending at largest, largest + 1."""
    first_over = largest + 1
    if first_over <= 24:
        return list(range(1, first_over + 1))
    steps = [round(8 * (largest / 8) ** (k / 12)) for k in range(1, 12)]
    return sorted(set(list(range(1, 9)) + steps + [largest, first_over]))


def memory_vs_batch(specs: dict[str, ModelSpec], scenarios: dict[str, Scenario]
                    ) -> tuple[pd.DataFrame, dict[str, str]]:
    """Peak training memory per GPU by component against micro-batch, for each decoder model on its planned
    layout (`scenarios`, per model); and the models left out, with why."""
    rows, skipped = [], {}
    for model, spec in specs.items():
        if spec.architecture != "decoder":
            skipped[model] = f"{spec.architecture}: the activation model covers decoder-only models"
            continue
        scenario = scenarios[model]
        largest = scenario_memory(spec, scenario, 1).largest_micro_batch(scenario.accelerator.memory_bytes)
        for batch in micro_batches(largest):
            est = scenario_memory(spec, scenario, batch)
            for component, value in est.peak_components().items():
                if value:
                    rows.append({"model": model, "micro_batch": batch, "component": component, "bytes": value})
            rows.append({"model": model, "micro_batch": batch, "component": "peak", "bytes": est.peak})
    return pd.DataFrame(rows, columns=["model", "micro_batch", "component", "bytes"]), skipped


def kv_vs_context(specs: dict[str, ModelSpec], kv_dtype: str) -> pd.DataFrame:
    """model, context, kv_cache_bytes, past_max_positions (the figure draws those rows faded); a model without a
    KV cache (an encoder, a pure state-space model, whose state does not grow with context) has no rows."""
    rows = [{"model": model, "context": c, "kv_cache_bytes": c * kv_cache_bytes_per_token(spec, kv_dtype),
             "past_max_positions": past_positions(spec, c)}
            for model, spec in specs.items() if spec.architecture != "encoder"
            and kv_cache_bytes_per_token(spec, kv_dtype) > 0 for c in lengths(spec, CONTEXTS)]
    return pd.DataFrame(rows, columns=["model", "context", "kv_cache_bytes", "past_max_positions"])


def frontiers() -> dict[str, tuple[list[float], list[float]]]:
    """Compute-optimal (params, tokens) for budgets 1e19 .. 1e27 FLOPs, by method: the ~20 tokens per
    parameter rule (Hoffmann et al. 2022, Approaches 1 and 2) and the Approach 3 parametric fit."""
    budgets = [10 ** (19 + k / 4) for k in range(33)]
    out: dict[str, tuple[list[float], list[float]]] = {}
    for c in budgets:
        for plan in compute_optimal(c)[:2]:
            n, d = out.setdefault(plan.method, ([], []))
            n.append(plan.params)
            d.append(plan.tokens)
    return out
