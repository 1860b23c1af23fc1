"""What `train` shows: training FLOPs, GPU-hours, wall-clock, cost and energy; with a layout, the predicted
step and where its time goes; for an FP8/FP4 run, the MFU against each dense peak (its own and bf16)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_flops, fmt_flops_rate, fmt_tokens, fmt_usd, plural, si
from .layout import overlap_rule

if TYPE_CHECKING:
    from ..analytic.step.prediction import StepPrediction
    from ..analytic.training import TrainingEstimate, TrainingPlan

BREAKDOWN_LABELS = {
    "compute": "compute (matmuls, attention, elementwise, recomputation)",
    "tp_comm": "exposed TP communication", "cp_comm": "exposed CP communication",
    "ep_comm": "exposed EP all-to-all", "dp_comm": "exposed DP/ZeRO communication",
    "pp_comm": "exposed PP send/recv", "pp_bubble": "pipeline bubble", "optimizer": "optimizer step",
}

def _pct(v: float) -> str:
    return f"{v * 100:.1f} %"



def _tflops(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:,.4g}"


def _opt(fmt: Callable[[Any], str], value: float | None) -> str:
    return "n/a" if value is None else fmt(value)


def document(plan: TrainingPlan) -> Document:
    """`train`'s answer: the budget, the predicted step where there is one, MFU against each peak it has."""
    doc = train_document(plan.estimate, plan.inputs, plan.six_n_t, plan.prediction, plan.measured)
    if plan.layout_choice is not None:
        add_layout_choice(doc, plan.layout_choice)
    if plan.memory is not None:  # the predicted layout's memory, as `memory` and `layout` give it
        doc.data.update(plan.memory)
        peak, capacity = plan.memory["memory_per_gpu_bytes"], plan.memory["capacity_bytes"]
        doc.preamble.append(f"memory per GPU on this layout: {peak / GIB:,.2f} GiB of {capacity / GIB:,.2f} GiB "
                            "usable: " + ("fits" if plan.memory["fits"] else "does NOT fit")
                            + " (as `llmcalc memory` with these options)")
    return add_both_peaks(doc, plan)


def add_layout_choice(doc: Document, choice: dict) -> None:
    """`train` without --mfu or --global-batch: the line naming the layout the step was predicted on (the `layout`
    command that lists the alternatives) and the default global batch; JSON `layout_used`."""
    doc.data["layout_used"] = choice
    batch = f"at the {choice['global_batch_why']}"
    if choice["source"] == "given":
        line = f"MFU predicted on the layout the options give (train's defaults for the rest), {batch}"
    else:
        vpp = f" (vpp {choice['vpp']})" if choice["vpp"] > 1 else ""
        ep = f" ep {choice['ep']}" if choice["ep"] > 1 else ""
        ep += (f" {choice['ep_dispatcher']} dispatcher" if "ep_dispatcher" in choice else "") + (
            " ep-overlap" if choice.get("ep_overlap") else "")
        hsdp = f" (HSDP: sharded over dp {choice['dp_shard']})" if choice.get("dp_shard") else ""
        line = (f"MFU predicted on the best layout, tp {choice['tp']} cp {choice['cp']} pp {choice['pp']}{vpp} dp "
                f"{choice['dp']:,}{ep}, micro-batch {choice['micro_batch']}, ZeRO-{choice['zero']}{hsdp}, recompute "
                f"{choice['recompute']} (the fastest of {choice['layouts_that_fit']:,} evaluated that fit: "
                f"`{choice['command']}` lists the others), {batch}; --mfu X answers at a given MFU instead")
    doc.tables[0].notes.insert(0, line)


def train_document(est: TrainingEstimate, inputs: dict, six_n_t: float | None, pred: StepPrediction | None = None,
                   measured: dict | None = None) -> Document:
    acc = est.accelerator
    hours = lambda v: f"{v:,.0f} h"  # noqa: E731
    rows = [  # key, label, value, formatter, shown in the table
        ("total_flops", "training FLOPs (model: fwd+bwd, no recomputation)", est.model_flops, fmt_flops, True),
        ("six_n_t_flops", "6·N·T for comparison", six_n_t, fmt_flops, True),
        ("hardware_flops", "hardware FLOPs (with recomputation)", est.hardware_flops, fmt_flops, True),
        ("peak_flops_per_s", f"peak per GPU (dense {est.dtype})", est.peak, fmt_flops_rate, True),
        ("mfu", "MFU (model FLOPs / peak)", est.effective_mfu, lambda v: f"{v * 100:.1f} %", True),
        ("hfu", "HFU (hardware FLOPs / peak)", est.hfu, lambda v: f"{v * 100:.1f} %", True),
        ("model_flops_per_s_per_gpu", "model FLOP/s per GPU", est.model_flops_per_s_per_gpu, fmt_flops_rate, True),
        ("tokens_per_second_per_gpu", "tokens/s per GPU", est.tokens_per_second_per_gpu,
         lambda v: f"{si(v).strip()} tokens/s", True),
        ("compute_gpu_hours", "GPU-hours computing", est.compute_gpu_hours, hours, True),
        ("goodput", "goodput (share of wall-clock training)", est.goodput, lambda v: f"{v * 100:.0f} %", True),
        ("gpu_seconds", "GPU time (s)", est.gpu_seconds, lambda v: f"{v:.4g} s", False),
        ("gpu_hours", "GPU-hours (wall-clock: computing / goodput)", est.gpu_hours, hours, True),
        ("wall_clock_seconds", "wall-clock (s)", est.wall_seconds, lambda v: f"{v:.4g} s", False),
        ("compute_wall_clock_days", "computing (days)", est.compute_wall_clock_days, lambda v: f"{v:,.2f} days",
         False),
        ("wall_clock_days", f"wall-clock on {plural(est.n_gpus, 'GPU')}", est.wall_clock_days,
         lambda v: f"{v:,.2f} days ({v * 24:,.1f} h)", True),
        ("cost_usd", "cost" + ("" if est.price is None else f" at ${est.price:g}/GPU-hour"), est.cost_usd, fmt_usd,
         True),
        ("energy_kwh", "energy (GPU TDP only)", est.energy_kwh, lambda v: f"{v:,.0f} kWh", True),
    ]
    data = {**inputs, "device": acc.key, "dtype": est.dtype, "n_gpus": est.n_gpus}
    data.update({key: value for key, _, value, _, _ in rows})
    data["usd_per_gpu_hour"] = est.price
    data["device_source"] = acc.source
    table = Table(
        "training budget",
        [Column("key", "key", align="left", show=False), Column("quantity", "quantity", align="left"),
         Column("value", "value", show=False), Column("text", "value (with unit)", csv=False)],
        [{"key": k, "quantity": label, "value": v, "text": _opt(f, v)} for k, label, v, f, shown in rows if shown],
        _train_notes(est, inputs),
    )
    tables = [table]
    _add_steptime(data, tables, est, pred, measured)
    model = inputs["model"]
    return Document(
        title=f"{model}: {fmt_tokens(est.tokens)} on {est.n_gpus:,} x {acc.key}"
              + (f", seq {inputs['seq_len']:,}" if inputs.get("seq_len") else ""),
        data=data, tables=tables,
        preamble=[f"device: {acc.name}, {acc.memory_bytes / GIB:g} GiB, {acc.memory_bandwidth / 1e12:.3g} TB/s "
                  f"(sources: `llmcalc presets --format json`)"],
    )


def _add_steptime(data: dict, tables: list[Table], est: TrainingEstimate, pred: StepPrediction | None,
                  measured: dict | None) -> None:
    """The issue-10 keys: predicted (or given) step time, MFU/HFU, TFLOP/s per GPU, breakdown, layout."""
    data["mfu_source"] = "predicted" if pred is not None else "given"
    data["tokens_per_second"] = est.tokens_per_second
    data["model_tflops_per_gpu"] = est.model_flops_per_s_per_gpu / 1e12
    data["hardware_tflops_per_gpu"] = est.hardware_flops_per_s_per_gpu / 1e12
    data["step_seconds"] = data["breakdown_seconds"] = data["layout"] = None
    if measured is not None:
        measured = dict(measured)
        lay = measured.pop("layout", None)
        if lay is not None:  # given MFU with a layout: the step time it implies, no breakdown
            data["layout"] = lay.as_dict()
            data["step_seconds"] = est.step_seconds(lay.global_batch, data["seq_len"])
        if measured:
            data["measured"] = measured
    if pred is not None:
        data.update(pred.to_json())
        data["mfu_source"] = "predicted"
        tables.append(breakdown_table(pred))


def _train_notes(est: TrainingEstimate, inputs: dict) -> list[str]:
    notes = []
    if est.mfu is not None:
        notes.append(f"GPU time computing = model FLOPs / (peak x MFU {est.mfu:g}) (PaLM App. B definition of MFU)")
    elif est.achieved_flops_per_s is not None:  # TrainingEstimate takes exactly one of the two
        notes.append(f"GPU time computing = hardware FLOPs / achieved {est.achieved_flops_per_s / 1e12:g} TFLOP/s per "
                     f"GPU (recomputation {inputs.get('recompute')} counted as achieved work, as Narayanan et al. "
                     f"2021)")
    notes.append(inputs["flops_basis"])
    notes.append(goodput_note(est.goodput))
    if est.price is None:
        notes.append("no price: pass --usd-per-gpu-hour for a cost")
    elif est.usd_per_gpu_hour is None:
        notes.append(f"price from the {est.accelerator.key} preset (a dated on-demand list price, see its notes); "
                     f"--usd-per-gpu-hour sets yours")
    notes.append("energy = GPU-hours x TDP: the accelerators alone, no host, network or cooling (PUE 1.0)")
    return notes


def goodput_note(goodput: float) -> str:
    """The line under every GPU-hours figure: how compute time became wall time, and where the default comes from."""
    from ..validate import DEFAULT_GOODPUT, GOODPUT_SOURCE

    if goodput == 1:
        return "wall-clock = computing time (--goodput 1: no restarts, failures or checkpoints counted)"
    return (f"GPU-hours, wall-clock, cost and energy = computing time / goodput {goodput:g} (restarts, failures, "
            f"checkpoints); " + (GOODPUT_SOURCE if goodput == DEFAULT_GOODPUT else "--goodput as given")
            + "; --goodput 1 counts computing alone")


def breakdown_table(pred: StepPrediction) -> Table:
    from ..analytic.step.prediction import (
        GLOBAL_CONSTANTS,  # only with a step prediction: `train --mfu` needs no step model
    )

    rows = [{"part": k, "label": BREAKDOWN_LABELS[k], "seconds": v, "share": v / pred.step_seconds}
            for k, v in pred.breakdown.items()]
    lay = pred.layout
    return Table(
        f"predicted step: {pred.step_seconds:.4g} s, MFU {_pct(pred.mfu)}, HFU {_pct(pred.hfu)}",
        [Column("part", "part", align="left", show=False), Column("label", "where the step time goes", align="left"),
         Column("seconds", "time (s)", lambda v: f"{v:.4g}"), Column("share", "share (%)", _pct)],
        rows,
        [f"layout: tp {lay.tp} x cp {lay.cp} x pp {lay.pp} x dp {lay.dp} (ep {lay.ep}"
         f"{f', etp {lay.expert_tp}' if lay.expert_tp != lay.tp else ''}), schedule {lay.schedule}"
         f"{f' vpp {lay.vpp}' if lay.vpp > 1 else ''}, micro-batch {lay.micro_batch}, global batch "
         f"{plural(lay.global_batch, 'sequence')} = {plural(lay.grad_accum, 'micro-batch', 'micro-batches')} per "
         f"pipeline, ZeRO {lay.zero}, "
         f"sequence parallel {'on' if lay.sequence_parallel else 'off'}"
         f"{', TP overlap on' if lay.tp_overlap else ''}{', EP overlap on' if lay.ep_overlap else ''}, rank order "
         f"{lay.order}, recipe {pred.recipe}",
         *pred.notes,
         f"{pred.model_flops_per_gpu / 1e12:.1f} model TFLOP/s per GPU, {pred.hardware_flops_per_gpu / 1e12:.1f} "
         f"hardware TFLOP/s per GPU, {si(pred.tokens_per_second).strip()} tokens/s",
         "compute: smooth roofline per matmul at the GEMM dtype's MAMF x tile/wave quantization, attention at its "
         "kernel's measured rate for the pairs it computes (`llmcalc.analytic.kernels`); communication: alpha-beta on "
         "nccl-tests curves (`llmcalc.analytic.comm`)",
         overlap_rule(lay),
         "global constants: " + "; ".join(GLOBAL_CONSTANTS)],
    )


# --- MFU in each convention: against the --dtype peak, the bf16 peak and the recipe's own (torchtitan#560) ------

FP8_NOTE = ("FP8 training: the same model FLOP/s against the dense bf16 and the dense fp8 peak; the fp8 figure is the "
            "stricter one (only the GEMMs run in FP8; attention, norms and the optimizer do not), the bf16 one "
            "compares with bf16 runs")  # the report's FP8 section
PEAKS_NOTE = ("MFU in each convention: the same model FLOP/s against the dense {peaks} peaks; the recipe's own "
              "({own}) is the stricter one for a low-precision run (only the GEMMs run in it; attention, norms and "
              "the optimizer do not), the bf16 one compares with bf16 runs and may exceed 100 %")


def add_both_peaks(doc: Document, plan: TrainingPlan) -> Document:
    """Where the run's MFU has more than one convention (--dtype other than bf16, or a predicted step whose recipe
    runs its GEMMs in FP8/FP4): the same achieved model FLOP/s as a share of each dense peak, JSON
    `mfu_vs_<dtype>_peak` for each, and `mfu_vs_recipe_peak` with `recipe_peak_dtype` for the recipe's own."""
    by_peak, own = plan.mfu_by_peak, plan.recipe_peak
    if len(by_peak) < 2:
        return doc
    est = plan.estimate
    table = doc.tables[0]
    at = next(i for i, r in enumerate(table.rows) if r["key"] == "mfu") + 1
    for dtype, value in sorted(by_peak.items(), key=lambda kv: -kv[1]):  # bf16 first, as before
        doc.data[f"mfu_vs_{dtype}_peak"] = value
        tflops = est.model_flops_per_s_per_gpu / value / 1e12
        whose = " (the recipe's GEMM dtype)" if dtype == own and own != est.dtype else ""
        table.rows.insert(at, {"key": f"mfu_vs_{dtype}_peak",
                               "quantity": f"MFU vs dense {dtype} peak ({_tflops(tflops)} TFLOP/s){whose}",
                               "value": value, "text": _pct(value)})
        at += 1
    if own is not None:
        doc.data["mfu_vs_recipe_peak"] = by_peak[own]
        doc.data["recipe_peak_dtype"] = own
    table.notes.append(PEAKS_NOTE.format(peaks=", ".join(by_peak), own=own or est.dtype))
    return doc
