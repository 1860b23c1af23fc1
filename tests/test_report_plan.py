"""One report that agrees with itself: plan.json, llmcalc-report.json, report.md and the tables parsed back, each
shared figure (global batch, layout, MFU assumed and predicted, memory and fit verdict, layouts that fit, the
step-time section's batch and recompute, figure subtitles) checked against the others and against the commands a
user would run for the plan's layout (`train`, `memory`, `layout`, `serve`)."""

import csv
import json
import re

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from clirun import cli_json, run  # noqa: E402

GIB = 2**30
CAPACITY = 80 * GIB  # h100-sxm


def build(tmp_path, *args):
    out = tmp_path / "r"
    result = run("report", *args, "--out", out)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    meta = json.loads((out / "llmcalc-report.json").read_text())
    return out, plan, meta, (out / "report.md").read_text()


def section(md: str, title: str) -> str:
    """The text of a `## title` section, up to the next `## ` heading."""
    return md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def model_part(text: str, model: str) -> str:
    """A model's `### model` subsection (up to the next `### `)."""
    return text.split(f"\n### {model}\n", 1)[1].split("\n### ", 1)[0]


def subtitle(md: str, figure: str) -> str:
    return re.search(rf"!\[([^\]]*)\]\(figures/{re.escape(figure)}\.png\)", md).group(1)


def layout_of(plan: dict) -> dict:
    """dp, tp, ZeRO, micro-batch and recompute of plan.json's layout line ("dp 64 x tp 1, ZeRO-1, ...")."""
    m = re.fullmatch(r"dp ([\d,]+) x tp ([\d,]+), ZeRO-(\d), micro-batch ([\d,]+), recompute (\w+)", plan["layout"])
    assert m, plan["layout"]
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    return dict(dp=number(m[1]), tp=number(m[2]), zero=int(m[3]), micro_batch=number(m[4]), recompute=m[5])


def check_report(tmp_path, models, n_gpus, *extra, serve=False):
    args = [*models, "--tokens", "2T", "--gpu", "h100-sxm", "--n-gpus", n_gpus, *extra] + (["--serve"] if serve else [])
    out, plan, meta, md = build(tmp_path, *args)
    scenario = meta["scenario"]
    lay = layout_of(plan)
    # the layout and batch: the plan's line is the scenario's options; global batch = micro-batch x dp
    assert (lay["tp"], lay["zero"], lay["micro_batch"], lay["recompute"]) == (
        scenario["tp"], scenario["zero"], scenario["micro_batch"], scenario["recompute"])
    assert lay["dp"] * lay["tp"] == n_gpus
    batch = plan["global_batch"]
    assert batch == lay["micro_batch"] * lay["dp"]
    summary, steps = section(md, "Summary"), section(md, "Predicted step time by layout")
    assert re.search(rf"\| global batch +\| {batch:,} sequences = ", summary)
    assert re.search(rf"\| micro-batch per GPU +\| {lay['micro_batch']} sequences? ", summary)
    assert (f"The plan's global batch, {batch:,} sequences x {scenario['seq_len']:,} tokens (micro-batch "
            f"{lay['micro_batch']:,} x {lay['dp']:,} data-parallel ranks)") in steps
    assert f"with recompute {lay['recompute']} (the plan's)" in steps
    # the MFU: the headline uses the assumed one, says so, and shows the predicted one beside it, labelled
    assumed = plan["mfu_assumed"]
    assert assumed == scenario["mfu"] and plan["headline_mfu"] == "assumed"
    assert re.search(rf"\| MFU assumed \(the headline\) +\| {assumed:.0%} of the dense bf16 peak", summary)
    layout_args = ["--gpu", "h100-sxm", "--n-gpus", n_gpus, "--seq-len", scenario["seq_len"]]
    for model in models:
        mine = plan["models"][model]
        lines = summary.split(f"\n{model}:\n", 1)[-1].split("\n\n**")[0]  # the model's bullets (one: all)
        time_line = next(line for line in lines.splitlines() if line.startswith("- Time: "))
        memory_line = next(line for line in lines.splitlines() if line.startswith("- Memory: "))
        # time and cost at the assumed MFU are those of `train --mfu`
        train = cli_json("train", model, "--tokens", "2T", "--mfu", assumed, *layout_args)
        assert mine["wall_clock_days"] == pytest.approx(train["wall_clock_days"])
        assert mine["gpu_hours"] == pytest.approx(train["gpu_hours"])
        assert mine["cost_usd"] == pytest.approx(train["cost_usd"])
        assert f"{train['wall_clock_days']:.1f} days" in time_line and f"at the assumed {assumed:.0%} MFU" in time_line
        assert "the headline's MFU" in time_line
        # memory and fit verdict on the plan's layout are those of `memory`
        memory = cli_json("memory", model, "--micro-batch", lay["micro_batch"], "--recompute", lay["recompute"],
                          "--zero", lay["zero"], "--tp", lay["tp"], "--n-gpus", n_gpus,
                          "--seq-len", scenario["seq_len"])
        assert mine["memory_per_gpu_bytes"] == pytest.approx(memory["per_gpu_bytes"])
        assert mine["fits"] == (memory["per_gpu_bytes"] <= CAPACITY)
        assert ("**does NOT fit**" in memory_line) == (not mine["fits"])
        memory_section = model_part(section(md, "Memory"), model)
        assert ("**does NOT fit** on h100-sxm" in memory_section) == (not mine["fits"])
        # the layouts that fit are those `layout --exhaustive` finds for the plan's batch and recompute (the report
        # evaluates every layout)
        found = cli_json("layout", model, *layout_args, "--global-batch", batch, "--recompute", lay["recompute"],
                         "--exhaustive")
        assert (mine["layouts_that_fit"], mine["layouts_searched"]) == (found["counts"]["fit"],
                                                                        found["counts"]["searched"])
        mine_steps = model_part(steps, model)
        assert f"searched {found['counts']['searched']:,} layouts: {found['counts']['fit']:,} fit" in mine_steps
        if not mine["fits"]:
            assert f"{found['counts']['fit']:,} other layouts of these GPUs and this batch fit" in memory_line
        # the predicted MFU: `train --global-batch` on the plan's layout, shown beside the assumed one
        if mine["fits"]:
            predicted = cli_json("train", model, "--tokens", "2T", *layout_args, "--global-batch", batch,
                                 "--micro-batch", lay["micro_batch"], "--recompute", lay["recompute"],
                                 "--zero", lay["zero"], "--tp", lay["tp"])
            assert mine["plan_layout_predicted_mfu"] == pytest.approx(predicted["mfu"])
            shown = f"{predicted['mfu'] * 100:.1f} %"
            assert f"the step model predicts {shown} MFU for the plan's layout" in time_line
            assert f"{predicted['wall_clock_days']:.1f} days at that MFU" in time_line
            assert re.search(rf"\| ({re.escape(model)}: )?MFU predicted +\| {re.escape(shown)} for the plan's layout",
                             summary)
            assert f"predicted MFU {shown} (assumed {assumed:.0%})" in mine_steps
        else:
            assert mine["plan_layout_predicted_mfu"] is None
            best = found["layouts"][0]
            assert f"predicts {best['mfu'] * 100:.1f} % MFU for the best layout that fits" in time_line
        # the steps table is the layout search, and the sweep's point at the plan's GPU count is the verdict
        rows = list(csv.DictReader((out / "tables" / f"steptime-{model}.csv").open()))
        assert float(rows[0]["mfu"]) == pytest.approx(found["layouts"][0]["mfu"])
        sweep = [r for r in csv.DictReader((out / "tables" / "time_vs_gpus.csv").open())
                 if r["model"] == model and r["device"] == "h100-sxm" and int(r["n_gpus"]) == n_gpus]
        assert [r["fits"] for r in sweep] == [str(mine["fits"])]
        if serve:
            check_serving(md, model, scenario["seq_len"])
    # the subtitles say what the figures draw
    time_cost = subtitle(md, "time_cost")
    assert f"at the assumed {assumed:.0%} MFU" in time_cost
    assert (f"the star is the plan: {n_gpus:,} x h100-sxm, dp x tp {lay['dp']:,} x {lay['tp']}, "
            f"ZeRO-{lay['zero']}, micro-batch {lay['micro_batch']}") in time_cost
    memory_figure = subtitle(md, "memory")
    assert f"ZeRO-{lay['zero']} over {n_gpus:,} GPUs" in memory_figure
    assert f"the plan's micro-batch ({lay['micro_batch']}) outlined" in memory_figure
    peaks = [r for r in csv.DictReader((out / "tables" / "memory_vs_batch.csv").open()) if r["component"] == "peak"]
    for model in models:
        at_plan = [float(r["bytes"]) for r in peaks if r["model"] == model
                   and int(r["micro_batch"]) == lay["micro_batch"]]
        assert at_plan == [pytest.approx(plan["models"][model]["memory_per_gpu_bytes"])]
    return out, plan, md


def check_serving(md: str, model: str, seq_len: int):
    """The serving section's GPU count and KV blocks are `serve`'s at --max-model-len seq_len."""
    m = re.search(rf"\n### {re.escape(model)} on (\d+) x h100-sxm\n", section(md, "Serving"))
    assert m, model
    n = int(m[1])
    served = cli_json("serve", model, "--gpu", "h100-sxm", "--n-gpus", n, "--max-model-len", seq_len)
    assert served["fits"] and served["max_concurrent_sequences"] >= 1
    if n > 1:  # the fewest GPUs that hold one request
        fewer = cli_json("serve", model, "--gpu", "h100-sxm", "--n-gpus", n // 2, "--max-model-len", seq_len)
        assert not fewer["fits"] or fewer["max_concurrent_sequences"] < 1
    part = section(md, "Serving").split(m[0], 1)[1].split("\n### ", 1)[0]
    assert f"KV cache ({served['kv_blocks']:,} blocks of {served['block_size']} tokens)" in part


def test_two_models_served_one_not_fitting_agree_everywhere(tmp_path):
    """Llama-3-70B at ZeRO-1 over 64 GPUs needs ~275 GiB per GPU: the summary, plan table, memory section and
    sweep all say it does not fit, and the count of layouts that fit is the `layout` command's."""
    _, plan, _ = check_report(tmp_path, ["llama-3-8b", "llama-3-70b"], 64, serve=True)
    assert plan["models"]["llama-3-8b"]["fits"] and not plan["models"]["llama-3-70b"]["fits"]


def test_selective_recompute_and_a_micro_batch_agree_everywhere(tmp_path):
    out, plan, md = check_report(tmp_path, ["qwen2.5-7b"], 32, "--recompute", "selective", "--micro-batch", 2,
                                 "--mfu", 0.35)
    assert plan["global_batch"] == 64 and plan["mfu_assumed"] == 0.35
    assert "recompute selective" in plan["layout"]


@pytest.mark.slow
def test_the_issue_s_moe_report_agrees_everywhere(tmp_path):
    """The report issue 25 found contradicting itself: two MoE models at 1,024 GPUs with serving, one of which
    does not fit at ZeRO-1."""
    check_report(tmp_path, ["gpt-oss-120b", "qwen3-235b-a22b"], 1024, serve=True)


@pytest.mark.slow
def test_tensor_parallel_and_zero_3_agree_everywhere(tmp_path):
    check_report(tmp_path, ["llama-3-70b"], 64, "--tp", 4, "--zero", 3, "--recompute", "full")


# --- figures: no text collides, each subtitle true of its figure ----------------------------------------------

def figures(tmp_path, monkeypatch, *args) -> tuple[dict, str, object]:
    """Build a report and keep, per figure (by its title), what plots.collisions finds at save time and the
    figure's solid data lines per axes label; with report.md and the output folder."""
    from matplotlib.lines import Line2D

    from llmcalc.report import plots

    seen: dict = {}
    original = plots.save

    def inspect(fig, path):
        title = fig._suptitle.get_text().splitlines()[0]
        solid = {line.get_label(): max(line.get_xdata()) for line in fig.findobj(Line2D)
                 if not line.get_label().startswith("_") and line.get_linestyle() != ":" and len(line.get_xdata())}
        seen[title] = (plots.collisions(fig), solid)
        original(fig, path)

    monkeypatch.setattr(plots, "save", inspect)
    out, _, _, md = build(tmp_path, *args)
    return seen, md, out


def test_figures_have_no_colliding_text_and_the_kv_subtitle_is_true(tmp_path, monkeypatch):
    """Llama-3-8B's KV line runs past its 8,192 positions only faint and dotted (the subtitle says so); Mamba-2.8B
    has no KV cache, so it has no line and the subtitle says why."""
    seen, md, out = figures(tmp_path, monkeypatch, "llama-3-8b", "mamba-2.8b", "--n-gpus", 8, "--serve")
    assert len(seen) >= 6
    for title, (found, _) in seen.items():
        assert found == [], (title, found)
    _, solid = seen["Inference KV cache against context length (batch 1)"]
    assert solid["llama-3-8b"] <= 8192 and "mamba-2.8b" not in solid
    rows = list(csv.DictReader((out / "tables" / "kv_vs_context.csv").open()))
    assert {r["model"] for r in rows} == {"llama-3-8b"}
    assert any(r["past_max_positions"] == "True" for r in rows)
    kv = subtitle(md, "kv_cache")
    assert "solid up to each model's max_position_embeddings" in kv and "faint and dotted past it" in kv
    assert "not shown: mamba-2.8b: no KV cache" in kv


@pytest.mark.slow
@pytest.mark.parametrize("args", [["gpt-oss-120b", "qwen3-235b-a22b", "--serve", "--n-gpus", 1024],
                                  ["mixtral-8x7b", "--tokens", "15T", "--n-gpus", 1024]])
def test_the_issue_s_figures_have_no_colliding_text(tmp_path, monkeypatch, args):
    seen, _, _ = figures(tmp_path, monkeypatch, *args)
    for title, (found, _) in seen.items():
        assert found == [], (title, found)
