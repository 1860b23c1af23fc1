"""Issue 41, one answer per question: `--goodput` (wall time = compute time / goodput) wherever GPU-hours appear,
`train` without --mfu predicting the MFU on the layout `layout` recommends, and `serve --gpu-memory` answering
capacity without speed."""

import pytest
from clirun import cli_json as run_json
from clirun import one_line_error as bad

from llmcalc.spec import load_hardware

H100_BF16 = 989.4e12  # NVIDIA H100 SXM5 datasheet: 1,979 TFLOP/s bf16 with sparsity, half of it dense


RUN = ("train", "--params", "7B", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 512, "--mfu", 0.45)


def test_goodput_turns_compute_into_wall_time():
    """6·N·T / (peak x MFU) is the compute; the wall-clock GPU-hours, days, cost and energy are it over the goodput,
    0.9 by default (Llama 3, §3.3.4: higher than 90 % effective training time on 16K H100)."""
    compute_hours = 6 * 7e9 * 1e12 / (H100_BF16 * 0.45) / 3600
    default = run_json(*RUN)
    assert default["goodput"] == 0.9
    assert default["compute_gpu_hours"] == pytest.approx(compute_hours, rel=1e-3)
    assert default["gpu_hours"] == pytest.approx(compute_hours / 0.9, rel=1e-3)
    assert default["wall_clock_days"] == pytest.approx(default["gpu_hours"] / 512 / 24)
    assert default["compute_wall_clock_days"] == pytest.approx(compute_hours / 512 / 24, rel=1e-3)
    assert default["cost_usd"] == pytest.approx(default["gpu_hours"] * default["usd_per_gpu_hour"])
    assert default["energy_kwh"] == pytest.approx(default["gpu_hours"] * load_hardware("h100-sxm").tdp_watts / 1000)
    # while training nothing changes: MFU and throughput are of the compute time
    assert default["mfu"] == pytest.approx(0.45)
    assert default["tokens_per_second"] == pytest.approx(1e12 / (compute_hours * 3600 / 512), rel=1e-3)
    none_lost = run_json(*RUN, "--goodput", 1)
    assert none_lost["gpu_hours"] == none_lost["compute_gpu_hours"] == pytest.approx(compute_hours, rel=1e-3)
    assert run_json(*RUN, "--goodput", "80%")["gpu_hours"] == pytest.approx(compute_hours / 0.8, rel=1e-3)


@pytest.mark.parametrize("value", ["0", "1.2", "-0.5", "nan", "ninety"])
def test_goodput_outside_the_unit_interval_is_refused(value):
    assert "--goodput" in bad(*RUN, "--goodput", value)


def test_plan_counts_the_days_lost():
    """A cluster's budget over D days at goodput g delivers the FLOPs of g·D days of training."""
    days = run_json("plan", "--gpu", "h100-sxm", "--n-gpus", 1024, "--days", 30, "--mfu", 0.4, "--goodput", 0.9)
    assert days["compute_flops"] == pytest.approx(1024 * H100_BF16 * 0.4 * 30 * 86400 * 0.9, rel=1e-3)
    assert "--goodput" in bad("plan", "--compute", "1e24", "--goodput", 0.9)


def test_compare_and_train_agree_on_the_wall_time():
    """compare's GPU-hours are train's at the same MFU and goodput (the scenario's exact per-token FLOPs)."""
    common = ("--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 64, "--mfu", 0.4, "--seq-len", 4096)
    for goodput in (1, 0.5):
        train = run_json("train", "llama-3-8b", *common, "--goodput", goodput)
        compare = run_json("compare", "llama-3-8b", *common, "--goodput", goodput)
        assert compare["models"][0]["gpu_hours"] == pytest.approx(train["gpu_hours"])
        assert compare["models"][0]["wall_clock_days"] == pytest.approx(train["wall_clock_days"])


def test_train_without_mfu_predicts_on_layouts_best():
    """No --mfu and no --global-batch: the default global batch (~4M tokens: 1,024 x 4k), the layout `layout` ranks
    first for it, and the MFU `train --global-batch` predicts on that layout."""
    where = ("--gpu", "h100-sxm", "--n-gpus", 16, "--seq-len", 4096)
    plan = run_json("train", "llama-3-8b", "--tokens", "1T", *where)
    used = plan["layout_used"]
    assert used["global_batch"] == 4 * 2**20 // 4096 and used["source"] == "recommended"
    assert used["command"].startswith("llmcalc layout llama-3-8b --gpu h100-sxm --n-gpus 16 --seq-len 4096")
    best = run_json("layout", "llama-3-8b", *where, "--global-batch", used["global_batch"], "--top", 1)["layouts"][0]
    assert {k: used[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "zero", "recompute")} == \
        {k: best[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "zero", "recompute")}
    assert plan["mfu"] == pytest.approx(best["mfu"])
    given = run_json("train", "llama-3-8b", "--tokens", "1T", *where, "--global-batch", used["global_batch"],
                     "--tp", used["tp"], "--cp", used["cp"], "--pp", used["pp"], "--vpp", used["vpp"],
                     "--micro-batch", used["micro_batch"], "--zero", used["zero"], "--recompute", used["recompute"])
    assert plan["gpu_hours"] == pytest.approx(given["gpu_hours"])
    assert plan["mfu_source"] == "predicted"
    # --mfu still answers at the MFU given
    assert run_json("train", "llama-3-8b", "--tokens", "1T", *where, "--mfu", 0.3)["mfu"] == pytest.approx(0.3)


@pytest.mark.parametrize("model, n, seq, chosen", [
    ("deepseek-v3", 2048, 4096, ("ep_dispatcher", "ep_overlap")),  # deepep and the A2A overlap
    ("llama-3.1-70b", 2048, 8192, ("dp_shard",)),  # HSDP
])
def test_train_without_mfu_predicts_what_layout_chose_beyond_the_degrees(model, n, seq, chosen):
    """What `layout` searches beside the degrees (an MoE model's dispatcher and EP overlap, HSDP's shard group) is
    part of the layout `train` predicts on: the same step as layout's best, and named in `layout_used`."""
    where = ("--gpu", "h100-sxm", "--n-gpus", n, "--seq-len", seq)
    plan = run_json("train", model, "--tokens", "1T", *where)
    used = plan["layout_used"]
    best = run_json("layout", model, *where, "--global-batch", used["global_batch"], "--top", 1)["layouts"][0]
    assert all(used[k] == best[k] for k in chosen)
    assert plan["mfu"] == pytest.approx(best["mfu"], rel=1e-9)


def test_default_global_batch_follows_published_recipes():
    """~4M tokens per step (Llama 2), and 1k tokens per GPU on large clusters: Llama 3 405B's 16M tokens (2,048
    sequences of 8k) on 16,384 H100."""
    from llmcalc.analytic.training import default_global_batch

    assert default_global_batch(8, 4096)[0] * 4096 == 4 * 2**20
    assert default_global_batch(16_384, 8192)[0] == 2048
    sequences, _ = default_global_batch(24, 4096)  # a GPU count with an odd factor: data parallelism divides it
    assert sequences % 3 == 0


def test_train_without_mfu_refusals():
    assert "--mfu" in bad("train", "--params", "7B", "--tokens", "1T", "--gpu", "h100-sxm")
    assert "--mfu" in bad("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--finetune", "lora")


def test_serve_gpu_memory_answers_capacity_without_speed():
    """A 24 GB card by its memory: vLLM's KV budget and concurrency, no throughput, and one line naming the presets
    of that memory; a nominal 24 GiB holds at least what a 24 GiB preset's CUDA-visible memory holds."""
    generic = run_json("serve", "llama-3-8b", "--gpu-memory", "24GB", "--max-model-len", "8k")
    preset = run_json("serve", "llama-3-8b", "--gpu", "rtx-4090", "--max-model-len", "8k")
    assert generic["fits"] and generic["throughput"] is None
    assert "rtx-4090" in generic["speed_note"]
    assert preset["kv_cache_tokens"] <= generic["kv_cache_tokens"]
    assert generic["weights_bytes_per_gpu"] == preset["weights_bytes_per_gpu"]
    assert "rtx-4090" in bad("serve", "llama-3-8b", "--gpu-memory", "24GB", "--input-len", 1024, "--output-len", 128)


def test_degrees_without_a_global_batch_are_predicted_as_given():
    """--tp 8 without --mfu or --global-batch: that layout at the default global batch, the same prediction as
    `train --global-batch` with it."""
    common = ("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 64, "--tp", 8)
    plan = run_json(*common)
    assert plan["layout_used"]["source"] == "given" and plan["layout"]["tp"] == 8
    given = run_json(*common, "--global-batch", plan["layout_used"]["global_batch"])
    assert plan["mfu"] == pytest.approx(given["mfu"]) and plan["layout"] == given["layout"]
