"""`serve` held against real vLLM start-up logs and published checkpoint sizes.

Run:  python benchmarks/bench_vllm_logs.py [--set fitted|holdout|all] [--json]

Two sets of logs: benchmarks/vllm_logs/rows.json (`fitted`: the rows the fitted constants of analytic/vllm.py name)
and benchmarks/vllm_logs/holdout.json (`holdout`, issue 41: logs collected after those constants were set, none fitted
to; each row quotes its source and lines). Per log (the model, GPU, settings and version each log states, its verbatim
lines), what vLLM logged and what `serve` predicts with the same settings: the KV cache ("GPU KV cache size" tokens,
V0's "# GPU blocks", or "Available KV cache memory" where only that is logged), "Maximum concurrency", and "Model
loading took" (the weights on one GPU, no --weight-dtype typed). Per published checkpoint, safetensors' total_size
against quant.checkpoint_bytes. The summary is what issue 21 asks: median |error| and the share within 5 %
(KV, concurrency), within 2 % (weights, checkpoints). The fitted constants of analytic/vllm.py name the rows they
come from and their leave-one-out errors beside them.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
from pathlib import Path

from llmcalc.hardware import Accelerator
from llmcalc.spec import load_hardware, load_model

HERE = Path(__file__).parent / "vllm_logs"
GIB = 2**30

# Published checkpoint sizes: safetensors total_size (tensor bytes) as quoted in /work/research/serving/
# checkpoint_sizes.json (each with its stored source); DeepSeek-V3's figure is its repository's weight files
# (headers included, code-index file 59118868630), Qwen2.5-0.5B's the one file's size less its 32,288-byte header.
CHECKPOINTS = [
    ("llama-3.1-8b", 16_060_522_496, "meta-llama/Llama-3.1-8B-Instruct model.safetensors.index.json"),
    ("llama-3-8b", 16_060_522_496, "meta-llama/Meta-Llama-3-8B (identical to 3.1-8B)"),
    ("llama-3.1-70b", 141_107_412_992, "meta-llama/Llama-3.1-70B-Instruct index"),
    ("mixtral-8x7b", 93_405_585_408, "mistralai/Mixtral-8x7B-v0.1 index"),
    ("mistral-7b", 14_483_464_192, "mistralai/Mistral-7B-Instruct-v0.2 index (same shapes)"),
    ("qwen2.5-7b", 15_231_233_024, "Qwen/Qwen2.5-7B-Instruct index"),
    ("qwen2.5-0.5b", 988_065_536, "Qwen/Qwen2.5-0.5B-Instruct model.safetensors, 988,097,824 B less its header"),
    ("qwen3-8b", 16_381_470_720, "Qwen3-8B index (an index-parse unit test)"),
    ("gpt-oss-20b", 13_761_264_768, "openai/gpt-oss-20b index (mxfp4 experts)"),
    ("gpt-oss-120b", 65_248_815_744, "openai/gpt-oss-120b index (mxfp4 experts)"),
    ("minimax-m2.7", 230_121_630_720, "MiniMaxAI/MiniMax-M2.7's tensors as a stored model-info report lists them "
     "(fp8 block experts and attention, fp32 routers; presets/minimax-m2.7.json _source): 214.32 GiB"),
    ("deepseek-v3", 688_586_727_753, "deepseek-ai/DeepSeek-V3 weight files incl. headers (fp8 block, MTP layer)"),
]


def accelerator(gpu: str | dict) -> Accelerator:
    """A preset, or a GPU the log names with the CUDA total it prints (total_gpu_memory)."""
    if isinstance(gpu, str):
        return load_hardware(gpu)
    peaks = {"fp16": 65e12} if gpu.get("fp16_only") else {"bf16": 71e12, "fp16": 71e12}
    total = gpu["cuda_visible_gib"] * GIB
    return Accelerator(gpu["custom"], gpu["custom"], peaks, total, 0.9e12, cuda_visible_bytes=total)


def model(name: str):
    return load_model(str(HERE / name) if name.endswith(".json") else name)


def predict(row: dict) -> dict:
    from llmcalc.analytic.serving import plan_serving

    settings = dict(row["settings"])
    tp = settings.pop("tp", 1)
    known = inspect.signature(plan_serving).parameters  # an older llmcalc (the `before` run) lacks some settings
    settings = {k: v for k, v in settings.items() if k in known}
    est = plan_serving(model(row["model"]), accelerator(row["gpu"]), tp, **settings)
    return {"weights_gib": est.weights_bytes_per_gpu / GIB, "kv_memory_gib": est.kv_cache_bytes / GIB,
            "kv_tokens": est.kv_cache_tokens, "kv_blocks": est.kv_blocks, "concurrency": est.vllm_max_concurrency}


def error(predicted: float, logged: float) -> float:
    return predicted / logged - 1


def evaluate(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        pred, logged = predict(row), row["logged"]
        kv_key = next((k for k in ("kv_tokens", "kv_blocks", "kv_memory_gib") if k in logged), None)
        rec = {"id": row["id"], "model": row["model_logged"][:40], "gpu": row["gpu_logged"][:28],
               "version": row["settings"].get("version"), "kv_key": kv_key}
        if kv_key is not None:
            rec.update(kv_logged=logged[kv_key], kv_predicted=pred[kv_key])
            if logged[kv_key] > 0:
                rec["kv_error"] = error(pred[kv_key], logged[kv_key])
        if "concurrency" in logged:
            rec.update(concurrency_logged=logged["concurrency"], concurrency_predicted=pred["concurrency"],
                       concurrency_error=error(pred["concurrency"], logged["concurrency"]))
        if "weights_gib" in logged:
            rec.update(weights_logged=logged["weights_gib"], weights_predicted=pred["weights_gib"],
                       weights_error=error(pred["weights_gib"], logged["weights_gib"]))
        out.append(rec)
    return out


def checkpoints() -> list[dict]:
    from llmcalc.analytic.quant import checkpoint_bytes

    return [{"model": name, "published": size, "predicted": checkpoint_bytes(load_model(name)),
             "error": error(checkpoint_bytes(load_model(name)), size), "source": src}
            for name, size, src in CHECKPOINTS]


def summary(records: list[dict], ckpts: list[dict]) -> dict:
    def stats(key: str, within: float) -> dict:
        errs = [abs(r[key]) for r in records if key in r]
        worst = sorted((r for r in records if key in r), key=lambda r: -abs(r[key]))[:3]
        return {"rows": len(errs), "median_abs_error": statistics.median(errs) if errs else None,
                "within": sum(e <= within for e in errs), "tolerance": within,
                "beyond_25_percent": sum(e > 0.25 for e in errs),
                "worst": [f"{r['id']} {r['model']} on {r['gpu']} ({r['version']}): {r[key] * 100:+.1f} %"
                          for r in worst]}

    ck = [abs(c["error"]) for c in ckpts]
    return {"kv": stats("kv_error", 0.05), "concurrency": stats("concurrency_error", 0.05),
            "weights": stats("weights_error", 0.02),
            "checkpoints": {"rows": len(ck), "median_abs_error": statistics.median(ck),
                            "within": sum(e <= 0.02 for e in ck), "tolerance": 0.02}}


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v * 100:+.1f} %"


def table(records: list[dict], ckpts: list[dict], summ: dict) -> str:
    lines = ["| log | model | GPU | vLLM | KV logged | KV predicted | error | concurrency logged | predicted | error | "
             "weights logged (GiB) | predicted | error |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        kv = r.get("kv_key") or ""
        unit = {"kv_tokens": " tok", "kv_blocks": " blk", "kv_memory_gib": " GiB"}.get(kv, "")
        fmt = (lambda v: f"{v:,.2f}") if kv == "kv_memory_gib" else (lambda v: f"{v:,.0f}")
        lines.append(
            f"| {r['id']} | {r['model']} | {r['gpu']} | {r['version']} | "
            f"{fmt(r['kv_logged']) + unit if 'kv_logged' in r else ''} | "
            f"{fmt(r['kv_predicted']) + unit if 'kv_predicted' in r else ''} | {_pct(r.get('kv_error'))} | "
            f"{r.get('concurrency_logged', '')} | "
            f"{'' if 'concurrency_predicted' not in r else format(r['concurrency_predicted'], '.2f')} | "
            f"{_pct(r.get('concurrency_error'))} | {r.get('weights_logged', '')} | "
            f"{'' if 'weights_predicted' not in r else format(r['weights_predicted'], '.4f')} | "
            f"{_pct(r.get('weights_error'))} |")
    lines += ["", "| checkpoint | published (B) | predicted (B) | error |", "|---|---:|---:|---:|"]
    lines += [f"| {c['model']} | {c['published']:,} | {c['predicted']:,.0f} | {c['error'] * 100:+.3f} % |"
              for c in ckpts]
    lines.append("")
    for name, s in summ.items():
        lines.append(f"{name}: {s['rows']} rows, median |error| {s['median_abs_error'] * 100:.1f} %, "
                     f"{s['within']} within {s['tolerance'] * 100:.0f} %"
                     + (f", {s['beyond_25_percent']} beyond 25 %; worst: {'; '.join(s['worst'])}"
                        if "worst" in s else ""))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="records and summary as JSON")
    parser.add_argument("--set", dest="which", choices=("fitted", "holdout", "all"), default="all",
                        help="which logs: rows.json (fitted), holdout.json (issue 41's held-out set) or both")
    args = parser.parse_args()
    files = {"fitted": ["rows.json"], "holdout": ["holdout.json"], "all": ["rows.json", "holdout.json"]}[args.which]
    rows = [row for name in files for row in json.loads((HERE / name).read_text())["rows"]]
    records, ckpts = evaluate(rows), checkpoints()
    summ = summary(records, ckpts)
    if args.json:
        print(json.dumps({"records": records, "checkpoints": ckpts, "summary": summ}, indent=1))
    else:
        print(table(records, ckpts, summ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
