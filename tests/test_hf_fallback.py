"""The transformers fallback for model_types llmcalc has no formula for.

References are built here, independently of llmcalc: parameters are sum(p.numel()) of the
transformers model built on the meta device; FLOPs are torch's FlopCounterMode over a real CPU
forward with eager attention (plain matmuls, which torch counts natively: no sdpa registration)
and, for MoE, transformers' own eager expert loop over the experts the router really picked.
"""

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import one_line_error, run  # noqa: E402
from reference import stored_state  # noqa: E402

from llmcalc.fallback import FallbackModel, load_counted  # noqa: E402
from llmcalc.profiling.hf_fallback import classify  # noqa: E402
from llmcalc.spec import UnknownModelType, spec_from_hf  # noqa: E402

# Tiny configs of model_types with no llmcalc family (after issue 9's analytic parts too).
CONFIGS = {
    "codegen": dict(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=1000, n_positions=256),
    "xglm": dict(num_layers=2, d_model=64, attention_heads=4, ffn_dim=128, vocab_size=1000),
    "biogpt": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                   vocab_size=1000),
    "persimmon": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                      vocab_size=1000),
    "minimax": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=32, vocab_size=1000, num_local_experts=4, num_experts_per_tok=2),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def write(tmp_path, model_type, **changes):
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **CONFIGS.get(model_type, {}), **changes}))
    return path


def json_out(*args) -> dict:
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def hf_model(model_type, device="meta", **extra):
    config = transformers.AutoConfig.for_model(model_type, **{**CONFIGS[model_type], **extra})
    # eager experts: transformers' loop over the experts the router picked (its default on CPU, grouped_mm,
    # runs a kernel that FlopCounterMode does not count)
    experts = {"experts_implementation": "eager"} if "num_local_experts" in CONFIGS[model_type] else {}
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", **experts)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_params_equal_the_transformers_model_built_on_meta(tmp_path, model_type):
    model = hf_model(model_type)
    data = json_out("params", write(tmp_path, model_type))
    assert data["method"] == "transformers" and data["transformers_class"] == type(model).__name__
    # what save_pretrained writes: parameters and persistent buffers (MiniMax-Text-01's decay tables), tied once
    assert data["total"] == sum(t.numel() for t in stored_state(model).values())
    assert sum(data["components"].values()) == data["total"]
    embed = model.get_input_embeddings().weight.numel()
    assert data["components"]["embedding/tokens"] == embed
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert data["tied_embeddings"] == tied
    if not tied:  # the untied head's weight (and its bias, if any), filed as the head
        head = model.get_output_embeddings()
        assert data["components"]["head/lm_head"] == sum(p.numel() for p in head.parameters())


def test_tied_head_is_counted_once(tmp_path):
    untied = json_out("params", write(tmp_path, "codegen", tie_word_embeddings=False))
    tied = json_out("params", write(tmp_path, "codegen", tie_word_embeddings=True))
    # CodeGen's lm_head has a bias of V: only the V x D weight is shared when tied
    assert untied["total"] - tied["total"] == 1000 * 64
    assert tied["total"] == sum(t.numel() for t in stored_state(hf_model("codegen", tie_word_embeddings=True)).values())


def test_components_by_hand_for_codegen(tmp_path):
    # modeling_codegen.py: fused qkv_proj (no bias), out_proj (no bias), fc_in/fc_out with biases (n_inner
    # null -> 4·D), ln_1 per block and ln_f, untied lm_head with bias.
    D, V, L, F = 64, 1000, 2, 256
    c = json_out("params", write(tmp_path, "codegen"))["components"]
    assert c == {"embedding/tokens": V * D, "attention/out_proj": L * D * D, "attention/qkv_proj": L * 3 * D * D,
                 "mlp": L * (D * F + F + F * D + D), "norm/final": 2 * D, "norm/layers": L * 2 * D,
                 "head/lm_head": V * D + V}


def test_moe_components_and_active_params(tmp_path):
    data = json_out("params", write(tmp_path, "minimax"))
    model = hf_model("minimax")
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert data["components"]["moe/experts"] == experts
    # 2 of 4 experts per token: half the routed experts' parameters are skipped
    assert data["active_per_token"] == data["total"] - experts // 2


def reference_forward_flops(model_type, seq):
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = hf_model(model_type, device="cpu").eval()
    ids = torch.randint(0, 1000, (1, seq))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, use_cache=False)
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", ["codegen", "xglm", "persimmon", "minimax"])
def test_forward_flops_equal_a_real_cpu_forward(tmp_path, model_type):
    seq = 32
    expected = reference_forward_flops(model_type, seq)
    data = json_out("flops", write(tmp_path, model_type), "--seq-len", seq)
    assert data["method"] == "transformers"
    assert data["forward_flops"] == pytest.approx(expected, rel=0.005)
    assert data["total_flops"] == 3 * data["forward_flops"]
    assert sum(data["groups"].values()) == data["forward_flops"]


def test_codegen_flops_by_hand(tmp_path):
    # per layer: QKV 2·S·D·3D, out 2·S·D², attention core 2 x 2·S²·D, FFN 2 x 2·S·D·4D; head 2·S·D·V
    D, V, L, S = 64, 1000, 2, 128
    data = json_out("flops", write(tmp_path, "codegen"), "--seq-len", S)
    g = data["groups"]
    assert g["attention projections"] == L * 2 * S * D * 4 * D
    assert g["attention S²"] == L * 4 * S * S * D
    assert g["FFN"] == L * 4 * S * D * 4 * D
    assert g["LM head"] == 2 * S * D * V
    causal = json_out("flops", write(tmp_path, "codegen"), "--seq-len", S, "--causal", "--batch-size", 3)
    assert causal["forward_flops"] == 3 * (data["forward_flops"] - g["attention S²"] // 2)
    full = json_out("flops", write(tmp_path, "codegen"), "--seq-len", S, "--recompute", "full")
    assert full["hardware_flops"] == 4 * data["forward_flops"]


def test_moe_flops_are_those_of_the_routed_experts(tmp_path):
    # minimax: 2 layers, 4 experts of which 2 per token, experts D=64 -> F=32 gated (gate_up 64x64, down 32x64)
    S, D, F, k, L = 64, 64, 32, 2, 2
    data = json_out("flops", write(tmp_path, "minimax"), "--seq-len", S)
    router = 2 * S * D * 4
    assert data["groups"]["FFN"] == L * (S * k * (2 * D * 2 * F + 2 * F * D) + router)
    assert any("routed experts" in line for line in data["conventions"])


def test_analytic_commands_say_analytic():
    assert json_out("params", "llama-3-8b")["method"] == "analytic"
    assert json_out("flops", "llama-3-8b", "--seq-len", 512)["method"] == "analytic"
    train = json_out("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--mfu", "0.4")
    assert train["method"] == "analytic"


def test_table_output_says_where_the_numbers_come_from(tmp_path):
    for command in (["params"], ["flops", "--seq-len", "64"]):
        result = run(command[0], write(tmp_path, "codegen"), *command[1:])
        assert result.exit_code == 0, result.output
        assert "method: transformers" in result.stdout and "not from an llmcalc formula" in result.stdout


def test_train_uses_the_counted_flops(tmp_path):
    path = write(tmp_path, "codegen")
    flops = json_out("flops", path, "--seq-len", 256)
    params = json_out("params", path)
    train = json_out("train", path, "--tokens", "1e9", "--gpu", "h100-sxm", "--mfu", "0.4", "--seq-len", 256)
    assert train["method"] == "transformers"
    assert train["total_flops"] == pytest.approx(flops["flops_per_token"] * 1e9)
    assert train["six_n_t_flops"] == 6 * params["total"] * 1e9
    assert "CodeGenForCausalLM" in train["flops_basis"]


@pytest.mark.parametrize("argv", [["profile", "--virtual", "--layers", "1"],
                                  ["serve", "--gpu", "h100-sxm"],
                                  ["flops", "--recompute", "selective"]])
def test_commands_that_need_a_formula_refuse_in_one_line(tmp_path, argv):
    line = one_line_error(argv[0], write(tmp_path, "codegen"), *argv[1:])
    assert "codegen" in line


def test_without_transformers_one_line_says_what_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("transformers", "torch") else real(name, *a))
    line = one_line_error("params", write(tmp_path, "codegen"))
    assert "pip install 'llmcalc[dev]'" in line and "transformers" in line


def test_model_type_unknown_to_transformers_too(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "no_such_model", "hidden_size": 64}))
    line = one_line_error("params", path)
    assert "'no_such_model'" in line and "unknown to llmcalc and to the installed transformers" in line


def test_config_transformers_cannot_build_is_one_line(tmp_path):
    # PersimmonAttention refuses a hidden_size its heads do not divide (64 / 5)
    line = one_line_error("params", write(tmp_path, "persimmon", num_attention_heads=5))
    assert "transformers could not build 'persimmon'" in line and "divisible by num_heads" in line


def test_data_dependent_expert_loop_runs_on_real_tensors(tmp_path, monkeypatch):
    """JetMoE's expert loop runs the experts that were hit (data-dependent shapes, which fake tensors cannot follow):
    its forward runs on real CPU tensors. Each token's k = 2 of 8 GLU experts (JetMoeConfig's defaults) cost
    2·(64·2·32 + 32·64) FLOPs, the router 2·64·8: 32 tokens x 2 layers of them, whatever the routing."""
    import llmcalc.profiling.hf_fallback as hf

    path = tmp_path / "jetmoe.json"
    path.write_text(json.dumps({"model_type": "jetmoe", "num_hidden_layers": 2, "hidden_size": 64,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32,
                                "vocab_size": 1000}))
    assert json_out("params", path)["total"] > 0
    ffn = json_out("flops", path, "--seq-len", 32)["groups"]["FFN"]
    assert ffn == 32 * 2 * (2 * 2 * (64 * 2 * 32 + 32 * 64) + 2 * 64 * 8)
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(hf, "REAL_RUN_BYTES", 0)  # past the real run's limit: one line, no guess
    line = one_line_error("flops", path, "--seq-len", 32)
    assert "needs tensor values" in line and "DataDependentOutputException" in line


def test_unknown_model_type_is_an_exception_carrying_the_config():
    with pytest.raises(UnknownModelType) as err:
        spec_from_hf({"model_type": "codegen", **CONFIGS["codegen"]}, "tiny")
    assert err.value.config["model_type"] == "codegen" and err.value.name == "tiny"


def test_results_are_cached_per_config(tmp_path):
    path = write(tmp_path, "codegen")
    first = load_counted(str(path))
    assert isinstance(first, FallbackModel)
    cached = list((tmp_path / "cache" / "hf_fallback").glob("*.json"))
    assert len(cached) == 1
    cached[0].write_text("{ damaged")  # a damaged cache file is ignored and rewritten
    assert load_counted(str(path)).components == first.components


def test_classify_module_names():
    experts = {"model.layers.0.mlp"}
    assert classify(["model", "layers", "0", "self_attn", "q_proj"], experts) == "attention/q_proj"
    assert classify(["model", "layers", "0", "self_attn", "q_norm"], experts) == "norm/layers"
    assert classify(["model", "layers", "0", "mlp", "experts"], experts) == "moe/experts"
    assert classify(["model", "layers", "0", "mlp", "gate"], experts) == "moe/router"
    assert classify(["model", "layers", "0", "mlp", "shared_expert", "up_proj"], experts) == "moe/shared_experts"
    assert classify(["model", "layers", "1", "mlp", "gate_proj"], experts) == "mlp"
    assert classify(["transformer", "wpe"], set()) == "embedding/positions"
    assert classify(["model", "layers", "0", "mixer", "conv1d"], set()) == "model.layers.*.mixer.conv1d"


@pytest.mark.slow
def test_a_70b_class_config_counts_on_fake_tensors(tmp_path):
    # Persimmon-style dense model at 70B scale (no llmcalc formula): 80 layers, D 8192, 64 heads, fused biased
    # query_key_value, biased dense / MLP linears (modeling_persimmon.py), squared-ReLU MLP (no gate), two
    # LayerNorms (weight and bias) per block and a final one, untied head; qk_layernorm off
    L, D, H, F, V = 80, 8192, 64, 28672, 128256
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"model_type": "persimmon", "num_hidden_layers": L, "hidden_size": D,
                                "num_attention_heads": H, "intermediate_size": F, "vocab_size": V,
                                "qk_layernorm": False}))
    norm = 2 * D
    block = (D * 3 * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D) + 2 * norm
    assert json_out("params", path)["total"] == 2 * V * D + L * block + norm
    S = 4096
    data = json_out("flops", path, "--seq-len", S)
    projections = 2 * S * (3 * D * D + D * D)  # FlopCounterMode counts addmm's 2mnk, not the bias add
    assert data["forward_flops"] == L * (projections + 4 * S * S * D + 2 * S * 2 * D * F) + 2 * S * D * V


def test_the_fallback_modules_import_nothing_heavy_until_used():
    import subprocess
    import sys

    code = ("import sys, llmcalc.fallback, llmcalc.views.params, llmcalc.views.flops\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_nonsense_sizes_are_one_line(tmp_path):
    assert "n_layer must be a positive whole number, got -1" in one_line_error(
        "params", write(tmp_path, "codegen", n_layer=-1))
    assert "divisible" in one_line_error("params", write(tmp_path, "codegen", n_head=5))


def test_sizes_left_to_the_config_class_are_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "codegen", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8}))
    data = json_out("params", path)
    vocab = transformers.AutoConfig.for_model("codegen").vocab_size
    assert data["defaulted_by_config_class"] == {"vocab_size": vocab}
    assert data["components"]["embedding/tokens"] == vocab * 64


BART = dict(encoder_layers=2, decoder_layers=2, d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000, max_position_embeddings=256)


def test_encoder_decoder_is_built_as_seq2seq_with_stacks_apart(tmp_path):
    from torch.utils.flop_counter import FlopCounterMode

    path = tmp_path / "bart.json"
    path.write_text(json.dumps({"model_type": "bart", **BART}))
    config = transformers.AutoConfig.for_model("bart", **BART)
    with torch.device("meta"):
        meta = transformers.AutoModelForSeq2SeqLM.from_config(config)
    data = json_out("params", path)
    assert data["transformers_class"] == "BartForConditionalGeneration"
    assert data["total"] == sum(t.numel() for t in stored_state(meta).values())
    assert data["groups"]["decoder.cross_attention"] == 2 * (4 * 64 * 64 + 4 * 64)
    assert data["components"]["embedding/tokens"] == 1000 * 64  # the shared table, whatever its module name
    real = transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()
    ids = torch.randint(0, 1000, (1, 64))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        real(input_ids=ids, decoder_input_ids=ids, use_cache=False)
    flops = json_out("flops", path, "--seq-len", 64)
    assert flops["forward_flops"] == pytest.approx(counter.get_total_flops(), rel=0.005)
    causal = json_out("flops", path, "--seq-len", 64, "--causal")
    g = flops["groups"]  # --causal halves decoder self-attention only, as the analytic convention
    assert causal["forward_flops"] == flops["forward_flops"] - g["decoder.attention S²"] // 2
    assert causal["groups"]["encoder.attention S²"] == g["encoder.attention S²"]


def test_train_step_time_is_predicted_from_what_transformers_measured(tmp_path):
    path = write(tmp_path, "codegen")
    predicted = json_out("train", path, "--tokens", "1e9", "--gpu", "h100-sxm", "--global-batch", 64)
    assert predicted["method"] == "transformers" and predicted["mfu_source"] == "predicted"  # test_measured_step.py
    given = json_out("train", path, "--tokens", "1e9", "--gpu", "h100-sxm", "--mfu", 0.4, "--global-batch", 64)
    assert given["method"] == "transformers" and given["mfu"] == 0.4
    line = one_line_error("train", path, "--tokens", "1e9", "--gpu", "h100-sxm")
    assert "--mfu" in line


def test_finetune_needs_the_formula(tmp_path):
    line = one_line_error("params", write(tmp_path, "codegen"), "--finetune", "lora")
    assert "--finetune" in line and "codegen" in line


def test_a_model_that_converts_modules_in_init_is_built_on_meta_then_faked():
    """DeepSeek-V4 casts modules in __init__, which FakeTensorMode refuses ("Couldn't swap
    DeepseekV4RMSNorm.weight"): the fallback constructs on the meta device and fakes it for the forward. Its
    counts equal the analytic formula's (deepseek_v4 has one; its forward against FlopCounterMode is held in
    tests/test_recent_families.py), the routed experts run by batched_mm (k per token)."""
    from llmcalc.analytic.flops import forward_ops
    from llmcalc.analytic.params import count_params
    from llmcalc.profiling.hf_fallback import fallback_count

    config = dict(model_type="deepseek_v4", num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, q_lora_rank=8, o_groups=2, o_lora_rank=4, index_n_heads=1,
                  index_head_dim=16, index_topk=2, moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2,
                  sliding_window=8, hc_mult=2, qk_rope_head_dim=8, vocab_size=64, tie_word_embeddings=False,
                  compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
                  layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
                  mlp_layer_types=["moe", "moe"], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    counted = fallback_count(config, seq_len=24)
    spec = spec_from_hf(config)
    # every stored tensor, the routers' e_score_correction_bias buffers too (4 a layer, counted by both)
    assert sum(counted["components"].values()) == count_params(spec).total
    assert counted["flops"]["forward"] == sum(forward_ops(spec, 1, 24).values())


def _never_built(monkeypatch):
    """Make building a model with transformers fail the test: a refusal must come before it."""
    import llmcalc.profiling.hf_fallback as hf_fallback

    def built(*args, **kwargs):
        raise AssertionError("the fallback built a model")
    monkeypatch.setattr(hf_fallback, "fallback_count", built)


@pytest.mark.parametrize("command", [["params"], ["flops"], ["memory"]])
@pytest.mark.parametrize("key, value, line", [
    ("num_hidden_layers", 20_000, "n_layers (20,000) is beyond the sane maximum of 10,000"),
    ("hidden_size", 2**25, "d_model (33,554,432) is beyond the sane maximum of 16,777,216"),
    ("intermediate_size", 2**25, "d_ff (33,554,432) is beyond the sane maximum of 16,777,216"),
    ("num_attention_heads", 2**25, "n_heads (33,554,432) is beyond the sane maximum of 16,777,216"),
    ("vocab_size", 2**25, "vocab_size (33,554,432) is beyond the sane maximum of 16,777,216"),
])
def test_the_fallback_refuses_what_the_formula_refuses_before_building(tmp_path, monkeypatch, command, key, value,
                                                                       line):
    """Issue 40 #7: a 20,000-layer config took 21-56 s and 1.1 GiB through transformers; the formula path refuses
    it at once. The same one line, before anything is built, for a fallback model_type, in text_config too, and
    under LLMCALC_FORCE_TRANSFORMERS."""
    _never_built(monkeypatch)
    shape = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, head_dim=16, intermediate_size=128,
                 vocab_size=1000)
    formula = tmp_path / "llama.json"
    formula.write_text(json.dumps({"model_type": "llama", **shape, key: value}))
    assert one_line_error(*command, formula) == f"llmcalc: error: {formula}: {line}"
    fallback = write(tmp_path, "persimmon", **{key: value})
    assert one_line_error(*command, fallback) == f"llmcalc: error: {fallback}: {line}"
    nested = write(tmp_path, "persimmon", text_config={**shape, key: value})
    assert one_line_error(*command, nested) == f"llmcalc: error: {nested}: {line}"
    monkeypatch.setenv("LLMCALC_FORCE_TRANSFORMERS", "1")
    assert one_line_error(*command, formula) == f"llmcalc: error: {formula}: {line}"


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
NOT_LANGUAGE_MODELS = {  # model_type -> (config, what the one line names)
    "vit": (dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 image_size=224, patch_size=16), "ViTModel reads pixel_values, not token ids"),
    "clip_vision_model": (dict(SMALL, image_size=32, patch_size=16), "CLIPVisionModel reads pixel_values"),
    "wav2vec2": (dict(SMALL, vocab_size=32), "Wav2Vec2Model reads input_values"),
    "whisper": (dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                     num_mel_bins=16, max_source_positions=32, max_target_positions=32, pad_token_id=0,
                     bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
                "WhisperModel reads input_features"),  # was counted as WhisperForCausalLM: the decoder only
    "clip": (dict(text_config=dict(SMALL, vocab_size=1000), vision_config=dict(SMALL, image_size=32, patch_size=16)),
             "CLIPModel has no token embedding"),  # was an internal error (NotImplementedError, exit 70)
}


@pytest.mark.parametrize("command", [["params"], ["flops", "--seq-len", "16"], ["memory", "--seq-len", "16"]])
@pytest.mark.parametrize("model_type", sorted(NOT_LANGUAGE_MODELS))
def test_a_model_that_is_not_a_language_model_is_refused_in_one_line(tmp_path, model_type, command):
    """Issue 40 #11: a ViT config ended in "AttributeError: 'NoneType' object has no attribute 'dtype'" (its forward
    was handed token ids); a vision, audio or dual-encoder model is refused by name instead."""
    config, named = NOT_LANGUAGE_MODELS[model_type]
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **config}))
    line = one_line_error(command[0], path, *command[1:])
    assert f"model_type '{model_type}' is not a language model: transformers' {named}" in line, line


def test_a_text_encoder_of_a_contrastive_model_gets_no_lm_head(tmp_path):
    """CLIP's text tower is a text model transformers builds with no causal-LM class, like Qwen2.5-VL's; but CLIP
    generates no text and stores no LM head, so none is added: its count is CLIPTextModel's."""
    config = dict(SMALL, vocab_size=1000)
    path = tmp_path / "clip_text.json"
    path.write_text(json.dumps({"model_type": "clip_text_model", **config}))
    with torch.device("meta"):
        model = transformers.CLIPTextModel(transformers.CLIPTextConfig(**config))
    data = json_out("params", path)
    assert data["transformers_class"] == "CLIPTextModel"
    assert data["total"] == sum(t.numel() for t in stored_state(model).values())
    assert json_out("flops", path, "--seq-len", 16)["forward_flops"] > 0


def _built_with_text_config_key(monkeypatch, model_type, config):
    """The parameters of transformers' causal LM of `model_type` built on meta from the config as given, text_config
    key and all. transformers 5.25 builds its modules from the top-level keys but then fails setting up generation
    (get_text_config returns the stray dict: 'dict' object has no attribute 'to_dict'), which is skipped here."""
    monkeypatch.setattr(transformers.GenerationConfig, "from_model_config", classmethod(lambda cls, _: cls()))
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    assert isinstance(hf_config.text_config, dict)  # kept as a plain attribute: no sub-config reads it
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(t.numel() for t in stored_state(model).values())


TOP = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000)
STRAY_TEXT = dict(hidden_size=128, num_hidden_layers=6, num_attention_heads=8, intermediate_size=256, vocab_size=2000)


@pytest.mark.parametrize("model_type", ["llama", "persimmon"])  # a formula family; one only transformers counts
def test_a_text_config_key_of_a_model_without_sub_configs_is_not_the_model(tmp_path, monkeypatch, model_type):
    """Issue 40 #12: a llama config carrying a text_config key was counted from its text_config, as a multimodal
    wrapper; LlamaConfig has no sub-configs, so transformers builds the top-level keys and so does llmcalc now (and
    says that text_config is ignored)."""
    config = dict(TOP, text_config=STRAY_TEXT)
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **config}))
    expected = _built_with_text_config_key(monkeypatch, model_type, config)
    data = json_out("params", path)
    assert data["total"] == expected
    table = run("params", path).stdout
    assert f"text_config ignored: transformers' {model_type} config has no" in table


def test_a_vision_config_key_of_a_formula_family_is_not_a_multimodal_wrapper(tmp_path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"model_type": "llama", **TOP, "vision_config": {"hidden_size": 8}}))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"model_type": "llama", **TOP}))
    assert json_out("params", path)["total"] == json_out("params", plain)["total"]


# Tiny configs of families whose router keeps a per-expert bias that the checkpoint stores: Laguna's
# e_score_correction_bias and AFMoE's (Arcee Trinity) expert_bias are parameters with requires_grad=False, MiniMax-M2's
# e_score_correction_bias a persistent buffer (minimax_m2 has a formula; forced through transformers here).
ROUTER_BIAS = {
    "laguna": dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=8,
                   num_experts_per_tok=2, vocab_size=1000, mlp_layer_types=["dense", "sparse", "sparse"],
                   layer_types=["full_attention"] * 3, num_attention_heads_per_layer=[4, 4, 4]),
    "afmoe": dict(num_hidden_layers=3, num_dense_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                  num_shared_experts=1, vocab_size=1000, global_attn_every_n_layers=3, sliding_window=16),
    "minimax_m2": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, vocab_size=1000, rotary_dim=8),
}


def saved_checkpoint(tmp_path, model_type) -> dict[str, int]:
    """{tensor name: elements} of the checkpoint transformers' save_pretrained writes of the tiny model (built on
    the CPU, saved as safetensors, read back with safetensors' own reader)."""
    from safetensors import safe_open

    config = transformers.AutoConfig.for_model(model_type, **ROUTER_BIAS[model_type])
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / model_type)
    out = {}
    for path in sorted((tmp_path / model_type).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                out[name] = f.get_slice(name).get_shape()
    return {name: int(torch.Size(shape).numel()) for name, shape in out.items()}


@pytest.mark.parametrize("model_type", sorted(ROUTER_BIAS))
def test_params_count_every_tensor_the_checkpoint_stores(tmp_path, monkeypatch, model_type):
    """Issue 39: the fallback dropped router biases that transformers keeps frozen (requires_grad=False) or as a
    buffer, which the checkpoint stores (Laguna XS 9,984 short, Trinity 6,912). `params` counts what save_pretrained
    writes: the router biases in moe/router, and a checkpoint's total to the element."""
    monkeypatch.setenv("LLMCALC_FORCE_TRANSFORMERS", "1")
    stored = saved_checkpoint(tmp_path, model_type)
    data = json_out("params", write(tmp_path, model_type, **ROUTER_BIAS[model_type]))
    assert data["method"] == "transformers"
    assert data["total"] == sum(stored.values())
    biases = sum(n for name, n in stored.items() if name.endswith(("e_score_correction_bias", "expert_bias")))  # 2 MoE
    assert biases == 2 * 8  # one E-vector per MoE layer
    assert data["frozen"] == biases  # stored, not trained
    # filed with the router (its weight and its bias), wherever the family keeps the bias (the checkpoint's names:
    # Laguna's under mlp.experts, MiniMax-M2's under block_sparse_moe)
    bias = ("e_score_correction_bias", "expert_bias")
    router = sum(n for name, n in stored.items() if ".router." in name or ".gate." in name or name.endswith(bias))
    assert data["components"]["moe/router"] == router


def test_formula_and_fallback_count_the_same_stored_router_bias(tmp_path, monkeypatch):
    """MiniMax-M2 has a formula: it counts the e_score_correction_bias buffer as the fallback and the checkpoint do."""
    stored = saved_checkpoint(tmp_path, "minimax_m2")
    data = json_out("params", write(tmp_path, "minimax_m2", **ROUTER_BIAS["minimax_m2"]))
    assert data["method"] == "analytic" and data["total"] == sum(stored.values())
    assert data["components"]["moe/router"] == 2 * (64 * 8 + 8)
