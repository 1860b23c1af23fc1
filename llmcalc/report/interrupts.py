"""SIGINT and SIGTERM for commands that write files (``report``): one outcome, one message, exit
128 + the signal number (130 for Ctrl-C, 143 for SIGTERM), as shells report a killed process.

Light on purpose (signal, threading). ``Interrupted`` itself lives in ``llmcalc.errors``, which the CLI
imports at start-up.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any

from ..errors import Interrupted  # raised here, caught by the CLI (re-exported)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Python runs signal handlers in the main thread only, so this state needs no lock. A Python-level flag,
# not pthread_sigmask: a process-directed signal goes to any thread that does not block it (BLAS pools,
# ...), and Python would still run the handler in the main thread at once.
_state: dict[str, Any] = {"depth": 0, "pending": [], "raised": False, "signum": None}


def _handler(signum, frame):
    if _state["depth"]:
        _state["pending"].append(signum)  # held back: delivered when the deferred block ends
        return
    if not _state["raised"]:  # one Interrupted per command; later signals are the same request
        _state["raised"] = True
        _state["signum"] = signum
        raise Interrupted(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_as_interrupts():
    """While active, SIGINT and SIGTERM raise ``Interrupted`` (once: later signals are ignored), or wait
    while a ``signals_deferred`` block runs; outside the main thread nothing changes."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    _state.update(depth=0, pending=[], raised=False, signum=None)
    hook = sys.unraisablehook

    def quiet(unraisable):  # an Interrupted dropped inside a __del__: ``checkpoint`` raises it again
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for s, h in previous.items():
            signal.signal(s, h)
        _state.update(depth=0, pending=[], raised=False, signum=None)


@contextlib.contextmanager
def signals_deferred():
    """SIGINT and SIGTERM held back until the block ends, so cleanup and the final swap of folders are
    never cut in half; then delivered: as ``Interrupted`` under ``signals_as_interrupts``, else to the
    handlers that were there before (Ctrl-C: KeyboardInterrupt; SIGTERM: the default, exit)."""
    if not _main_thread():
        yield
        return
    ours = signal.getsignal(signal.SIGINT) is _handler
    previous = {} if ours else {s: signal.signal(s, _handler) for s in SIGNALS}
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        pending = _state["pending"][:1] if _state["depth"] == 0 else []
        if _state["depth"] == 0:
            _state["pending"] = []
        for s, h in previous.items():
            signal.signal(s, h)
        if previous and pending:
            _state["raised"] = False
            signal.raise_signal(pending[0])  # the caller's own handling of it
        elif pending and not _state["raised"]:
            _state["raised"] = True
            _state["signum"] = pending[0]
            raise Interrupted(pending[0])


def signal_pending() -> bool:
    """Whether a SIGINT or SIGTERM is waiting (held back by ``signals_deferred``) or came earlier."""
    return bool(_state["pending"]) or _state["signum"] is not None


def settle() -> None:
    """The outcome is decided (the command reports success): signals from now on, and any held back,
    are ignored, so the success message is never followed by an 'interrupted' one."""
    if _main_thread():
        _state.update(pending=[], raised=True)


def interrupt_behind(exc: BaseException) -> Interrupted | None:
    """The interrupt an exception stands for, if any: library code that fails while an ``Interrupted`` unwinds
    through it (matplotlib's clean-up with a half-drawn figure: "Invalid bounding box") raises its own error,
    with the ``Interrupted`` as its context, or with the context dropped after a signal already raised one.
    Such an error is the interrupt's doing, not a bug: the command ends as interrupted."""
    seen: set[int] = set()
    chained: BaseException | None = exc
    while chained is not None and id(chained) not in seen:
        if isinstance(chained, Interrupted):
            return chained
        seen.add(id(chained))
        chained = chained.__cause__ or chained.__context__
    if _main_thread() and _state["signum"] is not None:
        return Interrupted(_state["signum"])
    return None


def checkpoint() -> None:
    """Raise ``Interrupted`` again if a signal came earlier: Python drops an exception raised while a
    ``__del__`` or weakref callback runs ("Exception ignored in ..."), so before committing anything
    the command asks whether it was interrupted."""
    if _main_thread() and _state["signum"] is not None:
        raise Interrupted(_state["signum"])
