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


# The transformers releases the fallback's tests pass on: constraints.txt pins the newest (README, "The test
# environment is pinned"). Only the messages name versions; the code detects the features it uses.
TESTED_TRANSFORMERS = ("5.24.0", "5.25.0")


def installed_version(package: str) -> str | None:
    """The installed version of `package` (its metadata: no import), or None where it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def tested_note() -> str:
    """Which transformers is installed and which the fallback is known to work with."""
    installed = installed_version("transformers")
    tested = " and ".join(TESTED_TRANSFORMERS)
    if installed in TESTED_TRANSFORMERS:
        return f"transformers {installed}, a tested release (tested: {tested}); please report it with the config"
    return (f"transformers {installed} is installed; llmcalc's fallback is tested with transformers {tested}: "
            f"pip install 'transformers=={TESTED_TRANSFORMERS[-1]}', or report it with the config")


class MeasurementFailed(LlmcalcError):
    """transformers' modelling code raised while llmcalc built or ran a model it has no formula for: the step
    (build, fake, forward, cache, decode, training forward, step) and the exception's one-line reason, with the
    transformers releases the fallback is tested with."""

    def __init__(self, step: str, what: str, reason: str) -> None:
        super().__init__(f"{what} (step: {step}): {reason} [{tested_note()}]")
        self.step, self.what, self.reason = step, what, reason


class DataDependent(MeasurementFailed):
    """A forward that needs tensor values (``.item()``, a shape that depends on the data) run where tensors have
    none (the meta device, fake tensors)."""
