"""The attention core's time (flash kernels at their measured rates, or eager with materialised scores), the lightning
indexer's scores and the state-space scans."""

from __future__ import annotations

import math

from ...records import dataclass
from ...spec import ModelSpec
from ..flops import indexer_ops
from ..kernels import Device, attention_seconds, gemm_seconds, stream_seconds
from .collectives import _cp_exposed
from .context import StepContext
from .layout import Layout

# A fused (flash) attention core's backward over its forward: 2.5 x the FLOPs (the forward's two matmuls, QKᵀ and PV,
# against the backward's five: S = QKᵀ again, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q; FlashAttention's own
# count, Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py: bwd = 2.5 x fwd), and 2.5 x the bytes of
# its memory floor (Q, K, V, O, dO read and dQ, dK, dV written, against Q, K, V read and O written).
ATTENTION_BACKWARD = 2.5


def _attention_core(ctx: StepContext, i: int, kind: str) -> tuple[float, float, float, float]:
    """(forward, backward, exposed CP forward, exposed CP backward) seconds of one layer's attention core on this
    rank: the pairs the kernel computes (``ModelSpec.attended_pairs``: causal, windowed, chunked), split over the
    heads of tp and the sequence of cp, at the kernel's rate for the shape (``kernels.attention_seconds``)."""
    spec, lay, dev = ctx.spec, ctx.lay, ctx.dev
    b, S, tp, cp = lay.micro_batch, ctx.seq, lay.tp, lay.cp
    mla = spec.mla
    dqk = mla.qk_head_dim if mla is not None and kind == "attention" else spec.d_head
    dv = mla.v_head_dim if mla is not None and kind == "attention" else spec.d_head
    head_dim = (dqk + dv) / 2
    heads = spec.n_heads / tp
    span = spec.span_tokens(i) if kind == "attention" else 0
    pairs = spec.attended_pairs(i, S) if kind == "attention" else S * (S + 1) / 2
    work = 2 * b * heads * pairs * (dqk + dv) / cp  # forward FLOPs on this rank (QKᵀ + PV)
    if ctx.attention == "eager":
        fwd, bwd = eager_attention_seconds(spec, lay, S, dev, ctx.act, dropout=ctx.dropout, efficiency=ctx.eff)
        return fwd, bwd, *_cp_exposed(ctx, i, fwd, bwd)
    fp8 = lay.fp8_attention
    kernel = lay.attention_kernel
    window = span if span else S
    ring = cp // lay.cp_a2a_size if lay.cp_comm == "a2a+p2p" else cp  # a2a+p2p: the ring over cp / a groups
    if ring > 1 and lay.cp_comm in ("p2p", "a2a+p2p"):  # step 0 causal on the local chunks, then unmasked blocks
        local = S / ring  # a2a+p2p: after the all-to-all, heads / a over the a-group's S / ring tokens
        first = 2 * b * heads * ring / cp * min(local * (local + 1) / 2, local * window) * (dqk + dv)
        rest = max(0.0, work - first)
        blk = min(window, local / 2) * math.sqrt(2)
        near = min(local, window)
        def shape(seq: float, causal: bool, backward: bool) -> AttentionShape:
            return AttentionShape(kernel, head_dim, seq=seq, causal=causal, backward=backward, fp8=fp8)
        fwd = (_attention_seconds(ctx, first, shape(near, causal=True, backward=False))
               + _attention_seconds(ctx, rest, shape(blk, causal=False, backward=False)))
        bwd = (_attention_seconds(ctx, ATTENTION_BACKWARD * first, shape(near, causal=True, backward=True))
               + _attention_seconds(ctx, ATTENTION_BACKWARD * rest, shape(blk, causal=False, backward=True)))
    else:
        sliding = window < S  # a window over a longer sequence (kernels.CUDNN_WINDOWED), not a short sequence
        fwd = _attention_seconds(ctx, work, AttentionShape(kernel, head_dim, seq=window, causal=True, backward=False,
                                                           fp8=fp8, windowed=sliding))
        back = AttentionShape(kernel, head_dim, seq=window, causal=True, backward=True, fp8=fp8, windowed=sliding)
        bwd = _attention_seconds(ctx, ATTENTION_BACKWARD * work, back)
    # the kernel also reads Q, K, V and writes O (and the backward their gradients): its memory floor
    kv_heads = max(1.0, spec.n_kv_heads / tp)
    qkvo = b * S / cp * (2 * heads * (dqk + dv) / 2 + 2 * kv_heads * dqk) * ctx.act
    fwd = max(fwd, stream_seconds(qkvo, dev, ctx.eff))
    bwd = max(bwd, stream_seconds(ATTENTION_BACKWARD * qkvo, dev, ctx.eff))
    if ring > 1 and lay.cp_comm in ("p2p", "a2a+p2p") and ctx.attention == "flash":
        out_elements = b * S / cp * heads * dv
        merged = 4.0 if fp8 else ctx.act  # the partial outputs are merged in fp32 under FP8 attention
        fwd += stream_seconds(ring_merge_bytes(out_elements=out_elements, steps=ring, act_bytes=ctx.act,
                                               out_bytes=merged), dev, ctx.eff)
        bwd += stream_seconds(ring_accumulate_bytes(q_elements=b * S / cp * heads * dqk,
                                                    kv_elements=b * S / cp * kv_heads * (dqk + dv), steps=ring,
                                                    grad_bytes=merged), dev, ctx.eff)
    return fwd, bwd, *_cp_exposed(ctx, i, fwd, bwd)


def ring_merge_bytes(out_elements: float, steps: int, act_bytes: float, out_bytes: float) -> float:
    """HBM bytes of merging a ring attention's partial outputs on one rank (forward), as TransformerEngine's
    AttnFuncWithCPAndKVP2P.forward does it after the ring's last step (not under any kernel: the loop "fwd output
    correction" runs once every step's out_per_step and softmax_lse are in): step 0 initialises the output
    (flash_attn_fwd_out_correction_init: read out_per_step, write out), each later step adds its rescaled partial
    output (flash_attn_fwd_out_correction: read out_per_step, read and write out), a causal ring's steps past the
    rank's own covering only the second half of its queries (flash_attn_fwd_second_half_out_correction; on average
    half the later steps: 3/4 of the elements); under FP8 attention the partial outputs are dequantized to fp32 and
    the merged output is cast back (out.to(fwd_nominal_dtype)):

        bytes = E (a + o) + (steps - 1) x 3/4 x E (a + 2 o) + [o != a] E (o + a)

    E = out_elements (this rank's tokens x heads x value head dim), a = act_bytes (a partial output), o = out_bytes
    (the merged output: the attention dtype, 4 under FP8 attention). Source: NVIDIA/TransformerEngine
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py (@d0067d0, lines 139-183,
    1928-1935 and 1980-2030)."""
    cast = out_elements * (out_bytes + act_bytes) if out_bytes != act_bytes else 0.0
    return out_elements * (act_bytes + out_bytes) + (steps - 1) * 0.75 * out_elements * (act_bytes + 2 * out_bytes) \
        + cast


def ring_accumulate_bytes(q_elements: float, kv_elements: float, steps: int, grad_bytes: float) -> float:
    """HBM bytes of accumulating a ring attention's gradients on one rank (backward), in line after each step's
    kernel on its stream (TransformerEngine AttnFuncWithCPAndKVP2P.backward: dq.add_(dq_) and dk.add_(dk_) /
    dv.add_(dv_) into the dK/dV buffer received from the previous rank, in the attention dtype, fp32 under FP8
    current scaling or MXFP8): each step after the first adds (reads both, writes one: 3 x grad_bytes per element)
    its dQ and its dK/dV, a causal ring's steps covering on average 3/4 of each (half the steps compute all queries
    against the first half of the keys, half the second half of the queries against all keys):

        bytes = (steps - 1) x 3/4 x (E_q + E_kv) x 3 x grad_bytes

    Source: context_parallel.py (@d0067d0) lines 2630-2800."""
    return (steps - 1) * 0.75 * (q_elements + kv_elements) * 3 * grad_bytes


@dataclass(frozen=True)
class AttentionShape:
    """What the attention kernel's rate reads beside the device (``kernels.Device.attention_rate``): the kernel, the
    head dim, the length attended, the mask, the pass, FP8 and whether a window slides over a longer sequence."""

    kernel: str
    head_dim: float
    seq: float
    causal: bool
    backward: bool
    fp8: bool = False
    windowed: bool = False


def attention_rate(ctx: StepContext, shape: AttentionShape) -> float:
    """The attention kernel's FLOP/s for `shape` on the context's device, memoized per ``AttentionShape`` (the layouts
    of a search ask it for many FLOPs at the same shape)."""
    table = ctx.table("attention rate")
    rate = table.get(shape)
    if rate is None:
        rate = table[shape] = ctx.dev.attention_rate(shape.kernel, shape.head_dim, shape.seq, shape.causal,
                                                     shape.backward, fp8=shape.fp8, windowed=shape.windowed)
    return rate


def _attention_seconds(ctx: StepContext, flops: float, shape: AttentionShape) -> float:
    """``kernels.attention_seconds``: flops / (the kernel's rate for `shape` x the in-step efficiency); no work, no
    time."""
    if flops <= 0:
        return 0.0
    return flops / (attention_rate(ctx, shape) * ctx.eff)


def _indexer_scores_seconds(ctx: StepContext, i: int) -> float:
    """Forward seconds of layer `i`'s lightning-indexer scores on this rank (DeepSeek Sparse Attention:
    DeepSeek-V3.2, GLM-5; DeepSeek-V4's CSA layers): q·kᵀ of the index_n_heads indexer heads of index_head_dim
    against every key (or the compressed entries), and their head weighting (``flops.indexer_ops``), for the whole
    micro-batch sequence split over the heads of tp and the queries of cp. It is attention-like work, a
    score matrix over query-key pairs (DeepGEMM's mqa_logits kernel), timed at the attention kernel's causal
    forward rate for that head dim and length (an assumption: no published indexer kernel table); it has no
    backward (``flops.NO_BACKWARD``), and its full recomputation repeats it with the layer's forward."""
    spec, lay = ctx.spec, ctx.lay
    flops = indexer_ops(spec, i, lay.micro_batch, ctx.seq, causal=True)["indexer_scores"] / (lay.tp * lay.cp)
    span = ctx.seq if spec.compression(i) != "csa" else spec.compressed_entries(i, ctx.seq)
    return _attention_seconds(ctx, flops, AttentionShape(lay.attention_kernel, spec.index_head_dim, span, causal=True,
                                                         backward=False, fp8=lay.fp8_attention))


def _scan_seconds(ctx: StepContext, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of a state-space mixer's scan on this rank. Mamba-2's SSD and Gated DeltaNet run
    chunked: per token and head 2·Q·(N + P) + 4·N·P tensor-core FLOPs for chunk length Q (Dao & Gu 2024 sec. 6;
    Gated DeltaNet's chunked delta rule adds 2·Q·N for its WY transform, Yang et al. 2024), at the attention
    kernel's rate for a causal block of length Q and head dim P (an assumption: no published SSD kernel table),
    floored by reading x, B, C, dt and writing y; Mamba-1's selective scan is memory-bound on those tensors."""
    spec, lay, dev = ctx.spec, ctx.lay, ctx.dev
    T, tp = ctx.tokens, lay.tp
    E, N, G = spec.ssm_d_inner / tp, spec.ssm_d_state, spec.ssm_n_groups
    H = max(1.0, spec.ssm_n_heads / tp)
    P = E / H
    nbytes = T * (2 * E + 2 * G * N + H) * ctx.act
    if kind == "mamba":
        f = stream_seconds(nbytes + T * E * 2 * ctx.act, dev, ctx.eff)
        return f, 2 * f
    Q = 64 if kind == "gated_deltanet" else 128
    per = 2 * Q * (N + P) + 4 * N * P + (2 * Q * N if kind == "gated_deltanet" else 0)
    flops = T * H * per
    f = max(attention_seconds(dev, "auto", flops, P, Q, causal=True, backward=False, efficiency=ctx.eff),
            stream_seconds(nbytes, dev, ctx.eff))
    b = max(attention_seconds(dev, "auto", 2 * flops, P, Q, causal=True, backward=True, efficiency=ctx.eff),
            stream_seconds(2 * nbytes, dev, ctx.eff))
    return f, b


def eager_attention_seconds(spec: ModelSpec, lay: Layout, seq_len: int, dev: Device, act_bytes: float,
                            dropout: bool, efficiency: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's attention core when the B·H·S² scores are materialised,
    as Megatron-LM did before FlashAttention (Narayanan et al. 2021 sec. 4.2: strided batched GEMMs for QKᵀ
    and PV, one fused scale-mask-softmax kernel; attention dropout on the probabilities, Megatron-LM's
    default --attention-dropout 0.1). Per head on this GPU (H/tp heads, S/cp queries against S keys):
    forward QKᵀ (S/cp x dh x S) and PV (S/cp x S x dv); backward dP = dO Vᵀ, dV = Pᵀ dO, dS K, dSᵀ Q
    (twice the forward's matmuls), each a batched GEMM on the roofline; with small dh these are bound by
    writing/reading the S² matrix, not by FLOPs. Elementwise passes over the S² matrix (act_bytes each per
    element, read or write): Megatron's causal fused softmax (scaled_upper_triang_masked_softmax.h: each row loads
    only its first i + 1 scores, stores the whole row, zeros above the diagonal) reads half and writes all (1.5),
    its backward reads P and dP in the lower triangle and writes all of dS (2); dropout reads, writes and stores a
    1-byte mask (2 + mask), its backward the same."""
    heads = lay.micro_batch * spec.n_heads / lay.tp
    q, kv = seq_len / lay.cp, seq_len
    dqk = spec.mla.qk_head_dim if spec.mla is not None else spec.d_head
    dv = spec.mla.v_head_dim if spec.mla is not None else spec.d_head
    mm_fwd = (gemm_seconds(q, dqk, kv, dev, act_bytes, batch=heads, efficiency=efficiency)
              + gemm_seconds(q, kv, dv, dev, act_bytes, batch=heads, efficiency=efficiency))
    elements = heads * q * kv
    drop = (2 * act_bytes + 1) if dropout else 0.0
    fwd = mm_fwd + elements * (1.5 * act_bytes + drop) / (dev.hbm * efficiency)
    bwd = 2 * mm_fwd + elements * (2 * act_bytes + drop) / (dev.hbm * efficiency)
    return fwd, bwd
