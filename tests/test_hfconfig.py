"""Reading HF config.json dicts: random configs of every family against transformers, and bad input."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import hf_count, llmcalc_groups

from llmcalc.analytic.params import count_params
from llmcalc.spec import FAMILIES, SpecError, UnknownModelType, spec_from_hf

IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


@st.composite
def heads(draw, max_heads=8):
    """(n_heads, n_kv_heads) with n_kv_heads dividing n_heads: MHA, GQA or MQA."""
    n_heads = draw(st.integers(1, max_heads))
    n_kv = draw(st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0]))
    return n_heads, n_kv


@st.composite
def common(draw):
    n_heads, n_kv = draw(heads())
    head_dim = draw(st.sampled_from([4, 8, 16]))
    return dict(
        num_hidden_layers=draw(st.integers(1, 3)), num_attention_heads=n_heads, num_key_value_heads=n_kv,
        hidden_size=n_heads * draw(st.sampled_from([4, 8, 12])), head_dim=head_dim,
        intermediate_size=draw(st.integers(8, 96)), vocab_size=draw(st.integers(16, 300)),
        tie_word_embeddings=draw(st.booleans()), **IDS,
    )


@st.composite
def family_config(draw, model_type):
    c = draw(common())
    if model_type in ("llama", "olmo", "gemma", "gemma2"):
        c.update(attention_bias=draw(st.booleans()))
        if model_type == "llama":
            c.update(mlp_bias=draw(st.booleans()))
    elif model_type == "mixtral":
        experts = draw(st.integers(2, 6))
        c.update(num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)))
    elif model_type == "gpt_neox":
        del c["head_dim"]
        c.update(hidden_size=c["num_attention_heads"] * 8, attention_bias=draw(st.booleans()),
                 use_parallel_residual=draw(st.booleans()), num_key_value_heads=None)
    elif model_type == "falcon":
        del c["head_dim"]
        new_arch = draw(st.booleans())
        c.update(hidden_size=c["num_attention_heads"] * 8, new_decoder_architecture=new_arch,
                 multi_query=draw(st.booleans()), parallel_attn=draw(st.booleans()), bias=draw(st.booleans()),
                 num_kv_heads=c.pop("num_key_value_heads"), ffn_hidden_size=draw(st.none() | st.integers(8, 96)))
        if new_arch:
            c["num_ln_in_parallel_attn"] = draw(st.sampled_from([None, 1, 2]))
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        n_heads = c["num_attention_heads"]
        experts = draw(st.integers(2, 6))
        c.update(num_key_value_heads=n_heads, q_lora_rank=draw(st.none() | st.integers(4, 24)),
                 kv_lora_rank=draw(st.integers(4, 24)), qk_rope_head_dim=draw(st.sampled_from([4, 8])),
                 qk_nope_head_dim=draw(st.sampled_from([4, 8, 16])), v_head_dim=draw(st.sampled_from([4, 8, 16])),
                 n_routed_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                 n_shared_experts=draw(st.integers(0, 2)), moe_intermediate_size=draw(st.integers(4, 32)),
                 first_k_dense_replace=draw(st.integers(0, c["num_hidden_layers"])), n_group=1, topk_group=1)
        del c["head_dim"]
    return {"model_type": model_type, **c}


@st.composite
def gpt2_config(draw):
    n_heads = draw(st.integers(1, 6))
    return dict(model_type="gpt2", n_layer=draw(st.integers(1, 3)), n_head=n_heads, n_embd=n_heads * 8,
                n_inner=draw(st.none() | st.integers(8, 64)), n_positions=draw(st.integers(8, 64)),
                vocab_size=draw(st.integers(16, 300)), tie_word_embeddings=draw(st.booleans()))


@st.composite
def bert_config(draw):
    n_heads = draw(st.integers(1, 6))
    return dict(model_type="bert", num_hidden_layers=draw(st.integers(1, 3)), num_attention_heads=n_heads,
                hidden_size=n_heads * 8, intermediate_size=draw(st.integers(8, 64)),
                max_position_embeddings=draw(st.integers(8, 64)), type_vocab_size=draw(st.integers(1, 3)),
                vocab_size=draw(st.integers(16, 300)), pad_token_id=0)


@st.composite
def t5_config(draw):
    return dict(model_type="t5", num_layers=draw(st.integers(1, 3)), num_decoder_layers=draw(st.integers(1, 3)),
                num_heads=draw(st.integers(1, 6)), d_kv=draw(st.sampled_from([4, 8])),
                d_model=draw(st.sampled_from([16, 24])),
                d_ff=draw(st.integers(8, 64)), vocab_size=draw(st.integers(16, 300)),
                feed_forward_proj=draw(st.sampled_from(["relu", "gated-gelu", "gated-silu"])),
                relative_attention_num_buckets=draw(st.integers(4, 32)), tie_word_embeddings=True)


@st.composite
def marian_config(draw):
    heads_ = draw(st.integers(1, 4))
    layers = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ffn = draw(st.integers(8, 64))
    vocab = draw(st.integers(16, 300))
    return dict(model_type="marian", d_model=heads_ * 8, encoder_layers=layers[0], decoder_layers=layers[1],
                encoder_attention_heads=heads_, decoder_attention_heads=heads_, encoder_ffn_dim=ffn,
                decoder_ffn_dim=ffn, vocab_size=vocab, decoder_vocab_size=vocab, max_position_embeddings=64,
                activation_function=draw(st.sampled_from(["relu", "gelu", "swish"])), pad_token_id=0,
                eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)


DECODERS = ["llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2", "phi3", "olmo", "gpt_neox", "falcon",
            "deepseek_v2", "deepseek_v3"]
RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(config):
    count = count_params(spec_from_hf(config))
    hf_total, hf_groups = hf_count(config)
    assert count.total == hf_total
    assert llmcalc_groups(count.components) == hf_groups


@pytest.mark.parametrize("model_type", DECODERS)
def test_random_decoder_configs_match_transformers(model_type):
    @RANDOM
    @given(family_config(model_type))
    def check(config):
        _check(config)

    check()


@pytest.mark.parametrize("strategy", [gpt2_config, bert_config, t5_config, marian_config], ids=lambda s: s.__name__)
def test_random_configs_match_transformers(strategy):
    @RANDOM
    @given(strategy())
    def check(config):
        _check(config)

    check()


def test_every_family_is_exercised():
    from test_families import FAMILIES_9  # issue 9's families: tests/test_families.py
    from test_recent_families import RECENT  # issue 22's families: tests/test_recent_families.py

    from llmcalc.spec.hf_ssm import SSM_FAMILIES  # exercised by tests/test_ssm.py

    exercised = (set(DECODERS) | {"gpt2", "bert", "t5", "marian"} | set(FAMILIES_9) | {"kimi_k2"} | set(SSM_FAMILIES)
                 | set(RECENT))
    assert exercised == set(FAMILIES)  # kimi_k2 is deepseek_v3's Family, exercised with it


def test_falcon_multi_query_ignores_the_filled_in_num_kv_heads():
    base = dict(model_type="falcon", hidden_size=64, num_attention_heads=8, num_hidden_layers=1, vocab_size=100)
    assert spec_from_hf({**base, "multi_query": True, "num_kv_heads": 8}).n_kv_heads == 1
    assert spec_from_hf({**base, "multi_query": False}).n_kv_heads == 8
    assert spec_from_hf({**base, "new_decoder_architecture": True, "num_kv_heads": 2}).n_kv_heads == 2


LLAMA = dict(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
             intermediate_size=128, vocab_size=100)


def test_unknown_model_type_names_the_keys_that_would_make_it_work():
    with pytest.raises(SpecError) as err:
        spec_from_hf({**LLAMA, "model_type": "llamalike"})
    message = str(err.value)
    assert "unknown model_type 'llamalike'" in message and "llama" in message
    assert all(key in message for key in ("mlp", "norm", "pos_emb"))


def test_unknown_model_type_with_explicit_keys_counts_like_its_twin():
    twin = count_params(spec_from_hf(LLAMA))
    described = {**LLAMA, "model_type": "llamalike", "mlp": "swiglu", "norm": "rmsnorm", "pos_emb": "rope"}
    assert count_params(spec_from_hf(described)).components == twin.components


@pytest.mark.parametrize("changes, message", [
    (dict(num_key_value_heads=3), r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    (dict(hidden_size=0), r"hidden_size \(llmcalc's d_model\) must be a positive whole number, got 0"),
    (dict(num_hidden_layers=-1), r"num_hidden_layers \(llmcalc's n_layers\) must be a positive whole number, got -1"),
    (dict(hidden_size=None), r"config is missing d_model \(hidden_size/n_embd/n_embed/d_model\)"),
    (dict(hidden_act="tanh"), r"activation 'tanh' in a gated \(gate/up/down\) MLP: no formula"),
])
def test_bad_configs(changes, message):
    with pytest.raises(SpecError, match=message):
        spec_from_hf({**LLAMA, **changes})


def test_marian_with_asymmetric_stacks_has_no_formula():
    """Issue 39: no longer refused for every command; counted by transformers (test_no_formula.py)."""
    with pytest.raises(UnknownModelType, match="no formula for asymmetric encoder and decoder stacks"):
        spec_from_hf(dict(model_type="marian", d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=4, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, vocab_size=50))


def test_ernie_moe_counts_its_frozen_score_correction_bias():
    """ERNIE-4.5-21B-A3B's shape (baidu/ERNIE-4.5-21B-A3B-PT config.json: 28 layers, MoE from layer 1, 64 experts)
    at a tiny width: Ernie4_5_MoeStatics keeps e_score_correction_bias as a frozen parameter of (1, 64) per MoE
    layer, which transformers' num_parameters() counts: 27 x 64 = 1,728, what llmcalc used to miss."""
    config = dict(model_type="ernie4_5_moe", num_hidden_layers=28, hidden_size=32, intermediate_size=48,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=64, moe_num_experts=64, moe_k=6,
                  moe_num_shared_experts=2, moe_intermediate_size=8, moe_layer_start_index=1, moe_layer_interval=1,
                  tie_word_embeddings=True)
    params = count_params(spec_from_hf(config))
    assert params.total == hf_count(config)[0]
    assert params.components["moe/router"] == 27 * (32 * 64 + 64)  # the gate (D x E) and the bias (E) per layer
