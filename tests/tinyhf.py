"""Tiny Hugging Face configs and a helper that the transformers-path test files share (test_hf_measured.py,
test_measured_step.py): each model type sent through transformers with LLMCALC_FORCE_TRANSFORMERS=1 and held to
llmcalc's own formula on the same config."""

import json
from pathlib import Path

from clirun import cli_json

from llmcalc.fallback import FORCE_ENV

CONFIGS = Path(__file__).parent / "configs" / "fallback"  # shipped configs whose model types have no formula
LLAMA = dict(model_type="llama", num_hidden_layers=4, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=512, vocab_size=256)
# two sliding-window layers (window 32) and one global
GEMMA3 = dict(model_type="gemma3_text", num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, sliding_window=32,
              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
# gated DeltaNet layers (conv and recurrent state) with a full-attention layer every fourth, MoE
QWEN3_NEXT = dict(model_type="qwen3_next", num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, num_experts=4,
                  num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                  linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
# every layer sparse (mlp_only_layers [], decoder_sparse_step 1): top-2 of 8 experts
QWEN3_MOE = dict(model_type="qwen3_moe", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                 num_experts_per_tok=2, vocab_size=1000, max_position_embeddings=4096)


def write_config(tmp_path, hf: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(hf))
    return path


def both_paths(tmp_path, monkeypatch, hf: dict, command: str, *argv) -> tuple[dict, dict]:
    """`command` on config `hf` as JSON, by llmcalc's formula, then through transformers (the forcing switch)."""
    path = write_config(tmp_path, hf)
    analytic = cli_json(command, str(path), *argv)
    monkeypatch.setenv(FORCE_ENV, "1")
    return analytic, cli_json(command, str(path), *argv)
