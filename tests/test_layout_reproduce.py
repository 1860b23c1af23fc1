"""One layout everywhere (issue 41): `layout` prints, for its best layout, the `train`, `memory` and `report` command
lines that reproduce it, and run as printed they agree with its best row and with each other: train predicts its step
and gives its memory and fit, memory its per-GPU bytes and fit, report plans that layout with the same step, memory
and fit. Dense and MoE models, cp > 1, vpp > 1, uneven pipeline stages (pp not dividing the layers, and
--first/--last-stage-layers), layouts pinned by the shared options (--tp, --pp, --zero)."""

import json
import shlex
from pathlib import Path

import pytest
from clirun import cli_json, one_line_error, run

from llmcalc.units import GIB

CASES = {
    # dense, its typed options carried over (recipe, rank order, causal, reserve)
    "dense": ("llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 64, "--global-batch", 64, "--top", 2, "--causal",
              "--recipe", "fp8", "--rank-order", "tp-cp-ep-pp-dp", "--reserve-gib", 10),
    # MoE, cp 2, ep 8 (tp 1: with --tp-overlap searched the best is tp 2)
    "moe-cp": ("mixtral-8x7b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 32, "--top", 2,
               "--tp", 1),
    # --tp-overlap searched and chosen (tp 8 in one node): the printed train line carries it
    "tp-overlap": ("llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 64, "--seq-len", 8192, "--global-batch", 512,
                   "--top", 2),
    # cp 4, pp 16 over 126 layers (uneven), vpp 4
    "vpp-uneven": ("llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", 16384, "--seq-len", 8192, "--global-batch",
                   2048, "--top", 2),
    # pinned: pp 3 over 32 layers (uneven), ZeRO-3
    "pinned-uneven": ("llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 24, "--global-batch", 48, "--pp", 3, "--zero", 3,
                      "--top", 2),
    # an uneven split chosen by the search: Llama 3.2 1B's LM head (128k vocabulary) weighs ~4 of its 16 layers
    "uneven-chosen": ("llama-3.2-1b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 64, "--pp", 4,
                      "--top", 2),
    # the first and last pipeline ranks' layers set
    "stage-layers": ("llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 64, "--pp", 4,
                     "--first-stage-layers", 6, "--last-stage-layers", 6, "--top", 2),
}
SHAPES = {"moe-cp": lambda b: b["cp"] > 1 and b["ep"] > 1, "tp-overlap": lambda b: b["tp_overlap"],
          "uneven-chosen": lambda b: b["last_stage_layers"],
          "vpp-uneven": lambda b: b["vpp"] > 1 and b["cp"] > 1 and 126 % b["pp"],
          "pinned-uneven": lambda b: b["pp"] == 3 and b["zero"] == 3,
          "stage-layers": lambda b: b["pp"] == 4}


def _printed(command: str, *more) -> dict:
    words = shlex.split(command)
    assert words[0] == "llmcalc"
    return cli_json(*words[1:], *more)


def _layout(case: str) -> tuple[dict, dict]:
    data = cli_json("layout", *CASES[case])
    best = data["layouts"][0]
    assert SHAPES.get(case, lambda b: True)(best), best
    return best, data["reproduce"]


@pytest.mark.parametrize("case", list(CASES))
def test_the_printed_train_and_memory_commands_give_the_best_rows_figures(case):
    best, commands = _layout(case)
    train = _printed(commands["train"])
    assert train["step_seconds"] == best["step_seconds"]
    assert train["memory_per_gpu_bytes"] == best["memory_gib"] * GIB and train["fits"]
    memory = _printed(commands["memory"])
    assert memory["per_gpu_bytes"] == best["memory_gib"] * GIB and memory["fits"]
    assert memory["capacity_bytes"] == train["capacity_bytes"]  # one capacity: usable memory less --reserve-gib


def test_typed_options_go_with_the_printed_lines():
    args = CASES["dense"]
    _, commands = _layout("dense")
    train, memory = shlex.split(commands["train"]), shlex.split(commands["memory"])
    assert {"--recipe", "--rank-order", "--causal", "--reserve-gib"} <= set(train)
    assert {"--recipe", "--reserve-gib", "--global-batch"} <= set(memory)
    assert commands["report"] is None  # report takes no --rank-order: said, not printed wrong
    text = run("layout", *args).stdout
    assert f"reproduce #1: {commands['train']}" in text and f"reproduce #1: {commands['memory']}" in text
    assert "reproduce #1: report takes no --rank-order" in text


def _report_plan(command: str, tmp_path: Path) -> dict:
    words = shlex.split(command)
    result = run(*words[1:], "--out", tmp_path / "report", "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "report" / "plan.json").read_text())


@pytest.mark.parametrize("case", [
    "moe-cp", pytest.param("vpp-uneven", marks=pytest.mark.slow), "pinned-uneven",
    pytest.param("stage-layers", marks=pytest.mark.slow)])
def test_the_printed_report_plans_the_best_layout(case, tmp_path):
    """report's plan (--plan-layout best: layout's search) is layout's best row: its degrees, micro-batch, ZeRO
    stage and recomputation, its step and MFU, its memory and fit."""
    best, commands = _layout(case)
    (name, entry), = _report_plan(commands["report"], tmp_path)["models"].items()
    planned = entry["best_layout"]
    keys = ("tp", "cp", "pp", "vpp", "dp", "ep", "etp", "micro_batch", "zero", "recompute", "step_seconds", "mfu")
    assert {k: planned[k] for k in keys} == {k: best[k] for k in keys}
    assert entry["layout"]["source"] == "recommended" and entry["layout"]["pp"] == best["pp"]
    assert entry["memory_per_gpu_bytes"] == planned["memory_per_gpu_bytes"] == best["memory_gib"] * GIB
    assert entry["fits"] and entry["predicted_mfu"] == best["mfu"]


def test_the_layout_options_are_refused_alike_everywhere():
    """One layout, one set of refusals: what contradicts the model or the GPUs is refused by train, memory, layout
    and report in the same words (the step model's make_layout)."""
    where = ("--gpu", "h100-sxm", "--n-gpus", 24, "--global-batch", 48)
    for bad, words in ((("--cp", 3), "--cp 3 does not divide --seq-len 4096"),
                       (("--pp", 3, "--first-stage-layers", 5), "--first-stage-layers 5")):
        lines = [one_line_error("train", "llama-3-8b", "--tokens", "1T", *where, *bad),
                 one_line_error("memory", "llama-3-8b", *where, *bad),
                 one_line_error("layout", "llama-3-8b", *where, *bad),
                 one_line_error("report", "llama-3-8b", *where, *bad, "--out", "/nonexistent/never-written")]
        assert len(set(lines)) == 1 and words in lines[0], lines


def test_a_model_without_a_formula_reproduces_too():
    """The layout of a model transformers measured (tests/test_measured_step.py's end-to-end case): its printed
    commands give its best row's step and memory."""
    config = Path(__file__).parent / "configs" / "fallback" / "arcee-tiny.json"
    data = cli_json("layout", config, "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64, "--seq-len", 256)
    best, commands = data["layouts"][0], data["reproduce"]
    assert _printed(commands["train"])["step_seconds"] == best["step_seconds"]
    if best["pp"] == 1 and best["cp"] == 1:
        assert _printed(commands["memory"])["per_gpu_bytes"] == best["memory_gib"] * GIB


@pytest.mark.parametrize("options", [("--tp", 2, "--pp", 2, "--vpp", 2, "--global-batch", 48),
                                     ("--cp", 2, "--pp", 3, "--zero", 3, "--global-batch", 32, "--reserve-gib", 30),
                                     ("--pp", 4, "--first-stage-layers", 6, "--last-stage-layers", 6)])
def test_compare_train_and_memory_size_one_layout_alike(options):
    """The same layout options to compare, train and memory: the same memory per GPU and the same fit."""
    where = ("--gpu", "h100-sxm", "--n-gpus", 48)
    memory = cli_json("memory", "llama-3-8b", *where, *options)
    (record,) = cli_json("compare", "llama-3-8b", "--tokens", "1T", *where, *options)["models"]
    assert record["memory_per_gpu_bytes"] == memory["per_gpu_bytes"] and record["fits"] == memory["fits"]
    if "--global-batch" in options:
        train = cli_json("train", "llama-3-8b", "--tokens", "1T", *where, *options)
        assert train["memory_per_gpu_bytes"] == memory["per_gpu_bytes"] and train["fits"] == memory["fits"]


def test_a_model_without_a_formula_is_searched_whole():
    """layout's pins (--tp, ...) fix degrees of the formula's search; a model transformers measured is refused them in
    one line naming the options."""
    config = Path(__file__).parent / "configs" / "fallback" / "arcee-tiny.json"
    line = one_line_error("layout", config, "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64, "--seq-len", 256,
                          "--tp", 2, "--zero", 3)
    assert "--tp, --zero" in line and "measured by transformers" in line
