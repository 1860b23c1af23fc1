"""CPU time of each analytic command in a fresh process, as a user's shell runs it (issue 24).

Run on demand:  python benchmarks/bench_cli.py [--runs 15] [--baseline DIR] [--only params]

Each call is a new `python -m llmcalc ...` process; its CPU time (user + system, from the kernel's
accounting of the child: on a loaded machine the figure that does not depend on the neighbours as
wall time does) is reported as the median of `--runs` calls, twice over:

- with bytecode: llmcalc's modules compiled first (what an installed package has);
- without bytecode: llmcalc's __pycache__ folders removed and PYTHONDONTWRITEBYTECODE=1 (-B), so every
  one of its modules is compiled from source in every call (a source checkout with bytecode writes
  turned off; the standard library and the dependencies keep their own bytecode), and so is every record's
  __init__ (LLMCALC_CACHE_DIR an empty folder: llmcalc.records keeps them there as bytecode is kept).

Targets (bytecode present): `params llama-3-8b` <= 0.10 s, every other analytic command <= 0.12 s, but `infer` and
`serve --input-len --output-len`, which simulate the engine's steps, <= 0.3 s (issue 36), closed loops, offline
runs and bursts alike.
`layout` is shown but not held to them: its search is work, not start-up. The floor rows come first: the
interpreter alone (`python -c pass`), `import click`, and `import llmcalc.cli` (the group, before any command's
module); a command's figure less the last of them is what the command itself imports and does.

"This" is the checkout the script lives in (its root goes first on the children's PYTHONPATH, so an editable
install of another checkout is not what is timed). --baseline DIR runs the same calls against another checkout
(e.g. `git archive main | tar -x -C DIR`) through PYTHONPATH, interleaved call by call with this one, so that
both see the same load.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

THIS = str(Path(__file__).resolve().parents[1])  # this checkout's root
PARAMS_TARGET = 0.10
TARGET = 0.12
WORKLOAD_TARGET = 0.3
COMMANDS: list[tuple[list[str], float | None]] = [
    (["params", "llama-3-8b"], PARAMS_TARGET),
    (["params", "deepseek-v3", "--format", "json"], TARGET),
    (["presets"], TARGET),
    (["flops", "llama-3-8b"], TARGET),
    (["flops", "mixtral-8x7b", "--format", "markdown"], TARGET),
    (["train", "llama-3-8b", "--tokens", "15T", "--gpu", "h100-sxm", "--n-gpus", "1024", "--mfu", "0.4"], TARGET),
    (["train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", "64", "--global-batch", "512",
      "--tp", "2"], TARGET),
    (["plan", "--compute", "1e24"], TARGET),
    (["memory", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", "64", "--zero", "3", "--tp", "8"], TARGET),
    # infer and serve's workload mode simulate the engine's steps (analytic/serving_speed.py): issue 36's 0.3 s
    (["infer", "llama-3-8b", "--gpu", "h100-sxm", "--prompt", "2k", "--generate", "256", "--batch-size", "8"],
     WORKLOAD_TARGET),
    (["serve", "llama-3-8b", "--gpu", "h100-sxm", "--input-len", "1k", "--output-len", "1k", "--max-concurrency",
      "64"], WORKLOAD_TARGET),
    (["serve", "llama-3-8b", "--gpu", "h100-sxm", "--input-len", "1k", "--output-len", "1k", "--max-concurrency",
      "64", "--engine", "trtllm"], WORKLOAD_TARGET),  # another engine's tables (analytic/engines.py)
    # offline (every request at once, as many running as the KV cache admits) and a burst (arrivals faster than the
    # replica serves them, a queue building): hundreds of requests in flight, each its own group (issue 36)
    (["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "1000", "--output-len", "1000"], WORKLOAD_TARGET),
    (["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "128", "--output-len", "2048"], WORKLOAD_TARGET),
    (["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--n-gpus", "1", "--weight-dtype", "fp8", "--input-len", "1000",
      "--output-len", "1000", "--engine", "trtllm"], WORKLOAD_TARGET),
    (["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "1000", "--output-len", "1000", "--request-rate",
      "50"], WORKLOAD_TARGET),
    (["serve", "qwen2.5-7b", "--gpu", "h100-sxm", "--max-model-len", "3072"], TARGET),
    (["compare", "llama-3-8b", "mixtral-8x7b", "--format", "json"], TARGET),
    (["--version"], TARGET),
    (["--help"], TARGET),
    (["layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", "16", "--global-batch", "64"], None),
]


def package_dir(pythonpath: str | None) -> Path:
    """The llmcalc package a child with this PYTHONPATH imports (found without importing it)."""
    if pythonpath:
        return Path(pythonpath) / "llmcalc"
    spec = importlib.util.find_spec("llmcalc")
    assert spec is not None and spec.origin, "llmcalc is not importable: pip install -e ."
    return Path(spec.origin).parent


def set_bytecode(package: Path, present: bool) -> None:
    for cache in package.rglob("__pycache__"):
        shutil.rmtree(cache)
    if present:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True,
                       stdout=subprocess.DEVNULL)


# The floor under every command: the interpreter alone, click, and the CLI's own modules before any command runs.
FLOOR = [("python -c pass", ["-c", "pass"]), ("python -c 'import click'", ["-c", "import click"]),
         ("python -c 'import llmcalc.cli'", ["-c", "import llmcalc.cli"])]


def cpu_seconds(argv: list[str], env: dict[str, str], cwd: str, python_args: list[str] | None = None) -> float:
    """User + system CPU seconds of one `python -m llmcalc ARGV` child (or `python PYTHON_ARGS`), started in `cwd`
    (an empty folder: `-m` puts the working folder first on sys.path, before PYTHONPATH)."""
    args = python_args if python_args is not None else ["-m", "llmcalc", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"python {' '.join(args)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def environments(baseline: str | None, bytecode: bool) -> dict[str, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["LLMCALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-cli-")  # empty, and not written to
    envs = {"this": {**env, "PYTHONPATH": THIS}}
    if baseline:
        envs["baseline"] = {**env, "PYTHONPATH": baseline}
    return envs


def measure(commands: list[tuple[list[str], float | None]], runs: int, baseline: str | None,
            bytecode: bool, floor: bool = True) -> bool:
    """Print the medians; True when every targeted command of this checkout meets its target."""
    envs = environments(baseline, bytecode)
    for name in envs:
        set_bytecode(package_dir(envs[name].get("PYTHONPATH")), bytecode)
    print(f"\n{'with' if bytecode else 'without'} bytecode: CPU seconds (user + system) per call, median of {runs}")
    print(f"{'command':62s} " + " ".join(f"{name:>9s}" for name in envs) + "  target")
    ok = True

    def medians_of(argv: list[str], python_args: list[str] | None = None) -> dict[str, float]:
        times: dict[str, list[float]] = {name: [] for name in envs}
        with tempfile.TemporaryDirectory() as cwd:
            for _ in range(runs):
                for name, env in envs.items():  # interleaved: both see the same neighbours
                    times[name].append(cpu_seconds(argv, env, cwd, python_args))
        return {name: statistics.median(t) for name, t in times.items()}

    if floor:
        for label, python_args in FLOOR:
            print(f"{label:62s} " + " ".join(f"{m:9.3f}" for m in medians_of([], python_args).values())
                  + "  (floor)")
    for argv, target in commands:
        medians = medians_of(argv)
        verdict = "" if target is None else ("  ok" if medians["this"] <= target else "  OVER")
        ok &= target is None or medians["this"] <= target
        label = " ".join(argv)
        label = label if len(label) <= 62 else label[:59] + "..."
        print(f"{label:62s} " + " ".join(f"{m:9.3f}" for m in medians.values())
              + (f"  {target:.2f}{verdict}" if target is not None else "  (search: not a start-up figure)"))
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--baseline", help="another checkout's root, run through PYTHONPATH beside this one")
    parser.add_argument("--only", help="only the commands whose line contains this text")
    parser.add_argument("--no-source", action="store_true", help="skip the runs without bytecode")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor rows (python, click, llmcalc.cli)")
    args = parser.parse_args()
    commands = [(a, t) for a, t in COMMANDS if not args.only or args.only in " ".join(a)]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs before the runs")
    ok = measure(commands, args.runs, args.baseline, bytecode=True, floor=not args.no_floor)
    if not args.no_source:
        measure(commands, args.runs, args.baseline, bytecode=False, floor=not args.no_floor)
        for env in environments(args.baseline, True).values():  # leave bytecode in place, as pip would
            set_bytecode(package_dir(env.get("PYTHONPATH")), True)
    print(f"load average {os.getloadavg()[0]:.2f} after the runs")
    print("every targeted command within its target (with bytecode)" if ok else "SOME COMMANDS OVER THEIR TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
