"""--tp-overlap from its mechanism (TransformerEngine's comm+GEMM overlap, userbuffers, as Megatron-LM's
--tp-comm-overlap runs it with TE's default configuration): GEMMs split in chunks under the ring-exchanged all-gathers,
the pipelined reduce-scatter's and the bulk overlaps' kernels holding SMs the GEMMs beside them lose, the last
chunk's reduce-scatter exposed; held to a published measurement of what the overlap gains, and searched by
`layout` where it applies."""

import pytest
from clirun import cli_json, one_line_error

from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.step.layer import layer_times
from llmcalc.analytic.step.layout import make_layout
from llmcalc.spec import load_model

# torchtitan's async TP benchmark (pytorch/torchtitan docs/async_tp.md, "benchmarks done by the PyTorch team in June
# 2025", Grand Teton: 8 H100 per host on NVLink, bf16 rows): tokens/s per GPU with vanilla TP and with async TP.
# Llama 3 70B on 256 H100, FSDP 32 x TP 8, full activation checkpointing, local batch 16: 597.3 -> 652.4 (x 1.09).
# Llama 3 8B on 64 H100, FSDP 8 x TP 8, per-op selective checkpointing, local batch 12: 4378 -> 4809.4 (x 1.10).
# (torchtitan's default sequence length, 8192; its async TP decomposes each all-gather / reduce-scatter around the
# matmul as TE's overlap does.)
ASYNC_TP = [
    ("llama-3-70b", 256, 16, "full", 652.4 / 597.3),
    ("llama-3-8b", 64, 12, "selective", 4809.4 / 4378),
]


@pytest.mark.parametrize("model, n_gpus, local_batch, recompute, measured", ASYNC_TP)
def test_overlap_gains_what_async_tp_measured(model, n_gpus, local_batch, recompute, measured):
    """The step without the overlap over the step with it is within 0.15 of the published speedup (the model that
    hid each pass's collectives under its GEMMs for free predicted 1.27 and 1.36)."""
    dp = n_gpus // 8
    base = ["train", model, "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", n_gpus, "--seq-len", 8192,
            "--global-batch", local_batch * dp, "--tp", 8, "--pp", 1, "--cp", 1, "--micro-batch", local_batch,
            "--zero", 3, "--recompute", recompute]
    off, on = (cli_json(*base, flag)["step_seconds"] for flag in ("--no-tp-overlap", "--tp-overlap"))
    assert off / on > 1.0 and abs(off / on - measured) <= 0.15, (off / on, measured)


def test_overlap_is_never_free_and_costs_no_compute():
    """Where a layer's GEMMs far outlast its TP collectives the overlap still costs the SMs its kernels hold and the
    last chunk's reduce-scatter, so it is never zero; it stays below the collectives it hides; the GEMMs' own time
    (compute) is the plain step's: the overlap's cost is booked as TP communication."""
    spec = load_model("llama-3-70b")
    dev = device_for("h100-sxm")
    for tokens, recompute in ((8192, "none"), (8192, "full"), (2048, "selective")):
        plain, hidden = (layer_times(spec, 0, make_layout(spec, 8, tokens, 8, tp=8, micro_batch=4, tp_overlap=ov),
                                     tokens, recompute=recompute, dev=dev) for ov in (False, True))
        assert 0 < hidden.tp < plain.tp and 0 < hidden.comm_fwd < hidden.tp
        assert hidden.compute == pytest.approx(plain.compute)


def test_layout_searches_the_overlap_and_says_which_it_chose():
    """`layout` tries --tp-overlap on and off where tp > 1 (its column shows the choice, the knobs line names it and
    the best's), takes it as given where typed, and refuses it where tp 1 is pinned."""
    args = ("layout", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 64, "--seq-len", 8192, "--global-batch", 512,
            "--top", 3)
    data = cli_json(*args)
    best = data["layouts"][0]
    assert best["tp"] > 1 and best["tp_overlap"] is True
    assert any("--tp-overlap on/off" in k and "(the best: on)" in k for k in data["knobs"])
    assert "--tp-overlap" in data["reproduce"]["train"].split()
    off = cli_json(*args, "--no-tp-overlap")
    assert not any(row["tp_overlap"] for row in off["layouts"]) and "--tp-overlap off" in off["knobs"][1]
    assert off["layouts"][0]["step_seconds"] > best["step_seconds"]
    line = one_line_error("layout", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 64,
                          "--tp", 1, "--tp-overlap")
    assert "--tp-overlap" in line and "--tp 2" in line
    line = one_line_error("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 8,
                          "--global-batch", 64, "--tp", 1, "--tp-overlap")
    assert "--tp-overlap" in line and "tp 1" in line
