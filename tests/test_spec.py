import dataclasses

import pytest

from llmcalc.spec import MLA, ModelSpec, SpecDraft, SpecError, resolve, spec_from_dict, spec_of

BASE = dict(n_layers=2, d_model=64, n_heads=4, vocab_size=100, d_ff=128)


def test_derived_values_are_filled_only_where_absent():
    spec = spec_of(**BASE)
    assert (spec.n_kv_heads, spec.d_head, spec.norm_bias) == (4, 16, False)
    explicit = spec_of(**BASE, n_kv_heads=2, d_head=32, norm="layernorm", norm_bias=False)
    assert (explicit.n_kv_heads, explicit.d_head, explicit.norm_bias) == (2, 32, False)
    assert explicit.attention_kind == "gqa"
    assert spec_of(**BASE, n_kv_heads=1).attention_kind == "mqa"


def test_resolve_reads_a_draft():
    draft = SpecDraft(**BASE, norm="layernorm")
    assert draft.n_kv_heads is None and draft.norm_bias is None  # a draft says only what it was given
    spec = resolve(draft)
    assert isinstance(spec, ModelSpec) and (spec.n_kv_heads, spec.d_head, spec.norm_bias) == (4, 16, True)
    assert spec == spec_of(**BASE, norm="layernorm")


def test_replace_changes_exactly_the_fields_given():
    """dataclasses.replace on a resolved spec derives nothing again: d_head stays 16 when d_model doubles."""
    spec = spec_of(**BASE)
    wider = dataclasses.replace(spec, d_model=128)
    assert (wider.d_model, wider.d_head, spec.d_head) == (128, 16, 16)
    assert dataclasses.replace(spec, d_head=8).d_head == 8


def test_replace_still_checks():
    spec = spec_of(**BASE)
    with pytest.raises(SpecError, match=r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"):
        dataclasses.replace(spec, n_kv_heads=3)
    hybrid = spec_of(**BASE, layer_types=["mamba2+mlp", "attention+mlp"], ssm_d_inner=128, ssm_d_state=8,
                     ssm_n_heads=4)
    with pytest.raises(SpecError, match="layer_types has 2 entries for n_layers=1"):
        dataclasses.replace(hybrid, n_layers=1)


def test_encoder_decoder_defaults_to_symmetric_stacks():
    spec = spec_of(**BASE, architecture="encoder-decoder")
    assert spec.n_decoder_layers == 2 and spec.total_layers == 4
    decoder = spec_of(**BASE)
    assert decoder.n_decoder_layers == 0 and decoder.total_layers == 2


@pytest.mark.parametrize("changes, message", [
    (dict(n_kv_heads=3), r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    (dict(d_model=0), r"d_model must be a positive whole number, got 0"),
    (dict(n_layers=-2), r"n_layers must be a positive whole number, got -2"),
    (dict(d_ff=-1), r"d_ff must be a positive whole number"),
    (dict(d_ff=None), r"d_ff must be a positive whole number; none is given"),
    (dict(vocab_size=1.5), r"vocab_size must be a whole number"),
    (dict(d_model=65), r"d_model \(65\) is not a multiple of n_heads \(4\); give d_head"),
    (dict(mlp="swishglu"), r"mlp must be one of swiglu, geglu"),
    (dict(tie_embeddings="yes"), r"tie_embeddings must be true or false"),
    (dict(n_decoder_layers=2), r"only for encoder-decoder"),
    (dict(pos_emb="learned"), r"learned position embeddings need n_positions"),
    (dict(n_experts=8, n_experts_per_token=9), r"between 1 and n_experts \(8\)"),
    (dict(n_experts_per_token=2), r"n_experts is 0"),
    (dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, d_head=32), r"with MLA, d_head"),
    (dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8), r"v_head_dim must be a positive whole number"),
    (dict(q_lora_rank=16), r"only used with MLA"),
])
def test_impossible_shapes_name_the_fields(changes, message):
    with pytest.raises(SpecError, match=message):
        spec_of(**{**BASE, **changes})


def test_moe_layers_follow_deepseek_rule():
    spec = spec_of(**{**BASE, "n_layers": 6}, n_experts=4, n_experts_per_token=2, n_dense_layers=1, moe_layer_freq=2)
    assert [spec.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]
    assert spec.n_moe_layers == 2


def test_mla_is_a_record():
    spec = spec_of(**BASE, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12)
    assert spec.mla == MLA(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12, q_lora_rank=0)
    assert spec.d_head == spec.mla.qk_head_dim == 16 and spec.is_mla and spec.attention_kind == "mla"
    assert spec_of(**BASE).mla is None


def test_absent_parts_are_zero_and_null_in_to_dict():
    """A part the model lacks is 0 in the resolved spec and null in to_dict (the draft's vocabulary)."""
    spec = spec_of(n_layers=2, d_model=64, n_heads=1, vocab_size=100, layer_types=["mamba2", "mamba2"],
                   ssm_d_inner=128, ssm_d_state=8, ssm_n_heads=4)
    assert (spec.d_ff, spec.d_ff_expert, spec.d_ff_shared, spec.n_positions, spec.ssm_dt_rank, spec.mla) == \
        (0, 0, 0, 0, 0, None)
    flat = spec.to_dict()
    assert list(flat) == [f.name for f in dataclasses.fields(SpecDraft)]
    assert (flat["d_ff"], flat["d_ff_expert"], flat["ssm_dt_rank"], flat["kv_lora_rank"], flat["ssm_d_inner"]) == \
        (None, None, None, None, 128)
    assert resolve(SpecDraft(**flat)) == spec


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
    from llmcalc.spec import load_model, model_config

    llama = load_model("llama-3.1-405b")
    assert dataclasses.replace(llama, n_layers=2).n_kv_heads == model_config("llama-3.1-405b")["num_key_value_heads"]
    gemma = load_model("gemma-7b")
    assert dataclasses.replace(gemma, n_layers=2).d_head == model_config("gemma-7b")["head_dim"] == 256


def test_a_spec_without_a_dense_ffn():
    """Nemotron-H with MoE layers and no dense MLP layer has no d_ff (0): its experts' widths are given."""
    from llmcalc.spec import load_model

    spec = load_model("nemotron-3-nano-30b-a3b")
    assert spec.d_ff == 0 and spec.d_ff_expert == 1856 and spec.to_dict()["d_ff"] is None
    same = dataclasses.replace(spec, name="copy")
    assert (same.d_ff_expert, same.d_ff_shared, same.n_kv_heads, same.d_head) == (1856, 3712, 2, 128)


def _all_values(draft: SpecDraft) -> dict:
    return {f.name: getattr(draft, f.name) for f in dataclasses.fields(draft)}  # compare=False fields too


EDGE_DRAFTS = [  # drafts whose spec may or may not give them back: 0 where the spec's 0 reads back as None, MLA parts
    dict(BASE), dict(BASE, q_lora_rank=0), dict(BASE, q_lora_rank=32), dict(BASE, d_embed=0), dict(BASE, d_embed=32),
    dict(BASE, d_ff=0), dict(BASE, pos_emb="learned", max_seq_len=64, n_positions=0),
    dict(BASE, qk_rope_head_dim=8), dict(BASE, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8),
    dict(BASE, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, q_lora_rank=0),
    dict(BASE, n_experts=4, n_experts_per_token=2, d_ff_expert=0), dict(BASE, ssm_d_inner=0),
    dict(BASE, name="x", notes=("a",), quantization_config={"quant_method": "fp8"}, checkpoint_dtype="bfloat16"),
]


@pytest.mark.parametrize("kwargs", EDGE_DRAFTS)
def test_resolve_skips_only_the_check_it_has_just_made(kwargs):
    """resolve tells the spec not to check again exactly when its to_draft() is the draft resolve checked (every
    field the same), and a spec it returns passes the check of its own to_draft() (what ModelSpec always checks)."""
    from llmcalc.spec.checks import check
    from llmcalc.spec.resolve import derive, round_trips

    filled = derive(SpecDraft(**kwargs))
    try:
        spec = resolve(SpecDraft(**kwargs))
    except SpecError:
        return
    assert round_trips(filled) == (_all_values(spec.to_draft()) == _all_values(filled))
    check(spec.to_draft())


def test_presets_resolve_with_one_check_where_their_draft_round_trips():
    from llmcalc.spec import draft_from_hf, model_config, model_names
    from llmcalc.spec.resolve import derive, round_trips

    skipped = []
    for name in model_names():
        filled = derive(draft_from_hf(model_config(name), name))
        assert round_trips(filled) == (_all_values(resolve(filled).to_draft()) == _all_values(filled)), name
        skipped += [name] if round_trips(filled) else []
    assert "llama-3-8b" in skipped and "deepseek-v3" in skipped and len(skipped) > len(model_names()) // 2


def test_derive_copies_the_draft_as_dataclasses_replace_would():
    """resolve's derive copies a draft's values (issue 24: not SpecDraft's __init__ again); the copy is what
    dataclasses.replace makes, field for field and in order, for every model preset, and the original is untouched."""
    import sys

    from llmcalc import records
    from llmcalc.spec import model_config, model_names
    from llmcalc.spec.hf import draft_from_hf

    module = sys.modules["llmcalc.spec.resolve"]
    plan = records._plan(SpecDraft)
    assert plan is not None and not plan[2] and not hasattr(SpecDraft, "__post_init__")  # replaced's own copy
    seen = 0
    for name in model_names():
        draft = draft_from_hf(model_config(name), name)
        before = dict(vars(draft))
        changes = {"n_kv_heads": 3, "notes": ("x",)} if draft.n_kv_heads is None else {"d_head": 7}
        made, reference = records.replaced(draft, changes), dataclasses.replace(draft, **changes)
        assert type(made) is SpecDraft and list(vars(made).items()) == list(vars(reference).items())
        assert made == reference and hash(made) == hash(reference) and repr(made) == repr(reference)
        assert vars(draft) == before
        filled = module.derive(draft)
        seen += filled != draft
    assert seen  # derive fills something in for some preset
