"""`memory` through transformers (analytic/measured.py, profiling/hf_measure.py), held against independent figures.

The fallback is forced (LLMCALC_FORCE_TRANSFORMERS=1) on model types llmcalc has a formula for, and what
transformers measured is compared with llmcalc's analytic figures, written out where they differ for a known
reason; two real model types without a formula (codegen, arcee; tiny configs under tests/configs/fallback/)
run end to end through the CLI, bad input included.
"""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import cli_json, one_line_error, run  # noqa: E402
from tinyhf import CONFIGS, GEMMA3, LLAMA, QWEN3_MOE, QWEN3_NEXT, both_paths, write_config  # noqa: E402

from llmcalc.analytic.inference import kv_layers  # noqa: E402
from llmcalc.analytic.memory import training_memory  # noqa: E402
from llmcalc.analytic.params import count_params  # noqa: E402
from llmcalc.analytic.vllm import kv_groups  # noqa: E402
from llmcalc.fallback import FORCE_ENV, load_measured  # noqa: E402
from llmcalc.spec import spec_from_hf  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def forced(tmp_path, monkeypatch, hf, seq=256):
    path = write_config(tmp_path, hf, f"{hf['model_type']}.json")
    monkeypatch.setenv(FORCE_ENV, "1")
    return load_measured(str(path), seq), spec_from_hf(hf, "ref")


def test_llama_forced_through_transformers_matches_the_formula(tmp_path, monkeypatch):
    measured, spec = forced(tmp_path, monkeypatch, LLAMA, 512)
    assert measured.total == count_params(spec).total
    # KV: 2 (K, V) x 2 KV heads x head_dim 64 elements per token per layer, no window, no state
    assert [(k.elements_per_token, k.cap_tokens, k.state_elements) for k in measured.kv] == [(2 * 2 * 64, None, 0)] * 4
    assert [k.elements_per_token * 2 for k in measured.kv] == [layer.bytes_per_token for layer in kv_layers(spec)]
    # sdpa on fake CPU tensors is the flash kernel: nothing grows with s² (the fit's b is a few int64 scalars' noise)
    assert abs(measured.activation_terms()[1]) * 512**2 < 1e-5 * measured.activation_runs[-1]["bytes"]
    est = training_memory(spec, 1, 512)
    from llmcalc.analytic.memory_plan import MemoryRequest, plan_memory

    mine = plan_memory(measured, MemoryRequest(seq_len=512)).estimate
    for part in ("weights", "gradients", "master weights", "optimizer states"):
        assert mine.components()[part] == est.components()[part]
    # Activations: transformers' LlamaRMSNorm saves an fp32 copy of its input (hidden_states.to(torch.float32)):
    # 9 norms (2 per layer + the final one) x 512 tokens x 256 x 4 B = 4.72 MB that llmcalc's fused-norm itemisation
    # counts as a bf16 input and an fp32 rstd; with it the two agree within 3 %, without it within 15 %.
    analytic = sum(est.activations.per_layer.values()) + est.activations.logits_and_loss
    upcasts = 9 * 512 * 256 * 4
    saved = mine.components()["activations"]
    assert abs(saved / analytic - 1) < 0.15
    assert abs((saved - upcasts) / (analytic - 9 * 512 * 256 * 2) - 1) < 0.03


def test_gemma3_sliding_layers_stop_at_their_window(tmp_path, monkeypatch):
    measured, spec = forced(tmp_path, monkeypatch, GEMMA3)
    # transformers' DynamicSlidingWindowLayer keeps sliding_window - 1 = 31 past tokens (the new token completes
    # the window of 32), as llmcalc's KvLayer.cached_tokens says
    assert [k.cap_tokens for k in measured.kv] == [31, 31, None]
    assert [layer.cached_tokens(10**6) if layer.span else None for layer in kv_layers(spec)] == [31, 31, None]
    assert [k.elements_per_token * 2 for k in measured.kv] == [layer.bytes_per_token for layer in kv_layers(spec)]


@pytest.mark.parametrize("hf", [LLAMA, GEMMA3], ids=["llama", "gemma3"])
def test_measured_cache_gives_vllm_the_formulas_kv_layers(tmp_path, monkeypatch, hf):
    """MeasuredModel.kv_layers: the records vLLM's hybrid allocator groups, from the cache transformers allocated,
    equal inference.kv_layers' from the config (llama: 4 full layers of 2·2·64 x 2 B = 512 B per token; gemma3: two
    sliding layers of span 32 (31 tokens kept + the new one) and one full layer of 2·2·16 x 2 B = 128 B), and so
    do the groups vLLM makes of them."""
    measured, spec = forced(tmp_path, monkeypatch, hf)
    assert measured.kv_layers("bf16") == kv_layers(spec, "bf16")
    assert measured.kv_layers("fp8") == kv_layers(spec, "fp8")
    assert kv_groups(measured.kv_layers(), 16) == kv_groups(kv_layers(spec), 16)


def test_hybrid_linear_attention_state_is_per_sequence(tmp_path, monkeypatch):
    measured, spec = forced(tmp_path, monkeypatch, QWEN3_NEXT)
    assert measured.total == count_params(spec).total
    analytic = kv_layers(spec)
    # elements equal; bytes differ: transformers keeps the gated-DeltaNet recurrent state in fp32, llmcalc bf16
    assert [k.state_elements for k in measured.kv] == [layer.state_bytes / 2 for layer in analytic]
    assert [k.elements_per_token for k in measured.kv[3:]] == [analytic[3].bytes_per_token / 2]
    assert {t.ep for t in measured.tensors if ".experts." in t.name} == {"grouped_gemm"}
    # as vLLM's allocator records: conv window (2·2·16 + 4·16 = 128 channels x kernel 4 = 512 elements) at bf16 and
    # recurrent state (4 value heads x 16 x 16 = 1,024) at fp32 = 1,024 + 4,096 B, where llmcalc's formula has all
    # 1,536 at bf16 (3,072 B); the full-attention layer's record is the formula's
    mine = measured.kv_layers()
    assert [layer.state_bytes for layer in mine[:3]] == [512 * 2 + 1024 * 4] * 3
    assert mine[3] == analytic[3]


@pytest.mark.parametrize("name", ["codegen-tiny", "arcee-tiny"])
def test_memory_of_a_model_without_a_formula_end_to_end(name):
    data = cli_json("memory", str(CONFIGS / f"{name}.json"), "--seq-len", "256")
    assert data["method"] == "transformers" and set(data["measured_from"]) >= {"parameters", "activations"}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**{k: v for k, v in json.loads((CONFIGS / f"{name}.json").read_text()).items()
                                             if not k.startswith("_")}))
    n = sum(p.numel() for p in model.parameters())  # unique tensors: a tied head once
    assert data["params_on_gpu"] == n
    assert data["components"]["weights"] == 2 * n and data["components"]["optimizer states"] == 8 * n


def test_tensor_parallel_shards_by_transformers_plan():
    one = cli_json("memory", str(CONFIGS / "arcee-tiny.json"), "--seq-len", "256")
    two = cli_json("memory", str(CONFIGS / "arcee-tiny.json"), "--seq-len", "256", "--tp", "2")
    # arcee's plan: q/k/v/up colwise, o/down rowwise, embedding rowwise (vocab), lm_head colwise; the RMSNorms
    # (2 per layer + the final one, 64 wide each) replicated
    norms = (2 * 2 + 1) * 64
    assert two["params_on_gpu"] == (one["params_on_gpu"] - norms) / 2 + norms
    assert two["components"]["activations"] == one["components"]["activations"] / 2


@pytest.mark.parametrize("argv, words", [
    (["--tp", "4"], "does not divide the 2 heads of model.layers.*.self_attn.k_proj.weight"),
    (["--tp", "3"], "--tp 3 does not divide"),
    (["--recompute", "full"], "--recompute full"),
    (["--pp", "2"], "--pp 2"),
    (["--recipe", "fp8"], "--recipe fp8"),
    (["--finetune", "lora"], "--finetune"),
])
def test_bad_input_is_one_line(argv, words):
    assert words in one_line_error("memory", str(CONFIGS / "arcee-tiny.json"), "--seq-len", "256", *argv)


def test_second_call_is_read_from_the_cache(tmp_path, monkeypatch):
    import llmcalc.profiling.hf_fallback as hf

    first = cli_json("memory", str(CONFIGS / "codegen-tiny.json"), "--seq-len", "128")
    monkeypatch.setattr(hf, "fallback_count", lambda *a, **k: pytest.fail("rebuilt despite the cache"))
    assert cli_json("memory", str(CONFIGS / "codegen-tiny.json"), "--seq-len", "128") == first


# --- infer ---------------------------------------------------------------------------------------------------------

LLAMA_INFER = {**LLAMA, "max_position_embeddings": 4096}
INFER = ("--gpu", "h100-sxm", "--prompt", "512", "--generate", "64", "--batch-size", "4")


@pytest.mark.parametrize("hf", [LLAMA_INFER, QWEN3_MOE], ids=["llama", "qwen3_moe"])
def test_infer_forced_through_transformers_matches_the_formula(tmp_path, monkeypatch, hf):
    analytic, measured = both_paths(tmp_path, monkeypatch, hf, "infer", *INFER)
    assert measured["method"] == "transformers" and "decode_flops" in measured["measured_from"]
    for key in ("weights_bytes", "kv_cache_bytes_per_token", "state_bytes_per_sequence_per_gpu", "decode_seconds"):
        assert measured[key] == analytic[key], key
    # the MoE's weights read: the routed experts 4 tokens hit, E·(1 - (1 - k/E)^4), as the formula reads them
    assert measured["decode_weight_bytes_per_gpu"] == analytic["decode_weight_bytes_per_gpu"]
    # prefill: the sum of the counted decode steps attends P(P+1)/2 (query, key) pairs per head (transformers' causal
    # mask keeps the diagonal); llmcalc's causal halves the S² scores, P²/2: the gap is per_key x P/2 per sequence
    # per key: layers x 2 (QKᵀ, PV) x 2 (multiply-add) x heads x head_dim
    per_key = {"llama": 4 * 2 * 2 * 4 * 64, "qwen3_moe": 2 * 2 * 2 * 4 * 16}[hf["model_type"]]
    assert measured["prefill_flops"] - analytic["prefill_flops"] == 4 * per_key * 512 / 2


@pytest.mark.parametrize("name", ["codegen-tiny", "arcee-tiny"])
def test_infer_of_a_model_without_a_formula_end_to_end(name):
    data = cli_json("infer", str(CONFIGS / f"{name}.json"), "--gpu", "h100-sxm", "--prompt", "128", "--generate", "16")
    assert data["method"] == "transformers"
    # no prediction of vLLM's run (the workload model runs on the formulas): the roofline's figures, said so
    assert data["prediction"] == "roofline only: a model transformers measured (the workload model runs on llmcalc's " \
        "formulas)"
    total = data["prefill_seconds"] + data["decode_seconds"]
    assert data["roofline"]["total_seconds"] == data["total_seconds"] == total
    hf = {k: v for k, v in json.loads((CONFIGS / f"{name}.json").read_text()).items() if not k.startswith("_")}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**hf))
    assert data["weights_bytes"] == 2 * sum(p.numel() for p in model.parameters())
    # 2 layers x (K and V) x (codegen: 4 heads x 16; arcee: 2 KV heads x 16) elements x 2 bytes (bf16)
    width = 4 * 16 if name.startswith("codegen") else 2 * 16
    assert data["kv_cache_bytes_per_token"] == 2 * 2 * width * 2


@pytest.mark.parametrize("argv, words", [
    (["--gpu", "h100-sxm", "--n-gpus", "3"], "--n-gpus 3 does not divide"),
    (["--gpu", "h100-sxm", "--n-gpus", "8"], "--n-gpus 8 does not divide the 4 heads"),
    (["--gpu", "a100-80gb-sxm", "--kv-dtype", "fp8"], "a100-80gb-sxm has no fp8 support"),
])
def test_infer_bad_input_is_one_line(argv, words):
    assert words in one_line_error("infer", str(CONFIGS / "arcee-tiny.json"), *argv)


def test_infer_sizes_a_shipped_quantization_by_module_name(tmp_path, monkeypatch):
    """infer of a measured model reads the config's quantization_config per tensor (quant.format_of, as serve):
    llama's fp8 block config equals the formula path's weights, and by hand: the block matrices at 1 B per weight
    plus one fp32 scale per 128 x 128 block (q, o: 4 blocks; k, v: 2; gate, up, down: 8 each), the embedding, the
    lm_head (fine-grained FP8 leaves it) and 9 norms at 2 B; at one GPU and split over two (each rank one KV head,
    half of every other matrix and of the vocabulary rows, the norms whole)."""
    hf = {**LLAMA_INFER, "quantization_config": FP8_BLOCK}
    path = write_config(tmp_path, hf)
    analytic = {n: cli_json("infer", str(path), *INFER, "--n-gpus", n) for n in ("1", "2")}
    monkeypatch.setenv(FORCE_ENV, "1")
    for n in ("1", "2"):
        measured = cli_json("infer", str(path), *INFER, "--n-gpus", n)
        assert measured["method"] == "transformers" and measured["weight_dtype"] == "fp8"
        for key in ("weights_bytes", "weights_bytes_per_gpu", "decode_weight_bytes_per_gpu", "decode_seconds"):
            assert measured[key] == analytic[n][key], (n, key)
    matrices = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256
    scales = (2 * 4 + 2 * 2 + 3 * 8) * 4
    rest = 2 * 256 * 256 + 9 * 256
    assert measured["weights_bytes"] == 4 * (matrices + scales) + rest * 2


# --- a multimodal checkpoint's text model: the LM head as the checkpoint stores it --------------------------------

QWEN25_VL_TEXT = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=1000)


@pytest.mark.parametrize("tied", [False, True])
def test_text_model_without_a_causal_lm_class_gets_the_checkpoints_head(tmp_path, tied):
    # qwen2_5_vl_text has no causal-LM class in transformers 5.24: its head lives in Qwen2_5_VLForConditionalGeneration
    path = write_config(tmp_path, {"model_type": "qwen2_5_vl_text", **QWEN25_VL_TEXT, "tie_word_embeddings": tied})
    data = cli_json("params", str(path))
    cfg = transformers.Qwen2_5_VLConfig(text_config={**QWEN25_VL_TEXT, "tie_word_embeddings": tied},
                                        vision_config=dict(depth=1, hidden_size=32, out_hidden_size=64, num_heads=2,
                                                           intermediate_size=64), tie_word_embeddings=tied)
    with torch.device("meta"):
        outer = transformers.Qwen2_5_VLForConditionalGeneration(cfg)
    text = sum(p.numel() for p in outer.model.language_model.parameters())
    head = 0 if tied else outer.lm_head.weight.numel()
    assert outer.lm_head.bias is None
    assert data["total"] == text + head
    assert data["components"].get("head/lm_head", 0) == head and data["tied_embeddings"] is tied


# --- serve --------------------------------------------------------------------------------------------------------

SERVE = dict(max_model_len=4096)


@pytest.mark.parametrize("hf", [LLAMA, GEMMA3], ids=["llama", "gemma3"])
def test_serve_forced_through_transformers_matches_the_formula(tmp_path, monkeypatch, hf):
    """vLLM's accounting fed from the measured record against the formula path's on the same config. Equal: the
    activation peak (the MLP width from the tp_plan), the KV groups, and on llama the weights with vLLM's rotary
    cos/sin cache (8,192 positions x the rotary dim, 2 x the 32 frequencies of transformers' inv_freq buffer, x 2 B),
    so the KV memory and blocks. Gemma 3: transformers builds two rotary tables (sliding_attention_inv_freq and
    full_attention_inv_freq, rope_parameters of bases 10,000 and 1,000,000), of which vLLM's get_rope makes two
    cos/sin caches; the formula path counts one (8,192 x 16 x 2 B), so the measured weights are one table more and
    its KV memory that much less."""
    from llmcalc.analytic.measured_serving import measured_serving
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.spec import load_hardware

    measured, spec = forced(tmp_path, monkeypatch, {**hf, "max_position_embeddings": 8192}, seq=None)
    gpu = load_hardware("h100-sxm")
    mine, ref = measured_serving(measured, gpu, **SERVE), plan_serving(spec, gpu, **SERVE)
    table = 8192 * {"llama": 64, "gemma3_text": 16}[hf["model_type"]] * 2  # positions x rotary dim x 2 B
    extra = {"llama": 0, "gemma3_text": table}[hf["model_type"]]
    assert measured.rotary_tables() == [(8192, table // (8192 * 2))] * (2 if extra else 1)
    assert mine.weights_bytes_per_gpu - ref.weights_bytes_per_gpu == extra
    assert mine.activation_bytes == ref.activation_bytes
    assert mine.groups == ref.groups and mine.kv_bytes_per_token == ref.kv_bytes_per_token
    assert ref.kv_cache_bytes - mine.kv_cache_bytes == extra
    block = ref.kv_block_bytes  # llama: 16 tokens x 512 B x 4 layers; gemma3: 16 x 128 B x 2 (the group size)
    assert ref.kv_blocks - mine.kv_blocks in (extra // block, -(-extra // block))
    # concurrency: blocks / blocks a 4,096-token request needs over all groups, the same in both
    assert mine.blocks_per_sequence == ref.blocks_per_sequence
    assert mine.vllm_max_concurrency == mine.kv_blocks / mine.blocks_per_sequence


@pytest.mark.parametrize("name", ["codegen-tiny", "arcee-tiny"])
def test_serve_of_a_model_without_a_formula_end_to_end(name, monkeypatch):
    # arcee-tiny's config gives 512 positions: past them vLLM starts only with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    data = cli_json("serve", str(CONFIGS / f"{name}.json"), "--gpu", "h100-sxm", "--max-model-len", "4096")
    assert data["method"] == "transformers"
    assert set(data["measured_from"]) == {"weights", "kv_cache", "activation_peak", "throughput"}
    hf = {k: v for k, v in json.loads((CONFIGS / f"{name}.json").read_text()).items() if not k.startswith("_")}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**hf))
    n = sum(p.numel() for p in model.parameters())
    # bf16, the 1,000 vocabulary rows of embedding and (untied) head padded to 1,024 (x 64 wide, codegen's head
    # bias 1,000 -> 1,024 too); arcee's rotary cos/sin cache: its 512 positions x rotary dim 16 (the rotary
    # module's inv_freq holds 8 frequencies); codegen keeps a sinusoidal embed_positions table, no inv_freq
    pad = 24 * 64 * 2 + (24 if name.startswith("codegen") else 0)
    rotary = 0 if name.startswith("codegen") else 512 * 16
    assert [b.numel() for n_, b in model.named_buffers() if n_.endswith(".inv_freq")] == ([] if not rotary else [8])
    assert data["weights_bytes_per_gpu"] == 2 * (n + pad + rotary)
    width = 4 * 16 if name.startswith("codegen") else 2 * 16  # K and V elements per layer: heads x 16
    assert data["kv_bytes_per_token"] == 2 * 2 * width * 2  # 2 layers x (K, V) x width x 2 B
    # profiling run: 8,192 tokens x (MLP: codegen fc_in + fc_out 2 x 256, arcee up + down 2 x 128, + 3 x 64) x 2 B
    # against the sampler over 1,024 rows x 1,000 x 14 B + 8,192 x 64 x 2 B
    mlp = 2 * 256 if name.startswith("codegen") else 2 * 128
    assert data["activation_peak_bytes_per_gpu"] == max(8192 * (mlp + 3 * 64) * 2, 1024 * 1000 * 14 + 8192 * 64 * 2)
    assert data["kv_blocks"] == data["kv_cache_memory_bytes_per_gpu"] // (16 * data["kv_bytes_per_token"])
    assert data["max_concurrent_sequences"] == data["kv_blocks"] // (4096 // 16)


@pytest.mark.parametrize("argv, words", [
    (["--n-gpus", "3"], "--n-gpus 3 does not divide"),
    (["--pp", "2"], "--pp 2: arcee is measured by transformers as one tensor-parallel group"),
    (["--concurrency", "4"], "--concurrency: arcee is measured by transformers"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    # arcee-tiny's config: max_position_embeddings 512; vLLM's config/model.py refuses a longer max_model_len
    (["--max-model-len", "1024"], 'vLLM refuses to start: "User-specified max_model_len (1024) is greater than the '
                                  'derived max_model_len (max_position_embeddings=512'),
])
def test_serve_bad_input_is_one_line(argv, words):
    assert words in one_line_error("serve", str(CONFIGS / "arcee-tiny.json"), "--gpu", "h100-sxm", *argv)


def test_serve_without_a_length_is_one_line():
    assert "gives no max_position_embeddings; pass --max-model-len" in one_line_error(
        "serve", str(CONFIGS / "codegen-tiny.json"), "--gpu", "h100-sxm")


def test_serve_of_a_moe_forced_through_transformers_matches_the_formula(tmp_path, monkeypatch):
    """A MoE's profiling transient from the experts transformers built and routed: k from the top_k_index its router
    handed the fused experts module in the prefills, N and I from the fused [E, 2I, D] / [E, D, I] tensors. By hand
    (qwen3_moe tiny, 8,192 batched tokens, bf16): vLLM's fused-MoE workspaces T·k·(max(2I, D) + I)·2 B =
    8192·2·(64 + 32)·2 plus 3·T·D·2 B, the formula's forward_peak the same: it adds no dense MLP of
    intermediate_size (128), which no qwen3_moe layer has (mlp_only_layers [] and decoder_sparse_step 1: every layer
    is sparse); the activation peak is the sampler's in both (1,024 rows x 1,000 x 14 B + T·D·2 B). Weights (the
    rotary cache of 4,096 x 16 x 2 B in both), KV blocks and concurrency equal."""
    from llmcalc.analytic.measured_serving import measured_serving
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.analytic.vllm import forward_peak
    from llmcalc.spec import load_hardware

    measured, spec = forced(tmp_path, monkeypatch, QWEN3_MOE, seq=None)
    assert [(f.dense_width, f.moe.top_k, f.moe.n_experts, f.moe.up_width, f.moe.inner, f.moe.shared_width)
            for f in measured.ffn] == [(0, 2, 8, 64, 32, 0)] * 2
    gpu = load_hardware("h100-sxm")
    mine, ref = measured_serving(measured, gpu, **SERVE), plan_serving(spec, gpu, **SERVE)
    T = 8192
    assert mine.forward_peak(T) == T * 2 * (64 + 32) * 2 + 3 * T * 64 * 2
    assert forward_peak(spec, T, 1, 2) == mine.forward_peak(T)
    assert mine.activation_bytes == ref.activation_bytes == 1024 * 1000 * 14 + T * 64 * 2
    assert mine.weights_bytes_per_gpu == ref.weights_bytes_per_gpu
    assert mine.groups == ref.groups and mine.blocks_per_sequence == ref.blocks_per_sequence
    assert mine.kv_blocks == ref.kv_blocks and mine.max_concurrent_sequences == ref.max_concurrent_sequences


DEEPSEEK_V3 = dict(model_type="deepseek_v3", num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=160, moe_intermediate_size=32, n_routed_experts=8,
                   num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1, n_group=1, topk_group=1,
                   q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                   vocab_size=1000, max_position_embeddings=4096)


def test_serve_measures_dense_and_shared_expert_widths_per_layer(tmp_path, monkeypatch):
    """DeepSeek-V3's first layer dense (first_k_dense_replace 1: gate + up + down = 3 x 160), the others MoE with
    two shared experts (one MLP of 2 x 32: 3 x 64) beside the routed ones; the measured forward peak equals the
    formula's (vllm.forward_peak: max(dense, MoE + shared)), at tp 1 and split over tp 2."""
    from llmcalc.analytic.measured_serving import measured_serving
    from llmcalc.analytic.vllm import forward_peak
    from llmcalc.spec import load_hardware

    measured, spec = forced(tmp_path, monkeypatch, DEEPSEEK_V3, seq=None)
    assert [f.dense_width for f in measured.ffn] == [3 * 160, 0, 0]
    assert [(f.moe.top_k, f.moe.up_width, f.moe.inner, f.moe.shared_width) for f in measured.ffn[1:]] == \
        [(2, 64, 32, 3 * 64)] * 2
    mine = measured_serving(measured, load_hardware("h100-sxm"), **SERVE)
    for T in (8192, 256):
        assert mine.forward_peak(T) == forward_peak(spec, T, 1, 2)


FP8_BLOCK = {"quant_method": "fp8", "weight_block_size": [128, 128]}


def test_serve_sizes_a_shipped_quantization_by_module_name(tmp_path, monkeypatch):
    """A quantization_config through quant.py per measured tensor equals the formula path's weights (the rotary
    cache, 8192 x 64 x 2 B, in both); by hand: llama's block matrices at 1 B per weight plus one fp32 scale per
    128 x 128 block (q, o: 256 x 256 -> 4 blocks; k, v: 128 x 256 -> 2; gate, up: 512 x 256 -> 8; down: 256 x
    512 -> 8), the lm_head left 16-bit (fine-grained FP8 quantizes the block linears), the rest 16-bit, and the
    rotary cache."""
    from llmcalc.analytic.measured_serving import measured_serving
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.spec import load_hardware

    hf = {**LLAMA, "max_position_embeddings": 8192, "quantization_config": FP8_BLOCK}
    measured, spec = forced(tmp_path, monkeypatch, hf, seq=None)
    gpu = load_hardware("h100-sxm")
    mine, ref = measured_serving(measured, gpu, **SERVE), plan_serving(spec, gpu, **SERVE)
    assert mine.weight_dtype == ref.weight_dtype == "fp8"
    assert mine.weights_bytes_per_gpu == ref.weights_bytes_per_gpu
    matrices = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256
    scales = (2 * 4 + 2 * 2 + 3 * 8) * 4
    rest = 2 * 256 * 256 + 9 * 256  # embedding and head (256 rows, no padding), 9 norms, at 2 B
    assert mine.weights_bytes_per_gpu == 4 * (matrices + scales) + rest * 2 + 8192 * 64 * 2


# --- tensor parallelism (serve and infer) -----------------------------------------------------------------------


@pytest.mark.parametrize("tp", [2, 4])
def test_serve_over_tp_ranks_matches_the_formula(tmp_path, monkeypatch, tp):
    """llama tiny (4 query heads, 2 KV heads of 64) split as vLLM shards: at tp 2 each rank keeps one KV head, at
    tp 4 (> the 2 KV heads) the K/V heads are replicated, one per rank, and so is the cache's. Equal to the formula
    path: the activation peak (MLP widths / tp), the KV per token per GPU (4 layers x 2 x 1 head x 64 x 2 B), the
    groups and the blocks a request needs, the weights per GPU with the rotary cache (8,192 x 64 x 2 B, whole on
    every rank) and so the blocks. By hand at tp 4: q and o 256 x 256 / 4, k and v one head
    of 64 x 256, gate/up/down 3 x 512 x 256 / 4, embedding and head 256 x 256 / 4 each, 9 norms of 256 whole."""
    from llmcalc.analytic.measured_serving import measured_serving
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.spec import load_hardware

    measured, spec = forced(tmp_path, monkeypatch, {**LLAMA, "max_position_embeddings": 8192}, seq=None)
    gpu = load_hardware("h100-sxm")
    mine, ref = measured_serving(measured, gpu, tp=tp, **SERVE), plan_serving(spec, gpu, tp=tp, **SERVE)
    rotary = 8192 * 64 * 2
    assert mine.weights_bytes_per_gpu == ref.weights_bytes_per_gpu
    assert mine.activation_bytes == ref.activation_bytes
    assert mine.kv_bytes_per_token_per_gpu == ref.kv_bytes_per_token_per_gpu == 4 * 2 * 1 * 64 * 2
    assert (mine.kv_heads_per_gpu, mine.kv_replicated) == (ref.kv_heads_per_gpu, ref.kv_replicated) == (1, tp > 2)
    assert mine.groups == ref.groups and mine.blocks_per_sequence == ref.blocks_per_sequence
    assert mine.kv_blocks == ref.kv_blocks
    if tp == 4:
        layer = 2 * 256 * 256 // 4 + 2 * 64 * 256 + 3 * 512 * 256 // 4 + 2 * 256
        assert mine.weights_bytes_per_gpu == 2 * (4 * layer + 2 * 256 * 256 // 4 + 256) + rotary


@pytest.mark.parametrize("hf", [LLAMA_INFER, QWEN3_MOE], ids=["llama", "qwen3_moe"])
@pytest.mark.parametrize("n_gpus", ["2", "4"])
def test_infer_over_tp_ranks_matches_the_formula(tmp_path, monkeypatch, hf, n_gpus):
    """`infer --n-gpus` of the measured model against the formula path's on the same config: weights and KV per GPU
    (K/V heads kept per rank, replicated past them), the experts' read per GPU (split by tp), the decode time (the
    formula path times no TP all-reduce, nor does the measured one); the prefill FLOPs differ as at one GPU (the
    causal diagonal, test_infer_forced_through_transformers_matches_the_formula)."""
    analytic, measured = both_paths(tmp_path, monkeypatch, hf, "infer", *INFER, "--n-gpus", n_gpus)
    assert measured["method"] == "transformers" and measured["n_gpus"] == int(n_gpus)
    for key in ("weights_bytes_per_gpu", "kv_cache_bytes_per_token_per_gpu", "state_bytes_per_sequence_per_gpu",
                "decode_weight_bytes_per_gpu", "decode_seconds"):
        assert measured[key] == analytic[key], key


def test_tp_warns_of_matrices_outside_the_plan(tmp_path, monkeypatch):
    """DeepSeek-V3's MLA projections that the installed transformers' tensor-parallel plan gives no style (5.24: all
    five; 5.25: q_a_proj, kv_a_proj_with_mqa now "mla_kv_a_proj", kept whole): over 2 GPUs they are counted whole on
    each, said in one warning naming them; the MoE router (mlp.gate, replicated by vLLM too) and the planned MLP and
    experts are not named; one GPU warns of nothing."""
    from transformers import DeepseekV3Config

    from llmcalc.analytic.measured_inference import measured_inference
    from llmcalc.spec import load_hardware

    measured, _ = forced(tmp_path, monkeypatch, DEEPSEEK_V3, seq=None)
    names = [t.name.split(".")[-2] for t in measured.unplanned()]
    styled = {key.rsplit(".", 1)[-1] for key in DeepseekV3Config.base_model_tp_plan if ".self_attn." in key}
    mla = ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    assert names == [name for name in mla if name not in styled]
    assert "q_a_proj" in names  # whole in every plan (vLLM keeps it whole too): the warning below has a subject
    args = dict(weight_dtype=None, kv_dtype=None, compute_dtype=None)
    gpu = load_hardware("h100-sxm")
    assert measured_inference(measured, gpu, 1, 128, 16, n_gpus=1, **args).warnings == []
    (line,) = measured_inference(measured, gpu, 1, 128, 16, n_gpus=2, **args).warnings
    assert line.startswith("--n-gpus 2: model.layers.*.self_attn.q_a_proj.weight") and "mlp.gate" not in line


class _ListedExperts(torch.nn.Module):
    """Mixtral's MoE block with its experts unfused, as older and remote modelling code holds them: the same router,
    and an nn.ModuleList of E gated MLPs (w1 gate, w3 up, w2 down: Linear, bias-free), run densely and mixed by the
    router's top-k weights (no data-dependent shapes, so fake tensors can follow it)."""

    def __init__(self, block, config):
        super().__init__()
        self.gate = block.gate
        D, F = config.hidden_size, config.intermediate_size
        self.experts = torch.nn.ModuleList(torch.nn.ModuleDict({
            "w1": torch.nn.Linear(D, F, bias=False), "w3": torch.nn.Linear(D, F, bias=False),
            "w2": torch.nn.Linear(F, D, bias=False)}) for _ in range(config.num_local_experts))

    def forward(self, hidden_states):
        shape = hidden_states.shape
        flat = hidden_states.reshape(-1, shape[-1])
        _, weights, index = self.gate(flat)
        mix = torch.zeros(flat.shape[0], len(self.experts), dtype=flat.dtype).scatter(1, index, weights.to(flat.dtype))
        out = sum(e["w2"](torch.nn.functional.silu(e["w1"](flat)) * e["w3"](flat)) * mix[:, i:i + 1]
                  for i, e in enumerate(self.experts))
        return out.reshape(shape)


def test_serve_measures_unfused_experts_as_vllm_fuses_them(tmp_path, monkeypatch):
    """Issue 39: `serve` refused experts held as a list of MLPs ("not fused [E, out, in] tensors"). vLLM fuses them
    when it loads them (FusedMoE's w13 / w2), so they are measured as E experts of the first expert's widths (gate +
    up = 2I, I), the top-k the config gives the router, split over tensor-parallel ranks as fused ones: Mixtral with
    its experts unfused serves with the figures of Mixtral as transformers fuses it."""
    import llmcalc.profiling.hf_fallback as hf_fallback

    config = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 32, "vocab_size": 1000, "num_local_experts": 4,
              "num_experts_per_tok": 2, "max_position_embeddings": 4096}
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("LLMCALC_FORCE_TRANSFORMERS", "1")
    argv = ("serve", path, "--gpu", "h100-sxm", "--max-model-len", "1k", "--n-gpus", "2", "--format", "json")
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "fused"))
    fused = json.loads(run(*argv).stdout)
    build = hf_fallback._build

    def unfused(hf_config):
        model = build(hf_config)
        for layer in model.model.layers:
            layer.mlp = _ListedExperts(layer.mlp, hf_config)
        assert not any(p.dim() == 3 for p in model.parameters())
        return model

    monkeypatch.setattr(hf_fallback, "_build", unfused)
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "unfused"))
    result = run(*argv)
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    # every memory figure alike; the throughput roofline reads the decode step's FLOPs, and this stand-in block runs
    # every expert densely (the fused one only the routed k)
    diff = {k for k in fused if fused[k] != listed.get(k)}
    # (measured_from names how many parameter tensors the class holds: 12 fused, one set per expert unfused)
    assert diff <= {"throughput", "measured_from"}, diff
    assert listed["max_concurrent_sequences"] == fused["max_concurrent_sequences"] > 0
