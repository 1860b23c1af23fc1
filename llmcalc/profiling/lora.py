"""LoRA on the reference model: plain torch adapters (peft not required), and a virtual profile of a
fine-tuning step held against analytic.finetune.

``LoraLinear`` wraps a frozen ``nn.Linear`` W with fp32 A (r x d_in) and B (d_out x r), as peft builds
them with autocast_adapter_dtype=True: y = W x + B (A x) · alpha/r. The adapters run in the activation
dtype: each fp32 weight is cast to it in forward (what torch.autocast does; the copy is what autograd
keeps for the input gradient). lora_dropout is 0 (peft uses nn.Identity then), so A's input is the very
tensor the base linear receives.

QLoRA (nf4/fp4/int8 base): every linear inside the blocks becomes a ``QuantisedLinear`` that holds exactly the
tensors bitsandbytes stores (see analytic.finetune.quantised_bytes for the layout and its source) as frozen
plain-torch parameters, so the measured stored bytes and the peak include the quantised base. It is a memory
emulation for fake tensors, not a kernel: dequantisation allocates the bf16 weight that bitsandbytes'
dequantize_4bit kernel writes (its values are irrelevant under FakeTensorMode), in forward and again in
backward, as bitsandbytes' MatMul4Bit does (bitsandbytes/autograd/_functions.py: only the quantised weight
is kept for backward, never the dequantised one).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..analytic.finetune import NF4_BLOCK, NF4_BLOCK2, FinetuneFlops, LoraConfig, finetune, finetune_memory
from ..analytic.flops import step_flops
from ..errors import LlmcalcError
from ..results import Comparison, ProfileResult
from ..spec import ModelSpec
from .counters import count_flops
from .model import MLP, Attention, Transformer, build_model
from .step import PlainAdamW, batch_inputs, training_step

MEMORY_TOLERANCE = 0.03  # measured within 2.4 % (tests/test_finetune.py, test_virtual_profile_of_lora_step)
BASE_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
QUANTISED = ("nf4", "fp4", "int8")


def _frozen(shape, dtype) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


class _DequantisedMatmul(torch.autograd.Function):
    """y = x Wᵀ with W dequantised on the fly; backward dequantises again for the input gradient and keeps
    nothing of W between the two (bitsandbytes MatMul4Bit / MatMul8bitLt with a frozen weight)."""

    @staticmethod
    def forward(ctx, x, module):
        ctx.module = module
        return F.linear(x, module.dequantised(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.module.dequantised(grad.dtype), None


class QuantisedLinear(nn.Module):
    """A frozen linear stored as bitsandbytes stores it, every tensor a frozen parameter (so it is counted):
    nf4/fp4 (Params4bit + QuantState): the packed uint8 weight (two 4-bit codes a byte), the absmax of each
    64-block (with double quantisation: uint8, plus the fp32 absmax of each 256 of them, the fp32 offset and
    the 256-entry fp32 code of that second level), and the 16-entry fp32 nf4/fp4 code; int8 (Int8Params):
    the int8 weight CB and one fp32 scale SCB per output row. A bias stays in the activation dtype."""

    def __init__(self, base: nn.Linear, dtype: str, double_quant: bool = True):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        n = self.in_features * self.out_features
        if dtype == "int8":
            self.CB = _frozen((self.out_features, self.in_features), torch.int8)
            self.SCB = _frozen((self.out_features,), torch.float32)
        else:
            blocks = math.ceil(n / NF4_BLOCK)
            self.packed = _frozen((math.ceil(n / 2), 1), torch.uint8)
            self.code = _frozen((16,), torch.float32)
            if double_quant:
                self.absmax = _frozen((blocks,), torch.uint8)
                self.absmax2 = _frozen((math.ceil(blocks / NF4_BLOCK2),), torch.float32)
                self.offset = _frozen((), torch.float32)
                self.code2 = _frozen((256,), torch.float32)
            else:
                self.absmax = _frozen((blocks,), torch.float32)
        self.bias = base.bias

    def dequantised(self, dtype: torch.dtype) -> torch.Tensor:
        """The bf16 weight the dequantisation kernel writes (values irrelevant on fake tensors)."""
        some = self.CB if hasattr(self, "CB") else self.packed
        return torch.empty((self.out_features, self.in_features), dtype=dtype, device=some.device)

    def forward(self, x):
        y = _DequantisedMatmul.apply(x, self)
        return y if self.bias is None else y + self.bias.to(y.dtype)


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear | QuantisedLinear, rank: int, alpha: float | None = None):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, dtype=torch.float32)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = (alpha or 2 * rank) / rank

    def forward(self, x):
        a = F.linear(x, self.lora_A.weight.to(x.dtype))
        return self.base(x) + F.linear(a, self.lora_B.weight.to(x.dtype)) * self.scaling


class _NoHook:
    def remove(self) -> None:
        pass


def _target_of(module: nn.Module, name: str) -> str | None:
    if isinstance(module, Attention) and name in ("kv_a_proj", "kv_b_proj"):
        return "kv"
    if name in ("q_a_proj", "q_b_proj"):
        return "q_proj"
    return name


def apply_lora(model: Transformer, config: LoraConfig) -> int:
    """Freeze every base parameter and wrap the targeted linears; returns the trainable count."""
    spec = model.spec
    if spec.is_moe and {"gate_proj", "up_proj", "down_proj"} & set(config.targets):
        raise LlmcalcError("the reference model stores MoE experts as batched tensors, not nn.Linear: profile LoRA "
                           "on MoE models with attention targets only (q,k,v,o)")
    quantised = config.base_dtype in QUANTISED
    if quantised and spec.is_moe:
        raise LlmcalcError("the reference model stores MoE experts as batched tensors, not nn.Linear: the QLoRA "
                           "profile quantises dense models only; use --finetune lora, or a dense model")
    for p in model.parameters():
        p.requires_grad_(False)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or name in ("lm_head", "pooler", "router"):
                continue
            base: nn.Linear | QuantisedLinear = child
            if quantised and isinstance(parent, (Attention, MLP)):  # the block linears, as the formula
                base = QuantisedLinear(child, config.base_dtype, config.double_quant)
            target = _target_of(parent, name)
            hit = (("k_proj" in config.targets or "v_proj" in config.targets) if target == "kv"
                   else target in config.targets)
            if hit or base is not child:
                setattr(parent, name, LoraLinear(base, config.rank) if hit else base)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def virtual_finetune_profile(spec: ModelSpec, config: LoraConfig, batch: int = 1, seq: int = 2048,
                             recompute: str = "none") -> ProfileResult:
    """A LoRA/QLoRA step on fake tensors: trainable parameters, the frozen base's stored bytes, forward FLOPs
    and the peak (MemTracker), each held against analytic.finetune."""
    if spec.architecture != "decoder":
        raise LlmcalcError("fine-tuning profiles cover decoder-only models")
    if recompute not in ("none", "full"):
        raise LlmcalcError("the reference model recomputes none or full")
    result = ProfileResult(model=spec.name, mode="virtual", device="cpu (FakeTensorMode)", device_name="fake tensors",
                           recipe=f"{config.method} r{config.rank} ({config.base_dtype} base, fp32 adapters)",
                           batch_size=batch, seq_len=seq, recompute=recompute, attention="sdpa", sdpa_backend="",
                           counter="torch")
    measured = _measure(spec, config, batch, seq, recompute)
    result.memory_measured = measured["memory"]
    ft = finetune(spec, config)
    fl = FinetuneFlops(ft, step_flops(spec, batch, seq, recompute=recompute))
    est = finetune_memory(spec, config, batch=batch, seq_len=seq, optimizer="adamw", recompute=recompute,
                          attention="flash")
    result.comparisons = [
        Comparison(name="parameters", analytic=ft.trainable, measured=measured["trainable"], unit="params",
                   tolerance=0.0, note="trainable adapter parameters"),
        Comparison(name="frozen base stored bytes", analytic=ft.base_weight_bytes(), measured=measured["frozen_bytes"],
                   unit="bytes", tolerance=0.0, note=f"{config.base_dtype} block linears with their quantisation "
                   "state, everything else bf16" if config.base_dtype in QUANTISED else f"{config.base_dtype} base"),
        Comparison(name="forward FLOPs", analytic=fl.forward, measured=measured["forward"], unit="FLOP",
                   tolerance=0.01, note="frozen 2·N + adapters 2·N_adapter, full S²"),
        Comparison(name="train-step model FLOPs", analytic=fl.model_flops, measured=None, unit="FLOP", tolerance=0.01,
                   note="4·N_frozen + 6·N_adapter per token + 3 x S²"),
        Comparison(name="train-step FLOPs", analytic=None, measured=measured["step"], unit="FLOP", tolerance=0.01,
                   note="measured: autograd skips layer 0's Q/K/V input gradients and flash sdpa recomputes QKᵀ"),
        Comparison(name="peak memory", analytic=est.peak, measured=measured["peak"], unit="bytes",
                   tolerance=MEMORY_TOLERANCE,
                   note=f"analytic LoRA peak at the {est.peak_phase} (recompute {recompute})"),
    ]
    alive = est.phase_components()[est.peak_phase]
    states = ("weights", "adapters", "gradients", "optimizer states")
    result.memory_analytic = {  # grouped as MemTracker's categories
        "parameters (weights + masters)": alive.get("weights", 0.0) + alive.get("adapters", 0.0),
        "gradients": alive.get("gradients", 0.0),
        "optimizer states": alive.get("optimizer states", 0.0),
        "activations and temporaries": sum(v for k, v in alive.items() if k not in states)}
    result.notes.append("virtual run: fake tensors, no memory allocated; adapters fp32, base frozen"
                        + (f"; {config.base_dtype} storage emulated in plain torch (QuantisedLinear)"
                           if config.base_dtype in QUANTISED else ""))
    return result


def _measure(spec: ModelSpec, config: LoraConfig, batch: int, seq: int, recompute: str) -> dict:
    """Build the model with adapters on fake tensors, run two steps (the first creates the optimizer states)
    and measure: trainable parameters, frozen stored bytes, forward and step FLOPs, MemTracker's peak."""
    from .measure import _global_peak_tracker, _memory_categories

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model(spec, BASE_TORCH.get(config.base_dtype, torch.bfloat16), "cpu", "sdpa", routing="balanced")
        model.set_checkpointing(recompute == "full")
        trainable = apply_lora(model, config)
        frozen_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
        optimizer = PlainAdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=False)
        inputs = batch_inputs(model, batch, seq, "cpu")
        forward = count_flops(lambda: model(*inputs))
        training_step(model, optimizer, inputs, "bf16", "cpu")  # creates the optimizer states
        tracker = _global_peak_tracker()
        for p in model.parameters():  # MemTracker hooks every parameter's gradient: skip the frozen ones
            if not p.requires_grad:
                tracker._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())
        tracker.track_external(model, optimizer)
        with tracker:
            training_step(model, optimizer, inputs, "bf16", "cpu")
        memory = _memory_categories(tracker.get_tracker_snapshot("peak"))
        peak = memory.pop("total", None)
        step = count_flops(lambda: training_step(model, optimizer, inputs, "bf16", "cpu"))
    return {"trainable": trainable, "frozen_bytes": frozen_bytes, "forward": forward.total, "step": step.total,
            "memory": memory, "peak": peak}
