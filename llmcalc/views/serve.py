"""What `serve` shows: the weights as shipped, the memory vLLM sees per GPU, its KV groups, concurrency at the max
length, throughput and latency against concurrency; and the layout search of `serve --concurrency`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard

from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_bytes, fmt_gib, fmt_seconds, plural
from .infer import checkpoint_line, serving_conventions

if TYPE_CHECKING:
    from ..analytic.measured import FfnLayer
    from ..analytic.measured_serving import MeasuredServe
    from ..analytic.serving import CapacityPlan, ServeEstimate
    from ..analytic.serving_sizing import SizingPlan
    from ..analytic.serving_speed import Performance, Workload, WorkloadPlan


def _is_measured(est: ServeEstimate) -> TypeGuard[MeasuredServe]:
    """Whether `est` is what transformers measured. A MeasuredServe exists only once its module is imported, so a
    formula model's `serve` does not import it (start-up)."""
    module = sys.modules.get("llmcalc.analytic.measured_serving")
    return module is not None and isinstance(est, module.MeasuredServe)


def document(est: ServeEstimate) -> Document:
    return serve_document(est)


def _layout(est: ServeEstimate) -> str:
    if est.pp == 1 and est.dp == 1:
        return f"{est.tp} x {est.accelerator.key}"
    return (f"tp {est.tp} x pp {est.pp} x dp {est.dp}" + (" (expert parallel)" if est.expert_parallel else "")
            + f" = {est.n_gpus} x {est.accelerator.key}")


def group_rows(est: ServeEstimate) -> list[dict[str, Any]]:
    tokens = est.admission_tokens
    rows = []
    for i, g in enumerate(est.groups):
        need = g.blocks_per_request(est.max_model_len, tokens)
        rows.append({"group": i, "kind": g.kind, "layers": g.layers, "padding_layers": g.padding, "span": g.span,
                     "kv_bytes_per_token_per_layer": g.bytes_per_token, "block_size": g.block_size,
                     "page_bytes": g.page_bytes, "blocks_per_request": need,
                     "bytes_per_request": need * g.page_bytes * (g.layers + g.padding)})
    return rows


def _peak_source(layers: list[FfnLayer], d_model: int, vocab: int) -> str:
    """The profiling run's transient as measured: the dense MLP and MoE widths of the layers (hf_measure._ffn)."""
    dense = sorted({f.dense_width for f in layers if f.dense_width})
    moe = sorted({(m.top_k, m.n_experts, m.up_width, m.inner, m.shared_width) for f in layers if (m := f.moe)})
    parts = []
    if dense:
        parts.append(f"dense MLP width {' / '.join(f'{w:,}' for w in dense)} (colwise output rows + rowwise input "
                     "columns per layer, transformers' tensor-parallel plan)")
    for k, e, up, inner, shared in moe:
        parts.append(f"MoE: {k} of {e} experts per token (the router's top_k_index), fused-MoE widths {up:,} (colwise "
                     f"experts) and {inner:,} (rowwise)" + (f", shared experts {shared:,}" if shared else ""))
    return (f"the profiling forward's largest block transient: {'; '.join(parts)}; + 3 x {d_model:,} (the "
            f"embedding's width) per token; the sampler over the LM head's {vocab:,} rows")


def _measured_from(est: ServeEstimate) -> dict[str, str]:
    """What each figure of a model transformers measured comes from (the JSON's `measured_from`)."""
    from ..analytic.measured_serving import MeasuredServe, ffn_layers

    assert isinstance(est, MeasuredServe)
    model = est.model
    return {
        "weights": f"the {len(model.tensors)} parameter tensors of {model.cls} built by transformers "
                   f"{model.transformers_version}: the layer stack's matrices at {est.weight_dtype}"
                   + (" (the quantization_config by each tensor's module name)" if est.weights.quant else "")
                   + ", embeddings, head, norms and biases at 16 bits, vocabulary rows padded to 64 (vLLM's "
                   "VocabParallelEmbedding); the rotary cos/sin cache vLLM makes at load: "
                   + (", ".join(f"{p:,} positions x {d}" for p, d in model.rotary_tables()) or "no rotary table")
                   + f" x {est.weights.base} bytes (the rotary tables transformers built)"
                   + (f"; per GPU split over {est.tp} ranks by transformers' tensor-parallel plan, the embedding and "
                      "head by vocabulary rows, K/V projections by their KV heads (vLLM's QKVParallelLinear, "
                      "replicated past them)" if est.tp > 1 else ""),
        "kv_cache": f"the elements per token of each of the {len(model.kv)} layers of the cache transformers "
                    f"allocated ({', '.join(sorted({k.cache_class for k in model.kv}))}) at {est.kv_dtype}; a layer "
                    "that stopped growing is a sliding window of its cap + 1 tokens (vLLM's hybrid allocator groups "
                    "these records)",
        "activation_peak": _peak_source(ffn_layers(model), est.d_model, est.vocab_size),
        "throughput": "the roofline of `infer`'s measured model (FlopCounterMode's decode step)",
    }


def serve_document(est: ServeEstimate) -> Document:
    measured = _is_measured(est)
    spec, gpu, tp = est.spec, est.accelerator, est.tp
    tokens, seqs = est.batch_defaults
    speed = speed_note(gpu)
    throughput = est.throughput() if speed is None else None
    groups = group_rows(est)
    data = {
        "model": spec.name, "device": gpu.key, "n_gpus": tp, "pp": est.pp, "dp": est.dp,
        "enable_expert_parallel": est.expert_parallel, "n_gpus_total": est.n_gpus,
        "vllm_version": est.version.key, "max_model_len": est.max_model_len, "enforce_eager": est.enforce_eager,
        "language_model_only": est.language_model_only,
        "vision_tower_params": est.vision.params if est.vision is not None else 0,
        "encoder_profile_items": est.encoder_items,
        "gpu_memory_utilization": est.utilization, "weight_dtype": est.weight_dtype,
        "weight_format": est.weights.describe(), "weight_dtype_typed": est.weights.typed,
        "kv_dtype": est.kv_dtype, "compute_dtype": est.compute_dtype, "block_size": est.block,
        "memory_bytes_per_gpu": gpu.memory_bytes, "cuda_visible_bytes_per_gpu": gpu.usable_bytes,
        "usable_bytes_per_gpu": est.usable_bytes,
        "weights_bytes_per_gpu": est.weights_bytes_per_gpu, "served_weights_bytes": est.served_weights_bytes,
        "checkpoint_bytes": est.checkpoint_bytes, "activation_peak_bytes_per_gpu": est.activation_bytes,
        "non_torch_bytes_per_gpu": est.non_torch_bytes, "cudagraph_bytes_per_gpu": est.cudagraph_bytes,
        # never negative bytes: what the weights and activations lack is its own key
        "kv_cache_memory_bytes_per_gpu": max(est.kv_cache_bytes, 0.0),
        "memory_deficit_bytes_per_gpu": max(-est.kv_cache_bytes, 0.0),
        "fits": est.kv_cache_bytes > 0 and est.max_concurrent_sequences > 0,
        "kv_bytes_per_token": est.kv_bytes_per_token, "kv_bytes_per_token_per_gpu": est.kv_bytes_per_token_per_gpu,
        "kv_heads_per_gpu": est.kv_heads_per_gpu, "kv_replicated": est.kv_replicated,
        "state_bytes_per_sequence_per_gpu": est.state_bytes_per_sequence, "kv_groups": groups,
        "kv_block_bytes": est.kv_block_bytes, "kv_blocks": est.kv_blocks, "kv_cache_tokens": est.kv_cache_tokens,
        "blocks_per_sequence": est.blocks_per_sequence, "vllm_max_concurrency": est.vllm_max_concurrency,
        "max_concurrent_sequences": est.max_concurrent_sequences,
        "total_concurrent_sequences": est.total_concurrent_sequences, "decode_context": est.decode_context,
        "max_num_batched_tokens": tokens, "max_num_seqs": seqs,
        "profile_max_num_batched_tokens": tokens, "profile_max_num_seqs": seqs,
        "throughput": throughput,
    }
    if speed is not None:
        data["speed_note"] = speed
    title = (("" if data["fits"] else "does NOT fit: vLLM would refuse to start ("
              + ("the weights and activations leave no KV cache" if est.kv_cache_bytes <= 0 else
                 "no request of max length fits") + "): ")
             + f"{spec.name} served on {_layout(est)} ({est.version.label}): max length {est.max_model_len:,}, "
             f"weights {est.weight_dtype}, KV {est.kv_dtype}, block {est.block}")
    preamble = [f"{plural(est.max_concurrent_sequences, 'concurrent sequence')} of {est.max_model_len:,} tokens "
                + (f"per replica, {est.total_concurrent_sequences:,} over {est.dp} replicas " if est.dp > 1 else "")
                + f"({est.kv_blocks:,} KV blocks per GPU; vLLM logs \"GPU KV cache size: {est.kv_cache_tokens:,} "
                f"tokens\")",
                f"weights {fmt_bytes(est.served_weights_bytes)} as served ({est.weights.describe()})"
                + ("" if measured else "; " + checkpoint_line(est.spec, est.checkpoint_bytes)), spec.describe()]
    if measured:
        data = {"model": data.pop("model"), "method": "transformers", **data, "measured_from": _measured_from(est),
                "notes": list(spec.notes)}
        preamble += [f"note: {n}" for n in spec.notes]
    tables = [_memory_table(est)] if throughput is None else [_throughput_table(est, throughput), _memory_table(est)]
    if speed is not None:
        preamble.append(speed)
    if len(groups) > 1 or est.has_windows_kept:
        tables.append(_groups_table(est, groups))
    return Document(title, data, tables, preamble)


def speed_note(gpu: Any) -> str | None:
    """A GPU known by its memory alone (`--gpu-memory`, hardware.MemoryOnly): the line saying that the speed part
    (throughput and latency) needs a GPU preset, naming those of that memory; None for a preset."""
    from ..hardware import MemoryOnly

    if not isinstance(gpu, MemoryOnly):
        return None
    presets = ", ".join(gpu.alternatives) or "see `llmcalc presets`"
    return (f"speed left out: --gpu-memory gives memory alone (capacity above); throughput and latency need "
            f"--gpu with a preset ({gpu.memory_bytes / GIB:g} GiB: {presets})")


def _memory_table(est: ServeEstimate) -> Table:
    """Per-GPU memory as vLLM divides it."""
    gpu = est.accelerator
    tokens, seqs = est.batch_defaults
    rows = [
        {"name": f"requested ({est.utilization:g} x {gpu.usable_bytes / GIB:.2f} GiB CUDA-visible of "
                 f"{gpu.memory_bytes / GIB:g} GiB)", "bytes": est.usable_bytes},
        {"name": f"weights ({est.weight_dtype}{', typed' if est.weights.typed else ', as shipped'})",
         "bytes": est.weights_bytes_per_gpu},
        {"name": f"activation peak (profiling run: {tokens:,} tokens, sampler over {min(tokens, seqs):,} x "
                 f"{est.vocab_size:,})", "bytes": est.activation_bytes},
        {"name": "non-torch memory (cuBLAS, NCCL, context where charged)", "bytes": est.non_torch_bytes},
    ]
    if est.version.cudagraphs:
        rows.append({"name": "CUDA graphs (none: --enforce-eager)" if est.enforce_eager else
                     "CUDA graphs (estimated, charged since v0.21)", "bytes": est.cudagraph_bytes})
    rows.append({"name": f"KV cache ({est.kv_blocks:,} blocks of {est.block} tokens)",
                 "bytes": max(est.kv_cache_bytes, 0.0)})
    n = est.n_gpus
    return Table(f"memory per GPU (the tightest of {n})" if n > 1 else "memory per GPU",
                 [Column("name", "item", align="left"), Column("bytes", "memory (GiB)", fmt_gib)], rows,
                 _memory_notes(est))


def _groups_table(est: ServeEstimate, rows: list[dict[str, Any]]) -> Table:
    notes = ["vLLM's hybrid KV-cache manager (kv_cache_utils.py get_kv_cache_groups): layers of one kind share a "
             "block table; pages unified to the largest, groups of equal size (padding layers where a kind falls "
             "short); a sliding-window layer needs cdiv(min(window - 1 + max_num_batched_tokens, L), block) + 1 "
             "blocks per request, a chunked one cdiv(min(chunk + max_num_batched_tokens, L), block), a state "
             "layer one page; num_blocks = available // (page x layers per group)"]
    return Table("KV cache by layer group (one GPU)",
                 [Column("group", "group"), Column("kind", "kind", align="left"), Column("layers", "layers"),
                  Column("padding_layers", "padding layers"), Column("span", "window/chunk (tokens)"),
                  Column("kv_bytes_per_token_per_layer", "KV per token per layer (B)", lambda v: f"{v:,.0f}"),
                  Column("block_size", "block (tokens)"), Column("page_bytes", "page (B)", lambda v: f"{v:,.0f}"),
                  Column("blocks_per_request", "blocks per request"),
                  Column("bytes_per_request", "per request (GiB)", fmt_gib)], rows, notes)


def _kv_formula(est: ServeEstimate) -> str:
    if _is_measured(est):
        heads = est.model.kv_head_count
        split = (f"; per GPU {est.kv_heads_per_gpu} of the {heads} K/V heads it was allocated with"
                 + (" (replicated)" if est.kv_replicated else "") if est.tp > 1 and heads else "")
        return f"the cache transformers allocated, per layer, at {est.kv_dtype}{split}"
    spec = est.spec
    if spec.mla is not None:
        return (f"MLA latent: {spec.n_layers} layers x ({spec.mla.kv_lora_rank} + {spec.mla.qk_rope_head_dim}) x "
                f"{est.kv_dtype} bytes, whole on every GPU")
    return (f"2 (K, V) x {spec.n_attention_layers} {'attention ' if spec.is_hybrid else ''}layers"
            f"{f' / {est.pp} stages' if est.pp > 1 else ''} x {est.kv_heads_per_gpu} KV head"
            f"{'s' if est.kv_heads_per_gpu > 1 else ''} per GPU x {spec.d_head} x {est.kv_dtype} bytes")


def _memory_notes(est: ServeEstimate) -> list[str]:
    """How the KV cache is sized (the version's rule) and, first, whether a request fits at all."""
    tokens, seqs = est.batch_defaults
    v = est.version
    sampler = "~38 B per element (torch sort)" if v.sampler_bytes > 20 else "~14 B per element (Triton top-k/top-p)"
    notes = [
        f"KV cache per token: {est.kv_bytes_per_token:,.0f} B for the whole model, "
        f"{est.kv_bytes_per_token_per_gpu:,.0f} B per GPU ({_kv_formula(est)}); one block index across a group's "
        f"layers = {est.kv_block_bytes:,.0f} B",
        f"a {est.max_model_len:,}-token request needs {est.blocks_per_sequence:,} blocks over "
        f"{len(est.groups)} group{'s' if len(est.groups) != 1 else ''}; vLLM would log \"GPU KV cache size: "
        f"{est.kv_cache_tokens:,} tokens\" and \"Maximum concurrency for {est.max_model_len:,} tokens per request: "
        f"{est.vllm_max_concurrency:.2f}x\"",
        f"mirrors {v.label} ({v.what}): KV memory = CUDA-visible total x gpu_memory_utilization - weights as loaded "
        f"- the profiling run's activation peak (max of the forward over {tokens:,} batched tokens and the dummy "
        f"sampler over {min(tokens, seqs) if v.engine == 'v1' else seqs:,} rows x the vocabulary at {sampler}, not "
        f"split by tp) - non-torch memory" + (" - CUDA graphs" if v.cudagraphs else "")
        + f"; max_num_batched_tokens {tokens:,} and max_num_seqs {seqs:,}"
        + (" as typed" if est.max_num_batched_tokens or est.max_num_seqs else " (vllm serve's defaults for this GPU)"),
    ] + est.weights.notes() + _vision_notes(est)
    if _is_measured(est):
        notes += [f"measured by transformers: {k.replace('_', ' ')}: {v}" for k, v in _measured_from(est).items()]
    else:
        notes += serving_conventions(est.roofline(1, est.max_model_len))
    if est.pp > 1 or est.dp > 1 or est.expert_parallel:
        notes.append(f"layout: {est.pp} pipeline stage{'s' if est.pp > 1 else ''} of tp {est.tp} (vLLM's "
                     f"get_pp_indices; the last stage samples and holds the LM head; vLLM takes the fewest blocks of "
                     f"any stage), {est.dp} replica{'s' if est.dp > 1 else ''}"
                     + (f", routed experts whole over {est.ep} GPUs (expert parallel)" if est.expert_parallel else ""))
    if est.kv_cache_bytes <= 0:
        notes.insert(0, f"does NOT fit: the weights and activations need {fmt_bytes(-est.kv_cache_bytes)} more than "
                        f"the usable memory; add GPUs or quantise")
    elif est.max_concurrent_sequences == 0:
        notes.insert(0, f"no {est.max_model_len:,}-token request fits in the KV cache; the longest that does is "
                        f"{est.longest_fitting_len():,} tokens (lower --max-model-len or add GPUs)")
    return notes


def _vision_notes(est: ServeEstimate) -> list[str]:
    """What the vision tower adds (a multimodal checkpoint), or why nothing is added."""
    if est.language_model_only or getattr(est.spec, "vision_config", None) is None:
        return []
    tower = est.vision
    if tower is None:
        return ["the checkpoint's vision tower is not sized (a family llmcalc does not know): its weights and its "
                "profiling run are left out (vLLM loads both unless --language-model-only)"]
    line = (f"vision tower: {tower.params:,} parameters at 16 bits, its blocks split over tp (vLLM loads it beside "
            f"the language model; --language-model-only drops it)")
    if est.encoder_items:
        line += (f"; the profiling run encodes {est.encoder_items} dummy image(s) of {tower.tokens_per_item:,} tokens "
                 f"({tower.tokens_per_item * tower.merge ** 2:,} patches each) and keeps their outputs through the "
                 f"language model's profiling forward")
    elif tower.tokens_per_item == 0:
        line += "; its profiling run is not modelled"
    return [line]


def _throughput_table(est: ServeEstimate, throughput: list[dict]) -> Table:
    notes = [f"roofline per GPU on {est.accelerator.key}, dense {est.compute_dtype} peak; prefill: that many "
             f"{est.max_model_len:,}-token prompts at once (causal); decode: one step with every sequence at "
             f"{est.decode_context:,} tokens of context, the KV limit's own case; an upper bound on speed"
             + (f"; decode tokens/s pipelined over {est.pp} stages" if est.pp > 1 else "")
             + (f"; tokens/s of all {est.dp} replicas" if est.dp > 1 else "")]
    return Table(
        "throughput and latency against concurrent sequences" + (" (per replica)" if est.dp > 1 else ""),
        [Column("concurrency", "sequences"),
         Column("prefill_seconds", "prefill (time to first token)", fmt_seconds),
         Column("prefill_tokens_per_second", "prefill (tokens/s)", lambda v: f"{v:,.0f}"),
         Column("decode_seconds_per_token", "decode step (s/token)", fmt_seconds),
         Column("tokens_per_second", "decode (tokens/s)", lambda v: f"{v:,.0f}"),
         Column("decode_bound", "decode bound", align="left")],
        throughput, notes,
    )


def capacity_document(plan: CapacityPlan) -> Document:
    """`serve --concurrency`: the chosen layout first, then its serve document, then every layout tried."""
    best = plan.best
    doc = serve_document(best)
    targets = [f"{plan.concurrency:,} concurrent {best.max_model_len:,}-token requests"]
    if plan.ttft_seconds is not None:
        targets.append(f"time to first token <= {fmt_seconds(plan.ttft_seconds)}")
    if plan.tokens_per_second is not None:
        targets.append(f">= {plan.tokens_per_second:,.0f} generated tokens/s")
    doc.title = f"{best.spec.name}: the fewest {best.accelerator.key} GPUs for {', '.join(targets)}"
    doc.preamble.insert(0, f"{best.n_gpus} GPUs: tp {best.tp} x pp {best.pp} x dp {best.dp}"
                           + (" with expert parallelism" if best.expert_parallel else ""))
    doc.data = {"concurrency_target": plan.concurrency, "ttft_target_seconds": plan.ttft_seconds,
                "tokens_per_second_target": plan.tokens_per_second, "layout": plan.candidates[0],
                "candidates": list(plan.candidates), **doc.data}
    doc.tables.insert(0, Table(
        "layouts that meet the targets (the fewest GPUs of each tp x pp x expert parallelism)",
        [Column("n_gpus", "GPUs"), Column("tp", "tp"), Column("pp", "pp"), Column("dp", "dp"),
         Column("enable_expert_parallel", "expert parallel", str, align="left"),
         Column("concurrency_per_replica", "sequences per replica"),
         Column("ttft_seconds", "time to first token", fmt_seconds),
         Column("tokens_per_second", "decode (tokens/s)", lambda v: f"{v:,.0f}")],
        list(plan.candidates), ["time to first token: one max-length prompt's prefill on a replica's roofline; "
                                "decode tokens/s: all requested sequences at max_model_len context"]))
    return doc


def _ms(seconds: float) -> str:
    return "n/a" if seconds != seconds or seconds == float("inf") else f"{seconds * 1e3:,.1f}"


def workload_document(plan: WorkloadPlan) -> Document:
    """`serve --input-len --output-len`: the speed of each workload asked, then serve's own figures."""
    from ..analytic import kernel_tables

    est = plan.serve
    base = serve_document(est)
    perf = plan.performance
    first = perf[0]
    w = first.work
    records = [p.record() for p in perf]
    data = {**base.data, "fits": plan.fits and base.data["fits"],
            "performance": records[0] if len(records) == 1 else records}
    arrivals = (f"{w.request_rate:g} requests/s (Poisson)" if w.request_rate else "")
    clients = ("concurrency " + ",".join(str(p.work.max_concurrency) for p in perf)
               if w.max_concurrency else "")
    mode = " and ".join(x for x in (clients, arrivals) if x) or "offline (all requests at once)"
    title = (("does NOT fit: " if not plan.fits else "")
             + f"{est.spec.name} serving {_lengths(w)} on {_layout(est)} "
             f"({first.engine} {first.engine_version}), {mode}, {w.num_prompts:,} requests")
    gpu = est.accelerator.key
    backend = first.engine if first.engine in kernel_tables.BACKENDS else "vllm"
    timed = f"measured tables for {gpu}" if kernel_tables.has_tables(gpu, backend) else "the smooth roofline"
    preamble = [f"predicted as `vllm bench serve` measures it, per replica: the engine's steps timed from kernels "
                f"({timed}) and its continuous batching simulated"]
    if not plan.fits:
        preamble.insert(0, f"the weights and activations need {fmt_bytes(-est.kv_cache_bytes)} more than the usable "
                           f"memory of each GPU, so no KV cache is left; add GPUs (--n-gpus) or quantise "
                           f"(--weight-dtype)" if est.kv_cache_bytes <= 0 else
                        f"no request of {w.input_len + w.output_len:,} tokens fits in the KV cache: "
                        f"{base.data['kv_cache_tokens']:,} tokens held; add GPUs, quantise or shorten the request")
    rows = [{"max_concurrency": p.work.max_concurrency or (f"{p.work.request_rate:g}/s" if p.work.request_rate
                                                           else "offline"), "running": p.run.mean_running,
             "output": p.output_tokens_per_second, "total": p.total_tokens_per_second,
             "requests": p.requests_per_second, "ttft_mean": p.run.ttft[0], "ttft_median": p.run.ttft[1],
             "ttft_p99": p.run.ttft[2], "tpot_mean": p.run.tpot[0], "itl_median": p.run.itl[1],
             "e2e_mean": p.run.e2e[0], "roofline_output": p.record()["roofline"]["output_tokens_per_second"]}
            for p in perf]
    per_s = lambda v: f"{v:,.1f}"  # noqa: E731
    table = Table(
        "workload speed per replica",
        [Column("max_concurrency", "clients"), Column("running", "running (seqs)", per_s),
         Column("output", "output (tok/s)", per_s), Column("total", "total (tok/s)", per_s, show=False),
         Column("requests", "requests/s", lambda v: f"{v:,.2f}"), Column("ttft_mean", "TTFT mean (ms)", _ms),
         Column("ttft_median", "TTFT median (ms)", _ms, show=False), Column("ttft_p99", "TTFT p99 (ms)", _ms),
         Column("tpot_mean", "TPOT (ms)", _ms), Column("itl_median", "ITL median (ms)", _ms, show=False),
         Column("e2e_mean", "latency (ms)", _ms), Column("roofline_output", "roofline (tok/s)", per_s)],
        rows, _workload_notes(first))
    return Document(title, data, [table, *base.tables], preamble + base.preamble)


def _lengths(w: Workload) -> str:
    """The request lengths as the title reads them: fixed, within a range, or ShareGPT-like at their means."""
    if w.dataset == "sharegpt":
        return f"ShareGPT-like lengths (means {w.input_len:,} in / {w.output_len:,} out)"
    spread = f" (each within {w.random_range_ratio:.0%})" if w.random_range_ratio else ""
    return f"{w.input_len:,} in / {w.output_len:,} out{spread}"


def _workload_notes(p: Performance) -> list[str]:
    a = p.record()["assumptions"]
    return [
        f"engine: {a['scheduler']}; {a['admission']}; arrivals: {a['arrivals']}; max_num_seqs {a['max_num_seqs']:,}, "
        f"max_num_batched_tokens {a['max_num_batched_tokens']:,}; the KV cache holds {a['kv_cache_requests']:,} "
        f"requests of the longest length at once; lengths: {a['lengths']}",
        "step time: GEMMs on kernels' smooth roofline (MAMF, row tiles, weight bytes read; MoE: the experts hit), LM "
        "head and sampler, decode attention and tensor-parallel all-reduces from measured tables where the GPU has "
        f"them (aiconfigurator's, measured inside {ENGINE_NAMES.get(p.engine, p.engine)}; MoE: its fused-MoE table "
        "where the expert shape was measured; DeepSeek-V3's MLA: its measured attention blocks, projections "
        "included), prefill attention at FlashAttention's measured rate, plus "
        f"{a['engine_step_seconds'] * 1e3:g} ms per step, {a['layer_floor_seconds'] * 1e6:g} us per layer per step, "
        f"{a['tp_sync_seconds'] * 1e6:g} us per tensor-parallel all-reduce and {a['request_seconds'] * 1e3:g} ms per "
        "request outside the engine (fitted to published runs: benchmarks/bench_serving_speed.py --fit); clients get "
        f"tokens no faster than the API server streams them, {a['frontend_token_seconds'] * 1e6:.0f} us each "
        "(measured, vLLM PR #12287)" + (f"; {a['w4a16_gemms']}" if "w4a16_gemms" in a else ""),
        "TTFT, TPOT (latency - TTFT over output_len - 1), ITL and latency as vllm bench serve defines them; "
        "roofline: every sequence's decode step at the mean context on the peak and bandwidth (an upper bound)",
    ] + ([f"{ENGINE_NAMES.get(p.engine, p.engine)}: {a['host_overhead']}; its KV cache {a['kv_cache_vs_vllm']:.2f} x "
          "the vLLM accounting printed below (analytic/engines.py)"] if "host_overhead" in a else [])


ENGINE_NAMES = {"vllm": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang"}


def sizing_document(plan: SizingPlan) -> Document:
    """`serve --input-len --output-len --max-ttft/--max-tpot` with traffic: the fewest GPUs, and why the others lose."""
    w, best = plan.work, plan.best
    traffic = (f"{w.request_rate:g} requests/s" if w.request_rate else "") + (
        " and " if w.request_rate and w.max_concurrency else "") + (
        f"{w.max_concurrency:,} clients" if w.max_concurrency else "")
    limits = " and ".join(x for x in (f"mean TTFT <= {plan.max_ttft * 1e3:,.0f} ms" if plan.max_ttft else "",
                                      f"mean TPOT <= {plan.max_tpot * 1e3:,.1f} ms" if plan.max_tpot else "") if x)
    ask = f"{_lengths(w)} at {traffic} within {limits}"
    if best is None:
        title = f"does NOT fit: no layout of up to 4,096 x {plan.accelerator.key} serves {plan.spec.name}'s {ask}"
    else:
        title = (f"{plan.spec.name}: {best.n_gpus:,} x {plan.accelerator.key} (tp {best.tp} x {best.replicas:,} "
                 f"replica{'s' if best.replicas > 1 else ''}) serve {ask}")
    rows = []
    for c in plan.candidates:
        p = c.performance
        more = c.n_gpus - best.n_gpus if best else 0
        why = c.why or ("fewest GPUs" if c is best else f"{more:,} GPU{'s' if more > 1 else ''} more" if more > 0
                        else "as few GPUs, a higher TTFT")
        rows.append({"tp": c.tp, "replicas": c.replicas or None, "n_gpus": c.n_gpus or None,
                     "ttft_mean": p.run.ttft[0] if p and p.fits else None,
                     "tpot_mean": p.run.tpot[0] if p and p.fits else None,
                     "output": p.output_tokens_per_second if p and p.fits else None, "why": why})
    data = {"model": plan.spec.name, "device": plan.accelerator.key, "input_len": w.input_len,
            "output_len": w.output_len, "request_rate": w.request_rate, "max_concurrency": w.max_concurrency,
            "num_prompts": w.num_prompts, "max_ttft_seconds": plan.max_ttft, "max_tpot_seconds": plan.max_tpot,
            "fits": best is not None,
            "layout": {"tp": best.tp, "replicas": best.replicas, "n_gpus": best.n_gpus} if best else None,
            "performance": best.performance.record() if best and best.performance else None,
            "candidates": rows}
    table = Table("layouts tried (per replica: its share of the traffic)",
                  [Column("tp", "tensor parallel (GPUs)"), Column("replicas", "replicas"),
                   Column("n_gpus", "GPUs", lambda v: f"{v:,}"), Column("ttft_mean", "TTFT mean (ms)", _ms),
                   Column("tpot_mean", "TPOT mean (ms)", _ms),
                   Column("output", "output per replica (tok/s)", lambda v: f"{v:,.1f}"),
                   Column("why", "why not", align="left")],
                  rows, [f"the traffic split evenly over the replicas; each replica predicted as `serve --input-len "
                         f"{w.input_len} --output-len {w.output_len}` predicts it (analytic/serving_speed.py) with "
                         f"{w.num_prompts:,} requests in all; the fewest replicas meeting the targets found by "
                         "doubling then bisection; tensor parallelism within one node"])
    return Document(title, data, [table], [])
