"""Text tables in the four layouts llmcalc prints, character for character as tabulate 0.9-0.10 draws them.

``tabular(cells, headers, fmt, aligns)`` is what ``tabulate(cells, headers=headers, tablefmt=fmt,
colalign=aligns, disable_numparse=True)`` returns for string cells, in tabulate's ``simple`` (the terminal),
``github`` (``--format markdown``), ``pipe`` and ``html`` (the report) formats. It exists so that a command
starts without importing tabulate, which pulls in ``importlib.metadata`` at import (about 30 ms of the
~100 ms a command costs). It mirrors tabulate/__init__.py (0.10.0): ``tabulate`` (widths: the header plus
``MIN_PADDING`` = 2, cells stripped of surrounding whitespace), ``_align_column``, ``_align_header``,
``_format_table``, ``_pipe_line_with_colons``, ``_html_row_with_attrs``, the multi-line cell layout of
``_append_multiline_row`` (simple, github and pipe; html keeps a newline inside its cell) and the width of a
cell with ANSI escapes (``_visible_width``). Widths are ``len`` of the visible text: tabulate measures wide
(CJK) characters with wcwidth only where that optional package is installed, which llmcalc does not require.
tests/test_render.py holds it to tabulate itself over generated tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

FORMATS = ("simple", "github", "pipe", "html")
ALIGNS = ("left", "right", "center")
MIN_PADDING = 2  # tabulate.MIN_PADDING: the extra width of a column over its header
SEPARATING_LINE = "\001"  # tabulate.SEPARATING_LINE: a row whose first or second cell is this draws a rule
_ANSI = r"""
    (
        \x1b\[ [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]
        |
        \x1b\]8; (\w+=\w+:?)* ; ([^\x1b]+) \x1b\\ ([^\x1b]+) \x1b\]8;;\x1b\\
    )
"""  # tabulate._ansi_escape_pat: CSI codes (colours) and OSC 8 hyperlinks (their text is what shows)
_HTML_ALIGN = {"left": "", "right": ' style="text-align: right;"', "center": ' style="text-align: center;"'}


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(_ANSI, r"\4", text, flags=re.VERBOSE)


def _pad(align: str, width: int, text: str) -> str:
    """tabulate's _padleft / _padright / _padboth: str.format to `width`."""
    if align == "right":
        return f"{text:>{width}}"
    if align == "center":
        return f"{text:^{width}}"
    return f"{text:<{width}}"


def _line_widths(text: str, width: Callable[[str], int]) -> list[int]:
    return [width(line) for line in text.replace("\r", "\n").split("\n")]  # re.split("[\r\n]", text)


def _align_column(cells: list[str], align: str, minwidth: int, visible: Callable[[str], int] | None,
                  multiline: bool) -> list[str]:
    """tabulate._align_column (no wide characters, whitespace not preserved); `visible` measures text with ANSI
    escapes, None when there are none (then every width is len)."""
    cells = [c.strip() for c in cells]
    width = visible or len
    widths = [_line_widths(c, width) if multiline else [width(c)] for c in cells]
    most = max(max(w for ws in widths for w in ws), minwidth)
    if not multiline:
        return [_pad(align, most - (w[0] - len(c)), c) for c, w in zip(cells, widths, strict=False)]
    if visible is None:
        return ["\n".join(_pad(align, most, line) for line in c.splitlines()) for c in cells]
    out = []
    for cell, line_widths in zip(cells, widths, strict=False):
        lengths = [len(line) for line in cell.replace("\r", "\n").split("\n")]
        targets = [most - (w - n) for w, n in zip(line_widths, lengths, strict=False)]
        lines = zip(cell.splitlines() or cell, targets, strict=False)
        out.append("\n".join(_pad(align, t, line) for line, t in lines))
    return out


def _align_header(header: str, align: str, width: int, visible: Callable[[str], int], multiline: bool) -> str:
    """tabulate._align_header: the header is not stripped; each of its lines padded alone."""
    if multiline:
        import re

        return "\n".join(_align_header(h, align, width, visible, False) for h in re.split(r"\r|\n|\r\n", header))
    return _pad(align, width + len(header) - visible(header), header)


def _is_separating(row: Sequence[str]) -> bool:
    """tabulate._is_separating_line on a row of cells."""
    return any(len(row) > i and type(row[i]) is str and row[i].strip() == SEPARATING_LINE for i in (0, 1))


def _rule(fmt: str, widths: list[int], aligns: list[str]) -> str:
    """The line under the header (and a separating line): tabulate's linebelowheader of each format."""
    if fmt == "simple":
        return "  ".join("-" * w for w in widths).rstrip()
    if fmt == "github":
        return ("|" + "|".join("-" * w for w in widths) + "|").rstrip()
    if fmt == "pipe":  # _pipe_line_with_colons
        marks = {"right": lambda w: "-" * (w - 1) + ":", "center": lambda w: ":" + "-" * (w - 2) + ":",
                 "left": lambda w: ":" + "-" * (w - 1)}
        pairs = zip(aligns or [""] * len(widths), widths, strict=False)
        return "|" + "|".join(marks.get(a, lambda w: "-" * w)(w) for a, w in pairs) + "|"
    return "</tbody>\n</table>"  # html has no such line: tabulate falls back to its linebelow


def _row(fmt: str, cells: Sequence[str], aligns: list[str], header: bool) -> str:
    if fmt == "simple":
        return "  ".join(cells).rstrip()
    if fmt in ("github", "pipe"):
        return ("|" + "|".join(f" {c} " for c in cells) + "|").rstrip()
    from html import escape

    tag = "th" if header else "td"
    row = "<tr>{}</tr>".format("".join(f"<{tag}{_HTML_ALIGN.get(a, '')}>{escape(c)}</{tag}>"
                                       for c, a in zip(cells, aligns, strict=False)).rstrip())
    return f"<table>\n<thead>\n{row}\n</thead>\n<tbody>" if header else row


def _rows(fmt: str, cells: Sequence[str], widths: list[int], aligns: list[str], *, header: bool,
          multiline: bool) -> list[str]:  # widths: the columns' own, without the format's padding
    """One table row as lines: tabulate._append_basic_row, or _append_multiline_row (each cell's lines, the
    short ones filled with blanks of the column's width; a row whose cells are all empty draws nothing)."""
    if not multiline:
        return [_row(fmt, cells, aligns, header)]
    lines = [c.splitlines() for c in cells]
    depth = max(map(len, lines), default=0)
    lines = [ls + [" " * w] * (depth - len(ls)) for ls, w in zip(lines, widths, strict=False)]
    return [_row(fmt, [ls[i] for ls in lines], aligns, header) for i in range(depth)]


def tabular(cells: Sequence[Sequence[str]], headers: Sequence[str], fmt: str, aligns: Sequence[str]) -> str:
    """`cells` (rows of strings) under `headers`, each column aligned as `aligns` says (left, right, center), in
    tabulate's `fmt` layout (one of FORMATS): tabulate(cells, headers, fmt, colalign=aligns,
    disable_numparse=True)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; one of {', '.join(FORMATS)}")
    if any(a not in ALIGNS for a in aligns):
        raise ValueError(f"column alignments are {', '.join(ALIGNS)}: got {list(aligns)}")
    headers = [str(h) for h in headers]
    data = [[str(c) for c in row] for row in cells]
    rules = [i for i, row in enumerate(data) if _is_separating(row)]
    data = [row for row in data if not _is_separating(row)]
    text = "\t".join([*headers, *(c for row in data for c in row)])
    invisible = "\x1b" in text and _strip_ansi(text) != text
    visible: Callable[[str], int] | None = (lambda s: len(_strip_ansi(s))) if invisible else None
    line_width = visible or len
    multiline = fmt != "html" and ("\n" in text or "\r" in text)
    width: Callable[[str], int] = (lambda s: max(_line_widths(s, line_width))) if multiline else line_width
    columns = [list(col) for col in zip(*data, strict=False)] if data else []
    col_aligns = [str(a) for a in aligns][:len(columns)]
    col_aligns += ["left"] * (len(columns) - len(col_aligns))  # a column without its alignment: tabulate's stralign
    mins = [width(h) + MIN_PADDING for h in headers] if headers else [0] * len(columns)
    columns = [_align_column(c, a, m, visible, multiline) for c, a, m in zip(columns, col_aligns, mins, strict=False)]
    header_aligns = col_aligns or ["left"] * len(headers)
    if headers:
        filled = columns or [[""]] * len(headers)
        widths = [max(m, max(width(c) for c in col)) for m, col in zip(mins, filled, strict=False)]
        named = zip(headers, header_aligns, widths, strict=False)
        headers = [_align_header(h, a, w, line_width, multiline) for h, a, w in named]
    else:
        widths = [max(width(c) for c in col) for col in columns]
    rows: list[Sequence[str] | None] = list(zip(*columns, strict=False))
    for i in rules:
        rows.insert(i, None)  # tabulate._reinsert_separating_lines
    pad = 0 if fmt in ("simple", "html") else 1
    padded = [w + 2 * pad for w in widths]
    lines: list[str] = []
    if not headers:  # the line above a table without headers (simple: its line below too; html: the <table>)
        lines.append({"simple": _rule("simple", padded, col_aligns), "github": _rule("github", padded, col_aligns),
                      "pipe": _rule("pipe", padded, col_aligns), "html": "<table>\n<tbody>"}[fmt])
    else:
        lines += _rows(fmt, headers, widths, header_aligns, header=True, multiline=multiline)
        if fmt != "html":
            lines.append(_rule(fmt, padded, col_aligns))
    for row in rows:
        lines += ([_rule(fmt, padded, col_aligns)] if row is None
                  else _rows(fmt, row, widths, col_aligns, header=False, multiline=multiline))
    if fmt == "html":
        lines.append("</tbody>\n</table>")
    elif fmt == "simple" and not headers:
        lines.append(_rule("simple", padded, col_aligns))
    return "\n".join(lines) if headers or rows else ""
