"""The profiler: the reference model against the formulas, counted by torch itself."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from llmcalc.analytic.flops import step_flops  # noqa: E402
from llmcalc.analytic.params import param_breakdown  # noqa: E402
from llmcalc.cli import cli  # noqa: E402
from llmcalc.presets import load_model, model_names  # noqa: E402
from llmcalc.profiling import measure  # noqa: E402
from llmcalc.profiling.counters import count_flops, register_cpu_sdpa  # noqa: E402
from llmcalc.profiling.measure import virtual_profile  # noqa: E402
from llmcalc.profiling.model import build_model, measured_breakdown  # noqa: E402
from llmcalc.spec import ModelSpec, SpecError  # noqa: E402

PRESETS = model_names()


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


DENSE = [n for n in PRESETS if not load_model(n).is_moe]
MOE = [n for n in PRESETS if load_model(n).is_moe]
# Issue 9's current-generation presets: 40-60 s each virtually; the fast tier checks them by count.
CURRENT_GENERATION = {"qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma-3-27b", "gpt-oss-20b",
                      "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "olmo-2-7b", "deepseek-v3.1", "kimi-k2",
                      "glm-4.5", "smollm3-3b"}


def _tiered(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in CURRENT_GENERATION else n for n in names]


@pytest.mark.parametrize("name", _tiered(DENSE + MOE))
def test_virtual_flops_match_the_formulas(name):
    """Forward and forward+backward FLOPs at seq 2048, in total and per component, within 1 % (they are
    exact); MoE presets against the active-expert figures."""
    result = virtual_profile(load_model(name), 1, 2048, "bf16-mixed", track_memory=False)
    flops = [c for c in result.comparisons if c.unit == "FLOP" and c.measured is not None]
    assert len(flops) >= 6
    for c in flops:
        assert abs(c.rel_error) <= 0.01, (c.name, c.analytic, c.measured)
    assert result.find("parameters").rel_error == 0
    assert result.find("forward FLOPs / attention S²" if load_model(name).architecture != "encoder-decoder"
                       else "forward FLOPs / encoder.attention S²").measured > 0


@pytest.mark.parametrize("name", ["llama-3.2-1b", "llama-2-7b", "mistral-7b", "qwen2.5-7b"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_virtual_peak_memory_within_ten_percent(name, recompute):
    """MemTracker's peak for a whole training step against the analytic memory model (bf16-mixed AdamW,
    FlashAttention), where activations dominate (batch 4 x 4096) and where they do not."""
    for batch, seq in ((4, 4096), (1, 1024)):
        result = virtual_profile(load_model(name), batch, seq, "bf16-mixed", recompute)
        peak = result.find("peak memory")
        assert abs(peak.rel_error) <= 0.10, (batch, seq, peak.analytic, peak.measured)


def test_virtual_moe_memory():
    result = virtual_profile(load_model("mixtral-8x7b"), 2, 2048, "bf16-mixed")
    assert abs(result.find("peak memory").rel_error) <= 0.10


@pytest.mark.parametrize("name", ["llmcalc-tiny", "llmcalc-small"])
def test_real_cpu_run_of_the_small_presets(name):
    result = measure.real_profile(load_model(name), "cpu", 4, 128, "fp32", steps=2, warmup=1,
                                  peak_flops=measure.calibrate("cpu", seconds=0.2), peak_source="calibrated")
    assert result.step_seconds > 0 and result.tokens_per_second > 0
    assert 0 < result.mfu and 0 < result.hfu and result.hfu >= result.mfu * 0.99
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
        return ModelSpec(**values)
    except SpecError:
        return ModelSpec(n_layers=1, d_model=16, n_heads=2, vocab_size=32, d_ff=32)


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


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


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
    for key in ("step_seconds", "tokens_per_second", "achieved_flops_per_s", "peak_flops_per_s", "mfu", "hfu"):
        assert real[key] > 0
    assert real["peak_flops_per_s"] == 0.5e12


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


def test_profile_bad_options():
    one_line_error(run("profile", "gpt2", "--virtual", "--counter", "fvcore"), "fvcore traces real tensors")
    one_line_error(run("profile", "gpt2", "--virtual", "--recipe", "bf16-mixed-fp32-grads"), "'--recipe': 'bf16-mixed-fp32-grads' is not one of")
    one_line_error(run("profile", "gpt2", "--device", "tpu"), "'--device': 'tpu' is not one of 'auto', 'cpu', 'cuda'")
