"""The `llmcalc` command line: thin click commands over the analytic core.

Each command parses its options (``types``, ``options``), loads what it names (``common``), makes one core
call (an ``llmcalc.analytic`` entry point, or ``fallback``, ``profiling.run``, ``report.run``), turns the answer
into a Document (``llmcalc.views.<command>``) and prints it (``common.emit``). ``main`` holds the group, its
workflow order and its one-line errors. At start-up only click and the tiny modules are imported; heavy ones
(torch, pandas, matplotlib) only inside the commands that need them, so `llmcalc params <preset>` starts fast.
"""

from .main import cli, main

__all__ = ["cli", "main"]
