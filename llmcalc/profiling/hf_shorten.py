"""Run transformers' forwards on a shortened layer stack and scale the counts to the whole model, exactly.

A 61-layer MoE's forward on fake tensors costs seconds (torch dispatches every op of every layer, ~0.36 ms an op),
though its layers are two kinds repeated (DeepSeek-V3: one dense, sixty MoE). ``shortened(model, config)`` gives
each decoder layer a *kind*, the signature of what it is and does (``_signature``: every submodule's class and its
plain attributes, a layer index excepted; every parameter's and buffer's name, shape and dtype; the config's
per-layer entries at its index: ``layer_types[i]`` and any list as long as the stack, membership of every list of
layer indices), keeps the shortest prefix of the stack holding two of each kind (one of a kind that has one), and
sets the config's layer count (and its per-layer lists) to that prefix while the forwards run; the model as built
(every parameter, for `params` and the tensor records) is put back after. Layers keep their own indices (a prefix,
not a selection), so caches, masks and ``config.layer_types[i]`` read as in the whole model.

Counts are then scaled by ``multiplicity``: each layer past the prefix is represented by the last prefix layer of
its kind (its ``rep``); a prefix layer counts itself and the layers it represents. A count summed over layers
(FlopCounterMode's per-module FLOPs, autograd's saved bytes attributed to the layer that saved them, a cache's
per-layer records) is the prefix's with every layer's share times its multiplicity. A stack whose layers are all
of distinct kinds, or that is not one ModuleList as long as the config's layer count, is run whole.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import field

import torch

from ..records import dataclass

PLAIN = (int, float, str, bool, type(None))
SKIP_ATTRS = ("training", "layer_idx", "layer_id", "layer_index", "layer_number")


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, PLAIN) for v in value)
    return isinstance(value, PLAIN)


def _text_config(config):
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _stack(model, n: int) -> tuple[torch.nn.Module, str, str] | None:
    """(parent module, attribute, dotted name) of the one ModuleList of `n` layers (the decoder stack), or None."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if len(found) != 1:
        return None
    name, _ = found[0]
    parent_name, _, attr = name.rpartition(".")
    return model.get_submodule(parent_name) if parent_name else model, attr, name


def _signature(layer: torch.nn.Module, i: int, config, n: int) -> tuple:
    parts: list[tuple] = []
    for name, module in layer.named_modules():
        attrs = tuple(sorted((k, repr(v)) for k, v in vars(module).items()
                             if not k.startswith("_") and k not in SKIP_ATTRS and _plain(v)))
        parts.append((name, type(module).__name__, attrs))
    for name, p in layer.named_parameters():
        parts.append((name, tuple(p.shape), str(p.dtype), p.requires_grad))
    for name, b in layer.named_buffers():
        parts.append((name, tuple(b.shape), str(b.dtype)))
    for key, value in sorted(vars(config).items()):
        if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, PLAIN) for v in value):
            parts.append((key, repr(value[i])))
        elif isinstance(value, (list, tuple)) and value and all(type(v) is int for v in value):
            parts.append((key, i in value))
    return tuple(parts)


@dataclass
class Short:
    """The shortened stack: `n` layers of the model, `prefix` run; `rep[r]` the prefix layer standing for layer r,
    `multiplicity[i]` how many layers prefix layer i counts for; `name` the stack's dotted name."""

    n: int
    prefix: int
    rep: list[int]
    name: str = ""
    multiplicity: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.multiplicity = [sum(1 for r in self.rep if r == i) for i in range(self.prefix)]

    @property
    def active(self) -> bool:
        return self.prefix < self.n

    def layer_of(self, module_name: str, root: str = "") -> int | None:
        """The stack index of a dotted module name below the stack (`root`: a prefix such as FlopCounterMode's)."""
        head = f"{root}.{self.name}." if root else f"{self.name}."
        if not module_name.startswith(head):
            return None
        index = module_name[len(head):].split(".", 1)[0]
        return int(index) if index.isdigit() else None

    def scale_flops(self, counted, root: str):
        """A counters.FlopCount of the prefix as the whole stack's: every layer module's FLOPs times its layer's
        multiplicity; the layers' ancestors, the total and the per-op counts grown by the same extra."""
        from .counters import FlopCount

        if not self.active:
            return counted
        extra: dict[str, int] = {}
        by_module = {}
        for name, ops in counted.by_module.items():
            layer = self.layer_of(name, root)
            if layer is None:
                by_module[name] = dict(ops)
                continue
            m = self.multiplicity[layer]
            by_module[name] = {op: v * m for op, v in ops.items()}
            if name == f"{root}.{self.name}.{layer}":
                for op, v in ops.items():
                    extra[op] = extra.get(op, 0) + v * (m - 1)
        ancestors = [a for a in by_module if self.layer_of(a, root) is None and f"{root}.{self.name}".startswith(a)]
        for a in ancestors:
            for op, v in extra.items():
                by_module[a][op] = by_module[a].get(op, 0) + v
        by_op = dict(counted.by_op)
        for op, v in extra.items():
            by_op[op] = by_op.get(op, 0) + v
        return FlopCount(counted.total + sum(extra.values()), by_op, by_module, counted.sdpa_backends)

    def extend(self, records: list[dict], key: str = "layer") -> list[dict]:
        """Per-layer records of the prefix (one per layer, in order) for the whole stack: layer r's is its rep's
        with `key` set to r."""
        if not self.active:
            return records
        if len(records) != self.prefix:
            raise ValueError(f"{len(records)} records for a prefix of {self.prefix} layers")
        out = [dict(records[i]) for i in range(self.prefix)]
        for r in range(self.prefix, self.n):
            out.append({**records[self.rep[r]], key: r})
        return out

    def extend_list(self, values: list) -> list:
        if not self.active:
            return values
        if len(values) != self.prefix:
            raise ValueError(f"{len(values)} values for a prefix of {self.prefix} layers")
        return list(values) + [values[self.rep[r]] for r in range(self.prefix, self.n)]

    def extend_names(self, by_name: dict) -> dict:
        """{dotted module name: value} of the prefix with the names of every represented layer added."""
        if not self.active:
            return by_name
        out = dict(by_name)
        for name, value in by_name.items():
            layer = self.layer_of(name)
            if layer is None:
                continue
            tail = name[len(f"{self.name}.{layer}"):]
            for r in range(self.prefix, self.n):
                if self.rep[r] == layer:
                    out[f"{self.name}.{r}{tail}"] = value
        return out


def plan(model, config) -> tuple[Short, tuple | None]:
    """The Short of this model (inactive where the stack cannot be shortened) and how to cut it."""
    text = _text_config(config)
    layers_n = getattr(text, "num_hidden_layers", None)
    n = layers_n if isinstance(layers_n, int) else 0
    stack = _stack(model, n) if n > 2 else None
    if stack is None:
        return Short(n, n, list(range(n))), None
    parent, attr, name = stack
    layers = getattr(parent, attr)
    kinds: dict[tuple, int] = {}
    kind = [kinds.setdefault(_signature(layer, i, text, n), len(kinds)) for i, layer in enumerate(layers)]
    total = {k: kind.count(k) for k in set(kind)}
    seen: dict[int, int] = {}
    prefix = n
    for i, k in enumerate(kind):
        seen[k] = seen.get(k, 0) + 1
        if all(seen.get(k2, 0) >= min(2, t) for k2, t in total.items()):
            prefix = i + 1
            break
    last = {k: max(i for i in range(prefix) if kind[i] == k) for k in set(kind)}
    rep = [r if r < prefix else last[kind[r]] for r in range(n)]
    return Short(n, prefix, rep, name), (parent, attr, layers, text)


@contextmanager
def shortened(model, config):
    """The model with its stack cut to the Short's prefix (and the config's layer count and per-layer lists with
    it) while the block runs; yields the Short."""
    short, cut = plan(model, config)
    if cut is None or not short.active:
        yield short
        return
    parent, attr, layers, text = cut
    n, p = short.n, short.prefix
    saved = {key: value for key, value in vars(text).items()
             if isinstance(value, (list, tuple)) and len(value) == n and key != "num_hidden_layers"}
    setattr(parent, attr, torch.nn.ModuleList(list(layers)[:p]))
    text.num_hidden_layers = p
    for key, value in saved.items():
        setattr(text, key, type(value)(value[:p]))
    try:
        yield short
    finally:
        setattr(parent, attr, layers)
        text.num_hidden_layers = n
        for key, value in saved.items():
            setattr(text, key, value)
