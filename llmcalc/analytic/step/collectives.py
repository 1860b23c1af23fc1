"""The collectives of one layer and where their groups sit: TP (and its overlap), CP, EP all-to-alls, the pipeline's
sends."""

from __future__ import annotations

import math

from ...records import dataclass, replaced
from .. import comm
from .constants import DUALPIPE_EP_OVERLAP_SHARE, EP_OVERLAP_SHARE, EP_OVERLAP_SMS, TP_OVERLAP_SMS, TP_OVERLAP_SPLITS
from .context import StageTimes, StepContext
from .layout import _stride


@dataclass(frozen=True)
class OverlapGemms:
    """One layer's tensor-parallel GEMMs on one rank (seconds per micro-batch, summed over its sub-blocks), as
    --tp-overlap runs them beside the TP collectives: whole on every SM (what the step times without the overlap),
    and split as TransformerEngine's userbuffers split them (each chunk at its own smaller shape's rate): the
    column-parallel forward and row-parallel input gradient in tp chunks (ring exchange), the row-parallel forward
    in TP_OVERLAP_SPLITS chunks (pipelined reduce-scatter)."""

    column_fwd: float
    column_dgrad: float
    column_wgrad: float
    row_fwd: float
    row_dgrad: float
    column_fwd_split: float  # tp chunks of tokens / tp rows
    row_fwd_split: float  # TP_OVERLAP_SPLITS chunks
    row_dgrad_split: float  # tp chunks


def add_tp_comm(t: StageTimes, ctx: StepContext, d_model: int, blocks: float, passes: int, fwd: float,
                bwd: float, gemms: OverlapGemms | None = None) -> None:
    """A layer's TP collectives into `t`: an all-gather before and a reduce-scatter after each of its `blocks`
    tensor-parallel sub-blocks (all-reduce without SP), in each of `passes` passes (forward, backward, the
    recomputed forward), the group placed by the rank order (its stride: members in other nodes pay the network).
    With --tp-overlap where the group sits in one NVLink domain (TransformerEngine's comm+GEMM overlap, userbuffers,
    runs on CUDA IPC / multicast handles within one node only: "only possible with single-node
    tensor-parallelism", NVIDIA/TransformerEngine#1071): given the layer's TP GEMMs (`gemms`), what the overlap
    costs beside the GEMMs of a step without it, per forward pass ``tp_overlap_forward`` and per backward pass
    ``tp_overlap_backward`` (the SMs its kernels hold, the split GEMMs' rates, what stays exposed); without them
    (the measured step model) only the excess of each pass's collectives over its GEMMs (`fwd`, `bwd` seconds,
    ``_tp_exposed``). Else all exposed. The formula path and the measured step model both time them here."""
    lay, net = ctx.lay, ctx.dev.network
    colls = comm.tp_collectives(ctx.tokens, d_model, ctx.act, lay.tp, sequence_parallel=lay.sequence_parallel,
                                passes=passes, stride=_stride(lay, "tp"),
                                gather_bytes=tp_gather_bytes(ctx.recipe.fp8_saved_inputs, ctx.recipe.saved_input_bytes))
    tpt = comm.total_seconds([replaced(c, {"count": c.count / 2 * blocks}) for c in colls], net)
    in_node = colls[0].intra_node(net)  # the group in one node: the overlap can hide its collectives
    if lay.tp_overlap and in_node and gemms is not None and len(colls) == 2:  # (the overlap needs SP: AG + RS)
        gather, scatter = (c.seconds(net) * blocks for c in colls)  # one pass's
        sms = ctx.dev.sm_count
        forward = tp_overlap_forward(gather, scatter, gemms, tp=lay.tp, sm_count=sms)
        t.tp = forward * (passes - 1) + tp_overlap_backward(gather, scatter, gemms, tp=lay.tp, sm_count=sms)
        t.comm_fwd += forward
    elif lay.tp_overlap and in_node:
        per_pass = tpt / passes
        t.tp = _tp_exposed(per_pass, fwd, passes - 1) + _tp_exposed(per_pass, bwd, 1)
        t.comm_fwd += _tp_exposed(per_pass, fwd, 1)
    else:
        t.tp = tpt
        t.comm_fwd += tpt / passes


def sm_margin_seconds(gemm: float, comm_sms: int, sm_count: int) -> float:
    """Seconds a GEMM of `gemm` seconds on all `sm_count` SMs loses when a communication kernel holds `comm_sms` of
    them while it runs (TransformerEngine's set_sm_margin: the GEMM is launched on the rest):

        extra = gemm x comm_sms / (sm_count - comm_sms)

    (a compute-bound GEMM's time goes as 1 / its SMs; on an H100's 132 SMs with TE's 16: +13.8 %)."""
    return gemm * comm_sms / (sm_count - comm_sms)


def ring_exchange_exposed(comm_seconds: float, split_gemm: float, tp: int) -> float:
    """Exposed seconds of a ring-exchange overlap (TE's CommOverlapP2P split_overlap_ag): the GEMM in tp chunks of
    `split_gemm` seconds in all, the first on this rank's own chunk, each of the tp - 1 chunks received (copy
    engines, `comm_seconds` in all) under the GEMM of the one before:

        exposed = max(0, comm - split_gemm x (tp - 1) / tp)."""
    return max(0.0, comm_seconds - split_gemm * (tp - 1) / tp)


def pipelined_rs_exposed(comm_seconds: float, split_gemm: float, splits: int) -> float:
    """Exposed seconds of a pipelined GEMM + reduce-scatter (TE's CommOverlap split_overlap_rs): the GEMM in `splits`
    chunks (`split_gemm` seconds in all, as it runs beside the communication kernel), each chunk's reduce-scatter
    (`comm_seconds` / splits) under the next chunk's GEMM; the last chunk's is exposed whole:

        exposed = comm / splits + (splits - 1) / splits x max(0, comm - split_gemm)."""
    return comm_seconds / splits + (splits - 1) / splits * max(0.0, comm_seconds - split_gemm)


def bulk_exposed(comm_seconds: float, gemm: float) -> float:
    """Exposed seconds of a bulk overlap (TE's CommOverlap bulk_overlap): a collective independent of the GEMM beside
    it runs whole on its own SMs while the GEMM runs: exposed = max(0, comm - gemm)."""
    return max(0.0, comm_seconds - gemm)


def tp_overlap_forward(gather: float, scatter: float, g: OverlapGemms, tp: int, sm_count: int) -> float:
    """What --tp-overlap adds to one forward pass of a layer beside its GEMMs run whole without it (`gather`,
    `scatter`: the pass's all-gathers and reduce-scatters, seconds): the column-parallel GEMMs in tp chunks under the
    ring-exchanged all-gather (copy engines: no SMs taken), the row-parallel GEMMs in TP_OVERLAP_SPLITS chunks on
    sm_count - TP_OVERLAP_SMS SMs under the pipelined reduce-scatter (TE's defaults, constants.TP_OVERLAP_SMS):

        row' = row_split + sm_margin_seconds(row_split)
        cost = (column_split - column) + (row' - row) + ring_exchange_exposed(gather, column_split)
               + pipelined_rs_exposed(scatter, row')."""
    row = g.row_fwd_split + sm_margin_seconds(g.row_fwd_split, TP_OVERLAP_SMS, sm_count)
    return (g.column_fwd_split - g.column_fwd + row - g.row_fwd
            + ring_exchange_exposed(gather, g.column_fwd_split, tp)
            + pipelined_rs_exposed(scatter, row, TP_OVERLAP_SPLITS))


def tp_overlap_backward(gather: float, scatter: float, g: OverlapGemms, tp: int, sm_count: int) -> float:
    """What --tp-overlap adds to one backward pass of a layer beside its GEMMs run whole without it: the output
    gradient's all-gather ring-exchanged under the row-parallel input-gradient GEMM in tp chunks (copy engines); the
    column-parallel input- and weight-gradient GEMMs in bulk overlap, each on sm_count - TP_OVERLAP_SMS SMs, the
    input gradient's reduce-scatter under the weight-gradient GEMM:

        dgrad' = column_dgrad + sm_margin_seconds(column_dgrad), wgrad' likewise
        cost = (dgrad' - column_dgrad) + (wgrad' - column_wgrad) + (row_dgrad_split - row_dgrad)
               + ring_exchange_exposed(gather, row_dgrad_split) + bulk_exposed(scatter, wgrad')."""
    dgrad = sm_margin_seconds(g.column_dgrad, TP_OVERLAP_SMS, sm_count)
    wgrad = sm_margin_seconds(g.column_wgrad, TP_OVERLAP_SMS, sm_count)
    return (dgrad + wgrad + g.row_dgrad_split - g.row_dgrad
            + ring_exchange_exposed(gather, g.row_dgrad_split, tp)
            + bulk_exposed(scatter, g.column_wgrad + wgrad))


def tp_gather_bytes(quantized_inputs: bool, input_bytes: float) -> float | None:
    """Bytes per element of sequence parallelism's all-gathers under a Transformer Engine FP8/FP4 recipe
    (`quantized_inputs`: the recipe's linears take quantized inputs): the quantized GEMM input, `input_bytes`
    (FP8 1, blockwise FP8 1 + 4/128, MXFP8 1 + 1/32, NVFP4 0.5 + 1/16, scales included). TE quantizes before it
    gathers: LayerNormLinear / Linear call ``gather_along_first_dim(ln_out, tp_group, quantizer=input_quantizer)``
    in the forward and again for the weight gradient, and ``grad_output_preprocess`` gathers the output gradient
    with the grad-output quantizer; ``gather_along_first_dim`` then all-gathers the FP8 / blockwise / MXFP8 / NVFP4
    data and scales (NVIDIA/TransformerEngine transformer_engine/pytorch/distributed.py, module/layernorm_linear.py,
    module/base.py @d0067d0). The reduce-scatters stay in the activation dtype. None (the activation bytes) for the
    other recipes."""
    return input_bytes if quantized_inputs else None


def add_ep_comm(t: StageTimes, ctx: StepContext, ep_fwd: float, ep_bwd: float) -> None:
    """A MoE layer's dispatch / combine all-to-alls (`ep_fwd`, `ep_bwd` seconds, a recomputed forward's included)
    into `t`: exposed, or with --ep-overlap ``ep_overlap_share`` of them under the other micro-batch's compute, whose
    SMs they hold slowing that compute by EP_OVERLAP_SMS / the device's SMs. Shared by the formula path and the
    measured step model."""
    if ctx.lay.ep_overlap:
        sms = EP_OVERLAP_SMS / ctx.dev.sm_count
        hidden = min(ep_fwd + ep_bwd, t.compute) * ep_overlap_share(ctx.lay.schedule)
        exposed = ep_fwd + ep_bwd - hidden + hidden * sms
        t.ep = exposed
        t.comm_fwd += exposed * ep_fwd / max(ep_fwd + ep_bwd, 1e-30)
    else:
        t.ep = ep_fwd + ep_bwd
        t.comm_fwd += ep_fwd


def ep_overlap_share(schedule: str) -> float:
    """The share of the expert all-to-alls --ep-overlap hides under the other micro-batch's compute, by pipeline
    schedule: under the V-shaped zb-v, DualPipeV's paired forward and backward chunks (DUALPIPE_EP_OVERLAP_SHARE,
    all of it: DeepSeek-V3 report sec. 3.2.1); under the others Megatron-Core's 1F1B A2A overlap
    (EP_OVERLAP_SHARE, calibrated on its one published pair)."""
    return DUALPIPE_EP_OVERLAP_SHARE if schedule == "zb-v" else EP_OVERLAP_SHARE


def _cp_exposed(ctx: StepContext, i: int, fwd: float, bwd: float) -> tuple[float, float]:
    """Exposed context-parallel communication of one layer (forward, backward), by ``Layout.cp_comm``."""
    spec, lay, net = ctx.spec, ctx.lay, ctx.dev.network
    cp, tp = lay.cp, lay.tp
    if cp == 1:
        return 0.0, 0.0
    T = ctx.tokens
    mla = spec.mla
    if mla is not None:
        kv_width = spec.n_heads / tp * (mla.qk_head_dim + mla.v_head_dim) / 2
    else:
        kv_width = max(1.0, spec.n_kv_heads / tp) * spec.d_head
    stride = _stride(lay, "cp")
    if lay.cp_comm == "p2p":  # ring: each of cp-1 steps sends this rank's K and V to the next under the last block
        send = comm.Collective("CP K/V ring step", "p2p", 2, 2 * T * kv_width * ctx.act, stride=stride)
        step_f = send.seconds(net)
        span = spec.span_tokens(i)
        steps = cp - 1 if not span else min(cp - 1, math.ceil(span / (ctx.seq / cp)))
        return (steps * max(0.0, step_f - fwd / cp), ring_backward_exposed(kv_send=step_f, step_compute=bwd / cp,
                                                                              hops=steps))
    if lay.cp_comm == "a2a+p2p":  # Megatron-Core's hierarchical CP (TE attention "a2a+p2p"): an all-to-all over
        # heads inside each group of a ranks, then the p2p ring over the cp / a groups, each step under its block
        a = lay.cp_a2a_size
        ring = cp // a
        width = spec.n_heads / tp * spec.d_head * 2 + 2 * kv_width
        a2a = comm.Collective("CP all-to-all (Q, K, V, O)", "all_to_all", a, T * width * ctx.act, stride=stride)
        # the ring carries the a-group's T x a tokens of K/V for heads / a (GQA: kv heads replicated below one)
        ring_width = kv_width * a if mla is not None else max(1.0, spec.n_kv_heads / tp / a) * spec.d_head * a
        send = comm.Collective("CP K/V ring step", "p2p", 2, 2 * T * ring_width * ctx.act,
                               stride=stride * a)
        step_f = send.seconds(net)
        span = spec.span_tokens(i)
        steps = ring - 1 if not span else min(ring - 1, math.ceil(span / (ctx.seq / ring)))
        return (a2a.seconds(net) + steps * max(0.0, step_f - fwd / ring),
                a2a.seconds(net) + ring_backward_exposed(kv_send=step_f, step_compute=bwd / ring, hops=steps))
    if lay.cp_comm == "all-gather":  # Llama 3: K and V gathered before the kernel, exposed on the critical path;
        # TE's AttnFuncWithCPAndKVAllGather (context_parallel.py @d0067d0): gathered in the forward (lines 3215-3216),
        # gathered again in the backward (3788-3789) and dK, dV reduce-scattered after it (4107-4123)
        fwd_c, bwd_c = comm.cp_collectives(T, kv_width, ctx.act, cp, stride)
        return fwd_c.seconds(net), bwd_c.seconds(net)
    # a2a (Ulysses): Q, K, V in and O out over heads, forward; their gradients backward; all exposed
    width = spec.n_heads / tp * spec.d_head * 2 + 2 * kv_width
    a2a = comm.Collective("CP all-to-all (Q, K, V, O)", "all_to_all", cp, T * width * ctx.act, stride=stride)
    both = a2a.seconds(net)
    return both, both


def ring_backward_exposed(kv_send: float, step_compute: float, hops: int) -> float:
    """Exposed seconds of a ring attention's backward sends on one rank: TransformerEngine's
    AttnFuncWithCPAndKVP2P.backward issues, before each step's kernel, the send of what the next rank needs: K and V
    alone before the first step, K and V with the dK/dV accumulated so far before the middle steps, dK/dV alone
    before the last (which carries them home), each under that step's kernel (context_parallel.py @d0067d0 lines
    2459-2496). With `hops` steps that need a neighbour's K/V (cp - 1, fewer under a window), a send of K/V taking
    `kv_send` seconds and a step's backward `step_compute`:

        exposed = 2 x max(0, kv_send - step_compute) + (hops - 1) x max(0, 2 kv_send - step_compute)

    (the same bytes as 2 (cp - 1) sends of K/V; the first and last ride under a whole step each)."""
    if hops <= 0:
        return 0.0
    return 2 * max(0.0, kv_send - step_compute) + (hops - 1) * max(0.0, 2 * kv_send - step_compute)


def _tp_exposed(comm_per_pass: float, gemm_per_pass: float, passes: int) -> float:
    """Exposed TP time of `passes` passes when each pass's all-gathers and reduce-scatters run under its own
    projection GEMMs (TransformerEngine's userbuffer overlap, Megatron-LM --tp-comm-overlap; torchtitan's async
    TP): the GEMMs are split into tp chunks and each chunk's exchange hides behind the previous chunk's matmul,
    so only the excess of communication over matmul stays on the critical path. The SMs and copy engines the
    overlap borrows are not charged (TE's ring-exchange mode moves data with copy engines)."""
    return passes * max(0.0, comm_per_pass - gemm_per_pass)


def p2p_seconds(ctx: StepContext) -> float:
    """Seconds of one micro-batch's activation sent to the next pipeline rank (``comm.pp_collectives``), the sends'
    group placed by the pp stride (and the TP group's, whose ranks scatter and gather it)."""
    lay = ctx.lay
    return comm.total_seconds(comm.pp_collectives(ctx.tokens, ctx.spec.d_model, ctx.act, lay.tp,
                                                  sequence_parallel=lay.sequence_parallel, stride=_stride(lay, "pp"),
                                                  tp_stride=_stride(lay, "tp")), ctx.dev.network)
