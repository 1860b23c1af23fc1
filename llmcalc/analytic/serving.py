"""Serving capacity on a tensor-parallel group, the way vLLM sizes its paged KV cache, and the
roofline throughput against the number of concurrent sequences.

What is mirrored from vLLM (v1 engine: vllm/v1/worker/gpu_worker.py determine_available_memory,
vllm/v1/core/kv_cache_utils.py get_num_blocks and get_max_concurrency_for_kv_cache_config,
vllm/engine/arg_utils.py get_batch_defaults):
- usable memory per GPU = total memory x gpu_memory_utilization;
- KV cache memory = usable - weights on the GPU - the activation peak of the profiling run;
- a block (page) holds block_size tokens of every layer's KV on this GPU:
  block bytes = block_size x KV bytes per token per GPU (KV heads split by tp, at least one per rank);
- KV blocks = floor(KV cache memory / block bytes);
- a request of max_model_len tokens needs ceil(max_model_len / block_size) blocks; vLLM logs
  "Maximum concurrency for N tokens per request: (KV blocks / blocks per request)x" and
  "GPU KV cache size: KV blocks x block_size tokens";
- the profiling run pushes max_num_batched_tokens tokens through the model and samples
  max_num_seqs sequences: `vllm serve` defaults (8192, 1024) on GPUs with >= 70 GiB other than the
  A100, else (2048, 256).
Not modelled: non-torch memory (CUDA context, NCCL buffers; vLLM logs ~0.3-0.5 GiB) and CUDA-graph
memory, so the KV blocks here are an upper bound of what vLLM finds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..dtypes import dtype_bytes
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..spec import ModelSpec
from ..units import GIB
from .inference import (
    InferenceEstimate,
    check_tp,
    context_warning,
    default_compute_dtype,
    kv_cache_bytes_per_token,
    kv_cache_bytes_per_token_per_gpu,
    kv_heads_per_gpu,
    resolve_dtypes,
    state_bytes_per_sequence,
)


def batch_defaults(accelerator: Accelerator) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` picks them for this device."""
    if accelerator.memory_bytes >= 70 * GIB and "a100" not in accelerator.key.lower():
        return 8192, 1024
    return 2048, 256


def profile_activation_bytes(spec: ModelSpec, tokens: int, seqs: int, act_dtype: str, tp: int) -> float:
    """Activation peak of vLLM's profiling run on one GPU: the largest FFN transient of one block over
    `tokens` tokens (input, gate and up outputs, their product: T·(D + 3F/tp); plain MLPs
    T·(D + 2F/tp); MoE: the k routed experts' width), plus the dummy sampler's fp32 logits for
    `seqs` sequences over the whole vocabulary (gathered, B·V·4)."""
    moe_width = spec.d_ff_expert * spec.n_experts_per_token + spec.d_ff_shared if spec.is_moe else 0
    width = moe_width if spec.is_moe and spec.n_moe_layers == spec.n_layers else max(spec.d_ff, moe_width)
    ffn = (3 if spec.gated else 2) * width / tp
    return tokens * (spec.d_model + ffn) * dtype_bytes(act_dtype) + seqs * spec.vocab_size * 4


def vllm_max_concurrency(kv_blocks: int, max_model_len: int, block_size: int) -> float:
    """vLLM's 'Maximum concurrency for N tokens per request': KV blocks / ceil(N / block_size)."""
    return kv_blocks / -(-max_model_len // block_size)


@dataclass(frozen=True)
class ServeEstimate:
    """A model served by vLLM-style paged attention on `tp` GPUs (tensor parallel)."""

    spec: ModelSpec
    accelerator: Accelerator
    tp: int
    max_model_len: int
    gpu_memory_utilization: float = 0.9
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str = "bf16"
    block_size: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise LlmcalcError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization:g}")
        for name in ("max_model_len", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LlmcalcError(f"{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")

    @property
    def warnings(self) -> list[str]:
        """A max length past the model's trained positions (the figures are computed anyway)."""
        line = context_warning(self.spec, self.max_model_len)
        return [line] if line else []

    def roofline(self, concurrency: int, prompt: int, generate: int = 2) -> InferenceEstimate:
        return InferenceEstimate(self.spec, self.accelerator, concurrency, prompt, generate=generate,
                                 weight_dtype=self.weight_dtype,
                                 kv_dtype=self.kv_dtype, compute_dtype=self.compute_dtype, n_gpus=self.tp)

    @cached_property
    def _one(self) -> InferenceEstimate:
        return self.roofline(1, self.max_model_len)

    @property
    def weights_bytes_per_gpu(self) -> float:
        return self._one.weights_per_gpu

    @property
    def kv_bytes_per_token(self) -> float:
        return kv_cache_bytes_per_token(self.spec, self.kv_dtype)

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return kv_cache_bytes_per_token_per_gpu(self.spec, self.kv_dtype, self.tp)

    @property
    def kv_heads_per_gpu(self) -> int:
        return kv_heads_per_gpu(self.spec, self.tp)

    @property
    def kv_replicated(self) -> bool:
        """KV heads (or MLA's latent) held whole by more than one rank."""
        return self.tp > 1 and (self.spec.is_mla or self.tp > self.spec.n_kv_heads)

    @property
    def kv_block_bytes(self) -> float:
        return self.block_size * self.kv_bytes_per_token_per_gpu

    @property
    def state_bytes_per_sequence(self) -> float:
        return state_bytes_per_sequence(self.spec, self.tp)

    @property
    def usable_bytes(self) -> float:
        return self.accelerator.memory_bytes * self.gpu_memory_utilization

    @property
    def batch_defaults(self) -> tuple[int, int]:
        return batch_defaults(self.accelerator)

    @property
    def activation_bytes(self) -> float:
        tokens, seqs = self.batch_defaults
        act = "fp16" if self.compute_dtype == "fp16" else "bf16"
        return profile_activation_bytes(self.spec, tokens, seqs, act, self.tp)

    @property
    def kv_cache_bytes(self) -> float:
        """Memory left for the KV cache on each GPU (negative: the weights alone do not fit)."""
        return self.usable_bytes - self.weights_bytes_per_gpu - self.activation_bytes

    @property
    def kv_blocks(self) -> int:
        if not self.kv_block_bytes:  # no attention layer (pure Mamba): no KV cache, only per-sequence state
            return 0
        return max(0, math.floor(self.kv_cache_bytes / self.kv_block_bytes))

    @property
    def kv_cache_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def blocks_per_sequence(self) -> int:
        return -(-self.max_model_len // self.block_size)

    @property
    def vllm_max_concurrency(self) -> float:
        """vLLM's logged 'Maximum concurrency for N tokens per request': KV blocks / blocks per request."""
        return vllm_max_concurrency(self.kv_blocks, self.max_model_len, self.block_size)

    @property
    def max_concurrent_sequences(self) -> int:
        """Whole sequences of max_model_len tokens that fit at once (with any constant per-sequence state)."""
        per_sequence = self.blocks_per_sequence * self.kv_block_bytes + self.state_bytes_per_sequence
        return max(0, math.floor(max(self.kv_cache_bytes, 0.0) / per_sequence))

    @property
    def concurrency_levels(self) -> list[int]:
        """1, 2, 4, ... up to the KV limit, and the limit itself."""
        top = self.max_concurrent_sequences
        levels = [2**i for i in range(top.bit_length()) if 2**i < top]
        return levels + [top] if top else []

    @property
    def decode_context(self) -> int:
        """Decode is taken with every sequence at max_model_len tokens: the KV limit's own case."""
        return self.max_model_len

    def throughput(self) -> list[dict]:
        """Per concurrency level: prefilling that many max-length prompts together, and a decode step
        with every sequence at max_model_len tokens of context."""
        rows = []
        for b in self.concurrency_levels:
            est = self.roofline(b, self.max_model_len)
            step = est.decode_step(self.decode_context)
            pre = est.prefill
            rows.append({"concurrency": b, "prefill_seconds": pre.seconds,
                         "prefill_tokens_per_second": b * self.max_model_len / pre.seconds,
                         "decode_seconds_per_token": step.seconds, "tokens_per_second": b / step.seconds,
                         "decode_bound": step.bound})
        return rows

    def longest_fitting_len(self) -> int:
        """vLLM's estimate_max_model_len: the longest request one sequence's blocks can hold."""
        return self.kv_blocks * self.block_size


def plan_serving(spec: ModelSpec, accelerator: Accelerator, tp: int = 1, max_model_len: int | None = None,
                 gpu_memory_utilization: float = 0.9, weight_dtype: str = "bf16", kv_dtype: str | None = None,
                 compute_dtype: str | None = None, block_size: int = 16) -> ServeEstimate:
    """`llmcalc serve`: a decoder on `tp` GPUs (vLLM's TP rule), dtypes checked against the device, requests of
    `max_model_len` tokens (default: the model's max_position_embeddings)."""
    if spec.architecture != "decoder":
        raise LlmcalcError(f"serve covers decoder-only models; {spec.name} is {spec.architecture}")
    check_tp(spec, tp)
    weight, kv, compute = resolve_dtypes(accelerator, weight_dtype, kv_dtype, compute_dtype)
    if max_model_len is None:
        if spec.max_seq_len is None:
            raise LlmcalcError(f"{spec.name}'s config gives no max_position_embeddings; pass --max-model-len")
        max_model_len = spec.max_seq_len
    return ServeEstimate(spec, accelerator, tp, max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                         weight_dtype=weight, kv_dtype=kv, compute_dtype=compute, block_size=block_size)


def smallest_serving_group(spec: ModelSpec, gpu: Accelerator, max_model_len: int,
                           kv_dtype: str) -> ServeEstimate | None:
    """The fewest tensor-parallel GPUs (1, 2, 4, 8, 16) of `gpu` that hold one `max_model_len` request, bf16
    weights and vLLM's defaults (the report's serving section)."""
    for tp in (1, 2, 4, 8, 16):
        try:
            check_tp(spec, tp)
            weight, kv, compute = resolve_dtypes(gpu, "bf16", kv_dtype, default_compute_dtype("bf16", gpu))
        except LlmcalcError:
            continue
        est = ServeEstimate(spec, gpu, tp, max_model_len, gpu_memory_utilization=0.9, weight_dtype=weight,
                            kv_dtype=kv, compute_dtype=compute)
        if est.max_concurrent_sequences >= 1:
            return est
    return None
