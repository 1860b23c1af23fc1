"""The progress bar of long commands (report, layout, the transformers fallback): on stderr when it is a
terminal, silent otherwise, so that pipes and tests see nothing of it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, label: str) -> None:
        self.bar: Any = None  # click's ProgressBar, entered by hand: steps come from several call sites
        if sys.stderr.isatty():
            import click

            self.bar = click.progressbar(length=total, label=label, file=sys.stderr)
            self.bar.__enter__()

    def step(self, label: str | None = None) -> None:
        if self.bar is not None:
            if label:
                self.bar.label = label
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@contextmanager
def progress_bars(label: str) -> Iterator[Callable[[int], Callable[[], None]]]:
    """A `progress(total)` factory for functions that learn their total late (``search_layouts``): it opens one
    bar of `total` steps and returns its step function; every bar opened is closed on the way out."""
    bars: list[Progress] = []

    def progress(total: int) -> Callable[[], None]:
        bars.append(Progress(total, label))
        return bars[0].step

    try:
        yield progress
    finally:
        for bar in bars:
            bar.close()
