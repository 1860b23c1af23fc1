"""Issue 9: today's decoder families against transformers built from the same config.

Per family, Hypothesis draws tiny configs (within what the HF config class accepts); for each, the
exact parameter count (total and per group) must equal sum(p.numel()) of the transformers model on
the meta device, and llmcalc's forward FLOPs must equal torch's FlopCounterMode on one forward of
that model (eager attention, full S², seq 512) within 0.5 %.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import hf_count, hf_forward_flops, llmcalc_groups

from llmcalc.analytic.flops import step_flops
from llmcalc.analytic.params import count_params
from llmcalc.spec import FAMILIES, spec_from_hf

IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
B = st.booleans()


@st.composite
def heads(draw, max_heads=4):
    n_heads = draw(st.integers(1, max_heads))
    n_kv = draw(st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0]))
    return n_heads, n_kv


@st.composite
def llama_like(draw, head_dim=True):
    """num_hidden_layers / hidden_size / num_attention_heads / num_key_value_heads / head_dim ..."""
    n_heads, n_kv = draw(heads())
    c = dict(num_hidden_layers=draw(st.integers(1, 3)), num_attention_heads=n_heads, num_key_value_heads=n_kv,
             hidden_size=n_heads * draw(st.sampled_from([8, 16])), intermediate_size=draw(st.integers(8, 64)),
             vocab_size=draw(st.integers(16, 128)), max_position_embeddings=1024, **IDS)
    if head_dim:
        c["head_dim"] = draw(st.sampled_from([8, 16]))
    if draw(B):  # absent: the family's HF default applies (Gemma 3, Cohere, SmolLM3 tie)
        c["tie_word_embeddings"] = draw(B)
    return c


@st.composite
def moe_keys(draw, c, experts_key="num_experts", width_key="moe_intermediate_size"):
    experts = draw(st.integers(2, 5))
    c.update({experts_key: experts, "num_experts_per_tok": draw(st.integers(1, experts))})
    if width_key:
        c[width_key] = draw(st.integers(4, 24))
    return c


@st.composite
def family_config(draw, model_type):
    t = model_type
    if t in ("qwen3", "olmo2", "olmo3", "granite", "smollm3", "hunyuan_v1_dense", "ministral", "exaone4",
             "gemma3_text", "cohere2"):
        c = draw(llama_like())
        if t not in ("ministral", "exaone4"):
            c["attention_bias"] = draw(B)
        if t in ("granite", "smollm3"):
            c["mlp_bias"] = draw(B)
    elif t == "cohere":
        c = draw(llama_like(head_dim=False))
        c.update(attention_bias=draw(B), use_qk_norm=draw(B))
    elif t == "nemotron":  # Nemotron-4: relu2 up/down MLP, LayerNorm1P, partial rotary
        c = draw(llama_like())
        c.update(attention_bias=draw(B), mlp_bias=draw(B), partial_rotary_factor=0.5)
    elif t in ("glm", "glm4"):
        c = draw(llama_like())
        c["attention_bias"] = draw(B)
    elif t in ("ernie4_5", "seed_oss", "starcoder2"):
        c = draw(llama_like())
        if t == "seed_oss":
            c.update(attention_bias=draw(B), attention_out_bias=draw(B), mlp_bias=draw(B))
        else:
            c["use_bias"] = draw(B)
        if t == "starcoder2":
            del c["head_dim"]
    elif t == "stablelm":
        c = draw(llama_like(head_dim=False))
        c.update(use_qkv_bias=draw(B), qk_layernorm=draw(B), use_parallel_residual=draw(B))
    elif t == "phi":
        c = draw(llama_like(head_dim=False))
        c.update(qk_layernorm=draw(B), partial_rotary_factor=0.5)
    elif t in ("qwen3_moe", "qwen2_moe"):
        c = draw(moe_keys(draw(llama_like())))
        layers = c["num_hidden_layers"]
        c.update(decoder_sparse_step=draw(st.integers(1, 2)),
                 mlp_only_layers=draw(st.lists(st.integers(0, layers - 1), max_size=2, unique=True)))
        if t == "qwen2_moe":
            c.update(shared_expert_intermediate_size=draw(st.integers(4, 32)), qkv_bias=draw(B))
            del c["head_dim"]
        else:
            c["attention_bias"] = draw(B)
    elif t == "olmoe":
        c = draw(moe_keys(draw(llama_like(head_dim=False)), width_key=None))
    elif t in ("granitemoe", "granitemoeshared", "phimoe"):
        c = draw(moe_keys(draw(llama_like(head_dim=False)), "num_local_experts", None))
        if t == "granitemoeshared":
            c["shared_intermediate_size"] = draw(st.sampled_from([0, 8, 24]))
        if t == "phimoe":
            c.update(attention_bias=draw(B), lm_head_bias=draw(B))
    elif t == "gpt_oss":
        c = draw(moe_keys(draw(llama_like()), "num_local_experts", None))
        layers = c["num_hidden_layers"]
        c["layer_types"] = [("sliding_attention", "full_attention")[i % 2] for i in range(layers)]
        c["sliding_window"] = 64
    elif t == "llama4_text":
        c = draw(moe_keys(draw(llama_like()), "num_local_experts", None))
        c.update(intermediate_size_mlp=draw(st.integers(8, 64)), interleave_moe_layer_step=draw(st.integers(1, 2)),
                 attention_bias=draw(B), attention_chunk_size=128)
    elif t == "glm4_moe":
        c = draw(llama_like())
        experts = draw(st.integers(2, 5))
        c.update(n_routed_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                 n_shared_experts=draw(st.integers(0, 2)), moe_intermediate_size=draw(st.integers(4, 24)),
                 first_k_dense_replace=draw(st.integers(0, c["num_hidden_layers"])), n_group=1, topk_group=1,
                 attention_bias=draw(B), use_qk_norm=draw(B))
    elif t == "ernie4_5_moe":
        c = draw(llama_like())
        experts = draw(st.integers(2, 5))
        layers = c["num_hidden_layers"]
        c.update(moe_num_experts=experts, moe_k=draw(st.integers(1, experts)),
                 moe_num_shared_experts=draw(st.integers(0, 2)), moe_intermediate_size=draw(st.integers(4, 24)),
                 moe_layer_start_index=draw(st.integers(0, layers - 1)), moe_layer_interval=draw(st.integers(1, 2)))
    elif t == "hunyuan_v1_moe":
        c = draw(moe_keys(draw(llama_like()), "num_experts", None))  # HF needs head_dim given
        c["moe_topk"] = c.pop("num_experts_per_tok")
        c["attention_bias"] = draw(B)
    elif t == "gptj":
        n_heads = draw(st.integers(1, 4))
        c = dict(n_layer=draw(st.integers(1, 3)), n_head=n_heads, n_embd=n_heads * 16, rotary_dim=8,
                 n_inner=draw(st.none() | st.integers(8, 64)), n_positions=1024, vocab_size=draw(st.integers(16, 128)))
    elif t == "gpt_neo":
        n_heads = draw(st.integers(1, 4))
        layers = draw(st.integers(1, 3))
        c = dict(num_layers=layers, num_heads=n_heads, hidden_size=n_heads * 8,
                 attention_types=[[["global"], layers]], intermediate_size=draw(st.none() | st.integers(8, 64)),
                 max_position_embeddings=1024, vocab_size=draw(st.integers(16, 128)), window_size=32)
    elif t == "opt":
        n_heads = draw(st.integers(1, 4))
        d = n_heads * 8
        c = dict(num_hidden_layers=draw(st.integers(1, 3)), num_attention_heads=n_heads, hidden_size=d,
                 ffn_dim=draw(st.integers(8, 64)), vocab_size=draw(st.integers(16, 128)), max_position_embeddings=600,
                 word_embed_proj_dim=draw(st.sampled_from([d, 8, 24])), do_layer_norm_before=draw(B),
                 enable_bias=draw(B), **IDS)
    elif t == "bloom":
        n_heads = draw(st.integers(1, 4))
        width_key = draw(st.sampled_from(["hidden_size", "n_embed"]))  # published BLOOM configs say n_embed
        c = {"n_layer": draw(st.integers(1, 3)), "n_head": n_heads, width_key: n_heads * 8,
             "vocab_size": draw(st.integers(16, 128))}
    elif t == "gpt_bigcode":
        n_heads = draw(st.integers(1, 4))
        c = dict(n_layer=draw(st.integers(1, 3)), n_head=n_heads, n_embd=n_heads * 8, multi_query=draw(B),
                 n_inner=draw(st.none() | st.integers(8, 64)), n_positions=1024, vocab_size=draw(st.integers(16, 128)))
    elif t == "mpt":
        n_heads = draw(st.integers(1, 4))
        c = dict(n_layers=draw(st.integers(1, 3)), n_heads=n_heads, d_model=n_heads * 8, max_seq_len=1024,
                 vocab_size=draw(st.integers(16, 128)), expansion_ratio=4)
    elif t == "dbrx":
        n_heads, n_kv = draw(heads())
        experts = draw(st.integers(2, 4))
        c = dict(n_layers=draw(st.integers(1, 3)), n_heads=n_heads, d_model=n_heads * 8, max_seq_len=1024,
                 vocab_size=draw(st.integers(16, 128)), attn_config=dict(kv_n_heads=n_kv, rope_theta=10000.0,
                                                                         clip_qkv=8.0),
                 ffn_config=dict(ffn_hidden_size=draw(st.integers(8, 32)), moe_num_experts=experts,
                                 moe_top_k=draw(st.integers(1, experts))))
    else:
        raise AssertionError(f"no strategy for {t}")
    return {"model_type": t, **c}


FAMILIES_9 = ["qwen3", "qwen3_moe", "qwen2_moe", "gemma3_text", "llama4_text", "gpt_oss", "olmo2", "olmo3",
              "olmoe", "granite", "granitemoe", "granitemoeshared", "phi", "phimoe", "gptj", "gpt_neo", "opt",
              "bloom", "gpt_bigcode", "starcoder2", "stablelm", "cohere", "cohere2", "mpt", "dbrx", "glm", "glm4",
              "glm4_moe", "ernie4_5", "ernie4_5_moe", "exaone4", "smollm3", "seed_oss", "hunyuan_v1_dense",
              "hunyuan_v1_moe", "ministral", "nemotron"]
PARAMS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOPS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_issue_9_family_is_known():
    assert set(FAMILIES_9) | {"kimi_k2"} <= set(FAMILIES)


@pytest.mark.parametrize("model_type", FAMILIES_9)
def test_params_match_transformers(model_type):
    @PARAMS
    @given(family_config(model_type))
    def check(config):
        count = count_params(spec_from_hf(config))
        hf_total, hf_groups = hf_count(config)
        assert count.total == hf_total, (config, count.components)
        assert llmcalc_groups(count.components) == hf_groups

    check()


def hf_dense_experts_excess(spec, tokens: int) -> int:
    """Llama4TextMoe runs every expert on every token (hidden_states.repeat(num_experts, 1), then
    bmm), where the model routes each token to its top-k: FlopCounterMode sees (E - k) more
    experts' matmuls per token in each MoE layer than the model's FLOPs that llmcalc counts."""
    per_token_expert = 2 * 3 * spec.d_model * spec.d_ff_expert  # gate, up, down
    return (spec.n_experts - spec.n_experts_per_token) * per_token_expert * tokens * spec.n_moe_layers


SEQ = 512


@pytest.mark.parametrize("model_type", FAMILIES_9)
def test_forward_flops_match_flop_counter(model_type):
    @FLOPS
    @given(family_config(model_type))
    def check(config):
        spec = spec_from_hf(config)
        measured, per_op = hf_forward_flops(config, 1, SEQ, real=spec.is_moe)
        if model_type == "llama4_text":
            measured -= hf_dense_experts_excess(spec, SEQ)
        ours = step_flops(spec, 1, SEQ).forward
        assert ours == pytest.approx(measured, rel=0.005), (config, per_op)

    check()


# --- The current-generation presets: transformers counts are in test_params (every preset); here,
# the published figures each model card quotes, with the rounding it quotes them at. ---
from llmcalc.spec import load_model, model_config  # noqa: E402

G = 1e9
# name: (published total, tolerance, published active or None, tolerance, what the figure includes)
PUBLISHED = {
    "qwen3-8b": (8.2 * G, 0.05 * G, None, 0, "model card: 8.2B"),
    "qwen3-32b": (32.8 * G, 0.05 * G, None, 0, "model card: 32.8B"),
    "qwen3-30b-a3b": (30.5 * G, 0.05 * G, 3.3 * G, 0.06 * G, "model card: 30.5B total, 3.3B activated"),
    "qwen3-235b-a22b": (235 * G, 0.5 * G, 22 * G, 0.5 * G, "model card: 235B total, 22B activated"),
    "gpt-oss-20b": (20.91 * G, 0.005 * G, None, 0, "model card table: 20.91B total"),
    "gpt-oss-120b": (116.83 * G, 0.005 * G, None, 0, "model card table: 116.83B total"),
    "llama-4-maverick": (400 * G, 1 * G, 17 * G, 0.5 * G, "model card: 400B total, 17B active"),
    "llama-4-scout": (None, 0, 17 * G, 0.5 * G, "model card: 17B active (its 109B total includes the vision tower)"),
    "deepseek-v3.1": (671 * G, 0.5 * G, 37 * G, 0.6 * G, "model card: 671B total, 37B activated (MTP excluded)"),
    "kimi-k2": (1000 * G, 50 * G, 32 * G, 1 * G, "model card: 1T total, 32B activated"),
    "olmo-2-7b": (7.3 * G, 0.05 * G, None, 0, "HF hub: 7.3B"),
    "smollm3-3b": (3.08 * G, 0.005 * G, None, 0, "HF hub: 3.08B"),
    "gemma-3-27b": (27 * G, 0.5 * G, None, 0, "Gemma 3 report: 27B (text); the vision tower is left out"),
    "glm-4.5": (355 * G, 0.02 * 355 * G, None, 0, "model card: 355B total (incl. its MTP layer, ~4B, not built)"),
}



def test_nemotron_4_presets_match_their_papers():
    """Nemotron-4 340B (arXiv 2406.11704, Table 1): 9.4B embedding and 331.6B non-embedding parameters; Nemotron-4
    15B (arXiv 2402.16819, Table 1): 12.5B non-embedding, and "3.2B" embedding, which is 2 x 256,000 x 6,144 =
    3.146B (input table plus untied output layer, as the papers count it) rounded twice (3.146 -> 3.15 -> 3.2)."""
    for name, embedding, non_embedding in (("nemotron-4-15b", 3.15 * G, 12.5 * G),
                                           ("nemotron-4-340b", 9.4 * G, 331.6 * G)):
        count = count_params(load_model(name))
        assert abs(count.total - count.non_embedding - embedding) <= 0.05 * G, name
        assert abs(count.non_embedding - non_embedding) <= 0.05 * G, name
    assert count_params(load_model("nemotron-4-15b")).components["embedding/tokens"] == 256_000 * 6_144


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_current_presets_match_published_figures(name):
    total, tol, active, active_tol, _ = PUBLISHED[name]
    count = count_params(load_model(name))
    if total is not None:
        assert abs(count.total - total) <= tol, count.total
    if active is not None:
        assert abs(count.active_per_token - active) <= active_tol, count.active_per_token


def test_gpt_oss_active_is_the_model_card_figure_plus_the_input_embedding():
    """gpt-oss model card: 5.13B active (120b), 3.61B (20b), counting the unembedding but not the
    embedding table; llmcalc's active_per_token includes both (as Mixtral's 12.9B)."""
    for name, card in (("gpt-oss-120b", 5.13 * G), ("gpt-oss-20b", 3.61 * G)):
        count = count_params(load_model(name))
        assert abs(count.active_per_token - count.components["embedding/tokens"] - card) <= 0.005 * G


def test_kimi_k2_total_matches_the_published_checkpoint_listing():
    """moonshotai/Kimi-K2-Instruct's 61 safetensors files hold 1,026,470,731,056 elements (a stored
    model-info report's weight listing of that checkpoint). They are the tensors llmcalc counts (the routers'
    e_score_correction_bias buffers included: issue 39, parameters are what the checkpoint stores) plus the
    FP8 block scales (weight_scale_inv, one per 128x128 block) and the rotary inv_freq buffer the remote
    code saved in each layer (transformers' is not persistent). Shapes as listed, by hand:"""
    attention_scales = 5 * 56 + 128 * 4 + 56 * 64 + 12 * 56 + 96 * 12  # kv_a, kv_b, o, q_a, q_b
    inv_freq = 56
    dense_mlp_scales = 3 * 144 * 56  # layer 0: gate, up, down
    expert_scales = 3 * 16 * 56  # per routed or shared expert: gate, up, down
    moe_layers, experts = 60, 384
    not_parameters = (61 * (attention_scales + inv_freq) + dense_mlp_scales
                      + moe_layers * (experts + 1) * expert_scales)
    assert count_params(load_model("kimi-k2")).total + not_parameters == 1_026_470_731_056


def test_moe_active_per_token_by_hand():
    """Llama-4-Maverick: MoE every other layer (24 of 48) with 128 experts top-1 and a shared
    expert; a token skips 127 routed experts of 3·5120·8192 in each of the 24 MoE layers."""
    count = count_params(load_model("llama-4-maverick"))
    assert count.spec.n_moe_layers == 24 and count.spec.is_moe_layer(1) and not count.spec.is_moe_layer(0)
    assert count.total - count.active_per_token == 127 * 3 * 5120 * 8192 * 24
    # GLM-4.5: 3 dense first layers, 160 experts top-8 plus a shared one: skips 152 per MoE layer.
    glm = count_params(load_model("glm-4.5"))
    assert glm.total - glm.active_per_token == 152 * 3 * 5120 * 1536 * (92 - 3)


def test_multimodal_and_quantized_configs_say_what_is_counted():
    gemma = load_model("gemma-3-27b")
    assert gemma.tie_embeddings and gemma.vocab_size == 262_208  # Gemma3TextConfig defaults
    assert any("vision tower" in n for n in gemma.notes)
    assert any("unquantized" in n for n in load_model("gpt-oss-120b").notes)


def test_omitted_tying_takes_the_family_default():
    """Gemma 3 and Cohere tie when the config omits the key; Qwen3 does not."""
    base = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                intermediate_size=64, vocab_size=100)
    for model_type, tied in (("gemma3_text", True), ("cohere", True), ("qwen3", False), ("smollm3", True)):
        assert spec_from_hf({"model_type": model_type, **base}).tie_embeddings is tied
        assert count_params(spec_from_hf({"model_type": model_type, **base})).total == hf_count(
            {"model_type": model_type, **base, **IDS})[0]


def _cli_bad(tmp_path, config):
    from click.testing import CliRunner

    from llmcalc.cli import cli
    path = tmp_path / "config.json"
    path.write_text(__import__("json").dumps(config))
    result = CliRunner().invoke(cli, ["params", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    return lines[0]


def test_bad_inputs_are_one_line(tmp_path):
    assert "not a model config" in _cli_bad(tmp_path, {"tokenizer_class": "GPT2Tokenizer", "foo": 1})
    assert "without a text_config" in _cli_bad(tmp_path, {"model_type": "gemma3", "vision_config": {"hidden_size": 8}})


def test_quantized_config_is_counted_with_a_note(tmp_path):
    from click.testing import CliRunner

    from llmcalc.cli import cli
    config = {**model_config("qwen3-8b"), "quantization_config": {"quant_method": "awq", "bits": 4}}
    path = tmp_path / "config.json"
    path.write_text(__import__("json").dumps(config))
    result = CliRunner().invoke(cli, ["params", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = __import__("json").loads(result.stdout)
    assert data["total"] == count_params(load_model("qwen3-8b")).total
    assert any("unquantized" in n for n in data["spec"]["notes"])
