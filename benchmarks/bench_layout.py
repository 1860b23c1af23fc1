"""Layout-search speed (issue 24): layouts evaluated per second by `layout` on five cases, and whether the fast
search returns the exact search's best layouts.

    python benchmarks/bench_layout.py             # layouts/s per case (median of --repeat runs, CPU time)
    python benchmarks/bench_layout.py --repeat 5
    python benchmarks/bench_layout.py --exact     # also: the exact search's ten best (every layout simulated)

Cases: llama-3-8b on 64 and 1,024 H100, llama-3.1-405b on 16,384, mixtral-8x7b on 64, deepseek-v3 on 2,048
(seq 4,096 or 8,192, global batches as below). Layouts/s = layouts searched / CPU seconds of `rank_layouts`
(process time: the machine's other load does not count, but its cache pressure does; compare runs made the same
way); "evaluated" is how many of them the pruned search evaluated (fit + oom; the rest are bounded: their floor
cannot beat the tenth best). With --exact, each case is searched once more with every layout evaluated and its
pipeline simulated (search_layouts with top = all, the exact search) and the table says whether its ten best
layouts, in order and with their step times, are the fast search's.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmcalc.analytic.step import cache, layout  # noqa: E402
from llmcalc.analytic.step import search as step_search  # noqa: E402
from llmcalc.spec import load_model  # noqa: E402

CASES = [("llama-3-8b", 64, 8192, 512), ("llama-3-8b", 1024, 8192, 2048), ("llama-3.1-405b", 16384, 8192, 2048),
         ("mixtral-8x7b", 64, 4096, 256), ("deepseek-v3", 2048, 4096, 4096)]


def measure(model: str, n: int, seq: int, batch: int, repeat: int = 3) -> tuple[float, dict, list]:
    spec = load_model(model)
    times, search = [], None
    for _ in range(repeat):
        cache.clear_caches()
        t = time.process_time()
        search = step_search.rank_layouts(spec, "h100-sxm", n, seq, global_batch=batch)
        times.append(time.process_time() - t)
    assert search is not None
    return statistics.median(times), search.counts, search.ranked


def same_as_exact(model: str, n: int, seq: int, batch: int, ranked: list) -> bool:
    """Whether the exact search (every pipeline simulated) has the fast search's ten best, in order, with the same
    step times."""
    exact, _, _ = step_search.search_layouts(load_model(model), "h100-sxm", n, seq, global_batch=batch, top=10 ** 9,
                                          exhaustive=True)
    key = lambda pm: (layout._describe(pm[0].layout, pm[0].recompute), pm[0].step_seconds)  # noqa: E731
    return [key(pm) for pm in exact[:10]] == [key(pm) for pm in ranked[:10]]


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    exact = "--exact" in sys.argv
    print("| case | layouts searched | evaluated | CPU s | layouts/s | best layout |"
          + (" ten best as the exact search's |" if exact else ""))
    print("|---|---:|---:|---:|---:|---|" + ("---|" if exact else ""))
    for model, n, seq, batch in CASES:
        seconds, counts, ranked = measure(model, n, seq, batch, repeat)
        searched = counts["searched"]
        best = ranked[0][0]
        print(f"| {model} on {n:,} H100, seq {seq}, batch {batch} | {searched} | {counts['fit'] + counts['oom']} | "
              f"{seconds:.3f} | "
              f"{searched / seconds:,.0f} | {layout._describe(best.layout, best.recompute)} |"
              + (f" {'yes' if same_as_exact(model, n, seq, batch, ranked) else 'NO'} |" if exact else ""))


if __name__ == "__main__":
    main()
