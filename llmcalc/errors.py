"""The one base class for mistakes in what a user asked for (the CLI prints them as one line)."""


class LlmcalcError(ValueError):
    """Bad input: unknown preset, malformed config, impossible shape, nonsense unit."""
