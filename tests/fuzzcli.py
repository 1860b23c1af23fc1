"""Generated command lines for every `llmcalc` command, and the one property they must all keep.

The property (issue 14): an invocation exits 0 with only finite, non-negative figures, or exits 2
with exactly one line on stderr (`llmcalc: error: ...`) that names the option or key at fault; it
never runs longer than a few seconds; it leaves no file behind when it fails.

Used by tests/test_cli_fuzz.py (hypothesis) and by `python tests/fuzzcli.py N` (a seeded random run
that counts tracebacks, hangs and nonsense accepted, as the issue's survey did).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

NASTY_NUMBERS = ["0", "-1", "1e400", "1e308", "nan", "inf", "-inf", "1e-300", "0.5", "abc", "", "1k", "40%",
                 "15t", "1m", "9" * 5000, "1e30", "3"]
MODELS = ["llama-3-8b", "LLaMA-3-8B", "meta-llama/Meta-Llama-3-8B", "gpt2", "mixtral-8x7b", "t5-small",
          "bert-base-uncased", "deepseek-v2-lite", "llmcalc-tiny", "", "x" * 300, "nope"]
GPUS = ["h100-sxm", "H100-SXM", "a100-80gb-sxm", "", "x" * 300, "nope", "tpu-v5e"]
DTYPES = ["bf16", "bfloat16", "fp16", "float16", "fp32", "fp8", "int8", "int4", "tf32", "", "x"]

# Each command: its positional kind, and its options with the values to draw from.
NUM = NASTY_NUMBERS
COMMANDS: dict[str, dict] = {
    "presets": {"args": None, "opts": {}},
    "params": {"args": "model", "opts": {}},
    "flops": {"args": "model", "opts": {"--seq-len": NUM + ["2048", "4k"], "--micro-batch": NUM, "--causal": None,
                                        "--recompute": ["none", "selective", "full", "x"],
                                        "--decoder-seq-len": NUM}},
    "train": {"args": "model?", "opts": {"--params": NUM + ["7B"], "--tokens": NUM + ["2T", "15t"],
                                         "--gpu": GPUS, "--n-gpus": NUM + ["1k", "64"], "--mfu": NUM + ["0.4"],
                                         "--achieved-tflops": NUM + ["400"], "--usd-per-gpu-hour": NUM,
                                         "--dtype": DTYPES, "--seq-len": NUM, "--causal": None,
                                         "--recompute": ["none", "selective", "full"],
                                         "--global-batch": NUM + ["64", "512"], "--tp": NUM + ["2", "8"],
                                         "--pp": NUM + ["2"], "--tp-overlap": None, "--no-sequence-parallel": None,
                                         "--ep": NUM + ["8"], "--etp": NUM + ["1"],
                                         "--attention": ["flash", "eager", "sdpa", "x"]}},
    "plan": {"args": None, "opts": {"--compute": NUM + ["1e24"], "--gpu": GPUS, "--n-gpus": NUM,
                                    "--days": NUM, "--mfu": NUM, "--dtype": DTYPES}},
    "memory": {"args": "model", "opts": {"--seq-len": NUM, "--micro-batch": NUM, "--batch-size": NUM,
                                         "--recipe": ["bf16-mixed", "fp32", "x", "amp"],
                                         "--optimizer": ["adamw", "sgd", "x"], "--optimizer-bytes": NUM,
                                         "--recompute": ["none", "selective", "full", "x"],
                                         "--attention": ["flash", "eager", "sdpa", "x"], "--gpu": GPUS,
                                         "--n-gpus": NUM + ["8", "64"], "--zero": ["0", "1", "3", "4", "-1"],
                                         "--tp": NUM + ["2", "8"], "--pp": NUM + ["2"], "--ep": NUM + ["2", "8"],
                                         "--etp": NUM + ["1", "2"],
                                         "--reserve-gib": NUM + ["1e9"], "--inference": None,
                                         "--context": NUM, "--weight-dtype": DTYPES, "--kv-dtype": DTYPES,
                                         "--prefill-chunk": NUM}},
    "infer": {"args": "model", "opts": {"--gpu": GPUS, "--prompt": NUM, "--generate": NUM + ["16"],
                                        "--batch-size": NUM, "--weight-dtype": DTYPES, "--kv-dtype": DTYPES,
                                        "--compute-dtype": DTYPES,
                                        "--n-gpus": NUM + ["3", "64"]}},
    "serve": {"args": "model", "opts": {"--gpu": GPUS, "--n-gpus": NUM + ["2", "3"], "--max-model-len": NUM,
                                        "--gpu-memory-utilization": NUM + ["0.9", "90%"], "--block-size": NUM,
                                        "--weight-dtype": DTYPES, "--kv-dtype": DTYPES}},
    "layout": {"args": "model", "opts": {"--gpu": GPUS, "--n-gpus": NUM + ["64"], "--seq-len": NUM,
                                         "--global-batch": NUM + ["512"], "--top": NUM, "--tp-overlap": None}},
    "compare": {"args": "models", "opts": {"--seq-len": NUM, "--tokens": NUM, "--gpu": GPUS, "--n-gpus": NUM,
                                           "--mfu": NUM, "--usd-per-gpu-hour": NUM, "--zero": ["0", "3", "7"],
                                           "--tp": NUM, "--micro-batch": NUM, "--sort": ["params", "x"]}},
    "profile": {"args": "small-model", "opts": {"--virtual": None, "--device": ["cpu", "auto", "x", ""],
                                                "--dtype": ["fp32", "bf16", "int8", "x"],
                                                "--recipe": ["fp32", "bf16-mixed", "x"],
                                                "--micro-batch": ["1", "2", "0", "1e30"],
                                                "--seq-len": ["16", "64", "0", "1e400", "1e308"],
                                                "--steps": ["1", "0", "1e30", "nan"], "--warmup": ["0", "1", "-1"],
                                                "--layers": ["1", "2", "0", "1e12"],
                                                "--peak-tflops": NUM,
                                                "--attention": ["flash", "eager", "sdpa", "x"],
                                                "--recompute": ["none", "full", "x"]}},
    "calibrate": {"args": None, "opts": {"--device": ["cpu", "x"], "--size": ["64", "0", "1e30", "nan"],
                                         "--seconds": ["0.05", "inf", "nan", "0", "-1", "1e30"]}},
}
SMALL_MODELS = ["llmcalc-tiny", "", "x" * 300, "nope"]

FINITE_FAILURE = re.compile(r"\b(?i:inf|nan|infinity)\b|(?<![\w.-])-\d[\d,.]*\s*(GiB|MiB|KiB|TiB|bytes)\b")


def nasty_configs(folder: Path) -> list[str]:
    """Config files that broke llmcalc: each a path to pass as MODEL."""
    base = json.loads((Path(__file__).resolve().parent.parent / "presets/models/llmcalc-tiny.json").read_text())
    paths = []

    def write(name, data, encoding="utf-8"):
        path = folder / name
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding=encoding)
        paths.append(str(path))

    write("utf16.json", json.dumps(base), "utf-16")
    write("nested.json", "[" * 100_000 + "]" * 100_000)
    write("bigint.json", json.dumps(base)[:-1] + ', "vocab_size": ' + "9" * 5000 + "}")
    write("listtype.json", {**base, "model_type": ["llama"]})
    write("intact.json", {**base, "hidden_act": 3})
    write("listact.json", {**base, "hidden_act": ["silu"]})
    write("strbool.json", {**base, "attention_bias": "false"})
    write("zeroheads.json", {**base, "num_attention_heads": 0})
    write("layers1e12.json", {**base, "num_hidden_layers": 10**12})
    write("layers1e7.json", {**base, "num_hidden_layers": 10**7})
    write("hidden1e200.json", json.dumps(base)[:-1] + ', "hidden_size": 1e200}')
    write("nanbool.json", json.dumps(base)[:-1] + ', "tie_word_embeddings": NaN}')
    write("t5proj.json", {"model_type": "t5", "d_model": 64, "num_heads": 2, "num_layers": 2, "d_ff": 128,
                          "d_kv": 32, "vocab_size": 100, "feed_forward_proj": 3})
    loop = folder / "loop.json"
    if not loop.is_symlink():
        os.symlink(loop, loop)
    paths.append(str(loop))
    fifo = folder / "fifo.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    paths.append(str(fifo))
    paths.append("/dev/zero") if os.environ.get("FUZZ_DEVZERO") else None
    return paths


def draw_argv(rng: random.Random, configs: list[str]) -> list[str]:
    command = rng.choice(sorted(COMMANDS))
    spec = COMMANDS[command]
    argv = [command]
    kind = spec["args"]
    models = MODELS + configs
    if kind == "model" or (kind == "model?" and rng.random() < 0.7):
        argv.append(rng.choice(models))
    elif kind == "models":
        argv += [rng.choice(models) for _ in range(rng.randint(1, 2))]
    elif kind == "small-model":
        argv.append(rng.choice(SMALL_MODELS + configs))
    names = sorted(spec["opts"])
    for name in rng.sample(names, k=min(len(names), rng.randint(0, 4))):
        values = spec["opts"][name]
        argv += [name] if values is None else [name, rng.choice(values)]
    if command == "profile" and "--virtual" not in argv and rng.random() < 0.7:
        argv.append("--virtual")
    if command == "profile" and "--virtual" not in argv:  # a real run is as long as asked: keep it short
        argv += [] if "--steps" in argv else ["--steps", "1"]
        argv += [] if "--warmup" in argv else ["--warmup", "0"]
        argv += [] if "--seq-len" in argv else ["--seq-len", "32"]
    if command in ("serve", "layout") and "--gpu" not in argv:
        argv += ["--gpu", "h100-sxm"]
    if command == "layout":  # defaults only where not drawn: a repeated option's last value wins in click
        argv += [] if "--n-gpus" in argv else ["--n-gpus", "64"]
        argv += [] if {"--global-batch", "--global-batch-tokens"} & set(argv) else ["--global-batch", "512"]
    if command == "calibrate" and "--seconds" not in argv:
        argv += ["--seconds", "0.05"]
    if command == "calibrate" and "--size" not in argv:
        argv += ["--size", "64"]
    return argv


class Hang(BaseException):  # not an Exception: llmcalc's last-resort handler must not swallow it
    pass


@contextmanager
def deadline(seconds: float):
    def alarm(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


NONSENSE = {"-1", "1e400", "1e308", "nan", "inf", "-inf", "1e-300", "abc", "", "9" * 5000, "x", "x" * 300, "nope"}
ZERO_OK = {"--zero", "--warmup", "--reserve-gib"}
BIG_OK = {"--compute"}  # 1e30 FLOPs is a (large) budget
WHOLE = {"--n-gpus", "--micro-batch", "--batch-size", "--tp", "--pp", "--steps", "--layers", "--generate", "--size",
         "--seq-len", "--context", "--prompt", "--prefill-chunk", "--decoder-seq-len"}
BAD_CONFIGS = ("nested", "bigint", "listtype", "intact", "listact", "strbool", "zeroheads", "layers1e12",
               "layers1e7", "hidden1e200", "nanbool", "t5proj", "loop", "fifo")


def nonsense(argv: list[str]) -> bool:
    """Whether an invocation holds a value no sane answer can come from."""
    for i, arg in enumerate(argv):
        flag = argv[i - 1] if i and argv[i - 1].startswith("--") else None
        if arg in NONSENSE or any(arg.endswith(f"/{name}.json") for name in BAD_CONFIGS):
            return True
        if flag and arg == "0" and flag not in ZERO_OK:
            return True
        if flag and arg == "1e30" and flag not in BIG_OK:
            return True
        if flag in WHOLE and arg == "0.5":
            return True
        if flag == "--tokens" and arg == "0.5":
            return True
    return False


def invoke(argv: list[str], seconds: float = 5.0):
    """(outcome, result): outcome is 'ok', 'refused', 'traceback', 'hang', 'unclear' (a refusal that is
    not exactly one `llmcalc: error:` line), 'nonfinite' (an answer showing inf/nan/negative size) or
    'accepted' (an answer to nonsense input)."""
    from click.testing import CliRunner

    from llmcalc.cli import cli

    try:
        with deadline(seconds):
            result = CliRunner().invoke(cli, argv)
    except Hang:
        return "hang", None
    if isinstance(result.exception, Hang):
        return "hang", result
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback", result
    if result.exit_code == 0:
        if FINITE_FAILURE.search(result.stdout):
            return "nonfinite", result
        return ("accepted" if nonsense(argv) else "ok"), result
    lines = result.stderr.strip().splitlines()
    if result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("llmcalc: error: "):
        return "refused", result
    return "unclear", result


def survey(n: int, seed: int = 14) -> dict:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    examples: dict[str, list] = {}
    import torch  # noqa: F401  (imported once up front: its first import takes seconds, not a hang)

    with tempfile.TemporaryDirectory() as tmp:
        configs = nasty_configs(Path(tmp))
        os.chdir(tmp)
        for _ in range(n):
            argv = draw_argv(rng, configs)
            outcome, result = invoke(argv, 30.0 if argv[0] in ("profile", "report", "calibrate") else 5.0)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome not in ("ok", "refused"):
                detail = "" if result is None else (repr(result.exception) if outcome == "traceback"
                                                    else result.output[-300:])
                examples.setdefault(outcome, []).append((argv, detail))
    return {"counts": counts, "examples": examples}


if __name__ == "__main__":
    report = survey(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
    print(json.dumps(report["counts"]))
    for outcome, cases in report["examples"].items():
        for argv, detail in cases[:int(os.environ.get("SHOW", "8"))]:
            print(outcome, [a if len(a) < 40 else a[:20] + "..." for a in argv], str(detail)[:300])
