"""Can llmcalc express the rows published serving benchmarks hold? A grid of such requests through the CLI, in-process.

Issue 36's acceptance set is drawn from published serving benchmarks of a few kinds, named in general terms (this
script reads none of them): an engine's offline maximum-throughput tables (TensorRT-LLM's trtllm-bench, every
release from 0.x TensorRT engines to the 1.x PyTorch flow; FP8/FP4/BF16, TP and PP, ISL/OSL pairs 128/128 to
20000/2000), genai-perf concurrency sweeps (TTFT/ITL), AMD's vLLM docker throughput and latency runs on MI300X and
MI325X (FP8 checkpoints, offline, batch 1-256), vLLM's CI serving runs (ShareGPT at a request rate of 1/4/16/inf)
and its latency benchmark (static batches). This script builds requests of those kinds over models (by preset name
and by Hugging Face repo id, quantized checkpoints included), GPUs, engines and releases, dtypes and TP/PP/EP, runs
each through ``llmcalc serve`` / ``llmcalc infer --format json`` in-process, and reports per request:

- answered: exit 0 and a JSON answer; its CPU seconds;
- refused: exit 2 with one ``llmcalc: error:`` line (the message is kept);
- crashed: any other exit, with the traceback;
- no-fit: answered "does NOT fit" (the weights leave no KV cache on those GPUs);
- absurd: an answered request whose figures break a bound: a non-finite or negative number, output throughput above
  the roofline's, TPOT or TTFT below the roofline's (the weight read / the prefill's compute at the GPU's peak);
- slow: CPU seconds above ``--slow`` (default 1 s).

    python benchmarks/expressibility.py [--only TEXT] [--format table|json] [--slow SECONDS] [--limit N]

Run on demand (minutes); not a unit test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from click.testing import CliRunner

from llmcalc.cli import cli

# (name as a user types it, the GPUs it is published on, TP degrees, --weight-dtype to add or None for the
# checkpoint's own): preset names and Hugging Face ids, quantized checkpoints among them
TRT_MODELS: tuple[tuple[str, tuple[int, ...], str | None], ...] = (
    ("EleutherAI/gpt-j-6b", (1,), "fp8"),
    ("gpt-j-6b", (1,), None),
    ("meta-llama/Llama-2-7b-hf", (1,), "fp8"),
    ("llama-2-13b", (1,), "fp8"),
    ("meta-llama/Llama-2-70b-hf", (2, 4, 8), "fp8"),
    ("meta-llama/Meta-Llama-3-8B", (1,), "fp8"),
    ("meta-llama/Meta-Llama-3-70B", (4, 8), "fp8"),
    ("meta-llama/Llama-3.1-8B", (1,), "fp8"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", (1,), None),
    ("meta-llama/Llama-3.1-70B", (2, 4), "fp8"),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", (2, 4), None),
    ("meta-llama/Llama-3.1-405B", (8,), "fp8"),
    ("nvidia/Llama-3.1-405B-Instruct-FP8", (8,), None),
    ("meta-llama/Llama-3.3-70B-Instruct", (2, 4), "fp8"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", (1, 2, 4), None),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", (1, 2), None),
    ("nvidia/Llama-3.1-405B-Instruct-FP4", (4, 8), None),
    ("mistralai/Mixtral-8x7B-v0.1", (1, 2, 4), "fp8"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", (2,), "fp8"),
    ("mistralai/Mixtral-8x22B-v0.1", (8,), "fp8"),
    ("tiiuae/falcon-180B", (4, 8), "fp8"),
    ("falcon-180b", (8,), "fp8"),
    ("mistralai/Mistral-7B-v0.1", (1,), "fp8"),
    ("Qwen/Qwen2.5-7B-Instruct", (1,), "fp8"),
    ("deepseek-ai/DeepSeek-R1", (8,), None),
    ("nvidia/DeepSeek-R1-FP4", (4, 8), None),
    ("nvidia/DeepSeek-R1-0528-FP4", (4, 8), None),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", (8,), None),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", (8,), None),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", (1, 2, 4), "fp8"),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP8", (1, 2), None),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", (1,), None),
    ("openai/gpt-oss-120b", (1, 2, 4, 8), None),
    ("openai/gpt-oss-20b", (1,), None),
    ("Qwen/Qwen3-235B-A22B-FP8", (4, 8), None),
    ("nvidia/Qwen3-235B-A22B-FP8", (8,), None),
    ("nvidia/Qwen3-235B-A22B-FP4", (4,), None),
    ("Qwen/Qwen3-235B-A22B", (8,), "fp8"),
    ("Qwen/Qwen3-30B-A3B", (1,), "fp8"),
    ("Qwen/Qwen3-8B", (1,), "fp8"),
)
TRT_GPUS = ("h100-sxm", "h200", "b200", "gb200", "a100-80gb-sxm", "l40s")
BF16_ONLY = ("a100-80gb-sxm",)  # no FP8 tensor cores: TensorRT-LLM's tables show these GPUs in FP16/BF16
BLACKWELL = ("b200", "gb200")  # NVFP4 tensor cores


def _runs_on(model: str, gpu: str) -> bool:
    """Whether a published table could hold this checkpoint on this GPU: FP8 checkpoints need FP8 tensor cores
    (not on A100), NVFP4 ones Blackwell."""
    if model.endswith("-FP4"):
        return gpu in BLACKWELL
    return not (gpu in BF16_ONLY and ("FP8" in model or model.startswith("deepseek-ai/")))
TRT_LENGTHS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000), (1024, 2048),
               (2048, 128), (2048, 2048), (5000, 500), (20000, 2000))
TRT_VERSIONS = ("0.5.0", "v0.7.1", "0.9.0", "0.12.0", "0.14.0", "0.17.0", "0.19.0", "0.20.0", "0.21.0", "1.0.0rc4",
                "1.0", "1.1.0", "v1.2.0rc1")

ROCM_MODELS: tuple[tuple[str, int], ...] = (
    ("amd/Llama-3.1-8B-Instruct-FP8-KV", 1),
    ("amd/Llama-3.1-70B-Instruct-FP8-KV", 8),
    ("amd/Llama-3.1-405B-Instruct-FP8-KV", 8),
    ("amd/Llama-2-70b-chat-hf-FP8-KV", 8),
    ("amd/Mixtral-8x7B-Instruct-v0.1-FP8-KV", 8),
    ("amd/Mixtral-8x22B-Instruct-v0.1-FP8-KV", 8),
)
ROCM_LENGTHS = ((128, 2048), (2048, 128), (2048, 2048))

CI_MODELS: tuple[tuple[str, int], ...] = (
    ("meta-llama/Meta-Llama-3-8B", 1), ("meta-llama/Meta-Llama-3.1-8B-Instruct", 1),
    ("meta-llama/Meta-Llama-3-70B-Instruct", 4), ("meta-llama/Meta-Llama-3.1-70B-Instruct", 4),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2),
)
NIM_MODELS: tuple[tuple[str, int], ...] = (
    ("meta-llama/Meta-Llama-3-8B-Instruct", 1), ("meta-llama/Llama-3.1-8B-Instruct", 1),
    ("meta-llama/Meta-Llama-3-70B-Instruct", 4), ("meta-llama/Llama-3.1-70B-Instruct", 4),
    ("meta-llama/Llama-3.3-70B-Instruct", 4),
)


@dataclass
class Outcome:
    """One request's answer: its kind (answered, no-fit, refused, crashed), CPU seconds, message, what is absurd."""

    group: str
    args: list[str]
    kind: str
    cpu_seconds: float
    message: str = ""
    absurd: list[str] = field(default_factory=list)


def trtllm_requests() -> Iterator[tuple[str, list[str]]]:
    """trtllm-bench offline throughput: every model x GPU x TP x ISL/OSL, a release cycled across them."""
    versions = itertools.cycle(TRT_VERSIONS)
    lengths = itertools.cycle(TRT_LENGTHS)
    for (model, tps, dtype), gpu in itertools.product(TRT_MODELS, TRT_GPUS):
        if not _runs_on(model, gpu):
            continue
        typed = "bf16" if dtype and gpu in BF16_ONLY else dtype
        for tp in tps:
            isl, osl = next(lengths)
            args = ["serve", model, "--gpu", gpu, "--n-gpus", str(tp), "--input-len", str(isl), "--output-len",
                    str(osl), "--engine", "trtllm", "--engine-version", next(versions)]
            yield "trtllm", args + (["--weight-dtype", typed] if typed else [])
    # pipeline parallel and a long context beyond the preset's positions, as those tables set them
    for model, gpu, tp, pp in (("meta-llama/Llama-3.1-405B", "h100-sxm", 8, 2), ("llama-2-70b", "h100-sxm", 2, 2),
                               ("tiiuae/falcon-180B", "h100-sxm", 4, 2), ("meta-llama/Llama-3.1-70B", "a100-80gb-sxm",
                                                                          4, 2)):
        for version in ("0.12.0", "0.17.0", "1.0.0"):
            yield "trtllm-pp", ["serve", model, "--gpu", gpu, "--n-gpus", str(tp), "--pp", str(pp), "--input-len",
                                "2048", "--output-len", "2048", "--engine", "trtllm", "--engine-version", version,
                                "--weight-dtype", "bf16" if gpu in BF16_ONLY else "fp8"]
    for model, tp in (("meta-llama/Llama-2-70b-hf", 4), ("EleutherAI/gpt-j-6b", 1), ("mistralai/Mixtral-8x7B-v0.1", 2),
                      ("tiiuae/falcon-180B", 8), ("meta-llama/Llama-2-7b-hf", 1)):
        yield "trtllm-long", ["serve", model, "--gpu", "h100-sxm", "--n-gpus", str(tp), "--input-len", "20000",
                              "--output-len", "2000", "--engine", "trtllm", "--engine-version", "0.17.0",
                              "--weight-dtype", "fp8"]
    for model, tp in (("nvidia/DeepSeek-R1-FP4", 8), ("openai/gpt-oss-120b", 8), ("Qwen/Qwen3-235B-A22B-FP8", 8),
                      ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", 8)):
        yield "trtllm-ep", ["serve", model, "--gpu", "b200", "--n-gpus", str(tp), "--enable-expert-parallel",
                            "--input-len", "1024", "--output-len", "1024", "--engine", "trtllm", "--engine-version",
                            "1.0.0"]


def rocm_requests() -> Iterator[tuple[str, list[str]]]:
    """AMD's vLLM docker: FP8-KV checkpoints on MI300X/MI325X, offline throughput, and static-batch latency."""
    for (model, tp), gpu in itertools.product(ROCM_MODELS, ("mi300x", "mi325x")):
        for isl, osl in ROCM_LENGTHS:
            yield "rocm-throughput", ["serve", model, "--gpu", gpu, "--n-gpus", str(tp), "--input-len", str(isl),
                                      "--output-len", str(osl), "--kv-dtype", "fp8", "--num-prompts", "3200"]
        for batch in (1, 16, 256):
            yield "rocm-latency", ["infer", model, "--gpu", gpu, "--n-gpus", str(tp), "--batch-size", str(batch),
                                   "--input-len", "128", "--output-len", "2048", "--kv-dtype", "fp8"]


def vllm_ci_requests() -> Iterator[tuple[str, list[str]]]:
    """vLLM's CI: ShareGPT at request rates 1/4/16/inf, benchmark_latency static batches, on A100/H100/others."""
    for (model, tp), gpu in itertools.product(CI_MODELS, ("a100-80gb-sxm", "h100-sxm", "l40s", "mi300x")):
        for rate in ("1", "4", "16", "inf"):
            rate_args = [] if rate == "inf" else ["--request-rate", rate]
            yield "vllm-ci-serve", ["serve", model, "--gpu", gpu, "--n-gpus", str(tp), "--dataset", "sharegpt",
                                    "--input-len", "220", "--output-len", "200", "--num-prompts", "200",
                                    "--vllm-version", "0.6.4", *rate_args]
        yield "vllm-ci-latency", ["infer", model, "--gpu", gpu, "--n-gpus", str(tp), "--batch-size", "8",
                                  "--input-len", "32", "--output-len", "128"]
    for kv in ("fp8", "bf16"):
        yield "vllm-fp8kv", ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--kv-dtype", kv,
                             "--input-len", "1000", "--output-len", "1000", "--max-concurrency", "64"]
    for engine in ("sglang", "vllm"):
        yield "engines", ["serve", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100-sxm", "--n-gpus", "4",
                          "--engine", engine, "--input-len", "1024", "--output-len", "1024", "--request-rate", "8"]


def nim_requests() -> Iterator[tuple[str, list[str]]]:
    """genai-perf concurrency sweeps: closed loop at 1..256 clients, TTFT/ITL, on H100/A100/L40S."""
    for (model, tp), gpu in itertools.product(NIM_MODELS, ("h100-sxm", "a100-80gb-sxm", "l40s")):
        for isl, osl in ((200, 200), (1000, 200), (5000, 500), (128, 2048)):
            yield "nim-sweep", ["serve", model, "--gpu", gpu, "--n-gpus", str(tp), "--input-len", str(isl),
                                "--output-len", str(osl), "--max-concurrency", "1,25,100,250", "--engine", "trtllm",
                                "--weight-dtype", "bf16" if gpu in BF16_ONLY else "fp8"]


def requests() -> Iterator[tuple[str, list[str]]]:
    yield from trtllm_requests()
    yield from rocm_requests()
    yield from vllm_ci_requests()
    yield from nim_requests()


def _numbers(value: object, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def _below(label: str, value: float | None, floor: float | None) -> list[str]:
    if value is None or floor is None or value >= floor * 0.999:
        return []
    return [f"{label} {value:.4g} below the roofline's {floor:.4g}"]


def serve_absurdities(perf: dict) -> list[str]:
    """A serve answer's bounds: throughput at most the roofline's; TPOT and TTFT at least the roofline's."""
    roof = perf.get("roofline") or {}
    out: list[str] = []
    tps, roof_tps = perf.get("output_tokens_per_second"), roof.get("output_tokens_per_second")
    if tps is not None and roof_tps is not None and tps > roof_tps * 1.001:
        out.append(f"output tok/s {tps:.4g} above the roofline's {roof_tps:.4g}")
    out += _below("TPOT mean", (perf.get("tpot_seconds") or {}).get("mean"), roof.get("tpot_seconds"))
    out += _below("TTFT mean", (perf.get("ttft_seconds") or {}).get("mean"), roof.get("ttft_seconds"))
    return out


def absurdities(command: str, answer: dict) -> list[str]:
    """Everything in an answer that breaks a bound (non-finite or negative numbers included)."""
    out = [f"{path} = {v}" for path, v in _numbers(answer) if not math.isfinite(v) or v < 0]
    if command == "serve":
        perfs = answer.get("performance")
        for perf in perfs if isinstance(perfs, list) else [perfs] if perfs else []:
            out += serve_absurdities(perf)
    else:
        roof = answer.get("roofline") or {}
        if answer.get("tokens_per_second", 0) > roof.get("tokens_per_second", math.inf) * 1.001:
            out.append(f"tok/s {answer['tokens_per_second']:.4g} above the roofline's {roof['tokens_per_second']:.4g}")
        out += _below("TPOT", answer.get("decode_seconds_per_token"), roof.get("decode_seconds_per_token"))
        out += _below("TTFT", answer.get("time_to_first_token_seconds"), roof.get("time_to_first_token_seconds"))
    return out


def run_one(group: str, args: list[str]) -> Outcome:
    """One request in-process: its outcome, CPU seconds and message."""
    start = time.process_time()
    try:
        result = CliRunner().invoke(cli, [*args, "--format", "json"])
    except Exception:  # the runner catches the command's own exceptions; this is the harness failing
        return Outcome(group, args, "crashed", time.process_time() - start, traceback.format_exc())
    cpu = time.process_time() - start
    if result.exit_code == 0:
        answer = json.loads(result.stdout)
        if answer.get("fits") is False:  # a plan that does not fit answers "does NOT fit", its speeds inf
            return Outcome(group, args, "no-fit", cpu)
        return Outcome(group, args, "answered", cpu, absurd=absurdities(args[0], answer))
    if result.exit_code == 2 and result.exc_info is not None and result.exc_info[0] is SystemExit:
        return Outcome(group, args, "refused", cpu, result.stderr.strip().splitlines()[-1] if result.stderr else "")
    text = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else result.output
    return Outcome(group, args, "crashed", cpu, text)


def report(outcomes: list[Outcome], slow: float) -> str:
    """Counts per group, then every refusal, crash, absurd answer and slow request with its command."""
    lines = ["group              answered  no-fit  refused  crashed  absurd  slow  max_cpu_s"]
    groups = {g: [o for o in outcomes if o.group == g] for g in dict.fromkeys(o.group for o in outcomes)}
    for group, mine in [*groups.items(), ("all", outcomes)]:
        kinds = Counter(o.kind for o in mine)
        lines.append(f"{group:18} {kinds['answered']:8} {kinds['no-fit']:7} {kinds['refused']:8} "
                     f"{kinds['crashed']:8} {sum(bool(o.absurd) for o in mine):7} "
                     f"{sum(o.cpu_seconds > slow for o in mine):5} {max(o.cpu_seconds for o in mine):10.2f}")
    for o in outcomes:
        command = "llmcalc " + " ".join(o.args)
        if o.kind in ("refused", "crashed"):
            lines.append(f"\n[{o.kind}] {command}\n  {o.message.strip()[-1500:]}")
        if o.kind == "no-fit":
            lines.append(f"\n[no-fit] {command}")
        if o.absurd:
            lines.append(f"\n[absurd] {command}\n  " + "; ".join(o.absurd))
        if o.cpu_seconds > slow:
            lines.append(f"\n[slow {o.cpu_seconds:.2f} s] {command}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="run the requests whose command line contains this text")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--slow", type=float, default=1.0, help="CPU seconds above which a request is slow")
    parser.add_argument("--limit", type=int, help="at most this many requests")
    opts = parser.parse_args(argv)
    todo = [(g, a) for g, a in requests() if not opts.only or opts.only in " ".join([g, *a])]
    outcomes = [run_one(g, a) for g, a in todo[:opts.limit]]
    if opts.format == "json":
        print(json.dumps([o.__dict__ for o in outcomes], indent=1))
    else:
        print(report(outcomes, opts.slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
