"""Measured serving-kernel latencies as the serving step reads them, each memoized here (and only here) by a frozen
record of exactly what the table reads (each key held by a test in tests/test_serving_speed.py or
tests/test_engine_versions.py): a paged decode-attention layer (``DecodeShape``), an MLA attention block
(``MlaShape``), SGLang's MLA decode in parts, a dense layer's GEMMs (``GemmShape``), and what an FP8 KV cache does to
the engine's prefill attention kernel (``PrefillShape``).

TensorRT-LLM's dense projections come from its own measured GEMM table (issue 36): the (n, k) of a dense layer's
GEMMs on one tensor-parallel GPU, and their measured time at m rows (kernel_tables.gemm_seconds, aiconfigurator-core's
sweep inside the engine). serving_speed.StepCost.linear_seconds reads them where ``layer_gemm_shape`` finds the model
fits (engines.step_cost turns it on for engines whose tables hold GEMMs). Why: at TP 8 a GPU's GEMMs are narrow
(Llama-3.1-70B: fused QKV 1,280 x 8,192, o_proj 8,192 x 1,024) and run at 930-1,070 TFLOP/s in the table, not at the
FP8 MAMF of 1,402.6 measured on a 1024 x 9216 x 14336 GEMM (docs/serving-validation.md)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ..records import dataclass
from ..spec import ModelSpec
from . import kernel_tables
from .inference import kv_layers
from .quant import unquantized_linear_flops


@dataclass(frozen=True)
class GemmShape:
    """What the measured GEMM table reads for one layer's projections (kernel_tables.gemm_seconds): the memo's key."""

    gpu: str
    rows: float  # tokens of the step (the GEMMs' m), to 3 significant figures
    sites: tuple[tuple[int, int], ...]  # (n output, k input features) of each GEMM of the layer on one GPU
    dtype: str  # "bf16" or "fp8" (per-tensor scaled)


@functools.lru_cache(maxsize=1 << 16)
def measured_layer_gemms(shape: GemmShape) -> float:
    """One layer's projections, seconds: t = sum over its GEMMs of the measured (m x k) @ (k x n) latency
    (kernel_tables.gemm_seconds: aiconfigurator's sweep inside the engine, weights read and tiles padded as the
    kernel does); memoized here, by its shape."""
    return sum(kernel_tables.gemm_seconds(shape.gpu, shape.rows, n, k, shape.dtype) for n, k in shape.sites)


def dense_gemm_sites(spec: ModelSpec, tp: int) -> tuple[tuple[int, int], ...]:
    """The (n, k) of a dense transformer layer's GEMMs on one of `tp` GPUs, as TensorRT-LLM fuses them (its Attention
    module's fused QKV ColumnLinear, the row-parallel dense output, GatedMLP's fused gate/up ``fc`` and ``proj``):
    QKV n = (heads + 2 x max(kv_heads, tp)) x head_dim / tp (a KV head replicated on ranks past the KV heads), k = D;
    O n = D, k = heads x head_dim / tp; gate+up n = 2 x d_ff / tp (d_ff / tp ungated), k = D; down n = D,
    k = d_ff / tp."""
    d, dh, ff = spec.d_model, spec.d_head, spec.d_ff
    kv = max(spec.n_kv_heads, tp)
    up = (2 if spec.gated else 1) * ff // tp
    return (((spec.n_heads + 2 * kv) * dh // tp, d), (d, spec.n_heads * dh // tp), (up, d), (d, ff // tp))


def layer_gemm_shape(est: Any, tp: int, gpu: str, stack_flops_per_token: float) -> GemmShape | None:
    """The layer's GEMMs at one row on `gpu`'s table for the replica roofline `est` (an InferenceEstimate) at `tp`, or
    None where the table does not time the stack: a model with experts, MLA, windows or recurrent layers; weights
    other than bf16/fp16, per-tensor FP8 or NVFP4 (``nvfp4_gemms``) run as GEMMs of their own dtype; four GEMMs
    (``dense_gemm_sites``) that do not make up the stack's matmul FLOPs per token (`stack_flops_per_token`, within
    2 %)."""
    spec = est.spec
    if spec.is_moe or spec.mla is not None or spec.is_hybrid or spec.has_windows:
        return None
    fmt = est.weight_format
    dtype = "nvfp4" if nvfp4_gemms(est, gpu) else {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}.get(est.weight_dtype)
    if dtype is None or dtype != "nvfp4" and (dtype != ("fp8" if est.compute_dtype == "fp8" else "bf16") or (
            fmt is not None and fmt.quant is not None and fmt.quant.format.per == "block")):
        return None
    sites = dense_gemm_sites(spec, tp)
    flops = 2 * sum(n * k for n, k in sites) * tp * spec.n_layers
    if abs(flops / stack_flops_per_token - 1) > 0.02:
        return None
    return GemmShape(gpu=gpu, rows=1.0, sites=sites, dtype=dtype)


def nvfp4_gemms(est: Any, gpu: str) -> bool:
    """Whether every block linear of `est`'s NVFP4 weights runs the engine's measured NVFP4 GEMM on `gpu`'s table:
    TensorRT-LLM's NVFP4 linear quantizes the activations and multiplies on the FP4 tensor cores
    (tensorrt_llm/_torch/modules/linear.py NVFP4LinearMethod: "act_fp4, act_sf = torch.ops.trtllm.fp4_quantize(input,
    ..." then "torch.ops.trtllm.nvfp4_gemm(act_fp4, self.weight, ...)"), which aiconfigurator measured on Blackwell
    (its nvfp4 GEMM rows, the table's "nvfp4" section); not where the checkpoint leaves some block linears 16-bit
    (quant.unquantized_linear_flops)."""
    if est.weight_dtype != "nvfp4" or "nvfp4" not in kernel_tables.table(gpu).get("gemm", {}):
        return False
    fmt = est.weight_format
    return fmt is None or unquantized_linear_flops(est.spec, fmt) == (0, 0)


@dataclass(frozen=True)
class DecodeShape:
    """What the measured decode-attention table reads (kernel_tables.decode_attention_seconds): the memo's key."""

    gpu: str
    batch: int
    context: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_dtype: str


@functools.lru_cache(maxsize=1 << 16)
def measured_decode_layer(shape: DecodeShape) -> float:
    """One attention layer's paged decode, seconds, as the measured table gives it (memoized here, by its shape)."""
    return kernel_tables.decode_attention_seconds(shape.gpu, shape.batch, shape.context, heads=shape.heads,
                                                  kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                                                  kv_dtype=shape.kv_dtype)


@dataclass(frozen=True)
class MlaShape:
    """What the measured MLA block tables read (kernel_tables.mla_module_seconds): the memo's key."""

    gpu: str
    heads: int
    batch: float
    seq: float
    key: str
    context: bool


@functools.lru_cache(maxsize=1 << 16)
def measured_mla_layer(shape: MlaShape) -> float:
    """One MLA layer's whole attention block, seconds, as the measured table gives it (memoized here, by its shape);
    a prefill of fewer than one whole prompt (a chunk's equivalent, below) is that share of one prompt's."""
    batch = max(shape.batch, 1.0) if shape.context else shape.batch
    one = kernel_tables.mla_module_seconds(shape.gpu, shape.heads, batch, shape.seq, shape.key,
                                           context=shape.context)
    return one * min(shape.batch, 1.0) if shape.context else one


@functools.lru_cache(maxsize=1 << 16)
def measured_mla_decode_parts(gpu: str, heads: int, batch: int, context: float, kv_dtype: str, bmm: str) -> float:
    """One MLA layer's decode in parts where no whole-block table is shipped (SGLang's tables), seconds: the
    absorbed query projection (W_UK), the bare MLA kernel over the cached latents and the value projection (W_UV),
    as aiconfigurator times SGLang's (MLABmm pre + GenerationMLA + MLABmm post); memoized here, by its shape."""
    pre = kernel_tables.mla_bmm_ms(gpu, batch, heads, bmm, "pre")
    post = kernel_tables.mla_bmm_ms(gpu, batch, heads, bmm, "post")
    return (pre + kernel_tables.generation_mla_ms(gpu, heads, batch, context, kv_dtype) + post) / 1e3


def keys_read(kind: str, span: int, context: float) -> float:
    """Cached keys one decode query of a layer reads at `context` tokens: all of them ("full"), the last min(context,
    w) of a sliding window of w, or its own chunk's so far, ((context - 1) mod c) + 1, for a chunk of c ("chunked").
    The engines' decode kernels read only those: vLLM hands the window to FlashAttention
    (vllm-project/vllm@5704f34f:vllm/v1/attention/backends/flash_attn.py FlashAttentionImpl: "self.sliding_window =
    (sliding_window - 1, 0)", passed as window_size=), TensorRT-LLM's attention op takes the layer's window
    (NVIDIA/TensorRT-LLM@7924c7f1:tensorrt_llm/_torch/models/modeling_gpt_oss.py AttentionBlock: "self.sliding_window
    = pretrained_config.sliding_window if layer_idx % 2 == 0 else None", forward: "attention_window_size =
    self.sliding_window")."""
    if kind == "sliding" and span:
        return min(context, span)
    if kind == "chunked" and span:
        return (max(context, 1.0) - 1) % span + 1
    return context


def decode_spans(spec: ModelSpec, context: float) -> dict[float, int]:
    """Keys read (``keys_read``) -> attention layers reading that many, at a mean `context` (plain attention: one
    entry, every layer the whole context)."""
    out: dict[float, int] = {}
    for i in range(spec.n_layers):
        if spec.is_attention_layer(i):
            keys = keys_read(spec.attention_span(i), spec.span_tokens(i), context)
            out[keys] = out.get(keys, 0) + 1
    return out


def context_tokens(keys: float) -> int:
    """A decode table's context key: `keys` cached tokens (at least 1) to 3 significant figures, whole (a simulation
    asks for a few thousand contexts, again and again: ``DecodeShape``'s memo then holds a few hundred)."""
    return max(1, round(float(f"{max(1.0, keys):.3g}")))


def measured_decode_attention(shape: DecodeShape, spec: ModelSpec) -> float:
    """Every attention layer's paged decode, seconds: t = sum over the layers of the measured kernel at the keys each
    reads (``decode_spans``; `shape`'s context is the mean context), a windowed layer at its window's keys."""
    spans = decode_spans(spec, shape.context) if spec.has_windows else {shape.context: spec.n_attention_layers}
    return sum(n * measured_decode_layer(dataclasses.replace(shape, context=context_tokens(keys)))
               for keys, n in spans.items())


def windowed_kv_bytes(est: Any, spec: ModelSpec, tp: int, kv_tokens: float, sequences: float) -> float:
    """The cached K and V one GPU reads in a decode step of `sequences` sequences over `kv_tokens` cached tokens:
    kv_tokens x the KV bytes per token of every layer, a windowed layer's at its window's keys only
    (``keys_read``, at the mean context kv_tokens / sequences)."""
    if not spec.has_windows or sequences <= 0:
        return kv_tokens * est.kv_per_token_per_gpu
    context = kv_tokens / sequences
    return sequences * sum(layer.bytes_per_token * keys_read(layer.kind, layer.span, context)
                           for layer in kv_layers(spec, est.kv_dtype, tp))


@dataclass(frozen=True)
class PrefillShape:
    """What the measured prefill-attention table reads (kernel_tables.prefill_attention_ms): the memo's key."""

    gpu: str
    batch: int  # prompts in the step's prefill (at least 1)
    seq: float  # their length, to 3 significant figures
    heads: int  # query heads per GPU
    kv_heads: int  # KV heads per GPU
    head_dim: int


@functools.lru_cache(maxsize=1 << 14)
def measured_fp8_kv_prefill_ratio(shape: PrefillShape) -> float:
    """The engine's causal prefill attention with an FP8 KV cache over the same with a 16-bit one, both measured
    inside the engine at `shape` (kernel_tables.prefill_attention_ms, fp8 / bf16); 1.0 where its table holds no
    FP8 rows for this shape (memoized here, by its shape)."""
    args = (shape.gpu, shape.batch, round(shape.seq), shape.heads)
    try:
        fp8 = kernel_tables.prefill_attention_ms(*args, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                                                 kv_dtype="fp8")
        bf16 = kernel_tables.prefill_attention_ms(*args, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                                                  kv_dtype="bf16")
    except kernel_tables.KernelTableError:
        return 1.0
    return fp8 / bf16 if bf16 > 0 else 1.0
