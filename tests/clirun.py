"""The CLI helpers several test files share: run a command in-process, read its JSON, take its one error line."""

import json

from click.testing import CliRunner

from llmcalc.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def cli_json(*args):
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(*args) -> str:
    """Exit 2, nothing on stdout, no traceback, and exactly one `llmcalc: error:` line, which is returned."""
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcalc: error: "), result.stderr
    return lines[0]
