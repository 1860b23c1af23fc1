"""Profiler scale checks, run on demand: python benchmarks/bench_profile.py

- a virtual (FakeTensorMode) profile of Llama-3.1-405B (default seq 4,096; 3 of its 126 blocks measured and
  extrapolated, measure.sampling) on this machine: CPU time and peak resident memory of the process (targets:
  under 15 s, under 4 GiB), and the same at seq 2048;
- real CPU runs of the two small presets (target: well under a minute each).
Each case runs in a fresh process so that its peak RSS is its own; the target holds its CPU time (user +
system: what does not depend on the neighbours on a shared machine), wall time shown beside it.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

CASES = [
    ("virtual llama-3.1-405b", ["profile", "llama-3.1-405b", "--virtual"], 15, 4),
    ("virtual llama-3.1-405b, seq 2048", ["profile", "llama-3.1-405b", "--virtual", "--seq-len", "2048"], 15, 4),
    ("real cpu llmcalc-tiny", ["profile", "llmcalc-tiny", "--device", "cpu", "--steps", "5", "--batch-size", "4",
                               "--seq-len", "256"], 60, None),
    ("real cpu llmcalc-small", ["profile", "llmcalc-small", "--device", "cpu", "--steps", "5", "--batch-size", "4",
                                "--seq-len", "256"], 60, None),
]
PROBE = ("import resource, sys, runpy; sys.argv = ['llmcalc'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('llmcalc', run_name='__main__')\n"
         "finally:\n    print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)")


def main() -> int:
    failed = False
    for label, argv, max_seconds, max_gib in CASES:
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", PROBE, *argv, "--format", "json"], capture_output=True, text=True)
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if done.returncode:
            print(f"{label}: FAILED\n{done.stderr}")
            failed = True
            continue
        rss = int(done.stderr.split("MAXRSS")[-1]) * 1024 / 2**30  # ru_maxrss is in KiB on Linux
        data = json.loads(done.stdout)
        ok = seconds < max_seconds and (max_gib is None or rss < max_gib)
        failed |= not ok
        extra = f", MFU {data['mfu'] * 100:.1f} % of {data['peak_source']}" if data.get("mfu") else ""
        print(f"{label}: {seconds:.1f} s CPU ({wall:.1f} s wall), peak RSS {rss:.2f} GiB{extra} -> "
              f"{'OK' if ok else 'TOO SLOW/BIG'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
