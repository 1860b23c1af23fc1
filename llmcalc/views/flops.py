"""What `flops` shows: FLOPs per op of one step, by component, totals, the rules of thumb beside the exact
count; for a model only transformers can build, its counted forward (the fallback section); with --finetune,
the fine-tuning step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analytic.flops import flop_group
from ..analytic.rules import check_rules, crossover, elementwise_ops, rules_of_thumb
from ..fallback import METHOD_TRANSFORMERS, FallbackStep
from ..render.tables import Column, Document, Table
from ..units import fmt_pct, si
from .params import finetune_config, method_line

if TYPE_CHECKING:
    from ..analytic.finetune import Finetune, FinetuneFlops
    from ..analytic.flops import StepFlops
    from ..analytic.params import ParamCount
    from ..analytic.rules import Crossover, Rule
    from ..fallback import AnalyticStep, FallbackModel
    from ..spec import ModelSpec

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


def conventions(spec: ModelSpec, causal: bool) -> list[str]:
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


def document(answer: AnalyticStep | FallbackStep) -> Document:
    """`flops`' answer: by llmcalc's formula (with the --finetune step first, if any), or counted by
    transformers."""
    if isinstance(answer, FallbackStep):
        return fallback_flops_document(answer.model, answer.totals, answer.batch, answer.causal, answer.recompute)
    doc = flops_document(answer.step, answer.count)
    return doc if answer.finetune is None else add_finetune_step(doc, answer.finetune.ft, answer.finetune)


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
    """Each rule of thumb beside the exact count per token in the rule's own S² convention (rules.check_rules)."""
    return [{"rule": c.rule.name, "kind": c.rule.kind, "per_token": c.rule.per_token, "convention": c.convention,
             "exact_per_token": c.exact_per_token, "rel_error": c.rel_error, "source": c.rule.source}
            for c in check_rules(step, rules)]


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


# --- the transformers fallback: the counted forward -------------------------------------------------

def fallback_flops_document(model: FallbackModel, step: dict, batch: int, causal: bool, recompute: str) -> Document:
    counted = model.flops
    assert counted is not None, "a FallbackModel loaded without FLOPs"  # narrows the Optional for mypy
    seq = counted["seq_len"]
    real = model.counted.get("real_forward")
    conventions = FLOP_CONVENTIONS[:1] + [
        "backward = 2 x forward (llmcalc's convention, as for analytic models); the LM head is whatever "
        "the modelling code runs on every position",
        f"forward counted by torch's FlopCounterMode on one {'real CPU' if real else 'fake'} batch-1 x {seq} "
        f"forward of {model.cls} "
        f"(sdpa kernels counted with torch's sdpa formulas), scaled linearly to batch {batch}",
        "causal: the attention core (sdpa kernels and the batched matmuls of an attention module) halved"
        if causal else "full S² (what torch's FlopCounterMode counts); --causal halves the attention core",
    ]
    if real:
        from ..analytic.measured import real_forward_note

        conventions.append(real_forward_note(real))
    if model.counted.get("experts_implementation") == "batched_mm":
        conventions.append("MoE: experts run by transformers' batched_mm implementation, which multiplies only "
                           "the k experts each token is routed to: the FLOPs are those of the routed experts")
    data = {"model": model.name, "model_type": model.model_type, "method": METHOD_TRANSFORMERS,
            "transformers_class": model.cls, "batch_size": batch, "seq_len": seq, "causal": causal,
            "recompute": recompute, **step, "by_aten_op_forward_batch_1": counted["by_op"],
            "conventions": conventions, "notes": list(model.notes)}
    forward = step["forward_flops"]
    group_table = Table(
        "forward FLOPs by component",
        [Column("component", "component", align="left"), Column("forward", "forward (FLOP)", _flop),
         Column("share", "share (%)", _share)],
        [{"component": g, "forward": v, "share": v / forward} for g, v in step["groups"].items() if v],
        conventions,
    )
    totals = [
        ("forward", forward), ("backward", step["backward_flops"]),
        ("model (fwd+bwd, MFU numerator)", step["total_flops"]),
        (f"recomputation ({recompute})", step["recompute_flops"]),
        ("hardware (model + recomputation, HFU numerator)", step["hardware_flops"]),
    ]
    total_table = Table(
        f"totals (batch {batch} x seq {seq} = {step['tokens']:,} tokens)",
        [Column("quantity", "quantity", align="left"), Column("step", "per step (FLOP)", _flop),
         Column("per_token", "per token (FLOP)", _flop)],
        [{"quantity": q, "step": v, "per_token": v / step["tokens"]} for q, v in totals],
    )
    return Document(f"{model.name}: FLOPs for batch {batch} x seq {seq}, {'causal' if causal else 'full S²'}, "
                    f"recompute {recompute}", data, [group_table, total_table],
                    preamble=[model.describe(), method_line(model)]
                    + ([f"note: {model.no_formula}"] if model.no_formula else []))


# --- --finetune lora|qlora: the fine-tuning step ------------------------------------------------------

def add_finetune_step(doc: Document, ft: Finetune, fl: FinetuneFlops) -> Document:
    """--finetune: the fine-tuning step's FLOPs first, the full-training tables below it."""
    tokens = fl.tokens
    rows = [("forward (frozen 2·N + adapters 2·N_adapter)", fl.forward),
            ("backward (frozen: activation gradients; adapters: both)", fl.backward),
            ("model (fwd+bwd, MFU numerator)", fl.model_flops),
            ("hardware (with recomputation)", fl.hardware_flops),
            ("rule 4·N_frozen + 6·N_adapter (no S²)", fl.rule() * tokens)]
    doc.data["finetune"] = {**finetune_config(ft), "trainable": ft.trainable, "frozen": ft.frozen,
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
