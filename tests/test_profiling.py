"""The profiler: the reference model against the formulas, counted by torch itself."""

import dataclasses
import json
import statistics
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from clirun import run  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from llmcalc.analytic.flops import step_flops  # noqa: E402
from llmcalc.analytic.params import param_breakdown  # noqa: E402
from llmcalc.profiling import measure  # noqa: E402
from llmcalc.profiling.counters import count_flops, register_cpu_sdpa  # noqa: E402
from llmcalc.profiling.measure import virtual_profile  # noqa: E402
from llmcalc.profiling.model import build_model, measured_breakdown  # noqa: E402
from llmcalc.spec import ModelSpec, SpecError, load_model, model_names, spec_of  # noqa: E402  # noqa: E402

# The reference model builds attention + FFN blocks only; hybrid/state-space presets are refused
# (test_hybrid_presets_are_refused_in_one_line) and checked against transformers in tests/test_ssm.py.
PRESETS = [n for n in model_names() if not (load_model(n).is_hybrid or load_model(n).layer_extras())]
HYBRID = [n for n in model_names() if load_model(n).is_hybrid or load_model(n).layer_extras()]


@pytest.mark.parametrize("name", PRESETS)
def test_reference_model_has_the_analytic_parameters(name):
    """sum(p.numel()) of the reference model, per component, equals the analytic breakdown (meta device)."""
    spec = load_model(name)
    assert measured_breakdown(build_model(spec, device="meta")) == param_breakdown(spec)


def test_cpu_sdpa_is_counted_and_registered_once():
    register_cpu_sdpa()
    assert register_cpu_sdpa() is False  # guarded: a second call (or a fixed torch) adds nothing
    q = torch.randn(1, 8, 64, 32, requires_grad=True)
    kv = torch.randn(1, 2, 64, 32, requires_grad=True)  # GQA
    with FlopCounterMode(display=False) as counter:
        out = torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        out.sum().backward()
    forward = 2 * 2 * 8 * 64 * 64 * 32  # QKᵀ and AV over 8 query heads, full S²
    assert counter.get_total_flops() == forward + forward * 5 // 2  # flash backward recomputes QKᵀ: 2.5x


# Issue 9's current-generation presets: 40-60 s each virtually at full size; the fast tier checks them by
# count (tests/test_families.py), the slow tier virtually.
CURRENT_GENERATION = {"qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma-3-27b", "gpt-oss-20b",
                      "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "olmo-2-7b", "deepseek-v3.1", "kimi-k2",
                      "glm-4.5", "smollm3-3b"}


def shrunk(spec: ModelSpec, layers: int = 2) -> ModelSpec:
    """`spec` cut to at most `layers` blocks per stack, with at most one dense-first layer so that MoE
    presets keep a MoE block: every per-component shape of the preset, in seconds instead of minutes."""
    return spec.with_layers(min(layers, spec.n_layers), n_dense_layers=min(spec.n_dense_layers, 1),
                            n_decoder_layers=min(layers, spec.n_decoder_layers))


def check_virtual_flops(spec: ModelSpec, seq: int) -> None:
    """Forward and forward+backward FLOPs, in total and per component, within 1 % (they are exact);
    MoE presets against the active-expert figures."""
    result = virtual_profile(spec, 1, seq, "bf16-mixed", track_memory=False)
    flops = [c for c in result.comparisons if c.unit == "FLOP" and c.measured is not None]
    assert len(flops) >= 6
    for c in flops:
        assert abs(c.rel_error) <= 0.01, (c.name, c.analytic, c.measured)
    assert result.find("parameters").rel_error == 0
    assert result.find("forward FLOPs / attention S²" if spec.architecture != "encoder-decoder"
                       else "forward FLOPs / encoder.attention S²").measured > 0


def structure(value):
    """A spec with its sizes left out: every flag and kind as it is, every count as 0, 1 or 2 (2: more than one),
    nested settings (MLA) likewise; with how keys and values share the heads (MHA, GQA, MQA) and whether the heads
    span d_model. Two shrunk presets alike here build the same modules in the same order and differ only in the
    widths that the formulas take as numbers."""
    if dataclasses.is_dataclass(value):
        parts = tuple((f.name, structure(getattr(value, f.name))) for f in dataclasses.fields(value)
                      if f.name not in ("name", "notes"))
        if isinstance(value, ModelSpec):
            kv = "mha" if value.n_kv_heads == value.n_heads else "mqa" if value.n_kv_heads == 1 else "gqa"
            parts += (("kv", kv), ("heads span d_model", value.n_heads * value.d_head == value.d_model))
        return parts
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return min(value, 2) if isinstance(value, int) and not isinstance(value, bool) else value


def one_per_structure(names):
    """Each name, the later ones of a structure (same `structure` shrunk) marked slow: in the fast tier the first
    preset of each structure holds what the others would (sizes are the formulas' inputs); the slow tier runs
    them all, here and at full size (test_virtual_flops_match_the_formulas)."""
    seen = set()
    params = []
    for name in names:
        key = structure(shrunk(load_model(name)))
        params.append(pytest.param(name, marks=pytest.mark.slow if key in seen else ()))
        seen.add(key)
    return params


@pytest.mark.parametrize("name", one_per_structure([n for n in PRESETS if n not in CURRENT_GENERATION]))
def test_virtual_flops_match_the_formulas_on_two_layers(name):
    check_virtual_flops(shrunk(load_model(name)), 128)


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_virtual_flops_match_the_formulas(name):
    """Every preset at full size, seq 2048."""
    check_virtual_flops(load_model(name), 2048)


def check_virtual_memory(spec: ModelSpec, batch: int, seq: int, recompute: str) -> None:
    """MemTracker's peak for a whole training step against the analytic memory model (bf16-mixed
    AdamW, FlashAttention), within 10 %."""
    peak = virtual_profile(spec, batch, seq, "bf16-mixed", recompute).find("peak memory")
    assert abs(peak.rel_error) <= 0.10, (batch, seq, peak.analytic, peak.measured)


@pytest.mark.parametrize("name, recompute", [("llama-3.2-1b", "none"),
                                             ("qwen2.5-7b", "full"), ("mixtral-8x7b", "none")])
def test_virtual_peak_memory_on_two_layers(name, recompute):
    """Two layers at batch 4 x 2048: activations hold the peak of the dense models (end of forward)."""
    check_virtual_memory(shrunk(load_model(name)), 4, 2048, recompute)


def test_full_recompute_peak_holds_the_logits_or_the_rebuilt_block_never_both():
    """Llama-2-7B's shapes, 2 blocks, micro-batch 8 x 4096, recompute full: the LM head's backward frees
    the logits (11.7 GiB here) before the first block is rebuilt (4.9 GiB), so the end of forward holds
    the peak; the formula held both and read 26.36 GiB against MemTracker's 21.41 GiB (+23 %)."""
    result = virtual_profile(shrunk(load_model("llama-2-7b")), 8, 4096, "bf16-mixed", "full")
    peak = result.find("peak memory")
    assert abs(peak.rel_error) <= 0.01, (peak.analytic, peak.measured)
    assert "end of forward" in peak.note


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-3.2-1b", "llama-2-7b", "mistral-7b", "qwen2.5-7b"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_virtual_peak_memory_within_ten_percent(name, recompute):
    """Full size, where activations dominate (batch 4 x 4096) and where they do not (1 x 1024)."""
    for batch, seq in ((4, 4096), (1, 1024)):
        check_virtual_memory(load_model(name), batch, seq, recompute)


@pytest.mark.slow
def test_virtual_moe_memory():
    check_virtual_memory(load_model("mixtral-8x7b"), 2, 2048, "none")


def tiny_model_flops_per_token(seq: int) -> int:
    """llmcalc-tiny by hand: L = 4, D = 256, 8 query and 2 KV heads of 32, SwiGLU F = 704, V = 8,000, tied.
    Forward per token: Q and O 2·D·D each, K and V 2·D·64 each, QKᵀ and AV 2·S·256 each (full S²),
    gate/up/down 2·D·F each; the LM head 2·D·V. Model FLOPs = 3 x forward."""
    block = 2 * 2 * 256 * 256 + 2 * 2 * 256 * 64 + 2 * 2 * seq * 256 + 3 * 2 * 256 * 704
    return 3 * (4 * block + 2 * 256 * 8000)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llmcalc-tiny", "llmcalc-small"])
def test_real_cpu_run_of_the_small_presets(name):
    # twice the calibrated peak: a 0.2 s calibration on a shared CPU can read low (CI under load measured 0.039
    # TFLOP/s where the step then ran 0.053), and this test holds the run's arithmetic, not the calibration; the MFU
    # > 1 refusal has its own test (test_newcomer.py)
    peak = 2 * measure.calibrate("cpu", seconds=0.2)
    result = measure.real_profile(load_model(name), "cpu", 4, 128, "fp32", steps=2, warmup=1,
                                  peak_flops=peak, peak_source="calibrated")
    assert result.step_seconds == statistics.median(result.step_times) and len(result.step_times) == 2
    assert result.tokens_per_second == 4 * 128 / result.step_seconds
    model_flops = result.find("train-step model FLOPs").analytic
    if name == "llmcalc-tiny":
        assert model_flops == 4 * 128 * tiny_model_flops_per_token(128)
    assert result.mfu == pytest.approx(model_flops / result.step_seconds / result.peak_flops_per_s, rel=1e-12)
    # HFU / MFU = what torch's counter saw executed / model FLOPs (sdpa's backward recomputes QKᵀ)
    assert result.hfu / result.mfu == pytest.approx(result.find("train-step FLOPs").measured / model_flops, rel=1e-12)
    assert result.hfu > result.mfu
    assert result.sdpa_backend == "flash (cpu)"
    for c in result.comparisons:
        if c.unit == "FLOP" and c.measured is not None:
            assert c.rel_error == pytest.approx(0, abs=1e-9), c.name


def test_fvcore_agrees_with_torch():
    result = measure.real_profile(load_model("llmcalc-tiny"), "cpu", 2, 64, "fp32", steps=1, warmup=0,
                                  counter="both")
    assert result.fvcore_forward_flops == result.find("forward FLOPs").measured


@st.composite
def random_specs(draw):
    arch = draw(st.sampled_from(["decoder", "decoder", "decoder", "encoder", "encoder-decoder"]))
    n_heads = draw(st.integers(1, 4))
    n_kv = draw(st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0]))
    parallel = arch == "decoder" and draw(st.booleans())
    norms = draw(st.sampled_from([1, 2])) if parallel else draw(st.sampled_from([2, 2, 4]))
    post = arch != "decoder" and norms == 2 and not parallel and draw(st.booleans())
    values = dict(
        architecture=arch, n_layers=draw(st.integers(1, 3)), n_heads=n_heads, n_kv_heads=n_kv,
        d_head=draw(st.sampled_from([4, 8])), d_model=draw(st.sampled_from([16, 24, 32])),
        d_ff=draw(st.integers(8, 48)), vocab_size=draw(st.integers(16, 64)),
        mlp=draw(st.sampled_from(["swiglu", "geglu", "gelu", "relu", "silu"])),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])), norm_affine=draw(st.booleans()),
        norms_per_layer=norms, parallel_residual=parallel, post_norm=post, final_norm=not post,
        qkv_bias=draw(st.booleans()), out_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
        pos_emb=draw(st.sampled_from(["rope", "learned", "sinusoidal", "alibi", "relative"])),
        tie_embeddings=draw(st.booleans()), lm_head=arch != "encoder" or draw(st.booleans()),
        pooler=arch == "encoder" and draw(st.booleans()),
    )
    if values["pos_emb"] == "learned":
        values["n_positions"] = 64
    if values["pos_emb"] == "relative":
        values["rel_pos_buckets"] = draw(st.integers(4, 16))
    if arch == "decoder" and draw(st.booleans()):  # MoE
        experts = draw(st.integers(2, 4))
        values.update(n_experts=experts, n_experts_per_token=draw(st.integers(1, experts)),
                      n_shared_experts=draw(st.integers(0, 1)), d_ff_expert=draw(st.integers(4, 24)),
                      n_dense_layers=draw(st.integers(0, 1)))
    if arch == "decoder":  # issue 9: QK-norm, sinks, LM-head bias, OPT's projections
        values.update(qk_norm=draw(st.sampled_from(["none", "head", "full"])), qk_norm_bias=draw(st.booleans()),
                      attention_sinks=draw(st.booleans()), lm_head_bias=draw(st.booleans()),
                      d_embed=draw(st.none() | st.sampled_from([8, 12])))
        if values.get("n_experts"):  # biased routers/experts, a gated shared expert of its own width, layer lists
            values.update(router_bias=draw(st.booleans()), expert_bias=draw(st.booleans()),
                          d_ff_shared=draw(st.none() | st.integers(4, 24)) if values["n_shared_experts"] else None,
                          shared_expert_gate=bool(values["n_shared_experts"]) and draw(st.booleans()),
                          moe_layers=draw(st.none() | st.lists(st.integers(0, values["n_layers"] - 1), unique=True)))
    if arch == "decoder" and not parallel and draw(st.integers(0, 3)) == 0:  # MLA
        values.update(kv_lora_rank=draw(st.integers(4, 12)), q_lora_rank=draw(st.none() | st.integers(4, 12)),
                      qk_rope_head_dim=draw(st.sampled_from([2, 4])), qk_nope_head_dim=draw(st.sampled_from([4, 8])),
                      v_head_dim=draw(st.sampled_from([4, 8])), n_kv_heads=n_heads, d_head=None, pos_emb="rope",
                      qk_norm="none", attention_sinks=False)
    try:
        return spec_of(**values)
    except SpecError:
        return spec_of(n_layers=1, d_model=16, n_heads=2, vocab_size=32, d_ff=32)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_specs(), st.integers(1, 2), st.integers(1, 9))
def test_property_reference_model_matches_the_formulas(spec, batch, seq):
    """Random valid specs: reference-model numel equals the analytic count, and the counted forward
    FLOPs equal the analytic forward FLOPs."""
    assert measured_breakdown(build_model(spec, device="meta")) == param_breakdown(spec)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model(spec, routing="balanced")
        ids = torch.zeros(batch, seq, dtype=torch.long)
        counted = count_flops(lambda: model(ids))
    assert counted.total == step_flops(spec, batch, seq).forward


def test_profile_json_has_the_promised_keys():
    result = run("profile", "llmcalc-tiny", "--virtual", "--seq-len", 256, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("device", "sdpa_backend", "params", "forward_flops", "train_step_flops", "peak_memory_bytes",
                "components"):
        assert key in data
    assert set(data["train_step_flops"]) >= {"analytic_model", "analytic_hardware", "measured"}
    assert data["params"]["analytic"] == data["params"]["measured"]
    real = json.loads(run("profile", "llmcalc-tiny", "--device", "cpu", "--steps", 1, "--warmup", 0, "--seq-len", 64,
                          "--peak-tflops", 0.5, "--format", "json").stdout)
    assert real["peak_flops_per_s"] == 0.5e12 and real["peak_source"] == "given with --peak-tflops"
    assert real["step_seconds"] == real["step_times"][0] and real["tokens_per_second"] == 64 / real["step_seconds"]
    assert real["train_step_flops"]["analytic_model"] == 64 * tiny_model_flops_per_token(64)
    assert real["mfu"] == pytest.approx(64 * tiny_model_flops_per_token(64) / real["step_seconds"] / 0.5e12, rel=1e-12)
    counted = real["train_step_flops"]["measured"]  # torch's FlopCounterMode over the training step
    assert real["achieved_flops_per_s"] == pytest.approx(counted / real["step_seconds"], rel=1e-12)
    assert real["hfu"] == pytest.approx(counted / real["step_seconds"] / 0.5e12, rel=1e-12)


def one_line_error(result, fragment):
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_missing():
    one_line_error(run("profile", "gpt2", "--device", "cuda"), "CUDA is not available")
    one_line_error(run("calibrate", "--device", "cuda"), "use --device cpu or --virtual")


def test_cuda_out_of_memory_is_one_line(monkeypatch):
    def explode(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(measure, "build_model", explode)
    result = run("profile", "llmcalc-tiny", "--device", "cpu", "--peak-tflops", 1)
    one_line_error(result, "out of memory")
    assert "--virtual" in result.stderr and "--layers" in result.stderr


def test_torch_missing_is_one_line():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from llmcalc.cli import cli\ncli.main(['profile', 'gpt2', '--virtual'], prog_name='llmcalc')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmcalc: error: profiling needs torch: pip install 'llmcalc[profile]' (on a CPU-only machine install "
        "torch==2.13.0 first)"]


@pytest.mark.parametrize("name", HYBRID)
def test_hybrid_presets_are_refused_in_one_line(name):
    for args in (["--virtual"], ["--device", "cpu", "--layers", 1]):
        result = run("profile", name, *args)
        one_line_error(result, "the profiler's reference model builds attention + FFN blocks only")
        assert result.exit_code == 2


def test_profile_bad_options():
    one_line_error(run("profile", "gpt2", "--virtual", "--counter", "fvcore"), "fvcore traces real tensors")
    one_line_error(run("profile", "gpt2", "--virtual", "--recipe", "bf16-mixed-fp32-grads"),
                   "'--recipe': 'bf16-mixed-fp32-grads' is not one of")
    one_line_error(run("profile", "gpt2", "--device", "tpu"), "'--device': 'tpu' is not one of 'auto', 'cpu', 'cuda'")


def test_calibrate_success_path(monkeypatch):
    """`llmcalc calibrate`: the best of timed (n x n) @ (n x n) matmuls, 2·n³ FLOPs each (torch's
    FlopCounterMode agrees), on a clock where every matmul takes 0.5 ms: 2 x 128³ / 0.5e-3 FLOP/s."""
    a = torch.randn(128, 128)
    with FlopCounterMode(display=False) as counter:
        a @ a
    assert counter.get_total_flops() == 2 * 128**3
    ticks = iter(range(10**6))
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(ticks) * 0.5e-3)
    result = run("calibrate", "--device", "cpu", "--size", 128, "--seconds", 0.01, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["achieved_flops_per_s"] == pytest.approx(2 * 128**3 / 0.5e-3, rel=1e-12)
    assert (data["device"], data["dtype"], data["matmul_size"]) == ("cpu", "fp32", 128)
    table = run("calibrate", "--device", "cpu", "--size", 128, "--seconds", 0.01).stdout
    assert "achieved fp32 matmul (128 x 128 x 128)" in table and "8.39 GFLOP/s" in table  # 4.194e9 x 2
    one_line_error(run("calibrate", "--device", "cpu", "--seconds", 0), "--seconds': must be positive, got 0")


@pytest.mark.slow
def test_compile_times_the_first_step_apart(monkeypatch):
    """`--compile`: torch.compile's first step is timed apart from the steps that follow, dynamo really
    compiled the model (torch's own counters), and the counted FLOPs still equal the formulas. The
    compiler backend is dynamo's "eager" (graph capture without inductor's C++ build, which takes
    ten minutes on a 2-core machine); the command's code path is the same."""
    from functools import partial

    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    result = run("profile", "llmcalc-tiny", "--device", "cpu", "--compile", "--steps", 2, "--warmup", 1,
                 "--batch-size", 1, "--seq-len", 32, "--peak-tflops", 1, "--format", "json")
    torch._dynamo.reset()
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert counters["stats"]["unique_graphs"] >= 1
    # the first step (capture + run) is reported apart from the steps timed after it (a comparison of the two
    # durations would be a race on a loaded 2-core machine: CI saw a plain step outlast the eager capture)
    assert data["compile_seconds"] > 0
    assert len(data["step_times"]) == 2 and data["forward_flops"]["rel_error"] == 0
    assert data["train_step_flops"]["rel_error"] == 0


# --- a deep model measured on a few blocks (measure.sampling) -------------------------------------------

SMALL = dict(d_model=32, n_heads=4, n_kv_heads=2, vocab_size=256, d_ff=64)
SAMPLED = {  # name -> (spec, profile options): every kind of stack the sampling decomposes; sampled past 3 blocks
    "uniform": (spec_of(n_layers=5, **SMALL), {}),
    "recompute-eager-tied-fp16": (spec_of(n_layers=4, tie_embeddings=True, **SMALL),
                                  {"recompute": "full", "attention": "eager", "recipe": "fp16-mixed"}),
    "moe-after-dense": (spec_of(n_layers=6, n_experts=4, n_experts_per_token=2, n_shared_experts=1,
                                d_ff_expert=16, n_dense_layers=1, **SMALL), {}),
    "moe-every-other": (spec_of(n_layers=8, n_experts=4, n_experts_per_token=1, d_ff_expert=16,
                                moe_layer_freq=2, **SMALL), {"recompute": "full"}),
    "sliding-full-fp32": (spec_of(n_layers=8, attention_spans=("sliding", "full") * 4, attention_window=8, **SMALL),
                          {"recipe": "fp32"}),
    "encoder-pooler": (spec_of(n_layers=4, architecture="encoder", mlp="gelu", norm="layernorm", post_norm=True,
                               pos_emb="learned", n_positions=64, lm_head=False, pooler=True, d_model=32, n_heads=4,
                               vocab_size=256, d_ff=64), {}),
}
FAST_SAMPLED = ("recompute-eager-tied-fp16", "moe-after-dense", "sliding-full-fp32")  # the others: slow tier


@pytest.fixture
def shallow(monkeypatch):
    """Sampling from 4 blocks on (the CLI's threshold is 9) where it measures fewer blocks than the model has,
    so that the runs of every block stay short."""
    monkeypatch.setattr(measure, "FULL_DEPTH_LAYERS", 3)


def test_sampling_finds_the_repeating_blocks(shallow):
    """A head of blocks of their own, then the shortest period repeated at least three times; None where
    sampling saves nothing."""
    plans = {name: measure.sampling(spec) for name, (spec, _) in SAMPLED.items()}
    assert plans["uniform"] == measure.Sampling(head=0, period=1, repeats=5)
    assert plans["moe-after-dense"] == measure.Sampling(head=1, period=1, repeats=5)
    assert plans["moe-every-other"] == measure.Sampling(head=0, period=2, repeats=4)  # dense, MoE, dense, ...
    assert plans["sliding-full-fp32"] == measure.Sampling(head=0, period=2, repeats=4)
    assert measure.sampling(spec_of(n_layers=4, n_dense_layers=1, n_experts=4, n_experts_per_token=1,
                                    d_ff_expert=16, **SMALL)) is None  # 2 + 3 blocks measured: no saving
    assert measure.sampling(spec_of(n_layers=3, **SMALL)) is None  # as shallow as the threshold: every block
    assert measure.sampling(load_model("t5-base")) is None  # two stacks
    irregular = spec_of(n_layers=12, n_experts=4, n_experts_per_token=1, d_ff_expert=16, moe_layers=(1, 2, 7), **SMALL)
    assert measure.sampling(irregular) is None


def test_deep_presets_are_sampled():
    assert measure.Sampling(0, 1, 126) == measure.sampling(load_model("llama-3.1-405b"))
    assert measure.Sampling(3, 1, 58) == measure.sampling(load_model("deepseek-v3"))  # 3 dense, 58 MoE blocks
    assert measure.Sampling(0, 2, 21) == measure.sampling(load_model("gemma-2-9b"))  # sliding, full, ...
    assert measure.sampling(spec_of(n_layers=8, **SMALL)) is None  # the CLI measures 8 blocks and fewer whole


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST_SAMPLED else pytest.mark.slow)
                                  for n in sorted(SAMPLED)])
def test_sampled_virtual_profile_equals_a_run_of_every_block(name, shallow):
    """Every figure a virtual profile prints (parameters, FLOPs in total and per component, the peak memory and
    its categories, the sdpa backend) is the same extrapolated from two depths as measured on every block."""
    spec, options = SAMPLED[name]
    sampled = virtual_profile(spec, 2, 16, **options)
    full = virtual_profile(spec, 2, 16, all_layers=True, **options)
    assert any(note.startswith("measured at ") for note in sampled.notes)
    assert not any(note.startswith("measured at ") for note in full.notes)
    a, b = sampled.to_json(), full.to_json()
    assert a.pop("notes")[:-1] == b.pop("notes")
    assert a == b and a["peak_memory_bytes"]["measured"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name, seq, options", [
    ("llama-3.2-1b", 2048, {}), ("llama-3.2-1b", 4096, {"recompute": "full"}), ("deepseek-v2-lite", 128, {}),
    ("gemma-2-9b", 256, {})])
def test_sampled_virtual_profile_of_a_mid_size_preset_equals_a_run_of_every_block(name, seq, options):
    """The same at full width: Llama-3.2-1B (16 blocks; the profile the docs show), DeepSeek-V2-Lite (a dense
    block, then 26 MoE blocks), Gemma-2-9B (42 blocks, sliding and full attention alternating)."""
    spec = load_model(name)
    sampled, full = virtual_profile(spec, 1, seq, **options), virtual_profile(spec, 1, seq, all_layers=True, **options)
    a, b = sampled.to_json(), full.to_json()
    assert a.pop("notes")[:-1] == b.pop("notes") and a == b


def test_all_layers_applies_to_virtual_runs_only():
    result = run("profile", "llmcalc-tiny", "--all-layers")
    assert result.exit_code == 2 and "--all-layers is not used without --virtual" in result.stderr
    result = run("profile", "llmcalc-tiny", "--virtual", "--finetune", "lora", "--all-layers")
    assert result.exit_code == 2 and "--all-layers" in result.stderr
