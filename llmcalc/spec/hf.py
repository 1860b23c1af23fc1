"""Read Hugging Face config.json dicts as SpecDrafts (and so as ModelSpecs): ``draft_from_hf``, ``spec_from_hf``.

The work is split by concern:
- ``hf_keys``: ``HF_KEYS`` maps HF key names (and their per-family aliases) to spec fields; the checks on a
  config's values (``check_config_values``, ``check_sizes``).
- ``hf_families`` (with ``hf_2026`` and ``hf_ssm``): ``FAMILIES`` says, per ``model_type``, what HF leaves implicit
  in the modelling code (gated MLP, norm kind, which linears carry biases, position embeddings), and the HF class
  defaults that apply when a config.json omits a key; each entry (a ``hf_family.Family``) names the transformers
  file it mirrors.
- ``hf_layers``: lists given per layer, and windowed attention laid out layer by layer.
- here: the language model of a multimodal config, the quantization block (checked by ``quantization``), the
  family found and read, the notes.
Nothing is inferred from a model's name.

A config whose model_type is not in FAMILIES still works when it states the implicit facts itself
with llmcalc's own keys (``REQUIRED_FOR_UNKNOWN``), e.g. ``"mlp": "swiglu", "norm": "rmsnorm"``.
Otherwise ``UnknownModelType`` is raised: `params`, `flops` and `train` then count the model with
transformers' modelling code (``llmcalc.fallback``); commands that need a formula report it.
"""

from __future__ import annotations

from dataclasses import fields

from ..records import construct
from .draft import SpecDraft, SpecError
from .hf_families import FAMILIES
from .hf_family import Family, NoFormula, attention_bias, mlp_kind
from .hf_keys import ACTIVATION_KEYS, HF_KEYS, PER_LAYER_FIELDS, check_config_values, check_sizes, first
from .hf_layers import WINDOWED, attention_spans, moe_layer_mask, per_layer_lists
from .model import ModelSpec
from .quantization import check_quantization_config
from .resolve import resolve

__all__ = ["FAMILIES", "HF_KEYS", "PER_LAYER_FIELDS", "WINDOWED", "UnknownModelType", "check_config_values",
           "check_sizes", "draft_from_hf", "spec_from_hf"]

# The llmcalc keys a config of an unknown model_type must carry (with the HF shape keys above).
REQUIRED_FOR_UNKNOWN = ("mlp", "norm", "pos_emb")
_SPEC_FIELDS = {f.name for f in fields(SpecDraft)}


class UnknownModelType(SpecError):
    """A model_type with no analytic family and no llmcalc keys; carries the config for the fallback, and `outer`, the
    config as given when `config` is its text_config (for the fallback to hold against transformers' config class)."""

    def __init__(self, message: str, config: dict, name: str, outer: dict | None = None, note: str | None = None):
        super().__init__(message)
        self.config, self.name, self.outer = config, name, outer
        self.note = note  # a known model_type with a part no formula covers: what, for the counted model's notes


# Multimodal checkpoints whose language model llmcalc counts from text_config (and its text model_type when
# text_config names none), and the outer config class's tie_word_embeddings default, which transformers 5 applies
# when the outer config says nothing: the wrapper ties lm_head to the language model's embeddings iff the outer
# config does (modeling_utils.py PreTrainedModel.get_expanded_tied_weights_keys reads self.config), whatever
# text_config says. Sources: each configuration_<type>.py's class field.
MULTIMODAL_TEXT = {"gemma3": "gemma3_text", "llama4": "llama4_text", "gemma4": "gemma4_text", "mistral3": "mistral",
                   "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text", "glm4v_moe": "glm4v_moe_text",
                   "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "kimi_k25": "deepseek_v3"}
OUTER_TIE = {"gemma3": True, "llama4": False, "gemma4": True, "mistral3": True, "qwen3_vl": False,
             "qwen3_vl_moe": False, "glm4v_moe": False, "qwen3_5": False, "qwen3_5_moe": False, "kimi_k25": True}


def _outer_tie(model_type: str | None, outer: dict, text: dict) -> tuple[bool | None, str | None]:
    """(tie_word_embeddings of a multimodal checkpoint, a note where the outer class default is overruled): the outer
    config's own value; else, where the outer config says nothing, the text config's (its own key, else its class
    default), which is what the checkpoint ships: Mistral-Small-3.1 (mistral3, no tie key anywhere) stores a separate
    lm_head.weight, and transformers 5.25's from_pretrained, finding both tensors in the checkpoint with different
    values, does not tie them (modeling_utils.py tie_weights) whatever Mistral3Config's default (true) says; else
    the outer class default (OUTER_TIE). Glm4vMoeConfig.__post_init__ also ties when text_config says so (its
    backward-compatibility rule). None: a wrapper llmcalc does not know, text_config decides."""
    given = outer.get("tie_word_embeddings")
    if model_type == "glm4v_moe" and not given and text.get("tie_word_embeddings"):
        return True, None
    if given is not None:
        return bool(given), None
    default = OUTER_TIE.get(model_type or "")
    if default is None:
        return None, None
    family = FAMILIES.get(text.get("model_type") or "")
    text_tie = text.get("tie_word_embeddings", family.defaults.get("tie_word_embeddings") if family else None)
    if text_tie is None or bool(text_tie) == default:
        return default, None
    whose = "text_config's" if "tie_word_embeddings" in text else f"the text model's ({text.get('model_type')}) default"
    return bool(text_tie), (
        f"tie_word_embeddings is absent from the top level: {whose} {str(bool(text_tie)).lower()} is counted, as the "
        f"checkpoint ships it ({'one shared table' if text_tie else 'a separate lm_head'}), not transformers' "
        f"{model_type} class default ({str(default).lower()}), which from_pretrained overrules when the checkpoint "
        f"says otherwise")


def spec_from_hf(hf: dict, name: str = "custom") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json dict (unchanged, as published); a rule the resolved shapes
    break names the config key it comes from (intermediate_size, not llmcalc's d_ff)."""
    draft = draft_from_hf(hf, name)
    try:
        return resolve(draft)
    except SpecError as exc:
        field, _, rest = str(exc).partition(" ")
        keys = HF_KEYS.get(field)
        if keys and type(exc) is SpecError and rest.startswith("must be a positive whole number"):
            key = next((k for k in keys if k in hf), keys[0])
            rest = rest.replace("none is given", "the config has none" if key not in hf else "it is null")
            raise SpecError(f"config key {key} (llmcalc's {field}) {rest}") from None
        raise


# Families whose router holds a per-expert score-correction bias (E) that the checkpoint stores, a persistent buffer
# in transformers (nn.Buffer: in the state_dict, so save_pretrained writes it): modeling_deepseek_v3.py,
# modeling_deepseek_v32.py, modeling_glm_moe_dsa.py, modeling_glm4_moe.py, modeling_glm4_moe_lite.py,
# modeling_glm4v_moe.py, modeling_kimi_linear.py, modeling_minimax_m2.py (on the MoE block), modeling_nemotron_h.py
# (e_score_correction_bias, every MoE layer), modeling_deepseek_v4.py (its "moe" layers; its first "hash_moe" layers
# keep a token-id table tid2eid, vocab x top-k, instead: not counted yet); ERNIE-4.5 (a frozen parameter) sets it
# in its own derive step.
SCORE_BIAS_STORED = frozenset({"deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe", "glm4_moe_lite",
                               "glm4v_moe_text", "kimi_linear", "minimax_m2", "nemotron_h", "deepseek_v4"})


def draft_from_hf(hf: dict, name: str = "custom") -> SpecDraft:
    """A SpecDraft from a Hugging Face config.json dict (unchanged, as published): the quantization block checked, the
    language model picked (a multimodal config's text_config), its family found, then read (``_read_family``)."""
    check_config_values(hf)
    given = hf  # the config as given (text_config and all)
    notes = _quantization_notes(hf)
    stored = hf.get("torch_dtype", hf.get("dtype"))
    hf, outer, more = _language_model(hf)
    notes += more
    model_type = hf.get("model_type")
    family = _family_of(model_type, hf, given, name, outer)
    raw = hf  # the config transformers builds, should no formula cover a part of it
    try:
        hf, merged, kw = _read_family(family, model_type, hf)
    except NoFormula as exc:
        if model_type not in FAMILIES:  # explicit llmcalc keys: nothing else counts it
            raise SpecError(str(exc)) from None
        check_sizes(given)  # the fallback builds the model: the formula path's limits first
        raise UnknownModelType(f"{exc}: a ModelSpec needs llmcalc's formula (every command counts the model with "
                               f"transformers instead)", raw, name, outer,
                               note=f"{exc}; counted by transformers") from None
    if model_type in SCORE_BIAS_STORED and kw.get("n_experts"):
        kw["router_score_bias"] = True
    notes += _span_notes(kw) + _sparse_attention_notes(kw)
    mtp = merged.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and mtp > 0:  # DeepSeek-V3, GLM-4.5, Kimi-K2, Nemotron-H: mtp.* weights not loaded
        notes += (f"num_nextn_predict_layers {mtp}: the multi-token-prediction layers are not part of the "
                  f"transformers model and are not counted (nor their FLOPs)",)
    kw["name"] = name
    kw["model_type"] = model_type
    kw["notes"] = tuple(kw.get("notes", ())) + notes
    # The checkpoint as stored (analytic/quant.py): its quantization_config, the dtype of what it leaves
    # unquantized, and the MTP layers it holds beyond transformers' model (num_nextn_predict_layers: DeepSeek-V3,
    # GLM-4.5; mtp_num_hidden_layers: Qwen3-Next).
    quant = given.get("quantization_config")
    kw["quantization_config"] = quant if quant is not None else hf.get("quantization_config")
    if isinstance(stored, str):
        kw["checkpoint_dtype"] = stored
    n_mtp = merged.get("num_nextn_predict_layers", merged.get("mtp_num_hidden_layers"))
    if isinstance(n_mtp, int) and not isinstance(n_mtp, bool) and n_mtp > 0:
        kw["n_mtp_layers"] = n_mtp
    return construct(SpecDraft, kw)  # SpecDraft(**kw), without its 97-argument __init__


def _quantization_notes(hf: dict) -> tuple[str, ...]:
    """The config's quantization_config (and its text_config's) checked here, once, for every command (params
    included: ``quantization.check_quantization_config``), and the note that parameters are counted unquantized."""
    quant = hf.get("quantization_config")
    check_quantization_config(quant)
    if isinstance(hf.get("text_config"), dict):
        check_quantization_config(hf["text_config"].get("quantization_config"))
    if quant is None:
        return ()
    return (f"quantization_config ({quant.get('quant_method', 'unnamed')}): parameters are counted as in the "
            f"unquantized model (one each, whatever their storage); serve, infer, memory --finetune, compare and "
            f"report size the weights as the checkpoint stores them",)


def _language_model(hf: dict) -> tuple[dict, dict | None, tuple[str, ...]]:
    """(the config of the language model llmcalc counts, the outer config when that is a multimodal checkpoint's
    text_config, the notes saying so): a known family's sub-configs are ignored (no formula family has any); a
    multimodal checkpoint's text_config is read with the outer class's tie and quantization (MULTIMODAL_TEXT,
    ``_outer_tie``); vision or audio without text is refused."""
    model_type = hf.get("model_type")
    single = [k for k in ("text_config", "vision_config", "audio_config") if isinstance(hf.get(k), dict)]
    if model_type in FAMILIES and single:  # one text model (no formula family has sub-configs): the top-level keys
        return hf, None, (f"{' and '.join(single)} ignored: transformers' {model_type} config has no text, vision or "
                          f"audio sub-config, so the top-level keys are the model, as its modelling code builds it",)
    if isinstance(hf.get("text_config"), dict):  # a multimodal checkpoint: count its language model
        outer, text = hf, {**hf["text_config"]}
        check_config_values(text)
        text.setdefault("model_type", MULTIMODAL_TEXT.get(model_type, model_type) if model_type else model_type)
        tie, tie_note = _outer_tie(model_type, outer, text)
        if tie is not None:  # the top-level class ties the LM head
            text["tie_word_embeddings"] = tie
        elif outer.get("tie_word_embeddings") is not None:
            text["tie_word_embeddings"] = outer["tie_word_embeddings"]
        if outer.get("quantization_config") is not None:
            text["quantization_config"] = outer["quantization_config"]
        if isinstance(outer.get("vision_config"), dict):  # the tower vLLM loads beside the language model
            text["vision_config"] = outer["vision_config"]
        note = (f"multimodal config ({model_type}): the language model from text_config is counted; "
                f"the vision tower and multimodal projector are left out")
        return text, outer, ((tie_note,) if tie_note else ()) + (note,)
    if any(isinstance(hf.get(k), dict) for k in ("vision_config", "audio_config")):
        raise SpecError(f"multimodal config ({model_type}) without a text_config: nothing to count as a "
                        f"language model; give a config.json whose text_config describes its decoder")
    return hf, None, ()


def _family_of(model_type: str | None, hf: dict, given: dict, name: str, outer: dict | None) -> Family:
    """The family a config is read with: FAMILIES' entry, else the config's own llmcalc keys (REQUIRED_FOR_UNKNOWN);
    a model_type with neither raises UnknownModelType (transformers counts it), a config without one SpecError."""
    if model_type is None and not any(k in hf for keys in HF_KEYS.values() for k in keys):
        raise SpecError("not a model config: no model_type and no model shape keys (hidden_size, "
                        "num_hidden_layers, ...); give a Hugging Face config.json or an llmcalc spec")
    family = FAMILIES.get(model_type) if model_type else None
    if family is not None:
        return family
    missing = [k for k in REQUIRED_FOR_UNKNOWN if k not in hf]
    if missing:
        describe = (f"or add llmcalc's keys {', '.join(missing)} to the config (e.g. \"mlp\": \"swiglu\", "
                    f"\"norm\": \"rmsnorm\", \"pos_emb\": \"rope\")")
        known = f"not one of the {len(FAMILIES)} with a formula (README, 'What is covered')"
        if isinstance(model_type, str) and model_type:
            check_sizes(given)  # the fallback builds the model: the formula path's limits first
            raise UnknownModelType(
                f"unknown model_type {model_type!r}, {known}: a ModelSpec needs its shapes (every command "
                f"counts it with transformers instead); {describe}", hf, name, outer)
        raise SpecError(f"unknown model_type {model_type!r}, {known}; {describe}")
    return Family("explicit llmcalc keys", {}, {}, attention_bias, gated=hf["mlp"] in ("swiglu", "geglu"))


def _span_notes(kw: dict) -> tuple[str, ...]:
    """How the FLOPs count a model whose layers attend within windows or chunks."""
    spans = kw.get("attention_spans")
    if spans is None or all(t == "full" for t in spans):
        return ()
    chunked = "chunked" in spans
    size = kw["attention_chunk" if chunked else "attention_window"]
    local = sum(1 for t in spans if t != "full")
    return (f"{local} of {len(spans)} layers use {'chunked' if chunked else 'sliding-window'} attention "
            f"({'chunks' if chunked else 'a window'} of {size:,} tokens): FLOPs count their S² terms in "
            f"full, as the masked eager attention (and torch's FlopCounterMode) does; a windowed kernel "
            f"does less",)


def _read_family(family: Family, model_type: str | None, hf: dict) -> tuple[dict, dict, dict]:
    """(the config unaliased, merged with the class defaults, the SpecDraft fields) of one family's config: HF_KEYS,
    the activation, the derive step, per-layer lists and windows; NoFormula where no formula covers a part."""
    hf = family.unalias(hf)
    merged = {**family.defaults, **{k: v for k, v in hf.items() if v is not None or k in family.keep_null}}
    kw: dict = {}
    sources: dict[str, str] = {}
    present = {k: v for k, v in hf.items() if v is not None}
    for spec_field, keys in HF_KEYS.items():  # the config's own key (any alias) before a class default
        value = first(present, keys)
        value = first(merged, keys) if value is None else value
        if value is not None:
            kw[spec_field] = value
            sources[spec_field] = next((k for k in keys if present.get(k) is not None), keys[0])
    missing = [k for k in ("n_layers", "d_model", "n_heads", "vocab_size") if k not in kw]
    if missing:
        names = ", ".join(f"{k} ({'/'.join(HF_KEYS[k])})" for k in missing)
        raise SpecError(f"config is missing {names}")
    activation = first(merged, ACTIVATION_KEYS)
    if activation is not None:
        kw["mlp"] = mlp_kind(activation, family.gated)
    elif not family.gated:
        kw["mlp"] = "gelu"
    kw.update(family.implicit)
    per_layer_lists(family, model_type, kw, sources)
    if family.derive is not None:
        family.derive(merged, kw)
    # Explicit llmcalc keys in the file win over everything (how an unknown model_type is described).
    # HF's own `layer_types` (Gemma 3 / gpt-oss "sliding_attention", LFM2 "conv", Qwen3-Next
    # "linear_attention") means something else: a known family translates it in its derive step.
    hf_owned = ("name", "model_type") + (("layer_types",) if model_type in FAMILIES else ())
    kw.update({k: v for k, v in hf.items() if k in _SPEC_FIELDS and k not in hf_owned})
    moe_layer_mask(kw, sources)
    if "attention_spans" not in kw and isinstance(kw.get("n_layers"), int):
        kw.update(attention_spans(model_type, hf, kw["n_layers"]))  # the config as given: null is not absent
    return hf, merged, kw


def _sparse_attention_notes(kw: dict) -> tuple[str, ...]:
    """What a sparse-attention step computes beside what the FLOPs count (the masked eager attention, as torch's
    FlopCounterMode sees it): DeepSeek Sparse Attention's indexer and top-k (modeling_deepseek_v32.py,
    modeling_glm_moe_dsa.py), DeepSeek-V4's compressed entries (modeling_deepseek_v4.py)."""
    topk, compress = kw.get("index_topk"), kw.get("kv_compress")
    if compress is not None:
        csa, hca = compress.count("csa"), compress.count("hca")
        return (f"DeepSeek-V4 attention: every layer attends its window of {kw['attention_window']:,} keys, and "
                f"{csa} CSA layers (one entry per {kw.get('kv_compress_csa', 0)} tokens, a lightning indexer picks "
                f"the {topk or 0:,} best) and {hca} HCA layers (one entry per {kw.get('kv_compress_hca', 0)} tokens, "
                f"all read) add compressed keys; FLOPs count every query against the whole window mask and every "
                f"compressed entry, as the masked eager attention (and torch's FlopCounterMode) does; a sparse "
                f"kernel reads window + top-k (CSA) or window + S/{kw.get('kv_compress_hca', 0)} (HCA) keys per "
                f"query",)
    if topk:
        layers = kw.get("index_layers")
        n = len(layers) if layers is not None else kw["n_layers"]
        return (f"DeepSeek Sparse Attention: {n} of {kw['n_layers']} layers run a lightning indexer "
                f"({kw['index_n_heads']} heads of {kw['index_head_dim']}) over every earlier key"
                f"{' (the others reuse the previous top-k)' if n < kw['n_layers'] else ''}; attention then reads the "
                f"{topk:,} best keys per query. FLOPs count the indexer "
                f"and the attention's S² terms in full, as the masked eager attention (and torch's "
                f"FlopCounterMode) does; a DSA kernel's attention reads min(S, {topk:,}) keys per query",)
    return ()
