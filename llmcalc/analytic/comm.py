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

Time (alpha-beta, Hockney 1994): t = steps x alpha + bytes_per_rank / bandwidth, with the plateau bus bandwidth
of the tier NCCL reaches for the collective (measured nccl-tests curves, S. Bekman ml-engineering
network/README.md "Real network throughput"):
- ring all-gather / reduce-scatter / all-to-all on NVLink: NCCL_BUS_EFFICIENCY of the link (H200 361-363 of 450,
  H100 "370GB/s" of 450 per the NCCL maintainer, A100 all-reduce ring 235 of 300, B200 ring 682 of 900);
- all-reduce of >= NVLS_MIN_GPUS GPUs on an NVSwitch with NVLink SHARP (Hopper, Blackwell): NVLS_EFFICIENCY of
  the link (H200 480 of 450, B200 838 of 900, GB200 NVL72 ~850 of 900); NVLS does nothing else;
- a fully connected mesh (AMD xGMI, ``Network.topology == "mesh"``): a group of g GPUs in a node moves its data
  over the g-1 direct links of each member, MESH_EFFICIENCY of their rate (RCCL all-reduce 312.9 GB/s on 8
  MI300X of 7 x 64 = 448, 47.7 on 2 of 64);
- across nodes: NCCL_NET_EFFICIENCY of the NICs (below).
alpha (per ring step) is fitted once to the same curves from 4 MiB to 1 GiB with the plateau free: 4.25 us (H200
8 GPUs), 5.25 (A100), 6.5 (B200) on NVLink, 7.0 us on 4 B200 nodes over EFA; the presets carry 5 and 7 us.
steps = 2(n-1) for a ring all-reduce, n-1 for all-gather / reduce-scatter, 1 for p2p; an all-to-all sends to all
peers at once: 4·log2(n) steps, DeepEP's low-latency dispatch at EP 8-256 taking 77-194 us, ~28 us x log2(n).
A group whose n ranks sit in one node (stride x n <= GPUs per node: the NVLink domain, 72 on GB200/GB300 NVL72)
uses the scale-up link, otherwise the scale-out network, one NIC per GPU. A ring collective (all-reduce,
all-gather, reduce-scatter) whose group has g = GPUs per node / stride members in each node crosses the network
through all g of their NICs: NCCL builds each ring through a node's GPUs on NVLink, leaving it once, and spreads
its channels (rings) over the node's NICs, so each NIC carries 1/g of the ring's bytes and the scale-out
bandwidth per rank is g x the per-GPU NIC share (capped by the scale-up link). Data parallelism at tp = 1 on DGX
A100 (8 HDR NICs) thus sees 8 x 25 GB/s; at stride >= GPUs per node (g = 1) each rank has only its own NIC.
An all-to-all cannot aggregate NICs ("Alltoall cannot aggregate the bandwidth of multiple NICs", NCCL maintainer,
NVIDIA/nccl-tests#267): of the (n-1)/n of its buffer a rank sends, the (n-g)/n to other nodes leave through its
own NIC while the (g-1)/n to its node's peers take NVLink, at the same time.
"""

from __future__ import annotations

import math

from ..errors import LlmcalcError
from ..records import dataclass

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")

# Fraction of the link bandwidth that NCCL's large-message bus bandwidth reaches. Source: nccl-tests
# all_reduce_perf on DGX A100 (NVSwitch, 300 GB/s per direction) peaks near 230-240 GB/s busbw
# (NVIDIA's published DGX A100 figure: 230 GB/s), i.e. ~0.78 of the link; the same ratio is used for
# the scale-up link of every accelerator preset.
NCCL_BUS_EFFICIENCY = 0.78
# NVLink SHARP all-reduce (NVLS) on NVSwitch systems, from NVLS_MIN_GPUS GPUs on (nccl-tests: H200 ring at 4 GPUs,
# NVLS from 5; B200 NVLS from 6): 480 of 450 GB/s on H100/H200 ("On 8 GPUs, you should reach a peak busBw of
# ~480GB/s", NVIDIA/nccl-tests#212), 838 of 900 on B200, ~850 of 900 on GB200 NVL72 (ml-engineering).
NVLS_EFFICIENCY = {"hopper": 480 / 450, "blackwell": 838 / 900, "blackwell-ultra": 838 / 900}
NVLS_MIN_GPUS = 6
# AMD xGMI: "reduce the usable bandwidth to approximately 48 GB/s per link. This represents about 75% of the
# theoretical peak" (AMD ROCm blog, mi300x-rccl-xgmi); RCCL all-reduce 312.9 of 448 GB/s on 8 MI300X: 0.70.
MESH_EFFICIENCY = 0.72
# The same share across nodes, over InfiniBand/RoCE NICs: reported all_reduce_perf runs between A100 nodes reach
# 84.8-96 GB/s busbw of 100 GB/s line rate with 4 HDR NICs (NVIDIA/nccl-tests#119), 91 of 100 (nccl-tests#100),
# 86 of 96 (NVIDIA/nccl#1048): ~0.9. The NIC path is a DMA engine streaming over PCIe; NVLink rings lose more
# to the reduction kernels that drive them.
NCCL_NET_EFFICIENCY = 0.9
# GPUs on PCIe only (``Network.topology == "pcie"``: L40S, L4, A10, H100 PCIe, ...): NCCL's ring runs over the PCIe
# switches or the host bridge at a share of the x16 link rate per direction (scale_up_gb_per_s), lower as more GPUs
# share the switches' up-links and the root complex ("On PCI systems, the performance you get is usually determined
# by the bandwidth your CPU and memory can deliver", NCCL maintainer, NVIDIA/nccl#1639):
# - two GPUs: aiconfigurator-core 0.12.0's NCCL 2.27.3 all_reduce on 2 x L40S (systems/data/l40s/comm/nccl/2.27.3/
#   nccl_perf.parquet, half, 268,435,456 elements in 26.700 ms: busbw 20.1 GB/s) of PCIe Gen4 x16's 32 GB/s: 0.63;
# - more: "8 GPU max performance : bwbus 28GB/s", "4GPU max performance : bwbus 35GB/s" on 8 x RTX 5090 on PCIe
#   Gen5 x16, 64 GB/s (NVIDIA/nccl#1639): 0.44 at 8 GPUs, used from 3 on. Host topology moves this a lot (the same
#   aiconfigurator L40S node reaches only 5.2 GB/s at 4 GPUs and 1.45 at 8; its measured curves time L40S itself).
PCIE_PAIR_EFFICIENCY = 20.1 / 32
PCIE_RING_EFFICIENCY = 28 / 64


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
    """Sequential message steps (the alpha term's multiplier): a ring's 2(n-1) or n-1, an all-to-all's
    4·log2(n) (see the module docstring), a send's 1."""
    if kind == "p2p":
        return 1
    if n == 1:
        return 0
    if kind == "all_to_all":
        return 4 * math.ceil(math.log2(n))
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
    topology: str = "switch"  # "switch" (NVSwitch/NVLink: any group at the full link rate), "mesh" (xGMI), "pcie"
    link_bandwidth: float = 0.0  # mesh: one peer link, per direction; pcie: the NVLink bridge of a pair (0: none)
    nvls: str = ""  # the NVLS generation ("hopper", "blackwell", ...) where all-reduce runs NVLink SHARP; "" none
    leaf_nodes: int = 0  # nodes under one leaf (rail) switch group; 0: a non-blocking fabric, no leaf bound
    oversubscription: float = 1.0  # leaf down-link to up-link bandwidth ratio above leaf_nodes (--network oversub)
    fabric: str = ""  # --network's fabric, described (fabric.Fabric.describe); "" the hardware preset's own build
    peer_to_peer: bool = True  # pcie: whether the driver lets GPUs read each other's memory over PCIe (not GeForce)

    def scale_up_rate(self, members: int, kind: str, group: int) -> float:
        """Bus bandwidth a collective of `group` ranks with `members` of them in this node reaches on the scale-up
        link (see the module docstring); on PCIe (``pcie_rate``) the x16 link's share."""
        if self.topology == "mesh":
            return max(1, members - 1) * self.link_bandwidth * MESH_EFFICIENCY
        if self.topology == "pcie":
            return self.pcie_rate(members)
        if kind == "all_reduce" and self.nvls and members >= NVLS_MIN_GPUS:
            return self.scale_up_bandwidth * NVLS_EFFICIENCY[self.nvls]
        return self.scale_up_bandwidth * NCCL_BUS_EFFICIENCY

    def pcie_rate(self, members: int) -> float:
        """NCCL bus bandwidth of `members` GPUs on PCIe: a bridged pair (H100 NVL) at NVLink's NCCL_BUS_EFFICIENCY of
        the bridge, else busbw = link x PCIE_PAIR_EFFICIENCY for two GPUs, x PCIE_RING_EFFICIENCY for more."""
        if members <= 2 and self.link_bandwidth:
            return self.link_bandwidth * NCCL_BUS_EFFICIENCY
        return self.scale_up_bandwidth * (PCIE_PAIR_EFFICIENCY if members <= 2 else PCIE_RING_EFFICIENCY)

    def custom_allreduce(self, group: int, pcie_pairs: bool = True) -> bool:
        """Whether the engine's custom all-reduce runs for a tensor-parallel group of `group` GPUs of one node: always
        on NVLink/NVSwitch and xGMI; on PCIe only a pair that reaches peer memory, over an NVLink bridge or
        (`pcie_pairs`, vLLM's and SGLang's rule) PCIe peer-to-peer. Else NCCL.
        vLLM: vllm-project/vllm@00d618a vllm/distributed/device_communicators/custom_all_reduce.py, __init__:
        "if world_size > 2 and not fully_connected: logger.warning(\"Custom allreduce is disabled because it's not
        supported on more than two PCIe-only GPUs ...\")"; finalize_p2p: "if not _can_p2p(self.rank, self.world_size):
        ... your platform lacks GPU P2P capability"; should_custom_ar: "for 4 or more non NVLink-capable GPUs, custom
        allreduce provides little performance improvement over NCCL". SGLang the same (sgl-project/sglang@004e656
        python/sglang/srt/distributed/device_communicators/custom_all_reduce.py: "if world_size > 2 and not
        full_nvlink"). TensorRT-LLM (`pcie_pairs` False) falls back to NCCL without NVLink at any size
        (NVIDIA/TensorRT-LLM@01e2c36 cpp/tensorrt_llm/thop/allreduceOp.cpp ifFallbackToNCCL: "if (message_size_bytes >
        max_workspace_size || !mIsP2PSupported || !mIsNVLINKSupported) return true")."""
        if self.topology != "pcie":
            return True
        return group <= 2 and (self.link_bandwidth > 0 or (pcie_pairs and self.peer_to_peer))


def pcie_host_bound(net: Network, tp: int) -> bool:
    """Whether the measured all-reduce tables (aiconfigurator's) are left for comm's PCIe ring at this size: PCIe-only
    GPUs past a pair. aiconfigurator-core 0.12.0's one L40S node measured NCCL 2.27.3 all_reduce at a busbw of 20.1
    GB/s on 2 GPUs but 5.2 GB/s on 4 and 1.45 GB/s on 8 (systems/data/l40s/comm/nccl/2.27.3/nccl_perf.parquet; its
    vLLM, TensorRT-LLM and SGLang curves alike): GPUs beyond a pair reaching each other through host memory, not
    peer-to-peer behind PCIe switches, which reach 24.6-28 GB/s at 6-8 GPUs (6 x RTX 4090 on Gen4 with P2P,
    tinygrad's driver README; 8 x RTX 5090, NVIDIA/nccl#1639). Serving servers are taken as switch builds, so past a
    pair serving_speed.StepCost.allreduce_seconds uses this module's ring at PCIE_RING_EFFICIENCY; a pair keeps the
    measured curves (20.1 GB/s, PCIE_PAIR_EFFICIENCY's source)."""
    return bool(net.topology == "pcie" and tp > 2)


def network_from_preset(key: str, data: dict) -> Network | None:
    """The "network" block of a hardware preset (units in key names), or None when it has none."""
    block = data.get("network")
    if block is None:
        return None
    try:
        topology = block.get("topology", "switch")
        if topology not in ("switch", "mesh", "pcie"):
            raise ValueError(f"topology {topology!r} is not switch, mesh or pcie")
        return Network(int(block["gpus_per_node"]), float(block["scale_up_gb_per_s"]) * 1e9,
                       float(block["scale_out_gb_per_s"]) * 1e9, float(block["scale_up_latency_us"]) * 1e-6,
                       scale_out_latency=float(block["scale_out_latency_us"]) * 1e-6, source=block.get("_source", ""),
                       topology=topology, link_bandwidth=float(block.get("link_gb_per_s", 0)) * 1e9,
                       nvls=str(block.get("nvls", "")), peer_to_peer=bool(block.get("peer_to_peer", True)))
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
    per_node: int = 0  # members in one node when the group spans several dimensions (0: from the stride)

    @property
    def bytes_per_rank(self) -> float:
        """Bytes one rank sends for one call: S x bus factor."""
        return self.buffer_bytes * bus_factor(self.kind, self.group)

    @property
    def bytes_per_step(self) -> float:
        return self.bytes_per_rank * self.count

    def intra_node(self, net: Network) -> bool:
        return self._placement(net)[0]

    def members_per_node(self, net: Network) -> int:
        """Members of the group in one node: GPUs per node / stride, at most the group (or ``per_node``)."""
        return self._placement(net)[1]

    def nics_per_node(self, net: Network) -> int:
        """NICs a ring collective of this group spreads its inter-node bytes over (see the module docstring)."""
        if self.kind in ("all_to_all", "p2p"):
            return 1
        return self._placement(net)[1]

    def _placement(self, net: Network) -> tuple[bool, int]:
        """(intra_node, members_per_node) in one pass, the minima and maxima as comparisons: seconds reads both on
        every call, and a layout search times each of its collectives once. Within one node: the group's members
        (``per_node`` of them, but a send spans two strides) fit in its GPUs; members: min(group, per_node), else
        max(1, min(group, GPUs per node // stride))."""
        n, stride, per_node = self.group, self.stride, self.per_node
        if per_node:
            members = n if n <= per_node else per_node
            if self.kind != "p2p":
                return per_node >= n, members
        else:
            members = net.gpus_per_node // stride
            members = 1 if members < 1 else n if n <= members else members
        return stride * (n if self.kind != "p2p" else 2) <= net.gpus_per_node, members

    def seconds(self, net: Network) -> float:
        """Alpha-beta time of one call (_placement's members and span; a send has two members within one node, else
        one; a ring spreads its inter-node bytes over the members' NICs, an all-to-all and a send over one)."""
        kind, n = self.kind, self.group
        if kind != "p2p" and n == 1:
            return 0.0
        steps = latency_steps(kind, n)
        intra, members = self._placement(net)
        if kind == "p2p":
            members = 2 if intra else 1
        up = net.scale_up_rate(members, kind, n)
        if intra:
            return steps * net.scale_up_latency + self.bytes_per_rank / up
        nic = net.scale_out_bandwidth * NCCL_NET_EFFICIENCY
        if kind == "all_to_all":  # off-node share through its own NIC, on-node share over NVLink, together
            g = members
            off = self.buffer_bytes * (n - g) / n / nic * spine_factor(net, math.ceil(n / g))
            on = self.buffer_bytes * (g - 1) / n / up if g > 1 else 0.0
            return steps * net.scale_out_latency + (off if off >= on else on)  # max(off, on)
        bw = (1 if kind == "p2p" else members) * nic  # nics_per_node x the NIC
        bw = up if up <= bw else bw  # min(up, bw)
        ring = steps * net.scale_out_latency + self.bytes_per_rank / bw
        if kind == "p2p":
            return ring
        nodes = math.ceil(n / members)
        other = nccl_tree_or_pat_seconds(kind, n, members, nodes, bytes_per_rank=self.bytes_per_rank, bandwidth=bw,
                                         net=net)
        return ring if ring <= other else other


# NVIDIA/nccl src/graph/tuning.cc (@5067397, ncclTopoTuneModel): the tree all-reduce's bus bandwidth is 0.92 of the
# graph's ("busBw * .92"), PAT's 0.75 ("if (a == NCCL_ALGO_PAT) busBw *= .75"); PAT's latency is log2(nodes) x
# interLat / 3.5 plus 2.8 us per rank ("Still a linear part").
TREE_BANDWIDTH = 0.92
PAT_BANDWIDTH = 0.75
PAT_RANK_LATENCY = 2.8e-6


def nccl_tree_or_pat_seconds(kind: str, n: int, members: int, nodes: int, bytes_per_rank: float, bandwidth: float,
                             net: Network) -> float:
    """Seconds of the algorithm NCCL's tuner weighs against the ring for a collective across nodes (inf where it has
    none), as NVIDIA/nccl src/graph/tuning.cc models them (@5067397, lines 300-435):
    - all-reduce, the double binary tree: latency 2 x ((ranks per node - 1) x intra + log2(nodes) x inter), bandwidth
      TREE_BANDWIDTH of the ring's: t = 2 ((m - 1) a_up + log2(N) a_out) + B / (0.92 bw);
    - all-gather / reduce-scatter with one rank per node, PAT (NCCL 2.23+): t = log2(N) a_out / 3.5 + 2.8 us x n
      + B / (0.75 bw).
    a_up, a_out: the network's per-step latencies (the ring's, fitted to nccl-tests curves: module docstring) in
    place of NCCL's hwLatencies, whose tree and ring inter-node entries are equal (14 us, Simple); B = bytes per
    rank, bw the ring's bandwidth. NCCL runs whichever its model finds faster: Collective.seconds takes the least of
    this and the ring. The ring's latency grows with the node count (n - 1 or 2 (n - 1) steps), the tree's and
    PAT's with its logarithm: at many nodes and small messages they win."""
    logn = math.log2(nodes) if nodes > 1 else 0.0
    if kind == "all_reduce":
        return 2 * ((members - 1) * net.scale_up_latency + logn * net.scale_out_latency) \
            + bytes_per_rank / (TREE_BANDWIDTH * bandwidth)
    if kind in ("all_gather", "reduce_scatter") and members == 1:
        return logn * net.scale_out_latency / 3.5 + PAT_RANK_LATENCY * n + bytes_per_rank / (PAT_BANDWIDTH * bandwidth)
    return math.inf


def spine_factor(net: Network, nodes: int) -> float:
    """How much slower the off-node share of an all-to-all over `nodes` nodes leaves each NIC when the fabric is
    oversubscribed above its leaf (``Network.leaf_nodes``, ``Network.oversubscription``: --network): of the bytes a
    node sends to the other nodes - 1, the share to nodes under other leaves, f = (nodes - leaf) / (nodes - 1), crosses
    up-links of 1 / r the down-links' bandwidth, so the NIC drains at max(1, f x r) times its line time. Ring
    collectives (NCCL orders a ring's nodes so that it crosses each leaf boundary once) and sends are left at the NIC
    rate: at most one hop in `leaf` of a ring crosses a leaf, far under the up-links' share."""
    leaf, r = net.leaf_nodes, net.oversubscription
    if not leaf or r <= 1 or nodes <= leaf:
        return 1.0
    share = (nodes - leaf) / (nodes - 1)
    return max(1.0, share * r)


# --- what each parallelism sends: the general volume functions ------------------------------------


def tp_collectives(tokens: float, d_model: int, act_bytes: float, tp: int, sequence_parallel: bool,
                   passes: int, stride: int = 1, gather_bytes: float | None = None) -> list[Collective]:
    """Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; with sequence parallelism Korthikanti
    et al. 2022) for one layer and one micro-batch of `tokens` tokens on this rank's sequence shard.

    Per pass (forward, backward, and the forward re-run by full recomputation): two all-reduces of the
    [tokens, d_model] activation (after attention and after the MLP), or with sequence parallelism an
    all-gather before and a reduce-scatter after each of the two (the same bytes: AR = RS + AG). `stride`: the
    rank distance between the group's members in the rank order (1 where tp is innermost, Megatron-Core's default;
    a group whose members sit in several nodes pays the network, ``Collective.seconds``). `gather_bytes`: bytes per
    element of the all-gathers where they move the GEMM's quantized input (default `act_bytes`).
    """
    s = tokens * d_model * act_bytes
    if sequence_parallel:
        g = s if gather_bytes is None else tokens * d_model * gather_bytes
        return [Collective("TP all-gather (sequence parallel)", "all_gather", tp, g, 2 * passes, stride=stride),
                Collective("TP reduce-scatter (sequence parallel)", "reduce_scatter", tp, s, 2 * passes,
                           stride=stride)]
    return [Collective("TP all-reduce", "all_reduce", tp, s, 2 * passes, stride=stride)]


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
                   passes: int, etp: int = 1, etp_stride: int = 1) -> list[Collective]:
    """Expert parallelism (GShard, Lepikhin et al. 2020) for one MoE layer and one micro-batch of `tokens`
    tokens on this rank (its sequence-parallel share), as Megatron-Core's alltoall token dispatcher moves
    them: each pass has two all-to-alls over the ep group (dispatch the tokens' top-k copies to their
    experts, combine the results), each over a [tokens·top_k, d_model] buffer; with expert tensor
    parallelism the etp ranks of an expert then all-gather their routed tokens before the expert MLP and
    reduce-scatter its output (buffer [etp·tokens·top_k, d_model]; `etp_stride`: the rank distance between an
    expert's etp ranks, 1 where they are adjacent)."""
    s = tokens * top_k * d_model * act_bytes
    out = [Collective("EP all-to-all (dispatch + combine)", "all_to_all", ep, s, count=2 * passes, stride=stride)]
    if etp > 1:
        out += [Collective("ETP all-gather of routed tokens", "all_gather", etp, etp * s, count=passes,
                           stride=etp_stride),
                Collective("ETP reduce-scatter of expert outputs", "reduce_scatter", etp, etp * s, count=passes,
                           stride=etp_stride)]
    return out


def expected_remote_nodes(n_experts: int, top_k: int, nodes: int) -> float:
    """Other nodes a token's top-k experts land on, experts spread evenly over `nodes` nodes and chosen uniformly
    (what balanced routing gives): (nodes - 1) x (1 - C(E - E/nodes, k) / C(E, k))."""
    if nodes <= 1:
        return 0.0
    per = n_experts / nodes
    miss = 1.0
    for j in range(top_k):  # C(E - per, k) / C(E, k) as a product
        miss *= max(0.0, (n_experts - per - j) / (n_experts - j))
    return (nodes - 1) * (1 - miss)


def deepep_seconds(tokens: float, top_k: int, n_experts: int, d_model: int, act_bytes: float, ep: int, stride: int,
                   net: Network) -> float:
    """One dispatch (or combine) of DeepEP's normal kernels / Megatron-Core's flex (HybridEP) dispatcher for `tokens`
    tokens of this rank: a token crosses to each other node holding one of its experts once, over RDMA to the
    same-index GPU, which forwards it over NVLink to the experts' GPUs ("the results are logical bandwidth",
    DeepEP README: 43-58 GB/s logical RDMA on a 50 GB/s NIC at EP 16-64, 153-158 GB/s of H800's ~160 GB/s NVLink
    within a node). Off-node bytes: tokens x expected_remote_nodes x d_model; on-node: every copy that is not this
    GPU's (tokens x top_k x (1 - 1/g)) over NVLink; the two at once."""
    g = max(1, min(ep, net.gpus_per_node // stride))
    nodes = max(1, ep // g)
    width = d_model * act_bytes
    off = tokens * expected_remote_nodes(n_experts, top_k, nodes) * width
    on = tokens * top_k * width * (1 - 1 / g)
    up = net.scale_up_rate(g, "all_to_all", ep)
    steps = latency_steps("all_to_all", ep)
    if nodes > 1:
        off *= spine_factor(net, nodes)
        return steps * net.scale_out_latency + max(off / (net.scale_out_bandwidth * NCCL_NET_EFFICIENCY), on / up)
    return steps * net.scale_up_latency + on / up


def pp_collectives(tokens: float, d_model: int, act_bytes: float, tp: int, sequence_parallel: bool,
                   stride: int, tp_stride: int = 1) -> list[Collective]:
    """Pipeline parallelism: one activation [tokens, d_model] per micro-batch to the next stage (and its
    gradient back). Each of the tp ranks sends only its 1/tp shard (Narayanan et al. 2021 sec. 4.1, the
    scatter/gather optimisation, Megatron-LM's default since 2021: bsh/t per pair of stages). With sequence
    parallelism the activation is already sharded; without it the receiving stage rebuilds the whole
    activation with an all-gather over its tp ranks (`tp_stride` apart: NVLink where they share a node)."""
    s = tokens * d_model * act_bytes
    out = [Collective("PP send/recv of activations", "p2p", 2, s / tp, count=1, stride=stride)]
    if tp > 1 and not sequence_parallel:
        out.append(Collective("PP scatter/gather: all-gather after the receive", "all_gather", tp, s, count=1,
                              stride=tp_stride))
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
