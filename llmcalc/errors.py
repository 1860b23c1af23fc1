"""The one base class for mistakes in what a user asked for (the CLI prints them as one line), and the
interrupt `report` turns SIGINT/SIGTERM into (the CLI prints it as one line and exits 128 + the signal)."""

from __future__ import annotations


class LlmcalcError(ValueError):
    """Bad input: unknown preset, malformed config, impossible shape, nonsense unit."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM during `report`: exit 128 + signal number (130, 143) with one message."""

    def __init__(self, signum: int, state: str = "") -> None:
        super().__init__(signum)
        self.signum = signum
        self.state = state  # what is on disk now, for the one message

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self) -> str:
        import signal

        name = signal.Signals(self.signum).name
        return f"interrupted by {name}" + (f"; {self.state}" if self.state else "")
