"""Click parameter types for the command line: forgiving where it is safe, strict everywhere else.

Every type refuses NaN, inf, zero where it makes no sense, and values beyond the sane maxima in
``llmcalc.validate`` with one message; click prefixes it with the option's name
(``Invalid value for '--tokens': ...``), so the user knows what to fix.
"""

from __future__ import annotations

import math
from typing import Any

import click

from ..dtypes import DTYPES, canonical_dtype
from ..errors import LlmcalcError
from ..units import UnitError, parse_card_memory, parse_count, parse_length
from ..validate import MIN_UTILIZATION, rank_order


class Count(click.ParamType):
    """A count typed the human way: 7B, 1.5T, 15t, 300k, 1m, 2e12 (SI; B = billion). `whole`: an integer
    (GPUs, sequences: 1k = 1,000)."""

    name = "count"

    def __init__(self, minimum: float = 1, maximum: float = math.inf, whole: bool = False) -> None:
        self.minimum, self.maximum, self.whole = minimum, maximum, whole

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = parse_count(value, "a count")
            except UnitError as exc:
                self.fail(str(exc), param, ctx)
        if not math.isfinite(number):
            self.fail(f"must be a finite number, got {value}", param, ctx)
        if self.whole and number != int(number):
            self.fail(f"must be a whole number, got {value}", param, ctx)
        if number < self.minimum:
            self.fail(f"must be at least {self.minimum:g}, got {value}", param, ctx)
        if number > self.maximum:
            exact = float(self.maximum).is_integer() and self.maximum < 1e16
            self.fail(f"must be at most {int(self.maximum) if exact else self.maximum:,}, got {value}", param, ctx)
        return int(number) if self.whole else number


class CountList(click.ParamType):
    """One count or a comma list of them: 1,8,64,256 (each as `Count(whole=True)` reads it), distinct, in order."""

    name = "count[,count...]"

    def __init__(self, maximum: float) -> None:
        self.item = Count(whole=True, maximum=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not all(parts):
            self.fail(f"must be a count or a comma list of counts (1,8,64), got {value!r}", param, ctx)
        counts = [self.item.convert(p, param, ctx) for p in parts]
        if len(set(counts)) != len(counts):
            self.fail(f"lists a count twice: {value}", param, ctx)
        return tuple(counts)


class Length(click.ParamType):
    """A sequence length in tokens: 2048, 4k (= 4,096), 32k, 1m (= 1,048,576)."""

    name = "length"

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            length = value
        else:
            try:
                length = parse_length(value, "a length")
            except UnitError as exc:
                self.fail(str(exc), param, ctx)
        if length < 1:
            self.fail(f"must be a positive number of tokens, got {value}", param, ctx)
        if length > self.maximum:
            self.fail(f"must be at most {self.maximum:,} tokens, got {value}", param, ctx)
        return length


class Number(click.ParamType):
    """A finite real number in [minimum, maximum] (`zero`: 0 allowed too)."""

    name = "number"

    def __init__(self, maximum: float = math.inf, zero: bool = False, minimum: float = 0.0) -> None:
        self.maximum, self.zero, self.minimum = maximum, zero, minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"must be a finite number, got {value}", param, ctx)
        if number < 0 or (number == 0 and not self.zero):
            self.fail(f"must be {'zero or ' if self.zero else ''}positive, got {value}", param, ctx)
        if 0 < number < self.minimum:
            self.fail(f"must be at least {self.minimum:g}, got {value}", param, ctx)
        if number > self.maximum:
            self.fail(f"must be at most {self.maximum:g}, got {value}", param, ctx)
        return number


class Fraction(click.ParamType):
    """A utilization: 0.4 or 40% (in (0, 1])."""

    name = "fraction"

    def __init__(self, meaning: str = "of peak", minimum: float = MIN_UTILIZATION) -> None:
        self.meaning, self.minimum = meaning, minimum  # "of peak" (MFU), "of the wall-clock training" (goodput)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip()
        scale = 1.0
        if text.endswith("%"):
            text, scale = text[:-1].strip(), 0.01
        try:
            number = float(text) * scale
        except ValueError:
            self.fail(f"{value!r} is not a fraction; write 0.4 or 40%", param, ctx)
        if not (math.isfinite(number) and self.minimum <= number <= 1 and number > 0):
            self.fail(f"must be in (0, 1], got {value}; 0.4 or 40% means 40 % {self.meaning}"
                      + (f" (at least {self.minimum:g})" if self.minimum > 0 else ""), param, ctx)
        return number


class DType(click.ParamType):
    """A dtype in the one vocabulary of llmcalc.dtypes (bfloat16 = bf16, float16 = fp16, ...)."""

    name = "dtype"

    def __init__(self, allowed: tuple[str, ...] = DTYPES, extra: tuple[str, ...] = ()) -> None:
        self.allowed, self.extra = allowed, extra

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if str(value).strip().lower() in self.extra:
            return str(value).strip().lower()
        try:
            return canonical_dtype(value, "dtype", self.allowed)
        except LlmcalcError as exc:
            self.fail(str(exc).removeprefix("dtype: "), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.extra + self.allowed) + "]"


class Choice(click.Choice):
    """click.Choice, case-insensitive, with aliases (e.g. sdpa -> flash)."""

    def __init__(self, choices: list[str], aliases: dict[str, str] | None = None) -> None:
        super().__init__(choices, case_sensitive=False)
        self.aliases = aliases or {}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        key = str(value).strip().lower()
        return super().convert(self.aliases.get(key, key), param, ctx)


class Name(click.ParamType):
    """A preset name (or path): not empty."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not str(value).strip():
            self.fail("is empty; give a preset name (`llmcalc presets` lists them)", param, ctx)
        return str(value)


class CardMemory(click.ParamType):
    """A GPU's memory as cards are sold (24GB, 80GB, 48GiB), in bytes: units.parse_card_memory."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return parse_card_memory(value, "a GPU memory")
        except UnitError as exc:
            self.fail(str(exc), param, ctx)


class ModelName(Name):
    """A model argument: a preset name, a config.json path or folder, a Hugging Face repo id or hub URL. A URL is read
    as its repo id; a repo id that is no preset is read from the local Hugging Face cache, else its config.json (only
    that file) is fetched where huggingface_hub and the hub are there (`llmcalc.hub`); else left for the loader's one
    line saying how to pass the file."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        if "/" not in text or text.endswith(".json"):
            return text  # a preset name or a file: no hub lookup (and light at start-up)
        from ..hub import fetch_config
        from ..spec.presets import locate

        return locate(text, fetch=fetch_config)


class RankOrder(click.ParamType):
    """A rank order, innermost first: tp, cp, ep, dp and pp once each, joined by '-' (validate.rank_order)."""

    name = "order"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        order = str(value).strip().lower()
        try:
            rank_order(order)
        except LlmcalcError as exc:
            self.fail(str(exc).removeprefix("--rank-order "), param, ctx)
        return order
