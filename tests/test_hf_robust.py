"""Issue 39: the transformers fallback across transformers releases and forwards that need tensor values.

A measured record names the transformers and torch it came from and is measured again when either changes; an
exception inside transformers is one line naming the step and the releases llmcalc is tested with (constraints.txt
pins the newest); a forward that calls ``.item()`` (which the meta device and fake tensors cannot run) is measured
on real CPU tensors of the shortened stack, and every command answers as for the same model without the ``.item()``.
"""

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import cli_json, one_line_error  # noqa: E402
from tinyhf import LLAMA, write_config  # noqa: E402

from llmcalc.errors import TESTED_TRANSFORMERS  # noqa: E402
from llmcalc.fallback import FORCE_ENV  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def _records(tmp_path) -> list[Path]:
    return sorted((tmp_path / "cache" / "hf_fallback").glob("*.json"))


def test_tested_releases_hold_the_pinned_one():
    pinned = re.search(r"^transformers==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned and pinned.group(1) in TESTED_TRANSFORMERS


def test_record_names_its_versions_and_another_release_is_measured_again(tmp_path, monkeypatch):
    from importlib import metadata

    import llmcalc.profiling.hf_fallback as hf

    path = write_config(tmp_path, LLAMA)
    monkeypatch.setenv(FORCE_ENV, "1")
    first = cli_json("memory", path, "--seq-len", "128")
    (record,) = _records(tmp_path)
    data = json.loads(record.read_text())
    assert data["transformers_version"] == transformers.__version__
    assert data["torch_version"] == torch.__version__.split("+")[0]
    # a record of another transformers at the same place is not reused: it is measured again and replaced
    record.write_text(json.dumps({**data, "transformers_version": "4.99.0"}))
    calls = []
    real = hf.fallback_count
    monkeypatch.setattr(hf, "fallback_count", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cli_json("memory", path, "--seq-len", "128") == first and calls == [1]
    assert json.loads(record.read_text())["transformers_version"] == transformers.__version__
    # another installed torch is another record
    version = metadata.version
    monkeypatch.setattr(metadata, "version", lambda p: "2.99.0" if p == "torch" else version(p))
    assert cli_json("memory", path, "--seq-len", "128") == first and calls == [1, 1]
    assert len(_records(tmp_path)) == 2


def _mlp_forward(monkeypatch, body):
    from transformers.models.llama import modeling_llama

    original = modeling_llama.LlamaMLP.forward
    monkeypatch.setattr(modeling_llama.LlamaMLP, "forward", lambda self, x: body(original, self, x))


@pytest.mark.parametrize(("argv", "step"), [
    (["flops", "--seq-len", "64"], "step: forward"),
    (["memory", "--seq-len", "64"], "step: cache"),
])
def test_a_failing_forward_names_its_step_and_the_tested_releases(tmp_path, monkeypatch, argv, step):
    def broken(original, self, x):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\nsecond line")

    _mlp_forward(monkeypatch, broken)
    monkeypatch.setenv(FORCE_ENV, "1")
    line = one_line_error(argv[0], write_config(tmp_path, LLAMA), *argv[1:])
    assert step in line and "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in line
    assert all(v in line for v in TESTED_TRANSFORMERS) and "second line" not in line


def test_a_failing_build_names_its_step(tmp_path, monkeypatch):
    from transformers.models.llama import modeling_llama

    def broken(self, *a, **k):
        raise TypeError("unexpected keyword argument 'layer_idx'")

    monkeypatch.setattr(modeling_llama.LlamaMLP, "__init__", broken)
    monkeypatch.setenv(FORCE_ENV, "1")
    line = one_line_error("params", write_config(tmp_path, LLAMA))
    assert "transformers could not build 'llama'" in line and "step: build" in line
    assert "TypeError: unexpected keyword argument 'layer_idx'" in line and TESTED_TRANSFORMERS[-1] in line


COMMANDS = (["params"], ["flops", "--seq-len", "256"], ["memory", "--seq-len", "256"],
            ["infer", "--gpu", "h100-sxm", "--prompt", "256", "--generate", "64"],
            ["train", "--gpu", "h100-sxm", "--n-gpus", "8", "--seq-len", "256", "--tokens", "1e9",
             "--global-batch", "64"])


NOTES = ("notes", "measured_from", "conventions", "prediction_notes", "assumptions")  # words, not figures


def _without_notes(data):
    if isinstance(data, dict):
        return {k: _without_notes(v) for k, v in data.items() if k not in NOTES}
    return data


def test_a_forward_calling_item_is_measured_on_real_tensors(tmp_path, monkeypatch):
    """The reference: the same llama without the `.item()`, measured on fake tensors; the `.item()` (of a detached
    tensor: it saves nothing for backward and runs no FLOP) must change no figure."""
    path = write_config(tmp_path, LLAMA)
    monkeypatch.setenv(FORCE_ENV, "1")
    fake = [cli_json(argv[0], path, *argv[1:]) for argv in COMMANDS]
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "other-cache"))
    seen = []

    def with_item(original, self, x):
        seen.append(x.detach().amax().item())  # "Tensor.item() cannot be called on meta tensors"
        return original(self, x)

    _mlp_forward(monkeypatch, with_item)
    real = [cli_json(argv[0], path, *argv[1:]) for argv in COMMANDS]
    assert seen  # the forwards ran, on values
    for argv, f, r in zip(COMMANDS, fake, real, strict=True):
        assert _without_notes(r) == _without_notes(f), argv[0]
    assert "ran on real CPU tensors" in json.dumps(real[1]) and "real CPU" not in json.dumps(real[0])
    assert "on real CPU bf16 tensors" in real[2]["measured_from"]["activations"]


def test_a_forward_calling_item_past_the_real_run_limit_is_one_line(tmp_path, monkeypatch):
    import llmcalc.profiling.hf_fallback as hf

    _mlp_forward(monkeypatch, lambda original, self, x: original(self, x) * (x.detach().amax().item() * 0 + 1))
    monkeypatch.setattr(hf, "REAL_RUN_BYTES", 1024)
    monkeypatch.setenv(FORCE_ENV, "1")
    line = one_line_error("flops", write_config(tmp_path, LLAMA), "--seq-len", "64")
    assert "needs tensor values" in line and "up to 1.0 KiB" not in line and "step: forward" in line
    assert "real CPU run of 2 of its layers" in line


# --- every command takes every model: compare ------------------------------------------------------------------

SCENARIO = ("--gpu", "h100-sxm", "--seq-len", "256", "--n-gpus", "8")


@pytest.mark.parametrize("config", ["codegen-tiny.json", "arcee-tiny.json"])
def test_compare_takes_a_model_without_a_formula(config):
    """Its figures are those `params`, `flops` and `memory` answer for it under the same scenario."""
    from tinyhf import CONFIGS

    path = CONFIGS / config
    (record,) = cli_json("compare", path, *SCENARIO)["models"]
    params = cli_json("params", path)
    flops = cli_json("flops", path, "--seq-len", "256")
    memory = cli_json("memory", path, "--seq-len", "256", "--gpu", "h100-sxm", "--n-gpus", "8")
    assert (record["params"], record["non_embedding_params"]) == (params["total"], params["non_embedding"])
    assert record["training_flops_per_token"] == flops["flops_per_token"]
    assert record["memory_per_gpu_bytes"] == memory["per_gpu_bytes"] and record["method"] == "transformers"


def test_compare_of_a_forced_llama_beside_its_formula(tmp_path, monkeypatch):
    """llama forced through transformers, beside the same config by llmcalc's formula: the same parameters and KV
    cache per token (2 x 2 KV heads x 64 x 2 B x 4 layers), training FLOPs within the S² convention's rounding."""
    path = write_config(tmp_path, LLAMA)
    (formula,) = cli_json("compare", path, *SCENARIO)["models"]
    monkeypatch.setenv(FORCE_ENV, "1")
    (measured,) = cli_json("compare", path, *SCENARIO)["models"]
    assert measured["params"] == formula["params"] and formula["kv_cache_bytes_per_token"] == 2 * 2 * 64 * 2 * 4
    assert measured["kv_cache_bytes_per_token"] == formula["kv_cache_bytes_per_token"]
    assert measured["training_flops_per_token"] == pytest.approx(formula["training_flops_per_token"], rel=0.02)
    assert measured["fits"] and measured["memory_per_gpu_bytes"] > 0


# --- report ------------------------------------------------------------------------------------------------------


def test_report_renders_a_model_without_a_formula_beside_one_with(tmp_path):
    """The measured model gets its own section (markdown and HTML, and its tables as CSV) with the figures `compare`
    gives it; the sections that need llmcalc's formula are skipped with one stated line; the formula model's
    report is as before."""
    from clirun import run
    from tinyhf import CONFIGS

    out = tmp_path / "report"
    result = run("report", CONFIGS / "codegen-tiny.json", "llama-3-8b", *SCENARIO, "--out", out)
    assert result.exit_code == 0, result.output
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, html):
        assert "Models without a formula" in text and "Skipped for them" in text
        assert "Step time" in text or "step time" in text  # the formula model's sections stay
    (record,) = cli_json("compare", CONFIGS / "codegen-tiny.json", *SCENARIO)["models"]
    table = (out / "tables" / "compare_measured.csv").read_text()
    assert str(record["params"]) in table and (out / "tables" / "codegen-tiny_memory.csv").is_file()


def test_report_of_models_without_a_formula_only(tmp_path):
    from clirun import run
    from tinyhf import CONFIGS

    out = tmp_path / "report"
    result = run("report", CONFIGS / "codegen-tiny.json", CONFIGS / "arcee-tiny.json", *SCENARIO, "--out", out)
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert "codegen-tiny" in html and "arcee-tiny" in html and "Models without a formula" in html
