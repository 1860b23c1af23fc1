"""Start-up time of the analytic commands (target: well under 0.5 s wall per call).

Run on demand:  python benchmarks/bench_cli.py [--runs 20]
Each call is a fresh process, as a user's shell would run it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["params", "llama-3-8b"],
    ["params", "deepseek-v3", "--format", "json"],
    ["presets"],
]
TARGET_SECONDS = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    worst = 0.0
    for argv in COMMANDS:
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "llmcalc", *argv], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        worst = max(worst, median)
        print(f"llmcalc {' '.join(argv):40s} median {median * 1000:6.1f} ms  "
              f"min {min(times) * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms  ({args.runs} runs)")
    verdict = "OK" if worst < TARGET_SECONDS else "TOO SLOW"
    print(f"worst median {worst * 1000:.1f} ms against a target of {TARGET_SECONDS * 1000:.0f} ms: {verdict}")
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
