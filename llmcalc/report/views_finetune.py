"""What `params`, `flops`, `memory` and `train` add with --finetune lora|qlora."""

from __future__ import annotations

from ..analytic.finetune import ADAPTER_BYTES, Finetune, FinetuneFlops, FinetuneMemory, nf4_bytes_per_param
from ..hardware import Accelerator
from ..units import fmt_count, fmt_int, si
from .tables import Column, Document, Table


def _config(ft: Finetune) -> dict:
    cfg = ft.config
    return {"method": cfg.method, "rank": cfg.rank, "targets": list(cfg.targets), "target_label": cfg.target_label,
            "base_dtype": cfg.base_dtype, "double_quant": cfg.double_quant, "adapter_dtype": "fp32"}


def adapter_table(ft: Finetune) -> Table:
    rows = [{"name": k, "params": v, "params_si": fmt_count(v)} for k, v in ft.components.items()]
    rows.append({"name": "trainable (adapters)", "params": ft.trainable, "params_si": fmt_count(ft.trainable)})
    rows.append({"name": "frozen (base model)", "params": ft.frozen, "params_si": fmt_count(ft.frozen)})
    share = ft.trainable / (ft.trainable + ft.frozen)
    return Table(
        f"{ft.config.method} adapters, rank {ft.config.rank}, targets {ft.config.target_label}",
        [Column("name", "component", align="left"), Column("params", "params (exact)", fmt_int),
         Column("params_si", "params (SI)", csv=False)],
        rows, ft.notes()[:1] + [f"trainable share {share * 100:.3f} % of all parameters (adapters + base), "
                                 "as peft's print_trainable_parameters reports it"],
    )


def add_to_params(doc: Document, ft: Finetune) -> Document:
    doc.data.update({"finetune": _config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
                     "trainable_components": ft.components})
    doc.tables.insert(1, adapter_table(ft))
    return doc


def add_to_flops(doc: Document, ft: Finetune, fl: FinetuneFlops) -> Document:
    tokens = fl.tokens
    rows = [("forward (frozen 2·N + adapters 2·N_adapter)", fl.forward),
            ("backward (frozen: activation gradients; adapters: both)", fl.backward),
            ("model (fwd+bwd, MFU numerator)", fl.model_flops),
            ("hardware (with recomputation)", fl.hardware_flops),
            ("rule 4·N_frozen + 6·N_adapter (no S²)", fl.rule() * tokens)]
    doc.data["finetune"] = {**_config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
                            "forward_flops": fl.forward, "backward_flops": fl.backward, "total_flops": fl.model_flops,
                            "hardware_flops": fl.hardware_flops, "flops_per_token": fl.model_flops_per_token,
                            "hardware_flops_per_token": fl.hardware_flops_per_token,
                            "rule_flops_per_token": fl.rule(), "full_training_flops_per_token":
                            doc.data["flops_per_token"]}
    doc.tables.insert(0, Table(
        f"{ft.config.method} fine-tuning step, rank {ft.config.rank} on {ft.config.target_label}",
        [Column("quantity", "quantity", align="left"), Column("step", "per step (FLOP)", lambda v: si(v).strip()),
         Column("per_token", "per token (FLOP)", lambda v: si(v).strip())],
        [{"quantity": q, "step": v, "per_token": v / tokens} for q, v in rows],
        fl.notes() + [f"full training of the same model: {si(doc.data['flops_per_token']).strip()}FLOP per token "
                      "(the tables below)"],
    ))
    doc.title += f" — {ft.config.method} r{ft.config.rank}"
    return doc


def finetune_memory_document(est: FinetuneMemory, gpu: Accelerator | None, reserve: float = 0.0) -> Document:
    from .views_memory import _fit_rows, _gib, _share

    ft, spec = est.ft, est.ft.spec
    components = est.components()
    peak = est.peak
    fit, fit_lines = _fit_rows(peak, gpu, reserve)
    opt_bytes = est.optimizer.bytes_per_param(_fp32())
    data = {
        "model": spec.name, "mode": "finetune", "finetune": _config(ft), "batch_size": est.batch,
        "seq_len": est.seq_len, "optimizer": est.optimizer.name, "recompute": est.recompute,
        "attention": est.attention, "trainable": ft.trainable, "frozen": ft.frozen,
        "weight_bytes_per_frozen_param": components["weights"] / ft.frozen,
        "bytes_per_adapter_param": {"adapters": ADAPTER_BYTES, "gradients": ADAPTER_BYTES,
                                    "optimizer_states": opt_bytes, "total": 2 * ADAPTER_BYTES + opt_bytes},
        "per_gpu_bytes": peak, "peak_phase": est.peak_phase, "sum_of_components_bytes": sum(components.values()),
        "components": components, "activations": {**est.activations.per_layer,
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
        "with targets short of all-linear the inputs of unadapted frozen linears are still counted (an upper bound)",
        "autocast adapter cache: the bf16 copy autocast makes of each fp32 adapter in forward",
        "peak = max(end of forward: everything but gradients, optimizer step: weights + adapters + gradients + "
        "optimizer states); memory in GiB (2^30 bytes), CUDA context not included",
    ]
    if ft.config.base_dtype in ("nf4", "fp4"):
        notes.append(f"nf4 asymptote {nf4_bytes_per_param(ft.config.double_quant):.6f} bytes/param; exact per "
                     "tensor with ceil(n/64) blocks, ceil(blocks/256) second-level blocks and its code tables")
    notes += fit_lines
    table = Table(
        "memory per GPU",
        [Column("name", "component", align="left"), Column("bytes", "memory (GiB)", _gib),
         Column("share", "share of peak (%)", _share)],
        rows, notes,
    )
    title = (f"{spec.name}: {ft.config.method} memory per GPU, rank {ft.config.rank} on {ft.config.target_label}, "
             f"batch {est.batch} x seq {est.seq_len}, recompute {est.recompute}")
    return Document(title, data, [table, adapter_table(ft)], [spec.describe()])


def _fp32():
    from ..analytic.finetune import _FP32_STATES

    return _FP32_STATES
