"""Planning reports: a directory with report.md, a self-contained report.html (figures embedded),
the figures as PNG and the tables as CSV, written atomically.

The report is a list of blocks (heading, paragraph, list, table, figure) rendered twice, to
Markdown and to HTML. Its tables are the same Documents the CLI commands print, so a report's CSV
is exactly what `params/flops/train/memory --format csv` give for the same inputs.

Safe: every report carries a marker file (``llmcalc-report.json``: version, command line, date);
``force`` replaces only a folder holding that marker, anything else is refused. Everything is
written into a staging sibling folder (``.NAME.partial-PID-*``), which replaces the target only
when complete, with SIGINT/SIGTERM held back during the swap; a failed or interrupted run leaves no
partial report and never damages an earlier one, and staging folders of killed runs are swept.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import re
import shutil
import tempfile
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from ..errors import LlmcalcError
from ..records import dataclass
from ..render.tables import Document, Table, render, tabulate_table
from ..units import GIB
from .interrupts import Interrupted, checkpoint, signals_deferred


@dataclass
class Report:
    title: str
    blocks: list[tuple] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", level, text))

    def paragraph(self, text: str) -> None:
        """Prose for a reader of the report: command-line hints are dropped (``report_note``)."""
        text = report_note(text)
        if text:
            self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def code(self, text: str) -> None:
        """Verbatim text: a command line."""
        self.blocks.append(("code", text))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def document(self, doc: Document, csv_name: str) -> None:
        """A command's Document: its tables for people in the report (notes without the CLI's hints), its CSV
        under tables/."""
        self.files[f"tables/{csv_name}.csv"] = render(doc, "csv").encode()
        for table in doc.tables:
            if table.for_people:
                notes = [n for n in (report_note(note) for note in table.notes) if n]
                columns = [_one_unit(c, table.rows) if c.label.endswith("(GiB)") else c
                           for c in table.columns]  # one binary unit per column, the largest value's
                self.table(Table(table.title, columns, table.rows, notes, for_people=table.for_people))

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
                out += [_md(block[1]), ""]
            elif kind == "ul":
                out += [f"- {_md(item)}" for item in block[1]] + [""]
            elif kind == "code":
                out += ["```", block[1], "```", ""]
            elif kind == "table":
                table = block[1]
                out += [f"**{table.title}**", "", _md(tabulate_table(table, "pipe")), ""]
                out += [f"- {_md(note)}" for note in table.notes] + ([""] if table.notes else [])
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
                out.append(f"<p>{_html(block[1])}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{_html(i)}</li>" for i in block[1]) + "</ul>")
            elif kind == "code":
                out.append(f"<pre><code>{html.escape(block[1])}</code></pre>")
            elif kind == "table":
                table = block[1]
                out.append(f"<p class='caption'>{html.escape(table.title)}</p>"
                           + _WARN_HTML.sub(_WARN_SPAN, tabulate_table(table, "html")))
                if table.notes:
                    out.append("<ul class='notes'>" + "".join(f"<li>{_html(n)}</li>" for n in table.notes)
                               + "</ul>")
            elif kind == "figure":
                png = self.files[block[1]]
                width, height = png_size(png)
                data = base64.b64encode(png).decode()
                # shown at half its pixel size: sharp on 2x screens, text at its designed size
                out.append(f"<figure><img alt='{html.escape(block[2])}' width='{width // 2}' height='{height // 2}' "
                           f"src='data:image/png;base64,{data}'><figcaption>{html.escape(block[2])}</figcaption>"
                           "</figure>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}"
         "th{background:#f3f3f3}img{max-width:100%;height:auto}figure{margin:1em 0}"
         ".caption{font-weight:600;margin-bottom:0}.notes{font-size:12px;color:#555}figcaption{font-size:13px;"
         "color:#444}pre{background:#f5f5f5;padding:.5em;white-space:pre-wrap;word-break:break-all}"
         ".warn{color:#c62828;font-weight:700}")

WARNING = "does NOT fit"
_WARN_HTML = re.compile(re.escape(WARNING))
_WARN_SPAN = f"<strong class='warn'>{WARNING}</strong>"


def _md(text: str) -> str:
    return text.replace(WARNING, f"**{WARNING}**")


_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")  # [text](https://...), as markdown writes a link


def _html(text: str) -> str:
    return _LINK.sub(r"<a href='\2'>\1</a>", _WARN_HTML.sub(_WARN_SPAN, html.escape(text)))


_URL = re.compile(r"https?://[^\s)\];,'\"]+")


def short_source(text: str | None) -> str:
    """A preset's source as readers want it: its first address as a short link ("[meta-llama/Llama-3.1-70B on
    Hugging Face](https://huggingface.co/...)", "[lambda.ai/instances](...)"), never the development notes around
    it (those stay in the preset file); 'custom' where there is none."""
    match = _URL.search(text or "")
    if match is None:
        return "custom" if not text else text.split(". ")[0].split(" (")[0][:60]
    url = match.group(0).rstrip(".")
    host, _, path = url.split("://", 1)[1].partition("/")
    parts = [p for p in path.split("/") if p]
    if host.endswith("huggingface.co") and len(parts) >= 2:
        label = f"{parts[0]}/{parts[1]} on Hugging Face"
    elif parts and parts[-1].lower().endswith(".pdf"):
        label = f"{host.removeprefix('www.')} (PDF)"
    else:
        label = host.removeprefix("www.") + ("/" + "/".join(parts[:3]) if parts else "")
    return f"[{label}]({url})"


_OPTION = re.compile(r"(^|[\s`(])--[a-z]")  # a command-line option: --sort, `--causal`


def _clauses(text: str) -> list[str]:
    """`text` cut after each '; ' or ', ' outside parentheses (each clause keeps its separator), so that a
    parenthesis is never split: "(bf16-mixed + AdamW, flash attention)" stays whole."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")" and depth > 0
        if ch in ";," and depth == 0 and text[i + 1:i + 2] == " ":
            out.append(text[start:i + 2])
            start = i + 2
    return out + [text[start:]]


def report_note(note: str) -> str:
    """A table note as a report shows it: without the command-line hints the CLI prints (options such as
    --sort or --causal and the clauses naming them), which mean nothing to a reader of the report; the
    backticks of `llmcalc ...` names dropped, the rest of the sentence kept whole. A note that is only a hint
    is dropped ('')."""
    if note.lstrip().startswith("--"):
        return ""
    note = re.sub(r"\s*\([^()]*--[a-z][^()]*\)", "", note)  # a parenthesis holding an option
    kept = [c for c in _clauses(note) if not _OPTION.search(c)]
    text = "".join(kept).rstrip(";, ").replace("`", "")
    return text + "." if text and note.endswith(".") and not text.endswith(".") else text


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height of a PNG, from its IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


MARKER = "llmcalc-report.json"  # written with every report: what --force may replace




def provenance(argv: list[str], sources: dict[str, str], scenario=None) -> dict:
    """What the marker file records and the report opens with: llmcalc's version, the command line as
    typed, the date (UTC), where each preset comes from."""
    import shlex
    from datetime import datetime, timezone

    from .. import __version__

    data: dict[str, Any] = {"llmcalc_version": __version__, "command": shlex.join(["llmcalc", *argv]),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "sources": dict(sources)}
    if scenario is not None and scenario.gpu is not None:
        data["sources"][scenario.gpu.key] = scenario.gpu.source
        data["scenario"] = scenario.to_dict()
    return data


def check_destination(out: Path, force: bool) -> None:
    """Sweep what killed runs left beside `out` (``sweep_stale``), then fail early, before any work,
    with one clear line: a file in the way, a folder that holds
    something other than an llmcalc report (refused even with --force: only a folder carrying the
    marker file may be replaced), an earlier report without --force, or a folder we cannot write into."""
    if not str(out):
        raise LlmcalcError("--out is empty; give a directory for the report")
    with contextlib.suppress(OSError):  # not ours to fix here: a folder we cannot list or write is reported below
        sweep_stale(out)
    if out.exists() and not out.is_dir():
        raise LlmcalcError(f"output path {out} is a file; give a directory for the report")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise LlmcalcError(f"{out} is not empty and holds no llmcalc report (no {MARKER}); llmcalc replaces "
                               "only its own reports, even with --force: give a new or empty directory")
        if not force:
            raise LlmcalcError(f"{out} already holds an llmcalc report; pass --force to replace it")
    here = Path.cwd()
    if out.exists() and (here == out.resolve() or out.resolve() in here.parents):
        raise LlmcalcError(f"cannot replace {out}: it is the current directory or holds it; run from elsewhere")
    parent = Path(os.path.abspath(out)).parent
    while not parent.exists():  # the nearest existing ancestor must be a writable directory
        parent = parent.parent
    if not parent.is_dir():
        raise LlmcalcError(f"cannot write the report to {out}: {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK | os.X_OK)):
        raise LlmcalcError(f"cannot write the report to {out}: permission denied")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _staging_name(out: Path, kind: str) -> str:
    return f".{out.name}.{kind}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(out: Path) -> None:
    """Remove the staging folders (``.NAME.partial-PID-*``, ``.NAME.old-PID-*``) that earlier runs left
    beside `out` when they were killed (SIGKILL, power loss) before cleaning up; a run still alive
    keeps its own. An aside copy of the previous report whose run died mid-swap is put back when `out`
    is missing, so even then the old report survives."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(partial|old)-(?:(\d+)-)?")
    if not out.parent.is_dir():
        return
    for entry in sorted(out.parent.iterdir()):
        match = pattern.match(entry.name)
        if not match or not entry.is_dir() or entry.is_symlink():
            continue
        if match.group(2) and (int(match.group(2)) == os.getpid() or _alive(int(match.group(2)))):
            continue
        if match.group(1) == "old" and not out.exists() and (entry / MARKER).is_file():
            entry.rename(out)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def marker_bytes(marker: dict) -> bytes:
    return (json.dumps(marker, indent=2, ensure_ascii=False) + "\n").encode()


def outcome(out: Path, marker: dict) -> str:
    """What `out` holds after an interrupt, in words: this run's report (its marker file is this run's),
    or whatever was there before."""
    try:
        if (out / MARKER).read_bytes() == marker_bytes(marker):
            return f"the new report in {out} is complete"
    except OSError:
        pass
    return f"{out} left as it was" if out.exists() else f"nothing written to {out}"


def write_report(report: Report, out: Path, force: bool, marker: dict | None = None) -> Path:
    """Write report.md, report.html, figures/, tables/ and the marker file into `out`, atomically.

    Files go into a staging folder beside `out` (mode from the umask, like any new folder); the swap
    (old report aside, staging into place, old copy removed) runs with SIGINT/SIGTERM held back, and
    an interrupt while the files are written removes the staging folder. So at any moment `out` holds
    the old report or the new one, whole, and nothing is left beside it. An ``Interrupted`` raised
    here says which in its ``state``."""
    try:
        return _write(report, out, force, marker or {})
    except Interrupted as exc:
        exc.state = outcome(out, marker or {})
        raise


def _write(report: Report, out: Path, force: bool, marker: dict) -> Path:
    try:
        with signals_deferred():
            check_destination(out, force)
            out.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=_staging_name(out, "partial"), dir=out.parent))
            os.chmod(staging, 0o777 & ~_umask())
    except OSError as exc:
        raise LlmcalcError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    try:
        files = dict(report.files)
        files["report.md"] = report.markdown().encode()
        files["report.html"] = report.html().encode()
        files[MARKER] = marker_bytes(marker)
        for rel, content in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        with signals_deferred():
            checkpoint()  # a signal whose exception Python dropped: never commit after it
            if out.exists():
                aside = Path(tempfile.mkdtemp(prefix=_staging_name(out, "old"), dir=out.parent))
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
    except BaseException as exc:
        with signals_deferred():
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise LlmcalcError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
        raise
    return out


def _one_unit(column, rows: list[dict]):
    """A "(GiB)" column in one binary unit, the one its largest value reads in (GiB from 1 GiB on, else MiB,
    KiB), named in its label; its raw values are bytes, or GiB where the key says so (`layout`'s JSON contract
    `memory_gib`)."""
    scale_in = GIB if column.key.endswith("_gib") else 1
    values = [abs(r[column.key]) * scale_in for r in rows if isinstance(r.get(column.key), (int, float))]
    unit, scale = next(((u, s) for u, s in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10))
                        if values and max(values) >= s), ("B", 1))
    digits = 0 if unit == "B" else 2
    return replace(column, label=column.label.replace("(GiB)", f"({unit})"),
                   fmt=lambda v: f"{v * scale_in / scale:,.{digits}f}")
