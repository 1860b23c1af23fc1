"""What `memory` shows: training memory per GPU by component, whether it fits, the saved activations; with
--finetune, the fine-tuning memory (frozen base, fp32 adapters)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analytic.memory import MemoryEstimate
from ..render.tables import Column, Document, Table
from ..spec import ModelSpec
from ..units import GIB, fmt_gib
from .params import adapter_table, finetune_config

if TYPE_CHECKING:
    from ..analytic.finetune import FinetuneMemory
    from ..analytic.memory_plan import MemoryPlan
    from ..hardware import Accelerator


def _share(value: float) -> str:
    return f"{value * 100:.1f} %"


def _fit_rows(per_gpu: float, gpu: Accelerator | None, reserve: float) -> tuple[dict, list[str]]:
    if gpu is None:
        return {}, []
    capacity = gpu.usable_bytes - reserve  # what `layout` and `train` hold a layout against (reserved_capacity)
    fits = per_gpu <= capacity
    usable = "" if gpu.usable_bytes == gpu.memory_bytes else f" of {gpu.memory_bytes / GIB:g}"
    line = (f"{'fits' if fits else 'does NOT fit'} on {gpu.key} ({gpu.usable_bytes / GIB:.4g} GiB usable{usable}"
            + (f" - {reserve / GIB:g} GiB reserve" if reserve else "") + "): "
            + (f"{(capacity - per_gpu) / GIB:,.2f} GiB free" if fits
               else f"{(per_gpu - capacity) / GIB:,.2f} GiB over"))
    return {"fits": fits, "capacity_bytes": capacity, "device": gpu.key}, [line]


def document(plan: MemoryPlan) -> Document:
    """`memory`'s answer: full training (with the notes its layout adds and how to make it fit), or --finetune."""
    if not isinstance(plan.estimate, MemoryEstimate):  # --finetune: a FinetuneMemory
        doc = finetune_memory_document(plan.estimate, plan.device, plan.reserve)
        if plan.fit is not None and plan.device is not None:
            doc.data.update(fit_on_gpu=plan.fit, cuda_context_bytes=plan.cuda_context)
            doc.tables.append(_fit_table(plan, plan.device))
        return doc
    doc = training_memory_document(plan.estimate, plan.device, plan.reserve)
    if plan.fit_advice is not None:
        doc.data["fit_advice"] = plan.fit_advice
    doc.tables[0].notes.extend(plan.notes)
    return doc


def training_memory_document(est: MemoryEstimate, gpu: Accelerator | None, reserve: float = 0.0) -> Document:
    spec, rec, opt, par = est.spec, est.recipe, est.optimizer, est.parallel
    components = est.components()
    peak = est.peak
    per_param = est.bytes_per_param
    fit, fit_lines = _fit_rows(peak, gpu, reserve)
    largest = est.largest_micro_batch(fit["capacity_bytes"]) if gpu else None
    data = {
        "model": spec.name, "mode": "training", "batch_size": est.batch, "seq_len": est.seq_len,
        "recipe": rec.name, "optimizer": opt.name, "optimizer_impl": est.optimizer_impl,
        "recompute": est.recompute, "attention": est.attention,
        "parallel": {"n_gpus": par.n_gpus, "dp": par.dp, "tp": par.tp, "cp": par.cp, "pp": par.pp, "vpp": par.vpp,
                     "ep": par.ep, "etp": par.expert_tp, "zero": par.zero,
                     "sequence_parallel": par.sequence_parallel},
        "pipeline_stage": est.stage, "params_on_gpu": est.params_on_gpu,
        "bytes_per_param": {**per_param, "total": est.state_bytes_per_param},
        "per_gpu_bytes": peak, "peak_phase": est.peak_phase, "sum_of_components_bytes": sum(components.values()),
        "model_states_bytes": est.model_states,
        "components": components, "activations": est.activations.per_layer,
        "activation_bytes_per_sample": est.activation_bytes_per_sample(),
        **fit, "largest_micro_batch": largest,
    }
    rows = [{"kind": "component", "name": k, "bytes": v, "share": v / peak} for k, v in components.items() if v]
    rows.append({"kind": "total", "name": f"peak per GPU ({est.peak_phase})", "bytes": peak, "share": 1.0})
    measured = not isinstance(spec, ModelSpec)  # a MeasuredModel: transformers measured it
    notes = _recipe_notes(est) + (_measured_notes(est) if measured else _layout_notes(est)) + fit_lines
    if measured:
        data.update(method="transformers", measured_from=_measured_from(est), notes=list(spec.notes))
    if largest is not None:
        cp = est.parallel.cp
        notes.append(f"largest micro-batch that fits at seq {est.seq_len * cp:,}"
                     + (f" ({est.seq_len:,} tokens per context-parallel rank)" if cp > 1 else "") + f": {largest:,}")
    table = Table(
        "memory per GPU",
        [Column("kind", "kind", align="left", show=False), Column("name", "component", align="left"),
         Column("bytes", "memory (GiB)", fmt_gib), Column("share", "share of peak (%)", _share)],
        rows, notes,
    )
    title = (f"{spec.name}: training memory per GPU, micro-batch {est.batch:,} x seq "
             f"{est.seq_len * par.cp:,}, {rec.name} + {opt.name}, "
             f"recompute {est.recompute}")
    preamble = [spec.describe()] + ([f"note: {n}" for n in spec.notes] if measured else [])
    return Document(title, data, [table] if measured else [table, _activations_table(est)], preamble)


def _measured_from(est: MemoryEstimate) -> dict[str, str]:
    """What each figure of a model transformers measured comes from (the JSON's `measured_from`)."""
    from ..analytic.measured import MeasuredModel

    model = est.spec
    assert isinstance(model, MeasuredModel)
    runs = model.activation_runs
    per_token, per_token2 = model.activation_terms()
    return {
        "parameters": f"{model.total:,} trainable parameters of the {len(model.tensors)} tensors of {model.cls} "
                      f"built by transformers {model.transformers_version} (meta device), sharded per rank by its "
                      "tensor-parallel plan (model.tp_plan)",
        "weights, gradients, master weights, optimizer states": "the parameters on this GPU x the recipe's and "
                                                                  "optimizer's bytes per parameter",
        "activations": "bytes autograd saved (saved_tensors_hooks, one count per storage, parameters excluded) in "
                       f"transformers' training forward with the loss on {model.forward_tensors} bf16 tensors, "
                       "batch 1: "
                       + ", ".join(f"{r['bytes']:,} B at seq {r['seq_len']:,}" for r in runs)
                       + f" (= {per_token:,.0f} B/token + {per_token2:,.2f} B/token²), x micro-batch"
                       + (f", / tp {est.parallel.tp} (sequence parallelism)" if est.parallel.tp > 1 else ""),
    }


def _measured_notes(est: MemoryEstimate) -> list[str]:
    par = est.parallel
    notes = [f"measured by transformers: {line}" for line in _measured_from(est).values()]
    notes.append("the activations include the logits and the loss's fp32 upcast, and transformers' eager norms' "
                 "fp32 copies (what its modelling code saves, not a fused kernel); the blocks' backward holds one "
                 "block's share (1/layers of them) rebuilt, as llmcalc's phases do")
    from ..analytic.measured import MeasuredModel

    model = est.spec
    assert isinstance(model, MeasuredModel)
    if model.real_forward:
        from ..analytic.measured import real_forward_note

        notes.append(real_forward_note(model.real_forward))
    if model.activation_terms()[1] > 0:
        notes.append("the saved bytes grow with s²: the sdpa kernel transformers' attention took on fake CPU tensors "
                     "saved its scores (the CPU flash kernel needs equal query/key and value head dims; a GPU's "
                     "memory-efficient kernel does not), so this overstates a GPU run's activations")
    if par.n_gpus > 1:
        notes.append(f"{par.n_gpus:,} GPUs = dp {par.dp:,} x tp {par.tp}; ZeRO-{par.zero} shards over dp")
    return notes


def _recipe_notes(est: MemoryEstimate) -> list[str]:
    """What the bytes per parameter and the peak are made of, for this recipe and optimizer."""
    rec, opt, per_param = est.recipe, est.optimizer, est.bytes_per_param
    return [
        f"recipe {rec.name}: {rec.description}",
        f"optimizer {opt.name}: {per_param['optimizer_states']:g} bytes/param"
        + (f" ({opt.source})" if opt.source else ""),
        f"bytes per parameter: weights {rec.weight_bytes:g} + gradients {rec.grad_bytes:g} + master "
        f"{rec.master_bytes:g} + optimizer {per_param['optimizer_states']:g} = {est.state_bytes_per_param:g}",
        "peak = the largest of: end of forward (weights + master + optimizer + activations + logits/loss), with "
        "full recomputation the blocks' backward (the logits freed, one block rebuilt, every gradient), and the "
        "optimizer step (weights + master + optimizer + gradients + optimizer temporaries)",
        f"optimizer step implementation {est.optimizer_impl}: fused kernels allocate no scratch; torch's foreach "
        "AdamW a state-sized copy of every parameter; its for-loop path two of the largest tensor",
        "memory in GiB (2^30 bytes); the CUDA context and allocator fragmentation are not included",
    ]


def _stage_text(est: MemoryEstimate) -> str:
    """'8 layers, 4.5 micro-batches in flight': the sized stage's layers and activations held (memory.in_flight)."""
    flight = est.activations.in_flight
    layers = est.stage_layers if est.stage_layers >= 0 else est.spec.n_layers // est.parallel.pp
    return f"{layers} layers, {flight:.4g} micro-batch{'' if flight == 1 else 'es'} in flight"


def _layout_notes(est: MemoryEstimate) -> list[str]:
    """How the model is split over the GPUs (parallel degrees, experts, KV heads under tensor parallelism)."""
    spec, par = est.spec, est.parallel
    assert isinstance(spec, ModelSpec), "a measured model has _measured_notes"
    kv_heads = spec.n_kv_heads
    notes = []
    if par.n_gpus > 1:
        notes.append(f"{par.n_gpus:,} GPUs = dp {par.dp:,} x tp {par.tp}" + (f" x cp {par.cp}" if par.cp > 1 else "")
                     + f" x pp {par.pp}" + (f" (vpp {par.vpp}, interleaved)" if par.vpp > 1 else "")
                     + f"; ZeRO-{par.zero} shards over dp"
                     + (f"; figures for the {est.stage} pipeline stage, the most loaded ({_stage_text(est)})"
                        if par.pp > 1 else "")
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
        [Column("name", "saved tensor", align="left"), Column("bytes", "memory (GiB)", fmt_gib)],
        [{"name": k, "bytes": v} for k, v in sorted(est.activations.per_layer.items(), key=lambda kv: -kv[1])],
        [f"attention {est.attention}; recompute {est.recompute}; activations at {rec.act_bytes:g} bytes/element; "
         "tensor names follow Korthikanti et al. 2022 sec. 4.1"]
        + ([f"{rec.quant_label} (Transformer Engine): the inputs of the linear layers are saved as their "
            f"{rec.saved_input_bytes:.3g}-byte {rec.quant_label} casts"] if rec.fp8_saved_inputs else []),
    )


# --- --finetune lora|qlora: the frozen base and its adapters --------------------------------------------

def finetune_memory_document(est: FinetuneMemory, gpu: Accelerator | None, reserve: float = 0.0) -> Document:

    from ..analytic.finetune import ADAPTER_BYTES, nf4_bytes_per_param

    ft, spec = est.ft, est.ft.spec
    components = est.components()
    peak = est.peak
    fit, fit_lines = _fit_rows(peak, gpu, reserve)
    opt_bytes = est.optimizer_bytes_per_adapter_param
    data = {
        "model": spec.name, "mode": "finetune", "finetune": finetune_config(ft), "batch_size": est.batch,
        "seq_len": est.seq_len, "optimizer": est.optimizer.name, "recompute": est.recompute,
        "attention": est.attention, "loss_impl": est.activations.loss_impl, "trainable": ft.trainable,
        "frozen": ft.frozen,
        "weight_bytes_per_frozen_param": est.weight_bytes_per_frozen_param,
        "bytes_per_adapter_param": est.bytes_per_adapter_param,
        "per_gpu_bytes": peak, "peak_phase": est.peak_phase, "sum_of_components_bytes": sum(components.values()),
        "components": components, "activations": {**est.saved,
                                                   "LoRA A outputs (r-wide, saved for B)":
                                                   0.0 if est.recompute == "full" else est.adapter_activations},
        **fit,
    }
    rows = [{"name": k, "bytes": v, "share": v / peak} for k, v in components.items() if v]
    rows.append({"name": f"peak per GPU ({est.peak_phase})", "bytes": peak, "share": 1.0})
    notes = ft.notes() + [
        f"adapters fp32 (peft autocast_adapter_dtype=True): {ADAPTER_BYTES:g} B weights + {ADAPTER_BYTES:g} B "
        f"gradients + {opt_bytes:g} B {est.optimizer.name} states per adapter parameter; the frozen base has no "
        "gradients, master weights or optimizer states",
        f"activations at {est.act_bytes:g} bytes/element (autocast); the input of each adapted linear is the same "
        "tensor the full-training itemisation counts; each adapter adds its r-wide A(x) (lora_dropout 0); "
        "a frozen linear without an adapter saves no input (autograd keeps only what a gradient needs)",
        "autocast adapter cache: the bf16 copy autocast makes of each fp32 adapter in forward",
        LOSS_NOTES[est.activations.loss_impl],
        "peak = the largest of three phases: end of forward (no gradients, no block rebuilt), the blocks' "
        "backward (the logits freed; the rebuilt block, a dequantised weight, every adapter gradient) and the "
        "optimizer step (weights + adapters + gradients + optimizer states); memory in GiB (2^30 bytes), CUDA "
        "context not included",
    ]
    if ft.config.base_dtype in ("nf4", "fp4"):
        notes.append(f"nf4 asymptote {nf4_bytes_per_param(ft.config.double_quant):.6f} bytes/param; exact per "
                     "tensor with ceil(n/64) blocks, ceil(blocks/256) second-level blocks and its code tables")
    notes += fit_lines
    table = Table(
        "memory per GPU",
        [Column("name", "component", align="left"), Column("bytes", "memory (GiB)", fmt_gib),
         Column("share", "share of peak (%)", _share)],
        rows, notes,
    )
    title = (f"{spec.name}: {ft.config.method} memory per GPU, rank {ft.config.rank} on {ft.config.target_label}, "
             f"batch {est.batch} x seq {est.seq_len}, recompute {est.recompute}")
    return Document(title, data, [table, adapter_table(ft)], [spec.describe()])


LOSS_NOTES = {
    "full": "logits and loss (--loss-impl full, HF Trainer's): the whole tokens x vocab logits, their fp32 copy and "
            "log-probs, then their fp32 gradient: 12 bytes per logit; --loss-impl fused (Liger-Kernel) computes one "
            "chunk at a time",
    "fused": "logits and loss (--loss-impl fused: Liger-Kernel's fused linear cross-entropy): one chunk of logits "
             "(next_pow2(tokens / ceil(vocab / d_model)) tokens x vocab), the head input's gradient and the fp32 "
             "per-token loss; the frozen head has no weight gradient",
}


def _fit_table(plan: MemoryPlan, gpu: Accelerator) -> Table:
    """--finetune --gpu: what fits on one card, per recompute mode."""
    rows = plan.fit or []
    seq = rows[0]["seq_len"] if rows else 0
    visible = "CUDA-visible" if gpu.cuda_visible_bytes else "nominal (the runtime reports 0.3-1.8 GiB less)"
    notes = [f"against {gpu.key}'s {visible} {gpu.usable_bytes / GIB:.2f} GiB less the CUDA context and cuBLASLt "
             f"workspace ({plan.cuda_context / GIB:.2f} GiB for its generation; pytorch#109888, PR #120925)"
             + (f" and --reserve-gib {(plan.reserve - plan.cuda_context) / GIB:g}" if plan.reserve > plan.cuda_context
                else "") + "; the longest sequence in steps of 256 tokens, up to max_position_embeddings"]
    return Table(f"what fits on one {gpu.key}",
                 [Column("recompute", "recompute", align="left"),
                  Column("largest_micro_batch", f"largest micro-batch at seq {seq:,}"),
                  Column("longest_seq_len", "longest sequence at micro-batch 1 (tokens)", lambda v: f"{v:,}")],
                 rows, notes)
