"""The recorded corpus of CLI invocations (issue 23): run each in-process and capture what it prints.

`invocations()` reads invocations.txt; `run(line)` runs one through click's CliRunner and returns
{"exit": code, "stdout": ..., "stderr": ..., "files": {name: text}} with the run's temporary report
folder written as {out} and dates masked. `python tests/corpus/record.py` writes recorded.json from
today's code; tests/test_corpus.py replays the corpus against it, except the entries that
expected_diff.json lists with the reason their output changed on purpose.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECORDED = HERE / "recorded.json"
EXPECTED_DIFF = HERE / "expected_diff.json"
# a report's text files; report.html embeds the PNG figures, whose bytes vary with matplotlib's version
TEXT_FILES = (".md", ".csv", ".json")
_DATES = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}( UTC)?)?")


def invocations() -> list[str]:
    lines = (HERE / "invocations.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _mask(text: str, out: str) -> str:
    return _DATES.sub("<date>", text.replace(out, "{out}"))


def run(line: str) -> dict:
    """One invocation, in-process, from the repository root (paths in the corpus are relative to it)."""
    import os

    from click.testing import CliRunner

    from llmcalc.cli import cli

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "report")
        argv = [word.replace("{out}", out) for word in shlex.split(line)]
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            result = CliRunner(env={"COLUMNS": "120", "LLMCALC_DEBUG": None}).invoke(cli, argv, prog_name="llmcalc")
        finally:
            os.chdir(cwd)
        files = {}
        if Path(out).is_dir():
            for path in sorted(Path(out).rglob("*")):
                if path.is_file() and path.suffix in TEXT_FILES:
                    files[path.relative_to(out).as_posix()] = _mask(path.read_text(), out)
        return {"exit": result.exit_code, "stdout": _mask(result.stdout, out), "stderr": _mask(result.stderr, out),
                "files": files}


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}
