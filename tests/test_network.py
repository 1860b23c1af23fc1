"""--network: a cluster's inter-node fabric (analytic/fabric.py) and the collectives that follow the node count
(analytic/comm.py: NCCL's tree and PAT against the ring, an oversubscribed spine under all-to-alls), held to the
published figures of the clusters and to NVIDIA/nccl's own tuning model written out here."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from llmcalc.analytic import comm
from llmcalc.analytic.fabric import apply_fabric, network_names, parse_network
from llmcalc.analytic.kernels import device_for
from llmcalc.cli.main import cli
from llmcalc.errors import LlmcalcError


@pytest.mark.parametrize(("name", "gb_per_gpu", "per_node"), [
    ("jean-zay-a100", 4 * 100 / 8 / 8, 8),  # BLOOM paper: four 100 Gbps Omni-Path links per 8-GPU node
    ("dgx-h100-superpod", 400 / 8, 8),  # one 400 Gb/s NDR ConnectX-7 per H100
    ("dgx-a100-superpod", 200 / 8, 8),  # one 200 Gb/s HDR ConnectX-6 per A100
    ("juwels-booster", 200 / 8, 4),  # 4 A100 and 4 HDR200 per node
    ("gb200-nvl72", 400 / 8, 72),  # one 400 Gb/s ConnectX-7 per GPU, 72 on one NVLink domain
    ("gcp-a3-high", 4 * 200 / 8 / 8, 8),  # a3-highgpu-8g: four 200 Gb/s GPUDirect-TCPX data NICs per 8 H100
])
def test_cluster_presets_give_their_published_share_per_gpu(name, gb_per_gpu, per_node):
    net = device_for("a100-80gb-sxm", network=name).network
    assert net.scale_out_bandwidth == pytest.approx(gb_per_gpu * 1e9)
    assert net.gpus_per_node == per_node
    assert name in net.fabric


def test_the_three_spellings_agree():
    compact = parse_network("100G-x4-fat-tree-2to1")
    pairs = parse_network("nic=100G,nics=4,topology=fat-tree,oversub=2")
    assert compact == pairs
    assert compact.per_gpu(8) == pytest.approx(6.25e9)
    assert compact.leaf_nodes == 32 // 4  # a fat-tree leaf holds all 4 NICs of each node it serves
    assert parse_network("400G-x8-rail").leaf_nodes == 32  # a rail switch holds one NIC of each node
    assert set(network_names()) >= {"dgx-h100-superpod", "jean-zay-a100", "gb200-nvl72"}


@pytest.mark.parametrize("bad", ["fast", "400G-x0-rail", "nic=400G", "nic=400G,nics=8,topology=torus",
                                 "nic=400G,nics=8,oversub=0.5", "nic=fast,nics=8", "speed=400G,nics=8"])
def test_bad_networks_are_one_line(bad):
    with pytest.raises(LlmcalcError) as err:
        parse_network(bad)
    assert "--network" in str(err.value) and "\n" not in str(err.value)


def test_a_slower_fabric_slows_only_the_inter_node_share():
    base = device_for("a100-80gb-sxm").network
    slow = apply_fabric(base, parse_network("jean-zay-a100"))
    across = comm.Collective("DP", "reduce_scatter", 16, 1e9, stride=8)  # one rank per node
    inside = comm.Collective("TP", "all_gather", 8, 1e9, stride=1)
    assert inside.seconds(slow) == inside.seconds(base)
    eff = comm.NCCL_NET_EFFICIENCY
    assert across.seconds(slow) - 15 * base.scale_out_latency == pytest.approx(1e9 * 15 / 16 / (6.25e9 * eff))


def test_nccl_tree_and_pat_against_the_ring():
    """NVIDIA/nccl src/graph/tuning.cc: ring latency (n - 1) or 2 (n - 1) steps, tree all-reduce 2 ((ppn - 1) intra
    + log2(nodes) inter) at 0.92 of the bandwidth, PAT (one rank per node) log2(nodes) inter / 3.5 + 2.8 us per rank
    at 0.75; NCCL runs the faster."""
    net = comm.Network(8, 450e9, 50e9, 5e-6, 7e-6)
    bw = 8 * 50e9 * comm.NCCL_NET_EFFICIENCY
    small = comm.Collective("x", "all_reduce", 8192, 1e6)  # 1,024 nodes of 8
    b = small.bytes_per_rank
    ring = 2 * 8191 * 7e-6 + b / min(450e9 * comm.NCCL_BUS_EFFICIENCY, bw)
    tree = 2 * (7 * 5e-6 + 10 * 7e-6) + b / (0.92 * min(450e9 * comm.NCCL_BUS_EFFICIENCY, bw))
    assert tree < ring and small.seconds(net) == pytest.approx(tree)
    big = comm.Collective("x", "all_reduce", 16, 4e9)  # 2 nodes, large: the ring's bandwidth wins
    assert big.seconds(net) == pytest.approx(2 * 15 * 7e-6 + big.bytes_per_rank / min(450e9 * 0.78, bw))
    gather = comm.Collective("x", "all_gather", 1024, 1e6, stride=8)  # one rank per node: PAT
    one = 50e9 * comm.NCCL_NET_EFFICIENCY
    pat = math.log2(1024) * 7e-6 / 3.5 + 2.8e-6 * 1024 + gather.bytes_per_rank / (0.75 * one)
    assert gather.seconds(net) == pytest.approx(min(pat, 1023 * 7e-6 + gather.bytes_per_rank / one))


def test_an_oversubscribed_spine_slows_all_to_alls_not_rings():
    flat = device_for("h100-sxm").network
    tapered = apply_fabric(flat, parse_network("nic=400G,nics=8,topology=fat-tree,oversub=4,leaf=32"))  # 4 nodes/leaf
    a2a = comm.Collective("EP", "all_to_all", 128, 1e9, stride=1)  # 16 nodes: 12 of 15 other nodes off-leaf
    off = 1e9 * 120 / 128 / (50e9 * comm.NCCL_NET_EFFICIENCY)
    assert a2a.seconds(tapered) - a2a.seconds(flat) == pytest.approx(off * (12 / 15 * 4 - 1))
    ring = comm.Collective("DP", "reduce_scatter", 128, 1e9, stride=1)
    assert ring.seconds(tapered) == ring.seconds(flat)


def test_cli_takes_network_and_refuses_it_where_nothing_crosses_nodes():
    run = CliRunner().invoke
    base = ["train", "llama-2-7b", "--tokens", "1T", "--gpu", "a100-80gb-sxm", "--global-batch", "64"]
    fast = run(cli, [*base, "--n-gpus", "64", "--format", "json"])
    slow = run(cli, [*base, "--n-gpus", "64", "--network", "jean-zay-a100", "--format", "json"])
    assert fast.exit_code == slow.exit_code == 0
    assert '"network": "jean-zay-a100' in slow.stdout
    for extra in (["--n-gpus", "8", "--network", "jean-zay-a100"], ["--n-gpus", "64", "--network", "fast"]):
        r = run(cli, [*base, *extra])
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "--network" in r.stderr
    r = run(cli, ["train", "llama-2-7b", "--tokens", "1T", "--gpu", "a100-80gb-sxm", "--n-gpus", "64", "--mfu", "0.4",
                  "--network", "jean-zay-a100"])
    assert r.exit_code == 2 and "--network" in r.stderr
    r = run(cli, ["layout", "llama-2-7b", "--gpu", "a100-80gb-sxm", "--n-gpus", "64", "--global-batch", "64",
                  "--network", "jean-zay-a100", "--top", "1"])
    assert r.exit_code == 0 and "--network jean-zay-a100" in r.stdout
