"""Step time and MFU predicted from the parallel layout: TP x CP x PP x DP (x EP), per GPU.

The model, one micro-batch on one pipeline stage at a time, then the pipeline, then the step. Each term is a
mechanism with a published measurement of it (llmcalc.analytic.kernels for the kernels, comm for the
collectives); one constant is fitted to whole training steps, KERNEL_EFFICIENCY. Every prediction lists what
it assumed (``StepPrediction.assumptions``, JSON ``assumptions``).

1. Compute, per layer, from the flops module's per-layer ops (``flops.layer_ops``: a new layer kind arrives with
   its FLOPs) split over tp and cp:
   - projections as GEMMs on the smooth roofline at the recipe's GEMM rate (``kernels.gemm_seconds``; bf16, FP8,
     MXFP8, NVFP4), fused as Megatron-Core builds them (QKV, gate+up); forward, then the backward's input- and
     weight-gradient GEMMs with their own shapes; MoE experts as one grouped GEMM of the rows each local expert
     receives (times MoE_IMBALANCE on the slowest rank);
   - FP8/FP4 recipes quantize each GEMM input (activations forward, output gradients backward) in
     memory-bound passes (``kernels.QUANT_BYTES``) and their weights once per step;
   - the attention core at the kernel's measured rate for its head dim, length and mask, on the pairs it
     computes (causal for a decoder whatever ``causal`` counts, the window of sliding layers, the chunks of
     chunked attention), BF16 under FP8 recipes unless ``fp8_attention``; eager attention (materialised S²,
     Megatron-LM before FlashAttention) as batched GEMMs and softmax passes (``eager_attention_seconds``);
   - state-space scans (Mamba-2 SSD, Gated DeltaNet) in their chunked tensor-core form, conv1d and
     elementwise work (norms, rotary, activation, residual adds, MoE permute/unpermute) as bytes at the HBM
     bandwidth, fused as Transformer Engine / torch.compile run them (``fused_elementwise``; eager PyTorch
     makes twice the passes);
   - recomputation re-runs what it recomputes: full (all layers, or the first ``recompute_layers`` of each stage
     chunk, Megatron's block method), selective (the attention core), or a list of modules
     (``RECOMPUTE_MODULES``: core_attn, layernorm, mla_up_proj, moe_act, mlp, moe, shared_experts).
2. Communication (llmcalc.analytic.comm), ranks placed by the framework's order (``order``, default
   Megatron-Core's "tp-cp-ep-dp-pp"; "tp-cp-ep-pp-dp" is Llama 3's [TP, CP, PP, DP]); the routed experts' mesh
   [etp, ep, expert dp] folds over the tp x cp x dp ranks (Megatron-Core's MoE parallel folding):
   - TP all-gather / reduce-scatter (or all-reduce) around each sub-block: exposed; with ``tp_overlap`` under
     that pass's GEMMs (only the excess exposed);
   - CP: p2p ring chunk by chunk (each step's K/V transfer under the previous step's attention block, load-
     balanced chunks: ``cp_comm="p2p"``, Megatron's default), all-gather of K/V before the kernel (Llama 3:
     exposed), or all-to-all of Q, K, V and O over heads (Ulysses; exposed);
   - EP dispatch / combine all-to-alls: exposed, or with ``ep_overlap`` under the other micro-batch's compute
     (Megatron's 1F1B A2A overlap, DualPipe) at the cost of the SMs the communication kernels hold;
   - PP sends delay the dependent action on the next rank (pipeline.py);
   - DP (over dp x cp ranks: CP ranks hold the same weights): gradient reduce-scatter under the last
     micro-batch's backward and weight all-gather under the first forward (Megatron's overlapped distributed
     optimizer; the last bucket exposed); ZeRO-3 per layer and micro-batch, each layer's transfer under the
     previous layer's compute (FSDP prefetch).
3. Pipeline: llmcalc.analytic.pipeline (closed form where the schedule's timeline is exact, else simulated);
   layers split over pp·vpp stages as evenly as possible, any shortfall from the first and last stages (which
   also hold the embedding and the LM head, and the MTP layers), as Llama 3 did.
4. Optimizer step: memory-bound AdamW (or Muon, whose Newton-Schulz iterations are GEMMs) over this GPU's
   shard, and the FP8/FP4 recipes' weight casts.

Step time = pipeline makespan + exposed DP + optimizer. MFU = model FLOPs / (step x GPUs x peak) (PaLM App. B);
HFU counts recomputation. ``causal`` changes only how FLOPs are counted, never the time.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from typing import Any, NamedTuple

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass, replaced
from ..spec import ModelSpec
from ..units import GIB, plural
from ..validate import DEFAULT_ZERO, MAX_BATCH, RANK_ORDER, RANK_ORDER_DIMS, rank_order
from . import comm, kernels
from .activations import ATTENTION_IMPLS, ActivationEstimate, activation_memory, kept_terms, layer_saved
from .flops import RECOMPUTE, StepFlops, forward_ops, has_backward, indexer_ops, layer_ops, step_flops, utilization
from .kernels import (  # noqa: F401  (re-exported: the step model's public names)
    ATTENTION_KERNELS,
    Device,
    attention_seconds,
    device_for,
    gemm_seconds,
    steptime_presets,
    stream_seconds,
    tile_wave_efficiency,
)
from .memory import (
    OPTIMIZERS,
    RECIPES,
    Recipe,
    _fp8_inputs,
    _layer_params,
    fp8_state_bytes,
    lookup,
    peak_from,
    peak_of,
    routed_expert_params,
    state_terms_of,
    zero3_gathered,
)
from .parallel import (
    Parallel,
    _build,
    _built,
    _defaults,
    check_degrees,
    check_experts,
    check_heads,
    check_stages,
    check_zero,
    data_parallel,
    whole,
)
from .params import count_params, layer_blocks
from .pipeline import SCHEDULES, chunks_per_rank, path_bounds, simulate_pair, stage_of

# The one constant fitted to whole training steps: the share of the isolated-kernel rates (MAMF, the attention
# tables, streaming HBM) that kernels keep inside a real training step (clocks under sustained power load,
# launch gaps, synchronisation). Fitted once, globally, to the validation set of benchmarks/bench_steptime.py
# (least squares in log space over all rows); the benchmark reports its leave-one-source-out errors.
KERNEL_EFFICIENCY = 0.73
# Load imbalance of routed experts under dropless routing with an auxiliary balance loss: tokens on the most
# loaded EP rank / the mean. 1.0 = forced balance (Megatron-Core's --moe-router-force-load-balancing, what MoE
# benchmarks run); published runs with real routing pass their own (--moe-imbalance).
MOE_IMBALANCE = 1.0
# SMs the expert-parallel communication kernels hold while they overlap compute: "only 20 SMs are sufficient to
# fully utilize the bandwidths of IB and NVLink" (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.2.2).
EP_OVERLAP_SMS = 20
# The share of the expert all-to-alls that 1F1B A2A overlap (Megatron-Core --overlap-moe-expert-parallel-comm)
# hides behind the other micro-batch's compute: calibrated once on the one published pair that isolates it,
# Megatron-MoE-ModelZoo's Qwen3-235B on 256 H100 with EP 32 across nodes, 19.7 s per step without and 17.6 s with
# it (the same layout; bench_steptime.fit_ep_overlap). The rest stays exposed: the dispatch -> experts -> combine
# chain of one micro-batch can hide only behind the parts of the other's layer that are independent of it.
EP_OVERLAP_SHARE = 0.4
# Megatron's distributed-optimizer bucket: max(40 M, 1 M x dp) parameters (megatron/core/distributed/
# distributed_data_parallel_config.py bucket_size default); the last bucket's reduction cannot overlap.
DP_BUCKET_PARAMS = 40e6
ORDER = RANK_ORDER  # Megatron-Core's default rank order (innermost first)
ORDER_DIMS = RANK_ORDER_DIMS
CP_COMMS = ("p2p", "all-gather", "a2a", "a2a+p2p")
# What a selective recomputation can re-run: Megatron-Core's --recompute-modules (core_attn, layernorm,
# mla_up_proj, moe_act, mlp, moe, shared_experts), and two torch/JAX policies: mlp_act (the dense MLP's activation,
# which MaxText's and torch's SAC policies re-run) and alternate_mm (torch per-op SAC, torchtitan's "op" policy:
# every other matmul of the block is recomputed, the others' outputs saved).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts", "mlp_act",
                     "alternate_mm")
MUON_NS_STEPS = 5  # Newton-Schulz iterations per step (Jordan et al. 2024, Moonlight arXiv 2502.16982)
# Projections that read the same input run as one GEMM with their output columns concatenated, as Megatron-Core
# builds them: linear_qkv (q, k, v) and linear_fc1 (gate and up).
FUSED_GEMMS = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "fc1", "up_proj": "fc1"}
ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "x_proj")  # input dimension split over tp
REPLICATED = ("q_a_proj", "kv_a_proj")  # MLA's down-projections: every TP rank runs them whole (Megatron-Core)
STREAMED = ("conv1d",)  # depthwise convolutions: memory-bound

GLOBAL_CONSTANTS = {
    "MAMF (per accelerator preset and dtype)": "measured max achievable bf16 and fp8 matmul FLOP/s, S. Bekman "
                                               "ml-engineering table",
    "GEMM shape model": "tile/wave quantization (256x128, 128x256, 128x128, 64x128), a 256-step epilogue, smooth "
                        "roofline p = 1.5: fitted once to DeepGEMM's H800 table (6 % rms)",
    "attention kernels": "cuDNN 9.19/9.22 on H200, GB200, GB300 (cudnn-frontend SDPA benchmark); FlashAttention-3 "
                         "paper H100 tables (FA2, 2024 cuDNN, FA3) by head dim, length, mask, scaled per generation "
                         "(FA2 paper on A100, FA4 paper on B200)",
    f"HBM_EFFICIENCY = {kernels.HBM_EFFICIENCY}": "STREAM triad 92 % of datasheet HBM on H100",
    "FP8/FP4 quantization": "TE gemm_profiling autocast vs pre-quantized: 5.2-8.2 effective bytes per quantized "
                            "element by recipe",
    f"KERNEL_EFFICIENCY = {KERNEL_EFFICIENCY}": "fitted once to every validation row (benchmarks/bench_steptime.py, "
                                                "leave-one-source-out errors there)",
    f"NCCL_BUS_EFFICIENCY = {comm.NCCL_BUS_EFFICIENCY}": "nccl-tests ring busbw 76-82 % of NVLink (A100-B200)",
    f"NCCL_NET_EFFICIENCY = {comm.NCCL_NET_EFFICIENCY}": "nccl-tests across nodes: 85-96 GB/s of 100 GB/s",
    "NVLS all-reduce": "nccl-tests NVLink SHARP: 480 of 450 GB/s on H200, 838 of 900 on B200",
    "collective latency": "alpha per ring step fitted to nccl-tests curves: 5 us NVLink, 7 us across nodes",
}


def _order_dims(order: str) -> tuple[str, ...]:
    dims = _ORDERS.get(order)
    if dims is None:
        dims = _ORDERS[order] = rank_order(order)
    return dims


_ORDERS: dict[str, tuple[str, ...]] = {}  # the valid rank orders met, as their dimensions


@dataclass(frozen=True)
class Layout(Parallel):
    """A parallel layout (the degrees, ZeRO, sequence parallelism: ``parallel.Parallel``) with what one training
    step of it runs: micro-batch and global batch, the pipeline schedule, rank order, overlaps and the settings
    of the kernels (module docstring)."""

    micro_batch: int = 1
    global_batch: int = 1  # sequences per step
    schedule: str = "1f1b"
    dp_overlap: bool = True  # False: gradients reduced after the backward (Megatron-LM 2021)
    tp_overlap: bool = False  # True: TP collectives hidden behind the GEMMs next to them (see _tp_exposed)
    ep_overlap: bool = False  # True: expert all-to-alls under the other micro-batch's compute
    order: str = ORDER
    cp_comm: str = "p2p"
    cp_a2a_size: int = 0  # cp_comm "a2a+p2p": the inner (all-to-all) level's size; the ring runs over cp / it
    recompute_layers: int = 0  # with recompute "full": layers of each stage chunk that recompute (0: all)
    recompute_modules: tuple[str, ...] = ()  # with recompute "selective": what is recomputed (default core_attn)
    mtp_layers: int = 0  # multi-token prediction layers (DeepSeek-V3) on the last stage
    first_stage_layers: int = 0  # layers of the first pipeline rank, all its chunks (0: the even split)
    last_stage_layers: int = 0  # layers of the last pipeline rank (Megatron's num_layers_in_last_pipeline_stage)
    fp8_param_gather: bool = False  # ZeRO / FSDP all-gather the FP8 copy of the weights (1 byte, not 2)
    attention_kernel: str = "auto"
    fp8_attention: bool = False
    moe_imbalance: float = MOE_IMBALANCE
    ep_dispatcher: str = "alltoall"
    fused_elementwise: bool = True
    optimizer: str = "adamw"

    @property
    def grad_accum(self) -> int:
        """Micro-batches each pipeline runs per step (= gradient-accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def strides(self) -> dict[str, int]:
        """Rank distance between neighbours of each dense dimension (tp, cp, dp, pp) in this rank order."""
        sizes = {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}
        return _strides(self.order, sizes)

    def expert_strides(self) -> dict[str, int]:
        """The same for the experts' mesh (Megatron-Core's expert RankGenerator: tp -> etp, cp -> 1,
        dp -> expert dp)."""
        sizes = {"tp": self.expert_tp, "cp": 1, "ep": self.ep, "dp": self.expert_dp, "pp": self.pp}
        return _strides(self.order, sizes)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "ep": self.ep,
                "etp": self.expert_tp,
                "micro_batch": self.micro_batch, "global_batch": self.global_batch, "grad_accum": self.grad_accum}


def _strides(order: str, sizes: dict[str, int]) -> dict[str, int]:
    key = (order, *sizes.values())
    out = _STRIDES.get(key)
    if out is None:
        out, stride = {}, 1
        for dim in _order_dims(order):
            out[dim] = stride
            stride *= sizes[dim]
        if len(_STRIDES) > 100_000:
            _STRIDES.clear()
        _STRIDES[key] = out
    return dict(out)


_STRIDES: dict[tuple, dict[str, int]] = {}  # per rank order and sizes (in tp, cp, ep, dp, pp order): a layout
# search asks each layout's several times


def _group_per_node(dims: list[tuple[int, int]], per_node: int) -> int:
    """Members of a group made of dimensions (size, stride) that sit in one node of `per_node` consecutive ranks."""
    members = 1
    for size, stride in dims:
        members *= max(1, min(size, per_node // stride)) if stride < per_node else 1
    return members


class _Candidate(NamedTuple):
    """One layout `search_layouts` tries: parallel degrees and the micro-batch."""

    tp: int
    cp: int
    pp: int
    vpp: int
    micro_batch: int
    ep: int = 1
    etp: int = 0


def _expert_degrees(spec: ModelSpec, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) tried for an MoE model (etp 0 = tp): with etp = tp, ep 1 and the two largest powers of two
    (up to 64) dividing the experts and cp x dp; with tp > 1 also etp 1, each expert whole on its GPU, ep the two
    largest powers of two dividing the experts and tp x cp x dp (Megatron-Core's MoE parallel folding)."""
    if not spec.is_moe:
        return [(1, 0)]
    powers = (2, 4, 8, 16, 32, 64)
    fits = [e for e in powers if spec.n_experts % e == 0 and cp * dp % e == 0]
    out = [(1, 0)] + [(e, 0) for e in fits[-2:]]
    if tp > 1:
        folded = [e for e in powers if spec.n_experts % e == 0 and tp * cp * dp % e == 0]
        out += [(e, 1) for e in folded[-2:]]
    return out


def _candidates(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, per_node: int) -> list[_Candidate]:
    """The layouts `search_layouts` tries: tp within a node dividing the heads, pp dividing the GPUs,
    cp keeping >= 1024 tokens per rank, micro-batch 1, 2 or 4 dividing the global batch, vpp 2 or 4
    where the micro-batch count is a multiple of pp."""
    tps = [t for t in (1, 2, 4, 8, 16) if t <= per_node and per_node % t == 0 and spec.n_heads % t == 0]
    pps = [p for p in range(1, min(spec.n_layers, 64) + 1) if n_gpus % p == 0]
    cps = [c for c in (1, 2, 4, 8, 16) if seq_len % c == 0 and seq_len // c >= 1024 or c == 1]
    candidates: list[_Candidate] = []
    new = tuple.__new__
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if n_gpus % (tp * cp * pp):
                    continue
                dp = n_gpus // (tp * cp * pp)
                experts = _expert_degrees(spec, tp, cp, dp)
                for mb in (1, 2, 4):
                    if global_batch % (dp * mb):
                        continue
                    m = global_batch // (dp * mb)
                    vpps = [1] + ([2, 4] if pp > 1 and m % pp == 0 else [])
                    candidates += [new(_Candidate, (tp, cp, pp, v, mb, ep, etp)) for v in vpps  # _Candidate(...)
                                   if pp * v <= spec.n_layers for ep, etp in experts]
    return candidates


def check_modelled(spec: ModelSpec) -> None:
    """The step-time model times decoder layers from their per-layer ops: attention (full, sliding, chunked;
    GQA, MLA), Mamba / Mamba-2 / Gated DeltaNet / short-conv mixers, Zamba2's shared blocks, dense MLPs and MoE;
    an encoder or encoder-decoder is refused in one line."""
    if spec.architecture != "decoder":
        raise LlmcalcError(f"the step-time model (layout, train --global-batch) covers decoder-only models; "
                           f"{spec.name} is {spec.architecture}. Give its time with `llmcalc train --mfu ...`")


STEP_DEFAULTS = {"ep_overlap": False, "order": ORDER, "cp_comm": "p2p", "cp_a2a_size": 0,
                 "recompute_layers": 0,
                 "recompute_modules": (), "mtp_layers": 0, "first_stage_layers": 0,
                 "last_stage_layers": 0, "fp8_param_gather": False, "attention_kernel": "auto", "fp8_attention": False,
                 "moe_imbalance": MOE_IMBALANCE, "ep_dispatcher": "alltoall", "fused_elementwise": True,
                 "optimizer": "adamw"}
EP_DISPATCHERS = ("alltoall", "deepep")


def make_layout(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, tp: int = 1, cp: int = 1, pp: int = 1,
                vpp: int = 1, ep: int = 1, micro_batch: int = 1, schedule: str | None = None, zero: int = DEFAULT_ZERO,
                sequence_parallel: bool = True, dp_overlap: bool = True, tp_overlap: bool = False,
                etp: int | None = None, **step: Any) -> Layout:
    """A checked layout: dp = n_gpus / (tp·cp·pp); every contradiction is one clear LlmcalcError (the shared
    checks of ``parallel``; the step model splits layers unevenly over the stages, as Llama 3 did). `step`:
    the kernel and overlap settings of STEP_DEFAULTS."""
    options = dict(schedule=schedule, zero=zero, sequence_parallel=sequence_parallel, dp_overlap=dp_overlap,
                   tp_overlap=tp_overlap)
    make = _layout_maker(spec, n_gpus, seq_len, global_batch, options=options, step=step)
    return make((tp, cp, pp, vpp, micro_batch, ep, etp), True)


def _layout_maker(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, options: dict[str, Any],
                  step: dict[str, Any]) -> Callable[[tuple, bool], Layout]:  # long: make_layout's checks, in order
    """make_layout in two parts: its checks of the model and the step settings at once, then a function of the
    degrees (tp, cp, pp, vpp, micro-batch, ep, etp or None) that runs the rest, in make_layout's order, and builds
    the layout (the same Layout as Layout.over's, from one template of its fields: a layout search builds
    thousands). The checks that read no degree (the ZeRO stage, --tp-overlap without SP, and _check_step_settings
    where _settings_inert finds that it passes every layout of the template) are decided once and make skips those
    that pass: the same layouts and the same first error; so are check_heads per tp and check_experts per expert
    mesh once they passed (each reached with whole numbers only). `make(degrees, checked=False)` (search_layouts')
    skips the checks that _candidates' degrees pass whenever the GPU count and the global batch are whole numbers:
    whole-number degrees, tp x cp x pp dividing the GPUs. `options`: make_layout's schedule, zero,
    sequence_parallel, dp_overlap and tp_overlap."""
    check_modelled(spec)
    unknown = sorted(set(step) - set(STEP_DEFAULTS))
    if unknown:
        raise LlmcalcError(f"unknown step settings {', '.join(unknown)}")
    settings = dict(step)  # the given ones: Layout's defaults are STEP_DEFAULTS' (fewer keywords build it faster)
    if isinstance(settings.get("recompute_modules"), str):  # "layernorm,moe_act" as typed
        settings["recompute_modules"] = tuple(m.strip() for m in settings["recompute_modules"].split(",")
                                              if m.strip())
    given_schedule, zero, sequence_parallel = options["schedule"], options["zero"], options["sequence_parallel"]
    tp_overlap = options["tp_overlap"]
    defaults = _defaults(Layout)
    assert defaults is not None  # every Layout field has a plain default
    template = {**defaults, **settings, "zero": zero, "sequence_parallel": sequence_parallel,
                "global_batch": global_batch, "dp_overlap": options["dp_overlap"], "tp_overlap": tp_overlap}
    # what make checks that reads no degree, once: whether it passes (make then skips it; else it checks in order)
    zero_ok = zero in (0, 1, 2, 3)  # check_zero's test
    overlap_ok = not (tp_overlap and not sequence_parallel)
    inert = _settings_inert(spec, template)
    trusted = whole(n_gpus, global_batch)  # checked=False may skip the checks of whole-number degrees
    heads_ok: set[int] = set()  # the tp values check_heads passed
    experts_ok: set[tuple[int, int, int]] = set()  # the (ep, etp, tp x cp x dp) check_experts passed
    new = object.__new__

    def make(degrees: tuple, checked: bool = True) -> Layout:
        tp, cp, pp, vpp, micro_batch, ep, etp = degrees
        checked = checked or not trusted
        if checked and not whole(vpp, ep, micro_batch, global_batch, 1 if etp is None else etp):
            check_degrees(**{"--vpp": vpp, "--ep": ep, "--micro-batch": micro_batch, "--global-batch": global_batch,
                             **({"--etp": etp} if etp is not None else {})})
        schedule = given_schedule or ("interleaved" if vpp > 1 else "1f1b")
        if schedule not in SCHEDULES:
            raise LlmcalcError(f"unknown --schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
        if vpp > 1 and schedule != "interleaved":
            raise LlmcalcError(f"--vpp {vpp} needs --schedule interleaved (got {schedule})")
        # Layout.over: its checks (data_parallel), then its fields over the template's (parallel._built's instance,
        # the template's fields in its order, each degree set in place)
        dp = data_parallel(n_gpus, tp, cp, pp) if checked else n_gpus // (tp * cp * pp)
        lay = new(Layout)
        fields = lay.__dict__
        fields.update(template)
        fields["tp"] = tp
        fields["cp"] = cp
        fields["pp"] = pp
        fields["dp"] = dp
        fields["vpp"] = vpp
        fields["ep"] = ep
        fields["etp"] = etp or 0
        fields["micro_batch"] = micro_batch
        fields["schedule"] = schedule
        if tp not in heads_ok:
            check_heads(spec, tp)
            heads_ok.add(tp)
        if seq_len % cp:
            raise LlmcalcError(f"--cp {cp} does not divide --seq-len {seq_len}")
        if global_batch % (dp * micro_batch):
            raise LlmcalcError(f"--global-batch {global_batch} is not a multiple of dp x micro-batch = {dp} x "
                               f"{micro_batch} = {dp * micro_batch} sequences")
        if pp * chunks_per_rank(schedule, vpp) > spec.n_layers + 2:  # the embedding and the loss may take a stage each
            check_stages(spec, pp, chunks_per_rank(schedule, vpp))
        if ep > 1 or etp is not None:
            mesh = (ep, lay.expert_tp, tp * cp * dp)
            if mesh not in experts_ok:
                check_experts(spec, *mesh, "tp x cp x dp")
                experts_ok.add(mesh)
        if not zero_ok:
            check_zero(zero)
        if not overlap_ok:
            raise LlmcalcError("--tp-overlap splits the all-gather / reduce-scatter of sequence parallelism around "
                               "the GEMMs; it needs --sequence-parallel (drop --no-sequence-parallel)")
        if not inert:
            _check_step_settings(spec, lay)
        return lay
    return make


def _settings_inert(spec: ModelSpec, template: dict[str, Any]) -> bool:
    """Whether _check_step_settings passes every layout built from `template` (_layout_maker's), whatever its
    degrees: none of the settings whose checks read a degree is set (cp_comm a2a or a2a+p2p: the heads over tp and
    cp; ep_overlap: the expert mesh and micro-batches; first / last stage layers: pp and the chunks; an ep_dispatcher
    other than alltoall: the expert mesh), and the rest, which read only the template and the model, pass on the
    template's own layout."""
    if template["cp_comm"] not in ("p2p", "all-gather") or template["ep_overlap"] or template["first_stage_layers"] \
            or template["last_stage_layers"] or template["ep_dispatcher"] != "alltoall":
        return False
    try:
        _check_step_settings(spec, _built(Layout, dict(template)))
    except Exception:  # noqa: BLE001 (make checks them in order, raising as it does)
        return False
    return True


def _check_step_settings(spec: ModelSpec, lay: Layout) -> None:
    """The kernel and overlap settings against the model and layout, one line each."""
    _order_dims(lay.order)
    if lay.cp_comm not in CP_COMMS:
        raise LlmcalcError(f"--cp-comm must be one of {', '.join(CP_COMMS)}; got {lay.cp_comm!r}")
    if lay.cp_a2a_size and lay.cp_comm != "a2a+p2p":
        raise LlmcalcError("--cp-a2a-size sizes the all-to-all level of hierarchical context parallelism: it needs "
                           "--cp-comm a2a+p2p")
    if lay.cp_comm == "a2a+p2p":
        a = lay.cp_a2a_size
        if not a:
            raise LlmcalcError("--cp-comm a2a+p2p needs --cp-a2a-size (Megatron's "
                               "--hierarchical-context-parallel-sizes A P: the all-to-all level A)")
        if a < 2 or lay.cp % a or a == lay.cp:
            raise LlmcalcError(f"--cp-a2a-size {a} must divide --cp {lay.cp} into 2 or more ring steps and be at "
                               f"least 2 (a = cp is --cp-comm a2a)")
        if (spec.n_heads // lay.tp) % a:
            raise LlmcalcError(f"--cp-a2a-size {a} splits the heads: {spec.n_heads} heads / tp {lay.tp} is not a "
                               f"multiple of {a}")
    if lay.cp_comm == "a2a" and lay.cp > 1 and (spec.n_heads // lay.tp) % lay.cp:
        raise LlmcalcError(f"--cp-comm a2a splits the heads over cp: {spec.n_heads} heads / tp {lay.tp} is not a "
                           f"multiple of cp {lay.cp}; use --cp-comm p2p")
    if lay.ep_overlap and not (spec.is_moe and lay.alltoall):
        raise LlmcalcError("--ep-overlap hides expert all-to-alls: it needs an MoE model with --ep > 1 (or --etp "
                           "other than --tp)")
    if lay.ep_overlap and lay.grad_accum < 2:
        raise LlmcalcError("--ep-overlap overlaps one micro-batch's all-to-alls with another's compute: it needs 2 "
                           "or more micro-batches per pipeline (raise --global-batch or lower --micro-batch)")
    _check_stage_layers(spec, lay)
    if lay.mtp_layers < 0:
        raise LlmcalcError(f"--mtp-layers must be >= 0, got {lay.mtp_layers}")
    if lay.attention_kernel not in ATTENTION_KERNELS:
        raise LlmcalcError(f"--attention-kernel must be one of {', '.join(ATTENTION_KERNELS)}")
    if not (lay.moe_imbalance >= 1 and math.isfinite(lay.moe_imbalance)):
        raise LlmcalcError(f"--moe-imbalance is the most loaded EP rank's tokens over the mean, >= 1; got "
                           f"{lay.moe_imbalance}")
    if lay.ep_dispatcher not in EP_DISPATCHERS:
        raise LlmcalcError(f"--ep-dispatcher must be one of {', '.join(EP_DISPATCHERS)}; got {lay.ep_dispatcher!r}")
    if lay.ep_dispatcher != "alltoall" and not (spec.is_moe and lay.alltoall):
        raise LlmcalcError("--ep-dispatcher picks how routed tokens travel between EP ranks: it needs an MoE model "
                           "with --ep > 1 (or --etp other than --tp)")
    if lay.moe_imbalance != 1 and not spec.is_moe:
        raise LlmcalcError(f"--moe-imbalance needs a mixture-of-experts model; {spec.name} is dense")
    bad = [m for m in lay.recompute_modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise LlmcalcError(f"--recompute-modules: unknown {', '.join(bad)}; use {', '.join(RECOMPUTE_MODULES)}")
    lookup(OPTIMIZERS, "optimizer", lay.optimizer)


def stage_split(n_layers: int, lay: Layout, n_stages: int) -> list[int]:
    """Layers per model stage: `split_layers` unless the layout fixes the first or last pipeline rank's layers.
    Then Megatron-Core's get_transformer_layer_offset (transformer_block.py, num_layers_in_first/last_pipeline_stage
    = --decoder-first/last-pipeline-num-layers): the first rank holds `first_stage_layers`, the last
    `last_stage_layers`, each split evenly over its vpp chunks; the other ranks share the rest evenly (every
    division exact, as Megatron asserts)."""
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if not (first or last):
        return split_layers(n_layers, n_stages)
    v = n_stages // lay.pp
    middle_ranks = lay.pp - bool(first) - bool(last)
    middle = n_layers - first - last
    per_rank = [first if r == 0 and first else last if r == lay.pp - 1 and last else
                (middle // middle_ranks if middle_ranks else 0) for r in range(lay.pp)]
    counts = [0] * n_stages
    for r in range(lay.pp):
        for c in range(v):
            counts[stage_of(lay.schedule, r, c, lay.pp)] = per_rank[r] // v
    return counts


def _check_stage_layers(spec: ModelSpec, lay: Layout) -> None:
    """--first-stage-layers / --last-stage-layers against the pipeline, one line each (Megatron's asserts)."""
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if not (first or last):
        return
    if first < 0 or last < 0:
        raise LlmcalcError("--first-stage-layers / --last-stage-layers must be >= 1")
    if lay.pp < 2:
        raise LlmcalcError("--first-stage-layers / --last-stage-layers set the first and last pipeline ranks' "
                           "layers: they need --pp 2 or more")
    v = chunks_per_rank(lay.schedule, lay.vpp)
    for name, n in (("--first-stage-layers", first), ("--last-stage-layers", last)):
        if n and n % v:
            raise LlmcalcError(f"{name} {n} must be a multiple of the {v} model chunks per rank (--vpp)")
    middle_ranks = lay.pp - bool(first) - bool(last)
    middle = spec.n_layers - first - last
    if middle < 0 or (middle_ranks == 0 and middle) or (middle_ranks and (middle <= 0 or middle % (middle_ranks * v))):
        given = " and ".join(f"{name} {n}" for name, n in (("--first-stage-layers", first),
                                                            ("--last-stage-layers", last)) if n)
        raise LlmcalcError(f"{given} leave{'s' if not (first and last) else ''} {middle} of {spec.n_layers} layers "
                           f"for {middle_ranks} other pipeline ranks x {v} chunks: they must divide evenly")


def split_layers(n_layers: int, n_stages: int) -> list[int]:
    """Layers per pipeline stage: ceil(L/S) everywhere, the shortfall taken one layer at a time from the
    first and last stages inward (Llama 3: 126 layers on 16 x 4 stages -> 1, 2, ..., 2, 1)."""
    per = math.ceil(n_layers / n_stages)
    counts = [per] * n_stages
    short = per * n_stages - n_layers
    order = [i for pair in zip(range(n_stages), reversed(range(n_stages)), strict=True) for i in pair]
    seen = list(dict.fromkeys(order))  # each stage once, at its first place in `order`
    k = 0
    while short:
        counts[seen[k % n_stages]] -= 1
        short -= 1
        k += 1
    return counts


# --- one layer, one micro-batch -----------------------------------------------------------------------------


@dataclass
class StageTimes:
    """Seconds of one micro-batch on one pipeline stage (one model chunk), by part."""

    fwd: float = 0.0  # compute
    bwd_input: float = 0.0  # input gradients, attention backward, elementwise backward, recomputation
    bwd_weight: float = 0.0  # weight gradients
    tp: float = 0.0  # exposed, forward + backward
    cp: float = 0.0
    ep: float = 0.0
    comm_fwd: float = 0.0  # the part of tp + cp + ep exposed in the forward pass
    gemm_fwd: float = 0.0  # forward GEMMs (what TP overlap hides behind)

    @property
    def compute(self) -> float:
        return self.fwd + self.bwd_input + self.bwd_weight

    @property
    def total(self) -> float:
        return self.compute + self.tp + self.cp + self.ep

    def add(self, other: StageTimes, times: float = 1.0) -> None:
        """Add `times` x `other`, part by part."""
        self.fwd += times * other.fwd
        self.bwd_input += times * other.bwd_input
        self.bwd_weight += times * other.bwd_weight
        self.tp += times * other.tp
        self.cp += times * other.cp
        self.ep += times * other.ep
        self.comm_fwd += times * other.comm_fwd
        self.gemm_fwd += times * other.gemm_fwd


_GEMM_BYTES = {"fp8": 1.0, "fp4": 0.5 + 1 / 16, "fp32": 4.0}  # bytes per GEMM input element by GEMM dtype (else act)


@dataclass
class _Ctx:
    """One prediction's fixed inputs, the rates they imply, and the per-layer-kind cache."""

    spec: ModelSpec
    dev: Device
    lay: Layout
    seq: int
    recipe: Recipe
    attention: str = "flash"
    dropout: bool = False
    eff: float = KERNEL_EFFICIENCY
    cache: dict = field(default_factory=dict)
    dense_cache: dict = field(default_factory=dict)  # the layers without routed experts: fewer fields in their key

    @property
    def act(self) -> float:
        return self.recipe.act_bytes

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on this rank's sequence shard (b·S/cp)."""
        return self.lay.micro_batch * self.seq / self.lay.cp

    @property
    def gemm_rate(self) -> float:
        rate = self.dev.gemm_rate(self.recipe.gemm_dtype)
        return rate * kernels.BLOCK_SCALED.get(self.recipe.name, 1.0)

    @property
    def gemm_bytes(self) -> float:
        return _GEMM_BYTES.get(self.recipe.gemm_dtype, self.act)

    def gemm(self, m: float, k: float, n: float, batch: float = 1) -> tuple[float, float, float]:
        """Forward + input-gradient + weight-gradient seconds of one linear (m tokens, k in, n out), as a triple
        (each its own shape: dX = dY·Wᵀ is m x n x k, dW = Xᵀ·dY is k x m x n) plus the quantization of its input
        (forward) and output gradient (backward) under FP8/FP4 recipes."""
        memo = self.__dict__.get("_gemm_memo")  # per batch: what the recipe and device give, once per context
        if memo is None:
            memo = self.__dict__["_gemm_memo"] = {}
        inputs = memo.get(batch)
        if inputs is None:
            inputs = memo[batch] = self._gemm_inputs(batch)
        cid, timer = inputs
        cache = _CACHES["kernels"]
        # each a pure function of its shape: once per shape and device
        fwd = cache.get((m, k, n, cid))
        if fwd is None:
            fwd = self._gemm_seconds(cache, (m, k, n, cid), timer)
        dgrad = cache.get((m, n, k, cid))
        if dgrad is None:
            dgrad = self._gemm_seconds(cache, (m, n, k, cid), timer)
        wgrad = cache.get((k, m, n, cid))
        if wgrad is None:
            wgrad = self._gemm_seconds(cache, (k, m, n, cid), timer)
        if self.recipe.fp8:
            q = kernels.QUANT_BYTES[self.recipe.fp8]
            fwd += stream_seconds(batch * m * k * q, self.dev, self.eff)
            dgrad = dgrad * kernels.QUANT_DGRAD_SLOWDOWN + stream_seconds(batch * m * n * q, self.dev, self.eff)
        return fwd, dgrad, wgrad

    def _gemm_inputs(self, batch: float) -> tuple[int, Callable[[float, float, float], float]]:
        """(the _interned id of what gemm_seconds reads beside the shape: the device, input bytes, `batch`, rate,
        output bytes and efficiency; kernels.gemm_timer of those): gemm's part of its cache keys, once per batch
        and per what gemm_bytes and gemm_rate read (the device, the recipe's GEMM dtype and name, the activation
        bytes), which the contexts of a search share."""
        recipe = self.recipe
        key = ("gemm inputs", _token(self.dev), recipe.gemm_dtype, recipe.name, self.act, self.eff, batch)
        cache = _CACHES["kernels"]
        inputs = cache.get(key)
        if inputs is None:
            in_bytes, rate = self.gemm_bytes, self.gemm_rate
            cid = _interned((_token(self.dev), in_bytes, batch, rate, self.act, self.eff))
            inputs = cache[key] = cid, kernels.gemm_timer(self.dev, in_bytes, batch=batch, rate=rate,
                                                          out_bytes=self.act, efficiency=self.eff)
        return inputs

    @staticmethod
    def _gemm_seconds(cache: dict, key: tuple, timer: Callable[[float, float, float], float]) -> float:
        """gemm_seconds of one shape (`key`: m, k, n and gemm's _gemm_inputs id; `timer`: its gemm_timer), kept in
        `cache`."""
        if len(cache) > 200_000:
            cache.clear()
        m, k, n, _ = key
        seconds = cache[key] = timer(m, k, n)
        return seconds

    def stream(self, nbytes: float) -> float:
        return stream_seconds(nbytes * (1 if self.lay.fused_elementwise else 2), self.dev, self.eff)


def _part_shape(spec: ModelSpec, group: str, part: str, flops: float, tokens: float) -> tuple[float, float, str]:
    """(k, n, style) of op `group/part` whose forward FLOPs over `tokens` tokens are `flops`: the input width k,
    the output width n, and how tensor parallelism splits it: "column" (n), "row" (k) or "replicated"."""
    D = spec.d_model
    if part in ROW_PARALLEL:
        return flops / (2 * tokens * D), D, "row"
    k: float = D
    if group == "shared_block" and part in ("q_proj", "k_proj", "v_proj"):
        k = 2 * D  # Zamba2's shared block reads [hidden, embeddings]
    elif part == "q_b_proj" and spec.mla is not None:
        k = spec.mla.q_lora_rank
    elif part == "kv_b_proj" and spec.mla is not None:
        k = spec.mla.kv_lora_rank
    elif part == "dt_proj":
        k = spec.ssm_dt_rank
    return k, flops / (2 * tokens * k), "replicated" if part in REPLICATED else "column"


def _layer_kind(spec: ModelSpec, i: int) -> tuple:
    """What makes two layers cost the same: their mixers, FFN and attention span."""
    mixers, ffn = spec.layer_parts(i)
    return mixers, ffn, spec.attention_span(i) if "attention" in mixers else ""


def _layer_times(spec: ModelSpec, layer: int, lay: Layout, seq_len: int, causal: bool = True, recompute: str = "none",
                 dev: Device | None = None, act_bytes: float = 2, attention: str = "flash", dropout: bool = False,
                 recipe: str = "bf16-mixed") -> StageTimes:
    """One layer's StageTimes (tests and callers outside predict; `causal` counts FLOPs only, the kernel runs what a
    decoder computes; `act_bytes` is the recipe's)."""
    rec = lookup(RECIPES, "recipe", recipe)
    ctx = _Ctx(spec, dev or device_for("h100-sxm"), lay, seq_len, replace(rec, act_bytes=act_bytes),
               attention=attention, dropout=dropout, eff=KERNEL_EFFICIENCY)
    return _layer_cost(ctx, layer, _recomputes(lay, recompute, layer, 0))


def _recomputes(lay: Layout, recompute: str, layer: int, first_in_chunk: int) -> frozenset[str]:
    """What layer `layer` (the chunk starting at `first_in_chunk`) re-runs in its backward: "block" (full), or
    module names."""
    if recompute == "full":
        if lay.recompute_layers and layer - first_in_chunk >= lay.recompute_layers:
            return frozenset()
        return frozenset({"block"})
    if recompute == "selective":
        return frozenset(lay.recompute_modules or ("core_attn",))
    return frozenset()


def _layer_cost(ctx: _Ctx, i: int, rec: frozenset[str]) -> StageTimes:
    kinds = ctx.dense_cache.get(_KINDS)  # the model's _kinds_of, kept in the dense cache (whose key holds the model)
    if kinds is None:
        spec = ctx.spec
        kinds = ctx.dense_cache[_KINDS] = _cached("params", ("kinds", _token(spec)), lambda: _kinds_of(spec))[0]
    kind = kinds[i]  # _layer_kind(spec, i)
    cache = ctx.cache if kind[1] == "moe" else ctx.dense_cache  # a dense layer's cost reads no expert setting
    key = (kind, rec)
    cached = cache.get(key)
    if cached is None:
        cached = cache[key] = _layer_cost_uncached(ctx, i, rec)
    return cached


_KINDS = ("kinds",)  # _layer_cost's key of the layers' kinds in a dense cache


def _layer_cost_uncached(ctx: _Ctx, i: int, rec: frozenset[str]) -> StageTimes:  # long: one layer's terms in order
    spec, lay = ctx.spec, ctx.lay
    tp, T, D, act = lay.tp, ctx.tokens, spec.d_model, ctx.act
    sp = tp if lay.sequence_parallel else 1
    mixers, ffn = spec.layer_parts(i)
    moe = ffn == "moe"
    # the terms before the MoE block read no expert setting: once per dense key for all the expert meshes (the same
    # floats, summed on in the same order below)
    redone = ("mla_up_proj" in rec, "mlp" in rec)  # all the prefix reads of `rec`
    layer_kind = _layer_kind(spec, i)
    prefix = _cached_in(ctx.dense_cache, ("prefix", layer_kind, redone), lambda: _layer_prefix(ctx, i, rec))
    fwd, dgrad, wgrad, redo, moe_parts, elem_fwd, attn_f, attn_b, cp_f, cp_b = prefix
    t = StageTimes()
    # MoE
    ep_fwd = ep_bwd = 0.0
    if moe:
        # once per kind and what of `rec` it reads: the same for no and full recomputation
        m = _cached_in(ctx.cache, ("moe", layer_kind, "moe" in rec, "moe_act" in rec, "shared_experts" in rec),
                       lambda: _moe_cost(ctx, moe_parts, rec))
        fwd, dgrad, wgrad = fwd + m["fwd"], dgrad + m["dgrad"], wgrad + m["wgrad"]
        elem_fwd += m["elem"]
        ep_fwd, ep_bwd = m["ep_fwd"], m["ep_bwd"]
        redo += m["redo"]
    # memory-bound elementwise work, bytes per layer forward (backward twice that)
    norms = spec.norms_in_layer(i) if spec.is_hybrid else spec.norms_per_layer
    blocks = len(mixers) + (ffn is not None)
    elem_norm = norms * 2 * T * D / sp * act
    elem_fwd += elem_norm + blocks * 3 * T * D / sp * act
    if "attention" in mixers:
        heads = (spec.n_heads + spec.n_kv_heads) / tp
        if spec.pos_emb == "rope":
            rope_width = (spec.n_heads + 1) * spec.mla.qk_rope_head_dim / tp if spec.mla else heads * spec.d_head
            elem_fwd += 2 * T * rope_width * act
        if spec.qk_norm != "none":
            elem_fwd += 2 * T * heads * spec.d_head * act
    if ffn == "mlp":
        act_mlp = (3 if spec.gated else 2) * T * spec.d_ff / tp * act
        elem_fwd += act_mlp
        if rec & {"mlp_act", "mlp"}:
            redo += ctx.stream(act_mlp)
    for kind in mixers:
        if kind in ("mamba", "mamba2", "gated_deltanet"):
            elem_fwd += 3 * T * spec.ssm_d_inner / tp * act  # gated norm: read y and z, write
    elem = ctx.stream(elem_fwd)
    if rec & {"layernorm"}:
        redo += ctx.stream(elem_norm)
    if "core_attn" in rec:
        redo += attn_f
    if "alternate_mm" in rec:
        redo += fwd / 2
    t.fwd = fwd + attn_f + elem
    t.gemm_fwd = fwd
    t.bwd_weight = wgrad
    t.bwd_input = dgrad + attn_b + 2 * elem
    passes = 2
    if "block" in rec:
        t.bwd_input += t.fwd
        passes = 3
    else:
        t.bwd_input += redo
    # TP collectives: an all-gather before and a reduce-scatter after each sub-block (all-reduce without SP)
    if tp > 1:
        tp_blocks = len(mixers) + (ffn == "mlp") + (moe and (not lay.alltoall or spec.n_shared_experts > 0))
        add_tp_comm(t, ctx, D, tp_blocks, passes, fwd=fwd, bwd=dgrad + wgrad)
    t.cp = cp_f + cp_b
    t.comm_fwd += cp_f
    if moe and lay.alltoall:
        if "block" in rec or "moe" in rec:
            ep_bwd += ep_fwd  # the recomputed forward dispatches and combines again
        add_ep_comm(t, ctx, ep_fwd, ep_bwd)
    return t


def _layer_prefix(ctx: _Ctx, i: int, rec: frozenset[str]) -> tuple:
    """_layer_cost_uncached's terms up to the MoE block: (forward, input-gradient and weight-gradient GEMM seconds,
    recomputed forward seconds, the MoE block's FLOPs by part, elementwise forward bytes, attention-core and scan
    forward and backward seconds, exposed CP forward and backward), all read from the layout's dense fields; of `rec`
    only whether it holds mla_up_proj and mlp. The ops' shapes come from _layer_ops_plan (once per layer kind and
    tokens, whatever tp), each GEMM timed and summed in the ops' order."""
    spec, lay = ctx.spec, ctx.lay
    tp, T = lay.tp, ctx.tokens
    mixers, _ = spec.layer_parts(i)
    gemms, streamed, moe_parts = _cached("flops", ("layer plan", _token(spec), i, T),
                                         lambda: _layer_ops_plan(spec, i, T))
    fwd = dgrad = wgrad = 0.0  # GEMMs
    redo = 0.0  # forward work recomputation repeats
    mla_up, mlp = "mla_up_proj" in rec, "mlp" in rec
    for style, k, n, backward, redone in gemms:
        if style == "column":
            f, d, w = ctx.gemm(T, k, n / tp)
        elif style == "row":
            f, d, w = ctx.gemm(T, k / tp, n)
        else:
            f, d, w = ctx.gemm(T, k, n)
        if not backward:  # the lightning indexer's projections: forward only (flops.NO_BACKWARD)
            d = w = 0.0
        fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
        if redone == "mla_up_proj" and mla_up or redone == "mlp" and mlp:
            redo += f
    elem_fwd = 0.0  # bytes
    for nbytes in streamed:  # depthwise conv over its channels: read + write
        elem_fwd += nbytes / tp * ctx.act
    # attention cores and scans
    attn_f = attn_b = cp_f = cp_b = 0.0
    for kind in mixers:
        if kind in ("attention", "shared_block"):
            a = _attention_core(ctx, i, kind)
            attn_f, attn_b, cp_f, cp_b = attn_f + a[0], attn_b + a[1], cp_f + a[2], cp_b + a[3]
            if kind == "attention" and spec.has_indexer(i):
                attn_f += _indexer_scores_seconds(ctx, i)
        elif kind in ("mamba2", "gated_deltanet", "mamba"):
            s_f, s_b = _scan_seconds(ctx, kind)
            attn_f, attn_b = attn_f + s_f, attn_b + s_b
    return fwd, dgrad, wgrad, redo, dict(moe_parts), elem_fwd, attn_f, attn_b, cp_f, cp_b


def _layer_ops_plan(spec: ModelSpec, i: int, T: float) -> tuple:
    """Layer `i`'s ops (``flops.layer_ops`` over `T` tokens) as _layer_prefix times them, whatever tp: the GEMMs in
    its order, each (how tp splits it, k, n before that split, whether it has a backward, what recomputation of
    `rec` repeats its forward: "mla_up_proj", "mlp" or None), the separate GEMMs in the ops' order then the fused
    ones (QKV, gate+up) in the order they first appear; the depthwise convolutions' bytes (2·T·channels, before tp
    and the activation bytes); the MoE block's FLOPs by part."""
    D = spec.d_model
    ops = layer_ops(spec, i, 1, int(round(T)) or 1, causal=True)  # FLOPs of this rank's tokens (before tp)
    gemms: list[tuple] = []
    streamed: list[float] = []
    fused: dict[tuple[str, str], float] = {}
    moe_parts: dict[str, float] = {}
    for name, flops in ops.items():
        group, part = name.split("/")
        if part in ("scores", "values", "indexer_scores") or part == "scan":
            continue  # the attention core, the lightning indexer's scores and the scans: _layer_prefix's own
        if group == "moe" and part in ("router", "experts", "shared_experts"):
            moe_parts[part] = flops
            continue
        if part in STREAMED:  # depthwise conv over its channels: read + write
            streamed.append(2 * T * (flops / (2 * T * spec.ssm_conv_kernel)))
            continue
        if part in FUSED_GEMMS:
            key = (group, FUSED_GEMMS[part])
            fused[key] = fused.get(key, 0.0) + flops
            continue
        k, n, style = _part_shape(spec, group, part, flops, T)
        gemms.append((style, k, n, has_backward(name), "mla_up_proj" if part in ("q_b_proj", "kv_b_proj") else None))
    for (group, _), fused_flops in fused.items():
        width = D * (2 if group == "shared_block" else 1)  # Zamba2's shared block reads [hidden, embeddings]
        gemms.append(("column", width, fused_flops / (2 * T * width), True, "mlp" if group == "mlp" else None))
    return tuple(gemms), tuple(streamed), moe_parts


def add_tp_comm(t: StageTimes, ctx: _Ctx, d_model: int, blocks: float, passes: int, fwd: float, bwd: float) -> None:
    """A layer's TP collectives into `t`: an all-gather before and a reduce-scatter after each of its `blocks`
    tensor-parallel sub-blocks (all-reduce without SP), in each of `passes` passes (forward, backward, the
    recomputed forward); with --tp-overlap each pass's share under its GEMMs (`fwd`, `bwd`: the forward's and the
    backward's GEMM seconds, ``_tp_exposed``), else all exposed. The formula path and the measured step model
    (analytic/measured_step.py) both time them here."""
    lay, net = ctx.lay, ctx.dev.network
    key = ("tp comm", ctx.tokens, d_model, ctx.act, lay.tp, lay.sequence_parallel, passes, blocks, _token(net))
    tpt = _cached("params", key, lambda: comm.total_seconds(
        [replaced(c, {"count": c.count / 2 * blocks}) for c in comm.tp_collectives(
            ctx.tokens, d_model, ctx.act, lay.tp, sequence_parallel=lay.sequence_parallel, passes=passes)], net))
    if lay.tp_overlap:
        per_pass = tpt / passes
        t.tp = _tp_exposed(per_pass, fwd, passes - 1) + _tp_exposed(per_pass, bwd, 1)
        t.comm_fwd += _tp_exposed(per_pass, fwd, 1)
    else:
        t.tp = tpt
        t.comm_fwd += tpt / passes


def add_ep_comm(t: StageTimes, ctx: _Ctx, ep_fwd: float, ep_bwd: float) -> None:
    """A MoE layer's dispatch / combine all-to-alls (`ep_fwd`, `ep_bwd` seconds, a recomputed forward's included)
    into `t`: exposed, or with --ep-overlap EP_OVERLAP_SHARE of them under the other micro-batch's compute, whose
    SMs they hold slowing that compute by EP_OVERLAP_SMS / the device's SMs. Shared by the formula path and the
    measured step model."""
    if ctx.lay.ep_overlap:
        sms = EP_OVERLAP_SMS / ctx.dev.sm_count
        hidden = min(ep_fwd + ep_bwd, t.compute) * EP_OVERLAP_SHARE
        exposed = ep_fwd + ep_bwd - hidden + hidden * sms
        t.ep = exposed
        t.comm_fwd += exposed * ep_fwd / max(ep_fwd + ep_bwd, 1e-30)
    else:
        t.ep = ep_fwd + ep_bwd
        t.comm_fwd += ep_fwd


def _attention_core(ctx: _Ctx, i: int, kind: str) -> tuple[float, float, float, float]:
    """(forward, backward, exposed CP forward, exposed CP backward) seconds of one layer's attention core on this
    rank: the pairs the kernel computes (``ModelSpec.attended_pairs``: causal, windowed, chunked), split over the
    heads of tp and the sequence of cp, at the kernel's rate for the shape (``kernels.attention_seconds``)."""
    spec, lay, dev = ctx.spec, ctx.lay, ctx.dev
    b, S, tp, cp = lay.micro_batch, ctx.seq, lay.tp, lay.cp
    mla = spec.mla
    dqk = mla.qk_head_dim if mla is not None and kind == "attention" else spec.d_head
    dv = mla.v_head_dim if mla is not None and kind == "attention" else spec.d_head
    head_dim = (dqk + dv) / 2
    heads = spec.n_heads / tp
    span = spec.span_tokens(i) if kind == "attention" else 0
    pairs = spec.attended_pairs(i, S) if kind == "attention" else S * (S + 1) / 2
    work = 2 * b * heads * pairs * (dqk + dv) / cp  # forward FLOPs on this rank (QKᵀ + PV)
    if ctx.attention == "eager":
        fwd, bwd = eager_attention_seconds(spec, lay, S, dev, ctx.act, dropout=ctx.dropout, efficiency=ctx.eff)
        return fwd, bwd, *_cp_exposed(ctx, i, fwd, bwd)
    fp8 = lay.fp8_attention
    kernel = lay.attention_kernel
    window = span if span else S
    ring = cp // lay.cp_a2a_size if lay.cp_comm == "a2a+p2p" else cp  # a2a+p2p: the ring over cp / a groups
    if ring > 1 and lay.cp_comm in ("p2p", "a2a+p2p"):  # step 0 causal on the local chunks, then unmasked blocks
        local = S / ring  # a2a+p2p: after the all-to-all, heads / a over the a-group's S / ring tokens
        first = 2 * b * heads * ring / cp * min(local * (local + 1) / 2, local * window) * (dqk + dv)
        rest = max(0.0, work - first)
        blk = min(window, local / 2) * math.sqrt(2)
        near, eff = min(local, window), ctx.eff
        fwd = (_attention_seconds(dev, kernel, first, head_dim, near, causal=True, backward=False, fp8=fp8,
                                 efficiency=eff)
               + _attention_seconds(dev, kernel, rest, head_dim, blk, causal=False, backward=False, fp8=fp8,
                                   efficiency=eff))
        bwd = (_attention_seconds(dev, kernel, 2.5 * first, head_dim, near, causal=True, backward=True, fp8=fp8,
                                 efficiency=eff)
               + _attention_seconds(dev, kernel, 2.5 * rest, head_dim, blk, causal=False, backward=True, fp8=fp8,
                                   efficiency=eff))
    else:
        sliding = window < S  # a window over a longer sequence (kernels.CUDNN_WINDOWED), not a short sequence
        fwd = _attention_seconds(dev, kernel, work, head_dim, window, causal=True, backward=False, fp8=fp8,
                                efficiency=ctx.eff, windowed=sliding)
        bwd = _attention_seconds(dev, kernel, 2.5 * work, head_dim, window, causal=True, backward=True, fp8=fp8,
                                efficiency=ctx.eff, windowed=sliding)
    # the kernel also reads Q, K, V and writes O (and the backward their gradients): its memory floor
    qkvo = b * S / cp * (2 * heads * (dqk + dv) / 2 + 2 * max(1.0, spec.n_kv_heads / tp) * dqk) * ctx.act
    fwd = max(fwd, stream_seconds(qkvo, dev, ctx.eff))
    bwd = max(bwd, stream_seconds(2.5 * qkvo, dev, ctx.eff))
    return fwd, bwd, *_cp_exposed(ctx, i, fwd, bwd)


def _attention_seconds(dev: Device, kernel: str, flops: float, head_dim: float, seq: float, causal: bool,
                       backward: bool, fp8: bool = False, efficiency: float = 1.0, windowed: bool = False) -> float:
    """kernels.attention_seconds: its rate, which reads no FLOPs, once per shape and device (the layouts of a search
    ask it for many FLOPs at the same head dim and length), then its arithmetic, flops / (rate x efficiency)."""
    if flops <= 0:
        return 0.0
    key = ("attention rate", _token(dev), kernel, head_dim, seq, causal, backward, fp8, windowed)
    rate = _CACHES["kernels"].get(key)  # (a hit makes no closure)
    if rate is None:
        rate = _cached("kernels", key, lambda: dev.attention_rate(kernel, head_dim, seq, causal, backward, fp8=fp8,
                                                                  windowed=windowed))
    return flops / (rate * efficiency)


def _indexer_scores_seconds(ctx: _Ctx, i: int) -> float:
    """Forward seconds of layer `i`'s lightning-indexer scores on this rank (DeepSeek Sparse Attention:
    DeepSeek-V3.2, GLM-5; DeepSeek-V4's CSA layers): q·kᵀ of the index_n_heads indexer heads of index_head_dim
    against every key (or the compressed entries), and their head weighting (``flops.indexer_ops``), for the whole
    micro-batch sequence split over the heads of tp and the queries of cp. It is attention-like work, a
    score matrix over query-key pairs (DeepGEMM's mqa_logits kernel), timed at the attention kernel's causal
    forward rate for that head dim and length (an assumption: no published indexer kernel table); it has no
    backward (``flops.NO_BACKWARD``), and its full recomputation repeats it with the layer's forward."""
    spec, lay = ctx.spec, ctx.lay
    flops = indexer_ops(spec, i, lay.micro_batch, ctx.seq, causal=True)["indexer_scores"] / (lay.tp * lay.cp)
    span = ctx.seq if spec.compression(i) != "csa" else spec.compressed_entries(i, ctx.seq)
    return _attention_seconds(ctx.dev, lay.attention_kernel, flops, spec.index_head_dim, span, causal=True,
                             backward=False, fp8=lay.fp8_attention, efficiency=ctx.eff)


def _cp_exposed(ctx: _Ctx, i: int, fwd: float, bwd: float) -> tuple[float, float]:
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
        step_b = 2 * step_f  # backward: K, V and dK, dV
        span = spec.span_tokens(i)
        steps = cp - 1 if not span else min(cp - 1, math.ceil(span / (ctx.seq / cp)))
        return (steps * max(0.0, step_f - fwd / cp), steps * max(0.0, step_b - bwd / cp))
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
        step_b = 2 * step_f
        span = spec.span_tokens(i)
        steps = ring - 1 if not span else min(ring - 1, math.ceil(span / (ctx.seq / ring)))
        return (a2a.seconds(net) + steps * max(0.0, step_f - fwd / ring),
                a2a.seconds(net) + steps * max(0.0, step_b - bwd / ring))
    if lay.cp_comm == "all-gather":  # Llama 3: K and V gathered before the kernel, exposed on the critical path
        fwd_c, bwd_c = comm.cp_collectives(T, kv_width, ctx.act, cp, stride)
        return fwd_c.seconds(net), bwd_c.seconds(net)
    # a2a (Ulysses): Q, K, V in and O out over heads, forward; their gradients backward; all exposed
    width = spec.n_heads / tp * spec.d_head * 2 + 2 * kv_width
    a2a = comm.Collective("CP all-to-all (Q, K, V, O)", "all_to_all", cp, T * width * ctx.act, stride=stride)
    both = a2a.seconds(net)
    return both, both


def _scan_seconds(ctx: _Ctx, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of a state-space mixer's scan on this rank. Mamba-2's SSD and Gated DeltaNet run
    chunked: per token and head 2·Q·(N + P) + 4·N·P tensor-core FLOPs for chunk length Q (Dao & Gu 2024 sec. 6;
    Gated DeltaNet's chunked delta rule adds 2·Q·N for its WY transform, Yang et al. 2024), at the attention
    kernel's rate for a causal block of length Q and head dim P (an assumption: no published SSD kernel table),
    floored by reading x, B, C, dt and writing y; Mamba-1's selective scan is memory-bound on those tensors."""
    spec, lay, dev = ctx.spec, ctx.lay, ctx.dev
    T, tp = ctx.tokens, lay.tp
    E, N, G = spec.ssm_d_inner / tp, spec.ssm_d_state, spec.ssm_n_groups
    H = max(1.0, spec.ssm_n_heads / tp)
    P = E / H
    nbytes = T * (2 * E + 2 * G * N + H) * ctx.act
    if kind == "mamba":
        f = stream_seconds(nbytes + T * E * 2 * ctx.act, dev, ctx.eff)
        return f, 2 * f
    Q = 64 if kind == "gated_deltanet" else 128
    per = 2 * Q * (N + P) + 4 * N * P + (2 * Q * N if kind == "gated_deltanet" else 0)
    flops = T * H * per
    f = max(attention_seconds(dev, "auto", flops, P, Q, causal=True, backward=False, efficiency=ctx.eff),
            stream_seconds(nbytes, dev, ctx.eff))
    b = max(attention_seconds(dev, "auto", 2 * flops, P, Q, causal=True, backward=True, efficiency=ctx.eff),
            stream_seconds(2 * nbytes, dev, ctx.eff))
    return f, b


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

        def dispatch() -> float:  # dispatch + combine of one pass (once per shape and network)
            colls = comm.ep_collectives(local_tokens * lay.moe_imbalance, k, De, act, ep=ep, stride=stride,
                                        passes=1, etp=etp)
            if lay.ep_dispatcher == "deepep":  # one copy per remote node, forwarded over NVLink; ETP collectives kept
                return 2 * comm.deepep_seconds(local_tokens * lay.moe_imbalance, k, E, De, act, ep=ep, stride=stride,
                                               net=net) + comm.total_seconds(colls[1:], net)
            return comm.total_seconds(colls, net)
        one = _cached("params", ("ep comm", local_tokens, lay.moe_imbalance, k, E, De, act, ep, stride, etp,
                                 lay.ep_dispatcher, _token(net)), dispatch)
    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad, "elem": elem, "ep_fwd": one, "ep_bwd": one, "redo": redo}


def _tp_exposed(comm_per_pass: float, gemm_per_pass: float, passes: int) -> float:
    """Exposed TP time of `passes` passes when each pass's all-gathers and reduce-scatters run under its own
    projection GEMMs (TransformerEngine's userbuffer overlap, Megatron-LM --tp-comm-overlap; torchtitan's async
    TP): the GEMMs are split into tp chunks and each chunk's exchange hides behind the previous chunk's matmul,
    so only the excess of communication over matmul stays on the critical path. The SMs and copy engines the
    overlap borrows are not charged (TE's ring-exchange mode moves data with copy engines)."""
    return passes * max(0.0, comm_per_pass - gemm_per_pass)


def eager_attention_seconds(spec: ModelSpec, lay: Layout, seq_len: int, dev: Device, act_bytes: float,
                            dropout: bool, efficiency: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's attention core when the B·H·S² scores are materialised,
    as Megatron-LM did before FlashAttention (Narayanan et al. 2021 sec. 4.2: strided batched GEMMs for QKᵀ
    and PV, one fused scale-mask-softmax kernel; attention dropout on the probabilities, Megatron-LM's
    default --attention-dropout 0.1). Per head on this GPU (H/tp heads, S/cp queries against S keys):
    forward QKᵀ (S/cp x dh x S) and PV (S/cp x S x dv); backward dP = dO Vᵀ, dV = Pᵀ dO, dS K, dSᵀ Q
    (twice the forward's matmuls), each a batched GEMM on the roofline; with small dh these are bound by
    writing/reading the S² matrix, not by FLOPs. Elementwise passes over the S² matrix (act_bytes each per
    element, read or write): Megatron's causal fused softmax (scaled_upper_triang_masked_softmax.h: each row loads
    only its first i + 1 scores, stores the whole row, zeros above the diagonal) reads half and writes all (1.5),
    its backward reads P and dP in the lower triangle and writes all of dS (2); dropout reads, writes and stores a
    1-byte mask (2 + mask), its backward the same."""
    heads = lay.micro_batch * spec.n_heads / lay.tp
    q, kv = seq_len / lay.cp, seq_len
    dqk = spec.mla.qk_head_dim if spec.mla is not None else spec.d_head
    dv = spec.mla.v_head_dim if spec.mla is not None else spec.d_head
    mm_fwd = (gemm_seconds(q, dqk, kv, dev, act_bytes, batch=heads, efficiency=efficiency)
              + gemm_seconds(q, kv, dv, dev, act_bytes, batch=heads, efficiency=efficiency))
    elements = heads * q * kv
    drop = (2 * act_bytes + 1) if dropout else 0.0
    fwd = mm_fwd + elements * (1.5 * act_bytes + drop) / (dev.hbm * efficiency)
    bwd = 2 * mm_fwd + elements * (2 * act_bytes + drop) / (dev.hbm * efficiency)
    return fwd, bwd


def _head_times(ctx: _Ctx) -> StageTimes:
    """LM head matmul (vocab split over tp) and the softmax/cross-entropy over the logits (fp32: written, read,
    gradient written), and the embedding lookup's gather and scatter-add."""
    spec, lay = ctx.spec, ctx.lay
    T = ctx.tokens
    f, d, w = ctx.gemm(T, spec.d_model, spec.vocab_size / lay.tp)
    loss = stream_seconds(T * spec.vocab_size / lay.tp * 4 * 3, ctx.dev, ctx.eff)
    return StageTimes(fwd=f + loss, bwd_input=d, bwd_weight=w, gemm_fwd=f)


def _embedding_times(ctx: _Ctx) -> StageTimes:
    T = ctx.tokens
    nbytes = T * ctx.spec.d_model * ctx.act
    return StageTimes(fwd=stream_seconds(nbytes, ctx.dev, ctx.eff), bwd_weight=stream_seconds(3 * nbytes, ctx.dev,
                                                                                              ctx.eff))


def _mtp_times(ctx: _Ctx, recompute: str) -> StageTimes:
    """One multi-token-prediction module (DeepSeek-V3 sec. 2.2, Megatron-Core's MTP on the last stage): two norms,
    the projection of [h; emb] (2D -> D), one decoder layer like the model's last, the shared LM head again."""
    spec = ctx.spec
    t = StageTimes()
    t.add(_layer_cost(ctx, spec.n_layers - 1, _recomputes(ctx.lay, recompute, spec.n_layers - 1, spec.n_layers - 1)))
    f, d, w = ctx.gemm(ctx.tokens, 2 * spec.d_model, spec.d_model)
    t.add(StageTimes(fwd=f, bwd_input=d, bwd_weight=w, gemm_fwd=f))
    t.add(_head_times(ctx))
    return t


# --- the step -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepPrediction:
    spec: ModelSpec
    device: Device
    layout: Layout
    seq_len: int
    causal: bool
    recompute: str
    step_seconds: float
    breakdown: dict[str, float]  # seconds: compute, tp_comm, cp_comm, ep_comm, dp_comm, pp_comm, pp_bubble, optimizer
    model_flops: float  # per step, whole cluster
    hardware_flops: float
    layers_per_stage: list[int]
    notes: list[str] = field(default_factory=list)
    attention: str = "flash"  # the attention kernel timed: "flash" or "eager"
    recipe: str = "bf16-mixed"
    assumptions: dict[str, Any] = field(default_factory=dict)

    @property
    def n_gpus(self) -> int:
        return self.layout.n_gpus

    @property
    def tokens_per_step(self) -> int:
        return self.layout.global_batch * self.seq_len

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def model_flops_per_gpu(self) -> float:
        return self.model_flops / (self.step_seconds * self.n_gpus)

    @property
    def hardware_flops_per_gpu(self) -> float:
        return self.hardware_flops / (self.step_seconds * self.n_gpus)

    @property
    def mfu(self) -> float:
        return utilization(self.model_flops, self.step_seconds, self.n_gpus, self.device.peak)

    @property
    def hfu(self) -> float:
        return utilization(self.hardware_flops, self.step_seconds, self.n_gpus, self.device.peak)

    def to_json(self) -> dict:
        lay = self.layout
        return {"mfu": self.mfu, "hfu": self.hfu, "step_seconds": self.step_seconds,
                "model_tflops_per_gpu": self.model_flops_per_gpu / 1e12,
                "hardware_tflops_per_gpu": self.hardware_flops_per_gpu / 1e12,
                "tokens_per_second": self.tokens_per_second, "breakdown_seconds": dict(self.breakdown),
                "layout": {**lay.as_dict(), "schedule": lay.schedule, "zero": lay.zero,
                           "sequence_parallel": lay.sequence_parallel, "tp_overlap": lay.tp_overlap,
                           "ep_overlap": lay.ep_overlap, "rank_order": lay.order, "cp_comm": lay.cp_comm},
                "recipe": self.recipe, "layers_per_stage": self.layers_per_stage, "attention": self.attention,
                "prediction_notes": list(self.notes), "assumptions": dict(self.assumptions)}


def predict(spec: ModelSpec, device: Device, layout: Layout, seq_len: int, causal: bool = False,
            recompute: str = "none", recipe: str = "bf16-mixed", attention: str = "flash",
            dropout: bool = False) -> StepPrediction:
    """Predicted step time of `layout` (see the module docstring for the model and its overlap rule). `causal`
    changes how the FLOPs (model and hardware) are counted, never the time: the kernel runs what it runs.

    attention: "flash" (fused, no S² matrix) or "eager" (materialised scores, `eager_attention_seconds`);
    dropout: attention dropout on the probabilities (eager only; flash fuses it)."""
    return _finish(_prepare(spec, device, layout, seq_len, causal, recompute=recompute, recipe=recipe,
                            attention=attention, dropout=dropout))


@dataclass
class _Prepared:
    """Everything of one prediction but the pipeline's makespan: the stages, their lower-bound makespan, DP,
    optimizer and FLOPs (what a layout search computes for every layout before it simulates the few that can win)."""

    ctx: _Ctx
    causal: bool
    recompute: str
    stages: list[StageTimes]
    split: list[int]
    fwd: list[float]
    bwd: list[float]
    wgt: list[float] | None
    p2p: float
    bound: float  # a lower bound of the makespan (pipeline.path_bound), exact where `exact`
    exact: bool
    dp: float
    optimizer: float
    plain_bound: float = 0.0  # the bound without transfer times (its pp_comm share is bound - plain_bound)
    groups: list = field(default_factory=list)  # the ranks of distinct chunks: (first rank, its stages) (_stage_plan)

    @property
    def step_bound(self) -> float:
        return self.bound + self.dp + self.optimizer


def _prepare(spec: ModelSpec, device: Device, layout: Layout, seq_len: int, causal: bool, recompute: str,
             recipe: str, attention: str, dropout: bool) -> _Prepared:
    if attention not in ATTENTION_IMPLS:
        raise LlmcalcError(f"unknown attention {attention!r}; use one of {', '.join(ATTENTION_IMPLS)}")
    rec = lookup(RECIPES, "recipe", recipe)
    lay = layout
    _check_recompute(spec, lay, recompute, rec, device)
    ctx = _context(spec, device, lay, seq_len, rec, attention=attention, dropout=dropout)
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    split, starts, ids, kinds, groups, cids = _stage_plan(spec, n_stages, lay, recompute)
    distinct = [_stage_cost(ctx, composition, recompute, cid) for composition, cid in zip(kinds, cids, strict=True)]
    stages = [distinct[j] for j in ids]
    fwd, bwd, wgt = stage_passes(distinct, ids, lay.schedule)
    p2p = _p2p_seconds(ctx) if lay.pp > 1 else 0.0
    rank_groups, lasts = groups(lay.schedule, lay.pp)
    bound, exact, plain = path_bounds(lay.schedule, lay.pp, lay.grad_accum, fwd, bwd, w=wgt, vpp=lay.vpp, p2p_time=p2p,
                                      ranks=lasts)
    dp, opt = _dp_and_optimizer(ctx, stages, split, starts, v, groups=rank_groups)
    return _Prepared(ctx, causal, recompute, stages, split, fwd=fwd, bwd=bwd, wgt=wgt, p2p=p2p, bound=bound,
                     exact=exact, dp=dp, optimizer=opt, plain_bound=plain, groups=rank_groups)


def stage_passes(distinct: list[StageTimes], ids: Sequence[int], schedule: str
                 ) -> tuple[list[float], list[float], list[float] | None]:
    """(forward, backward, weight-gradient) seconds of each pipeline stage (stage k is distinct[ids[k]]) for the
    schedule's simulator: the forward with its exposed communication, the backward with the rest; a zero-bubble
    schedule splits the weight-gradient half (W) off the backward (else None). The formula path and the measured
    step model both build the pipeline's inputs here."""
    fwd_d = [s.fwd + s.comm_fwd for s in distinct]
    bwd_comm = [s.tp + s.cp + s.ep - s.comm_fwd for s in distinct]
    wgt: list[float] | None
    if schedule.startswith("zb"):  # the weight-gradient half (W) is split off the backward
        bwd_d = [s.bwd_input + c for s, c in zip(distinct, bwd_comm, strict=True)]
        wgt = [distinct[j].bwd_weight for j in ids]
    else:
        bwd_d = [s.bwd_input + s.bwd_weight + c for s, c in zip(distinct, bwd_comm, strict=True)]
        wgt = None
    return [fwd_d[j] for j in ids], [bwd_d[j] for j in ids], wgt


def _stage_cost(ctx: _Ctx, composition: tuple, recompute: str, cid: int | None = None) -> StageTimes:
    """One stage's StageTimes from its composition (_stage_plan's): its layers' costs times their counts, the
    embedding and the LM head (and MTP layers) where it holds them. Stages made of the same layers cost the same,
    in this layout and in every other with the same layer costs (kept in the layers' cost cache, under the
    composition's _interned id: `cid` where the caller has it, _stage_plan's)."""
    key = ("stage", _interned(composition) if cid is None else cid, recompute, ctx.lay.mtp_layers)
    total = ctx.cache.get(key)
    if total is None:
        runs, embedding, head = composition
        total = StageTimes()
        for i, rc, count in runs:
            total.add(_layer_cost(ctx, i, rc), count)
        if embedding:  # the same for every stage plan of these layer costs (cached with the dense layers')
            total.add(_cached_in(ctx.dense_cache, ("embedding",), lambda: _embedding_times(ctx)))
        if head:
            total.add(_cached_in(ctx.dense_cache, ("head",), lambda: _head_times(ctx)))
            for _ in range(ctx.lay.mtp_layers):
                total.add(_mtp_times(ctx, recompute))
        ctx.cache[key] = total
    return total


def _cached_in(cache: dict, key: Any, make: Callable[[], Any]) -> Any:
    value = cache.get(key)
    if value is None:
        value = cache[key] = make()
    return value


def _p2p_seconds(ctx: _Ctx) -> float:
    """Seconds of one micro-batch's activation sent to the next pipeline rank (``comm.pp_collectives``), once per
    shape; kept per pp stride in the layer costs' dense cache too, whose key holds all else it reads (the model,
    network, tokens, activation bytes, tp and sequence parallelism)."""
    lay = ctx.lay
    stride = _stride(lay, "pp")
    seconds = ctx.dense_cache.get(("p2p", stride))
    if seconds is None:
        spec, net = ctx.spec, ctx.dev.network
        key = ("p2p", ctx.tokens, spec.d_model, ctx.act, lay.tp, lay.sequence_parallel, stride, _token(net))
        seconds = ctx.dense_cache["p2p", stride] = _cached("params", key, lambda: comm.total_seconds(
            comm.pp_collectives(ctx.tokens, spec.d_model, ctx.act, lay.tp, sequence_parallel=lay.sequence_parallel,
                                stride=stride), net))
    return seconds


def _stage_plan(spec: ModelSpec, n_stages: int, lay: Layout,
                recompute: str) -> tuple[list[int], list[int], list[int], list, Callable[[str, int], tuple], tuple]:
    """(layers per stage, first layer of each, each stage's composition as an index into the distinct compositions,
    the distinct compositions, the rank groups, each distinct composition's _interned id): a composition is the runs
    of (a representative layer of one kind, what it recomputes, how many) and whether the stage holds the embedding /
    the LM head; `groups(schedule, pp)` lists the pipeline ranks whose chunks have the same compositions once, each as
    (its first rank, that rank's stages), in rank order (such ranks cost the same in every respect), and the last rank
    of each such group (whose path dominates the group's in pipeline.path_bounds). Cached per model, stage count and
    recomputation (and pp and schedule where the first or last stage's layers are set: stage_split reads them only
    then)."""
    fixed = lay.first_stage_layers or lay.last_stage_layers
    key = (_token(spec), n_stages, recompute, lay.recompute_layers, lay.recompute_modules, lay.first_stage_layers,
           lay.last_stage_layers, lay.pp if fixed else 0, lay.schedule if fixed else "")
    found = _CACHES["params"].get(key)  # (a hit makes no closures)
    if found is not None:
        return found

    def make() -> tuple[list[int], list[int], list[int], list, Callable[[str, int], tuple], tuple]:
        split = stage_split(spec.n_layers, lay, n_stages)
        starts = list(itertools.accumulate(split[:-1], initial=0))  # sum(split[:k]) of each stage k
        kinds, first, segments = _cached("params", ("kinds", _token(spec)), lambda: _kinds_of(spec))
        # what each layer recomputes: the same for all but a partial full recomputation (_recomputes)
        same = None if recompute == "full" and lay.recompute_layers else _recomputes(lay, recompute, 0, 0)
        plan = []
        j = 0  # the first run of one kind (_kinds_of's segments) not before this stage
        for k in range(n_stages):
            runs: dict[tuple, list] = {}  # layers of the same kind and recomputation: one cost times their count
            a, b = starts[k], starts[k] + split[k]
            if same is None:
                for i in range(a, b):
                    rc = _recomputes(lay, recompute, i, a)
                    runs.setdefault((kinds[i], rc), [first[kinds[i]], 0])[1] += 1
            elif b > a:  # the same counts, in the same order, as layer by layer: each run's layers in [a, b) at once
                while j < len(segments) and segments[j][1] <= a:
                    j += 1
                for start, stop, kind in segments[j:]:
                    if start >= b:
                        break
                    runs.setdefault((kind, same), [first[kind], 0])[1] += min(b, stop) - max(a, start)
            plan.append((tuple((i, rc, count) for (_, rc), (i, count) in runs.items()), k == 0, k == n_stages - 1))
        index: dict[tuple, int] = {}
        ids = [index.setdefault(composition, len(index)) for composition in plan]

        def groups(schedule: str, pp: int) -> tuple[list, list[int]]:
            def make_groups() -> tuple[list, list[int]]:
                seen: dict[tuple, tuple[int, tuple[int, ...]]] = {}
                last: dict[tuple, int] = {}
                v = n_stages // pp
                for r in range(pp):
                    # stage_of(schedule, r, c, pp) of each chunk c: c x pp + r but for zb-v
                    stages = tuple(range(r, v * pp, pp)) if schedule != "zb-v" else \
                        tuple([stage_of(schedule, r, c, pp) for c in range(v)])
                    held = tuple(map(ids.__getitem__, stages))
                    seen.setdefault(held, (r, stages))
                    last[held] = r
                return list(seen.values()), sorted(last.values())
            return _cached("params", ("groups", *key, schedule, pp), make_groups)
        return split, starts, ids, list(index), groups, tuple(_interned(composition) for composition in index)
    return _cached("params", key, make)


def _kinds_of(spec: ModelSpec) -> tuple[list[tuple], dict[tuple, int], list[tuple[int, int, tuple]]]:
    """Each layer's _layer_kind, each kind's representative (its first layer), and the maximal runs of consecutive
    layers of one kind as (first layer, end, kind), in layer order."""
    kinds = [_layer_kind(spec, i) for i in range(spec.n_layers)]
    first: dict[tuple, int] = {}
    segments: list[tuple[int, int, tuple]] = []
    for i, kind in enumerate(kinds):
        first.setdefault(kind, i)
        if segments and segments[-1][2] == kind:
            segments[-1] = (segments[-1][0], i + 1, kind)
        else:
            segments.append((i, i + 1, kind))
    return kinds, first, segments


def _finish(prep: _Prepared, simulated: bool = True) -> StepPrediction:
    """The prediction of a prepared layout: the pipeline simulated (or its exact closed form), or with `simulated`
    False its lower bound (a layout search's for layouts that cannot win)."""
    ctx, lay, spec = prep.ctx, prep.ctx.lay, prep.ctx.spec
    v = chunks_per_rank(lay.schedule, lay.vpp)
    step, breakdown, how = pipeline_step(prep, simulated)
    recompute = prep.recompute
    counted = "full" if recompute == "full" else "selective" if recompute == "selective" and "core_attn" in (
        lay.recompute_modules or ("core_attn",)) else "none"
    model_flops, hardware_flops = _step_flops(spec, lay.global_batch, ctx.seq, prep.causal, counted)
    notes = [f"layers per pipeline stage ({len(prep.stages)} stages = pp {lay.pp} x {v} chunk{'s' if v > 1 else ''}): "
             + _describe_split(prep.split)]
    if ctx.attention == "eager":
        notes.append("attention core with the B·H·S² scores materialised (batched GEMMs + softmax"
                     + (" + dropout" if ctx.dropout else "") + "), as before FlashAttention")
    assumptions, assumed = _assumptions_of(ctx, recompute)
    if lay.pp > 1:  # the last item (_assumptions has no "pipeline"): the joined text gains it at its end
        assumptions["pipeline"] = how
        assumed += f"; pipeline {how}"
    notes.append(assumed)
    return StepPrediction(spec, ctx.dev, lay, ctx.seq, causal=prep.causal, recompute=recompute, step_seconds=step,
                          breakdown=breakdown, model_flops=model_flops,
                          hardware_flops=hardware_flops, layers_per_stage=prep.split, notes=notes,
                          attention=ctx.attention, recipe=ctx.recipe.name, assumptions=assumptions)


def pipeline_step(prep: _Prepared, simulated: bool = True) -> tuple[float, dict[str, float], str]:
    """(step seconds, breakdown, how the pipeline was timed) of a prepared layout: the pipeline simulated (or its
    exact closed form; its lower bound where `simulated` is False), plus exposed DP and the optimizer; the
    breakdown is the pacing rank's (the first of the busiest)."""
    lay = prep.ctx.lay
    v = chunks_per_rank(lay.schedule, lay.vpp)
    m = lay.grad_accum
    if prep.exact or not simulated:
        makespan, plain_makespan = prep.bound, prep.plain_bound
        how = "closed form (exact)" if prep.exact else "lower bound (not simulated: this layout cannot win)"
        # each group of identical ranks once (their busy time is the same): the first rank of the busiest paces
        busy = {r: m * sum(prep.fwd[st] + prep.bwd[st] + (prep.wgt[st] if prep.wgt else 0.0) for st in stages)
                for r, stages in prep.groups}
        pace = max(busy, key=busy.__getitem__)  # the first of the busiest (groups come in rank order)
        paced = dict(prep.groups)[pace]
    else:
        w_time: Callable[[int], float] | None = None if prep.wgt is None else prep.wgt.__getitem__
        plain, sent = simulate_pair(lay.schedule, lay.pp, m, prep.fwd.__getitem__, b_time=prep.bwd.__getitem__,
                                    w_time=w_time, vpp=lay.vpp, p2p_time=prep.p2p, pair=bool(prep.p2p))
        makespan, plain_makespan = sent.makespan, plain.makespan
        busy = dict(enumerate(plain.busy))
        pace = max(busy, key=busy.__getitem__)  # the first of the busiest
        paced = [stage_of(lay.schedule, pace, c, lay.pp) for c in range(v)]
        how = "simulated rank by rank"
    mine = [prep.stages[st] for st in paced]
    breakdown = {
        "compute": m * sum(s.compute for s in mine),
        "tp_comm": m * sum(s.tp for s in mine),
        "cp_comm": m * sum(s.cp for s in mine),
        "ep_comm": m * sum(s.ep for s in mine),
        "dp_comm": prep.dp,
        "pp_comm": makespan - plain_makespan,
        "pp_bubble": max(0.0, plain_makespan - busy[pace]),
        "optimizer": prep.optimizer,
    }
    return makespan + prep.dp + prep.optimizer, breakdown, how


_CACHES: dict[str, dict] = {"layers": {}, "flops": {}, "params": {}, "acts": {}, "counts": {}, "tokens": {},
                            "kernels": {}, "family": {}, "interned": {}}


def clear_caches() -> None:
    """Forget what earlier predictions cached (benchmarks time a cold search), kernels' tile and wave shares too."""
    for cache in _CACHES.values():
        cache.clear()
    kernels._WAVES.clear()


def _token(obj: Any) -> int:
    """A small int standing for `obj` (a ModelSpec, a Network) in cache keys: hashing a spec's ~60 fields takes 12 us,
    and a layout search builds keys with it thousands of times. The object is kept with its token, so its id is
    not reused while the token stands; an equal object built anew gets its own token (a cache miss, never a wrong
    hit)."""
    entry = _TOKENS.get(id(obj))
    if entry is None:
        entry = _TOKENS[id(obj)] = (obj, len(_TOKENS))
    return entry[1]


_TOKENS = _CACHES["tokens"]  # _token's table (clear_caches empties it in place)


def _interned(value: Any) -> int:
    """A small int standing for `value` (hashable: a stage plan's composition, a tuple of pieces) in cache keys, the
    same for equal values: a key holding it hashes an int instead of nested tuples and frozensets. Drawn from a
    counter that never repeats, so an id is never reused for another value, even after the table is cleared (then
    an equal value gets a new id: a cache miss, never a wrong hit)."""
    table = _CACHES["interned"]
    found = table.get(value)
    if found is None:
        if len(table) > 200_000:
            table.clear()
        found = table[value] = next(_IDS)
    return found


_IDS = itertools.count()  # _interned's ids


def _cached(name: str, key: Any, make: Callable[[], Any]) -> Any:
    cache = _CACHES[name]
    value = cache.get(key, _MISSING)  # one lookup: hashing a long key twice costs a layout search ~5 %
    if value is _MISSING:
        if len(cache) > 200_000:
            cache.clear()
        value = cache[key] = make()
    return value


_MISSING = object()  # _cached's "not cached" (None is a value some caches hold)


def _layer_cache(spec: ModelSpec, dev: Device, lay: Layout, seq: int, rec: Recipe, attention: str,
                 dropout: bool) -> tuple[dict, dict]:
    """The per-layer-kind cost caches shared by every layout whose layer costs are the same: same device, recipe,
    sequence, and the layout fields a layer's cost reads (tp, cp, micro-batch, the kernels and overlaps, the
    strides its collectives take, and for the MoE layers the expert mesh and its settings). Two caches: the MoE
    layers', and the other layers', whose key leaves out the expert fields (dense layers cost the same whatever
    ep, etp and the all-to-all settings); the MoE layers' is kept in the other's, under the expert fields."""
    dense = (_token(spec), dev.accelerator.key, dev.mamf, dev.mamf_fp8, dev.sm_count, dev.arch, dev.fp4_peak,
             _token(dev.network), seq, rec.name, rec.act_bytes, attention, dropout, KERNEL_EFFICIENCY, lay.tp, lay.cp,
             lay.micro_batch, lay.sequence_parallel, lay.tp_overlap, lay.cp_comm, lay.cp_a2a_size, lay.attention_kernel,
             lay.fp8_attention, lay.fused_elementwise, lay.recompute_modules, _stride(lay, "cp"))
    dense_cache = _cached("layers", dense, dict)
    experts = ("experts", lay.ep, lay.expert_tp, lay.ep_overlap, lay.ep_dispatcher, lay.moe_imbalance,
               _stride(lay, "ep", True))
    return _cached_in(dense_cache, experts, dict), dense_cache


def _stride(lay: Layout, dim: str, experts: bool = False) -> int:
    """lay.strides()[dim] (lay.expert_strides()[dim] with `experts`), read from _strides' cache without building
    the sizes or copying the strides where they are cached (its key: the order, then the sizes in tp, cp, ep, dp, pp
    order)."""
    key = (lay.order, lay.expert_tp, 1, lay.ep, lay.expert_dp, lay.pp) if experts else \
        (lay.order, lay.tp, lay.cp, 1, lay.dp, lay.pp)
    out = _STRIDES.get(key)
    if out is None:
        return (lay.expert_strides() if experts else lay.strides())[dim]
    return out[dim]


def _step_flops(spec: ModelSpec, batch: int, seq: int, causal: bool, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step (``flops.step_flops``), once per model, batch and recomputation."""
    def make() -> tuple[float, float]:
        if recompute not in RECOMPUTE:
            step_flops(spec, batch, seq, causal, recompute)  # its error
        # step_flops' StepFlops, its forward ops (which read no recomputation) once for every recomputation
        ops = _cached("flops", ("forward", _token(spec), batch, seq, causal),
                      lambda: forward_ops(spec, batch, seq, causal))
        flops = StepFlops(spec=spec, batch=batch, seq_len=seq, causal=causal, recompute=recompute, ops=ops)
        return float(flops.model_flops), float(flops.hardware_flops)
    return _cached("flops", (_token(spec), batch, seq, causal, recompute), make)


def _check_recompute(spec: ModelSpec, lay: Layout, recompute: str, rec: Recipe, dev: Device) -> None:
    if lay.recompute_layers and recompute != "full":
        raise LlmcalcError("--recompute-layers picks how many layers of each stage recompute fully: it needs "
                           "--recompute full")
    if lay.recompute_layers < 0:
        raise LlmcalcError(f"--recompute-layers must be >= 0, got {lay.recompute_layers}")
    per_chunk = math.ceil(spec.n_layers / (lay.pp * lay.vpp))
    if lay.recompute_layers > per_chunk:
        raise LlmcalcError(f"--recompute-layers {lay.recompute_layers} is more than the {per_chunk} layers of a "
                           f"pipeline chunk ({spec.n_layers} layers over pp {lay.pp} x vpp {lay.vpp}); use at most "
                           f"{per_chunk}")
    if lay.recompute_modules and recompute != "selective":
        raise LlmcalcError("--recompute-modules lists what a selective recomputation re-runs: it needs --recompute "
                           "selective")
    if "mla_up_proj" in lay.recompute_modules and spec.mla is None:
        raise LlmcalcError(f"--recompute-modules mla_up_proj needs multi-head latent attention; {spec.name} has none")
    if {"moe", "moe_act", "shared_experts"} & set(lay.recompute_modules) and not spec.is_moe:
        raise LlmcalcError(f"--recompute-modules moe, moe_act and shared_experts need an MoE model; {spec.name} is "
                           f"dense")
    if lay.fp8_param_gather and not (rec.fp8 and lay.dp * lay.cp > 1 and lay.zero >= 1):
        raise LlmcalcError("--fp8-param-gather all-gathers the FP8 copy of the weights (Megatron's "
                           "--fp8-param-gather): it needs an FP8 or FP4 --recipe, data parallelism (dp x cp > 1) and "
                           "--zero 1 or more")
    if lay.fp8_attention and not rec.fp8:
        raise LlmcalcError("--fp8-attention runs the attention core in FP8 (Transformer Engine fp8_dpa): it needs an "
                           "FP8 or FP4 --recipe")
    # FlashAttention-3 is written for Hopper (its README: "H100 / H800 GPU"; on Blackwell the FA4 kernels stand in,
    # kernels.py); cuDNN is NVIDIA's: neither runs on Ampere (FA3) or on AMD's CDNA (both)
    if lay.attention_kernel == "fa3" and dev.arch in ("ampere", "cdna3", "cdna4"):
        raise LlmcalcError(f"--attention-kernel fa3 needs Hopper or Blackwell; {dev.accelerator.key} is {dev.arch}: "
                           f"use --attention-kernel fa2 or auto")
    if lay.attention_kernel in ("cudnn", "cudnn-2024") and dev.arch in ("cdna3", "cdna4"):
        raise LlmcalcError(f"--attention-kernel {lay.attention_kernel} is NVIDIA's; {dev.accelerator.key} is AMD "
                           f"{dev.arch}: use --attention-kernel auto")
    if rec.gemm_dtype in ("fp8", "fp4"):
        dev.gemm_rate(rec.gemm_dtype)  # one line when the device has no such tensor cores
        if rec.gemm_dtype == "fp8" and "fp8" not in dev.accelerator.peak_flops:
            raise LlmcalcError(f"{dev.accelerator.key} has no FP8 tensor cores (no dense fp8 peak): --recipe "
                               f"{rec.name} needs Hopper, Blackwell or CDNA 3+")


def _assumptions_of(ctx: _Ctx, recompute: str) -> tuple[dict[str, Any], str]:
    """(_assumptions, its note "assumed: k v; ..."), once per combination of what it reads (a fresh dict each time:
    the caller adds to it)."""
    lay, rec = ctx.lay, ctx.recipe
    key = ("assumptions", _token(ctx.dev), rec.name, rec.gemm_dtype, rec.fp8, ctx.attention, ctx.spec.is_moe, recompute,
           KERNEL_EFFICIENCY, EP_OVERLAP_SMS, lay.attention_kernel, lay.fp8_attention, lay.order, lay.fused_elementwise,
           lay.tp_overlap, lay.dp_overlap, lay.optimizer, lay.fp8_param_gather, lay.first_stage_layers,
           lay.last_stage_layers, lay.cp, lay.cp_comm, lay.cp_a2a_size, lay.moe_imbalance, lay.ep_overlap,
           lay.recompute_layers, lay.recompute_modules, lay.mtp_layers)
    def make() -> tuple[dict[str, Any], str]:
        out = _assumptions(ctx, recompute)
        return out, "assumed: " + "; ".join(f"{k} {v}" for k, v in out.items())
    assumptions, assumed = _cached("params", key, make)
    return dict(assumptions), assumed


def _assumptions(ctx: _Ctx, recompute: str) -> dict[str, Any]:
    """What this prediction assumed, for its notes and JSON ``assumptions``."""
    lay, dev, rec = ctx.lay, ctx.dev, ctx.recipe
    kernel = kernels.DEFAULT_KERNEL[dev.arch] if lay.attention_kernel == "auto" else lay.attention_kernel
    out: dict[str, Any] = {
        "kernel_efficiency": KERNEL_EFFICIENCY,
        "gemm_dtype": rec.gemm_dtype,
        "gemm_tflops_ceiling": round(ctx.gemm_rate / 1e12, 1),
        "attention_kernel": kernel if ctx.attention == "flash" else "eager (materialised scores)",
        "attention_dtype": "fp8" if lay.fp8_attention else "bf16",
        "hbm_gb_per_s": round(dev.hbm / 1e9),
        "rank_order": lay.order,
        "elementwise": "fused" if lay.fused_elementwise else "eager (unfused: twice the passes)",
        "tp_overlap": "GEMM-overlapped, excess exposed" if lay.tp_overlap else "exposed",
        "dp_overlap": "reduce-scatter under the last backward, all-gather under the first forward; last bucket "
                      "exposed" if lay.dp_overlap else "exposed after the backward",
        "optimizer": lay.optimizer,
    }
    if lay.fp8_param_gather:
        out["param_gather_bytes_per_parameter"] = 1.0
    if lay.first_stage_layers or lay.last_stage_layers:
        out["stage_layers"] = {"first": lay.first_stage_layers or None, "last": lay.last_stage_layers or None}
    if rec.fp8:
        out["quantization_bytes_per_element"] = kernels.QUANT_BYTES[rec.fp8]
    if lay.cp > 1:
        out["cp_comm"] = {"p2p": "ring, each step under the previous block", "all-gather": "K/V all-gathered, exposed",
                          "a2a": "all-to-all over heads, exposed",
                          "a2a+p2p": f"all-to-all over heads in groups of {lay.cp_a2a_size} (exposed), then the "
                                     f"ring over {lay.cp // max(1, lay.cp_a2a_size)} groups"}[lay.cp_comm]
    if ctx.spec.is_moe:
        out["moe_imbalance"] = lay.moe_imbalance
        out["ep_overlap"] = (f"under the other micro-batch's compute, {EP_OVERLAP_SMS} SMs held"
                             if lay.ep_overlap else "exposed")
    if recompute != "none":
        out["recompute"] = (f"full, {'all layers' if not lay.recompute_layers else f'{lay.recompute_layers} per chunk'}"
                            if recompute == "full" else "selective: " + ", ".join(lay.recompute_modules or
                                                                                  ("core_attn",)))
    if lay.mtp_layers:
        out["mtp_layers"] = lay.mtp_layers
    return out


def _dp_and_optimizer(ctx: _Ctx, stages: list[StageTimes], split: list[int], starts: list[int],
                      v: int, groups: list, infos: dict[int, tuple] | None = None) -> tuple[float, float]:
    """(exposed DP communication, optimizer seconds) of the rank holding the most parameters: each rank's
    collectives and optimizer step (``_rank_dp``, the same for every layout of these degrees) against its own
    forward and backward of one micro-batch; once per group of ranks whose chunks are the same (`groups`,
    _stage_plan's: they hold the same layers and parameters); `infos`: each rank's ``_one_rank_dp`` where the caller
    counted its parameters (a model transformers measured), else ``_rank_dp``'s."""
    lay = ctx.lay
    worst_dp = worst_opt = 0.0
    if infos is None:
        infos = _rank_dp(ctx, tuple(split), v, [r for r, _ in groups])
    for r, rank_stages in groups:
        n_layers, zero3, per_f, per_b, reduce, gather, last, first, opt = infos[r]
        fwd_one = sum(stages[st].fwd for st in rank_stages)
        bwd_one = sum(stages[st].bwd_input + stages[st].bwd_weight for st in rank_stages)
        m = lay.grad_accum
        if zero3:  # FSDP: each layer's transfers under the previous layer's compute (prefetch)
            layer_f, layer_b = fwd_one / n_layers, bwd_one / n_layers
            exposed = m * (n_layers * (max(0.0, per_f - layer_f) + max(0.0, per_b - layer_b)) + per_f + per_b)
            if not lay.dp_overlap:
                exposed = reduce + gather
        elif lay.dp_overlap:  # the last bucket's reduction and the first bucket's gather stay exposed
            exposed = max(last, reduce - bwd_one) + max(first, gather - fwd_one) if reduce or gather else 0.0
        else:
            exposed = reduce + gather
        worst_dp = max(worst_dp, exposed)
        worst_opt = max(worst_opt, opt)
    return worst_dp, worst_opt


def _rank_dp(ctx: _Ctx, split: tuple[int, ...], v: int, ranks: list[int],
             key: tuple | None = None) -> dict[int, tuple]:
    """For pipeline ranks `ranks`, what each one's data-parallel reductions and optimizer step cost, whatever the
    stage times: (layers, FSDP?, one FSDP unit's forward and backward transfer, total reduce and gather seconds per
    step, the last bucket's reduce and the first bucket's gather, optimizer seconds). Cached per layout degrees and
    the rank's parameters (ranks holding the same parameters cost the same, in this layout or another). `key`:
    _dp_key(ctx) where the caller has it already."""
    key = _dp_key(ctx) if key is None else key
    return _cached("params", ("rank dps", *key, split, v, ctx.lay.schedule, tuple(ranks)),
                   lambda: _ranks_dp(ctx, key, split, v, ranks))


def _dp_key(ctx: _Ctx, zero: int | None = None) -> tuple:
    """What a rank's DP collectives and optimizer step read besides its parameters (_rank_dp's cache key); `zero`:
    that of the layout with this ZeRO stage instead of its own."""
    spec, lay, dev, rec = ctx.spec, ctx.lay, ctx.dev, ctx.recipe
    zero = lay.zero if zero is None else zero
    return (_token(spec), dev.accelerator.key, _token(dev.network), dev.mamf, rec.name, KERNEL_EFFICIENCY, lay.tp,
            lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp, zero, lay.order,
            lay.grad_accum if zero == 3 else 0,  # the micro-batch count matters to ZeRO-3's transfers only
            lay.optimizer, lay.fp8_param_gather)


def _ranks_dp(ctx: _Ctx, key: tuple, split: tuple[int, ...], v: int, ranks: list[int]) -> dict[int, tuple]:
    """_rank_dp for these ranks, one by one (`key`: the degrees' part of the cache key)."""
    out = {}
    holdings = _holdings(ctx, split, v)
    for r in ranks:
        held = holdings.get(r)
        if held is None:
            held = holdings[r] = _rank_holdings(ctx, split, v, r)
        out[r] = _cached("params", ("rank dp", *key, *held),
                         lambda: _one_rank_dp(ctx, *held))  # noqa: B023 (called at once)
    return out


def _holdings(ctx: _Ctx, split: tuple[int, ...], v: int) -> dict[int, tuple[float, float, int]]:
    """The table of _rank_holdings per pipeline rank of `ctx`'s model, stage split, chunks per rank and schedule
    (what _rank_holdings reads besides the rank), filled by its callers as they ask for ranks: one key built per
    caller, not per rank."""
    return _cached("params", ("holdings", _token(ctx.spec), split, v, ctx.lay.schedule), dict)


def _rank_holdings(ctx: _Ctx, split: tuple[int, ...], v: int, r: int) -> tuple[float, float, int]:
    """(parameters, routed-expert parameters, layers) pipeline rank `r` holds over its chunks (stage split `split`)."""
    spec, lay = ctx.spec, ctx.lay
    per_layer, emb, head, final, experts_per_layer, moe_before = _param_summary(spec)
    n_stages = len(split)
    starts = _cached("params", ("starts", split), lambda: [sum(split[:i]) for i in range(n_stages)])
    params = experts = 0.0
    n_layers = 0
    for c in range(v):
        st = stage_of(lay.schedule, r, c, lay.pp)
        lo, hi = starts[st], starts[st] + split[st]
        n_layers += hi - lo
        params += (hi - lo) * per_layer + (emb if st == 0 else 0.0)
        if st == n_stages - 1:
            params += final + (head if not (spec.tie_embeddings and st == 0) else 0)  # pp > 1: a tied copy
        experts += experts_per_layer * (moe_before[hi] - moe_before[lo])
    return params, experts, n_layers


def _one_rank_dp(ctx: _Ctx, params: float, experts: float, n_layers: int, per_layer: float | None = None) -> tuple:
    """_rank_dp for one rank holding `params` parameters (`experts` of them routed experts) in `n_layers` layers
    (`per_layer`: one layer's parameters, for Muon's matrices; default the spec's)."""
    spec, lay, dev, rec = ctx.spec, ctx.lay, ctx.dev, ctx.recipe
    per_layer = _param_summary(spec)[0] if per_layer is None else per_layer
    experts_given = experts
    net = dev.network
    dense_group, dense_members, dense_stride, expert_stride, expert_members = _dp_mesh(lay, net.gpus_per_node)
    m = lay.grad_accum
    dense = (params - experts) / lay.tp
    experts = experts / lay.expert_tp / lay.ep  # routed experts: split over ep, each over etp
    units = max(1, n_layers) + 1 if lay.zero == 3 else 0  # FSDP: one unit per layer, + embedding/head
    gather_bytes = 1.0 if lay.fp8_param_gather else None
    secs = list(_dp_seconds(dense, rec, dense_group, lay.zero, dense_stride, members=dense_members, m=m, units=units,
                            net=net, gather_bytes=gather_bytes))
    if experts:
        secs += _dp_seconds(experts, rec, lay.expert_dp, lay.zero, expert_stride, members=expert_members, m=m,
                            units=units, net=net, gather_bytes=gather_bytes)
    if dense_group == 1 and lay.expert_dp == 1:
        secs = []
    reduces, gathers = [], []  # each kind's calls (seconds of one, calls), in their order
    for k, t, n in secs:
        if k == "all_gather":
            gathers.append((t, n))
        elif k in ("all_reduce", "reduce_scatter"):
            reduces.append((t, n))
    reduce = sum([t * n for t, n in reduces])
    gather = sum([t * n for t, n in gathers])
    last = max([t for t, _ in reduces], default=0.0)
    first = max([t for t, _ in gathers], default=0.0)
    per_f = per_b = 0.0  # one FSDP unit's forward and backward transfers (ZeRO-3 only)
    if lay.zero == 3:
        per_f = gather / m / 2 / (max(1, n_layers) + 1)
        per_b = (gather / m / 2 + reduce / m) / (max(1, n_layers) + 1)
    opt = _rank_optimizer(ctx, params, experts_given, n_layers, per_layer)
    return max(1, n_layers), lay.zero == 3, per_f, per_b, reduce, gather, last, first, opt


def _dp_mesh(lay: Layout, per_node: int) -> tuple[int, int, int, int, int]:
    """_one_rank_dp's groups, once per degrees, rank order and node size: (the dense gradients' group, dp x cp:
    CP ranks hold the same weights; its members per node; its stride; the routed experts' data-parallel stride;
    its members per node)."""
    def make() -> tuple[int, int, int, int, int]:
        strides, estrides = lay.strides(), lay.expert_strides()
        dense_members = _group_per_node([(lay.cp, strides["cp"]), (lay.dp, strides["dp"])], per_node)
        dense_stride = strides["cp"] if lay.cp > 1 else strides["dp"]
        expert_members = _group_per_node([(lay.expert_dp, estrides["dp"])], per_node)
        return lay.dp * lay.cp, dense_members, dense_stride, estrides["dp"], expert_members
    return _cached("params", ("dp mesh", lay.order, lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, per_node), make)


def _rank_optimizer(ctx: _Ctx, params: float, experts: float, n_layers: int, per_layer: float,
                    zero: int | None = None) -> float:
    """_one_rank_dp's optimizer step: the rank's dense and routed-expert shards (`params`, `experts` of them routed,
    in `n_layers` layers of `per_layer` parameters), each ZeRO-sharded over its data-parallel group (ZeRO >= 1);
    `zero`: that of the layout with this ZeRO stage instead of its own (nothing else here reads the stage)."""
    lay = ctx.lay
    zero = lay.zero if zero is None else zero
    dense_group = lay.dp * lay.cp
    dense = (params - experts) / lay.tp
    experts = experts / lay.expert_tp / lay.ep
    shard = dense_group if zero >= 1 else 1
    expert_shard = lay.expert_dp if zero >= 1 else 1
    local = dense / shard + experts / expert_shard
    return _optimizer_seconds(ctx, local, (per_layer, n_layers), dense_group if zero >= 1 else 1,
                              dense + experts)


def _param_summary(spec: ModelSpec) -> tuple[float, float, float, float, float, list[int]]:
    """Per spec, once: parameters of one layer (its sharded part and norms, memory._layer_params' average), the
    embedding, the LM head, the final norm, the routed experts of one MoE layer, and how many MoE layers come
    before each layer index (prefix sums)."""
    def make() -> tuple[float, float, float, float, float, list[int]]:
        comps = count_params(spec).components
        layer, norms, emb, head, final = _layer_params(spec, comps)
        experts = routed_expert_params(spec, comps) / spec.n_moe_layers if spec.n_moe_layers else 0.0
        before = [0]
        for i in range(spec.n_layers):
            before.append(before[-1] + spec.is_moe_layer(i))
        return layer + norms, emb, head, final, experts, before
    return _cached("params", ("summary", _token(spec)), make)


def _dp_seconds(params: float, rec: Recipe, group: int, zero: int, stride: int, members: int, m: int, units: int,
                net: Any, gather_bytes: float | None = None) -> tuple[tuple[str, float, int], ...]:
    """(kind, seconds of one call, calls) of each of _dp_colls' collectives, once per size and group (the dense
    parameters of a rank are the same whatever its expert mesh) and whatever the micro-batches (a call's seconds
    do not read its count)."""
    key = ("dp seconds", params, rec.name, group, zero, stride, members, units, _token(net), gather_bytes)
    once = _cached("params", key, lambda: tuple((c.kind, c.seconds(net), c.count) for c in _dp_colls(
        params, rec, group, zero, stride, members=members, m=1, units=units, gather_bytes=gather_bytes)))
    # ZeRO-3's collectives run once per micro-batch (dp_collectives' count): the same calls, m times as many
    return tuple((kind, seconds, count * m) for kind, seconds, count in once) if zero == 3 else once


def _dp_colls(params: float, rec: Recipe, group: int, zero: int, stride: int, members: int, m: int,
              units: int = 0, gather_bytes: float | None = None) -> list[comm.Collective]:
    """The DP collectives of `params` parameters, one call per bucket: Megatron's distributed optimizer buckets
    max(DP_BUCKET_PARAMS, 1 M x dp) parameters; ZeRO-3 (FSDP) one unit per layer (`units`). Each call pays its
    ring latency ((n-1) steps), which across hundreds of ranks outweighs the bytes of a small bucket.
    `gather_bytes`: bytes per parameter of the weight all-gather (default the weights', at most 2 bytes: the BF16
    copy); 1 with Megatron's --fp8-param-gather (arguments.py: "Keep the compute param in fp8 ... and perform the
    param all-gather in fp8"; with the distributed optimizer or FSDP). Each call's Collective is built as its
    __init__ builds it (its fields in field order; it has no __post_init__), without the setattr per field."""
    weight = min(rec.weight_bytes, 2.0) if gather_bytes is None else gather_bytes
    colls = comm.dp_collectives(params, rec.grad_bytes, weight, group, zero=zero, stride=stride,
                                micro_batches=m)
    calls = units or max(1, math.ceil(params / max(DP_BUCKET_PARAMS, 1e6 * group)))
    return [_built(comm.Collective, {"name": c.name, "kind": c.kind, "group": c.group,
                                     "buffer_bytes": c.buffer_bytes / calls, "count": c.count * calls,
                                     "stride": c.stride, "per_node": members})
            for c in colls]


def _optimizer_seconds(ctx: _Ctx, local: float, layers: tuple[float, int], shards: int, on_gpu: float) -> float:
    """The optimizer step over this GPU's `local` parameters: memory-bound (gradient, master weights and the
    optimizer's states read and written, the new weights written: AdamW's two states), and for Muon (one momentum
    state, and MUON_NS_STEPS Newton-Schulz iterations per weight matrix, 4·m²·n + 2·m³ FLOPs each for an m x n
    matrix, m <= n: X·Xᵀ, its square, their product with X; each matrix on one of the `shards` data-parallel ranks,
    Moonlight's distributed Muon; `layers`: (one layer's parameters, the layers));
    FP8/FP4 recipes then cast the `on_gpu` weights this GPU computes with (QUANT_BYTES per element; Transformer
    Engine casts them at the first micro-batch and keeps the casts for the rest)."""
    rec, dev = ctx.recipe, ctx.dev
    opt = OPTIMIZERS[ctx.lay.optimizer]
    nbytes = local * (rec.grad_bytes + 2 * (rec.master_bytes + opt.bytes_per_param(rec)) + rec.weight_bytes)
    seconds = stream_seconds(nbytes, dev, ctx.eff)
    if ctx.lay.optimizer == "muon":
        spec = ctx.spec
        D = spec.d_model
        flops = 0.0
        p, count = layers
        n = p / ctx.lay.tp / D  # the layer's matrices, as D x (p / D) blocks of this rank's TP shard
        lo, hi = min(D, n), max(D, n)
        per = MUON_NS_STEPS * (4 * lo * lo * hi + 2 * lo ** 3)
        for _ in range(count):  # added layer by layer, as a sum over the layers' list
            flops += per
        seconds += flops / shards / (dev.mamf * ctx.eff)
    if rec.fp8:
        seconds += stream_seconds(on_gpu * kernels.QUANT_BYTES[rec.fp8], dev, ctx.eff)
    return seconds


def _describe_split(split: list[int]) -> str:
    return _cached("params", ("split text", tuple(split)), lambda: _split_text(split))


def _split_text(split: list[int]) -> str:
    if len(set(split)) == 1:
        return f"{split[0]} each"
    runs: list[list[int]] = []
    for c in split:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ", ".join(f"{c}" if k == 1 else f"{c} x {k} stages" for c, k in runs) + \
        " (fewer layers where embedding and LM head sit; the slowest stage sets the pace)"


def mfu_from_throughput(model_flops_per_token: float, hardware_flops_per_token: float, tokens_per_second: float,
                        n_gpus: int, peak: float) -> tuple[float, float]:
    """Achieved (MFU, HFU) of a run that processed `tokens_per_second` across `n_gpus` (PaLM App. B)."""
    if not (tokens_per_second > 0 and math.isfinite(tokens_per_second)):
        raise LlmcalcError(f"--tokens-per-second must be a positive number, got {tokens_per_second!r}")
    return (utilization(model_flops_per_token * tokens_per_second, 1.0, n_gpus, peak),
            utilization(hardware_flops_per_token * tokens_per_second, 1.0, n_gpus, peak))


def global_batch_sequences(global_batch: int | None, global_batch_tokens: float | None, seq_len: int,
                           required: bool = False) -> int | None:
    """Sequences per optimizer step, from --global-batch or --global-batch-tokens (a whole multiple of
    --seq-len); `required` (layout): exactly one of them, else (train) at most one."""
    if required and (global_batch is None) == (global_batch_tokens is None):
        raise LlmcalcError("give --global-batch (sequences) or --global-batch-tokens, one of them")
    if global_batch is not None and global_batch_tokens is not None:
        raise LlmcalcError("give --global-batch (sequences) or --global-batch-tokens, not both")
    if global_batch_tokens is None:
        return global_batch
    if global_batch_tokens > MAX_BATCH * seq_len:  # --global-batch's bound, in tokens
        raise LlmcalcError(f"--global-batch-tokens must be at most {MAX_BATCH * seq_len:,} ({MAX_BATCH:,} sequences "
                           f"of --seq-len {seq_len:,}), got {global_batch_tokens:,.0f}")
    if global_batch_tokens <= 0 or global_batch_tokens % seq_len:
        low = max(1, int(global_batch_tokens // seq_len))  # the multiples of seq_len on either side
        nearest = " or ".join(f"{n * seq_len:,} ({plural(n, 'sequence')})" for n in dict.fromkeys((low, low + 1)))
        raise LlmcalcError(f"--global-batch-tokens {global_batch_tokens:,.0f} is not a multiple of --seq-len "
                           f"{seq_len:,}; the nearest: {nearest}, or give --global-batch in sequences")
    return int(global_batch_tokens // seq_len)


LAYOUT_DEFAULTS = {"micro_batch": 1, "tp": 1, "cp": 1, "pp": 1, "vpp": 1, "ep": 1, "schedule": None,
                   "zero": DEFAULT_ZERO, "sequence_parallel": True, "dp_overlap": True, "tp_overlap": False}
# The step settings as `train` and `layout` name them (the keys their options pass): predict's recipe, and the
# Layout fields of STEP_DEFAULTS.
PREDICT_OPTIONS = ("recipe",)
STEP_OPTIONS = tuple(STEP_DEFAULTS) + PREDICT_OPTIONS


def _flag(key: str) -> str:
    return "--" + {"order": "rank-order"}.get(key, key).replace("_", "-")


def train_steptime(spec: ModelSpec | None, gpu: str, n_gpus: int, mfu: float | None, achieved_tflops: float | None,
                   dtype: str, seq_len: int, causal: bool, recompute: str, model_flops_per_token: float,
                   hardware_flops_per_token: float, accelerator: Accelerator,
                   options: dict) -> tuple[float | None, StepPrediction | None, dict | None]:
    """What `train` uses for device time: (mfu, prediction or None, measured dict or None).

    --mfu / --achieved-tflops win (mfu_source "given"); --tokens-per-second turns a past run's throughput
    into its MFU (also "given"); otherwise a layout with --global-batch(-tokens) is predicted ("predicted").
    """
    options = dict(options)
    tps = options.pop("tokens_per_second", None)
    attention = options.pop("attention", None)
    gb = global_batch_sequences(options.pop("global_batch", None), options.pop("global_batch_tokens", None), seq_len)
    step = {k: options.pop(k) for k in STEP_OPTIONS if options.get(k) is not None}
    given = {k: v for k, v in options.items() if v is not None}
    if sum(x is not None for x in (mfu, achieved_tflops, tps)) > 1:
        raise LlmcalcError("give exactly one of an MFU (--mfu), --achieved-tflops or --tokens-per-second")
    measured = None
    if tps is not None:
        m, h = mfu_from_throughput(model_flops_per_token, hardware_flops_per_token, tps, n_gpus,
                                   accelerator.peak(dtype))
        if m > 1:
            raise LlmcalcError(f"--tokens-per-second {tps:g} on {n_gpus:,} x {accelerator.key} would need MFU "
                               f"{m * 100:.0f} % > 100 %; check the throughput (cluster-wide tokens/s) and --n-gpus")
        measured = {"tokens_per_second": tps, "mfu": m, "hfu": h}
        mfu = m
    if mfu is not None or achieved_tflops is not None:
        if attention is not None:
            raise LlmcalcError("--attention picks the kernel the step-time model times; with a given MFU, achieved "
                               "TFLOP/s or throughput nothing is timed: drop it, or drop those to predict")
        if step:
            raise LlmcalcError(f"{', '.join(_flag(k) for k in step)} shape{'s' if len(step) == 1 else ''} the "
                               f"predicted step; with a given MFU, achieved TFLOP/s or throughput nothing is timed: "
                               f"drop {'it' if len(step) == 1 else 'them'}, or drop those to predict")
        if given and gb is None:
            raise LlmcalcError(f"layout options ({', '.join('--' + k.replace('_', '-') for k in given)}) need "
                               f"--global-batch to predict a step; or drop them")
        if gb is not None:  # a given MFU with a layout: the step follows from the given throughput
            lay = make_layout(spec, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **given}) if spec is not None else \
                Layout(dp=n_gpus, global_batch=gb)
            measured = {**(measured or {}), "layout": lay}
        return mfu, None, measured
    if gb is None:
        if given or attention is not None or step:
            raise LlmcalcError("a layout needs --global-batch (sequences) or --global-batch-tokens to predict the "
                               "step time; or give --mfu")
        raise LlmcalcError("give exactly one of an MFU (--mfu 0.4), --achieved-tflops or --tokens-per-second, or a "
                           "layout with --global-batch (sequences per step) to predict the MFU")
    if spec is None:
        raise LlmcalcError("predicting the step time needs a MODEL (its shapes), not --params")
    recipe = step.pop("recipe", "bf16-mixed")
    lay = make_layout(spec, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **given}, **step)
    if lay.cp_comm != "p2p" and lay.cp == 1:  # `layout` applies it to the layouts with cp > 1
        raise LlmcalcError(f"--cp-comm {lay.cp_comm} picks how context-parallel ranks exchange K/V: it needs --cp > 1")
    pred = predict(spec, device_for(gpu, dtype), lay, seq_len, causal=causal, recompute=recompute,
                   recipe=recipe, attention=attention or "flash")
    return pred.mfu, pred, measured


def search_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int, causal: bool = False,
                   recompute: str | None = None, dtype: str = "bf16", progress: Callable[[int], Callable[[], None]]
                   | None = None, tp_overlap: bool = False, recipe: str = "bf16-mixed", top: int = 10,
                   exhaustive: bool = False, **step: Any) -> tuple[list, list, dict]:  # long: the search's phases
    """Every layout tp x cp x pp (x vpp, micro-batch, recomputation) of `n_gpus`, checked against the memory
    model and ranked by predicted throughput. Returns (ranked [(prediction, peak bytes)], losers, counts).

    tp runs over the divisors of GPUs per node (TP stays on NVLink), pp up to 64 (memory checked for the
    most loaded stage, ceil(L/pp) layers), cp over powers of two up to 16 keeping >= 1k tokens per rank;
    ZeRO-1 with the least of none, selective, full recomputation that fits (only `recompute` if given), else
    ZeRO-3 (FSDP) the same way. `recipe` and `step` (STEP_DEFAULTS' settings) apply to every layout.
    `progress(total)` (optional) returns a function called once per layout tried; `tp_overlap` times every
    layout with its TP collectives under the GEMMs (`_tp_exposed`).

    Pruned (the default): every valid layout first gets `_step_floor`, a lower bound of its step whatever
    recomputation and ZeRO stage it would get; in order of that floor the layouts are evaluated in full (memory,
    stages, DP, optimizer) until the next floor cannot beat the `top`-th exact step; the rest are counted
    `bounded` and never evaluated (nor checked for memory). `exhaustive` evaluates every layout (the ranked list,
    losers and counts then read all of them; `bounded` is 0). Either way the `top` best are exactly the exhaustive
    search's, in order: a layout among them has a floor at most its step, at most the `top`-th step.

    Each distinct piece is evaluated once (per-layer-kind costs per (tp, cp, micro-batch, recompute, ...), the
    FLOPs per recomputation, memory per layout but vpp, the parameters per model), and the pipeline is simulated
    only where it can change the ranking: every evaluated layout first gets pipeline.path_bound (its exact
    makespan where the timeline is known in closed form, else a lower bound); the layouts are then simulated only
    while that bound can beat the `top`-th exact step. The others keep their bound (say so in their
    assumptions), but for the few losers shown (_why_they_lose), simulated: their figures are train's."""
    check_modelled(spec)
    _order_dims(step.get("order", ORDER))  # refused once, as train refuses it, not layout by layout
    if step.get("recompute_layers") or step.get("recompute_modules"):
        raise LlmcalcError("layout checks memory with --recompute none, selective or full; time a partial "
                           "recomputation (--recompute-layers, --recompute-modules) with `llmcalc train`")
    dev = device_for(gpu, dtype)
    capacity = dev.accelerator.usable_bytes
    per_node = dev.network.gpus_per_node
    tries = [recompute] if recompute else ["none", "selective", "full"]
    counts = {"searched": 0, "fit": 0, "oom": 0, "invalid": 0, "bounded": 0}
    candidates = _candidates(spec, n_gpus, seq_len, global_batch, per_node)
    tick = progress(len(candidates)) if progress else None
    oom: list = []
    rec = lookup(RECIPES, "recipe", recipe)
    optimizer = step.get("optimizer", "adamw")
    moe_only = {"ep_overlap": False, "ep_dispatcher": "alltoall", "moe_imbalance": 1.0}
    for key, off in moe_only.items():
        if step.get(key, off) != off and not spec.is_moe:
            raise LlmcalcError(f"{_flag(key)} needs a mixture-of-experts model; {spec.name} is dense")
    # the expert all-to-all settings apply to the layouts that have all-to-alls (and micro-batches to overlap)
    plain_step = {k: v for k, v in step.items() if k not in ("ep_overlap", "ep_dispatcher")}
    # make_layout of each candidate with the step settings, else (where they differ) without the all-to-all ones
    options = dict(schedule=None, zero=DEFAULT_ZERO, sequence_parallel=True, dp_overlap=True, tp_overlap=tp_overlap)
    makers: list[Callable[[tuple, bool], Layout] | None] = []
    for given in [step] + ([plain_step] if plain_step != step else []):
        try:
            makers.append(_layout_maker(spec, n_gpus, seq_len, global_batch, options=options,
                                            step=given))
        except LlmcalcError:  # refuses every layout
            makers.append(None)
    layouts: list = []  # (floor, candidate index, tier, layout, what adds the optimizer) of the valid layouts
    # _context's layer-cost caches per maker and degrees but vpp (what else their key reads is the search's own), and
    # but pp where the rank order puts cp and ep inside dp and pp (their strides then read neither: _layer_cache)
    caches: dict[tuple, tuple[dict, dict]] = {}
    pp_free = _strides_pp_free(step.get("order", ORDER))
    shapes: dict[tuple, tuple] = {}  # _floor_shape per pp, vpp and schedule (what else it reads is the search's own)
    inputs = (spec, dev, seq_len, rec)
    counts["searched"] = len(candidates)
    for index, (tp, cp, pp, vpp, mb, ep, etp) in enumerate(candidates):
        if tick:
            tick()
        lay, which = None, 0
        for which in range(len(makers)):
            make = makers[which]
            if make is not None:
                try:
                    lay = make((tp, cp, pp, vpp, mb, ep, etp or None), False)  # (_candidates' degrees)
                    break
                except LlmcalcError:
                    continue
        if lay is None:
            counts["invalid"] += 1
            continue
        if exhaustive:
            layouts.append((0.0, index, _MEMORY, lay, None))
        else:  # its work floor (_first_floors)
            degrees = (which, tp, cp, 0 if pp_free else pp, mb, ep, etp)
            both = caches.get(degrees)
            if both is None:
                both = caches[degrees] = _layer_cache(spec, dev, lay, seq_len, rec, attention="flash", dropout=False)
            shape = shapes.get((pp, vpp, lay.schedule))
            if shape is None:
                shape = shapes[pp, vpp, lay.schedule] = _floor_shape(spec, lay)
            layouts.append((_first_floors(inputs, lay, both, shape), index, _RANKS, lay, (both, shape)))
    # best first: the least floor is taken and made tighter (its pipeline's paths; its optimizer step; then its
    # memory: the recomputation and ZeRO stage that fit and their stage times; their DP floor; then its stages, DP
    # and path bound: _prepare), or
    # once it is a prepared layout's, that layout is timed; once the least floor left cannot beat the `top`-th exact
    # step, neither can any other layout (their steps are at least their floors): those left are `bounded`
    heapq.heapify(layouts)

    def no_fit(lay: Layout, peak: float, zero: int) -> None:  # an evaluated layout that does not fit
        counts["oom"] += 1
        oom.append((lay, peak, tries[-1] + (" and ZeRO-3" if zero == 3 else "")))

    def fit(lay: Layout, rc: str) -> _Prepared:  # an evaluated layout that fits, with its stages, DP and bound
        counts["fit"] += 1
        return _prepare(spec, dev, lay, seq_len, causal, recompute=rc, recipe=recipe, attention="flash",
                        dropout=False)
    prepared: list[tuple[_Prepared, float, int, StepPrediction | None]] = []
    best: list[float] = []  # the `top` smallest exact steps so far, ascending
    bounds: dict[int, _Prepared] = {}  # the predictions that are their pipeline's lower bound (by id): their layout

    def finish(prep: _Prepared, simulated: bool) -> StepPrediction:  # _finish, its lower bounds kept in `bounds`
        pred = _finish(prep, simulated=simulated)
        if not (simulated or prep.exact):
            bounds[id(pred)] = prep
        return pred
    while layouts:
        # the least floor, left on the heap: a next tier takes its place there (at the root where it is still the
        # least, else heapreplace: one sift instead of a pop's and a push's); the entries' (floor, candidate index)
        # are all distinct, so they come off in the same order
        floor, index, tier, lay, more = layouts[0]
        if len(best) >= top and floor > best[-1]:
            break
        if tier == _RANKS:  # at most its path floor, at a fraction of its cost: most layouts stop here
            ranks = _first_floors(inputs, lay, more[0], more[1], ranks=True)
            entry = (max(floor, ranks), index, _PATHS, lay, more[0])
        elif tier == _PATHS:  # its context (_context's, with the layer-cost caches it was given) and path floor
            ctx = _context_in(inputs, lay, more)
            floor, ctx, paths = _step_floor(spec, dev, lay, seq_len, rec, recompute="none", ctx=ctx)
            entry = (floor, index, _OPTIMIZER, lay, (ctx, paths))
        elif tier == _OPTIMIZER:
            ctx, paths = more
            floor += _optimizer_floor(ctx, paths, with_dp=False)[0] * (1 - FLOOR_MARGIN)
            entry = (floor, index, _MEMORY, lay, more)
        elif tier == _MEMORY:
            rc, zero, peak = _least_that_fits(spec, lay, seq_len, tries, capacity, recipe=recipe,
                                              optimizer=optimizer)
            if rc is None:
                heapq.heappop(layouts)
                no_fit(lay, peak, zero)
                continue
            lay = lay if zero == lay.zero else _with_zero(lay, zero)
            if exhaustive:
                entry = (floor, index, _PREPARE, lay, (rc, peak))
            else:  # the floor of the recomputation and ZeRO stage that fit, its DP floor next
                ctx = more[0]
                if ctx.lay is not lay:  # the same layer-cost caches (their key reads no ZeRO stage): _context's
                    ctx = _Ctx(spec, dev, lay, seq_len, rec, attention=ctx.attention, dropout=ctx.dropout, eff=ctx.eff,
                               cache=ctx.cache, dense_cache=ctx.dense_cache)
                floor, ctx, paths = _step_floor(spec, dev, lay, seq_len, rec, recompute=rc, ctx=ctx)
                opt = _optimizer_floor(ctx, paths, with_dp=False)[0]
                entry = (floor + opt * (1 - FLOOR_MARGIN), index, _DP, lay, (rc, peak, floor, ctx, paths))
        elif tier == _DP:  # the same floor as with its DP floor at once, at or above the one it was taken at
            rc, peak, floor, ctx, paths = more
            opt, dp = _optimizer_floor(ctx, paths)
            entry = (floor + (opt + dp) * (1 - FLOOR_MARGIN), index, _PREPARE, lay, (rc, peak))
        elif tier == _PREPARE:
            rc, peak = more
            prep = fit(lay, rc)
            if exhaustive:  # simulated below, in order of the pipeline bounds
                heapq.heappop(layouts)
                prepared.append((prep, peak, index, None))
                continue
            entry = (prep.step_bound, index, _TIME, lay, (prep, peak))
        else:
            heapq.heappop(layouts)
            prep, peak = more  # a prepared layout's turn: simulated while it can still be among the `top`
            can_win = len(best) < top or prep.step_bound < best[-1]
            pred = finish(prep, simulated=can_win)
            if can_win:
                best = sorted(best + [pred.step_seconds])[:top]
            prepared.append((prep, peak, index, pred))
            continue
        n = len(layouts)
        if (n < 2 or entry < layouts[1]) and (n < 3 or entry < layouts[2]):  # below the root's children: its root
            layouts[0] = entry
        else:
            heapq.heapreplace(layouts, entry)
    # what the search stopped before: the prepared layouts fit (their bound is their step), a few extremes are
    # evaluated for the losers' table (_extremes: for each kind of loss the most extreme that fits, of the first
    # EXTREME_TRIES; none can win, so each keeps its bound), the rest are bounded
    left = {}
    for _, index, tier, lay, more in layouts:
        if tier == _TIME:
            prep, peak = more
            prepared.append((prep, peak, index, finish(prep, simulated=False)))
        else:
            left[index] = (tier, lay, more)
    fits: dict[int, bool] = {}
    for order in _extremes([(index, lay) for index, (_, lay, _) in left.items()]):
        for index in order[:EXTREME_TRIES]:
            if index not in fits:
                tier, lay, more = left[index]
                if tier in (_DP, _PREPARE):  # its memory checked
                    rc, peak = more[:2]
                else:
                    rc, zero, peak = _least_that_fits(spec, lay, seq_len, tries, capacity, recipe=recipe,
                                                      optimizer=optimizer)
                    if rc is not None:
                        lay = lay if zero == lay.zero else _with_zero(lay, zero)
                fits[index] = rc is not None
                if rc is None:
                    no_fit(lay, peak, zero)
                else:
                    prep = fit(lay, rc)
                    prepared.append((prep, peak, index, finish(prep, simulated=False)))
            if fits[index]:
                break
    counts["bounded"] = len(left) - len(fits)
    # in order of the pipeline bounds (ties in candidate order), as the exhaustive search simulates them: equal
    # steps keep this order in the ranking whichever layouts were evaluated
    prepared.sort(key=lambda pp: (pp[0].step_bound, pp[2]))
    ranked = []
    for prep, peak, _, done in prepared:
        if done is None:
            can_win = len(best) < top or prep.step_bound < best[-1]
            done = finish(prep, simulated=can_win)
            if can_win:
                best = sorted(best + [done.step_seconds])[:top]
        ranked.append((done, peak))
    ranked.sort(key=lambda pm: -pm[0].tokens_per_second)
    exact: dict[int, StepPrediction] = {}  # the losers shown, simulated: their figures are what train predicts

    def simulated(pred: StepPrediction) -> StepPrediction:
        if id(pred) not in bounds:
            return pred
        if id(pred) not in exact:
            exact[id(pred)] = _finish(bounds[id(pred)])
        return exact[id(pred)]
    losers = _why_they_lose(ranked, oom, capacity, simulated)
    return ranked, losers, counts


def _strides_pp_free(order: Any) -> bool:
    """Whether rank order `order` puts cp and ep inside dp and pp: the cp stride (tp, cp, ep, dp, pp sizes) and the
    experts' ep stride (etp, 1, ep, expert dp, pp) are then products of the sizes before them, neither dp nor pp (so
    _layer_cache's key reads no pp of a search's layouts, whose dp follows from pp). False for an order make_layout
    refuses."""
    try:
        dims = _order_dims(order)
    except Exception:  # noqa: BLE001 (refused by every layout: nothing to share)
        return False
    return max(dims.index("cp"), dims.index("ep")) < min(dims.index("dp"), dims.index("pp"))


def _with_zero(lay: Layout, zero: int) -> Layout:
    """replace(lay, zero=zero): the same fields in the same order, built without __init__ (records.replaced)."""
    return replaced(lay, {"zero": zero})


EXTREME_TRIES = 3  # how many of the most extreme layouts of a kind _extremes' caller tries for one that fits


def _extremes(left: list[tuple[int, Layout]]) -> list[list[int]]:
    """The layouts a pruned search evaluates beyond those that can win, so that `layout`'s "why the others lose"
    shows each kind of loss at its strongest: of the layouts it stopped before (`left`: candidate index, layout),
    per kind of loss their indices, most extreme first: the largest closed-form bubble fraction (pp - 1) / (vpp x
    micro-batches) (the pipeline bubble), the largest tp then cp (TP communication: the least work per rank beside
    it), the largest cp then tp (CP communication), the largest dp (DP communication), the largest pp x vpp (PP
    sends); candidate order on ties."""
    ordered = sorted(left, key=operator.itemgetter(0))  # (distinct indices: sorted(left)'s order)
    lays = [lay for _, lay in ordered]
    picks: tuple[list[Any], ...] = (
        [(lay.pp - 1) / (lay.vpp * lay.grad_accum) for lay in lays], [(lay.tp, lay.cp) for lay in lays],
        [(lay.cp, lay.tp) for lay in lays], [lay.dp for lay in lays], [lay.pp * lay.vpp for lay in lays])
    out = []
    # per key the positions by key, largest first, equal keys in their order (heapq.nlargest with the key, its docs'
    # sorted(..., reverse=True)[:n]): the largest keys alone (nlargest, no key call per layout), each found at its
    # first position, a repeated one at the next
    for keys in picks:
        found: list[int] = []
        last, at = None, -1
        for value in heapq.nlargest(EXTREME_TRIES, keys):
            at = keys.index(value, at + 1 if value == last else 0)
            found.append(ordered[at][0])
            last = value
        out.append(found)
    return out


_RANKS, _PATHS, _OPTIMIZER, _MEMORY, _DP, _PREPARE, _TIME = range(7)  # what search_layouts does next to a layout off
# its heap
FLOOR_MARGIN = 1e-9  # _step_floor's relative margin below its path sums: no rounding lifts it above a step


def _context(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, rec: Recipe, attention: str = "flash",
             dropout: bool = False) -> _Ctx:
    """The prediction context of `lay` with its layer-cost caches (_prepare's; the search's floors read the same,
    with flash attention and no dropout)."""
    caches = _layer_cache(spec, dev, lay, seq_len, rec, attention=attention, dropout=dropout)
    return _context_in((spec, dev, seq_len, rec), lay, caches, attention=attention, dropout=dropout)


def _context_in(inputs: tuple, lay: Layout, caches: tuple[dict, dict], attention: str = "flash",
                dropout: bool = False) -> _Ctx:
    """_context of `lay` with the layer-cost caches it was given (`caches`: _layer_cache's; `inputs`: (spec, device,
    sequence, recipe)), as the layout search builds each layout's."""
    spec, dev, seq_len, rec = inputs
    return _Ctx(spec, dev, lay, seq_len, rec, attention=attention, dropout=dropout, eff=KERNEL_EFFICIENCY,
                cache=caches[0], dense_cache=caches[1])


def _work_floor(ctx: _Ctx) -> float:
    """The first, cheapest floor of a layout's step (search_layouts orders every layout by it): its micro-batches'
    work at recompute none spread evenly over the pipeline ranks, m x (every layer's forward, backward and weight
    gradient + the embedding, LM head and MTP layers) / pp. The busiest rank does at least the average of all ranks'
    work, and no rank finishes before its own work is done, so it is at most _step_floor's bound (whose paths
    include each rank's own work); FLOOR_MARGIN below, the sums being in another order. The whole model's work is
    one stage composition's (one cost per layer kind x its count), cached with the layer costs."""
    lay = ctx.lay
    key = _work_key(lay)
    work = ctx.cache.get(key)
    if work is None:
        spec = ctx.spec

        def whole() -> tuple:  # the whole model as one stage's composition (_stage_plan's form)
            runs: dict[tuple, list[int]] = {}
            for i in range(spec.n_layers):
                runs.setdefault(_layer_kind(spec, i), [i, 0])[1] += 1
            return tuple((i, frozenset(), count) for i, count in runs.values()), True, True
        composition = _cached("params", ("whole", _token(spec)), whole)
        pass_, wgt = _composition_passes(ctx, composition, "none")
        work = ctx.cache[key] = pass_ + (wgt if wgt is not None else 0.0)
    return _spread_work(lay, work)


def _work_key(lay: Layout) -> tuple:
    """The key of the whole model's work (_work_floor's) in a layer-cost cache: what it reads beside the cache's key."""
    return ("work", lay.mtp_layers, lay.schedule)


def _spread_work(lay: Layout, work: float) -> float:
    """_work_floor from the whole model's work of one micro-batch: m x work / pp, FLOOR_MARGIN below."""
    return lay.grad_accum * work / lay.pp * (1 - FLOOR_MARGIN)


def _step_floor(spec: ModelSpec, dev: Device, lay: Layout, seq_len: int, rec: Recipe,
                recompute: str, ctx: _Ctx | None = None) -> tuple[float, _Ctx, tuple]:
    """(a lower bound of the makespan of `lay`'s pipeline (flash attention) at recomputation `recompute` or more,
    whatever its ZeRO stage; the context and the stage structure _optimizer_floor reads). The bound is the longest
    of the dependency paths of pipeline.path_bound, one per group of identical pipeline ranks: the first micro-batch's
    forward and the last one's backward through the stages before the rank's first chunk, each hop paying the
    activation send twice, plus all of the rank's own work (or only its own work, weight gradients included); each
    stage's times at `recompute`. Why it is a floor of the step search_layouts predicts:
    - every path is a chain of dependencies, so no simulated schedule finishes sooner, and path_bounds' closed
      forms are makespans; a layout the search does not simulate keeps path_bounds' own bound, the longest of the
      same paths at its own stage times;
    - recomputation only adds work (none < selective < full: a forward re-run inside the backward), so each
      stage's forward, backward and weight-gradient times at `recompute` are at most those at more recomputation,
      and a path's sum of them is non-decreasing in each;
    - the layer costs do not read the ZeRO stage (_layer_cache's key), and DP and the optimizer add to the
      makespan (_optimizer_floor: at least what they add);
    - the sums are taken FLOOR_MARGIN below, against rounding in another order than path_bounds'.
    tests/test_layout_prune.py holds it at or below the full evaluation of every candidate of several searches.
    `ctx`: `lay`'s _context, where the caller has it."""
    if ctx is None or ctx.lay is not lay:
        ctx = _context(spec, dev, lay, seq_len, rec)
    cache = ctx.cache
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    key = ("floor", recompute, n_stages, lay.pp, lay.schedule, lay.first_stage_layers, lay.last_stage_layers,
           lay.mtp_layers)
    paths = cache.get(key)
    if paths is None:
        paths = cache[key] = _floor_paths(ctx, n_stages, v, recompute)
    m = lay.grad_accum
    p2p = _p2p_seconds(ctx) if lay.pp > 1 else 0.0
    floor = 0.0
    for before, busy, own, hops in paths[0]:  # max(floor, path, own): a later value only where greater
        path = before + m * busy + hops * p2p
        if path > floor:
            floor = path
        own *= m
        if own > floor:
            floor = own
    return floor * (1 - FLOOR_MARGIN), ctx, paths


def _rank_floor(ctx: _Ctx) -> float:
    """A floor of `ctx`'s layout's step between _work_floor's and _step_floor's at recompute none, far cheaper than
    the latter: _step_floor's paths without their activation sends (p2p >= 0), each stage's passes summed piece by
    piece (a layer kind with its recomputation, the embedding, the LM head, an MTP layer: each piece's passes once
    per layer-cost cache, times its count on the stage, _rank_pieces) instead of per distinct stage composition. The
    same sums of the same terms (every StageTimes field >= 0, comm_fwd at most tp + cp + ep) in another order:
    2 x FLOOR_MARGIN below, against the rounding of both. Also at least the work floor (the busiest rank's own work
    is at least the average) up to that rounding. (search_layouts takes max(work floor, rank floor) of every layout
    from its layer-cost caches: _first_floors.)"""
    shape = _floor_shape(ctx.spec, ctx.lay)
    return _ranks_floor(shape[1], _piece_list(ctx, shape), shape[4], ctx.lay.grad_accum)


def _floor_shape(spec: ModelSpec, lay: Layout) -> tuple:
    """What the work and rank floors of `lay` read beside its layer-cost caches and micro-batch count: (the work
    floor's key in the caches, _rank_pieces' ranks (their counts as floats) and pieces, the key of those pieces' passes
    in the caches (_piece_list), whether the schedule splits off the weight gradients). The same for every layout of
    one search with the same pp, vpp and schedule."""
    v = chunks_per_rank(lay.schedule, lay.vpp)
    zb = lay.schedule.startswith("zb")
    ranks, pieces, pid = _rank_pieces(spec, lay.pp * v, lay, v)  # (its counts are floats: _floor_ranks' are)
    return _work_key(lay), ranks, pieces, ("piece list", pid, zb), zb


def _first_floors(inputs: tuple, lay: Layout, caches: tuple[dict, dict], shape: tuple,
                  ranks: bool = False) -> float:
    """_work_floor of `lay` (the floor search_layouts orders every layout by first), or with `ranks` its _rank_floor
    (taken second), from its layer-cost caches (`caches`: _layer_cache's) and _floor_shape (`shape`), the same
    floats; its _Ctx is built only where the caches lack the whole model's work or the pieces' passes. `inputs`:
    _context's (spec, device, sequence, recipe)."""
    cache = caches[0]
    work_key, rank_list, _, list_key, zb = shape
    found = cache.get(list_key if ranks else work_key)
    if found is None:
        ctx = _context_in(inputs, lay, caches)
        return _ranks_floor(rank_list, _piece_list(ctx, shape), zb, lay.grad_accum) if ranks else _work_floor(ctx)
    if ranks:
        return _ranks_floor(rank_list, found, zb, lay.grad_accum)
    return _spread_work(lay, found)


def _ranks_floor(ranks: tuple, passes: list, zb: bool, m: int) -> float:
    """_rank_floor's bound from its ranks (_rank_pieces'), the pieces' passes (_piece_list) and the micro-batch
    count `m`: each rank's sums by _rank_sums; the max is max()'s (a later value only where greater)."""
    floor = 0.0
    for before, mine in ranks:
        path, busy, own = _rank_sums(before, mine, passes, zb)
        path += m * busy
        if path > floor:
            floor = path
        own *= m
        if own > floor:
            floor = own
    return floor * (1 - 2 * FLOOR_MARGIN)


def _piece_list(ctx: _Ctx, shape: tuple) -> list[tuple[float, float]]:
    """The passes of _floor_shape's pieces (_piece_passes) in `ctx`'s layer-cost cache, in their order: a list per
    distinct tuple of pieces, each piece's once per cache."""
    _, _, pieces, list_key, zb = shape
    passes = ctx.cache.get(list_key)
    if passes is None:
        known = ctx.cache.get(("piece passes", zb))
        if known is None:
            known = ctx.cache[("piece passes", zb)] = {}
        passes = []
        for piece in pieces:
            done = known.get(piece)
            if done is None:
                done = known[piece] = _piece_passes(ctx, piece, zb)
            passes.append(done)
        ctx.cache[list_key] = passes
    return passes


def _piece_passes(ctx: _Ctx, piece: tuple, zb: bool) -> tuple[float, float]:
    """(forward + backward, weight gradient: 0 unless `zb` splits it off) of one micro-batch of one piece of a stage
    (_rank_pieces'), stage_passes' sums of its StageTimes (_passes)."""
    what = piece[0]
    if what == "embedding":
        s = _cached_in(ctx.dense_cache, ("embedding",), lambda: _embedding_times(ctx))
    elif what == "head":
        s = _cached_in(ctx.dense_cache, ("head",), lambda: _head_times(ctx))
    elif what == "mtp":
        s = _mtp_times(ctx, "none")
    else:
        s = _layer_cost(ctx, what, piece[1])
    both, weight = _passes(s, zb)
    return both, 0.0 if weight is None else weight


def _rank_pieces(spec: ModelSpec, n_stages: int, lay: Layout, v: int) -> tuple:
    """_floor_ranks' paths at recompute none as counts of pieces: per group of identical ranks (its last rank) the
    pieces of the stages before its first chunk and its own, each as (index, count); the pieces: a layer's
    (representative layer, what it recomputes), ("embedding",), ("head",), ("mtp",); and a small int standing for
    those pieces (_interned). Cached per stage plan."""
    def make() -> tuple:
        plan = _stage_plan(spec, n_stages, lay, "none")
        ranks = _floor_ranks(plan, lay.schedule, lay.pp, v)[0]
        index: dict[tuple, int] = {}
        compositions = plan[3]

        def counted(stages: tuple) -> tuple:
            out: dict[int, int] = {}
            for j, n in stages:
                runs, embedding, head = compositions[j]
                found: list[tuple[tuple, int]] = [((i, rc), count) for i, rc, count in runs]
                found += [(("embedding",), 1)] * embedding + [(("head",), 1)] * head
                found += [(("mtp",), lay.mtp_layers)] * (head and lay.mtp_layers > 0)
                for piece, count in found:
                    k = index.setdefault(piece, len(index))
                    out[k] = out.get(k, 0) + n * count
            return tuple(out.items())
        ranks = tuple((counted(before), counted(mine)) for before, mine, _ in ranks)
        return ranks, tuple(index), _interned(tuple(index))
    # what the plan at recompute none reads (its recompute_layers and _modules change nothing without recomputation)
    return _cached("params", ("rank pieces", _token(spec), n_stages, lay.pp, lay.schedule, lay.first_stage_layers,
                              lay.last_stage_layers, v, lay.mtp_layers), make)


def _floor_paths(ctx: _Ctx, n_stages: int, v: int, recompute: str) -> tuple:
    """_step_floor's paths of one layer-cost cache and stage plan, whatever the micro-batch count: per group of
    identical ranks (its last rank: pipeline.path_bounds' `ranks`) the forward and backward of the stages before its
    first chunk, its own forward + backward of one micro-batch, the same with its weight gradients, and its number of
    send/receive pairs (2 per hop between ranks); then the stage split and each group's first rank (_rank_dp's).
    Each sum is of the distinct stage compositions' times, each times its count (_floor_ranks)."""
    lay = ctx.lay
    plan = _stage_plan(ctx.spec, n_stages, lay, recompute)
    passes = []
    for composition, cid in zip(plan[3], plan[5], strict=True):
        passes.append(_composition_passes(ctx, composition, recompute, cid))
    zb = lay.schedule.startswith("zb")
    ranks, split, firsts = _floor_ranks(plan, lay.schedule, lay.pp, v)
    out = []
    for before, mine, hops in ranks:
        path, busy, own = _rank_sums(before, mine, passes, zb)
        out.append((path, busy, own, hops))
    return tuple(out), split, firsts


def _rank_sums(before: Sequence[tuple[int, float]], mine: Sequence[tuple[int, float]], passes: Sequence[tuple],
               zb: bool) -> tuple[float, float, float]:
    """One pipeline rank's sums of (index, count) terms over `passes` ((forward + backward, weight gradient) per
    index: _floor_paths' compositions, _ranks_floor's pieces): (the forward + backward of the stages before its first
    chunk, its own forward + backward, the same with its weight gradients where `zb`, else that forward + backward).
    Each sum is sum()'s of its terms, added in turn from 0.0 (loops: a generator or list comprehension costs a call
    each on CPython 3.11)."""
    busy = 0.0
    for k, n in mine:
        busy += passes[k][0] * n
    own = busy  # (busy + 0.0 without weight gradients)
    if zb:
        weight = 0.0
        for k, n in mine:
            weight += passes[k][1] * n
        own = busy + weight
    path = 0.0
    for k, n in before:
        path += passes[k][0] * n
    return path, busy, own


def _composition_passes(ctx: _Ctx, composition: tuple, recompute: str, cid: int | None = None) -> tuple[float, Any]:
    """(forward + backward, weight gradient or None) of one micro-batch on a stage of this composition, as
    stage_passes gives them for the layout's schedule (the weight gradient split off by a zero-bubble one, else
    None); cached with the stage's cost (`cid`: the composition's _interned id, where the caller has it)."""
    zb = ctx.lay.schedule.startswith("zb")
    if cid is None:
        cid = _interned(composition)
    key = ("passes", cid, recompute, ctx.lay.mtp_layers, zb)
    out = ctx.cache.get(key)
    if out is None:
        out = ctx.cache[key] = _passes(_stage_cost(ctx, composition, recompute, cid), zb)
    return out


def _passes(s: StageTimes, zb: bool) -> tuple[float, float | None]:
    """stage_passes([s], [0], schedule)'s sums of one stage: its forward + backward, and its weight gradient where a
    zero-bubble schedule (`zb`) splits it off (else None); the same additions in the same order."""
    comm = s.tp + s.cp + s.ep - s.comm_fwd
    if zb:
        return s.fwd + s.comm_fwd + (s.bwd_input + comm), s.bwd_weight
    return s.fwd + s.comm_fwd + (s.bwd_input + s.bwd_weight + comm), None


def _floor_ranks(plan: tuple, schedule: str, pp: int, v: int) -> tuple:
    """The shape of _floor_paths' paths for one stage plan (_stage_plan's) and schedule: per group of identical ranks
    (its last rank) the distinct compositions before its first chunk and its own, each as (index, count: a float,
    so that _floor_paths' products are float ones), and its send/receive count; the stage split; each group's first
    rank. Cached with the plan (kept with it, so that its id stays its own), _cached's way without a closure per
    call."""
    cache = _CACHES["params"]
    key = ("floor ranks", id(plan), schedule, pp, v)
    found = cache.get(key)
    if found is None:
        if len(cache) > 200_000:
            cache.clear()
        found = cache[key] = (_floor_ranks_uncached(plan, schedule, pp, v), plan)
    return found[0]


def _floor_ranks_uncached(plan: tuple, schedule: str, pp: int, v: int) -> tuple:
    split, _, ids, _, groups, _ = plan
    rank_groups, lasts = groups(schedule, pp)
    n_stages = len(split)
    home = [0] * n_stages  # each stage's rank
    for r in range(pp):
        for c in range(v):
            home[stage_of(schedule, r, c, pp)] = r

    def counted(stages: Sequence[int]) -> tuple:  # the counts as floats: x * n is x * float(n) (exact)
        out: dict[int, float] = {}
        for st in stages:
            out[ids[st]] = out.get(ids[st], 0.0) + 1.0
        return tuple(out.items())
    ranks = []
    for r in lasts:
        stages = [stage_of(schedule, r, c, pp) for c in range(v)]
        s0 = min(stages)
        hops = sum(home[st] != home[st + 1] for st in range(s0))
        ranks.append((counted(range(s0)), counted(stages), 2 * hops))
    return tuple(ranks), tuple(split), [r for r, _ in rank_groups]


def _optimizer_floor(ctx: _Ctx, paths: tuple, with_dp: bool = True) -> tuple[float, float]:
    """(the optimizer step of the layout in `ctx`, at least its exposed DP communication), each the most loaded
    rank's as _dp_and_optimizer takes them. The optimizer step is the same with ZeRO-1 and ZeRO-3 (_one_rank_dp
    shards it over dp x cp either way), so ZeRO-1's is taken whatever the layout's stage; the DP floor is the
    layout's own stage's: the last bucket's reduction and the first's gather (overlapped ZeRO-1/2), one FSDP unit's
    transfers per micro-batch (ZeRO-3), every collective (not overlapped), the parts _dp_and_optimizer's exposed
    time is at least whatever the stage times. `with_dp` False: the optimizer alone (`_rank_optimizer`, without the
    collectives _rank_dp prices), DP floor 0."""
    lay = ctx.lay
    _, split, firsts = paths
    v = chunks_per_rank(lay.schedule, lay.vpp)
    key = _dp_key(ctx, zero=1)

    def most() -> float:  # the most loaded first rank's, once per degrees and stage split (whatever the micro-batch)
        per_layer = _param_summary(ctx.spec)[0]
        holdings = _holdings(ctx, split, v)
        opt = 0.0
        for r in firsts:
            held = holdings.get(r)
            if held is None:
                held = holdings[r] = _rank_holdings(ctx, split, v, r)
            opt = max(opt, _cached("params", ("rank optimizer", *key, *held),  # ZeRO-1's, whatever the layout's
                                   lambda: _rank_optimizer(ctx, *held, per_layer, zero=1)))  # noqa: B023 (at once)
        return opt
    opt = _cached("params", ("optimizer floor", *key, split, v, lay.schedule, *firsts), most)
    if not with_dp:
        return opt, 0.0
    dp = 0.0
    # ZeRO-1's key is the layout's own where its stage is 1 (_dp_key reads the micro-batches for ZeRO-3 alone)
    own = _rank_dp(ctx, split, v, firsts, key if lay.zero == 1 else None)
    for _, zero3, per_f, per_b, reduce, gather, last, first, _ in own.values():
        if zero3 and lay.dp_overlap:
            exposed = lay.grad_accum * (per_f + per_b)
        elif lay.dp_overlap and not zero3:
            exposed = last + first if reduce or gather else 0.0
        else:
            exposed = reduce + gather
        dp = max(dp, exposed)
    return opt, dp


def _least_that_fits(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str], capacity: float,
                     recipe: str = "bf16-mixed", optimizer: str = "adamw") -> tuple[str | None, int, float]:
    """(recompute, ZeRO stage, peak bytes) of the cheapest setting whose most loaded stage (ceil(L / pp) layers
    on every stage) fits `capacity`: ZeRO-1 with the least recomputation, else ZeRO-3 (FSDP: weights and
    gradients sharded too, at three weight/gradient transfers per micro-batch) where dp > 1;
    (None, last stage tried, its peak) when nothing fits. Memory is `memory.training_memory`'s, computed through
    `training_peak` (the same arithmetic, each distinct layer kind's activations once). Once per model, degrees,
    micro-batch and settings: what it reads of `lay` (the layouts that differ in vpp alone, say, share it)."""
    key = ("fits", _token(spec), lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, lay.micro_batch, seq_len,
           tuple(tries), capacity, recipe, optimizer)
    return _cached("counts", key, lambda: _least_that_fits_uncached(spec, lay, seq_len, tries, capacity,
                                                                    recipe=recipe, optimizer=optimizer))


def _least_that_fits_uncached(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str], capacity: float,
                              recipe: str, optimizer: str) -> tuple[str | None, int, float]:
    layers = math.ceil(spec.n_layers / lay.pp) * lay.pp  # pp values with the same count share the resized spec
    even = _cached("params", ("even", _token(spec), layers), lambda: _resized(spec, layers))
    rec = RECIPES[recipe]
    peak, zero = 0.0, 1
    zeros = (1, 3) if lay.dp > 1 else (1,)
    # each recomputation's stage activations (_stage_sums): the same at either ZeRO stage, and for the layouts that
    # differ in ep or etp alone
    sums = _cached("acts", ("check sums", _token(even), lay.micro_batch, seq_len, rec.act_bytes, lay.tp, lay.cp,
                            lay.pp), dict)
    for zero in zeros:
        # _training_peak's terms, without its cache: no other layout's check asks for these degrees and micro-batch
        states = _stage_states(even, recipe, optimizer, (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, zero))
        # every phase_peak is at least its optimizer step's sum, the same for every micro-batch and recomputation:
        # above the capacity no recomputation fits (the last try of the last stage is still computed: its peak is
        # the one reported)
        hopeless = max(s.step for s in states) > capacity
        none_peak = None
        for rc in (tries[-1:] if zero == zeros[-1] else []) if hopeless else tries:
            if rc == "selective" and none_peak is not None:
                # flash attention keeps no S² buffer, the only tensors selective recomputation drops
                # (activations.layer_terms): the same bytes as none, which did not fit
                peak = none_peak
                continue
            if rec.fp8_saved_inputs:
                par = _build(Parallel, tp=lay.tp, cp=lay.cp, pp=lay.pp, dp=lay.dp, ep=lay.ep, etp=lay.etp,
                             sequence_parallel=True, zero=zero)  # Parallel(...), without __init__'s setattr
                peak = _training_peak(even, lay.micro_batch, seq_len, recipe, optimizer, recompute=rc, parallel=par)
            else:
                acts = sums.get(rc)
                if acts is None:
                    acts = sums[rc] = _stage_sums(even, lay.micro_batch, seq_len // lay.cp, rec.act_bytes, rc,
                                                  mesh=(lay.tp, True, lay.pp))
                peak = max(map(peak_from, states, acts))  # the stages pair up (_stage_ranges)
            if peak <= capacity:
                return rc, zero, peak
            none_peak = peak if rc == "none" else None
    return None, zero, peak


def _degrees(par: Parallel) -> tuple:
    """A Parallel's fields as a plain tuple, for cache keys (hashing and comparing the dataclass takes longer)."""
    return par.tp, par.cp, par.pp, par.dp, par.ep, par.etp, par.vpp, par.zero, par.sequence_parallel


def _resized(spec: ModelSpec, n_layers: int) -> ModelSpec:
    """spec.with_layers(n_layers), of `spec`'s family: the activation caches share their per-layer terms
    (_layer_signature) and the head's. `spec` itself at its own layer count where with_layers would change no field
    (its per-layer lists are validated to n_layers entries; tests hold it on every preset): building and validating
    the copy is most of a memory check's cost."""
    same = n_layers == spec.n_layers and spec.n_dense_layers <= n_layers and \
        all(i < n_layers for i in (*(spec.moe_layers or ()), *(spec.index_layers or ())))
    out = spec if same else spec.with_layers(n_layers)
    base = _token(spec)
    _CACHES["family"][_token(out)] = _CACHES["family"].get(base, base)
    return out


def training_peak(spec: ModelSpec, batch: int, seq_len: int, recipe: str, optimizer: str, recompute: str,
                  parallel: Parallel) -> float:
    """`memory.training_memory(...).peak` (flash attention, no dropout, fused optimizer), evaluated with each distinct
    piece once: the parameters per model, each layer kind's saved activations per (micro-batch, sequence, tp,
    recompute), then summed by count (tests hold it equal to training_memory)."""
    key = (_token(spec), batch, seq_len, recipe, optimizer, recompute, *_degrees(parallel))
    return _cached("counts", key, lambda: _training_peak(spec, batch, seq_len, recipe, optimizer, recompute=recompute,
                                                         parallel=parallel))


def _training_peak(spec: ModelSpec, batch: int, seq_len: int, recipe: str, optimizer: str, recompute: str,
                   parallel: Parallel) -> float:
    seq = seq_len // parallel.cp
    rec = RECIPES[recipe]
    tp, pp, sp = parallel.tp, parallel.pp, parallel.sequence_parallel
    states = _stage_states(spec, recipe, optimizer, (tp, parallel.cp, pp, parallel.dp, parallel.ep, parallel.etp,
                                                     parallel.zero))
    if rec.fp8_saved_inputs:
        common = (spec, batch, seq, rec.act_bytes, recompute, tp, sp)
        acts = [_fp8_inputs(_activations(*common, *r), rec.act_bytes, rec.saved_input_bytes)
                for r in _stage_ranges(spec.n_layers, pp)]
        return max(peak_of(s, a) for s, a in zip(states, acts, strict=True))
    sums = _stage_sums(spec, batch, seq, rec.act_bytes, recompute, mesh=(tp, sp, pp))
    return max([peak_from(s, a) for s, a in zip(states, sums, strict=True)])


def _stage_ranges(n_layers: int, pp: int) -> list[tuple[int, int, int, bool]]:
    """memory.training_memory's most loaded stages as (first layer, stop, micro-batches in flight, head?): pp 1 the
    only stage; else the first (pp in flight, 1F1B) and the last (the head)."""
    if pp == 1:
        return [(0, n_layers, 1, True)]
    per_stage = n_layers // pp
    return [(0, per_stage, pp, False), (n_layers - per_stage, n_layers, 1, True)]


def _stage_sums(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, mesh: tuple) -> list:
    """_activation_sums of each of _stage_ranges' stages, `mesh` = (tp, sequence parallel, pp): the stages' layer kinds
    and interned signatures once per model, pp and sequence (_stages_signed), then each stage's plan by one key."""
    tp, sp, pp = mesh
    token = _token(spec)
    cache = _CACHES["acts"]
    stages = cache.get(("stages", token, pp, seq))
    if stages is None:
        stages = cache[("stages", token, pp, seq)] = _stages_signed(spec, pp, seq)
    common = (_CACHES["family"].get(token, token), batch, seq, act_bytes, recompute, tp, sp)
    return [_summed(spec, common, kinds, signed, in_flight, head=head) for kinds, signed, in_flight, head in stages]


def _stages_signed(spec: ModelSpec, pp: int, seq: int) -> list[tuple[list, int, int, bool]]:
    """Per stage of _stage_ranges: its layer kinds and their signatures (_kinds_signed, the signatures _interned),
    the micro-batches in flight and whether it holds the head."""
    out = []
    for start, stop, in_flight, head in _stage_ranges(spec.n_layers, pp):
        kinds, signatures = _kinds_signed(spec, start, stop, seq)
        out.append((kinds, _interned(signatures), in_flight, head))
    return out


def _stage_states(spec: ModelSpec, recipe: str, optimizer: str, degrees: tuple) -> list:
    """memory.training_memory's most loaded stages (pp 1: the only one; else the first and the last), each as the
    MemoryEstimate.state_terms of its parameters: the same whatever the micro-batch and recomputation, so once per
    model, recipe, optimizer and `degrees` = (tp, cp, pp, dp, ep, etp, ZeRO stage) (what they read of a Parallel)."""
    return _cached("params", ("states", _token(spec), recipe, optimizer, *degrees),
                   lambda: _stage_states_uncached(spec, recipe, optimizer, degrees))


def _stage_states_uncached(spec: ModelSpec, recipe: str, optimizer: str,
                           degrees: tuple) -> list:  # long: memory.training_memory's assembly, step by step
    rec = RECIPES[recipe]
    opt = OPTIMIZERS[optimizer]
    tp, cp, pp, dp, ep, etp, zero = degrees
    etp = etp or tp  # Parallel.expert_tp

    def make() -> tuple:  # once per model: its components, per-layer split, routed experts and blocks
        comps = count_params(spec).components
        return comps, _layer_params(spec, comps), routed_expert_params(spec, comps), layer_blocks(spec)
    comps, split, routed, each_block = _cached("params", ("comps", _token(spec)), make)
    layer, norms, emb, head, final = split
    per_stage = spec.n_layers // pp
    routed = routed / spec.n_layers
    own = ep > 1 or etp != tp
    layer -= routed if own else 0.0
    experts = per_stage * routed / (etp * ep) if own else 0.0
    blocks = per_stage * (layer / tp + norms)
    gathered = zero3_gathered(each_block, tp, etp * ep if own else None, rec.weight_bytes) if zero == 3 and dp > 1 \
        else 0.0
    tied = spec.lm_head and spec.tie_embeddings  # the head's gradient is the token table's, made first
    late = (emb - (comps.get("embedding/tokens", 0) if tied else 0)) / tp
    if pp == 1:
        stages = [(emb / tp + blocks + final + (head / tp if not spec.tie_embeddings else 0), head / tp + final, late)]
    else:
        stages = [(emb / tp + blocks, 0.0, emb / tp), (blocks + final + head / tp, head / tp + final, 0.0)]
    # MemoryEstimate(...).state_terms() of each stage, without the estimate: a fused optimizer (no temporaries)
    fp8_state = fp8_state_bytes(rec, spec.n_layers, pp)
    return [state_terms_of(rec, opt, zero=zero, dp=dp, expert_dp=tp * cp * dp // (etp * ep), params=params,
                           experts=experts, gathered=gathered, temporaries=0.0, fp8_state=fp8_state,
                           blocks=bool(spec.n_layers), head=head_p, late=late_p)
            for params, head_p, late_p in stages]


def _activations(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                 start: int, stop: int, in_flight: int, head: bool) -> ActivationEstimate:
    """activations.activation_memory over layers start..stop, each distinct layer kind (layer_parts, MoE or not)
    computed on one layer and counted (activation_memory sums the same per-layer tensors): _stage_acts' parts as an
    ActivationEstimate."""
    parts = _stage_acts(spec, batch, seq, act_bytes, recompute, tp=tp, sp=sp, start=start, stop=stop,
                        in_flight=in_flight, head=head)
    names, values, working, logits, largest, own, head_saved = parts
    return ActivationEstimate(dict(zip(names, values, strict=True)), working, logits, largest_layer=largest,
                              own_layer=own, head_saved=head_saved, in_flight=in_flight)


def _activation_sums(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                     start: int, stop: int, in_flight: int, head: bool) -> tuple[float, float, float, int, float,
                                                                                 float]:
    """What memory.peak_from reads of _activations(...): (the sum of its per_layer values in their order,
    logits_and_loss, head_saved, in_flight, own_layer, largest_layer), summed from _sums_plan's constants (once per
    model family, micro-batch, sequence, tp, recomputation and the stage's layer kinds, whatever their counts and the
    micro-batches in flight) as _stage_acts' dicts add them up (see _sums_plan; _summed). Not cached: a layout
    search asks for each stage once (_stage_sums, per memory check)."""
    token = _token(spec)
    kinds, signatures = _kinds_signed(spec, start, stop, seq)
    common = (_CACHES["family"].get(token, token), batch, seq, act_bytes, recompute, tp, sp)
    return _summed(spec, common, kinds, _interned(signatures), in_flight, head=head)


def _summed(spec: ModelSpec, common: tuple, kinds: list, signed: int, in_flight: int,
            head: bool) -> tuple[float, float, float, int, float, float]:
    """_activation_sums of a stage of these layer kinds (`signed`: their signatures _interned; `common` as
    _kind_terms'), from its plan (_sums_plan, once per `common`, signatures and head)."""
    cache = _CACHES["acts"]
    key = ("plan", *common, signed, head)
    plan = cache.get(key)
    if plan is None:
        if len(cache) > 200_000:
            cache.clear()
        plan = cache[key] = _sums_plan(spec, kinds, common, head)
    simple, flat, slots, tail, logits, head_saved, largest, own = plan
    # _stage_acts' 0.0 + x per name and per kind (the dicts' get(name, 0.0) + x) is left out below: it is x, but
    # for a -0.0 made 0.0, and what takes these values (the sum from 0, an accumulator from 0.0, never -0.0) adds
    # either zero alike
    if simple is not None:  # one kind, each name once and not the head's
        count = kinds[0][1]
        values = [value * in_flight * count for value in simple]
        return sum(values + tail), logits, head_saved, in_flight, own, largest
    counts = [count for _, count in kinds]
    if flat is not None:  # each layer's names once each: the loop below, kind by kind over every name
        columns, heads = flat
        sums = [0.0] * len(columns[0])
        for column, count in zip(columns, counts, strict=True):
            sums = [acc if value is None else acc + value * in_flight * count
                    for acc, value in zip(sums, column, strict=True)]
        if heads is not None:
            sums = [acc if value is None else acc + value for acc, value in zip(sums, heads, strict=True)]
        return sum(sums + tail), logits, head_saved, in_flight, own, largest
    sums = []
    for slot in slots:
        acc = 0.0
        for j, terms in slot:
            if j < 0:  # the head's bytes
                acc = acc + terms
                continue
            one = 0.0
            for value in terms:  # _kind_terms' one[name]: the name's terms of one layer, x in flight
                one = one + value * in_flight
            acc = acc + one * counts[j]
        sums.append(acc)
    return sum(sums + tail), logits, head_saved, in_flight, own, largest


def _kinds_signed(spec: ModelSpec, start: int, stop: int, seq: int) -> tuple[list, tuple]:
    """(_kinds_between(spec, start, stop), each kind's _layer_signature at `seq`)."""
    kinds = _cached("acts", ("kinds", _token(spec), start, stop), lambda: _kinds_between(spec, start, stop))
    return kinds, tuple([_signature(spec, _token(spec), i, seq) for i, _ in kinds])


def _signature(spec: ModelSpec, token: int, i: int, seq: int) -> tuple:
    """_layer_signature(spec, i, seq), once per model (`token`), layer and sequence."""
    return _cached("params", ("signature", token, i, seq), lambda: _layer_signature(spec, i, seq))


def _sums_plan(spec: ModelSpec, kinds: list, common: tuple, head: bool) -> tuple:
    """_activation_sums' constants of a stage of these layer kinds ([first layer, count] each, in layer order;
    `common` as _kind_terms'), whatever their counts and the micro-batches in flight: (the one kind's term bytes in
    order where the stage has one kind and each name once, not the head's, else None; where each kind's layer saves
    each of its names once, (per kind, its bytes of each of per_layer's names in their order (_stage_acts': each
    kind's names in turn, then the head's) or None where it has none; the head's the same way, or None without a
    head), else None; else per_layer's names in their order, each as its (kind, that kind's bytes of the name in
    order) in kind order, and (-1, bytes) for the head's; the head's 0.0 + bytes per name where simple, else [];
    logits and loss; head saved; the first largest layer and its own, as _stage_acts takes them). Each name
    sums to _stage_acts' float: 0.0, + per kind (0.0 + each of its bytes x in flight, in order) x its count, + the
    head's bytes (0.0 + x is x: the dicts' get(name, 0.0) + x whether or not the name is there yet)."""
    whole = _head_acts(spec, common, head)
    token, seq = _token(spec), common[2]
    heads = whole.per_layer
    if len(kinds) == 1:  # the usual stage: its names once each and not the head's
        terms, full, kept = _layer_kept(spec, kinds[0][0], common, _signature(spec, token, kinds[0][0], seq))
        names = [name for name, _ in terms]
        if len(set(names)) == len(names) and heads.keys().isdisjoint(names):
            largest, own = (full, kept) if full > 0.0 else (0.0, 0.0)
            return (tuple([value for _, value in terms]), True, (), [0.0 + value for value in heads.values()],
                    whole.logits_and_loss, whole.head_saved, largest, own)
    kept_of, largest, own = [], 0.0, 0.0
    for i, _ in kinds:
        terms, full, kept = _layer_kept(spec, i, common, _signature(spec, token, i, seq))
        kept_of.append(terms)
        if full > largest:  # (full, kept) if full > 0.0, as _kind_terms takes them; the first largest kind
            largest, own = full, kept
    if all(len({name for name, _ in terms}) == len(terms) for terms in kept_of):  # each layer's names once each
        index: dict[str, int] = {}
        for terms in kept_of:
            for name, _ in terms:
                index.setdefault(name, len(index))
        for name in heads:
            index.setdefault(name, len(index))
        columns = []  # per kind, then the head's: its bytes of each name in per_layer's order, None where it has none
        for terms in [*kept_of, list(heads.items())] if heads else kept_of:
            column: list[float | None] = [None] * len(index)
            for name, value in terms:
                column[index[name]] = value
            columns.append(tuple(column))
        flat = (tuple(columns[:len(kinds)]), columns[len(kinds)] if heads else None)
        return None, flat, (), [], whole.logits_and_loss, whole.head_saved, largest, own
    slots: dict[str, list] = {}
    for j, terms in enumerate(kept_of):
        per_name: dict[str, list[float]] = {}
        for name, value in terms:
            per_name.setdefault(name, []).append(value)
        for name, values in per_name.items():
            slots.setdefault(name, []).append((j, tuple(values)))
    for name, value in heads.items():
        slots.setdefault(name, []).append((-1, value))
    return (None, None, tuple(tuple(slot) for slot in slots.values()), [], whole.logits_and_loss, whole.head_saved,
            largest, own)


def _kinds_between(spec: ModelSpec, start: int, stop: int) -> list:
    """Each distinct layer kind of layers start..stop (layer_parts, MoE or not): its first layer and how many, in
    order of first layers (read off the model's runs of one kind, _layer_runs)."""
    kinds: dict[tuple, list[int]] = {}
    for lo, hi, kind in _layer_runs(spec):
        if hi <= start:
            continue
        if lo >= stop:
            break
        lo, hi = max(lo, start), min(hi, stop)
        entry = kinds.get(kind)
        if entry is None:
            kinds[kind] = [lo, hi - lo]
        else:
            entry[1] += hi - lo
    return list(kinds.values())


def _layer_runs(spec: ModelSpec) -> list[tuple[int, int, tuple]]:
    """The maximal runs of consecutive layers of one kind (layer_parts, MoE or not) as (first layer, end, kind), in
    layer order, once per model: each layer's parts read once whatever the stages asked for."""
    def make() -> list[tuple[int, int, tuple]]:
        runs: list[tuple[int, int, tuple]] = []
        for i in range(spec.n_layers):
            kind = (spec.layer_parts(i), spec.is_moe_layer(i))
            if runs and runs[-1][2] == kind:
                runs[-1] = (runs[-1][0], i + 1, kind)
            else:
                runs.append((i, i + 1, kind))
        return runs
    return _cached("acts", ("runs", _token(spec)), make)


def _stage_acts(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str, tp: int, sp: bool,
                start: int, stop: int, in_flight: int, head: bool) -> tuple:  # long: one loop per layer kind
    """_activations' parts: (per_layer's names and values in its order, recompute working set, logits and loss,
    largest layer, own layer, head saved). Each layer kind's terms once per (micro-batch, sequence, tp,
    recomputation) and model family, times the micro-batches in flight once per such count (_kind_terms), then
    summed by count; a stage of one layer kind whose names are distinct from the head's takes them as lists (the
    same floats as the dicts: each name's 0.0 + its bytes)."""
    token = _token(spec)
    family = _CACHES["family"].get(token, token)
    common = (family, batch, seq, act_bytes, recompute, tp, sp)

    # the final norm, LM head and loss: the same whatever the micro-batches in flight
    whole = _head_acts(spec, common, head)
    kinds = _cached("acts", ("kinds", token, start, stop), lambda: _kinds_between(spec, start, stop))
    if len(kinds) == 1:
        i, count = kinds[0]
        names, one, working_set, largest_layer, own_layer = _kind_terms(spec, i, common, in_flight)
        if whole.per_layer.keys().isdisjoint(names):  # each name's 0.0 + its bytes, as the dicts below add them
            values = [0.0 + value * count for value in one]
            values += [0.0 + value for value in whole.per_layer.values()]
            biggest, own = (largest_layer, own_layer) if largest_layer > 0.0 else (0.0, 0.0)
            return (names + tuple(whole.per_layer), values, max(0.0, working_set), whole.logits_and_loss, biggest,
                    own, whole.head_saved)
    per_layer: dict[str, float] = {}
    largest = biggest = own = 0.0  # as activation_memory: the first largest block (layer order) and its own
    for i, count in kinds:
        names, one, working_set, largest_layer, own_layer = _kind_terms(spec, i, common, in_flight)
        if per_layer:
            for name, value in zip(names, one, strict=True):
                per_layer[name] = per_layer.get(name, 0.0) + value * count
        else:  # the first kind: each name's 0.0 + its bytes, as the loop above adds them
            per_layer = {name: 0.0 + value * count for name, value in zip(names, one, strict=True)}
        largest = max(largest, working_set)
        if largest_layer > biggest:
            biggest, own = largest_layer, own_layer
    for name, value in whole.per_layer.items():
        per_layer[name] = per_layer.get(name, 0.0) + value
    return tuple(per_layer), list(per_layer.values()), largest, whole.logits_and_loss, biggest, own, whole.head_saved


def _kind_terms(spec: ModelSpec, i: int, common: tuple, in_flight: int) -> tuple:
    """activation_memory over layer i alone, `common` = (model family, micro-batch, sequence, activation bytes,
    recomputation, tp, sequence parallel): (its names, in order, once each; their bytes times the micro-batches in
    flight; the recompute working set; the largest layer; its own layer). The layer's terms once whatever the
    micro-batches in flight (a name that repeats adds up as activation_memory adds it); once per layer signature
    and model family (_layer_signature: layers that read the same per-layer fields of models that differ only in
    their layer count have the same terms)."""
    recompute, seq = common[4], common[2]
    signature = _signature(spec, _token(spec), i, seq)

    def make() -> tuple:
        terms, whole, kept = _layer_kept(spec, i, common, signature)
        one: dict[str, float] = {}
        for name, value in terms:
            one[name] = one.get(name, 0.0) + value * in_flight
        largest, own = (whole, kept) if whole > 0.0 else (0.0, 0.0)
        return tuple(one), list(one.values()), largest if recompute == "full" else 0.0, largest, own
    return _cached("acts", ("kind terms", *common, signature, in_flight), make)


def _layer_kept(spec: ModelSpec, i: int, common: tuple, signature: tuple) -> tuple:
    """activations.layer_terms of layer i (flash attention, no dropout; `common` as _kind_terms'), once per
    `common` and layer signature; the layer's saved tensors (layer_saved) once per model family, micro-batch,
    sequence and activation bytes: they are the same whatever the recomputation and tp (kept_terms), and their
    per-rank bytes once per tp and sequence parallelism besides: the same whatever the recomputation."""
    family, batch, seq, act_bytes, recompute, tp, sp = common

    def make() -> tuple:
        items = _cached("acts", ("saved", family, batch, seq, act_bytes, signature),
                        lambda: layer_saved(spec, i, batch, seq, act_bytes=act_bytes, attention="flash",
                                            dropout=False))
        ranks = _cached("acts", ("ranks", family, batch, seq, act_bytes, tp, sp, signature),
                        lambda: [s.per_rank(tp, sp) for s in items])  # the same for every recomputation
        return kept_terms(spec, items, batch * seq, act_bytes, recompute=recompute, tp=tp, sequence_parallel=sp,
                          ranks=ranks)
    return _cached("acts", ("terms", *common, signature), make)


def _head_acts(spec: ModelSpec, common: tuple, head: bool) -> ActivationEstimate:
    """activation_memory over no layer (the final norm, LM head and loss when `head`; `common` as _kind_terms'),
    once per model family, micro-batch, sequence, activation bytes and tp: without layers the recomputation
    changes nothing (no working set, no largest layer); without the head, nothing at all (its estimate: no bytes)."""
    if not head:
        return ActivationEstimate({}, 0.0, 0.0)
    family, batch, seq, act_bytes, recompute, tp, sp = common
    return _cached("acts", ("head", family, batch, seq, act_bytes, tp, sp),
                   lambda: activation_memory(spec, batch, seq, act_bytes, recompute, tp=tp, sequence_parallel=sp,
                                             layers=range(0), head=True))


def _layer_signature(spec: ModelSpec, i: int, seq: int) -> tuple:
    """Every per-layer field activations.layer_saved reads of layer i (mixers and FFN, routed experts, head width,
    K/V heads, K/V sharing, KV compression and its entries at `seq`, dense FFN width, norms): layers of one
    signature save the same tensors, float for float, in a model and in the same model cut or extended to another
    layer count (ModelSpec.with_layers changes nothing else that layer_saved reads)."""
    return (spec.layer_parts(i), spec.is_moe_layer(i), spec.layer_d_head(i), spec.layer_kv_heads(i), spec.kv_shared(i),
            spec.compression(i), spec.compressed_entries(i, seq), spec.layer_d_ff(i),
            spec.norms_in_layer(i) if spec.is_hybrid else 0)


def _describe(lay: Layout, rc: str | None = None) -> str:
    text = f"tp {lay.tp} cp {lay.cp} pp {lay.pp} dp {lay.dp}" + (f" vpp {lay.vpp}" if lay.vpp > 1 else "") + \
        (f" ep {lay.ep}" if lay.ep > 1 else "") + (f" etp {lay.expert_tp}" if lay.expert_tp != lay.tp else "")
    return text + f" mb {lay.micro_batch}" + (f" recompute {rc}" if rc else "") + (" ZeRO-3" if lay.zero == 3 else "")


def _why_they_lose(ranked: list, oom: list, capacity: float,
                   exact: Callable[[StepPrediction], StepPrediction] | None = None) -> list:
    """A few representative losers: for each kind of loss the layout that suffers it most, and what did
    not fit (the one closest to fitting, which would otherwise have been a candidate). `exact`: a ranked
    prediction as simulated (where the search kept a layout's pipeline at its lower bound), so that each loser shown
    has the figures `train` gives it; it is chosen by the figures ranked."""
    out: list[tuple[str, StepPrediction | None, str]] = []
    shown = exact or (lambda pred: pred)
    if ranked:
        best = ranked[0][0]
        for key, label in (("pp_bubble", "pipeline bubble"), ("tp_comm", "exposed TP communication"),
                           ("cp_comm", "exposed CP communication"), ("dp_comm", "exposed DP communication"),
                           ("pp_comm", "exposed PP send/recv")):
            worst = max(ranked[1:], key=lambda pm: pm[0].breakdown[key] / pm[0].step_seconds, default=None)
            if worst is None or worst[0].breakdown[key] <= best.breakdown[key] * 1.05 + 1e-9:
                continue
            p = shown(worst[0])
            if p.breakdown[key] <= best.breakdown[key] * 1.05 + 1e-9:
                continue
            out.append((f"{label}: {p.breakdown[key] / p.step_seconds * 100:.1f} % of its step (best: "
                        f"{best.breakdown[key] / best.step_seconds * 100:.1f} %)", p, _describe(p.layout, p.recompute)))
        slow = [pm for pm in ranked[1:] if pm[0].recompute != best.recompute]
        if slow:
            p = shown(slow[0][0])
            out.append((f"recompute {p.recompute} re-runs work (HFU {p.hfu * 100:.1f} % vs MFU {p.mfu * 100:.1f} %)",
                        p, _describe(p.layout, p.recompute)))
    if oom:
        lay, peak, rc = min(oom, key=lambda o: o[1])
        digits = 1 if f"{peak / GIB:.1f}" != f"{capacity / GIB:.1f}" else 3  # never "80.0 GiB > 80 GiB"
        out.append((f"does not fit: {peak / GIB:.{digits}f} GiB per GPU > {capacity / GIB:.{digits}f} GiB even "
                    f"with recompute {rc}"
                    f" ({len(oom)} such layouts)", None, _describe(lay)))
    return out


@dataclass(frozen=True)
class LayoutSearch:
    """What `layout` prints: the layouts that fit, ranked by predicted throughput, and the rest with why."""

    spec: ModelSpec
    gpu: str
    n_gpus: int
    seq_len: int
    global_batch: int
    ranked: list  # [(StepPrediction, peak bytes per GPU)], fastest first
    losers: list  # [(reason, StepPrediction or None, layout text)]
    counts: dict  # searched, fit, oom, invalid, bounded (search_layouts)
    recipe: str = "bf16-mixed"
    optimizer: str = "adamw"


def rank_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int | None = None,
                 global_batch_tokens: float | None = None, causal: bool = False, recompute: str | None = None,
                 tp_overlap: bool = False, progress: Callable[[int], Callable[[], None]] | None = None,
                 top: int = 10, exhaustive: bool = False, **step: Any) -> LayoutSearch:
    """`llmcalc layout`: search_layouts for the global batch given in sequences or tokens; no layout that fits
    is an error naming what to change. `step`: the recipe and STEP_DEFAULTS' settings, for every layout; `top`:
    how many layouts are listed, each of them exact (search_layouts; at least the ten best are, whose figures the
    losers' table compares); `exhaustive`: evaluate every layout (search_layouts)."""
    batch = global_batch_sequences(global_batch, global_batch_tokens, seq_len, required=True)
    assert batch is not None  # required: exactly one of the two was given
    if step.get("cp_comm") == "a2a+p2p":
        raise LlmcalcError("--cp-comm a2a+p2p needs its all-to-all size for one cp degree (train --cp-a2a-size); "
                           "layout tries many: use p2p, all-gather or a2a here")
    ranked, losers, counts = search_layouts(spec, gpu, n_gpus, seq_len, global_batch=batch, causal=causal,
                                            recompute=recompute, tp_overlap=tp_overlap, progress=progress,
                                            top=max(top, 10), exhaustive=exhaustive,
                                            **{k: v for k, v in step.items() if v is not None})
    if not ranked:
        raise LlmcalcError(f"no layout of {spec.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{batch} (of the layouts tried, {counts['oom']:,} do not fit in memory and "
                           f"{counts['invalid']:,} contradict the model): use more GPUs or a larger --global-batch")
    return LayoutSearch(spec=spec, gpu=gpu, n_gpus=n_gpus, seq_len=seq_len, global_batch=batch, ranked=ranked,
                        losers=losers, counts=counts, recipe=step.get("recipe") or "bf16-mixed",
                        optimizer=step.get("optimizer") or "adamw")

