"""Time of the transformers fallback (a model_type with no llmcalc formula), fresh process per call.

Run on demand:  python benchmarks/bench_fallback.py [--runs 3] [--only 1t]
Cold: an empty cache (torch and transformers imported, the model built, measured); warm: the cached answer.
Cases: a tiny CodeGen and a 70B-class CodeGen (`params`, `flops`), and a 1T-parameter MoE, Kimi-K2's published
config (benchmarks/kimi_k2_as_deepseek_v3.json: DeepSeek-V3's architecture, as its "architectures" names, under
model_type deepseek_v3), sent through transformers by LLMCALC_FORCE_TRANSFORMERS=1 (`params`, `flops`, `memory`).
Its forwards run on 3 of its 61 layers (profiling/hf_shorten.py: one dense layer and two MoE ones, scaled to all).
Cold calls before (9f9819e) and after, alternated at the same load (~5.5 on 2 CPUs), CPU (user + sys) and wall
seconds: memory 12.6-13.9 / 18.9-20.8 -> 6.2-7.1 / 9.5-10.6; flops 9.3-10.3 / 13.8-15.8 -> 6.0-6.6 / 9.1-9.9;
params 6.1-7.0 / 9.2-10.6 -> 5.8-6.0 / 8.6-9.1 (what is left is mostly importing torch and transformers).
With the step model's record (measured on the same shortened stack), at load ~1: memory 8.0 s CPU / 8.1 s wall,
flops 6.2 / 6.1-6.8, params 5.9 / 5.8; warm 0.14-0.24 s.
Targets (wall, an idle machine; the child's CPU time is printed beside it, the figure that does not depend on
neighbours): a cold call under 10 s, a warm call under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY = {"model_type": "codegen", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 1000}
# CodeGen at 70B-class width: 80 layers, D 8192 (no weights, no memory)
LARGE = {"model_type": "codegen", "n_layer": 80, "n_embd": 8192, "n_head": 64, "rotary_dim": 64, "vocab_size": 51200}
KIMI_K2 = HERE / "kimi_k2_as_deepseek_v3.json"
COLD_TARGET, WARM_TARGET = 10.0, 1.0


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one `llmcalc` call; a failed call stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "llmcalc", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"llmcalc {' '.join(argv)} failed: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("tiny", "70b-class", "1t"), help="one case")
    args = parser.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for label, config in (("tiny", TINY), ("70b-class", LARGE)):
            path = Path(tmp) / f"{label}.json"
            path.write_text(json.dumps(config))
            cases.append((label, path, {}, [["params"], ["flops", "--seq-len", "4096"]]))
        cases.append(("1t", KIMI_K2, {"LLMCALC_FORCE_TRANSFORMERS": "1"},
                      [["params"], ["flops", "--seq-len", "4096"], ["memory", "--seq-len", "4096"]]))
        for label, path, extra, commands in cases:
            if args.only and label != args.only:
                continue
            for command in commands:
                argv = [command[0], str(path), *command[1:]]
                for _ in range(args.runs):
                    env = {**os.environ, **extra, "LLMCALC_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}
                    wall, cpu = timed(argv, env)
                    failed |= wall > COLD_TARGET
                    print(f"{label:10} {command[0]:7} cold  wall {wall:6.2f} s  cpu {cpu:6.2f} s"
                          f"{'  over ' + str(COLD_TARGET) + ' s' if wall > COLD_TARGET else ''}")
                for _ in range(args.runs):  # the last cold run filled this cache
                    wall, cpu = timed(argv, env)
                    failed |= wall > WARM_TARGET
                    print(f"{label:10} {command[0]:7} warm  wall {wall:6.2f} s  cpu {cpu:6.2f} s"
                          f"{'  over ' + str(WARM_TARGET) + ' s' if wall > WARM_TARGET else ''}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return failed


if __name__ == "__main__":
    sys.exit(main())
