"""FLOPs per operation: torch's FlopCounterMode on transformers models, and published conventions."""

import pytest

from llmcalc.analytic.flops import forward_ops, step_flops
from llmcalc.analytic.params import count_params
from llmcalc.analytic.rules import crossover, megatron, palm, rules_of_thumb, six_n
from llmcalc.presets import load_model, model_config
from llmcalc.spec import ModelSpec

from reference import hf_forward_flops

# One preset per dense family the issue names, plus the encoder and encoder-decoder references.
COUNTED = ["llama-2-7b", "mistral-7b", "qwen2.5-7b", "gemma-2b", "gpt2", "pythia-1.4b", "falcon-7b", "phi-3-mini",
           "olmo-1b", "gemma-2-9b", "bert-base-uncased", "t5-small"]


@pytest.mark.parametrize("name", COUNTED)
def test_forward_flops_equal_torch_flop_counter(name):
    """Exact forward FLOPs (batch 1, seq 2048, full S²) vs FlopCounterMode on the transformers model."""
    spec = load_model(name)
    seq = min(2048, spec.max_seq_len or 2048)  # BERT has 512 positions
    measured, per_op = hf_forward_flops(model_config(name), 1, seq)
    ours = step_flops(spec, 1, seq).forward
    assert ours == pytest.approx(measured, rel=0.005)
    # The S² terms are the bmm calls of eager attention (T5 adds none of its own).
    core = sum(v for k, v in forward_ops(spec, 1, seq).items() if k.endswith(("/scores", "/values")))
    assert core == per_op.get("aten.bmm", 0) + per_op.get("aten.baddbmm", 0)


def test_forward_flops_scale_with_batch_and_causal_halves_only_the_s2_terms():
    spec = load_model("llama-2-7b")
    one, four = step_flops(spec, 1, 1024), step_flops(spec, 4, 1024)
    assert four.forward == 4 * one.forward
    full, causal = forward_ops(spec, 1, 1024), forward_ops(spec, 1, 1024, causal=True)
    for op in full:
        assert causal[op] == (full[op] // 2 if op.endswith(("/scores", "/values")) else full[op])


def test_recompute_adds_hardware_not_model_flops():
    spec = load_model("llama-2-7b")
    none, sel, full = (step_flops(spec, 1, 4096, recompute=r) for r in ("none", "selective", "full"))
    assert none.model_flops == sel.model_flops == full.model_flops == 3 * none.forward
    assert sel.hardware_flops - none.model_flops == none.groups()["attention S²"]
    head = none.ops["head/lm_head"]
    assert full.hardware_flops == 4 * none.forward - head  # every block re-run, not the LM head


def test_llama_3_8b_per_token_conventions():
    """Published per-token training FLOPs for Llama-3-8B at 8192 tokens (issue #3 figures)."""
    spec = load_model("llama-3-8b")
    count = count_params(spec)
    assert six_n(count) == pytest.approx(4.82e10, rel=1e-3)
    assert palm(count, 8192) == pytest.approx(5.79e10, rel=1e-3)  # torchtitan's convention
    assert megatron(spec, 8192) == pytest.approx(5.15e10, rel=1e-3)  # Megatron-LM / NeMo, causal
    # The exact count reproduces each convention when asked for it.
    assert step_flops(spec, 1, 8192).model_flops_per_token == pytest.approx(palm(count, 8192), rel=1e-4)
    assert step_flops(spec, 1, 8192, causal=True).model_flops_per_token == pytest.approx(megatron(spec, 8192), rel=1e-12)


def test_gpt3_block_matches_narayanan_formula_exactly():
    """A GPT-3-style block (MHA, F = 4D, plain MLP): 24·B·s·h²·L·(1 + s/6h + V/12Lh) forward."""
    spec = ModelSpec(n_layers=96, d_model=12288, n_heads=96, vocab_size=51200, d_ff=4 * 12288, mlp="gelu",
                     norm="layernorm", pos_emb="learned", n_positions=2048, qkv_bias=True, out_bias=True,
                     mlp_bias=True, tie_embeddings=True)
    s, h, L, V = 2048, 12288, 96, 51200
    assert step_flops(spec, 1, s).forward == pytest.approx(24 * s * h * h * L * (1 + s / (6 * h) + V / (12 * L * h)),
                                                           rel=1e-12)
    full = step_flops(spec, 1, s, recompute="full")
    assert full.hardware_flops == pytest.approx(96 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)


def test_crossover_llama_7b():
    """Attention S² (4·D·S per token, full) equals the projections (8·D²) at S = 2D."""
    cross = crossover(load_model("llama-2-7b"))
    assert cross.vs_projections == 2 * 4096
    assert crossover(load_model("llama-2-7b"), causal=True).vs_projections == 4 * 4096
    spec = load_model("llama-2-7b")
    assert cross.vs_block == pytest.approx((8 * 4096**2 + 6 * 4096 * spec.d_ff) / (4 * 4096))


def test_moe_counts_active_experts_only():
    spec = load_model("mixtral-8x7b")
    ops = forward_ops(spec, 1, 1)
    expert = 3 * 2 * 4096 * 14336 * 32  # one SwiGLU expert over 32 layers, one token
    assert ops["moe/experts"] == 2 * expert
    assert ops["moe/router"] == 2 * 4096 * 8 * 32
    # 2N rule vs exact at S=1 (no S² to speak of): only norms and the embedding lookup separate them.
    count = count_params(spec)
    assert sum(ops.values()) == pytest.approx(2 * (count.active_per_token - 32000 * 4096), rel=1e-4)


def test_rules_are_listed_with_their_sources():
    names = [r.name for r in rules_of_thumb(count_params(load_model("llama-3-8b")), 8192)]
    assert names[:3] == ["2N", "6N", "6N + 12·L·H·Q·T"] and any("Megatron" in n for n in names)
    assert megatron(load_model("deepseek-v3"), 4096) is None  # MLA is outside that formula
