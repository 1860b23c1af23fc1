"""Ring attention (context parallelism, --cp-comm p2p) held to TransformerEngine's own loop: which correction and
accumulation each rank runs at each step, enumerated here from context_parallel.py (AttnFuncWithCPAndKVP2P,
NVIDIA/TransformerEngine @d0067d0) and averaged over the ranks, against the step model's closed forms."""

from __future__ import annotations

import pytest

from llmcalc.analytic.step.attention import ring_accumulate_bytes, ring_merge_bytes
from llmcalc.analytic.step.collectives import ring_backward_exposed


def _te_forward_merge_bytes(cp: int, rank: int, elements: float, act: float, out: float) -> float:
    """The "fwd output correction" loop for one rank: step 0 flash_attn_fwd_out_correction_init (read the partial
    output, write out), steps i <= rank flash_attn_fwd_out_correction over all queries (read partial, read + write
    out), later steps flash_attn_fwd_second_half_out_correction over half; out.to() when out is wider."""
    total = elements * (act + out)
    for i in range(1, cp):
        share = 1.0 if i <= rank else 0.5
        total += share * elements * (act + 2 * out)
    return total + (elements * (out + act) if out != act else 0.0)


def _te_backward_accumulate_bytes(cp: int, rank: int, q: float, kv: float, grad: float) -> float:
    """The backward's per-step dq.add_ / dk.add_, dv.add_: step 0 copies; steps i <= rank compute all queries
    against the first half of the keys (a full dQ, half a dK/dV), later steps the second half of the queries against
    all keys (half a dQ, a full dK/dV); an add reads both operands and writes one."""
    total = 0.0
    for i in range(1, cp):
        dq, dkv = (1.0, 0.5) if i <= rank else (0.5, 1.0)
        total += (dq * q + dkv * kv) * 3 * grad
    return total


@pytest.mark.parametrize("cp", [2, 3, 4, 8, 16])
@pytest.mark.parametrize(("act", "out"), [(2.0, 2.0), (1.0, 4.0)])
def test_merge_is_te_loop_averaged_over_ranks(cp: int, act: float, out: float) -> None:
    elements = 1e6
    te = sum(_te_forward_merge_bytes(cp, r, elements, act, out) for r in range(cp)) / cp
    assert ring_merge_bytes(out_elements=elements, steps=cp, act_bytes=act, out_bytes=out) == pytest.approx(te)


@pytest.mark.parametrize("cp", [2, 3, 4, 8, 16])
def test_accumulation_is_te_loop_averaged_over_ranks(cp: int) -> None:
    q, kv = 3e6, 1.5e6
    te = sum(_te_backward_accumulate_bytes(cp, r, q, kv, 2.0) for r in range(cp)) / cp
    assert ring_accumulate_bytes(q_elements=q, kv_elements=kv, steps=cp, grad_bytes=2.0) == pytest.approx(te)


def test_backward_sends_follow_te_schedule() -> None:
    """cp steps in the backward: K/V alone, then K/V with dK/dV, then dK/dV alone, each under its step's kernel."""
    send, step, cp = 1.0, 0.5, 4
    schedule = [send] + [2 * send] * (cp - 2) + [send]
    assert ring_backward_exposed(kv_send=send, step_compute=step, hops=cp - 1) == pytest.approx(
        sum(max(0.0, s - step) for s in schedule))
    assert ring_backward_exposed(kv_send=send, step_compute=10.0, hops=cp - 1) == 0.0
    assert ring_backward_exposed(kv_send=send, step_compute=step, hops=0) == 0.0
