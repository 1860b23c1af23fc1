"""What `infer` shows: prefill and decode on a roofline, and the conventions a serving estimate rests on
(which `serve` shows too)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..analytic.inference import expected_experts, memory_needed_per_gpu
from ..analytic.quant import shipped_bytes, weight_format
from ..render.tables import Column, Document, Table
from ..units import fmt_bytes, fmt_flops, fmt_seconds

if TYPE_CHECKING:
    from ..analytic.inference import InferenceEstimate, Roofline
    from ..analytic.measured_inference import MeasuredInference
    from ..analytic.static_batch import StaticPrediction
    from ..spec import ModelSpec


def checkpoint_line(spec: ModelSpec, shipped: float | None) -> str:
    """What the download holds (safetensors tensor bytes: scales and MTP layers included), or why it is not known."""
    if shipped is None:
        method = (spec.quantization_config or {}).get("quant_method")
        return f"the checkpoint's size is not known (quant_method {method!r} is not a format llmcalc sizes)"
    return f"the checkpoint holds {fmt_bytes(shipped)}" + (
        f" ({spec.n_mtp_layers} MTP layer{'s' if spec.n_mtp_layers > 1 else ''} included)" if spec.n_mtp_layers else "")


def serving_conventions(est: InferenceEstimate) -> list[str]:
    """The conventions an inference roofline rests on, for this model and parallel layout."""
    spec, tp = est.spec, est.n_gpus
    kv_heads = spec.n_kv_heads
    lines = [] if est.weight_format is not None else weight_format(spec, est.weight_dtype).notes()
    if spec.is_moe:
        E, k = spec.n_experts, spec.n_experts_per_token
        lines.append(f"MoE decode reads only the experts the step's routed tokens hit: expected distinct experts per "
                     f"layer E·(1 - (1 - k/E)^b) under uniform routing (E = {E}, k = {k}): "
                     f"{expected_experts(spec, 1):g} at batch 1 (the active parameters)"
                     + (f", {expected_experts(spec, est.batch):.2f} at batch {est.batch}" if est.batch != 1 else ""))
    if (mla := spec.mla) is not None:
        lines.append("MLA: decode in the absorbed form (DeepSeek-V2 sec. 2.1.2: W_UK folded into the query, W_UV into "
                     "the output), attending over the cached latent it reads (kv_lora_rank + qk_rope_head_dim = "
                     f"{mla.kv_lora_rank + mla.qk_rope_head_dim} per token and layer); prefill in the plain form")
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


VLLM_SHARE = 0.9  # vllm serve's default --gpu-memory-utilization (what `llmcalc serve` assumes)


def gpu_bytes(est: InferenceEstimate) -> float:
    """What vLLM takes its share of: the memory the runtime reports (cudaMemGetInfo's total)."""
    return est.accelerator.usable_bytes


def _roofline_data(est: InferenceEstimate, pre: Roofline, first: Roofline, last: Roofline, *,
                   with_kv: float | None, without_kv: float | None) -> dict:
    """The JSON keys every `infer` answer carries, formula or measured model alike (one contract for tools)."""
    return {
        "device": est.accelerator.key, "n_gpus": est.n_gpus, "batch_size": est.batch,
        "prompt": est.prompt, "generate": est.generate, "weight_dtype": est.weight_dtype, "kv_dtype": est.kv_dtype,
        "compute_dtype": est.compute_dtype, "weights_bytes": est.weights, "weights_bytes_per_gpu": est.weights_per_gpu,
        "kv_cache_bytes": est.kv_cache, "kv_cache_bytes_per_token": est.kv_per_token,
        "kv_cache_bytes_per_token_per_gpu": est.kv_per_token_per_gpu,
        "state_bytes_per_sequence_per_gpu": est.state_bytes_per_sequence,
        "prefill_seconds": pre.seconds, "prefill_flops": pre.flops * est.n_gpus, "prefill_bytes_per_gpu": pre.bytes,
        "prefill_bound": pre.bound, "time_to_first_token_seconds": pre.seconds,
        "decode_seconds_per_token": est.decode_seconds_per_token, "decode_seconds": est.decode_seconds,
        "decode_tokens_per_second": est.decode_tokens_per_second, "decode_bound_first": first.bound,
        "decode_bound_last": last.bound, "decode_weight_bytes_per_gpu": est.weights_read(est.batch),
        "total_seconds": est.total_seconds, "tokens_per_second": est.tokens_per_second,
        "prefill_tokens_per_second": est.batch * est.prompt / pre.seconds,
        "compute_bound_batch": with_kv, "compute_bound_batch_ignoring_kv": without_kv,
        "memory_needed_bytes_per_gpu": memory_needed_per_gpu(est), "memory_bytes_per_gpu": est.accelerator.memory_bytes,
        "fits": True,
    }


def document(est: InferenceEstimate, prediction: StaticPrediction | str) -> Document:
    """`infer`: the static batch as vLLM runs it (`prediction`, analytic/static_batch.py) beside its roofline, or the
    roofline alone where `prediction` is the reason none could be made."""
    from ..analytic.measured_inference import MeasuredInference

    if isinstance(est, MeasuredInference):
        return measured_document(est, prediction)
    fmt = est.weight_format or weight_format(est.spec, est.weight_dtype)
    pre = est.prefill
    first = est.decode_step(est.prompt + 1)
    last = est.decode_step(est.prompt + est.generate - 1)
    with_kv = est.compute_bound_batch()
    without_kv = est.compute_bound_batch(with_kv=False)
    data = {"model": est.spec.name, **_roofline_data(est, pre, first, last, with_kv=with_kv, without_kv=without_kv),
            # plan_inference refused what does not fit at all; vLLM's default share (serve) may still not hold it
            "fits_at_vllm_default_utilization": memory_needed_per_gpu(est) <= VLLM_SHARE * gpu_bytes(est)}
    notes = _roofline_notes(est, with_kv, without_kv)
    if not data["fits_at_vllm_default_utilization"]:
        notes.insert(0, f"fits in {est.accelerator.key}'s memory ({fmt_bytes(memory_needed_per_gpu(est))} per GPU at "
                        f"the end), but not in vLLM's default {VLLM_SHARE:g} of the "
                        f"{fmt_bytes(gpu_bytes(est))} it reports: `llmcalc serve` would say it does NOT fit at "
                        f"--gpu-memory-utilization {VLLM_SHARE:g}")
    table = roofline_table(est, notes)
    tokens = est.batch * (est.prompt + est.generate)
    data["weight_format"] = fmt.describe()
    data["checkpoint_bytes"] = shipped = shipped_bytes(est.spec)
    at = 4 if data["fits_at_vllm_default_utilization"] else 5  # after the roofline's own four notes
    table.notes[at:at] = fmt.notes() if est.weight_format is not None else []
    return Document(_title(est.spec.name, est, prediction), _predicted(data, est, prediction),
                    [*speed_tables(est, prediction, table), table], [f"weights {fmt_bytes(est.weights)}"
                                           + (f" ({fmt_bytes(est.weights_per_gpu)} per GPU)" if est.n_gpus > 1 else "")
                                           + f", {fmt.describe()}; {checkpoint_line(est.spec, shipped)}"
                                           + f"; KV cache at the end {fmt_bytes(est.kv_cache)} for {tokens:,} tokens"
                                           + _state_note(est)])


def _title(name: str, est: InferenceEstimate, prediction: StaticPrediction | str) -> str:
    """The first line: the batch, and its generated tokens/s predicted and on the roofline (or the roofline's)."""
    roof = est.tokens_per_second
    speed = (f"{roof:,.0f} generated tokens/s on the roofline (no prediction: see the notes)"
             if isinstance(prediction, str) else
             f"{prediction.record()['tokens_per_second']:,.0f} generated tokens/s predicted, {roof:,.0f} on the "
             "roofline")
    return (f"{name} on {est.n_gpus} x {est.accelerator.key}: batch {est.batch}, prompt {est.prompt:,}, generate "
            f"{est.generate:,}, weights {est.weight_dtype}, KV {est.kv_dtype}: {speed}")


def _predicted(data: dict, est: InferenceEstimate, prediction: StaticPrediction | str) -> dict:
    """`data` with the static batch's keys predicted where `prediction` is one (else the roofline's stay), the
    roofline's under "roofline", and "prediction" saying which ("roofline only: <reason>" for tools)."""
    from ..analytic.static_batch import roofline_record

    data["roofline"] = roofline_record(est)
    if isinstance(prediction, str):
        data["prediction"] = f"roofline only: {prediction}"
    else:
        data.update(prediction.record())
        data["prediction"] = prediction.describe()
    return data


SPEED_ROWS = (  # (JSON key, label with its unit, scale into that unit)
    ("time_to_first_token_seconds", "time to first token (ms)", 1e3),
    ("decode_seconds_per_token", "decode step per token (ms)", 1e3),
    ("total_seconds", "whole batch (s)", 1.0),
    ("tokens_per_second", "generated (tokens/s)", 1.0),
    ("prefill_tokens_per_second", "prefill (tokens/s)", 1.0),
)


def _figure(value: float | None) -> str:
    """Three significant figures (whole numbers from 100), never an exponent; n/a for None."""
    if value is None:
        return "n/a"
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


def speed_tables(est: InferenceEstimate, prediction: StaticPrediction | str, roofline: Table) -> list[Table]:
    """The static batch's figures predicted (as vLLM runs it) beside the roofline's, for people (after the CSV's
    twin of the roofline table, which stays the CSV)."""
    from ..analytic.static_batch import roofline_record

    roof = roofline_record(est)
    pred = {} if isinstance(prediction, str) else prediction.record()
    rows = [{"figure": label, "predicted": _figure(None if (v := pred.get(k)) is None else v * scale),
             "roofline": _figure(roof[k] * scale)} for k, label, scale in SPEED_ROWS]
    columns = [Column("figure", "figure", align="left"), Column("predicted", "predicted"),
               Column("roofline", "roofline")]
    if isinstance(prediction, str):
        notes = [f"roofline only: {prediction}"]
        columns.pop(1)
    else:
        notes = _prediction_notes(est, prediction)
    notes.append("roofline: the peak and bandwidth bound of the table below, the whole batch prefilled in one step; "
                 "an upper bound on speed")
    twin = Table(roofline.title, roofline.columns, roofline.rows, for_people=False)
    return [twin, Table("static batch: " + ("predicted and roofline" if pred else "roofline only"), columns, rows,
                        notes)]


def _prediction_notes(est: InferenceEstimate, p: StaticPrediction) -> list[str]:
    timed = f"measured tables for {est.accelerator.key}" if p.measured_tables else "the smooth roofline"
    requests = f"{p.batch:,} request{'s' if p.batch > 1 else ''}"
    return [
        f"predicted: the {requests} sent at once through vLLM {p.engine_version}'s LLM.generate (offline, no API "
        f"server) on {est.n_gpus} x {est.accelerator.key} sized as `llmcalc serve --max-model-len "
        f"{p.prompt + p.generate:,}` sizes it: the engine's steps timed from kernels ({timed}) and vLLM V1's "
        f"continuous batching simulated (chunked prefill within max_num_batched_tokens {p.max_num_batched_tokens:,}; "
        f"the KV cache holds {p.kv_requests:,} such requests)",
        "time to first token: the requests' mean (chunked prefill gives some their first token before the whole "
        "batch's prefill ends, the roofline's); decode step per token: TPOT, (latency - TTFT) / (generate - 1), the "
        "mean; whole batch: until the last request ends; generated tokens/s: batch x generate over it; prefill "
        "tokens/s: batch x prompt until the last first token",
    ]


def roofline_table(est: InferenceEstimate, notes: list[str]) -> Table:
    """The prefill step and the first and last decode steps on the roofline."""
    pre = est.prefill
    first = est.decode_step(est.prompt + 1)
    last = est.decode_step(est.prompt + est.generate - 1)
    rows = [
        {"phase": "prefill", "flops": pre.flops, "bytes": pre.bytes, "compute": pre.compute_seconds,
         "memory": pre.memory_seconds, "time": pre.seconds, "bound": pre.bound},
        {"phase": f"decode step (context {est.prompt + 1:,})", "flops": first.flops, "bytes": first.bytes,
         "compute": first.compute_seconds, "memory": first.memory_seconds, "time": first.seconds, "bound": first.bound},
        {"phase": f"decode step (context {est.prompt + est.generate - 1:,})", "flops": last.flops, "bytes": last.bytes,
         "compute": last.compute_seconds, "memory": last.memory_seconds, "time": last.seconds, "bound": last.bound},
    ]
    return Table(
        "roofline" + (f" (one of {est.n_gpus} GPUs)" if est.n_gpus > 1 else ""),
        [Column("phase", "phase", align="left"), Column("flops", "FLOPs", lambda v: fmt_flops(v)),
         Column("bytes", "bytes moved", fmt_bytes), Column("compute", "compute time", fmt_seconds),
         Column("memory", "memory time", fmt_seconds), Column("time", "time", fmt_seconds),
         Column("bound", "bound", align="left")],
        rows, notes,
    )


def _roofline_notes(est: InferenceEstimate, with_kv: float | None, without_kv: float | None,
                    conventions: bool = True) -> list[str]:
    pre = est.prefill
    bw = est.accelerator.memory_bandwidth / 1e12
    per_gpu = " per GPU" if est.n_gpus > 1 else ""
    return [
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
    ] + (serving_conventions(est) if conventions else [])


def _state_note(est: InferenceEstimate) -> str:
    """Hybrid/state-space models: the recurrent state beside the KV cache (empty otherwise)."""
    state = est.state_bytes_per_sequence
    return (f"; recurrent state {fmt_bytes(state * est.batch)} (conv + SSM state of the Mamba/DeltaNet/conv "
            f"layers, {fmt_bytes(state)} per sequence{' per GPU' if est.n_gpus > 1 else ''}), constant in context "
            f"length" if state else "")


def measured_document(est: MeasuredInference, prediction: StaticPrediction | str) -> Document:
    """`infer` of a model transformers measured: the same roofline, the model's figures from the record."""
    model = est.model
    pre = est.prefill
    first = est.decode_step(est.prompt + 1)
    last = est.decode_step(est.prompt + est.generate - 1)
    with_kv = est.compute_bound_batch()
    without_kv = est.compute_bound_batch(with_kv=False)
    decode = model.decode
    measured_from = {
        "weights": f"{model.total:,} parameters of the {len(model.tensors)} tensors of {model.cls} built by "
                   f"transformers {model.transformers_version}: the layer stack's matrices at {est.weight_dtype}"
                   + (" (the quantization_config by each tensor's module name)"
                      if est.weight_format is not None and est.weight_format.quant else "")
                   + ", embeddings, head, norms and biases at 16 bits"
                   + (f"; per GPU split by transformers' tensor-parallel plan over {est.n_gpus} ranks, the "
                      "embedding and head by vocabulary rows, K/V projections by their KV heads (replicated past them)"
                      if est.n_gpus > 1 else ""),
        "kv_cache": f"the elements per token of each of the {len(model.kv)} layers of the cache transformers "
                    f"allocated ({', '.join(sorted({k.cache_class for k in model.kv}))}; prefills of 8 and 16 tokens) "
                    f"at {est.kv_dtype}, no window cap (the roofline reads every cached token)"
                    + (f"; per GPU max(1, KV heads // {est.n_gpus}) of the heads its K and V were allocated with"
                       if est.n_gpus > 1 else ""),
        "state": "each layer's conv / recurrent state per sequence, at the bytes transformers allocated it",
        "decode_flops": f"FlopCounterMode over one decode step after {decode['contexts'][0]} and "
                        f"{decode['contexts'][1]} prefilled tokens ({decode['flops'][0]:,} and "
                        f"{decode['flops'][1]:,}): {decode['per_sequence']:,} per sequence + {decode['per_key']:,} "
                        "per key attended",
        "prefill_flops": "the causal sum of the decode steps over the prompt: P x per sequence + per key x P(P+1)/2",
    }
    if est.layout.experts_per_gpu:
        measured_from["experts"] = (f"{est._n_experts} routed experts in {est._moe_layers} layers (the tensors of the "
                                    f"model's expert-parallel plan), k = {model.experts_per_token} from the config: a "
                                    "step reads E·(1 - (1 - k/E)^tokens) of them (uniform routing)")
    data = {"model": model.name, "method": "transformers",
            **_roofline_data(est, pre, first, last, with_kv=with_kv, without_kv=without_kv),
            "measured_from": measured_from, "notes": list(model.notes)}
    notes = _roofline_notes(est, with_kv, without_kv, conventions=False)
    notes += [f"measured by transformers: {k.replace('_', ' ')}: {v}" for k, v in measured_from.items()]
    table = roofline_table(est, notes)
    tokens = est.batch * (est.prompt + est.generate)
    per_gpu = f" ({fmt_bytes(est.weights_per_gpu)} per GPU)" if est.n_gpus > 1 else ""
    return Document(_title(model.name, est, prediction), _predicted(data, est, prediction),
                    [*speed_tables(est, prediction, table), table],
                    [model.describe(), f"weights {fmt_bytes(est.weights)}{per_gpu} at "
                                           f"{est.weight_dtype}; KV cache at the end {fmt_bytes(est.kv_cache)} for "
                                           f"{tokens:,} tokens" + _state_note(est)]
                    + [f"note: {n}" for n in model.notes])
