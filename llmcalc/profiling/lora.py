"""LoRA on the reference model: plain torch adapters (peft not required), and a virtual profile of a
fine-tuning step held against analytic.finetune.

``LoraLinear`` wraps a frozen ``nn.Linear`` W with fp32 A (r x d_in) and B (d_out x r), as peft builds
them with autocast_adapter_dtype=True: y = W x + B (A x) · alpha/r. The adapters run in the activation
dtype: each fp32 weight is cast to it in forward (what torch.autocast does; the copy is what autograd
keeps for the input gradient). lora_dropout is 0 (peft uses nn.Identity then), so A's input is the very
tensor the base linear receives. Only the bf16/fp16/fp32 base is built: bitsandbytes' 4-bit and 8-bit
storage is not emulated here, so QLoRA is held to the formula analytically only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..analytic.finetune import FinetuneFlops, LoraConfig, finetune, finetune_memory
from ..analytic.flops import step_flops
from ..errors import LlmcalcError
from ..results import Comparison, ProfileResult
from ..spec import ModelSpec
from .counters import count_flops
from .model import Attention, build_model
from .step import PlainAdamW, batch_inputs, training_step

MEMORY_TOLERANCE = 0.10
BASE_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float | None = None):
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


def apply_lora(model: nn.Module, config: LoraConfig) -> int:
    """Freeze every base parameter and wrap the targeted linears; returns the trainable count."""
    spec = model.spec
    if spec.is_moe and {"gate_proj", "up_proj", "down_proj"} & set(config.targets):
        raise LlmcalcError("the reference model stores MoE experts as batched tensors, not nn.Linear: profile LoRA "
                           "on MoE models with attention targets only (q,k,v,o)")
    if config.base_dtype not in BASE_TORCH:
        raise LlmcalcError(f"the profiler builds a bf16, fp16 or fp32 base; {config.base_dtype} storage "
                           "(bitsandbytes) is modelled analytically only")
    for p in model.parameters():
        p.requires_grad_(False)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or name in ("lm_head", "pooler", "router"):
                continue
            target = _target_of(parent, name)
            hit = (("k_proj" in config.targets or "v_proj" in config.targets) if target == "kv"
                   else target in config.targets)
            if hit:
                setattr(parent, name, LoraLinear(child, config.rank))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def virtual_finetune_profile(spec: ModelSpec, config: LoraConfig, batch: int = 1, seq: int = 2048,
                             recompute: str = "none") -> ProfileResult:
    """A LoRA step on fake tensors: trainable parameters, forward FLOPs and the peak (MemTracker)."""
    from .measure import _global_peak_tracker, _memory_categories

    if spec.architecture != "decoder":
        raise LlmcalcError("fine-tuning profiles cover decoder-only models")
    if recompute not in ("none", "full"):
        raise LlmcalcError("the reference model recomputes none or full")
    dtype = BASE_TORCH.get(config.base_dtype, torch.bfloat16)
    result = ProfileResult(spec.name, "virtual", "cpu (FakeTensorMode)", "fake tensors",
                           f"{config.method} r{config.rank} ({config.base_dtype} base, fp32 adapters)", batch, seq,
                           recompute, "sdpa", "", "torch")
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model(spec, dtype, "cpu", "sdpa", routing="balanced")
        model.set_checkpointing(recompute == "full")
        trainable = apply_lora(model, config)
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
        result.memory_measured = _memory_categories(tracker.get_tracker_snapshot("peak"))
        peak = result.memory_measured.pop("total", None)
        step = count_flops(lambda: training_step(model, optimizer, inputs, "bf16", "cpu"))
    ft = finetune(spec, config)
    fl = FinetuneFlops(ft, step_flops(spec, batch, seq, recompute=recompute))
    est = finetune_memory(spec, config, batch, seq, "adamw", recompute, "flash")
    result.comparisons = [
        Comparison("parameters", ft.trainable, trainable, "params", 0.0, "trainable adapter parameters"),
        Comparison("forward FLOPs", fl.forward, forward.total, "FLOP", 0.01, "frozen 2·N + adapters 2·N_adapter, "
                   "full S²"),
        Comparison("train-step model FLOPs", fl.model_flops, None, "FLOP", 0.01,
                   "4·N_frozen + 6·N_adapter per token + 3 x S²"),
        Comparison("train-step FLOPs", None, step.total, "FLOP", 0.01,
                   "measured: autograd skips layer 0's Q/K/V input gradients and flash sdpa recomputes QKᵀ"),
        Comparison("peak memory", est.peak, peak, "bytes", MEMORY_TOLERANCE,
                   f"analytic LoRA peak at the {est.peak_phase} (recompute {recompute})"),
    ]
    c = est.components()
    at_step = est.peak_phase == "optimizer step"
    result.memory_analytic = {  # grouped as MemTracker's categories
        "parameters (weights + masters)": c["weights"] + c["adapters"],
        "gradients": c["gradients"] if at_step else 0.0,
        "optimizer states": c["optimizer states"],
        "activations and temporaries": 0.0 if at_step else sum(
            v for k, v in c.items() if k not in ("weights", "adapters", "gradients", "optimizer states"))}
    result.notes.append("virtual run: fake tensors, no memory allocated; adapters fp32, base frozen")
    return result
