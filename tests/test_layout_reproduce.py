"""`layout` prints, for its best layout, the `train` and `memory` command lines that reproduce it (issue 41: one
layout everywhere): run as printed, train predicts the best row's step and memory gives its per-GPU bytes; where
memory cannot take the layout (cp, vpp) the note says so instead of a wrong command."""

import shlex
from pathlib import Path

from clirun import cli_json, run

from llmcalc.units import GIB


def _printed(command: str) -> dict:
    words = shlex.split(command)
    assert words[0] == "llmcalc"
    return cli_json(*words[1:])


def test_the_printed_train_and_memory_commands_reproduce_the_best_layout():
    args = ("layout", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 64, "--global-batch", 64, "--top", 2,
            "--causal", "--recipe", "fp8", "--rank-order", "tp-cp-ep-pp-dp", "--reserve-gib", 10)
    data = cli_json(*args)
    best, commands = data["layouts"][0], data["reproduce"]
    assert best["cp"] == best["vpp"] == 1  # a layout memory can take
    train = shlex.split(commands["train"])
    assert {"--recipe", "--rank-order", "--causal"} <= set(train)  # layout's typed options go with it
    assert _printed(commands["train"])["step_seconds"] == best["step_seconds"]
    memory = _printed(commands["memory"])
    assert memory["per_gpu_bytes"] == best["memory_gib"] * GIB
    assert "--reserve-gib" in commands["memory"] and memory["fits"]
    text = run(*args).stdout
    assert f"reproduce #1: {commands['train']}" in text and f"reproduce #1: {commands['memory']}" in text


def test_a_layout_memory_cannot_take_is_said_not_printed():
    args = ("layout", "mixtral-8x7b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 32, "--top", 2)
    data = cli_json(*args)
    best, commands = data["layouts"][0], data["reproduce"]
    assert best["cp"] > 1 or best["vpp"] > 1
    assert commands["memory"] is None
    assert _printed(commands["train"])["step_seconds"] == best["step_seconds"]
    assert "reproduce #1: memory takes no --" in run(*args).stdout


def test_a_model_without_a_formula_reproduces_too():
    """The layout of a model transformers measured (tests/test_measured_step.py's end-to-end case): its printed
    commands give its best row's step and memory."""
    config = Path(__file__).parent / "configs" / "fallback" / "arcee-tiny.json"
    data = cli_json("layout", config, "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64, "--seq-len", 256)
    best, commands = data["layouts"][0], data["reproduce"]
    assert _printed(commands["train"])["step_seconds"] == best["step_seconds"]
    if commands["memory"] is not None:
        assert _printed(commands["memory"])["per_gpu_bytes"] == best["memory_gib"] * GIB
