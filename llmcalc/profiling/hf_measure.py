"""What `memory` needs of a model llmcalc has no formula for, measured on transformers' own objects.

``measure(model, config, seq_len)`` takes the model ``hf_fallback`` built on the meta device and returns a
JSON-able dict (``llmcalc.analytic.measured.MeasuredModel`` reads it, torch-free):

- ``tensors``: every parameter tensor (layer indices folded to ``*``), its shape, how many layers hold it, and
  how the model's own tensor-parallel plan shards it (``model.tp_plan``: ``config.base_model_tp_plan`` under the
  base model's prefix plus the class's ``_tp_plan``; colwise / rowwise / embedding / replicated...) and the
  expert-parallel plan (``model.ep_plan``); for the projections of an attention module, its ``head_dim``
  attribute (how many heads a colwise shard cuts);
- ``kv``: the cache transformers allocates (``use_cache=True``, the model's own ``Cache`` class): each cache
  layer's tensors after a prefill of two short lengths (the elements per token, and the state that does not grow:
  a linear-attention or SSM layer's conv and recurrent state) and of one long one (a sliding layer stops growing:
  its window cap);
- ``step`` (``measure_step``, for `train`'s step model): the GEMMs each parameter-holding module runs in one
  forward (rows per token, input width, which modules read the same input tensor, the routed top-k an experts
  module receives) and the attention core's FLOPs per layer at two lengths;
- ``activations``: the bytes autograd saves in one forward with the loss (batch 1, bf16 model) at seq_len / 2 and
  seq_len, counted by ``torch.autograd.graph.saved_tensors_hooks`` on fake tensors (one count per storage,
  parameters excluded): a per-token and an s² term solve the two;
- ``ffn``: per decoder layer, the widths vLLM's profiling transient needs (``_ffn``): its dense MLP's colwise output
  rows + rowwise input columns, and for a MoE layer its experts' (E, the colwise experts' rows, the rowwise experts'
  inner width, the shared experts' MLP width) with the top-k its router produced in the prefills (the
  ``top_k_index`` the experts module is called with, ``_routed``);
- ``kv_heads``: per cache layer, the heads of its K and V tensors as allocated (``_cache_heads``; None for a state
  layer): how vLLM splits the cache over tensor-parallel ranks;
- ``rotary``: every rotary table's buffer, its rotary dimension, positions and rope parameters (``_rotary``): the
  cos/sin caches vLLM makes at load;
- ``shortened``: where the forwards ran on a prefix of the layer stack (``hf_shorten``: one prefix holding two of
  each layer kind, the counts scaled to every layer), the stack's layers, the prefix run and each prefix layer's
  multiplicity.
"""

from __future__ import annotations

import json
import re
import weakref
from collections import defaultdict
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import DataDependent, LlmcalcError, MeasurementFailed
from .counters import inference_forward

LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
# the short prefill lengths (below any sliding window) and the most the long one runs to
KV_SHORT, KV_LONG = (8, 16), 65536


def measure_meta(model, config, roles: dict[str, str], decode: bool = True) -> dict:
    """`model` on the meta device in bf16 (cast there: a bf16 serving run's cache): its tensors with their plans,
    and the KV cache of prefills run on the meta device (shapes only; a model whose forward needs values, a
    `.item()`, is run on fake tensors by ``measure_fake`` instead); `roles`: hf_fallback.tensor_roles; with
    `decode`, the FLOPs of a decode step (``_decode``, for `infer`)."""
    out: dict[str, Any] = {"tensors": _tensors(model, roles), "rotary": _rotary(model)}
    try:
        with torch.device("meta"):
            out.update(_forwards(model, config, decode, "meta"))
    except LlmcalcError:
        pass  # measure_fake measures them on fake tensors
    if not decode and "kv" in out:  # `train`'s step model: the GEMMs each module runs and the attention cores' work
        try:
            with torch.device("meta"):
                _step_or_reason(model, config, out)
        except DataDependent:  # measure_fake (or a real run) measures every forward again
            for key in FORWARD_KEYS:
                out.pop(key, None)
    return out


FORWARD_KEYS = ("kv", "decode", "ffn", "kv_heads", "shortened", "step", "step_error")  # what _forwards measures


def _forwards(model, config, decode: bool, device: str, shorten: bool = True) -> dict:
    """The cache (``_kv``, with the routing ``_routed`` and heads ``_cache_heads`` its prefills show) and, with
    `decode`, a decode step's FLOPs, run on the stack shortened to one prefix of its layer kinds
    (``hf_shorten.shortened``) and scaled to the whole stack; run whole where the cache's layers do not follow the
    stack's."""
    from contextlib import nullcontext

    from .hf_shorten import Short, shortened

    with shortened(model, config) if shorten else nullcontext(Short(0, 0, [])) as short:
        with _routed(model) as routed, _cache_heads(model) as heads:
            kv = _kv(model, config)
        found: dict[str, Any] = {"kv": kv}
        if decode:  # `infer`'s decode FLOPs (`memory` needs none)
            found["decode"] = _decode(model, short)
    try:
        kv["layers"] = short.extend(kv["layers"])
        found["kv_heads"] = short.extend_list(heads)
    except ValueError:  # a cache not one layer per decoder layer: the whole stack
        if device == "cpu":  # a real run holds the shortened stack only (hf_fallback._real_model)
            raise MeasurementFailed("cache", f"{type(model).__name__}'s cache does not hold one layer per decoder "
                                    "layer, so its whole stack would have to run", "not run on real tensors") from None
        if device == "fake":
            model.to_empty(device="cpu")  # hf_fallback faked the shortened stack's layers only
        return _forwards(model, config, decode, device, shorten=False)
    found["ffn"] = _ffn(model, short.extend_names(routed))
    kv["device"] = device
    if short.active:
        found["shortened"] = {"layers": short.n, "run": short.prefix, "multiplicity": short.multiplicity}
    return found


def _step_or_reason(model, config, out: dict) -> None:
    """``measure_step`` into out["step"], run on the shortened stack (``hf_shorten``) and extended to every layer
    (``_extend_step``), or where transformers' forward cannot be measured so, the reason into out["step_error"]
    (`memory` needs no step record; `train --global-batch` says why it has none)."""
    from .hf_shorten import shortened

    try:
        with shortened(model, config) as short:
            out["step"] = _extend_step(measure_step(model), short)
    except DataDependent:  # values a real run has (hf_fallback)
        raise
    except LlmcalcError as exc:
        out["step_error"] = str(exc)


def _extend_step(step: dict, short) -> dict:
    """measure_step's record of a shortened stack as the whole stack's: a module runs in every layer its prefix
    layers stand for (``Short.rep``), its calls per forward grown in proportion (the step model reads calls per
    layer), and each layer's attention-core FLOPs are its representative's."""
    if not short.active:
        return step

    def every(layers: list[int]) -> list[int]:
        ran = set(layers)
        return [r for r in range(short.n) if short.rep[r] in ran]

    for mod in step["modules"]:
        if mod["layers"]:
            layers = every(mod["layers"])
            calls = mod["calls"] * len(layers) / len(mod["layers"])
            mod["calls"] = int(calls) if calls == int(calls) else calls
            mod["layers"] = layers
    att = step["attention"]
    at = {layer: j for j, layer in enumerate(att["layers"])}
    layers = every(att["layers"])
    att["core_flops"] = [[c[at[short.rep[r]]] for r in layers] for c in att["core_flops"]]
    att["layers"] = layers
    return step


DECODE_CONTEXTS = (8, 16)  # prefilled tokens before the counted decode step (below any sliding window)


def _decode(model, short) -> dict:
    """FLOPs of one decode step (one new token attending to its cache and itself), counted by FlopCounterMode after
    prefills of the two DECODE_CONTEXTS: flops = per_sequence + per_key x keys (keys = the prefill + 1, the
    token's own, inference.py's convention) solves the two."""
    import inspect

    from .counters import count_flops

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    counted = []
    for context in DECODE_CONTEXTS:
        try:
            with inference_forward(model):
                cache = model(input_ids=torch.zeros(1, context, dtype=torch.long), use_cache=True).past_key_values
                step = {"input_ids": torch.zeros(1, 1, dtype=torch.long), name: cache, "use_cache": True}
                counted.append(short.scale_flops(count_flops(lambda step=step: model(**step)),
                                                 type(model).__name__).total)
        except Exception as exc:
            raise failure("decode", f"transformers' decode step of {type(model).__name__} failed after {context} "
                          "tokens", exc) from None
    (c1, c2), (f1, f2) = DECODE_CONTEXTS, counted
    per_key = (f2 - f1) // (c2 - c1)
    return {"contexts": list(DECODE_CONTEXTS), "flops": counted, "per_sequence": f1 - per_key * (c1 + 1),
            "per_key": per_key}


def measure_fake(model, config, seq_len: int | None, out: dict, device: str = "fake") -> dict:
    """`model` faked (its parameters fake tensors, called inside hf_fallback's FakeTensorMode) in bf16: the
    activations (sdpa takes the kernel it takes on CPU, flash, as a GPU's does; on the meta device it would
    take the math kernel and save the S² scores) and, where the meta device could not run it, the KV cache;
    `device` "cpu": the same on real tensors (a forward that needs values, hf_fallback._real_model)."""
    if "kv" not in out:
        out.update(_forwards(model, config, seq_len is None, device))
        if seq_len is not None:  # `train`'s step model
            _step_or_reason(model, config, out)
    if getattr(model.config, "_experts_implementation", None) == "batched_mm":
        # batched_mm gathers every token's k experts' weights (saved for backward: terabytes at a 1T MoE's shapes);
        # training runs grouped_mm, which saves the tokens' activations only
        model.set_experts_implementation("grouped_mm")
    out["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    if seq_len is not None:
        from .hf_shorten import shortened

        with shortened(model, config) as short:
            out["activations"] = _activations(model, config, seq_len, short)
    return out


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def data_dependent(exc: BaseException) -> bool:
    """Whether `exc` is a forward asking for tensor values where there are none: ``.item()`` on the meta device or on
    fake tensors (DataDependentOutputException, GuardOnDataDependentSymNode), or an output shape that depends on
    the data (DynamicOutputShapeException: an expert loop over the experts that were hit)."""
    name = type(exc).__name__
    text = str(exc)
    return "DataDependent" in name or "DynamicOutputShape" in name or "data-dependent" in text \
        or "on meta tensors" in text or "_local_scalar_dense" in text


def failure(step: str, what: str, exc: BaseException) -> MeasurementFailed:
    """The one-line error of a transformers build or forward that raised: DataDependent where it needs values."""
    if isinstance(exc, MeasurementFailed):
        return exc
    kind = DataDependent if data_dependent(exc) else MeasurementFailed
    return kind(step, what, _reason(exc) if isinstance(exc, Exception) else type(exc).__name__)


def _plan_style(plan: dict[str, str], module: str) -> str | None:
    """The plan's style for `module` (a pattern's `*` stands for a layer index), the most specific entry first."""
    for pattern in sorted(plan, key=len, reverse=True):
        if re.fullmatch(re.escape(pattern).replace(r"\*", r"\d+"), module):
            return plan[pattern]
    return None


# vLLM's FusedMoE splits every expert's intermediate width over the tensor-parallel ranks: w13 (gate and up) by its
# output rows, w2 (down) by its input columns (vllm/model_executor/layers/fused_moe/layer.py, weight_loader). The
# plans of transformers <= 5.24 styled the fused experts so ("packed_colwise" / "rowwise"); from 5.25 on they leave
# them to expert parallelism (``ep_plan``) alone.
EXPERTS_TP = {"gate_up_proj": "packed_colwise", "up_proj": "colwise", "down_proj": "rowwise"}


def _tp_plan(model) -> dict[str, str]:
    """The model's tensor-parallel plan (``model.tp_plan``) and, where it leaves them out, vLLM's split of fused
    experts (EXPERTS_TP) for every experts module built on transformers' experts interface
    (``integrations/moe.py``, ``use_experts_implementation``: [E, out, in] tensors named ``gate_up_proj`` or
    ``up_proj`` and ``down_proj``; a transposed [E, in, out] layout, ``is_transposed``, is left unstyled)."""
    plan = dict(getattr(model, "tp_plan", None) or {})
    modules = dict(model.named_modules())
    for name in sorted(_experts_modules(model)):
        module = modules.get(name)
        if module is None or getattr(module, "is_transposed", True) is not False:
            continue
        for attr, style in EXPERTS_TP.items():
            tensor = getattr(module, attr, None)
            if isinstance(tensor, torch.Tensor) and tensor.dim() == 3 and _plan_style(plan, f"{name}.{attr}") is None:
                plan[LAYER_INDEX.sub(".*", f"{name}.{attr}")] = style
    embedding = model.get_input_embeddings()
    if embedding is not None:
        _list_experts_tp(model, plan, int(embedding.weight.shape[-1]))
    return plan


def _tensors(model, roles: dict[str, str]) -> list[dict]:
    tp_plan = _tp_plan(model)
    ep_plan = dict(getattr(model, "ep_plan", None) or {})
    modules = dict(model.named_modules())
    lists = _expert_lists(model)
    groups: dict[str, dict] = {}
    for name, p in model.named_parameters():  # remove_duplicate: a tied head is the embedding's tensor
        module = name.rsplit(".", 1)[0] if "." in name else ""
        held = next((lst for lst in lists if name.startswith(lst + ".")), None)
        # one group per layer tensor (count: its layers); an unfused expert's tensors are a group per expert
        pattern = LAYER_INDEX.sub(".*", name) if held is None else LAYER_INDEX.sub(".*", held) + name[len(held):]
        entry = groups.get(pattern)
        if entry is None:
            parent = modules.get(module.rsplit(".", 1)[0]) if "." in module else None
            head_dim = getattr(parent, "head_dim", None)
            mod = modules.get(module)
            entry = groups[pattern] = {
                "name": pattern, "shape": list(p.shape), "count": 0, "trainable": bool(p.requires_grad),
                "module_class": type(mod).__name__ if mod is not None else "",
                "tp": _plan_style(tp_plan, name) or _plan_style(tp_plan, module),
                "ep": _plan_style(ep_plan, name) or _plan_style(ep_plan, module),
                "head_dim": head_dim if isinstance(head_dim, int) else None,
                "role": "layer" if pattern != name else roles.get(name, "other")}
        entry["count"] += 1
    return list(groups.values())


def _rotary(model) -> list[dict]:
    """The rotary tables transformers builds: every ``inv_freq`` buffer (not ``original_inv_freq``), its rotary
    dimension (2 x its frequencies: a partial rotary's too), the positions its module caches (``max_seq_len_cached``)
    and the rope parameters it was made from (the config's ``rope_parameters`` entry of its layer type where the
    buffer is named for one, Gemma 3's ``sliding_attention_inv_freq``): what vLLM's get_rope makes one cos/sin cache
    of per distinct set."""
    config = getattr(model, "config", None)
    params = getattr(config, "rope_parameters", None)
    params = params if isinstance(params, dict) else {}
    modules = dict(model.named_modules())
    out = []
    for name, buffer in model.named_buffers():
        leaf = name.rsplit(".", 1)[-1]
        if not leaf.endswith("inv_freq") or leaf.endswith("original_inv_freq"):
            continue
        module = modules.get(name.rsplit(".", 1)[0] if "." in name else "")
        positions = getattr(module, "max_seq_len_cached", None)
        kind = leaf.removesuffix("inv_freq").rstrip("_")
        rope = params.get(kind) if kind and isinstance(params.get(kind), dict) else \
            {k: v for k, v in params.items() if not isinstance(v, dict)}
        out.append({"buffer": name, "rotary_dim": 2 * buffer.numel(),
                    "max_positions": positions if isinstance(positions, int) else None,
                    "rope": json.loads(json.dumps(rope, default=str))})
    return out


def _experts_modules(model) -> set[str]:
    """The modules holding tensors of the model's expert-parallel plan (a fused experts module, or one expert), and
    every list of experts (``_expert_lists``)."""
    ep_plan = dict(getattr(model, "ep_plan", None) or {})
    lists = set(_expert_lists(model))
    out = set(lists)
    for name, _ in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        if _plan_style(ep_plan, name) or _plan_style(ep_plan, module):
            out.add(module)
    return {name for name in out if not any(name.startswith(f"{lst}.") for lst in lists)}


EXPERTS_LIST = re.compile(r"(^|\.)experts?$")


def _expert_lists(model) -> dict[str, list[str]]:
    """Experts held unfused, one MLP module per expert: {an ``experts`` nn.ModuleList / nn.ModuleDict: its experts'
    keys}, where each expert holds 2-D weights (older MoE modelling code and remote code: Mixtral before
    transformers 5, Switch, NLLB-MoE). vLLM fuses them into FusedMoE's w13 / w2 when it loads them."""
    out = {}
    for name, module in model.named_modules():
        if not EXPERTS_LIST.search(name) or not isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            continue
        keys = [str(k) for k in (module.keys() if isinstance(module, torch.nn.ModuleDict) else range(len(module)))]
        items = list(module.values()) if isinstance(module, torch.nn.ModuleDict) else list(module)
        if items and all(any(p.dim() == 2 for p in item.parameters()) for item in items):
            out[name] = keys
    return out


def _list_experts_tp(model, plan: dict[str, str], hidden: int) -> None:
    """vLLM's split of unfused experts once it has fused them (FusedMoE, as EXPERTS_TP): each expert's linears that
    read the hidden size (gate, up) by their output rows, the one that writes it (down) by its input columns."""
    modules = dict(model.named_modules())
    for name, keys in _expert_lists(model).items():
        for key in keys:
            for rel, linear in modules[f"{name}.{key}"].named_modules():
                weight = getattr(linear, "weight", None)
                if not rel or not isinstance(weight, torch.Tensor) or weight.dim() != 2:
                    continue
                style = "colwise" if weight.shape[1] == hidden else "rowwise" if weight.shape[0] == hidden else None
                full = f"{name}.{key}.{rel}"
                if style is not None and _plan_style(plan, full) is None:
                    plan[LAYER_INDEX.sub(".*", full)] = style


@contextmanager
def _routed(model):
    """Forward pre-hooks on every experts module: the top-k of the routing each is called with (transformers' fused
    experts take ``(hidden_states, top_k_index, top_k_weights)``, ``integrations/moe.py``: k = top_k_index's last
    dimension, as the router produced it); yields {experts module: {k seen}}."""
    seen: dict[str, set[int]] = defaultdict(set)
    modules = dict(model.named_modules())

    def hook(module, args, kwargs, name):
        index = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
        if isinstance(index, torch.Tensor) and index.dim() == 2 and not index.dtype.is_floating_point:
            seen[name].add(int(index.shape[-1]))

    handles = [modules[name].register_forward_pre_hook(lambda m, a, k, name=name: hook(m, a, k, name),
                                                       with_kwargs=True)
               for name in _experts_modules(model) if name in modules]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _cache_heads(model):
    """A forward hook on the model: per layer of the first Cache its forward returns, the heads its tensors hold
    (their common dimension 1 where every tensor is [batch, heads, tokens, width], an attention layer's K and V;
    None otherwise: a recurrent or conv state, or K and V of different head counts); yields the list it fills."""
    heads: list[int | None] = []

    def hook(module, args, output):
        layers = getattr(getattr(output, "past_key_values", None), "layers", None)
        if heads or not layers:
            return
        for layer in layers:
            tensors = _state_tensors(layer, set())
            dims = {int(t.shape[1]) for t in tensors if t.dim() == 4}
            heads.append(next(iter(dims)) if len(dims) == 1 and all(t.dim() == 4 for t in tensors) else None)

    handle = model.register_forward_hook(hook)
    try:
        yield heads
    finally:
        handle.remove()


FIRST_INDEX = re.compile(r"\.(\d+)\.")


# what marks a token mixer's module (its projections are not the MLP's): attention's head_dim, a gated DeltaNet's
# head_k_dim / head_v_dim, a Mamba mixer's num_heads
MIXER_HEADS = ("head_dim", "head_k_dim", "head_v_dim", "num_heads")


def _moe_record() -> dict:
    return {"experts_module": "", "n_experts": 0, "up_width": 0, "inner": 0, "shared_width": 0, "top_k": None,
            "styles": []}


# config keys naming the routed experts per token (as fallback.TOP_K_KEYS)
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k", "num_selected_experts")


def _config_top_k(model) -> int | None:
    config = getattr(model, "config", None)
    get_text = getattr(config, "get_text_config", None)
    text = get_text() if callable(get_text) else config
    k = next((getattr(text, key) for key in TOP_K_KEYS if isinstance(getattr(text, key, None), int)), None)
    return k if k and k > 0 else None


def _listed_expert(moe: dict, keys: list[str], first: str, tensor: tuple, top_k: int | None) -> None:
    """One tensor of experts held unfused into `moe`: E experts (the list's length) of the first expert's widths, its
    colwise linears' rows (gate + up) and its rowwise one's columns (down); the router's top-k is the config's (a
    list of MLPs is called per expert, never with a top_k_index)."""
    from ..analytic.measured import COLWISE, ROWWISE

    module, p, style = tensor
    moe["n_experts"], moe["top_k"] = len(keys), moe["top_k"] or top_k
    if p.dim() == 2 and module.startswith(first) and style in COLWISE + ROWWISE:
        moe["styles"].append(style)
        if style in COLWISE:
            moe["up_width"] += int(p.shape[0])
        else:
            moe["inner"] = int(p.shape[1])


def _ffn(model, routed: dict[str, set[int]]) -> list[dict]:
    """Per decoder layer (the first index in a parameter's name): `dense_width`, the output rows of the colwise
    and the input columns of the rowwise 2-D weights outside the token mixers (a mixer's module has an int
    attribute of MIXER_HEADS) and outside the MoE block (gated: gate + up + down = 3F, plain 2F); for a MoE layer
    (tensors in the expert-parallel plan), `moe`: E (the experts tensors' first dimension), `up_width` (the
    colwise experts' width other than the hidden size: gate + up = 2I gated), `inner` (the rowwise experts': I),
    `shared_width` (the colwise / rowwise 2-D weights under the experts module's parent: a shared expert's
    3F), `top_k` (``_routed``; None where the experts module was not called with a top_k_index) and `styles`
    (the tp styles of the experts' tensors). Experts held unfused (``_expert_lists``: one MLP per expert) are
    measured as vLLM fuses them: E = the list's length, the first expert's gate + up rows and down columns, and
    the config's top-k."""
    from ..analytic.measured import COLWISE, ROWWISE

    tp_plan = _tp_plan(model)
    modules = dict(model.named_modules())
    experts = _experts_modules(model)
    lists = _expert_lists(model)
    embedding = model.get_input_embeddings()
    hidden = int(embedding.weight.shape[-1]) if embedding is not None else 0
    top_k = _config_top_k(model)
    layers: dict[int, dict] = {}
    blocks = {name: name.rsplit(".", 1)[0] for name in experts}  # the MoE block holding the experts module
    for name, p in model.named_parameters():
        found = FIRST_INDEX.search(name)
        if found is None:
            continue
        layer = layers.setdefault(int(found.group(1)), {"layer": int(found.group(1)), "dense_width": 0, "moe": None})
        module = name.rsplit(".", 1)[0]
        style = _plan_style(tp_plan, name) or _plan_style(tp_plan, module)
        holder = next((e for e in experts if module == e or module.startswith(e + ".")), None)
        if holder is not None:
            moe = layer["moe"] = layer["moe"] or _moe_record()
            moe["experts_module"] = LAYER_INDEX.sub(".*", holder)
            ks = routed.get(holder, set())
            moe["top_k"] = next(iter(ks)) if len(ks) == 1 else moe["top_k"]
            if holder in lists:
                _listed_expert(moe, lists[holder], f"{holder}.{lists[holder][0]}.", (module, p, style), top_k)
                continue
            if p.dim() == 3:  # a fused [E, out, in] (or [E, in, out]) experts tensor
                width = int(p.shape[-2] if p.shape[-1] == hidden else p.shape[-1])
                moe["n_experts"] = int(p.shape[0])
                moe["styles"].append(style)
                if style in COLWISE:
                    moe["up_width"] += width
                elif style in ROWWISE:
                    moe["inner"] = width
            continue
        if p.dim() != 2 or style not in COLWISE + ROWWISE:
            continue
        parent = modules.get(module.rsplit(".", 1)[0]) if "." in module else None
        if any(isinstance(getattr(parent, key, None), int) for key in MIXER_HEADS):
            continue  # a projection of an attention or linear-attention mixer
        width = int(p.shape[0] if style in COLWISE else p.shape[1])
        block = next((b for e, b in blocks.items() if module.startswith(b + ".")), None)
        if block is not None:
            moe = layer["moe"] = layer["moe"] or _moe_record()
            moe["shared_width"] += width
        else:
            layer["dense_width"] += width
    return [layers[i] for i in sorted(layers)]


def _state_tensors(obj, seen: set[int], depth: int = 0) -> list[torch.Tensor]:
    """The tensors a cache layer holds (attributes, lists and dicts of them), each once; a 0-d tensor is the layer's
    bookkeeping (transformers 5.25's ``cumulative_length_linear``: tokens seen), not a sequence's state, which has
    a batch dimension."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            return []
        return [] if id(obj) in seen or seen.add(id(obj)) else [obj]  # type: ignore[func-returns-value]
    if depth > 3:
        return []
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _state_tensors(item, seen, depth + 1)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _state_tensors(item, seen, depth + 1)]
    if depth == 0 and hasattr(obj, "__dict__"):
        return [t for k, v in vars(obj).items() if not k.startswith("_") for t in _state_tensors(v, seen, 1)]
    return []


def _cache_layers(model, config, seq: int) -> list[tuple[str, int, int, int]]:
    """(cache layer class, elements, bytes, its largest whole-number attribute) per cache layer after a batch-1
    prefill of `seq` tokens."""
    ids = torch.zeros(1, seq, dtype=torch.long)  # on the meta device under measure_meta's torch.device
    try:
        with inference_forward(model):
            out = model(input_ids=ids, use_cache=True)
    except Exception as exc:
        raise failure("cache", f"transformers' forward of {type(model).__name__} with a cache failed at seq {seq}",
                      exc) from None
    cache = getattr(out, "past_key_values", None)
    layers = getattr(cache, "layers", None)
    if cache is None or layers is None:
        raise LlmcalcError(f"{type(model).__name__}'s forward returned no transformers Cache to measure "
                           f"(got {type(cache).__name__})")
    rows = []
    for layer in layers:
        tensors = _state_tensors(layer, set())
        ints = [v for v in vars(layer).values() if isinstance(v, int) and not isinstance(v, bool)]
        rows.append((type(layer).__name__, sum(t.numel() for t in tensors),
                     sum(t.numel() * t.element_size() for t in tensors), max(ints, default=0)))
    return rows


def _kv(model, config) -> dict:
    """Per cache layer: elements per token (the slope between the two short prefills), the elements that do not
    grow (a recurrent or conv state), and the tokens it stops at (a window) where the long prefill holds fewer
    than the slope says; bytes per element as allocated (the bf16 model). The long prefill runs past the
    largest whole number a cache layer object holds after the short ones (a sliding layer's window; the
    prefill's own length counts are below it), at most KV_LONG; where no layer holds one, there is no long
    prefill."""
    s1, s2 = KV_SHORT
    a, b = (_cache_layers(model, config, s) for s in (s1, s2))
    window = max(row[3] for row in a + b)  # the prefills' own token counts are s1 and s2: a larger one is a window
    long = min(KV_LONG, window + s2) if window > s2 else s2  # no window: nothing to stop at, no long prefill
    c = _cache_layers(model, config, long) if long > s2 else b
    layers = []
    for i, ((cls, e1, b1, _), (_, e2, _b2, _), (_, e3, _b3, _)) in enumerate(zip(a, b, c, strict=True)):
        per_token = (e2 - e1) // (s2 - s1)
        fixed = e1 - per_token * s1
        grown = e3 - fixed
        cap = grown // per_token if per_token and long > s2 and grown < per_token * long else None
        layers.append({"layer": i, "class": cls, "elements_per_token": per_token, "state_elements": fixed,
                       "cap_tokens": cap, "element_bytes": b1 / e1 if e1 else 2.0})
    return {"lengths": [s1, s2] + ([long] if long > s2 else []), "layers": layers}


def _saved_run(seq: int, held: list, multiplicity: list[int] | None) -> dict:
    """One length's count: bytes by element size and storages, each storage times its saving layer's multiplicity
    (a shortened stack) or once."""
    by_size: dict[int, int] = defaultdict(int)
    count = 0
    for nbytes, size, layer in held:
        times = multiplicity[layer] if layer is not None and multiplicity else 1
        by_size[size] += nbytes * times
        count += times
    return {"seq_len": seq, "bytes": sum(by_size.values()),
            "bytes_by_element": {str(k): v for k, v in sorted(by_size.items())}, "tensors": count}


def _activations(model, config, seq_len: int, short=None) -> dict:
    """Bytes saved for backward in a forward with the loss (labels = the ids), batch 1, at seq_len // 2 and
    seq_len; `bytes_by_element` splits them by element size (2: bf16 activations, 4: fp32 statistics and the
    loss's upcast logits, 8: int64 indices). Counted: the storages the graph still holds when the forward
    returns (weak references to the saved tensors; a branch the loss does not reach is freed, and its storage's
    address may be reused, which a count by address alone would merge). On a shortened stack (`short`,
    hf_shorten.Short) each storage is attributed to the layer that saved it (forward hooks on the layers) and
    counted times that layer's multiplicity; one saved by several layers (the rotary cos/sin, a mask) or outside
    them counts once."""
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    layers = list(model.get_submodule(short.name)) if short is not None and short.active else []
    current: list[int | None] = [None]
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)))
        handles.append(layer.register_forward_hook(lambda m, a, o: current.__setitem__(0, None)))
    runs = []
    try:
        for seq in (max(1, seq_len // 2), seq_len):
            saved: dict[int, list] = {}  # storage -> [bytes, element size, layer, weak references to its tensors]

            def pack(t, saved=saved):
                st = t.untyped_storage()
                key = st._cdata
                if key not in params:
                    entry = saved.get(key)
                    if entry is None or not any(ref() is not None for ref in entry[3]):
                        # new, or a dead one's address reused (its graph branch freed: not held for backward)
                        saved[key] = [st.nbytes(), t.element_size(), current[0], [weakref.ref(t)]]
                    else:
                        entry[3].append(weakref.ref(t))
                        if entry[2] != current[0]:
                            entry[2] = None  # saved by several layers (or outside them): counted once
                return t

            ids = torch.zeros(1, seq, dtype=torch.long)
            kwargs: dict[str, Any] = {"input_ids": ids, "labels": ids}
            if "use_cache" in model.forward.__code__.co_varnames:
                kwargs["use_cache"] = False
            try:
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    result = model(**kwargs)
            except Exception as exc:
                raise failure("training forward", f"transformers' training forward of {type(model).__name__} failed "
                              f"at seq {seq}", exc) from None
            # what the graph still holds with the loss alive: a branch the loss does not reach was freed
            held = [e[:3] for e in saved.values() if any(ref() is not None for ref in e[3])]
            del result
            runs.append(_saved_run(seq, held, short.multiplicity if layers else None))
    finally:
        for handle in handles:
            handle.remove()
    model.eval()
    return {"runs": runs}


STEP_LENGTHS = (16, 32)  # the forwards measure_step counts (batch 1; the s² term solves the two)


def measure_step(model) -> dict:
    """What `train`'s step model (analytic/measured_step.py) times, from one batch-1 forward of STEP_LENGTHS[0]
    tokens with a forward pre-hook on every module that holds a parameter, and FlopCounterMode over forwards at
    both STEP_LENGTHS:

    - ``modules``: per module (layer indices folded to ``*``) the layers it runs in, its calls per forward, the
      rows of its input per token (a dense module's 1; an experts module's tokens), the input's width (which of a
      weight's dimensions it contracts), the input's place among the distinct input tensors of its layer (modules
      reading the same tensor, a Linear's q/k/v or gate/up, can run as one GEMM), whether the input holds token
      ids (an embedding lookup, no GEMM), and for a module handed 2-D integer routing indices (transformers'
      experts modules: ``top_k_index``) that tensor's last dimension, the routed experts per token, with the
      module's ``num_experts`` and ``is_transposed``;
    - ``head_module``: the module transformers calls the output embeddings (the LM head, tied or not);
    - ``attention``: per layer, the FLOPs of the attention core (sdpa kernels, an eager attention's bmm) that
      the counter saw in the layer's direct children at each length."""
    s1 = STEP_LENGTHS[0]
    head = model.get_output_embeddings()
    head_name = next((name for name, m in model.named_modules() if head is not None and m is head), None)
    kwargs: dict[str, Any] = {"input_ids": torch.zeros(1, s1, dtype=torch.long)}
    if "use_cache" in model.forward.__code__.co_varnames:
        kwargs["use_cache"] = False
    kept: list[torch.Tensor] = []  # the inputs seen, alive until they are grouped (their ids stay unique)
    calls = _hooked_calls(model, kwargs, kept)
    groups = _module_groups(calls, dict(model.named_modules()), s1)
    kept.clear()
    per_length = [_core_flops(model, {**kwargs, "input_ids": torch.zeros(1, seq, dtype=torch.long)})
                  for seq in STEP_LENGTHS]
    layers = sorted(set(per_length[0]) | set(per_length[1]))
    return {"lengths": list(STEP_LENGTHS), "modules": groups, "head_module": head_name,
            "attention": {"core_flops": [[c.get(i, 0) for i in layers] for c in per_length], "layers": layers}}


def _hooked_calls(model, kwargs: dict, kept: list) -> list[tuple[str, torch.Tensor, int | None]]:
    """(module name, its first input tensor, the routed experts per token where it is handed 2-D integer routing
    indices) of every call, in order, in one forward of `kwargs`, hooked on every module that holds a parameter (a
    tied head's too: it holds the embedding's tensor); the inputs are kept alive in `kept`."""
    holders = {name.rsplit(".", 1)[0] if "." in name else "" for name, _ in model.named_parameters(
        remove_duplicate=False)}
    calls: list[tuple[str, torch.Tensor, int | None]] = []

    def hook(name):
        def pre(module, args, kwargs):
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            if not tensors:
                return
            routing = [t for t in tensors[1:] if not t.is_floating_point() and t.dim() == 2]
            kept.append(tensors[0])
            calls.append((name, tensors[0], routing[0].shape[-1] if routing else None))
        return pre

    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_pre_hook(hook(name), with_kwargs=True) for name in holders
               if name in modules]
    seq = kwargs["input_ids"].shape[-1]
    try:
        with inference_forward(model):
            model(**kwargs)
    except Exception as exc:
        raise failure("step", f"transformers' forward of {type(model).__name__} failed at seq {seq}", exc) from None
    finally:
        for h in handles:
            h.remove()
    return calls


def _module_groups(calls: list[tuple[str, torch.Tensor, int | None]], modules: dict, seq: int) -> list[dict]:
    """``measure_step``'s ``modules``: the calls grouped by module name with layer indices folded to ``*``."""
    groups: dict[str, dict] = {}
    inputs: dict[str, list[int]] = defaultdict(list)  # per layer (or outside: ""), the distinct input tensors
    for name, x, top_k in calls:
        pattern = LAYER_INDEX.sub(".*", name)
        digits = LAYER_INDEX.findall(name)
        layer_key = name[:name.index(digits[0]) + len(digits[0])] if digits else ""
        seen = inputs[layer_key]
        if id(x) not in seen:
            seen.append(id(x))
        entry = groups.get(pattern)
        if entry is None:
            mod = modules[name]
            entry = groups[pattern] = {
                "name": pattern, "class": type(mod).__name__, "layers": [], "calls": 0,
                "rows_per_token": (x.numel() // x.shape[-1] if x.dim() else 1) / seq,
                "in_width": x.shape[-1] if x.dim() else 1, "reads": seen.index(id(x)),
                "token_ids": not x.is_floating_point(), "top_k": top_k,
                "num_experts": getattr(mod, "num_experts", None) if top_k else None,
                "is_transposed": bool(getattr(mod, "is_transposed", False))}
        entry["calls"] += 1
        index = int(digits[-1][1:]) if digits else None
        if index is not None and index not in entry["layers"]:
            entry["layers"].append(index)
    return list(groups.values())


def _core_flops(model, kwargs: dict) -> dict[int, int]:
    """Layer index -> the attention core's FLOPs (CORE_OPS: sdpa kernels, an eager attention's bmm) that
    FlopCounterMode saw in the layer's direct children, in one forward of `kwargs`."""
    from .counters import CORE_OPS, count_flops

    prefix = type(model).__name__ + "."

    def forward():
        with inference_forward(model):
            model(**kwargs)

    try:
        counted = count_flops(forward)
    except Exception as exc:
        raise failure("step", f"transformers' forward of {type(model).__name__} failed at seq "
                              f"{kwargs['input_ids'].shape[-1]}", exc) from None
    core: dict[int, int] = defaultdict(int)
    for name, ops in counted.by_module.items():
        path = name[len(prefix):].split(".") if name.startswith(prefix) else []
        layer = next((i for i, seg in enumerate(path) if seg.isdigit()), None)
        if layer is not None and len(path) == layer + 2:  # a layer's direct children (counts are inclusive)
            core[int(path[layer])] += sum(v for op, v in ops.items() if op in CORE_OPS)
    return core
