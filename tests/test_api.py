"""llmcalc as a library (issue 41, item 6): one function per command, taking what the command takes and returning
the record its --format json prints; each with a docstring example, run here; help(llmcalc) short; short reprs."""

from __future__ import annotations

import doctest
import json
import pydoc
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

import llmcalc
from llmcalc import api
from llmcalc.cli import cli

COMMANDS = ("params", "flops", "memory", "train", "layout", "serve")


@pytest.mark.parametrize("name", COMMANDS)
def test_each_function_has_an_example_that_runs(name):
    """The docstring example of llmcalc.<command>, run as a doctest (its figures are public counts, papers' rules and
    hand arithmetic written out in the example)."""
    function = getattr(llmcalc, name)
    assert function is getattr(api, name)
    tests = doctest.DocTestFinder().find(function, name, globs={"llmcalc": llmcalc})
    assert tests and tests[0].examples, f"llmcalc.{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def _cli_json(argv: list[str]) -> dict:
    result = CliRunner().invoke(cli, [*argv, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(("argv", "call"), [
    (["params", "qwen2.5-7b"], lambda: llmcalc.params("qwen2.5-7b")),
    (["flops", "gpt2", "--seq-len", "1k", "--causal", "--recompute", "full"],
     lambda: llmcalc.flops("gpt2", seq_len="1k", causal=True, recompute="full")),
    (["memory", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", "16", "--tp", "2", "--zero", "1", "--micro-batch", "2",
      "--no-sequence-parallel"],
     lambda: llmcalc.memory("llama-3-8b", gpu="h100-sxm", n_gpus=16, tp=2, zero=1, micro_batch=2,
                            no_sequence_parallel=True)),
    (["train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", "64", "--mfu", "40%", "--causal"],
     lambda: llmcalc.train("llama-3-8b", tokens=1e12, gpu="h100-sxm", n_gpus=64, mfu=0.4, causal=True)),
    (["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--n-gpus", "2"],
     lambda: llmcalc.serve("llama-3.1-8b", gpu="h100-sxm", max_model_len=32768, n_gpus=2, pp=None)),
])
def test_a_function_returns_what_the_command_prints_as_json(argv, call):
    assert json.loads(json.dumps(call())) == _cli_json(argv)


def test_a_call_leaves_the_command_as_the_program_runs_it():
    """A function runs its command under the group's settings: `memory --help` still offers -h afterwards."""
    llmcalc.memory("gpt2", seq_len=1024)
    assert "-h, --help" in CliRunner().invoke(cli, ["memory", "--help"]).stdout


def test_a_model_as_a_dict_or_a_path(tmp_path):
    from llmcalc.spec import model_config

    config = model_config("llama-3.2-1b")
    (tmp_path / "llama-3.2-1b").mkdir()
    (tmp_path / "llama-3.2-1b" / "config.json").write_text(json.dumps(config))
    from_path = llmcalc.params(tmp_path / "llama-3.2-1b")
    from_dict = llmcalc.params({**config, "name": "llama-3.2-1b"})
    assert from_dict["total"] == from_path["total"] == llmcalc.params("llama-3.2-1b")["total"]
    assert from_dict["model"] == from_path["model"] == "llama-3.2-1b"


def test_bad_input_is_one_line_naming_the_option():
    with pytest.raises(llmcalc.LlmcalcError, match="--n-gpus") as bad:
        llmcalc.memory("llama-3-8b", n_gpus=0)
    assert "\n" not in str(bad.value)
    with pytest.raises(llmcalc.LlmcalcError, match="no-such-model"):
        llmcalc.params("no-such-model")
    with pytest.raises(llmcalc.LlmcalcError, match="the model dict"):
        llmcalc.params({"model_type": "llama", "hidden_size": 64})
    with pytest.raises(TypeError, match="unexpected keyword argument 'gpus'.*n_gpus"):
        llmcalc.train("llama-3-8b", tokens="1T", gpu="h100-sxm", gpus=8)


def test_a_commands_warnings_are_python_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        llmcalc.flops("gpt2", seq_len="4k")  # past GPT-2's 1,024 positions
    assert [w.category for w in caught] == [llmcalc.LlmcalcWarning]
    assert "max_position_embeddings" in str(caught[0].message)


def test_help_is_short():
    text = pydoc.render_doc(llmcalc, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < 150
    assert all(f"\n    {name}(" in text for name in COMMANDS)
    functions = sorted(n for n in llmcalc._API if not isinstance(getattr(llmcalc, n), type))
    assert llmcalc.__all__ == functions  # the classes are reached by name; their help is long


def test_short_reprs():
    spec = llmcalc.load_model("llama-3-8b")
    assert repr(spec) == ("ModelSpec(name='llama-3-8b', n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, "
                          "vocab_size=128256, ...)")
    from llmcalc.analytic.memory import training_memory
    from llmcalc.spec import load_hardware

    for record in (llmcalc.count_params(spec), load_hardware("h100-sxm"), training_memory(spec, 1, 4096, "bf16-mixed",
                                                                                       "adamw")):
        assert len(repr(record)) < 400, repr(record)


def test_the_functions_load_nothing_until_called():
    """`import llmcalc` and naming llmcalc.train import neither click nor a command; a call loads no heavy library."""
    code = ("import sys, llmcalc\nllmcalc.train\nprint(sorted(m for m in ('click', 'llmcalc.cli.main') if m in "
            "sys.modules))\nllmcalc.params('gpt2')\nprint(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'numpy', 'pandas', 'matplotlib'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "[]"]
