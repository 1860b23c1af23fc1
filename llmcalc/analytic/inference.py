"""Inference: KV cache (and its split under tensor parallelism), weights at a serving dtype, and a
roofline for prefill and decode.

Roofline (Williams et al. 2009): a step takes max(FLOPs / peak FLOP/s, bytes moved / memory
bandwidth), per GPU. Prefill moves the weights once and writes the prompt's KV cache; each decode
step reads the weights the step's tokens use and the whole KV cache so far. Peaks are the
datasheet's dense figures: the result is an upper bound on speed (a lower bound on time).

Conventions (printed with the results):
- MoE: a decode step of b sequences reads only the experts its b·k routed tokens hit. Under
  uniform routing the expected number of distinct experts per MoE layer is E·(1 - (1 - k/E)^b)
  (each expert is missed by one token with probability 1 - k/E); at b = 1 that is k, so batch 1
  reads exactly the active parameters.
- MLA (DeepSeek-V2 sec. 2.1.2): decode runs the absorbed form (W_UK folded into the query, W_UV
  into the output): it attends over the cached latent (kv_lora_rank + qk_rope_head_dim per token
  and layer), which is also what it reads. Prefill runs the plain form (K and V decompressed), as
  DeepSeek's and vLLM's kernels do.
- Tensor parallelism over tp GPUs: query heads split; KV heads split down to one per rank and no
  further: when tp > KV heads each rank keeps a replica of one KV head (vLLM's
  max(1, n_kv_heads // tp)); the MLA latent is replicated on every rank.
- Decode over a generation is a closed-form sum: a step's FLOPs and bytes are linear in its
  context, so the sum of max(compute, memory) over contexts is two arithmetic series.
"""

from __future__ import annotations

import math
from functools import cached_property

from ..dtypes import dtype_bytes
from ..errors import LlmcalcError
from ..hardware import Accelerator, canonical_dtype
from ..records import dataclass, short_repr
from ..spec import MLA, ModelSpec
from ..validate import positive_int
from .flops import forward_ops
from .quant import SHIPPED_NAMES, TYPED_BYTES, TYPED_NOTES, WeightFormat, weight_format
from .ssm import layer_state_parts

KV_DTYPES = ("fp32", "bf16", "fp16", "fp8")  # what vLLM's --kv-cache-dtype can be (auto = the model dtype)
# Linear layers vLLM keeps whole on every rank: the router and MLA's down-projections (ReplicatedLinear).
REPLICATED = ("router", "q_a_proj", "kv_a_proj")


def check_tp(spec: ModelSpec, tp: int) -> None:
    """vLLM's rules: tp divides the attention heads, and the KV heads divide tp or tp divides them (attention
    layers); tp divides a Mamba-2 mixer's heads, and its groups unless there is one group (vLLM
    model_executor/layers/mamba/mamba_mixer2.py, MambaMixer2.__init__'s asserts); tp divides a Mamba-1 mixer's
    intermediate width (mamba_mixer.py: in_proj is a MergedColumnParallelLinear of 2 x intermediate_size)."""
    if not isinstance(tp, int) or tp < 1:
        raise LlmcalcError(f"tensor parallelism must be a whole number >= 1, got {tp!r}")
    kinds = {kind for i in range(spec.n_layers) for kind in spec.layer_parts(i)[0]} if spec.is_hybrid else set()
    if "mamba2" in kinds:
        _check_mixer_tp(spec, tp, spec.ssm_n_heads, "Mamba-2 heads")
        if spec.ssm_n_groups % tp and spec.ssm_n_groups != 1:
            raise LlmcalcError(f"--n-gpus {tp} does not divide the {spec.ssm_n_groups} Mamba-2 groups of {spec.name} "
                               f"(vLLM needs it unless there is one group); use a tp that divides {spec.ssm_n_groups}")
    if "mamba" in kinds:
        _check_mixer_tp(spec, tp, spec.ssm_d_inner, "Mamba intermediate width")
    if spec.n_attention_layers == 0:
        return
    if spec.n_heads % tp:
        divisors = [d for d in (1, 2, 4, 8, 16, 32, 64) if spec.n_heads % d == 0]
        raise LlmcalcError(f"--n-gpus {tp} does not divide the {spec.n_heads} attention heads of {spec.name}; "
                           f"use one of {', '.join(map(str, divisors))}")
    kv = spec.n_kv_heads
    if not spec.is_mla and kv % tp and tp % kv:
        raise LlmcalcError(f"--n-gpus {tp} neither divides nor is a multiple of the {kv} KV heads of {spec.name}")


def _check_mixer_tp(spec: ModelSpec, tp: int, width: int, what: str) -> None:
    if width % tp:
        divisors = [d for d in (1, 2, 4, 8, 16, 32, 64) if width % d == 0]
        raise LlmcalcError(f"--n-gpus {tp} does not divide the {width:,} {what} of {spec.name}; "
                           f"use one of {', '.join(map(str, divisors))}")


def kv_heads_per_gpu(spec: ModelSpec, tp: int = 1) -> int:
    """KV heads each rank holds: split by tp, never below one (replicated when tp > KV heads); MLA's
    latent is one shared 'head', replicated on every rank."""
    return 1 if spec.is_mla else max(1, spec.n_kv_heads // tp)


def _kv_layers(spec: ModelSpec) -> int:
    if spec.architecture == "encoder":
        raise LlmcalcError(f"{spec.name} is an encoder: it generates nothing and keeps no KV cache")
    # Hybrid models: only the attention layers keep a KV cache (state-space layers keep a state).
    return spec.n_decoder_layers if spec.architecture == "encoder-decoder" else spec.n_attention_layers


def kv_cache_bytes_per_token(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """Bytes of KV cache one token adds across all layers (the whole model, before any split): the per-token sum
    of ``kv_layers`` at tp 1 (no window cap; a compressed layer's entry bytes / its stride).

    MHA/GQA/MQA: 2 (K and V) x layers x n_kv_heads x d_head x bytes (each layer at its own geometry). MLA
    (DeepSeek-V2 sec. 2.1.2): the compressed latent plus the decoupled RoPE key, layers x (kv_lora_rank +
    qk_rope_head_dim) x bytes, as DeepSeek serves it and transformers 5 caches it; a lightning indexer adds its
    key. Encoder-decoder: the decoder's self-attention cache (cross-attention K/V are per source token,
    see ``cross_kv_bytes_per_source_token``).
    """
    return kv_cache_bytes_per_token_per_gpu(spec, kv_dtype, 1)


def kv_cache_bytes_per_token_per_gpu(spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1) -> float:
    """One token's KV cache on one of tp ranks: KV heads split down to one per rank (replicated
    beyond), MLA's latent whole on every rank (the per-token sum of ``kv_layers``)."""
    return sum(layer.bytes_per_token for layer in kv_layers(spec, kv_dtype, tp))


@dataclass(frozen=True)
class KvLayer:
    """What one layer keeps for one sequence while it generates, on one of tp ranks: a KV cache of
    `bytes_per_token` for each token it attends (all of them, or at most `span` for a sliding-window or
    chunked layer; one entry per `stride` tokens for a compressed one), or a recurrent state of `state_bytes`,
    constant in the context length."""

    index: int  # decoder layer
    kind: str  # "full", "sliding", "chunked" (attention; ModelSpec.attention_span), "mla", "indexer" (a lightning
    #   indexer's keys), "compressed" (DeepSeek-V4's compressed KV entries), or "state"
    bytes_per_token: float = 0.0  # on average: a compressed layer's entry bytes / stride
    span: int = 0  # keys a query attends at most: the sliding window or chunk (0: the whole context)
    state_bytes: float = 0.0
    stride: int = 1  # tokens per cached entry (DeepSeek-V4's compression rate; 1 otherwise)

    def cached_tokens(self, context: int) -> int:
        """Tokens the cache holds after `context` tokens: all of them, or span - 1 for a windowed layer, as
        transformers' DynamicSlidingWindowLayer keeps them (the span's last key is the token being processed;
        transformers caches a chunked layer the same way); a compressed layer holds an entry per whole window of
        `stride` tokens (the partial window waits in its state). vLLM's block allocation is serving.py's."""
        if self.stride > 1:
            return context // self.stride * self.stride
        return min(context, self.span - 1) if self.span else context

    def bytes_for(self, context: int) -> float:
        """This layer's bytes for one sequence of `context` tokens."""
        return self.bytes_per_token * self.cached_tokens(context) + self.state_bytes


# DeepSeek-V4's compressor state in vLLM's layout (an indexed vLLM-derived deepseek_v4 compressor file; research note
# families/deepseek_v4.md sec. 4): fp32 rows of 2·coff·width floats, coff·ratio rows kept, coff = 2 for the
# overlapping CSA windows and 1 for HCA.
COMPRESSOR_STATE_BYTES = 4


def _compressor_state(spec: ModelSpec, layer: int) -> float:
    """Bytes of DeepSeek-V4's pending-window compressor state of one layer and sequence (main and, on a CSA layer,
    its indexer's compressor), at vLLM's fp32 layout: coff·ratio rows of 2·coff·width floats."""
    kind, ratio = spec.compression(layer), spec.compress_ratio(layer)
    coff = 2 if kind == "csa" else 1
    widths = spec.d_head + (spec.index_head_dim if kind == "csa" else 0)
    return coff * ratio * 2 * coff * widths * COMPRESSOR_STATE_BYTES if kind != "none" else 0.0


def _attention_layers(spec: ModelSpec, i: int, b: float, tp: int) -> list[KvLayer]:
    """The cache of attention layer `i` (see ``kv_layers``)."""
    if spec.mla is not None:
        out = [KvLayer(i, "mla", (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * b)]
    elif spec.kv_shared(i):  # Gemma 4: it reads the K/V an earlier layer of its span cached (a DummyLayer)
        return []
    else:
        # K and V per K/V head on this rank; DeepSeek-V4's one K = V tensor is cached once (its CSA/HCA caches,
        # vLLM); Gemma 4's global K = V layers keep K and V apart (V is normalised, K roped)
        heads = 1 if spec.k_eq_v == "all" else 2
        kv = spec.layer_kv_heads(i)
        per = heads * max(1, kv // tp) * spec.layer_d_head(i) * b
        out = [KvLayer(i, spec.attention_span(i), per, span=spec.span_tokens(i))]
    if spec.compression(i) != "none":  # DeepSeek-V4: compressed entries (K = V of d_head; CSA also indexer keys)
        ratio = spec.compress_ratio(i)
        entry = (spec.d_head + (spec.index_head_dim if spec.compression(i) == "csa" else 0)) * b
        out.append(KvLayer(i, "compressed", entry / ratio, stride=ratio, state_bytes=_compressor_state(spec, i)))
    elif spec.has_indexer(i):  # DSA: the indexer's key of every token (DynamicIndexedLayer.indexer_keys)
        out.append(KvLayer(i, "indexer", spec.index_head_dim * b))
    return out


def kv_layers(spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1, state_dtype: str = "bf16") -> list[KvLayer]:
    """Every decoder layer's cache on one of tp ranks, layer by layer (a layer with attention and a recurrent
    mixer in parallel, Falcon-H1's, gives one of each): attention keeps 2 (K and V) x its KV heads on the rank
    (``kv_heads_per_gpu``) x its head width x bytes per token, for the tokens its span allows
    (``ModelSpec.span_tokens``: a sliding window or chunk; transformers' sliding-window cache and vLLM's hybrid
    allocator keep only those); MLA its latent plus RoPE key, whole on every rank (transformers 5 caches the latent:
    modeling_deepseek_v3.py cache.update(k_pass, k_rot)); a lightning indexer its key (DeepSeek-V3.2, GLM-5:
    DynamicIndexedLayer); DeepSeek-V4 its window's one K = V head and an entry per compressed window (d_head, plus
    the indexer's key on CSA layers: DeepseekV4CSACache / HCACache) with the pending-window state; Gemma 4's
    KV-shared layers nothing; a state-space or delta-rule mixer its conv window at `state_dtype` and its SSM state
    at the spec's ssm_state_dtype where it names one (transformers keeps delta-rule states in fp32; vLLM KDA's
    always, Qwen3.5's by mamba_ssm_dtype), split over tp with its channels. The per-token sum over layers is
    ``kv_cache_bytes_per_token_per_gpu``; what differs per layer is the span."""
    _kv_layers(spec)  # an encoder: one clear line
    b, sb = dtype_bytes(kv_dtype), dtype_bytes(state_dtype)
    ssm_b = dtype_bytes(spec.ssm_state_dtype) if spec.ssm_state_dtype else sb
    out: list[KvLayer] = []
    if spec.architecture == "encoder-decoder":
        per = 2 * kv_heads_per_gpu(spec, tp) * spec.d_head * b
        return [KvLayer(i, "full", per) for i in range(spec.n_decoder_layers)]
    for i in range(spec.n_layers):
        mixers = spec.layer_parts(i)[0]
        if spec.is_attention_layer(i):
            out += _attention_layers(spec, i, b, tp)
        conv, ssm = layer_state_parts(spec, mixers)
        if conv or ssm:
            out.append(KvLayer(i, "state", state_bytes=(conv * sb + ssm * ssm_b) / tp))
    return out


def recurrent_state_bytes(spec: ModelSpec, state_dtype: str = "bf16") -> float:
    """Bytes of recurrent state ONE sequence keeps, whole model, constant in the context length: per
    state-space/conv layer (Mamba, Mamba-2, Gated DeltaNet, KDA, LFM2's short conv) a conv window (conv channels x
    kernel) and an SSM state (E x N), see analytic/ssm.py, and DeepSeek-V4's pending-window compressor state. At
    the model dtype by default, as transformers' cache and vLLM (mamba_ssm_cache_dtype "auto") keep it, but for an
    SSM state the spec keeps in its own ssm_state_dtype (``kv_layers``)."""
    return state_bytes_per_sequence(spec, 1, state_dtype)


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1, state_dtype: str = "bf16") -> float:
    """Constant per-sequence state on one rank, beside the per-token KV cache (the state of ``kv_layers``). Attention
    layers keep none; recurrent layers their state, split over tp with their heads/channels."""
    if spec.architecture != "decoder":
        return 0.0
    return sum(layer.state_bytes for layer in kv_layers(spec, "bf16", tp, state_dtype))


def cross_kv_bytes_per_source_token(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """Encoder-decoder: cross-attention K and V for one encoder token, over all decoder layers."""
    if spec.architecture != "encoder-decoder":
        return 0.0
    return 2 * spec.n_decoder_layers * spec.n_heads * spec.d_head * dtype_bytes(kv_dtype)


# --- weights --------------------------------------------------------------------------------------

QUANTISATION_NOTES = {k: v for k, v in TYPED_NOTES.items()}


def bytes_per_weight(weight_dtype: str) -> float:
    """Bytes per block-matmul weight at a typed --weight-dtype, group scales included (int4: 0.5 + 2.5/128); a
    shipped format's name (nf4, int4 of an AWQ checkpoint, ...) is checked for being one llmcalc knows."""
    if weight_dtype not in TYPED_BYTES and weight_dtype not in SHIPPED_NAMES:
        raise LlmcalcError(f"unknown weight dtype {weight_dtype!r}; use one of {', '.join(TYPED_BYTES)}")
    return TYPED_BYTES.get(weight_dtype, 0.5)


@dataclass(frozen=True)
class WeightLayout:
    """Weight bytes of a model at a serving dtype, whole and per tensor-parallel rank.

    ``per_gpu`` splits every matrix by tp except the replicated ones (norms, router, MLA
    down-projections) and K/V projections, of which each rank keeps its KV heads (one at least).
    ``expert_bytes`` is one routed expert of one layer, whole model (split by tp on a rank).
    """

    total: float
    per_gpu: float
    lookups_per_gpu: float  # embedding rows a step reads ~none of (untied token table, positions)
    experts_per_gpu: float  # all routed experts on one rank
    expert_bytes: float  # one routed expert of one layer, whole

    def read_per_gpu(self, spec: ModelSpec, tokens: int, tp: int) -> float:
        """Bytes one rank streams in a forward step over `tokens` tokens: every matmul weight but
        the routed experts the tokens miss and the lookup tables' unused rows."""
        dense = self.per_gpu - self.lookups_per_gpu - self.experts_per_gpu
        if not spec.is_moe:
            return dense
        return dense + spec.n_moe_layers * expected_experts(spec, tokens) * self.expert_bytes / tp


def weight_layout(spec: ModelSpec, weight_dtype: str = "bf16", tp: int = 1,
                  fmt: WeightFormat | None = None) -> WeightLayout:
    """Weight bytes whole and per tensor-parallel rank: each component at its format (``quant.WeightFormat``: as the
    checkpoint ships it, or `weight_dtype` typed), split by tp but the replicated ones."""
    fmt = fmt or weight_format(spec, weight_dtype)
    total = per_gpu = lookups = experts = 0.0
    kv_share = kv_heads_per_gpu(spec, tp) / spec.n_kv_heads
    for key, nbytes in fmt.component_bytes(spec).items():
        name = key.split("/")[1]
        total += nbytes
        if key.startswith("norm") or name.endswith("norm") or name in REPLICATED:
            share = 1.0
        elif name in ("k_proj", "v_proj") and "cross" not in key:
            share = kv_share
        else:
            share = 1.0 / tp
        per_gpu += nbytes * share
        if key in ("embedding/positions", "embedding/token_types") or (
                key == "embedding/tokens" and not (spec.lm_head and spec.tie_embeddings)):
            lookups += nbytes * share  # a tied table is read whole by the head matmul
        if key == "moe/experts":
            experts += nbytes * share
    expert = (experts * tp / (spec.n_moe_layers * spec.n_experts)) if spec.is_moe else 0.0
    return WeightLayout(total, per_gpu, lookups, experts, expert)


def weight_bytes(spec: ModelSpec, weight_dtype: str | None = "bf16") -> float:
    """All parameters: block matmuls at `weight_dtype` (int4 with its group scales), the rest in 16 bits; None: as
    the checkpoint ships them."""
    return weight_layout(spec, fmt=weight_format(spec, weight_dtype)).total


def expected_experts(spec: ModelSpec, tokens: int) -> float:
    """Distinct routed experts `tokens` tokens hit in one MoE layer under uniform top-k routing:
    E·(1 - (1 - k/E)^tokens). One token: k; many: all E."""
    E, k = spec.n_experts, spec.n_experts_per_token
    return E * (1 - (1 - k / E) ** tokens)


# --- FLOPs ----------------------------------------------------------------------------------------

def _mla_absorbed(spec: ModelSpec, mla: MLA, ops: dict[str, int]) -> dict[str, int]:
    """One token's attention in MLA's absorbed form per key: the query's no-RoPE part maps into the
    latent (W_UK), scores run over latent + RoPE key, values over the latent, W_UV maps back."""
    L, H, r, rope = spec.n_layers, spec.n_heads, mla.kv_lora_rank, mla.qk_rope_head_dim
    out = {k: v for k, v in ops.items() if k not in ("attention/kv_b_proj", "attention/scores", "attention/values")}
    out["attention/absorb_uk"] = L * 2 * H * mla.qk_nope_head_dim * r
    out["attention/absorb_uv"] = L * 2 * H * r * mla.v_head_dim
    out["attention/scores"] = L * 2 * H * (r + rope)  # per key
    out["attention/values"] = L * 2 * H * r  # per key
    return out


def decode_ops(spec: ModelSpec, batch: int, context: int) -> dict[str, int]:
    """Forward FLOPs of one decode step: one new token per sequence attending to `context` keys
    (its own included). MLA in the absorbed form."""
    if spec.architecture != "decoder":
        raise LlmcalcError(f"the decode roofline covers decoder-only models; {spec.name} is {spec.architecture}")
    ops = forward_ops(spec, 1, 1, recurrent=True)  # one token: at S = 1 the S² ops give their cost per key
    if spec.mla is not None:
        ops = _mla_absorbed(spec, spec.mla, ops)
    if spec.is_hybrid:  # a conv steps one output (causal_conv1d_update), not the S+K-1 = K padded ones
        ops = {k: v // spec.ssm_conv_kernel if k.endswith("/conv1d") else v for k, v in ops.items()}
    return {k: v * batch * (context if k.endswith(PER_KEY) else 1) for k, v in ops.items()}


PER_KEY = ("/scores", "/values", "/indexer_scores")  # decode ops whose work grows with the keys attended


def _decode_slopes(spec: ModelSpec) -> tuple[int, int]:
    """(FLOPs per sequence independent of context, FLOPs per sequence per key) of a decode step."""
    per_key = decode_ops(spec, 1, 1)
    core = sum(v for k, v in per_key.items() if k.endswith(PER_KEY))
    return sum(per_key.values()) - core, core


def _sum_linear(a: float, b: float, c0: int, c1: int) -> float:
    """Σ_{c=c0}^{c1} (a + b·c), 0 for an empty range."""
    n = c1 - c0 + 1
    return n * a + b * (c0 + c1) * n / 2 if n > 0 else 0.0


def sum_max_linear(a1: float, b1: float, a2: float, b2: float, c0: int, c1: int) -> float:
    """Σ_{c=c0}^{c1} max(a1 + b1·c, a2 + b2·c) in closed form: the two lines cross at most once."""
    if c1 < c0:
        return 0.0
    if b1 == b2:
        return _sum_linear(*((a1, b1) if a1 >= a2 else (a2, b2)), c0, c1)
    cross = (a2 - a1) / (b1 - b2)  # line 1 above line 2 for c > cross when b1 > b2
    split = min(max(math.floor(cross), c0 - 1), c1)
    low, high = ((a2, b2), (a1, b1)) if b1 > b2 else ((a1, b1), (a2, b2))
    return _sum_linear(*low, c0, split) + _sum_linear(*high, split + 1, c1)


# --- roofline -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Roofline:
    """One step on one GPU: its FLOPs and bytes, against that GPU's peak and bandwidth."""

    flops: float
    bytes: float
    peak: float
    bandwidth: float

    @property
    def compute_seconds(self) -> float:
        return self.flops / self.peak

    @property
    def memory_seconds(self) -> float:
        return self.bytes / self.bandwidth

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes


def default_compute_dtype(weight_dtype: str, accelerator: Accelerator) -> str:
    """fp8 weights run fp8 matmuls where the device has them; fp32 weights fp32; fp16 weights fp16; else
    bf16 (fp16 on devices without bf16, as vLLM casts on a V100). int8/int4 are weight-only:
    dequantised to 16 bits."""
    if weight_dtype == "fp8" and "fp8" in accelerator.peak_flops:
        return "fp8"
    if weight_dtype == "fp32":
        return "fp32"
    if weight_dtype == "fp16" or "bf16" not in accelerator.peak_flops:
        return "fp16"
    return "bf16"


def check_kv_dtype(kv_dtype: str, accelerator: Accelerator) -> str:
    """A KV dtype the device holds natively (from the preset's peaks: fp8 needs an fp8 rate)."""
    try:
        dtype = canonical_dtype(kv_dtype)
    except LlmcalcError:
        dtype = None
    if dtype not in KV_DTYPES:
        raise LlmcalcError(f"unknown KV cache dtype {kv_dtype!r}; use one of {', '.join(KV_DTYPES)} "
                           "(e4m3/e5m2 are fp8)")
    if dtype not in accelerator.peak_flops:
        held = [d for d in ("fp32", "bf16", "fp16", "fp8") if d in accelerator.peak_flops]
        raise LlmcalcError(f"{accelerator.key} has no {dtype} support (its preset lists no {dtype} rate), so it "
                           f"cannot hold a {dtype} KV cache; use --kv-dtype {' or '.join(held)}")
    return dtype


def resolve_dtypes(accelerator: Accelerator, weight_dtype: str, kv_dtype: str | None = None,
                   compute_dtype: str | None = None) -> tuple[str, str, str]:
    """(weight, KV, compute) dtypes checked against the device; KV defaults to the activation dtype. A GPU known by
    its memory alone (`--gpu-memory`, hardware.MemoryOnly) has no rates to check them against: bf16 compute (fp16, fp32
    for such weights), the KV dtype as typed."""
    from ..hardware import MemoryOnly

    weight = weight_dtype.lower()
    bytes_per_weight(weight)
    if isinstance(accelerator, MemoryOnly):
        compute = canonical_dtype(compute_dtype) if compute_dtype else weight if weight in ("fp16", "fp32") else "bf16"
        return weight, canonical_dtype(kv_dtype) if kv_dtype else compute if compute in ("fp32", "fp16") else "bf16", \
            compute
    compute = canonical_dtype(compute_dtype) if compute_dtype else default_compute_dtype(weight, accelerator)
    accelerator.peak(compute)
    kv = check_kv_dtype(kv_dtype or (compute if compute in ("fp32", "fp16") else "bf16"), accelerator)
    return weight, kv, compute


def context_warning(spec: ModelSpec, tokens: int) -> str | None:
    """A warning line when `tokens` exceed the model's trained positions (the figure is still computed)."""
    if spec.max_seq_len is not None and tokens > spec.max_seq_len:
        return (f"{tokens:,} tokens exceed {spec.name}'s max_position_embeddings ({spec.max_seq_len:,}); "
                f"the figures are computed anyway")
    return None


@dataclass(frozen=True)
class InferenceEstimate:

    __repr__ = short_repr(("spec", "accelerator", "n_gpus", "batch", "prompt", "generate"))  # a handful of fields
    spec: ModelSpec
    accelerator: Accelerator
    batch: int
    prompt: int
    generate: int
    weight_dtype: str
    kv_dtype: str
    compute_dtype: str
    n_gpus: int = 1  # tensor-parallel GPUs
    weight_format: WeightFormat | None = None  # None: weight_dtype as typed

    def __post_init__(self) -> None:
        if self.spec.architecture != "decoder":
            _kv_layers(self.spec)  # an encoder: one clear line
            raise LlmcalcError(f"the decode roofline covers decoder-only models; {self.spec.name} is "
                               f"{self.spec.architecture}")
        check_tp(self.spec, self.n_gpus)

    @cached_property
    def layout(self) -> WeightLayout:
        return weight_layout(self.spec, self.weight_dtype, self.n_gpus, self.weight_format)

    @cached_property
    def _slopes(self) -> tuple[int, int]:
        return _decode_slopes(self.spec)

    def _roof(self, flops: float, nbytes_per_gpu: float) -> Roofline:
        return Roofline(flops / self.n_gpus, nbytes_per_gpu, self.accelerator.peak(self.compute_dtype),
                        self.accelerator.memory_bandwidth)

    @property
    def weights(self) -> float:
        return self.layout.total

    @property
    def weights_per_gpu(self) -> float:
        return self.layout.per_gpu

    @cached_property
    def state_bytes_per_sequence(self) -> float:
        """Recurrent state of one sequence per GPU (conv + SSM state of the Mamba/DeltaNet/conv layers), constant
        in context length (``state_bytes_per_sequence``)."""
        return state_bytes_per_sequence(self.spec, self.n_gpus)

    @property
    def warnings(self) -> list[str]:
        """A prompt and generation past the model's trained positions (the figures are computed anyway)."""
        line = context_warning(self.spec, self.prompt + self.generate)
        return [line] if line else []

    @property
    def kv_per_token(self) -> float:
        return kv_cache_bytes_per_token(self.spec, self.kv_dtype)

    @cached_property
    def kv_per_token_per_gpu(self) -> float:
        return kv_cache_bytes_per_token_per_gpu(self.spec, self.kv_dtype, self.n_gpus)

    @property
    def kv_cache(self) -> float:
        """KV cache at the end of generation, whole model: batch x (prompt + generated) tokens."""
        return self.batch * (self.prompt + self.generate) * self.kv_per_token

    def weights_read(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a step over `tokens` tokens (MoE: the experts they hit)."""
        return self.layout.read_per_gpu(self.spec, tokens, self.n_gpus)

    def prefill_flops(self) -> float:
        """FLOPs of the prompt's forward, causal as serving kernels run it."""
        return sum(forward_ops(self.spec, self.batch, self.prompt, causal=True).values())

    @cached_property
    def prefill(self) -> Roofline:
        tokens = self.batch * self.prompt
        return self._roof(self.prefill_flops(), self.weights_read(tokens) + tokens * self.kv_per_token_per_gpu)

    def tp_fits(self, tp: int) -> bool:
        """Whether `tp` GPUs can split this model (its heads)."""
        return _tp_ok(self.spec, tp)

    def _decode_lines(self) -> tuple[float, float, float, float]:
        """A decode step at context c takes max(a1 + b1·c, a2 + b2·c) seconds: (a1, b1, a2, b2)."""
        f0, f1 = self._slopes
        peak = self.accelerator.peak(self.compute_dtype) * self.n_gpus
        bw = self.accelerator.memory_bandwidth
        b = self.batch
        state = b * self.state_bytes_per_sequence
        return (b * f0 / peak, b * f1 / peak, (self.weights_read(b) + state) / bw,
                b * self.kv_per_token_per_gpu / bw)

    def decode_step(self, context: int) -> Roofline:
        """One new token per sequence attending to `context` keys: read the weights its tokens use
        and context - 1 cached tokens, write one."""
        f0, f1 = self._slopes
        nbytes = (self.weights_read(self.batch) + self.batch * self.state_bytes_per_sequence
                  + self.batch * context * self.kv_per_token_per_gpu)
        return self._roof(self.batch * (f0 + f1 * context), nbytes)

    @cached_property
    def decode_seconds(self) -> float:
        """All decode steps: the first generated token comes from prefill; the step producing token
        i + 1 attends to prompt + i keys (i = 1 .. generate - 1). A closed-form sum."""
        return sum_max_linear(*self._decode_lines(), self.prompt + 1, self.prompt + self.generate - 1)

    @property
    def decode_seconds_per_token(self) -> float:
        steps = self.generate - 1
        return self.decode_seconds / steps if steps else self.decode_step(self.prompt + 1).seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.batch / self.decode_seconds_per_token

    @property
    def total_seconds(self) -> float:
        return self.prefill.seconds + self.decode_seconds

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second over the whole request (prefill included)."""
        return self.batch * self.generate / self.total_seconds

    def compute_bound_batch(self, context: int | None = None, with_kv: bool = True) -> float | None:
        """Batch size at which a decode step turns compute-bound at `context` (default: the prompt).

        Per sequence a step costs f FLOPs and k bytes of KV cache; the weights W are read once per
        step: B·f / peak = (W + B·k) / bandwidth  =>  B* = (W / bw) / (f / peak - k / bw).
        W is the dense weights' read (MoE: at b = 1, the active experts; more sequences hit more
        experts, so for MoE this is a lower bound). None when the KV traffic alone outpaces
        compute. `with_kv=False` gives the textbook figure that ignores the cache (k = 0).
        """
        context = self.prompt if context is None else context
        f0, f1 = self._slopes
        peak = self.accelerator.peak(self.compute_dtype) * self.n_gpus
        kv = context * self.kv_per_token_per_gpu if with_kv else 0.0
        denominator = (f0 + f1 * context) / peak - kv / self.accelerator.memory_bandwidth
        if denominator <= 0:
            return None
        return (self.weights_read(1) / self.accelerator.memory_bandwidth) / denominator


def check_inference(batch: int, prompt: int, generate: int) -> None:
    for name, value in (("batch size", batch), ("prompt", prompt), ("generate", generate)):
        positive_int(name, value)


def plan_inference(spec: ModelSpec, accelerator: Accelerator, batch: int, prompt: int, generate: int,
                   weight_dtype: str | None = None, kv_dtype: str | None = None, compute_dtype: str | None = None,
                   n_gpus: int = 1) -> InferenceEstimate:
    """`llmcalc infer`: the roofline of `batch` sequences of `prompt` tokens generating `generate` more on
    `n_gpus` (tensor parallel), weights as the checkpoint ships them unless `weight_dtype` is typed, with the dtypes
    checked against the device (``resolve_dtypes``)."""
    check_inference(batch, prompt, generate)
    fmt = weight_format(spec, weight_dtype)
    weight, kv, compute = resolve_dtypes(accelerator, fmt.name, kv_dtype, compute_dtype)
    est = InferenceEstimate(spec, accelerator, batch, prompt, generate=generate, weight_dtype=weight, kv_dtype=kv,
                             compute_dtype=compute, n_gpus=n_gpus, weight_format=None if fmt.typed else fmt)
    check_fits(est)
    return est


def memory_needed_per_gpu(est: InferenceEstimate) -> float:
    """Bytes one GPU holds at the end of the request: its weights, the KV cache of batch x (prompt + generate)
    tokens and the recurrent state (a roofline of a model that does not fit answers nothing)."""
    tokens = est.batch * (est.prompt + est.generate)
    return est.weights_per_gpu + tokens * est.kv_per_token_per_gpu + est.batch * est.state_bytes_per_sequence


def check_fits(est: InferenceEstimate) -> None:
    """Refuse, with what would fit, a request whose weights (or weights and KV cache) exceed the GPU's memory."""
    gpu, spec = est.accelerator, est.spec
    capacity = gpu.memory_bytes
    if memory_needed_per_gpu(est) <= capacity:
        return
    gib = 2**30
    if est.weights_per_gpu > capacity:
        what = f"{est.weight_dtype} weights ({est.weights_per_gpu / gib:,.2f} GiB per GPU) do not fit"
    else:
        tokens = est.batch * (est.prompt + est.generate)
        what = (f"{est.weight_dtype} weights ({est.weights_per_gpu / gib:,.2f} GiB per GPU) and KV cache at the end "
                f"({(memory_needed_per_gpu(est) - est.weights_per_gpu) / gib:,.2f} GiB for {tokens:,} tokens) do "
                f"not fit together")
    fits = next((n for n in (2, 4, 8, 16, 32, 64) if n > est.n_gpus and est.tp_fits(n)
                 and memory_needed_per_gpu(replace_gpus(est, n)) <= capacity), None)
    fix = (f"--n-gpus {fits} (tensor parallel) fits" if fits
           else "no tensor-parallel degree up to 64 that its heads allow fits")
    raise LlmcalcError(f"{spec.name}'s {what} in {gpu.key}'s {capacity / gib:g} GiB: {fix}; or a smaller "
                       f"--weight-dtype (fp8, int8, int4)"
                       + (", --batch-size or --prompt/--generate" if est.weights_per_gpu <= capacity else ""))


def _tp_ok(spec: ModelSpec, tp: int) -> bool:
    try:
        check_tp(spec, tp)
    except LlmcalcError:
        return False
    return True


def replace_gpus(est: InferenceEstimate, n_gpus: int) -> InferenceEstimate:
    from dataclasses import replace

    return replace(est, n_gpus=n_gpus)
