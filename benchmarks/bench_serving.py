"""Serving answers fast (target: well under a second wall per call, process start included).

Run on demand:  python benchmarks/bench_serving.py [--runs 5]
Each call is a fresh process, as a user's shell would run it. Before the closed-form decode sum,
`infer llama-3.1-405b --generate 32768` had not finished after 10 minutes.
"""

from __future__ import annotations

import argparse
import sys

from bench_cli import time_commands  # benchmarks/ is on the path when run as a script

COMMANDS = [
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--prompt", "32k", "--generate", "32768"],
    ["infer", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--generate", "32768", "--format", "json"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype",
     "fp8"],
    ["serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", "16", "--max-model-len", "32k", "--format", "json"],
    ["serve", "deepseek-v3", "--gpu", "h200", "--n-gpus", "8", "--max-model-len", "32k", "--weight-dtype", "fp8"],
]
TARGET_SECONDS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    return time_commands(COMMANDS, parser.parse_args().runs, TARGET_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
