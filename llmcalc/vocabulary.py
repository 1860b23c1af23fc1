"""The names the command line offers for what the analytic tables hold: precision recipes, optimizers, how an
optimizer step allocates scratch, pipeline schedules, fine-tuning methods and base dtypes, storage dtypes of
served weights, the step-time model's kernel and communication choices; and the output formats of ``llmcalc.render``.

Tiny on purpose: the CLI builds its choices from these at start-up without importing the formulas. Each tuple
lists the keys of its table in order (``analytic.memory.RECIPES``, ``OPTIMIZERS``, ``analytic.pipeline.SCHEDULES``,
``analytic.finetune.METHODS``, ``BASE_DTYPES``); tests/test_cli.py holds them equal.
"""

from __future__ import annotations

RECIPE_NAMES = ("fp32", "bf16-mixed", "bf16-mixed-fp32-grads", "fp16-mixed", "bf16", "amp", "fp8", "fp8-current",
                "fp8-torchao", "fp8-blockwise", "mxfp8", "nvfp4")
OPTIMIZER_NAMES = ("adamw", "adam", "sgd", "lion", "adam8bit", "muon")
# How an optimizer step allocates scratch memory (AdamW's sqrt(v) denominator; for mixed precision
# also the fp32 copy of a half-precision gradient): fused kernels none; torch's foreach path one
# state-sized copy of every parameter at once; its for-loop path two for the largest tensor at a time.
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v")
FINETUNE_METHODS = ("lora", "qlora")
BASE_DTYPES = ("bf16", "fp16", "fp32", "int8", "nf4", "fp4")
RECOMPUTE_MODES = ("none", "selective", "full")
LOSS_IMPLS = ("full", "fused")  # the LM head's cross-entropy: full logits (HF Trainer) or Liger's fused linear CE
STORAGE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")  # served weights and KV cache
FORMATS = ("table", "markdown", "csv", "json")  # what llmcalc.render.tables.render writes
# The step-time model's kernel and communication choices (analytic.kernels.ATTENTION_KERNELS, analytic.steptime's
# CP_COMMS, EP_DISPATCHERS and RECOMPUTE_MODULES; tests hold them equal).
ATTENTION_KERNELS = ("auto", "cudnn", "cudnn-2024", "fa2", "fa3")
CP_COMMS = ("p2p", "all-gather", "a2a", "a2a+p2p")
EP_DISPATCHERS = ("alltoall", "allgather", "deepep")
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts", "mlp_act",
                     "alternate_mm")
