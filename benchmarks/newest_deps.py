"""The fast tier against the newest releases llmcalc's declared ranges allow, and the constraints file made from them.

`constraints.txt` pins every package the README's test command and `.ci/run` install (exact versions known to pass),
so a release of any dependency cannot turn main red overnight. The ranges in pyproject.toml stay open for users;
this script shows the drift:

    python benchmarks/newest_deps.py                       # newest releases -> fast tier; prints what moved
    python benchmarks/newest_deps.py --write-constraints   # the same, then constraints.txt from that venv if green

It makes a scratch venv (a temporary folder, or --venv DIR, kept), installs torch==2.13.0 first (the CPU build this
machine holds on disk; an unpinned torch would pull a multi-GB CUDA build, so torch is the one package held back),
then `pip install -e '.[dev]'` with no constraints (pip takes the newest release each range allows), runs
`python -m pytest` (the fast tier) in the repository, and prints the versions that differ from constraints.txt and
pytest's closing line. Exit status: pytest's. Takes about 10 minutes (most of it the install); progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
TORCH = "torch==2.13.0"
HEADER = """\
# Exact versions the fast and slow tiers pass with: `.ci/run` and the README's test command install with
# `-c constraints.txt`. Regenerate (newest releases the ranges in pyproject.toml allow, checked by the fast tier
# first): python benchmarks/newest_deps.py --write-constraints
"""


def step(message: str, started: float) -> None:
    """Progress on stderr, on a terminal only."""
    if sys.stderr.isatty():
        print(f"[{time.monotonic() - started:6.0f} s] {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=False, text=True, **kwargs)


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line (pip freeze's, constraints.txt's), names normalised."""
    out = {}
    for line in text.splitlines():
        found = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if found:
            out[re.sub(r"[-_.]+", "-", found.group(1)).lower()] = found.group(2).split("+")[0]
    return out


def constraints_text(freeze: str) -> str:
    """pip freeze of the scratch venv as constraints: llmcalc itself (editable) left out, torch as the README pins it
    (the local +cpu label dropped: `==2.13.0` matches the CPU build)."""
    lines = [line for line in freeze.splitlines()
             if "==" in line and not line.startswith(("-e ", "#")) and not line.lower().startswith("llmcalc")]
    lines = [TORCH if line.lower().startswith("torch==") else line for line in lines]
    return HEADER + "\n".join(sorted(lines, key=str.lower)) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="make (or reuse) the scratch venv here and keep it")
    parser.add_argument("--write-constraints", action="store_true",
                        help="after a green fast tier, write constraints.txt from the scratch venv")
    args = parser.parse_args()
    started = time.monotonic()
    venv = args.venv or Path(tempfile.mkdtemp(prefix="llmcalc-newest-")) / "venv"
    python = venv / "bin" / "python"
    try:
        if not python.exists():
            step(f"making a venv at {venv}", started)
            if run([sys.executable, "-m", "venv", str(venv)]).returncode:
                return 2
        step(f"installing {TORCH} (held: the CPU build)", started)
        if run([str(python), "-m", "pip", "install", "-q", TORCH]).returncode:
            return 2
        step("installing '.[dev]' with no constraints: the newest release each range allows", started)
        if run([str(python), "-m", "pip", "install", "-q", "--upgrade", "--upgrade-strategy", "eager", "-e",
                f"{ROOT}[dev]", TORCH], cwd=ROOT).returncode:
            return 2
        freeze = run([str(python), "-m", "pip", "freeze"], capture_output=True).stdout
        newest, pinned = pins(freeze), pins(CONSTRAINTS.read_text()) if CONSTRAINTS.exists() else {}
        moved = {name: (pinned.get(name), version) for name, version in newest.items()
                 if pinned.get(name) != version and name != "llmcalc"}
        step("running the fast tier (python -m pytest)", started)
        tests = run([str(python), "-m", "pytest", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True)
        closing = next((line.strip("= ") for line in reversed(tests.stdout.splitlines()) if line.strip()), "")
        if tests.returncode:
            print(tests.stdout[-6000:])
        day = datetime.date.today().isoformat()
        print(f"{day}: newest releases the ranges allow ({TORCH} held): fast tier "
              f"{'passed' if tests.returncode == 0 else 'FAILED'}: {closing}")
        print("versions that differ from constraints.txt: " + (", ".join(
            f"{name} {old or '(new)'} -> {new}" for name, (old, new) in sorted(moved.items())) or "none"))
        if args.write_constraints:
            if tests.returncode:
                print("constraints.txt left as it is: the fast tier failed with these versions", file=sys.stderr)
            else:
                CONSTRAINTS.write_text(constraints_text(freeze))
                print(f"wrote {CONSTRAINTS.relative_to(ROOT)} ({len(newest) - 1} packages)")
        step("done", started)
        return tests.returncode
    finally:
        if args.venv is None:
            shutil.rmtree(venv.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
