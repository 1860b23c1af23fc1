"""Planning reports: a directory with report.md, a self-contained report.html (figures embedded),
the figures as PNG and the tables as CSV, written atomically.

The report is a list of blocks (heading, paragraph, list, table, figure) rendered twice, to
Markdown and to HTML. Its tables are the same Documents the CLI commands print, so a report's CSV
is exactly what `params/flops/train/memory --format csv` give for the same inputs.

Atomic: everything is written into a temporary sibling directory, which replaces the target only
when complete; an existing report is replaced only with ``force`` (renamed aside first and removed
after the swap), so a failed or interrupted run leaves no partial report and never damages an
earlier one.
"""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LlmcalcError
from .tables import Document, Table, _tabulate, render


@dataclass
class Report:
    title: str
    blocks: list[tuple] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", level, text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def document(self, doc: Document, csv_name: str) -> None:
        """A command's Document: its human tables in the report, its CSV under tables/."""
        self.files[f"tables/{csv_name}.csv"] = render(doc, "csv").encode()
        for table in doc.tables:
            if table.human:
                self.table(table)

    def csv(self, name: str, frame) -> None:
        self.files[f"tables/{name}.csv"] = frame.to_csv(index=False).encode()

    def figure(self, name: str, fig, caption: str) -> None:
        import io

        from .plots import save

        buffer = io.BytesIO()
        save(fig, buffer)
        self.files[f"figures/{name}.png"] = buffer.getvalue()
        self.blocks.append(("figure", f"figures/{name}.png", caption))

    # --- rendering ---------------------------------------------------------------------------

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out += [f"{'#' * block[1]} {block[2]}", ""]
            elif kind == "p":
                out += [block[1], ""]
            elif kind == "ul":
                out += [f"- {item}" for item in block[1]] + [""]
            elif kind == "table":
                table = block[1]
                out += [f"**{table.title}**", "", _tabulate(table, "github"), ""]
                out += [f"- {note}" for note in table.notes] + ([""] if table.notes else [])
            elif kind == "figure":
                out += [f"![{block[2]}]({block[1]})", "", f"*{block[2]}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>",
               f"<style>{STYLE}</style></head><body>", f"<h1>{html.escape(self.title)}</h1>"]
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
            elif kind == "p":
                out.append(f"<p>{html.escape(block[1])}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in block[1]) + "</ul>")
            elif kind == "table":
                table = block[1]
                out.append(f"<p class='caption'>{html.escape(table.title)}</p>" + _tabulate(table, "html"))
                if table.notes:
                    out.append("<ul class='notes'>" + "".join(f"<li>{html.escape(n)}</li>" for n in table.notes)
                               + "</ul>")
            elif kind == "figure":
                data = base64.b64encode(self.files[block[1]]).decode()
                out.append(f"<figure><img alt='{html.escape(block[2])}' src='data:image/png;base64,{data}'>"
                           f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}"
         "th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}img{max-width:100%}"
         ".caption{font-weight:600;margin-bottom:0}.notes{font-size:12px;color:#555}figcaption{font-size:12px;"
         "color:#555}")


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def check_destination(out: Path, force: bool) -> None:
    """Fail early, before any work, with one clear line: a file in the way, an existing report
    without --force, or a folder we cannot write into."""
    if out.exists() and not out.is_dir():
        raise LlmcalcError(f"output path {out} is a file; give a directory for the report")
    if out.exists() and any(out.iterdir()) and not force:
        raise LlmcalcError(f"{out} already holds a report; pass --force to replace it")
    parent = out.resolve().parent
    while not parent.exists():  # the nearest existing ancestor must be a writable directory
        parent = parent.parent
    if not parent.is_dir():
        raise LlmcalcError(f"cannot write the report to {out}: {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK | os.X_OK)):
        raise LlmcalcError(f"cannot write the report to {out}: permission denied")


def write_report(report: Report, out: Path, force: bool) -> Path:
    """Write report.md, report.html, figures/ and tables/ into `out`, atomically."""
    check_destination(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as exc:
        raise LlmcalcError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    try:
        files = dict(report.files)
        files["report.md"] = report.markdown().encode()
        files["report.html"] = report.html().encode()
        for rel, content in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        if out.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            aside.rmdir()
            out.rename(aside)
            try:
                staging.rename(out)
            except BaseException:
                aside.rename(out)  # put the earlier report back
                raise
            shutil.rmtree(aside, ignore_errors=True)
        else:
            staging.rename(out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise LlmcalcError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


class Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, label: str):
        self.bar = None
        if sys.stderr.isatty():
            import click

            self.bar = click.progressbar(length=total, label=label, file=sys.stderr)
            self.bar.__enter__()

    def step(self, label: str | None = None) -> None:
        if self.bar is not None:
            if label:
                self.bar.label = label
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
