"""The progress shown by long commands (report, profile, the transformers fallback): on stderr when it is a
terminal, silent otherwise, so that pipes and tests see nothing of it. `Progress` is a bar over counted steps;
`activity` a line with the seconds spent, for work whose steps are not counted (a profile, a torchrun launch)."""

from __future__ import annotations

import sys
import threading
import time
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


FIRST_DRAW_S = 0.5  # the line appears only for work that lasts longer than this
REDRAW_S = 0.5


@contextmanager
def activity(label: str) -> Iterator[None]:
    """While the body runs, `label: N s` on stderr (redrawn in place) when stderr is a terminal; the line is
    erased on the way out, so that what the command prints next starts on a clean line. Silent otherwise."""
    if not sys.stderr.isatty():
        yield
        return
    stream, start, done = sys.stderr, time.monotonic(), threading.Event()
    drawn = False

    def draw() -> None:
        nonlocal drawn
        if done.wait(FIRST_DRAW_S):
            return
        while True:
            stream.write(f"\r\x1b[K{label}: {time.monotonic() - start:.0f} s")
            stream.flush()
            drawn = True
            if done.wait(REDRAW_S):
                return

    thread = threading.Thread(target=draw, name="llmcalc-activity", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if drawn:
            stream.write("\r\x1b[K")
            stream.flush()
