"""vLLM V0's multi-step scheduling (`serve --num-scheduler-steps N`, engines.SchedulerPolicy.multi_step) held to
what vLLM's V0 source does: the scheduler runs once per pass of N decode steps (vllm/engine/llm_engine.py
_has_remaining_steps), a prefill without chunking is one step (vllm/sequence.py init_multi_step_from_lookahead_slots:
no lookahead slots for a prefill), every running sequence stays in the pass to its end, and the host's per-step work
is paid once a pass (vllm-project/vllm#7000); N = 1 is the scheduler as it was."""

from __future__ import annotations

import dataclasses

import pytest
from clirun import one_line_error

from llmcalc.analytic import engines
from llmcalc.analytic.serving import plan_serving
from llmcalc.analytic.serving_speed import ENGINE_STEP_SECONDS, KvBudget, Workload, plan_workload, simulate
from llmcalc.spec import load_hardware, load_model

STEP = 0.010  # seconds: every step alike, so that each run's clock counts steps


class Constant:
    """A step of STEP seconds whatever it runs (its host's part, ENGINE_STEP_SECONDS, included)."""

    def seconds(self, tokens, rows, kv_tokens, decodes, pairs, length):
        return STEP

    def decode_attention_seconds(self, kv_tokens, sequences):
        return 0.0


V0 = engines.POLICIES["vllm-v0"]


def run(steps: int, work: Workload):
    return simulate(Constant(), work, 256, 8192, KvBudget.requests(256),
                    policy=dataclasses.replace(V0, multi_step=steps))


def test_one_step_is_the_v0_scheduler_as_it_was():
    work = Workload(512, 64, max_concurrency=4, num_prompts=40)
    assert run(1, work) == simulate(Constant(), work, 256, 8192, KvBudget.requests(256), policy=V0)


def test_a_request_that_finishes_mid_pass_waits_for_the_pass_to_end():
    """One request of 10 output tokens with N = 8: the prefill step samples the first token (one step, no
    lookahead), a pass of 8 decode steps the next 8, and a second pass of 8 the last one, whose 7 other steps the
    sequence rides out: 17 steps where single-step scheduling takes 10, less the host's work saved, 7 steps' worth
    of ENGINE_STEP_SECONDS a pass."""
    work = Workload(100, 10, max_concurrency=1, num_prompts=1, served=False)
    assert run(1, work).e2e[0] == pytest.approx(10 * STEP)
    assert run(8, work).e2e[0] == pytest.approx(17 * STEP - 2 * 7 * ENGINE_STEP_SECONDS)


def test_new_requests_wait_for_the_pass():
    """A closed loop of one client sends its next request when the last finishes: under single-step scheduling it
    is prefilled at once; under N = 8 the previous request's pass runs out first (10 outputs: it ends 7 steps
    late), so each request after the first waits those 7 steps before its first token and the run takes them too."""
    work = Workload(100, 10, max_concurrency=1, num_prompts=4, served=False)
    one, multi = run(1, work), run(8, work)
    assert one.ttft[0] == pytest.approx(STEP)
    saved = 2 * 7 * ENGINE_STEP_SECONDS
    assert multi.duration == pytest.approx(4 * (17 * STEP - saved))


def test_each_decode_reserves_its_lookahead_slots():
    """core/scheduler.py: a decode pass appends num_scheduler_steps - 1 lookahead slots a sequence, so a cache of
    16-token blocks that holds 4 sequences of 100 + 12 tokens for the next step holds fewer for a pass of 8 (the
    latest admitted is preempted)."""
    def blocks(n: int) -> int:
        return -(-n // 16)
    kv = KvBudget(blocks=4 * blocks(112), need=blocks)
    work = Workload(100, 40, num_prompts=4, served=False)
    one = simulate(Constant(), work, 256, 8192, kv, policy=V0)
    multi = simulate(Constant(), work, 256, 8192, kv, policy=dataclasses.replace(V0, multi_step=8))
    assert one.mean_running > multi.mean_running


def test_refused_where_the_engine_never_had_it():
    est = plan_serving(load_model("llama-3-8b"), load_hardware("h100-sxm"), 1, max_model_len=8192)
    with pytest.raises(Exception, match="--num-scheduler-steps 8: multi-step scheduling is vLLM's V0"):
        plan_workload(est, Workload(1024, 256, max_concurrency=4, num_prompts=8), num_scheduler_steps=8)
    base = ["serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "1024", "--output-len", "256",
            "--num-scheduler-steps", "8"]
    assert "--engine sglang" in one_line_error(*base, "--engine", "sglang")
    assert "--vllm-version v0" in one_line_error(*base, "--vllm-version", "0.11.0")
    assert "--max-model-len 32768" in one_line_error(*base, "--vllm-version", "0.6.4")  # 131,072: V0 chunks
