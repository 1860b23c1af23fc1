"""Human units at the edge: parse quantities users type, format base units for people.

Inside llmcalc every number is in a base unit (count, FLOPs, bytes, seconds, USD). This module is
the only place that turns "7B" into 7e9 or 7e9 into "7.00 G".

Conventions (printed in the README):
- Parameter and token counts print in the ML convention by default: k = 1e3, M = 1e6, B = 1e9 (a billion),
  T = 1e12 ("70.6 B params", as model and dataset sizes are named); ``set_count_style("si")`` (the command line's
  ``--units si``) prints G for 1e9 instead. FLOPs always use SI prefixes (GFLOP, TFLOP/s). On input
  "B" is accepted as a synonym for G, because "7B params" is how models are named; input
  suffixes ignore case where that is unambiguous for a count (15t = 15T, 1m = 1M = a million). Binary
  suffixes (IEC) say a power of two exactly: Ki = 2**10, Mi = 2**20, Gi = 2**30, Ti = 2**40, Pi = 2**50
  (16Mi tokens per step = 2,048 sequences of 8,192).
- Sequence lengths are the one exception on input: "4k" context means 4,096 tokens and "32k" means
  32,768, as model cards use them (binary k). Use ``parse_length`` for them.
- Memory uses binary prefixes: KiB = 2**10, MiB = 2**20, GiB = 2**30 bytes; never "GB" for 2**30.
"""

from __future__ import annotations

import math
import re

from .errors import LlmcalcError

SI_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}
# Input suffixes for counts; case matters only where SI needs it (m/M: we accept only M = mega).
_COUNT_SUFFIXES = {
    "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "m": 1e6, "g": 1e9, "b": 1e9, "t": 1e12, "p": 1e15,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
}
_LENGTH_SUFFIXES = {"": 1, "k": 1024, "K": 1024, "Ki": 1024, "ki": 1024, "M": 1024**2, "Mi": 1024**2, "m": 1024**2,
                    "mi": 1024**2}
GIB = 2**30  # bytes in one GiB (binary prefix, IEC 80000-13); the one place this literal lives
_BINARY_BYTES = [("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)]

_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


class UnitError(LlmcalcError):
    """A quantity the user typed could not be understood."""


def _split(text: str | float | int, what: str, suffixes: dict, examples: str) -> tuple[float, float]:
    match = _QUANTITY.match(str(text))
    if not match or match.group(2) not in suffixes:
        known = ", ".join(s for s in suffixes if s)
        raise UnitError(f"cannot read {what} {text!r}: write a number with an optional suffix ({known}), "
                        f"e.g. {examples}")
    return float(match.group(1)), suffixes[match.group(2)]


def parse_count(text: str | float | int, what: str = "quantity") -> float:
    """Parse a count of things (parameters, tokens, FLOPs): '7B' -> 7e9, '1.5T' -> 1.5e12, '300k' -> 3e5;
    binary suffixes exactly: '16Mi' -> 16 * 2**20 = 16,777,216."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    number, scale = _split(text, what, _COUNT_SUFFIXES, "7B, 1.5T, 300k, 16Mi (= 16 x 2^20), 2e12")
    return number * scale


def parse_length(text: str | int, what: str = "length") -> int:
    """Parse a sequence length in tokens: '4k' -> 4096, '32k' -> 32768, '2048' -> 2048 (binary k)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    number, scale = _split(text, what, _LENGTH_SUFFIXES, "2048, 4k (= 4,096), 32k, 1M (= 1,048,576)")
    value = number * scale
    if not math.isfinite(value):
        raise UnitError(f"{what} {text!r} is not a finite number of tokens")
    if value != int(value):
        raise UnitError(f"{what} {text!r} is not a whole number of tokens")
    return int(value)


_CARD_MEMORY = {"": GIB, "g": GIB, "gb": GIB, "gib": GIB, "t": 2**40, "tb": 2**40, "tib": 2**40, "m": 2**20,
                "mb": 2**20, "mib": 2**20}


def parse_card_memory(text: str | float | int, what: str = "--gpu-memory") -> float:
    """A GPU's memory as cards are sold, in bytes: '24GB' -> 24 GiB, '80G', '48 GiB', '24' (GB understood). A card's
    "GB" is binary (a 24 GB card holds 24 x 2^30 bytes of GDDR or HBM, as the presets take it: ``memory_gib``)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        number, scale = float(text), float(GIB)
    else:
        match = _QUANTITY.match(str(text))
        unit = match.group(2).lower() if match else None
        if not match or unit not in _CARD_MEMORY:
            raise UnitError(f"{what} {text!r}: write the card's memory, e.g. 24GB, 80GB, 48GiB")
        number, scale = float(match.group(1)), float(_CARD_MEMORY[unit])
    value = number * scale
    if not (math.isfinite(value) and value > 0):
        raise UnitError(f"{what} {text!r} must be a positive size, e.g. 24GB")
    return value


def si(value: float, digits: int = 3) -> str:
    """Format with an SI prefix and `digits` significant figures: 6738415616 -> '6.74 G'."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} "
    exponent = min(max(int(math.floor(math.log10(abs(value)) / 3)), 0), 8)
    prefix = ["", "k", "M", "G", "T", "P", "E", "Z", "Y"][exponent]
    scaled = value / 10 ** (3 * exponent)
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(scaled)))), 0)
    text = f"{scaled:.{decimals}f}"
    if float(text) >= 1000 and exponent < 8:  # rounding carried into the next prefix
        return si(float(text) * 10 ** (3 * exponent), digits)
    return f"{text} {prefix}"


COUNT_STYLES = ("ml", "si")
_COUNT_STYLE = ["ml"]  # the one setting: how counts print (the command line sets it once per run, `--units`)


def set_count_style(style: str) -> None:
    """How counts print from now on: 'ml' (B = 10^9, the default) or 'si' (G = 10^9)."""
    if style not in COUNT_STYLES:
        raise UnitError(f"--units must be one of {', '.join(COUNT_STYLES)}, got {style!r}")
    _COUNT_STYLE[0] = style


def count_style() -> str:
    return _COUNT_STYLE[0]


def count_prefixes() -> str:
    """The prefixes counts print with, for a table's note: 'k = 10^3, M = 10^6, B = 10^9 (billion), T = 10^12'."""
    billion = "B" if count_style() == "ml" else "G"
    return f"k = 10^3, M = 10^6, {billion} = 10^9 (billion), T = 10^12"


def count_label(noun: str) -> str:
    """A column label for counts of `noun`, naming the prefixes: 'params (B = 10^9)' (ML) or 'params (SI)'."""
    return f"{noun} ({'B = 10^9' if count_style() == 'ml' else 'SI'})"


def fmt_count(value: float) -> str:
    """A count with a prefix, e.g. '6.74 B' (ML convention, B = billion) or '6.74 G' (SI, `set_count_style`);
    append the unit in the label: 'params'."""
    text = si(value).rstrip()
    return text[:-1] + "B" if count_style() == "ml" and text.endswith(" G") else text


def fmt_flops(value: float) -> str:
    """FLOPs with SI prefix: 1.58e14 -> '158 TFLOP'; from 1e21 on (Z, Y) also in e-notation:
    4.2e22 -> '42.0 ZFLOP (4.20e22)'."""
    text = f"{si(value)}FLOP"
    return f"{text} ({value:.2e})".replace("e+", "e") if abs(value) >= 1e21 else text


def fmt_budget(value: float) -> str:
    """A FLOP budget as written in papers: 1e24 -> '1e24 FLOP (1.00 YFLOP)', 3.2e23 -> '3.2e23 FLOP (320 ZFLOP)'."""
    mantissa, exponent = f"{value:.3g}".partition("e")[::2]
    written = f"{mantissa}e{int(exponent)}" if exponent else mantissa
    return f"{written} FLOP ({si(value)}FLOP)" if value < 1e27 else f"{written} FLOP"


def fmt_flops_rate(value: float) -> str:
    """FLOP/s with SI prefix: 9.89e14 -> '989 TFLOP/s'."""
    return f"{si(value)}FLOP/s"


def fmt_bytes(value: float, unit: str | None = None) -> str:
    """Bytes with a binary prefix: 2.25 * 2**30 -> '2.25 GiB'. `unit` forces one (e.g. 'GiB')."""
    if unit is not None:
        scale = dict(_BINARY_BYTES + [("B", 1)])[unit]
        return f"{value / scale:.2f} {unit}"
    for name, scale in _BINARY_BYTES:
        if abs(value) >= scale:
            return f"{value / scale:.2f} {name}"
    return f"{value:.0f} B"


def fmt_gib(value: float) -> str:
    """Bytes in GiB, two decimals, for a column whose label carries the unit: 2.25 * 2**30 -> '2.25'."""
    return f"{value / GIB:,.2f}"


def fmt_tokens(value: float, noun: str = "tokens") -> str:
    """A token (or parameter) count as people say it, trailing zeros dropped: 1.5e13 -> '15 T tokens',
    1.5e10 -> '15 B tokens', 7e9 -> '7 B params' (B = billion = SI G, as model and dataset sizes are named)."""
    for name, scale in (("T", 1e12), ("B" if count_style() == "ml" else "G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:,.0f} {name} {noun}" if scaled >= 1000 else f"{scaled:.3g} {name} {noun}"
    return f"{value:,.0f} {noun}"


def plural(count: float, noun: str, many: str | None = None) -> str:
    """'1 GPU', '1,024 GPUs': a count with thousands separators and the noun it agrees with (`many`: an
    irregular plural, 'micro-batches')."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {many or noun + 's'}"


def fmt_int(value: int) -> str:
    """An exact integer with thousands separators: 6738415616 -> '6,738,415,616'."""
    return f"{int(value):,}"


def fmt_pct(fraction: float) -> str:
    """A signed percentage from a fraction, 3 significant figures (2 below 0.001 %), never in
    e-notation: -0.0437 -> '-4.37 %', 4e-5 -> '+0.00400 %', 9.9e-6 -> '+0.00099 %'."""
    pct = fraction * 100
    if pct == 0:
        return "0 %"
    # below 1e-3 positional, never e-notation: 9.9e-6 -> '+0.00099 %' (2 significant digits)
    text = (f"{pct:+#.3g}".rstrip(".") if abs(pct) >= 1e-3
            else f"{pct:+.{1 - math.floor(math.log10(abs(pct)))}f}")
    return f"{text} %"


def fmt_seconds(seconds: float) -> str:
    """A duration in the largest sensible unit: '2.13 days', '3.9 ms'."""
    for name, scale in (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {name}"
    return f"{seconds * 1e9:.3g} ns"


def fmt_usd(value: float) -> str:
    """Money in US dollars, whole dollars above $100: '$65,536' or '$12.50'."""
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"
