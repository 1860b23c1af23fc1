"""What `params`, `flops`, `memory` and `train` add with --finetune lora|qlora."""

from __future__ import annotations

from ..analytic.finetune import (
    ADAPTER_BYTES,
    Finetune,
    FinetuneFlops,
    FinetuneMemory,
    LoraConfig,
    finetune,
    nf4_bytes_per_param,
)
from ..analytic.memory import MemoryEstimate
from ..hardware import Accelerator
from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_count, fmt_int, si
from .views_memory import _fit_rows, _gib, _share


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


# The report's fine-tuning section (`report --finetune lora|qlora`): full / LoRA / QLoRA side by side.

def _methods(cfg) -> dict[str, LoraConfig | None]:
    """Full training (None) and LoRA and QLoRA at the chosen rank and targets; the chosen method keeps its
    --base-dtype, the other its default base (bf16 for LoRA, nf4 for QLoRA)."""
    from dataclasses import replace

    from ..analytic.finetune import lora_config

    out: dict[str, LoraConfig | None] = {"full": None}
    for method in ("lora", "qlora"):
        out[method] = cfg if cfg.method == method else replace(lora_config(method, cfg.rank, cfg.targets),
                                                                double_quant=cfg.double_quant)
    return out


def _label(method: str, cfg, chosen: str) -> str:
    if cfg is None:
        return "full (bf16-mixed, unsharded)"
    name = "LoRA" if method == "lora" else "QLoRA"
    return f"{name} ({cfg.base_dtype} base)" + (" · plan" if method == chosen else "")


def finetune_setups(spec, scenario, cfg) -> dict[str, tuple[MemoryEstimate | FinetuneMemory, LoraConfig | None]]:
    """Label -> (memory estimate, LoraConfig or None) for full training and both methods, each GPU holding
    the whole model (data parallel, no ZeRO or TP) at the plan's micro-batch, sequence and recompute."""
    from ..analytic.finetune import finetune_memory
    from ..analytic.memory import training_memory

    out = {}
    for method, c in _methods(cfg).items():
        est: MemoryEstimate | FinetuneMemory
        if c is None:
            est = training_memory(spec, scenario.micro_batch, scenario.seq_len, "bf16-mixed",
                                  optimizer=scenario.optimizer, recompute=scenario.recompute)
        else:
            est = finetune_memory(spec, c, scenario.micro_batch, scenario.seq_len, optimizer=scenario.optimizer,
                                  recompute=scenario.recompute)
        out[_label(method, c, cfg.method)] = (est, c)
    return out


def side_by_side_document(spec, scenario, setups: dict) -> Document:
    """Memory per GPU by component (GiB), one column per set-up; the peak and whether it fits below."""
    keys = list(dict.fromkeys(k for est, _ in setups.values() for k in est.components()))
    labels = list(setups)
    ids = [cfg.method if cfg is not None else "full" for _, cfg in setups.values()]  # CSV headers
    cols = [Column("name", "component", align="left")] + [
        Column(ident, f"{label} (GiB)", _gib) for ident, label in zip(ids, labels, strict=True)]
    rows = []
    for key in keys:
        values = [est.components().get(key) for est, _ in setups.values()]
        if any(values):
            rows.append({"name": key, **dict(zip(ids, values, strict=True))})
    rows.append({"name": "peak per GPU", **dict(zip(ids, (est.peak for est, _ in setups.values()), strict=True))})
    cap = scenario.gpu.memory_bytes
    adapter = next(est for est, c in setups.values() if c is not None)
    per_adapter = 2 * ADAPTER_BYTES + adapter.optimizer.bytes_per_param(_fp32())
    notes = [f"{label}: peak at the {est.peak_phase}; {'fits' if est.peak <= cap else 'does NOT fit'} in "
             f"{scenario.gpu.key}'s {cap / GIB:g} GiB" for label, (est, _) in setups.items()]
    notes += ["each GPU holds the whole model (data parallel, no ZeRO or tensor parallelism): the plan's sharded "
              "full training is in the Memory section", "full: bf16 weights and gradients, fp32 master weights and "
              "AdamW states (2 + 2 + 4 + 8 = 16 B/param); LoRA/QLoRA: the frozen base in its dtype, fp32 adapters "
              f"with their gradients and {adapter.optimizer.name} states ({per_adapter:g} B per adapter parameter)",
              "a blank cell: the set-up has no such component; memory in GiB (2^30 bytes)"]
    data = {"model": spec.name, "batch_size": scenario.micro_batch, "seq_len": scenario.seq_len,
            "setups": {label: {"per_gpu_bytes": est.peak, "peak_phase": est.peak_phase,
                               "components": est.components()} for label, (est, _) in setups.items()}}
    return Document(f"{spec.name}: memory per GPU, full training against LoRA and QLoRA", data,
                    [Table(f"memory per GPU at micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}, "
                           f"recompute {scenario.recompute}", cols, rows, notes)])


def flops_table(spec, scenario, setups: dict) -> Table:
    """Model FLOPs per token (exact per-op count at the plan's sequence length) and the rule beside it."""
    from ..analytic.flops import step_flops
    from ..analytic.params import count_params

    step = step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute)
    count = count_params(spec)
    n = count.active_per_token
    rows, notes = [], []
    for label, (_, cfg) in setups.items():
        if cfg is None:
            rows.append({"setup": label, "trainable": count.total, "exact": step.model_flops_per_token,
                         "rule": 6.0 * n, "rule_name": "6·N"})
            continue
        fl = FinetuneFlops(finetune(spec, cfg), step)
        notes = fl.notes()
        rows.append({"setup": label, "trainable": fl.ft.trainable, "exact": fl.model_flops_per_token,
                     "rule": fl.rule(), "rule_name": "4·N_frozen + 6·N_adapter"})
    return Table(f"training FLOPs per token at seq {scenario.seq_len:,} ({'causal' if scenario.causal else 'full S²'})",
                 [Column("setup", "set-up", align="left"), Column("trainable", "trainable params (SI)", fmt_count),
                  Column("exact", "model FLOPs per token (exact, FLOP)", lambda v: si(v).strip()),
                  Column("rule", "rule (FLOP per token, no S²)", lambda v: si(v).strip()),
                  Column("rule_name", "rule", align="left")],
                 rows, notes + [
                     "QLoRA's FLOPs equal LoRA's: dequantising the nf4 base is memory traffic, not matmul FLOPs",
                     "full: forward 2·N, backward 4·N (6·N per token), plus the attention S² terms"])


def finetune_section(report, specs, scenario, cfg, line: str) -> None:
    """`report --finetune lora|qlora`: per decoder model, trainable against frozen parameters, memory per GPU
    of full training, LoRA and QLoRA side by side (one figure for all), and FLOPs per token."""
    from .document import safe_name
    from .memory_bars import memory_bars

    report.heading("Fine-tuning (LoRA and QLoRA)")
    scales = ", double-quantised scales" if cfg.base_dtype in ("nf4", "fp4") and cfg.double_quant else ""
    report.paragraph(f"The plan's fine-tuning set-up: {cfg.method} rank {cfg.rank} on {cfg.target_label}, "
                     f"{cfg.base_dtype} base{scales}, micro-batch {scenario.micro_batch} x seq {scenario.seq_len:,}, "
                     f"recompute {scenario.recompute}, "
                     f"{scenario.optimizer}; compared with full training and the other method at the same rank and "
                     f"targets, each on one {scenario.gpu.key} holding the whole model.")
    decoders = [s for s in specs if s.architecture == "decoder"]
    for spec in specs:
        if spec.architecture != "decoder":
            report.paragraph(f"{spec.name}: fine-tuning memory needs the activation model, which covers decoder-only "
                             "models.")
    all_setups = {s.name: finetune_setups(s, scenario, cfg) for s in decoders}
    if not all_setups:
        return
    bars = {(label if len(all_setups) == 1 else f"{name}: {label}"): est.peak_components()
            for name, setups in all_setups.items() for label, (est, _) in setups.items()}
    report.figure("finetune_memory", memory_bars(bars, scenario.gpu.memory_bytes, scenario.gpu.key,
                                                 "Memory per GPU: full training, LoRA and QLoRA (each GPU holds "
                                                 "the whole model)", line),
                  f"Memory per GPU at the peak, by component group: full training (bf16-mixed + "
                  f"{scenario.optimizer}, no sharding) against {cfg.method} rank {cfg.rank} on {cfg.target_label} "
                  f"and the other method at the same rank; the plan's set-up marked 'plan'; dashed: "
                  f"{scenario.gpu.key}'s capacity")
    for spec in decoders:
        setups = all_setups[spec.name]
        ft = finetune(spec, cfg)
        report.heading(spec.name, 3)
        doc = side_by_side_document(spec, scenario, setups)
        doc.tables += [adapter_table(ft), flops_table(spec, scenario, setups)]
        doc.data.update({"finetune": _config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
                         "trainable_components": ft.components})
        report.document(doc, f"finetune-{safe_name(spec.name)}")
