"""`compare` answers what people compare 7-8B models for: context length and KV cache per token (from the config
files themselves), serving on a GPU (the same figures `serve` gives, the GPU named, a default one stated), and
prices a training run only when one is asked for (--tokens)."""

import json
from pathlib import Path

import pytest
from clirun import cli_json, run

PRESETS = Path(__file__).resolve().parents[1] / "presets" / "models"
MODELS = ("llama-3-8b", "mistral-7b", "qwen3-8b")
TRAINING = ("training_flops", "gpu_hours", "wall_clock_days", "cost_usd", "memory_per_gpu_bytes", "fits")


def config(model: str) -> dict:
    return json.loads((PRESETS / f"{model}.json").read_text())


def test_compare_shows_context_kv_and_serving_without_pricing_a_run():
    data = cli_json("compare", *MODELS)
    assert data["scenario"]["gpu"] == "h100-sxm"
    for record in data["models"]:
        cfg = config(record["model"])
        assert record["context_length"] == cfg["max_position_embeddings"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        # K and V, every layer, the KV heads, bf16
        assert record["kv_cache_bytes_per_token"] == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] \
            * head_dim * 2
        assert not set(TRAINING) & set(record), record  # no run was asked for
        served = cli_json("serve", record["model"], "--gpu", "h100-sxm", "--n-gpus", record["serve_gpus"],
                          "--max-model-len", 4096)
        assert served["fits"]
        assert record["serve_kv_tokens"] == served["kv_cache_tokens"]
        assert record["serve_concurrency"] == served["max_concurrent_sequences"]
        assert record["serve_tokens_per_second_1"] == pytest.approx(served["throughput"][0]["tokens_per_second"])
        assert record["serve_tokens_per_second"] == pytest.approx(served["throughput"][-1]["tokens_per_second"])
        if record["serve_gpus"] > 1:  # the fewest GPUs that hold one request
            fewer = cli_json("serve", record["model"], "--gpu", "h100-sxm", "--n-gpus", record["serve_gpus"] // 2,
                             "--max-model-len", 4096)
            assert not fewer["fits"] or fewer["max_concurrent_sequences"] < 1
    text = run("compare", *MODELS).stdout
    assert "on h100-sxm" in text and "(the default; --gpu names another)" in text
    assert "give --tokens" in text and "GPU-hours (h)" not in text and "cost (USD)" not in text


def test_compare_prices_training_when_tokens_are_given():
    data = cli_json("compare", "llama-3-8b", "--tokens", "2T", "--gpu", "h200", "--n-gpus", 64)
    (record,) = data["models"]
    train = cli_json("train", "llama-3-8b", "--tokens", "2T", "--gpu", "h200", "--n-gpus", 64, "--mfu", 0.4)
    assert record["gpu_hours"] == pytest.approx(train["gpu_hours"])
    assert record["cost_usd"] == pytest.approx(train["cost_usd"])
    served = cli_json("serve", "llama-3-8b", "--gpu", "h200", "--n-gpus", record["serve_gpus"], "--max-model-len",
                      4096)
    assert record["serve_concurrency"] == served["max_concurrent_sequences"]
    assert "on h200" not in run("compare", "llama-3-8b", "--tokens", "2T", "--gpu", "h200").stdout.splitlines()[0]


def test_a_training_option_prices_the_run_and_sorting_by_a_training_figure_needs_one():
    (record,) = cli_json("compare", "llama-3-8b", "--n-gpus", 64)["models"]
    assert record["gpu_hours"] > 0  # --n-gpus is a training run's option: the run is priced (at --tokens' 2T)
    result = run("compare", "llama-3-8b", "gpt2", "--sort", "gpu_hours")
    assert result.exit_code != 0 and "--sort gpu_hours" in result.output and "--tokens" in result.output
