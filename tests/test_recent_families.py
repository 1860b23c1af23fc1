"""Issue 22: 2026's families against transformers 5.24 built from the same (tiny, random) configs.

For each family Hypothesis draws tiny configs within what its config class accepts, and:
- parameters: every llmcalc component ("group/part") equals the sum of the transformers parameters that component
  names (the model on the meta device; a multimodal checkpoint's class with its vision tower left out), mapped from
  the parameter's module path and the layer's kind (``hf_part``);
- forward FLOPs: llmcalc's forward equals torch's FlopCounterMode on one forward of the transformers model on real
  CPU tensors (eager attention, eager experts: each expert runs on the tokens routed to it), exactly, at a length
  that is not a multiple of the delta rule's chunk nor of DeepSeek-V4's compression windows;
- KV cache: the bytes transformers' cache holds per layer after a forward of two lengths equal kv_layers' bytes
  for that layer (fp32 model, fp32 cache), where llmcalc follows transformers' layout (see ``_layer_bytes``).
"""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reference import build_hf, language_params

from llmcalc.analytic.flops import forward_ops
from llmcalc.analytic.inference import kv_layers
from llmcalc.analytic.params import count_params
from llmcalc.spec import spec_from_hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

B = st.booleans()
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
# A tiny vision tower for the wrappers (left out of every count; built so that the checkpoint's class can be).
VISION = {
    "qwen3_vl": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=None,
                     deepstack_visual_indexes=[]),
    "qwen3_vl_moe": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=None,
                         deepstack_visual_indexes=[]),
    "glm4v_moe": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=None),
    "qwen3_5": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=None,
                    deepstack_visual_indexes=[]),
    "qwen3_5_moe": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=None,
                        deepstack_visual_indexes=[]),
    "mistral3": dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                     image_size=32, patch_size=16),
}
WRAPPER_OF = {"qwen3_vl_text": "qwen3_vl", "qwen3_vl_moe_text": "qwen3_vl_moe", "glm4v_moe_text": "glm4v_moe"}


def _heads(draw, max_heads=4):
    n_heads = draw(st.sampled_from([h for h in (1, 2, 4) if h <= max_heads]))
    return n_heads, draw(st.sampled_from([d for d in (1, 2, 4) if n_heads % d == 0]))


@st.composite
def mla_keys(draw, q_lora=True):
    heads = draw(st.sampled_from([2, 4]))
    return dict(num_attention_heads=heads, num_key_value_heads=heads,
                q_lora_rank=draw(st.integers(4, 24)) if q_lora else draw(st.none() | st.integers(4, 24)),
                kv_lora_rank=draw(st.integers(4, 24)), qk_rope_head_dim=draw(st.sampled_from([4, 8])),
                qk_nope_head_dim=draw(st.sampled_from([4, 8, 16])), v_head_dim=draw(st.sampled_from([4, 8, 16])))


@st.composite
def deepseek_moe(draw, layers):
    experts = draw(st.integers(2, 5))
    return dict(n_routed_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                n_shared_experts=draw(st.integers(1, 2)), moe_intermediate_size=draw(st.integers(4, 24)),
                n_group=1, topk_group=1, first_k_dense_replace=draw(st.integers(0, layers)))


@st.composite
def recent_config(draw, model_type):  # long: one strategy per family, read against its config class
    t = model_type
    layers = draw(st.integers(1, 4))
    c: dict = dict(num_hidden_layers=layers, hidden_size=draw(st.sampled_from([32, 48])),
                   vocab_size=draw(st.integers(16, 120)), intermediate_size=draw(st.integers(8, 48)), **IDS)
    if t in ("deepseek_v32", "glm_moe_dsa", "glm4_moe_lite"):
        c.update(draw(mla_keys(q_lora=t != "glm4_moe_lite")), **draw(deepseek_moe(layers)),
                 attention_bias=draw(B), tie_word_embeddings=draw(B))
        if t != "glm4_moe_lite":
            c.update(index_n_heads=draw(st.sampled_from([1, 2])), index_head_dim=draw(st.sampled_from([8, 16])),
                     index_topk=draw(st.sampled_from([4, 64])))
            c["index_head_dim"] = max(c["index_head_dim"], c["qk_rope_head_dim"])  # the indexer ropes its first dims
        if t == "glm_moe_dsa":
            c["index_topk_pattern"] = "F" + "".join(draw(st.sampled_from("FS")) for _ in range(layers - 1))
        if t != "deepseek_v32" and draw(B):
            c["mlp_layer_types"] = ["dense"] + [draw(st.sampled_from(["dense", "sparse"])) for _ in range(layers - 1)]
    elif t == "deepseek_v4":
        layers = max(layers, 2)
        c.update(num_hidden_layers=layers, num_attention_heads=draw(st.sampled_from([2, 4])), num_key_value_heads=1,
                 head_dim=draw(st.sampled_from([16, 32])), q_lora_rank=draw(st.integers(8, 24)),
                 o_groups=draw(st.sampled_from([1, 2])), o_lora_rank=draw(st.integers(4, 12)),
                 index_n_heads=draw(st.sampled_from([1, 2])), index_head_dim=16,
                 index_topk=draw(st.sampled_from([2, 8])),
                 moe_intermediate_size=draw(st.integers(4, 24)), n_routed_experts=4, num_experts_per_tok=2,
                 sliding_window=draw(st.sampled_from([8, 16])), hc_mult=draw(st.sampled_from([1, 2, 3])),
                 compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
                 qk_rope_head_dim=8, tie_word_embeddings=draw(B),
                 layer_types=[draw(st.sampled_from(["sliding_attention", "compressed_sparse_attention",
                                                    "heavily_compressed_attention"])) for _ in range(layers)],
                 mlp_layer_types=["hash_moe"] + ["moe"] * (layers - 1))
    elif t == "gemma4_text":
        n_heads, n_kv = _heads(draw)
        layers = max(layers, 2)
        shared = draw(st.integers(0, layers - 1))
        types = [draw(st.sampled_from(["sliding_attention", "full_attention"])) for _ in range(layers - 1)]
        types.append("full_attention")
        owned = set(types[:layers - shared])
        if set(types[layers - shared:]) - owned:  # every shared layer's span needs an owner before it
            shared = 0
        k_eq_v = draw(B)
        c.update(num_hidden_layers=layers, num_attention_heads=n_heads, num_key_value_heads=n_kv,
                 head_dim=draw(st.sampled_from([8, 16])), global_head_dim=draw(st.sampled_from([16, 32])),
                 attention_k_eq_v=k_eq_v, sliding_window=draw(st.sampled_from([4, 8])), layer_types=types,
                 num_kv_shared_layers=shared, use_double_wide_mlp=draw(B), attention_bias=draw(B),
                 # transformers 5.24 slices per_layer_inputs before KV-shared layers without checking it exists
                 # (modeling_gemma4.py, the logits_to_keep optimisation): KV sharing is drawn with per-layer inputs,
                 # as the published E-models have them
                 hidden_size_per_layer_input=draw(st.sampled_from([4, 8] if shared else [0, 4, 8])),
                 vocab_size_per_layer_input=c["vocab_size"],
                 enable_moe_block=draw(B), tie_word_embeddings=draw(B))
        if k_eq_v:
            c["num_global_key_value_heads"] = draw(st.sampled_from([d for d in (1, 2) if n_heads % d == 0]))
        if c["enable_moe_block"]:
            c.update(num_experts=4, top_k_experts=draw(st.integers(1, 4)),
                     moe_intermediate_size=draw(st.integers(4, 16)))
    elif t == "minimax_m2":
        n_heads, n_kv = _heads(draw)
        experts = draw(st.integers(2, 5))
        c.update(num_attention_heads=n_heads, num_key_value_heads=n_kv, head_dim=draw(st.sampled_from([8, 16])),
                 num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)), rotary_dim=4,
                 tie_word_embeddings=draw(B))
    elif t in ("ministral3", "qwen3_vl_text", "qwen3_vl_moe_text", "glm4v_moe_text"):
        n_heads, n_kv = _heads(draw)
        c.update(num_attention_heads=n_heads, num_key_value_heads=n_kv, head_dim=draw(st.sampled_from([8, 16])))
        if t == "ministral3":
            c.update(tie_word_embeddings=draw(B), sliding_window=draw(st.sampled_from([None, 8])))
        if t in ("qwen3_vl_text", "qwen3_vl_moe_text", "glm4v_moe_text"):
            c["attention_bias"] = draw(B)
        if t == "qwen3_vl_moe_text":
            experts = draw(st.integers(2, 5))
            c.update(num_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                     moe_intermediate_size=draw(st.integers(4, 24)), decoder_sparse_step=draw(st.integers(1, 2)))
        if t == "glm4v_moe_text":  # M-RoPE sections sum to the rotary half-width: head_dim 16 x 0.5 / 2
            c.update(**draw(deepseek_moe(layers)), partial_rotary_factor=0.5, head_dim=16,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2],
                                      "partial_rotary_factor": 0.5})
        if t in ("qwen3_vl_text", "qwen3_vl_moe_text"):
            c["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                    "mrope_section": [c["head_dim"] // 8, c["head_dim"] // 8, c["head_dim"] // 4]}
        if t in WRAPPER_OF:  # no causal-LM class: the checkpoint's multimodal class, tied as its outer config says
            outer = WRAPPER_OF[t]
            return {"model_type": outer, "text_config": {"model_type": t, **c},
                    "vision_config": {**VISION[outer], "out_hidden_size": c["hidden_size"]},
                    **({"tie_word_embeddings": draw(B)} if draw(B) else {})}
    else:
        raise AssertionError(f"no strategy for {t}")
    return {"model_type": t, **c}


RECENT = ["deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "deepseek_v4", "gemma4_text", "minimax_m2", "ministral3",
          "qwen3_vl_text", "qwen3_vl_moe_text", "glm4v_moe_text"]
PARAMS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOPS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- transformers parameter name -> llmcalc component ------------------------------------------------------------

_ATTENTION = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "o_proj", "q_a_proj": "q_a_proj",
              "q_b_proj": "q_b_proj", "q_a_layernorm": "q_a_norm", "q_a_norm": "q_a_norm",
              "kv_a_proj_with_mqa": "kv_a_proj", "kv_a_layernorm": "kv_a_norm", "kv_b_proj": "kv_b_proj",
              "kv_proj": "k_proj", "o_a_proj": "o_a_proj", "o_b_proj": "o_b_proj", "q_norm": "qk_norm",
              "k_norm": "qk_norm", "kv_norm": "qk_norm", "sinks": "sinks"}
_KDA = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "conv1d": "conv1d", "f_a_proj": "f_proj",
        "f_b_proj": "f_proj", "dt_bias": "dt_bias", "A_log": "A_log", "b_proj": "b_proj", "g_a_proj": "g_proj",
        "g_b_proj": "g_proj", "o_norm": "norm", "o_proj": "out_proj"}
_GDN = {"in_proj_qkv": "in_proj_qkvz", "in_proj_z": "in_proj_qkvz", "in_proj_b": "in_proj_ba",
        "in_proj_a": "in_proj_ba", "conv1d": "conv1d", "dt_bias": "dt_bias", "A_log": "A_log", "norm": "norm",
        "out_proj": "out_proj"}
_NORMS = re.compile(r"^(input_layernorm|post_attention_layernorm|pre_feedforward_layernorm(_2)?|"
                    r"post_feedforward_layernorm(_1|_2)?|post_per_layer_input_norm)$")


def hf_part(name: str, spec) -> str:  # long: one rule per module kind of the new families
    """The llmcalc component of a transformers parameter (its module path and, inside a layer, the layer's kind)."""
    name = re.sub(r"^model\.(language_model\.)?", "", name)
    parts = name.split(".")
    if parts[0] != "layers":
        top = {"embed_tokens": "embedding/tokens", "embed_tokens_per_layer": "embedding/per_layer_tokens",
               "per_layer_model_projection": "embedding/per_layer_projection",
               "per_layer_projection_norm": "embedding/per_layer_norm", "norm": "norm/final", "lm_head": "head/lm_head",
               "hc_head": "head/hc_head"}
        return top[parts[0]]
    layer, rest = int(parts[1]), parts[2:]
    mixers, ffn = spec.layer_parts(layer)
    leaf = rest[-2] if rest[-1] in ("weight", "bias") else rest[-1]
    if len(rest) <= 2 and _NORMS.match(rest[0]):
        return "norm/layers"
    if rest == ["layer_scalar"]:  # Gemma 4's stored per-layer output scalar
        return "norm/layer_scalar"
    if rest[-1] == "e_score_correction_bias" and ffn == "moe":  # the router's stored bias (MiniMax-M2: on the block)
        return "moe/router"
    if rest[0] in ("attn_hc", "ffn_hc"):
        return "hyper_connections/" + ("attention" if rest[0] == "attn_hc" else "ffn")
    if rest[0] in ("per_layer_input_gate", "per_layer_projection"):
        return "per_layer/" + ("gate" if rest[0] == "per_layer_input_gate" else "projection")
    if rest[0] == "linear_attn":
        return f"gated_deltanet/{_GDN[leaf]}"
    if rest[0] == "self_attn":
        if "kda" in mixers:
            return f"kda/{_KDA[leaf]}"
        if "indexer" in rest:
            return "attention/indexer"
        if rest[1] == "compressor":
            return "attention/compressor"
        if rest[-1] == "bias" and leaf.endswith(("_proj", "_mqa")):
            return "attention/bias"
        return f"attention/{_ATTENTION[leaf]}"
    if rest[0] in ("router", "experts"):  # Gemma 4: the MoE block beside the dense MLP
        return "moe/router" if rest[0] == "router" else "moe/experts"
    if rest[0] == "mlp":
        if ffn == "moe" and (len(rest) > 3 or rest[1] in ("gate", "experts", "shared_experts", "shared_expert",
                                                          "shared_expert_gate")):
            if rest[1] == "gate":
                return "moe/router"
            return "moe/experts" if rest[1] == "experts" else "moe/shared_experts"
        return f"mlp/{leaf}"
    raise AssertionError(f"no rule for {name}")


def hf_components(config: dict, spec) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, p in language_params(build_hf(config)):
        key = hf_part(name, spec)
        out[key] = out.get(key, 0) + p.numel()
    return out


@pytest.mark.parametrize("model_type", RECENT)
def test_params_per_component_match_transformers(model_type):
    @PARAMS
    @given(recent_config(model_type))
    def check(config):
        spec = spec_from_hf(config)
        assert count_params(spec).components == hf_components(config, spec), config

    check()


# --- forward FLOPs -------------------------------------------------------------------------------------------------


def counted_forward(config: dict, seq: int) -> int:
    """FlopCounterMode's total for one batch-2 forward of the transformers model on real tiny CPU tensors."""
    from torch.utils.flop_counter import FlopCounterMode

    model = _real_model(config)
    vocab = model.config.get_text_config().vocab_size
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(3, vocab, (2, seq)), use_cache=False)
    return counter.get_total_flops()


def _real_model(config: dict):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    values = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(config["model_type"], **values)
        for sub in (cfg, getattr(cfg, "text_config", None)):
            if sub is not None:
                sub._attn_implementation, sub._experts_implementation = "eager", "eager"
        torch.manual_seed(0)
        auto = AutoModelForImageTextToText if "text_config" in values else AutoModelForCausalLM
        return auto.from_config(cfg, attn_implementation="eager").eval()


SEQ = 37  # not a multiple of 64 (the delta rule pads), nor of 4 and 16 (DeepSeek-V4's windows here)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", RECENT)
def test_forward_flops_match_flop_counter(model_type):
    @FLOPS
    @given(recent_config(model_type))
    def check(config):
        ours = sum(forward_ops(spec_from_hf(config), 2, SEQ).values())
        assert ours == counted_forward(config, SEQ), config

    check()


# --- the KV cache transformers allocates ---------------------------------------------------------------------------


def _tensor_elements(obj, seen: set[int]) -> int:
    if isinstance(obj, torch.Tensor):  # a cache's tensors (not its scalar bookkeeping, e.g. a window length)
        if id(obj) in seen or obj.dim() == 0 or not obj.is_floating_point():
            return 0
        seen.add(id(obj))
        return obj.numel()
    if isinstance(obj, dict):
        return sum(_tensor_elements(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_elements(v, seen) for v in obj)
    return 0


# DeepSeek-V4 cache attributes llmcalc sizes from vLLM's layout instead (the pending windows and the CSA overlap
# state: KvLayer.state_bytes); the window and the compressed entries are compared.
V4_STATE = ("buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate")


def cache_elements(config: dict, seq: int) -> list[int]:
    """Elements transformers' cache holds per layer after a forward of `seq` tokens (batch 1, use_cache=True)."""
    model = _real_model(config)
    vocab = model.config.get_text_config().vocab_size
    with torch.no_grad():  # output_hidden_states: Gemma 4 then runs its KV-shared layers on every token (its
        # _maybe_slice_kv_shared_inputs would cut them to the kept logits, and fails without per-layer inputs)
        out = model(input_ids=torch.randint(3, vocab, (1, seq)), use_cache=True, output_hidden_states=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    return [_tensor_elements({k: v for k, v in vars(layer).items() if k not in V4_STATE}, set())
            for layer in cache.layers]


def _layer_bytes(spec, seq: int) -> list[float]:
    """kv_layers' bytes per layer (fp32), in transformers' layout: DeepSeek-V4's window layers without a compressor
    are transformers' generic DynamicSlidingWindowLayer, which holds the one K = V tensor twice (keys and values;
    llmcalc counts it once, as the model's own CSA/HCA caches and vLLM hold it); its compressor state is left out of
    both (V4_STATE)."""
    out = [0.0] * spec.n_layers
    for layer in kv_layers(spec, kv_dtype="fp32", state_dtype="fp32"):
        twice = spec.k_eq_v == "all" and spec.compression(layer.index) == "none" and layer.kind != "state"
        out[layer.index] += layer.bytes_per_token * layer.cached_tokens(seq) * (2 if twice else 1)
        if spec.compression(layer.index) == "none":
            out[layer.index] += layer.state_bytes
    return out


CACHED = ["deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "deepseek_v4", "gemma4_text", "minimax_m2"]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", CACHED)
def test_kv_layers_hold_what_transformers_caches(model_type):
    @FLOPS
    @given(recent_config(model_type))
    def check(config):
        spec = spec_from_hf(config)
        for seq in (9, 40):  # under and over the windows (DeepSeek-V4's 8/16 tokens, Gemma 4's 4/8)
            assert [4 * n for n in cache_elements(config, seq)] == _layer_bytes(spec, seq), (config, seq)

    check()


# --- LoRA: the linears peft's all-linear adapts ---------------------------------------------------------------------

LORA = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@pytest.mark.parametrize("model_type", RECENT)
def test_lora_all_linear_matches_peft(model_type):
    """llmcalc's all-linear adapts every nn.Linear of the language model but the LM head, r·(in + out) each: the
    indexer's and compressor's projections, DeepSeek-V4's low-rank query and grouped output (its o_a_proj is one
    nn.Linear of H·d_head/g -> g·o_lora_rank), Gemma 4's per-layer input linears and its router's proj. Routed
    experts are fused tensors, no nn.Linear, so their adapters are left out of the comparison. peft's
    get_peft_model trains exactly that many on the dense text models (the wrappers: the module arithmetic only, peft
    would adapt their vision towers too; MoE models: peft 0.21 adapts their fused experts and DeepSeek's router and
    leaves DeepSeek's shared experts out)."""
    from llmcalc.analytic.finetune import finetune, lora_config

    peft = pytest.importorskip("peft")

    @LORA
    @given(recent_config(model_type), st.sampled_from([1, 8]))
    def check(config, rank):
        model = build_hf(config)
        language = {n for n, _ in language_params(model)}
        linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
                   and name != "lm_head" and f"{name}.weight" in language}
        want = sum(rank * (m.in_features + m.out_features) for m in linears.values())
        spec = spec_from_hf(config)
        ft = finetune(spec, lora_config("lora", rank))
        experts = sum(n for key, n in ft.components.items() if key.startswith("moe/experts/"))
        assert ft.trainable - experts == want
        if "text_config" in config or spec.n_experts:  # peft 0.21 maps all-linear on an MoE model to targets of
            return  # its own (fused expert tensors and DeepSeek's router in, DeepSeek's shared experts out)
        lora = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0,
                               bias="none", task_type="CAUSAL_LM")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert peft.get_peft_model(model, lora).get_nb_trainable_parameters()[0] == want

    check()



def test_sparse_attention_says_what_a_step_reads():
    """GLM-5's pattern "FSFS": 2 of 4 layers run their own indexer, the others reuse the previous top-k; the note
    states the top-k a DSA kernel reads, beside the dense count the FLOPs give (the eager attention's mask)."""
    config = dict(model_type="glm_moe_dsa", num_hidden_layers=4, hidden_size=32, num_attention_heads=2,
                  q_lora_rank=8, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4,
                  index_n_heads=2, index_head_dim=8, index_topk=64, index_topk_pattern="FSFS", vocab_size=64,
                  intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=8)
    note = next(n for n in spec_from_hf(config).notes if n.startswith("DeepSeek Sparse Attention"))
    assert "2 of 4 layers run a lightning indexer (2 heads of 8)" in note and "reuse the previous top-k" in note
    assert "min(S, 64) keys per query" in note


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3_5_text", "qwen3_5_moe_text", "kimi_linear"])
def test_linear_attention_state_is_what_transformers_caches(model_type):
    """Qwen3.5's Gated DeltaNet and Kimi-Linear's KDA layers: transformers' cache (fp32 model) holds per layer the
    conv window and the fp32 recurrent state, constant in the context; the attention layers K and V (or MLA's
    latent) per token; kv_layers gives the same bytes at two lengths (strategies: tests/test_ssm.py)."""
    from test_ssm import ssm_config

    @FLOPS
    @given(ssm_config(model_type))
    def check(config):
        spec = spec_from_hf(config)
        assume(spec.n_attention_layers > 0)  # transformers' cache needs an attention layer to measure its length
        for seq in (9, 40):
            assert [4 * n for n in cache_elements(config, seq)] == _layer_bytes(spec, seq), (config, seq)

    check()
