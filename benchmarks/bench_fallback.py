"""Time of the transformers fallback (a model_type with no llmcalc formula), fresh process per call.

Run on demand:  python benchmarks/bench_fallback.py [--runs 3]
Cold: an empty cache (torch + transformers imported, the model built); warm: the cached answer.
Targets (an idle machine; the load average is printed, a shared machine runs several times slower):
a tiny config cold under 15 s (importing torch and transformers is most of it), every warm call
under 0.5 s like the analytic commands.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = {"model_type": "codegen", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 1000}
# CodeGen at 70B-class width: 80 layers, D 8192 (fake tensors: no memory)
LARGE = {"model_type": "codegen", "n_layer": 80, "n_embd": 8192, "n_head": 64, "rotary_dim": 64, "vocab_size": 51200}
COLD_TARGET, WARM_TARGET = 15.0, 0.5


def timed(argv: list[str], cache: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "llmcalc", *argv], check=True, capture_output=True,
                   env={**os.environ, "LLMCALC_CACHE_DIR": cache})
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for label, config in (("tiny", TINY), ("70B-class", LARGE)):
            path = Path(tmp) / f"{label}.json"
            path.write_text(json.dumps(config))
            for command in (["params", str(path)], ["flops", str(path), "--seq-len", "4096"]):
                cold = [timed(command, tempfile.mkdtemp(dir=tmp)) for _ in range(args.runs)]
                cache = tempfile.mkdtemp(dir=tmp)
                timed(command, cache)
                warm = [timed(command, cache) for _ in range(args.runs)]
                ok &= (label != "tiny" or statistics.median(cold) < COLD_TARGET) and max(warm) < WARM_TARGET
                print(f"{label:9s} llmcalc {command[0]:6s} cold median {statistics.median(cold):6.2f} s  "
                      f"warm median {statistics.median(warm):5.2f} s  ({args.runs} runs)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: {'OK' if ok else 'TOO SLOW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
