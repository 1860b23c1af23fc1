"""The sweeps a planning report plots, as pandas DataFrames (one row per point, base units)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..analytic.flops import step_flops
from ..analytic.inference import kv_cache_bytes_per_token
from ..analytic.params import ParamCount
from ..analytic.rules import crossover
from ..analytic.summary import Scenario, model_record, scenario_memory
from ..analytic.training import compute_optimal
from ..spec import ModelSpec

SEQ_LENGTHS = [2**k for k in range(7, 18)]  # 128 .. 128k tokens
GPU_COUNTS = [2**k for k in range(3, 15)]  # 8 .. 16,384
CONTEXTS = [2**k for k in range(10, 18)]  # 1k .. 128k tokens
MICRO_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
NEIGHBOURS = ["a100-80gb-sxm", "h100-sxm", "h200", "b200", "mi300x"]  # accelerators to set beside the chosen one
COMPONENTS = ["attention projections", "attention S²", "FFN", "LM head"]


def params_groups(counts: dict[str, ParamCount]) -> pd.DataFrame:
    rows = [{"model": model, "group": group, "params": value}
            for model, count in counts.items() for group, value in count.groups().items()]
    return pd.DataFrame(rows)


def flops_vs_seq(specs: dict[str, ModelSpec], causal: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    rows, crossovers = [], {}
    for model, spec in specs.items():
        for seq in SEQ_LENGTHS:
            step = step_flops(spec, 1, seq, causal)
            groups = step.groups()
            for component in COMPONENTS:
                rows.append({"model": model, "seq_len": seq, "component": component,
                             "flops_per_token": 3 * groups.get(component, 0) / step.tokens})
            rows.append({"model": model, "seq_len": seq, "component": "total",
                         "flops_per_token": step.model_flops_per_token})
        cross = crossover(spec, causal) if spec.architecture == "decoder" else None
        if cross is not None:
            crossovers[model] = cross.vs_projections
    return pd.DataFrame(rows), crossovers


def time_vs_gpus(specs: dict[str, ModelSpec], scenario: Scenario, load_hardware) -> tuple[pd.DataFrame, dict]:
    """Wall-clock against GPU count: one model on the chosen accelerator and its neighbours, or
    every model on the chosen accelerator. Returns the points and each series' cost."""
    if len(specs) == 1:
        keys = [scenario.gpu.key] + [k for k in NEIGHBOURS if k != scenario.gpu.key][:3]
        series = [(f"{next(iter(specs))} on {k}", next(iter(specs.values())), load_hardware(k)) for k in keys]
    else:
        series = [(f"{model} on {scenario.gpu.key}", spec, scenario.gpu) for model, spec in specs.items()]
    rows, costs = [], {}
    for label, spec, gpu in series:
        price = scenario.usd_per_gpu_hour if gpu.key == scenario.gpu.key else None
        for n in sorted(set(GPU_COUNTS + [scenario.n_gpus])):
            record = model_record(spec, replace(scenario, gpu=gpu, n_gpus=n, usd_per_gpu_hour=price))
            rows.append({"series": label, "device": gpu.key, "n_gpus": n, "wall_clock_days": record["wall_clock_days"],
                         "gpu_hours": record["gpu_hours"], "cost_usd": record["cost_usd"]})
        costs[label] = rows[-1]["cost_usd"]
    return pd.DataFrame(rows), costs


def memory_vs_batch(specs: dict[str, ModelSpec], scenario: Scenario) -> pd.DataFrame:
    rows = []
    for model, spec in specs.items():
        if spec.architecture != "decoder":
            continue
        for batch in MICRO_BATCHES:
            est = scenario_memory(spec, scenario, batch)
            if batch > 1 and est.peak > 2 * scenario.gpu.memory_bytes:
                break  # far past the device: stop the sweep
            for component, value in est.peak_components().items():
                if value:
                    rows.append({"model": model, "micro_batch": batch, "component": component, "bytes": value})
            rows.append({"model": model, "micro_batch": batch, "component": "peak", "bytes": est.peak})
    return pd.DataFrame(rows, columns=["model", "micro_batch", "component", "bytes"])


def kv_vs_context(specs: dict[str, ModelSpec], kv_dtype: str) -> pd.DataFrame:
    rows = [{"model": model, "context": c, "kv_cache_bytes": c * kv_cache_bytes_per_token(spec, kv_dtype)}
            for model, spec in specs.items() if spec.architecture != "encoder" for c in CONTEXTS]
    return pd.DataFrame(rows, columns=["model", "context", "kv_cache_bytes"])


def frontiers() -> dict[str, tuple[list[float], list[float]]]:
    """Compute-optimal (params, tokens) for budgets 1e19 .. 1e27 FLOPs, by method."""
    budgets = [10 ** (19 + k / 4) for k in range(33)]
    out: dict[str, tuple[list[float], list[float]]] = {}
    for c in budgets:
        for plan in compute_optimal(c)[:2]:
            n, d = out.setdefault(plan.method, ([], []))
            n.append(plan.params)
            d.append(plan.tokens)
    return out
