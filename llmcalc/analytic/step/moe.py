"""One MoE block on this rank: router, the local experts' grouped GEMMs, shared experts, permutes, dispatch/combine."""

from __future__ import annotations

from .. import comm
from .cache import _cached, _token
from .context import StepContext
from .layout import Layout, _stride


def routed_tokens(tokens: float, lay: Layout) -> float:
    """The tokens this rank routes (its router and dispatch read): with expert all-to-alls under sequence parallelism
    its 1/tp shard of the micro-batch's `tokens`, else all of them (a tensor-parallel MoE block reads them whole)."""
    return tokens / lay.tp if lay.alltoall and lay.sequence_parallel else tokens


def expert_rows(tokens: float, top_k: float, n_experts: int, lay: Layout) -> float:
    """Rows each local expert receives per micro-batch of `tokens` tokens routed `top_k` ways over `n_experts`: with
    expert all-to-alls the etp x ep ranks' tokens (each rank's 1/tp) routed to this rank's E/ep experts,
    T·etp/tp·k·ep/E, times ``moe_imbalance`` on the most loaded rank; without (ep 1, etp = tp: every rank holds every
    expert, its tokens whole) T·k/E. Balanced routing (Megatron-Core's --moe-router-force-load-balancing)."""
    if lay.alltoall:
        return tokens * lay.expert_tp / lay.tp * top_k * lay.ep / n_experts * lay.moe_imbalance
    return tokens * top_k / n_experts


def permute_bytes(local_tokens: float, top_k: float, width: float, act: float, imbalance: float) -> float:
    """HBM bytes of one forward's permute (the rank's `local_tokens` gathered into expert order) and unpermute (their
    `top_k` copies, `imbalance` x on the most loaded rank, scattered back and weighted by the router's
    probabilities): 2·T·D·a + 2·T·k·D·a·imbalance for tokens of `width` D and `act` a bytes per element."""
    return 2 * local_tokens * width * act + 2 * local_tokens * top_k * width * act * imbalance


def _moe_cost(ctx: StepContext, parts: dict[str, float], rec: frozenset[str]) -> dict[str, float]:
    """One MoE layer on this rank: router, the local experts as one grouped GEMM of the rows each receives
    (balanced routing times ``moe_imbalance`` on the most loaded rank), shared experts like a dense MLP,
    permute/unpermute and the activation as memory-bound passes, and the dispatch/combine all-to-alls (Megatron-
    Core's alltoall / flex dispatcher; with ep 1 and etp = tp the block is tensor-parallel like a dense MLP)."""
    spec, lay = ctx.spec, ctx.lay
    T, D, tp, act = ctx.tokens, ctx.spec.d_model, lay.tp, ctx.act
    etp, ep, E, k = lay.expert_tp, lay.ep, spec.n_experts, spec.n_experts_per_token
    alltoall = lay.alltoall
    fwd = dgrad = wgrad = elem = redo = 0.0  # summed in this order (the first term added to 0.0)
    local_tokens = routed_tokens(T, lay)
    f, d, w = ctx.gemm(local_tokens, D, E)  # router (replicated)
    fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
    rows = expert_rows(T, k, E, lay)
    F = spec.d_ff_expert / etp
    up = (2 if spec.gated else 1) * F
    groups = E / ep
    De = spec.expert_d_in  # the MoE latent where there is one: the experts, permutes and dispatch carry it
    if spec.moe_latent_size:  # NemotronHMoE's fc1_latent_proj (D -> latent) and fc2_latent_proj, on every token
        f, d, w = ctx.gemm(local_tokens, D, De)
        f2, d2, w2 = ctx.gemm(local_tokens, De, D)
        fwd, dgrad, wgrad = fwd + (f + f2), dgrad + (d + d2), wgrad + (w + w2)
    f1, d1, w1 = ctx.gemm(rows, De, up, batch=groups)
    f2, d2, w2 = ctx.gemm(rows, F, De, batch=groups)
    fwd, dgrad, wgrad = fwd + (f1 + f2), dgrad + (d1 + d2), wgrad + (w1 + w2)
    act_bytes = groups * rows * (3 if spec.gated else 2) * F * act
    elem += act_bytes
    if "moe" in rec:
        redo += f1 + f2 + ctx.stream(act_bytes)
    elif "moe_act" in rec:
        redo += ctx.stream(act_bytes)
    if spec.n_shared_experts and parts.get("shared_experts"):
        width = parts["shared_experts"] / (2 * T * D * (3 if spec.gated else 2)) / tp
        f, d, w = ctx.gemm(T, D, (2 if spec.gated else 1) * width)
        f2, d2, w2 = ctx.gemm(T, width, D)
        fwd, dgrad, wgrad = fwd + (f + f2), dgrad + (d + d2), wgrad + (w + w2)
        elem += (3 if spec.gated else 2) * T * width * act
        if rec & {"shared_experts", "moe"}:
            redo += f + f2
    one = 0.0  # dispatch + combine of one pass
    if alltoall:  # permute (gather into expert order) and unpermute (scatter back, times the router's probs)
        elem += permute_bytes(local_tokens, k, De, act, lay.moe_imbalance)
        net = ctx.dev.network
        stride = _stride(lay, "ep", True)  # lay.expert_strides()["ep"]
        etp_stride = _stride(lay, "tp", True)
        one = _cached("params", ("ep comm", local_tokens, lay.moe_imbalance, k, E, De, act, ep, stride, etp,
                                 lay.ep_dispatcher, etp_stride, _token(net)),
                      lambda: dispatch_seconds(local_tokens, k, E, De, act, lay=lay, net=net))
    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad, "elem": elem, "ep_fwd": one, "ep_bwd": one, "redo": redo}


def dispatch_seconds(local_tokens: float, top_k: int, n_experts: int, width: int, act: float, lay: Layout,
                     net: comm.Network) -> float:
    """Seconds of one pass's dispatch and combine of this rank's `local_tokens` routed `top_k` ways (x moe_imbalance on
    the most loaded rank), `width` elements of `act` bytes each: the all-to-alls over the ep group at its stride in the
    rank order, with the expert-tensor-parallel group's all-gather / reduce-scatter (``comm.ep_collectives``); with
    --ep-dispatcher deepep one copy per remote node forwarded over NVLink (``comm.deepep_seconds``, over `n_experts`)
    and the same ETP collectives."""
    stride, etp_stride = lay.expert_strides()["ep"], lay.expert_strides()["tp"]
    colls = comm.ep_collectives(local_tokens * lay.moe_imbalance, top_k, width, act, ep=lay.ep, stride=stride,
                                passes=1, etp=lay.expert_tp, etp_stride=etp_stride)
    if lay.ep_dispatcher == "deepep":
        return 2 * comm.deepep_seconds(local_tokens * lay.moe_imbalance, top_k, n_experts, width, act, ep=lay.ep,
                                       stride=stride, net=net) + comm.total_seconds(colls[1:], net)
    return comm.total_seconds(colls, net)
