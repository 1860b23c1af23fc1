"""Import rules from docs/architecture.md, checked in a fresh interpreter and by reading the sources."""

import ast
import importlib
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
    names = ["units.py", "errors.py", "records.py", "__init__.py"]
    names += [f"spec/{p.name}" for p in (PACKAGE / "spec").glob("*.py")]
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
    """analytic never imports views/report/profiling/cli; views never report/profiling/cli; report never
    profiling or cli; render only the vocabulary and records (docs/architecture.md)."""
    for path in (PACKAGE / "analytic").glob("*.py"):
        assert not {"report", "profiling", "cli", "views", "render", "fallback"} & _relative_imports(path), path
    for path in (PACKAGE / "views").glob("*.py"):
        assert not {"report", "profiling", "cli"} & _relative_imports(path), path
    for path in (PACKAGE / "report").glob("*.py"):
        assert not {"profiling", "cli"} & _relative_imports(path), path
    own = {p.stem for p in (PACKAGE / "render").glob("*.py")}  # render's modules importing each other
    for path in (PACKAGE / "render").glob("*.py"):
        assert _relative_imports(path) <= {"", "vocabulary", "records"} | own, path



# --- no import cycle inside llmcalc ---------------------------------------------------------------------


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _every_import(node: ast.AST):
    """Every import statement: at module level, inside functions (lazy imports are still a dependency) and under
    ``if TYPE_CHECKING:`` (a type named from another module is a dependency of the design: memory naming
    measured's MeasuredModel for its annotations while measured builds memory's MemoryEstimate was a circle)."""
    for child in ast.walk(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child


def import_graph(root: Path, package: str = "llmcalc") -> dict[str, set[str]]:
    """module -> the modules of `package` it imports, relative imports resolved. `from .x import y` depends on
    x, and on x.y when y is a module. A parent package that Python runs first is not an edge (a package's
    __init__ runs before its submodules whatever they import)."""
    paths = {_module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _every_import(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
                continue
            base = here
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            module = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            targets |= {module} | {f"{module}.{a.name}" for a in node.names}
        graph[name] = {t for t in targets if t in paths and t != name and not name.startswith(t + ".")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_llmcalc():
    graph = import_graph(PACKAGE.parent)
    assert len(graph) > 60 and "llmcalc.spec.hf" in graph["llmcalc.spec.presets"]
    assert not import_cycles(graph), f"import cycles (a module reaching itself through others): {import_cycles(graph)}"


def test_the_cycle_check_sees_cycles(tmp_path):
    """A circle closed by a lazy import inside a function, one closed by a package-relative import, and one closed
    by an import under TYPE_CHECKING (measured and memory's, issue 37) are found; a parent package is not an edge."""
    pkg = tmp_path / "llmcalc"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from .b import y\nx = 1\n")
    (pkg / "b.py").write_text("y = 2\ndef f():\n    from .a import x\n    return x\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nfrom .. import d\nif TYPE_CHECKING:\n"
                                      "    from ..a import x\n")
    (pkg / "d.py").write_text("from .sub import c\n")
    (pkg / "measured.py").write_text("def estimate():\n    from .memory import Estimate\n    return Estimate()\n")
    (pkg / "memory.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from .measured import Model\nclass Estimate:\n    spec: 'Model'\n")
    graph = import_graph(tmp_path)
    assert graph["llmcalc.sub.c"] == {"llmcalc.a", "llmcalc.d"}  # its parent packages run first: not an edge
    assert sorted(import_cycles(graph)) == [["llmcalc.a", "llmcalc.b"], ["llmcalc.d", "llmcalc.sub.c"],
                                            ["llmcalc.measured", "llmcalc.memory"]]


@pytest.mark.parametrize("module", sorted(m for m in (_module_name(PACKAGE.parent, p) for p in PACKAGE.rglob("*.py"))
                                           if not m.endswith("__main__")))  # the graph's modules, not parsed
def test_every_module_imports(module):
    if module.startswith("llmcalc.profiling"):
        pytest.importorskip("torch")
    importlib.import_module(module)


def test_cli_starts_with_click_and_the_tiny_modules_only():
    """llmcalc/cli/ imports at module level click, itself and the tiny modules; everything else inside the
    commands (`python -X importtime -m llmcalc params llama-3-8b` stays short)."""
    tiny = {"units", "validate", "dtypes", "errors", "vocabulary", ""}  # "": llmcalc itself (its API is lazy)
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                top = (node.module or "").split(".")[0]
                if node.level == 1:
                    continue  # llmcalc.cli's own modules
                assert top in tiny, f"{path.name} imports ..{node.module} at start-up"
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                outside = {n.split(".")[0] for n in names if n} - set(sys.stdlib_module_names) - {"click"}
                assert not outside, f"{path.name} imports {outside} at start-up"


def test_the_package_imports_its_api_on_first_use():
    """`import llmcalc` runs none of its modules; each public name is there on first use, from its module."""
    code = ("import sys, llmcalc\nbefore = sorted(m for m in sys.modules if m.startswith('llmcalc.'))\n"
            "from llmcalc import ModelSpec, count_params\n"
            "print(before, ModelSpec.__module__, count_params.__module__, set(llmcalc.__all__) < set(llmcalc._API))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "llmcalc.spec.model", "llmcalc.analytic.params", "True"]
    import llmcalc

    assert all(getattr(llmcalc, name) is not None for name in llmcalc._API)
    with pytest.raises(AttributeError):
        llmcalc.no_such_name  # noqa: B018


def test_a_command_imports_its_own_cli_module_only():
    """`llmcalc params` builds the commands of llmcalc/cli/models.py, not the other five modules' (a fresh
    process: what start-up imports is the point)."""
    code = ("import sys\nfrom llmcalc.cli import cli\ntry:\n    cli.main(['params', 'gpt2', '--format', 'json'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('llmcalc.cli.')), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stderr.strip().splitlines()[-1]
    assert loaded == str(["llmcalc.cli.common", "llmcalc.cli.main", "llmcalc.cli.models", "llmcalc.cli.options",
                          "llmcalc.cli.types"])


@pytest.mark.parametrize(("argv", "unused"), [
    (["train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--mfu", "0.4"],
     ["llmcalc.analytic.step", "llmcalc.analytic.pipeline", "llmcalc.analytic.memory"]),
    (["serve", "qwen2.5-7b", "--gpu", "h100-sxm", "--max-model-len", "3072"],
     ["llmcalc.analytic.measured", "llmcalc.analytic.measured_serving", "llmcalc.views.memory",
      "llmcalc.analytic.finetune", "llmcalc.analytic.memory", "llmcalc.analytic.activations"]),
    (["infer", "llama-3-8b", "--gpu", "h100-sxm"], ["llmcalc.analytic.finetune", "llmcalc.analytic.memory"]),
])
def test_a_command_leaves_out_the_models_its_answer_does_not_use(argv, unused):
    """`train --mfu` times nothing (no step model); `serve` and `infer` of a formula model read nothing
    transformers measured, no fine-tuning and no training memory (a fresh process: what start-up imports is the
    point)."""
    code = (f"import sys\nfrom llmcalc.cli import cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit as exc:\n"
            f"    assert not exc.code, exc.code\nprint(sorted(set({unused!r}) & set(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_the_program_freezes_what_start_up_imported():
    """`llmcalc` (cli.main) moves the start-up objects out of the cyclic collector's reach (gc.freeze) before the
    command runs; importing llmcalc.cli alone (a library user, the tests) leaves the collector as it was."""
    code = ("import gc, sys\nfrom llmcalc.cli import main\nbefore = gc.get_freeze_count()\nsys.argv = ['llmcalc', "
            "'--version']\ntry:\n    main()\nexcept SystemExit:\n    pass\nprint(before, gc.get_freeze_count() > 1000, "
            "file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "0 True"
