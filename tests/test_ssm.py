"""Hybrid and state-space families against transformers: exact parameters per component, and the
matmul/conv FLOPs torch's FlopCounterMode counts on a real forward of the same (tiny) model.

The FLOP check splits what the counter sees by aten op:
- aten.mm / aten.addmm / aten.convolution: every projection, conv1d, MLP/expert matmul and the LM
  head. llmcalc's ops other than the attention core and the scan must equal them exactly.
- aten.bmm: eager attention's QKᵀ and AV (llmcalc's full-S² core, exact) plus the scan's matmuls as
  transformers' torch path runs them. That part is not llmcalc's convention (see
  llmcalc/analytic/ssm.py) and is checked against the torch path's own arithmetic, written out here:
  Mamba-1 contracts y = C·h (2·T·E·N); Mamba-2 runs the chunked SSD algorithm with chunk Q.
Forward passes run on real CPU tensors (tiny shapes, < 1 s): routed experts need real routing.
"""

import json
import math
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import build_hf, language_params, stored_count

from llmcalc.analytic.flops import forward_ops
from llmcalc.analytic.params import count_params
from llmcalc.spec import SpecError, spec_from_hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SSM_TYPES = ["mamba", "mamba2", "jamba", "bamba", "nemotron_h", "falcon_h1", "lfm2", "qwen3_next", "zamba2",
             "qwen3_5_text", "qwen3_5_moe_text", "kimi_linear"]
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
SSM_PARTS = {"in_proj", "conv1d", "x_proj", "dt_proj", "A_log", "D", "dt_bias", "out_proj", "norm", "in_proj_qkvz",
             "in_proj_ba"}
# Qwen3.5's Gated DeltaNet splits Qwen3-Next's fused projections (the same parameters), Kimi's KDA names its own.
QWEN3_5_PARTS = {"in_proj_qkv": "in_proj_qkvz", "in_proj_z": "in_proj_qkvz", "in_proj_b": "in_proj_ba",
                 "in_proj_a": "in_proj_ba"}
KDA_PARTS = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "conv1d": "conv1d", "f_a_proj": "f_proj",
             "f_b_proj": "f_proj", "dt_bias": "dt_bias", "A_log": "A_log", "b_proj": "b_proj", "g_a_proj": "g_proj",
             "g_b_proj": "g_proj", "o_norm": "norm", "o_proj": "out_proj"}
MLA_PARTS = {"kv_a_proj_with_mqa": "kv_a_proj", "kv_a_layernorm": "kv_a_norm", "kv_b_proj": "kv_b_proj",
             "q_a_proj": "q_a_proj", "q_a_layernorm": "q_a_norm", "q_b_proj": "q_b_proj"}


def hf_component(name: str, spec) -> str:
    """The llmcalc component key of a transformers parameter name, from the layer's place in the model."""
    parts = name.split(".")
    if "layers" not in parts:
        if "norm" in parts[-2]:  # final norm (LFM2 calls it embedding_norm)
            return "norm/final"
        if "embed" in name:
            return "embedding/tokens"
        if parts[0] == "lm_head":
            return "head/lm_head"
        raise AssertionError(f"no rule for {name}")
    at = parts.index("layers")
    mixers, ffn = spec.layer_parts(int(parts[at + 1]))
    rest = parts[at + 2:]
    if "shared_block" in mixers:  # Zamba2HybridLayer: shared_transformer, linear, mamba_decoder
        if rest[0] == "linear":
            return "shared_block/linear"
        if rest[0] == "shared_transformer":
            return ("shared_block/adapters" if "adapter" in name else "shared_block/norms" if "layernorm" in rest[1]
                    else "shared_block/attention" if rest[1] == "self_attn" else "shared_block/mlp")
        rest = rest[1:]  # mamba_decoder.<input_layernorm | mamba.*>, as in a plain Zamba2 Mamba layer
    leaf = rest[-2] if rest[-1] in ("weight", "bias") else rest[-1]
    ssm = [m for m in mixers if m not in ("attention", "shared_block")]
    if "kda" in mixers and rest[0] == "self_attn":
        return f"kda/{KDA_PARTS[leaf]}"
    if rest[0] == "linear_attn" and leaf in QWEN3_5_PARTS:
        return f"gated_deltanet/{QWEN3_5_PARTS[leaf]}"
    if leaf in MLA_PARTS and rest[0] == "self_attn":
        return "attention/bias" if rest[-1] == "bias" else f"attention/{MLA_PARTS[leaf]}"
    if len(rest) == 2 and "norm" in rest[0]:
        return "norm/layers"  # input_layernorm, pre_ff_layernorm, NemotronH/Mamba block norm
    if leaf in ("dt_layernorm", "b_layernorm", "c_layernorm"):
        return "mamba/dt_norms"
    if leaf in ("q_layernorm", "k_layernorm", "q_norm", "k_norm"):
        return "attention/qk_norm"
    if leaf == "conv" and ssm:  # LFM2's Lfm2ShortConv.conv
        return f"{ssm[0]}/conv1d"
    if leaf in SSM_PARTS and ssm and "self_attn" not in rest:
        return f"{ssm[0]}/{leaf}"
    if leaf == "out_proj" and "self_attn" in rest:  # LFM2's attention output projection
        return "attention/o_proj"
    if leaf in ("q_proj", "k_proj", "v_proj", "o_proj"):
        return "attention/bias" if rest[-1] == "bias" else f"attention/{leaf}"
    if ffn == "moe" and any(p.startswith("shared_expert") for p in rest):  # Qwen3-Next's gated shared expert
        return "moe/shared_experts"
    if leaf in ("fc1_latent_proj", "fc2_latent_proj"):  # Nemotron 3 Super's latent MoE projections
        return "moe/latent_proj"
    if leaf == "e_score_correction_bias" and ffn == "moe":  # the router's stored bias buffer
        return "moe/router"
    if "experts" in rest:
        return "moe/experts"
    if leaf in ("router", "gate") and ffn == "moe":
        return "moe/router"
    leaf = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.get(leaf, leaf)  # LFM2's MLP names
    if leaf in ("gate_proj", "up_proj", "down_proj"):
        return "mlp/bias" if rest[-1] == "bias" else f"mlp/{leaf}"
    raise AssertionError(f"no rule for {name}")


def hf_components(config: dict) -> tuple[int, dict[str, int]]:
    spec = spec_from_hf(config)
    model = build_hf(config)
    out: dict[str, int] = {}
    for name, p in language_params(model):  # a multimodal checkpoint (Qwen3.5): its language model and head
        key = hf_component(name.replace("model.language_model.", "model."), spec)
        out[key] = out.get(key, 0) + p.numel()
    return stored_count(model), out


def check_params(config: dict) -> None:
    count = count_params(spec_from_hf(config))
    total, components = hf_components(config)
    assert count.total == total
    assert count.components == components


def hf_flops_by_op(config: dict, batch: int, seq: int) -> dict[str, int]:
    """FlopCounterMode per aten op for one forward of the transformers model, real CPU tensors."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(config["model_type"], **values)
        cfg._attn_implementation = "eager"  # QKᵀ and AV as plain matmuls (bmm)
        cfg._experts_implementation = "eager"  # a loop over experts: each runs on its routed tokens
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg)
        # An inference forward: no parameter asks for a gradient (as tests/reference.py). The conv kernels run
        # inside the `kernels` hub layer (transformers >= 5.25; on CPU its torch fallback, kept here); with
        # parameters requiring grad under no_grad, FlopCounterMode's ModuleTracker fails on the weight views
        # that layer receives ("Expected gradient function to be set"), not the model.
        model.requires_grad_(False)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=torch.randint(3, config["vocab_size"], (batch, seq)), use_cache=False)
    return {str(op).split(".")[-1]: v for op, v in counter.get_flop_counts()["Global"].items()}


def torch_path_scan_bmm(spec, config: dict, batch: int, seq: int) -> int:
    """The bmm FLOPs of transformers' torch scan paths (their arithmetic, not llmcalc's convention for Mamba;
    llmcalc's own for the delta rule, which counts the chunked form these paths run).

    Mamba-1 (mamba_selective_scan's sequential loop): y_t = C_t·h_t per step, 2·B·S·E·N in all.
    Mamba-2 (torch_forward, chunked SSD with chunk Q over S padded to c·Q): per head, C·Bᵀ inside
    each chunk (2·c·Q²·N), its masked product with x (2·c·Q²·P), chunk states Bᵀ·x (2·c·Q·N·P),
    state passing between chunks ((c+1)² chunk pairs x N·P x 2) and C·states (2·c·Q·N·P)."""
    E, N = spec.ssm_d_inner, spec.ssm_d_state
    total = 0
    for i in range(spec.n_layers):
        mixers = spec.layer_parts(i)[0]
        if "mamba" in mixers:
            total += 2 * batch * seq * E * N
        if "mamba2" in mixers:
            Q = config.get("chunk_size") or config.get("mamba_chunk_size")
            H, P = spec.ssm_n_heads, E // spec.ssm_n_heads
            c = math.ceil(seq / Q)
            total += 2 * batch * H * (c * Q * Q * N + c * Q * Q * P + 2 * c * Q * N * P + (c + 1) ** 2 * N * P)
        if "gated_deltanet" in mixers:
            # torch_chunk_gated_delta_rule, chunk Q = 64: per value head, k_beta·kᵀ and q·kᵀ inside each
            # chunk (2 x 2·c·Q²·dk), then per chunk k_cumdecay·S, q·S, kᵀ·v_new (3 x 2·Q·dk·dv) and
            # intra·v_new (2·Q²·dv); its triangular solves are not matmuls the counter knows.
            Q, H, dv = 64, spec.ssm_n_heads, E // spec.ssm_n_heads
            c = math.ceil(seq / Q)
            total += 2 * batch * H * c * (2 * Q * Q * N + 3 * Q * N * dv + Q * Q * dv)
        if "kda" in mixers:
            # chunk_kimi_delta_attention, chunk Q = 64: per head, attn·v_beta and attn·(k_beta·e^g) in each chunk
            # (2·c·Q²·dv + 2·c·Q²·dk), then per chunk (q·e^g)·S, k_cumdecay·S and (k·decay)ᵀ·v_new (3 x 2·Q·dk·dv)
            # and intra·v_new (2·Q²·dv); its decay-weighted q·kᵀ and k·kᵀ are elementwise sums, uncounted.
            Q, H, dv = 64, spec.ssm_n_heads, E // spec.ssm_n_heads
            c = math.ceil(seq / Q)
            total += 2 * batch * H * c * (Q * Q * (N + 2 * dv) + 3 * Q * N * dv)
    return total


def check_flops(config: dict, batch: int = 2, seq: int = 12) -> None:
    spec = spec_from_hf(config)
    ops = forward_ops(spec, batch, seq)
    counted = hf_flops_by_op(config, batch, seq)
    core = sum(v for k, v in ops.items() if k.endswith(("/scores", "/values")))
    linear = sum(v for k, v in ops.items() if not k.endswith(("/scores", "/values", "/scan")))
    scan = torch_path_scan_bmm(spec, config, batch, seq)
    # What the forward costs, op for op: every projection, conv and the LM head (llmcalc's linear terms), attention's
    # core and the torch path's scan. Which aten op a projection runs as is transformers' choice: up to 5.24 every
    # one was an mm / addmm; 5.25's Mamba path runs x_proj, dt_proj and out_proj on 3-D views, as bmm.
    assert sum(counted.values()) == linear + core + scan
    assert counted.get("mm", 0) + counted.get("addmm", 0) + counted.get("convolution", 0) <= linear
    assert counted.get("bmm", 0) >= core + scan
    delta = sum(v for k, v in ops.items() if k.split("/")[0] in ("gated_deltanet", "kda") and k.endswith("/scan"))
    if not spec.n_mixer_layers("mamba") and not spec.n_mixer_layers("mamba2"):  # the delta rule: llmcalc's scan
        assert delta == torch_path_scan_bmm(spec, config, batch, seq)  # is what the counter sees
    assert set(counted) <= {"mm", "addmm", "convolution", "bmm"}


# --- per-family configs (bounded shapes) ------------------------------------------------------------


@st.composite
def attention_keys(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    return dict(num_attention_heads=heads, num_key_value_heads=kv, hidden_size=heads * draw(st.sampled_from([8, 16])))


def _mamba2_heads(draw, inner: int) -> tuple[int, int]:
    heads = draw(st.sampled_from([h for h in (2, 4, 8) if inner % h == 0]))
    groups = draw(st.sampled_from([g for g in (1, 2) if heads % g == 0]))
    return heads, groups


@st.composite
def ssm_config(draw, model_type: str) -> dict:
    layers = draw(st.integers(1, 4))
    vocab = draw(st.integers(16, 120))
    state = draw(st.sampled_from([4, 8]))
    c: dict = {"model_type": model_type, "vocab_size": vocab, "tie_word_embeddings": draw(st.booleans()), **IDS}
    if model_type == "mamba":
        c.update(hidden_size=draw(st.sampled_from([16, 24, 32])), num_hidden_layers=layers, state_size=state,
                 expand=draw(st.sampled_from([1, 2])), conv_kernel=draw(st.integers(2, 4)),
                 time_step_rank=draw(st.sampled_from(["auto", 3])), use_bias=draw(st.booleans()),
                 use_conv_bias=draw(st.booleans()))
    elif model_type == "mamba2":
        D = draw(st.sampled_from([16, 32]))
        heads, groups = _mamba2_heads(draw, 2 * D)
        c.update(hidden_size=D, num_hidden_layers=layers, state_size=state, expand=2, num_heads=heads,
                 head_dim=2 * D // heads, n_groups=groups, conv_kernel=draw(st.integers(2, 4)),
                 use_bias=draw(st.booleans()), use_conv_bias=draw(st.booleans()), chunk_size=draw(st.sampled_from([4,
                                                                                                                   8])))
    elif model_type == "jamba":
        c.update(draw(attention_keys()))
        period = draw(st.integers(1, 3))
        exp_period = draw(st.integers(1, 2))
        c.update(num_hidden_layers=layers, intermediate_size=draw(st.integers(8, 48)), mamba_d_state=state,
                 attn_layer_period=period, attn_layer_offset=draw(st.integers(0, period - 1)),
                 expert_layer_period=exp_period, expert_layer_offset=draw(st.integers(0, exp_period - 1)),
                 num_experts=draw(st.sampled_from([1, 2, 4])), num_experts_per_tok=draw(st.integers(1, 2)),
                 mamba_d_conv=draw(st.integers(2, 4)), mamba_dt_rank=draw(st.sampled_from(["auto", 2])),
                 mamba_proj_bias=draw(st.booleans()), mamba_conv_bias=draw(st.booleans()))
        c["num_experts_per_tok"] = min(c["num_experts_per_tok"], c["num_experts"])
    elif model_type == "bamba":
        c.update(draw(attention_keys()))
        heads, groups = _mamba2_heads(draw, 2 * c["hidden_size"])
        c.update(num_hidden_layers=layers, intermediate_size=draw(st.integers(8, 48)), mamba_d_state=state,
                 mamba_n_heads=heads, mamba_n_groups=groups, mamba_d_conv=draw(st.integers(2, 4)),
                 mamba_chunk_size=draw(st.sampled_from([4, 8])), mamba_proj_bias=draw(st.booleans()),
                 mamba_conv_bias=draw(st.booleans()), attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
                 attn_layer_indices=draw(st.lists(st.integers(0, layers - 1), max_size=2, unique=True)))
    elif model_type == "falcon_h1":
        c.update(draw(attention_keys()))
        D = c["hidden_size"]
        inner = draw(st.sampled_from([None, D, 2 * D]))  # None: mamba_expand x hidden
        heads, groups = _mamba2_heads(draw, inner or 2 * D)
        c.update(num_hidden_layers=layers, intermediate_size=draw(st.integers(8, 48)), mamba_d_ssm=inner,
                 mamba_expand=2, mamba_d_state=state, mamba_n_heads=heads, mamba_n_groups=groups,
                 mamba_d_conv=draw(st.integers(2, 4)), mamba_chunk_size=draw(st.sampled_from([4, 8])),
                 mamba_proj_bias=draw(st.booleans()), projectors_bias=draw(st.booleans()),
                 mamba_conv_bias=draw(st.booleans()), mamba_rms_norm=draw(st.booleans()),
                 attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    elif model_type == "lfm2":
        c.update(draw(attention_keys()))
        c.update(num_hidden_layers=layers, intermediate_size=draw(st.integers(8, 64)),
                 conv_L_cache=draw(st.integers(2, 4)), conv_bias=draw(st.booleans()),
                 block_auto_adjust_ff_dim=draw(st.booleans()), block_multiple_of=draw(st.sampled_from([1, 8, 16])),
                 block_ffn_dim_multiplier=draw(st.sampled_from([1.0, 1.5])),
                 full_attn_idxs=draw(st.lists(st.integers(0, layers - 1), max_size=2, unique=True)))
    elif model_type == "qwen3_next":
        c.update(draw(attention_keys()))
        k_heads = draw(st.sampled_from([1, 2]))
        experts = draw(st.sampled_from([0, 4]))  # every published Qwen3-Next config is MoE
        c.update(num_hidden_layers=layers, intermediate_size=draw(st.integers(8, 48)), num_experts=experts,
                 num_experts_per_tok=draw(st.integers(1, 2)), moe_intermediate_size=draw(st.integers(4, 24)),
                 shared_expert_intermediate_size=draw(st.integers(4, 24)),
                 mlp_only_layers=draw(st.lists(st.integers(0, layers - 1), max_size=1, unique=True)),
                 head_dim=draw(st.sampled_from([4, 8])), attention_bias=draw(st.booleans()),
                 linear_num_key_heads=k_heads, linear_num_value_heads=k_heads * draw(st.sampled_from([1, 2])),
                 linear_key_head_dim=draw(st.sampled_from([4, 8])), linear_value_head_dim=draw(st.sampled_from([4, 8])),
                 linear_conv_kernel_dim=draw(st.integers(2, 4)),
                 full_attention_interval=draw(st.integers(1, 3)))
    elif model_type in ("qwen3_5_text", "qwen3_5_moe_text"):
        c.update(draw(attention_keys()))
        k_heads = draw(st.sampled_from([1, 2]))
        c.update(num_hidden_layers=layers, head_dim=draw(st.sampled_from([4, 8])), attention_bias=draw(st.booleans()),
                 linear_num_key_heads=k_heads, linear_num_value_heads=k_heads * draw(st.sampled_from([1, 2])),
                 linear_key_head_dim=draw(st.sampled_from([4, 8])), linear_value_head_dim=draw(st.sampled_from([4, 8])),
                 linear_conv_kernel_dim=draw(st.integers(2, 4)), full_attention_interval=draw(st.integers(1, 3)))
        if model_type == "qwen3_5_text":
            c["intermediate_size"] = draw(st.integers(8, 48))
        else:
            c.update(num_experts=4, num_experts_per_tok=draw(st.integers(1, 2)),
                     moe_intermediate_size=draw(st.integers(4, 24)),
                     shared_expert_intermediate_size=draw(st.integers(4, 24)))
    elif model_type == "kimi_linear":  # KDA + NoPE MLA layers; linear_attn_config's layer numbers are 1-indexed
        heads = draw(st.sampled_from([2, 4]))
        full = draw(st.lists(st.integers(1, layers), max_size=2, unique=True))
        c.update(num_hidden_layers=layers, hidden_size=draw(st.sampled_from([16, 32])), num_attention_heads=heads,
                 num_key_value_heads=heads, q_lora_rank=draw(st.none() | st.integers(4, 16)),
                 kv_lora_rank=draw(st.integers(4, 16)), qk_rope_head_dim=draw(st.sampled_from([4, 8])),
                 qk_nope_head_dim=draw(st.sampled_from([4, 8])), v_head_dim=draw(st.sampled_from([4, 8])),
                 intermediate_size=draw(st.integers(8, 48)), moe_intermediate_size=draw(st.integers(4, 24)),
                 num_experts=4, num_experts_per_token=draw(st.integers(1, 2)),
                 num_shared_experts=draw(st.integers(1, 2)), first_k_dense_replace=draw(st.integers(0, layers)),
                 attention_bias=draw(st.booleans()),
                 linear_attn_config={"full_attn_layers": full,
                                     "kda_layers": [i for i in range(1, layers + 1) if i not in full],
                                     "num_heads": draw(st.sampled_from([1, 2])),
                                     "head_dim": draw(st.sampled_from([4, 8])),
                                     "short_conv_kernel_size": draw(st.integers(2, 4))})
    elif model_type == "zamba2":  # k/v adapters output 2D: transformers needs MHA when they are on
        c.update(draw(attention_keys()))
        D, adapters = c["hidden_size"], draw(st.booleans())
        if adapters:
            c["num_key_value_heads"] = c["num_attention_heads"]
        heads, groups = _mamba2_heads(draw, 2 * D)
        kinds = draw(st.lists(st.sampled_from(["mamba", "hybrid"]), min_size=1, max_size=5))
        c.update(layers_block_type=kinds, num_hidden_layers=len(kinds),
                 intermediate_size=draw(st.integers(8, 48)), mamba_d_state=state, n_mamba_heads=heads,
                 mamba_ngroups=groups, mamba_d_conv=draw(st.integers(2, 4)), chunk_size=draw(st.sampled_from([4, 8])),
                 add_bias_linear=draw(st.booleans()), num_mem_blocks=draw(st.integers(1, 3)),
                 adapter_rank=draw(st.sampled_from([2, 4])), use_shared_attention_adapter=adapters,
                 use_mem_rope=draw(st.booleans()))
    elif model_type == "nemotron_h":
        c.update(draw(attention_keys()))
        heads = draw(st.sampled_from([2, 4]))
        pattern = "".join(draw(st.lists(st.sampled_from("M*-E"), min_size=1, max_size=4)))
        if "E" in pattern:  # NemotronHMoE: non-gated routed experts, a shared MLP of its own width
            c.update(n_routed_experts=draw(st.sampled_from([2, 4])), num_experts_per_tok=draw(st.integers(1, 2)),
                     moe_intermediate_size=draw(st.integers(4, 24)), n_group=1, topk_group=1,
                     moe_shared_expert_intermediate_size=draw(st.integers(4, 24)),
                     num_nextn_predict_layers=draw(st.sampled_from([0, 1])),
                     moe_latent_size=draw(st.sampled_from([None, 4, 8])))  # Nemotron 3 Super's latent MoE
        c.update(hybrid_override_pattern=pattern,
                 head_dim=draw(st.sampled_from([4, 8])), intermediate_size=draw(st.integers(8, 48)),
                 ssm_state_size=state, mamba_num_heads=heads, mamba_head_dim=draw(st.sampled_from([4, 8])),
                 n_groups=draw(st.sampled_from([g for g in (1, 2) if heads % g == 0])),
                 conv_kernel=draw(st.integers(2, 4)), chunk_size=draw(st.sampled_from([4, 8])),
                 use_bias=draw(st.booleans()), use_conv_bias=draw(st.booleans()),
                 mlp_bias="E" not in pattern and draw(st.booleans()))
    return c


PARAMS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOPS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("model_type", SSM_TYPES)
def test_params_match_transformers_per_component(model_type):
    @PARAMS
    @given(ssm_config(model_type))
    def check(config):
        check_params(config)

    check()


@pytest.mark.parametrize("model_type", SSM_TYPES)
def test_flops_match_what_torch_counts(model_type):
    @FLOPS
    @given(ssm_config(model_type), st.integers(1, 2), st.integers(5, 13))
    def check(config, batch, seq):
        check_flops(config, batch, seq)

    check()


# --- presets: exact against transformers (counts only; no forward at full size) --------------------

from llmcalc.spec import load_model, model_config, model_names  # noqa: E402

HYBRID_PRESETS = [n for n in model_names() if load_model(n).is_hybrid]


def test_hybrid_presets_exist():
    assert {"nemotron-h-8b", "mamba-2.8b"} <= set(HYBRID_PRESETS)


@pytest.mark.parametrize("name", HYBRID_PRESETS)
def test_hybrid_presets_match_transformers_per_component(name):
    config = {k: v for k, v in model_config(name).items() if not k.startswith("_")}
    check_params(config)


def test_preset_totals_against_published_figures():
    """Nemotron-H-8B: 8.1 B on its model card (arXiv 2504.03624 calls it 8B); Mamba-2.8B: 2.8 B in the
    Mamba paper's Pile table, 2.77 B on its HF card. The exact counts (checked against transformers above):"""
    assert count_params(load_model("nemotron-h-8b")).total == 8_100_852_736
    assert count_params(load_model("mamba-2.8b")).total == 2_768_345_600
    # Nemotron-H-8B by hand: 24 Mamba-2 layers, 4 attention layers, 24 squared-ReLU MLPs, untied head.
    D, V, E, N, H, G, K, F = 4096, 131072, 8192, 128, 128, 8, 4, 21504
    mamba2 = D * (2 * E + 2 * G * N + H) + (E + 2 * G * N) * (K + 1) + 3 * H + E + E * D
    attention = D * 32 * 128 * 2 + D * 8 * 128 * 2
    assert 24 * mamba2 + 4 * attention + 24 * 2 * D * F + 52 * D + D + 2 * V * D == 8_100_852_736


ZAMBA2_27B = {k: v for k, v in json.loads((Path(__file__).parent / "configs" / "zamba2-2.7b.json").read_text()).items()
              if not k.startswith("_")}


def test_zamba2_published_shape_matches_transformers_and_the_hand_count():
    """Zamba2-2.7B's shape (tests/configs/zamba2-2.7b.json): every component as transformers builds it on
    the meta device (its tied shared blocks counted once), and the total by hand: 54 Mamba-2 layers
    with their norms, 2 shared blocks (attention from 2D with head dim 2D/H = 160, a GeGLU MLP, norms
    over 2D and D), 9 uses each with a Linear(D, D) and a rank-128 adapter on gate_up, a tied head."""
    check_params(ZAMBA2_27B)
    D, V, E, N, H, G, K, F, heads, dh, r = 2560, 32000, 5120, 64, 80, 1, 4, 10240, 32, 160, 128
    mamba2 = D * (2 * E + 2 * G * N + H) + (E + 2 * G * N) * (K + 1) + 3 * H + E + E * D
    block = 2 * D * 3 * heads * dh + heads * dh * D + D * 2 * F + F * D + 2 * D + D
    use = D * D + D * r + r * 2 * F
    total = 54 * (mamba2 + D) + 2 * block + 9 * use + V * D + D
    assert count_params(spec_from_hf(ZAMBA2_27B)).total == total == 2_662_214_560


def test_nemotron_3_nano_moe_against_its_model_card():
    """NVIDIA-Nemotron-3-Nano-30B-A3B (model card: 31.6B total, ~3.6B active including embeddings):
    23 Mamba-2, 23 MoE (128 non-gated ReLU² experts of 1856, top-6, one shared of 3712) and 6 GQA
    layers; written out by hand below, and against transformers in the per-component test above."""
    count = count_params(load_model("nemotron-3-nano-30b-a3b"))
    assert abs(count.total - 31.6e9) <= 0.05e9
    assert abs(count.active_per_token - 3.6e9) <= 0.05e9
    D, V, E, N, H, G, K = 2688, 131072, 64 * 64, 128, 64, 8, 4
    mamba2 = D * (2 * E + 2 * G * N + H) + (E + 2 * G * N) * (K + 1) + 3 * H + E + E * D
    attention = D * 32 * 128 * 2 + D * 2 * 128 * 2
    # router (and its stored e_score_correction_bias), routed experts (up, down), shared expert
    moe = D * 128 + 128 + 128 * 2 * D * 1856 + 2 * D * 3712
    assert count.total == 23 * mamba2 + 6 * attention + 23 * moe + 52 * D + D + 2 * V * D
    assert count.total - count.active_per_token == 23 * (128 - 6) * 2 * D * 1856


# --- state memory: constant in context, KV only in attention layers ---------------------------------

from llmcalc.analytic.inference import (  # noqa: E402
    InferenceEstimate,
    decode_ops,
    kv_cache_bytes_per_token,
    recurrent_state_bytes,
    state_bytes_per_sequence,
)
from llmcalc.spec import load_hardware  # noqa: E402


def test_recurrent_state_by_hand():
    """Per sequence and Mamba layer: conv state (channels x K) + SSM state (E x N), at the state dtype."""
    mamba = load_model("mamba-2.8b")  # 64 layers, E = 5120, N = 16, K = 4, conv channels = E
    assert recurrent_state_bytes(mamba, "bf16") == 64 * (5120 * 4 + 5120 * 16) * 2
    assert kv_cache_bytes_per_token(mamba) == 0  # no attention layer: no KV cache at all
    nemo = load_model("nemotron-h-8b")  # Mamba-2: conv over x, B, C = E + 2·G·N channels
    assert recurrent_state_bytes(nemo, "fp32") == 24 * ((8192 + 2 * 8 * 128) * 4 + 8192 * 128) * 4
    assert state_bytes_per_sequence(nemo, tp=2) == recurrent_state_bytes(nemo) / 2
    assert kv_cache_bytes_per_token(nemo, "bf16") == 2 * 4 * 8 * 128 * 2  # 4 attention layers of 52
    assert state_bytes_per_sequence(load_model("llama-3-8b")) == 0
    zamba = spec_from_hf(ZAMBA2_27B)  # Mamba-2 in all 54 layers; K/V only where a shared block runs (9)
    assert recurrent_state_bytes(zamba, "bf16") == 54 * ((5120 + 2 * 64) * 4 + 5120 * 64) * 2
    assert kv_cache_bytes_per_token(zamba, "bf16") == 2 * 9 * 32 * 160 * 2


def test_state_is_constant_in_context_and_kv_grows():
    """A decode step moves the weights, the state (fixed) and the KV cache (growing with the context)."""
    spec = load_model("nemotron-h-8b")
    est = InferenceEstimate(spec, load_hardware("h100-sxm"), 4, 1024, 16, "bf16", "bf16", "bf16")
    for context in (1024, 65536):
        moved = est.decode_step(context).bytes - est.weights_read(4) - 4 * context * est.kv_per_token_per_gpu
        assert moved == pytest.approx(4 * recurrent_state_bytes(spec))


def test_decode_step_has_no_s2_and_one_conv_output():
    spec = load_model("mamba-2.8b")
    a, b = decode_ops(spec, 2, 100), decode_ops(spec, 2, 100_000)
    assert a == b  # no term grows with the context
    assert a["mamba/conv1d"] == 64 * 2 * 2 * 5120 * 4  # causal_conv1d_update: one output per channel


def test_scan_convention_by_hand():
    """Mamba-1: 7·B·S·E·N per layer (Gu & Dao 2023, Alg. 2); Mamba-2: 5·B·S·E·N (Dao & Gu 2024, eq. 1)."""
    ops = forward_ops(load_model("mamba-2.8b"), 1, 2048)
    assert ops["mamba/scan"] == 64 * 7 * 2048 * 5120 * 16
    ops = forward_ops(load_model("nemotron-h-8b"), 1, 2048)
    assert ops["mamba2/scan"] == 24 * 5 * 2048 * 8192 * 128
    assert not any(k.endswith("/scores") and k.startswith("mamba") for k in ops)


# --- bad input ------------------------------------------------------------------------------------

from click.testing import CliRunner  # noqa: E402

from llmcalc.cli import cli  # noqa: E402
from llmcalc.spec import SpecDraft, resolve, spec_of  # noqa: E402


@pytest.mark.parametrize("changes, message", [  # moe_latent_size and an MoE mlp_bias: test_no_formula.py (transformers)
    (dict(hybrid_override_pattern="M*X"), "unknown characters"),
])
def test_nemotron_configs_llmcalc_does_not_cover_are_one_line(tmp_path, changes, message):
    config = {**model_config("nemotron-h-8b"), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(cli, ["params", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize("changes, message", [
    (dict(num_hidden_layers=38), "num_hidden_layers (38) must equal the number of layers_block_type entries (54)"),
    (dict(num_key_value_heads=8, use_shared_attention_adapter=True), "needs num_key_value_heads == num_attention"),
    (dict(layers_block_type=["mamba"] * 53 + ["transformer"]), "unknown entries ['transformer']"),
])
def test_zamba2_configs_transformers_refuses_are_one_line(tmp_path, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**ZAMBA2_27B, **changes}))
    result = CliRunner().invoke(cli, ["params", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize("layer_types, message", [
    (["mamba", "attention+mlp"], "layer_types has 2 entries for n_layers=3"),
    (["mamba", "lstm", "mlp"], "layer_types[1] = 'lstm'"),
    (["mamba+mlp+mlp", "mamba", "mamba"], "layer_types[0]"),
    (["mamba2", "mamba", "mamba"], "ssm_n_heads must be a positive whole number"),
    (["attention+moe", "mamba", "mamba"], "has an MoE FFN but n_experts is 0"),
])
def test_bad_layer_types(layer_types, message):
    with pytest.raises(SpecError) as err:
        spec_of(n_layers=3, d_model=64, n_heads=4, vocab_size=100, d_ff=128, layer_types=layer_types,
                ssm_d_inner=128, ssm_d_state=8, ssm_dt_rank=4)
    assert message in str(err.value)


def test_native_spec_with_layer_types_round_trips():
    spec = spec_of(n_layers=2, d_model=64, n_heads=4, vocab_size=100, d_ff=128,
                   layer_types=["mamba2+mlp", "attention+mlp"], ssm_d_inner=128, ssm_d_state=8, ssm_n_heads=4)
    assert spec.layer_types == ("mamba2+mlp", "attention+mlp") and spec.n_attention_layers == 1
    assert resolve(SpecDraft(**json.loads(json.dumps(spec.to_dict())))) == spec


def test_serve_and_infer_json_report_the_state():
    result = CliRunner().invoke(cli, ["serve", "nemotron-h-8b", "--gpu", "h100-sxm", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["state_bytes_per_sequence_per_gpu"] == recurrent_state_bytes(load_model("nemotron-h-8b"))
    result = CliRunner().invoke(cli, ["infer", "mamba-2.8b", "--gpu", "h100-sxm", "--prompt", 512, "--generate", 8,
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kv_cache_bytes"] == 0
    assert data["state_bytes_per_sequence_per_gpu"] == recurrent_state_bytes(load_model("mamba-2.8b"))


def test_serving_a_pure_mamba_is_limited_by_its_state():
    """No attention layer: vLLM's hybrid allocator gives each Mamba layer one state page per request (MambaSpec), so
    the blocks are state pages and the concurrency is their number (one per request per group)."""
    result = CliRunner().invoke(cli, ["serve", "mamba-2.8b", "--gpu", "h100-sxm", "--max-model-len", "8k",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    state = recurrent_state_bytes(load_model("mamba-2.8b"))
    assert data["state_bytes_per_sequence_per_gpu"] == state
    assert [g["kind"] for g in data["kv_groups"]] == ["state"] and data["blocks_per_sequence"] == 1
    assert data["kv_blocks"] == int(data["kv_cache_memory_bytes_per_gpu"] // state)
    assert data["max_concurrent_sequences"] == data["kv_blocks"]


# --- no None reaches arithmetic: every command on a model without a dense FFN or attention ---------

from llmcalc.analytic.finetune import FinetuneFlops, finetune, finetune_memory, lora_config  # noqa: E402
from llmcalc.analytic.flops import step_flops  # noqa: E402
from llmcalc.analytic.rules import elementwise_ops  # noqa: E402
from llmcalc.errors import LlmcalcError  # noqa: E402


def _mamba2_codestral() -> dict:
    """The Mamba-2 config transformers' Mamba2Config describes by default (Mamba-Codestral-7B's shape: 64
    layers of D 4096, 128 heads of 64, 8 groups, state 128, vocab 32768, untied), as a config.json dict."""
    return {k: v for k, v in transformers.Mamba2Config().to_dict().items() if not k.startswith("_")}


@pytest.mark.parametrize("preset", ["mamba-2.8b", "codestral-shape"])
def test_flops_of_a_model_without_ffn_or_attention(preset):
    """`flops mamba-2.8b` crashed on a None d_ff (rules._hybrid_elementwise_ops). The projections against the
    transformers model's own weights (2·T per weight, on the meta device); the elementwise estimate by
    hand: one RMSNorm per layer and a final one (4 FLOPs per element), one residual add per layer, no FFN
    activation, no softmax, no RoPE."""
    config = model_config(preset) if preset != "codestral-shape" else _mamba2_codestral()
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    spec = spec_from_hf(config)
    assert spec.d_ff == 0 and spec.to_dict()["d_ff"] is None
    T, seq = 4096, 4096
    step = step_flops(spec, 1, seq)
    model = build_hf(config)
    kind = "mamba" if config["model_type"] == "mamba" else "mamba2"
    for part in ("in_proj", "out_proj") + (("x_proj", "dt_proj") if kind == "mamba" else ()):
        weights = sum(m.weight.numel() for name, m in model.named_modules() if name.endswith(f"mixer.{part}"))
        assert step.ops[f"{kind}/{part}"] == 2 * T * weights
    assert step.ops["head/lm_head"] == 2 * T * model.lm_head.weight.numel()
    L, D = spec.n_layers, spec.d_model
    assert elementwise_ops(step) == {"softmax": 0, "norms": 4 * T * D * (L + 1), "residual adds": T * D * L,
                                     "activation": 0}
    for argv in (["flops", preset], ["flops", preset, "--format", "json"]):
        if preset == "mamba-2.8b":
            result = CliRunner().invoke(cli, argv)
            assert result.exit_code == 0, result.output


def _without_experts(config: dict) -> dict:
    """The same family with dense FFNs only: peft's all-linear cannot see transformers' fused expert tensors."""
    c = dict(config)
    if c["model_type"] == "jamba":
        c.update(num_experts=1, num_experts_per_tok=1)
    elif c["model_type"] == "qwen3_next":
        c["num_experts"] = 0
    elif c["model_type"] == "nemotron_h":
        c["hybrid_override_pattern"] = c["hybrid_override_pattern"].replace("E", "-")
    elif c["model_type"] == "kimi_linear":
        c["first_k_dense_replace"] = c["num_hidden_layers"]
    return c


MAMBA_OUT_PROJ_REFUSED = {"falcon_h1", "mamba", "mamba2", "nemotron_h"}  # peft _check_lora_target_modules_mamba
LORA = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Zamba2's shared blocks carry adapters of their own; Qwen3.5-MoE has routed experts (fused tensors) in every layer.
@pytest.mark.parametrize("model_type", [t for t in SSM_TYPES if t not in ("zamba2", "qwen3_5_moe_text")])
def test_lora_all_linear_on_hybrids_matches_peft(model_type):
    """llmcalc's all-linear adapts every nn.Linear of the transformers model (meta device) but the LM head:
    the Mamba/Mamba-2/DeltaNet/short-conv projections with the attention and MLP ones, r·(in + out) each,
    and not the Mamba out_proj of the model types peft refuses it for. peft's get_peft_model trains exactly
    that many parameters (all-linear; for those model types, where peft raises on all-linear, the list of
    the other linears). qwen3_next is held to the module arithmetic only: peft's MoE conversion retargets
    gate/up/down_proj to expert tensors there, so a dense Qwen3-Next MLP gets no adapter from peft."""
    peft = pytest.importorskip("peft")

    @LORA
    @given(ssm_config(model_type), st.sampled_from([1, 4, 16]))
    def check(config, rank):
        config = _without_experts(config)
        model = build_hf(config)
        refused = {"out_proj"} if model_type in MAMBA_OUT_PROJ_REFUSED else set()
        linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
                   and name != "lm_head" and name.split(".")[-1] not in refused}
        want = sum(rank * (m.in_features + m.out_features) for m in linears.values())
        ft = finetune(spec_from_hf(config), lora_config("lora", rank))
        assert ft.trainable == want
        assert ft.frozen == stored_count(model)
        if model_type == "qwen3_next":
            return
        targets = sorted({name.split(".")[-1] for name in linears}) if refused else "all-linear"
        lora = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0,
                               bias="none", task_type="CAUSAL_LM")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert peft.get_peft_model(model, lora).get_nb_trainable_parameters()[0] == want

    check()


def test_lora_on_mamba_2_8b_by_hand():
    """`memory mamba-2.8b --finetune lora` crashed (None d_ff). Per Mamba layer, r·(d_in + d_out) over in_proj
    (D -> 2E), x_proj (E -> R + 2N) and dt_proj (R -> E), D 2560, E 5120, R 160, N 16; out_proj (E -> D) stays
    frozen, as peft refuses to adapt it on a mamba model (stored, so quantised under QLoRA)."""
    D, E, R, N, r = 2560, 5120, 160, 16, 16
    spec = load_model("mamba-2.8b")
    ft = finetune(spec, lora_config("lora", r))
    assert ft.components == {"mamba/in_proj": 64 * r * (D + 2 * E), "mamba/x_proj": 64 * r * (E + R + 2 * N),
                             "mamba/dt_proj": 64 * r * (R + E)}
    assert ft.trainable == 64 * r * ((D + 2 * E) + (E + R + 2 * N) + (R + E)) == 23_953_408
    assert ft.quantised_params == 64 * (D * 2 * E + E * (R + 2 * N) + R * E + E * D)
    step = step_flops(spec, 1, 4096)  # backward: 1x forward for frozen matmuls, 2x for the scan (no weight)
    assert FinetuneFlops(ft, step).frozen_backward == sum(step.ops.values()) + step.ops["mamba/scan"]
    mem = finetune_memory(spec, lora_config("lora", r), 1, 4096)
    assert mem.components()["weights"] == 2 * 2_768_345_600  # the bf16 base
    assert mem.components()["adapters"] == 4 * ft.trainable  # fp32 adapters
    with pytest.raises(LlmcalcError, match="no linear of mamba-2.8b matches --lora-targets q_proj,v_proj"):
        finetune(spec, lora_config("lora", r, "q,v"))
    result = CliRunner().invoke(cli, ["memory", "mamba-2.8b", "--finetune", "lora"])
    assert result.exit_code == 0, result.output


def test_lora_on_nemotron_3_nano_by_hand():
    """`memory nemotron-3-nano-30b-a3b --finetune lora` crashed (None d_ff). 23 Mamba-2 layers (in_proj D ->
    2E + 2GN + H; out_proj frozen, as peft has it for nemotron_h), 6 GQA layers (q, o: D <-> 32·128; k, v:
    D -> 2·128), 23 MoE layers of 128 non-gated experts (up, down: D <-> 1856) and one shared MLP of 3712;
    the router is not adapted."""
    D, E, G, N, H, r = 2688, 4096, 8, 128, 64, 16
    mamba2 = D + 2 * E + 2 * G * N + H
    attention = 2 * (D + 32 * 128) + 2 * (D + 2 * 128)
    moe = 128 * 2 * (D + 1856) + 2 * (D + 3712)
    ft = finetune(load_model("nemotron-3-nano-30b-a3b"), lora_config("lora", r))
    assert ft.trainable == r * (23 * mamba2 + 6 * attention + 23 * moe) == 439_440_384
    result = CliRunner().invoke(cli, ["memory", "nemotron-3-nano-30b-a3b", "--finetune", "lora"])
    assert result.exit_code == 0, result.output


def test_qlora_on_nemotron_h_quantises_the_linears_it_has():
    """The frozen base of Nemotron-H-8B in nf4: its block linears are the Mamba-2, attention and MLP projections
    (not an attention block and an MLP in all 52 layers, which made `weights` negative); they hold every
    parameter but embeddings, LM head, norms, conv1d and the SSM's per-head/per-channel vectors."""
    spec = load_model("nemotron-h-8b")
    ft = finetune(spec, lora_config("qlora", 64))
    D, E, G, N, H, K, F, V = 4096, 8192, 8, 128, 128, 4, 21504, 131072
    linears = 24 * (D * (2 * E + 2 * G * N + H) + E * D) + 4 * (2 * D * 32 * 128 + 2 * D * 8 * 128) + 24 * 2 * D * F
    rest = 2 * V * D + 52 * D + D + 24 * ((E + 2 * G * N) * (K + 1) + 3 * H + E)
    assert ft.quantised_params == linears and ft.total_params == linears + rest
    assert 0 < ft.base_weight_bytes() < 2 * ft.total_params


def test_lora_on_zamba2_shared_blocks_is_refused_in_one_line():
    with pytest.raises(LlmcalcError, match="fine-tuning is not modelled for its shared_block layers"):
        finetune(spec_from_hf(ZAMBA2_27B), lora_config("lora", 16))


@pytest.mark.parametrize("argv", ["flops {m} --format json", "flops {m} --causal --recompute full",
                                  "params {m} --finetune lora --format json", "flops {m} --finetune lora",
                                  "memory {m} --finetune qlora --format json",
                                  "memory {m} --finetune lora --recompute full"])
@pytest.mark.parametrize("name", HYBRID_PRESETS)
def test_every_hybrid_preset_answers(name, argv):
    """Each of these crashed on a None width for mamba-2.8b or nemotron-3-nano-30b-a3b (no dense FFN)."""
    result = CliRunner().invoke(cli, argv.format(m=name).split())
    assert result.exit_code == 0, result.output
