"""Exact parameter counts, held against transformers models built from the same configs."""

import pytest
from reference import hf_count, llmcalc_groups

from llmcalc.analytic.params import approximations, count_params, reconcile
from llmcalc.spec import load_model, model_config, model_names
from llmcalc.spec.presets import checkpoint_for, checkpoints

PRESETS = model_names()

# Public figures (model cards, papers, HF hub "Model size"): exact values that must come out.
PUBLIC_TOTALS = {
    "gpt2": 124_439_808,  # GPT-2 small, openai-community/gpt2
    "llama-2-7b": 6_738_415_616,  # Llama 2 paper / meta-llama/Llama-2-7b-hf
    "llama-7b": 6_738_415_616,  # LLaMA v1 7B has the same shapes as Llama-2-7B
    "llama-3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B
    "mistral-7b": 7_241_732_096,  # mistralai/Mistral-7B-v0.1
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
    "pythia-1.4b": 1_414_647_808,  # EleutherAI/pythia-1.4b (Biderman et al. 2023, Table 1 "1,414,647,808")
    "bert-base-uncased": 109_482_240,  # BertModel incl. pooler
    "t5-small": 60_506_624,  # T5ForConditionalGeneration, tied head
    "t5-v1.1-base": 247_577_856,  # google/t5-v1_1-base: untied lm_head (HF hub: 248M)
    "pythia-160m": 162_322_944,  # Biderman et al. 2023, Table 1
    "pythia-12b": 11_846_072_320,  # Biderman et al. 2023, Table 1
    "gpt-neox-20b": 20_554_567_680,  # Black et al. 2022, GPT-NeoX-20B paper
    "qwen3-0.6b": 596_049_920,  # KerasHub qwen3_presets.py (keras-team/keras-hub): qwen3_0.6b_en "params"
}
# Gemma report (arXiv 2403.08295) Table 2, non-embedding parameters. (Its embedding figures use a
# padded 256,128-row table; the published config has vocab_size 256,000.)
PUBLIC_NON_EMBEDDING = {"gemma-2b": 1_981_884_416, "gemma-7b": 7_751_248_896}
# Where the reference itself departs from the published checkpoint: the difference, and why.
REFERENCE_DIVERGES = {
    # transformers >= 5 always ties T5's lm_head to the shared embedding (T5Config.__post_init__,
    # huggingface/transformers PR #42815) and reads tie_word_embeddings=false as "don't rescale";
    # the published T5 v1.1 checkpoints carry a separate lm_head of vocab_size x d_model.
    "t5-v1.1-base": 32128 * 768,
    # Mistral3Config's class default ties the head, the config says nothing, and the published checkpoint stores a
    # separate lm_head.weight, which from_pretrained then leaves untied (issue 39): llmcalc counts it.
    "mistral-small-3.1-24b": 131072 * 5120,
}
PUBLIC_ACTIVE = {"mixtral-8x7b": 12_879_925_248}
# Published rounded figures (billions: total, non-embedding; to the digits given), quoted in each preset's _source.
# Qwen2.5-14B's and -32B's cards (14.7B / 13.1B, 32.5B / 31.0B) are below what their own shapes give (14.77B, 32.76B);
# those presets are held to transformers' count alone (test_every_preset_matches_transformers).
MODEL_CARD_BILLIONS = {
    "qwen3-1.7b": (1.72, None),  # KerasHub qwen3_presets.py: "28-layer Qwen3 model with 1.72B parameters"
    "qwen3-4b": (4.0, 3.6),  # Qwen/Qwen3-4B(-Base) model card
    "qwen3-14b": (14.8, 13.2),  # Qwen/Qwen3-14B model card
}
# KerasHub's presets (keras-team/keras-hub llama3_presets.py) count Llama 3.2's output projection apart from the tied
# token embedding: their totals are the checkpoint's plus one V x D table.
KERAS_HUB_UNTIED = {"llama-3.2-3b": 3_606_752_256}  # llama3.2_3b "params"


def test_presets_cover_the_issue():
    required = {
        "llama-7b", "llama-13b", "llama-65b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b",
        "llama-3-70b", "llama-3.1-405b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b", "gpt2", "gpt2-medium",
        "gpt2-large", "gpt2-xl", "mistral-7b", "mixtral-8x7b", "pythia-1.4b", "transformer-base",
    }
    assert required <= set(PRESETS)
    families = {model_config(n)["model_type"] for n in PRESETS}
    assert {"llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2", "phi3", "olmo", "gpt_neox", "falcon",
            "gpt2", "deepseek_v2", "deepseek_v3", "bert", "t5", "marian"} <= families


@pytest.mark.parametrize("name", sorted(PUBLIC_TOTALS))
def test_public_totals(name):
    assert count_params(load_model(name)).total == PUBLIC_TOTALS[name]


@pytest.mark.parametrize("name", sorted(PUBLIC_NON_EMBEDDING))
def test_public_non_embedding(name):
    assert count_params(load_model(name)).non_embedding == PUBLIC_NON_EMBEDDING[name]


@pytest.mark.parametrize("name", sorted(PUBLIC_ACTIVE))
def test_public_active(name):
    assert count_params(load_model(name)).active_per_token == PUBLIC_ACTIVE[name]


@pytest.mark.parametrize("name", sorted(MODEL_CARD_BILLIONS))
def test_model_card_figures(name):
    count = count_params(load_model(name))
    total, non_embedding = MODEL_CARD_BILLIONS[name]
    digits = len(str(total).split(".")[1])
    assert round(count.total / 1e9, digits) == total
    if non_embedding is not None:
        assert round(count.non_embedding / 1e9, len(str(non_embedding).split(".")[1])) == non_embedding


@pytest.mark.parametrize("name", sorted(KERAS_HUB_UNTIED))
def test_keras_hub_totals_with_the_tied_head_apart(name):
    count = count_params(load_model(name))
    assert count.spec.tie_embeddings
    assert count.total + count.spec.vocab_size * count.spec.d_model == KERAS_HUB_UNTIED[name]


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_matches_transformers(name):
    """total == the tensors transformers' save_pretrained writes of the model from the same config (parameters,
    frozen ones and persistent buffers), and per group too."""
    count = count_params(load_model(name))
    hf_total, hf_groups = hf_count(model_config(name))
    diverges = REFERENCE_DIVERGES.get(name, 0)
    assert count.total == hf_total + diverges
    groups = llmcalc_groups(count.components)
    if diverges:
        groups["head"] -= diverges
    assert {k: v for k, v in groups.items() if v} == hf_groups


# Listed checkpoints whose config.json differs from their preset's (presets/checkpoints.json "config"): the changed
# keys applied, the count still transformers' own of that config.
CHANGED_CHECKPOINTS = sorted(c.repo for c in checkpoints().values() if c.config)


@pytest.mark.parametrize("repo", CHANGED_CHECKPOINTS)
def test_listed_checkpoints_match_transformers(repo):
    count = count_params(load_model(repo))
    assert count.spec.name == checkpoint_for(repo).name
    assert count.total == hf_count(model_config(repo))[0]


@pytest.mark.parametrize("name", PRESETS)
def test_reconciliation_adds_up_to_the_exact_total(name):
    count = count_params(load_model(name))
    terms = reconcile(count)
    assert terms[0] == ("12·L·D²", 12 * count.spec.total_layers * count.spec.d_model**2)
    assert sum(value for _, value in terms) == count.total


def test_llama_7b_twelve_l_d_squared():
    """The figure the seed tables quote: 12·L·D² = 6.44 G for LLaMA-7B against 6.74 G exact."""
    count = count_params(load_model("llama-7b"))
    twelve, with_embeddings, full = approximations(count)
    assert round(twelve.value / 1e9, 2) == 6.44 and round(count.total / 1e9, 2) == 6.74
    assert twelve.compared_with == "non_embedding" and twelve.rel_error < 0
    # L·(4D² + 3·D·F) + 2·V·D misses only the norms (2 per block + final, D each).
    assert count.total - full.value == (2 * 32 + 1) * 4096
    terms = dict(reconcile(count))
    assert terms["token embedding (V·D)"] == terms["LM head, untied (V·D)"] == 32000 * 4096


def test_tied_head_counted_once():
    tied = count_params(load_model("gpt2"))
    assert "head/lm_head" not in tied.components
    assert tied.non_embedding == tied.total - 50257 * 768 - 1024 * 768


# DeepSeek's published totals and activated parameters (two significant figures). DeepSeek counts
# the output head but not the input-embedding lookup in "activated"; Mixtral's 12.9B counts both.
DEEPSEEK = {
    "deepseek-v2-lite": (15.7e9, 2.4e9),  # arXiv 2405.04434, appendix B
    "deepseek-v2": (236e9, 21e9),  # arXiv 2405.04434, abstract
    "deepseek-v3": (671e9, 37e9),  # arXiv 2412.19437, abstract (main model, without the 14B MTP module)
}


@pytest.mark.parametrize("name", sorted(DEEPSEEK))
def test_deepseek_published_total_and_activated(name):
    count = count_params(load_model(name))
    total, activated = DEEPSEEK[name]
    assert count.total == pytest.approx(total, rel=0.005)
    assert count.active_per_token - count.components["embedding/tokens"] == pytest.approx(activated, rel=0.025)
    assert count.active_per_token < count.total


def test_dense_models_are_fully_active():
    dense = count_params(load_model("llama-2-7b"))
    assert dense.active_per_token == dense.total


def test_encoder_decoder_2017_transformer():
    """Transformer-base (Vaswani et al. 2017): the paper's Table 3 says 65M; the exact count is 63.1M."""
    count = count_params(load_model("transformer-base"))
    assert count.components["embedding/tokens"] == 37000 * 512  # shared by encoder, decoder and softmax
    assert "head/lm_head" not in count.components
    assert round(count.total / 1e6, 1) == 63.1
    assert count.components["decoder.cross_attention/q_proj"] == 6 * 512 * 512


def test_layer_shapes_are_what_the_per_layer_methods_say():
    """params._layer_shapes asks a per-layer method only where the spec varies by layer (issue 24); every answer is the
    method's, for every non-hybrid preset's stacks."""
    from llmcalc.analytic.params import _layer_shapes
    from llmcalc.spec import load_model, model_names

    varied = set()
    for name in model_names():
        spec = load_model(name)
        if spec.is_hybrid:
            continue
        for n in {spec.n_layers, spec.n_decoder_layers} - {0}:
            shapes = [(spec.is_moe_layer(i), spec.attention_span(i), spec.kv_shared(i), spec.has_indexer(i),
                       spec.compression(i), i < spec.moe_hash_layers) for i in range(n)]
            assert _layer_shapes(spec, n) == shapes, name
            varied |= {k for k in range(6) if len({s[k] for s in shapes}) > 1}
    assert varied == {0, 1, 2, 3, 4, 5}  # the presets vary every part somewhere


def test_mistral_small_counts_the_lm_head_its_checkpoint_ships():
    """Issue 39: Mistral-Small-3.1-24B's config.json (presets/, verbatim) has no tie_word_embeddings key at either
    level;
    Mistral3Config's default (true) would tie, but the checkpoint stores lm_head.weight apart and transformers'
    from_pretrained, finding both tensors with different values, does not tie them. llmcalc counts the text model the
    checkpoint ships: the language model and head of Mistral3ForConditionalGeneration built untied, 23.57 B (the
    model card's 24 B = 23.57 B text + 0.44 B vision)."""
    config = model_config("mistral-small-3.1-24b")
    assert "tie_word_embeddings" not in config and "tie_word_embeddings" not in config["text_config"]
    untied, _ = hf_count({**config, "tie_word_embeddings": False})
    count = count_params(load_model("mistral-small-3.1-24b"))
    assert count.total == untied == 23_572_403_200
    assert count.components["head/lm_head"] == 131072 * 5120
    assert any("a separate lm_head" in note for note in load_model("mistral-small-3.1-24b").notes)
