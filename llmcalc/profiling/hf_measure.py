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
  parameters excluded): a per-token and an s² term solve the two.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import torch

from ..errors import LlmcalcError

LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
# the short prefill lengths (below any sliding window) and the most the long one runs to
KV_SHORT, KV_LONG = (8, 16), 65536


def measure_meta(model, config, roles: dict[str, str], decode: bool = True) -> dict:
    """`model` on the meta device in bf16 (cast there: a bf16 serving run's cache): its tensors with their plans,
    and the KV cache of prefills run on the meta device (shapes only; a model whose forward needs values, a
    `.item()`, is run on fake tensors by ``measure_fake`` instead); `roles`: hf_fallback.tensor_roles; with
    `decode`, the FLOPs of a decode step (``_decode``, for `infer`)."""
    out: dict[str, Any] = {"tensors": _tensors(model, roles)}
    try:
        with torch.device("meta"):
            out["kv"] = _kv(model, config)
            if decode:  # `infer`'s decode FLOPs (`memory` needs none)
                out["decode"] = _decode(model)
        out["kv"]["device"] = "meta"
    except LlmcalcError:
        pass  # measure_fake measures them on fake tensors
    if not decode and "kv" in out:  # `train`'s step model: the GEMMs each module runs and the attention cores' work
        with torch.device("meta"):
            _step_or_reason(model, out)
    return out


def _step_or_reason(model, out: dict) -> None:
    """``measure_step`` into out["step"], or where transformers' forward cannot be measured so, the reason into
    out["step_error"] (`memory` needs no step record; `train --global-batch` says why it has none)."""
    try:
        out["step"] = measure_step(model)
    except LlmcalcError as exc:
        out["step_error"] = str(exc)


DECODE_CONTEXTS = (8, 16)  # prefilled tokens before the counted decode step (below any sliding window)


def _decode(model) -> dict:
    """FLOPs of one decode step (one new token attending to its cache and itself), counted by FlopCounterMode after
    prefills of the two DECODE_CONTEXTS: flops = per_sequence + per_key x keys (keys = the prefill + 1, the
    token's own, inference.py's convention) solves the two."""
    import inspect

    from .counters import count_flops

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    counted = []
    for context in DECODE_CONTEXTS:
        try:
            with torch.no_grad():
                cache = model(input_ids=torch.zeros(1, context, dtype=torch.long), use_cache=True).past_key_values
                step = {"input_ids": torch.zeros(1, 1, dtype=torch.long), name: cache, "use_cache": True}
                counted.append(count_flops(lambda step=step: model(**step)).total)
        except Exception as exc:
            raise LlmcalcError(f"transformers' decode step of {type(model).__name__} failed after {context} tokens: "
                               f"{_reason(exc)}") from None
    (c1, c2), (f1, f2) = DECODE_CONTEXTS, counted
    per_key = (f2 - f1) // (c2 - c1)
    return {"contexts": list(DECODE_CONTEXTS), "flops": counted, "per_sequence": f1 - per_key * (c1 + 1),
            "per_key": per_key}


def measure_fake(model, config, seq_len: int | None, out: dict) -> dict:
    """`model` faked (its parameters fake tensors, called inside hf_fallback's FakeTensorMode) in bf16: the
    activations (sdpa takes the kernel it takes on CPU, flash, as a GPU's does; on the meta device it would
    take the math kernel and save the S² scores) and, where the meta device could not run it, the KV cache."""
    if "kv" not in out:
        out["kv"] = _kv(model, config)
        out["kv"]["device"] = "fake"
        if seq_len is None:  # `infer`
            out["decode"] = _decode(model)
        else:
            _step_or_reason(model, out)
    if getattr(model.config, "_experts_implementation", None) == "batched_mm":
        # batched_mm gathers every token's k experts' weights (saved for backward: terabytes at a 1T MoE's shapes);
        # training runs grouped_mm, which saves the tokens' activations only
        model.set_experts_implementation("grouped_mm")
    out["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    if seq_len is not None:
        out["activations"] = _activations(model, config, seq_len)
    return out


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _plan_style(plan: dict[str, str], module: str) -> str | None:
    """The plan's style for `module` (a pattern's `*` stands for a layer index), the most specific entry first."""
    for pattern in sorted(plan, key=len, reverse=True):
        if re.fullmatch(re.escape(pattern).replace(r"\*", r"\d+"), module):
            return plan[pattern]
    return None


def _tensors(model, roles: dict[str, str]) -> list[dict]:
    tp_plan = dict(getattr(model, "tp_plan", None) or {})
    ep_plan = dict(getattr(model, "ep_plan", None) or {})
    modules = dict(model.named_modules())
    groups: dict[str, dict] = {}
    for name, p in model.named_parameters():  # remove_duplicate: a tied head is the embedding's tensor
        module = name.rsplit(".", 1)[0] if "." in name else ""
        pattern = LAYER_INDEX.sub(".*", name)
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


def _state_tensors(obj, seen: set[int], depth: int = 0) -> list[torch.Tensor]:
    """The tensors a cache layer holds (attributes, lists and dicts of them), each once."""
    if isinstance(obj, torch.Tensor):
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
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
    except Exception as exc:
        raise LlmcalcError(f"transformers' forward of {type(model).__name__} with a cache failed at seq {seq}: "
                           f"{_reason(exc)}") from None
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


def _activations(model, config, seq_len: int) -> dict:
    """Bytes saved for backward in a forward with the loss (labels = the ids), batch 1, at seq_len // 2 and
    seq_len; `bytes_by_element` splits them by element size (2: bf16 activations, 4: fp32 statistics and the
    loss's upcast logits, 8: int64 indices)."""
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    runs = []
    for seq in (max(1, seq_len // 2), seq_len):
        saved: dict[int, tuple[int, int]] = {}

        def pack(t, saved=saved):
            st = t.untyped_storage()
            if st._cdata not in params:
                saved[st._cdata] = (st.nbytes(), t.element_size())
            return t

        ids = torch.zeros(1, seq, dtype=torch.long)
        kwargs: dict[str, Any] = {"input_ids": ids, "labels": ids}
        if "use_cache" in model.forward.__code__.co_varnames:
            kwargs["use_cache"] = False
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                model(**kwargs)
        except Exception as exc:
            raise LlmcalcError(f"transformers' training forward of {type(model).__name__} failed at seq {seq}: "
                               f"{_reason(exc)}") from None
        by_size: dict[int, int] = defaultdict(int)
        for nbytes, size in saved.values():
            by_size[size] += nbytes
        runs.append({"seq_len": seq, "bytes": sum(by_size.values()),
                     "bytes_by_element": {str(k): v for k, v in sorted(by_size.items())}, "tensors": len(saved)})
    model.eval()
    return {"runs": runs}


STEP_LENGTHS = (16, 32)  # the forwards measure_step counts (batch 1; the s² term solves the two)


def measure_step(model) -> dict:  # long: the hooked forward, then the counted ones
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
    from .counters import CORE_OPS, count_flops

    s1, s2 = STEP_LENGTHS
    # every module holding a parameter, a tied head's too (it holds the embedding's tensor)
    holders = {name.rsplit(".", 1)[0] if "." in name else "" for name, _ in model.named_parameters(
        remove_duplicate=False)}
    head = model.get_output_embeddings()
    head_name = next((name for name, m in model.named_modules() if head is not None and m is head), None)
    kept: list[torch.Tensor] = []  # the inputs seen, alive until the forward ends (their ids stay unique)
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
    kwargs: dict[str, Any] = {"input_ids": torch.zeros(1, s1, dtype=torch.long)}
    if "use_cache" in model.forward.__code__.co_varnames:
        kwargs["use_cache"] = False
    try:
        with torch.no_grad():
            model(**kwargs)
    except Exception as exc:
        raise LlmcalcError(f"transformers' forward of {type(model).__name__} failed at seq {s1}: "
                           f"{_reason(exc)}") from None
    finally:
        for h in handles:
            h.remove()
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
                "rows_per_token": (x.numel() // x.shape[-1] if x.dim() else 1) / s1,
                "in_width": x.shape[-1] if x.dim() else 1, "reads": seen.index(id(x)),
                "token_ids": not x.is_floating_point(), "top_k": top_k,
                "num_experts": getattr(mod, "num_experts", None) if top_k else None,
                "is_transposed": bool(getattr(mod, "is_transposed", False))}
        entry["calls"] += 1
        index = int(digits[-1][1:]) if digits else None
        if index is not None and index not in entry["layers"]:
            entry["layers"].append(index)
    kept.clear()
    prefix = type(model).__name__ + "."
    per_length = []
    for seq in STEP_LENGTHS:
        ids = torch.zeros(1, seq, dtype=torch.long)

        def forward(ids=ids):
            with torch.no_grad():
                model(**{**kwargs, "input_ids": ids})

        try:
            counted = count_flops(forward)
        except Exception as exc:
            raise LlmcalcError(f"transformers' forward of {type(model).__name__} failed at seq {seq}: "
                               f"{_reason(exc)}") from None
        core: dict[int, int] = defaultdict(int)
        for name, ops in counted.by_module.items():
            path = name[len(prefix):].split(".") if name.startswith(prefix) else []
            layer = next((i for i, seg in enumerate(path) if seg.isdigit()), None)
            if layer is not None and len(path) == layer + 2:  # a layer's direct children (counts are inclusive)
                core[int(path[layer])] += sum(v for op, v in ops.items() if op in CORE_OPS)
        per_length.append(core)
    layers = sorted(set(per_length[0]) | set(per_length[1]))
    return {"lengths": list(STEP_LENGTHS), "modules": list(groups.values()), "head_module": head_name,
            "attention": {"core_flops": [[c.get(i, 0) for i in layers] for c in per_length], "layers": layers}}
