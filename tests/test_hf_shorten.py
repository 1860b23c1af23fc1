"""The forwards on a shortened layer stack (profiling/hf_shorten.py) give what the whole stack gives.

Each config is measured twice by hf_fallback.fallback_count: as shipped (the stack cut to a prefix holding two of
each layer kind, the counts scaled by each prefix layer's multiplicity) and with the shortening off (every layer
run); the records must be equal, key for key: FLOPs by group and op, the KV cache per layer, the decode step, the
saved activations by element size, the routing and heads per layer.
"""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmcalc.profiling import hf_fallback, hf_shorten  # noqa: E402

# DeepSeek-V3: one dense layer, then MoE layers with shared experts (two kinds)
DEEPSEEK_V3 = dict(model_type="deepseek_v3", num_hidden_layers=8, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=160, moe_intermediate_size=32, n_routed_experts=8,
                   num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                   q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                   vocab_size=1000, max_position_embeddings=4096)
# Gemma 3: five sliding-window layers to one global (layer_types), windows the long prefill reaches
GEMMA3 = dict(model_type="gemma3_text", num_hidden_layers=9, hidden_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, sliding_window=32)
# Qwen3-Next: gated DeltaNet layers (conv and recurrent state) with a full-attention layer every fourth, MoE
QWEN3_NEXT = dict(model_type="qwen3_next", num_hidden_layers=12, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, num_experts=4,
                  num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                  linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
LLAMA = dict(model_type="llama", num_hidden_layers=6, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=256, vocab_size=256)


def _whole(monkeypatch):
    shortened = hf_shorten.plan

    def whole(model, config):
        short, _ = shortened(model, config)
        return hf_shorten.Short(short.n, short.n, list(range(short.n)), short.name), None

    monkeypatch.setattr(hf_shorten, "plan", whole)


MODELS = {"deepseek_v3": (DEEPSEEK_V3, 3), "gemma3": (GEMMA3, 6), "qwen3_next": (QWEN3_NEXT, 8), "llama": (LLAMA, 2)}
CALLS = {"flops": (64, False), "memory": (64, True), "infer": (None, True)}
# one pair in the fast tier, the rest slow (a few seconds each: every config is built and run twice)
CASES = [pytest.param(*MODELS[m], *CALLS[c], id=f"{m}-{c}",
                      marks=() if (m, c) == ("deepseek_v3", "memory") else pytest.mark.slow)
         for m in MODELS for c in CALLS]


@pytest.mark.parametrize("hf, run, seq_len, measured", CASES)
def test_shortened_stack_measures_what_the_whole_one_does(monkeypatch, hf, run, seq_len, measured):
    short = hf_fallback.fallback_count(hf, seq_len, measured)
    if measured:
        assert short["measured"].pop("shortened")["run"] == run  # the prefix holding two of each kind
    _whole(monkeypatch)
    whole = hf_fallback.fallback_count(hf, seq_len, measured)
    assert "shortened" not in whole.get("measured", {})
    assert short == whole


def test_layer_kinds_and_multiplicities():
    """DeepSeek-V3 8 layers: [dense, MoE x 7] -> prefix 3 (dense, MoE, MoE), the last MoE standing for six; Gemma 3
    9 layers (layer_types s s s s s f s s s) -> prefix 6 (its one global layer, two sliding ones long before), the
    last sliding layer of the prefix, 4, standing for itself and layers 6, 7 and 8."""
    import torch

    for hf, prefix, multiplicity in ((DEEPSEEK_V3, 3, [1, 1, 6]), (GEMMA3, 6, [1, 1, 1, 1, 4, 1])):
        config = hf_fallback._config(hf)
        with torch.device("meta"):
            model = hf_fallback._build(config)
        short, _ = hf_shorten.plan(model, config)
        assert (short.n, short.prefix, short.multiplicity) == (hf["num_hidden_layers"], prefix, multiplicity)
