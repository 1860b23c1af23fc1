"""LoRA / QLoRA fine-tuning: adapter parameters, the frozen base in its stored dtype, FLOPs and memory.

Conventions (printed with every result that uses them):
- LoRA (Hu et al. 2021, arXiv 2106.09685): a targeted linear W (d_in -> d_out) gains A (r x d_in) and
  B (d_out x r), r·(d_in + d_out) trainable parameters, no bias (peft's ``bias="none"``), in every block.
  Targets are peft module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
  (short forms q, k, v, o, gate, up, down). ``all-linear`` (the default, as the QLoRA paper adapts every
  linear layer, Dettmers et al. 2023 sec. 4) is every linear of every block, never the LM head
  (peft's INCLUDE_LINEAR_LAYERS_SHORTHAND excludes the output layer).
- Encoder-decoder models: the targets apply in both stacks and to cross-attention.
- MLA (DeepSeek-V2/V3): q is q_proj (or q_a_proj and q_b_proj with a Q LoRA rank); k and v both name the
  shared latent projections kv_a_proj_with_mqa and kv_b_proj (adapted once); o is o_proj.
- MoE: gate/up/down adapt every routed expert, one adapter pair each (peft on per-expert nn.Linear
  modules), and the shared-expert MLP, one module of width d_ff_shared as transformers builds it
  (DeepSeek: n_shared_experts x moe_intermediate_size wide); the router is never adapted. Per token,
  only the top-k routed experts' adapters do work.
- Hybrid and state-space layers (``layer_types``): each layer has the linears of its own mixers and FFN.
  The mixers' projections carry their transformers names (Mamba: in_proj, x_proj, dt_proj, out_proj;
  Mamba-2 and LFM2's short conv: in_proj, out_proj; Gated DeltaNet: in_proj_qkvz, in_proj_ba, out_proj);
  ``all-linear`` adapts them, as peft's all-linear adapts every nn.Linear but the output layer, and a
  list of q,k,v,o,gate,up,down does not. The depthwise conv1d is not a linear (never adapted), nor is the
  Mamba/Mamba-2 mixer's out_proj of the model types peft refuses it for (``linears.PEFT_NO_OUT_PROJ``: the fused
  kernels read out_proj.weight directly, so an adapter there would never run). Zamba2's shared blocks (one
  module used by many layers, with adapters of its own) are not modelled.
- Models that store a fused QKV or gate/up matrix (GPT-2 c_attn, Phi-3 qkv_proj/gate_up_proj) get one
  adapter per fused matrix in peft; llmcalc counts separate projections (Llama layout) for them.
- Trainable adapters are fp32: peft's get_peft_model(autocast_adapter_dtype=True) upcasts bf16/fp16
  adapter weights to fp32 (peft >= 0.12, tuners_utils.cast_adapter_dtype); their gradients are fp32 and
  AdamW keeps 2 fp32 states: 16 bytes per adapter parameter, no separate master copy.
- FLOPs per token: forward 2·N for every weight (frozen and adapter); backward 2·N_frozen (activation
  gradients only: a frozen weight needs no weight gradient) + 4·N_adapter (both gradients): training
  = 4·N_frozen + 6·N_adapter per token, plus the attention S² terms at 3x as in full training (and the
  SSM scan, whose multiplies are also of activations by activations, with no weight).
"""

from __future__ import annotations

import math
from dataclasses import field

from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from .activations import ActivationEstimate
from .flops import StepFlops, StepTotals
from .linears import Shape, attention_linears, ffn_linears, mixer_linears
from .memory import Optimizer, PhasedPeak

METHODS = ("lora", "qlora")
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SHORT = {t.split("_")[0]: t for t in TARGETS}
ADAPTER_BYTES = 4.0  # fp32 adapters (peft autocast_adapter_dtype=True)

# Frozen-base storage: bytes per weight of a quantised linear, and per-tensor constants. Read from
# bitsandbytes-foundation/bitsandbytes@95f9af309d4d5793847169c39288dcd3fcbdf564:
# - nn/modules.py Params4bit (L219-231): blocksize None -> 64, compress_statistics=True (double quantisation,
#   QLoRA's bnb_4bit_use_double_quant);
# - _ops.py quantize_4bit (L232-235): out uint8 of (n + 1) // 2 bytes (two 4-bit codes a byte), absmax fp32 per
#   64-block;
# - functional.py quantize_4bit (L938-940): double quantisation shifts the absmax by their mean (offset, one fp32)
#   and quantises them with quantize_blockwise(..., blocksize=256): uint8 per absmax plus one fp32 absmax per 256
#   (backends/cuda/ops.py L310-311), its state keeping its own copy of the 256-entry fp32 dynamic code
#   (functional.py L670, create_dynamic_map L348); the 4-bit state keeps the 16-entry fp32 nf4/fp4 code
#   (get_4bit_type L854: torch.tensor of Python floats).
# So per linear of n weights: ceil(n/2) + ceil(n/64) + 4·ceil(n/64/256) + 4 + 1024 + 64 bytes, 0.5 + 1/64 +
# 4/(64·256) = 0.515869 bytes per weight asymptotically (without double quantisation 0.5 + 4/64).
# LLM.int8 (nn/modules.py Int8Params): int8 weights CB plus one fp32 scale SCB per output row.
BASE_DTYPES = ("bf16", "fp16", "fp32", "int8", "nf4", "fp4")
NF4_BLOCK, NF4_BLOCK2 = 64, 256


def quantised_bytes(d_in: int, d_out: int, dtype: str, double_quant: bool = True) -> float:
    """Bytes one frozen d_out x d_in weight occupies in `dtype`, quantisation state included."""
    n = d_in * d_out
    if dtype in ("bf16", "fp16"):
        return 2.0 * n
    if dtype == "fp32":
        return 4.0 * n
    if dtype == "int8":
        return n + 4.0 * d_out  # CB int8 + SCB fp32 per output row
    blocks = math.ceil(n / NF4_BLOCK)
    packed = math.ceil(n / 2)  # two 4-bit values per uint8
    code = 16 * 4  # the nf4/fp4 code table, fp32
    if not double_quant:
        return packed + 4.0 * blocks + code
    blocks2 = math.ceil(blocks / NF4_BLOCK2)
    return packed + blocks + 4.0 * blocks2 + 4 + 256 * 4 + code  # uint8 absmax, fp32 absmax2, offset, codes


def nf4_bytes_per_param(double_quant: bool = True) -> float:
    """The asymptotic bytes per weight: 0.5 + 1/64 + 4/(64·256) (double quant) or 0.5 + 4/64."""
    return 0.5 + (1 / NF4_BLOCK + 4 / (NF4_BLOCK * NF4_BLOCK2) if double_quant else 4 / NF4_BLOCK)


@dataclass(frozen=True)
class LoraConfig:
    method: str = "lora"
    rank: int = 16
    targets: tuple[str, ...] = TARGETS
    base_dtype: str = "bf16"
    double_quant: bool = True
    stored_base_bytes: float | None = None  # the frozen base as a pre-quantized checkpoint ships it (quant.py)
    stored_label: str = ""

    @property
    def target_label(self) -> str:
        return "all-linear" if set(self.targets) == set(TARGETS) else ",".join(self.targets)


def parse_targets(text: str) -> tuple[str, ...]:
    """'all-linear' or a comma list of q,k,v,o,gate,up,down (or their *_proj names)."""
    if text.strip().lower() in ("all-linear", "all"):
        return TARGETS
    out = []
    for raw in filter(None, (part.strip() for part in text.split(","))):
        name = raw.lower()
        name = SHORT.get(name, name)
        if name not in TARGETS:
            raise LlmcalcError(f"unknown LoRA target {raw.strip()!r}; use all-linear or a comma list of "
                               f"q,k,v,o,gate,up,down")
        if name not in out:
            out.append(name)
    if not out:
        raise LlmcalcError("--lora-targets is empty; use all-linear or e.g. q,v")
    return tuple(t for t in TARGETS if t in out)


def lora_config(method: str, rank: int, targets: str | tuple[str, ...] = "all-linear",
                base_dtype: str | None = None, double_quant: bool = True) -> LoraConfig:
    if method not in METHODS:
        raise LlmcalcError(f"--finetune must be one of {', '.join(METHODS)}; got {method!r}")
    if not isinstance(rank, int) or rank < 1:
        raise LlmcalcError(f"--lora-rank must be a whole number >= 1, got {rank!r}")
    base = base_dtype or ("nf4" if method == "qlora" else "bf16")
    if base not in BASE_DTYPES:
        raise LlmcalcError(f"--base-dtype must be one of {', '.join(BASE_DTYPES)}; got {base!r}")
    if method == "qlora" and base not in ("nf4", "fp4", "int8"):
        raise LlmcalcError(f"QLoRA quantises the base: --base-dtype nf4, fp4 or int8, not {base}; "
                           f"for a 16-bit base use --finetune lora")
    return LoraConfig(method, rank, parse_targets(targets) if isinstance(targets, str) else tuple(targets), base,
                      double_quant)


@dataclass(frozen=True)
class Linear:
    """One kind of linear in the blocks: its component key, shape, how many in the model, and the
    fraction of them one token passes through (top-k / E for routed experts, else 1)."""

    key: str
    target: str | None  # the peft target that adapts it (None: never adapted, e.g. the router)
    d_in: int
    d_out: int
    count: int
    active: float = 1.0


MIXER_TARGETS = ("in_proj", "x_proj", "dt_proj", "out_proj", "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z",
                 "in_proj_b", "in_proj_a", "f_proj", "b_proj", "g_proj", "indexer", "compressor",
                 "per_layer", "router")  # the linears no q,k,v,o,gate,up,down target names: all-linear only


def block_linears(spec: ModelSpec) -> list[Linear]:
    """Every linear weight inside the blocks, grouped by kind, with its count over all layers (and Gemma 4's
    per-layer-input projection, the one nn.Linear outside them but the LM head)."""
    found: dict[Shape, int] = {}
    active: dict[Shape, float] = {}

    def add(items: list[Shape], times: int = 1, frac: float = 1.0) -> None:
        for item in items:
            found[item] = found.get(item, 0) + times
            active[item] = frac

    stacks = ([("encoder.", spec.n_layers, False), ("decoder.", spec.n_decoder_layers, True)]
              if spec.architecture == "encoder-decoder" else [("", spec.n_layers, False)])
    for stack, n_layers, cross in stacks:
        for i in range(n_layers):
            mixers, ffn = spec.layer_parts(i)
            for kind in mixers:
                add(attention_linears(spec, f"{stack}attention", layer=i) if kind == "attention"
                    else mixer_linears(spec, kind))
            if cross:
                add(attention_linears(spec, f"{stack}cross_attention", cross=True))
            if ffn is None:
                continue
            if ffn == "moe":
                E, k = spec.n_experts, spec.n_experts_per_token
                # the router is no nn.Linear but in Gemma 4 (Gemma4TextRouter.proj): all-linear adapts that one
                add([(f"{stack}moe/router", "router" if spec.router_scales else None, spec.d_model, E)])
                add([(k_, t, a, b) for k_, t, a, b in ffn_linears(spec, f"{stack}moe/experts", spec.d_ff_expert,
                                                                        spec.expert_d_in)],
                    E, k / E)
                if spec.n_shared_experts:  # one MLP of d_ff_shared (DeepSeek: n_shared·d_ff_expert), as params
                    add(ffn_linears(spec, f"{stack}moe/shared_experts", spec.d_ff_shared))
            if ffn == "mlp" or (ffn == "moe" and spec.moe_dense_parallel):  # Gemma 4: dense beside the experts
                add(ffn_linears(spec, f"{stack}mlp", spec.layer_d_ff(i)))
            if spec.per_layer_embed_dim:  # Gemma 4's per_layer_input_gate and per_layer_projection
                P = spec.per_layer_embed_dim
                add([("per_layer/gate", "per_layer", spec.d_model, P), ("per_layer/projection", "per_layer", P,
                                                                        spec.d_model)])
    if spec.per_layer_embed_dim:  # Gemma4TextModel.per_layer_model_projection, D -> L·P: the one nn.Linear outside
        # the blocks that all-linear adapts (modeling_gemma4.py Gemma4TextModel.__init__)
        add([("embedding/per_layer_projection", "per_layer", spec.d_model, spec.n_layers * spec.per_layer_embed_dim)])
    return [Linear(k, t, a, b, count=n, active=active[(k, t, a, b)]) for (k, t, a, b), n in found.items()]


def _adapted(lin: Linear, cfg: LoraConfig) -> bool:
    if lin.target == "kv":  # MLA: k or v names the shared latent projections
        return "k_proj" in cfg.targets or "v_proj" in cfg.targets
    if lin.target in MIXER_TARGETS:  # a state-space mixer's projection: every linear means these too
        return cfg.target_label == "all-linear"
    return lin.target in cfg.targets


@dataclass(frozen=True)
class Finetune:
    """A LoRA/QLoRA set-up on a model: adapters by component and the frozen base's storage."""

    spec: ModelSpec
    config: LoraConfig
    adapted: tuple[Linear, ...]
    linears: tuple[Linear, ...]
    total_params: int  # the base model's parameters (all frozen)

    @property
    def components(self) -> dict[str, int]:
        """Trainable adapter parameters per component key (summed over layers and experts)."""
        out: dict[str, int] = {}
        for lin in self.adapted:
            out[lin.key] = out.get(lin.key, 0) + lin.count * self.config.rank * (lin.d_in + lin.d_out)
        return out

    @property
    def trainable(self) -> int:
        return sum(self.components.values())

    @property
    def frozen(self) -> int:
        return self.total_params

    @property
    def trainable_share(self) -> float:
        """trainable / (trainable + frozen): the share peft's print_trainable_parameters reports."""
        return self.trainable / (self.trainable + self.frozen)

    @property
    def adapter_active_per_token(self) -> float:
        """Adapter parameters one token's forward pass uses (MoE: its top-k experts' adapters)."""
        r = self.config.rank
        return sum(lin.count * lin.active * r * (lin.d_in + lin.d_out) for lin in self.adapted)

    @property
    def adapter_width_per_token(self) -> float:
        """Sum of r over the adapted linears one token passes: elements of the r-wide A outputs saved."""
        return sum(lin.count * lin.active * self.config.rank for lin in self.adapted)

    @property
    def quantised_params(self) -> int:
        """Frozen parameters stored in the base dtype: the block linears (router included)."""
        return sum(lin.count * lin.d_in * lin.d_out for lin in self.linears)

    def base_weight_bytes(self) -> float:
        """The frozen base as stored: block linears in the base dtype (with their quantisation state),
        every other parameter (embeddings, LM head, norms, biases) in bf16 — bitsandbytes quantises
        nn.Linear modules only, and transformers' quantizer skips the LM head (llm_int8_skip_modules)."""
        if self.config.stored_base_bytes is not None:
            return self.config.stored_base_bytes
        dtype, dq = self.config.base_dtype, self.config.double_quant
        linear = sum(lin.count * quantised_bytes(lin.d_in, lin.d_out, dtype, dq) for lin in self.linears)
        rest_bytes = 4.0 if dtype == "fp32" else 2.0
        return linear + (self.total_params - self.quantised_params) * rest_bytes

    def largest_linear(self) -> int:
        return max(lin.d_in * lin.d_out for lin in self.linears)

    def notes(self) -> list[str]:
        cfg = self.config
        lines = [f"{cfg.method} rank {cfg.rank} on {cfg.target_label}: r·(d_in + d_out) trainable parameters per "
                 "adapted linear per block, no bias; the LM head, embeddings and norms are not adapted"]
        if cfg.stored_base_bytes is not None:
            lines.append(f"frozen base as the checkpoint ships it: {cfg.stored_label} (quantization_config; "
                         f"--base-dtype overrides); each matmul dequantises its weight to bf16 on the fly")
        elif cfg.base_dtype in ("nf4", "fp4"):
            lines.append(f"frozen block linears in {cfg.base_dtype} (bitsandbytes Params4bit): 4 bits per weight + "
                         + ("a uint8 absmax per 64-block, double-quantised with an fp32 absmax per 256 blocks = "
                            "0.5 + 1/64 + 4/(64·256) bytes/param" if cfg.double_quant
                            else "an fp32 absmax per 64-block = 0.5 + 4/64 bytes/param")
                         + "; embeddings, LM head and norms stay bf16 (source: bitsandbytes functional.quantize_4bit)")
        elif cfg.base_dtype == "int8":
            lines.append("frozen block linears in int8 (bitsandbytes LLM.int8 Int8Params): 1 byte per weight + an "
                         "fp32 scale per output row; embeddings, LM head and norms stay bf16")
        else:
            lines.append(f"frozen base in {cfg.base_dtype}")
        if self.spec.is_moe:
            lines.append("MoE: every routed and shared expert has its own adapters; the router is not adapted")
        if self.spec.is_mla:
            lines.append("MLA: targets k and v adapt the shared latent projections kv_a_proj and kv_b_proj")
        if self.spec.is_hybrid:
            frozen = sorted({lin.key for lin in self.linears if lin.target is None and "/out_proj" in lin.key})
            lines.append("state-space layers: all-linear adapts the mixers' projections too"
                         + (f"; not {', '.join(frozen)}, which peft refuses for {self.spec.model_type} (the fused "
                            "kernels read out_proj.weight directly)" if frozen else "")
                         + "; the depthwise conv1d is never adapted")
        return lines


def finetune(spec: ModelSpec, config: LoraConfig) -> Finetune:
    from .params import count_params

    linears = tuple(block_linears(spec))
    adapted = tuple(lin for lin in linears if _adapted(lin, config))
    if not adapted:
        raise LlmcalcError(f"no linear of {spec.name} matches --lora-targets {config.target_label}")
    return Finetune(spec, config, adapted, linears, count_params(spec).total)


@dataclass(frozen=True)
class FinetuneFlops(StepTotals):
    """FLOPs of one LoRA step: frozen ops forward 2·N, backward activation gradients only; adapters 2 + 4."""

    ft: Finetune
    step: StepFlops  # of the base model (forward ops per op)

    @property
    def tokens(self) -> int:
        return self.step.tokens

    @property
    def adapter_forward(self) -> float:
        return 2 * self.ft.adapter_active_per_token * self.tokens

    @property
    def frozen_forward(self) -> int:
        return self.step.forward

    @property
    def frozen_backward(self) -> int:
        """Activation gradients: 1x forward for weight matmuls, 2x for the attention S² matmuls and the SSM
        scan (both operands there are activations)."""
        from .flops import is_attention_core

        return sum(v * (2 if is_attention_core(k) or k.endswith("/scan") else 1) for k, v in self.step.ops.items())

    @property
    def forward(self) -> float:
        return self.frozen_forward + self.adapter_forward

    @property
    def backward(self) -> float:
        return self.frozen_backward + 2 * self.adapter_forward

    @property
    def model_flops(self) -> float:
        return self.forward + self.backward

    @property
    def recompute_flops(self) -> float:
        extra = self.step.recompute_flops
        return extra + (self.adapter_forward if self.step.recompute == "full" else 0)

    def rule(self) -> float:
        """4·N_frozen + 6·N_adapter per token (active parameters, no attention S²)."""
        from .params import count_params

        return 4 * count_params(self.ft.spec).active_per_token + 6 * self.ft.adapter_active_per_token

    def notes(self) -> list[str]:
        return ["fine-tuning FLOPs: forward 2·N for every weight; backward 2·N_frozen (activation gradients only) "
                "+ 4·N_adapter (input and weight gradients) = 4·N_frozen + 6·N_adapter per token, plus the "
                "attention S² matmuls at 3x forward; autograd also skips the input gradients of layer 0's "
                "Q/K/V when the embeddings are frozen (not subtracted)"]


@dataclass(frozen=True)
class FinetuneMemory(PhasedPeak):
    """Per-GPU memory of a LoRA/QLoRA step (data parallel: every GPU holds it all)."""

    ft: Finetune
    optimizer: Optimizer
    batch: int
    seq_len: int
    recompute: str
    attention: str
    activations: ActivationEstimate  # of the base model at act_bytes
    act_bytes: float
    unsaved: tuple[str, ...] = ()  # saved-tensor names of the base model that no trained weight needs here
    working_set: float = 0.0  # full recompute: the largest block's tensors as rebuilt under LoRA
    notes: list[str] = field(default_factory=list)

    @property
    def optimizer_bytes_per_adapter_param(self) -> float:
        """The optimizer's states of one fp32 adapter parameter (Optimizer.bytes_per_param in fp32 states)."""
        return self.optimizer.bytes_per_param(_FP32_STATES)

    @property
    def bytes_per_adapter_param(self) -> dict[str, float]:
        """fp32 adapter weight + its fp32 gradient + its optimizer states (peft autocast_adapter_dtype=True)."""
        opt = self.optimizer_bytes_per_adapter_param
        return {"adapters": ADAPTER_BYTES, "gradients": ADAPTER_BYTES, "optimizer_states": opt,
                "total": 2 * ADAPTER_BYTES + opt}

    @property
    def weight_bytes_per_frozen_param(self) -> float:
        """The stored base (its dtype, quantisation scales included) / frozen parameters."""
        return self.components()["weights"] / self.ft.frozen

    @property
    def saved(self) -> dict[str, float]:
        """The base model's saved tensors (activations.per_layer) less the inputs of frozen, unadapted linears:
        autograd saves a matmul operand only for the other operand's gradient (torch's derivatives.yaml
        codegen guards each SavedVariable with should_compute_output), and a frozen weight needs none."""
        return {k: v for k, v in self.activations.per_layer.items() if k not in self.unsaved}

    @property
    def adapter_activations(self) -> float:
        """The r-wide A(x) each adapted linear saves for B's weight gradient (at act_bytes). With full
        recomputation only the recomputed block's are alive, inside the recompute working set."""
        per_model = self.batch * self.seq_len * self.ft.adapter_width_per_token * self.act_bytes
        if self.recompute == "full":
            return per_model / self.ft.spec.total_layers
        return per_model

    @property
    def autocast_cache(self) -> float:
        """The bf16 copy of each fp32 adapter that autocast makes in forward and autograd keeps for the input
        gradient; with full recomputation the checkpointed blocks keep none, only the rebuilt block's."""
        if self.act_bytes != 2:
            return 0.0
        return 2.0 * self.ft.trainable / (self.ft.spec.total_layers if self.recompute == "full" else 1)

    def components(self) -> dict[str, float]:
        n = self.ft.trainable
        a = self.activations
        dequant = 0.0
        if self.ft.config.base_dtype in ("nf4", "fp4", "int8") or self.ft.config.stored_base_bytes is not None:
            dequant = 2.0 * self.ft.largest_linear()  # bnb dequantises one weight to bf16 per matmul
        return {
            "weights": self.ft.base_weight_bytes(),
            "adapters": n * ADAPTER_BYTES,
            "gradients": n * ADAPTER_BYTES,
            "optimizer states": n * self.optimizer.bytes_per_param(_FP32_STATES),
            "activations": sum(self.saved.values()) + (0 if self.recompute == "full" else self.adapter_activations),
            "recompute working set": self.working_set + (self.adapter_activations if self.recompute == "full" else 0),
            "logits and loss": a.logits_and_loss,
            "autocast adapter cache": self.autocast_cache,
            "dequantised weight (transient)": dequant,
        }

    def phase_components(self) -> dict[str, dict[str, float]]:
        """The components alive in each phase of the step; the peak is the largest phase sum.

        - end of forward (the loss): everything but the adapters' gradients (zero_grad(set_to_none=True) freed
          them), the recompute working set (no block is being rebuilt yet) and the dequantised weight (the
          last matmul, the LM head, is not quantised);
        - blocks' backward: after the LM head's backward has consumed and freed the logits and cross-entropy
          buffers, so without "logits and loss"; the rebuilt block (full recomputation), a dequantised weight
          per matmul, and the adapter gradients made so far (all of them: an upper bound);
        - optimizer step: the frozen base, adapters, their gradients and optimizer states.
        Holding the recompute working set and the logits together overstated the full-recompute peak of
        Llama-2-7B's shapes (4 blocks, r16 all-linear, seq 2048) by 11.7 % against the virtual profile's
        MemTracker peak."""
        c = self.components()
        not_at_loss = ("gradients", "recompute working set", "dequantised weight (transient)")
        return {"end of forward": {k: v for k, v in c.items() if k not in not_at_loss},
                "blocks' backward": {k: v for k, v in c.items() if k != "logits and loss"},
                "optimizer step": {k: c[k] for k in ("weights", "adapters", "gradients", "optimizer states")}}


class _Fp32States:
    state_bytes = 4.0


_FP32_STATES = _Fp32States()


def finetune_memory(spec: ModelSpec, config: LoraConfig, batch: int = 1, seq_len: int = 2048,
                    optimizer: str | Optimizer = "adamw", recompute: str = "none", attention: str = "flash",
                    dropout: bool = False) -> FinetuneMemory:
    """LoRA/QLoRA memory of one GPU: the frozen base, fp32 adapters with their gradients and optimizer
    states, activations in bf16 (fp32 for an fp32 base) plus the adapters' r-wide intermediates."""
    from .activations import activation_memory, layer_saved
    from .memory import OPTIMIZERS, Optimizer, lookup

    for name, value in (("batch size", batch), ("seq_len", seq_len)):
        if not isinstance(value, int) or value < 1:
            raise LlmcalcError(f"{name} must be a whole number >= 1, got {value!r}")
    opt = optimizer if isinstance(optimizer, Optimizer) else lookup(OPTIMIZERS, "optimizer", optimizer)
    ft = finetune(spec, config)
    act_bytes = 4.0 if config.base_dtype == "fp32" else 2.0
    acts = activation_memory(spec=spec, batch=batch, seq=seq_len, act_bytes=act_bytes, recompute=recompute,
                             attention=attention, dropout=dropout)
    unsaved = frozen_inputs(spec, config)
    working_set = 0.0
    if recompute == "full":
        working_set = max(sum(s.nbytes for s in layer_saved(spec, i, batch, seq_len, act_bytes=act_bytes,
                                                           attention=attention, dropout=dropout)
                              if s.name not in unsaved) for i in range(spec.n_layers))
    return FinetuneMemory(ft, opt, batch, seq_len, recompute=recompute, attention=attention, activations=acts,
                          act_bytes=act_bytes, unsaved=unsaved, working_set=working_set)


# Saved tensors (activations.layer_saved names) that are only the input of a linear, and the targets whose
# adapters need them (A's weight gradient uses the input); with none of those adapted, autograd does not save them.
LINEAR_INPUTS = {
    "attention input (norm output)": ("q_proj", "k_proj", "v_proj"),
    "q_b input (normed q latent)": ("q_proj",),
    "kv_b input (normed KV latent)": ("k_proj", "v_proj"),
    "O-projection input (heads merged)": ("o_proj",),
    "MLP input (norm output)": ("gate_proj", "up_proj"),
    "MLP down-projection input": ("down_proj",),
    "MLP activation output (fc2 input)": ("down_proj",),
    "LM-head input (final norm output)": (),  # the LM head is never adapted
}


def frozen_inputs(spec: ModelSpec, config: LoraConfig) -> tuple[str, ...]:
    """Names of the saved linear inputs that no adapter of `config` needs (MoE expert inputs are kept: the
    routed copies also serve the combine, an upper bound)."""
    needs = dict(LINEAR_INPUTS)
    if spec.parallel_residual and spec.norms_per_layer == 1:  # one norm output feeds attention and MLP
        needs["attention input (norm output)"] += ("gate_proj", "up_proj")
    return tuple(name for name, targets in needs.items() if not set(targets) & set(config.targets))
