"""`train --global-batch` through transformers (analytic/measured_step.py, profiling/hf_measure.measure_step).

The fallback is forced (LLMCALC_FORCE_TRANSFORMERS=1) on llama and qwen3_moe configs llmcalc has a formula for: the
GEMMs the measured step model reads off transformers' modules are the formula path's exactly (FLOPs and, as they
are timed by the same StepContext.gemm, seconds); the step times differ only by the elementwise traffic, which the
formula path itemises as fused passes (norms, residual adds, rotary, the MLP activation: layer.layer_times)
and the measured path takes from the bytes transformers' eager modelling code saved for backward (with its fp32
norm copies), so they agree within STEP_TOLERANCE. Two model types without a formula (codegen, arcee) run end to end.
"""


import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import cli_json, one_line_error  # noqa: E402
from tinyhf import CONFIGS, GEMMA3, LLAMA, QWEN3_MOE, QWEN3_NEXT, both_paths, write_config  # noqa: E402

from llmcalc.analytic.flops import layer_ops  # noqa: E402
from llmcalc.analytic.kernels import device_for  # noqa: E402
from llmcalc.analytic.measured_step import MeasuredStep, _layer_cost, measured_layout  # noqa: E402
from llmcalc.analytic.memory import RECIPES  # noqa: E402
from llmcalc.analytic.step.constants import KERNEL_EFFICIENCY  # noqa: E402
from llmcalc.analytic.step.context import StepContext  # noqa: E402
from llmcalc.analytic.step.layer import layer_times  # noqa: E402
from llmcalc.analytic.step.layout import make_layout  # noqa: E402
from llmcalc.fallback import FORCE_ENV, load_measured  # noqa: E402
from llmcalc.spec import spec_from_hf  # noqa: E402

# llama-like at a size where the GEMMs dominate (a 0.5B-class model: TinyLlama's widths, 8 layers)
MID = dict(model_type="llama", num_hidden_layers=8, hidden_size=2048, num_attention_heads=16, num_key_value_heads=8,
           intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096)
# The two paths' step times differ by the elementwise traffic only (module docstring): measured 1.0 % (llama tiny,
# 512 tokens), 2.2 % and 3.1 % (qwen3_moe and gemma3 tiny: widths of 64, where elementwise passes are a large share)
# and 0.7 % (MID) apart; on the published configs 0.5 % (llama-3-8b) and 2.9 % (qwen3-30b-a3b, whose saved bytes hold
# every routed token's copies and expert activations)
STEP_TOLERANCE = 0.05
CASES = [(LLAMA, 512), (QWEN3_MOE, 512), (MID, 1024), (GEMMA3, 256)]
IDS = ["llama", "qwen3_moe", "mid-llama", "gemma3"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def forced(tmp_path, monkeypatch, hf, seq):
    path = write_config(tmp_path, hf)
    monkeypatch.setenv(FORCE_ENV, "1")
    return path, MeasuredStep.of(load_measured(str(path), seq)), spec_from_hf(hf, "ref")


GEMM_OPS = ("scores", "values")  # the formula's attention core: not a GEMM of a weight


@pytest.mark.parametrize("hf, seq", CASES, ids=IDS)
def test_layer_gemm_flops_are_the_formulas(tmp_path, monkeypatch, hf, seq):
    _, step, spec = forced(tmp_path, monkeypatch, hf, seq)
    for i in range(spec.n_layers):
        formula = sum(v for k, v in layer_ops(spec, i, 1, seq, causal=True).items() if k.split("/")[1] not in GEMM_OPS)
        assert step.gemm_flops(i, seq) == formula
    # the LM head: 2 x tokens x hidden x vocab
    assert step.head.flops(seq) == 2 * seq * hf["hidden_size"] * hf["vocab_size"]
    # the attention core: 2 x heads x (d_qk + d_v) FLOPs per (query, key) pair, from the counter's s² term
    d_head = hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    assert step.core == {i: 2 * hf["num_attention_heads"] * 2 * d_head for i in range(spec.n_layers)}
    if hf["model_type"] == "qwen3_moe":
        assert (step.top_k, step.n_experts) == (2, 8)  # the routing indices' width, the experts module's count


@pytest.mark.parametrize("hf, seq", CASES, ids=IDS)
@pytest.mark.parametrize("tp", [1, 2])
def test_gemm_and_attention_seconds_are_the_formulas(tmp_path, monkeypatch, hf, seq, tp):
    """The same GEMMs (fused as Megatron-Core fuses q/k/v and gate/up: here because they read one input tensor) and
    the same attention core, timed by the same physics: equal to the last bit; the elementwise share differs."""
    _, step, spec = forced(tmp_path, monkeypatch, hf, seq)
    rec = RECIPES["bf16-mixed"]
    dev = device_for("h100-sxm")
    lay = make_layout(spec, 8, seq, 64, tp=tp)
    ctx = StepContext(step, dev, measured_layout(step, 8, seq, 64, tp=tp), seq, rec, eff=KERNEL_EFFICIENCY)
    mine = _layer_cost(ctx, step, 0, False)
    formula = layer_times(spec, 0, lay, seq, dev=dev)
    assert mine.gemm_fwd == pytest.approx(formula.gemm_fwd, rel=1e-12)
    assert mine.bwd_weight == pytest.approx(formula.bwd_weight, rel=1e-12)
    assert mine.tp == pytest.approx(formula.tp, rel=1e-12)  # one all-gather / reduce-scatter pair per sub-block


LAYOUTS = [[], ["--tp", "2", "--pp", "2"], ["--tp", "2", "--zero", "3", "--recompute", "full"]]


@pytest.mark.parametrize("hf, seq", CASES, ids=IDS)
@pytest.mark.parametrize("layout", LAYOUTS, ids=["dp", "tp-pp", "fsdp-full"])
def test_step_seconds_agree_with_the_formula(tmp_path, monkeypatch, hf, seq, layout):
    analytic, measured = both_paths(tmp_path, monkeypatch, hf, "train", "--tokens", "1e9", "--gpu", "h100-sxm",
                                    "--n-gpus", "8", "--global-batch", "64", "--seq-len", str(seq), *layout)
    assert measured["method"] == "transformers" and analytic["method"] == "analytic"
    assert {"gemms", "attention", "elementwise", "step_flops"} <= set(measured["measured_from"])
    assert measured["step_seconds"] == pytest.approx(analytic["step_seconds"], rel=STEP_TOLERANCE)
    assert measured["layout"] == analytic["layout"] and measured["layers_per_stage"] == analytic["layers_per_stage"]
    for part in ("tp_comm", "pp_comm", "optimizer"):  # the same collectives and optimizer bytes
        assert measured["breakdown_seconds"][part] == pytest.approx(analytic["breakdown_seconds"][part], rel=1e-9)
    # MFU = the counted model FLOPs of the step / (step x GPUs x the dense bf16 peak)
    step_flops = measured["total_flops"] / 1e9 * 64 * seq
    assert measured["mfu"] == pytest.approx(step_flops / (measured["step_seconds"] * 8 * 989.4e12), rel=1e-9)


@pytest.mark.parametrize("overlap", [[], ["--ep-overlap"]], ids=["exposed", "ep-overlap"])
def test_experts_split_over_ep_as_the_formula(tmp_path, monkeypatch, overlap):
    analytic, measured = both_paths(tmp_path, monkeypatch, QWEN3_MOE, "train", "--tokens", "1e9", "--gpu", "h100-sxm",
                                    "--n-gpus", "8", "--global-batch", "64", "--seq-len", "512", "--tp", "2", "--ep",
                                    "4", *overlap)
    # the dispatch / combine all-to-alls of top-2 routed tokens: the same collectives (with --ep-overlap, the
    # hidden share is of each path's own compute, which differs by the elementwise traffic)
    assert measured["breakdown_seconds"]["ep_comm"] == pytest.approx(analytic["breakdown_seconds"]["ep_comm"],
                                                                     rel=1e-9 if not overlap else STEP_TOLERANCE)
    assert measured["step_seconds"] == pytest.approx(analytic["step_seconds"], rel=STEP_TOLERANCE)


@pytest.mark.parametrize("name", ["codegen-tiny", "arcee-tiny"])
def test_train_global_batch_of_a_model_without_a_formula_end_to_end(name):
    data = cli_json("train", str(CONFIGS / f"{name}.json"), "--tokens", "1e9", "--gpu", "h100-sxm", "--n-gpus", "4",
                    "--global-batch", "32", "--seq-len", "256", "--tp", "2")
    assert data["method"] == "transformers" and data["mfu_source"] == "predicted"
    assert data["step_seconds"] > 0 and data["tokens_per_second"] == pytest.approx(32 * 256 / data["step_seconds"])
    assert data["layout"]["tp"] == 2 and data["layout"]["dp"] == 2 and data["breakdown_seconds"]["tp_comm"] > 0
    assert set(data["measured_from"]) >= {"gemms", "attention", "elementwise", "step_flops"}


def test_codegen_parallel_block_fuses_the_projections_that_read_one_input():
    """CodeGen's block runs attention and MLP in parallel on ln_1's output (modeling_codegen.CodeGenBlock): qkv_proj
    (64 -> 3 x 64) and fc_in (64 -> 4 x 64) read one tensor, one column-parallel GEMM of 192 + 256 = 448 outputs;
    out_proj (64 -> 64) and fc_out (256 -> 64) are row-parallel."""
    from llmcalc.analytic.measured_step import _fused

    step = MeasuredStep.of(load_measured(str(CONFIGS / "codegen-tiny.json"), 256))
    fused = sorted((g.k, g.n, g.split) for g in _fused(step.layer_gemms[0]))
    assert fused == [(64, 64, "row"), (64, 448, "column"), (256, 64, "row")]


@pytest.mark.parametrize("argv, words", [
    (["--tp", "4"], "does not divide the 2 heads of model.layers.*.self_attn.k_proj.weight"),
    (["--cp", "2"], "--cp 2"),
    (["--recompute", "selective"], "--recompute selective"),
    (["--cp-comm", "a2a"], "--cp-comm"),
    (["--mtp-layers", "1"], "--mtp-layers"),
    (["--ep", "2"], "--ep 2"),
    (["--attention", "eager"], "--attention eager"),
])
def test_train_global_batch_bad_input_is_one_line(argv, words):
    line = one_line_error("train", str(CONFIGS / "arcee-tiny.json"), "--tokens", "1e9", "--gpu", "h100-sxm",
                          "--n-gpus", "8", "--global-batch", "16", "--seq-len", "256", *argv)
    assert words in line


def test_sliding_layers_attend_their_window(tmp_path, monkeypatch):
    """gemma3's sliding layers: the measured cache stops at 31 past tokens (DynamicSlidingWindowLayer keeps
    window - 1), so the kernel computes the window-32 pairs the formula computes: 32·33/2 + (256 - 32)·32."""
    _, step, spec = forced(tmp_path, monkeypatch, GEMMA3, 256)
    assert step.windows == {0: 32, 1: 32}
    assert [step.attended_pairs(i, 256) for i in range(3)] == [32 * 33 / 2 + 224 * 32] * 2 + [256 * 257 / 2]
    assert [step.attended_pairs(i, 256) for i in range(3)] == [spec.attended_pairs(i, 256) for i in range(3)]


# Nemotron-H at widths where the GEMMs matter: Mamba-2 layers (a depthwise conv1d, a recurrent state), attention, MLP
NEMOTRON_H = dict(model_type="nemotron_h", hidden_size=1024, hybrid_override_pattern="M-M*M-", num_attention_heads=8,
                  num_key_value_heads=2, head_dim=128, intermediate_size=4096, vocab_size=32000, mamba_num_heads=32,
                  mamba_head_dim=64, ssm_state_size=128, n_groups=2, conv_kernel=4, chunk_size=128,
                  max_position_embeddings=4096)


@pytest.mark.parametrize("hf", [NEMOTRON_H, QWEN3_NEXT], ids=["nemotron_h", "qwen3_next"])
def test_state_layers_are_timed_as_the_formula_times_them(tmp_path, monkeypatch, hf):
    """Issue 39: were refused ("the step model has no kernel for its scan"). A state layer's scan and short
    convolution are memory-bound passes over its input projection's output and its output projection's input,
    T·(n_in + 2E) elements: for Mamba-2 (in_proj's n_in = 2E + 2GN + H) the formula path's own term, so the two
    paths differ by the elementwise share only. That share is larger here than for attention-only models: the
    bytes autograd saved in transformers' forward hold its pure-torch chunked scan's intermediates (Nemotron-H: 144 kB
    per token per layer at D 1,024), which a fused scan kernel does not write, so the measured step is slower (+36 %
    here), never faster."""
    analytic, measured = both_paths(tmp_path, monkeypatch, hf, "train", "--tokens", "1e9", "--gpu", "h100-sxm",
                                    "--n-gpus", "8", "--global-batch", "64", "--seq-len", "1024")
    assert measured["method"] == "transformers" and "scan" in measured["measured_from"]
    assert analytic["step_seconds"] <= measured["step_seconds"] < 1.5 * analytic["step_seconds"]
    # the same parameters, hence the same gradient bytes to reduce over data parallelism
    assert measured["breakdown_seconds"]["dp_comm"] == pytest.approx(analytic["breakdown_seconds"]["dp_comm"], rel=1e-3)


# --- layout ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["codegen-tiny", "arcee-tiny"])
def test_layout_of_a_model_without_a_formula_end_to_end(name):
    config = str(CONFIGS / f"{name}.json")
    data = cli_json("layout", config, "--gpu", "h100-sxm", "--n-gpus", "8", "--global-batch", "64", "--seq-len", "256")
    assert data["method"] == "transformers" and {"gemms", "attention"} <= set(data["measured_from"])
    best = data["layouts"][0]
    # the best layout, predicted again by `train` with its options: the same step
    train = cli_json("train", config, "--tokens", "1e9", "--gpu", "h100-sxm", "--n-gpus", "8", "--global-batch", "64",
                     "--seq-len", "256", "--tp", best["tp"], "--pp", best["pp"], "--vpp", best["vpp"],
                     "--micro-batch", best["micro_batch"], "--zero", best["zero"], "--schedule", best["schedule"])
    assert train["step_seconds"] == best["step_seconds"]
    # a one-stage layout's memory is `memory`'s for it
    one = next(lay for lay in data["layouts"] if lay["pp"] == 1)
    memory = cli_json("memory", config, "--seq-len", "256", "--tp", one["tp"], "--n-gpus", 8,
                      "--batch-size", one["micro_batch"], "--zero", one["zero"])
    assert one["memory_gib"] * 2**30 == pytest.approx(memory["per_gpu_bytes"], rel=1e-12)
    # arcee's 2 key/value heads: transformers' plan splits k_proj by whole heads, so tp 4 and 8 are never tried
    if name == "arcee-tiny":
        assert {lay["tp"] for lay in data["layouts"]} <= {1, 2}


def test_layout_stage_memory_is_the_formulas_within_the_activations(tmp_path, monkeypatch):
    """pp 2 on the 0.5B-class llama: the first stage's parameters and optimizer states are the formula's; its
    activations (2 micro-batches in flight under 1F1B) are the bytes transformers saved, 15 % above the formula's
    itemisation (transformers' fp32 norm copies, test_hf_measured): the peaks agree within 5 %."""
    from llmcalc.analytic.measured_step import measured_stage_peak
    from llmcalc.analytic.memory import training_memory
    from llmcalc.analytic.parallel import Parallel

    _, step, spec = forced(tmp_path, monkeypatch, MID, 1024)
    for pp, tp in ((2, 1), (2, 2), (4, 2)):
        lay = measured_layout(step, 8, 1024, 64, tp=tp, pp=pp)
        mine = measured_stage_peak(step, lay, 1024, "bf16-mixed", "adamw")
        formula = training_memory(spec, 1, 1024, parallel=Parallel(tp=tp, pp=pp, dp=lay.dp)).peak
        assert mine == pytest.approx(formula, rel=0.05)


def test_layout_refuses_recomputation_in_one_line():
    line = one_line_error("layout", str(CONFIGS / "arcee-tiny.json"), "--gpu", "h100-sxm", "--n-gpus", "8",
                          "--global-batch", "64", "--seq-len", "256", "--recompute", "full")
    assert "--recompute full" in line and "arcee" in line


def test_a_forward_the_step_model_cannot_measure_leaves_memory_working(monkeypatch):
    """measure_step failing (a forward the hooks cannot follow) costs `memory` nothing; train says why in one line."""
    import llmcalc.profiling.hf_measure as hf_measure
    from llmcalc.errors import LlmcalcError

    def fail(model):
        raise LlmcalcError("transformers' forward of X failed at seq 16: RuntimeError: no")

    monkeypatch.setattr(hf_measure, "measure_step", fail)
    config = str(CONFIGS / "arcee-tiny.json")
    assert cli_json("memory", config, "--seq-len", "128")["method"] == "transformers"
    line = one_line_error("train", config, "--tokens", "1e9", "--gpu", "h100-sxm", "--global-batch", "8",
                          "--seq-len", "128")
    assert "the step model's measurement failed" in line and "RuntimeError: no" in line
