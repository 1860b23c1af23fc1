"""llmcalc's workload model beside NVIDIA aiconfigurator on the published serving rows both express (issue 36).

aiconfigurator (Apache-2.0, https://github.com/ai-dynamo/aiconfigurator) predicts TTFT, TPOT and throughput from
measured kernel tables. It is an optional peer: install it in a separate venv (its dependencies are not llmcalc's),

    python3 -m venv ~/venv-aic && ~/venv-aic/bin/pip install aiconfigurator

and point this script at it with `--aic ~/venv-aic` (the venv, its `bin/aiconfigurator` or its `bin/python`) or
`LLMCALC_AIC`; without either, `aiconfigurator` on PATH. Absent, the script says so in one line and exits 0.

For every row of serving_validation.json both can express, this script runs `aiconfigurator cli estimate` (a
subprocess, one per configuration, with a timeout; a failing row is reported, not fatal), predicts the same row with
llmcalc's workload model (bench_serving_speed.predict_workload) and prints measured / llmcalc / aiconfigurator, and
the median |error| of each over the comparisons both make, by metric family. error = predicted speed / measured
speed - 1, speed being the throughput or 1 / the latency, one metric per row and family, as bench_serving_speed.py.

How a row becomes an aiconfigurator estimate:

- static batch of B (benchmark_latency, LMDeploy profile_generation, NeMo): `--estimate-mode static --bs B` (one
  batch prefilled together, then decoded; no in-flight batching). tokens/s = B x output / request latency.
- closed loop at C clients: `--estimate-mode agg --bs C` (in-flight batching in steady state with C requests).
- offline (every request at once) with fixed lengths (the random datasets): `--estimate-mode agg` at the largest
  `--bs` up to min(requests, the engine's max_num_seqs) that aiconfigurator neither calls OOM nor warns exceeds its
  KV cache (found by bisection): throughput and TPOT compared; TTFT and e2e under an all-at-once burst are queueing,
  which agg's steady state does not model, so they are not compared.
- offline rows over ShareGPT (lengths vary per request) are not expressed: `--isl/--osl` take one length each, and
  under an all-at-once burst the mix of lengths sets how many requests the KV cache holds.
- lengths are the row's (means for ShareGPT closed loops, rounded), TP is `--tp` (MoE layers as vLLM's default
  without expert parallelism: `--moe-tp-size` = TP, `--moe-ep-size 1`), weights as the checkpoint's config says unless
  the row names another dtype (MODELS), aiconfigurator's default ("current") table version per backend.

Cache: with `--save`, every answer is kept in peer_aiconfigurator_cache.json next to this script (keyed by
aiconfigurator's version and the exact arguments) and read back on later runs; never required (`--no-cache` ignores it).

    python benchmarks/peer_aiconfigurator.py [--aic PATH] [--save] [--only SUBSTRING] [--format json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_serving_speed as bss  # noqa: E402  (the sibling script: FAMILIES, predict_workload)

from llmcalc.errors import LlmcalcError  # noqa: E402
from llmcalc.spec import load_hardware, load_model  # noqa: E402

CACHE = HERE / "peer_aiconfigurator_cache.json"
PRESETS = HERE.parent / "presets" / "models"
INSTALL = "python3 -m venv ~/venv-aic && ~/venv-aic/bin/pip install aiconfigurator"

# llmcalc GPU preset -> aiconfigurator --system (aiconfigurator_core/systems/<system>.yaml; systems with tables in
# systems/data/). AMD and other GPUs have none.
SYSTEMS = {"a100-80gb-sxm": "a100_sxm", "a100-80gb-pcie": "a100_pcie", "h100-sxm": "h100_sxm",
           "h100-pcie": "h100_pcie", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200",
           "gb300": "gb300", "l40s": "l40s", "l4": "l4"}

# the row's engine -> aiconfigurator --backend (it has trtllm, vllm, sglang). LMDeploy's TurboMind (a C++ engine with
# its own fused kernels) has no backend there; TensorRT-LLM's tables are the nearest it has.
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "nemo-inference (TensorRT-LLM engine)": "trtllm",
            "lmdeploy": "trtllm"}

# (llmcalc model preset, the row's weight dtype or None for the checkpoint's own) -> (aiconfigurator --model, extra
# flags, where the id comes from). "preset": no config bundled with aiconfigurator 0.12.0; the preset's copy of the
# Hugging Face config.json (presets/models/<name>.json) is written to a temporary folder and passed as a local path,
# which `--model` accepts ("local path to directory containing config.json", its --help).
BUNDLED = "aiconfigurator_core/model_configs/{}_config.json"
MODELS: dict[tuple[str, str | None], tuple[str, tuple[str, ...], str]] = {
    ("qwen3-8b", None): ("Qwen/Qwen3-8B", (), BUNDLED.format("Qwen--Qwen3-8B")),
    ("qwen3-8b", "bf16"): ("Qwen/Qwen3-8B", (), BUNDLED.format("Qwen--Qwen3-8B")),
    # Qwen/Qwen3-8B-FP8 (the GPUStack row's checkpoint) is block-wise FP8 (128x128); no FP8 config is bundled
    ("qwen3-8b", "fp8"): ("Qwen/Qwen3-8B", ("--gemm-quant-mode", "fp8_block"), BUNDLED.format("Qwen--Qwen3-8B")),
    ("qwen3-32b", None): ("Qwen/Qwen3-32B", (), BUNDLED.format("Qwen--Qwen3-32B")),
    ("qwen3-32b", "bf16"): ("Qwen/Qwen3-32B", (), BUNDLED.format("Qwen--Qwen3-32B")),
    ("qwen3-32b", "fp8"): ("Qwen/Qwen3-32B-FP8", (), BUNDLED.format("Qwen--Qwen3-32B-FP8")),
    ("qwen3-235b-a22b", None): ("Qwen/Qwen3-235B-A22B", (), BUNDLED.format("Qwen--Qwen3-235B-A22B")),
    ("qwen3-235b-a22b", "bf16"): ("Qwen/Qwen3-235B-A22B", (), BUNDLED.format("Qwen--Qwen3-235B-A22B")),
    ("qwen3-235b-a22b", "fp8"): ("Qwen/Qwen3-235B-A22B-FP8", (), BUNDLED.format("Qwen--Qwen3-235B-A22B-FP8")),
    # DeepSeek-R1(-0528) rows use llmcalc's deepseek-v3 preset (same architecture); the checkpoint is block FP8
    ("deepseek-v3", None): ("deepseek-ai/DeepSeek-V3", (), BUNDLED.format("deepseek-ai--DeepSeek-V3")),
    ("deepseek-v3", "fp8"): ("deepseek-ai/DeepSeek-V3", (), BUNDLED.format("deepseek-ai--DeepSeek-V3")),
    ("gpt-oss-120b", None): ("openai/gpt-oss-120b", (), BUNDLED.format("openai--gpt-oss-120b")),
    ("gpt-oss-120b", "mxfp4"): ("openai/gpt-oss-120b", (), BUNDLED.format("openai--gpt-oss-120b")),
    ("gpt-oss-20b", None): ("openai/gpt-oss-20b", (), BUNDLED.format("openai--gpt-oss-20b")),
    ("gpt-oss-20b", "mxfp4"): ("openai/gpt-oss-20b", (), BUNDLED.format("openai--gpt-oss-20b")),
    ("llama-3.1-405b", "fp8"): ("meta-llama/Meta-Llama-3.1-405B", ("--gemm-quant-mode", "fp8"),
                                BUNDLED.format("meta-llama--Meta-Llama-3.1-405B")),
    **{(m, d): ("preset", (), f"presets/models/{m}.json") for m in ("llama-2-7b", "llama-2-13b", "llama-2-70b")
       for d in (None, "fp16", "bf16")},
}

# aiconfigurator's printed summary box (cli/main.py _run_estimate_mode): label -> (key, scale to SI)
BOX = {"TTFT": ("ttft", 1e-3), "TPOT": ("tpot", 1e-3), "Request Latency": ("latency", 1e-3),
       "tokens/s": ("output_tokens_per_second", 1.0), "seq/s": ("requests_per_second", 1.0),
       "Concurrency": ("concurrency", 1.0)}
BOX_LINE = re.compile(r"^\s*(TTFT|TPOT|Request Latency|tokens/s|seq/s|Concurrency):\s+([0-9][0-9,]*\.?[0-9]*)")
KV_WARNING = "exceeds estimated KV cache capacity"


def find_aic(option: str | None) -> list[str] | None:
    """The command that runs aiconfigurator's CLI, or None: `--aic`, else LLMCALC_AIC, else `aiconfigurator` on PATH.
    A venv folder, its bin/aiconfigurator, or a Python that has the package installed."""
    where = option or os.environ.get("LLMCALC_AIC") or shutil.which("aiconfigurator")
    if not where:
        return None
    path = Path(where).expanduser()
    if path.is_dir():
        for exe in (path / "bin" / "aiconfigurator", path / "Scripts" / "aiconfigurator.exe"):
            if exe.is_file():
                return [str(exe)]
        for py in (path / "bin" / "python", path / "Scripts" / "python.exe"):
            if py.is_file():
                return [str(py), "-m", "aiconfigurator.main"]
        return None
    if not path.is_file() and shutil.which(where):
        path = Path(shutil.which(where))  # type: ignore[arg-type]
    if not path.is_file():
        return None
    return [str(path), "-m", "aiconfigurator.main"] if path.name.startswith("python") else [str(path)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "NO_COLOR": "1"}


def aic_version(cmd: list[str], timeout: float) -> str | None:
    try:
        out = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=timeout, env=_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"aiconfigurator\s+(\S+)", out.stdout)
    return m.group(1) if out.returncode == 0 and m else None


class Aic:
    """aiconfigurator's `cli estimate` through a subprocess, answers cached by version and arguments."""

    def __init__(self, cmd: list[str], version: str, timeout: float, use_cache: bool, save: bool) -> None:
        self.cmd, self.version, self.timeout, self.save = cmd, version, timeout, save
        self.cache: dict[str, Any] = {}
        if use_cache and CACHE.exists():
            try:
                self.cache = json.loads(CACHE.read_text()).get(version, {})
            except (OSError, ValueError):
                self.cache = {}
        self.calls = 0

    def estimate(self, args: list[str], key_args: list[str]) -> dict[str, Any]:
        """{metric: value (SI)} plus 'kv_warning', or {'error': one line}. `key_args` names the model stably (a
        temporary config folder's path is not)."""
        key = " ".join(key_args)
        if key in self.cache:
            return self.cache[key]
        self.calls += 1
        argv = [*self.cmd, "cli", "estimate", "--log-level", "WARNING", "--no-color", *args]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, env=_env())
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {self.timeout:g} s"}  # not cached: a slow machine may manage later
        except OSError as exc:
            return {"error": f"could not run aiconfigurator: {exc}"}
        answer: dict[str, Any] = {}
        for line in out.stdout.splitlines():
            m = BOX_LINE.match(line)
            if m:
                name, scale = BOX[m.group(1)]
                answer[name] = float(m.group(2).replace(",", "")) * scale
        if out.returncode != 0 or "tpot" not in answer:
            lines = [ln.strip() for ln in (out.stderr + "\n" + out.stdout).splitlines() if ln.strip()]
            errs = [ln for ln in lines if re.match(r"^(\w+Error|Error|SystemExit)\b", ln) or "OOM" in ln]
            answer = {"error": (errs or lines or [f"exit status {out.returncode}"])[-1][:300]}
        else:
            answer["kv_warning"] = KV_WARNING in out.stdout + out.stderr
        self.cache[key] = answer
        return answer

    def write(self) -> None:
        if not self.save:
            return
        try:
            whole = json.loads(CACHE.read_text()) if CACHE.exists() else {}
        except (OSError, ValueError):
            whole = {}
        whole[self.version] = dict(sorted(self.cache.items()))
        CACHE.write_text(json.dumps(whole, indent=1, sort_keys=True) + "\n")


def _model_config(name: str, folder: Path) -> Path:
    """The preset's config.json (its `_` annotations dropped) in a folder of its own under `folder`."""
    cfg = {k: v for k, v in json.loads((PRESETS / f"{name}.json").read_text()).items() if not k.startswith("_")}
    out = folder / name
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def _varied_lengths(row: dict) -> bool:
    return "sharegpt" in (row["id"] + " " + row.get("notes", "") + " " + row.get("quote", "")).lower()


def express(row: dict, tmp: Path) -> tuple[dict[str, Any] | None, str]:
    """(how aiconfigurator runs the row, '') or (None, why it cannot)."""
    if not row.get("model"):
        return None, "no llmcalc preset for the model"
    if not row.get("n_gpus"):
        return None, "the source does not state the tensor-parallel degree"
    system = SYSTEMS.get(row["gpu"])
    if system is None:
        return None, f"aiconfigurator has no system for {row['gpu']}"
    backend = BACKENDS.get(row["engine"])
    if backend is None:
        return None, f"aiconfigurator has no backend for {row['engine']}"
    model = MODELS.get((row["model"], row.get("weight_dtype")))
    if model is None:
        return None, (f"no aiconfigurator model for {row['model']}"
                      + (f" in {row['weight_dtype']}" if row.get("weight_dtype") else ""))
    if row["mode"] == "rate":
        return None, "Poisson arrivals at a request rate: aiconfigurator's agg mode has no request-queue model"
    if row["mode"] == "offline" and _varied_lengths(row):
        return None, "offline over ShareGPT: lengths vary per request, aiconfigurator takes one --isl/--osl"
    ident, flags, _ = model
    path = str(_model_config(row["model"], tmp)) if ident == "preset" else ident
    key_model = f"llmcalc-preset:{row['model']}" if ident == "preset" else ident
    isl, osl = max(1, round(row["input_len"])), max(1, round(row["output_len"]))
    tp = row["n_gpus"]
    if row.get("pp", 1) > 1 or row.get("dp", 1) > 1:
        return None, "pipeline or data parallelism in the row (aiconfigurator's agg mode: one TP replica here)"
    moe = ("1", str(tp)) if row.get("enable_expert_parallel") else (str(tp), "1")  # (moe_tp, moe_ep)
    common = ["--system", system, "--backend", backend, "--isl", str(isl), "--osl", str(osl), "--tp", str(tp),
              "--moe-tp-size", moe[0], "--moe-ep-size", moe[1], *flags]
    if row["mode"] == "static":
        mode, bs = "static", row["batch"]
    elif row["mode"] == "closed":
        mode, bs = "agg", row["max_concurrency"]
    else:
        mode, bs = "agg", None  # found by bisection
    return {"model": path, "key_model": key_model, "common": common, "mode": mode, "bs": bs, "isl": isl,
            "osl": osl, "backend": backend, "system": system}, ""


def _max_num_seqs(row: dict) -> int:
    """The engine's max_num_seqs for the row's GPU and TP (llmcalc's engine defaults; vLLM's server defaults)."""
    from llmcalc.analytic.serving import plan_serving

    spec, gpu = load_model(row["model"]), load_hardware(row["gpu"])
    prompt, generate = max(1, round(row["input_len"])), max(1, round(row["output_len"]))
    est = plan_serving(spec, gpu, row["n_gpus"], max_model_len=max(prompt + generate, 2048))
    return row.get("max_num_seqs") or est.batch_defaults[1]


def run_aic(aic: Aic, how: dict[str, Any], row: dict) -> dict[str, Any]:
    def at(bs: int) -> dict[str, Any]:
        args = ["--model", how["model"], *how["common"], "--estimate-mode", how["mode"], "--bs", str(bs)]
        key = ["--model", how["key_model"], *how["common"], "--estimate-mode", how["mode"], "--bs", str(bs)]
        return aic.estimate(args, key)

    if how["bs"] is not None:
        out = at(how["bs"])
        return {**out, "bs": how["bs"]}
    cap = min(row.get("n_prompts") or 1000, _max_num_seqs(row))

    def ok(a: dict[str, Any]) -> bool:
        return "error" not in a and not a["kv_warning"]

    best = at(cap)
    if ok(best):
        return {**best, "bs": cap}
    first = at(1)
    if not ok(first):
        return {**first, "bs": 1} if "error" in first else {"error": "aiconfigurator: one request exceeds its KV cache"}
    lo, hi, best, best_bs = 1, cap, first, 1  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        a = at(mid)
        if ok(a):
            lo, best, best_bs = mid, a, mid
        else:
            hi = mid
    return {**best, "bs": best_bs}


def aic_metrics(a: dict[str, Any], row: dict, how: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """aiconfigurator's answer as the validation set's metric keys, and the keys it is not compared on (why)."""
    lat = a["latency"]
    out = {"output_tokens_per_second": a["output_tokens_per_second"], "requests_per_second": a["requests_per_second"],
           "total_tokens_per_second": a["requests_per_second"] * (how["isl"] + how["osl"]), "e2e_seconds_mean": lat}
    for k in ("ttft_seconds_mean", "ttft_seconds_median"):
        out[k] = a["ttft"]
    for k in ("tpot_seconds_mean", "tpot_seconds_median", "itl_seconds_median"):
        out[k] = a["tpot"]
    skipped = {}
    if row["mode"] == "offline":
        for k in ("ttft_seconds_mean", "ttft_seconds_median", "e2e_seconds_mean"):
            skipped[k] = "offline burst: queueing, which agg's steady state does not model"
    return out, skipped


def _error(meas: float, pred: float | None, latency: bool) -> float | None:
    if not pred or not math.isfinite(pred):
        return None
    return (meas / pred if latency else pred / meas) - 1.0


def compare(rows: list[dict], aic: Aic, tmp: Path, log: Any) -> tuple[list[dict], list[dict], list[dict]]:
    """(comparisons, rows not expressed (why), rows that failed (why))."""
    comps, unexpressed, failed = [], [], []
    for row in rows:
        how, why = express(row, tmp)
        if how is None:
            unexpressed.append({"id": row["id"], "reason": why})
            continue
        log(f"  {row['id']}\n")
        try:
            ours = bss.predict_workload(row)
        except LlmcalcError as exc:
            failed.append({"id": row["id"], "reason": "llmcalc: " + str(exc).split("\n")[0]})
            continue
        a = run_aic(aic, how, row)
        if "error" in a:
            failed.append({"id": row["id"], "reason": "aiconfigurator: " + a["error"]})
            continue
        theirs, skipped = aic_metrics(a, row, how)
        for fam, (keys, latency) in bss.FAMILIES.items():
            key = next((k for k in keys if k in row["metrics"]), None)
            if key is None:
                continue
            meas = row["metrics"][key]
            aic_value = None if key in skipped else theirs.get(key)
            comps.append({"id": row["id"], "family": fam, "metric": key, "mode": row["mode"],
                          "backend": how["backend"], "system": how["system"], "bs": a["bs"],
                          "kv_warning": a.get("kv_warning", False), "measured": meas,
                          "llmcalc": ours.get(key), "aiconfigurator": aic_value,
                          "llmcalc_error": _error(meas, ours.get(key), latency),
                          "aiconfigurator_error": _error(meas, aic_value, latency),
                          "aiconfigurator_skipped": skipped.get(key)})
    return comps, unexpressed, failed


def summary(comps: list[dict]) -> dict[str, dict[str, Any]]:
    """Median |error| (and mean signed) of both over the comparisons both make, by family and overall."""
    both = [c for c in comps if c["llmcalc_error"] is not None and c["aiconfigurator_error"] is not None]
    groups = {"all": both}
    for fam in bss.FAMILIES:
        groups[fam] = [c for c in both if c["family"] == fam]
    out = {}
    for g, cs in groups.items():
        if not cs:
            out[g] = {"n": 0, "rows": 0}
            continue
        out[g] = {"n": len(cs), "rows": len({c["id"] for c in cs})}
        for who in ("llmcalc", "aiconfigurator"):
            errs = [c[f"{who}_error"] for c in cs]
            out[g][who] = {"median_abs_error": statistics.median(abs(e) for e in errs),
                           "mean_signed_error": statistics.fmean(errs)}
    return out


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.4g}" if abs(x) < 1 else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aic", help="aiconfigurator: its venv, its executable or that venv's python (default: "
                                  "$LLMCALC_AIC, else `aiconfigurator` on PATH)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per aiconfigurator call (default 180)")
    ap.add_argument("--save", action="store_true", help=f"keep aiconfigurator's answers in {CACHE.name}")
    ap.add_argument("--no-cache", action="store_true", help=f"ignore {CACHE.name}")
    ap.add_argument("--only", help="rows whose id contains this")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    args = ap.parse_args(argv)
    cmd = find_aic(args.aic)
    version = aic_version(cmd, args.timeout) if cmd else None
    if not cmd or not version:
        print(f"aiconfigurator not found{f' at {args.aic}' if args.aic else ''} (--aic PATH or LLMCALC_AIC, else "
              f"`aiconfigurator` on PATH); skipped. Install it in a separate venv: {INSTALL}")
        return 0
    rows = json.loads(bss.DATA.read_text())["rows"]
    if args.only:
        rows = [r for r in rows if args.only in r["id"]]
    aic = Aic(cmd, version, args.timeout, use_cache=not args.no_cache, save=args.save)
    w = sys.stdout.write
    log = sys.stderr.write if args.format == "table" else (lambda s: None)
    log(f"aiconfigurator {version} ({' '.join(cmd)}); predicting {len(rows)} rows\n")
    with tempfile.TemporaryDirectory(prefix="llmcalc-aic-") as tmp:
        try:
            comps, unexpressed, failed = compare(rows, aic, Path(tmp), log)
        finally:
            aic.write()
    summ = summary(comps)
    if args.format == "json":
        json.dump({"aiconfigurator": version, "summary": summ, "comparisons": comps, "not_expressed": unexpressed,
                   "failed": failed}, sys.stdout, indent=1)
        print()
        return 0
    n_rows = len({c["id"] for c in comps if c["aiconfigurator_error"] is not None})
    w(f"aiconfigurator {version} beside llmcalc's workload model: {len(rows)} rows, {n_rows} expressed by both "
      f"({aic.calls} aiconfigurator calls this run). error = predicted speed / measured speed - 1 (+ = faster than "
      "measured).\n\n")
    w(f"{'row':48} {'family':10} {'aic run':>16} {'measured':>10} {'llmcalc':>10} {'aic':>10} {'llmcalc err':>11} "
      f"{'aic err':>9}\n")
    for c in comps:
        run = f"{c['backend']} {'static' if c['mode'] == 'static' else 'agg'} bs{c['bs']}"
        w(f"{c['id'][:48]:48} {c['family']:10} {run:>16} {_num(c['measured']):>10} {_num(c['llmcalc']):>10} "
          f"{_num(c['aiconfigurator']):>10} {_pct(c['llmcalc_error']):>11} {_pct(c['aiconfigurator_error']):>9}\n")
    w("\nmedian |error| (mean signed error) over the comparisons both make\n")
    w(f"{'family':12} {'n':>4} {'rows':>5} {'llmcalc':>22} {'aiconfigurator':>22}\n")
    for g, s in summ.items():
        if not s["n"]:
            continue
        cells = [f"{s[x]['median_abs_error'] * 100:.1f} % ({_pct(s[x]['mean_signed_error'])})"
                 for x in ("llmcalc", "aiconfigurator")]
        w(f"{g:12} {s['n']:>4} {s['rows']:>5} {cells[0]:>22} {cells[1]:>22}\n")
    skipped = sorted({c["aiconfigurator_skipped"] for c in comps if c["aiconfigurator_skipped"]})
    if skipped:
        w("aiconfigurator not compared on: " + "; ".join(skipped) + "\n")
    w(f"\nnot expressed by both ({len(unexpressed)} rows):\n")
    for u in unexpressed:
        w(f"  {u['id']}: {u['reason']}\n")
    if failed:
        w(f"failed ({len(failed)} rows):\n")
        for f in failed:
            w(f"  {f['id']}: {f['reason']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
