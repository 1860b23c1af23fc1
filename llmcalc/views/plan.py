"""What `plan` shows: compute-optimal model size and tokens for a FLOP budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..render.tables import Column, Document, Table
from ..units import count_label, fmt_budget, fmt_count

if TYPE_CHECKING:
    from ..analytic.training import BudgetPlan


def document(budget: BudgetPlan) -> Document:
    compute, plans, inputs = budget.compute, budget.plans, budget.inputs
    rows = [{"method": p.method, "params": p.params, "tokens": p.tokens, "tokens_per_param": p.tokens_per_param,
             "source": p.source} for p in plans]
    data = {**inputs, "compute_flops": compute, "plans": rows}
    table = Table(
        "compute-optimal model size and tokens",
        [Column("method", "method", align="left"), Column("params", count_label("params"), fmt_count),
         Column("tokens", count_label("tokens"), fmt_count),
         Column("tokens_per_param", "tokens per param", lambda v: f"{v:.1f}")],
        rows,
        ["C = 6·N·D (Kaplan et al. 2020); " + p.source for p in plans[:1]] + [p.source for p in plans[1:]]
        + ["Approach 3 as published favours smaller models than the paper's Approaches 1 and 2 (~20 tokens per "
           "parameter); Besiroglu et al. 2024 traced that to the fit itself"],
    )
    return Document(title=f"compute budget {fmt_budget(compute)}", data=data, tables=[table],
                    preamble=[inputs["basis"]])
