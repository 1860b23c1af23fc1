"""Start-up time of the analytic commands (target: well under 0.5 s wall per call).

Run on demand:  python benchmarks/bench_cli.py [--runs 20]
Each call is a fresh process, as a user's shell would run it.
"""

from __future__ import annotations

import argparse
import resource
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


def time_commands(commands: list[list[str]], runs: int, target: float) -> int:
    """Time each llmcalc command line in fresh processes; 0 when every median is under `target` seconds.
    CPU time (user + system of the child) is printed beside the wall time: on a loaded machine it is the
    figure that does not depend on the neighbours."""
    worst = 0.0
    for argv in commands:
        times, cpu = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "llmcalc", *argv], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        median = statistics.median(times)
        worst = max(worst, median)
        print(f"llmcalc {' '.join(argv):40s} median {median * 1000:6.1f} ms  "
              f"min {min(times) * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms  "
              f"CPU {statistics.median(cpu) * 1000:6.1f} ms  ({runs} runs)")
    verdict = "OK" if worst < target else "TOO SLOW"
    print(f"worst median {worst * 1000:.1f} ms against a target of {target * 1000:.0f} ms: {verdict}")
    return 0 if worst < target else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    return time_commands(COMMANDS, parser.parse_args().runs, TARGET_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
