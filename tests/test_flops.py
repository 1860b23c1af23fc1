"""FLOPs per operation: torch's FlopCounterMode on transformers models, and published conventions."""

import pytest
from reference import hf_forward_flops

from llmcalc.analytic.flops import forward_ops, step_flops
from llmcalc.analytic.params import count_params
from llmcalc.analytic.rules import crossover, megatron, palm, rules_of_thumb, six_n
from llmcalc.spec import load_model, model_config, spec_of

# One preset per dense family the issue names, plus the encoder and encoder-decoder references.
COUNTED = ["llama-2-7b", "mistral-7b", "qwen2.5-7b", "gemma-2b", "gpt2", "pythia-1.4b", "falcon-7b", "phi-3-mini",
           "olmo-1b", "gemma-2-9b", "bert-base-uncased", "t5-small"]


LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")


def two_layers(config: dict) -> dict:
    """The published config with every stack cut to two layers: the same shapes per block."""
    return {k: (min(v, 2) if k in LAYER_KEYS and isinstance(v, int) else v) for k, v in config.items()}


def check_against_counter(config: dict, seq: int) -> None:
    """Exact forward FLOPs (batch 1, full S²) vs FlopCounterMode on the transformers model; the S²
    terms are the bmm calls of eager attention (T5 adds none of its own)."""
    from llmcalc.spec import spec_from_hf

    spec = spec_from_hf(config)
    measured, per_op = hf_forward_flops(config, 1, seq)
    assert step_flops(spec, 1, seq).forward == pytest.approx(measured, rel=0.005)
    core = sum(v for k, v in forward_ops(spec, 1, seq).items() if k.endswith(("/scores", "/values")))
    assert core == per_op.get("aten.bmm", 0) + per_op.get("aten.baddbmm", 0)


@pytest.mark.parametrize("name", COUNTED)
def test_forward_flops_equal_torch_flop_counter_on_two_layers(name):
    check_against_counter(two_layers(model_config(name)), 256)


@pytest.mark.slow
@pytest.mark.parametrize("name", COUNTED)
def test_forward_flops_equal_torch_flop_counter(name):
    """Full size at seq 2048 (BERT: its 512 positions)."""
    spec = load_model(name)
    check_against_counter(model_config(name), min(2048, spec.max_seq_len or 2048))


def test_forward_flops_scale_with_batch_and_causal_halves_only_the_s2_terms():
    """Llama-2-7B at S = 1024 by hand: QKᵀ over all 32 layers is 32 x 2·H·S²·d_head with H = 32,
    d_head = 128 (full S²) and half that causal; the projections do not change."""
    spec = load_model("llama-2-7b")
    one, four = step_flops(spec, 1, 1024), step_flops(spec, 4, 1024)
    assert four.forward == 4 * one.forward
    full, causal = forward_ops(spec, 1, 1024), forward_ops(spec, 1, 1024, causal=True)
    qk = 32 * 2 * 32 * 1024 * 1024 * 128
    assert full["attention/scores"] == full["attention/values"] == qk
    assert causal["attention/scores"] == causal["attention/values"] == qk // 2
    assert causal["attention/q_proj"] == full["attention/q_proj"] == 32 * 2 * 1024 * 4096 * 4096
    assert causal["mlp/down_proj"] == full["mlp/down_proj"] == 32 * 2 * 1024 * 11008 * 4096


def test_llama_3_8b_per_token_conventions():
    """Published per-token training FLOPs for Llama-3-8B at 8192 tokens (issue #3 figures)."""
    spec = load_model("llama-3-8b")
    count = count_params(spec)
    assert six_n(count) == pytest.approx(4.82e10, rel=1e-3)
    assert palm(count, 8192) == pytest.approx(5.79e10, rel=1e-3)  # torchtitan's convention
    assert megatron(spec, 8192) == pytest.approx(5.15e10, rel=1e-3)  # Megatron-LM / NeMo, causal
    # The exact count reproduces each convention when asked for it.
    assert step_flops(spec, 1, 8192).model_flops_per_token == pytest.approx(palm(count, 8192), rel=1e-4)
    assert step_flops(spec, 1, 8192, causal=True).model_flops_per_token == pytest.approx(megatron(spec, 8192),
                                                                                         rel=1e-12)


def test_gpt3_block_matches_narayanan_formula_exactly():
    """A GPT-3-style block (MHA, F = 4D, plain MLP), B = 1, Narayanan et al. 2021 eq. 3:
    forward 24·B·s·h²·L·(1 + s/6h + V/12Lh); model FLOPs (any recomputation) three times that;
    full recomputation 96·B·s·L·h²·(1 + s/6h + V/16Lh); selective recomputation (Korthikanti et al.
    2022) re-runs only QKᵀ and AV: 2 matmuls of 2·B·s²·h per layer on top of the model FLOPs."""
    spec = spec_of(n_layers=96, d_model=12288, n_heads=96, vocab_size=51200, d_ff=4 * 12288, mlp="gelu",
                   norm="layernorm", pos_emb="learned", n_positions=2048, qkv_bias=True, out_bias=True,
                   mlp_bias=True, tie_embeddings=True)
    s, h, L, V = 2048, 12288, 96, 51200
    model = 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    none, selective, full = (step_flops(spec, 1, s, recompute=r) for r in ("none", "selective", "full"))
    assert none.forward == pytest.approx(model / 3, rel=1e-12)
    for step in (none, selective, full):  # recomputation is hardware work, never model progress
        assert step.model_flops == pytest.approx(model, rel=1e-12)
    assert none.hardware_flops == pytest.approx(model, rel=1e-12)
    assert selective.hardware_flops == pytest.approx(model + L * 2 * 2 * s * s * h, rel=1e-12)
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


# Tiny MoE and MLA configs (the published families' keys, shrunk) for real-tensor FLOP counts: HF's
# eager experts run each expert on the tokens the router sent it, so the counter sees exactly
# tokens x top-k expert passes, whatever the routing, plus the shared experts on every token.
TINY_MOE = {
    "mixtral": dict(model_type="mixtral", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=96, vocab_size=128, num_local_experts=4,
                    num_experts_per_tok=2, tie_word_embeddings=False),
    "deepseek_v2": dict(model_type="deepseek_v2", num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=96, vocab_size=128, q_lora_rank=None,
                        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
                        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, moe_intermediate_size=24,
                        first_k_dense_replace=1, n_group=1, topk_group=1, tie_word_embeddings=False),
    "deepseek_v3": dict(model_type="deepseek_v3", num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=96, vocab_size=128, q_lora_rank=24,
                        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
                        n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1, moe_intermediate_size=24,
                        first_k_dense_replace=1, n_group=2, topk_group=1, tie_word_embeddings=False),
}


@pytest.mark.parametrize("family", sorted(TINY_MOE))
def test_moe_and_mla_forward_flops_equal_torch_flop_counter(family):
    """MoE (routed top-k + shared experts + router) and MLA (low-rank Q, KV latent, decoupled RoPE key)
    forward FLOPs against FlopCounterMode on the transformers model, exactly, at two shapes."""
    from llmcalc.spec import spec_from_hf

    config = TINY_MOE[family]
    spec = spec_from_hf(config)
    for batch, seq in ((1, 7), (2, 16)):
        measured, per_op = hf_forward_flops(config, batch, seq, real=True)
        ops = forward_ops(spec, batch, seq)
        assert sum(ops.values()) == measured, (batch, seq, ops, per_op)
        core = sum(v for k, v in ops.items() if k.endswith(("/scores", "/values")))
        assert core == per_op.get("aten.bmm", 0) + per_op.get("aten.baddbmm", 0)
    # by hand, one token: each SwiGLU expert is 3 matmuls of 2·D·F; the router one of 2·D·E
    one = forward_ops(spec, 1, 1)
    D = config["hidden_size"]
    if family == "mixtral":  # 2 MoE layers, top-2 of 4 experts, F = 96
        assert one["moe/experts"] == 2 * 2 * 3 * 2 * D * 96 and one["moe/router"] == 2 * 2 * D * 4
    else:  # first layer dense, then 2 MoE layers with F = 24
        k, shared, E = config["num_experts_per_tok"], config["n_shared_experts"], config["n_routed_experts"]
        assert one["moe/experts"] == 2 * k * 3 * 2 * D * 24 and one["moe/router"] == 2 * 2 * D * E
        assert one["moe/shared_experts"] == 2 * shared * 3 * 2 * D * 24


def test_decoder_seq_len_against_torch_flop_counter():
    """`llmcalc flops t5-small --seq-len 512 --decoder-seq-len 128`: 512 encoder and 128 decoder tokens,
    against FlopCounterMode on T5 fed inputs of those lengths; tokens = B·(S_enc + S_dec)."""
    import json

    from click.testing import CliRunner

    from llmcalc.cli import cli

    result = CliRunner().invoke(cli, ["flops", "t5-small", "--seq-len", "512", "--decoder-seq-len", "128",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    measured, _ = hf_forward_flops(model_config("t5-small"), 1, 512, decoder_seq=128)
    assert data["forward_flops"] == measured
    assert data["tokens"] == 512 + 128 and data["decoder_seq_len"] == 128
    # decoder self-attention QKᵀ: 2·H·S_dec²·d_head = 2·8·128²·64 per layer, 6 layers; cross-attention 128 x 512
    assert data["ops"]["decoder.attention/scores"] == 6 * 2 * 8 * 128 * 128 * 64
    assert data["ops"]["decoder.cross_attention/scores"] == 6 * 2 * 8 * 128 * 512 * 64


def test_forward_ops_is_the_layer_by_layer_sum_on_every_preset():
    """forward_ops computes each distinct layer (flops._layer_reads) once: the same ops, in the same order, with the
    same values as layer_ops added layer by layer over the whole stack, on every preset (dense, MoE, MLA, hybrid,
    sliding-window, KV-shared, compressed-KV, encoder and encoder-decoder models)."""
    from llmcalc.analytic import flops
    from llmcalc.spec.presets import model_names

    for name in model_names():
        spec = load_model(name)
        if spec.architecture != "decoder":
            continue  # their stacks go through the same _stack; decoder-only presets cover every per-layer field
        for seq, causal in ((4096, False), (32768, True)):
            want: dict[str, int] = {}
            for i in range(spec.n_layers):
                flops._add(want, flops.layer_ops(spec, i, 2, seq, causal))  # as first written
            got = flops._stack(spec, "", spec.n_layers, 2, seq, causal)
            assert list(got.items()) == list(want.items()), name
