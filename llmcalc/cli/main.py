"""The `llmcalc` group: its commands in workflow order, and its one-line errors and exit codes.

Data goes to stdout, messages to stderr. Bad input (an ``LlmcalcError`` or a click usage error) is one line
on stderr and exit code 2, never a traceback; a bug is one line and exit code 70.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import MutableMapping
from typing import Any, NoReturn

import click

from .. import __version__
from ..errors import Interrupted, LlmcalcError
from ..units import COUNT_STYLES, set_count_style
from .common import flush_warnings, refusal_context

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in llmcalc, not in the input

# Commands in the order a user needs them (`llmcalc` alone lists them so); new commands go last
# unless placed here.
WORKFLOW = ("presets", "params", "flops", "train", "plan", "memory", "infer", "serve", "layout", "compare",
            "report", "profile", "calibrate")
# The module of llmcalc.cli that defines each command (its COMMANDS): a command's module is imported when the
# command runs, so `llmcalc params` builds the options of `params` and not of the twelve others.
COMMAND_MODULES = {"presets": "models", "params": "models", "flops": "models", "train": "training",
                   "plan": "training", "layout": "training", "memory": "memory", "infer": "serving",
                   "serve": "serving", "compare": "compare", "report": "compare", "profile": "profile",
                   "calibrate": "profile"}


def one_line(text: str) -> str:
    """A message as one line: click's usage errors carry the usage text and a hint line."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return "; ".join(lines) if lines else "invalid input"


def _exit(message: str, code: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def refuse_repeated_options(command: click.Command, args: list[str]) -> None:
    """A single-value option given twice (or under both its names: --micro-batch and --batch-size) is refused:
    click would keep the last one silently, and only check that one's value."""
    names = {opt: param for param in command.params if isinstance(param, click.Option)
             and not (param.multiple or param.count or param.is_flag) for opt in param.opts + param.secondary_opts}
    used: dict[str, list[str]] = {}
    for arg in args:
        if arg == "--":
            break
        flag = str(arg).split("=", 1)[0]
        if flag in names:
            used.setdefault(names[flag].name or flag, []).append(flag)
    for typed in used.values():
        if len(typed) > 1:
            also = f" (as {' and '.join(dict.fromkeys(typed))})" if len(set(typed)) > 1 else ""
            raise click.UsageError(f"{typed[0]} is given {len(typed)} times{also}: give it once")


class LlmcalcGroup(click.Group):
    """A click group whose errors are one line on stderr with a non-zero exit, and whose commands are imported
    when asked for (``COMMAND_MODULES``); ``commands`` imports them all."""

    argv: list[str]
    _commands: dict[str, click.Command]

    @property
    def commands(self) -> MutableMapping[str, click.Command]:  # every command, all imported
        for name in COMMAND_MODULES:
            self.get_command(click.Context(self), name)
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._commands = dict(value)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        self._commands[name or cmd.name or ""] = cmd

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self._commands and cmd_name in COMMAND_MODULES:
            from importlib import import_module

            for command in import_module(f"{__package__}.{COMMAND_MODULES[cmd_name]}").COMMANDS:
                self._commands.setdefault(command.name, command)
        return self._commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            refuse_repeated_options(command, rest)
        return name, command, rest

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        args = sys.argv[1:] if args is None else list(args)
        self.argv = list(args)  # as typed: a report's provenance
        flush_warnings(show=False)
        if not args:  # bare `llmcalc`: the help, and success
            with click.Context(self, info_name=prog_name or "llmcalc") as ctx:
                click.echo(self.get_help(ctx))
            sys.exit(0)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            _exit(f"llmcalc: error: {one_line(exc.format_message())}",
                  EXIT_BAD_INPUT if exc.exit_code in (1, 2) else exc.exit_code)
        except click.exceptions.Abort as exc:
            interrupted = isinstance(exc.__context__, KeyboardInterrupt)
            _exit("llmcalc: interrupted" if interrupted else "llmcalc: aborted",
                  130 if interrupted else 1)  # 128 + SIGINT, the shell convention
        except LlmcalcError as exc:
            _exit(f"llmcalc: error: {one_line(str(exc))}{refusal_context()}", EXIT_BAD_INPUT)
        except Interrupted as exc:  # SIGINT/SIGTERM where a command asked for them (report)
            _exit(f"llmcalc: {exc.message()}", exc.exit_code)
        except OSError as exc:  # the disk or the system, not the input: ENOSPC, EACCES, EROFS ...
            where = f" ({exc.filename})" if exc.filename else ""
            _exit(f"llmcalc: error: {exc.strerror or exc.__class__.__name__}{where}", EXIT_BAD_INPUT)
        except (OverflowError, RecursionError, MemoryError) as exc:
            if os.environ.get("LLMCALC_DEBUG"):
                raise
            _exit(f"llmcalc: error: the numbers are too large to compute ({exc.__class__.__name__}); use smaller "
                  f"sizes", EXIT_BAD_INPUT)
        except Exception as exc:  # never a traceback for a user; LLMCALC_DEBUG=1 shows it
            if os.environ.get("LLMCALC_DEBUG"):
                raise
            _exit(f"llmcalc: internal error: {exc.__class__.__name__}: {one_line(str(exc))} (a bug: please report "
                  f"it with the command; LLMCALC_DEBUG=1 shows the traceback)", EXIT_INTERNAL)
        finally:
            set_count_style("ml")  # --units holds for one run (several run in one process under tests)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv

    def list_commands(self, ctx: click.Context) -> list[str]:
        order = {name: i for i, name in enumerate(WORKFLOW)}
        return sorted({*COMMAND_MODULES, *self._commands}, key=lambda n: order.get(n, len(WORKFLOW)))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence (click cuts summaries at 45 characters)."""
        commands = self.commands
        rows = [(name, commands[name].get_short_help_str(limit=200)) for name in self.list_commands(ctx)
                if not commands[name].hidden]
        if rows:
            with formatter.section("Commands (in the order a plan needs them)"):
                formatter.write_dl(rows, col_max=12)


@click.group(cls=LlmcalcGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
@click.version_option(__version__, prog_name="llmcalc")  # the package's own string: no importlib.metadata
@click.option("--units", type=click.Choice(COUNT_STYLES), default="ml", show_default=True, envvar="LLMCALC_UNITS",
              help="How parameter and token counts print: ml (70.6 B, billions) or si (70.6 G). FLOPs are SI in "
                   "both. Before the command: llmcalc --units si params llama-3-8b ($LLMCALC_UNITS works too).")
def cli(units: str) -> None:
    """How big is a Transformer, how many FLOPs, how much memory, how long and how much to train.

    MODEL is a preset name (any case; `llmcalc presets` lists them), the Hugging Face repo id a preset
    comes from (meta-llama/Meta-Llama-3-8B) or its hub URL, a repo id in the local Hugging Face cache, a
    config.json, or a folder holding one. Counts take SI suffixes (7B, 15T, 1k) and binary ones (16Mi =
    16 x 2^20); sequence lengths binary ones (4k = 4,096).
    """
    set_count_style(units)


def main() -> None:
    """The program (`llmcalc`, `python -m llmcalc`). What it has imported so far (click, the group) lives until the
    process ends: frozen out of the cyclic garbage collector (gc.freeze), no later collection walks it again, nor
    the one at exit; refcounting frees as before, and what the command itself makes is collected as usual."""
    gc.freeze()
    cli(prog_name="llmcalc")
