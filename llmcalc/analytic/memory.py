"""Training memory per GPU: model states under a named precision recipe and optimizer, activations,
sharding (ZeRO 1/2/3 over data parallelism, tensor and pipeline parallelism), and the peak.

Bytes inside; GiB only on screen. Every byte-per-parameter figure comes from a named recipe and
optimizer (printed with the result), never a hidden constant.

Peak (steady state, after the first step has created the optimizer states): gradients are freed
by zero_grad(set_to_none=True) before forward and activations during backward, so the two grow and
shrink against each other; the peak is the largest of
- end of forward:   weights + master + optimizer states + activations + logits/loss (+ gradients
                    where the recipe keeps a persistent gradient buffer, as Megatron does),
- blocks' backward: the logits freed, one block in its backward held whole, and the gradients made so
                    far, at whichever end of the backward holds more (``MemoryEstimate.phase_components``), and
- optimizer step:   weights + master + optimizer states + gradients.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from typing import Any, NamedTuple, Protocol

from ..errors import LlmcalcError
from ..records import dataclass, short_repr
from ..spec import ModelSpec
from ..validate import DEFAULT_SEQ_LEN, MAX_GPUS, positive_int
from ..vocabulary import OPTIMIZER_IMPLS  # the names and their scratch rule (re-exported)
from .activations import ActivationEstimate, Saved, activation_memory, kept_terms, layer_saved, stage_activations
from .parallel import Parallel
from .params import count_params, largest_tensor, layer_blocks


class MeasuredShape(Protocol):
    """What a MemoryEstimate reads of a model transformers measured (``measured.MeasuredModel``, which builds its
    estimate: ``measured.measured_training_memory``). Named here so that the import runs one way, measured -> memory."""

    @property
    def name(self) -> str: ...

    @property
    def model_type(self) -> str: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def notes(self) -> Sequence[str]: ...

    def describe(self) -> str: ...


class StateBytes(Protocol):
    """What Optimizer.bytes_per_param reads of a recipe: the bytes of one optimizer-state element."""

    @property
    def state_bytes(self) -> float: ...


@dataclass(frozen=True)
class Recipe:
    name: str
    weight_bytes: float  # per parameter, as the model holds it
    grad_bytes: float
    master_bytes: float  # fp32 master copy kept by the optimizer (0: none)
    state_bytes: float  # per optimizer-state element
    act_bytes: float  # per activation element
    description: str
    persistent_grads: bool = False  # a gradient buffer that lives through forward (Megatron)
    autocast_cache_bytes: float = 0.0  # torch.autocast caches a low-precision copy of each weight in forward
    fp8: str = ""  # low-precision GEMMs: the quantization scheme, a key of FP8_NOTES ("te-delayed", ...); "" none
    fp8_saved_inputs: bool = False  # linears save their input in FP8 (Transformer Engine), not bf16
    saved_input_bytes: float = 1.0  # with fp8_saved_inputs: bytes per saved element, block scales included
    gemm_dtype: str = "bf16"  # what the linear GEMMs' inputs are: bf16, fp16, fp32, fp8 or fp4 (the step model's rate)

    @property
    def quant_label(self) -> str:
        """How memory names this recipe's cached low-precision weights and state: FP8, MXFP8 or NVFP4."""
        return {"te-mxfp8": "MXFP8", "te-nvfp4": "NVFP4"}.get(self.fp8, "FP8")


# FP8 figures read from the sources at NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b (TE),
# pytorch/ao@36027d82d1ad9949597ea16002ff4940374b1b94 (torchao) and
# pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (torchtitan/config/configs.py L85-102).
# Scaling state (TE transformer_engine/pytorch/...): module/base.py set_meta_tensor (L1137-1139) makes 3 quantizers
# per GEMM in forward (input, weight, output) and 2 in backward (grad output, grad input);
# quantization.py DelayedScalingRecipeState (L1397-1451) keeps per quantizer an fp32 scale and an fp32 amax history
# of amax_history_len (default 1024, common/recipe/__init__.py L255): (1024 + 1) x 4 bytes (no stored scale_inv:
# each Float8Tensor carries its own one-element fp32 scale_inv, tensor/float8_tensor.py); current scaling
# (Float8CurrentScalingRecipeState, L1454-1490) allocates nothing, each cast takes its tensor's amax now. A TE
# block runs 4 linear GEMMs (fused QKV, attention projection, fc1 = gate+up, fc2), and its DotProductAttention
# allocates the state of 3 more under FP8 autocast even without fp8_dpa (attention/dot_product_attention/
# dot_product_attention.py: prepare_forward_ctx(num_gemms=3) L1665, state for num_gemms [3] L1243, the
# delayed recipe reused as is). torchao's float8 training scales dynamically: no state (float8/float8_linear.py).
FP8_STATE_BYTES_PER_LAYER = {"te-delayed": (4 + 3) * 5 * (1024 + 1) * 4, "te-current": 0, "torchao": 0,
                             "te-blockwise": 0, "te-mxfp8": 0, "te-nvfp4": 0}
# Saved tensors that are linear-layer inputs: Transformer Engine keeps its FP8 cast of them for the weight-gradient
# GEMM, column-wise only (module/linear.py L600-616: "Discard row-wise data since it is not needed in backward";
# LayerNormLinear's ln_out, Linear's inputmat, LayerNormMLP's fc2 input act_out); LayerNormMLP keeps fc1's output
# in bf16 (layernorm_mlp.py L807-816).
FP8_SAVED = ("attention input (norm output)", "MLP input (norm output)", "O-projection input (heads merged)",
             "MLP down-projection input", "MLP activation output (fc2 input)")
FP8_NOTES = {
    "te-delayed": "Transformer Engine DelayedScaling (amax history 1024, max) under Megatron-LM: GEMM inputs "
                  "(activations, weights, output gradients) cast to FP8 E4M3/E5M2 (HYBRID); weights stored bf16 with "
                  "an FP8 copy and, on Hopper, its FP8 transpose for the backward GEMMs (2 B/param; 1 B on Blackwell, "
                  "whose FP8 GEMMs take either layout), cached across steps (Megatron's parameter transpose cache, on "
                  "by default); fp32 main gradients, fp32 master weights and AdamW states: 2 + 4 + 4 + 8 = 18 B/param "
                  "+ 2 B FP8 weight copies; linear inputs saved in FP8 (1 B), norms, attention, softmax, fc1 output "
                  "and residuals stay bf16; scaling state per block: 7 GEMMs (4 linear + 3 of the attention module) "
                  "x 5 FP8 tensors x (1024 + 1) fp32 (amax history + scale)",
    "te-current": "Transformer Engine Float8CurrentScaling under Megatron-LM: as the delayed recipe (18 + 2 B/param, "
                  "linear inputs saved in FP8) but each scale from the tensor's own amax this step: no scaling state",
    "torchao": "torchao float8 training (convert_to_float8_training, tensorwise dynamic scaling, as torchtitan "
               "runs it: training.dtype float32, bf16 only as FSDP2's param_dtype or autocast): fp32 parameters "
               "(the master copy), fp32 gradients and AdamW states (4 + 4 + 8 = 16 B/param); weights and activations "
               "cast to FP8 per GEMM and not kept: torchao's float8 linear saves its high-precision input (bf16 "
               "under autocast) and weight for backward (torchao/float8/float8_linear.py "
               "ctx.save_for_backward(input_hp, weight_hp_t)), so activations stay bf16; no scaling state",
    "te-blockwise": "Transformer Engine Float8BlockScaling under Megatron-LM (DeepSeek-V3's fine-grained FP8, arXiv "
                    "2412.19437 sec. 3.3.2): activations and gradients scaled per 1x128 tile, weights per 128x128 "
                    "block, fp32 scales; 18 B/param as fp8-current, FP8 weight copy and transpose (2 B/param), linear "
                    "inputs saved in FP8 with one fp32 scale per 128 elements (1.03 B); no scaling state",
    "te-mxfp8": "Transformer Engine MXFP8BlockScaling (OCP Microscaling: 32-element blocks sharing an 8-bit E8M0 "
                "scale; Blackwell tensor cores) under Megatron-LM: 18 B/param as fp8-current; weights cached row- "
                "and column-wise (the block runs along K, so each GEMM layout needs its own quantization): 2 x "
                "(1 + 1/32) = 2.06 B/param; linear inputs saved column-wise for the weight gradient (1.03 B); no "
                "scaling state",
    "te-nvfp4": "Transformer Engine NVFP4BlockScaling (4-bit E2M1 values, one E4M3 scale per 16 elements and an "
                "fp32 scale per tensor; Blackwell) under Megatron-LM for the linear GEMMs: 18 B/param as "
                "fp8-current; weights cached row- and column-wise, 2 x (0.5 + 1/16) = 1.125 B/param; linear inputs "
                "saved as NVFP4 for the weight gradient (0.5625 B); no scaling state",
}


RECIPES = {r.name: r for r in (
    Recipe("fp32", 4, 4, 0, state_bytes=4, act_bytes=4,
           description="fp32 weights, gradients, optimizer states and activations", gemm_dtype="fp32"),
    Recipe("bf16-mixed", 2, 2, 4, state_bytes=4, act_bytes=2,
           description="bf16 weights/grads/activations, fp32 master weights and optimizer states "
           "(ZeRO paper, Rajbhandari et al. 2020: 2 + 2 + 12 = 16 bytes/param with Adam)"),
    Recipe("bf16-mixed-fp32-grads", 2, 4, 4, state_bytes=4, act_bytes=2,
           description="bf16-mixed with fp32 main gradients in a persistent buffer, as Megatron-LM keeps them "
           "(18 bytes/param with Adam)", persistent_grads=True),
    Recipe("fp16-mixed", 2, 2, 4, state_bytes=4, act_bytes=2,
           description="fp16 weights/grads/activations, fp32 master and optimizer states", gemm_dtype="fp16"),
    Recipe("bf16", 2, 2, 0, state_bytes=2, act_bytes=2,
           description="pure bf16: weights, gradients, optimizer states and activations"),
    Recipe("amp", 4, 4, 0, state_bytes=4, act_bytes=2,
           description="PyTorch torch.autocast(bf16): fp32 parameters, gradients and optimizer states, "
           "bf16 activations; "
           "autocast caches a bf16 copy of each weight during forward", autocast_cache_bytes=2),
    Recipe("fp8", 2, 4, 4, state_bytes=4, act_bytes=2, description=FP8_NOTES["te-delayed"], persistent_grads=True,
           autocast_cache_bytes=2,
           fp8="te-delayed", fp8_saved_inputs=True, gemm_dtype="fp8"),
    Recipe("fp8-current", 2, 4, 4, state_bytes=4, act_bytes=2, description=FP8_NOTES["te-current"],
           persistent_grads=True, autocast_cache_bytes=2,
           fp8="te-current", fp8_saved_inputs=True, gemm_dtype="fp8"),
    Recipe("fp8-torchao", 4, 4, 0, state_bytes=4, act_bytes=2, description=FP8_NOTES["torchao"], fp8="torchao",
           gemm_dtype="fp8"),
    Recipe("fp8-blockwise", 2, 4, 4, state_bytes=4, act_bytes=2, description=FP8_NOTES["te-blockwise"],
           persistent_grads=True, autocast_cache_bytes=2, fp8="te-blockwise", fp8_saved_inputs=True,
           saved_input_bytes=1 + 4 / 128, gemm_dtype="fp8"),
    Recipe("mxfp8", 2, 4, 4, state_bytes=4, act_bytes=2, description=FP8_NOTES["te-mxfp8"], persistent_grads=True,
           autocast_cache_bytes=2 * (1 + 1 / 32), fp8="te-mxfp8", fp8_saved_inputs=True, saved_input_bytes=1 + 1 / 32,
           gemm_dtype="fp8"),
    Recipe("nvfp4", 2, 4, 4, state_bytes=4, act_bytes=2, description=FP8_NOTES["te-nvfp4"], persistent_grads=True,
           autocast_cache_bytes=2 * (0.5 + 1 / 16), fp8="te-nvfp4", fp8_saved_inputs=True,
           saved_input_bytes=0.5 + 1 / 16, gemm_dtype="fp4"),
)}


@dataclass(frozen=True)
class Optimizer:
    name: str
    states: int  # state tensors per parameter
    fixed_state_bytes: float | None = None  # per state element when the optimizer fixes it (8-bit)
    extra_bytes: float = 0.0  # per parameter, e.g. quantisation statistics
    source: str = ""

    def bytes_per_param(self, recipe: StateBytes) -> float:
        per_state = recipe.state_bytes if self.fixed_state_bytes is None else self.fixed_state_bytes
        return self.states * per_state + self.extra_bytes


OPTIMIZERS = {o.name: o for o in (
    Optimizer("adamw", 2, source="Loshchilov & Hutter 2019: first and second moments"),
    Optimizer("adam", 2, source="Kingma & Ba 2015: first and second moments"),
    Optimizer("sgd", 1, source="SGD with momentum: one momentum buffer"),
    Optimizer("lion", 1, source="Chen et al. 2023: one momentum buffer"),
    # bitsandbytes 8-bit Adam: two uint8 states, block-wise quantised (block 2048) with one fp32
    # absmax per block and state (Dettmers et al. 2022).
    Optimizer("adam8bit", 2, fixed_state_bytes=1.0, extra_bytes=2 * 4 / 2048,
              source="Dettmers et al. 2022 (bitsandbytes): 2 x 1 byte + fp32 absmax per 2048-block"),
    # Muon (Jordan et al. 2024; Moonlight, arXiv 2502.16982): one momentum buffer, orthogonalised by Newton-Schulz
    # iterations; counted for every parameter (in practice embeddings, head and norms take AdamW's two states: a
    # few per cent more for a large model).
    Optimizer("muon", 1, source="Jordan et al. 2024 (Muon): one momentum buffer"),
)}


def custom_optimizer(bytes_per_param: float) -> Optimizer:
    if not bytes_per_param >= 0:
        raise LlmcalcError(f"optimizer bytes per parameter must be >= 0, got {bytes_per_param}")
    return Optimizer(f"custom ({bytes_per_param:g} B/param)", 0, extra_bytes=bytes_per_param)


def lookup(table: dict, kind: str, name: str):
    try:
        return table[name]
    except KeyError:
        raise LlmcalcError(f"unknown {kind} {name!r}; known: {', '.join(table)}") from None


BATCH_SCALED = ("activations", "recompute working set", "logits and loss")  # bytes proportional to the micro-batch


class PhasedPeak:
    """A training step's memory peaks in one of its phases (end of forward, the blocks' backward under
    full recomputation, the optimizer step); a subclass lists the components alive in each with
    `phase_components()`, and the peak is the largest phase sum."""

    def phase_components(self) -> dict[str, dict[str, float]]:
        raise NotImplementedError

    @property
    def forward_end(self) -> float:
        return sum(self.phase_components()["end of forward"].values())

    @property
    def optimizer_step(self) -> float:
        return sum(self.phase_components()["optimizer step"].values())

    @property
    def peak(self) -> float:
        return max(sum(c.values()) for c in self.phase_components().values())

    @property
    def peak_phase(self) -> str:
        sums = {name: sum(c.values()) for name, c in self.phase_components().items()}
        return max(sums, key=lambda name: sums[name])

    def peak_components(self) -> dict[str, float]:
        """The components alive at the peak (their sum is ``peak``)."""
        return self.phase_components()[self.peak_phase]


@dataclass(frozen=True)
class MemoryEstimate(PhasedPeak):
    """Per-GPU training memory of the most loaded pipeline stage, by component, in bytes (of a model by llmcalc's
    formula, or one transformers measured: ``measured.measured_training_memory``)."""

    __repr__ = short_repr(("spec", "batch", "seq_len", "parallel"))  # a handful of fields

    spec: ModelSpec | MeasuredShape
    recipe: Recipe
    optimizer: Optimizer
    parallel: Parallel
    batch: int
    seq_len: int
    recompute: str
    attention: str
    params_on_gpu: float  # parameters this GPU's stage holds (before ZeRO-3 sharding), routed experts apart
    activations: ActivationEstimate
    stage: str  # "first", "last" or "only"
    zero3_gathered: float = 0.0  # bytes of unsharded weights ZeRO-3 holds while computing a layer
    optimizer_impl: str = "fused"
    largest_tensor: float = 0  # elements of the largest parameter tensor on this GPU (its 1/tp share)
    notes: list[str] = field(default_factory=list)
    expert_params_on_gpu: float = 0.0  # this GPU's routed-expert parameters: its E/ep experts' 1/etp shards
    head_params_on_gpu: float = 0.0  # LM head + final norm here: their gradients exist before the blocks' backward
    late_params_on_gpu: float = 0.0  # untied embedding tables here: their gradients come after the last block's
    stage_layers: int = -1  # this stage's layers (-1: n_layers / pp)

    @property
    def dp(self) -> int:
        return self.parallel.dp

    def _shard(self, stage_needed: int) -> int:
        return zero_group(self.parallel) if self.parallel.zero >= stage_needed else 1

    def _per_gpu(self, bytes_per_param: float, stage_needed: int) -> float:
        """Bytes of one per-parameter state: the dense part ZeRO-sharded over dp, the routed experts over
        their own data-parallel group, tp x cp x dp / (etp x ep) ranks (dp / ep when etp = tp, cp = 1)."""
        expert_shard = self.parallel.expert_dp if self.parallel.zero >= stage_needed else 1
        return (self.params_on_gpu / self._shard(stage_needed)
                + self.expert_params_on_gpu / expert_shard) * bytes_per_param

    @property
    def bytes_per_param(self) -> dict[str, float]:
        """Bytes each parameter's states take under the recipe and optimizer, before sharding: weights, gradients,
        master weights, optimizer states (mixed-precision Adam: 2 + 2 + 4 + 8 = 16, ZeRO paper sec. 3.1)."""
        rec = self.recipe
        return {"weights": rec.weight_bytes, "gradients": rec.grad_bytes, "master_weights": rec.master_bytes,
                "optimizer_states": self.optimizer.bytes_per_param(rec)}

    @property
    def state_bytes_per_param(self) -> float:
        """weights + gradients + master weights + optimizer states, bytes per parameter (``bytes_per_param``)."""
        return sum(self.bytes_per_param.values())

    @property
    def weights(self) -> float:
        return self._per_gpu(self.recipe.weight_bytes, 3)

    @property
    def gradients(self) -> float:
        return self._per_gpu(self.recipe.grad_bytes, 2)

    @property
    def master_weights(self) -> float:
        return self._per_gpu(self.recipe.master_bytes, 1)

    @property
    def optimizer_states(self) -> float:
        return self._per_gpu(self.optimizer.bytes_per_param(self.recipe), 1)

    @property
    def autocast_cache(self) -> float:
        return self._per_gpu(self.recipe.autocast_cache_bytes, 3)

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.master_weights + self.optimizer_states

    @property
    def optimizer_temporaries(self) -> float:
        """Scratch bytes during the optimizer step (see OPTIMIZER_IMPLS)."""
        if self.optimizer_impl == "fused" or self.optimizer.states == 0:
            return 0.0
        widen = 4.0 if self.recipe.master_bytes else 0.0  # fp32 copy of a half-precision gradient
        if self.optimizer_impl == "foreach":
            return self._per_gpu(self.recipe.state_bytes + widen, 1)
        return self.largest_tensor * (2 * self.recipe.state_bytes + widen)

    @property
    def fp8_state(self) -> float:
        """FP8 scaling state (scales and amax histories) of this GPU's blocks (FP8_STATE_BYTES_PER_LAYER)."""
        if self.stage_layers >= 0:
            return self.stage_layers * FP8_STATE_BYTES_PER_LAYER[self.recipe.fp8] if self.recipe.fp8 else 0.0
        return fp8_state_bytes(self.recipe, self.spec.n_layers, self.parallel.pp)

    @property
    def persistent_fp8_copies(self) -> float:
        """Transformer Engine's FP8 weight copies, cached across steps: alive at the optimizer step too."""
        return self.autocast_cache if self.recipe.fp8 else 0.0

    def components(self) -> dict[str, float]:
        """Every component in bytes, in the order printed; an FP8 recipe names its cached weight copies and
        scaling state (Transformer Engine), any other recipe its autocast weight cache."""
        a = self.activations
        q = self.recipe.quant_label
        cache = {f"{q} weight copies": self.autocast_cache, f"{q} scaling state": self.fp8_state} if self.recipe.fp8 \
            else {"autocast weight cache": self.autocast_cache}
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "master weights": self.master_weights,
            "optimizer states": self.optimizer_states,
            "activations": sum(a.per_layer.values()),
            "recompute working set": a.recompute_working_set,
            "logits and loss": a.logits_and_loss,
            **cache,
            "ZeRO-3 gathered layer": self.zero3_gathered,
            "optimizer temporaries": self.optimizer_temporaries,
        }

    def phase_components(self) -> dict[str, dict[str, float]]:
        """The components alive in each phase of the step:
        - end of forward (the loss): states, every block's saved activations, the logits and loss buffers;
          gradients only where the recipe keeps them between steps; no block is being rebuilt yet;
        - blocks' backward, in every recomputation mode: the LM head's backward has consumed and freed the logits
          and loss buffers (and the head's saved inputs) before the first block's backward, and a block in its
          backward holds all its tensors (under full recomputation rebuilt from its checkpoint, under selective its
          attention core recomputed): ``ActivationEstimate.largest_layer``. The phase is the larger of its two
          ends, the sum being linear in the block reached: at its start the head's gradients and every block's
          activations (the one in its backward whole); at its end every gradient but the embedding's (which
          comes after the last block) and only the first block's tensors, besides the other micro-batches a
          pipeline stage holds. Charging every mode alike keeps full recomputation from peaking above none (it
          saves less at every point of the step);
        - optimizer step: states, gradients and the optimizer's temporaries.
        Holding the logits and the rebuilt block together overstated Llama-2-7B's shapes (2 blocks,
        micro-batch 8, seq 4096, recompute full) by 23 %: 26.36 GiB against the virtual profile's 21.41 GiB."""
        c = self.components()
        phases = {"end of forward": {k: v for k, v in c.items()
                                     if k not in ("optimizer temporaries", "recompute working set")
                                     and (k != "gradients" or self.recipe.persistent_grads)}}
        if self.spec.n_layers:
            phases["blocks' backward"] = self._backward(c)
        q = self.recipe.quant_label
        phases["optimizer step"] = {k: c[k] for k in ("weights", "gradients", "master weights", "optimizer states",
                                                      "optimizer temporaries", f"{q} weight copies",
                                                      f"{q} scaling state") if k in c}
        return phases

    def _backward(self, c: dict[str, float]) -> dict[str, float]:
        """The blocks' backward at whichever end holds more (see phase_components); components by name."""
        a = self.activations
        blocks = c["activations"] - a.head_saved  # every block's saved tensors, all micro-batches in flight
        others = blocks * (a.in_flight - 1) / a.in_flight  # what the stage's other micro-batches keep
        grads = self.gradients if self.recipe.persistent_grads else None  # a persistent buffer: all, always
        head = self._dense_grads(self.head_params_on_gpu)
        late = self._dense_grads(self.late_params_on_gpu)
        start = {"gradients": head if grads is None else grads, "activations": blocks - a.own_layer}
        end = {"gradients": self.gradients - (late if grads is None else 0.0), "activations": others}
        states = {k: v for k, v in c.items() if k not in ("optimizer temporaries", "logits and loss", "gradients",
                                                          "activations", "recompute working set")}
        at = max((start, end), key=lambda e: e["gradients"] + e["activations"])
        return {**states, **at, "recompute working set": a.largest_layer}

    def phase_peak(self) -> float:
        """``peak`` without building the phases' dicts (a layout search evaluates thousands): phase_components' terms
        summed in the same order, hence the same float (tests hold the two equal)."""
        return peak_of(self.state_terms(), self.activations)

    def state_terms(self) -> StateTerms:
        """What phase_peak reads of this estimate besides its activations (the same for every micro-batch and
        recomputation of these degrees: a layout search computes them once and pairs them with each):
        ``state_terms_of`` this estimate's fields."""
        par = self.parallel
        return state_terms_of(self.recipe, self.optimizer, zero=par.zero, dp=zero_group(par), expert_dp=par.expert_dp,
                              params=self.params_on_gpu, experts=self.expert_params_on_gpu,
                              gathered=self.zero3_gathered, temporaries=self.optimizer_temporaries,
                              fp8_state=self.fp8_state, blocks=bool(self.spec.n_layers),
                              head=self.head_params_on_gpu, late=self.late_params_on_gpu)

    def _dense_grads(self, params: float) -> float:
        """Gradient bytes of `params` dense (non-expert) parameters on this GPU, ZeRO-2/3 sharded over dp."""
        return params / self._shard(2) * self.recipe.grad_bytes

    def activation_bytes_per_sample(self) -> float:
        """Bytes the end-of-forward phase grows by per extra sequence in the micro-batch."""
        return self._per_sample(self.phase_components()["end of forward"])

    def _per_sample(self, phase: dict[str, float]) -> float:
        return sum(v for k, v in phase.items() if k in BATCH_SCALED) / self.batch

    def largest_micro_batch(self, capacity: float) -> int:
        """The largest micro-batch whose peak fits in `capacity` bytes (0 if none): every phase grows
        linearly with the micro-batch (its activations, working set, logits), the rest is fixed."""
        largest = None
        for phase in self.phase_components().values():
            per_sample = self._per_sample(phase)
            fixed = sum(phase.values()) - per_sample * self.batch
            if fixed > capacity:
                return 0
            if per_sample:
                fits = math.floor((capacity - fixed) / per_sample)
                largest = fits if largest is None else min(largest, fits)
        return max(0, largest) if largest is not None else 0


class StateTerms(NamedTuple):
    """MemoryEstimate.state_terms: weights, gradients, master weights, optimizer states, the weight caches, the
    ZeRO-3 gathered layer, the optimizer step's sum, whether there are blocks, whether gradients persist, and the
    head's and the late embedding's dense gradients, bytes per GPU."""

    weights: float
    gradients: float
    master: float
    states: float
    cache: tuple[float, ...]
    gathered: float
    step: float
    blocks: bool
    persistent_grads: bool
    head_grads: float
    late_grads: float


def zero_group(parallel: Parallel) -> int:
    """The data-parallel ranks ZeRO shards the dense weights, gradients and states over: dp, or with HSDP (a step
    layout's --dp-shard) the shard group, the states replicated over dp / dp_shard groups."""
    return getattr(parallel, "dp_shard", 0) or parallel.dp


def state_terms_of(rec: Recipe, opt: Optimizer, *, zero: int, dp: int, expert_dp: int, params: float,
                   experts: float, gathered: float, temporaries: float, fp8_state: float, blocks: bool, head: float,
                   late: float) -> StateTerms:
    """MemoryEstimate.state_terms from the numbers it reads (a layout search builds no estimate): the ZeRO stage,
    dp and the expert data-parallel group, this GPU's dense and routed-expert parameters, the ZeRO-3 gathered
    layer, the optimizer temporaries and FP8 scaling state (the properties' bytes), whether the stage has blocks,
    and its head and late embedding parameters. The properties' _per_gpu and _dense_grads with each shard read
    once: the same divisions and products, hence the same floats."""
    # per ZeRO stage needed (1, 2, 3): this GPU's parameters that take a state (_per_gpu before its bytes), sharded
    # from that stage on, whole (over 1) before it
    whole = params / 1 + experts / 1 if zero < 3 else 0.0
    sharded = params / dp + experts / expert_dp if zero >= 1 else whole
    held2 = sharded if zero >= 2 else whole
    held3 = sharded if zero >= 3 else whole
    w = held3 * rec.weight_bytes
    g = held2 * rec.grad_bytes
    master = sharded * rec.master_bytes
    states = sharded * opt.bytes_per_param(rec)
    autocast = held3 * rec.autocast_cache_bytes
    if rec.fp8:
        cache: tuple[float, ...] = (autocast, fp8_state)
        step = sum((w, g, master, states, temporaries, autocast, fp8_state))
    else:
        cache = (autocast,)
        step = sum((w, g, master, states, temporaries))
    grad_shard = dp if zero >= 2 else 1
    return StateTerms._make((w, g, master, states, cache, gathered, step, blocks, rec.persistent_grads,
                             head / grad_shard * rec.grad_bytes, late / grad_shard * rec.grad_bytes))  # field order


def fp8_state_bytes(rec: Recipe, n_layers: int, pp: int) -> float:
    """MemoryEstimate.fp8_state of a stage of n_layers // pp blocks (0 without an FP8 recipe)."""
    if not rec.fp8:
        return 0.0
    return n_layers // pp * FP8_STATE_BYTES_PER_LAYER[rec.fp8]


def peak_of(s: StateTerms, a: ActivationEstimate) -> float:
    """MemoryEstimate.phase_peak from its state terms and activations: the largest of the end of forward, the
    blocks' backward at its larger end and the optimizer step (phase_components' terms, summed in their order)."""
    return peak_from(s, (sum(a.per_layer.values()), a.logits_and_loss, a.head_saved, a.in_flight, a.own_layer,
                         a.largest_layer))


def peak_from(s: StateTerms, a: tuple[float, float, float, int | float, float, float]) -> float:
    """peak_of from the activations' sums: `a` is (the sum of per_layer's values in their order, logits_and_loss,
    head_saved, in_flight, own_layer, largest_layer), what a layout search keeps of an ActivationEstimate."""
    w, g, master, states, cache, gathered, step, blocks, persistent, head_grads, late_grads = s
    acts, logits, head_saved, in_flight, own_layer, largest_layer = a
    forward = sum((w, g, master, states, acts, logits, *cache, gathered) if persistent
                  else (w, master, states, acts, logits, *cache, gathered))
    if not blocks:
        return max(forward, step)
    held = acts - head_saved  # _backward's two ends: (gradients, activations) at its start and at its end
    if persistent:
        grads, activations, end_grads = g, held - own_layer, g - 0.0
    else:
        grads, activations, end_grads = head_grads, held - own_layer, g - late_grads
    others = held * (in_flight - 1) / in_flight
    if end_grads + others > grads + activations:
        grads, activations = end_grads, others
    backward = sum((w, master, states, *cache, gathered, grads, activations, largest_layer))
    return max(forward, backward, step)


def _layer_params(spec: ModelSpec, comps: dict[str, int] | None = None) -> tuple[float, float, float, float, float]:
    """(per-layer sharded-by-TP params, per-layer norm params, embedding, head, final norm); `comps`:
    count_params(spec).components when the caller has them already."""
    comps = count_params(spec).components if comps is None else comps
    emb = sum(v for k, v in comps.items() if k.startswith("embedding/"))
    head = comps.get("head/lm_head", 0)
    final = comps.get("norm/final", 0)
    norms = comps.get("norm/layers", 0) / spec.n_layers
    layer = (sum(comps.values()) - emb - head - final) / spec.n_layers - norms
    if spec.lm_head and spec.tie_embeddings:
        head = comps["embedding/tokens"]  # the head matmul uses the (shared) embedding table
    return layer, norms, emb, head, final


def zero3_gathered(blocks: list[dict[str, int]], tp: int, experts_over: int | None, weight_bytes: float) -> float:
    """Bytes of unsharded weights ZeRO-3/FSDP holds while it computes a layer: that block and the next, prefetched
    (FSDP's default), at most the model's two largest blocks (`blocks`: params.layer_blocks; an MoE block outweighs
    a dense one), each as this GPU's TP shard: its layer norms whole, its routed experts over `experts_over` ranks
    (etp x ep) where they have their own layout (else None: split as the rest, by tp); a shard's params whole (the
    last rank's share rounded up)."""
    shards = []
    for block in blocks:
        norms = sum(v for k, v in block.items() if k.endswith("norm/layers"))
        routed = sum(v for k, v in block.items() if k.endswith("moe/experts")) if experts_over else 0
        rest = sum(block.values()) - norms - routed
        shards.append(-(-rest // tp) + norms + (-(-routed // experts_over) if experts_over else 0))
    return sum(sorted(shards)[-2:]) * weight_bytes


def routed_expert_params(spec: ModelSpec, comps: dict[str, int] | None = None) -> float:
    """Every routed expert of the model, all MoE layers (what expert parallelism splits); 0 if dense.
    MoE layers are decoder-only, so their component is the unprefixed `moe/experts`."""
    return (count_params(spec).components if comps is None else comps).get("moe/experts", 0)


class MemoryTables:
    """training_memory's pieces memoized for many calls on one model (a layout search builds one per search; a
    call without one takes a fresh, empty one): each named point keyed by exactly the arguments it reads, the model
    by identity (kept alive in the table, so an id is never reused while the table lives): its parameter counts
    (``params``), the ZeRO-3 gathered blocks (``gathered``), a stage's activations (``activations``) and each
    block's terms (``layer_terms``)."""

    def __init__(self) -> None:
        self._memo: dict[tuple, Any] = {}

    def _get(self, key: tuple, make: Callable[[], Any]) -> Any:
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = make()
        return found

    def params(self, spec: ModelSpec) -> tuple[dict[str, int], tuple, float, list[dict[str, int]]]:
        """(count_params' components, _layer_params, routed_expert_params, layer_blocks) of `spec`."""
        def make() -> tuple:
            comps = count_params(spec).components
            return spec, (comps, _layer_params(spec, comps), routed_expert_params(spec, comps), layer_blocks(spec))
        return self._get(("params", id(spec)), make)[1]

    def gathered(self, spec: ModelSpec, tp: int, experts_over: int | None, weight_bytes: float) -> float:
        return self._get(("gathered", id(spec), tp, experts_over, weight_bytes),
                         lambda: zero3_gathered(self.params(spec)[3], tp, experts_over, weight_bytes))

    def activations(self, spec: ModelSpec, layers: range, in_flight: int | float, head: bool,
                    **common: Any) -> ActivationEstimate:
        """activation_memory over `layers` (`common`: its other keywords), from its parts (stage_activations): the
        blocks' once per layers and shape whatever the micro-batches in flight, their terms from ``layer_terms``;
        the head's once per shape."""
        values = tuple(common.values())
        blocks = self._get(("blocks", id(spec), layers.start, layers.stop, *values),
                           lambda: activation_memory(spec, layers=layers, head=False, terms_of=self.layer_terms,
                                                     **common))
        top = self._get(("head", id(spec), *values),
                        lambda: activation_memory(spec, layers=range(0), head=True, **common)) if head else None
        return stage_activations(blocks, top, in_flight)

    def layer_terms(self, spec: ModelSpec, layer: int, batch: int, seq: int, act_bytes: float, recompute: str,
                    attention: str, dropout: bool, tp: int, sequence_parallel: bool) -> tuple:
        """activations.layer_terms: the block's saved tensors (layer_saved) once per layer and shape, then what it
        keeps (kept_terms, which reads nothing of the layer but its tensors) once per distinct list of tensors."""
        items, kind = self._get(("saved", id(spec), layer, batch, seq, act_bytes, attention, dropout),
                                lambda: self._saved(spec, layer, (batch, seq, act_bytes), attention=attention,
                                                    dropout=dropout))
        return self._get(("kept", id(spec), kind, batch * seq, act_bytes, recompute, tp, sequence_parallel),
                         lambda: kept_terms(spec, items, batch * seq, act_bytes, recompute=recompute, tp=tp,
                                            sequence_parallel=sequence_parallel))

    def _saved(self, spec: ModelSpec, layer: int, shape: tuple[int, int, float], attention: str,
               dropout: bool) -> tuple[list[Saved], int]:
        """(layer_saved at `shape` = (batch, seq, activation bytes), the number of its distinct list of tensors in
        this table: equal lists, equal numbers)."""
        batch, seq, act_bytes = shape
        items = layer_saved(spec, layer, batch, seq, act_bytes=act_bytes, attention=attention, dropout=dropout)
        value = ("items", id(spec), tuple((s.name, s.nbytes, s.scope, s.kv_heads) for s in items))
        return items, self._get(value, lambda: (len(self._memo),))[0]


def in_flight(pp: int, vpp: int, rank: int, micro_batches: int | None = None) -> int | float:
    """Micro-batches whose activations pipeline rank `rank` holds at its peak, in units of its whole stage (all its
    vpp model chunks): the forward passes it has run and not yet run backward when its first backward starts.

    1F1B (vpp 1): pp - rank (its warm-up pp - rank - 1 and the steady state's first forward; Korthikanti et al. 2022,
    sec. 4.2.3: the first stage holds p micro-batches); interleaved 1F1B (Megatron-Core's
    get_pp_rank_microbatches / forward_backward_pipelining_with_interleaving: num_warmup_microbatches =
    (pp - rank - 1) x 2 + (vpp - 1) x pp chunk forwards, one more in the steady state), each chunk a 1/vpp of the
    stage: (2 (pp - rank - 1) + (vpp - 1) pp + 1) / vpp, on the first rank pp + (pp - 1) / vpp (Korthikanti's
    1 + (p - 1) / (p m) factor over 1F1B's p). Both capped by the step's `micro_batches` x vpp chunk forwards
    (Megatron: all-warm-up when there are fewer micro-batches; None: enough micro-batches, the steady state)."""
    if pp == 1:
        return 1
    if vpp == 1:
        held = pp - rank
        return held if micro_batches is None else min(held, micro_batches)
    chunks = 2 * (pp - rank - 1) + (vpp - 1) * pp + 1
    if micro_batches is not None:
        chunks = min(chunks, micro_batches * vpp)
    return chunks / vpp


def pipeline_ranks(spec: ModelSpec, parallel: Parallel, stage_layers: Sequence[int] | None = None,
                   micro_batches: int | None = None) -> list[tuple[str, range, int | float, bool]]:
    """The pipeline ranks whose memory can be the largest, each as (name, its layers, micro-batches in flight
    (``in_flight``), whether it holds the LM head): pp 1 the only rank; else the first (the embedding and the most
    micro-batches in flight), the last (the LM head, logits and loss) and, where `stage_layers` (layers per rank,
    all its chunks: --first-stage-layers / --last-stage-layers / --pipeline-layout) makes a middle rank hold more
    layer-micro-batches than the first, that rank. Without `stage_layers` every rank is sized as the most loaded,
    ceil(L / pp) layers (L / pp where pp divides the layers): the first rank the model's first ceil(L / pp) layers,
    the last its last ceil(L / pp)."""
    pp, vpp, n = parallel.pp, parallel.vpp, spec.n_layers
    if pp == 1:
        return [("only", range(n), 1, True)]
    if not stage_layers:  # every rank alike: the first holds the most micro-batches in flight
        per = -(-n // pp)
        return [("first", range(per), in_flight(pp, vpp, 0, micro_batches), False),
                ("last", range(n - per, n), in_flight(pp, vpp, pp - 1, micro_batches), True)]
    counts = list(stage_layers)
    starts = list(itertools.accumulate(counts, initial=0))
    flight = [in_flight(pp, vpp, r, micro_batches) for r in range(pp)]
    out = [("first", range(counts[0]), flight[0], False)]
    middle = max(range(1, pp - 1), key=lambda r: counts[r] * flight[r], default=None)
    if middle is not None and counts[middle] * flight[middle] > counts[0] * flight[0]:
        out.append((f"rank {middle}", range(starts[middle], starts[middle] + counts[middle]), flight[middle], False))
    out.append(("last", range(n - counts[-1], n), flight[-1], True))
    return out


def check_stage_layers(spec: ModelSpec, pp: int, stage_layers: Sequence[int]) -> None:
    """Layers per pipeline rank: pp of them, summing to the model's layers, none empty but where the rank holds the
    embedding or the head alone (Megatron's uneven layouts)."""
    if len(stage_layers) != pp or sum(stage_layers) != spec.n_layers or min(stage_layers) < 0:
        raise LlmcalcError(f"the pipeline ranks' layers {list(stage_layers)} must be pp {pp} counts summing to "
                           f"{spec.name}'s {spec.n_layers} layers")


def _check_training_inputs(spec: ModelSpec, parallel: Parallel, *, batch: int, seq_len: int, optimizer_impl: str,
                           stage_layers: Sequence[int] | None) -> None:
    """training_memory's refusals, one line each: the optimizer implementation, the layout against the model, the
    batch and length, the pipeline's stage layers."""
    if optimizer_impl not in OPTIMIZER_IMPLS:
        raise LlmcalcError(f"optimizer implementation must be one of {', '.join(OPTIMIZER_IMPLS)}; "
                           f"got {optimizer_impl!r}")
    parallel.check(spec)
    positive_int("batch size", batch)
    positive_int("seq_len", seq_len)
    if stage_layers:
        check_stage_layers(spec, parallel.pp, stage_layers)


def training_memory(spec: ModelSpec, batch: int = 1, seq_len: int = DEFAULT_SEQ_LEN, recipe: str = "bf16-mixed",
                    optimizer: str | Optimizer = "adamw", recompute: str = "none", attention: str = "flash",
                    parallel: Parallel | None = None, dropout: bool = False,
                    optimizer_impl: str = "fused", stage_layers: Sequence[int] | None = None,
                    micro_batches: int | None = None,
                    tables: MemoryTables | None = None) -> MemoryEstimate:
    """Per-GPU training memory of the most loaded pipeline rank (``pipeline_ranks``: first, last, or a middle rank
    an uneven layout loads more). `stage_layers`: layers per pipeline rank (default: ceil(L / pp) each, the most
    loaded stage of an uneven split, the even split where pp divides the layers); `micro_batches`: per optimizer
    step (global batch / (micro-batch x dp)), capping the micro-batches in flight (``in_flight``; None: the steady
    state);
    `tables`: the pieces already computed for this model (``MemoryTables``, a layout search's)."""
    parallel = parallel or Parallel(zero=0)
    tables = MemoryTables() if tables is None else tables
    _check_training_inputs(spec, parallel, batch=batch, seq_len=seq_len, optimizer_impl=optimizer_impl,
                           stage_layers=stage_layers)
    pp = parallel.pp
    seq_len //= parallel.cp  # context parallelism: each rank holds 1/cp of every sequence
    rec = lookup(RECIPES, "recipe", recipe)
    opt = optimizer if isinstance(optimizer, Optimizer) else lookup(OPTIMIZERS, "optimizer", optimizer)
    tp, ep, etp = parallel.tp, parallel.ep, parallel.expert_tp
    comps, (layer, norms, emb, head, final), routed, _ = tables.params(spec)
    routed /= spec.n_layers  # a layer's average share (MoE layers may alternate)
    own = ep > 1 or etp != tp  # experts with their own layout; otherwise they stay in the dense accounting
    layer -= routed if own else 0.0
    common = dict(batch=batch, seq=seq_len, act_bytes=rec.act_bytes, recompute=recompute,
                  attention=attention, dropout=dropout, tp=tp, sequence_parallel=parallel.sequence_parallel)
    # ZeRO-3/FSDP unshards one block at a time (and prefetches the next): the two largest blocks' TP shards.
    gathered = (tables.gathered(spec, tp, etp * ep if own else None, rec.weight_bytes)
                if parallel.zero == 3 and parallel.dp > 1 else 0.0)
    stages = []  # (stage, params, activations, head + final norm params, untied embedding params, expert params)
    tied = spec.lm_head and spec.tie_embeddings  # the head's gradient is the token table's, made first
    late = (emb - (comps.get("embedding/tokens", 0) if tied else 0)) / tp
    for name, layers, flight, has_head in pipeline_ranks(spec, parallel, stage_layers, micro_batches):
        blocks = len(layers) * (layer / tp + norms)
        experts = len(layers) * routed / (etp * ep) if own else 0.0
        if pp == 1:  # first stage: embedding + micro-batches in flight; last: head, logits
            params = emb / tp + blocks + final + (head / tp if not spec.tie_embeddings else 0)
            head_p, late_p = head / tp + final, late
        elif name == "first":
            params, head_p, late_p = emb / tp + blocks, 0.0, emb / tp
        elif has_head:
            params, head_p, late_p = blocks + final + head / tp, head / tp + final, 0.0
        else:
            params, head_p, late_p = blocks, 0.0, 0.0
        acts = tables.activations(spec, layers, flight, has_head, **common)
        stages.append((name, params, acts, head_p, late_p, experts, len(layers)))
    if rec.fp8_saved_inputs:  # Transformer Engine saves each linear's input as its FP8 (MXFP8, NVFP4) cast
        stages = [(name, params, _fp8_inputs(acts, rec.act_bytes, rec.saved_input_bytes), *rest)
                  for name, params, acts, *rest in stages]
    biggest = largest_tensor(spec) / tp
    estimates = [MemoryEstimate(spec=spec, recipe=rec, optimizer=opt, parallel=parallel, batch=batch,
                                seq_len=seq_len, recompute=recompute, attention=attention, params_on_gpu=params,
                                activations=acts, stage=name, zero3_gathered=gathered,
                                optimizer_impl=optimizer_impl, largest_tensor=biggest,
                                expert_params_on_gpu=experts, head_params_on_gpu=head_params,
                                late_params_on_gpu=late_params, stage_layers=count)
                 for name, params, acts, head_params, late_params, experts, count in stages]
    return max(estimates, key=lambda e: e.phase_peak())


def smallest_fit(spec: ModelSpec, parallel: Parallel, capacity: float, **settings) -> dict:
    """What would make a training setup fit in `capacity` bytes per GPU: the smallest ZeRO stage at
    this GPU count, else the smallest GPU count (a power-of-two multiple of tp x pp) under ZeRO-3.
    `settings` are training_memory's (batch, seq_len, recipe, ...). Returns {"zero", "n_gpus", "text"}."""
    def estimate(zero: int, n_gpus: int) -> MemoryEstimate:
        trial = replace(parallel, zero=zero, dp=n_gpus // (parallel.tp * parallel.cp * parallel.pp))
        return training_memory(spec, parallel=trial, **settings)

    for zero in range(parallel.zero + 1, 4):
        if parallel.dp > 1 and estimate(zero, parallel.n_gpus).peak <= capacity:
            return {"zero": zero, "n_gpus": parallel.n_gpus,
                    "text": f"to fit: ZeRO-{zero} on these {parallel.n_gpus:,} GPUs is the smallest stage that does"}
    n_gpus = parallel.n_gpus
    while n_gpus * 2 <= MAX_GPUS:
        n_gpus *= 2
        est = estimate(3, n_gpus)
        if est.peak <= capacity:
            return {"zero": 3, "n_gpus": n_gpus,
                    "text": f"to fit: ZeRO-3 over {n_gpus:,} GPUs (dp {est.dp:,}) is the smallest power-of-two "
                            f"count that does"}
        if est.activations.total > capacity:
            break  # activations are per GPU whatever the data parallelism: more GPUs cannot help
    return {"zero": None, "n_gpus": None,
            "text": "to fit: no ZeRO stage or GPU count does at this micro-batch and sequence length; the "
                    "activations alone exceed the device: use --recompute full, --tp, or a smaller "
                    "--micro-batch/--seq-len"}


def _fp8_inputs(acts: ActivationEstimate, act_bytes: float, saved_bytes: float = 1.0) -> ActivationEstimate:
    per_layer = {k: v / act_bytes * saved_bytes if k in FP8_SAVED else v for k, v in acts.per_layer.items()}
    blocks = sum(acts.per_layer.values()) - acts.head_saved
    share = (sum(per_layer.values()) - acts.head_saved) / blocks if blocks else 1.0  # a block's own tensors shrink
    return replace(acts, per_layer=per_layer, own_layer=acts.own_layer * share)
