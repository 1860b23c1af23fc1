"""Issue 39, item 6: `profile` takes every model. A model without a formula is profiled as transformers builds it
(llmcalc/profiling/hf_profile.py) and held to what `params`, `flops` and `memory` answer for it.

References: `llmcalc flops` / `params` of the same config at the same length and batch (the fallback's counts, which
run a shortened stack: the profile runs every layer); the transformers model built here from the same config on the
meta device (its parameters, a tied head once); torch's FlopCounterMode arithmetic for the train step (backward =
2 x forward for the matmuls, + the QKᵀ a flash-style sdpa backward recomputes: half the sdpa forward).
"""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import cli_json, one_line_error, run  # noqa: E402

CONFIGS = Path(__file__).parent / "configs" / "fallback"
CODEGEN = CONFIGS / "codegen-tiny.json"
SUPER = CONFIGS / "nemotron-3-super-shape.json"
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
         "tie_word_embeddings": True}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def test_virtual_profile_of_a_model_without_a_formula_reports_the_fallbacks_flops_and_a_memory_figure():
    args = ("--seq-len", 64, "--micro-batch", 2)
    profile = cli_json("profile", CODEGEN, "--virtual", *args)
    flops = cli_json("flops", CODEGEN, *args)
    params = cli_json("params", CODEGEN)
    assert profile["mode"] == "virtual" and profile["batch_size"] == 2 and profile["seq_len"] == 64
    assert profile["forward_flops"]["measured"] == profile["forward_flops"]["analytic"] == flops["forward_flops"]
    assert profile["params"]["measured"] == profile["params"]["analytic"] == params["total"]
    step = profile["train_step_flops"]
    assert step["analytic_model"] == flops["total_flops"]
    sdpa = flops["by_aten_op_forward_batch_1"]["_scaled_dot_product_flash_attention_for_cpu"]
    # batch 2 x half the sdpa forward: the QKᵀ its flash-style backward recomputes
    assert step["measured"] == step["analytic_hardware"] == flops["total_flops"] + 2 * sdpa // 2
    groups = {c["name"].split(" / ")[1]: c for c in profile["components"] if c["name"].startswith("forward FLOPs / ")}
    assert {k: c["analytic"] for k, c in groups.items()} == flops["groups"]
    assert all(c["measured"] == c["analytic"] for c in groups.values())
    peak = profile["peak_memory_bytes"]
    assert peak["measured"] > 0 and peak["analytic"] > 0
    assert set(profile["memory_measured"]) >= {"parameters (weights + masters)", "optimizer states"}


def test_the_text_names_the_fallback_once_and_a_part_without_a_formula(tmp_path):
    path = tmp_path / "biased.json"  # NemotronHMoE with mlp_bias: no formula for its biased shared expert
    path.write_text(json.dumps({**json.loads(SUPER.read_text()), "mlp_bias": True}))
    result = run("profile", path, "--virtual", "--seq-len", 64)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("nemotron_h with mlp_bias true in its MoE layers: no formula") == 1
    assert "counted by transformers" in result.stdout and "analytic vs measured" in result.stdout


def test_a_forced_model_keeps_its_tied_head(tmp_path, monkeypatch):
    """Faking the model (`to_empty`) unties the LM head from the embedding; the profile ties them again."""
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    monkeypatch.setenv("LLMCALC_FORCE_TRANSFORMERS", "1")
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in LLAMA.items() if k != "model_type"})
    with torch.device("meta"):
        reference = transformers.AutoModelForCausalLM.from_config(config)
    profile = cli_json("profile", path, "--virtual", "--seq-len", 32)
    assert profile["params"]["measured"] == sum(p.numel() for p in reference.parameters())  # the tied head once
    assert profile["params"]["analytic"] == profile["params"]["measured"]
    assert profile["forward_flops"]["measured"] == cli_json("flops", path, "--seq-len", 32)["forward_flops"]


@pytest.mark.parametrize("argv, words", [
    (["--virtual", "--layers", "1"], "--layers"),
    (["--virtual", "--world-size", "2"], "--world-size"),
    (["--nproc", "2"], "--world-size/--nproc"),
    (["--virtual", "--recompute", "full"], "--recompute full"),
    (["--virtual", "--attention", "eager"], "--attention eager"),
    (["--virtual", "--all-layers"], "--all-layers"),
    (["--device", "cpu", "--compile"], "--compile"),
    (["--device", "cpu", "--counter", "fvcore"], "--counter fvcore"),
    (["--virtual", "--finetune", "lora"], "--finetune"),
])
def test_what_a_model_without_a_formula_cannot_take_is_refused_in_one_line(argv, words):
    line = one_line_error("profile", CODEGEN, *argv)
    assert words in line and "codegen" in line


def test_a_real_cpu_profile_of_a_tiny_model_without_a_formula_runs():
    profile = cli_json("profile", CODEGEN, "--device", "cpu", "--seq-len", 32, "--steps", 1, "--warmup", 0,
                       "--peak-tflops", 1)
    assert profile["mode"] == "real" and profile["step_seconds"] > 0 and profile["recipe"] == "fp32"
    assert profile["forward_flops"]["measured"] == cli_json("flops", CODEGEN, "--seq-len", 32)["forward_flops"]
    assert profile["mfu"] is not None


def test_a_forward_that_needs_values_is_refused_virtually_and_runs_on_the_cpu(tmp_path):
    """JetMoE's expert loop runs the experts that were hit (data-dependent shapes): fake tensors cannot follow it, a
    real CPU run can; its FLOPs are still `flops`' (which runs that forward on real tensors too)."""
    path = tmp_path / "jetmoe.json"
    path.write_text(json.dumps({"model_type": "jetmoe", "num_hidden_layers": 2, "hidden_size": 64,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32,
                                "vocab_size": 1000}))
    line = one_line_error("profile", path, "--virtual", "--seq-len", 32)
    assert "needs tensor values" in line and "--device cpu" in line
    profile = cli_json("profile", path, "--device", "cpu", "--seq-len", 32, "--steps", 1, "--warmup", 0)
    assert profile["forward_flops"]["measured"] == cli_json("flops", path, "--seq-len", 32)["forward_flops"]
