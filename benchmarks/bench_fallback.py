"""Time of the transformers fallback (a model_type with no llmcalc formula), fresh process per call.

Run on demand:  python benchmarks/bench_fallback.py [--runs 3]
Cold: an empty cache (torch and transformers imported, the model built); warm: the cached answer.
Targets (wall, an idle machine; the child's CPU time is printed beside it, the figure that does not
depend on neighbours): a cold call under 15 s, importing torch and transformers being most of it,
for the tiny and the 70B-class config alike (fake tensors); a warm call under 0.5 s, like the
analytic commands.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench_cli import time_commands

TINY = {"model_type": "codegen", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 1000}
# CodeGen at 70B-class width: 80 layers, D 8192 (no weights, no memory)
LARGE = {"model_type": "codegen", "n_layer": 80, "n_embd": 8192, "n_head": 64, "rotary_dim": 64, "vocab_size": 51200}
COLD_TARGET, WARM_TARGET = 15.0, 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, config in (("tiny", TINY), ("70b-class", LARGE)):
            path = Path(tmp) / f"{label}.json"
            path.write_text(json.dumps(config))
            for command in (["params", str(path)], ["flops", str(path), "--seq-len", "4096"]):
                print(f"{label}, cold (empty cache):")
                for _ in range(runs):
                    os.environ["LLMCALC_CACHE_DIR"] = tempfile.mkdtemp(dir=tmp)
                    failed |= time_commands([command], 1, COLD_TARGET)
                print(f"{label}, warm (cached):")  # the last cold run filled this cache
                failed |= time_commands([command], runs, WARM_TARGET)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return failed


if __name__ == "__main__":
    sys.exit(main())
