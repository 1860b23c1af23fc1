"""Issue 38 item 4: Megatron-LM's pipeline layout strings (`train --pipeline-layout`).

References: Megatron-Core's parser and rules (NVIDIA/Megatron-LM megatron/core/transformer/
pipeline_parallel_layer_layout.py: parse_str_to_list's docstring example, the stage -> (pp rank, vpp rank) placement
of __init__, validate_layer_layout) and its docs' DeepSeek-V3 example and rank map (docs/user-guide/features/
pipeline_parallel_layout.md); the step model's own even and first/last-stage splits, which a layout string that
says the same must reproduce exactly.
"""

from __future__ import annotations

import pytest
from clirun import cli_json, one_line_error

from llmcalc.analytic.pipeline_layout import check_layout, parse, unroll
from llmcalc.errors import LlmcalcError


def test_parse_str_to_list_docstring_example():
    # "Ettt|(tt|)*29,m|L" -> [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    assert unroll("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    # the comments of its patterns: (ab)*3 -> ababab, ab,(cd|)*2 -> abcd|cd|, (|ab)*2,cd -> |ab|abcd
    assert unroll("(Et)*3") == ["EtEtEt"]
    assert unroll("Et,(tt|)*2") == ["Ettt", "tt", ""]
    assert unroll("(|tt)*2,tL") == ["", "tt", "tttL"]
    # --pipeline-model-parallel-layout's help example and the docs' empty stage
    assert unroll("E|(t|)*3,m|m||L") == ["E", "t", "t", "t", "m", "m", "", "L"]
    assert unroll("E||t|L") == ["E", "", "t", "L"]


def test_megatron_docs_deepseek_v3_rank_map():
    """PP 16 x VPP 2: rank 0 chunk 0 embedding + 3 decoders, chunk 1 2 decoders; ranks 1-13 2 + 2; rank 14 2 and
    the MTP layer; rank 15 2 and the loss (the docs' table)."""
    layout = parse("Et*3|(tt|)*29,m|L", 16)
    assert layout.vpp == 2
    chunk = {(i % 16, i // 16): stage for i, stage in enumerate(layout.stages)}  # __init__'s placement
    assert chunk[0, 0] == "Ettt" and chunk[0, 1] == "tt"
    assert all(chunk[r, 0] == chunk[r, 1] == "tt" for r in range(1, 14))
    assert (chunk[14, 0], chunk[14, 1]) == ("tt", "m")
    assert (chunk[15, 0], chunk[15, 1]) == ("tt", "L")
    assert sum(layout.decoder_layers) == 61 and layout.mtp_layers == 1 and layout.mtp_stage == 30
    check_layout(layout, 61, 1)  # DeepSeek-V3: 61 layers, one MTP module


@pytest.mark.parametrize("text, pp, n_layers, mtp, message", [
    ("tE|tL", 2, 2, None, "embedding E must come first"),
    ("Et|tL|L", 3, 2, None, "loss L must come last"),
    ("Et|mtL", 2, 2, None, "after every transformer layer"),
    ("Et|t|tL", 2, 3, None, "not a multiple of --pp 2"),
    ("Et|tL", 2, 3, None, "places 2 transformer layers"),
    ("Et|tmL", 2, 2, 2, "places 1 MTP layers"),
    ("Et|tm|t|mL", 2, 3, None, "(m) come after every transformer layer"),
    ("Et|t|m|tL", 2, 3, None, "after every transformer layer"),
    ("Ett|tm||L", 2, 3, None, "last virtual stage of their rank"),  # stage 1: rank 1, chunk 0 of 2
    ("Et(t|)L", 2, 2, None, "unknown symbol '('"),  # a group without *n is not unrolled (parse_str_to_list)
])
def test_megatron_rules_refused_in_one_line(text, pp, n_layers, mtp, message):
    with pytest.raises(LlmcalcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_layout(parse(text, pp), n_layers, mtp)


TRAIN = ("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", "64", "--global-batch", "256",
         "--seq-len", "4096")


def test_a_layout_that_says_the_even_split_predicts_the_same_step():
    even = cli_json(*TRAIN, "--pp", "4")
    typed = cli_json(*TRAIN, "--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8L")
    assert typed["layers_per_stage"] == even["layers_per_stage"] == [8, 8, 8, 8]
    assert typed["step_seconds"] == even["step_seconds"]
    # Megatron's --decoder-first/last-pipeline-num-layers 6 6 on pp 4 is the string Et*6|t*10|t*10|t*6L
    edges = cli_json(*TRAIN, "--pp", "4", "--first-stage-layers", "6", "--last-stage-layers", "6")
    typed = cli_json(*TRAIN, "--pp", "4", "--pipeline-layout", "Et*6|t*10|t*10|t*6L")
    assert typed["layers_per_stage"] == edges["layers_per_stage"] == [6, 10, 10, 6]
    assert typed["step_seconds"] == edges["step_seconds"]
    # interleaved: vpp follows from the stage count (Megatron's arguments.py), as --vpp 2 with the even split
    interleaved = cli_json(*TRAIN, "--pp", "4", "--vpp", "2")
    typed = cli_json(*TRAIN, "--pp", "4", "--pipeline-layout", "Et*4|(t*4|)*6,t*4L")
    assert typed["layout"]["vpp"] == 2 and typed["step_seconds"] == interleaved["step_seconds"]


def test_uneven_chunks_with_vpp_can_be_expressed():
    """--last-stage-layers 5 with --vpp 2 is refused (5 layers do not split over 2 chunks); the layout string
    gives the last rank 3 + 2."""
    assert "multiple of the 2 model chunks" in one_line_error(*TRAIN, "--pp", "4", "--vpp", "2",
                                                              "--last-stage-layers", "5")
    text = "Et*4|t*5|t*5|t*3|t*4|t*4|t*5|t*2L"  # rank 3: chunks 3 (stage 3) and 2 (stage 7)
    d = cli_json(*TRAIN, "--pp", "4", "--pipeline-layout", text)
    assert d["layers_per_stage"] == [4, 5, 5, 3, 4, 4, 5, 2] and d["layout"]["vpp"] == 2
    assert "Et*4|t*5" in d["assumptions"]["pipeline_layout"]


def test_mtp_where_the_layout_puts_it():
    """DeepSeek-V3's MTP layer beside the loss (the issue's Et*4|(t*4|)*14tmL) or on its own stage (the docs'
    m|L): --mtp-layers follows from the string; the MTP layers are timed on the stage that holds them."""
    ds = ("train", "deepseek-v3", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", "1024", "--global-batch",
          "1024", "--seq-len", "4096", "--ep", "64", "--recipe", "fp8-blockwise")
    beside = cli_json(*ds, "--pp", "16", "--pipeline-layout", "Et*4|(t*4|)*14tmL")
    assert beside["assumptions"]["mtp_layers"] == 1 and beside["layout"]["vpp"] == 1
    assert beside["layers_per_stage"] == [4] * 15 + [1]
    standalone = cli_json(*ds, "--pp", "16", "--pipeline-layout", "Et*3|(tt|)*29,m|L")
    assert standalone["layout"]["vpp"] == 2 and standalone["layers_per_stage"][-2:] == [0, 0]
    # two MTP layers on the rank that already holds 24 layers (rank 0, chunk 1) make a slower step than on the
    # rank holding 8 layers and the loss (rank 1, chunk 1)
    llama = (*TRAIN, "--pp", "2")
    heavy = cli_json(*llama, "--pipeline-layout", "Et*8|t*8|t*16mm|L")
    light = cli_json(*llama, "--pipeline-layout", "Et*8|t*8|t*16|mmL")
    assert heavy["assumptions"]["mtp_layers"] == light["assumptions"]["mtp_layers"] == 2
    assert heavy["step_seconds"] > light["step_seconds"]


@pytest.mark.parametrize("extra, naming", [
    (("--pipeline-layout", "Et*16|t*16L"), "give --pp"),
    (("--pp", "3", "--pipeline-layout", "Et*8|t*8|t*8|t*8L"), "not a multiple of --pp 3"),
    (("--pp", "4", "--vpp", "2", "--pipeline-layout", "Et*8|t*8|t*8|t*8L"), "not --vpp 2"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*7L"), "the model has 32"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8L", "--mtp-layers", "1"), "--mtp-layers is 1"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8L", "--last-stage-layers", "8"), "drop --first-stage"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8L", "--schedule", "zb-v"), "--schedule zb-v"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8X"), "unknown symbol 'X'"),
    (("--pp", "4", "--pipeline-layout", "(t*9999|)*9999"), "check its repeat counts"),
    (("--pp", "4", "--pipeline-layout", "Et*8|t*8|t*8|t*8L", "--mfu", "0.4"), "--pipeline-layout shapes"),
])
def test_refused_in_one_line(extra, naming):
    assert naming in one_line_error(*TRAIN, *extra)
