"""The phases of an offline burst (`vllm bench serve` at request rate inf), read from a run's own TTFT and set beside
the workload model's: the row's measured TTFT mean and p99 read as first tokens spread evenly over [start, end]
(mean = (start + end) / 2, p99 ~ end), so `start` is when the first of the burst's first tokens reached a client and
`end - start` the span over which the rest followed; ITL median (a typical step) and TPOT median likewise.

    python benchmarks/burst_phases.py [--engine vllm|sglang|trtllm]

Rows: benchmarks/serving_validation.json's offline rows served through the API server (`served` not false) that
quote TTFT mean and p99.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving_speed import DATA, predict_workload  # noqa: E402

from llmcalc.errors import LlmcalcError  # noqa: E402


def spread(mean: float, p99: float) -> tuple[float, float]:
    """(start, end) of first tokens spread evenly with this mean and 99th percentile."""
    end = (p99 - 0.02 * mean) / 0.98  # p99 = start + 0.99 (end - start), mean = (start + end) / 2
    return 2 * mean - end, end


def row_phases(row: dict) -> dict | None:
    m = row["metrics"]
    if row["mode"] != "offline" or row.get("served") is False or "ttft_seconds_p99" not in m or not row.get("model"):
        return None
    try:
        pred = predict_workload(row)
    except LlmcalcError:
        return None
    start, end = spread(m["ttft_seconds_mean"], m["ttft_seconds_p99"])
    return {"id": row["id"], "start": start, "span": end - start,
            "ttft": (m["ttft_seconds_mean"], pred["ttft_seconds_mean"]),
            "itl": (m.get("itl_seconds_median"), pred["itl_seconds_median"]),
            "tpot": (m.get("tpot_seconds_median"), pred["tpot_seconds_median"])}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=None)
    args = ap.parse_args(argv)
    rows = [r for r in json.loads(DATA.read_text())["rows"] if args.engine in (None, r["engine"])]
    print(f"{'row':50s} {'start s':>8s} {'span s':>7s} {'TTFT mean s meas/pred':>22s} {'ITL med ms meas/pred':>21s} "
          f"{'TPOT med ms meas/pred':>22s}")
    for row in rows:
        p = row_phases(row)
        if p is None:
            continue
        itl = "/".join(f"{1e3 * v:.0f}" if v else "-" for v in p["itl"])
        tpot = "/".join(f"{1e3 * v:.0f}" if v else "-" for v in p["tpot"])
        print(f"{p['id'][:50]:50s} {p['start']:8.1f} {p['span']:7.1f} {p['ttft'][0]:10.1f}/{p['ttft'][1]:<11.1f} "
              f"{itl:>21s} {tpot:>22s}")


if __name__ == "__main__":
    main()
