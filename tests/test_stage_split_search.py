"""`layout` tries uneven pipeline splits (Megatron-Core's --decoder-first/last-pipeline-num-layers, llmcalc's
--first/--last-stage-layers) around the balance of the stages' own costs: the last stage carries the LM head and the
loss, the first the embedding, so moving layers off them evens the ranks the pipeline waits on."""

from clirun import cli_json, one_line_error


def test_a_heavy_lm_head_moves_layers_off_the_last_stage():
    """Llama 3.2 1B ties a 128,256-token head to 16 layers of width 2,048: the head's GEMM alone is ~2·2048·128256
    FLOPs a token against ~2·61 M a layer, four layers' worth, so on 4 pipeline ranks the even split (4 layers each)
    leaves the last rank the busiest. The search puts fewer layers there, and that layout beats the even one as
    `train` times it."""
    data = cli_json("layout", "llama-3.2-1b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 64, "--pp", 4,
                    "--top", 3)
    best = data["layouts"][0]
    assert best["last_stage_layers"] and best["last_stage_layers"] < 16 // 4
    assert any("--first/--last-stage-layers" in k and "last " in k.split("the best:")[-1] for k in data["knobs"])
    even = cli_json("train", "llama-3.2-1b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch",
                    64, "--tp", best["tp"], "--cp", best["cp"], "--pp", 4, "--micro-batch", best["micro_batch"],
                    "--zero", best["zero"], "--recompute", best["recompute"],
                    "--tp-overlap" if best["tp_overlap"] else "--no-tp-overlap")
    assert best["step_seconds"] < even["step_seconds"]


def test_a_given_split_is_not_searched():
    """--first/--last-stage-layers or --pipeline-layout given: every layout takes it (knobs given), none other."""
    data = cli_json("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 64, "--pp", 4,
                    "--last-stage-layers", 5, "--first-stage-layers", 9, "--top", 3)
    assert all((row["first_stage_layers"], row["last_stage_layers"]) == (9, 5) for row in data["layouts"])
    assert "--first-stage-layers" in data["knobs"][1] and "--first/--last" not in data["knobs"][0]
    line = one_line_error("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 16, "--global-batch", 64,
                          "--pp", 4, "--last-stage-layers", 7)
    assert "--last-stage-layers 7" in line
