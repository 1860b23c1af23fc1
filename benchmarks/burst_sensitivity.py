"""Which mechanism could make an offline burst's TPOT slower than the workload model says while its throughput is
nearer: each candidate turned up and down over GPUStack's `vllm bench serve` bursts (request rate inf, ~1,000
prompts), the throughput and TPOT errors printed per row (error = predicted speed / measured speed - 1, + = llmcalc
faster), beside the row's measured peak output rate.

    python benchmarks/burst_sensitivity.py [--knob frontend|kv|prefill] [--values A,B,C]

Knobs (each a what-if, not a fit):
- ``frontend``: the API server's seconds per streamed token (serving_speed.FRONTEND_TOKEN_SECONDS), in microseconds
  (default 77.8, 120, 160);
- ``kv``: the KV cache's blocks scaled (serving_speed.kv_budget), as a share (default 1, 0.8, 0.6);
- ``prefill``: every step's time beyond the same step's decodes alone scaled (the prefill chunks' share of a mixed
  step: GEMM rows, prefill attention, the larger all-reduces), as a factor (default 1, 1.5, 2).

`peak tok/s` is vllm bench serve's "Peak output token throughput" from the row's quoted printout: it counts
streamed chunks per one-second bucket (benchmarks/serve.py: one token per ITL entry), a lower bound on how many chunks
the API server and the client passed per second; the model's API server passes 1 / FRONTEND_TOKEN_SECONDS.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving_speed import DATA, predict_workload  # noqa: E402

from llmcalc.analytic import engines, serving_speed  # noqa: E402
from llmcalc.analytic.engine_queue import KvBudget  # noqa: E402
from llmcalc.errors import LlmcalcError  # noqa: E402

DEFAULTS = {"frontend": (77.8, 120.0, 160.0), "kv": (1.0, 0.8, 0.6), "prefill": (1.0, 1.5, 2.0)}
PEAK = re.compile(r"Peak output token throughput \(tok/s\):\s+([\d.]+)")


def peak_rate(row: dict) -> float | None:
    """The row's quoted peak output rate (chunks per second at the busiest second), None where not quoted."""
    match = PEAK.search(row.get("quote", ""))
    return float(match.group(1)) if match else None


def burst_rows() -> list[dict]:
    """GPUStack's offline bursts through the API server on a model llmcalc has."""
    rows = json.loads(DATA.read_text())["rows"]
    return [r for r in rows if r["mode"] == "offline" and r["source_key"].startswith("gpustack")
            and r.get("served", True) and r.get("model")]


@contextlib.contextmanager
def frontend(microseconds: float) -> Iterator[None]:
    """serving_speed.FRONTEND_TOKEN_SECONDS set to `microseconds` for the block."""
    with mock.patch.object(serving_speed, "FRONTEND_TOKEN_SECONDS", microseconds * 1e-6):
        yield


@contextlib.contextmanager
def kv(share: float) -> Iterator[None]:
    """The KV cache's blocks (serving_speed.kv_budget) scaled by `share` for the block."""
    kept = serving_speed.kv_budget

    def scaled(est: Any) -> KvBudget:
        budget = kept(est)
        return KvBudget(blocks=int(budget.blocks * share), need=budget.need, reach=budget.reach)

    with mock.patch.object(serving_speed, "kv_budget", scaled):
        yield


@contextlib.contextmanager
def prefill(factor: float) -> Iterator[None]:
    """Each step's time beyond its decodes alone (the same step without its prefill chunks) scaled by `factor`."""
    classes = (serving_speed.StepCost, engines.EngineStepCost)
    kept = {cls: cls.seconds for cls in classes}

    def wrap(orig: Any) -> Any:
        def seconds(self: Any, tokens: float, rows: float, kv_tokens: float, decodes: float, pairs: float,
                    length: float) -> float:
            full = orig(self, tokens, rows, kv_tokens, decodes, pairs, length)
            if tokens <= decodes:
                return full
            alone = orig(self, decodes, min(rows, decodes), kv_tokens, decodes, 0.0, 0.0) if decodes else 0.0
            return full + (factor - 1.0) * (full - alone)
        return seconds

    with contextlib.ExitStack() as stack:
        for cls in classes:
            stack.enter_context(mock.patch.object(cls, "seconds", wrap(kept[cls])))
        yield


KNOBS = {"frontend": frontend, "kv": kv, "prefill": prefill}


def errors(row: dict) -> tuple[float, float] | None:
    """(throughput error, TPOT error) of the workload model on `row`, None where it cannot express it."""
    try:
        pred = predict_workload(row)
    except LlmcalcError:
        return None
    if not pred["output_tokens_per_second"]:  # the replica holds no request of these lengths
        return None
    m = row["metrics"]
    tpot = "tpot_seconds_median" if "tpot_seconds_median" in m else "tpot_seconds_mean"
    return pred["output_tokens_per_second"] / m["output_tokens_per_second"] - 1.0, m[tpot] / pred[tpot] - 1.0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--knob", choices=tuple(KNOBS), default="frontend")
    ap.add_argument("--values", default=None, help="comma-separated values of the knob (see the module docstring)")
    args = ap.parse_args(argv)
    values = [float(v) for v in args.values.split(",")] if args.values else list(DEFAULTS[args.knob])
    print(f"knob {args.knob}: throughput / TPOT error at each value; model API server "
          f"{1 / serving_speed.FRONTEND_TOKEN_SECONDS:,.0f} chunks/s")
    print(f"{'row':50s} {'peak tok/s':>10s}" + "".join(f" {f'{v:g}':>15s}" for v in values))
    for row in burst_rows():
        cells = []
        for v in values:
            with KNOBS[args.knob](v):
                e = errors(row)
            cells.append(f"{e[0]:+7.0%} {e[1]:+7.0%}" if e else f"{'-':>15s}")
        peak = peak_rate(row)
        print(f"{row['id'][:50]:50s} {f'{peak:,.0f}' if peak else '-':>10s} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
