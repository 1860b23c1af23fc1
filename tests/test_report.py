"""Planning reports and `compare`: files, figures, CSV that parses back to the CLI's JSON, atomic writes."""

import csv
import io
import json
import re

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from click.testing import CliRunner  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from llmcalc.cli import cli  # noqa: E402
from llmcalc.report import plots  # noqa: E402
from llmcalc.report.document import Progress  # noqa: E402

SCENARIO = ["--tokens", "15T", "--gpu", "h100-sxm", "--n-gpus", "1024", "--mfu", "0.4", "--seq-len", "4096"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def cli_json(*args):
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def read_csv(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def make_report(tmp_path, *models, extra=()):
    out = tmp_path / "report"
    result = run("report", *models, *SCENARIO, "--out", out, *extra)
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    # stderr: one message and no progress bar (not a terminal); stdout: the files written
    assert result.stderr.strip().splitlines() == [f"llmcalc: report written to {out}/ ({len(written)} files)"]
    assert [line.strip() for line in result.stdout.strip().splitlines()[5:]] == written
    return out


def check_files(out, n_models):
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert {"params.png", "flops_vs_seq.png", "time_cost.png", "memory.png", "kv_cache.png",
            "compute_optimal.png"} <= set(figures)
    referenced = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", md)
    assert sorted(r.split("/")[1] for r in referenced) == figures  # every figure shown, every reference exists
    for name in figures:
        image = imread(out / "figures" / name)  # decodes as a PNG
        assert image.shape[0] > 200 and image.shape[1] > 200
    assert html.count("data:image/png;base64,") == len(figures)  # self-contained: figures embedded
    assert not re.search(r"""src=['"](?!data:)""", html) and "<link" not in html
    assert md.startswith("# Planning report") and "## Summary" in md and md.count("- Size:") == n_models
    return figures


def test_report_for_one_model(tmp_path):
    out = make_report(tmp_path, "llama-3-8b")
    check_files(out, 1)
    tables = out / "tables"
    # the CSV tables parse back to what params, flops, train and memory print as JSON
    params = cli_json("params", "llama-3-8b")
    rows = {r["name"]: int(r["params"]) for r in read_csv(tables / "params-llama-3-8b.csv") if r["kind"] == "component"}
    assert rows == params["components"]
    flops = cli_json("flops", "llama-3-8b", "--seq-len", "4096")
    assert {r["op"]: int(r["forward"]) for r in read_csv(tables / "flops-llama-3-8b.csv")} == flops["ops"]
    train = cli_json("train", "llama-3-8b", *SCENARIO)
    values = {r["key"]: r["value"] for r in read_csv(tables / "train-llama-3-8b.csv")}
    for key in ("total_flops", "gpu_hours", "wall_clock_days", "cost_usd"):
        assert float(values[key]) == pytest.approx(train[key], rel=1e-12)
    memory = cli_json("memory", "llama-3-8b", "--seq-len", "4096", "--n-gpus", "1024", "--zero", "3",
                      "--gpu", "h100-sxm")
    rows = {r["name"]: float(r["bytes"]) for r in read_csv(tables / "memory-llama-3-8b.csv")
            if r["kind"] == "component"}
    assert rows == pytest.approx({k: v for k, v in memory["components"].items() if v})
    sweep = read_csv(tables / "time_vs_gpus.csv")
    at_1024 = [r for r in sweep if r["device"] == "h100-sxm" and r["n_gpus"] == "1024"]
    assert float(at_1024[0]["wall_clock_days"]) == pytest.approx(train["wall_clock_days"])


def test_report_for_two_models(tmp_path):
    out = make_report(tmp_path, "llama-3-8b", "mistral-7b", extra=("--serve",))
    check_files(out, 2)
    # --serve: each model's serving tables, the same figures `serve` prints, at --seq-len per request
    assert "## Serving" in (out / "report.md").read_text() and "### llama-3-8b on 1 x h100-sxm" in (
        out / "report.md").read_text()
    serve = cli_json("serve", "llama-3-8b", "--gpu", "h100-sxm", "--max-model-len", "4096")
    rows = read_csv(out / "tables" / "serve-llama-3-8b.csv")
    assert [int(r["concurrency"]) for r in rows] == [r["concurrency"] for r in serve["throughput"]]
    assert [float(r["tokens_per_second"]) for r in rows] == pytest.approx(
        [r["tokens_per_second"] for r in serve["throughput"]])
    records = read_csv(out / "tables" / "compare.csv")
    compare = cli_json("compare", "llama-3-8b", "mistral-7b", *SCENARIO, "--zero", "3")
    assert [r["model"] for r in records] == [m["model"] for m in compare["models"]]
    for row, record in zip(records, compare["models"], strict=True):
        assert float(row["gpu_hours"]) == pytest.approx(record["gpu_hours"])
        assert int(row["params"]) == record["params"]
    for model in ("llama-3-8b", "mistral-7b"):
        assert (out / "tables" / f"params-{model}.csv").exists()


def test_report_with_a_virtual_profile(tmp_path):
    out = tmp_path / "profiled"
    result = run("report", "llmcalc-tiny", *SCENARIO[:-2], "--seq-len", "256", "--profile", "virtual", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "figures" / "parity.png").exists() and (out / "tables" / "profile-llmcalc-tiny.csv").exists()
    rows = read_csv(out / "tables" / "profile-llmcalc-tiny.csv")
    assert any(r["name"] == "forward FLOPs" and float(r["rel_error"]) == 0 for r in rows)


def test_existing_report_needs_force_and_survives_a_failure(tmp_path, monkeypatch):
    out = make_report(tmp_path, "gpt2")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = run("report", "gpt2", *SCENARIO, "--out", out)
    assert result.exit_code == 2 and "pass --force" in result.stderr
    # a run that fails halfway (here: a figure raising, or an interrupt) leaves the earlier report as it was
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        def explode(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(plots, "compute_optimal", explode)
        run("report", "gpt2", *SCENARIO, "--out", out, "--force")
        assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no partial directories left
    monkeypatch.undo()
    result = run("report", "llmcalc-tiny", *SCENARIO, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert "llmcalc-tiny" in (out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def one_line(result, fragment):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr


def test_bad_input_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "r"
    one_line(run("report", "llama-3-8b", "llama-9b", *SCENARIO, "--out", out), "unknown model preset 'llama-9b'")
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line(run("report", "gpt2", *SCENARIO, "--out", afile), "is a file")
    one_line(run("report", "gpt2", *SCENARIO, "--out", afile / "sub"), "cannot write the report")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("llmcalc.report.document.tempfile.mkdtemp", denied)
    one_line(run("report", "gpt2", *SCENARIO, "--out", out), "Permission denied")
    monkeypatch.undo()
    one_line(run("compare", "gpt2", "gpt-5", *SCENARIO), "unknown model preset 'gpt-5'")
    one_line(run("compare", "gpt2", "llama-2-7b", "--sort", "speed"), "cannot sort by 'speed'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    bar = Progress(3, "report")  # pytest's stderr is not a terminal: nothing is drawn
    bar.step("x")
    bar.close()
    assert capsys.readouterr().err == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = Progress(2, "report")
    bar.step("profiling")
    bar.step("done")
    bar.close()
    assert "profiling" in terminal.getvalue() or "done" in terminal.getvalue()


def test_compare_sorts_and_records():
    data = cli_json("compare", "llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", *SCENARIO,
                    "--sort", "kv_cache_bytes_per_token")
    kv = [m["kv_cache_bytes_per_token"] for m in data["models"]]
    assert kv == sorted(kv) and data["models"][-1]["model"] == "llama-2-7b"  # MHA: the biggest cache
    assert data["models"][0]["kv_cache_bytes_per_token"] == 28 * 4 * 128 * 2 * 2  # Qwen2.5-7B: 4 KV heads
    result = run("compare", "llama-2-7b", "llama-3-8b", *SCENARIO, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["model"] for r in rows] == ["llama-2-7b", "llama-3-8b"]
    assert int(rows[0]["params"]) == 6_738_415_616 and rows[0]["fits"] == "True"


def test_missing_report_libraries_is_one_line():
    import subprocess
    import sys

    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from llmcalc.cli import cli\ncli.main(['report', 'gpt2'], prog_name='llmcalc')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmcalc: error: reports need matplotlib: pip install 'llmcalc[report]'"]
