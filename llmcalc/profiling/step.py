"""One training step of the reference model under a named precision recipe (see analytic.memory).

- fp32: fp32 parameters, gradients, AdamW states;
- bf16 ("pure"): parameters, gradients and AdamW states in bf16;
- bf16-mixed / fp16-mixed: half-precision parameters and gradients, fp32 master weights and fp32
  AdamW states held by the optimizer; each gradient is widened to fp32 one tensor at a time;
- amp: fp32 parameters, gradients and states; forward and loss under torch.autocast(bf16).
The loss is cross-entropy on fp32 logits (targets: the input ids), or for models without an LM head
the mean of the encoder's output (and of the pooler's), so that every parameter gets a gradient.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from ..errors import LlmcalcError

RECIPE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16,
                 "fp16-mixed": torch.float16, "amp": torch.float32}


def param_dtype(recipe: str) -> torch.dtype:
    try:
        return RECIPE_DTYPES[recipe]
    except KeyError:
        raise LlmcalcError(f"the profiler runs recipes {', '.join(RECIPE_DTYPES)}; got {recipe!r}") from None


class MixedPrecisionAdamW:
    """fp32 master copies and fp32 AdamW states for half-precision parameters.

    One AdamW per parameter tensor, so the fp32 copy of a gradient exists for one tensor at a time.
    """

    def __init__(self, params, lr: float = 1e-4):
        self.params = [p for p in params if p.requires_grad]
        # The fp32 masters live in a module of their own so that memory trackers see them as parameters.
        self.masters = torch.nn.ParameterList(
            torch.nn.Parameter(p.detach().float().clone()) for p in self.params)
        self.master = list(self.masters)
        self.optimizers = [torch.optim.AdamW([m], lr=lr, foreach=False) for m in self.master]

    def step(self):
        with torch.no_grad():
            for p, m, opt in zip(self.params, self.master, self.optimizers, strict=True):
                if p.grad is None:
                    continue
                m.grad = p.grad.float()
                opt.step()
                m.grad = None
                p.copy_(m)

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None

    @property
    def tracked(self) -> list:
        """What a memory tracker must be told about: the masters and every AdamW."""
        return [self.masters, *self.optimizers]


class PlainAdamW(torch.optim.AdamW):
    @property
    def tracked(self) -> list:
        return [self]


def make_optimizer(model, recipe: str):
    params = [p for p in model.parameters() if p.requires_grad]
    if recipe.endswith("-mixed"):
        return MixedPrecisionAdamW(params)
    return PlainAdamW(params, lr=1e-4, foreach=False)


def batch_inputs(model, batch: int, seq: int, device) -> tuple:
    spec = model.spec
    ids = torch.randint(0, spec.vocab_size, (batch, seq), device=device)
    return (ids,)


def loss_of(model, inputs: tuple) -> torch.Tensor:
    spec = model.spec
    out, pooled = model(*inputs), None
    if isinstance(out, tuple):  # an encoder with a pooler: both outputs feed the loss, as in pre-training
        out, pooled = out
    if spec.lm_head:
        ids = inputs[0]
        loss = F.cross_entropy(out.float().view(-1, spec.vocab_size), ids.view(-1))  # fp32, as training code does
    else:
        loss = out.float().mean()
    return loss + pooled.float().mean() if pooled is not None else loss


def autocast_for(recipe: str, device) -> contextlib.AbstractContextManager:
    if recipe == "amp":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def training_step(model, optimizer, inputs: tuple, recipe: str, device, phase=None) -> torch.Tensor:
    """Forward, loss, backward, optimizer step, zero_grad(set_to_none=True). `phase`, if given, is told each
    part as it starts ("forward", "backward", "optimizer"; a memory tracker keeps a peak per part)."""
    tell = phase or (lambda name: None)
    tell("forward")
    with autocast_for(recipe, device):
        loss = loss_of(model, inputs)
    tell("backward")
    loss.backward()
    tell("optimizer")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def forward_only(model, inputs: tuple, recipe: str, device):
    with autocast_for(recipe, device):
        return model(*inputs)
