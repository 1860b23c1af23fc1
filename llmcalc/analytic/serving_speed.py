"""Serving speed for a workload: a replica's engine steps timed from mechanisms, and vLLM's continuous batching
simulated over them, as `vllm bench serve` measures it.

A workload is `vllm bench serve`'s: requests of `input_len` prompt tokens generating `output_len` tokens, sent by
`max_concurrency` clients in a closed loop, or arriving at `request_rate` per second (Poisson), or all at once
(offline maximum throughput); `num_prompts` of them.

The step (``StepCost``): one forward of the scheduled tokens on one replica of tp GPUs, the sum of
- the layer stack's GEMMs on those tokens (``linear_seconds``): kernels.gemm_timer's smooth roofline of the MAMF at
  the weights' GEMM dtype with tile and wave quantization (small-m decode GEMMs included) against the weight bytes
  the tokens read (a MoE step reads the experts its tokens hit, ``inference.expected_experts``); FP8 on AMD Instinct
  at AITER's measured rates by output size instead (``cdna.stack_rate``); 4-bit weights on Ampere (int4, MXFP4,
  NVFP4: vLLM's Marlin W4A16 kernels, gpt-oss's MXFP4 experts included) at Marlin's measured compute ceiling in its
  16-row blocks (``marlin.w4a16_gemms``, ``marlin_rate``, ``marlin_row_efficiency``);
- the LM head on the rows that sample and the sampler (``head_seconds``);
- paged decode attention (``decode_attention_seconds``): the KV bytes of every decoding sequence's context, a
  memory-bound pass at the achievable HBM bandwidth (kernels.HBM_EFFICIENCY);
- prefill attention (``prefill_attention_seconds``): the causal pairs' FLOPs at the measured FlashAttention rate
  for the head dimension and length (kernels.Device.attention_rate; FA3 on Hopper, FA2 on Ampere);
  MLA of DeepSeek-V3's shape on a GPU whose engine table has it (``StepCost.mla_key``): each layer's whole attention
  block, its projections included, from the engine's measured module (kernel_tables.mla_module_seconds; decode by
  batch and context, prefill by the chunks' tokens and causal pairs), those projections then left out of the GEMMs;
- tensor parallelism's all-reduces, two per layer of the tokens' activations (``allreduce_seconds``): vLLM's
  custom all-reduce (one shot, each rank reading every peer's buffer over NVLink) up to its 8 MiB limit, NCCL's ring
  (comm.Collective) past it; on AMD's xGMI mesh its one- or two-stage kernel as measured (``cdna``); on PCIe-only
  GPUs (L40S, L4, H100 PCIe) NCCL beyond a pair, as vLLM disables its custom kernel there;
- what no kernel accounts for, fitted once (``ENGINE_STEP_SECONDS``, ``LAYER_FLOOR_SECONDS``, see there).

The engine (``simulate``): vLLM V1's scheduler each step gives every running request its next token (a decode) or
its next prefill chunk, then admits waiting requests first come first served while max_num_seqs, the token budget
(max_num_batched_tokens, chunked prefill) and the KV cache allow; a request's first token comes with the step that
ends its prefill, each later one with a decode step; a step that preempted admits nothing (V1's schedule() schedules
the waiting queue only "if not preempted_reqs"). TTFT, TPOT (e2e - TTFT over output_len - 1, over the requests of
more than one token; 0 where none), ITL and e2e are `vllm bench serve`'s definitions (benchmarks/serve.py
calculate_metrics), its throughput the tokens over the benchmark's duration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import random
from collections.abc import Callable

from ..errors import LlmcalcError
from ..records import dataclass
from . import cdna, comm, engines, kernel_tables
from .engine_queue import (
    RATIO_JUMP,
    Group,
    Held,
    KvBudget,
    Slots,
    StepLoad,
    admit,
    decode_run,
    merged,
    preempt,
    reserved_blocks,
    retracted_ratio,
    schedule_running,
)
from .engine_versions import intake_ends, served_offline
from .engines import SchedulerPolicy
from .flops import forward_ops
from .inference import PER_KEY, InferenceEstimate, decode_ops, expected_experts
from .kernels import ROOFLINE_P, TILES, Device, attention_seconds, device_for, gemm_timer
from .marlin import marlin_rate, marlin_row_efficiency, marlin_words, w4a16_gemms
from .measured_kernels import (
    DecodeShape,
    GemmShape,
    MlaShape,
    PrefillShape,
    context_tokens,
    measured_decode_attention,
    measured_fp8_kv_prefill_ratio,
    measured_layer_gemms,
    measured_mla_decode_parts,
    measured_mla_layer,
    windowed_kv_bytes,
)
from .quant import unquantized_linear_flops, weight_format
from .serving import ServeEstimate
from .serving_workload import Performance, Simulated, Workload
from .vllm import XFORMERS_FP8_WORDS, fp8_kv_on_xformers

# --- fitted constants (no mechanism known) -------------------------------------------------------------------
# Fitted once, together, to the published rows of benchmarks/serving_validation.json (62 rows from 4 sources: vLLM on
# H100/H200/A100 and MI300X, LMDeploy, NeMo; `benchmarks/bench_serving_speed.py --fit`, best median |error| 17 %).
# With issue 36's varied lengths, API-server pace and preemption, over 69 rows, a 54-point grid around it chose the
# same point (median |error| 17.7 %); fitted again without each source in turn, the held-out source's median |error|
# is 63.5 % (GPUStack: vLLM's offline bursts, DeepSeek-R1 and GLM on 8 x H200, see docs/serving-validation.md),
# 17.1 % (LMDeploy), 9.7 % (NeMo), 17.4 % (OCI MI300X): 21.2 % over all rows left out.
# Host-side work per engine step that CUDA graphs do not hide (vLLM V1: scheduling, input preparation, sampling's
# host side), seconds:
ENGINE_STEP_SECONDS = 0.5e-3
# A floor per layer per step: the ~10 kernels each layer launches run for a few microseconds each however little
# they do (the measured tables show it for attention and GEMMs alone: ~15 us at batch 1), seconds:
LAYER_FLOOR_SECONDS = 40e-6
# What each tensor-parallel all-reduce waits beyond the kernel's own measured time: the ranks reach it at different
# moments (launch jitter, uneven kernel times), and the collective ends with the slowest, seconds:
TP_SYNC_SECONDS = 40e-6
# What a request served over the OpenAI-compatible API spends outside the engine's steps before its first token
# reaches the client (HTTP, tokenization, the engine-core round trip, detokenizing and streaming it back); none for
# LLM.generate's offline batches, seconds:
REQUEST_SECONDS = 0.02

# --- measured constants ----------------------------------------------------------------------------------------
# The API server's time per streamed output token (request intake included): one Python process detokenizes each
# request's token, formats it as an OpenAI stream chunk and writes it ("managing network requests and formatting the
# response for OpenAI protocol can consume quite a bit of CPU cycles, especially under high load with token
# streaming enabled", vLLM blog, 2024-09-05 "vLLM v0.6.0: 2.7x Throughput Improvement"), apart from the engine since
# V1, so the engine runs ahead while clients see tokens no faster than it streams them. Measured where it alone
# binds: vllm-project/vllm PR #12287 ("[Frontend][V1] Online serving performance improvements", 2025-01-21, its
# "Before"), Llama-3.2-1B on one A100, ShareGPT at 400 clients: 1,211,959 tokens in 94.31 s = 77.8 us each, where
# the engine alone would stream about twice as fast (this model: 28k tokens/s); later versions stream faster, so
# this is an upper bound for them. Seconds:
FRONTEND_TOKEN_SECONDS = 94.31 / 1_211_959

# vLLM's custom all-reduce (csrc/custom_all_reduce.cuh): buffers up to 8 MiB on fully NVLink-connected GPUs
# (vllm/distributed/device_communicators/custom_all_reduce.py max_size = 8192 * 1024), one shot: each rank reads
# its tp - 1 peers' buffers and reduces locally; past the limit (or across nodes) NCCL.
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024
# one small custom all-reduce where no table is shipped (its flag barrier through peer memory): the measured table's
# 4.4-5.1 us for 8 KiB over 2-8 H100 (kernel_tables.allreduce_seconds), rounded up, seconds
CUSTOM_ALLREDUCE_LATENCY = 6e-6

# vLLM's FlashAttention backend by generation (FA3 is Hopper-only; Ada runs FA2's SM80 kernels); else cuDNN
SERVING_ATTENTION = {"ampere": "fa2", "ada": "fa2", "hopper": "fa3"}


def three_figures(x: float) -> float:
    """`x` to 3 significant figures (a simulation asks the tables for a few thousand points, again and again)."""
    return float(f"{x:.3g}")


def mla_block_bytes(est: InferenceEstimate, tp: int) -> float:
    """Weight bytes of every MLA attention block one rank reads: the replicated down-projections (q_a, kv_a) and
    the latent norms whole, q_b, kv_b and o_proj split over tp (inference.weight_layout's shares)."""
    fmt = est.weight_format or weight_format(est.spec, est.weight_dtype)
    total = 0.0
    for key, nbytes in fmt.component_bytes(est.spec).items():
        if key.startswith("attention/"):
            name = key.split("/")[1]
            total += nbytes if name in ("q_a_proj", "kv_a_proj") or name.endswith("norm") else nbytes / tp
    return total


def smooth_roofline(compute: float, memory: float) -> float:
    """kernels' smooth roofline of a compute and a memory time, t = (t_c^p + t_m^p)^(1/p), p = ROOFLINE_P (fitted
    there to DeepGEMM's published table)."""
    return (compute ** ROOFLINE_P + memory ** ROOFLINE_P) ** (1 / ROOFLINE_P)


def row_tile_efficiency(rows: float) -> float:
    """The useful share of a GEMM's row tiles: `rows` padded to whole tiles of 64, 128 or 256 rows (kernels.TILES'
    row sizes; the best of them), as cuBLAS and CUTLASS pick. Wave quantization over the output columns is left out:
    a layer's GEMMs together span far more tiles than there are SMs, and small-m decode GEMMs split K (split-K /
    stream-K) to fill them."""
    return max(rows / (tile * math.ceil(rows / tile)) for tile in ROW_TILES)


ROW_TILES = sorted({tm for tm, _ in TILES})  # kernels.TILES' row sizes (row_tile_efficiency)


def expert_row_efficiency(rows: float) -> float:
    """The useful share of the fused-MoE kernel's row blocks for an expert receiving `rows` tokens: vLLM's Triton
    fused_moe (fused_moe.py get_default_config) runs BLOCK_SIZE_M = 16 for small batches, 64 past them, each
    expert's rows padded to whole blocks (moe_align_block_size)."""
    block = 16 if rows <= 64 else 64
    return rows / (block * math.ceil(rows / block))


class StepCost:
    """Seconds of one engine step on one replica (module docstring), from a replica's serving estimate."""

    def __init__(self, est: InferenceEstimate, dev: Device, tp: int) -> None:
        spec = est.spec
        self.spec, self.est, self.dev, self.tp = spec, est, dev, tp
        f0, self.key_flops = est._slopes
        self.head_flops = 2 * spec.d_model * spec.vocab_size if spec.lm_head else 0
        self.expert_flops = forward_ops(spec, 1, 1).get("moe/experts", 0) if spec.is_moe else 0
        # every matmul of the stack (and the small ops beside) but the routed experts'
        self.stack_flops_per_token = f0 - self.head_flops - self.expert_flops
        # weight-only formats (int8/int4, W4A16) dequantize into 16-bit GEMMs; fp8 / fp4 weights run their own
        self.gemm_dtype = est.compute_dtype if est.compute_dtype in ("fp8", "fp4") else "bf16"
        self.rate = dev.gemm_rate(self.gemm_dtype)
        # a checkpoint quantized per module: the block linears its quantization_config leaves 16-bit run BF16 GEMMs
        # (quant.unquantized_linear_flops: attention's, the rest's FLOPs per token; (0, 0) where every one is quantized)
        fmt = est.weight_format
        self.bf16_linear_flops = unquantized_linear_flops(spec, fmt) if fmt is not None and \
            self.gemm_dtype != "bf16" else (0, 0)
        self.bf16_rate = dev.gemm_rate("bf16")
        # 4-bit weights on Ampere: the dense layers' and the experts' GEMMs that run Marlin (w4a16_gemms)
        self.stack_marlin, self.expert_marlin = w4a16_gemms(est, dev)
        self.marlin = marlin_rate(dev)
        self.cdna_fp8 = est.compute_dtype == "fp8" and cdna.has_fp8_rates(dev.arch)  # AMD's measured FP8 rates
        self.columns = cdna.layer_columns(spec, tp), cdna.expert_columns(spec, tp) if spec.is_moe else ()
        self.act_bytes = 2.0
        self._head = gemm_timer(dev, 2.0, rate=dev.gemm_rate("bf16"))
        self.kernel = SERVING_ATTENTION.get(dev.arch, "cudnn")
        self.gpu = est.accelerator.key
        # measured kernel tables (kernel_tables: aiconfigurator's, measured inside vLLM) where this GPU has them
        self.measured = kernel_tables.has_tables(self.gpu)
        # decode attention from the table for plain full attention (no MLA, windows or recurrent layers)
        self.table_attention = self.measured and spec.mla is None and not spec.is_hybrid and spec.n_heads % tp == 0
        # MLA: the projections and the attention core of each layer, and their weights (``mla_key``)
        self.mla_flops_per_token = sum(v for k, v in decode_ops(spec, 1, 1).items()
                                       if k.startswith("attention/") and not k.endswith(PER_KEY)) \
            if spec.mla is not None else 0
        self.mla_bytes = mla_block_bytes(est, tp) if spec.mla is not None else 0.0
        self._mla: tuple[str, str | None] | None = None
        # the layer's GEMMs at one row on the engine's measured GEMM table, where it times the projections
        # (measured_kernels.layer_gemm_shape; set by engines.step_cost for engines whose tables hold GEMMs)
        self.gemm_shape: GemmShape | None = None
        # vLLM's V0 XFormers backend runs the FP8 cache (vllm.fp8_kv_on_xformers; set by plan_workload)
        self.xformers_fp8 = False
        # the custom all-reduce on a PCIe peer-to-peer pair (vLLM's, SGLang's; not TensorRT-LLM's: engines.step_cost)
        self.pcie_pairs = True

    def mla_key(self) -> str | None:
        """The measured MLA block table key (kernel_tables.mla_module_key) that times this model's attention blocks
        whole on `self.gpu` (the engine's table), or None: DeepSeek-V3's MLA shape (kernel_tables.MLA_MODULE_SHAPE;
        DeepSeek-R1, V3.1, Kimi K2 share it), heads split evenly with the rank's count measured, KV cache in 16 bits
        or FP8, projections in bf16 or block FP8 (FP8 weights: the checkpoints' 128 x 128 blocks)."""
        if self._mla is None or self._mla[0] != self.gpu:
            self._mla = (self.gpu, self._find_mla_key())
        return self._mla[1]

    def _find_mla_key(self) -> str | None:
        spec, mla = self.spec, self.spec.mla
        if mla is None or not self.measured or spec.n_heads % self.tp or spec.index_n_heads or \
                self.est.kv_dtype not in ("bf16", "fp16", "fp8"):
            return None  # (a lightning indexer, DeepSeek-V3.2's sparse attention, is not the dense block measured)
        shape = {"hidden": spec.d_model, "q_lora_rank": mla.q_lora_rank, "kv_lora_rank": mla.kv_lora_rank,
                 "qk_nope_head_dim": mla.qk_nope_head_dim, "qk_rope_head_dim": mla.qk_rope_head_dim,
                 "v_head_dim": mla.v_head_dim}
        if shape != kernel_tables.MLA_MODULE_SHAPE:
            return None
        key = kernel_tables.mla_module_key("fp8" if self.est.kv_dtype == "fp8" else "bf16",
                                           "fp8_block" if self.est.compute_dtype == "fp8" else "bf16")
        doc = kernel_tables.table(self.gpu)
        heads = str(spec.n_heads // self.tp)
        for name in ("mla_context_module", "mla_generation_module"):
            if heads not in doc.get(name, {}).get("grids", {}).get(key, {}):
                return None
        return key

    def mla_parts(self) -> tuple[str, str] | None:
        """Where no whole-block table answers (``mla_key`` None) but the engine's tables hold MLA decode in parts
        (SGLang's: the bare kernel and the absorbed BMMs), their (KV dtype, BMM dtype): FP8 BMMs for FP8 weights, as
        aiconfigurator and SGLang's FP8 path run them; else None. The projections stay in ``linear_seconds`` (kv_b's
        weights, which the BMMs read, are counted there too: 2 MB a layer at 16 heads, ~0.03 ms a step)."""
        spec, mla = self.spec, self.spec.mla
        if mla is None or not self.measured or self.mla_key() is not None or spec.n_heads % self.tp or \
                spec.index_n_heads or self.est.kv_dtype not in ("bf16", "fp16", "fp8"):
            return None
        shape = kernel_tables.MLA_MODULE_SHAPE  # the BMMs' and the kernel's per-head widths
        if (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim) != (
                shape["kv_lora_rank"], shape["qk_rope_head_dim"], shape["qk_nope_head_dim"], shape["v_head_dim"]):
            return None
        kv, bmm = ("fp8" if self.est.kv_dtype == "fp8" else "bf16"), ("fp8" if self.est.compute_dtype == "fp8"
                                                                       else "bf16")
        doc, heads = kernel_tables.table(self.gpu), spec.n_heads // self.tp
        if str(heads) not in doc.get("generation_mla", {}).get("grids", {}).get(kv, {}) or \
                f"pre/{bmm}/{heads}" not in doc.get("mla_bmm", {}).get("curves", {}):
            return None
        return kv, bmm

    # each term: seconds for one step
    def linear_seconds(self, tokens: float) -> float:
        """The layer stack's GEMMs over `tokens` rows: compute (their FLOPs at the MAMF of the GEMM dtype, the rows
        padded to whole tiles, ``row_tile_efficiency``) and the weight bytes these tokens read (MoE: the experts they
        hit) with the activations in and out, on kernels' smooth roofline t = (t_c^p + t_m^p)^(1/p). Where the
        engine's table measured the layer's GEMMs (``gemm_shape``): layers x the measured layer
        (``measured_kernels.measured_layer_gemms``) at the step's tokens, where the table reaches that many rows
        (past every nearby sweep's last m it has no answer, kernel_tables.KernelTableError: the roofline then, as for a
        GPU without tables)."""
        if tokens <= 0:
            return 0.0
        if self.gemm_shape is not None:
            shape = dataclasses.replace(self.gemm_shape, rows=three_figures(max(1.0, tokens)))
            with contextlib.suppress(kernel_tables.KernelTableError):
                return self.spec.n_layers * measured_layer_gemms(shape)
        mla = self.mla_key() is not None  # the MLA blocks' projections come with their measured table
        flops = self.gemm_flops(mla)
        rate = self.marlin * marlin_row_efficiency(tokens) if self.stack_marlin else \
            self.gemm_rate(tokens, row_tile_efficiency, self.columns[0])
        compute = tokens * flops.get(self.gemm_dtype, 0) / self.tp / rate
        if self.gemm_dtype != "bf16" and flops.get("bf16"):  # the 16-bit linears of a checkpoint quantized per module
            compute += tokens * flops["bf16"] / self.tp / (self.bf16_rate * row_tile_efficiency(tokens))
        if self.expert_flops:  # the fused-MoE kernel pads each expert's rows to its block
            hit = expected_experts(self.spec, math.ceil(tokens))
            rows = tokens * self.spec.n_experts_per_token / hit
            rate = self.marlin * marlin_row_efficiency(rows) if self.expert_marlin else \
                self.gemm_rate(rows, expert_row_efficiency, self.columns[1])
            compute += tokens * self.expert_flops / self.tp / rate
        weights = self.est.weights_read(math.ceil(tokens)) - (self.mla_bytes if mla else 0.0)
        memory = (weights + 2 * tokens * self.spec.d_model * self.act_bytes * self.spec.n_layers) / self.dev.hbm
        return smooth_roofline(compute, memory)

    def gemm_flops(self, mla: bool = False) -> dict[str, float]:
        """The layer stack's GEMM FLOPs per token (every matmul but the LM head's and the routed experts', with the
        small ops beside) by the dtype each GEMM runs at: the weights' GEMM dtype (`gemm_dtype`), and BF16 for the
        block linears a checkpoint quantized per module leaves 16-bit (``quant.unquantized_linear_flops``: Meta's
        FP8 Llama 3.1 405B runs its attention projections and layers 0 and 125 in BF16, its other FFNs in FP8);
        `mla`: without the MLA blocks' projections, which their measured table times (``mla_key``)."""
        attention, other = self.bf16_linear_flops
        wide = other + (0 if mla else attention)
        stack = self.stack_flops_per_token - (self.mla_flops_per_token if mla else 0) - wide
        return {self.gemm_dtype: stack, "bf16": wide} if wide else {self.gemm_dtype: stack}

    def gemm_rate(self, rows: float, padding: Callable[[float], float], columns: tuple) -> float:
        """The GEMMs' compute FLOP/s at `rows` rows: FP8 on AMD Instinct as AITER measured it, each GEMM of the layer
        (`columns`, cdna.layer_columns) at its output's size (cdna.stack_rate), else the MAMF of the GEMM dtype times
        the rows' useful share (`padding`)."""
        return cdna.stack_rate(self.dev.arch, rows, columns) if self.cdna_fp8 else self.rate * padding(rows)

    def head_seconds(self, rows: float) -> float:
        """The LM head over the rows that sample (vLLM computes logits only for a request's last token), its
        vocabulary split over tp (ParallelLMHead), and the sampler's pass over the logits (fp32, read twice)."""
        if rows <= 0 or not self.head_flops:
            return 0.0
        vocab = self.spec.vocab_size / self.tp
        return self._head(rows, self.spec.d_model, vocab) + rows * self.spec.vocab_size * 4 * 2 / self.dev.hbm

    def decode_attention_seconds(self, kv_tokens: float, sequences: float) -> float:
        """Paged attention of the decoding sequences: the measured kernel (kernel_tables.decode_attention_seconds,
        by batch, mean context, heads and KV heads per GPU, head dimension and KV dtype) in every attention layer
        where the GPU has a table and the attention is plain; else their cached tokens' K and V per GPU (and a
        recurrent layer's state per sequence) read once at the achievable HBM bandwidth."""
        if sequences <= 0:
            return 0.0
        spec = self.spec
        if self.table_attention and self.est.kv_dtype in ("bf16", "fp16", "fp8"):  # (plain attention: no MLA table)
            try:
                return measured_decode_attention(DecodeShape(
                    gpu=self.gpu, batch=max(1, round(sequences)),
                    context=context_tokens(kv_tokens / sequences), heads=spec.n_heads // self.tp,
                    kv_heads=max(1, spec.n_kv_heads // self.tp), head_dim=spec.d_head,
                    kv_dtype="fp8" if self.est.kv_dtype == "fp8" else "bf16"), spec)
            except kernel_tables.KernelTableError:
                pass
        key = self.mla_key()
        if key is not None:  # the whole MLA block of each decoding sequence, projections included (``mla_key``)
            return spec.n_attention_layers * measured_mla_layer(MlaShape(
                gpu=self.gpu, heads=spec.n_heads // self.tp, batch=max(1, round(sequences)),
                seq=three_figures(max(1.0, kv_tokens / sequences)), key=key, context=False))
        parts = self.mla_parts()
        if parts is not None:  # SGLang: the absorbed BMMs and the bare MLA kernel, measured
            return spec.n_attention_layers * measured_mla_decode_parts(
                self.gpu, spec.n_heads // self.tp, max(1, round(sequences)),
                three_figures(max(1.0, kv_tokens / sequences)), *parts)
        nbytes = windowed_kv_bytes(self.est, spec, self.tp, kv_tokens, sequences) + \
            sequences * self.est.state_bytes_per_sequence
        memory = nbytes / self.dev.hbm
        # the scores and values over every cached key (MLA's absorbed form: over the latent, all heads), at the MAMF
        # (FlashMLA: "up to 660 TFLOPS in compute-bound configuration on H800 SXM5", deepseek-ai/FlashMLA README)
        compute = kv_tokens * self.key_flops / self.tp / self.dev.mamf
        return smooth_roofline(compute, memory)

    def prefill_attention_seconds(self, pairs: float, length: float, tokens: float = 0.0) -> float:
        """Causal attention of the prefill chunks: 4 FLOPs per (query, key) pair per head dimension (QKᵀ and AV) over
        the attention layers' heads per GPU, at the FlashAttention forward rate for the head dimension and length.
        MLA with a measured block table (``mla_key``): the `tokens` prefill tokens' whole blocks from the context
        table, as b prompts of s tokens without prefix that have the chunks' tokens and causal pairs (b·s = tokens,
        b·s²/2 = pairs: s = 2·pairs / tokens; a chunk after a prefix counts as a share of a longer prompt)."""
        spec = self.spec
        if pairs <= 0 or not spec.n_attention_layers:
            return 0.0
        key = self.mla_key() if tokens > 0 else None
        if key is not None:
            seq = max(1.0, 2.0 * pairs / tokens)
            return spec.n_attention_layers * measured_mla_layer(MlaShape(
                gpu=self.gpu, heads=spec.n_heads // self.tp, batch=three_figures(tokens / seq), seq=three_figures(seq),
                key=key, context=True))
        flops = 4 * pairs * spec.n_heads / self.tp * spec.d_head * spec.n_attention_layers
        return attention_seconds(self.dev, self.kernel, flops, spec.d_head, max(length, 128), causal=True,
                                 backward=False) * self.fp8_kv_prefill_factor(length, tokens)

    def fp8_kv_prefill_factor(self, length: float, tokens: float) -> float:
        """What an FP8 KV cache does to the prefill attention kernel: t_fp8 = t_16bit x T_fp8 / T_bf16, the engine's
        own prefill kernel timed both ways at the step's shape (prompts of `length`, `tokens` / `length` of them,
        heads per GPU; measured_kernels.measured_fp8_kv_prefill_ratio), 1 for a 16-bit cache or where the engine's
        table holds no FP8 rows. Why not the FP8 forward rate of FlashAttention-3's paper ("FP16 reaching up to 740
        TFLOPs/s (75% utilization), and with FP8 reaching close to 1.2 PFLOPs/s", arXiv 2407.08608, dense tensors,
        kernels.Device.attention_rate(fp8=True) doubles the rate likewise): vLLM's FA3 path quantizes
        the query to FP8 and runs the FP8 kernel over the paged FP8 cache (vllm-project/vllm@0084b783bcda:
        vllm/v1/attention/backends/flash_attn.py, FlashAttentionImpl.forward: ``ops.scaled_fp8_quant(query, ...)``
        then ``flash_attn_varlen_func(..., q_descale, k_descale, v_descale)``; FP8 only with FA3 on compute
        capability 9, vllm@0fa99d44d842:vllm/attention/utils/fa_utils.py flash_attn_supports_fp8), and that kernel,
        timed inside vLLM by aiconfigurator (ai-dynamo/aiconfigurator@5ef50c9b971e:collector/vllm/collect_attn.py:
        impl.forward on a paged cache, the cache write included, the query handed in as FP8), runs 3-35 % slower
        than its BF16 one on H100 and H200 (1k-32k tokens, GQA 4:1 and 8:1), where TensorRT-LLM's FP8 context
        kernel runs 3-33 % faster, and vLLM's FlashInfer prefill on B200 up to 26 % slower at 1k tokens, 5-12 %
        faster from 8k."""
        if self.est.kv_dtype != "fp8" or not self.table_attention or tokens <= 0 or self.xformers_fp8:
            return 1.0  # (XFormers' prompt attention reads the step's own 16-bit K/V, not the cache)
        spec = self.spec
        seq = three_figures(max(1.0, length))
        return measured_fp8_kv_prefill_ratio(PrefillShape(
            gpu=self.gpu, batch=max(1, round(tokens / seq)), seq=seq, heads=spec.n_heads // self.tp,
            kv_heads=max(1, spec.n_kv_heads // self.tp), head_dim=spec.d_head))

    def fp8_kv_words(self, length: int) -> str:
        """What the step assumed of an FP8 KV cache, in words ("" for a 16-bit one): the measured kernels it read
        (``decode_attention_seconds``, ``fp8_kv_prefill_factor`` at one prompt of `length`), or the roofline."""
        if self.est.kv_dtype != "fp8":
            return ""
        if self.spec.mla is not None and (self.mla_key() or self.mla_parts()):
            return f"MLA attention from {kernel_tables.source(self.gpu)}'s measured FP8-cache rows"
        if self.xformers_fp8:
            return XFORMERS_FP8_WORDS
        if not self.table_attention:
            return ("decode attention: the cached FP8 bytes at the HBM roofline; prefill attention as with a 16-bit "
                    "cache (no measured FP8 kernel for this GPU and engine)")
        return (f"attention over the FP8 cache as {kernel_tables.source(self.gpu)}'s measured kernels time it: "
                f"decode from their FP8 rows, prefill x{self.fp8_kv_prefill_factor(length, length):.2f} of the "
                f"16-bit kernel at one {length:,}-token prompt")

    def allreduce_seconds(self, tokens: float) -> float:
        """Tensor parallelism's all-reduces: after attention and after the MLP in every layer (Megatron's row-
        parallel outputs, vLLM's RowParallelLinear), of the tokens' activations, d_model x 2 bytes each; on an xGMI
        mesh (AMD Instinct) vLLM's custom all-reduce as cdna.custom_allreduce_seconds times it; on PCIe-only GPUs NCCL
        past two GPUs (comm.Network.custom_allreduce)."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        nbytes = tokens * self.spec.d_model * self.act_bytes
        net = self.dev.network
        # vLLM's custom all-reduce up to its limit on one node; PCIe-only GPUs only as a peer-to-peer pair, else NCCL
        # (comm.Network.custom_allreduce: vLLM's CustomAllreduce disables itself on more than two PCIe-only GPUs)
        custom = nbytes <= CUSTOM_ALLREDUCE_MAX_BYTES and self.tp <= net.gpus_per_node and \
            net.custom_allreduce(self.tp, self.pcie_pairs)
        one = None
        if self.measured and not comm.pcie_host_bound(net, self.tp):  # the engine's all-reduce and NCCL's, measured
            with contextlib.suppress(kernel_tables.KernelTableError):
                one = kernel_tables.allreduce_seconds(self.gpu, nbytes, self.tp, "custom" if custom else "nccl")
        if one is None and custom and net.topology == "mesh":  # xGMI (AMD Instinct): one- or two-stage, measured
            one = cdna.custom_allreduce_seconds(nbytes, self.tp, net.link_bandwidth)
        elif one is None and custom:
            one = CUSTOM_ALLREDUCE_LATENCY + nbytes * (self.tp - 1) / self.tp / net.scale_up_rate(
                self.tp, "all_gather", self.tp)
        elif one is None:
            one = comm.Collective("tp", "all_reduce", self.tp, nbytes).seconds(net)
        return 2 * self.spec.n_layers * (one + TP_SYNC_SECONDS)

    def overhead_seconds(self) -> float:
        """The fitted per-step constants (ENGINE_STEP_SECONDS + LAYER_FLOOR_SECONDS per layer)."""
        return ENGINE_STEP_SECONDS + LAYER_FLOOR_SECONDS * self.spec.n_layers

    def seconds(self, tokens: float, rows: float, kv_tokens: float, decodes: float, pairs: float,
                length: float) -> float:
        """One step of `tokens` scheduled tokens, `rows` of them sampling, `decodes` decoding sequences over
        `kv_tokens` cached tokens, prefill chunks with `pairs` causal (query, key) pairs of prompts of `length`."""
        return (self.linear_seconds(tokens) + self.head_seconds(rows)
                + self.decode_attention_seconds(kv_tokens, decodes)
                + self.prefill_attention_seconds(pairs, length, tokens=tokens - decodes)
                + self.allreduce_seconds(tokens) + self.overhead_seconds())


# --- the engine ----------------------------------------------------------------------------------------------


def _weighted(samples: list[tuple[float, float]], q: float) -> float:
    """The q-quantile of (value, weight) samples."""
    samples = sorted(samples)
    total = sum(w for _, w in samples)
    seen = 0.0
    for value, weight in samples:
        seen += weight
        if seen >= q * total:
            return value
    return samples[-1][0]


def _stats(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    total = sum(w for _, w in samples)
    return (sum(v * w for v, w in samples) / total, _weighted(samples, 0.5), _weighted(samples, 0.99))


def _arrivals(work: Workload, prompts: int) -> list[float]:
    """vllm bench serve's Poisson arrivals at `request_rate` (seeded: every run alike), or none (all at once)."""
    if work.request_rate is None:
        return []
    rng, t, out = random.Random(0), 0.0, []
    for _ in range(prompts):
        out.append(t)
        t += rng.expovariate(work.request_rate)
    return out


def _new_groups(work: Workload, lengths: tuple[tuple[int, int], ...] | None, start: int, count: int,
                arrival: float) -> list[Group]:
    """Requests start .. start + count - 1 of `work` (their `lengths`, or all alike) sent at `arrival`, neighbours
    alike in length as one group."""
    if lengths is None:
        return [Group(count, arrival, work.input_len, work.output_len)] if count else []
    out: list[Group] = []
    for i in range(start, start + count):
        n_in, n_out = lengths[i % len(lengths)]
        if out and (out[-1].n_in, out[-1].n_out) == (n_in, n_out):
            out[-1].n += 1
        else:
            out.append(Group(1, arrival, n_in, n_out))
    return out



def run_seconds(first: float, last: float, steps: int, floor: float = 0.0) -> float:
    """Seconds of `steps` steps whose times run linearly from `first` to `last` (a decode run: each step one cached
    token more per sequence), none faster than `floor` (the API server's pace for its tokens):
    sum over j = 0 .. steps - 1 of max(first + (last - first) j / (steps - 1), floor); steps (first + last) / 2
    where the floor binds nowhere."""
    if steps == 1 or first == last:
        return steps * max(first, floor)
    if min(first, last) >= floor:
        return steps * (first + last) / 2
    slope = (last - first) / (steps - 1)
    cross = (floor - first) / slope  # step j is above the floor past it (rising) or before it (falling)
    if slope > 0:
        lo, hi = min(steps, max(0, math.ceil(cross))), steps
    else:
        lo, hi = 0, min(steps, max(0, math.floor(cross) + 1))
    above = hi - lo
    return (steps - above) * floor + above * first + slope * (lo + hi - 1) * above / 2


# a decode run's inter-token gaps are sampled in parts whose step times spread by at most this fraction (``run_gaps``)
RUN_GAP_SPREAD = 0.002


def run_gaps(first: float, last: float, steps: int, floor: float, sequences: int) -> list[tuple[float, float]]:
    """A decode run's inter-token gaps as (gap, tokens) samples (``run_seconds``' steps): the run cut into equal
    parts whose step times spread by at most RUN_GAP_SPREAD, each part's mean step for its steps' tokens, so that a
    median over runs sees how the steps spread (off by at most half of RUN_GAP_SPREAD)."""
    parts = min(steps, max(1, math.ceil(abs(last - first) / (RUN_GAP_SPREAD * min(first, last)))))
    out: list[tuple[float, float]] = []
    done = 0
    slope = (last - first) / (steps - 1) if steps > 1 else 0.0
    for i in range(1, parts + 1):
        end = steps * i // parts
        n = end - done
        out.append((run_seconds(first + slope * done, first + slope * (end - 1), n, floor) / n, sequences * n))
        done = end
    return out


# a decode run's step time is read at most this share of the mean context apart (``decode_run_seconds``)
RUN_PIECE_GROWTH = 1 / 16


def decode_run_seconds(cost: StepCost, base: float, kv_tokens: float, sequences: int, steps: int,
                       floor: float) -> tuple[float, list[tuple[float, float]]]:
    """Seconds of a run of `steps` decode steps of `sequences` over `kv_tokens` cached tokens, the first taking
    `base`, none faster than `floor` (``run_seconds``), and its inter-token gap samples (``run_gaps``). Each step
    caches one token more per sequence, and only decode attention reads them: the step time is read at knots no
    further apart than RUN_PIECE_GROWTH of the mean context, base plus the growth of decode attention, and taken
    linear between them (exact where attention is linear in the cached tokens; the measured tables are piecewise
    linear in context, and held by utilisation past their edge, so a piece is off by its curvature alone)."""
    if steps == 1:
        return max(base, floor), [(max(base, floor), sequences)]
    at, context = cost.decode_attention_seconds, kv_tokens / sequences
    start = at(kv_tokens, sequences)
    knots, values = [0], [base]
    while knots[-1] < steps - 1:
        knots.append(min(steps - 1, knots[-1] + max(1, math.floor((context + knots[-1]) * RUN_PIECE_GROWTH))))
        values.append(base + at(kv_tokens + sequences * knots[-1], sequences) - start)
    total, gaps = 0.0, []
    for i in range(len(knots) - 1):
        final = i == len(knots) - 2  # the last piece holds its last knot's step too
        n = knots[i + 1] - knots[i] + final
        last = values[i + 1] if final else values[i] + (values[i + 1] - values[i]) * (n - 1) / n
        total += run_seconds(values[i], last, n, floor)
        gaps += run_gaps(values[i], last, n, floor, sequences)
    return total, gaps



def multi_step_seconds(steps: int) -> float:
    """What the host's work takes off a pass of `steps` decode steps under vLLM V0's multi-step scheduling: the
    scheduler, input preparation and output processing (ENGINE_STEP_SECONDS a step) run once a pass instead of once a
    step (vllm-project/vllm#7000: "amortize the CPU overhead of scheduling, preparing inputs and processing outputs
    over N steps"; the GPU advances the batch itself between the steps, worker/multi_step_model_runner.py
    _advance_step), so ENGINE_STEP_SECONDS x (steps - 1)."""
    return ENGINE_STEP_SECONDS * (steps - 1)


def multi_step_pass(seconds: float, gaps: list[tuple[float, float]], steps: int) -> tuple[float, list]:
    """A decode run timed step by step (`seconds`, its inter-token `gaps`) as one multi-step pass of `steps` steps:
    less the host's work saved (``multi_step_seconds``), shared evenly by its steps."""
    saved = multi_step_seconds(steps)
    return seconds - saved, [(gap - saved / steps, tokens) for gap, tokens in gaps]


def simulate(cost: StepCost, work: Workload, max_num_seqs: int, token_budget: int,  # long: one event loop
             kv: KvBudget, policy: SchedulerPolicy | None = None, step_by_step: bool = False) -> Simulated:
    """An engine's scheduler over `work` on one replica (module docstring; `policy`: the engine's, vLLM V1's by
    default): running requests first (a decode token each, or the next chunk of a prefill), the latest preempted
    when the cache cannot hold the next step's tokens (preempt), then waiting ones first come first served while
    `max_num_seqs`, `token_budget` and the KV blocks their admission needs (`kv`, SchedulerPolicy.admission) allow;
    an engine that does not mix (SchedulerPolicy.mixed False) runs a prefill-only step whenever it can, else a
    decode step. Steps that only decode, with nothing to admit, are advanced together up to the next request that
    finishes (or arrives, or would outgrow the cache), their time summed along the run's growing context
    (``decode_run_seconds``: exact where a step's time is linear in the cached tokens between its knots, off by
    the measured table's curvature otherwise); `step_by_step` times every step on its own instead (tests hold the
    two within 0.5 %). Requests of varied lengths (work.requests()) are simulated each with its own."""
    policy = policy or engines.POLICIES["vllm"]
    kv = kv.memoized()
    if policy.chunk_blocks:  # vLLM V1 allocates a prefill's blocks chunk by chunk (allocate_slots(num_new_tokens))
        kv = KvBudget(blocks=kv.blocks, need=kv.need, reach=token_budget, period=kv.period)
    ratio, whole_below = policy.init_ratio, 0 if policy.chunked else token_budget
    prompts, lengths = work.num_prompts, work.requests()
    serial = work.served and work.intake_seconds > 0 and work.max_concurrency is None  # a queued intake (closed: not)
    sends = _arrivals(work, prompts) or ([0.0] * prompts if serial else [])
    arrivals = intake_ends(sends, work.intake_seconds) if serial else sends  # the engine's; clients count from sends
    api = REQUEST_SECONDS + (0.0 if serial else work.intake_seconds) if work.served else 0.0  # a client sees it
    limit = min(max_num_seqs, work.max_concurrency or max_num_seqs)
    clients = work.max_concurrency if work.max_concurrency is not None else prompts
    sent = 0 if arrivals else min(clients, prompts)
    waiting: list[Group] = [] if arrivals else _new_groups(work, lengths, 0, sent, 0.0)
    in_flight = sent  # sent by a client and not finished (a closed loop caps it)
    running: list[Group] = []
    ttft: list[tuple[float, float]] = []
    tpot: list[tuple[float, float]] = []
    itl: list[tuple[float, float]] = []
    e2e: list[tuple[float, float]] = []
    t, busy_seq_time, steps, done, next_arrival = 0.0, 0.0, 0, 0, 0
    tokens_in = tokens_out = 0
    carried: Held | None = None  # the running groups counted for the next step (Held.advanced)
    while done < prompts:
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= t and in_flight < clients:
            waiting += _new_groups(work, lengths, next_arrival, 1, sends[next_arrival])
            next_arrival, in_flight = next_arrival + 1, in_flight + 1
        queued = len(waiting)
        counted = preempt(running, waiting, kv, keep_prefill=policy.prefix_cache, ahead=policy.multi_step,
                          counted=carried)
        carried = None
        used = held = counted.blocks  # blocks after the step
        preempted = len(waiting) > queued  # (preempt moves each preempted group to the waiting queue's head)
        count = counted.count
        if policy.admission == "ratio" and preempted:  # SGLang's retraction
            ratio = retracted_ratio(running, policy)
        if policy.admission != "prompt":
            used = reserved_blocks(running, kv, policy, ratio)
        whole = policy.mixed and not counted.prefilling and counted.decodes <= token_budget
        if whole:  # every running one decodes
            step = StepLoad.all_decoding(running, counted, policy.first_in_decode)
            scheduled, budget = list(running), token_budget - counted.decodes
        else:
            step = StepLoad(policy.first_in_decode)
            scheduled, budget = schedule_running(running, token_budget, step, decodes=policy.mixed)
        slots = Slots(count, limit, kv, used, policy)  # (schedule_running's splits keep the count)
        # vLLM V1 admits no waiting request in a step that preempted (SchedulerPolicy.admit_after_preempt)
        admitted = admit(waiting, running, scheduled, budget if policy.admit_after_preempt or not preempted else 0,
                          slots, whole_below=whole_below)
        if not scheduled and running:  # nothing to prefill (an engine that does not mix): decode the running
            step = StepLoad(policy.first_in_decode)
            scheduled, _ = schedule_running(running, token_budget, step)
        if not scheduled:  # idle until the next arrival
            if next_arrival < len(arrivals):
                t = max(t, arrivals[next_arrival])
                continue
            raise LlmcalcError("the engine could schedule nothing (a bug: please report)")
        step.tally(scheduled)
        prefilling, decoding, dec, kv_tokens = step.prefilling, step.decoding, step.decodes, step.kv_tokens
        # every running request decodes this step, as one group each: no group splits or comes alike to another
        # (a preemption only took groups off the queue's tail, or requests out of its last group)
        uniform = not prefilling and len(decoding) == len(running)
        base = cost.seconds(tokens=step.tokens, rows=step.rows, kv_tokens=kv_tokens, decodes=dec,
                            length=step.length, pairs=step.pairs)
        # steps that only decode and admit nothing: advance to the next finish (or arrival, or a full cache) at once
        if policy.multi_step > 1:  # vLLM V0's multi-step pass: N steps, arrivals wait for it (a prefill: one step)
            jump = 1 if prefilling else policy.multi_step
        elif prefilling or step_by_step or (waiting and slots.take(waiting[0]) >= 1):  # (room for a waiting one)
            jump = 1
        else:
            jump = decode_run(decoding, kv, held, int(step.least_left), alone=uniform,
                              tally=counted.tally if uniform else None)  # (uniform: the decodes Held tallied)
            if waiting and policy.admission == "ratio":
                jump = min(jump, RATIO_JUMP)
            if step.first_token:  # a first token comes with the next step alone
                jump = 1
            if next_arrival < len(arrivals) and jump > 1:
                jump = max(1, min(jump, math.ceil((arrivals[next_arrival] - t) / base)))
        pace = 0.0  # clients get each step's tokens as fast as the API server streams them (FRONTEND_TOKEN_...)
        if work.served:
            firsts = sum(g.n for g in prefilling if g.prefilled + g.chunk >= g.target and not g.generated)
            pace = (dec + firsts) * FRONTEND_TOKEN_SECONDS
        dt, gaps = decode_run_seconds(cost, base, kv_tokens, dec, steps=jump, floor=pace)
        if policy.multi_step > 1 and not prefilling:
            dt, gaps = multi_step_pass(dt, gaps, jump)
        t, steps, busy_seq_time = t + dt, steps + jump, busy_seq_time + dt * admitted
        ends = jump >= step.least_left  # a decode finishes with this step (or a prefill's first token, below)
        for g in prefilling:
            g.prefilled += g.chunk
            # the prefill's last position samples a token: the first (unless the engine samples it in a decode
            # step, SchedulerPolicy.first_in_decode), or the next after a recompute
            if g.decoding and (g.generated or not policy.first_in_decode):
                if not g.generated:
                    g.first = t
                    ttft.append((t - g.arrival + api, g.n))
                g.generated += 1
            ends = ends or g.decoding and g.generated >= g.n_out
        if decoding:
            itl += gaps
            ratio = max(policy.min_ratio, ratio - policy.ratio_decay * jump)
        for g in decoding:
            if not g.generated:  # its first token, from its first decode step (SchedulerPolicy.first_in_decode)
                g.first = t
                ttft.append((t - g.arrival + api, g.n))
            g.generated += jump
        if jump > step.least_left:  # a multi-step pass runs past a finish
            for g in decoding:
                g.generated = min(g.generated, g.n_out)
        ended = [g for g in scheduled if g.generated >= g.n_out and g.decoding] if ends else []
        for g in ended:  # (the others ran no step)
            running.remove(g)
            done, in_flight = done + g.n, in_flight - g.n
            tokens_in, tokens_out = tokens_in + g.n * g.n_in, tokens_out + g.n * g.n_out
            e2e.append((t - g.arrival + api, g.n))
            if g.n_out > 1:  # vllm bench serve's calculate_metrics: TPOT over requests of more than one token
                tpot.append(((t - g.first) / (g.n_out - 1), g.n))
            if not arrivals and work.max_concurrency is not None and sent < prompts:  # the clients send again
                more = min(g.n, prompts - sent)
                waiting += _new_groups(work, lengths, sent, more, t)
                sent, in_flight = sent + more, in_flight + more
        before = len(running)
        running = running if uniform else merged(running)
        # after a step in which every running group decoded (and any admitted prefilled whole, none merging), the
        # next step's count is this one's carried on
        carried = counted.advanced(jump, ended, running, policy.multi_step, joined=prefilling) if (
            counted.tally and policy.multi_step == 1 and (uniform or whole and len(running) == before and all(
                g.decoding for g in prefilling))) else None
    return Simulated(duration=t, completed=done, ttft=_stats(ttft), tpot=_stats(tpot or [(0.0, 1.0)])[:2],
                     itl=_stats(itl or [(0.0, 1.0)])[:2], e2e=_stats(e2e)[:2],
                     mean_running=busy_seq_time / t if t else 0.0, output_tokens=tokens_out,
                     input_tokens=tokens_in, steps=steps, last_first_token=max(v for v, _ in ttft))


# --- the answer --------------------------------------------------------------------------------------------------

ENGINES = tuple(engines.PROFILES)  # each engine's defaults, tables and step: engines.py


def fitted_constants() -> tuple[tuple[str, float], ...]:
    """The four fitted constants as a run reads them (bench_serving_speed.py --fit sets them here), by JSON name."""
    return (("engine_step_seconds", ENGINE_STEP_SECONDS), ("layer_floor_seconds", LAYER_FLOOR_SECONDS),
            ("tp_sync_seconds", TP_SYNC_SECONDS), ("request_seconds", REQUEST_SECONDS))


def kv_budget(est: ServeEstimate) -> KvBudget:
    """The replica's KV cache as the scheduler admits into it (KvBudget): its blocks, and the blocks a request of a
    given length holds in every group (vLLM's kv_cache_utils, the most over the pipeline stages); a model without KV
    (pure state-space) holds max_num_seqs requests, its state per sequence. A windowed layer holds its window plus
    the tokens in flight beyond it (``ServeEstimate.admission_tokens``: vLLM's reserve by version)."""
    tokens = est.admission_tokens
    stages = [s.groups for s in est.stages if s.groups]
    if not stages:
        return KvBudget.requests(est.batch_defaults[1])

    @functools.cache  # the scheduler asks the same few lengths every step of a run (simulate's admission checks)
    def need(length: int) -> int:
        return max(sum(g.blocks_per_request(length, tokens) for g in groups) for groups in stages)

    return KvBudget(blocks=est.kv_blocks, need=need, period=kv_period(stages))


def kv_period(stages: list) -> tuple[int, int] | None:
    """KvBudget.period of these stages' KV groups (vllm.KvGroup.blocks_per_request): a whole-context group (full
    attention, MLA) holds ceil(length / block_size) blocks, so P tokens more (P the least common multiple of the
    block sizes) add P / block_size blocks; a state group holds one block whatever the length; a stage adds the sum
    of its groups', and the most over the stages grows by that much only where every stage adds the same. None where
    a group is windowed (sliding, chunked: its blocks stop growing past the window)."""
    if any(g.kind not in ("full", "mla", "state") for groups in stages for g in groups):
        return None
    period = math.lcm(*(g.block_size for groups in stages for g in groups if g.kind != "state"))
    growth = {sum(period // g.block_size for g in groups if g.kind != "state") for groups in stages}
    return (period, growth.pop()) if len(growth) == 1 else None


def kv_requests(est: ServeEstimate, length: int) -> int:
    """Requests of `length` tokens the replica's KV cache holds at once: its blocks over the blocks one request needs
    (``kv_budget``)."""
    budget = kv_budget(est)
    return max(0, budget.blocks // budget.need(length))


def plan_workload(est: ServeEstimate, work: Workload, engine: str = "vllm", engine_version: str | None = None,
                  policy: SchedulerPolicy | None = None, num_scheduler_steps: int = 1) -> Performance:
    """`serve --input-len I --output-len O [--max-concurrency C | --request-rate R]`: one replica of `est` (a
    ServeEstimate: its layout, dtypes, KV blocks and engine defaults) serving `work` as `engine` runs it (its
    scheduler, engines.scheduler_policy, unless `policy` is given; `num_scheduler_steps`: vLLM V0's multi-step
    scheduling, engines.multi_step_policy)
    (engines.py: its scheduler defaults, KV memory, tables, and --pp / --enable-expert-parallel)."""
    prof = engines.profile(engine, engine_version)
    length = max([work.input_len + work.output_len, *(i + o for i, o in work.requests() or ())])
    if length > est.max_model_len:
        raise LlmcalcError(f"--input-len {work.input_len:,} + --output-len {work.output_len:,}: {length:,} tokens "
                           f"exceed --max-model-len {est.max_model_len:,}, which vLLM refuses per request; raise "
                           "--max-model-len or shorten the request")
    try:
        dev = device_for(est.accelerator.key)
    except LlmcalcError:
        from .kernels import steptime_presets

        raise LlmcalcError(f"--gpu {est.accelerator.key}: its preset has no matmul and network blocks, which the "
                           f"workload's step time needs (presets with them: {', '.join(steptime_presets())}); leave "
                           "out --input-len/--output-len for the memory and the roofline") from None
    inference = est.roofline(1, work.input_len)
    # trtllm-bench's run: every request at once, in-process; a burst through the API server is trtllm-serve's
    offline = work.max_concurrency is None and work.request_rate is None and not work.served
    base = StepCost(inference, dev, est.tp)
    # vLLM's V0 ran an FP8 cache on XFormers, not the FP8 kernels the tables timed (vllm.fp8_kv_on_xformers)
    base.xformers_fp8 = prof.name == "vllm" and est.kv_dtype == "fp8" and fp8_kv_on_xformers(est.version, dev.arch)
    cost = engines.step_cost(base, engines.served_profile(prof, offline), est, host=ENGINE_STEP_SECONDS)
    policy = engines.multi_step_policy(policy or engines.scheduler_policy(prof, est, offline), prof, est,
                                       num_scheduler_steps)
    longest_input = max([work.input_len, *(i for i, _ in work.requests() or ())])
    tokens, seqs = engines.batch_limits(prof, est, work.input_len, work.output_len, offline=offline,
                                        longest_input=longest_input)
    share = engines.kv_share(prof, est)
    held = math.floor(kv_requests(est, length) * share)
    clients = work.max_concurrency
    if held < 1:
        run = Simulated(duration=math.inf, completed=0, ttft=(math.inf,) * 3, tpot=(math.inf,) * 2,
                        itl=(math.inf,) * 2, e2e=(math.inf,) * 2, mean_running=0.0, output_tokens=0, input_tokens=0,
                        steps=0)
    else:
        budget = kv_budget(est)  # the engine's share of the memory vLLM would give the cache (engines.kv_share)
        run = simulate(cost, work, seqs, tokens, KvBudget(blocks=math.floor(budget.blocks * share), need=budget.need,
                                                          period=budget.period), policy=policy)
    running = max(1.0, min(run.mean_running, held, seqs, clients or seqs))
    context = work.input_len + work.output_len // 2
    roof = est.roofline(max(1, round(running)), work.input_len)
    return Performance(engine=engine, engine_version=prof.version or est.version.key, work=work, kv_requests=held,
                       max_num_seqs=seqs, max_num_batched_tokens=tokens, run=run,
                       roofline_ttft=est.roofline(1, work.input_len).prefill.seconds,
                       roofline_tpot=roof.decode_step(context).seconds,
                       scheduler=engines.scheduler_words(prof, est, offline, policy.multi_step), kv_share=share,
                       chunked=policy.chunked, w4a16=marlin_words(inference, dev),
                       fp8_kv=cost.fp8_kv_words(work.input_len), frontend_token_seconds=FRONTEND_TOKEN_SECONDS,
                       fitted=fitted_constants())


@dataclass(frozen=True)
class WorkloadPlan:
    """`serve --input-len --output-len`: the replica as vLLM sizes it and its speed at each workload asked."""

    serve: ServeEstimate
    performance: tuple[Performance, ...]

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.performance)

    @property
    def warnings(self) -> list[str]:
        return self.serve.warnings


def plan_workloads(est: ServeEstimate, input_len: int, output_len: int, max_concurrency: tuple[int, ...] | None = None,
                   request_rate: float | None = None, num_prompts: int = 1000, engine: str = "vllm",
                   engine_version: str | None = None, dataset: str = "random",
                   random_range_ratio: float = 0.0, progress: Callable[[], None] | None = None,
                   num_scheduler_steps: int = 1) -> WorkloadPlan:
    """One Performance per --max-concurrency value (or one for the rate / offline run) on one replica of `est`,
    `progress` called after each.
    Requests longer than the KV cache holds are refused as vLLM refuses to start ("To serve at least one request
    with the model's max seq len ... the estimated maximum model length is ..."): one line naming the options and the
    longest request that fits; weights that leave no KV cache at all are a plan that does not fit (`fits` false)."""
    served = served_offline(engine) or bool(max_concurrency) or request_rate is not None  # trtllm-bench: in-process
    works = [Workload(input_len, output_len, max_concurrency=c, request_rate=request_rate, num_prompts=num_prompts,
                      dataset=dataset, random_range_ratio=random_range_ratio, served=served)
             for c in max_concurrency or (None,)]
    length = max([input_len + output_len, *(i + o for i, o in works[0].requests() or ())])
    if est.kv_cache_bytes > 0 and length <= est.max_model_len and kv_requests(est, length) < 1:
        longest = est.longest_fitting_len()
        raise LlmcalcError(f"--input-len {input_len:,} + --output-len {output_len:,}: {length:,} tokens per request: "
                           f"the KV cache of {est.tp} x {est.accelerator.key} holds {est.kv_cache_tokens:,} tokens, "
                           f"the longest request that fits is {longest:,} tokens, and vLLM refuses to start; shorten "
                           "the request, add GPUs (--n-gpus) or use --kv-dtype fp8")
    done = []
    for work in works:
        done.append(plan_workload(est, work, engine, engine_version, num_scheduler_steps=num_scheduler_steps))
        if progress is not None:
            progress()
    return WorkloadPlan(est, tuple(done))
