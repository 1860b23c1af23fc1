"""The checkpoints published serving benchmarks name (issue 36), each held to what is published about it: GPT-J 6B and
Falcon 180B presets, and the quantized NVIDIA, Meta, Qwen and AMD releases listed in presets/checkpoints.json, against
transformers built from the same config on the meta device and the config values and model-card facts quoted in
each preset's _source and each checkpoint's basis."""

import pytest
from clirun import cli_json, one_line_error
from reference import hf_count

from llmcalc.analytic.params import count_params
from llmcalc.analytic.quant import checkpoint_bytes, weight_format
from llmcalc.spec import load_model, model_config
from llmcalc.spec.presets import checkpoint_for
from llmcalc.units import GIB


def test_gpt_j_6b_is_the_published_config():
    """EleutherAI/gpt-j-6b config.json: 28 layers of 4,096, 16 heads of 256, rotary on 64 dims, a 50,400-row table,
    an untied LM head with a bias, 2,048 positions; the card's 6,053,381,344 parameters round to 6.05 B as the
    tensors transformers builds do."""
    spec = load_model("EleutherAI/gpt-j-6b")
    assert spec.name == "gpt-j-6b"
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.d_head, spec.vocab_size, spec.max_seq_len) == \
        (28, 4096, 16, 256, 50400, 2048)
    assert not spec.tie_embeddings
    count = count_params(spec)
    assert count.total == hf_count(model_config("gpt-j-6b"))[0]
    assert round(count.total / 1e9, 2) == round(6_053_381_344 / 1e9, 2)


def test_falcon_180b_is_the_published_architecture():
    """tiiuae/falcon-180B: 80 layers of 14,848, 232 query heads of 64 sharing 8 KV heads, a 65,024-row table and
    2,048 positions (arXiv 2311.16867; model card: 180B parameters); the count is transformers' own."""
    spec = load_model("tiiuae/falcon-180B")
    assert spec.name == "falcon-180b"
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_head, spec.vocab_size,
            spec.max_seq_len) == (80, 14848, 232, 8, 64, 65024, 2048)
    count = count_params(spec)
    assert count.total == hf_count(model_config("falcon-180b"))[0]
    assert round(count.total / 1e9, -1) == 180


# (repo, preset, the format the weights ship in): every listed quantized release resolves to its preset's shapes
QUANTIZED = [
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "llama-3.1-70b", "fp8"),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama-3.1-70b", "nvfp4"),
    ("nvidia/Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b", "fp8"),
    ("nvidia/Llama-3.1-405B-Instruct-FP4", "llama-3.1-405b", "nvfp4"),
    ("nvidia/DeepSeek-R1-FP4", "deepseek-v3", "nvfp4"),
    ("nvidia/DeepSeek-R1-0528-FP4", "deepseek-v3", "nvfp4"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick", "fp8"),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick", "fp8"),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP8", "llama-4-scout", "fp8"),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", "llama-4-scout", "nvfp4"),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", "fp8"),
    ("nvidia/Qwen3-235B-A22B-FP4", "qwen3-235b-a22b", "nvfp4"),
    ("amd/Llama-3.1-8B-Instruct-FP8-KV", "llama-3.1-8b", "fp8"),
    ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama-3.1-70b", "fp8"),
    ("amd/Llama-3.1-405B-Instruct-FP8-KV", "llama-3.1-405b", "fp8"),
    ("amd/Llama-2-70b-chat-hf-FP8-KV", "llama-2-70b", "fp8"),
    ("amd/Mixtral-8x7B-Instruct-v0.1-FP8-KV", "mixtral-8x7b", "fp8"),
    ("amd/Mixtral-8x22B-Instruct-v0.1-FP8-KV", "mixtral-8x22b", "fp8"),
    ("Qwen/Qwen3-8B-FP8", "qwen3-8b", "fp8"),
    ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b", "fp8"),
]


@pytest.mark.parametrize("repo, preset, fmt", QUANTIZED)
def test_quantized_releases_have_their_presets_shapes(repo, preset, fmt):
    """The preset's parameters (transformers' count of the checkpoint's config, quantization_config included), the
    weights in the release's format, fewer bytes than the preset's 16-bit checkpoint: FP8 under 0.6 of it (the 16-bit
    embeddings and head are an eighth of Llama 3.1 8B), NVFP4 under 0.4 of it."""
    spec, base = load_model(repo), load_model(preset)
    assert checkpoint_for(repo).preset == preset
    assert count_params(spec).total == hf_count(model_config(repo))[0]
    assert weight_format(spec, None).name == fmt
    ratio = checkpoint_bytes(spec) / checkpoint_bytes(base, weight_format(base, "bf16"))
    assert ratio < (0.6 if fmt == "fp8" else 0.4)


def test_mixtral_8x22b_instruct_has_the_v3_vocabulary():
    """Mixtral-8x22B-Instruct-v0.1 uses the v3 tokenizer (32,768 rows), the base conversion 32,000."""
    assert load_model("mistralai/Mixtral-8x22B-Instruct-v0.1").vocab_size == 32768
    assert load_model("amd/Mixtral-8x22B-Instruct-v0.1-FP8-KV").vocab_size == 32768
    assert load_model("mixtral-8x22b").vocab_size == 32000


def test_metas_fp8_405b_ids_are_the_shipped_config():
    """Meta's FP8 Llama 3.1 405B by repo id: the four prefixes stand for exactly the 511 modules the shipped
    config.json's modules_to_not_convert lists (benchmarks/configs/Llama-3.1-405B-FP8), so the bytes are that file's
    to the byte (453.77 GiB)."""
    shipped = checkpoint_bytes(load_model("benchmarks/configs/Llama-3.1-405B-FP8"))
    for repo in ("meta-llama/Llama-3.1-405B-FP8", "meta-llama/Llama-3.1-405B-Instruct-FP8",
                 "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8"):
        assert checkpoint_bytes(load_model(repo)) == shipped


def test_deepseek_r1_fp4_quantizes_the_moe_experts_alone():
    """nvidia/DeepSeek-R1-FP4's card: only the MoE layers' linear operators are quantized; attention, the three dense
    FFN layers and the LM head stay 16-bit: the checkpoint is more than the all-NVFP4 model and less than the FP8
    release (DeepSeek's own, 641 GiB with its MTP layer), near the card's "reducing the disk size and GPU memory
    requirements by approximately 1.6x" (641 / 1.6 = 400 GiB)."""
    fp4 = checkpoint_bytes(load_model("nvidia/DeepSeek-R1-FP4"))
    everything = checkpoint_bytes(load_model("deepseek-v3"), weight_format(load_model("deepseek-v3"), "nvfp4"))
    assert everything < fp4 < 0.65 * checkpoint_bytes(load_model("deepseek-ai/DeepSeek-R1"))
    assert 340 * GIB < fp4 < 420 * GIB


def test_instruct_and_chat_ids_are_the_presets():
    assert load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").name == "llama-4-scout"
    assert load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct").name == "llama-4-maverick"
    assert load_model("tiiuae/falcon-180B-chat").name == "falcon-180b"


def test_trtllm_builds_for_the_workloads_longest_request():
    """trtllm-bench builds its engine with max_seq_len = the dataset's longest request (bench/build/build.py), so
    TensorRT-LLM serves 20,000 + 2,000 tokens of a 4,096-position Llama 2 (with a warning); vLLM refuses it per
    request, as before, and keeps refusing a --max-model-len past the config at start-up."""
    args = ("serve", "llama-2-7b", "--gpu", "h100-sxm", "--input-len", "20000", "--output-len", "2000")
    answer = cli_json(*args, "--engine", "trtllm", "--engine-version", "0.17.0", "--weight-dtype", "fp8")
    assert answer["max_model_len"] == 22000 and answer["performance"]["output_tokens_per_second"] > 0
    assert "exceed --max-model-len 4,096" in one_line_error(*args)
    assert "vLLM refuses to start" in one_line_error(*args, "--max-model-len", "22000")
    given = cli_json(*args, "--engine", "trtllm", "--max-model-len", "32768")
    assert given["max_model_len"] == 32768


def test_trtllm_does_not_hold_the_configs_whole_context():
    """Llama 4 Scout's config allows 10,485,760 tokens, more KV than one B200 holds for even one request: vLLM at
    that default does not fit (`fits` false, its figures not computed), TensorRT-LLM, built for the 2,048 + 2,048
    tokens of the run, does; within the positions the engine's length is the run's too."""
    args = ("serve", "nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", "--gpu", "b200", "--input-len", "2048",
            "--output-len", "2048")
    trt = cli_json(*args, "--engine", "trtllm")
    assert trt["fits"] and trt["max_model_len"] == 4096 and trt["performance"]["output_tokens_per_second"] > 0
    assert "vLLM refuses to start" in one_line_error(*args)
    llama = cli_json("serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "1024", "--output-len", "1024",
                     "--engine", "trtllm")
    assert llama["max_model_len"] == 2048


def test_an_instruct_release_answers_to_its_bare_name():
    """Benchmarks name Llama 3.3 70B "llama-3.3-70b" (Meta published only meta-llama/Llama-3.3-70B-Instruct, whose
    card gives the Llama 3.1 70B architecture): the name without "-instruct" reads the same preset; a preset's own
    name still means the preset, and a name no release has is still refused in one line."""
    from llmcalc.spec.presets import resolve_name

    assert resolve_name("models", "llama-3.3-70b") == resolve_name("models", "meta-llama/Llama-3.3-70B-Instruct")
    assert count_params(load_model("llama-3.3-70b")).total == count_params(load_model("llama-3.1-70b")).total
    assert resolve_name("models", "llama-3.1-8b") == "llama-3.1-8b"
    assert "unknown model preset" in one_line_error("params", "llama-3.4-70b")
