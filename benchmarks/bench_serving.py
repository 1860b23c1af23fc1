"""Serving answers fast (target: well under a second wall per call, process start included).

Run on demand:  python benchmarks/bench_serving.py [--runs 5]
Each call is a fresh process, as a user's shell would run it. Before the closed-form decode sum,
`infer llama-3.1-405b --generate 32768` had not finished after 10 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--prompt", "32k", "--generate", "32768"],
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--generate", "32768", "--format", "json"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype", "fp8"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "16", "--max-model-len", "32k", "--format", "json"],
    ["serve", "deepseek-v3", "--gpu", "h200", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype", "fp8"],
]
TARGET_SECONDS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
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
        print(f"llmcalc {' '.join(argv):100s} median {median * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms "
              f"({args.runs} runs)")
    verdict = "OK" if worst < TARGET_SECONDS else "TOO SLOW"
    print(f"worst median {worst * 1000:.1f} ms against a target of {TARGET_SECONDS * 1000:.0f} ms: {verdict}")
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
