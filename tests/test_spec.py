import pytest

from llmcalc.spec import ModelSpec, SpecError, spec_from_dict

BASE = dict(n_layers=2, d_model=64, n_heads=4, vocab_size=100, d_ff=128)


def test_derived_values_are_filled_only_where_absent():
    spec = ModelSpec(**BASE)
    assert (spec.n_kv_heads, spec.d_head, spec.norm_bias) == (4, 16, False)
    explicit = ModelSpec(**BASE, n_kv_heads=2, d_head=32, norm="layernorm", norm_bias=False)
    assert (explicit.n_kv_heads, explicit.d_head, explicit.norm_bias) == (2, 32, False)
    assert explicit.attention_kind == "gqa"
    assert ModelSpec(**BASE, n_kv_heads=1).attention_kind == "mqa"


def test_replace_derives_again():
    spec = ModelSpec(**BASE)
    wider = spec.replace(d_model=128)
    assert wider.d_head == 32 and spec.d_head == 16
    assert spec.replace(d_head=8).d_head == 8


def test_encoder_decoder_defaults_to_symmetric_stacks():
    spec = ModelSpec(**BASE, architecture="encoder-decoder")
    assert spec.n_decoder_layers == 2 and spec.total_layers == 4


@pytest.mark.parametrize("changes, message", [
    (dict(n_kv_heads=3), r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    (dict(d_model=0), r"d_model must be a positive whole number, got 0"),
    (dict(n_layers=-2), r"n_layers must be a positive whole number, got -2"),
    (dict(d_ff=-1), r"d_ff must be a positive whole number"),
    (dict(vocab_size=1.5), r"vocab_size must be a whole number"),
    (dict(d_model=65), r"d_model \(65\) is not a multiple of n_heads \(4\); give d_head"),
    (dict(mlp="swishglu"), r"mlp must be one of swiglu, geglu"),
    (dict(tie_embeddings="yes"), r"tie_embeddings must be true or false"),
    (dict(n_decoder_layers=2), r"only for encoder-decoder"),
    (dict(pos_emb="learned"), r"learned position embeddings need n_positions"),
    (dict(n_experts=8, n_experts_per_token=9), r"between 1 and n_experts \(8\)"),
    (dict(n_experts_per_token=2), r"n_experts is 0"),
    (dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, d_head=32), r"with MLA, d_head"),
    (dict(q_lora_rank=16), r"only used with MLA"),
])
def test_impossible_shapes_name_the_fields(changes, message):
    with pytest.raises(SpecError, match=message):
        ModelSpec(**{**BASE, **changes})


def test_moe_layers_follow_deepseek_rule():
    spec = ModelSpec(**{**BASE, "n_layers": 6}, n_experts=4, n_experts_per_token=2, n_dense_layers=1, moe_layer_freq=2)
    assert [spec.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]
    assert spec.n_moe_layers == 2


def test_native_spec_dict():
    spec = spec_from_dict({**BASE, "_source": "mine"}, "tiny")
    assert spec.name == "tiny" and spec.d_head == 16
    with pytest.raises(SpecError, match="unknown spec keys: hidden"):
        spec_from_dict({**BASE, "hidden": 3})
    with pytest.raises(SpecError, match="missing vocab_size"):
        spec_from_dict({k: v for k, v in BASE.items() if k != "vocab_size"})


def test_replace_keeps_what_the_config_gave():
    """`profile --layers 2` cuts a GQA model to 2 layers; it must stay GQA (the published config's
    num_key_value_heads), and Gemma's given head_dim must stay 256, not d_model / n_heads."""
    from llmcalc.presets import load_model, model_config

    llama = load_model("llama-3.1-405b")
    assert llama.replace(n_layers=2).n_kv_heads == model_config("llama-3.1-405b")["num_key_value_heads"] == 8
    gemma = load_model("gemma-7b")
    assert gemma.replace(n_layers=2).d_head == model_config("gemma-7b")["head_dim"] == 256
    mha = load_model("llama-7b")  # derived values follow a change: MHA stays MHA, d_head = 4096 / 16
    assert (mha.replace(n_heads=16).n_kv_heads, mha.replace(n_heads=16).d_head) == (16, 256)


def test_replace_keeps_a_spec_whose_derived_fields_cannot_be_derived():
    """Nemotron-H with MoE layers and no dense MLP layer has no d_ff: d_ff_expert cannot be derived
    from it, so replace() keeps every given value (it raised 'd_ff_expert must be positive')."""
    from llmcalc.presets import load_model

    spec = load_model("nemotron-3-nano-30b-a3b")
    assert spec.d_ff is None and spec.d_ff_expert == 1856
    same = spec.replace(name="copy")
    assert (same.d_ff_expert, same.d_ff_shared, same.n_kv_heads, same.d_head) == (1856, 3712, 2, 128)
