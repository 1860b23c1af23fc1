"""The progress shown by long commands (report, profile, the transformers fallback): on stderr when it is a
terminal, silent otherwise, so that pipes and tests see nothing of it. `Progress` is a bar over counted steps;
`activity` a line with the seconds spent, for work whose steps are not counted (a torchrun launch); where the work
counts its steps (a real profile's passes: ``step_clock`` and ``tick``) the line also says the steps done and left
and an ETA: the measured seconds per step once one has run, before that the predicted one (FLOPs / peak)."""

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


class StepClock:
    """Steps done of `total` and an ETA: the remaining steps x the mean measured step, or before the first step
    ends `predicted` seconds per step (a step's FLOPs over the device's calibrated or datasheet peak)."""

    def __init__(self, total: int, predicted: float | None = None) -> None:
        self.total, self.predicted, self.done = total, predicted, 0
        self.start = time.monotonic()

    def tick(self) -> None:
        self.done = min(self.total, self.done + 1)

    def eta(self) -> float | None:
        """Seconds left (None: no step measured and none predicted)."""
        per_step = (time.monotonic() - self.start) / self.done if self.done else self.predicted
        return None if per_step is None else per_step * (self.total - self.done)

    def text(self) -> str:
        """'step 3 of 12, 9 left, about 1 min 5 s to go' (or '(predicted)' before a step is measured)."""
        eta = self.eta()
        return (f"step {self.done} of {self.total}, {self.total - self.done} left"
                + ("" if eta is None else f", about {duration(eta)} to go" + ("" if self.done else " (predicted)")))


def duration(seconds: float) -> str:
    """'45 s', '3 min 20 s', '1 h 05 min'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


_CLOCK: list[StepClock] = []  # the clock of the work in progress, read by `activity`'s line


@contextmanager
def step_clock(total: int, predicted: float | None = None) -> Iterator[StepClock]:
    """Count the steps of the work in the body (``tick``); `activity`'s line shows them while it runs."""
    clock = StepClock(total, predicted)
    _CLOCK.append(clock)
    try:
        yield clock
    finally:
        _CLOCK.remove(clock)


def tick() -> None:
    """One step of the counted work done (nothing when no step_clock is open)."""
    if _CLOCK:
        _CLOCK[-1].tick()


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
            steps = f", {_CLOCK[-1].text()}" if _CLOCK else ""
            stream.write(f"\r\x1b[K{label}: {time.monotonic() - start:.0f} s{steps}")
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
