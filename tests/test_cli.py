"""The command line, through click's CliRunner; outputs are parsed back, not compared as text."""

import csv
import io
import json

import pytest
from clirun import run  # noqa: E402

from llmcalc.cli import cli
from llmcalc.spec import model_config, model_names


def ok(*args):
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def bad(*args):
    """Bad input: exit code 2, exactly one line on stderr, no traceback, nothing on stdout."""
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcalc: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_params_json_has_the_promised_keys():
    data = json.loads(ok("params", "llama-3-8b", "--format", "json"))
    assert data["total"] == 8_030_261_248
    assert sum(data["components"].values()) == data["total"]
    assert data["non_embedding"] == data["total"] - 2 * 128256 * 4096
    assert data["active_per_token"] == data["total"]
    assert [a["name"] for a in data["approximations"]][0] == "12·L·D²"
    assert sum(t["params"] for t in data["reconciliation"]) == data["total"]


def test_params_moe_reports_active_per_token():
    data = json.loads(ok("params", "mixtral-8x7b", "--format", "json"))
    assert (data["total"], data["active_per_token"]) == (46_702_792_704, 12_879_925_248)


def test_params_csv_parses_back():
    rows = list(csv.DictReader(io.StringIO(ok("params", "gpt2", "--format", "csv"))))
    components = {r["name"]: int(r["params"]) for r in rows if r["kind"] == "component"}
    totals = {r["name"]: int(r["params"]) for r in rows if r["kind"] == "total"}
    assert sum(components.values()) == totals["total"] == 124_439_808
    assert components["embedding/positions"] == 1024 * 768


def test_params_table_and_markdown_show_the_approximations():
    table = ok("params", "llama-7b")
    assert "12·L·D²" in table and "6.44 B" in table and "6.74 B" in table and "6,738,415,616" in table
    si = ok("--units", "si", "params", "llama-7b")  # issue 41: SI's G on request
    assert "6.44 G" in si and "6.74 G" in si and "params (SI)" in si
    assert "why 12·L·D² differs" in table
    markdown = ok("params", "llama-7b", "--format", "markdown")
    assert markdown.startswith("## llama-7b") and "| 12·L·D²" in markdown


def test_hf_config_json_fed_unchanged(tmp_path):
    """A published config.json (the preset without its _source) gives the same count, by file or folder."""
    for name in ("llama-2-7b", "qwen2.5-0.5b", "t5-small", "deepseek-v2-lite"):
        folder = tmp_path / name
        folder.mkdir()
        config = {k: v for k, v in model_config(name).items() if k != "_source"}
        (folder / "config.json").write_text(json.dumps(config))
        by_file = json.loads(ok("params", folder / "config.json", "--format", "json"))
        by_folder = json.loads(ok("params", folder, "--format", "json"))
        by_name = json.loads(ok("params", name, "--format", "json"))
        assert by_file["total"] == by_folder["total"] == by_name["total"]


def test_native_spec_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "d_ff": 256,
                                "mlp": "gelu", "tie_embeddings": True}))
    data = json.loads(ok("params", path, "--format", "json"))
    assert data["total"] == 100 * 64 + 2 * (4 * 64 * 64 + 2 * 64 * 256 + 2 * 64) + 64


def test_presets_lists_every_model():
    data = json.loads(ok("presets", "--format", "json"))
    names = {row["name"] for row in data["presets"] if row["kind"] == "model"}
    assert names == set(model_names())
    assert all(row["source"] for row in data["presets"])


def test_unknown_preset_suggests_close_names():
    line = bad("params", "llama-3-9b")
    assert "unknown model preset 'llama-3-9b'" in line and "llama-3-8b" in line


def test_missing_file():
    assert "no such file" in bad("params", "nowhere/config.json")


def test_invalid_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",')
    assert "invalid JSON at line 1" in bad("params", path)


def test_unknown_model_type(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "codegen", "n_embd": 64}))
    # no formula: transformers builds it, but this config's rotary width (64) exceeds its head width (64 / 16 = 4),
    # and its forward fails: one line naming the class, the step and the transformers release
    line = bad("profile", path, "--virtual")
    assert "CodeGenForCausalLM" in line and "(step: forward)" in line and "transformers 5." in line


@pytest.mark.parametrize("changes, message", [
    ({"num_key_value_heads": 5}, "must be a multiple of n_kv_heads (5)"),
    ({"hidden_size": 0}, "config key hidden_size (llmcalc's d_model) must be a positive whole number, got 0"),
    ({"num_hidden_layers": -4},
     "config key num_hidden_layers (llmcalc's n_layers) must be a positive whole number, got -4"),
])
def test_impossible_shapes(tmp_path, changes, message):
    config = {**model_config("llama-2-7b"), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert message in bad("params", path)


def test_bad_option_is_one_line():
    assert "--format" in bad("params", "gpt2", "--format", "xml")


# --- one vocabulary (issue 23): an option means the same in every command that takes it ----------------------

# Options whose default or help differ on purpose, with the reason: their meaning differs by command.
DIFFERENT_ON_PURPOSE = {
    "--gpu": "what the GPU is for: train/infer/serve need one, plan's cluster, layout's network block, memory's fit",
    "--n-gpus": "the total (train 1, compare/report 256, layout required, memory default tp x pp), or one serving "
                "replica (infer, serve)",
    "--mfu": "given (train, plan) or assumed (compare/report, default 0.4)",
    "--tokens": "required by train, 2T assumed by compare/report",
    "--dtype": "which dense peak (train, plan), the run's torch dtype (profile), the matmul's (calibrate)",
    "--recipe": "memory's precision recipes, or the reference model's torch recipes (profile)",
    "--recompute": "layout searches the least that fits; the reference model has no selective mode (profile)",
    "--tp": "the layout's degree, or a sharded profile's (profile)",
    "--input-len": "serve predicts a workload only when given; report --serve sizes for a stated default one",
    "--output-len": "serve predicts a workload only when given; report --serve sizes for a stated default one",
    "--max-concurrency": "serve: offline unless given; report --serve: 64 clients unless given",
    "--max-ttft": "serve: a target only when given; report --serve: a stated default target (2 s)",
    "--max-tpot": "serve: a target only when given; report --serve: a stated default target (50 ms)",
}


def _options() -> dict[str, dict[str, tuple]]:
    """option -> command -> (default, help, type) for every option of every command."""
    out: dict[str, dict[str, tuple]] = {}
    for name, command in cli.commands.items():
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                kind = param.type
                choices = tuple(getattr(kind, "choices", ()) or getattr(kind, "allowed", ()))
                out.setdefault(param.opts[0], {})[name] = (param.default, param.help, type(kind).__name__, choices)
    return out


def test_one_default_and_one_help_text_per_option():
    mixed = {opt: by_command for opt, by_command in _options().items()
             if len(set(by_command.values())) > 1 and opt not in DIFFERENT_ON_PURPOSE}
    assert not mixed, f"define these once in llmcalc/cli/options.py (or list why they differ): {mixed}"
    assert all(len(set(_options()[opt].values())) > 1 for opt in DIFFERENT_ON_PURPOSE), "a reason outlived its option"


def test_zero_defaults_to_1_and_sdpa_means_flash_everywhere():
    options = _options()
    assert set(options["--zero"]) == {"train", "memory", "layout", "compare", "report"}  # layout: it fixes ZeRO
    assert {default for default, *_ in options["--zero"].values()} == {1}
    assert set(options["--attention"]) == {"train", "memory", "profile"}
    train = ("--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", "64", "--global-batch", "512")
    for command, extra in (("train", train), ("memory", ())):
        flash, sdpa = (run(command, "llama-3-8b", *extra, "--format", "json", "--attention", kernel)
                       for kernel in ("flash", "sdpa"))
        assert sdpa.exit_code == 0 and sdpa.stdout == flash.stdout


def test_the_vocabulary_names_the_tables():
    """llmcalc/vocabulary.py (what the CLI offers at start-up) lists the keys of the tables the formulas read."""
    from llmcalc import vocabulary
    from llmcalc.analytic import finetune, memory, pipeline
    from llmcalc.render import tables

    assert tuple(memory.RECIPES) == vocabulary.RECIPE_NAMES
    assert tuple(memory.OPTIMIZERS) == vocabulary.OPTIMIZER_NAMES
    assert vocabulary.OPTIMIZER_IMPLS == memory.OPTIMIZER_IMPLS
    assert tuple(pipeline.SCHEDULES) == vocabulary.SCHEDULES
    assert vocabulary.FINETUNE_METHODS == finetune.METHODS and vocabulary.BASE_DTYPES == finetune.BASE_DTYPES
    assert vocabulary.FORMATS == tables.FORMATS


def test_version_is_the_installed_distributions():
    """`--version` prints llmcalc.__version__ without asking importlib.metadata (start-up); it is the version
    pip installed (pyproject.toml), which importlib.metadata reports."""
    from importlib.metadata import version

    assert ok("--version") == f"llmcalc, version {version('llmcalc')}\n"


def test_every_command_module_is_registered():
    """main.COMMAND_MODULES (what the group imports when a command runs) names every command of every module."""
    import importlib
    import pkgutil

    main = importlib.import_module("llmcalc.cli.main")
    found = {}
    for info in pkgutil.iter_modules(importlib.import_module("llmcalc.cli").__path__):
        module = importlib.import_module(f"llmcalc.cli.{info.name}")
        found.update({command.name: info.name for command in getattr(module, "COMMANDS", ())})
    assert found == main.COMMAND_MODULES and set(found) == set(main.WORKFLOW)
    assert sorted(cli.commands) == sorted(found)
