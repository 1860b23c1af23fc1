"""Tables for people fit a 120-column terminal: the sharded profile's per-rank comparison (one column per figure,
620 characters wide) is shown long-form, one row per figure; the CSV keeps one column per figure."""

import csv
import io
from dataclasses import replace

import pytest
from clirun import cli_json, run

pytest.importorskip("torch")


def test_the_sharded_profile_table_fits_120_columns():
    args = ["profile", "llmcalc-tiny", "--virtual", "--world-size", 4, "--tp", 2, "--seq-len", 256]
    data = cli_json(*args)
    from llmcalc.render.tables import render
    from llmcalc.views.profile import FIGURES, distributed_document

    doc = distributed_document(data)
    bare = replace(doc, tables=[replace(t, notes=[]) for t in doc.tables], preamble=[])
    lines = render(bare, "table").splitlines()[1:]  # the title line is prose
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    shown = render(bare, "table")
    for _, label in FIGURES:  # every figure still shown, each on its own row
        assert f"  {label}  " in shown
    header = next(csv.reader(io.StringIO(run(*args, "--format", "csv").stdout)))
    assert len(header) > 20 and "param_bytes_a" in header  # the CSV: one column per figure, raw numbers
