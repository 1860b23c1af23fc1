"""Windowed attention (sliding-window and chunked layers): the spans llmcalc reads from a config are the layer
types transformers' own config classes lay out, and the (query, key) pairs a causal kernel computes are counted
pair by pair."""

import pytest

from llmcalc.spec import SpecError, model_config, model_names, spec_from_hf, spec_of
from llmcalc.spec.hf import WINDOWED

transformers = pytest.importorskip("transformers")

HF_SPANS = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}


def reference_spans(config: dict) -> tuple[tuple[str, ...] | None, int]:
    """What transformers builds: the config class's layer_types (and its sliding window or chunk size); for
    the classes without layer_types (Mistral, Mixtral, Phi-3, StarCoder2, Qwen3-MoE: one window on every layer
    when sliding_window is set; GPT-Neo: attention_layers), the mask their modelling code applies."""
    cls = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                     if k != "model_type"})
    text = cls.get_text_config() if hasattr(cls, "get_text_config") else cls
    n = text.num_layers if config["model_type"] == "gpt_neo" else text.num_hidden_layers
    if config["model_type"] == "gpt_neo":
        spans = tuple("sliding" if t == "local" else "full" for t in text.attention_layers)
        return (spans if "sliding" in spans else None), text.window_size
    if config["model_type"] == "llama4":
        spans = tuple(HF_SPANS[t] for t in text.layer_types)
        return (spans if "chunked" in spans else None), text.attention_chunk_size
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        spans = tuple(HF_SPANS[t] for t in layer_types)
    else:
        spans = ("sliding",) * n if getattr(text, "sliding_window", None) else ("full",) * n
    window = getattr(text, "sliding_window", None) or 0
    return (spans if "sliding" in spans and window else None), window


WINDOWED_PRESETS = [n for n in model_names() if (model_config(n).get("text_config") or model_config(n)).get(
    "model_type", model_config(n).get("model_type")) in WINDOWED or model_config(n).get("model_type") == "llama4"]


@pytest.mark.parametrize("name", WINDOWED_PRESETS)
def test_preset_spans_are_transformers_layer_types(name):
    config = {k: v for k, v in model_config(name).items() if not k.startswith("_")}
    spec = spec_from_hf(config, name)
    spans, size = reference_spans(config)
    assert spec.attention_spans == spans
    if spans is not None:
        assert (spec.attention_chunk if "chunked" in spans else spec.attention_window) == size


@pytest.mark.parametrize("model_type,changes", [
    ("gemma3_text", {"sliding_window_pattern": 3, "sliding_window": 512}),
    ("gemma2", {"sliding_window": 64}),
    ("cohere2", {"sliding_window_pattern": 2}),
    ("olmo3", {}),
    ("gpt_oss", {"layer_types": ["full_attention", "sliding_attention"] * 3}),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 4}),
    ("qwen3", {"use_sliding_window": True, "max_window_layers": 2}),
    ("qwen2_moe", {"use_sliding_window": True, "max_window_layers": 5}),
    ("mistral", {"sliding_window": 1024}),
    ("mistral", {"sliding_window": None}),
    ("ministral", {}),
    ("phi3", {"sliding_window": 2047}),
    ("starcoder2", {"sliding_window": 4096}),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 256}),
    ("exaone4", {"sliding_window_pattern": 3}),
])
def test_class_rules_match_transformers(model_type, changes):
    config = {"model_type": model_type, "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 128, **changes}
    if model_type == "qwen2_moe":
        config.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48)
    spec = spec_from_hf(config, model_type)
    spans, size = reference_spans(config)
    assert spec.attention_spans == spans
    if spans is not None:
        assert spec.attention_window == size


def _pairs_one_by_one(seq: int, kind: str, size: int) -> int:
    """Count the (query, key) pairs a causal mask of this kind keeps, one query at a time."""
    total = 0
    for q in range(seq):
        if kind == "sliding":
            total += sum(1 for k in range(q + 1) if q - k < size)
        elif kind == "chunked":
            total += sum(1 for k in range(q + 1) if k // size == q // size)
        else:
            total += q + 1
    return total


@pytest.mark.parametrize("kind,size", [("full", 0), ("sliding", 5), ("sliding", 40), ("chunked", 4), ("chunked", 7)])
@pytest.mark.parametrize("seq", [1, 6, 23])
def test_attended_pairs_count_the_mask(kind, size, seq):
    extra = {"sliding": {"attention_window": size}, "chunked": {"attention_chunk": size}}.get(kind, {})
    spec = spec_of(n_layers=1, d_model=16, n_heads=2, vocab_size=32, d_ff=32, attention_spans=(kind,), **extra)
    assert spec.attended_pairs(0, seq) == _pairs_one_by_one(seq, kind, size)
    assert spec.span_tokens(0) == size


@pytest.mark.parametrize("changes,message", [
    ({"attention_spans": ("sliding",) * 2}, "sliding layers need attention_window > 0"),
    ({"attention_spans": ("full",)}, "attention_spans has 1 entries for n_layers=2"),
    ({"attention_spans": ("local", "full"), "attention_window": 4}, "attention_spans may name full, sliding, chunked"),
    ({"attention_window": -1}, "attention_window must be zero or positive"),
])
def test_bad_spans_are_one_line(changes, message):
    with pytest.raises(SpecError, match=message):
        spec_of(n_layers=2, d_model=16, n_heads=2, vocab_size=32, d_ff=32, **changes)


def test_spans_round_trip_through_to_dict():
    spec = spec_from_hf({k: v for k, v in model_config("gpt-oss-20b").items() if not k.startswith("_")}, "x")
    data = spec.to_dict()
    assert data["attention_spans"][:2] == ["sliding", "full"] or data["attention_spans"][:2] == ("sliding", "full")
    assert data["attention_window"] == 128


def _cache_tokens(model, seq: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model(torch.randint(0, 64, (1, seq)), use_cache=True)
    return [layer.keys.shape[2] for layer in out.past_key_values.layers]


@pytest.mark.parametrize("model_type,extra", [
    ("gemma2", {"sliding_window": 8}),
    ("llama4_text", {"attention_chunk_size": 8, "num_local_experts": 2, "interleave_moe_layer_step": 1,
                     "intermediate_size_mlp": 64}),
    ("gpt_oss", {"sliding_window": 6, "num_local_experts": 2, "num_experts_per_tok": 1}),
])
def test_kv_layers_hold_what_transformers_caches(model_type, extra):
    """Per layer, the tokens of K/V transformers' DynamicCache holds after a forward of 5 and of 20 tokens (a
    window caps them) are KvLayer.cached_tokens, and K and V bytes are 2 x KV heads x d_head x 4 B (fp32)."""
    from llmcalc.analytic.inference import kv_layers

    config = {"model_type": model_type, "num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64, "vocab_size": 64, **extra}
    cls = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
    model = transformers.AutoModelForCausalLM.from_config(cls).eval()
    layers = kv_layers(spec_from_hf(config, model_type), kv_dtype="fp32")
    assert all(layer.bytes_per_token == 2 * 1 * 16 * 4 for layer in layers)
    for seq in (5, 20):
        assert _cache_tokens(model, seq) == [layer.cached_tokens(seq) for layer in layers]


@pytest.mark.parametrize("name", [n for n in model_names() if n not in ("bert-base-uncased", "bert-large-uncased")])
def test_kv_layers_sum_to_the_per_token_cache(name):
    from llmcalc.analytic.inference import kv_cache_bytes_per_token_per_gpu, kv_layers, state_bytes_per_sequence
    from llmcalc.spec import load_model

    spec = load_model(name)
    layers = kv_layers(spec)
    assert sum(layer.bytes_per_token for layer in layers) == kv_cache_bytes_per_token_per_gpu(spec)
    assert sum(layer.state_bytes for layer in layers) == pytest.approx(state_bytes_per_sequence(spec))


def test_with_layers_keeps_the_pattern():
    """Cut or extend a windowed model: the spans follow the layer pattern (gpt-oss: sliding, full, ...)."""
    from llmcalc.spec import load_model

    spec = load_model("gpt-oss-20b")
    assert spec.with_layers(3).attention_spans == ("sliding", "full", "sliding")
    longer = spec.with_layers(spec.n_layers + 2)
    assert longer.attention_spans[-2:] == spec.attention_spans[:2] and longer.n_layers == spec.n_layers + 2
