"""Record the corpus: `python tests/corpus/record.py` runs every invocation with today's code and writes
recorded.json. Re-record only when an output changes on purpose, and say why in expected_diff.json first
(or instead, to keep the old recording as the reference)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import RECORDED, invocations, run  # noqa: E402


def main() -> None:
    recorded = {}
    for i, line in enumerate(invocations(), 1):
        start = time.perf_counter()
        recorded[line] = run(line)
        print(f"[{i}] {time.perf_counter() - start:6.2f} s  exit {recorded[line]['exit']}  {line}", file=sys.stderr)
    RECORDED.write_text(json.dumps(recorded, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
