"""House rules for llmcalc/ that reviewers would otherwise re-flag by hand (issue 15), checked on the AST:

- no function over 60 lines unless its signature carries a `# long: <reason>` comment;
- no call with more than 5 positional arguments (name them: a 14-argument constructor call read
  positionally is where swapped arguments hide).

`PENDING` lists what already broke a rule in llmcalc/report/ and llmcalc/profiling/, areas being
reworked on other branches at the time these rules landed; it may only shrink (an entry that no
longer breaks a rule fails the test, so it is deleted when fixed).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 60
MAX_POSITIONAL = 5

# (path, function) for long functions; (path, callee) -> number of calls for positional-argument calls.
PENDING_LONG: set[tuple[str, str]] = set()
PENDING_POSITIONAL: Counter = Counter()


def _modules():
    for path in sorted((ROOT / "llmcalc").rglob("*.py")):
        source = path.read_text()
        yield path.relative_to(ROOT).as_posix(), source.splitlines(), ast.parse(source)


def _long_functions() -> set[tuple[str, str, int]]:
    found = set()
    for rel, lines, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            signature = lines[node.lineno - 1:node.body[0].lineno - 1] or [lines[node.lineno - 1]]
            if length > MAX_LINES and not any("# long:" in line for line in signature):
                found.add((rel, node.name, length))
    return found


def _positional_calls() -> Counter:
    found: Counter = Counter()
    for rel, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ast.unparse(func))
                found[rel, name] += 1
    return found


def test_no_long_function_without_a_reason():
    found = _long_functions()
    new = sorted(f"{rel}: {name} ({n} lines)" for rel, name, n in found if (rel, name) not in PENDING_LONG)
    assert not new, (f"functions over {MAX_LINES} lines: split them into named helpers, or put "
                     f"'# long: <reason>' on the signature: {new}")
    fixed = PENDING_LONG - {(rel, name) for rel, name, _ in found}
    assert not fixed, f"no longer over {MAX_LINES} lines: delete from PENDING_LONG: {sorted(fixed)}"


MAX_MODULE_LINES = 1000
MAX_LONG_FUNCTIONS = 5  # issue 37: at most five functions over MAX_LINES, each with its '# long:' reason


def test_modules_and_long_functions_stay_few():
    """No module of llmcalc over MAX_MODULE_LINES lines; at most MAX_LONG_FUNCTIONS functions over MAX_LINES,
    reasons or not."""
    big = [f"{rel} ({len(lines)} lines)" for rel, lines, _ in _modules() if len(lines) > MAX_MODULE_LINES]
    assert not big, f"modules over {MAX_MODULE_LINES} lines: split them by concern: {big}"
    long = sorted(f"{rel}: {node.name}" for rel, _, tree in _modules() for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > MAX_LINES)
    assert len(long) <= MAX_LONG_FUNCTIONS, f"{len(long)} functions over {MAX_LINES} lines: {long}"


def test_no_call_with_more_than_five_positional_arguments():
    found = _positional_calls()
    new = {k: n for k, n in found.items() if n > PENDING_POSITIONAL.get(k, 0)}
    assert not new, f"calls with more than {MAX_POSITIONAL} positional arguments: pass the rest by keyword: {new}"
    fixed = {k: n for k, n in PENDING_POSITIONAL.items() if found.get(k, 0) < n}
    assert not fixed, f"fewer such calls than PENDING_POSITIONAL lists: lower or delete these entries: {fixed}"


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """The rules fire on a module that breaks them (so an empty result above is not a blind spot)."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "llmcalc").mkdir()
    (tmp_path / "llmcalc" / "bad.py").write_text(
        f"def big():\n{body}\n\n\ndef fine():  # long: a reason\n{body}\n\n\n"
        "big(1, 2, 3, 4, 5, 6)\nbig(1, 2, 3, 4, 5)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _long_functions() == {("llmcalc/bad.py", "big", MAX_LINES + 1)}
    assert _positional_calls() == Counter({("llmcalc/bad.py", "big"): 1})


# --- thin commands (issue 23): parse, one core call, one view, emit ---------------------------------------

MAX_COMMAND_BODY = 25


def _is_command(node: ast.FunctionDef) -> bool:
    """Decorated with click's `command()` (or a group's `.command()`)."""
    for dec in node.decorator_list:
        func = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(func, ast.Attribute) and func.attr == "command" or isinstance(func, ast.Name) and \
                func.id == "command":
            return True
    return False


def _command_bodies(root: Path) -> dict[str, int]:
    """`path:function` -> lines of its body (the docstring left out) for every click command under llmcalc/cli/."""
    found = {}
    for path in sorted((root / "llmcalc" / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and _is_command(node):
                body = node.body[1:] if ast.get_docstring(node) is not None else node.body
                found[f"{path.relative_to(root).as_posix()}:{node.name}"] = body[-1].end_lineno - body[0].lineno + 1
    return found


def test_command_bodies_are_thin():
    bodies = _command_bodies(ROOT)
    assert len(bodies) >= 13, f"expected every command of llmcalc/cli/, found {sorted(bodies)}"
    long = {name: n for name, n in bodies.items() if n > MAX_COMMAND_BODY}
    assert not long, (f"command bodies over {MAX_COMMAND_BODY} lines: move the checks and the computing into the "
                      f"core call (an analytic entry point) and the wording into the view: {long}")


def test_the_command_check_sees_commands(tmp_path):
    (tmp_path / "llmcalc" / "cli").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_COMMAND_BODY + 1))
    (tmp_path / "llmcalc" / "cli" / "c.py").write_text(
        f"import click\n\n\n@click.command()\ndef big():\n    \"\"\"Doc.\"\"\"\n{body}\n\n\ndef helper():\n{body}\n")
    assert _command_bodies(tmp_path) == {"llmcalc/cli/c.py:big": MAX_COMMAND_BODY + 1}


# --- tests of behaviour, not of the step engine's private helpers (issue 37) ------------------------------------

STEP_PACKAGE = "llmcalc.analytic.step"
MAX_PRIVATE_STEP_NAMES = 10


def _step_modules_bound(tree: ast.AST) -> set[str]:
    """The local names a test module binds to the step package or one of its modules."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == STEP_PACKAGE:
            bound |= {a.asname or a.name for a in node.names if not a.name.startswith("_")}
        elif isinstance(node, ast.ImportFrom) and node.module == "llmcalc.analytic":
            bound |= {a.asname or a.name for a in node.names if a.name == "step"}
        elif isinstance(node, ast.Import):
            bound |= {a.asname for a in node.names if a.name.startswith(STEP_PACKAGE) and a.asname}
    return bound


def _private_step_names(root: Path) -> dict[str, set[str]]:
    """name -> the test files using it, for each private name (one leading underscore) of the step package's modules
    that tests/*.py import (`from llmcalc.analytic.step.x import _y`), read off a module (`x._y`, `step.x._y`), or
    patch or get by name (`setattr(x, "_y", ...)`, "llmcalc.analytic.step.x._y")."""
    found: dict[str, set[str]] = {}
    for path in sorted((root / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text())
        bound = _step_modules_bound(tree)
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(STEP_PACKAGE):
                names += [a.name for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute) and not base.attr.startswith("_"):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in bound:
                    names.append(node.attr)
            elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in bound and isinstance(node.args[1], ast.Constant) \
                    and str(node.args[1].value).startswith("_"):
                names.append(str(node.args[1].value))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith(STEP_PACKAGE + "."):
                names += [part for part in node.value.split(".") if part.startswith("_")
                          and not part.startswith("__")]
        for name in names:
            found.setdefault(name, set()).add(path.name)
    return found


def test_tests_use_few_private_step_names():
    """Tests hold the step engine to behaviour through its public functions (predict, search_layouts,
    layout_floors, layer_times, ...), so that its helpers can be renamed or restructured: at most
    MAX_PRIVATE_STEP_NAMES private names of llmcalc.analytic.step's modules are used by tests."""
    found = _private_step_names(ROOT)
    listing = {name: sorted(files) for name, files in sorted(found.items())}
    assert len(found) <= MAX_PRIVATE_STEP_NAMES, (f"{len(found)} private step names in tests (at most "
                                                  f"{MAX_PRIVATE_STEP_NAMES}): test through public functions, or "
                                                  f"make the one you need public: {listing}")


def test_the_private_name_check_sees_them(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "from llmcalc.analytic.step import bounds, layout as lay\n"
        "from llmcalc.analytic.step.context import _layer_kind, StageTimes\n"
        "import llmcalc.analytic.step.dp as dp\n"
        "def test(monkeypatch):\n"
        "    bounds._work_floor(lay._describe(1), dp.__name__, lay.make_layout)\n"
        "    monkeypatch.setattr(bounds, '_floor_paths', None)\n"
        "    monkeypatch.setattr('llmcalc.analytic.step.cache._CACHES', {})\n"
        "    other._private()\n")
    assert _private_step_names(tmp_path) == {name: {"test_x.py"} for name in (
        "_layer_kind", "_work_floor", "_describe", "_floor_paths", "_CACHES")}
