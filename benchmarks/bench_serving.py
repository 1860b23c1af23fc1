"""Serving answers fast (target: well under a second wall per call, process start included).

Run on demand:  python benchmarks/bench_serving.py [--runs 5]
Each call is a fresh process, as a user's shell would run it; its CPU time (bench_cli.measure).
Before the closed-form decode sum,
`infer llama-3.1-405b --generate 32768` had not finished after 10 minutes.
"""

from __future__ import annotations

import argparse
import sys

from bench_cli import measure  # benchmarks/ is on the path when run as a script

COMMANDS = [
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--prompt", "32k", "--generate", "32768",
     "--weight-dtype", "fp8"],
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--generate", "32768", "--format", "json",
     "--weight-dtype", "fp8"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype",
     "fp8"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "16", "--max-model-len", "32k", "--format", "json"],
    ["serve", "deepseek-v3", "--gpu", "h200", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype", "fp8"],
    ["serve", "llama-3.1-70b", "--gpu", "h100-sxm", "--n-gpus", "8", "--input-len", "2k", "--output-len", "512",
     "--max-concurrency", "1,16,256"],
]
TARGET_SECONDS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    return 0 if measure([(c, TARGET_SECONDS) for c in COMMANDS], runs, None, bytecode=True, floor=False) else 1


if __name__ == "__main__":
    sys.exit(main())
