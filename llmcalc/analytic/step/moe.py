"""One MoE block on this rank: router, the local experts' grouped GEMMs, shared experts, permutes, dispatch/combine."""

from __future__ import annotations

from .. import comm
from .context import _Ctx
from .layout import _stride


def _moe_cost(ctx: _Ctx, parts: dict[str, float], rec: frozenset[str]) -> dict[str, float]:
    """One MoE layer on this rank: router, the local experts as one grouped GEMM of the rows each receives
    (balanced routing times ``moe_imbalance`` on the most loaded rank), shared experts like a dense MLP,
    permute/unpermute and the activation as memory-bound passes, and the dispatch/combine all-to-alls (Megatron-
    Core's alltoall / flex dispatcher; with ep 1 and etp = tp the block is tensor-parallel like a dense MLP)."""
    spec, lay = ctx.spec, ctx.lay
    T, D, tp, act = ctx.tokens, ctx.spec.d_model, lay.tp, ctx.act
    etp, ep, E, k = lay.expert_tp, lay.ep, spec.n_experts, spec.n_experts_per_token
    alltoall = lay.alltoall
    fwd = dgrad = wgrad = elem = redo = 0.0  # summed in this order (the first term added to 0.0)
    local_tokens = T / tp if alltoall and lay.sequence_parallel else T  # tokens this rank routes
    f, d, w = ctx.gemm(local_tokens, D, E)  # router (replicated)
    fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
    rows = T * etp / tp * k * ep / E * lay.moe_imbalance if alltoall else T * k / E  # rows per local expert
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
        elem += 2 * local_tokens * De * act + 2 * local_tokens * k * De * act * lay.moe_imbalance
        net = ctx.dev.network
        stride = _stride(lay, "ep", True)  # lay.expert_strides()["ep"]
        etp_stride = _stride(lay, "tp", True)

        colls = comm.ep_collectives(local_tokens * lay.moe_imbalance, k, De, act, ep=ep, stride=stride, passes=1,
                                    etp=etp, etp_stride=etp_stride)
        if lay.ep_dispatcher == "deepep":  # one copy per remote node, forwarded over NVLink; ETP collectives kept
            one = 2 * comm.deepep_seconds(local_tokens * lay.moe_imbalance, k, E, De, act, ep=ep, stride=stride,
                                          net=net) + comm.total_seconds(colls[1:], net)
        else:
            one = comm.total_seconds(colls, net)
    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad, "elem": elem, "ep_fwd": one, "ep_bwd": one, "redo": redo}
