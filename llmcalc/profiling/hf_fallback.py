"""Count a model llmcalc has no formula for by building it with transformers' own modelling code.

The model is built from its config dict (``AutoConfig.for_model``) on the meta device, and faked
(``to_empty`` under ``FakeTensorMode``) when its forward is counted: every
parameter is a fake tensor (shape and dtype, no storage), so a 70B-class config costs no memory.
Parameters are the tensors a checkpoint of the model stores (``stored_tensors``: what transformers'
``save_pretrained`` writes: the state dict, frozen parameters and persistent buffers such as a router's
``e_score_correction_bias`` included, non-persistent buffers such as rotary ``inv_freq`` not, less
``_keys_to_ignore_on_save``; a tied LM head is one tensor, counted once), each filed under a component by the
name of the module holding it (``classify``). Forward FLOPs are what torch's ``FlopCounterMode`` counts for
one batch-1 forward of ``seq_len`` fake token ids, with the profiler's CPU sdpa formulas registered (``counters.py``).

MoE: experts written with transformers' ``@use_experts_implementation`` are run with its
``batched_mm`` implementation, which gathers the k routed experts of every token and multiplies
only those (tokens x k expert matmuls: exactly the routed work, whatever the router picks). Expert
loops that branch on which experts were hit (``torch.where`` over the routing mask) have
data-dependent shapes that fake tensors cannot follow; they get one clear error, not a guess.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import defaultdict
from typing import Any

import torch

from ..errors import DataDependent, LlmcalcError
from .counters import CORE_OPS, count_flops, inference_forward
from .hf_measure import failure

ATTENTION = re.compile(r"attn|attention")
CROSS = re.compile(r"encoder_attn|cross|encdec", re.IGNORECASE)
EXPERTS = re.compile(r"experts?$")
SHARED = re.compile(r"shared")
MLP = re.compile(r"mlp|ffn|feed_?forward|^fc\d?$|^fc_(in|out)$|^c_fc$|dense_h_to_4h|dense_4h_to_h|^w[123]$|moe|"
                 r"^intermediate$|^output$")
NORM = re.compile(r"norm|^ln(_|\d|$)|_ln(_|\d|$)", re.IGNORECASE)
EMBED = re.compile(r"embed|^wte$|^wpe$")
HEAD = re.compile(r"(^|_)lm_head$|^embed_out$|^output_layer$")
ROUTER = re.compile(r"^(gate|router)$")
EMBED_PARTS = {"tokens": "tokens", "wte": "tokens", "tok": "tokens", "word": "tokens", "wpe": "positions",
               "position": "positions", "positions": "positions", "token_type": "token_types"}


def classify(path: list[str], experts_parents: set[str]) -> str:
    """The llmcalc component ("group/part") of the module at `path`, e.g. ["model", "layers", "0",
    "self_attn", "q_proj"] -> "attention/q_proj", or the path itself (layer indices as *) when no rule
    recognises it.

    Any norm is "norm" (final, per layer, or the embedding's); outside the layer stack, token and
    position tables are "embedding" and the output projection "head"; inside a layer the first
    recognised segment wins. A ``gate``/``router`` is a MoE router only where its parent module
    holds ``experts``; the MoE block itself is "moe"."""
    layer = next((i for i, seg in enumerate(path) if seg.isdigit()), None)
    leaf = path[-1] if path else ""
    if layer is None:
        if HEAD.search(leaf):
            return "head/lm_head"
        if any(EMBED.search(seg) for seg in path):
            if NORM.search(leaf):
                return "embedding/norm"
            part = re.sub(r"^embed_|_?embeddings?$", "", leaf) or leaf
            return "embedding/" + EMBED_PARTS.get(part, part)
        if NORM.search(leaf):
            return "norm/final"
        return ".".join(path) or "(root)"
    inner = path[layer + 1:]
    stack = next((f"{s}." for s in ("encoder", "decoder") if any(s in seg for seg in path[:layer])), "")
    return stack + _in_layer(path, layer, inner, experts_parents)


def _in_layer(path: list[str], layer: int, inner: list[str], experts_parents: set[str]) -> str:
    if NORM.search(path[-1]):
        return "norm/layers"
    for i, seg in enumerate(inner):
        here = ".".join(path[: layer + 2 + i])
        parent = here.rsplit(".", 1)[0]
        if ATTENTION.search(seg):
            group = "cross_attention" if CROSS.search(seg) else "attention"
            return f"{group}/{inner[-1]}" if i < len(inner) - 1 else group
        if EXPERTS.search(seg):
            return "moe/shared_experts" if SHARED.search(seg) else "moe/experts"
        if SHARED.search(seg) and ("expert" in seg or "mlp" in seg):
            return "moe/shared_experts"
        if ROUTER.match(seg) and parent in experts_parents:
            return "moe/router"
        if here in experts_parents:
            if i == len(inner) - 1:
                return "moe"
            continue  # a MoE block (whatever its name): its children say experts, router or shared
        if MLP.search(seg):
            return "mlp"
    return ".".join("*" if seg.isdigit() else seg for seg in path)


def _experts_parents(model) -> set[str]:
    """Names of the modules that hold an ``experts`` child (their ``gate``/``router`` is a router)."""
    out = set()
    for name, _ in model.named_modules():
        parts = name.split(".")
        if parts and EXPERTS.search(parts[-1]):
            out.add(".".join(parts[:-1]))
    return out


def _auto_classes():
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    return (AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModel)


def _config(hf: dict):
    from transformers import CONFIG_MAPPING, AutoConfig

    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise LlmcalcError(f"model_type {model_type!r} is unknown to llmcalc and to the installed transformers "
                           f"({_version()}); describe it with llmcalc's keys \"mlp\", \"norm\", \"pos_emb\" instead")
    kwargs = {k: v for k, v in hf.items() if k not in ("model_type", "_source", "transformers_version")}
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # transformers' own validation of the config
        raise LlmcalcError(f"transformers rejects this {model_type} config: {_reason(exc)}") from None


def has_text_config(model_type) -> bool | None:
    """Whether transformers' config class of `model_type` holds a text_config sub-config (a multimodal wrapper:
    qwen2_5_vl, llava) or not (persimmon: a text_config key is then not the model); None where transformers does not
    know the model_type."""
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None
    try:
        subs = CONFIG_MAPPING[model_type].sub_configs or {}
    except Exception:  # a lazily imported family that fails to import
        return None
    return "text_config" in subs


def text_model_type(model_type) -> str | None:
    """The model_type of the text_config sub-config class of transformers' `model_type` config (MiniMax-M3's
    minimax_m3_vl: minimax_m3_vl_text), or None where it has none of its own (llava's AutoConfig: the text_config
    names its model_type) or transformers does not know the model_type."""
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING or model_type not in _generative():
        return None  # CLIP's text_config is a text encoder beside a vision one: the wrapper is built (and refused)
    try:
        text = (CONFIG_MAPPING[model_type].sub_configs or {}).get("text_config")
    except Exception:  # a lazily imported family that fails to import
        return None
    name = getattr(text, "model_type", None)
    return name if isinstance(name, str) and name and name in CONFIG_MAPPING else None


SHAPE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def _shapes(hf: dict, config) -> dict:
    """The config's main sizes that the file leaves to the config class's defaults ({field: value}); a
    size that is not a positive whole number is an error (transformers would build a model without
    layers from ``n_layer: -1``)."""
    amap = getattr(config, "attribute_map", {})  # standard name -> this family's name (n_layer, d_model, ...)
    aliases = {canonical: [amap.get(canonical)] + [k for k, v in amap.items() if v == canonical]
               for canonical in SHAPE_FIELDS}
    defaulted = {}
    for canonical in SHAPE_FIELDS:
        try:
            value = getattr(config, canonical)
        except AttributeError:
            continue
        names = [canonical, *aliases[canonical]]
        given = [n for n in names if n and n in hf]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise LlmcalcError(f"{given[0] if given else canonical} must be a positive whole number, got {value!r}")
        if not given:
            defaulted[canonical] = value
    return defaulted


def _version() -> str:
    import transformers

    return f"transformers {transformers.__version__}"


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _build(config):
    """The model built in the active device context / FakeTensorMode: the seq2seq LM of an encoder-decoder
    config, else the causal LM, else the base model."""
    causal, seq2seq, base = _auto_classes()
    order = (seq2seq, causal, base) if getattr(config, "is_encoder_decoder", False) else (causal, seq2seq, base)
    for auto in order:
        if type(config) not in auto._model_mapping:
            continue
        kwargs = {}
        cls = auto._model_mapping[type(config)]
        _reads_tokens(config, cls)
        if getattr(cls, "_can_set_experts_implementation", lambda: False)():
            kwargs["experts_implementation"] = "batched_mm"
        try:
            model = auto.from_config(config, attn_implementation="sdpa", **kwargs)
        except (ValueError, ImportError):  # no sdpa in this modelling file: its own (eager) attention
            model = auto.from_config(config, attn_implementation="eager", **kwargs)
        outer = _multimodal_parent(config) if auto is base else None
        return TextModelWithHead(model, config, outer) if outer is not None else model
    raise LlmcalcError(f"transformers has no causal-LM, seq2seq or base model class for {config.model_type!r}")


NOT_LM = "is not a language model"


def _reads_tokens(config, cls) -> None:
    """Refuse, before anything is built, a model that is not a language model: the class it would be built as, or the
    base model of its config (Whisper's, whose encoder reads audio, when only its decoder has a causal-LM class),
    reads something other than token ids (ViT's pixel_values, Whisper's input_features, Wav2Vec2's input_values)."""
    base = _auto_classes()[2]._model_mapping
    classes = [cls] + ([base[type(config)]] if type(config) in base else [])
    other = next((c for c in classes if getattr(c, "main_input_name", "input_ids") != "input_ids"), None)
    if other is not None:
        raise LlmcalcError(f"model_type {config.model_type!r} {NOT_LM}: transformers' {other.__name__} reads "
                           f"{other.main_input_name}, not token ids; llmcalc counts models that read token ids")


def _token_embedding(model, config) -> None:
    """Refuse a built model that names no token embedding (CLIP's dual encoder: get_input_embeddings is not
    implemented): it is not a language model, and nothing llmcalc reports has a vocabulary to stand on."""
    try:
        embedding = model.get_input_embeddings()
    except NotImplementedError:
        embedding = None
    if embedding is None:
        raise LlmcalcError(f"model_type {config.model_type!r} {NOT_LM}: transformers' {type(model).__name__} has no "
                           f"token embedding (get_input_embeddings); llmcalc counts models that read token ids")


def _generative() -> set[str]:
    """The multimodal model_types that generate text (an image-text-to-text or multimodal LM class)."""
    from transformers.models.auto import modeling_auto

    mappings = ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES")
    return {name for mapping in mappings for name in getattr(modeling_auto, mapping, {})}


def _multimodal_parent(config) -> str | None:
    """The model_type of the multimodal config whose `text_config` is this config's class (Qwen2.5-VL's text model:
    qwen2_5_vl), or None: a text model transformers builds only inside a multimodal one, without a causal-LM class.
    Only a parent that generates text (an image-text-to-text or multimodal LM class: its checkpoint stores an LM head)
    counts; CLIP's text encoder (clip_text_model) is no LM and gets no head."""
    from transformers import CONFIG_MAPPING

    generative = _generative()
    for model_type, cls in CONFIG_MAPPING.items():
        if model_type not in generative:
            continue
        try:
            subs = getattr(cls, "sub_configs", None) or {}
        except Exception:  # a lazily imported family that fails to import: not this one
            continue
        if subs.get("text_config") is type(config):
            return model_type
    return None


class TextModelWithHead(torch.nn.Module):
    """A multimodal checkpoint's text model with the LM head its ...ForConditionalGeneration class stores: a
    bias-free Linear(hidden_size, vocab_size) beside the text model (Qwen2.5-VL, GLM-4.5V: ``lm_head``), tied to
    the token embedding when the config's ``tie_word_embeddings`` says so; its forward is the text model's, then
    the head, and the causal-LM loss (shifted cross-entropy) when labels are given."""

    def __init__(self, model, config, outer: str):
        super().__init__()
        self.model, self.config, self.outer = model, config, outer
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head.weight = model.get_input_embeddings().weight
        self.tp_plan = {"lm_head": "colwise_gather_output",
                        **{f"model.{k}": v for k, v in (getattr(model, "tp_plan", None) or {}).items()}}
        self.ep_plan = {f"model.{k}": v for k, v in (getattr(model, "ep_plan", None) or {}).items()}

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.lm_head

    def set_experts_implementation(self, name: str) -> None:
        self.model.set_experts_implementation(name)

    def forward(self, input_ids=None, labels=None, use_cache=None, past_key_values=None):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        out = self.model(input_ids=input_ids, use_cache=use_cache, past_key_values=past_key_values)
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=out.past_key_values)


def _quiet():
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")
    # a forward that fails on fake tensors is one LlmcalcError line; torch's fake-tensor logger would print its
    # traceback on stderr first
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)


def fallback_count(hf: dict, seq_len: int | None, measured: bool = False) -> dict:
    """Parameters by component (always) and, with `seq_len`, the forward FLOPs of one sequence; with `measured`
    too, what `memory` and `infer` need (``hf_measure``: tensors and their parallel plans, KV cache, decode FLOPs;
    with `seq_len`, the activations of a training forward).

    Returns a JSON-able dict: class, params {total, trainable components, frozen}, experts info, and
    flops {forward, by component, attention core} for batch 1 x seq_len."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _quiet()
    config = _config(hf)
    defaulted = _shapes(hf, config)
    # The model is constructed on the meta device (shapes only, ties intact: the parameters are counted there), and
    # only a forward fakes it (module.to_empty under FakeTensorMode, whose first use imports torch._dynamo, seconds):
    # constructing inside FakeTensorMode fails for a model that converts its modules in __init__ (DeepSeek-V4:
    # "_apply(): Couldn't swap DeepseekV4RMSNorm.weight").
    with torch.device("meta"):
        try:
            model = _build(config)
        except LlmcalcError:
            raise
        except Exception as exc:
            raise failure("build", f"transformers could not build {config.model_type!r} from this config",
                          exc) from None
    _token_embedding(model, config)
    model.eval()
    name = type(model).__name__ if not isinstance(model, TextModelWithHead) else \
        f"{type(model.model).__name__} + lm_head (as {model.outer}'s checkpoint stores it)"
    out = {"class": name, "config_class": type(config).__name__,
           "transformers_version": _version().split()[-1], "torch_version": torch.__version__.split("+")[0],
           "defaulted": defaulted,
           "experts_implementation": getattr(model.config, "_experts_implementation", None),
           "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    out.update(_params(model))
    if measured:  # a bf16 run's activations and cache; cast on meta (a faked model cannot be cast)
        from .hf_measure import measure_meta

        model = model.to(torch.bfloat16)
        kept = measure_meta(model, config, tensor_roles(model), decode=seq_len is None)
        out["measured"] = kept
    if seq_len is not None or measured and "kv" not in kept:  # a forward to count, or what meta could not run
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                from .hf_shorten import shortened

                try:
                    with shortened(model, config):  # the layers the forwards run (hf_shorten); the rest stay on meta
                        faked = model.to_empty(device="cpu")
                except Exception as exc:
                    raise failure("fake", f"transformers' {type(model).__name__} could not be faked for a forward",
                                  exc) from None
                _forward_counts(faked, config, seq_len, out, kept if measured else None)
        except DataDependent as exc:  # a forward that needs values (`.item()`): run on real tensors, shortened
            real = _real_model(config, measured, exc)
            _forward_counts(real, config, seq_len, out, kept if measured else None, device="cpu")
            out["real_forward"] = {"reason": exc.reason, "step": exc.step}
    return out


def _forward_counts(model, config, seq_len: int | None, out: dict, kept: dict | None, device: str = "fake") -> None:
    """The forward FLOPs (`kept` None), or what `memory` and `infer` measure of the forwards into `kept`."""
    if kept is None:  # `memory` and `infer` need no FLOPs of a training forward
        assert seq_len is not None
        out["flops"] = _flops(model, config, seq_len)
    else:
        from .hf_measure import measure_fake

        measure_fake(model, config, seq_len, kept, device)


# The most parameter bytes a real CPU run of a shortened stack may hold (embeddings, head and the prefix's layers)
REAL_RUN_BYTES = 4 * 2**30


def _real_model(config, measured: bool, cause: DataDependent):
    """The model for a forward that needs tensor values (a ``.item()``, an expert loop over the experts hit), which
    neither the meta device nor fake tensors have: built for real on the CPU (transformers' own initialisation,
    seeded) with its stack cut to hf_shorten's prefix, the layers past it kept on the meta device (never run:
    every forward runs the prefix and scales the counts), in bf16 where `memory` measures; refused past
    REAL_RUN_BYTES of parameters."""
    from .hf_shorten import plan, shortened

    with torch.device("meta"):
        meta = _build(config)
    if measured:
        meta = meta.to(torch.bfloat16)
    short, _ = plan(meta, config)
    later = {id(p) for r in range(short.prefix, short.n) if short.active
             for p in meta.get_submodule(short.name)[r].parameters()}
    need = sum(p.numel() * p.element_size() for p in meta.parameters() if id(p) not in later)
    if need > REAL_RUN_BYTES:
        raise DataDependent(cause.step, f"{cause.what}: its forward needs tensor values, which the meta device and "
                            f"fake tensors do not have, and a real CPU run of {short.prefix} of its layers would hold "
                            f"{need / 2**30:.1f} GiB of weights (llmcalc runs one up to {REAL_RUN_BYTES / 2**30:g} "
                            "GiB)", cause.reason)
    with torch.random.fork_rng(), shortened(meta, config):
        torch.manual_seed(0)
        with torch.device("cpu"):
            real = _build(config)
    if measured:
        real = real.to(torch.bfloat16)
    if short.active:  # the whole stack, the prefix real: hf_shorten cuts it again for every forward
        real.get_submodule(short.name).extend(list(meta.get_submodule(short.name))[short.prefix:])
    return real.eval()


def tensor_roles(model) -> dict[str, str]:
    """Each parameter outside the layer stack: "embedding" / "head" (what transformers calls the model's input /
    output embeddings, else by ``classify``), "norm/final" or "other"."""
    parents = _experts_parents(model)
    modules = dict(model.named_modules())
    out = {}
    for name, _ in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        if modules.get(module) is model.get_input_embeddings():
            out[name] = "embedding"
        elif modules.get(module) is model.get_output_embeddings():
            out[name] = "head"
        else:
            component = classify(module.split(".") if module else [], parents)
            out[name] = next((r for r in ("embedding", "head") if component.startswith(r + "/")),
                             "norm/final" if component == "norm/final" else "other")
    return out


def stored_tensors(model) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of each tensor a checkpoint of `model` stores, as transformers' ``save_pretrained`` writes it
    (modeling_utils.py: ``state_dict()``, less ``_keys_to_ignore_on_save``, tied weights once): every parameter,
    frozen ones too (Laguna's and AFMoE's router biases, ERNIE-4.5's score bias), and every persistent buffer
    (DeepSeek-V3's, GLM-4.5's and MiniMax-M2's ``e_score_correction_bias``); not the non-persistent buffers
    (rotary ``inv_freq``, causal masks), and not what the class drops on save (Marian's sinusoidal tables)."""
    ignored = set()
    for prefix, module in model.named_modules():
        for key in getattr(module, "_keys_to_ignore_on_save", None) or ():
            ignored.add(f"{prefix}.{key}" if prefix else key)
    seen: set[int] = set()
    out = []
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name in ignored or id(tensor) in seen:  # a tied head is the embedding's tensor: once
            continue
        seen.add(id(tensor))
        out.append((name, tensor))
    return out


def _params(model) -> dict:
    parents = _experts_parents(model)
    # the modules transformers itself calls the input embeddings and the output head, whatever their name
    known = {model.get_input_embeddings(): "embedding/tokens", model.get_output_embeddings(): "head/lm_head"}
    special = {name: known[m] for name, m in model.named_modules() if any(m is k for k in known if k is not None)}
    components: dict[str, int] = defaultdict(int)
    frozen = 0
    for name, t in stored_tensors(model):
        if not (isinstance(t, torch.nn.Parameter) and t.requires_grad):  # stored, but not trained
            frozen += t.numel()
        module = name.rsplit(".", 1)[0] if "." in name else ""
        component = special.get(module) or classify(module.split(".") if module else [], parents)
        if component.endswith("moe") and "bias" in name.rsplit(".", 1)[-1]:  # a MoE block's own routing bias
            component += "/router"  # (MiniMax-M2's e_score_correction_bias, AFMoE's expert_bias)
        components[component] += t.numel()
    return {"components": {k: components[k] for k in sorted(components, key=_order)}, "frozen": frozen,
            "tied_embeddings": _tied(model)}


GROUP_ORDER = ("embedding", "attention", "cross_attention", "mlp", "moe", "norm")


def _order(key: str) -> tuple:
    """Embeddings first, then per stack (decoder-only, encoder, decoder) attention ... norm, other
    names, and the head last."""
    group = key.split("/")[0]
    stack, _, kind = group.rpartition(".")
    if kind == "embedding":
        return (0, 0, 0, key)
    if kind == "head":
        return (9, 0, 0, key)
    if kind not in GROUP_ORDER:
        return (8, 0, 0, key)
    return (1, ("", "encoder", "decoder").index(stack) if stack in ("", "encoder", "decoder") else 3,
            GROUP_ORDER.index(kind), key)


def _tied(model) -> bool:
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embed is not None and head.weight is embed.weight


def _flops(model, config, seq_len: int) -> dict:
    ids = torch.zeros(1, seq_len, dtype=torch.long)
    kwargs: dict[str, Any] = {"input_ids": ids}
    if getattr(config, "is_encoder_decoder", False):
        kwargs["decoder_input_ids"] = ids
    if "use_cache" in model.forward.__code__.co_varnames:
        kwargs["use_cache"] = False

    def forward():
        with inference_forward(model):
            model(**kwargs)

    from .hf_shorten import shortened

    try:
        with shortened(model, config) as short:  # the stack cut to one prefix of its layer kinds, scaled back
            counted = short.scale_flops(count_flops(forward), type(model).__name__)
    except Exception as exc:  # DataDependent where fake tensors cannot follow it (hf_fallback runs it for real)
        raise failure("forward", f"transformers' forward of {type(model).__name__} failed at seq {seq_len}",
                      exc) from None
    groups, core = flop_groups(model, counted)
    return {"seq_len": seq_len, "forward": counted.total, "groups": groups, "attention_core": core,
            "by_op": counted.by_op}


def flop_groups(model, counted) -> tuple[dict[str, int], int]:
    """A forward's FLOPs (counters.FlopCount of `model`) by llmcalc's groups ("attention S²", "attention
    projections", "FFN", "LM head", "other", per stack), and the attention cores' share."""
    groups: dict[str, int] = defaultdict(int)
    core = 0
    parents = _experts_parents(model)
    prefix = type(model).__name__ + "."
    for name, ops in counted.by_module.items():
        path = name[len(prefix):].split(".") if name.startswith(prefix) else None
        if not path:
            continue
        layer = next((i for i, seg in enumerate(path) if seg.isdigit()), None)
        # direct children of a layer, and modules outside the stack that the rules recognise
        if layer is not None and len(path) == layer + 2:
            group = classify(path, parents).split("/")[0]
        elif layer is None and len(path) == 1 and HEAD.search(path[0]):
            group = "head"
        else:
            continue
        total = sum(ops.values())
        stack, _, kind = group.rpartition(".")
        stack = f"{stack}." if stack else ""
        if kind in ("attention", "cross_attention"):
            label = "cross-attention" if kind == "cross_attention" else "attention"
            s2 = sum(v for op, v in ops.items() if op in CORE_OPS)
            core += s2
            groups[f"{stack}{label} S²"] += s2
            groups[f"{stack}{label} projections"] += total - s2
        else:
            groups[stack + {"mlp": "FFN", "moe": "FFN", "head": "LM head", "norm": "other"}.get(kind, kind)] += total
    groups["other"] += counted.total - sum(groups.values())
    return {k: v for k, v in groups.items() if v}, core
