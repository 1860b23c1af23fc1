"""Independent references for the tests: `transformers` models built on the meta device, offline.

Nothing here is llmcalc code: these helpers only build the Hugging Face model from a config dict
and count its parameters the way PyTorch users do. They compare what a user sees (parameters, FLOPs, the bytes a
cache allocates), not transformers' internals; checked against transformers 5.24.0 and 5.25.0 (constraints.txt
pins the version the tests run with; benchmarks/newest_deps.py runs them on the newest release).
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from functools import cache

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

ENCODER_DECODER = {"t5", "marian"}
ENCODER = {"bert"}


SAME_AS = {"kimi_k2": "deepseek_v3"}  # Kimi-K2's config loads DeepseekV3 classes (its auto_map)
# The parts of a multimodal checkpoint class that are not its language model.
VISION = re.compile(r"^(model\.)?(visual|vision_tower|vision_model|multi_modal_projector|embed_vision|audio_tower|"
                    r"embed_audio|mm_projector|vision_embed)\b")


def hf_values(config: dict) -> tuple[str, dict]:
    """(model_type, config keys) of the transformers model to build: the checkpoint's own, with the
    quantization and remote-code keys dropped (a multimodal checkpoint keeps its text_config); Kimi-K2 is
    DeepSeek-V3."""
    values = {k: v for k, v in config.items() if not k.startswith("_") and k != "quantization_config"}
    model_type = values.pop("model_type")
    if isinstance(values.get("text_config"), dict):
        values["text_config"] = {k: v for k, v in values["text_config"].items() if k != "quantization_config"}
    values.pop("auto_map", None)
    return SAME_AS.get(model_type, model_type), values


def build_hf(config: dict):
    """The transformers model for an HF config dict, on the meta device (no memory, no download).

    Decoders get their *ForCausalLM class (LM head included), encoders the bare AutoModel (BERT with
    its pooler), encoder-decoders their *ForConditionalGeneration / MTModel, and a multimodal checkpoint the
    class its config names (AutoModelForImageTextToText: vision tower, language model and LM head, tied as that
    class ties them), of which ``language_params`` keeps the language model and the head.
    """
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoModelForSeq2SeqLM,
    )

    model_type, values = hf_values(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(model_type, **values)
        auto = (
            AutoModelForSeq2SeqLM if model_type in ENCODER_DECODER
            else AutoModel if model_type in ENCODER
            else AutoModelForImageTextToText if "text_config" in values else AutoModelForCausalLM
        )
        with torch.device("meta"):
            return auto.from_config(cfg)


def language_params(model):
    """(name, tensor) of the language model and its head as a checkpoint stores them (``stored_state``): a multimodal
    class's vision tower, projector and audio tower left out (as llmcalc counts text_config)."""
    return [(n, t) for n, t in stored_state(model).items() if not VISION.search(n)]


def stored_state(model) -> dict:
    """The tensors transformers' save_pretrained writes of `model` (modeling_utils.py): its state_dict (every
    parameter, frozen ones too, and every persistent buffer: DeepSeek-V3's e_score_correction_bias), less the class's
    _keys_to_ignore_on_save (Marian's sinusoidal tables), less tied copies (remove_tied_weights_from_state_dict)."""
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = model.state_dict()
    for key in getattr(model, "_keys_to_ignore_on_save", None) or ():
        state.pop(key, None)
    return remove_tied_weights_from_state_dict(state, model)


def stored_count(model) -> int:
    """sum(t.numel()) over what a checkpoint of the model stores (``stored_state``: parameters, frozen ones included,
    and persistent buffers), the language model's only (a multimodal class's vision tower left out)."""
    return sum(t.numel() for _, t in language_params(model))


@cache
def _count_json(config_json: str) -> tuple[int, tuple]:
    model = build_hf(json.loads(config_json))
    return stored_count(model), tuple(sorted(hf_groups(model).items()))


def hf_count(config: dict) -> tuple[int, dict[str, int]]:
    """(stored parameter count, counts per group) of the transformers model for `config`; cached."""
    total, groups = _count_json(json.dumps(config, sort_keys=True))
    return total, dict(groups)


# Group of each HF parameter, by its name. Rules are tried in order; every parameter must match one.
_GROUP_RULES = [
    ("attention", re.compile(r"(q_a|kv_a)_layernorm")),  # MLA latent norms belong to attention
    ("attention", re.compile(r"(\bq|\bk|query|key)_(layer)?norm")),  # QK-norms too
    ("attention", re.compile(r"norm_attn_norm\.attn\.")),  # DBRX wraps attention between its norms
    ("embedding", re.compile(r"project_in")),  # OPT's word_embed_proj_dim projections
    ("head", re.compile(r"project_out")),
    # State-space mixers (Mamba, Jamba's .mamba., Nemotron-H's .mixer.), their inner norms included.
    ("mamba", re.compile(r"\.(mamba|mixer)\.(in_proj|conv1d|x_proj|dt_proj|A_log|D|dt_bias|norm|out_proj|"
                         r"dt_layernorm|b_layernorm|c_layernorm)\b")),
    ("attention", re.compile(r"\.mixer\.[qkvo]_proj\.")),  # Nemotron-H: one mixer per layer
    ("mlp", re.compile(r"\.mixer\.(up|down)_proj\.")),
    ("mlp", re.compile(r"\.mixer\.(gate|experts|shared_experts)\.")),  # Nemotron-H's MoE mixer
    # Issue 22's parts: DeepSeek-V4's hyper-connections (mHC), Gemma 4's per-layer inputs (the per-layer table
    # and its projection are embedding; the projection's norm a norm).
    ("hyper_connections", re.compile(r"\b(attn_hc|ffn_hc|hc_head)\.")),
    ("attention", re.compile(r"self_attn\.(q_a_norm|kv_norm|compressor\.)")),  # DeepSeek-V4's attention norms
    ("per_layer", re.compile(r"\.per_layer_(input_gate|projection)\.")),
    ("embedding", re.compile(r"per_layer_model_projection")),
    ("norm", re.compile(r"norm|ln_|\bln\b", re.I)),
    ("head", re.compile(r"lm_head|embed_out|pooler|final_logits_bias")),
    ("norm", re.compile(r"\.layer_scalar$")),  # Gemma 4's per-layer output scalar (a stored buffer)
    ("embedding", re.compile(r"embed|wte|wpe|(^|\.)shared\.|word_embeddings|position_embeddings|token_type")),
    ("attention", re.compile(r"attn|attention|query_key_value", re.I)),
    ("mlp", re.compile(r"mlp|DenseReluDense|intermediate|output\.dense|fc1|fc2|experts|\.ffn\.|feed_forward|"
                       r"block_sparse_moe|router|shared_expert")),
]


def hf_groups(model) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, p in language_params(model):
        name = re.sub(r"^model\.language_model\.", "model.", name)
        for group, pattern in _GROUP_RULES:
            if pattern.search(name):
                out[group] = out.get(group, 0) + p.numel()
                break
        else:
            raise AssertionError(f"test rule missing for HF parameter {name}")
    return out


def llmcalc_groups(components: dict[str, int]) -> dict[str, int]:
    """llmcalc's breakdown folded onto the same five groups (stacks merged, cross-attention = attention)."""
    out: dict[str, int] = {}
    for key, value in components.items():
        group, part = key.split("/")
        group = group.split(".")[-1]
        if group == "cross_attention":
            group = "attention"
        if group == "moe":
            group = "mlp"
        if group == "mamba2":
            group = "mamba"
        if group in ("gated_deltanet", "kda"):  # transformers' linear_attn / self_attn; their output norm a norm
            group = "norm" if part == "norm" else "attention"
        if key == "head/hc_head":  # DeepSeek-V4's mHC head mix (hc_head)
            group = "hyper_connections"
        if key in ("embedding/norm", "embedding/per_layer_norm"):
            group = "norm"
        out[group] = out.get(group, 0) + value
    return out


@cache
def _forward_flops_json(config_json: str, batch: int, seq: int, real: bool,
                        decoder_seq: int | None = None) -> tuple[int, tuple]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoModelForSeq2SeqLM,
    )

    model_type, values = hf_values(json.loads(config_json))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(model_type, **values)
        # Routed experts (data-dependent shapes) run on real tiny tensors; everything else is fake.
        fake = FakeTensorMode(allow_non_fake_inputs=True) if not real else contextlib.nullcontext()
        impl = {"attn_implementation": "eager"}  # QKᵀ and AV as plain matmuls, which the counter sees
        if real:
            impl["experts_implementation"] = "eager"  # the loop over the experts that tokens were routed to
        for sub in (cfg, getattr(cfg, "text_config", None)):
            if sub is not None:  # a multimodal checkpoint: its language model too
                sub._attn_implementation = impl["attn_implementation"]
                if real:
                    sub._experts_implementation = "eager"
        torch.manual_seed(0)
        auto = (AutoModelForSeq2SeqLM if model_type in ENCODER_DECODER
                else AutoModel if model_type in ENCODER
                else AutoModelForImageTextToText if "text_config" in values else AutoModelForCausalLM)
        if real:
            model = auto.from_config(cfg, **impl)
        else:  # built on the meta device, then faked (DeepSeek-V4 casts modules in __init__, which fakes refuse)
            with torch.device("meta"):
                model = auto.from_config(cfg, **impl)
        with fake:
            if not real:
                model = model.to_empty(device="cpu")
            # No parameter needs a gradient: FlopCounterMode's module tracker then sets no backward
            # hooks (DBRX's experts hand out weight views, which those hooks cannot take under no_grad).
            model.requires_grad_(False)
            vocab = cfg.get_text_config().vocab_size
            ids = torch.randint(0, vocab, (batch, seq))  # varied tokens: varied expert routing
            kwargs = {"input_ids": ids}
            if model_type in ENCODER_DECODER:
                kwargs["decoder_input_ids"] = torch.randint(0, vocab, (batch, decoder_seq or seq))
            if model_type not in ENCODER:
                kwargs["use_cache"] = False
            with FlopCounterMode(display=False) as counter, torch.no_grad():
                model(**kwargs)
    per_op = counter.get_flop_counts()["Global"]
    return counter.get_total_flops(), tuple(sorted((str(k), v) for k, v in per_op.items()))


def hf_forward_flops(config: dict, batch: int, seq: int, real: bool = False,
                     decoder_seq: int | None = None) -> tuple[int, dict[str, int]]:
    """torch's FlopCounterMode total (and per aten op) for one forward of the transformers model,
    run under FakeTensorMode (no memory) with eager attention; `real`: on real CPU tensors instead
    (tiny MoE configs, whose routing has data-dependent shapes: HF runs each expert on the tokens
    routed to it). Encoder-decoders get `decoder_seq` decoder tokens (default `seq`)."""
    total, per_op = _forward_flops_json(json.dumps(config, sort_keys=True), batch, seq, real, decoder_seq)
    return total, dict(per_op)
