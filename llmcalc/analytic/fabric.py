"""`--network`: the inter-node fabric of a cluster, as the step model's collectives see it.

A hardware preset's "network" block carries one build of its machine (DGX H100: 8 x 400 Gb/s NICs per 8 GPUs). A
cluster built otherwise is described with --network, as a cluster preset (``presets/networks/<name>.json``) or in
place:

- compact: ``400G-x8-rail``, ``100G-x4-fat-tree``, ``200G-x8-fat-tree-2to1`` (NIC line rate in Gb/s, NICs per node,
  rail-optimised or fat tree, an oversubscription ratio above the leaf);
- key=value, comma-separated: ``nic=400G,nics=8,topology=rail,oversub=1,leaf=32,latency-us=7,gpus-per-node=8``.

What it sets in the step model (``apply_fabric``): each GPU's share of the node's NICs (nics x line rate / GPUs
per node, per direction), the inter-node latency per ring step where given, the scale-up domain where given
(``gpus-per-node``: 72 on an NVL72 rack), and the leaf bound with its oversubscription: the nodes under one leaf
(rail-optimised: one NIC of each node on each rail switch, so a leaf group holds `leaf` nodes, the switch's down
ports; fat tree: all NICs of a node on one leaf, so it holds leaf // nics nodes) above which an all-to-all's
off-leaf bytes cross up-links of 1 / oversub the bandwidth (``comm.spine_factor``). Rings are left at the NIC rate
(NCCL orders a ring to cross each leaf boundary once).
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..errors import LlmcalcError
from ..records import dataclass
from . import comm

TOPOLOGIES = ("rail", "fat-tree")
KEYS = ("nic", "nics", "topology", "oversub", "leaf", "latency-us", "gpus-per-node")
# Down ports of one leaf switch: NVIDIA Quantum-2 QM9700 NDR switches have 64 ports of 400 Gb/s, half of them down in
# a non-blocking two-level fat tree (DGX SuperPOD reference architecture: a scalable unit of 32 DGX H100 nodes, one
# rail switch per GPU index). Used where --network gives no leaf.
LEAF_PORTS = 32
_COMPACT = re.compile(r"(?P<nic>\d+(?:\.\d+)?)\s*g(?:b(?:/?s)?)?-x(?P<nics>\d+)(?:-(?P<topology>rail|fat-?tree))?"
                      r"(?:-(?P<oversub>\d+(?:\.\d+)?)to1)?")


@dataclass(frozen=True)
class Fabric:
    """A cluster's inter-node fabric (--network): NIC line rate (bits/s), NICs per node, rail-optimised or fat tree,
    the oversubscription above a leaf, the leaf's down ports, and optionally the inter-node latency per ring step
    (seconds; 0: the hardware preset's) and the scale-up domain (GPUs per node; 0: the hardware preset's)."""

    nic_bits: float
    nics_per_node: int
    topology: str = "rail"
    oversubscription: float = 1.0
    leaf_ports: int = LEAF_PORTS
    latency: float = 0.0
    gpus_per_node: int = 0
    name: str = ""
    source: str = ""

    def per_gpu(self, gpus_per_node: int) -> float:
        """Each GPU's share of its node's NICs, bytes/s per direction: nics x rate / 8 / GPUs per node."""
        return self.nics_per_node * self.nic_bits / 8 / gpus_per_node

    @property
    def leaf_nodes(self) -> int:
        """Nodes under one leaf: rail-optimised, the switch's down ports (one NIC of each node per rail switch);
        fat tree, the down ports over the node's NICs (all on one leaf)."""
        return self.leaf_ports if self.topology == "rail" else max(1, self.leaf_ports // self.nics_per_node)

    def describe(self, gpus_per_node: int) -> str:
        """One line for the notes: the fabric and each GPU's share of it."""
        over = f", {self.oversubscription:g}:1 above {self.leaf_nodes} nodes" if self.oversubscription > 1 else ""
        label = f"{self.name}: " if self.name else ""
        return (f"{label}{self.nics_per_node} x {self.nic_bits / 1e9:g} Gb/s per {gpus_per_node}-GPU node "
                f"({self.per_gpu(gpus_per_node) / 1e9:.2f} GB/s per GPU), {self.topology}{over}")


def apply_fabric(net: comm.Network, fabric: Fabric) -> comm.Network:
    """The hardware preset's network with the cluster's fabric: scale-out bandwidth per GPU (``Fabric.per_gpu``), the
    scale-up domain and inter-node latency where the fabric gives them, and its leaf bound and oversubscription."""
    per_node = fabric.gpus_per_node or net.gpus_per_node
    return replace(net, gpus_per_node=per_node, scale_out_bandwidth=fabric.per_gpu(per_node),
                   scale_out_latency=fabric.latency or net.scale_out_latency, leaf_nodes=fabric.leaf_nodes,
                   oversubscription=fabric.oversubscription, fabric=fabric.describe(per_node))


def parse_network(text: str) -> Fabric:
    """--network's value: a cluster preset's name (``presets/networks``), the compact form or key=value pairs (module
    docstring); one LlmcalcError line naming the fix otherwise."""
    value = text.strip().lower()
    names = network_names()
    if value in names:
        return _preset(value)
    found = _COMPACT.fullmatch(value)
    if found:
        topology = (found["topology"] or "rail").replace("fattree", "fat-tree")
        return _checked(float(found["nic"]) * 1e9, int(found["nics"]), topology=topology,
                        oversub=float(found["oversub"] or 1), leaf=LEAF_PORTS, latency_us=0.0, gpus_per_node=0)
    if "=" in value:
        return _from_pairs(value)
    raise LlmcalcError(f"--network {text!r} is not a cluster preset ({', '.join(names)}), a fabric like "
                       f"400G-x8-rail or 100G-x4-fat-tree-2to1, nor key=value pairs ({', '.join(KEYS)})")


def _from_pairs(value: str) -> Fabric:
    pairs: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or key not in KEYS:
            raise LlmcalcError(f"--network: {item.strip()!r} is not one of {', '.join(k + '=...' for k in KEYS)}")
        pairs[key] = val.strip()
    if "nic" not in pairs or "nics" not in pairs:
        raise LlmcalcError("--network needs nic= (line rate per NIC, e.g. 400G) and nics= (NICs per node)")
    try:
        nic = float(pairs["nic"].rstrip("gb/s").rstrip("g")) * 1e9
        nics, leaf = int(pairs["nics"]), int(pairs.get("leaf", LEAF_PORTS))
        per_node = int(pairs.get("gpus-per-node", 0))
        oversub, latency = float(pairs.get("oversub", 1)), float(pairs.get("latency-us", 0))
    except ValueError as exc:
        raise LlmcalcError(f"--network: {exc}; write numbers as nic=400G,nics=8,oversub=2,leaf=32,latency-us=7,"
                           f"gpus-per-node=8") from None
    return _checked(nic, nics, topology=pairs.get("topology", "rail"), oversub=oversub, leaf=leaf,
                    latency_us=latency, gpus_per_node=per_node)


def _checked(nic: float, nics: int, topology: str, oversub: float, leaf: int, latency_us: float,
             gpus_per_node: int, name: str = "", source: str = "") -> Fabric:
    """A Fabric whose figures are in range, or one LlmcalcError line."""
    topology = topology.replace("fattree", "fat-tree")
    checks = [(nic > 0, f"the NIC rate must be positive, got {nic / 1e9:g} Gb/s"),
              (1 <= nics <= 1024, f"NICs per node must be 1 to 1024, got {nics}"),
              (topology in TOPOLOGIES, f"topology must be {' or '.join(TOPOLOGIES)}, got {topology!r}"),
              (1 <= oversub <= 64, f"oversub must be 1 (non-blocking) to 64, got {oversub:g}"),
              (leaf >= 1, f"leaf must be >= 1 down ports, got {leaf}"),
              (0 <= latency_us <= 1000, f"latency-us must be 0 to 1000, got {latency_us:g}"),
              (0 <= gpus_per_node <= 1024, f"gpus-per-node must be 1 to 1024, got {gpus_per_node}")]
    for ok, why in checks:
        if not ok:
            raise LlmcalcError(f"--network: {why}")
    return Fabric(nic, nics, topology=topology, oversubscription=oversub, leaf_ports=leaf, latency=latency_us * 1e-6,
                  gpus_per_node=gpus_per_node, name=name, source=source)


def network_names() -> list[str]:
    """The cluster presets under ``presets/networks``."""
    from ..spec.presets import presets_dir

    return sorted(p.stem for p in (presets_dir() / "networks").glob("*.json"))


def _preset(name: str) -> Fabric:
    from ..spec.presets import presets_dir, read_json

    data = read_json(presets_dir() / "networks" / f"{name}.json")
    try:
        nic, nics, topology = float(data["nic_gb_per_s"]) * 1e9, int(data["nics_per_node"]), str(data["topology"])
        oversub, leaf = float(data.get("oversubscription", 1)), int(data.get("leaf_ports", LEAF_PORTS))
        latency, per_node = float(data.get("latency_us", 0)), int(data.get("gpus_per_node", 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise LlmcalcError(f"network preset {name!r} is malformed: {exc!r}") from None
    return _checked(nic, nics, topology=topology, oversub=oversub, leaf=leaf, latency_us=latency,
                    gpus_per_node=per_node, name=name, source=str(data.get("_source", "")))
