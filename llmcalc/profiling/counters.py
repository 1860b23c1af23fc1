"""FLOP counting with torch's FlopCounterMode (and fvcore as a second opinion), by component.

torch 2.13's counter has no formula for the CPU FlashAttention kernels
(`aten._scaled_dot_product_flash_attention_for_cpu` and its backward), so attention counts 0 FLOPs
on CPU; ``register_cpu_sdpa`` adds torch's own sdpa formulas for them, once, and only where the
registry lacks them (a fixed torch is never double counted). fvcore counts multiply-adds: its
figures are doubled to FLOPs, and it gets a handle for sdpa, which it otherwise skips.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from ..records import dataclass

aten = torch.ops.aten

SDPA_OPS = {  # aten op name -> the sdpa backend it stands for
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused (overrideable)",
}
# Ops that are the attention core (QKᵀ and AV, or a linear attention's state products) rather than a
# projection: sdpa kernels, or the batched matmuls of an eager attention.
CORE_OPS = set(SDPA_OPS) | {"bmm", "baddbmm"}
# sdpa backends whose backward recomputes QKᵀ (the measured backward is 2.5x the forward's matmuls)
RECOMPUTING_BACKENDS = {"flash", "flash (cpu)", "memory-efficient", "cudnn"}


def register_cpu_sdpa() -> bool:
    """Give FlopCounterMode formulas for the CPU flash-attention kernels; True if it had none."""
    forward = aten._scaled_dot_product_flash_attention_for_cpu
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward
    if forward in flop_counter.flop_registry:
        return False

    @flop_counter.register_flop_formula(forward)
    def _forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    if backward not in flop_counter.flop_registry:
        @flop_counter.register_flop_formula(backward)
        def _backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
            return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)
    return True


# A module inside a block: "Transformer.body.layers.3.attention", "Transformer.decoder.layers.0.cross_attention".
_BLOCK_PART = re.compile(r"[^.]+\.(?:(encoder|decoder)|body)\.layers\.\d+(?:\.(attention|cross_attention|mlp|moe))?")


def _block_part(name: str) -> tuple[str, str] | None:
    """(stack prefix, module) of a block or block-part module name ("" module for the block itself)."""
    match = _BLOCK_PART.fullmatch(name)
    if not match:
        return None
    return (f"{match.group(1)}." if match.group(1) else ""), (match.group(2) or "")


def _attention_label(module: str) -> str:
    return "cross-attention" if module == "cross_attention" else "attention"


@dataclass
class FlopCount:
    """What the counter saw: a total, per aten op, and per module (inclusive of children)."""

    total: int
    by_op: dict[str, int]
    by_module: dict[str, dict[str, int]]
    sdpa_backends: set[str] = field(default_factory=set)

    def components(self) -> dict[str, int]:
        """FLOPs per component: attention projections, attention S², FFN, LM head, per stack.

        Module totals are reliable forward and backward; inside an attention module the S² work is
        told apart by op (sdpa / bmm) rather than by submodule, because FlopCounterMode attributes
        backward matmuls to neighbouring leaf modules."""
        out: dict[str, int] = defaultdict(int)
        for name, ops in self.by_module.items():
            part = _block_part(name)
            if part is not None:
                stack, module = part
                if not module:  # whole blocks: reliable even where the split between their branches is not
                    out[f"{stack}blocks"] += sum(ops.values())
                elif module in ("mlp", "moe"):
                    out[f"{stack}FFN"] += sum(ops.values())
                else:
                    core = sum(v for op, v in ops.items() if op in SDPA_OPS or "attention" in op or op == "bmm")
                    out[f"{stack}{_attention_label(module)} S²"] += core
                    out[f"{stack}{_attention_label(module)} projections"] += sum(ops.values()) - core
            elif re.fullmatch(r"[^.]+\.lm_head", name):
                out["LM head"] += sum(ops.values())
            elif re.fullmatch(r"[^.]+\.pooler", name):
                out["pooler"] += sum(ops.values())
            elif re.fullmatch(r"[^.]+\.(embedding\.project_in|project_out)", name):
                out["embedding projections"] += sum(ops.values())
        return dict(out)


    def recomputing_components(self) -> set[str]:
        """Attention components whose sdpa kernel recomputes QKᵀ in backward (flash-style), by the ops
        their modules ran ("attention S²", "decoder.cross-attention S²", ...)."""
        out = set()
        for name, ops in self.by_module.items():
            part = _block_part(name)
            if part and part[1] in ("attention", "cross_attention") and any(
                    SDPA_OPS.get(op) in RECOMPUTING_BACKENDS for op in ops):
                out.add(f"{part[0]}{_attention_label(part[1])} S²")
        return out


@contextmanager
def inference_forward(model: torch.nn.Module) -> Iterator[None]:
    """A forward as an inference engine runs it: no autograd graph (``torch.no_grad``) and, for its duration, no
    parameter asking for one (``requires_grad`` restored after).

    Why the parameters too: under no_grad, a view of a parameter that requires grad has ``requires_grad`` set and
    no ``grad_fn``; torch's ModuleTracker (inside FlopCounterMode and mem_tracker) registers a backward hook on
    every such tensor a module receives and fails on these ("Expected gradient function to be set"). Since
    transformers 5.25 the state-space and gated-DeltaNet conv kernels run inside the ``kernels`` hub layer's
    function modules (``use_kernel_func_from_hub``), which receive ``conv1d.weight.squeeze(1)``: with the
    parameters frozen the same kernels run (the hub layer is kept, on CPU its torch fallback) and the counts are
    those of the forward."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        with torch.no_grad():
            yield
    finally:
        for p in params:
            p.requires_grad_(True)


def count_flops(fn) -> FlopCount:
    """Run fn() under FlopCounterMode (CPU sdpa registered) and return what it counted."""
    register_cpu_sdpa()
    with FlopCounterMode(display=False) as counter:
        fn()
    counts = counter.get_flop_counts()
    by_module = {name: {str(op).split(".")[-1] if str(op).startswith("aten.") else str(op): v
                        for op, v in ops.items()} for name, ops in counts.items()}
    by_op = {_op_name(op): v for op, v in counts.get("Global", {}).items()}
    backends = {SDPA_OPS[name] for name in by_op if name in SDPA_OPS}
    return FlopCount(counter.get_total_flops(), by_op, {k: v for k, v in by_module.items() if k != "Global"},
                     backends)


def _op_name(op) -> str:
    text = str(op)
    return text.split(".", 1)[1] if text.startswith("aten.") else text


def sdpa_backend_seen(by_op: dict[str, int], ran: set[str]) -> str:
    """The sdpa backend that ran, from the aten ops traced (an op that counts 0 still shows)."""
    if ran:
        return ", ".join(sorted(ran))
    if "bmm" in by_op:
        return "math/eager (bmm)"
    return "none seen"


class SdpaSpy(torch.utils._python_dispatch.TorchDispatchMode):
    """Records which aten sdpa kernels run (FlopCounterMode drops ops it has no formula for)."""

    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in SDPA_OPS:
            self.seen.add(SDPA_OPS[name])
        return func(*args, **(kwargs or {}))


# --- fvcore -----------------------------------------------------------------------------------


def fvcore_forward_flops(model, inputs: tuple) -> tuple[int, dict[str, int]]:
    """fvcore's forward count in FLOPs (its multiply-adds x 2), total and per module.

    fvcore traces with torch.jit, so it needs real tensors; it skips sdpa unless told how to count
    it, so a handle gives it the same 2 matmuls (QKᵀ and AV) per call."""
    from fvcore.nn import FlopCountAnalysis

    def sdpa_handle(inputs, outputs):
        q, k, v = (i.type().sizes() for i in inputs[:3])
        b, h, s_q, d = q
        s_k, d_v = k[-2], v[-1]
        return b * h * s_q * s_k * (d + d_v)  # multiply-adds of QKᵀ and AV

    analysis = FlopCountAnalysis(model, inputs)
    analysis.set_op_handle("aten::scaled_dot_product_attention", sdpa_handle)
    analysis.unsupported_ops_warnings(False)
    analysis.uncalled_modules_warnings(False)
    per_module = {name: 2 * v for name, v in analysis.by_module().items()}
    return 2 * analysis.total(), per_module
