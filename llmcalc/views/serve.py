"""What `serve` shows: weights and paged KV cache per GPU as vLLM sizes them, concurrency at the max length,
throughput and latency against concurrency."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_bytes, fmt_seconds, plural
from .infer import serving_conventions
from .memory import _gib

if TYPE_CHECKING:
    from ..analytic.serving import ServeEstimate


def document(est: ServeEstimate) -> Document:
    return serve_document(est)


def serve_document(est: ServeEstimate) -> Document:
    spec, gpu, tp = est.spec, est.accelerator, est.tp
    tokens, seqs = est.batch_defaults
    throughput = est.throughput()
    data = {
        "model": spec.name, "device": gpu.key, "n_gpus": tp, "max_model_len": est.max_model_len,
        "gpu_memory_utilization": est.gpu_memory_utilization, "weight_dtype": est.weight_dtype,
        "kv_dtype": est.kv_dtype, "compute_dtype": est.compute_dtype, "block_size": est.block_size,
        "memory_bytes_per_gpu": gpu.memory_bytes, "usable_bytes_per_gpu": est.usable_bytes,
        "weights_bytes_per_gpu": est.weights_bytes_per_gpu, "activation_peak_bytes_per_gpu": est.activation_bytes,
        # never negative bytes: what the weights and activations lack is its own key
        "kv_cache_memory_bytes_per_gpu": max(est.kv_cache_bytes, 0.0),
        "memory_deficit_bytes_per_gpu": max(-est.kv_cache_bytes, 0.0),
        "fits": est.kv_cache_bytes > 0 and est.max_concurrent_sequences > 0,
        "kv_bytes_per_token": est.kv_bytes_per_token, "kv_bytes_per_token_per_gpu": est.kv_bytes_per_token_per_gpu,
        "kv_heads_per_gpu": est.kv_heads_per_gpu, "kv_replicated": est.kv_replicated,
        "state_bytes_per_sequence_per_gpu": est.state_bytes_per_sequence,
        "kv_block_bytes": est.kv_block_bytes, "kv_blocks": est.kv_blocks, "kv_cache_tokens": est.kv_cache_tokens,
        "blocks_per_sequence": est.blocks_per_sequence, "vllm_max_concurrency": est.vllm_max_concurrency,
        "max_concurrent_sequences": est.max_concurrent_sequences, "decode_context": est.decode_context,
        "profile_max_num_batched_tokens": tokens, "profile_max_num_seqs": seqs,
        "throughput": throughput,
    }
    title = (f"{spec.name} served on {tp} x {gpu.key}: max length {est.max_model_len:,}, weights {est.weight_dtype}, "
             f"KV {est.kv_dtype}, block {est.block_size}")
    preamble = [f"{plural(est.max_concurrent_sequences, 'concurrent sequence')} of {est.max_model_len:,} tokens "
                f"({plural(est.kv_cache_tokens, 'KV token')} in {plural(est.kv_blocks, 'block')} per GPU)",
                spec.describe()]
    return Document(title, data, [_throughput_table(est, throughput), _memory_table(est)], preamble)


def _memory_table(est: ServeEstimate) -> Table:
    """Per-GPU memory as vLLM divides it: usable, weights, activation peak, what is left for the KV cache."""
    gpu, tp = est.accelerator, est.tp
    rows = [
        {"name": f"usable ({est.gpu_memory_utilization:g} x {gpu.memory_bytes / GIB:g} GiB)",
         "bytes": est.usable_bytes},
        {"name": f"weights ({est.weight_dtype})", "bytes": est.weights_bytes_per_gpu},
        {"name": "activation peak (profiling run)", "bytes": est.activation_bytes},
        {"name": f"KV cache ({plural(est.kv_blocks, 'block')} of {plural(est.block_size, 'token')})",
         "bytes": max(est.kv_cache_bytes, 0.0)},
    ]
    return Table(f"memory per GPU (one of {tp})" if tp > 1 else "memory per GPU",
                 [Column("name", "item", align="left"), Column("bytes", "memory (GiB)", _gib)], rows,
                 _memory_notes(est))


def _kv_formula(est: ServeEstimate) -> str:
    """The KV cache bytes per token per GPU, written out (MLA's latent, or K and V per KV head)."""
    spec = est.spec
    if spec.mla is not None:
        return (f"MLA latent: {spec.n_layers} layers x ({spec.mla.kv_lora_rank} + {spec.mla.qk_rope_head_dim}) x "
                f"{est.kv_dtype} bytes, whole on every GPU")
    return (f"2 (K, V) x {spec.n_attention_layers} {'attention ' if spec.is_hybrid else ''}layers x "
            f"{est.kv_heads_per_gpu} KV head"
            f"{'s' if est.kv_heads_per_gpu > 1 else ''} per GPU x {spec.d_head} x {est.kv_dtype} bytes")


def _memory_notes(est: ServeEstimate) -> list[str]:
    """How the KV cache is sized (vLLM v1's rule) and, first, whether a request fits at all."""
    tokens, seqs = est.batch_defaults
    notes = [
        f"KV cache per token: {est.kv_bytes_per_token:,.0f} B for the whole model, "
        f"{est.kv_bytes_per_token_per_gpu:,.0f} B per GPU "
        f"({_kv_formula(est)}); a block holds {est.block_size} tokens = {est.kv_block_bytes:,.0f} B per GPU",
        f"a {est.max_model_len:,}-token request needs {plural(est.blocks_per_sequence, 'block')} "
        f"({fmt_bytes(est.blocks_per_sequence * est.kv_block_bytes)} per GPU); vLLM would log \"GPU KV cache size: "
        f"{est.kv_cache_tokens:,} tokens\" and \"Maximum concurrency for {est.max_model_len:,} tokens per request: "
        f"{est.vllm_max_concurrency:.2f}x\"",
        "mirrors vLLM v1: KV memory = total x gpu_memory_utilization - weights - activation peak of the profiling "
        f"run ({tokens:,} batched tokens, {seqs:,} sampled sequences: vllm serve's defaults for this GPU); "
        "KV blocks = floor(KV memory / block bytes); concurrency = KV blocks / ceil(max_model_len / block_size)",
        "not modelled: non-torch memory (CUDA context, NCCL buffers) and CUDA graphs, so KV blocks are an upper bound",
    ] + ([f"recurrent state: {fmt_bytes(est.state_bytes_per_sequence)} per sequence per GPU (conv + SSM state of the "
          f"Mamba/DeltaNet/conv layers, bf16), constant in context length, held beside each sequence's KV blocks"]
         if est.state_bytes_per_sequence else []) + serving_conventions(est.roofline(1, est.max_model_len))
    if est.kv_cache_bytes <= 0:
        notes.insert(0, f"does NOT fit: the weights and activations need {fmt_bytes(-est.kv_cache_bytes)} more than "
                        f"the usable memory; add GPUs or quantise")
    elif est.max_concurrent_sequences == 0:
        notes.insert(0, f"no {est.max_model_len:,}-token request fits in the KV cache; the longest that does is "
                        f"{est.longest_fitting_len():,} tokens (lower --max-model-len or add GPUs)")
    return notes


def _throughput_table(est: ServeEstimate, throughput: list[dict]) -> Table:
    notes = [f"roofline per GPU on {est.accelerator.key}, dense {est.compute_dtype} peak; prefill: that many "
             f"{est.max_model_len:,}-token prompts at once (causal); decode: one step with every sequence at "
             f"{est.decode_context:,} tokens of context, the KV limit's own case; an upper bound on speed"]
    return Table(
        "throughput and latency against concurrent sequences",
        [Column("concurrency", "sequences"),
         Column("prefill_seconds", "prefill (time to first token)", fmt_seconds),
         Column("prefill_tokens_per_second", "prefill (tokens/s)", lambda v: f"{v:,.0f}"),
         Column("decode_seconds_per_token", "decode step (s/token)", fmt_seconds),
         Column("tokens_per_second", "decode (tokens/s)", lambda v: f"{v:,.0f}"),
         Column("decode_bound", "decode bound", align="left")],
        throughput, notes,
    )
