"""`layout --reserve-gib`: the memory `memory --reserve-gib` keeps free on each GPU is kept free by the layout
search too (issue 41: without it layout ranked layouts at 76-79 of 79.19 GiB as fitting)."""

from clirun import cli_json, one_line_error

from llmcalc.cli.common import load_hardware
from llmcalc.units import GIB

ARGS = ("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 8, "--recompute", "none",
        "--top", 50, "--exhaustive")
SHAPE = ("tp", "cp", "pp", "vpp", "micro_batch", "recompute", "zero")


def _shape(row: dict) -> tuple:
    return tuple(row[key] for key in SHAPE)


def test_a_reserve_larger_than_a_layouts_headroom_drops_it():
    usable = load_hardware("h100-sxm").usable_bytes / GIB  # what the runtime reports of an H100 80 GB
    free = cli_json(*ARGS)
    assert free["reserve_gib"] == 0
    fullest = max(free["layouts"], key=lambda row: row["memory_gib"])
    assert fullest["memory_gib"] <= usable
    reserve = usable - fullest["memory_gib"] + 0.01  # just more than its headroom
    kept = cli_json(*ARGS, "--reserve-gib", reserve)
    assert kept["reserve_gib"] == reserve  # echoed
    shapes = {_shape(row) for row in kept["layouts"]}
    assert _shape(fullest) not in shapes
    assert all(row["memory_gib"] <= usable - reserve for row in kept["layouts"])
    # the layouts with more headroom than the reserve still fit, with the same figures
    roomy = [row for row in free["layouts"] if row["memory_gib"] <= usable - reserve]
    assert roomy and {_shape(row) for row in roomy} <= shapes


def test_a_reserve_that_leaves_nothing_is_refused_naming_the_option():
    line = one_line_error(*ARGS, "--reserve-gib", 80)
    assert "--reserve-gib 80" in line
