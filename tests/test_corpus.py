"""Every recorded invocation prints what it printed when the corpus was recorded (tests/corpus/).

The outputs (stdout, stderr, exit code, a report's text files; dates masked) must be identical, except
for the invocations expected_diff.json lists, each with the reason its output changed on purpose; a
listed invocation must really differ, so the list never outlives its changes. Profiles, reports and
the transformers fallback run in the slow tier; everything else in the fast tier.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "corpus"))

from corpus import EXPECTED_DIFF, RECORDED, invocations, load, run  # noqa: E402

SLOW = ("profile ", "report ", "tests/corpus/configs/codegen")
RECORDING = load(RECORDED)
EXPECTED = load(EXPECTED_DIFF)


def _tier(line: str):
    slow = line.startswith(SLOW[:2]) or SLOW[2] in line
    return pytest.param(line, marks=pytest.mark.slow, id=line) if slow else pytest.param(line, id=line)


def test_the_corpus_is_recorded_whole():
    lines = invocations()
    assert len(lines) >= 100 and len(set(lines)) == len(lines)
    assert sorted(RECORDING) == sorted(lines), "re-record: python tests/corpus/record.py"
    stale = set(EXPECTED) - set(lines)
    assert not stale, f"expected_diff.json names invocations not in the corpus: {stale}"
    assert all(isinstance(reason, str) and reason.strip() for reason in EXPECTED.values())


@pytest.mark.parametrize("line", [_tier(line) for line in invocations()])
def test_output_is_as_recorded(line):
    got = run(line)
    if line in EXPECTED:
        assert got != RECORDING[line], f"listed in expected_diff.json but prints as recorded: {line}"
        return
    want = RECORDING[line]
    for key in ("exit", "stderr", "stdout", "files"):
        assert got[key] == want[key], f"{key} of `llmcalc {line}` changed"
