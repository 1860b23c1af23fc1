"""Weights as a checkpoint ships them: a config's ``quantization_config`` read into bytes per module.

Every linear of the model is enumerated layer by layer (``modules``) with a Hugging Face-style name (so the skip
lists of a config, ``modules_to_not_convert``, ``ignore``, ``exclude_modules``, ``llm_int8_skip_modules``, match it
as the libraries match it) and its shape; a ``Format`` says how one quantized linear of d_in inputs and d_out outputs
is stored; ``Quantization`` says which modules a method quantizes (the rest stays in the checkpoint's dtype:
embeddings, norms, biases, routers, whatever the config skips). Bytes as stored, per format (n = d_in·d_out, g the
group size; each written out again beside its arithmetic below):

- mxfp4 (gpt-oss; transformers integrations/mxfp4.py, ``*_blocks`` uint8 [E, out, in/32, 16] + ``*_scales`` uint8
  E8M0 [E, out, in/32]; only the MoE experts, ``replace_with_mxfp4_linear``): n/2 + n/32.
- nvfp4 (ModelOpt ``quant_algo: NVFP4``; compressed-tensors ``nvfp4-pack-quantized``): packed uint8 n/2 + fp8-e4m3
  scale per 16 (n/16) + two fp32 global scales (8 B).
- fp8 (``quant_method: fp8``; transformers FineGrainedFP8Config / integrations/finegrained_fp8.py FP8Linear):
  block-wise ``weight_block_size`` [bn, bk]: n + 4·ceil(d_out/bn)·ceil(d_in/bk) (``weight_scale_inv`` fp32);
  without a block size per-tensor n + 4 (+4 for a static ``input_scale``).
- fbgemm_fp8: n + 4·d_out (``weight_scale`` fp32 [out, 1], integrations/fbgemm_fp8.py).
- awq (AutoAWQ GEMM; vLLM awq.py create_weights): ``qweight`` int32 [in, out·b/32] n·b/8, ``qzeros`` int32
  [in/g, out·b/32] (in/g)·out·b/8 (with ``zero_point``), ``scales`` fp16 [in/g, out] 2·(in/g)·out.
- gptq (vLLM gptq create_weights): ``qweight`` n·b/8, ``qzeros`` groups·out·b/8, ``scales`` fp16 2·groups·out,
  ``g_idx`` int32 [in] 4·in; groups = in/g (one group for g = -1).
- compressed-tensors (vLLM compressed_tensors_wNa16.py, _w8a8_fp8.py, _w4a4_nvfp4.py; the scales in the model
  dtype): pack-quantized int b-bit n·b/8 + 2·out·ceil(in/g) (+ out·ceil(in/g)·b/8 zero points when asymmetric,
  + 4·in ``weight_g_idx`` with group act-order, + 16 ``weight_shape``); float-quantized fp8 n + 2 per scale (tensor
  1, channel out, block ceil(out/bn)·ceil(in/bk)); int-quantized int8 n + 2·out.
- bitsandbytes (0.50.2, ``QuantState.as_dict(packed=True)``, what transformers serializes; held to the library in
  tests/test_quant.py): int8 ``load_in_8bit`` n + 4·out (``SCB`` fp32 per row); 4-bit nf4/fp4 ceil(n/2) +
  4·ceil(n/64) absmax + 64 quant_map + ~80 B JSON state, or with double quantisation ceil(n/2) + ceil(n/64) +
  4·ceil(ceil(n/64)/256) + 1024 + 64 + ~170 B JSON; routers that are nn.Linear are quantized, the LM head skipped.

Which modules: transformers' quantizers replace nn.Linear modules only (embeddings never), and skip the output
embedding (quantizers/base.py get_keys_to_not_convert) for every method but GPTQ ``lm_head: true`` and a
compressed-tensors or ModelOpt export that does not ignore it; MoE routers stay in the model dtype (vLLM builds them
``ReplicatedLinear(..., quant_config=None)``; DeepSeek's router is no nn.Linear) except under bitsandbytes.
A quant_method llmcalc does not know is refused in one line naming it (``--weight-dtype`` sizes it instead).

The block itself is read, and a malformed one refused, where the config is read (``spec/quantization.py``:
``Format``, ``Quantization``, ``parse_quantization``, what each format allows); this module sizes what it read.
"""

from __future__ import annotations

import functools

from ..dtypes import canonical_dtype, dtype_bytes
from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from ..spec.quantization import NVFP4, Quantization, UnsizedFormat, parse_quantization
from .linears import attention_linears, ffn_linears, mixer_linears
from .params import count_params

# Bytes per weight of a block matmul when --weight-dtype is typed (the old single-dtype sizing, kept as the
# override): int4 is GPTQ/AWQ's layout at group 128 (0.5 + (2 B fp16 scale + 0.5 B zero point) / 128); mxfp4 one
# E8M0 scale per 32 (0.5 + 1/32); nvfp4 one fp8 scale per 16 (0.5 + 1/16); fp8/int8 scales under 0.1 % not counted.
TYPED_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.5 / 128,
               "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
WEIGHT_DTYPES = tuple(TYPED_BYTES)
TYPED_NOTES = {
    "int4": "int4 weights with group-wise scales: groups of 128 weights share an fp16 scale (2 B) and a 4-bit zero "
            "point (0.5 B), 0.519531 B per weight (GPTQ/AWQ layout)",
    "int8": "int8 weights (W8A8/W8A16): per-output-channel scales, under 0.1 % of the weights, not counted",
    "fp8": "fp8 (e4m3) weights: per-tensor or per-channel scales, under 0.1 % of the weights, not counted",
    "mxfp4": "mxfp4 weights: two e2m1 values a byte and one e8m0 scale per 32 (OCP MX), 0.53125 B per weight",
    "nvfp4": "nvfp4 weights: two e2m1 values a byte and one fp8 scale per 16 (NVIDIA NVFP4), 0.5625 B per weight",
}
SHIPPED_NAMES = WEIGHT_DTYPES + ("nf4", "int2", "int3")  # what weight_format names a shipped format


@dataclass(frozen=True)
class Module:
    """One weight matrix (or `count` identical ones: a layer's routed experts) of the model as the checkpoint names
    it: `name` (and `aliases`, the names other families give the same module) for skip lists, `key` the parameter
    breakdown's component it belongs to (params.py), `kind` linear / expert / router / embedding / head."""

    name: str
    key: str
    d_in: int
    d_out: int
    count: int = 1
    kind: str = "linear"
    aliases: tuple[str, ...] = ()

    @property
    def params(self) -> int:
        return self.count * self.d_in * self.d_out

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


_ATTN_NAMES = {"kv_a_proj": "kv_a_proj_with_mqa"}  # DeepSeek's checkpoint name of MLA's KV down-projection
_MIXER_ALIASES = ("mixer", "mamba", "linear_attn", "conv")  # Nemotron-H/Bamba, Jamba, Qwen3-Next, LFM2


def _layer_modules(spec: ModelSpec, i: int, layer: str, stack: str = "", cross: bool = False) -> list[Module]:
    """The weight matrices of decoder layer `i` (HF name prefix `layer`, component prefix `stack`)."""

    out: list[Module] = []
    mixers, ffn = spec.layer_parts(i)
    for kind in mixers:
        if kind == "attention":
            for key, _, d_in, d_out in attention_linears(spec, f"{stack}attention"):
                proj = key.split("/")[1]
                out.append(Module(f"{layer}.self_attn.{_ATTN_NAMES.get(proj, proj)}", key, d_in, d_out))
        elif kind != "shared_block":
            for key, _, d_in, d_out in mixer_linears(spec, kind):
                proj = key.split("/")[1]
                out.append(Module(f"{layer}.mixer.{proj}", key, d_in, d_out,
                                  aliases=tuple(f"{layer}.{a}.{proj}" for a in _MIXER_ALIASES[1:])))
    if cross:
        for key, _, d_in, d_out in attention_linears(spec, f"{stack}cross_attention", cross=True):
            out.append(Module(f"{layer}.cross_attn.{key.split('/')[1]}", key, d_in, d_out))
    if ffn == "moe":
        E = spec.n_experts
        out.append(Module(f"{layer}.mlp.gate", f"{stack}moe/router", spec.d_model, E, kind="router",
                          aliases=(f"{layer}.mlp.router", f"{layer}.block_sparse_moe.gate")))
        for key, _, d_in, d_out in ffn_linears(spec, "x", spec.d_ff_expert, spec.expert_d_in):
            proj = key.split("/")[1]
            out.append(Module(f"{layer}.mlp.experts.{proj}", f"{stack}moe/experts", d_in, d_out, count=E,
                              kind="expert", aliases=(f"{layer}.block_sparse_moe.experts.{proj}",)))
        if spec.n_shared_experts:
            for key, _, d_in, d_out in ffn_linears(spec, "x", spec.d_ff_shared):
                proj = key.split("/")[1]
                out.append(Module(f"{layer}.mlp.shared_experts.{proj}", f"{stack}moe/shared_experts", d_in, d_out,
                                  aliases=(f"{layer}.mlp.shared_expert.{proj}",)))
    elif ffn == "mlp":
        for key, _, d_in, d_out in ffn_linears(spec, f"{stack}mlp", spec.d_ff):
            out.append(Module(f"{layer}.mlp.{key.split('/')[1]}", key, d_in, d_out))
    return out


@functools.lru_cache(maxsize=64)
def modules(spec: ModelSpec) -> list[Module]:
    """Every weight matrix of the model transformers builds, layer by layer, embeddings and LM head included."""
    E = spec.d_embed or spec.d_model
    out = [Module("model.embed_tokens", "embedding/tokens", spec.vocab_size, E, kind="embedding")]
    if spec.architecture == "encoder-decoder":
        stacks = [("encoder.", "model.encoder.layers", spec.n_layers, False),
                  ("decoder.", "model.decoder.layers", spec.n_decoder_layers, True)]
    else:
        stacks = [("", "model.layers", spec.n_layers, False)]
    for stack, prefix, n, cross in stacks:
        for i in range(n):
            out += _layer_modules(spec, i, f"{prefix}.{i}", stack, cross)
    if spec.lm_head and not spec.tie_embeddings:
        out.append(Module("lm_head", "head/lm_head", E, spec.vocab_size, kind="head"))
    return out


def mtp_modules(spec: ModelSpec) -> list[Module]:
    """The multi-token-prediction layers a checkpoint stores beyond transformers' model (``n_mtp_layers``),
    DeepSeek-V3's layout (modeling of its inference/model.py, checkpoint keys model.layers.61.*): a decoder layer
    like the last one, eh_proj (2D -> D) and, in DeepSeek's checkpoints, its own embed_tokens and shared_head.head
    copies (DeepSeek-V3 README: "671B main model weights and 14B MTP module weights")."""
    out: list[Module] = []
    L, D = spec.n_layers, spec.d_model
    for j in range(spec.n_mtp_layers):
        layer = f"model.layers.{L + j}"
        out += [Module(m.name.replace(f"model.layers.{L - 1}.", f"{layer}."), "mtp/" + m.key.split("/")[-1], m.d_in,
                       m.d_out, count=m.count, kind=m.kind, aliases=m.aliases)
                for m in _layer_modules(spec, L - 1, f"model.layers.{L - 1}")]
        out.append(Module(f"{layer}.eh_proj", "mtp/eh_proj", 2 * D, D))
        if spec.model_type in ("deepseek_v3", "kimi_k2"):
            out += [Module(f"{layer}.embed_tokens", "mtp/embed_tokens", spec.vocab_size, D, kind="embedding"),
                    Module(f"{layer}.shared_head.head", "mtp/head", D, spec.vocab_size, kind="head")]
    return out


def _mtp_other_params(spec: ModelSpec) -> int:
    """Parameters of the MTP layers besides their matrices: the layer's norms and biases as in the last layer, and
    enorm, hnorm and shared_head.norm (D each)."""
    if not spec.n_mtp_layers:
        return 0
    one = count_params(spec.with_layers(1, moe_layers=None, n_dense_layers=0)).components  # layer 0 as MoE
    matrices = sum(m.params for m in _layer_modules(spec.with_layers(1, moe_layers=None, n_dense_layers=0), 0, "x"))
    layer = sum(v for k, v in one.items() if not k.startswith(("embedding", "head", "norm/final"))) - matrices
    return spec.n_mtp_layers * (layer + 3 * spec.d_model)


# --- the weights of a model in one format -----------------------------------------------------------------


def stored_dtype(spec: ModelSpec) -> str:
    """The dtype of the checkpoint's unquantized tensors: its torch_dtype (bf16 when the config gives none)."""
    try:
        return canonical_dtype(spec.checkpoint_dtype or "bf16")
    except LlmcalcError:
        return "bf16"


@dataclass(frozen=True)
class WeightFormat:
    """How a model's weights are stored: as its checkpoint ships them (`quant` from its quantization_config,
    the rest at `base`), or at a --weight-dtype the user typed (`typed`)."""

    name: str  # what the JSON's weight_dtype says: the typed dtype, or the shipped format (mxfp4, fp8-block, bf16)
    base: str  # dtype of what is not quantized
    typed: bool = False
    quant: Quantization | None = None

    def module_bytes(self, m: Module) -> float:
        if self.typed:
            q = TYPED_BYTES[self.name]
            # every block linear at the typed dtype, a state-space mixer's too (its in/x/dt/out projections are
            # nn.Linear, quantized as any other); what stays 16-bit is what notes() says stays 16-bit
            return m.params * (q if m.kind in ("linear", "expert") else dtype_bytes(self.base))
        if self.quant is not None and self.quant.quantizes(m):
            return m.count * self.quant.format.linear_bytes(m.d_in, m.d_out)
        return m.params * dtype_bytes(self.base)

    def component_bytes(self, spec: ModelSpec) -> dict[str, float]:
        """Bytes per parameter-breakdown key (params.py), whole model as transformers builds it: each key's
        matrices in their format, the rest of its parameters (biases, norms, sinks) at the base dtype."""
        matrices: dict[str, float] = {}
        counted: dict[str, int] = {}
        for m in modules(spec):
            matrices[m.key] = matrices.get(m.key, 0.0) + self.module_bytes(m)
            counted[m.key] = counted.get(m.key, 0) + m.params
        base = dtype_bytes(self.base)
        return {key: matrices.get(key, 0.0) + (n - counted.get(key, 0)) * base
                for key, n in count_params(spec).components.items()}

    def mtp_bytes(self, spec: ModelSpec) -> float:
        """The MTP layers the checkpoint stores beyond transformers' model (never served without a draft)."""
        return (sum(self.module_bytes(m) for m in mtp_modules(spec))
                + _mtp_other_params(spec) * dtype_bytes(self.base))

    def describe(self) -> str:
        if self.typed:
            return f"{self.name} as typed (--weight-dtype)"
        if self.quant is None:
            return f"{self.name} (the checkpoint's dtype)"
        label = self.quant.label
        return (label if label.startswith(self.quant.method) else f"{label} ({self.quant.method})") + \
            f", the rest {self.base}"

    def notes(self) -> list[str]:
        if self.typed:
            line = TYPED_NOTES.get(self.name, f"{self.name} weights")
            return [line + "; embeddings, LM head, norms and router stay 16-bit"]
        if self.quant is None:
            return []
        q = self.quant
        fmt = q.format
        where = ("only the MoE experts (transformers' mxfp4 quantizer converts GptOssExperts)" if q.experts_only else
                 "every block linear" + ("" if q.quantize_router else " but the router")
                 + (" and the LM head" if q.quantize_head else ""))
        per = fmt.bytes_per_weight()
        line = (f"weights as the checkpoint ships them (quantization_config {q.method}): {fmt.label}, "
                f"{per:.6f} B per weight at 4096 x 4096 ({fmt.source}), on {where}")
        if q.skip:
            line += f"; left at {self.base}: {', '.join(q.skip[:6])}{' ...' if len(q.skip) > 6 else ''}"
        return [line + f"; embeddings and norms at {self.base}; --weight-dtype overrides"]


def weight_format(spec: ModelSpec, weight_dtype: str | None = None) -> WeightFormat:
    """The weights of `spec` as its checkpoint ships them, or at `weight_dtype` when one is typed."""
    return format_of(spec.quantization_config, stored_dtype(spec), weight_dtype)


def format_of(qc: dict | None, base: str, weight_dtype: str | None = None) -> WeightFormat:
    """``weight_format`` from a config's quantization_config and the dtype of its unquantized tensors."""
    served_base = base if base in ("bf16", "fp16") else "bf16"  # vLLM serves an fp32 checkpoint in 16 bits
    if weight_dtype is not None:
        name = str(weight_dtype).lower()
        if name not in TYPED_BYTES:
            raise LlmcalcError(f"unknown weight dtype {weight_dtype!r}; use one of {', '.join(WEIGHT_DTYPES)}")
        return WeightFormat(name, name if name in ("fp32", "bf16", "fp16") else "bf16", typed=True)
    if qc is None:
        return WeightFormat(served_base, served_base)
    quant = parse_quantization(qc)
    short = {"mxfp4": "mxfp4", "fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "nvfp4" if quant.format is NVFP4 else
             "fp8", "bitsandbytes": "nf4" if quant.format.per == "bnb4" else "int8"}.get(quant.method)
    if short is None:
        short = "nvfp4" if quant.format is NVFP4 else "fp8" if quant.format.bits == 8 and "float" in quant.label \
            else f"int{int(quant.format.bits)}"
    return WeightFormat(short, served_base, quant=quant)


@functools.lru_cache(maxsize=64)
def unquantized_linear_flops(spec: ModelSpec, fmt: WeightFormat) -> tuple[int, int]:
    """Forward FLOPs per token, 2·d_in·d_out per matrix, of the block linears a checkpoint quantized per module leaves
    in its 16-bit dtype (its quantization_config's skip list: fbgemm_fp8 and fp8 ``modules_to_not_convert``,
    compressed-tensors ``ignore``, ModelOpt ``exclude_modules``; ``Quantization.quantizes``), as (attention's,
    the rest's): Meta's FP8 Llama 3.1 405B keeps every self-attention projection and layers 0 and 125 whole in BF16
    (its config's modules_to_not_convert; Llama 3 paper, section 6.2). The engines run such a module's GEMM
    unquantized (vLLM: ``is_layer_skipped`` -> UnquantizedLinearMethod, a BF16 GEMM). (0, 0) for weights as typed
    (``--weight-dtype``: every block linear at that dtype) or unquantized; the LM head, routers and embeddings are
    not counted (every format keeps them 16-bit), nor the routed experts."""
    if fmt.typed or fmt.quant is None:
        return 0, 0
    attention = other = 0
    for m in modules(spec):
        if m.kind == "linear" and not fmt.quant.quantizes(m):
            flops = 2 * m.params
            if m.key.split("/")[0].endswith("attention"):
                attention += flops
            else:
                other += flops
    return attention, other


def checkpoint_bytes(spec: ModelSpec, fmt: WeightFormat | None = None) -> float:
    """What the download holds (safetensors total_size: tensor bytes, headers excluded): the model as stored, at the
    checkpoint's own dtype for what is not quantized, plus the MTP layers transformers does not build."""
    fmt = fmt or weight_format(spec)
    stored = WeightFormat(fmt.name, stored_dtype(spec), fmt.typed, fmt.quant) if not fmt.typed else fmt
    return sum(stored.component_bytes(spec).values()) + stored.mtp_bytes(spec)


def shipped_bytes(spec: ModelSpec) -> float | None:
    """``checkpoint_bytes`` of the checkpoint as shipped, None when its format is one llmcalc does not know."""
    try:
        return checkpoint_bytes(spec)
    except UnsizedFormat:
        return None
