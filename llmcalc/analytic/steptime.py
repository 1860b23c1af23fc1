"""Step time and MFU predicted from the parallel layout: TP x CP x PP x DP (x EP), per GPU.

The model, one micro-batch on one pipeline stage at a time, then the pipeline, then the step:

1. Compute. Every matmul of a layer (llmcalc.analytic.flops, split over tp and cp) runs on a roofline:
   time = max(FLOPs / (MAMF x q(m, n)), bytes / (HBM x HBM_EFFICIENCY)). MAMF is the accelerator's
   measured maximum achievable matmul FLOP/s (preset "matmul" block, S. Bekman's mamf-finder table);
   q is the tile and wave quantization efficiency of NVIDIA's "Matrix Multiplication Background
   User's Guide" (GEMM output in 256x128 or 128x128 tiles, one tile per SM per wave; the better of
   the two tilings is taken, as cuBLAS's heuristics pick). Small matmuls after TP splitting lose to
   both terms. Attention's S² core runs at ATTENTION_EFFICIENCY x MAMF (FlashAttention-2's fwd+bwd
   rate relative to the GEMM ceiling); its backward does 2.5 x the forward's matmul work (it
   recomputes QKᵀ); with attention="eager" (materialised S² scores, Megatron-LM before FlashAttention) the
   core is strided batched GEMMs on the roofline plus softmax/dropout passes over the S² matrix
   (`eager_attention_seconds`). Norms, residual adds, the MLP activation and rotary embeddings are memory-bound:
   their bytes (read + write, backward twice the forward) over the achievable HBM bandwidth.
   Backward matmuls = 2 x forward (input and weight gradients, same shapes); full recomputation
   re-runs each block's forward, selective the attention core.
2. Communication (llmcalc.analytic.comm: nccl-tests bus factors, alpha-beta, NVLink inside a node,
   the scale-out network across nodes; ranks ordered TP, CP, PP, DP from the inside out as Llama 3
   does; routed experts fold their [etp, ep, expert dp] mesh over the tp x dp ranks, Megatron-Core's MoE
   parallel folding, and move tokens as its alltoall dispatcher does, see `Layout.alltoall`). Overlap rule:
   - TP (all-reduce, or all-gather + reduce-scatter with sequence parallelism) and EP all-to-alls
     sit on the critical path: fully exposed; with tp_overlap (sequence parallelism only) each pass's
     TP collectives run under that pass's projection GEMMs, exposed = max(0, comm - GEMMs);
   - CP K/V exchange overlaps with the layer's attention core: exposed = max(0, comm - attention);
   - PP sends delay the dependent action on the next rank (in the pipeline simulation);
   - DP gradient reduction overlaps with the backward of the last micro-batch, the weight all-gather
     with the forward of the first (bucketed, as Megatron-LM's --overlap-grad-reduce and FSDP do):
     exposed = max(0, comm - that compute); ZeRO-3 per micro-batch against that micro-batch's compute.
3. Pipeline: llmcalc.analytic.pipeline simulates every rank's action list with the stage times above;
   layers are split over pp·vpp stages as evenly as possible, taking any shortfall from the first and
   last stages (which also hold the embedding and the LM head), as Llama 3 did.
4. Optimizer step: memory-bound AdamW over this GPU's shard of the parameters.

Step time = pipeline makespan + exposed DP + optimizer. MFU = model FLOPs / (step x GPUs x peak)
(PaLM App. B); HFU counts recomputation. Global constants (no per-row fitting) are listed in
GLOBAL_CONSTANTS with their sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..spec import ModelSpec
from ..units import GIB, plural
from ..validate import DEFAULT_ZERO
from . import comm
from .activations import ATTENTION_IMPLS
from .flops import _attention, _ffn, _moe, step_flops, utilization
from .memory import RECIPES, lookup, routed_expert_params
from .parallel import Parallel, check_degrees, check_experts, check_heads, check_stages, check_zero
from .pipeline import SCHEDULES, chunks_per_rank, simulate, stage_of

# Fraction of the HBM bandwidth a streaming kernel reaches (BabelStream/nvbandwidth on A100 and H100
# reach ~90 % of the datasheet figure).
HBM_EFFICIENCY = 0.9
# FlashAttention-2 fwd+bwd reaches 225 TFLOP/s on A100 (Dao 2023, sec. 4.1, "up to 72 % of peak") against
# the A100's 271 TFLOP/s MAMF: the attention core runs at 225/271 of the GEMM ceiling.
ATTENTION_EFFICIENCY = 225.0 / 271.2
TILES = ((256, 128), (128, 128))
# Projections that read the same input run as one GEMM with their output columns concatenated, as
# Megatron-LM builds them: one ColumnParallelLinear "query_key_value" (3h, or h + 2·kv for GQA) and one
# "linear_fc1" holding gate and up for gated MLPs (megatron/model/transformer.py, megatron/core
# transformer/mlp.py). Split into three GEMMs, a GQA model's K and V projections after TP splitting are a
# few hundred columns wide and would fill a fraction of one wave.
FUSED_GEMMS = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "fc1", "up_proj": "fc1"}
# The one constant fitted to measurements: the fraction of the isolated-kernel rates (MAMF, FlashAttention,
# streaming HBM) that kernels keep inside a real training step (launch gaps, synchronisation, clocks under
# sustained load). Fitted once, globally, to the 13 rows of benchmarks/bench_steptime.py (Narayanan et al.
# 2021 Table 1 and Llama 3 Table 4); the benchmark also reports leave-one-out errors.
KERNEL_EFFICIENCY = 0.77

GLOBAL_CONSTANTS = {
    "MAMF (per accelerator preset)": "measured max achievable bf16 matmul FLOP/s, S. Bekman ml-engineering table",
    "tile/wave quantization": "NVIDIA Deep Learning Performance Guide, Matrix Multiplication Background: "
                              "256x128 / 128x128 tiles, one per SM per wave",
    "HBM_EFFICIENCY = 0.9": "BabelStream/nvbandwidth: ~90 % of datasheet HBM bandwidth",
    "ATTENTION_EFFICIENCY = 0.83": "FlashAttention-2 fwd+bwd 225 TFLOP/s on A100 (Dao 2023) / A100 MAMF 271.2",
    f"KERNEL_EFFICIENCY = {KERNEL_EFFICIENCY}": "fitted once to all 13 benchmark rows (one global number, as the "
                                                "constant-MFU baseline it is compared with); leave-one-out errors in "
                                                "benchmarks/bench_steptime.py",
    f"NCCL_BUS_EFFICIENCY = {comm.NCCL_BUS_EFFICIENCY}": "nccl-tests all_reduce busbw ~230-240 GB/s of 300 GB/s "
                                                         "NVLink on DGX A100",
    f"NCCL_NET_EFFICIENCY = {comm.NCCL_NET_EFFICIENCY}": "nccl-tests all_reduce across A100 nodes: 85-96 GB/s busbw of "
                                                         "100 GB/s (4 HDR NICs) in reported runs",
    "network tier (per accelerator preset)": "GPUs per node, NVLink and per-GPU NIC bandwidth, latency per step; a "
                                             "ring collective with g ranks per node crosses nodes on g NICs (NCCL "
                                             "rings, one NIC per channel)",
    "fused GEMMs": "QKV and gate+up (fc1) as one GEMM each, as Megatron-LM builds them",
    "attention \"eager\"": "materialised S² scores: batched GEMMs + fused softmax (+ dropout), Megatron-LM before "
                          "FlashAttention (Narayanan et al. 2021 sec. 4.2)",
}


@dataclass(frozen=True)
class Layout(Parallel):
    """A parallel layout (the degrees, ZeRO, sequence parallelism: ``parallel.Parallel``) with what one training
    step of it runs: micro-batch and global batch, the pipeline schedule and the overlaps."""

    micro_batch: int = 1
    global_batch: int = 1  # sequences per step
    schedule: str = "1f1b"
    dp_overlap: bool = True  # False: gradients reduced after the backward (Megatron-LM 2021)
    tp_overlap: bool = False  # True: TP collectives hidden behind the GEMMs next to them (see _tp_exposed)

    @property
    def grad_accum(self) -> int:
        """Micro-batches each pipeline runs per step (= gradient-accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "ep": self.ep,
                "etp": self.expert_tp,
                "micro_batch": self.micro_batch, "global_batch": self.global_batch, "grad_accum": self.grad_accum}


class _Candidate(NamedTuple):
    """One layout `search_layouts` tries: parallel degrees and the micro-batch."""

    tp: int
    cp: int
    pp: int
    vpp: int
    micro_batch: int
    ep: int = 1
    etp: int = 0


def _expert_degrees(spec: ModelSpec, tp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) tried for an MoE model (etp 0 = tp): with etp = tp, ep 1 and the two largest powers of two
    (up to 64) dividing the experts and dp (EP carved out of data parallelism); with tp > 1 also etp 1, each
    expert whole on its GPU, ep the two largest powers of two dividing the experts and tp x dp
    (Megatron-Core's MoE parallel folding)."""
    if not spec.is_moe:
        return [(1, 0)]
    powers = (2, 4, 8, 16, 32, 64)
    fits = [e for e in powers if spec.n_experts % e == 0 and dp % e == 0]
    out = [(1, 0)] + [(e, 0) for e in fits[-2:]]
    if tp > 1:
        folded = [e for e in powers if spec.n_experts % e == 0 and tp * dp % e == 0]
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
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if n_gpus % (tp * cp * pp):
                    continue
                dp = n_gpus // (tp * cp * pp)
                for mb in (1, 2, 4):
                    if global_batch % (dp * mb):
                        continue
                    m = global_batch // (dp * mb)
                    vpps = [1] + ([2, 4] if pp > 1 and m % pp == 0 else [])
                    candidates += [_Candidate(tp, cp, pp, v, mb, ep=ep, etp=etp) for v in vpps
                                   if pp * v <= spec.n_layers for ep, etp in _expert_degrees(spec, tp, dp)]
    return candidates


def check_modelled(spec: ModelSpec) -> None:
    """The step-time model times attention + MLP/MoE decoder layers (its GEMM shapes, TP/CP/EP
    collectives and memory-bound terms are theirs); refuse the rest in one line rather than time a
    Mamba or DeltaNet mixer as if it were attention."""
    if spec.is_hybrid:
        raise LlmcalcError(f"the step-time model (layout, train --global-batch) covers attention + MLP/MoE decoder "
                           f"layers; {spec.name} has per-layer mixers ({spec.layer_mix()}). Give its time with "
                           f"`llmcalc train {spec.name} --mfu ...` (FLOPs and memory are exact for it)")
    if spec.architecture != "decoder":
        raise LlmcalcError(f"the step-time model (layout, train --global-batch) covers decoder-only models; "
                           f"{spec.name} is {spec.architecture}. Give its time with `llmcalc train --mfu ...`")


def make_layout(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, tp: int = 1, cp: int = 1, pp: int = 1,
                vpp: int = 1, ep: int = 1, micro_batch: int = 1, schedule: str | None = None, zero: int = DEFAULT_ZERO,
                sequence_parallel: bool = True, dp_overlap: bool = True, tp_overlap: bool = False,
                etp: int | None = None) -> Layout:
    """A checked layout: dp = n_gpus / (tp·cp·pp); every contradiction is one clear LlmcalcError (the shared
    checks of ``parallel``; the step model splits layers unevenly over the stages, as Llama 3 did)."""
    check_modelled(spec)
    check_degrees(**{"--vpp": vpp, "--ep": ep, "--micro-batch": micro_batch, "--global-batch": global_batch,
                     **({"--etp": etp} if etp is not None else {})})
    schedule = schedule or ("interleaved" if vpp > 1 else "1f1b")
    if schedule not in SCHEDULES:
        raise LlmcalcError(f"unknown --schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if vpp > 1 and schedule != "interleaved":
        raise LlmcalcError(f"--vpp {vpp} needs --schedule interleaved (got {schedule})")
    lay = Layout.over(n_gpus, tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp or 0, zero=zero,
                      sequence_parallel=sequence_parallel, micro_batch=micro_batch, global_batch=global_batch,
                      schedule=schedule, dp_overlap=dp_overlap, tp_overlap=tp_overlap)
    check_heads(spec, tp)
    if seq_len % cp:
        raise LlmcalcError(f"--cp {cp} does not divide --seq-len {seq_len}")
    if global_batch % (lay.dp * micro_batch):
        raise LlmcalcError(f"--global-batch {global_batch} is not a multiple of dp x micro-batch = {lay.dp} x "
                           f"{micro_batch} = {lay.dp * micro_batch} sequences")
    check_stages(spec, pp, chunks_per_rank(schedule, vpp))
    if ep > 1 or etp is not None:
        check_experts(spec, ep, lay.expert_tp, tp * lay.dp)
    check_zero(zero)
    if tp_overlap and not sequence_parallel:
        raise LlmcalcError("--tp-overlap splits the all-gather / reduce-scatter of sequence parallelism around the "
                           "GEMMs; it needs --sequence-parallel (drop --no-sequence-parallel)")
    return lay


def split_layers(n_layers: int, n_stages: int) -> list[int]:
    """Layers per pipeline stage: ceil(L/S) everywhere, the shortfall taken one layer at a time from the
    first and last stages inward (Llama 3: 126 layers on 16 x 4 stages -> 1, 2, ..., 2, 1)."""
    per = math.ceil(n_layers / n_stages)
    counts = [per] * n_stages
    short = per * n_stages - n_layers
    order = [i for pair in zip(range(n_stages), reversed(range(n_stages)), strict=True) for i in pair]
    seen = []
    for i in order:
        if i not in seen:
            seen.append(i)
    k = 0
    while short:
        counts[seen[k % n_stages]] -= 1
        short -= 1
        k += 1
    return counts


# --- compute ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """What the step model needs of an accelerator: peak, matmul ceiling, SMs, HBM, network."""

    accelerator: Accelerator
    dtype: str
    mamf: float  # FLOP/s
    sm_count: int
    network: comm.Network

    @property
    def peak(self) -> float:
        return self.accelerator.peak(self.dtype)

    @property
    def hbm(self) -> float:
        return self.accelerator.memory_bandwidth * HBM_EFFICIENCY * KERNEL_EFFICIENCY


def device_for(key: str, dtype: str = "bf16") -> Device:
    """The accelerator preset plus its "matmul" and "network" blocks; one clear error when absent."""
    from ..spec import hardware_config, load_hardware

    acc = load_hardware(key)
    data = hardware_config(key)
    net = comm.network_from_preset(key, data)
    mm = data.get("matmul")
    if net is None or mm is None:
        raise LlmcalcError(f"{key} has no network/matmul block for the step-time model (presets with one: "
                           f"{', '.join(steptime_presets())}); pass --mfu or --achieved-tflops instead")
    mamf = float(mm["mamf_bf16_tflops"]) * 1e12 * acc.peak(dtype) / acc.peak("bf16")
    return Device(acc, dtype, mamf, int(mm["sm_count"]), net)


def steptime_presets() -> list[str]:
    from ..spec import hardware_config, hardware_names

    return [k for k in hardware_names() if "network" in hardware_config(k)]


def tile_wave_efficiency(m: float, n: float, sms: int, batch: float = 1) -> float:
    """Useful fraction of the GEMM work after tile and wave quantization (NVIDIA Matrix Multiplication
    Background guide): output tiles rounded up, tiles run in waves of one per SM; a strided batched GEMM
    of `batch` matrices runs all their tiles in the same waves."""
    best = 0.0
    for tm, tn in TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(tiles / sms)
        best = max(best, (batch * m * n) / (tiles * tm * tn) * tiles / (waves * sms))
    return best


def gemm_seconds(m: float, k: float, n: float, dev: Device, act_bytes: float, batch: float = 1) -> float:
    """`batch` (m x k) @ (k x n) matmuls (one strided batched GEMM) on the roofline with the quantization
    curve: the longer of FLOPs at the matmul ceiling and operand + result bytes at the HBM bandwidth."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    flops = 2 * m * k * n * batch
    compute = flops / (dev.mamf * KERNEL_EFFICIENCY * tile_wave_efficiency(m, n, dev.sm_count, batch))
    memory = batch * act_bytes * (m * k + k * n + m * n) / dev.hbm
    return max(compute, memory)


def eager_attention_seconds(spec: ModelSpec, lay: Layout, seq_len: int, dev: Device, act_bytes: float,
                            dropout: bool) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's attention core when the B·H·S² scores are materialised,
    as Megatron-LM did before FlashAttention (Narayanan et al. 2021 sec. 4.2: strided batched GEMMs for QKᵀ
    and PV, one fused scale-mask-softmax kernel; attention dropout on the probabilities, Megatron-LM's
    default --attention-dropout 0.1). Per head on this GPU (H/tp heads, S/cp queries against S keys):
    forward QKᵀ (S/cp x dh x S) and PV (S/cp x S x dv); backward dP = dO Vᵀ, dV = Pᵀ dO, dS K, dSᵀ Q
    (twice the forward's matmuls), each a batched GEMM on the roofline; with small dh these are bound by
    writing/reading the S² matrix, not by FLOPs. Elementwise passes over the S² matrix (act_bytes each per
    element, read or write): softmax read + write (2), its backward reads P and dP and writes dS (3);
    dropout reads, writes and stores a 1-byte mask (2 + mask), its backward the same."""
    heads = lay.micro_batch * spec.n_heads / lay.tp
    q, kv = seq_len / lay.cp, seq_len
    dqk = spec.mla.qk_head_dim if spec.mla is not None else spec.d_head
    dv = spec.mla.v_head_dim if spec.mla is not None else spec.d_head
    mm_fwd = gemm_seconds(q, dqk, kv, dev, act_bytes, batch=heads) + gemm_seconds(q, kv, dv, dev, act_bytes,
                                                                                 batch=heads)
    elements = heads * q * kv
    drop = (2 * act_bytes + 1) if dropout else 0.0
    fwd = mm_fwd + elements * (2 * act_bytes + drop) / dev.hbm
    bwd = 2 * mm_fwd + elements * (3 * act_bytes + drop) / dev.hbm
    return fwd, bwd


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

    @property
    def compute(self) -> float:
        return self.fwd + self.bwd_input + self.bwd_weight

    @property
    def total(self) -> float:
        return self.compute + self.tp + self.cp + self.ep


def _layer_times(spec: ModelSpec, layer: int, lay: Layout, seq_len: int, causal: bool, recompute: str,
                 dev: Device, act_bytes: float, attention: str = "flash",
                 dropout: bool = False) -> StageTimes:  # long: one layer's terms, one per source line
    b, s, tp, cp = lay.micro_batch, seq_len, lay.tp, lay.cp
    tokens = b * s / cp  # tokens this GPU processes in the layer
    D = spec.d_model
    ops = _attention(spec, "attention", b, s, s, causal=causal)
    moe = spec.is_moe_layer(layer)
    ops.update(_moe(spec, b * s, "moe") if moe else _ffn(spec, b * s, spec.d_ff, "mlp"))
    fwd = attn_core = 0.0
    fused: dict[str, float] = {}  # fused group -> output columns on this GPU
    for name, flops in ops.items():
        part = name.split("/")[1]
        f_gpu = flops / (tp * cp)
        if part in ("scores", "values"):
            if attention == "flash":
                attn_core += f_gpu / (dev.mamf * KERNEL_EFFICIENCY * ATTENTION_EFFICIENCY)
            continue
        if part == "router":  # on the gathered tokens (TP like a dense MLP) or this rank's 1/tp (all-to-all)
            seconds = gemm_seconds(tokens / tp if lay.alltoall else tokens, D, spec.n_experts, dev, act_bytes)
        elif part == "experts":  # balanced routing: each local expert gets tokens·etp/tp·top_k·ep/E tokens
            etp = lay.expert_tp
            m_e = tokens * etp / tp * spec.n_experts_per_token * lay.ep / spec.n_experts
            seconds = spec.n_experts / lay.ep * _mlp_seconds(spec, m_e, spec.d_ff_expert / etp, dev, act_bytes)
        elif part == "shared_experts":
            seconds = spec.n_shared_experts * _mlp_seconds(spec, tokens, spec.d_ff_expert / tp, dev, act_bytes)
        elif part in FUSED_GEMMS:  # column-parallel on the layer input: one GEMM per fused group
            fused[FUSED_GEMMS[part]] = fused.get(FUSED_GEMMS[part], 0.0) + flops / (2 * b * s * D) / tp
            continue
        else:
            full_k = D
            k: float
            n: float
            if part in ("o_proj", "down_proj"):  # row-parallel: the input dimension is split
                k = flops / (2 * b * s * D) / tp
                n = D
            else:  # column-parallel: the output dimension is split
                if part == "q_b_proj" and spec.mla is not None:
                    full_k = spec.mla.q_lora_rank
                elif part == "kv_b_proj" and spec.mla is not None:
                    full_k = spec.mla.kv_lora_rank
                k = full_k
                n = flops / (2 * b * s * full_k) / tp
            seconds = gemm_seconds(tokens, k, n, dev, act_bytes)
        fwd += seconds
    fwd += sum(gemm_seconds(tokens, D, n, dev, act_bytes) for n in fused.values())
    # memory-bound elementwise work, bytes per token (read + write), forward; backward twice that
    sp_div = tp if lay.sequence_parallel else 1
    width = spec.d_ff_expert * spec.n_experts_per_token if moe else spec.d_ff
    d_terms = (spec.norms_per_layer * 2 + 2 * 3) * D / sp_div
    f_terms = (3 if spec.gated else 2) * width / tp
    rope = 2 * (spec.n_heads + spec.n_kv_heads) * spec.d_head / tp if spec.pos_emb == "rope" else 0
    elem = b * s / cp * (d_terms + f_terms + rope) * act_bytes / dev.hbm
    if attention == "flash":  # flash backward recomputes QKᵀ: 2.5 x the forward's matmul work
        attn_bwd = 2.5 * attn_core
    else:
        attn_core, attn_bwd = eager_attention_seconds(spec, lay, seq_len, dev, act_bytes, dropout=dropout)
    t = StageTimes()
    t.fwd = fwd + attn_core + elem
    t.bwd_weight = fwd  # weight-gradient matmuls: one forward's worth
    t.bwd_input = fwd + attn_bwd + 2 * elem  # input gradients
    if recompute == "full":
        t.bwd_input += t.fwd
    elif recompute == "selective":
        t.bwd_input += attn_core
    passes = 3 if recompute == "full" else 2
    net = dev.network
    if tp > 1:
        colls = comm.tp_collectives(tokens, D, act_bytes, tp, sequence_parallel=lay.sequence_parallel, passes=passes)
        if moe and lay.alltoall and not spec.n_shared_experts:  # only attention's half stays on the tp group
            colls = [replace(c, count=c.count / 2) for c in colls]
        t.tp = comm.total_seconds(colls, net)
        if lay.tp_overlap:
            per_pass = t.tp / passes
            t.tp = _tp_exposed(per_pass, fwd, passes - 1) + _tp_exposed(per_pass, 2 * fwd, 1)
            t.comm_fwd += _tp_exposed(per_pass, fwd, 1)
        else:
            t.comm_fwd += t.tp / passes
    if cp > 1:
        kv_width = (spec.n_kv_heads * spec.d_head) / min(tp, spec.n_kv_heads) if spec.mla is None else \
            (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim)
        fwd_c, bwd_c = comm.cp_collectives(tokens, kv_width, act_bytes, cp, tp)
        t.cp = max(0.0, fwd_c.seconds(net) - attn_core) + max(0.0, bwd_c.seconds(net) - attn_bwd)
        t.comm_fwd += max(0.0, fwd_c.seconds(net) - attn_core)
    if moe and lay.alltoall:
        t.ep = comm.total_seconds(comm.ep_collectives(tokens / tp, spec.n_experts_per_token, D, act_bytes, ep=lay.ep,
                                                      stride=lay.fold_stride(lay.expert_tp), passes=passes,
                                                      etp=lay.expert_tp), net)
        t.comm_fwd += t.ep / passes
    return t


def _tp_exposed(comm_per_pass: float, gemm_per_pass: float, passes: int) -> float:
    """Exposed TP time of `passes` passes when each pass's all-gathers and reduce-scatters run under its own
    projection GEMMs (TransformerEngine's userbuffer overlap, Megatron-LM --tp-comm-overlap; torchtitan's async
    TP): the GEMMs are split into tp chunks and each chunk's exchange hides behind the previous chunk's matmul,
    so only the excess of communication over matmul stays on the critical path. The forward pass has the
    forward GEMMs, the backward twice that (input and weight gradients). The SMs and copy engines the overlap
    borrows are not charged (TE's ring-exchange mode moves data with copy engines)."""
    return passes * max(0.0, comm_per_pass - gemm_per_pass)


def _mlp_seconds(spec: ModelSpec, tokens: float, width: float, dev: Device, act_bytes: float) -> float:
    """One (expert) MLP of `width` columns on this GPU: the fused gate+up (or fc1) GEMM, then down."""
    up = (2 if spec.gated else 1) * width
    return gemm_seconds(tokens, spec.d_model, up, dev, act_bytes) + gemm_seconds(tokens, width, spec.d_model, dev,
                                                                                  act_bytes)


def _head_times(spec: ModelSpec, lay: Layout, seq_len: int, dev: Device, act_bytes: float) -> StageTimes:
    """LM head matmul (vocab split over tp) and the softmax/cross-entropy over the logits."""
    tokens = lay.micro_batch * seq_len / lay.cp
    mm = gemm_seconds(tokens, spec.d_model, spec.vocab_size / lay.tp, dev, act_bytes)
    loss = tokens * spec.vocab_size / lay.tp * 4 * 3 / dev.hbm  # fp32 logits: write, read, write grad
    return StageTimes(fwd=mm + loss, bwd_input=mm, bwd_weight=mm)


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
        return {"mfu": self.mfu, "hfu": self.hfu, "step_seconds": self.step_seconds,
                "model_tflops_per_gpu": self.model_flops_per_gpu / 1e12,
                "hardware_tflops_per_gpu": self.hardware_flops_per_gpu / 1e12,
                "tokens_per_second": self.tokens_per_second, "breakdown_seconds": dict(self.breakdown),
                "layout": {**self.layout.as_dict(), "schedule": self.layout.schedule, "zero": self.layout.zero,
                           "sequence_parallel": self.layout.sequence_parallel,
                           "tp_overlap": self.layout.tp_overlap},
                "layers_per_stage": self.layers_per_stage, "attention": self.attention,
                "prediction_notes": list(self.notes)}


def _stage_params(spec: ModelSpec, layers: range, first: bool, last: bool) -> float:
    from .memory import _layer_params

    layer, norms, emb, head, final = _layer_params(spec)
    params = len(layers) * (layer + norms)
    if first:
        params += emb
    if last:
        params += final + (head if not (spec.tie_embeddings and first) else 0)  # pp > 1 keeps a tied copy
    return params


def predict(spec: ModelSpec, device: Device, layout: Layout, seq_len: int, causal: bool = False,
            recompute: str = "none", recipe: str = "bf16-mixed", attention: str = "flash",
            dropout: bool = False) -> StepPrediction:  # long: docstring's terms in order
    """Predicted step time of `layout` (see the module docstring for the model and its overlap rule).

    attention: "flash" (fused, no S² matrix) or "eager" (materialised scores, `eager_attention_seconds`);
    dropout: attention dropout on the probabilities (eager only; flash fuses it)."""
    if attention not in ATTENTION_IMPLS:
        raise LlmcalcError(f"unknown attention {attention!r}; use one of {', '.join(ATTENTION_IMPLS)}")
    rec = lookup(RECIPES, "recipe", recipe)
    act_bytes = rec.act_bytes
    lay = layout
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    split = split_layers(spec.n_layers, n_stages)
    starts = [sum(split[:i]) for i in range(n_stages)]
    cache: dict[bool, StageTimes] = {}
    stages: list[StageTimes] = []
    for k in range(n_stages):
        total = StageTimes()
        for i in range(starts[k], starts[k] + split[k]):
            moe = spec.is_moe_layer(i)
            if moe not in cache:
                cache[moe] = _layer_times(spec, i, lay, seq_len, causal=causal, recompute=recompute, dev=device,
                                          act_bytes=act_bytes, attention=attention, dropout=dropout)
            lt = cache[moe]
            for f in ("fwd", "bwd_input", "bwd_weight", "tp", "cp", "ep", "comm_fwd"):
                setattr(total, f, getattr(total, f) + getattr(lt, f))
        if k == n_stages - 1:
            ht = _head_times(spec, lay, seq_len, device, act_bytes)
            total.fwd += ht.fwd
            total.bwd_input += ht.bwd_input
            total.bwd_weight += ht.bwd_weight
        stages.append(total)

    zb = lay.schedule.startswith("zb")
    m = lay.grad_accum
    f_t = lambda st: stages[st].fwd + stages[st].comm_fwd  # noqa: E731
    bwd_comm = lambda st: stages[st].tp + stages[st].cp + stages[st].ep - stages[st].comm_fwd  # noqa: E731
    if zb:  # the weight-gradient half (W) is split off the backward
        b_t = lambda st: stages[st].bwd_input + bwd_comm(st)  # noqa: E731
        w_t = lambda st: stages[st].bwd_weight  # noqa: E731
    else:
        b_t = lambda st: stages[st].bwd_input + stages[st].bwd_weight + bwd_comm(st)  # noqa: E731
        w_t = None
    p2p = comm.pp_collectives(lay.micro_batch * seq_len / lay.cp, spec.d_model, act_bytes, lay.tp,
                              sequence_parallel=lay.sequence_parallel, stride=lay.tp * lay.cp)
    p2p_s = comm.total_seconds(p2p, device.network) if lay.pp > 1 else 0.0
    plain = simulate(lay.schedule, lay.pp, m, f_t, b_time=b_t, w_time=w_t, vpp=lay.vpp)
    with_p2p = simulate(lay.schedule, lay.pp, m, f_t, b_time=b_t, w_time=w_t, vpp=lay.vpp,
                        p2p_time=p2p_s) if p2p_s else plain
    # the pacing rank: the busiest one
    rank_stages = [[stage_of(lay.schedule, r, c, lay.pp) for c in range(v)] for r in range(lay.pp)]
    pace = max(range(lay.pp), key=lambda r: plain.busy[r])
    mine = [stages[st] for st in rank_stages[pace]]
    breakdown = {
        "compute": m * sum(s.compute for s in mine),
        "tp_comm": m * sum(s.tp for s in mine),
        "cp_comm": m * sum(s.cp for s in mine),
        "ep_comm": m * sum(s.ep for s in mine),
        "dp_comm": 0.0,
        "pp_comm": with_p2p.makespan - plain.makespan,
        "pp_bubble": plain.makespan - plain.busy[pace],
        "optimizer": 0.0,
    }
    # data parallelism and the optimizer, for the rank holding the most parameters
    worst_dp = worst_opt = 0.0
    experts_per_layer = routed_expert_params(spec) / spec.n_moe_layers if spec.n_moe_layers else 0.0
    for r in range(lay.pp):
        params = experts = 0.0
        for st in rank_stages[r]:
            rng = range(starts[st], starts[st] + split[st])
            params += _stage_params(spec, rng, st == 0, st == n_stages - 1)
            experts += experts_per_layer * sum(spec.is_moe_layer(i) for i in rng)
        dense = (params - experts) / lay.tp
        experts = experts / lay.expert_tp / lay.ep  # routed experts: split over ep, each over etp
        mbs = [stages[st] for st in rank_stages[r]]
        fwd_one = sum(s.fwd for s in mbs)
        bwd_one = sum(s.bwd_input + s.bwd_weight for s in mbs)
        outer = lay.tp * lay.cp * lay.pp
        colls = comm.dp_collectives(dense, rec.grad_bytes, rec.weight_bytes, lay.dp, zero=lay.zero, stride=outer,
                                    micro_batches=m)
        if experts:  # expert weights are replicated over the expert data-parallel group only
            colls += comm.dp_collectives(experts, rec.grad_bytes, rec.weight_bytes, lay.expert_dp, zero=lay.zero,
                                         stride=lay.fold_stride(lay.expert_tp * lay.ep), micro_batches=m)
        if lay.dp > 1 or lay.expert_dp > 1:
            if lay.zero == 3:
                per_mb = sum(c.seconds(device.network) * c.count for c in colls) / m
                exposed = m * max(0.0, per_mb - fwd_one - bwd_one)
            else:
                reduce = sum(c.seconds(device.network) for c in colls if c.kind in ("all_reduce", "reduce_scatter"))
                gather = sum(c.seconds(device.network) for c in colls if c.kind == "all_gather")
                exposed = max(0.0, reduce - bwd_one) + max(0.0, gather - fwd_one) if lay.dp_overlap else reduce + gather
        else:
            exposed = 0.0
        shard = lay.dp if lay.zero >= 1 else 1
        expert_shard = lay.expert_dp if lay.zero >= 1 else 1
        local = dense / shard + experts / expert_shard
        opt_bytes = local * (rec.grad_bytes + 2 * (rec.master_bytes + 2 * rec.state_bytes) + rec.weight_bytes)
        worst_dp = max(worst_dp, exposed)
        worst_opt = max(worst_opt, opt_bytes / device.hbm)
    breakdown["dp_comm"] = worst_dp
    breakdown["optimizer"] = worst_opt
    step = with_p2p.makespan + worst_dp + worst_opt
    flops = step_flops(spec, lay.global_batch, seq_len, causal, recompute)
    notes = [f"layers per pipeline stage ({n_stages} stages = pp {lay.pp} x {v} chunk{'s' if v > 1 else ''}): "
             + _describe_split(split)]
    if attention == "eager":
        notes.append("attention core with the B·H·S² scores materialised (batched GEMMs + softmax"
                     + (" + dropout" if dropout else "") + "), as before FlashAttention")
    return StepPrediction(spec, device, lay, seq_len, causal=causal, recompute=recompute, step_seconds=step,
                          breakdown=breakdown, model_flops=float(flops.model_flops),
                          hardware_flops=float(flops.hardware_flops), layers_per_stage=split, notes=notes,
                          attention=attention)


def _describe_split(split: list[int]) -> str:
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
    if global_batch_tokens <= 0 or global_batch_tokens % seq_len:
        low = max(1, int(global_batch_tokens // seq_len))  # the multiples of seq_len on either side
        nearest = " or ".join(f"{n * seq_len:,} ({plural(n, 'sequence')})" for n in dict.fromkeys((low, low + 1)))
        raise LlmcalcError(f"--global-batch-tokens {global_batch_tokens:,.0f} is not a multiple of --seq-len "
                           f"{seq_len:,}; the nearest: {nearest}, or give --global-batch in sequences")
    return int(global_batch_tokens // seq_len)


LAYOUT_DEFAULTS = {"micro_batch": 1, "tp": 1, "cp": 1, "pp": 1, "vpp": 1, "ep": 1, "schedule": None,
                   "zero": DEFAULT_ZERO, "sequence_parallel": True, "dp_overlap": True, "tp_overlap": False}


def train_steptime(spec: ModelSpec | None, gpu: str, n_gpus: int, mfu: float | None, achieved_tflops: float | None,
                   dtype: str, seq_len: int, causal: bool, recompute: str, model_flops_per_token: float,
                   hardware_flops_per_token: float, accelerator: Accelerator, options: dict):
    """What `train` uses for device time: (mfu, prediction or None, measured dict or None).

    --mfu / --achieved-tflops win (mfu_source "given"); --tokens-per-second turns a past run's throughput
    into its MFU (also "given"); otherwise a layout with --global-batch(-tokens) is predicted ("predicted").
    """
    tps = options.pop("tokens_per_second", None)
    attention = options.pop("attention", None)
    gb = global_batch_sequences(options.pop("global_batch", None), options.pop("global_batch_tokens", None), seq_len)
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
        if given and gb is None:
            raise LlmcalcError(f"layout options ({', '.join('--' + k.replace('_', '-') for k in given)}) need "
                               f"--global-batch to predict a step; or drop them")
        if gb is not None:  # a given MFU with a layout: the step follows from the given throughput
            lay = make_layout(spec, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **given}) if spec is not None else \
                Layout(dp=n_gpus, global_batch=gb)
            measured = {**(measured or {}), "layout": lay}
        return mfu, None, measured
    if gb is None:
        if given or attention is not None:
            raise LlmcalcError("a layout needs --global-batch (sequences) or --global-batch-tokens to predict the "
                               "step time; or give --mfu")
        raise LlmcalcError("give exactly one of an MFU (--mfu 0.4), --achieved-tflops or --tokens-per-second, or a "
                           "layout with --global-batch (sequences per step) to predict the MFU")
    if spec is None:
        raise LlmcalcError("predicting the step time needs a MODEL (its shapes), not --params")
    settings = {**LAYOUT_DEFAULTS, **given}
    lay = make_layout(spec, n_gpus, seq_len, gb, **settings)
    pred = predict(spec, device_for(gpu, dtype), lay, seq_len, causal=causal, recompute=recompute,
                   attention=attention or "flash")
    return pred.mfu, pred, measured


def search_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int, causal: bool = False,
                   recompute: str | None = None, dtype: str = "bf16", progress=None, tp_overlap: bool = False):
    """Every layout tp x cp x pp (x vpp, micro-batch, recomputation) of `n_gpus`, checked against the memory
    model and ranked by predicted throughput. Returns (ranked [(prediction, peak bytes)], losers, counts).

    tp runs over the divisors of GPUs per node (TP stays on NVLink), pp up to 64 (memory checked for the
    most loaded stage, ceil(L/pp) layers), cp over powers of two up to 16 keeping >= 1k tokens per rank;
    ZeRO-1 with the least of none, selective, full recomputation that fits (only `recompute` if given), else
    ZeRO-3 (FSDP) the same way.
    `progress(total)` (optional) returns a function called once per layout tried; `tp_overlap` times every
    layout with its TP collectives under the GEMMs (`_tp_exposed`).
    """
    check_modelled(spec)
    dev = device_for(gpu, dtype)
    capacity = dev.accelerator.memory_bytes
    per_node = dev.network.gpus_per_node
    tries = [recompute] if recompute else ["none", "selective", "full"]
    counts = {"searched": 0, "fit": 0, "oom": 0, "invalid": 0}
    candidates = _candidates(spec, n_gpus, seq_len, global_batch, per_node)
    step = progress(len(candidates)) if progress else None
    ranked, oom = [], []
    for tp, cp, pp, vpp, mb, ep, etp in candidates:
        counts["searched"] += 1
        if step:
            step()
        try:
            lay = make_layout(spec, n_gpus, seq_len, global_batch, tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, micro_batch=mb,
                              tp_overlap=tp_overlap, etp=etp or None)
        except LlmcalcError:
            counts["invalid"] += 1
            continue
        rc, zero, peak = _least_that_fits(spec, lay, seq_len, tries, capacity)
        if rc is None:
            counts["oom"] += 1
            oom.append((lay, peak, tries[-1] + (" and ZeRO-3" if zero == 3 else "")))
            continue
        counts["fit"] += 1
        lay = replace(lay, zero=zero)
        ranked.append((predict(spec, dev, lay, seq_len, causal=causal, recompute=rc), peak))
    ranked.sort(key=lambda pm: -pm[0].tokens_per_second)
    losers = _why_they_lose(ranked, oom, capacity)
    return ranked, losers, counts


def _least_that_fits(spec: ModelSpec, lay: Layout, seq_len: int, tries: list[str],
                     capacity: float) -> tuple[str | None, int, float]:
    """(recompute, ZeRO stage, peak bytes) of the cheapest setting whose most loaded stage (ceil(L / pp) layers
    on every stage) fits `capacity`: ZeRO-1 with the least recomputation, else ZeRO-3 (FSDP: weights and
    gradients sharded too, at three weight/gradient transfers per micro-batch) where dp > 1;
    (None, last stage tried, its peak) when nothing fits."""
    from .memory import training_memory

    even = spec.with_layers(math.ceil(spec.n_layers / lay.pp) * lay.pp)
    peak, zero = 0.0, 1
    for zero in (1, 3) if lay.dp > 1 else (1,):
        for rc in tries:
            peak = training_memory(even, lay.micro_batch, seq_len, recipe="bf16-mixed", optimizer="adamw",
                                   recompute=rc, attention="flash",
                                   parallel=replace(lay, zero=zero, sequence_parallel=True)).peak
            if peak <= capacity:
                return rc, zero, peak
    return None, zero, peak


def _describe(lay: Layout, rc: str | None = None) -> str:
    text = f"tp {lay.tp} cp {lay.cp} pp {lay.pp} dp {lay.dp}" + (f" vpp {lay.vpp}" if lay.vpp > 1 else "") + \
        (f" ep {lay.ep}" if lay.ep > 1 else "") + (f" etp {lay.expert_tp}" if lay.expert_tp != lay.tp else "")
    return text + f" mb {lay.micro_batch}" + (f" recompute {rc}" if rc else "") + (" ZeRO-3" if lay.zero == 3 else "")


def _why_they_lose(ranked: list, oom: list, capacity: float) -> list:
    """A few representative losers: for each kind of loss the layout that suffers it most, and what did
    not fit (the one closest to fitting, which would otherwise have been a candidate)."""
    out = []
    if ranked:
        best = ranked[0][0]
        for key, label in (("pp_bubble", "pipeline bubble"), ("tp_comm", "exposed TP communication"),
                           ("cp_comm", "exposed CP communication"), ("dp_comm", "exposed DP communication"),
                           ("pp_comm", "exposed PP send/recv")):
            worst = max(ranked[1:], key=lambda pm: pm[0].breakdown[key] / pm[0].step_seconds, default=None)
            if worst is None or worst[0].breakdown[key] <= best.breakdown[key] * 1.05 + 1e-9:
                continue
            p = worst[0]
            out.append((f"{label}: {p.breakdown[key] / p.step_seconds * 100:.1f} % of its step (best: "
                        f"{best.breakdown[key] / best.step_seconds * 100:.1f} %)", p, _describe(p.layout, p.recompute)))
        slow = [pm for pm in ranked[1:] if pm[0].recompute != best.recompute]
        if slow:
            p = slow[0][0]
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
    counts: dict  # searched, fit, oom, invalid


def rank_layouts(spec: ModelSpec, gpu: str, n_gpus: int, seq_len: int, global_batch: int | None = None,
                 global_batch_tokens: float | None = None, causal: bool = False, recompute: str | None = None,
                 tp_overlap: bool = False, progress=None) -> LayoutSearch:
    """`llmcalc layout`: search_layouts for the global batch given in sequences or tokens; no layout that fits
    is an error naming what to change."""
    batch = global_batch_sequences(global_batch, global_batch_tokens, seq_len, required=True)
    assert batch is not None  # required: exactly one of the two was given
    ranked, losers, counts = search_layouts(spec, gpu, n_gpus, seq_len, global_batch=batch, causal=causal,
                                            recompute=recompute, tp_overlap=tp_overlap, progress=progress)
    if not ranked:
        raise LlmcalcError(f"no layout of {spec.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{batch} (of the layouts tried, {counts['oom']:,} do not fit in memory and "
                           f"{counts['invalid']:,} contradict the model): use more GPUs or a larger --global-batch")
    return LayoutSearch(spec=spec, gpu=gpu, n_gpus=n_gpus, seq_len=seq_len, global_batch=batch, ranked=ranked,
                        losers=losers, counts=counts)
