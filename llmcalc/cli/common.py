"""What every command does around its one core call: load the models and accelerators it names (warning when
a sequence runs past a model's trained positions), and print the answer on stdout with the warnings gathered
on the way on stderr. Light at import: presets, formulas and views are imported by the calls that need them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..analytic.measured import MeasuredModel
    from ..fallback import FallbackModel, MeasuredPair
    from ..hardware import Accelerator
    from ..render.tables import Document
    from ..spec import ModelSpec

_WARNINGS: list[str] = []
_READ_AS: list[str] = []  # how an input was read (a rounded --global-batch-tokens): said with a refusal too


_CAPTURED: list[tuple[Document, list[str]]] | None = None  # while `captured()` runs: what emit would print


def warn(message: str, read_as: bool = False) -> None:
    """A warning for stderr, shown with the answer (never before a refusal, which stays one line); `read_as`: it says
    how an input was read, so a refusal of what was read says it too, on its one line (`refusal_context`)."""
    _WARNINGS.append(f"llmcalc: warning: {message}")
    if read_as:
        _READ_AS.append(message)


def refusal_context() -> str:
    """What a refusal's one line adds: how inputs were read ('' when as typed)."""
    return "".join(f"; note: {line}" for line in _READ_AS)


def flush_warnings(show: bool = True) -> None:
    for line in _WARNINGS:
        if show:
            click.echo(line, err=True)
    _WARNINGS.clear()
    _READ_AS.clear()


def emit(doc: Document, fmt: str, warnings: Iterable[str] = ()) -> None:
    """The answer on stdout; the warnings gathered on the way (and the estimate's `warnings`), on stderr (only
    with an answer: a refusal stays one line)."""
    from ..render.tables import render

    for line in warnings:
        warn(line)
    if _CAPTURED is not None:  # a library call (llmcalc.api): the answer and its warnings, nothing printed
        _CAPTURED.append((doc, [line.removeprefix("llmcalc: warning: ") for line in _WARNINGS]))
        _WARNINGS.clear()
        return
    text = render(doc, fmt)
    flush_warnings()
    click.echo(text, nl=False)


def exact_batch_tokens(tokens: float | None, seq_len: int) -> float | None:
    """--global-batch-tokens as the nearest whole number of sequences, with a warning saying what was used and how
    to say it exactly when it was not one (16M at --seq-len 8k: 16Mi); None stays None."""
    from ..validate import nearest_batch_tokens

    if tokens is None:
        return None
    used, note = nearest_batch_tokens(tokens, seq_len)
    if note:
        warn(note, read_as=True)
    return used


@contextmanager
def captured() -> Iterator[list[tuple[Document, list[str]]]]:
    """Within it, `emit` prints nothing and appends (the Document, its warnings) to the list it yields."""
    global _CAPTURED
    flush_warnings(show=False)
    answers: list[tuple[Document, list[str]]] = []
    _CAPTURED = answers
    try:
        yield answers
    finally:
        _CAPTURED = None
        flush_warnings(show=False)


def check_length(spec: ModelSpec, seq_len: int | None, what: str = "--seq-len") -> ModelSpec:
    """`spec`, warning (stderr) when `seq_len` exceeds its max_position_embeddings."""
    if seq_len is not None and spec.max_seq_len and seq_len > spec.max_seq_len:
        warn(f"{what} {seq_len:,} exceeds {spec.name}'s max_position_embeddings ({spec.max_seq_len:,}); "
             f"the figures assume the model could run that long")
    return spec


def load_model(name: str, seq_len: int | None = None) -> ModelSpec:
    """The model MODEL names (a preset, a repo id, a config.json), checked against `seq_len`."""
    from ..spec import load_model as load

    return check_length(load(name), seq_len)


def load_counted(name: str, seq_len: int | None = None) -> ModelSpec | FallbackModel:
    """The model by llmcalc's formula (checked against `seq_len`), or, for a model_type only transformers
    knows, counted by transformers at `seq_len`."""
    from ..fallback import FallbackModel
    from ..fallback import load_counted as load

    model = load(name, seq_len)
    return model if isinstance(model, FallbackModel) else check_length(model, seq_len)


def load_measured(name: str, seq_len: int | None = None) -> ModelSpec | MeasuredModel:
    """The model by llmcalc's formula (checked against `seq_len`), or, for a model_type only transformers
    knows, what transformers measured at `seq_len` (fallback.load_measured)."""
    from ..fallback import load_measured as load
    from ..spec import ModelSpec

    model = load(name, seq_len)
    return check_length(model, seq_len) if isinstance(model, ModelSpec) else model


def load_any(names: Iterable[str], seq_len: int) -> list[ModelSpec | MeasuredPair]:
    """Every model named, by llmcalc's formula (checked against `seq_len`) or, for a model_type only transformers
    knows, what it counted and measured at `seq_len` (fallback.load_any): whatever `params` and `memory` answer."""
    from ..fallback import load_any as load
    from ..spec import ModelSpec

    models = [load(name, seq_len) for name in names]
    return [check_length(m, seq_len) if isinstance(m, ModelSpec) else m for m in models]


def load_hardware(name: str) -> Accelerator:
    from ..spec import load_hardware as load

    return load(name)
