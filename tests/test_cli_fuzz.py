"""Issue 14's property over every command, on generated command lines (tests/fuzzcli.py draws them):
exit 0 with only finite, non-negative figures, or exit 2 with exactly one line on stderr that names
what to fix; never a traceback or a hang; no file left behind by a refusal."""

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzcli import COMMANDS, draw_argv, invoke, nasty_configs

SLOW_COMMANDS = ("profile", "report", "calibrate", "layout")  # layout searches every layout (seconds)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding the nasty configs; each invocation runs in it."""
    pytest.importorskip("torch")  # imported once here: its first import is slow, not a hang
    folder = tmp_path_factory.mktemp("fuzz")
    configs = nasty_configs(folder)
    return folder, configs


def names_what_is_wrong(line: str, argv: list[str]) -> bool:
    """A refusal names an option (--x), a config key or file, a preset, a command or an argument."""
    words = ("--", "preset", "MODEL", "config", "model", "Usage", "command", "json", "dtype", "tp=", "pp=")
    return any(w in line for w in words) or any(a in line for a in argv if len(a) > 2)


def check(argv: list[str], folder: Path) -> None:
    before = sorted(p.name for p in folder.iterdir())
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        outcome, result = invoke(argv, seconds=60 if argv[0] in SLOW_COMMANDS else 15)
    finally:
        os.chdir(cwd)
    detail = "" if result is None else f"{result.exception!r}\n{result.output[-800:]}"
    assert outcome in ("ok", "refused"), f"{outcome}: {argv}\n{detail}"
    if outcome == "refused":
        line = result.stderr.strip()
        assert names_what_is_wrong(line, argv), f"{argv}: {line}"
        assert sorted(p.name for p in folder.iterdir()) == before, f"{argv} left files behind"
    elif argv[0] != "report":
        assert sorted(p.name for p in folder.iterdir()) == before, f"{argv} wrote files"


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_every_command_answers_or_refuses_in_one_line(workdir, rng):
    folder, configs = workdir
    check(draw_argv(rng, configs), folder)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_every_command_answers_or_refuses_in_one_line_many(workdir, rng):
    folder, configs = workdir
    check(draw_argv(rng, configs), folder)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_survives_its_nastiest_values(workdir, command):
    """Every option of every command at each nasty value once (seeded), so no command is left to chance."""
    folder, configs = workdir
    rng = random.Random(command)
    for _ in range(12 if command not in SLOW_COMMANDS else 4):
        argv = draw_argv(rng, configs)
        while argv[0] != command:
            argv = draw_argv(rng, configs)
        check(argv, folder)
