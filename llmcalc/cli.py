"""The `llmcalc` command line: thin click commands over the analytic core.

Data goes to stdout, messages to stderr. Bad input (an ``LlmcalcError`` or a click usage error) is
one line on stderr and exit code 2, never a traceback. Heavy modules (torch, pandas, matplotlib)
are imported inside the commands that need them, so `llmcalc params <preset>` starts fast.
"""

from __future__ import annotations

import sys

import click

from .errors import LlmcalcError
from .report.tables import FORMATS, render

EXIT_BAD_INPUT = 2


class LlmcalcGroup(click.Group):
    """A click group whose errors are one line on stderr with a non-zero exit."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            click.echo(f"llmcalc: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("llmcalc: aborted", err=True)
            sys.exit(1)
        except LlmcalcError as exc:
            click.echo(f"llmcalc: error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv


def format_option(func):
    return click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
        help="table for terminals; markdown, csv (the main table, raw numbers) or json (everything).",
    )(func)


def emit(doc, fmt: str) -> None:
    click.echo(render(doc, fmt), nl=False)


@click.group(cls=LlmcalcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmcalc")
def cli() -> None:
    """How big is a Transformer, how many FLOPs, how much memory, how long and how much to train."""


@cli.command()
@format_option
def presets(fmt: str) -> None:
    """Every model and accelerator preset, one line each."""
    from .report.views import presets_document

    emit(presets_document(), fmt)


@cli.command()
@click.argument("model")
@format_option
def params(model: str, fmt: str) -> None:
    """Exact parameter count of MODEL by component, beside the classic approximations.

    MODEL is a preset name (see `llmcalc presets`), a Hugging Face config.json, or a folder
    holding one.
    """
    from .analytic.params import count_params
    from .presets import load_model, model_source
    from .report.views import params_document

    spec = load_model(model)
    emit(params_document(count_params(spec), model_source(model)), fmt)


def main() -> None:
    cli(prog_name="llmcalc")
