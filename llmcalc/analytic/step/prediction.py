"""The prediction that composes the terms: StepPrediction, predict (prepare the stages, DP and optimizer, then the
pipeline), and what each prediction assumed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ...errors import LlmcalcError
from ...records import dataclass
from ...spec import ModelSpec
from .. import comm, kernels, pipeline_layout
from ..activations import ATTENTION_IMPLS
from ..flops import RECOMPUTE, StepFlops, forward_ops, step_flops, utilization
from ..kernels import Device
from ..memory import RECIPES, Recipe, lookup
from ..pipeline import chunks_per_rank, path_bounds, simulate_pair, stage_of
from . import constants
from .cache import current, per_call
from .collectives import p2p_seconds
from .constants import EP_OVERLAP_SMS
from .context import StageTimes, StepContext, _context
from .dp import dp_and_optimizer
from .layout import Layout, describe_split
from .stages import _stage_cost, stage_passes, stage_plan

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
    f"KERNEL_EFFICIENCY = {constants.KERNEL_EFFICIENCY}": "fitted once to every validation row "
                                                          "(benchmarks/bench_steptime.py, leave-one-source-out errors "
                                                          "there)",
    f"NCCL_BUS_EFFICIENCY = {comm.NCCL_BUS_EFFICIENCY}": "nccl-tests ring busbw 76-82 % of NVLink (A100-B200)",
    f"NCCL_NET_EFFICIENCY = {comm.NCCL_NET_EFFICIENCY}": "nccl-tests across nodes: 85-96 GB/s of 100 GB/s",
    "NVLS all-reduce": "nccl-tests NVLink SHARP: 480 of 450 GB/s on H200, 838 of 900 on B200",
    "collective latency": "alpha per ring step fitted to nccl-tests curves: 5 us NVLink, 7 us across nodes",
}


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


@per_call
def predict(spec: ModelSpec, device: Device, layout: Layout, seq_len: int, causal: bool = False,
            recompute: str = "none", recipe: str = "bf16-mixed", attention: str = "flash",
            dropout: bool = False, simulated: bool = True) -> StepPrediction:
    """Predicted step time of `layout` (see the module docstring for the model and its overlap rule). `causal`
    changes how the FLOPs (model and hardware) are counted, never the time: the kernel runs what it runs.

    attention: "flash" (fused, no S² matrix) or "eager" (materialised scores, `eager_attention_seconds`);
    dropout: attention dropout on the probabilities (eager only; flash fuses it); `simulated` False: the pipeline's
    lower bound (``pipeline.path_bounds``, exact where its timeline has a closed form) instead of its simulation,
    what a layout search keeps for the layouts that cannot win."""
    return _finish(_prepare(spec, device, layout, seq_len, causal, recompute=recompute, recipe=recipe,
                            attention=attention, dropout=dropout), simulated=simulated)


@dataclass
class Prepared:
    """Everything of one prediction but the pipeline's makespan: the stages, their lower-bound makespan, DP,
    optimizer and FLOPs (what a layout search computes for every layout before it simulates the few that can win)."""

    ctx: StepContext
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
    groups: list = field(default_factory=list)  # the ranks of distinct chunks: (first rank, its stages) (stage_plan)

    @property
    def step_bound(self) -> float:
        return self.bound + self.dp + self.optimizer


def _prepare(spec: ModelSpec, device: Device, layout: Layout, seq_len: int, causal: bool, recompute: str,
             recipe: str, attention: str, dropout: bool) -> Prepared:
    if attention not in ATTENTION_IMPLS:
        raise LlmcalcError(f"unknown attention {attention!r}; use one of {', '.join(ATTENTION_IMPLS)}")
    rec = lookup(RECIPES, "recipe", recipe)
    lay = layout
    _check_recompute(spec, lay, recompute, rec, device)
    ctx = _context(spec, device, lay, seq_len, rec, attention=attention, dropout=dropout)
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    plan = stage_plan(spec, n_stages, lay, recompute)
    split, starts = plan.split, plan.starts
    distinct = [_stage_cost(ctx, composition, recompute) for composition in plan.compositions]
    stages = [distinct[j] for j in plan.ids]
    fwd, bwd, wgt = stage_passes(distinct, plan.ids, lay.schedule)
    p2p = p2p_seconds(ctx) if lay.pp > 1 else 0.0
    rank_groups, lasts = plan.groups(lay.schedule, lay.pp)
    bound, exact, plain = path_bounds(lay.schedule, lay.pp, lay.grad_accum, fwd, bwd, w=wgt, vpp=lay.vpp, p2p_time=p2p,
                                      ranks=lasts)
    dp, opt = dp_and_optimizer(ctx, stages, split, starts, v, groups=rank_groups)
    return Prepared(ctx, causal, recompute, stages, split, fwd=fwd, bwd=bwd, wgt=wgt, p2p=p2p, bound=bound,
                     exact=exact, dp=dp, optimizer=opt, plain_bound=plain, groups=rank_groups)


def _finish(prep: Prepared, simulated: bool = True) -> StepPrediction:
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
             + describe_split(prep.split)]
    if ctx.attention == "eager":
        notes.append("attention core with the B·H·S² scores materialised (batched GEMMs + softmax"
                     + (" + dropout" if ctx.dropout else "") + "), as before FlashAttention")
    assumptions, assumed = _assumptions_of(ctx, recompute)
    if lay.pp > 1:  # the last item (step_assumptions has no "pipeline"): the joined text gains it at its end
        assumptions["pipeline"] = how
        assumed += f"; pipeline {how}"
    notes.append(assumed)
    return StepPrediction(spec, ctx.dev, lay, ctx.seq, causal=prep.causal, recompute=recompute, step_seconds=step,
                          breakdown=breakdown, model_flops=model_flops,
                          hardware_flops=hardware_flops, layers_per_stage=prep.split, notes=notes,
                          attention=ctx.attention, recipe=ctx.recipe.name, assumptions=assumptions)


LOWER_BOUND = "lower bound (not simulated: this layout cannot win)"  # a search's pipeline it did not simulate


def pipeline_step(prep: Prepared, simulated: bool = True) -> tuple[float, dict[str, float], str]:
    """(step seconds, breakdown, how the pipeline was timed) of a prepared layout: the pipeline simulated (or its
    exact closed form; its lower bound where `simulated` is False), plus exposed DP and the optimizer; the
    breakdown is the pacing rank's (the first of the busiest)."""
    lay = prep.ctx.lay
    v = chunks_per_rank(lay.schedule, lay.vpp)
    m = lay.grad_accum
    if prep.exact or not simulated:
        makespan, plain_makespan = prep.bound, prep.plain_bound
        how = "closed form (exact)" if prep.exact else LOWER_BOUND
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


def _step_flops(spec: ModelSpec, batch: int, seq: int, causal: bool, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step (``flops.step_flops``), once per model, batch and recomputation in
    the call's tables (a search finishes many layouts of one global batch)."""
    table = current().of(spec, "step flops")
    found = table.get((batch, seq, causal, recompute))
    if found is None:
        if recompute not in RECOMPUTE:
            step_flops(spec, batch, seq, causal, recompute)  # its error
        # step_flops' StepFlops, its forward ops (which read no recomputation) once for every recomputation
        ops = table.get((batch, seq, causal))
        if ops is None:
            ops = table[batch, seq, causal] = forward_ops(spec, batch, seq, causal)
        flops = StepFlops(spec=spec, batch=batch, seq_len=seq, causal=causal, recompute=recompute, ops=ops)
        found = table[batch, seq, causal, recompute] = (float(flops.model_flops), float(flops.hardware_flops))
    return found


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
    if lay.attention_kernel == "fa3" and dev.arch in ("ampere", "ada", "cdna3", "cdna4"):
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


def _assumptions_of(ctx: StepContext, recompute: str) -> tuple[dict[str, Any], str]:
    """(step_assumptions, its note "assumed: k v; ...")."""
    out = step_assumptions(ctx, recompute)
    return out, "assumed: " + "; ".join(f"{k} {v}" for k, v in out.items())


def step_assumptions(ctx: StepContext, recompute: str) -> dict[str, Any]:
    """What this prediction assumed, for its notes and JSON ``assumptions``."""
    lay, dev, rec = ctx.lay, ctx.dev, ctx.recipe
    kernel = kernels.DEFAULT_KERNEL[dev.arch] if lay.attention_kernel == "auto" else lay.attention_kernel
    out: dict[str, Any] = {
        "kernel_efficiency": constants.KERNEL_EFFICIENCY,
        "gemm_dtype": rec.gemm_dtype,
        "gemm_tflops_ceiling": round(ctx.gemm_rate / 1e12, 1),
        "attention_kernel": kernel if ctx.attention == "flash" else "eager (materialised scores)",
        "attention_dtype": "fp8" if lay.fp8_attention else "bf16",
        "hbm_gb_per_s": round(dev.hbm / 1e9),
        "rank_order": lay.order,
        "elementwise": "fused" if lay.fused_elementwise else "eager (unfused: twice the passes)",
        "tp_overlap": "userbuffers: split GEMMs, SMs held, last chunk exposed" if lay.tp_overlap else "exposed",
        "dp_overlap": "reduce-scatter under the last backward, all-gather under the first forward; last bucket "
                      "exposed" if lay.dp_overlap else "exposed after the backward",
        "optimizer": lay.optimizer,
    }
    if dev.network.fabric:
        out["network"] = dev.network.fabric
    if lay.fp8_param_gather:
        out["param_gather_bytes_per_parameter"] = 1.0
    if lay.dp_shard:
        out["hsdp"] = (f"sharded over {lay.dp_shard * lay.cp} ranks (dp shard {lay.dp_shard} x cp {lay.cp}), "
                       f"gradients all-reduced across {lay.dp // lay.dp_shard} replicas")
    if lay.first_stage_layers or lay.last_stage_layers:
        out["stage_layers"] = {"first": lay.first_stage_layers or None, "last": lay.last_stage_layers or None}
    if lay.pipeline_layout:
        out["pipeline_layout"] = (f"{lay.pipeline_layout} (Megatron-Core PipelineParallelLayerLayout: "
                                  f"{pipeline_layout.parse(lay.pipeline_layout, lay.pp).describe()})")
    if rec.fp8:
        out["quantization_bytes_per_element"] = kernels.QUANT_BYTES[rec.fp8]
    if lay.cp > 1:
        out["cp_comm"] = {"p2p": "ring, each send under a block; outputs merged after it, gradients summed per step",
                          "all-gather": "K/V all-gathered, exposed",
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
