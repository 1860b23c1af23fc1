"""The input checks every layer shares: whole numbers >= 1, finite positive figures, fractions.

Each raises one ``LlmcalcError`` whose message starts with the name of what is wrong (a CLI option
such as ``--tokens`` or a field such as ``n_gpus``), so the command line can print it as one line.
"""

from __future__ import annotations

import math

from .errors import LlmcalcError


def positive_int(what: str, value, maximum: int | None = None) -> int:
    """`value` as a whole number >= 1 (and <= `maximum`, where given)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LlmcalcError(f"{what} must be a whole number >= 1, got {value!r}")
    if maximum is not None and value > maximum:
        raise LlmcalcError(f"{what} must be at most {maximum:,}, got {value:,}")
    return value


def positive_number(what: str, value, maximum: float | None = None) -> float:
    """`value` as a finite number > 0 (and <= `maximum`, where given): no NaN, no inf, no zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LlmcalcError(f"{what} must be a positive number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise LlmcalcError(f"{what} is too large: {value:.3e}") from None
    if not (math.isfinite(number) and number > 0):
        raise LlmcalcError(f"{what} must be a positive, finite number, got {value!r}")
    if maximum is not None and number > maximum:
        raise LlmcalcError(f"{what} must be at most {maximum:g}, got {number:g}")
    return number


def non_negative_number(what: str, value, maximum: float | None = None) -> float:
    """`value` as a finite number >= 0 (and <= `maximum`, where given)."""
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return positive_number(what, value, maximum)


RANK_ORDER = "tp-cp-ep-dp-pp"  # Megatron-Core's default rank order, innermost first
RANK_ORDER_DIMS = ("tp", "cp", "ep", "dp", "pp")


def rank_order(order: str, what: str = "--rank-order") -> tuple[str, ...]:
    """The dimensions of a rank order ("tp-cp-ep-dp-pp", innermost first): each of RANK_ORDER_DIMS once."""
    dims = tuple(order.split("-")) if isinstance(order, str) else ()
    if sorted(dims) != sorted(RANK_ORDER_DIMS):
        raise LlmcalcError(f"{what} {order!r} must list tp, cp, ep, dp and pp once each, innermost first "
                           f"(Megatron-Core's default {RANK_ORDER}; Llama 3's tp-cp-ep-pp-dp)")
    return dims


def goodput(value) -> float:
    """The share of wall-clock a training run spends training, in (0, 1]: wall time = compute time / goodput."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
        raise LlmcalcError(f"--goodput must be in (0, 1] (the share of wall-clock spent training; 0.9 or 90%), "
                           f"got {value!r}")
    return float(value)


def fraction(what: str, value) -> float:
    """A utilization (MFU, HFU) in (0, 1]: 0.45 means 45 % of peak."""
    number = positive_number(what, value)
    if number > 1:
        raise LlmcalcError(f"{what} must be in (0, 1], got {value:g}; 0.45 (or 45%) means 45 % of peak")
    return number


# --- Defaults and bounds every command shares (printed in `--help` and in the refusals) ---------

DEFAULT_SEQ_LEN = 4096  # tokens per training sequence when none is given, in every command
GPU_MEMORY = "--gpu-memory="  # the name --gpu carries when --gpu-memory gave the GPU (spec.presets.load_hardware)
DEFAULT_ZERO = 1  # ZeRO stage over data parallelism when none is given, in every command
DEFAULT_GOODPUT = 0.9  # share of a training run's wall-clock spent training (--goodput): Llama 3, MegaScale
GOODPUT_SOURCE = ("goodput 0.9 by default: Llama 3 (Meta 2024, §3.3.4) reports higher than 90 % effective training "
                  "time over 54 days on up to 16K H100 (466 interruptions); MegaScale (ByteDance, NSDI 2024) over 90 % "
                  "on 12K GPUs")
MAX_SEQ_LEN = 2**25  # 33,554,432 tokens: 3x the longest context any released model claims (10 M)
MAX_TOKENS = 1e18  # training tokens: 10,000x the largest corpora used so far (~1e14)
MAX_PARAMS = 1e16  # parameters: 10,000x the largest published models
MAX_GPUS = 10**7
MAX_COMPUTE = 1e40  # FLOPs
MAX_DAYS = 36_525.0  # a century
MAX_USD_PER_GPU_HOUR = 1e4
MAX_TFLOPS = 1e6  # per device
MAX_BATCH = 2**20  # sequences per step (--global-batch, --micro-batch, ...)
MAX_BATCH_TOKENS = MAX_BATCH * MAX_SEQ_LEN  # --global-batch-tokens: 2**45, about 3.5e13 (and <= MAX_BATCH sequences)
MAX_GENERATE = 2**17  # decode steps the roofline sums one by one
MAX_PROFILE_STEPS = 1000
MAX_PROFILE_LAYERS = 1024  # modules a profile builds (even FakeTensorMode builds every layer)
MAX_CALIBRATE_SECONDS = 600.0
MAX_CALIBRATE_SIZE = 16384
MIN_UTILIZATION = 1e-4  # MFU or achieved/peak below 0.01 % is a typo, not a plan
MAX_LAYERS = 10_000  # 10x the deepest trained Transformer (DeepNet: 1,000 layers)
MAX_WIDTH = 2**24  # any one dimension (d_model, d_ff, heads, vocab, experts ...): 16,777,216


def _binary_form(tokens: int) -> str | None:
    """`tokens` in the binary suffix that says it exactly (16,777,216 -> '16Mi'), or None."""
    for suffix, scale in (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if tokens >= scale and tokens % scale == 0 and tokens // scale < 1000:  # 16Mi, not 3908Ki
            return f"{tokens // scale}{suffix}"
    return None


def nearest_batch_tokens(tokens: float, seq_len: int) -> tuple[int, str | None]:
    """--global-batch-tokens as a whole number of sequences of `seq_len`: (tokens used, note or None).

    A decimal count at a power-of-two sequence length never divides (16M = 16,000,000 is 1,953.125 sequences of
    8,192), though what people mean is 2,048 x 8,192 = 16,777,216 = 16Mi: the nearest multiple of `seq_len` is used
    (at least one sequence) and the note says so, and how to say the count exactly.
    """
    if tokens % seq_len == 0 and tokens >= seq_len:
        return int(tokens), None
    sequences = max(1, round(tokens / seq_len))
    used = sequences * seq_len
    note = (f"--global-batch-tokens {tokens:,.0f} is not a multiple of --seq-len {seq_len:,}: using the nearest, "
            f"{sequences:,} sequence{'s' if sequences > 1 else ''} = {used:,} tokens")
    for scale, binary in ((1e12, 2**40), (1e9, 2**30), (1e6, 2**20), (1e3, 2**10)):  # 16M meant as 16Mi?
        meant = round(tokens / scale) * binary
        if tokens >= scale and tokens / scale == round(tokens / scale) and meant % seq_len == 0:
            return used, note + f"; for {meant // seq_len:,} x {seq_len:,} = {meant:,} write {_binary_form(meant)}"
    exact = _binary_form(used)
    return used, note + f" (write {exact} or --global-batch {sequences:,} to say it exactly)" if exact else \
        note + f" (--global-batch {sequences:,} says it exactly)"
