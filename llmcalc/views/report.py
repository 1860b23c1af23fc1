"""What `report` prints once the report is written: where it is and its files."""

from __future__ import annotations

from pathlib import Path

from ..render.tables import Column, Document, Table


def document(written: Path, files: list[str], seq_len: int) -> Document:
    return Document(f"report {written}: seq {seq_len:,}", {"out": str(written), "files": files},
                    [Table("files", [Column("file", "file", align="left")], [{"file": f} for f in files])])
