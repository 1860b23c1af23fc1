"""Planning reports and `compare`: files, figures, CSV that parses back to the CLI's JSON, atomic writes."""

import csv
import io
import json
import re

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from clirun import cli_json, run  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from llmcalc.render.progress import Progress  # noqa: E402
from llmcalc.report import plots  # noqa: E402

SCENARIO = ["--tokens", "15T", "--gpu", "h100-sxm", "--n-gpus", "1024", "--mfu", "0.4", "--seq-len", "4096"]
# The tests of what a run does to an earlier report (--force, failures, signals, staging folders) do not depend on the
# model: OLD is existing_report's, NEW the one that replaces it, two encoders of the same kind, so that every file
# has its counterpart; their reports build in half the CPU time of qwen2.5-0.5b's and llama-3.2-1b's, which these
# tests used (1.6 s against 3.5 s in-process, measured here): no memory or step-time sections to compute and draw.
OLD = "bert-base-uncased"
NEW = "bert-large-uncased"


def messages(stderr: str) -> list[str]:
    """stderr's lines less warnings (e.g. a --seq-len beyond a model's max_position_embeddings, which
    the reports in these tests use on purpose): the outcome is the rest, and must be one line."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("llmcalc: warning:")]


def read_csv(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def make_report(tmp_path, *models, extra=()):
    out = tmp_path / "report"
    result = run("report", *models, *SCENARIO, "--out", out, *extra)
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    # stderr: one message and no progress bar (not a terminal); stdout: the files written
    assert messages(result.stderr) == [f"llmcalc: report written to {out}/ ({len(written)} files)"]
    assert [line.strip() for line in result.stdout.strip().splitlines()[5:]] == written
    return out


@pytest.fixture(scope="module")
def existing_report(tmp_path_factory, built_once):
    """`existing_report(tmp_path)`: tmp_path/report holding a whole OLD report (make_report's, checked
    there), built once per session (conftest's built_once: not once per worker) and written out again: the starting
    state of the tests of what a later run does to it."""
    def build():
        folder = tmp_path_factory.mktemp("built")
        (folder / "report").mkdir()  # an empty folder is fine (test_force_replaces_only_an_llmcalc_report)
        built = make_report(folder, OLD)
        return {str(p.relative_to(built)): p.read_bytes() for p in built.rglob("*") if p.is_file()}
    files = built_once(f"existing-report-{OLD}", build)

    def copy(tmp_path):
        out = tmp_path / "report"
        for name, content in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(content)
        return out
    return copy


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
    # time and cost: `train --global-batch` on the planned layout (the one `layout` recommends)
    plan = json.loads((out / "plan.json").read_text())
    lay = plan["models"]["llama-3-8b"]["layout"]
    assert lay["source"] == "recommended" and lay["cp"] == lay["vpp"] == 1
    flags = ["--tp", lay["tp"], "--pp", lay["pp"], "--zero", lay["zero"], "--micro-batch", lay["micro_batch"],
             "--recompute", lay["recompute"]]
    train = cli_json("train", "llama-3-8b", *SCENARIO[:-4], "--seq-len", "4096", "--global-batch",
                     plan["global_batch"], *flags)
    values = {r["key"]: r["value"] for r in read_csv(tables / "train-llama-3-8b.csv")}
    for key in ("gpu_hours", "wall_clock_days", "cost_usd"):
        assert float(values[key]) == pytest.approx(train[key], rel=1e-9)
    memory = cli_json("memory", "llama-3-8b", "--seq-len", "4096", "--n-gpus", "1024", "--gpu", "h100-sxm",
                      *flags[:-2])
    rows = {r["name"]: float(r["bytes"]) for r in read_csv(tables / "memory-llama-3-8b.csv")
            if r["kind"] == "component"}
    assert rows == pytest.approx({k: v for k, v in memory["components"].items() if v})
    sweep = read_csv(tables / "time_vs_gpus.csv")
    at_1024 = [r for r in sweep if r["device"] == "h100-sxm" and r["n_gpus"] == "1024"]
    assert float(at_1024[0]["wall_clock_days"]) == pytest.approx(train["wall_clock_days"])


def test_report_for_two_models(tmp_path):
    out = make_report(tmp_path, "llama-3-8b", "mistral-7b", extra=("--serve",))
    check_files(out, 2)
    prose = re.sub(r"```.*?```", "", (out / "report.md").read_text(), flags=re.S)
    assert "`" not in prose and not re.search(r"(^|\s)--[a-z]", prose)  # no CLI hints in any section
    # --serve: each model's deployment for the stated workload, `serve`'s answer for it
    md = (out / "report.md").read_text()
    serve = cli_json("serve", "llama-3-8b", "--gpu", "h100-sxm", "--input-len", 1024, "--output-len", 256,
                     "--max-concurrency", 64, "--max-ttft", 2, "--max-tpot", 0.05)
    assert "## Serving" in md and f"### llama-3-8b: {serve['layout']['n_gpus']} x h100-sxm (tp " in md
    assert "1,024 prompt tokens and 256 output tokens per request, 64 concurrent clients" in md
    # the side-by-side table: compare's figures, time and cost at the planned layout's (plan.json's)
    plan = json.loads((out / "plan.json").read_text())["models"]
    records = read_csv(out / "tables" / "compare.csv")
    compare = cli_json("compare", "llama-3-8b", "mistral-7b", *SCENARIO)
    assert [r["model"] for r in records] == [m["model"] for m in compare["models"]]
    for row, record in zip(records, compare["models"], strict=True):
        assert float(row["gpu_hours"]) == pytest.approx(plan[record["model"]]["gpu_hours"])
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


def test_report_with_finetuning_and_fp8(tmp_path):
    """--finetune qlora --recipe fp8: full / LoRA / QLoRA side by side and the FP8 recipes beside bf16-mixed, each
    column what `memory` prints for that set-up; trainable parameters and FLOPs by hand; MFU against both peaks."""
    out = make_report(tmp_path, "llama-3-8b", extra=("--finetune", "qlora", "--recipe", "fp8"))
    figures = check_files(out, 1)
    assert {"finetune_memory.png", "fp8_memory.png"} <= set(figures)
    md = (out / "report.md").read_text()
    assert "## FP8 training" in md and "## Fine-tuning (LoRA and QLoRA)" in md
    peaks = {r["name"]: r for r in read_csv(out / "tables" / "finetune-llama-3-8b.csv")}["peak per GPU"]
    one_gpu = ("--micro-batch", "1", "--seq-len", "4096")
    assert float(peaks["full"]) == pytest.approx(cli_json("memory", "llama-3-8b", *one_gpu)["per_gpu_bytes"])
    for method in ("lora", "qlora"):
        memory = cli_json("memory", "llama-3-8b", *one_gpu, "--finetune", method)
        assert float(peaks[method]) == pytest.approx(memory["per_gpu_bytes"])
    assert "| QLoRA (nf4 base) · plan" in md  # the plan's method marked
    # llama-3-8b, rank 16 on all-linear: r·(d_in + d_out) per linear, D 4,096, 8 KV heads x 128, d_ff 14,336, 32 layers
    per_layer = (4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 3
    assert f"| trainable (adapters) | {16 * per_layer * 32:,} |" in md.replace("  ", "").replace(" |", " |")
    frozen = cli_json("params", "llama-3-8b")["total"]
    rule = 4 * frozen + 6 * 16 * per_layer * 32  # 4·N_frozen + 6·N_adapter FLOPs per token (dense: all active)
    assert re.search(rf"\| QLoRA \(nf4 base\) · plan +\| +41\.9 M \| +[\d.]+ G \| +{rule / 1e9:.1f} G \| "
                     r"4·N_frozen \+ 6·N_adapter", md)
    # FP8: every recipe's column is `memory --recipe R` on the plan's layout; MFU against both H100 peaks
    fp8 = {r["name"]: r for r in read_csv(out / "tables" / "fp8-llama-3-8b.csv")}["peak per GPU"]
    plan = json.loads((out / "plan.json").read_text())
    lay = plan["models"]["llama-3-8b"]["layout"]  # the planned layout (layout's best for the fp8 recipe)
    planned = [f"--{k.replace('_', '-')}={lay[k]}" for k in ("tp", "cp", "pp", "vpp", "micro_batch", "zero",
                                                               "recompute", "dp_shard") if lay[k] is not None]
    for recipe in ("bf16-mixed", "fp8", "fp8-current", "fp8-torchao"):
        memory = cli_json("memory", "llama-3-8b", "--recipe", recipe, "--seq-len", "4096", "--n-gpus", "1024",
                          "--global-batch", plan["global_batch"], *planned)
        assert float(fp8[recipe]) == pytest.approx(memory["per_gpu_bytes"])
    assert re.search(r"MFU vs dense bf16 peak \(989\.4 TFLOP/s\) +\| 40\.0 %", md)
    assert re.search(r"MFU vs dense fp8 peak \(1,979 TFLOP/s\) +\| 20\.0 %", md)  # 0.4 x 989.4 / 1,978.9


def test_report_extras_refuse_bad_input_before_any_work(tmp_path):
    out = tmp_path / "r"
    one_line(run("report", "llama-3-8b", *SCENARIO, "--out", out, "--lora-rank", "8"), "needs --finetune")
    one_line(run("report", "llama-3-8b", *SCENARIO, "--out", out, "--finetune", "lora", "--lora-targets", "qq"),
             "unknown LoRA target 'qq'")
    one_line(run("report", "llama-3-8b", *SCENARIO, "--out", out, "--finetune", "qlora", "--base-dtype", "bf16"),
             "QLoRA quantises the base")
    one_line(run("report", "llama-3-8b", *SCENARIO, "--out", out, "--sharded-profile", "6", "--tp", "4"),
             "does not divide --world-size/--nproc 6")
    one_line(run("report", "mixtral-8x7b", *SCENARIO, "--out", out, "--sharded-profile", "4"), "no MoE")
    assert not out.exists()


@pytest.mark.slow
def test_report_with_a_sharded_profile(tmp_path):
    """--sharded-profile 4 --tp 2: the section carries what `profile --virtual --world-size 4 --tp 2` measures."""
    out = tmp_path / "sharded"
    result = run("report", "llmcalc-tiny", *SCENARIO[:-6], "--n-gpus", "8", "--seq-len", "256", "--tp", "2",
                 "--sharded-profile", "4", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "figures" / "sharded-llmcalc-tiny.png").exists()
    md = (out / "report.md").read_text()
    assert "## Sharded profile (virtual)" in md and "world 4 = dp 2 x tp 2" in md
    profile = cli_json("profile", "llmcalc-tiny", "--virtual", "--world-size", "4", "--tp", "2", "--seq-len", "256")
    rows = read_csv(out / "tables" / "sharded-llmcalc-tiny.csv")
    rank0 = profile["ranks"][0]
    assert float(rows[0]["param_bytes_m"]) == rank0["param_bytes"]["measured"] == rank0["param_bytes"]["analytic"]
    assert float(rows[0]["peak_memory_bytes_m"]) == pytest.approx(rank0["peak_memory_bytes"]["measured"])


def test_existing_report_needs_force_and_survives_a_failure(tmp_path, monkeypatch, existing_report):
    out = existing_report(tmp_path)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = run("report", OLD, *SCENARIO, "--out", out)
    assert result.exit_code == 2 and "pass --force" in result.stderr
    # a run that fails while building (a figure raising, or an interrupt) leaves the earlier report as it was:
    # the report is built in memory and written only once whole, so the first figure failing is as good a test as
    # the last (and costs no build)
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        def explode(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(plots, "params_breakdown", explode)
        run("report", OLD, *SCENARIO, "--out", out, "--force")
        assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no partial directories left
    monkeypatch.undo()
    result = run("report", NEW, *SCENARIO, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert NEW in (out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def one_line(result, fragment):
    assert result.exit_code == 2, result.output
    lines = messages(result.stderr)
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr


def test_bad_input_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "r"
    one_line(run("report", "llama-3-8b", "llama-9b", *SCENARIO, "--out", out), "unknown model preset 'llama-9b'")
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line(run("report", OLD, *SCENARIO, "--out", afile), "is a file")
    one_line(run("report", OLD, *SCENARIO, "--out", afile / "sub"), "cannot write the report")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("llmcalc.report.document.tempfile.mkdtemp", denied)
    one_line(run("report", OLD, *SCENARIO, "--out", out), "Permission denied")
    monkeypatch.undo()
    one_line(run("compare", "qwen2.5-0.5b", "gpt-5", *SCENARIO), "unknown model preset 'gpt-5'")
    one_line(run("compare", "qwen2.5-0.5b", "llama-2-7b", "--sort", "speed"), "cannot sort by 'speed'")
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
            "from llmcalc.cli import cli\ncli.main(['report', 'qwen2.5-0.5b'], prog_name='llmcalc')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert messages(done.stderr) == [
        "llmcalc: error: reports need matplotlib: pip install 'llmcalc[report]'"]


# --- data safety: --force, umask, signals, stale staging folders ---------------------------------------------

def files_of(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_force_replaces_only_an_llmcalc_report(tmp_path, existing_report):
    thesis = tmp_path / "thesis"
    (thesis / "data").mkdir(parents=True)
    (thesis / "thesis.tex").write_text("\\chapter{Results}")
    (thesis / "data" / "runs.csv").write_text("a,b\n1,2\n")
    before = files_of(thesis)
    for extra in ([], ["--force"]):
        result = run("report", OLD, *SCENARIO, "--out", thesis, *extra)
        one_line(result, "holds no llmcalc report")
        assert "already holds" not in result.stderr  # it is not a report: the error must not say so
        assert files_of(thesis) == before and sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]
    # an empty folder is fine (existing_report is built into one); a report is replaced with --force only
    report = existing_report(tmp_path)
    marker = json.loads((report / "llmcalc-report.json").read_text())
    assert marker["llmcalc_version"] and marker["command"].startswith(f"llmcalc report {OLD}")
    one_line(run("report", OLD, *SCENARIO, "--out", report), "already holds an llmcalc report; pass --force")
    one_line(run("report", OLD, *SCENARIO, "--out", ""), "--out is empty")


@pytest.mark.slow
@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_report_folders_follow_the_umask(tmp_path, umask, folder_mode, file_mode):
    import os
    import stat

    old = os.umask(umask)
    try:
        out = make_report(tmp_path, "qwen2.5-0.5b")
        out2 = tmp_path / "again"
        assert run("report", "qwen2.5-0.5b", *SCENARIO, "--out", out2).exit_code == 0
        assert run("report", "qwen2.5-0.5b", *SCENARIO, "--out", out2, "--force").exit_code == 0  # replaced: same modes
    finally:
        os.umask(old)
    for folder in (out, out2):
        for path in [folder, *folder.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (folder_mode if path.is_dir() else file_mode), (path, oct(mode))


def test_stale_staging_folders_are_swept(tmp_path, existing_report):
    """What killed runs left beside the report is swept before any work (check_destination, which a run that is
    then refused runs as one that builds does): staging folders removed, an old report whose run died mid-swap put
    back where the report is missing; another report's folders and a live run's are not touched."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has exited
    out = existing_report(tmp_path)
    old = files_of(out)
    for name in (f".report.partial-{dead}-abc", f".report.old-{dead}-def", ".report.partial-legacy1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.md").write_text("half")
    (tmp_path / ".other.partial-1-x").mkdir()  # another report's: not ours to touch
    (tmp_path / ".report.partial-1-live").mkdir()  # pid 1 is alive: its run's own
    kept = [".other.partial-1-x", "report", ".report.partial-1-live"]
    result = run("report", OLD, *SCENARIO, "--out", out)
    assert result.exit_code == 2 and "already holds an llmcalc report" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept) and files_of(out) == old
    # a run killed between moving the old report aside and moving the new one in: the old one comes back (not
    # an aside folder without the marker file, which is removed)
    out.rename(tmp_path / f".report.old-{dead}-zz")
    (tmp_path / f".report.old-{dead}-def").mkdir()
    (tmp_path / f".report.old-{dead}-def" / "report.md").write_text("half")
    result = run("report", OLD, *SCENARIO, "--out", out)
    assert result.exit_code == 2 and "already holds an llmcalc report" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept) and files_of(out) == old


def _send(sig):
    import os

    os.kill(os.getpid(), sig)


STAGES = {  # where the signal arrives: (object.attribute, the call on which to send it; -1: after the first)
    "building figures": ("llmcalc.report.plots.compute_optimal", 1),
    "writing files": ("pathlib.Path.write_bytes", 5),
    "moving the old report aside": ("pathlib.Path.rename", 1),
    "removing the old copy": ("llmcalc.report.document.shutil.rmtree", 1),
    "after the swap": ("llmcalc.report.document.write_report", -1),
    "printing the result": ("llmcalc.cli.compare.emit", 1),  # success decided: the signal is ignored, exit 0
}


# The fast tier sends SIGINT while the old report is moved aside and SIGTERM after the swap (the two
# moments a folder could be lost); the slow tier covers every stage with both signals.
FAST_SIGNALS = {("SIGINT", "moving the old report aside"), ("SIGTERM", "after the swap")}
SIGNAL_MATRIX = [pytest.param(signame, stage, marks=() if (signame, stage) in FAST_SIGNALS else pytest.mark.slow)
                 for stage in STAGES for signame in ("SIGINT", "SIGTERM")]


@pytest.mark.parametrize("signame, stage", SIGNAL_MATRIX)
def test_a_signal_at_any_stage_leaves_one_whole_report(tmp_path, monkeypatch, stage, signame, existing_report):
    import importlib
    import signal

    sig = getattr(signal, signame)
    out = existing_report(tmp_path)
    old = files_of(out)
    target, nth = STAGES[stage]
    module_name, attr = target.rsplit(".", 1)
    try:
        owner = importlib.import_module(module_name)
    except ModuleNotFoundError:
        module_name, cls = module_name.rsplit(".", 1)
        owner = getattr(importlib.import_module(module_name), cls)
    original = getattr(owner, attr)
    calls = []

    def hooked(*args, **kwargs):
        calls.append(1)
        if len(calls) == nth:
            _send(sig)
        value = original(*args, **kwargs)
        if nth == -1 and len(calls) == 1:
            _send(sig)
        return value

    monkeypatch.setattr(owner, attr, hooked)
    result = run("report", NEW, *SCENARIO, "--out", out, "--force")
    monkeypatch.undo()
    assert calls, f"the stage {stage!r} was never reached"
    if stage == "printing the result":  # one outcome: the report written and said so, exit 0
        lines = messages(result.stderr)
        assert result.exit_code == 0 and len(lines) == 1 and lines[0].startswith(f"llmcalc: report written to {out}/")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
        return
    assert result.exit_code == 128 + sig, (stage, result.exit_code, result.output)
    lines = messages(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"llmcalc: interrupted by {signame}"), result.stderr
    assert "report written" not in result.output and "Traceback" not in result.output
    now = files_of(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # nothing beside it
    if now == old:
        assert "left as it was" in lines[0]
    else:  # the new report, whole: every file of a complete report, marker included
        assert NEW in now["report.md"].decode() and "is complete" in lines[0]
        assert set(now) == {name.replace(OLD, NEW) for name in old}
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored


def test_an_error_raised_while_a_signal_unwinds_is_the_interrupt(tmp_path, monkeypatch, existing_report):
    """A signal that lands inside matplotlib can surface as matplotlib's own error ("Invalid bounding box" from
    clean-up code the interrupt ran through; found by the real-process test below at 95 % of a run). It is the
    interrupt's doing: exit 143 and the one 'interrupted' line, the old report left as it was; not an internal
    error."""
    import signal

    import llmcalc.report.plots as plots

    out = existing_report(tmp_path)
    old = files_of(out)

    def drawing_fails_as_the_signal_unwinds(*args, **kwargs):
        try:
            _send(signal.SIGTERM)
        finally:
            raise ValueError("Invalid bounding box")  # what matplotlib raised, the Interrupted as its context

    monkeypatch.setattr(plots, "params_breakdown", drawing_fails_as_the_signal_unwinds)  # the first figure
    result = run("report", NEW, *SCENARIO, "--out", out, "--force")
    lines = messages(result.stderr)
    assert result.exit_code == 143, result.output
    assert lines == [f"llmcalc: interrupted by SIGTERM; {out} left as it was"], lines
    assert files_of(out) == old and sorted(p.name for p in tmp_path.iterdir()) == ["report"]


@pytest.mark.slow
def test_signals_to_a_real_process_at_several_moments(tmp_path):
    """SIGINT and SIGTERM sent to `python -m llmcalc report` at 20 % .. 95 % of a run's duration: exit 130
    / 143 (or 0 when the run was done), the old report or the new one whole, nothing beside it. A signal
    that lands while the interpreter is still starting (before llmcalc runs) kills it the default way,
    writing nothing."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "report"
    base = [sys.executable, "-m", "llmcalc", "report", "qwen2.5-0.5b", *SCENARIO, "--out", str(out)]
    subprocess.run(base, check=True, capture_output=True)
    new = [*base[:4], "llama-3-8b", *base[5:], "--force"]
    start = time.monotonic()
    subprocess.run(new, check=True, capture_output=True)
    duration = time.monotonic() - start
    subprocess.run([*base, "--force"], check=True, capture_output=True)
    old = files_of(out)
    outcomes = []
    for fraction in (0.2, 0.45, 0.7, 0.85, 0.95):
        for sig in (signal.SIGINT, signal.SIGTERM):
            proc = subprocess.Popen(new, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(fraction * duration)
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=300)
            assert sorted(p.name for p in tmp_path.iterdir()) == ["report"], (fraction, sig)
            now = files_of(out)
            lines = messages(stderr)
            if "report written" in stderr:  # finished before the signal came (or it came while exiting)
                assert proc.returncode in (0, -sig) and len(lines) == 1, (proc.returncode, stderr)
                assert "llama-3-8b" in now["report.md"].decode()
            elif "llmcalc:" not in stderr:  # still starting up: default handling, nothing written
                assert proc.returncode in (-sig, 1, 130) and now == old, (fraction, sig, proc.returncode, stderr)
            else:
                assert proc.returncode == 128 + sig, (fraction, sig, proc.returncode, stderr)
                assert len(lines) == 1 and lines[0].startswith("llmcalc: interrupted by "), stderr
                assert (now == old and "left as it was" in lines[0]) or (
                    "llama-3-8b" in now["report.md"].decode() and "is complete" in lines[0]), lines
            outcomes.append(proc.returncode)
            if now != old:  # put the gpt2 report back for the next round
                subprocess.run([*base, "--force"], check=True, capture_output=True)
                old = files_of(out)
    assert {130, 143} <= set(outcomes), outcomes  # signals landed mid-run and were handled


# --- content: provenance, the plan, formats; figures: sizes, marks ---------------------------------------

def test_report_opens_with_provenance_and_the_plan(tmp_path):
    import shlex

    from llmcalc import __version__

    args = ["report", "llama-3.1-405b", "--tokens", "2T", "--n-gpus", "8", "--gpu", "h100-sxm", "--out",
            str(tmp_path / "r")]
    result = run(*args)
    assert result.exit_code == 0, result.output
    md = (tmp_path / "r" / "report.md").read_text()
    html = (tmp_path / "r" / "report.html").read_text()
    head, _, body = md.partition("## Summary")
    assert f"Generated by llmcalc {__version__} on " in head and " UTC with this command:" in head
    assert f"```\nllmcalc {shlex.join(args)}\n```" in head  # the command line as typed
    # sources as short links; the presets' development notes stay in their files
    assert "llama-3.1-405b: [meta-llama/Llama-3.1-405B on Hugging Face](https://huggingface.co/" in head
    assert "h100-sxm: [nvidia.com/" in head and "<a href='https://huggingface.co/meta-llama/Llama-3.1-405B" in html
    from llmcalc.spec import hardware_config, model_source

    for note in (model_source("llama-3.1-405b"), hardware_config("h100-sxm")["notes"]):
        for sentence in note.split(". ")[1:]:  # every sentence but the first address's
            if len(sentence) > 40:
                assert sentence not in md and sentence not in html, sentence
    # the plan, by hand: micro-batch 1 x 8 data-parallel ranks = 8 sequences of 4,096 tokens = 32,768 tokens
    # per step; 2e12 / 32,768 = 61,035,156.25 -> 61,035,157 steps; no layout of 8 GPUs holds 405B: the given one
    assert re.search(r"\| layout +\| tp 1 cp 1 pp 1 dp 8, micro-batch 1, ZeRO-1, recompute none \(given\)", body)
    assert re.search(r"\| global batch +\| 8 sequences = 32.8 k tokens \(32,768\)", body)
    assert re.search(r"\| optimizer steps +\| 61,035,157 ", body)
    assert re.search(r"\| price +\| \$3.99 per GPU-hour \(h100-sxm's dated list price", body)
    for gpu in ("h100-sxm (plan)", "a100-80gb-sxm", "h200", "b200"):  # every accelerator shown, priced, sourced
        row = next(line for line in body.splitlines() if line.startswith(f"| {gpu} "))
        assert re.search(r"\| +\$\d+\.\d\d \| (Lambda|RunPod) list price, read 2026-\d\d-\d\d, https://", row), row
        assert len(row) < 300, row
    # 405B at 8 GPUs does not fit: said, and highlighted
    assert "**does NOT fit**" in body and "<strong class='warn'>does NOT fit</strong>" in html
    prose = re.sub(r"```.*?```", "", md, flags=re.S)
    assert "`" not in prose and not re.search(r"(^|\s)--[a-z]", prose)  # no CLI hints for a reader
    assert not re.search(r"\de[+-]\d", md)  # no 7.72e+23 beside 772 ZFLOP, no 9.9e-04 %
    assert "| component        |   params (exact) |" in md and "|:-----------------|-----------------:|" in md
    for table in re.findall(r"(?m)^(\|.*\((?:GiB|MiB|KiB)\).*\|\n\|[-:| ]+\|\n(?:\|.*\|\n)+)", md):
        header, _, *rows = table.splitlines()  # a column whose label names its unit: no cell names another
        cells = [c.strip() for row in rows for c in row.strip("|").split("|")]
        assert not any(re.fullmatch(r"[\d.,]+ (GiB|MiB|KiB|B)", c) for c in cells), header
    sweep = read_csv(tmp_path / "r" / "tables" / "time_vs_gpus.csv")
    at_8 = {r["device"]: r["fits"] for r in sweep if r["n_gpus"] == "8"}
    assert at_8["h100-sxm"] == "False"  # the infeasible points are flagged in the data the figure draws


def test_memory_sweep_goes_to_the_first_micro_batch_that_does_not_fit(tmp_path):
    out = make_report(tmp_path, "llama-3-8b", "t5-base")
    largest = cli_json("memory", "llama-3-8b", "--seq-len", "4096", "--n-gpus", "1024",
                       "--gpu", "h100-sxm")["largest_micro_batch"]
    rows = [r for r in read_csv(out / "tables" / "memory_vs_batch.csv") if r["component"] == "peak"]
    assert [int(r["micro_batch"]) for r in rows] == list(range(1, largest + 2))
    peaks = [float(r["bytes"]) for r in rows]
    assert peaks[-2] <= 80 * 2**30 < peaks[-1]
    md = (out / "report.md").read_text()
    assert "not shown: t5-base" in md  # never dropped silently


@pytest.mark.slow
def test_figures_are_2x_with_readable_text(tmp_path, monkeypatch):
    """Every figure: at most 1080 CSS px wide at half its pixel size, no text under 10 CSS px there, and a
    line under its title true of it: the model alone over parameter counts, the scenario over the rest."""
    from matplotlib.text import Text

    seen = {}
    original = plots.save

    def inspect(fig, path):
        texts = [t for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible()]
        seen[fig._suptitle.get_text().splitlines()[0]] = (
            fig.get_size_inches()[0] * plots.DPI / 2, min(t.get_fontsize() for t in texts) * plots.DPI / 72 / 2,
            fig._suptitle.get_text())
        original(fig, path)

    monkeypatch.setattr(plots, "save", inspect)
    make_report(tmp_path, "mixtral-8x7b")
    assert len(seen) >= 6  # the six of every report, and any section's own (step time by layout)
    for title, (css_width, smallest_px, suptitle) in seen.items():
        assert css_width <= 1080 and smallest_px >= 10, (title, css_width, smallest_px)
        line = " ".join(suptitle.split("\n")[1:])
        # the line under each title states what that figure depends on, from the command make_report ran
        wants = {"Parameters by component": ["mixtral-8x7b"],  # counts depend on the shapes alone
                 "Training FLOPs per token": ["mixtral-8x7b", "per training token", "full S² attention"],
                 "Training time and cost": ["15.0 T tokens at seq 4,096", "1,024 x h100-sxm", " ep 8 "],
                 "mixtral-8x7b: predicted step time": ["1,024 x h100-sxm", "seq 4,096", "recompute none"],
                 "Training memory per GPU": ["seq 4,096", "1,024 x h100-sxm", "recompute none"],
                 "Inference KV cache": ["mixtral-8x7b", "KV cache in bf16"],
                 "Where the models sit": ["mixtral-8x7b", "15.0 T training tokens"]}
        want = [v for k, v in wants.items() if title.startswith(k)]
        assert want, f"a figure this test does not know: {title}"
        assert line.startswith("mixtral-8x7b") and all(w in line for w in want[0]), (title, line)
        if title.startswith(("Parameters", "Training FLOPs", "Inference KV")):
            assert "h100-sxm" not in line, line  # no training layout over a figure that does not depend on it
    image = imread(tmp_path / "report" / "figures" / "time_cost.png")
    assert image.shape[1] == 10.8 * plots.DPI  # the PNG is 2x the CSS size


def test_coinciding_lines_are_told_apart():
    labels = plots.distinguish({"a on h100": [1.0, 2.0], "a on h200": [1.0, 2.0], "a on b200": [0.5, 1.0]})
    assert labels == {"a on h100": (0, ""), "a on h200": (1, " (same as a on h100)"), "a on b200": (0, "")}


def test_a_signal_inside_a_finaliser_still_interrupts(tmp_path, monkeypatch, existing_report):
    """Python drops an exception raised while a __del__ runs ("Exception ignored in ..."): the report is
    still not committed, and the one message is the interrupt."""
    import gc
    import signal

    out = existing_report(tmp_path)
    old = files_of(out)
    original = plots.compute_optimal

    class Finalised:
        def __del__(self):
            _send(signal.SIGTERM)

    def hooked(*args, **kwargs):
        Finalised()  # freed at once: the signal's exception is raised inside __del__ and dropped
        gc.collect()
        return original(*args, **kwargs)

    monkeypatch.setattr(plots, "compute_optimal", hooked)
    result = run("report", NEW, *SCENARIO, "--out", out, "--force")
    assert result.exit_code == 143, result.output
    assert messages(result.stderr) == [f"llmcalc: interrupted by SIGTERM; {out} left as it was"]
    assert files_of(out) == old and sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_serving_for_a_workload_draws_the_throughput_latency_curve(tmp_path):
    """--serve with a --max-concurrency list: the deployment sized for the largest, and the sized replica's speed
    at every concurrency, as `serve --input-len --output-len --max-concurrency` predicts it, drawn and tabled."""
    out = tmp_path / "r"
    result = run("report", "llama-3-8b", "--n-gpus", 8, "--serve", "--input-len", 512, "--output-len", 64,
                 "--max-concurrency", "1,8", "--max-ttft", 1, "--max-tpot", 0.05, "--out", out)
    assert result.exit_code == 0, result.output
    sized = cli_json("serve", "llama-3-8b", "--gpu", "h100-sxm", "--input-len", 512, "--output-len", 64,
                     "--max-concurrency", 8, "--max-ttft", 1, "--max-tpot", 0.05)
    tp = sized["layout"]["tp"]
    assert f"### llama-3-8b: {sized['layout']['n_gpus']} x h100-sxm (tp {tp} x " in (out / "report.md").read_text()
    curve = cli_json("serve", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", tp, "--input-len", 512,
                     "--output-len", 64, "--max-concurrency", "1,8")["performance"]
    rows = read_csv(out / "tables" / "serve-curve-llama-3-8b.csv")
    assert [float(r["output"]) for r in rows] == pytest.approx(
        [p["output_tokens_per_second"] for p in curve])
    assert (out / "figures" / "serve-curve-llama-3-8b.png").exists()
