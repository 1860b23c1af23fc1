"""Collective communication: bytes each rank moves, and alpha-beta times on a two-tier network.

Volumes (what one rank sends, for a buffer of S bytes, the *unsharded* size of the tensor; ring
algorithms, the convention of nccl-tests' PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests):
- all-reduce        2(n-1)/n · S    (reduce-scatter then all-gather)
- all-gather        (n-1)/n · S     (each rank ends with all n shards of S/n)
- reduce-scatter    (n-1)/n · S
- all-to-all        (n-1)/n · S     (each rank keeps 1/n of its S and sends the rest)
- send/recv (p2p)   S
These are the "bus bandwidth" factors of nccl-tests: busbw = algbw x factor, so time = S x factor /
busbw. A measured run (torch profiler, FSDP2/DTensor traces) can be held against them collective by
collective: ``Collective.bytes_per_rank`` is what a rank puts on the wire.

Time (alpha-beta, Hockney 1994): t = steps x alpha + bytes_per_rank / bandwidth, the bandwidth of the tier
times the share NCCL reaches on it (NCCL_BUS_EFFICIENCY on NVLink, NCCL_NET_EFFICIENCY across nodes),
with steps = 2(n-1) for a ring all-reduce, n-1 for the others, 1 for p2p. A group whose n ranks sit in
one node (stride x n <= GPUs per node) uses the scale-up link (NVLink/NVSwitch), otherwise the
scale-out network, one NIC per GPU. A ring collective (all-reduce, all-gather, reduce-scatter) whose
group has g = GPUs per node / stride members in each node crosses the network through all g of their
NICs: NCCL builds each ring through a node's GPUs on NVLink, leaving it once, and spreads its channels
(rings) over the node's NICs, so each NIC carries 1/g of the ring's bytes and the scale-out bandwidth per
rank is g x the per-GPU NIC share (capped by the scale-up link). Data parallelism at tp = 1 on DGX A100
(8 HDR NICs) thus sees 8 x 25 GB/s; at stride >= GPUs per node (g = 1) each rank has only its own NIC.
All-to-all and p2p send each rank's bytes through its own NIC (g = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LlmcalcError

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")

# Fraction of the link bandwidth that NCCL's large-message bus bandwidth reaches. Source: nccl-tests
# all_reduce_perf on DGX A100 (NVSwitch, 300 GB/s per direction) peaks near 230-240 GB/s busbw
# (NVIDIA's published DGX A100 figure: 230 GB/s), i.e. ~0.78 of the link; the same ratio is used for
# the scale-up link of every accelerator preset.
NCCL_BUS_EFFICIENCY = 0.78
# The same share across nodes, over InfiniBand/RoCE NICs: reported all_reduce_perf runs between A100 nodes reach
# 84.8-96 GB/s busbw of 100 GB/s line rate with 4 HDR NICs (NVIDIA/nccl-tests#119), 91 of 100 (nccl-tests#100),
# 86 of 96 (NVIDIA/nccl#1048): ~0.9. The NIC path is a DMA engine streaming over PCIe; NVLink rings lose more
# to the reduction kernels that drive them.
NCCL_NET_EFFICIENCY = 0.9


def bus_factor(kind: str, n: int) -> float:
    """Bytes on the wire per rank, per byte of the (unsharded) buffer: the nccl-tests busbw factor."""
    if kind not in KINDS:
        raise LlmcalcError(f"unknown collective {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(n, int) or n < 1:
        raise LlmcalcError(f"a collective needs a whole number of ranks >= 1, got {n!r}")
    if kind == "p2p":
        return 1.0
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n


def latency_steps(kind: str, n: int) -> int:
    """Sequential message steps of the ring algorithm (the alpha term's multiplier)."""
    if kind == "p2p":
        return 1
    if n == 1:
        return 0
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


@dataclass(frozen=True)
class Network:
    """A cluster's two tiers, per GPU and per direction (bytes/s, seconds)."""

    gpus_per_node: int
    scale_up_bandwidth: float  # NVLink/NVSwitch (ICI for TPUs), per GPU per direction
    scale_out_bandwidth: float  # the GPU's share of the inter-node network, per direction
    scale_up_latency: float
    scale_out_latency: float
    source: str = ""


def network_from_preset(key: str, data: dict) -> Network | None:
    """The "network" block of a hardware preset (units in key names), or None when it has none."""
    block = data.get("network")
    if block is None:
        return None
    try:
        return Network(int(block["gpus_per_node"]), float(block["scale_up_gb_per_s"]) * 1e9,
                       float(block["scale_out_gb_per_s"]) * 1e9, float(block["scale_up_latency_us"]) * 1e-6,
                       scale_out_latency=float(block["scale_out_latency_us"]) * 1e-6, source=block.get("_source", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise LlmcalcError(f"hardware preset {key!r} has a malformed network block: {exc!r}") from None


@dataclass(frozen=True)
class Collective:
    """One collective a rank takes part in, `count` times per training step."""

    name: str  # what it carries, e.g. "TP all-reduce of the attention output"
    kind: str  # one of KINDS
    group: int  # ranks in the group (n)
    buffer_bytes: float  # S: the unsharded tensor (for p2p: the message)
    count: float = 1.0  # how many per step
    stride: int = 1  # rank distance between group members (TP 1, then CP, PP, DP outward)

    @property
    def bytes_per_rank(self) -> float:
        """Bytes one rank sends for one call: S x bus factor."""
        return self.buffer_bytes * bus_factor(self.kind, self.group)

    @property
    def bytes_per_step(self) -> float:
        return self.bytes_per_rank * self.count

    def intra_node(self, net: Network) -> bool:
        span = self.stride * (self.group if self.kind != "p2p" else 2)
        return span <= net.gpus_per_node

    def nics_per_node(self, net: Network) -> int:
        """NICs a ring collective of this group spreads its inter-node bytes over (see the module docstring)."""
        if self.kind in ("all_to_all", "p2p"):
            return 1
        return max(1, min(self.group, net.gpus_per_node // self.stride))

    def seconds(self, net: Network) -> float:
        """Alpha-beta time of one call."""
        if self.kind != "p2p" and self.group == 1:
            return 0.0
        up = net.scale_up_bandwidth * NCCL_BUS_EFFICIENCY
        if self.intra_node(net):
            bw, alpha = up, net.scale_up_latency
        else:
            bw = min(up, self.nics_per_node(net) * net.scale_out_bandwidth * NCCL_NET_EFFICIENCY)
            alpha = net.scale_out_latency
        return latency_steps(self.kind, self.group) * alpha + self.bytes_per_rank / bw


# --- what each parallelism sends: the general volume functions ------------------------------------


def tp_collectives(tokens: float, d_model: int, act_bytes: float, tp: int, sequence_parallel: bool,
                   passes: int) -> list[Collective]:
    """Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; with sequence parallelism Korthikanti
    et al. 2022) for one layer and one micro-batch of `tokens` tokens on this rank's sequence shard.

    Per pass (forward, backward, and the forward re-run by full recomputation): two all-reduces of the
    [tokens, d_model] activation (after attention and after the MLP), or with sequence parallelism an
    all-gather before and a reduce-scatter after each of the two (the same bytes: AR = RS + AG).
    """
    s = tokens * d_model * act_bytes
    if sequence_parallel:
        return [Collective("TP all-gather (sequence parallel)", "all_gather", tp, s, 2 * passes),
                Collective("TP reduce-scatter (sequence parallel)", "reduce_scatter", tp, s, 2 * passes)]
    return [Collective("TP all-reduce", "all_reduce", tp, s, 2 * passes)]


def cp_collectives(tokens_per_rank: float, kv_width: float, act_bytes: float, cp: int,
                   stride: int) -> list[Collective]:
    """Context parallelism, ring attention (Liu et al. 2023; Megatron-LM CP) for one layer and one
    micro-batch: in the forward each rank passes its K and V shard ([tokens/cp, kv_width] each) around
    the ring, cp-1 hops; the backward passes K and V again and their gradients dK, dV (twice the forward).
    Written as an all-gather of K and V (what Llama 3's all-gather CP does; same bytes as the ring)."""
    kv = 2 * tokens_per_rank * cp * kv_width * act_bytes  # unsharded K and V of the whole sequence
    return [Collective("CP K/V exchange (forward)", "all_gather", cp, kv, count=1, stride=stride),
            Collective("CP K/V + dK/dV exchange (backward)", "all_gather", cp, 2 * kv, count=1, stride=stride)]


def ep_collectives(tokens: float, top_k: int, d_model: int, act_bytes: float, ep: int, stride: int,
                   passes: int, etp: int = 1) -> list[Collective]:
    """Expert parallelism (GShard, Lepikhin et al. 2020) for one MoE layer and one micro-batch of `tokens`
    tokens on this rank (its sequence-parallel share), as Megatron-Core's alltoall token dispatcher moves
    them: each pass has two all-to-alls over the ep group (dispatch the tokens' top-k copies to their
    experts, combine the results), each over a [tokens·top_k, d_model] buffer; with expert tensor
    parallelism the etp ranks of an expert then all-gather their routed tokens before the expert MLP and
    reduce-scatter its output (buffer [etp·tokens·top_k, d_model], on NVLink: etp ranks are adjacent)."""
    s = tokens * top_k * d_model * act_bytes
    out = [Collective("EP all-to-all (dispatch + combine)", "all_to_all", ep, s, count=2 * passes, stride=stride)]
    if etp > 1:
        out += [Collective("ETP all-gather of routed tokens", "all_gather", etp, etp * s, count=passes),
                Collective("ETP reduce-scatter of expert outputs", "reduce_scatter", etp, etp * s, count=passes)]
    return out


def pp_collectives(tokens: float, d_model: int, act_bytes: float, tp: int, sequence_parallel: bool,
                   stride: int) -> list[Collective]:
    """Pipeline parallelism: one activation [tokens, d_model] per micro-batch to the next stage (and its
    gradient back). Each of the tp ranks sends only its 1/tp shard (Narayanan et al. 2021 sec. 4.1, the
    scatter/gather optimisation, Megatron-LM's default since 2021: bsh/t per pair of stages). With sequence
    parallelism the activation is already sharded; without it the receiving stage rebuilds the whole
    activation with an all-gather over NVLink (its tp ranks; stride 1)."""
    s = tokens * d_model * act_bytes
    out = [Collective("PP send/recv of activations", "p2p", 2, s / tp, count=1, stride=stride)]
    if tp > 1 and not sequence_parallel:
        out.append(Collective("PP scatter/gather: all-gather after the receive", "all_gather", tp, s, count=1))
    return out


def dp_collectives(params: float, grad_bytes: float, weight_bytes: float, dp: int, zero: int, stride: int,
                   micro_batches: int) -> list[Collective]:
    """Data parallelism for `params` parameters held by this rank (before ZeRO sharding), per step.

    - zero 0 (DDP): one all-reduce of the gradients.
    - zero 1 and 2: a reduce-scatter of the gradients, then an all-gather of the updated weights
      (Rajbhandari et al. 2020: the same bytes as the all-reduce).
    - zero 3 (FSDP): per micro-batch an all-gather of the weights for the forward and another for the
      backward, and a reduce-scatter of the gradients (3 x the weight/gradient bytes per micro-batch).
    For a measured FSDP2 run: fully_shard's default (reshard_after_forward=True) is zero 3 here, one
    Collective per FSDP unit summed over units; reshard_after_forward=False drops the backward
    all-gather; buffer_bytes is the unsharded size (nccl-tests' "size"), bytes_per_rank what one rank
    sends (size x bus factor).
    """
    grads, weights = params * grad_bytes, params * weight_bytes
    if zero == 0:
        return [Collective("DP gradient all-reduce", "all_reduce", dp, grads, count=1, stride=stride)]
    if zero in (1, 2):
        return [Collective("DP gradient reduce-scatter", "reduce_scatter", dp, grads, count=1, stride=stride),
                Collective("DP weight all-gather", "all_gather", dp, weights, count=1, stride=stride)]
    return [Collective("FSDP weight all-gather (forward)", "all_gather", dp, weights, count=micro_batches,
                       stride=stride),
            Collective("FSDP weight all-gather (backward)", "all_gather", dp, weights, count=micro_batches,
                       stride=stride),
            Collective("FSDP gradient reduce-scatter", "reduce_scatter", dp, grads, count=micro_batches, stride=stride)]


def total_seconds(collectives: list[Collective], net: Network) -> float:
    return sum(c.seconds(net) * c.count for c in collectives)
