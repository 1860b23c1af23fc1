"""The (prompt, output) lengths of a serving workload's requests, drawn as `vllm bench serve` draws them for its
datasets (`--dataset sharegpt`, `--random-range-ratio`): read by serving_speed.Workload."""

from __future__ import annotations

import random

DATASETS = ("random", "sharegpt")  # vllm bench serve's --dataset-name values llmcalc draws lengths for


# vLLM's ShareGPT sampling (vllm/benchmarks/datasets.py, ShareGPTDataset.sample and is_valid_sequence): the first turn
# of a conversation as the prompt, the reply's token count as the output; pairs with a prompt or output under 4 tokens,
# a prompt over 1024 or prompt + output over 2048 pruned.
SHAREGPT_MIN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048


def sharegpt_lengths(input_len: float, output_len: float, num_prompts: int,
                     seed: int = 0) -> tuple[tuple[int, int], ...]:
    """`num_prompts` (prompt, output) lengths as vllm bench's ShareGPT sample draws them, taken as exponential with
    the given means (the largest-entropy law for a positive length of known mean: chat lengths are long-tailed,
    most short and a few near the filter's limits), within vLLM's filter (SHAREGPT_*): drawn with a seeded
    generator, the pairs the filter prunes drawn again."""
    rng, out = random.Random(seed), list[tuple[int, int]]()
    while len(out) < num_prompts:
        n_in = SHAREGPT_MIN + round(rng.expovariate(1 / max(1.0, input_len - SHAREGPT_MIN)))
        n_out = SHAREGPT_MIN + round(rng.expovariate(1 / max(1.0, output_len - SHAREGPT_MIN)))
        if n_in <= SHAREGPT_MAX_PROMPT and n_in + n_out <= SHAREGPT_MAX_TOTAL:
            out.append((n_in, n_out))
    return tuple(out)


def random_lengths(input_len: int, output_len: int, num_prompts: int, range_ratio: float,
                   seed: int = 0) -> tuple[tuple[int, int], ...]:
    """vllm bench's random dataset with --random-range-ratio r (vllm/benchmarks/datasets.py, RandomDataset.sample):
    each prompt and output length uniform over the whole numbers in [X·(1 - r), X·(1 + r)], drawn with a seeded
    generator (not numpy's stream: the same law, other draws)."""
    rng = random.Random(seed)

    def draw(x: int) -> int:
        return max(1, rng.randint(int(x * (1 - range_ratio)), int(x * (1 + range_ratio))))

    return tuple((draw(input_len), draw(output_len)) for _ in range(num_prompts))
