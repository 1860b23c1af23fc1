"""Import rules from docs/architecture.md, checked in a fresh interpreter and by reading the sources."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "llmcalc"
HEAVY = ("torch", "numpy", "pandas", "matplotlib", "fvcore", "transformers")


def heavy_modules_after(code: str) -> list[str]:
    found = f"sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))"
    probe = code + f"\nimport sys, json\nprint(json.dumps({found}), file=sys.stderr)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_import_llmcalc_loads_nothing_heavy():
    assert heavy_modules_after("import llmcalc") == []


@pytest.mark.parametrize("argv", [["params", "llama-3-8b"], ["params", "deepseek-v3", "--format", "json"], ["presets"]])
def test_analytic_commands_do_not_import_heavy_libraries(argv):
    code = f"import sys\nfrom llmcalc.cli import cli\ncli.main({argv!r}, prog_name='llmcalc')"
    assert heavy_modules_after(code) == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_analytic_is_standard_library_only():
    for path in sorted((PACKAGE / "analytic").glob("*.py")):
        outside = {n for n in _imports(path) if n not in sys.stdlib_module_names}
        assert not outside, f"{path.name} imports {outside}"


def test_core_modules_are_standard_library_only():
    names = ["units.py", "errors.py", "__init__.py"] + [f"spec/{p.name}" for p in (PACKAGE / "spec").glob("*.py")]
    for name in names:
        outside = {n for n in _imports(PACKAGE / name) if n not in sys.stdlib_module_names}
        assert not outside, f"{name} imports {outside}"


def _relative_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node,
                                                                                       ast.ImportFrom) and node.level}


def test_torch_only_in_profiling():
    for path in PACKAGE.rglob("*.py"):
        if "profiling" not in path.parts:
            assert not {"torch", "fvcore"} & _imports(path), f"{path} imports torch/fvcore"


def test_imports_flow_one_way():
    """analytic never imports report/profiling/cli; report never imports profiling (docs/architecture.md)."""
    for path in (PACKAGE / "analytic").glob("*.py"):
        assert not {"report", "profiling", "cli"} & _relative_imports(path), path
    for path in (PACKAGE / "report").glob("*.py"):
        assert not {"profiling", "cli"} & _relative_imports(path), path
