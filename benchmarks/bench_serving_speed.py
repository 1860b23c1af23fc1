"""llmcalc's serving-speed figures against published serving benchmarks (issue 36's validation set).

`serving_validation.json` holds published measurements, each quoting its source (docs/serving-validation.md lists
the sources and the rules). This script predicts every row with llmcalc's current Python API, the roofline that
`llmcalc infer` (under "roofline") and `llmcalc serve` print, and reports how far it lands:

- static batch (`batch` B): ``plan_inference`` at batch B, the row's prompt and generation, the row's TP degree, as
  `llmcalc infer` runs it: TTFT = the prefill, TPOT/ITL = decode_seconds_per_token, output tokens/s =
  tokens_per_second (prefill included), e2e = total_seconds.
- closed loop at concurrency C (`max_concurrency`): the same at batch C, the nearest equivalent `infer` has (a
  closed loop keeps about C requests in flight, but staggered: some prefill while others decode; the static batch
  prefills them all together).
- offline (`max_concurrency` null, all requests at once): `llmcalc serve`'s throughput table (``plan_serving`` with
  max_model_len = prompt + generation) at its largest concurrency level, capped at the benchmark's request count;
  TTFT is not predicted there (under an all-at-once burst it is queueing, which neither command models).
- request rate (`mode` "rate", `request_rate` R per second, Poisson arrivals as `vllm bench serve --request-rate R`):
  the offline figures with the throughput capped at R x generation (requests cannot finish faster than they
  arrive); TTFT and e2e of one request alone (``plan_inference`` at batch 1) where the roofline keeps up with R,
  else not compared (queueing, as offline). Its own regime, "rate".

Errors are in speed terms, so they read alike for throughputs and latencies: error = predicted speed / measured
speed - 1, speed being the throughput, or 1 / the latency. Positive = llmcalc says faster than measured (a roofline
is an upper bound, so positive is expected). One comparison per row and metric family (throughput: output tokens/s,
else total tokens/s, else requests/s; TTFT: median, else mean; TPOT: TPOT median, else TPOT mean, else ITL median;
e2e: mean); tail percentiles (p99) are not compared.

Baseline: a constant fraction of the roofline per family, fitted leave-one-source-out: for each source, the median
of measured speed / roofline speed over every other source's comparisons of that family, applied to the held-out
source's roofline.

The workload model (`serve --input-len --output-len`, analytic/serving_speed.py) predicts every row too
(``predict_workload``): a static batch of B as B requests at once through LLM.generate (`llmcalc infer`'s prediction,
analytic/static_batch.py), a closed loop as its clients, offline as every request at once, a request rate as Poisson
arrivals (`serve --request-rate`), each as the row's engine runs it where llmcalc models that engine (`--engine
vllm|trtllm|sglang`, analytic/engines.py; LMDeploy's and NeMo's TensorRT engines as vLLM), at the row's `pp`, `dp`,
`enable_expert_parallel`, `max_num_seqs` and `max_num_batched_tokens` where it states them; its error is reported
beside the roofline's and the baseline's. Where the roofline leaves a metric to queueing (an offline burst's TTFT
and e2e, a request rate's beyond the roofline), the workload model, which simulates the queue, is compared on it
apart: the "queueing (burst/overloaded TTFT, e2e)" group, printed with the overall figure both as before (those
comparisons left out, the figure every earlier run printed) and with them; `--format json` adds "queueing" (that
summary) and "queueing_comparisons" to its keys. Its four fitted constants (serving_speed.ENGINE_STEP_SECONDS,
LAYER_FLOOR_SECONDS, TP_SYNC_SECONDS, REQUEST_SECONDS) come from `--fit`: a grid over the four, the best median
|error| over all rows, then the same fit without each source in turn and that source's rows predicted
(leave-one-source-out; about 2 minutes).

    python benchmarks/bench_serving_speed.py [--format json] [--rows] [--fit [--grid local]] [--ttft]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from llmcalc.analytic import engine_versions, engines, serving_speed
from llmcalc.analytic.inference import plan_inference
from llmcalc.analytic.quant import weight_format
from llmcalc.analytic.request_lengths import sharegpt_lengths
from llmcalc.analytic.serving import plan_serving
from llmcalc.analytic.serving_speed import Workload, plan_workload
from llmcalc.analytic.vllm import vllm_version
from llmcalc.errors import LlmcalcError
from llmcalc.spec import load_hardware, load_model

DATA = Path(__file__).resolve().parent / "serving_validation.json"

FAMILIES = {  # family -> (metric keys in order of preference, is a latency)
    "throughput": (("output_tokens_per_second", "total_tokens_per_second", "requests_per_second"), False),
    "ttft": (("ttft_seconds_median", "ttft_seconds_mean"), True),
    "tpot": (("tpot_seconds_median", "tpot_seconds_mean", "itl_seconds_median"), True),
    "e2e": (("e2e_seconds_mean",), True),
}
UNCOMPARED = ("ttft_seconds_p99",)  # tail percentiles: a roofline has no tail
# the roofline's reason for leaving a burst's or an overloaded rate's TTFT and e2e out; the workload model simulates
# the queue, so it is compared there on its own (``compare(rows, queued)``, the "queueing" group)
QUEUEING = ("offline burst or arrivals beyond the roofline: queueing, which the roofline does not model (the workload "
            "model's figures: the queueing group)")


def regime(row: dict) -> str:
    if row["mode"] == "rate":  # Poisson arrivals at a finite request rate: a regime of its own
        return "rate"
    if row["mode"] == "offline":
        return ">64/offline"
    c = row["batch"] or row["max_concurrency"]
    return "1-8" if c <= 8 else "9-64" if c <= 64 else ">64/offline"


def load_row_model(row: dict):
    """The row's model: its `config` (a config.json shipped under benchmarks/, for a checkpoint no preset holds, e.g.
    Meta's FP8 Llama 3.1 405B quantized per module) where it names one, else its preset `model`."""
    if row.get("config"):
        return load_model(str(DATA.parent / row["config"]))
    if not row.get("model"):
        raise LlmcalcError(row.get("model_note") or "no llmcalc preset for the model")
    return load_model(row["model"])


def _weight_dtype(spec, row: dict) -> str | None:
    """The row's weight dtype, typed only where it differs from what the preset's checkpoint ships."""
    wd = row.get("weight_dtype")
    return None if wd is None or wd == weight_format(spec).name else wd


def predict(row: dict) -> tuple[dict[str, float], dict[str, str]]:
    """(roofline metric -> value, metric -> why it is not predicted) for one row; raises LlmcalcError when the row
    cannot be expressed at all."""
    if not row.get("n_gpus"):
        raise LlmcalcError("the source does not state the tensor-parallel degree")
    spec, gpu = load_row_model(row), load_hardware(row["gpu"])
    prompt, generate = max(1, round(row["input_len"])), max(2, round(row["output_len"]))
    dtypes = dict(weight_dtype=_weight_dtype(spec, row), kv_dtype=row.get("kv_dtype"))
    skipped = {k: "tail percentile" for k in UNCOMPARED if k in row["metrics"]}
    if row["mode"] in ("static", "closed"):
        b = row["batch"] or row["max_concurrency"]
        est = plan_inference(spec, gpu, b, prompt, generate, n_gpus=row["n_gpus"], **dtypes)
        total = est.total_seconds
        out = {"output_tokens_per_second": est.tokens_per_second,
               "total_tokens_per_second": b * (prompt + generate) / total, "requests_per_second": b / total,
               "e2e_seconds_mean": total}
        for k in ("ttft_seconds_median", "ttft_seconds_mean"):
            out[k] = est.prefill.seconds
        for k in ("tpot_seconds_median", "tpot_seconds_mean", "itl_seconds_median"):
            out[k] = est.decode_seconds_per_token
        return out, skipped
    est = plan_serving(spec, gpu, row["n_gpus"], max_model_len=prompt + generate, **dtypes)
    levels = est.throughput()
    if not levels:
        raise LlmcalcError("serve holds no request of this length")
    cap = row.get("n_prompts") or math.inf
    level = max((lv for lv in levels if lv["concurrency"] <= cap), key=lambda lv: lv["concurrency"], default=levels[0])
    tps = level["tokens_per_second"]
    saturated = row["mode"] != "rate" or tps < row["request_rate"] * generate  # arrivals outrun the roofline
    if row["mode"] == "rate":  # requests cannot finish faster than they arrive
        tps = min(tps, row["request_rate"] * generate)
    out = {"output_tokens_per_second": tps, "total_tokens_per_second": tps * (prompt + generate) / generate,
           "requests_per_second": tps / generate}
    for k in ("tpot_seconds_median", "tpot_seconds_mean", "itl_seconds_median"):
        out[k] = level["decode_seconds_per_token"]
    if not saturated:  # arrivals the roofline keeps up with: its TTFT and e2e are one request's, unloaded
        one = plan_inference(spec, gpu, 1, prompt, generate, n_gpus=row["n_gpus"], **dtypes)
        out.update(ttft_seconds_median=one.prefill.seconds, ttft_seconds_mean=one.prefill.seconds,
                   e2e_seconds_mean=one.total_seconds)
        return out, skipped
    for k in ("ttft_seconds_median", "ttft_seconds_mean", "e2e_seconds_mean"):
        if k in row["metrics"]:
            skipped[k] = QUEUEING
    return out, skipped


def predict_workload(row: dict) -> dict[str, float]:
    """The workload model's figures (`serve --input-len --output-len [--max-concurrency]`, analytic/serving_speed.py)
    for one row: a static batch of B is B requests sent at once; a closed loop at C, C clients; offline, every
    request at once."""
    spec, gpu = load_row_model(row), load_hardware(row["gpu"])
    prompt, generate = max(1, round(row["input_len"])), max(1, round(row["output_len"]))
    dtypes = dict(weight_dtype=_weight_dtype(spec, row), kv_dtype=row.get("kv_dtype"))
    layout = dict(pp=row.get("pp", 1), dp=row.get("dp", 1), expert_parallel=row.get("enable_expert_parallel", False),
                  max_num_seqs=row.get("max_num_seqs"), max_num_batched_tokens=row.get("max_num_batched_tokens"))
    # a vLLM row run on the V0 engine (a release before 0.8.0): V0's scheduler and memory accounting; V1 rows as the
    # current release (llmcalc's accounting for 0.9-0.10 leaves gpt-oss-120b no KV cache on one H100, which GPUStack
    # ran under 0.10.2)
    stated = row.get("engine_version") if row["engine"] == "vllm" else None
    version = stated if stated and vllm_version(stated).engine == "v0" else None
    engine = row["engine"] if row["engine"] in serving_speed.ENGINES else "vllm"
    est = plan_serving(spec, gpu, row["n_gpus"], max_model_len=row.get("max_model_len") or max(prompt + generate, 2048),
                       version=version, gpu_memory_utilization=row.get("gpu_memory_utilization"), **dtypes, **layout)
    kv = None if dtypes["kv_dtype"] else engine_versions.default_kv_dtype(engine, est.weights)
    if kv:  # TensorRT-LLM's FP8 KV cache for FP8 / NVFP4 weights, as `serve --engine trtllm` plans it
        est = plan_serving(spec, gpu, row["n_gpus"], max_model_len=est.max_model_len, version=version,
                           gpu_memory_utilization=row.get("gpu_memory_utilization"),
                           **{**dtypes, "kv_dtype": kv}, **layout)
    intake = chat_intake(row, spec)
    lengths = None
    if row.get("dataset") == "ShareGPT":  # the source's mean lengths, drawn as vllm bench's ShareGPT sample
        lengths = sharegpt_lengths(row["input_len"], row["output_len"], row.get("n_prompts") or 1000)
    if row["mode"] == "static":
        work = Workload(prompt, generate, num_prompts=row["batch"], served=False)
    elif row["mode"] == "closed":
        work = Workload(prompt, generate, max_concurrency=row["max_concurrency"],
                        num_prompts=row.get("n_prompts") or 1000, lengths=lengths, intake_seconds=intake)
    elif row["mode"] == "rate":  # `vllm bench serve --request-rate R`: Poisson arrivals
        work = Workload(prompt, generate, request_rate=row["request_rate"], num_prompts=row.get("n_prompts") or 1000,
                        lengths=lengths, intake_seconds=intake)
    else:  # `vllm bench serve` at rate inf, or benchmark_throughput.py's LLM.generate (served: false)
        work = Workload(prompt, generate, num_prompts=row.get("n_prompts") or 1000, lengths=lengths,
                        served=row.get("served", True), intake_seconds=intake)
    # the row's engine where llmcalc models it (engines.py), else vLLM's (LMDeploy, NeMo's TensorRT engines), at the
    # release the row states (`serve --engine-version`, engine_versions.py)
    # LMDeploy's TurboMind samples the first token in a decode step (engines.POLICIES["turbomind"])
    policy = engines.POLICIES["turbomind"] if row["engine"] == "lmdeploy" else None
    release = row.get("engine_version") if engine != "vllm" else None
    perf = plan_workload(est, work, engine=engine, engine_version=release, policy=policy,
                         num_scheduler_steps=row.get("num_scheduler_steps", 1))  # vLLM V0's multi-step
    run = perf.run
    out = {"output_tokens_per_second": perf.output_tokens_per_second,
           "total_tokens_per_second": perf.total_tokens_per_second, "requests_per_second": perf.requests_per_second,
           "e2e_seconds_mean": run.e2e[0], "ttft_seconds_mean": run.ttft[0], "ttft_seconds_median": run.ttft[1],
           "tpot_seconds_mean": run.tpot[0], "tpot_seconds_median": run.tpot[1], "itl_seconds_median": run.itl[1]}
    return out


def chat_intake(row: dict, spec: Any) -> float:
    """The API server's intake of one of the row's requests beyond REQUEST_SECONDS (engine_versions.
    chat_intake_seconds): the row's `endpoint` "chat" is `vllm bench serve --backend openai-chat --endpoint
    /v1/chat/completions` (every GPUStack page's benchmark script), at the row's stated engine release."""
    return engine_versions.chat_intake_seconds(row["engine"], row.get("engine_version"), spec.model_type,
                                               row.get("endpoint") == "chat")


def ttft_parts(row: dict) -> dict[str, float]:
    """Where a row's predicted median TTFT goes, seconds: `api` (serving_speed.REQUEST_SECONDS and the API server's
    intake, ``chat_intake``, where the run is served), `alone` (the prefill of one request of the row's mean lengths
    on an idle replica: a closed loop of one client sending one prompt, its TTFT less `api`) and `waiting` (the
    rest: the steps that run before or beside its prefill, other prompts' chunks, queueing); `predicted` their sum
    and `measured` the row's median (else mean)."""
    pred = predict_workload(row)
    static = row["mode"] == "static"  # a static batch of one through LLM.generate, else one client's one request
    alone = predict_workload({**row, "mode": "static" if static else "closed", "max_concurrency": 1, "n_prompts": 1,
                              "dataset": None, "batch": 1, "request_rate": None})["ttft_seconds_median"]
    api = 0.0 if static else serving_speed.REQUEST_SECONDS + chat_intake(row, load_model(row["model"]))
    key = "ttft_seconds_median" if "ttft_seconds_median" in row["metrics"] else "ttft_seconds_mean"
    median = pred[key]
    return {"measured": row["metrics"][key], "predicted": median, "api": api, "alone": alone - api,
            "waiting": median - alone}


def print_ttft(rows: list[dict]) -> None:
    """`--ttft`: each expressed TTFT row's prediction in parts (``ttft_parts``), milliseconds, and what is missing
    (measured - predicted)."""
    w = sys.stdout.write
    w(f"{'row (TTFT, ms)':50} {'measured':>9} {'predicted':>9} {'api':>6} {'alone':>8} {'waiting':>8} "
      f"{'missing':>9}\n")
    for row in rows:
        if not any(k in row["metrics"] for k in FAMILIES["ttft"][0]) or row["mode"] == "offline" or \
                not row.get("model"):
            continue
        try:
            p = ttft_parts(row)
        except (LlmcalcError, KeyError):
            continue
        ms = {k: v * 1e3 for k, v in p.items()}
        w(f"{row['id'][:50]:50} {ms['measured']:9,.1f} {ms['predicted']:9,.1f} {ms['api']:6.1f} {ms['alone']:8,.1f} "
          f"{ms['waiting']:8,.1f} {ms['measured'] - ms['predicted']:9,.1f}\n")


def compare(rows: list[dict], queued: list[dict] | None = None) -> tuple[list[dict], list[dict], dict[str, int]]:
    """(comparisons, unexpressible rows, metrics not compared by reason). Where `queued` is a list, the workload
    model's comparisons on the metrics the roofline leaves to queueing (``QUEUEING``: a burst's or an overloaded
    request rate's TTFT and e2e) are appended to it, one per row and family as the others, with no roofline or
    baseline figure (neither predicts them)."""
    comps, bad, skipped_metrics = [], [], {}
    queued = [] if queued is None else queued
    for row in rows:
        try:
            pred, skipped = predict(row)
        except LlmcalcError as exc:
            bad.append({"id": row["id"], "source": row["source_key"], "reason": str(exc).split("\n")[0]})
            continue
        for why in skipped.values():
            skipped_metrics[why] = skipped_metrics.get(why, 0) + 1
        for fam, (keys, latency) in FAMILIES.items():
            key = next((k for k in keys if k in row["metrics"] and k in pred and k not in skipped), None)
            left = next((k for k in keys if k in row["metrics"] and skipped.get(k) == QUEUEING), None)
            if key is None and left is not None:
                queued.append({"id": row["id"], "source": row["source_key"], "family": fam, "metric": left,
                               "regime": regime(row), "gpu": row["gpu"], "n_gpus": row["n_gpus"],
                               "engine": row["engine"], "measured": row["metrics"][left], "queueing": True,
                               "row": row})
            if key is None:
                continue
            meas, roof = row["metrics"][key], pred[key]
            speed_ratio = meas / roof if latency else roof / meas  # roofline speed / measured speed
            comps.append({"id": row["id"], "source": row["source_key"], "family": fam, "metric": key,
                          "regime": regime(row), "gpu": row["gpu"], "n_gpus": row["n_gpus"], "engine": row["engine"],
                          "measured": meas, "predicted": roof, "error": speed_ratio - 1.0, "row": row})
    _workload_errors(comps + queued)  # (one cache: each row's workload prediction once)
    for c in comps:  # measured fraction of the roofline's speed, for the baseline
        c["fraction"] = 1.0 / (1.0 + c["error"])
    for c in comps:
        train = [o["fraction"] for o in comps if o["family"] == c["family"] and o["source"] != c["source"]]
        if train:
            f = statistics.median(train)
            c["baseline_fraction"] = f
            c["baseline_error"] = f * (1.0 + c["error"]) - 1.0
        else:
            c["baseline_fraction"] = c["baseline_error"] = None
    return comps, bad, skipped_metrics


def _workload_errors(comps: list[dict]) -> None:
    """Each comparison's `workload_error`: the workload model's speed / measured speed - 1 (None: not expressible)."""
    cache: dict[str, dict[str, float] | None] = {}
    for c in comps:
        row = c["row"]
        if row["id"] not in cache:
            try:
                cache[row["id"]] = predict_workload(row)
            except LlmcalcError:
                cache[row["id"]] = None
        pred = cache[row["id"]]
        value = pred.get(c["metric"]) if pred else None
        latency = FAMILIES[c["family"]][1]
        # a plan that does not fit predicts nothing (0 tokens/s, infinite latencies): no comparison
        if not value or not math.isfinite(value):
            c["workload_error"] = None
        else:
            c["workload_error"] = (c["measured"] / value if latency else value / c["measured"]) - 1


FIT_GRID = {  # serving_speed's fitted constants, seconds
    "ENGINE_STEP_SECONDS": (0.0, 0.5e-3, 1e-3, 2e-3),
    "LAYER_FLOOR_SECONDS": (0.0, 10e-6, 20e-6, 40e-6),
    "TP_SYNC_SECONDS": (0.0, 10e-6, 20e-6, 40e-6, 80e-6),
    "REQUEST_SECONDS": (0.0, 0.02, 0.04),
}


def local_grid() -> dict[str, tuple[float, ...]]:
    """The 3^4 grid around the shipped constants: each at half, itself and twice its value (81 points, a fraction
    of FIT_GRID's 240, for a leave-one-source-out figure of the model as shipped)."""
    return {n: (getattr(serving_speed, n) / 2, getattr(serving_speed, n), getattr(serving_speed, n) * 2)
            for n in FIT_GRID}


def fit(comps: list[dict], grid: dict[str, tuple[float, ...]] | None = None) -> dict[str, Any]:
    """The grid fit of `grid` (FIT_GRID; module docstring): the best point over all rows and leave-one-source-out."""
    grid = grid or FIT_GRID
    names = list(grid)
    kept = {n: getattr(serving_speed, n) for n in names}
    errors: dict[tuple[float, ...], list[tuple[str, float]]] = {}
    try:
        for point in itertools.product(*grid.values()):
            for n, v in zip(names, point, strict=True):
                setattr(serving_speed, n, v)
            _workload_errors(comps)
            errors[point] = [(c["source"], c["workload_error"]) for c in comps if c["workload_error"] is not None]
    finally:
        for n, v in kept.items():
            setattr(serving_speed, n, v)
        _workload_errors(comps)

    def med(point: tuple[float, ...], keep: Any) -> float:
        return statistics.median(abs(e) for s, e in errors[point] if keep(s))

    best = min(errors, key=lambda p: med(p, lambda s: True))
    held: list[float] = []
    per_source = {}
    for source in sorted({c["source"] for c in comps}):
        point = min(errors, key=lambda p: med(p, lambda s: s != source))  # noqa: B023
        out = [e for s, e in errors[point] if s == source]
        held += out
        per_source[source] = {"fit": dict(zip(names, point, strict=True)), "median_abs_error": statistics.median(
            abs(e) for e in out), "n": len(out)}
    return {"best": dict(zip(names, best, strict=True)), "best_median_abs_error": med(best, lambda s: True),
            "loso_median_abs_error": statistics.median(abs(e) for e in held),
            "loso_mean_signed_error": statistics.fmean(held), "by_source": per_source}


def _stats(cs: list[dict], key: str) -> dict[str, Any]:
    vals = [c[key] for c in cs if c.get(key) is not None]
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "median_abs_error": statistics.median(abs(v) for v in vals),
            "mean_signed_error": statistics.fmean(vals)}


def summary(comps: list[dict]) -> dict[str, Any]:
    groups: dict[str, dict[str, list[dict]]] = {
        "overall": {"all": comps},
        "family": {}, "regime": {}, "source": {}, "gpu": {}, "tp": {}, "engine": {}}
    for c in comps:
        groups["family"].setdefault(c["family"], []).append(c)
        groups["regime"].setdefault(c["regime"], []).append(c)
        groups["source"].setdefault(c["source"], []).append(c)
        groups["gpu"].setdefault(c["gpu"], []).append(c)
        groups["tp"].setdefault(f"tp{c['n_gpus']}", []).append(c)
        groups["engine"].setdefault(c["engine"], []).append(c)
    return {g: {k: {"llmcalc": _stats(v, "error"), "constant_fraction_loso": _stats(v, "baseline_error"),
                    "workload_model": _stats(v, "workload_error")}
                for k, v in sorted(d.items())} for g, d in groups.items()}


def summary_queueing(comps: list[dict], queued: list[dict]) -> dict[str, Any]:
    """The workload model on the queueing metrics (``compare``'s `queued`): median |error| (mean signed) by family,
    source, regime and engine, and overall both ways: `as_before` (the comparisons every predictor makes, the
    figure ``summary``'s overall reports) and `with_queueing` (those and the queueing ones, the workload model
    alone: the roofline and the constant fraction predict none of them)."""
    groups: dict[str, dict[str, list[dict]]] = {"family": {}, "source": {}, "regime": {}, "engine": {}}
    for c in queued:
        for g in groups:
            groups[g].setdefault(c[g], []).append(c)
    out: dict[str, Any] = {"overall": {"as_before": _stats(comps, "workload_error"),
                                       "with_queueing": _stats(comps + queued, "workload_error"),
                                       "queueing": _stats(queued, "workload_error")}}
    for g, d in groups.items():
        out[g] = {k: _stats(v, "workload_error") for k, v in sorted(d.items())}
    return out


def _print_queueing(q: dict[str, Any], queued: list[dict], rows: bool) -> None:
    """The table format's queueing group (``summary_queueing``), and its comparisons with `--rows`."""
    w = sys.stdout.write
    cell = lambda x: f"{_abs(x['median_abs_error'])} ({_pct(x['mean_signed_error'])})" if x["n"] else ""  # noqa: E731
    w("\nqueueing (burst/overloaded TTFT, e2e): the workload model's figures where the roofline and the constant "
      "fraction predict none (offline bursts, request rates beyond the roofline)\n")
    o = q["overall"]
    w(f"{'overall as before (without)':28} {o['as_before']['n']:>4} {'':>20} {'':>20} {cell(o['as_before']):>20}\n")
    w(f"{'overall with queueing':28} {o['with_queueing']['n']:>4} {'':>20} {'':>20} {cell(o['with_queueing']):>20}\n")
    w(f"{'queueing: all':28} {o['queueing']['n']:>4} {'':>20} {'':>20} {cell(o['queueing']):>20}\n")
    for g in ("family", "source", "regime", "engine"):
        for k, x in q[g].items():
            w(f"{('queueing ' + g + ': ' + k)[:28]:28} {x['n']:>4} {'':>20} {'':>20} {cell(x):>20}\n")
    if rows:
        w(f"\n{'row (queueing)':50} {'family':10} {'regime':11} {'measured':>10} {'workload':>9}\n")
        for c in queued:
            w(f"{c['id'][:50]:50} {c['family']:10} {c['regime']:11} {_num(c['measured']):>10} "
              f"{_pct(c['workload_error']):>9}\n")


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.1f} %"


def _abs(x: float | None) -> str:
    return "" if x is None else f"{x * 100:.1f} %"


def _num(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1 else f"{x:,.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--rows", action="store_true", help="print every comparison (the table format)")
    ap.add_argument("--fit", action="store_true", help="fit the workload model's constants, leave-one-source-out")
    ap.add_argument("--grid", choices=("full", "local"), default="full",
                    help="--fit's grid: FIT_GRID (240 points) or half, once and twice each shipped constant (81)")
    ap.add_argument("--ttft", action="store_true", help="each TTFT row's prediction in parts (ttft_parts)")
    args = ap.parse_args(argv)
    data = json.loads(DATA.read_text())
    rows = data["rows"]
    if args.ttft:
        print_ttft(rows)
        return
    queued: list[dict] = []
    comps, bad, skipped = compare(rows, queued)
    summ = summary(comps)
    queueing = summary_queueing(comps, queued)
    fitted = fit(comps, local_grid() if args.grid == "local" else None) if args.fit else None
    counts = {"rows": len(rows), "rows_expressed": len(rows) - len(bad), "comparisons": len(comps),
              "queueing_comparisons": len(queued)}
    if args.format == "json":
        json.dump({"counts": counts, "summary": summ, "fit": fitted, "not_expressible": bad,
                   "metrics_not_compared": skipped, "queueing": queueing,
                   "comparisons": [{k: v for k, v in c.items() if k != "row"} for c in comps],
                   "queueing_comparisons": [{k: v for k, v in c.items() if k != "row"} for c in queued]},
                  sys.stdout, indent=1)
        print()
        return
    w = sys.stdout.write
    n_sources = len({r["source_key"] for r in rows})
    w(f"{counts['rows']} rows from {n_sources} sources; {counts['rows_expressed']} expressed, "
      f"{counts['comparisons']} comparisons (+ {len(queued)} of the workload model alone on queueing metrics, "
      "below). error = predicted speed / measured speed - 1 (+ = llmcalc faster).\n\n")
    if args.rows:
        w(f"{'row':50} {'family':10} {'regime':11} {'measured':>10} {'roofline':>9} {'baseline':>9} "
          f"{'workload':>9}\n")
        for c in comps:
            w(f"{c['id'][:50]:50} {c['family']:10} {c['regime']:11} {_num(c['measured']):>10} "
              f"{_pct(c['error']):>9} {_pct(c['baseline_error']):>9} {_pct(c['workload_error']):>9}\n")
        w("\n")
    w("median |error| (mean signed error) of: the roofline infer/serve print; a constant fraction of it fitted leave-"
      "one-source-out; the workload model\n")
    w(f"{'group':28} {'n':>4} {'roofline':>20} {'constant fraction':>20} {'workload model':>20}\n")
    for g in ("overall", "family", "regime", "source", "gpu", "tp", "engine"):
        for k, s in summ[g].items():
            cells = [s[m] for m in ("llmcalc", "constant_fraction_loso", "workload_model")]
            if not cells[0]["n"]:
                continue
            text = [f"{_abs(x.get('median_abs_error'))} ({_pct(x.get('mean_signed_error'))})" if x["n"] else ""
                    for x in cells]
            w(f"{(g + ': ' + k)[:28]:28} {cells[0]['n']:>4} {text[0]:>20} {text[1]:>20} {text[2]:>20}\n")
        if g == "overall":
            w("  (as before: the queueing metrics not included; with them, the queueing group below)\n")
    _print_queueing(queueing, queued, args.rows)
    if fitted:
        w(f"\nfit over all rows: {fitted['best']} -> median |error| {_abs(fitted['best_median_abs_error'])}\n")
        w(f"leave-one-source-out: median |error| {_abs(fitted['loso_median_abs_error'])}, mean signed "
          f"{_pct(fitted['loso_mean_signed_error'])}\n")
        for source, r in fitted["by_source"].items():
            w(f"  {source}: {r['n']} comparisons held out, median |error| {_abs(r['median_abs_error'])}; fit without "
              f"it {r['fit']}\n")
    w(f"\nnot expressible ({len(bad)} rows):\n")
    for b in bad:
        w(f"  {b['id']}: {b['reason']}\n")
    if skipped:
        w("metrics not compared: " + "; ".join(f"{n} x {why}" for why, n in skipped.items()) + "\n")


if __name__ == "__main__":
    main()
