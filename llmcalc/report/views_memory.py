"""What `memory` and `infer` show: per-GPU training memory by component, fits-or-not, the inference roofline."""

from __future__ import annotations

from ..analytic.inference import QUANTISATION_NOTES, InferenceEstimate, expected_experts, state_bytes_per_sequence
from ..analytic.memory import MemoryEstimate
from ..hardware import Accelerator
from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_bytes, fmt_flops, fmt_seconds


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
            + (f"{(capacity - per_gpu) / GIB:,.2f} GiB free" if fits
               else f"{(per_gpu - capacity) / GIB:,.2f} GiB over"))
    return {"fits": fits, "capacity_bytes": capacity, "device": gpu.key}, [line]


def training_memory_document(est: MemoryEstimate, gpu: Accelerator | None, reserve: float = 0.0) -> Document:
    spec, rec, opt, par = est.spec, est.recipe, est.optimizer, est.parallel
    components = est.components()
    peak = est.peak
    per_param = {"weights": rec.weight_bytes, "gradients": rec.grad_bytes, "master_weights": rec.master_bytes,
                 "optimizer_states": opt.bytes_per_param(rec)}
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
    notes = _recipe_notes(est, per_param) + _layout_notes(est) + fit_lines
    if largest is not None:
        notes.append(f"largest micro-batch that fits at seq {est.seq_len:,}: {largest:,}")
    table = Table(
        "memory per GPU",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("bytes", "memory (GiB)", _gib), Column("share", "share of peak (%)", _share)],
        rows, notes,
    )
    title = (f"{spec.name}: training memory per GPU, micro-batch {est.batch:,} x seq "
             f"{est.seq_len:,}, {rec.name} + {opt.name}, "
             f"recompute {est.recompute}")
    return Document(title, data, [table, _activations_table(est)], [spec.describe()])


def _recipe_notes(est: MemoryEstimate, per_param: dict[str, float]) -> list[str]:
    """What the bytes per parameter and the peak are made of, for this recipe and optimizer."""
    rec, opt = est.recipe, est.optimizer
    return [
        f"recipe {rec.name}: {rec.description}",
        f"optimizer {opt.name}: {per_param['optimizer_states']:g} bytes/param"
        + (f" ({opt.source})" if opt.source else ""),
        f"bytes per parameter: weights {rec.weight_bytes:g} + gradients {rec.grad_bytes:g} + master "
        f"{rec.master_bytes:g} + optimizer {per_param['optimizer_states']:g} = {sum(per_param.values()):g}",
        "peak = the largest of: end of forward (weights + master + optimizer + activations + logits/loss), with "
        "full recomputation the blocks' backward (the logits freed, one block rebuilt, every gradient), and the "
        "optimizer step (weights + master + optimizer + gradients + optimizer temporaries)",
        f"optimizer step implementation {est.optimizer_impl}: fused kernels allocate no scratch; torch's foreach "
        "AdamW a state-sized copy of every parameter; its for-loop path two of the largest tensor",
        "memory in GiB (2^30 bytes); the CUDA context and allocator fragmentation are not included",
    ]


def _layout_notes(est: MemoryEstimate) -> list[str]:
    """How the model is split over the GPUs (parallel degrees, experts, KV heads under tensor parallelism)."""
    spec, par = est.spec, est.parallel
    kv_heads = spec.n_kv_heads
    assert kv_heads is not None  # ModelSpec.__post_init__ resolves it (default: n_heads)
    notes = []
    if par.n_gpus > 1:
        notes.append(f"{par.n_gpus:,} GPUs = dp {par.dp:,} x tp {par.tp} x pp {par.pp}; ZeRO-{par.zero} shards over dp"
                     + (f"; figures for the {est.stage} pipeline stage, the most loaded" if par.pp > 1 else "")
                     + ("; tensor parallel with sequence parallelism" if par.tp > 1 and par.sequence_parallel
                        else "; tensor parallel without sequence parallelism" if par.tp > 1 else ""))
    if spec.is_moe and (par.ep > 1 or par.expert_tp != par.tp):
        notes.append(f"MoE: routed experts split over ep {par.ep} (each GPU holds {spec.n_experts // par.ep} of "
                     f"{spec.n_experts} experts per MoE layer, 1/{par.expert_tp} of each: etp {par.expert_tp}), "
                     f"their states ZeRO-sharded over the expert data-parallel group tp x dp / (etp x ep) = "
                     f"{par.expert_dp}; the router, shared experts and attention follow tp and dp")
    elif spec.is_moe:
        notes.append("MoE: every expert's weights on every GPU (ep 1; --ep splits them)")
    if par.tp > kv_heads and not spec.is_mla:
        notes.append(f"tp {par.tp} > {kv_heads} KV heads: each rank keeps one KV head of K and V activations "
                     f"(replicated {par.tp // kv_heads}x), never split below one")
    return notes


def _activations_table(est: MemoryEstimate) -> Table:
    """The saved activations by tensor, largest first."""
    rec = est.recipe
    return Table(
        "activations by saved tensor (all layers on this GPU)",
        [Column("name", "saved tensor", align="left"), Column("bytes", "memory (GiB)", _gib)],
        [{"name": k, "bytes": v} for k, v in sorted(est.activations.per_layer.items(), key=lambda kv: -kv[1])],
        [f"attention {est.attention}; recompute {est.recompute}; activations at {rec.act_bytes:g} bytes/element; "
         "tensor names follow Korthikanti et al. 2022 sec. 4.1"]
        + (["FP8 (Transformer Engine): the inputs of the linear layers are saved as their 1-byte FP8 casts"]
           if rec.fp8_saved_inputs else []),
    )


def serving_conventions(est: InferenceEstimate) -> list[str]:
    """The conventions an inference roofline rests on, for this model and parallel layout."""
    spec, tp = est.spec, est.n_gpus
    kv_heads = spec.n_kv_heads
    assert kv_heads is not None  # ModelSpec.__post_init__ resolves it (default: n_heads)
    lines = []
    if est.weight_dtype in QUANTISATION_NOTES:
        lines.append(QUANTISATION_NOTES[est.weight_dtype] + "; embeddings, LM head, norms and router stay 16-bit")
    if spec.is_moe:
        E, k = spec.n_experts, spec.n_experts_per_token
        lines.append(f"MoE decode reads only the experts the step's routed tokens hit: expected distinct experts per "
                     f"layer E·(1 - (1 - k/E)^b) under uniform routing (E = {E}, k = {k}): "
                     f"{expected_experts(spec, 1):g} at batch 1 (the active parameters)"
                     + (f", {expected_experts(spec, est.batch):.2f} at batch {est.batch}" if est.batch != 1 else ""))
    if spec.kv_lora_rank is not None and spec.qk_rope_head_dim is not None:  # MLA
        lines.append("MLA: decode in the absorbed form (DeepSeek-V2 sec. 2.1.2: W_UK folded into the query, W_UV into "
                     "the output), attending over the cached latent it reads (kv_lora_rank + qk_rope_head_dim = "
                     f"{spec.kv_lora_rank + spec.qk_rope_head_dim} per token and layer); prefill in the plain form")
    if tp > 1:
        if spec.is_mla:
            lines.append(f"tensor parallel over {tp} GPUs: query heads split; the MLA latent cache is replicated on "
                         "every rank (not split)")
        elif tp > kv_heads:
            lines.append(f"tensor parallel over {tp} GPUs: {kv_heads} "
                         f"KV head{'s' if kv_heads > 1 else ''}"
                         f" for {tp} ranks, so each rank keeps one KV head (replicated {tp // kv_heads}x), "
                         "never split below one; KV cache and K/V weights per GPU follow")
        else:
            lines.append(f"tensor parallel over {tp} GPUs: {kv_heads // tp} of {kv_heads} KV heads per "
                         "rank")
    return lines


def infer_document(est: InferenceEstimate) -> Document:
    pre = est.prefill
    first = est.decode_step(est.prompt + 1)
    last = est.decode_step(est.prompt + est.generate - 1)
    with_kv = est.compute_bound_batch()
    without_kv = est.compute_bound_batch(with_kv=False)
    data = {
        "model": est.spec.name, "device": est.accelerator.key, "n_gpus": est.n_gpus, "batch_size": est.batch,
        "prompt": est.prompt, "generate": est.generate, "weight_dtype": est.weight_dtype, "kv_dtype": est.kv_dtype,
        "compute_dtype": est.compute_dtype, "weights_bytes": est.weights, "weights_bytes_per_gpu": est.weights_per_gpu,
        "kv_cache_bytes": est.kv_cache, "kv_cache_bytes_per_token": est.kv_per_token,
        "kv_cache_bytes_per_token_per_gpu": est.kv_per_token_per_gpu,
        "state_bytes_per_sequence_per_gpu": state_bytes_per_sequence(est.spec, est.n_gpus),
        "prefill_seconds": pre.seconds, "prefill_flops": pre.flops * est.n_gpus, "prefill_bytes_per_gpu": pre.bytes,
        "prefill_bound": pre.bound, "time_to_first_token_seconds": pre.seconds,
        "decode_seconds_per_token": est.decode_seconds_per_token, "decode_seconds": est.decode_seconds,
        "decode_tokens_per_second": est.decode_tokens_per_second, "decode_bound_first": first.bound,
        "decode_bound_last": last.bound, "decode_weight_bytes_per_gpu": est.weights_read(est.batch),
        "total_seconds": est.total_seconds, "tokens_per_second": est.tokens_per_second,
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
    bw = est.accelerator.memory_bandwidth / 1e12
    per_gpu = " per GPU" if est.n_gpus > 1 else ""
    notes = [
        f"roofline{per_gpu}: time = max(FLOPs / {est.accelerator.peak(est.compute_dtype) / 1e12:,.4g} TFLOP/s "
        f"dense {est.compute_dtype}, bytes / {bw:.3g} TB/s); an upper bound on speed",
        f"prefill (causal): {fmt_seconds(pre.seconds)} to the first token; decode: "
        f"{fmt_seconds(est.decode_seconds_per_token)} per step on "
        f"average, {est.decode_tokens_per_second:,.0f} tokens/s "
        f"for the batch of {est.batch} (a closed-form sum over the growing context)",
        f"whole request: {fmt_seconds(est.total_seconds)}, {est.tokens_per_second:,.0f} generated tokens/s",
        (f"decode turns compute-bound at batch {with_kv:,.0f} at context {est.prompt:,}" if with_kv else
         f"decode stays memory-bound at any batch at context {est.prompt:,}: each sequence's KV-cache read takes "
         f"longer than its FLOPs")
        + (f"; ignoring the KV cache it would turn compute-bound at batch {without_kv:,.0f}" if without_kv else ""),
    ] + serving_conventions(est)
    table = Table(
        "roofline" + (f" (one of {est.n_gpus} GPUs)" if est.n_gpus > 1 else ""),
        [Column("phase", "phase", align="left"), Column("flops", "FLOPs", lambda v: fmt_flops(v)),
         Column("bytes", "bytes moved", fmt_bytes), Column("compute", "compute time", fmt_seconds),
         Column("memory", "memory time", fmt_seconds), Column("time", "time", fmt_seconds),
         Column("bound", "bound", align="left")],
        rows, notes,
    )
    title = (f"{est.spec.name} on {est.n_gpus} x {est.accelerator.key}: batch {est.batch}, prompt {est.prompt:,}, "
             f"generate {est.generate:,}, weights {est.weight_dtype}, KV {est.kv_dtype}")
    tokens = est.batch * (est.prompt + est.generate)
    return Document(title, data, [table], [f"weights {fmt_bytes(est.weights)}"
                                           + (f" ({fmt_bytes(est.weights_per_gpu)} per GPU)" if est.n_gpus > 1 else "")
                                           + f"; KV cache at the end {fmt_bytes(est.kv_cache)} for {tokens:,} tokens"
                                           + _state_note(est)])


def _state_note(est: InferenceEstimate) -> str:
    """Hybrid/state-space models: the recurrent state beside the KV cache (empty otherwise)."""
    state = state_bytes_per_sequence(est.spec, est.n_gpus)
    return (f"; recurrent state {fmt_bytes(state * est.batch)} (conv + SSM state of the Mamba/DeltaNet/conv "
            f"layers, {fmt_bytes(state)} per sequence{' per GPU' if est.n_gpus > 1 else ''}), constant in context "
            f"length" if state else "")
