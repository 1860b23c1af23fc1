"""The sharded model on torch.distributed: FSDP2 over data parallelism x DTensor tensor parallelism.

The same reference model (profiling/model.py) is built on the meta device, tensor-parallelised with
``parallelize_module`` (Megatron layout: q/k/v, gate and up column-wise; o and down row-wise; the
token embedding row-wise over the vocabulary; the LM head column-wise with its logits gathered;
norms replicated) on the "tp" dimension of a (dp, tp) ``init_device_mesh``, then ``fully_shard``
(FSDP2, one unit per block plus the root) on the "dp" dimension with a ``MixedPrecisionPolicy``
(bf16 compute, fp32 gradient reduction; parameters, gradients and AdamW states stay fp32 and
sharded: the ``amp`` recipe's 4 + 4 + 8 bytes per parameter in analytic/memory.py).

- Virtual (any world size, one CPU): a fake process group (``FakeStore``, backend "fake") whose
  collectives are no-ops; one training step (forward, loss, backward, AdamW foreach) runs under
  FakeTensorMode, watched by FSDPMemTracker (peak by category) and ``CollectiveRecorder`` (every
  collective: kind, buffer bytes, group size; and the FLOPs of the rank's local matmuls).
  Rank 0 is measured; with a fake group every rank runs the same program, so the other ranks'
  figures follow from the same sharding rule (``shard_numel``: torch.chunk along dim 0 over dp, as
  FSDP2 shards, after the TP split), applied to the measured global shapes and placements.
- Real (``worker.py`` under torch.distributed.run): the same model with gloo (CPU) or nccl (CUDA).

Collective volumes are compared through analytic/comm.py: a recorded call of buffer S (the
unsharded size: all-gather output, reduce-scatter input, all-reduce tensor) in a group of n puts
S x bus_factor(kind, n) bytes on the wire from each rank, the convention of ``Collective``.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from ..analytic.comm import Collective, dp_collectives, tp_collectives
from ..analytic.flops import counted_step_flops, forward_ops
from ..analytic.memory import training_memory
from ..analytic.parallel import Parallel
from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec

PG_TIMEOUT_S = 120  # every process group gets a timeout: a dead rank ends the run instead of hanging it


def with_layers(spec: ModelSpec, n_layers: int, **changes: Any) -> ModelSpec:
    """The same model with `n_layers` blocks (ModelSpec.with_layers)."""
    return spec.with_layers(n_layers, **changes)


def check_layout(spec: ModelSpec, world_size: int, tp: int) -> Parallel:
    """The layout the sharded profiler builds (FSDP2 = ZeRO-3 over dp x DTensor TP, no sequence parallelism),
    or one clear error where it cannot build it: the world must divide into tp (``Parallel.over``), and DTensor
    splits whole heads, so tp must divide the key/value heads too (no replication, unlike ``check_heads``)."""
    layout = Parallel.over(world_size, tp=tp, what="--world-size/--nproc", zero=3, sequence_parallel=False)
    if spec.architecture != "decoder" or spec.is_moe or spec.is_mla or spec.parallel_residual:
        raise LlmcalcError(f"{spec.name}: the sharded profiler builds dense decoder-only models with standard "
                           f"attention (no MoE, MLA or parallel blocks)")
    kv_heads = spec.n_kv_heads
    if spec.n_heads % tp or kv_heads % tp:
        raise LlmcalcError(f"--tp {tp} does not divide the heads of {spec.name} ({spec.n_heads} query, "
                           f"{kv_heads} key/value); use a tp that divides "
                           f"{math.gcd(spec.n_heads, kv_heads)}")
    for name, dim in (("d_ff", spec.d_ff), ("vocab_size", spec.vocab_size)):
        if dim % tp:  # d_ff 0: no dense FFN to split
            raise LlmcalcError(f"--tp {tp} does not divide {name} {dim} of {spec.name}")
    return layout


# --- building the sharded model ----------------------------------------------------------------


def parallelize(model, mesh, mixed: bool, reshard_after_forward: bool = True):
    """DTensor TP on mesh["tp"], then FSDP2 on mesh["dp"] (one unit per block, then the root)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        PrepareModuleInput,
        RowwiseParallel,
        parallelize_module,
    )

    tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    if tp_mesh.size() > 1:
        tied = model.lm_head is not None and model.lm_head.weight is model.embedding.tokens.weight
        plan: dict[str, ParallelStyle] = {"embedding.tokens": RowwiseParallel(input_layouts=Replicate())}
        if model.lm_head is not None:
            plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
        parallelize_module(model, tp_mesh, plan)
        if tied:  # both shard the [vocab, d_model] table on dim 0: one parameter again
            model.lm_head.weight = model.embedding.tokens.weight
        # One Replicate DTensor enters attention and the MLP, so their input gradients are summed
        # before one all-reduce (Megatron's f operator), not one per projection.
        attn_input = PrepareModuleInput(input_layouts=(Replicate(), None), desired_input_layouts=(Replicate(), None))
        mlp_input = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))
        for block in model.body.layers:
            layer_plan = {"attention": attn_input, "attention.q_proj": ColwiseParallel(),
                          "attention.k_proj": ColwiseParallel(), "attention.v_proj": ColwiseParallel(),
                          "attention.o_proj": RowwiseParallel(), "mlp": mlp_input,
                          "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
            if block.mlp.gate_proj is not None:
                layer_plan["mlp.gate_proj"] = ColwiseParallel()
            parallelize_module(block, tp_mesh, layer_plan)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else \
        MixedPrecisionPolicy()
    for block in model.body.layers:
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    return model


def make_mesh(device_type: str, layout: Parallel):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))


def build_sharded(spec: ModelSpec, mesh, mixed: bool, attention: str = "sdpa"):
    """The reference model on the meta device, parallelised (no storage yet: call to_empty)."""
    from .model import build_model

    model = build_model(spec, torch.float32, "meta", attention)
    return parallelize(model, mesh, mixed)


# --- shard sizes ---------------------------------------------------------------------------------


def chunk_sizes(length: int, parts: int) -> list[int]:
    """torch.chunk(length, parts) along one dim: ceil-sized chunks, trailing ranks short or empty."""
    size = -(-length // parts)
    return [max(0, min(size, length - i * size)) for i in range(parts)]


def shard_numel(shape: tuple, placements, coordinate: tuple[int, int], mesh_shape: tuple[int, int]) -> int:
    """Elements rank `coordinate` = (dp index, tp index) holds of a parameter of global `shape`
    with `placements` over (dp, tp): the TP split comes first (parallelize_module), then FSDP2 cuts
    dim 0 of the TP shard by torch.chunk (DTensor writes that dp placement as _StridedShard)."""
    dims = list(shape)
    for mesh_dim in (1, 0):
        d = getattr(placements[mesh_dim], "dim", None)  # Shard and _StridedShard carry a dim
        if d is not None:
            dims[d] = chunk_sizes(dims[d], mesh_shape[mesh_dim])[coordinate[mesh_dim]]
    return math.prod(dims)


def param_layout(model) -> list[tuple[tuple, tuple, int]]:
    """(global shape, placements over (dp, tp), element bytes) of every sharded parameter."""
    from torch.distributed.tensor import Replicate

    out = []
    for p in model.parameters():
        placements = tuple(p.placements)
        if len(placements) == 1:  # dp only (tp == 1): TP dimension replicated
            placements = placements + (Replicate(),)
        out.append((tuple(p.shape), placements, p.element_size()))
    return out


def rank_param_bytes(layout_rows, layout: Parallel) -> list[float]:
    """Parameter bytes of every global rank r = dp_index x tp + tp_index (init_device_mesh's row-major order)."""
    out = []
    for rank in range(layout.n_gpus):
        coord = (rank // layout.tp, rank % layout.tp)
        out.append(float(sum(shard_numel(shape, pl, coord, (layout.dp, layout.tp)) * size
                             for shape, pl, size in layout_rows)))
    return out


# --- recording collectives and per-rank FLOPs ---------------------------------------------------

_KINDS = {"all_gather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
          "_allgather_base_": "all_gather", "allgather_": "all_gather",
          "allgather_into_tensor_coalesced_": "all_gather",
          "all_gather_into_tensor_coalesced": "all_gather",
          "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
          "reduce_scatter_": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
          "reduce_scatter_tensor_coalesced_": "reduce_scatter",
          "all_reduce": "all_reduce", "allreduce_": "all_reduce", "all_reduce_coalesced": "all_reduce",
          "allreduce_coalesced_": "all_reduce", "all_to_all_single": "all_to_all", "alltoall_base_": "all_to_all",
          "broadcast": "broadcast", "broadcast_": "broadcast"}


def _tensors(x) -> list:
    out = []
    tree_map(lambda t: out.append(t) if isinstance(t, torch.Tensor) else None, x)
    return out


def _bytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _group_size(args) -> int:
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    for a in args:
        if isinstance(a, str):
            try:
                return _resolve_process_group(a).size()  # type: ignore[arg-type]  # a GroupName is a str at run time
            except (RuntimeError, ValueError, KeyError):
                continue
        if isinstance(a, (torch.ScriptObject, dist.ProcessGroup)):
            try:
                return dist.ProcessGroup.unbox(a).size() if isinstance(a, torch.ScriptObject) else a.size()
            except (RuntimeError, AttributeError):
                continue
    return dist.get_world_size()


@dataclass
class Recorded:
    kind: str
    group: int
    buffer_bytes: int  # the unsharded size S (nccl-tests' "size")

    @property
    def bytes_per_rank(self) -> float:
        return Collective("measured", self.kind, self.group, self.buffer_bytes).bytes_per_rank


class CollectiveRecorder(TorchDispatchMode):
    """Every collective that reaches the dispatcher (c10d and functional ops), and the FLOPs of the
    matmul-class ops on this rank's local tensors (DTensor arguments unwrapped to their shards, so a
    tensor-parallel matmul counts 1/tp of the global one)."""

    def __init__(self, count_flops: bool = True):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        from .counters import register_cpu_sdpa

        register_cpu_sdpa()  # CPU flash-attention kernels get torch's sdpa formulas
        self.calls: list[Recorded] = []
        self.flops = 0
        self._registry = flop_registry if count_flops else {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        kind = _KINDS.get(name)
        out = func(*args, **kwargs)
        if kind is not None and kind != "broadcast":
            ins, outs = _tensors(args), _tensors(out)
            n = _group_size(args)
            if kind == "all_gather":
                size = _bytes(outs) if "into_tensor" in name or "base" in name else _bytes(ins[: max(1, len(ins) - 1)])
                size = max(size, _bytes(ins[-1:]) * n) if name in ("_allgather_base_",) else size
            elif kind == "reduce_scatter":
                size = _bytes(ins[-1:]) if name in ("_reduce_scatter_base_", "reduce_scatter_") else _bytes(ins)
            else:
                size = _bytes(ins)
            self.calls.append(Recorded(kind, n, size))
        elif func._overloadpacket in self._registry:
            from torch.distributed.tensor import DTensor

            local = lambda t: t._local_tensor if isinstance(t, DTensor) else t  # noqa: E731
            self.flops += self._registry[func._overloadpacket](
                *tree_map(local, args), **tree_map(local, kwargs), out_val=tree_map(local, out))
        return out

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.calls:
            out[c.kind] = out.get(c.kind, 0.0) + c.bytes_per_rank
        return out

    def summary(self) -> list[dict]:
        rows: dict[tuple, dict] = {}
        for c in self.calls:
            row = rows.setdefault((c.kind, c.group), {"kind": c.kind, "group": c.group, "calls": 0,
                                                      "buffer_bytes": 0, "bytes_per_rank": 0.0})
            row["calls"] += 1
            row["buffer_bytes"] += c.buffer_bytes
            row["bytes_per_rank"] += c.bytes_per_rank
        return list(rows.values())


# --- the analytic side ---------------------------------------------------------------------------


def analytic_figures(spec: ModelSpec, layout: Parallel, batch: int, seq: int, mixed: bool) -> dict:
    """Per-rank figures of the formulas: ZeRO-3 + TP state (analytic/memory.py), collective volumes
    (analytic/comm.py), FLOPs per rank (the counted train-step FLOPs / tp)."""
    recipe = "amp" if mixed else "fp32"
    est = training_memory(spec, batch, seq, recipe, optimizer="adamw", recompute="none", attention="flash",
                          parallel=layout,
                          optimizer_impl="fused")
    act = 2.0 if mixed else 4.0
    weight = 2.0 if mixed else 4.0  # FSDP2 all-gathers in param_dtype, reduces in reduce_dtype (fp32)
    colls = dp_collectives(est.params_on_gpu, grad_bytes=4.0, weight_bytes=weight, dp=layout.dp, zero=3,
                           stride=layout.tp, micro_batches=1)
    colls += [Collective(c.name, c.kind, c.group, c.buffer_bytes, count=c.count * spec.n_layers, stride=c.stride)
              for c in tp_collectives(batch * seq, spec.d_model, act, layout.tp, sequence_parallel=False, passes=2)]
    by_kind: dict[str, float] = {}
    for c in colls:
        if c.bytes_per_step:
            by_kind[c.kind] = by_kind.get(c.kind, 0.0) + c.bytes_per_step
    ops = forward_ops(spec, batch, seq)
    flops = sum(counted_step_flops(ops, "none", {"attention S²"}).values()) / layout.tp
    return {"estimate": est, "param_bytes": est.weights, "grad_bytes": est.gradients,
            "optimizer_bytes": est.optimizer_states, "peak_memory_bytes": est.peak, "collectives": by_kind,
            "flops": flops, "recipe": recipe}


def pair(analytic, measured) -> dict:
    err = None if not analytic or measured is None else (measured - analytic) / analytic
    return {"analytic": analytic, "measured": measured, "rel_error": err}


def rank_rows(analytic: dict, measured_params: list[float], measured: dict, extra: list[dict] | None = None) -> list:
    """The `ranks` list of the JSON contract. `measured` holds rank 0's measured figures; grads and
    optimizer states follow the parameters' sharding (fp32 like the sharded parameters: grad = param,
    AdamW = 2 x param bytes), scaled from rank 0 by each rank's parameter bytes."""
    rows = []
    base = measured_params[0] or 1.0
    for rank, pbytes in enumerate(measured_params):
        scale = pbytes / base
        m = extra[rank] if extra else measured
        kinds = sorted(set(analytic["collectives"]) | set(m["collectives"]))
        rows.append({
            "rank": rank,
            "param_bytes": pair(analytic["param_bytes"], m["param_bytes"] if extra else pbytes),
            "grad_bytes": pair(analytic["grad_bytes"], m["grad_bytes"] * (1 if extra else scale)),
            "optimizer_bytes": pair(analytic["optimizer_bytes"], m["optimizer_bytes"] * (1 if extra else scale)),
            "peak_memory_bytes": pair(analytic["peak_memory_bytes"], m["peak_memory_bytes"]),
            "collectives": {k: pair(analytic["collectives"].get(k, 0.0), m["collectives"].get(k, 0.0)) for k in kinds},
            "flops": pair(analytic["flops"], m["flops"]),
            **{k: m[k] for k in ("step_seconds", "tokens_per_second", "mfu", "peak_memory_source") if k in m},
        })
    return rows


@dataclass
class DistributedResult:
    model: str
    mode: str
    world_size: int
    mesh: dict
    batch_size: int
    seq_len: int
    precision: str
    ranks: list = field(default_factory=list)
    memory_by_category: dict = field(default_factory=dict)  # rank 0 at the peak (virtual)
    collective_calls: list = field(default_factory=list)  # rank 0: kind, group, calls, bytes
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


# --- virtual run ---------------------------------------------------------------------------------


def _fsdp_peak_tracker(model, optimizer):
    """FSDPMemTracker keeping only the global peak (the per-module loop skipped: measure.global_peak)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from .measure import global_peak

    return global_peak(FSDPMemTracker)(model, optimizer)


def _loss(model, ids, spec):
    import warnings

    import torch.nn.functional as F

    # FSDP2 warns when the root returns a view (the LM head's gathered logits): only an in-place op on
    # it would skip a hook, and the loss reads it out of place.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")

    out = model(ids)
    return F.cross_entropy(out.float().view(-1, spec.vocab_size), ids.view(-1))


def sharded_state_bytes(model, optimizer) -> tuple[float, float, float]:
    """This rank's bytes of sharded parameters, their gradients and the optimizer states (local shards)."""
    from torch.distributed.tensor import DTensor

    def local(t):
        return t._local_tensor if isinstance(t, DTensor) else t

    params = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    grads = sum(local(p.grad).numel() * local(p.grad).element_size() for p in model.parameters() if p.grad is not None)
    states = sum(local(v).numel() * local(v).element_size() for s in optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.dim() > 0)
    return float(params), float(grads), float(states)


FULL_DEPTH_LAYERS = 8  # deeper models are measured at SAMPLE_DEPTHS blocks and extrapolated (see below)
SAMPLE_DEPTHS = (2, 4)


def _virtual_once(spec: ModelSpec, layout: Parallel, batch: int, seq: int, mixed: bool, attention: str) -> dict:
    """Rank 0's measured figures for one model depth (the fake process group is already up)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mesh = make_mesh("cpu", layout)
    model = build_sharded(spec, mesh, mixed, attention)  # meta device, outside FakeTensorMode
    per_rank = rank_param_bytes(param_layout(model), layout)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        ids = torch.randint(0, spec.vocab_size, (batch, seq))
        _loss(model, ids, spec).backward()  # step 1 creates the AdamW states
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # Step 2: forward + backward under the tracker (states alive, as in every later step). The
        # optimizer step is left out of it: FSDPMemTracker sizes DTensor optimizer states far above
        # their local shards there (the known pitfall), so that phase is taken from the
        # measured shards instead (see the notes).
        tracker = _fsdp_peak_tracker(model, optimizer)
        recorder = CollectiveRecorder()
        with tracker, recorder:
            _loss(model, ids, spec).backward()
        params, grads, states = sharded_state_bytes(model, optimizer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        snapshot = tracker.get_tracker_snapshot("peak")
    if per_rank[0] != params:
        raise LlmcalcError(f"internal: rank 0's sharding rule gives {per_rank[0]:.0f} parameter bytes, the model "
                           f"holds {params:.0f}")
    categories: dict[str, float] = {}
    for stats in snapshot.values():
        for kind, value in stats.items():
            key = str(kind).split(".")[-1].lower()
            categories[key] = categories.get(key, 0.0) + value
    peak = max(categories.pop("total", 0.0), params + grads + states)  # the optimizer step: all three alive
    return {"param_bytes": params, "grad_bytes": grads, "optimizer_bytes": states, "peak_memory_bytes": peak,
            "collectives": recorder.by_kind(), "flops": float(recorder.flops), "per_rank": per_rank,
            "categories": categories, "calls": {(c["kind"], c["group"]): c for c in recorder.summary()}}


def _extrapolate(a, b, la: int, lb: int, depth: int):
    """a at la blocks, b at lb blocks -> the affine value at `depth` blocks, structure by structure."""
    if isinstance(a, dict):
        return {k: _extrapolate(a.get(k, 0.0 if not isinstance(b[k], dict) else {}), b[k], la, lb, depth)
                for k in {**a, **b}}
    if isinstance(a, list):
        return [_extrapolate(x, y, la, lb, depth) for x, y in zip(a, b, strict=True)]
    if isinstance(a, str) or a is None or b is None:
        return b
    step = (b - a) / (lb - la)
    value = b + (depth - lb) * step
    return int(round(value)) if isinstance(a, int) and isinstance(b, int) else float(round(value))


def virtual_distributed_profile(spec: ModelSpec, world_size: int, tp: int = 1, batch: int = 1, seq: int = 2048,
                                mixed: bool = True, attention: str = "sdpa", all_layers: bool = False
                                ) -> DistributedResult:
    """Rank 0 of a (world/tp) x tp FSDP2 + TP training step on a fake process group and fake tensors.

    Every block is the same FSDP unit with the same TP plan, so each measured figure (state bytes,
    collective bytes, FLOPs, peak memory at a fixed peak phase) is affine in the number of blocks: a
    model deeper than FULL_DEPTH_LAYERS is measured at SAMPLE_DEPTHS blocks and extrapolated to its
    depth (exact for the affine figures; `all_layers` measures the whole depth instead)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    layout = check_layout(spec, world_size, tp)
    if dist.is_initialized():
        raise LlmcalcError("a process group is already initialised in this process")
    sampled = not all_layers and spec.n_layers > FULL_DEPTH_LAYERS
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        if sampled:
            la, lb = SAMPLE_DEPTHS
            runs = [_virtual_once(with_layers(spec, n), layout, batch, seq, mixed=mixed, attention=attention)
                    for n in (la, lb)]
            m = _extrapolate(runs[0], runs[1], la, lb, spec.n_layers)
        else:
            m = _virtual_once(spec, layout, batch, seq, mixed=mixed, attention=attention)
    finally:
        dist.destroy_process_group()
    analytic = analytic_figures(spec, layout, batch, seq, mixed)
    result = DistributedResult(spec.name, "virtual", world_size, {"dp": layout.dp, "tp": layout.tp}, batch_size=batch,
                               seq_len=seq, precision="bf16 compute, fp32 sharded state" if mixed else "fp32")
    result.ranks = rank_rows(analytic, m["per_rank"], m)
    result.memory_by_category = m["categories"]
    result.collective_calls = sorted(m["calls"].values(), key=lambda c: (c["kind"], c["group"]))
    result.notes = _notes(analytic, layout, mixed) + [
        "virtual run: rank 0 measured on a fake process group (collectives are no-ops, every rank runs the same "
        "program); ranks 1.. take rank 0's measured figures with parameter, gradient and optimizer bytes from the "
        "sharding rule (torch.chunk over dp on dim 0 after the TP split) applied to the measured DTensor shapes",
        "peak memory = max(FSDPMemTracker's total at its highest point of a steady-state forward + backward, with "
        "the AdamW states alive; the sharded parameters + gradients + AdamW states measured at the optimizer step). "
        "The tracker is not run over the optimizer step: it sizes DTensor optimizer states far above their local "
        "shards there (with foreach AdamW, 18-100x here), so that phase is taken from the measured shards, "
        "without foreach temporaries; memory_by_category is the tracker's breakdown at its peak"]
    if sampled:
        result.notes.append(
            f"measured at {SAMPLE_DEPTHS[0]} and {SAMPLE_DEPTHS[1]} blocks and extrapolated linearly to "
            f"{spec.n_layers} (every block is the same FSDP unit and TP plan: state, collective bytes and FLOPs are "
            f"affine in depth; the peak too while its phase stays the same); --all-layers measures every block")
    return result


def _notes(analytic: dict, layout: Parallel, mixed: bool) -> list[str]:
    return [
        f"analytic state: analytic/memory.py, recipe {analytic['recipe']} (4 + 4 + 8 bytes per parameter), ZeRO-3 "
        f"over dp={layout.dp}, tp={layout.tp} (Megatron: layer matrices, embedding and head / tp, norms replicated), "
        f"peak at the {analytic['estimate'].peak_phase} (no optimizer scratch, like the measured peak)",
        "analytic collectives: analytic/comm.py, bytes each rank sends = buffer x nccl-tests bus factor; FSDP2 = "
        "zero 3 (all-gather forward + backward in " + ("bf16" if mixed else "fp32") + ", reduce-scatter in fp32), "
        "TP = 2 all-reduces of [tokens, d_model] per layer per pass (forward, backward); measured adds the "
        "embedding's and the LM head's TP collectives, which the formula leaves out",
        "flops: matmul-class ops on this rank's local shards (DTensor unwrapped); analytic = counted train-step "
        "FLOPs / tp",
    ]
