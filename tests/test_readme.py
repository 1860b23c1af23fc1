"""The README's commands (and those of docs/*.md, where the long tour lives) work verbatim and print what
they show."""

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmcalc.cli import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# Documents whose `$ llmcalc ...` console examples are run: the README and the long tour in docs/.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ALL_TEXT = "\n".join(path.read_text() for path in DOCUMENTS)


def console_examples():
    """(command, expected output lines) for each `$ llmcalc ...` in the console blocks of DOCUMENTS."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", ALL_TEXT, re.S):
        command, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command:
                    examples.append((command, lines))
                command, lines = line[2:], []
            else:
                lines.append(line)
        if command:
            examples.append((command, lines))
    return examples


def matches(expected: list[str], actual: list[str]) -> bool:
    """Exact line match, where a line '...' in the README stands for any number of omitted lines and
    '…' inside a line for any text (timings, which vary from run to run)."""
    pattern = "\n".join(".*?" if line == "..." else re.escape(line).replace("…", "[^\n]*?") for line in expected)
    return re.fullmatch(pattern.replace("\n.*?\n", "(\n.*)?\n"), "\n".join(actual), re.S) is not None


EXAMPLES = console_examples()


def test_readme_has_examples():
    assert len(EXAMPLES) >= 4


# Profiling examples build and run a model (a real CPU run, a 16-layer virtual one): the slow tier.
@pytest.mark.parametrize("command, expected", [
    pytest.param(c, e, id=c, marks=[pytest.mark.slow] if c.startswith("llmcalc profile") else [])
    for c, e in EXAMPLES])
def test_readme_example(command, expected):
    argv = shlex.split(command)
    assert argv[0] == "llmcalc"
    result = CliRunner().invoke(cli, argv[1:])
    assert matches(expected, result.output.rstrip("\n").splitlines()), result.output


def test_python_examples_run():
    for block in re.findall(r"```python\n(.*?)```", README, re.S):
        exec(compile(block, "README.md", "exec"), {})


def test_setup_commands():
    install, tests = re.findall(r"```bash\n(python3 -m venv .*?)\n```", README)[:2]
    assert install.endswith("llmcalc train llama-3-8b --tokens 15T --gpu h100-sxm --n-gpus 1024 --mfu 0.4")
    result = CliRunner().invoke(cli, shlex.split(install.split("&& ")[-1])[1:])
    assert result.exit_code == 0 and "wall-clock" in result.output
    assert tests in (ROOT / ".ci" / "run").read_text(), ".ci/run must run the README's test command"


def _refresh(block: str) -> str:
    """A console block with each command's output replaced by what it prints now; a block that elides
    lines with '...' keeps as many lines before and after the elision as it had."""
    out, command, lines = [], None, []

    def flush():
        if command is None:
            return
        actual = CliRunner().invoke(cli, shlex.split(command)[1:]).output.rstrip("\n").splitlines()
        if any("…" in line for line in lines):  # hand-written wildcards: keep the block as it is
            out.extend([f"$ {command}", *lines])
            return
        if "..." in lines:
            head, tail = lines.index("..."), len(lines) - 1 - max(i for i, x in enumerate(lines) if x == "...")
            actual = actual[:head] + ["..."] + (actual[-tail:] if tail else [])
        out.extend([f"$ {command}", *actual])

    for line in block.splitlines():
        if line.startswith("$ "):
            flush()
            command, lines = line[2:], []
        else:
            lines.append(line)
    flush()
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # python tests/test_readme.py: refresh the console outputs of README.md and docs/*.md
    for path in DOCUMENTS:
        text = re.sub(r"(```console\n)(.*?)(```)", lambda m: m.group(1) + _refresh(m.group(2)) + m.group(3),
                      path.read_text(), flags=re.S)
        path.write_text(text)
        print(f"{path.relative_to(ROOT)} console blocks refreshed")


def test_committed_example_report_is_current(tmp_path):
    """The documented report command, run again, writes the same report.md and tables as reports/example."""
    command = re.search(r"```bash\n(llmcalc report .*?--out reports/example.*?)\n```", ALL_TEXT).group(1)
    argv = shlex.split(command)[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "example")
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    example = ROOT / "reports" / "example"
    fresh = tmp_path / "example"
    names = sorted(str(p.relative_to(example)) for p in example.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file())
    def same_run(text):  # the provenance differs by the date and where the test wrote it
        text = text.replace(argv[argv.index("--out") + 1], "reports/example")
        return re.sub(r"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", "on DATE", text)

    for name in names:
        if name.endswith((".md", ".csv")):
            assert same_run((fresh / name).read_text()) == same_run((example / name).read_text()), name


def test_docs_architecture_names_the_tree():
    """docs/architecture.md is written from the code: every llmcalc/ path it names exists, and every module of
    llmcalc/ is named in it (as `name`, name.py or a path)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"`(llmcalc/[\w/]+(?:\.py)?)", text))
    assert len(paths) > 40
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names what is not in the tree: {missing}"
    unnamed = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "llmcalc").rglob("*.py") if p.stem != "__init__"
                     and f"`{p.stem}`" not in text and f"{p.stem}.py" not in text)
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"
