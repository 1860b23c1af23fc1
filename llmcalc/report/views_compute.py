"""What `flops`, `train` and `plan` show: FLOPs per op, training budgets, compute-optimal sizing."""

from __future__ import annotations

from ..analytic.flops import StepFlops, flop_group
from ..analytic.params import ParamCount
from ..analytic.rules import Crossover, Rule, crossover, elementwise_ops, rules_of_thumb
from ..analytic.training import ComputeOptimal, TrainingEstimate
from ..render.tables import Column, Document, Table
from ..units import GIB, fmt_budget, fmt_count, fmt_flops, fmt_flops_rate, fmt_pct, fmt_tokens, fmt_usd, plural, si

FLOP_CONVENTIONS = [
    "FLOPs, not MACs: a multiply-add is 2 FLOPs; only matmuls are counted (as torch's FlopCounterMode does)",
    "embedding lookup 0 FLOPs; LM head counted as a matmul whether tied or not; backward = 2 x forward",
]


SSM_CONVENTION = (
    "SSM scan (no S² term, linear in S), recurrent form per token x channel x state: Mamba-1 7·B·S·E·N "
    "(Gu & Dao 2023 Alg. 2), Mamba-2 5·B·S·E·N (Dao & Gu 2024 eq. 1), Gated DeltaNet 7·B·S·E·N (Yang et al. "
    "2024 eq. 10); exp/softplus/gating not counted; "
    "torch's FlopCounterMode sees only the scan's matmuls (see llmcalc/analytic/ssm.py); conv1d counted "
    "over the S+K-1 padded positions torch computes")


def conventions(spec, causal: bool) -> list[str]:
    """The FLOP conventions that apply to `spec` (the Mamba scan line only where it has Mamba layers)."""
    ssm = [SSM_CONVENTION] if spec.is_hybrid and any(
        k in ("mamba", "mamba2", "gated_deltanet")
        for i in range(spec.n_layers) for k in spec.layer_parts(i)[0]) else []
    return FLOP_CONVENTIONS + [_s2(causal)] + ssm


def _s2(causal: bool) -> str:
    return ("causal: S² terms halved (Megatron-LM/NeMo; what FlashAttention computes)" if causal
            else "full S² (PaLM/nanoGPT/torchtitan; what torch's FlopCounterMode counts); --causal halves it")


def _flop(v: float) -> str:
    return si(v).strip()


def flops_document(step: StepFlops, count: ParamCount) -> Document:
    spec = step.spec
    cross = crossover(spec, step.causal) if spec.architecture == "decoder" else None
    rules = rules_of_thumb(count, step.seq_len)
    rule_rows = _rule_rows(step, rules)
    elementwise = elementwise_ops(step)
    ops_rows = _op_rows(step)
    data = {
        "model": spec.name, "method": "analytic", "batch_size": step.batch, "seq_len": step.seq_len,
        "decoder_seq_len": step.decoder_seq_len, "causal": step.causal, "recompute": step.recompute,
        "tokens": step.tokens,
        "forward_flops": step.forward, "backward_flops": step.backward, "total_flops": step.model_flops,
        "recompute_flops": step.recompute_flops, "hardware_flops": step.hardware_flops,
        "flops_per_token": step.model_flops_per_token, "forward_flops_per_token": step.forward_per_token,
        "hardware_flops_per_token": step.hardware_flops_per_token,
        "ops": dict(step.ops), "groups": step.groups(),
        "rules_of_thumb": rule_rows,
        "crossover_seq_len": None if cross is None else
        {"vs_attention_projections": cross.vs_projections, "vs_projections_and_ffn": cross.vs_block},
        "elementwise_estimate": elementwise,
        "conventions": conventions(spec, step.causal),
    }
    tables = [_op_table(step, ops_rows), _group_table(step, cross), _totals_table(step),
              _rule_table(rule_rows, rules), _elementwise_table(step, elementwise)]
    return Document(
        title=f"{spec.name}: FLOPs for batch {step.batch:,} x seq {step.seq_len:,}, "
              f"{'causal' if step.causal else 'full S²'}, recompute {step.recompute}",
        data=data, tables=tables,
        preamble=[spec.describe()] + [f"note: {n}" for n in spec.notes],
    )


def _op_rows(step: StepFlops) -> list[dict]:
    """One row per forward op: its forward, backward (2 x) and fwd+bwd FLOPs, per token, share of the model FLOPs."""
    model = step.model_flops
    return [
        {"op": op, "component": flop_group(op), "forward": f, "backward": 2 * f, "total": 3 * f,
         "per_token": 3 * f / step.tokens, "fraction_of_total": (3 * f / model) if model else 0.0}
        for op, f in step.ops.items()
    ]


def _rule_rows(step: StepFlops, rules: list[Rule]) -> list[dict]:
    """Each rule of thumb beside the exact count per token in the rule's own S² convention (a rule
    without one is held to the step's convention)."""
    exact_for = {}
    for causal in (False, True):
        other = step if causal == step.causal else _same_step(step, causal)
        exact_for[causal] = (other.forward_per_token, other.model_flops_per_token)
    rows = []
    for rule in rules:
        causal = step.causal if rule.convention == "none" else rule.convention == "causal"
        exact = exact_for[causal][0 if rule.kind == "forward" else 1]
        rows.append({"rule": rule.name, "kind": rule.kind, "per_token": rule.per_token,
                     "convention": "full S²" if rule.convention == "full"
                     else "causal" if rule.convention == "causal"
                     else ("causal" if step.causal else "full S²") + " (exact)",
                     "exact_per_token": exact, "rel_error": rule.per_token / exact - 1, "source": rule.source})
    return rows


def _share(v: float) -> str:
    return f"{v * 100:.2f} %"


def _op_table(step: StepFlops, ops_rows: list[dict]) -> Table:
    return Table(
        "FLOPs by operation (one step)",
        [Column("op", "op", align="left"), Column("component", "component", align="left", show=False),
         Column("forward", "forward (FLOP)", _flop), Column("backward", "backward (FLOP)", _flop),
         Column("total", "fwd+bwd (FLOP)", _flop), Column("per_token", "fwd+bwd per token (FLOP)", _flop),
         Column("fraction_of_total", "share (%)", _share)],
        ops_rows, conventions(step.spec, step.causal),
    )


def _group_table(step: StepFlops, cross: Crossover | None) -> Table:
    """Forward FLOPs per component, with the sequence lengths where attention S² overtakes the rest."""
    return Table(
        "by component",
        [Column("component", "component", align="left"), Column("forward", "forward (FLOP)", _flop),
         Column("share", "share (%)", _share)],
        [{"component": g, "forward": v, "share": v / step.forward} for g, v in step.groups().items() if v],
        [] if cross is None else [
            f"attention S² overtakes the Q/K/V/O projections at S = {cross.vs_projections:,.0f} tokens and the "
            f"whole block (projections + FFN) at S = {cross.vs_block:,.0f} tokens "
            f"({'causal' if step.causal else 'full S²'})"
        ],
    )


def _totals_table(step: StepFlops) -> Table:
    totals = [
        ("forward", step.forward), ("backward", step.backward), ("model (fwd+bwd, MFU numerator)", step.model_flops),
        (f"recomputation ({step.recompute})", step.recompute_flops),
        ("hardware (model + recomputation, HFU numerator)", step.hardware_flops),
    ]
    return Table(
        f"totals (batch {step.batch} x seq {step.seq_len} = {step.tokens:,} tokens)",
        [Column("quantity", "quantity", align="left"), Column("step", "per step (FLOP)", _flop),
         Column("per_token", "per token (FLOP)", _flop)],
        [{"quantity": q, "step": v, "per_token": v / step.tokens} for q, v in totals],
    )


def _rule_table(rule_rows: list[dict], rules: list[Rule]) -> Table:
    return Table(
        "rules of thumb per token",
        [Column("rule", "rule", align="left"), Column("kind", "kind", align="left"),
         Column("per_token", "rule (FLOP/token)", _flop), Column("convention", "S²", align="left"),
         Column("exact_per_token", "exact (FLOP/token)", _flop), Column("rel_error", "error (%)", fmt_pct)],
        rule_rows,
        ["each rule is compared with the exact count in its own S² convention; N is the parameter count "
         "(active per token for MoE)"] + [f"{r.name}: {r.source}" for r in rules[2:]],
    )


def _elementwise_table(step: StepFlops, elementwise: dict) -> Table:
    return Table(
        "non-matmul work (rough estimate, not in the totals)",
        [Column("kind", "kind", align="left"), Column("forward", "forward (FLOP)", _flop),
         Column("share", "vs matmul forward (%)", _share)],
        [{"kind": k, "forward": v, "share": v / step.forward} for k, v in elementwise.items()],
        ["per-element costs are llmcalc's estimates (softmax 5, RMSNorm 4, LayerNorm 7, SwiGLU 5 FLOPs ...)"],
    )


def _same_step(step: StepFlops, causal: bool) -> StepFlops:
    from ..analytic.flops import step_flops

    return step_flops(step.spec, step.batch, step.seq_len, causal=causal, recompute=step.recompute,
                      decoder_seq_len=step.decoder_seq_len)


def _opt(fmt, value):
    return "n/a" if value is None else fmt(value)


def train_document(est: TrainingEstimate, inputs: dict, six_n_t: float | None, pred=None,
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
        ("gpu_seconds", "GPU time (s)", est.gpu_seconds, lambda v: f"{v:.4g} s", False),
        ("gpu_hours", "GPU-hours", est.gpu_hours, hours, True),
        ("wall_clock_seconds", "wall-clock (s)", est.wall_seconds, lambda v: f"{v:.4g} s", False),
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


def _add_steptime(data: dict, tables: list, est: TrainingEstimate, pred, measured: dict | None) -> None:
    """The issue-10 keys: predicted (or given) step time, MFU/HFU, TFLOP/s per GPU, breakdown, layout."""
    data["mfu_source"] = "predicted" if pred is not None else "given"
    data["tokens_per_second"] = est.tokens / est.wall_seconds
    data["model_tflops_per_gpu"] = est.model_flops_per_s_per_gpu / 1e12
    data["hardware_tflops_per_gpu"] = est.hfu * est.peak / 1e12
    data["step_seconds"] = data["breakdown_seconds"] = data["layout"] = None
    if measured is not None:
        lay = measured.pop("layout", None)
        if lay is not None:  # given MFU with a layout: the step time it implies, no breakdown
            data["layout"] = lay.as_dict()
            data["step_seconds"] = lay.global_batch * data["seq_len"] / data["tokens_per_second"]
        if measured:
            data["measured"] = measured
    if pred is not None:
        from .views_steptime import breakdown_table

        data.update(pred.to_json())
        data["mfu_source"] = "predicted"
        tables.append(breakdown_table(pred))


def _train_notes(est: TrainingEstimate, inputs: dict) -> list[str]:
    notes = []
    if est.mfu is not None:
        notes.append(f"GPU time = model FLOPs / (peak x MFU {est.mfu:g}) (PaLM App. B definition of MFU)")
    elif est.achieved_flops_per_s is not None:  # TrainingEstimate takes exactly one of the two
        notes.append(f"GPU time = hardware FLOPs / achieved {est.achieved_flops_per_s / 1e12:g} TFLOP/s per GPU "
                     f"(recomputation {inputs.get('recompute')} counted as achieved work, as Narayanan et al. 2021)")
    notes.append(inputs["flops_basis"])
    if est.price is None:
        notes.append("no price: pass --usd-per-gpu-hour for a cost")
    elif est.usd_per_gpu_hour is None:
        notes.append(f"price from the {est.accelerator.key} preset (a dated on-demand list price, see its notes); "
                     f"--usd-per-gpu-hour sets yours")
    notes.append("energy = GPU-hours x TDP: the accelerators alone, no host, network or cooling (PUE 1.0)")
    return notes


def plan_document(compute: float, plans: list[ComputeOptimal], inputs: dict) -> Document:
    rows = [{"method": p.method, "params": p.params, "tokens": p.tokens, "tokens_per_param": p.tokens_per_param,
             "source": p.source} for p in plans]
    data = {**inputs, "compute_flops": compute, "plans": rows}
    table = Table(
        "compute-optimal model size and tokens",
        [Column("method", "method", align="left"), Column("params", "params (SI)", fmt_count),
         Column("tokens", "tokens (SI)", fmt_count),
         Column("tokens_per_param", "tokens per param", lambda v: f"{v:.1f}")],
        rows,
        ["C = 6·N·D (Kaplan et al. 2020); " + p.source for p in plans[:1]] + [p.source for p in plans[1:]]
        + ["Approach 3 as published favours smaller models than the paper's Approaches 1 and 2 (~20 tokens per "
           "parameter); Besiroglu et al. 2024 traced that to the fit itself"],
    )
    return Document(title=f"compute budget {fmt_budget(compute)}", data=data, tables=[table],
                    preamble=[inputs["basis"]])

