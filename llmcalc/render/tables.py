"""Render command results as text: table (terminal), markdown, csv or json.

A command builds a ``Document``: a JSON-able ``data`` dict (the machine-readable answer, complete)
and a list of ``Table``s for people. ``table`` and ``markdown`` render every table with its notes
(the conventions it depends on); ``csv`` renders the document's main table (the first) with raw
numbers; ``json`` renders ``data``. The tables are drawn by ``tabular`` (tabulate's layouts, without importing
tabulate); pandas stays out of the CLI's fast path (planning reports build DataFrames in ``llmcalc.report``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..records import dataclass
from ..vocabulary import FORMATS
from .tabular import tabular


@dataclass
class Column:
    key: str  # key in each row dict; also the CSV header
    label: str  # header for people, with its unit: "params (exact)", "memory (GiB)"
    fmt: Callable[[Any], str] | None = None  # raw value -> text for people; None: str()
    align: str = "right"
    show: bool = True  # False: in csv only (e.g. a row-kind column people read from layout)
    csv: bool = True  # False: for people only (e.g. an SI-formatted copy of a raw column)


@dataclass
class Table:
    title: str
    columns: list[Column]
    rows: list[dict]
    notes: list[str] = field(default_factory=list)
    for_people: bool = True  # False: left out of table/markdown (e.g. the csv twin of a transposed table)

    def cell(self, row: dict, column: Column) -> str:
        value = row.get(column.key)
        if value is None or value == "":
            return ""
        return column.fmt(value) if column.fmt else str(value)


@dataclass
class Document:
    title: str  # first line for people, e.g. "llama-2-7b: decoder L=32 D=4096 ..."
    data: dict  # the complete machine-readable result (json)
    tables: list[Table]
    preamble: list[str] = field(default_factory=list)  # lines under the title (source, inputs)


def tabulate_table(table: Table, fmt: str) -> str:
    """One table's cells in tabulate's layout `fmt` (simple, github, pipe, html), its columns for people."""
    columns = [c for c in table.columns if c.show]
    body = [[table.cell(row, c) for c in columns] for row in table.rows]
    return tabular(body, [c.label for c in columns], fmt, [c.align for c in columns])


def render(doc: Document, fmt: str) -> str:
    """The document as text in one of FORMATS; always ends with a newline."""
    if fmt == "json":
        return json.dumps(doc.data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        import csv  # imported by the one format that writes it

        main = doc.tables[0]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        columns = [c for c in main.columns if c.csv]
        writer.writerow([c.key for c in columns])
        for row in main.rows:
            writer.writerow(["" if row.get(c.key) is None else row.get(c.key) for c in columns])
        return buf.getvalue()
    if fmt == "markdown":
        parts = [f"## {doc.title}", *[f"{line}  " for line in doc.preamble]]
        for table in (t for t in doc.tables if t.for_people):
            parts += ["", f"### {table.title}", "", tabulate_table(table, "github")]
            parts += [""] + [f"- {note}" for note in table.notes] if table.notes else []
        return "\n".join(parts).rstrip() + "\n"
    if fmt == "table":
        parts = [doc.title, *doc.preamble]
        for table in (t for t in doc.tables if t.for_people):
            parts += ["", table.title, tabulate_table(table, "simple")]
            parts += [f"  {note}" for note in table.notes]
        return "\n".join(parts).rstrip() + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
