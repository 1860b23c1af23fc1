"""What `memory` and `infer` show: per-GPU memory by component, fits-or-not, the inference roofline."""

from __future__ import annotations

from ..analytic.inference import InferenceEstimate
from ..analytic.memory import MemoryEstimate
from ..hardware import Accelerator
from ..units import fmt_bytes, fmt_flops, fmt_seconds
from .tables import Column, Document, Table

GIB = 2**30


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f}"


def _share(value: float) -> str:
    return f"{value * 100:.1f} %"


def _fit_rows(per_gpu: float, gpu: Accelerator | None, reserve: float) -> tuple[dict, list[str]]:
    if gpu is None:
        return {}, []
    capacity = gpu.memory_bytes - reserve
    fits = per_gpu <= capacity
    line = (f"{'fits' if fits else 'does NOT fit'} on {gpu.key} ({gpu.memory_bytes / GIB:g} GiB"
            + (f" - {reserve / GIB:g} GiB reserve" if reserve else "") + "): "
            + (f"{(capacity - per_gpu) / GIB:,.2f} GiB free" if fits else f"{(per_gpu - capacity) / GIB:,.2f} GiB over"))
    return {"fits": fits, "capacity_bytes": capacity, "device": gpu.key}, [line]


def training_memory_document(est: MemoryEstimate, gpu: Accelerator | None, reserve: float = 0.0) -> Document:
    spec, rec, opt, par = est.spec, est.recipe, est.optimizer, est.parallel
    components = est.components()
    peak = est.peak
    opt_bytes = opt.bytes_per_param(rec)
    per_param = {"weights": rec.weight_bytes, "gradients": rec.grad_bytes, "master_weights": rec.master_bytes,
                 "optimizer_states": opt_bytes}
    fit, fit_lines = _fit_rows(peak, gpu, reserve)
    largest = est.largest_micro_batch(fit["capacity_bytes"]) if gpu else None
    data = {
        "model": spec.name, "mode": "training", "batch_size": est.batch, "seq_len": est.seq_len,
        "recipe": rec.name, "optimizer": opt.name, "optimizer_impl": est.optimizer_impl,
        "recompute": est.recompute, "attention": est.attention,
        "parallel": {"n_gpus": par.n_gpus, "dp": par.dp, "tp": par.tp, "pp": par.pp, "zero": par.zero,
                     "sequence_parallel": par.sequence_parallel},
        "pipeline_stage": est.stage, "params_on_gpu": est.params_on_gpu,
        "bytes_per_param": {**per_param, "total": sum(per_param.values())},
        "per_gpu_bytes": peak, "peak_phase": est.peak_phase, "sum_of_components_bytes": sum(components.values()),
        "model_states_bytes": est.model_states,
        "components": components, "activations": est.activations.per_layer,
        "activation_bytes_per_sample": est.activation_bytes_per_sample(),
        **fit, "largest_micro_batch": largest,
    }
    rows = [{"kind": "component", "name": k, "bytes": v, "share": v / peak} for k, v in components.items() if v]
    rows.append({"kind": "total", "name": f"peak per GPU ({est.peak_phase})", "bytes": peak, "share": 1.0})
    notes = [
        f"recipe {rec.name}: {rec.description}",
        f"optimizer {opt.name}: {opt.bytes_per_param(rec):g} bytes/param" + (f" ({opt.source})" if opt.source else ""),
        f"bytes per parameter: weights {rec.weight_bytes:g} + gradients {rec.grad_bytes:g} + master "
        f"{rec.master_bytes:g} + optimizer {opt_bytes:g} = {sum(per_param.values()):g}",
        "peak = max(end of forward: weights + master + optimizer + activations + logits/loss, optimizer step: "
        "weights + master + optimizer + gradients + optimizer temporaries); gradients and activations are not "
        "alive together",
        f"optimizer step implementation {est.optimizer_impl}: fused kernels allocate no scratch; torch's foreach "
        "AdamW a state-sized copy of every parameter; its for-loop path two of the largest tensor",
        "memory in GiB (2^30 bytes); the CUDA context and allocator fragmentation are not included",
    ]
    if par.n_gpus > 1:
        notes.append(f"{par.n_gpus} GPUs = dp {par.dp} x tp {par.tp} x pp {par.pp}; ZeRO-{par.zero} shards over dp"
                     + (f"; figures for the {est.stage} pipeline stage, the most loaded" if par.pp > 1 else "")
                     + ("; tensor parallel with sequence parallelism" if par.tp > 1 and par.sequence_parallel
                        else "; tensor parallel without sequence parallelism" if par.tp > 1 else ""))
    if spec.is_moe:
        notes.append("MoE: every expert's weights on every GPU (no expert parallelism modelled)")
    notes += fit_lines
    if largest is not None:
        notes.append(f"largest micro-batch that fits at seq {est.seq_len}: {largest}")
    table = Table(
        "memory per GPU",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("bytes", "memory (GiB)", _gib), Column("share", "share of peak (%)", _share)],
        rows, notes,
    )
    acts = Table(
        "activations by saved tensor (all layers on this GPU)",
        [Column("name", "saved tensor", align="left"), Column("bytes", "memory (GiB)", _gib)],
        [{"name": k, "bytes": v} for k, v in sorted(est.activations.per_layer.items(), key=lambda kv: -kv[1])],
        [f"attention {est.attention}; recompute {est.recompute}; activations at {rec.act_bytes:g} bytes/element; "
         "tensor names follow Korthikanti et al. 2022 sec. 4.1"],
    )
    title = (f"{spec.name}: training memory per GPU, batch {est.batch} x seq {est.seq_len}, {rec.name} + {opt.name}, "
             f"recompute {est.recompute}")
    return Document(title, data, [table, acts], [spec.describe()])


def inference_memory_document(spec, components: dict[str, float], batch: int, context: int, kv_per_token: float,
                              gpu: Accelerator | None, inputs: dict, reserve: float = 0.0,
                              largest: int | None = None) -> Document:
    total = sum(components.values())
    fit, fit_lines = _fit_rows(total, gpu, reserve)
    data = {"model": spec.name, "mode": "inference", **inputs, "batch_size": batch, "context": context,
            "per_gpu_bytes": total, "components": components, "kv_cache_bytes": components["KV cache"],
            "recurrent_state_bytes": components.get("recurrent state", 0.0),
            "kv_cache_bytes_per_token": kv_per_token, **fit, "largest_batch": largest}
    rows = [{"kind": "component", "name": k, "bytes": v, "share": v / total} for k, v in components.items()]
    rows.append({"kind": "total", "name": "total per GPU", "bytes": total, "share": 1.0})
    notes = [
        f"KV cache: {fmt_bytes(kv_per_token)} per token ({inputs['kv_dtype']}) x {context:,} tokens x batch {batch}"
        + (" (MLA: compressed latent + RoPE key)" if spec.is_mla else
           f" = 2 x {spec.n_attention_layers} {'attention ' if spec.is_hybrid else ''}layers x {spec.n_kv_heads} "
           f"KV heads x {spec.d_head} x bytes"),
        f"weights at {inputs['weight_dtype']} (quantisation scales not included); prefill working set for a chunk of "
        f"{inputs['prefill_chunk']:,} tokens (chunked prefill)",
    ] + ([f"recurrent state: {fmt_bytes(components['recurrent state'] / batch)} per sequence (conv + SSM state of "
           f"the Mamba layers, {inputs['kv_dtype']}), constant in context length"]
         if "recurrent state" in components else []) + fit_lines + ([f"largest batch that fits at {context:,} tokens: {largest}"] if largest is not None else [])
    table = Table(
        "inference memory per GPU",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("bytes", "memory (GiB)", _gib), Column("share", "share (%)", _share)],
        rows, notes,
    )
    return Document(f"{spec.name}: inference memory, batch {batch} x {context:,} tokens", data, [table],
                    [spec.describe()])


def infer_document(est: InferenceEstimate) -> Document:
    pre = est.prefill
    first = est.decode_step(est.prompt + 1)
    last = est.decode_step(est.prompt + est.generate - 1)
    with_kv = est.compute_bound_batch()
    without_kv = est.compute_bound_batch(with_kv=False)
    data = {
        "model": est.spec.name, "device": est.accelerator.key, "n_gpus": est.n_gpus, "batch_size": est.batch,
        "prompt": est.prompt, "generate": est.generate, "weight_dtype": est.weight_dtype, "kv_dtype": est.kv_dtype,
        "compute_dtype": est.compute_dtype, "weights_bytes": est.weights, "kv_cache_bytes": est.kv_cache,
        "kv_cache_bytes_per_token": est.kv_per_token, "recurrent_state_bytes": est.recurrent_state,
        "recurrent_state_bytes_per_sequence": est.state_per_sequence,
        "prefill_seconds": pre.seconds, "prefill_flops": pre.flops, "prefill_bytes": pre.bytes, "prefill_bound": pre.bound,
        "time_to_first_token_seconds": pre.seconds,
        "decode_seconds_per_token": est.decode_seconds_per_token, "decode_seconds": est.decode_seconds,
        "decode_tokens_per_second": est.decode_tokens_per_second, "decode_bound_first": first.bound,
        "decode_bound_last": last.bound, "total_seconds": est.total_seconds,
        "tokens_per_second": est.tokens_per_second,
        "compute_bound_batch": with_kv, "compute_bound_batch_ignoring_kv": without_kv,
    }
    rows = [
        {"phase": "prefill", "flops": pre.flops, "bytes": pre.bytes, "compute": pre.compute_seconds,
         "memory": pre.memory_seconds, "time": pre.seconds, "bound": pre.bound},
        {"phase": f"decode step (context {est.prompt + 1:,})", "flops": first.flops, "bytes": first.bytes,
         "compute": first.compute_seconds, "memory": first.memory_seconds, "time": first.seconds, "bound": first.bound},
        {"phase": f"decode step (context {est.prompt + est.generate - 1:,})", "flops": last.flops, "bytes": last.bytes,
         "compute": last.compute_seconds, "memory": last.memory_seconds, "time": last.seconds, "bound": last.bound},
    ]
    bw = est.accelerator.memory_bandwidth * est.n_gpus / 1e12
    notes = [
        f"roofline: time = max(FLOPs / {est.accelerator.peak(est.compute_dtype) * est.n_gpus / 1e12:,.4g} TFLOP/s "
        f"dense {est.compute_dtype}, bytes / {bw:.3g} TB/s); an upper bound on speed",
        f"prefill (causal): {fmt_seconds(pre.seconds)} to the first token; decode: "
        f"{fmt_seconds(est.decode_seconds_per_token)} per step on average, {est.decode_tokens_per_second:,.0f} tokens/s "
        f"for the batch of {est.batch}",
        f"whole request: {fmt_seconds(est.total_seconds)}, {est.tokens_per_second:,.0f} generated tokens/s",
        (f"decode turns compute-bound at batch {with_kv:,.0f} at context {est.prompt:,}" if with_kv else
         f"decode stays memory-bound at any batch at context {est.prompt:,}: each sequence's KV-cache read "
         + ("and recurrent-state read/write take " if est.recurrent_state else "takes ") + "longer than its FLOPs")
        + f"; ignoring the KV cache it would turn compute-bound at batch {without_kv:,.0f}",
    ]
    table = Table(
        "roofline",
        [Column("phase", "phase", align="left"), Column("flops", "FLOPs", lambda v: fmt_flops(v)),
         Column("bytes", "bytes moved", fmt_bytes), Column("compute", "compute time", fmt_seconds),
         Column("memory", "memory time", fmt_seconds), Column("time", "time", fmt_seconds),
         Column("bound", "bound", align="left")],
        rows, notes,
    )
    title = (f"{est.spec.name} on {est.n_gpus} x {est.accelerator.key}: batch {est.batch}, prompt {est.prompt:,}, "
             f"generate {est.generate:,}, weights {est.weight_dtype}, KV {est.kv_dtype}")
    tokens = est.batch * (est.prompt + est.generate)
    state = (f"; recurrent (Mamba) state {fmt_bytes(est.recurrent_state)}, constant in context length, read and "
             f"written every decode step" if est.recurrent_state else "")
    return Document(title, data, [table], [f"weights {fmt_bytes(est.weights)}; KV cache at the end "
                                           f"{fmt_bytes(est.kv_cache)} for {tokens:,} tokens" + state])
