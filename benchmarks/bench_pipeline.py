"""Pipeline simulator cost (issue 24) on the stage-time vectors the layout search really produces.

    python benchmarks/bench_pipeline.py            # per call: simulate_pair cold and warm, path_bounds
    python benchmarks/bench_pipeline.py --exact    # also: how many layouts the exact search simulates
    python benchmarks/bench_pipeline.py --repeat 9

For each of bench_layout.py's five cases the fast search (`rank_layouts`) is run once with steptime's
`simulate_pair` and `path_bounds` wrapped to record their arguments; each recorded call is then timed again on its
own: simulate_pair cold (its compiled action program built: `pipeline._static_program`'s cache cleared first, as
in a fresh `llmcalc layout`) and warm (the program cached, as in a search that meets the same shape again), and
path_bounds over all the case's layouts. Times are CPU seconds per call (process time, the best of --repeat
rounds: the machine's other load does not count, its cache pressure does); "simulated" is how many layouts the
search simulates (the others get their exact closed form or a bound that cannot win).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_layout import CASES  # noqa: E402

from llmcalc.analytic import pipeline  # noqa: E402
from llmcalc.analytic.step import cache, prediction, search  # noqa: E402
from llmcalc.spec import load_model  # noqa: E402


def record(model: str, n: int, seq: int, batch: int, top: int | None = None) -> tuple[list, list]:
    """The (args, kwargs) of every simulate_pair and path_bounds call of one search (top=None: the fast search)."""
    sims: list = []
    bounds: list = []
    real_sim, real_bounds = prediction.simulate_pair, prediction.path_bounds

    def sim(*args, **kwargs):
        sims.append((args, kwargs))
        return real_sim(*args, **kwargs)

    def bound(*args, **kwargs):
        bounds.append((args, kwargs))
        return real_bounds(*args, **kwargs)

    prediction.simulate_pair, prediction.path_bounds = sim, bound  # type: ignore[assignment]
    try:
        cache.clear_caches()
        spec = load_model(model)
        if top is None:
            search.rank_layouts(spec, "h100-sxm", n, seq, global_batch=batch)
        else:
            search.search_layouts(spec, "h100-sxm", n, seq, global_batch=batch, top=top)
    finally:
        prediction.simulate_pair, prediction.path_bounds = real_sim, real_bounds  # type: ignore[assignment]
    return sims, bounds


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        run()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 5
    exact = "--exact" in sys.argv
    print("| case | layouts bounded | simulated | simulate_pair cold, ms/call | warm, ms/call | path_bounds, us/call |"
          + (" simulated by the exact search |" if exact else ""))
    print("|---|---:|---:|---:|---:|---:|" + ("---:|" if exact else ""))
    for model, n, seq, batch in CASES:
        sims, bounds = record(model, n, seq, batch)

        def simulate(cold: bool, calls=sims) -> None:
            for args, kwargs in calls:
                if cold:
                    pipeline._static_program.cache_clear()
                    pipeline._chunk_order.cache_clear()
                pipeline.simulate_pair(*args, **kwargs)

        def bound_all(calls=bounds) -> None:
            for args, kwargs in calls:
                pipeline.path_bounds(*args, **kwargs)

        per_call = [f"{best_of(repeat, lambda c=c: simulate(c)) / len(sims) * 1e3:.2f}" if sims else "-"
                    for c in (True, False)]
        per_bound = best_of(repeat, bound_all) / len(bounds)
        row = (f"| {model} on {n:,} H100, seq {seq}, batch {batch} | {len(bounds)} | {len(sims)} | "
               f"{per_call[0]} | {per_call[1]} | {per_bound * 1e6:.1f} |")
        if exact:
            row += f" {len(record(model, n, seq, batch, top=10 ** 9)[0])} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
