"""llmcalc/render/tabular.py draws tables as tabulate does, character for character: held to tabulate itself
(the reference it replaces on the start-up path) over generated tables and over every table the CLI prints."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmcalc.render.tabular import ALIGNS, FORMATS, tabular

tabulate = pytest.importorskip("tabulate").tabulate

# what cells hold in practice (digits, units, unicode signs), and what tabulate treats specially: surrounding
# whitespace (stripped), line breaks (multi-line cells; splitlines() breaks on more than \r and \n), ANSI colour
# codes and OSC 8 links (not counted in a width), the separating-line marker \x01, HTML's special characters
PIECES = ["1", "2,048", "0.5", "GiB", "x", "·", "×", "é", "中", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\u2028",
          "\x1b[31m", "\x1b[0m", "\x1b]8;;http://a\x1b\\link\x1b]8;;\x1b\\", "\x01", "<", "&", '"', "'", "True", "-",
          "|", ":"]
text = st.lists(st.sampled_from(PIECES), max_size=5).map("".join)


@st.composite
def tables(draw):
    n_cols = draw(st.integers(0, 4))
    headers = draw(st.lists(text, min_size=n_cols, max_size=n_cols))
    rows = draw(st.lists(st.lists(text, min_size=n_cols, max_size=n_cols), max_size=4))
    aligns = draw(st.lists(st.sampled_from(ALIGNS), min_size=n_cols, max_size=n_cols))
    return rows, headers, aligns


def reference(rows, headers, fmt, aligns) -> str:
    return str(tabulate(rows, headers=headers, tablefmt=fmt, colalign=aligns, disable_numparse=True))


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables())
def test_tables_as_tabulate_draws_them(fmt, table):
    rows, headers, aligns = table
    assert tabular(rows, headers, fmt, aligns) == reference(rows, headers, fmt, aligns)


@pytest.mark.parametrize("fmt", FORMATS)
def test_plain_cases_as_tabulate_draws_them(fmt):
    """Written out: an empty table, one without rows, one without headers, a separating line, multi-line cells."""
    cases = [
        ([], [], []),
        ([], ["params (exact)", "name"], ["right", "left"]),
        ([["a", "1"], ["bb", "22"]], [], ["left", "right"]),
        ([["llama", "8,030,261,248"], ["  \x01", "x"], ["mistral", "7 G"]], ["model", "params"], ["left", "center"]),
        ([["two\nlines", "1"], ["", ""], ["x", "three\nshort\nlines"]], ["a\nb", "c"], ["right", "left"]),
    ]
    for rows, headers, aligns in cases:
        assert tabular(rows, headers, fmt, aligns) == reference(rows, headers, fmt, aligns)


def test_the_simple_layout_written_out():
    """What `--format table` prints, by hand: columns as wide as their header plus 2, separated by two spaces,
    trailing blanks dropped."""
    assert tabular([["llama", "8 G"], ["qwen", "72 G"]], ["model", "size"], "simple", ["left", "right"]) == (
        "model      size\n"
        "-------  ------\n"
        "llama       8 G\n"
        "qwen       72 G")


def test_unknown_format_or_alignment_is_refused():
    with pytest.raises(ValueError, match="format"):
        tabular([], [], "grid", [])
    with pytest.raises(ValueError, match="alignments"):
        tabular([["1"]], ["a"], "simple", ["decimal"])


def test_every_cli_table_as_tabulate_draws_it():
    """The tables of a few commands (every view's Document goes through the same function) through both."""
    from llmcalc.analytic.params import count_params
    from llmcalc.render.tables import tabulate_table
    from llmcalc.spec import load_model
    from llmcalc.views.params import document as params_document

    doc = params_document(count_params(load_model("deepseek-v3")), "preset", None)
    for table in doc.tables:
        columns = [c for c in table.columns if c.show]
        body = [[table.cell(row, c) for c in columns] for row in table.rows]
        for fmt in FORMATS:
            assert tabulate_table(table, fmt) == reference(body, [c.label for c in columns], fmt,
                                                           [c.align for c in columns])
