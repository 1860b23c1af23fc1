"""One MoE block on this rank: router, the local experts' grouped GEMMs, shared experts, permutes, dispatch/combine.

Each term is its own function below (formula, convention, source in its docstring); ``_moe_cost`` sums them for one
layer and one micro-batch, in Megatron-Core's order (moe/router.py, moe/token_dispatcher.py, moe/experts.py):
route, permute, dispatch, sort by local expert, the grouped GEMMs, unsort, combine, unpermute."""

from __future__ import annotations

import math

from .. import comm
from .context import StepContext
from .layout import Layout, _stride

# Memory-bound passes the router makes over the fp32 [tokens, experts] scores in one forward, each a read and a
# write of 4·T·E bytes (Megatron-Core moe/router.py, moe_utils.py topk_softmax_with_capacity and
# switch_load_balancing_loss_func, unfused): the logits cast to fp32, the score function (softmax or sigmoid),
# top-k, the probs scattered into [T, E] and the routing map, and the auxiliary loss's own scores and their sum
# over tokens. --moe-router-fusion folds them into fewer kernels but reads and writes the same tensors.
ROUTER_SCORE_PASSES = 6
ROUTER_SCORE_BYTES = 4  # fp32 scores (Megatron's --moe-router-dtype fp32, the recommended setting)

def routed_tokens(tokens: float, lay: Layout) -> float:
    """The tokens this rank routes (its router and dispatch read): with expert all-to-alls under sequence parallelism
    its 1/tp shard of the micro-batch's `tokens`, else all of them (a tensor-parallel MoE block reads them whole)."""
    return tokens / lay.tp if lay.alltoall and lay.sequence_parallel else tokens


def expert_rows(tokens: float, top_k: float, n_experts: int, lay: Layout, imbalance: float = 1.0) -> float:
    """Rows each local expert receives per micro-batch of `tokens` tokens routed `top_k` ways over `n_experts`: with
    expert all-to-alls the etp x ep ranks' tokens (each rank's 1/tp) routed to this rank's E/ep experts,
    T·etp/tp·k·ep/E, times `imbalance` on the most loaded rank (``rows_imbalance``); without (ep 1, etp = tp: every
    rank holds every expert, its tokens whole) T·k/E. Balanced routing (Megatron-Core's
    --moe-router-force-load-balancing)."""
    if lay.alltoall:
        return tokens * lay.expert_tp / lay.tp * top_k * lay.ep / n_experts * imbalance
    return tokens * top_k / n_experts


def rows_imbalance(tokens: float, top_k: int, n_experts: int, lay: Layout) -> float:
    """The most loaded EP rank's rows over the mean (1 without expert all-to-alls): the larger of
    ``expected_max_load`` under balanced routing of the rank's T·etp/tp·k rows and a measured --moe-imbalance."""
    if not lay.alltoall:
        return 1.0
    rank_rows = tokens * lay.expert_tp / lay.tp * top_k
    return max(lay.moe_imbalance, expected_max_load(rank_rows, lay.ep, n_experts, top_k))

def router_bytes(tokens: float, n_experts: int, passes: int = ROUTER_SCORE_PASSES,
                 score_bytes: float = ROUTER_SCORE_BYTES) -> float:
    """HBM bytes of the router's memory-bound work in one forward beside its GEMM: `passes` read+write passes over
    the [tokens, n_experts] scores of `score_bytes` each, 2·passes·T·E·score_bytes (ROUTER_SCORE_PASSES)."""
    return 2 * passes * tokens * n_experts * score_bytes


def permute_bytes(tokens: float, top_k: int, width: float, act_bytes: float, *, local_experts: float, ep: int,
                  dispatcher: str, imbalance: float = 1.0, gathered: float = 0.0) -> float:
    """HBM bytes of the token permutations of one MoE layer's forward on this rank, `width` elements per token of
    `act_bytes` each (W = width·act_bytes), T = `tokens` routed here, k = `top_k` (Megatron-Core
    moe/token_dispatcher.py with --moe-permute-fusion: each permutation one gather/scatter pass):

    - alltoall / deepep: permute (read T rows once, write their k·T copies in expert order), (1 + k)·T·W; with
      ep > 1 and more than one local expert the rows received, k·T·`imbalance` on the most loaded rank, are sorted
      by local expert after the dispatch and back before the combine (``sort_chunks_by_idxs``), 2·k·T·W·imbalance
      each; unpermute (read the k·T rows and the
      probs, scatter-add into T rows), (k + 1)·T·W. DeepEP's dispatch writes its output already grouped by
      expert, so it has no chunk sort.
    - allgather: every rank holds the `gathered` rows of its expert group (G = T·ep·etp) and picks those routed to
      its experts, R = k·T·imbalance rows: permute (G + R)·W, unpermute into a zeroed [G] buffer (R + G)·W.
    The backward moves the same bytes again (the caller's elementwise convention doubles the forward)."""
    w = width * act_bytes
    received = top_k * tokens * imbalance
    if dispatcher == "allgather":
        return 2 * (gathered + received) * w
    out = 2 * (1 + top_k) * tokens * w
    if dispatcher == "alltoall" and ep > 1 and local_experts > 1:
        out += 2 * 2 * received * w
    return out


def expected_max_load(rows: float, ranks: int, n_experts: int, top_k: int) -> float:
    """Rows on the most loaded of `ranks` EP ranks over the mean `rows`, under balanced (uniform) routing. Each of
    the ranks·rows/top_k tokens of the expert group sends a rank holding E/ranks of the E experts a hypergeometric
    number of its k distinct copies (mean k/n, variance (k/n)(1 - 1/n)(E - k)/(E - 1)), so a rank's load has mean
    m = rows and variance σ² = m(1 - 1/n)(E - k)/(E - 1); the largest of n such (nearly normal) loads is
    m + σ·z_n with z_n the expected largest of n standard normals, Blom's Φ⁻¹((n - 0.375)/(n + 0.25)) (within 1 %
    for n >= 2). Ratio: 1 + z_n·σ/m. The grouped GEMMs, the chunk sorts and the combine wait for the most loaded
    rank; a measured ratio of real routing (--moe-imbalance) replaces it where larger."""
    n = ranks
    if n <= 1 or rows <= 0:
        return 1.0
    from statistics import NormalDist  # here: the CLI's start-up does not import statistics

    z = NormalDist().inv_cdf((n - 0.375) / (n + 0.25))
    sigma = math.sqrt(rows * (1 - 1 / n) * (n_experts - top_k) / max(1, n_experts - 1))
    return 1.0 + z * sigma / rows


def allgather_collectives(tokens: float, d_model: int, act_bytes: float, *, ep: int, etp: int, stride: int,
                          passes: int = 1) -> list[comm.Collective]:
    """Megatron-Core's MoEAllGatherTokenDispatcher for one MoE layer: the tokens of every rank in the expert group
    (EP x ETP, "this allgather spans the communication domain of TP*EP") all-gathered before the experts, a
    [tokens·ep·etp, d_model] buffer, and the experts' partial outputs reduce-scattered back after them (the same
    buffer). Unlike the all-to-all its bytes do not grow with top-k."""
    n = ep * etp
    s = tokens * n * d_model * act_bytes
    return [comm.Collective("EP all-gather of tokens (allgather dispatcher)", "all_gather", n, s, count=passes,
                            stride=stride),
            comm.Collective("EP reduce-scatter of expert outputs (allgather dispatcher)", "reduce_scatter", n, s,
                            count=passes, stride=stride)]


def dispatch_seconds(routed: float, top_k: int, n_experts: int, width: int, act: float, *, lay: Layout,
                     net: comm.Network) -> float:
    """Seconds of one pass's dispatch and combine of `routed` tokens of this rank (the most loaded rank's share),
    `top_k` copies each, `width` elements of `act` bytes, by the layout's dispatcher: alltoall, the all-to-alls over
    the ep group at its stride in the rank order with the expert-tensor-parallel group's all-gather / reduce-scatter
    (``comm.ep_collectives``); deepep, one copy per remote node forwarded over NVLink (``comm.deepep_seconds``, over
    `n_experts`) and the same ETP collectives; allgather, ``allgather_collectives`` over the expert group."""
    ep, etp = lay.ep, lay.expert_tp
    stride, etp_stride = _stride(lay, "ep", True), _stride(lay, "tp", True)  # lay.expert_strides()
    if lay.ep_dispatcher == "allgather":
        return comm.total_seconds(allgather_collectives(routed, width, act, ep=ep, etp=etp,
                                                        stride=etp_stride if etp > 1 else stride), net)
    colls = comm.ep_collectives(routed, top_k, width, act, ep=ep, stride=stride, passes=1, etp=etp,
                                etp_stride=etp_stride)
    if lay.ep_dispatcher == "deepep":
        return 2 * comm.deepep_seconds(routed, top_k, n_experts, width, act, ep=ep, stride=stride,
                                       net=net) + comm.total_seconds(colls[1:], net)
    return comm.total_seconds(colls, net)


def _moe_cost(ctx: StepContext, parts: dict[str, float],  # long: terms in order
              rec: frozenset[str]) -> dict[str, float]:
    """One MoE layer on this rank: the router (GEMM + score passes, ``router_bytes``), the local experts as one
    grouped GEMM of the rows the most loaded rank receives (the mean times the larger of ``expected_max_load``
    and ``moe_imbalance``), shared experts like a dense MLP, the permutations (``permute_bytes``) and the activation
    as memory-bound passes, and the dispatch/combine (``dispatch_seconds``: Megatron-Core's alltoall, allgather or
    flex/DeepEP dispatcher; with ep 1 and etp = tp the block is tensor-parallel like a dense MLP)."""
    spec, lay = ctx.spec, ctx.lay
    T, D, tp, act = ctx.tokens, ctx.spec.d_model, lay.tp, ctx.act
    etp, ep, E, k = lay.expert_tp, lay.ep, spec.n_experts, spec.n_experts_per_token
    alltoall = lay.alltoall
    fwd = dgrad = wgrad = elem = redo = 0.0  # summed in this order (the first term added to 0.0)
    local_tokens = routed_tokens(T, lay)
    f, d, w = ctx.gemm(local_tokens, D, E)  # router (replicated)
    fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
    elem += router_bytes(local_tokens, E)
    imbalance = rows_imbalance(T, k, E, lay)
    rows = expert_rows(T, k, E, lay, imbalance)  # rows per local expert on the most loaded rank
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
    if alltoall:
        elem += permute_bytes(local_tokens, k, De, act, local_experts=groups, ep=ep, dispatcher=lay.ep_dispatcher,
                              imbalance=imbalance, gathered=local_tokens * ep * etp)
        gathered = lay.ep_dispatcher == "allgather"  # every rank's tokens, whatever the routing
        one = dispatch_seconds(local_tokens * (1.0 if gathered else imbalance), k, E, De, act, lay=lay,
                               net=ctx.dev.network)
    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad, "elem": elem, "ep_fwd": one, "ep_bwd": one, "redo": redo}
