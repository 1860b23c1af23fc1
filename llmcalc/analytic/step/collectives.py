"""The collectives of one layer and where their groups sit: TP (and its overlap), CP, EP all-to-alls, the pipeline's
sends."""

from __future__ import annotations

import math

from ...records import replaced
from .. import comm
from .constants import DUALPIPE_EP_OVERLAP_SHARE, EP_OVERLAP_SHARE, EP_OVERLAP_SMS
from .context import StageTimes, StepContext
from .layout import _stride


def add_tp_comm(t: StageTimes, ctx: StepContext, d_model: int, blocks: float, passes: int, fwd: float,
                bwd: float) -> None:
    """A layer's TP collectives into `t`: an all-gather before and a reduce-scatter after each of its `blocks`
    tensor-parallel sub-blocks (all-reduce without SP), in each of `passes` passes (forward, backward, the
    recomputed forward), the group placed by the rank order (its stride: members in other nodes pay the network);
    with --tp-overlap each pass's share under its GEMMs (`fwd`, `bwd`: the forward's and the backward's GEMM
    seconds, ``_tp_exposed``) where the group sits in one NVLink domain, else all exposed: TransformerEngine's
    comm+GEMM overlap (userbuffers) runs on CUDA IPC / multicast handles within one node only ("only possible with
    single-node tensor-parallelism", NVIDIA/TransformerEngine#1071). The formula path and the measured step model
    (analytic/measured_step.py) both time them here."""
    lay, net = ctx.lay, ctx.dev.network
    colls = comm.tp_collectives(ctx.tokens, d_model, ctx.act, lay.tp, sequence_parallel=lay.sequence_parallel,
                                passes=passes, stride=_stride(lay, "tp"),
                                gather_bytes=tp_gather_bytes(ctx.recipe.fp8_saved_inputs, ctx.recipe.saved_input_bytes))
    tpt = comm.total_seconds([replaced(c, {"count": c.count / 2 * blocks}) for c in colls], net)
    in_node = colls[0].intra_node(net)  # the group in one node: the overlap can hide its collectives
    if lay.tp_overlap and in_node:
        per_pass = tpt / passes
        t.tp = _tp_exposed(per_pass, fwd, passes - 1) + _tp_exposed(per_pass, bwd, 1)
        t.comm_fwd += _tp_exposed(per_pass, fwd, 1)
    else:
        t.tp = tpt
        t.comm_fwd += tpt / passes


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
