"""Layout-search speed (issue 24): layouts evaluated per second by `layout` on five cases, and whether the fast
search returns the exact search's best layouts.

    python benchmarks/bench_layout.py             # layouts/s per case (median of --repeat runs, CPU time)
    python benchmarks/bench_layout.py --repeat 5

Cases: llama-3-8b on 64 and 1,024 H100, llama-3.1-405b on 16,384, mixtral-8x7b on 64, deepseek-v3 on 2,048
(seq 4,096 or 8,192, global batches as below). Layouts/s = layouts searched / CPU seconds of `rank_layouts`
(process time: the machine's other load does not count, but its cache pressure does; compare runs made the same
way).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmcalc.analytic import steptime  # noqa: E402
from llmcalc.spec import load_model  # noqa: E402

CASES = [("llama-3-8b", 64, 8192, 512), ("llama-3-8b", 1024, 8192, 2048), ("llama-3.1-405b", 16384, 8192, 2048),
         ("mixtral-8x7b", 64, 4096, 256), ("deepseek-v3", 2048, 4096, 4096)]


def measure(model: str, n: int, seq: int, batch: int, repeat: int = 3) -> tuple[float, int, list]:
    spec = load_model(model)
    times, search = [], None
    for _ in range(repeat):
        steptime.clear_caches()
        t = time.process_time()
        search = steptime.rank_layouts(spec, "h100-sxm", n, seq, global_batch=batch)
        times.append(time.process_time() - t)
    assert search is not None
    return statistics.median(times), search.counts["searched"], search.ranked


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    print("| case | layouts searched | CPU s | layouts/s | best layout |")
    print("|---|---:|---:|---:|---|")
    for model, n, seq, batch in CASES:
        seconds, searched, ranked = measure(model, n, seq, batch, repeat)
        best = ranked[0][0]
        print(f"| {model} on {n:,} H100, seq {seq}, batch {batch} | {searched} | {seconds:.3f} | "
              f"{searched / seconds:,.0f} | {steptime._describe(best.layout, best.recompute)} |")


if __name__ == "__main__":
    main()
