"""Serving: MoE and MLA decode, KV under tensor parallelism, paged-KV capacity as vLLM sizes it,
the closed-form decode sum, and the `serve`/`infer` commands."""

import json
import math

import pytest
from clirun import cli_json, run  # noqa: E402

from llmcalc.analytic.flops import step_flops
from llmcalc.analytic.inference import (
    InferenceEstimate,
    decode_ops,
    expected_experts,
    kv_cache_bytes_per_token,
    kv_cache_bytes_per_token_per_gpu,
    sum_max_linear,
    weight_bytes,
)
from llmcalc.analytic.params import count_params
from llmcalc.analytic.rules import palm
from llmcalc.analytic.serving import vllm_max_concurrency
from llmcalc.spec import load_hardware, load_model

GIB = 2**30
H100 = load_hardware("h100-sxm")


def test_moe_decode_at_batch_1_reads_the_active_parameters():
    """Mixtral-8x7B, written out: per layer attention 2·4096² + 2·4096·1024 = 41,943,040, router 4096·8 = 32,768,
    two of eight experts 2·3·4096·14336 = 352,321,536, norms 2·4096; 32 layers, plus the LM head 32000·4096 and
    the final norm (the token table is a lookup: no row read to speak of). bf16: 2 bytes each."""
    per_layer = 41_943_040 + 32_768 + 352_321_536 + 2 * 4096
    active = 32 * per_layer + 32_000 * 4096 + 4096
    spec = load_model("mixtral-8x7b")
    assert active == count_params(spec).active_per_token - 32_000 * 4096  # the params module agrees
    est = InferenceEstimate(spec, H100, 1, 512, 128, "bf16", "bf16", "bf16")
    kv = 2 * 32 * 8 * 128 * 2  # bytes per token
    assert est.weights_read(1) == 2 * active
    step = est.decode_step(600)
    assert step.bound == "memory"
    assert step.seconds == pytest.approx((2 * active + 600 * kv) / 3.35e12, rel=1e-12)
    assert est.decode_seconds_per_token == pytest.approx(7.6e-3, rel=0.01)  # the issue's ~7.7 ms, not 27.8 ms


def test_expected_distinct_experts_under_uniform_routing():
    spec = load_model("mixtral-8x7b")  # E = 8, k = 2
    assert expected_experts(spec, 1) == pytest.approx(2)
    assert expected_experts(spec, 4) == pytest.approx(8 * (1 - 0.75**4))  # 5.47
    assert expected_experts(spec, 200) == pytest.approx(8)
    est = InferenceEstimate(spec, H100, 4, 512, 2, "bf16", "bf16", "bf16")
    expert = 3 * 4096 * 14336 * 2  # bytes of one expert
    assert est.weights_read(4) - est.weights_read(1) == pytest.approx(32 * (8 * (1 - 0.75**4) - 2) * expert)


def test_kv_per_gpu_never_splits_below_one_head():
    falcon, llama = load_model("falcon-7b"), load_model("llama-3-70b")
    # falcon-7b is MQA: one KV head, 2 x 32 layers x 64 x 2 bytes; every rank keeps a replica of it
    assert kv_cache_bytes_per_token_per_gpu(falcon, "bf16",
                                            8) == 2 * 32 * 1 * 64 * 2 == kv_cache_bytes_per_token(falcon)
    # llama-3-70b: 8 KV heads; tp 4 gives 2 per rank, tp 8 one, tp 16 still one (not half of one)
    whole = kv_cache_bytes_per_token(llama)
    assert whole == 2 * 80 * 8 * 128 * 2
    assert kv_cache_bytes_per_token_per_gpu(llama, "bf16", 4) == whole / 4
    assert kv_cache_bytes_per_token_per_gpu(llama, "bf16", 16) == 2 * 80 * 1 * 128 * 2 == whole / 8
    # MLA's latent is whole on every rank
    v3 = load_model("deepseek-v3")
    assert kv_cache_bytes_per_token_per_gpu(v3, "bf16", 8) == 61 * (512 + 64) * 2
    result = run("serve", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 16, "--max-model-len", "8k")
    assert result.exit_code == 0, result.output
    assert "each rank keeps one KV head (replicated 2x)" in result.stdout
    data = cli_json("serve", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 16, "--max-model-len", "8k")
    assert data["kv_bytes_per_token_per_gpu"] == 40_960 and data["kv_replicated"] is True
    assert data["kv_block_bytes"] == 16 * 40_960


def test_palm_counts_the_tied_lm_head_of_gpt2():
    """GPT-2 ties its head to the token table: PaLM's 6N must still pay for the head matmul. What is left
    against the exact per-op count is 6 x the parameters that are no matmul: per layer the biases
    (q, k, v, o: 4·768; fc 3072 and proj 768) and two LayerNorms (2·2·768), and the final LayerNorm."""
    spec = load_model("gpt2")
    exact = step_flops(spec, 1, 1024).model_flops_per_token
    not_matmul = 12 * (4 * 768 + 3072 + 768 + 2 * 2 * 768) + 2 * 768
    assert not_matmul == 121_344
    assert palm(count_params(spec), 1024) - exact == 6 * not_matmul
    assert palm(count_params(spec), 1024) == pytest.approx(exact, rel=1e-3)


def test_mla_decode_is_the_absorbed_form():
    """DeepSeek-V2-Lite decode: per key and layer, scores over the latent + RoPE key (2·H·(512 + 64)) and values
    over the latent (2·H·512); no per-key K/V up-projection; W_UK and W_UV once per token."""
    spec = load_model("deepseek-v2-lite")
    H, L = spec.n_heads, spec.n_layers
    one, two = decode_ops(spec, 1, 1), decode_ops(spec, 1, 2)
    assert "attention/kv_b_proj" not in one
    assert sum(two.values()) - sum(one.values()) == L * 2 * H * (2 * 512 + 64)
    assert one["attention/absorb_uk"] == L * 2 * H * 128 * 512 and one["attention/absorb_uv"] == L * 2 * H * 512 * 128
    est = InferenceEstimate(spec, H100, 1, 100, 2, "bf16", "bf16", "bf16")
    assert est.decode_step(201).bytes - est.decode_step(200).bytes == L * (512 + 64) * 2  # reads the latent


@pytest.mark.parametrize("model, batch, prompt, generate", [
    ("llama-3-8b", 1, 100, 50), ("llama-3-8b", 400, 10, 300), ("mixtral-8x7b", 64, 1, 200),
    ("deepseek-v2-lite", 900, 1, 120),
])
def test_closed_form_decode_equals_the_step_by_step_sum(model, batch, prompt, generate):
    est = InferenceEstimate(load_model(model), H100, batch, prompt, generate, "bf16", "bf16", "bf16")
    steps = [est.decode_step(prompt + i) for i in range(1, generate)]
    assert est.decode_seconds == pytest.approx(sum(s.seconds for s in steps), rel=1e-12)
    if model == "llama-3-8b" and batch == 400:  # the crossing inside the range is exercised
        assert {s.bound for s in steps} == {"compute", "memory"}


def test_sum_max_linear_by_hand():
    # max(10 - c, 2c) for c = 0..6: 10, 9, 8, 7, 8, 10, 12 = 64
    assert sum_max_linear(10, -1, 0, 2, 0, 6) == 64
    assert sum_max_linear(1, 0, 0, 0, 5, 4) == 0


def test_qwen_serving_matches_vllm_22291():
    """vllm-project/vllm#22291: ~0.16 GB per 3,072-token Qwen2.5-7B request, which is the GQA cache:
    2 x 28 layers x 4 KV heads x 128 x 2 bytes = 57,344 B per token; 3,072 tokens = 0.164 GiB."""
    data = cli_json("serve", "qwen2.5-7b", "--gpu", "h100-sxm", "--n-gpus", 1, "--max-model-len", 3072)
    assert data["kv_bytes_per_token"] == data["kv_bytes_per_token_per_gpu"] == 2 * 28 * 4 * 128 * 2 == 57_344
    assert pytest.approx(0.164, abs=1e-3) == 3072 * 57_344 / GIB
    # vLLM 0.21's sizing, written out: ceil(0.92 x 79.19 GiB CUDA-visible); the bf16 weights (Qwen's published
    # 7,615,616,512 parameters) plus the rotary cos/sin cache 131,072 (its max_position_embeddings) x 128 x 2 B;
    # the profiling run: the dummy sampler over 1,024 rows x 152,064 at 14 B (Triton top-k/top-p) plus the hidden
    # states 8,192 x 3,584 x 2 B (the MLP's 8,192 x (3 x 18,944 + 3 x 3,584) x 2 B is smaller); non-torch 0.27 GiB;
    # CUDA graphs 28 x 0.48/28 GiB.
    requested = math.ceil(79.19 * GIB * 0.92)
    weights = 7_615_616_512 * 2 + 131_072 * 128 * 2
    act = max(8192 * (3 * 18944 + 3 * 3584) * 2, 1024 * 152_064 * 14 + 8192 * 3584 * 2)
    kv_memory = requested - weights - act - 0.27 * GIB - 0.48 * GIB
    blocks = math.floor(kv_memory / (16 * 57_344))
    assert data["weights_bytes_per_gpu"] == weights
    assert data["activation_peak_bytes_per_gpu"] == act
    assert data["kv_cache_memory_bytes_per_gpu"] == pytest.approx(kv_memory)
    assert data["kv_block_bytes"] == 16 * 57_344 and data["kv_blocks"] == blocks
    assert data["max_concurrent_sequences"] == blocks // 192
    assert data["vllm_max_concurrency"] == pytest.approx(blocks / 192)
    assert data["kv_cache_tokens"] == int(blocks / 192 * 3072)  # v0.21: int(concurrency x max_model_len)
    rows = data["throughput"]
    assert [r["concurrency"] for r in rows][:3] == [1, 2, 4] and rows[-1]["concurrency"] == blocks // 192
    for r in rows:
        assert r["tokens_per_second"] == pytest.approx(r["concurrency"] / r["decode_seconds_per_token"])
    assert rows[-1]["tokens_per_second"] > rows[0]["tokens_per_second"]


def test_gpt_oss_120b_fits_one_h100_as_shipped():
    """Issue 21's acceptance: nothing typed but the length, gpt-oss-120b's MXFP4 experts give 60-68 GiB of weights
    (vLLM logs "Model loading took 65.9651 GiB" on an H100, #23278) and at least one 32k sequence fits."""
    data = cli_json("serve", "gpt-oss-120b", "--gpu", "h100-sxm", "--max-model-len", "32k")
    assert 60 * GIB <= data["weights_bytes_per_gpu"] <= 68 * GIB
    assert data["weights_bytes_per_gpu"] == pytest.approx(65.9651 * GIB, rel=2e-3)
    assert data["checkpoint_bytes"] == 65_248_815_744 and data["max_concurrent_sequences"] >= 1


def test_gpt_oss_sliding_layers_keep_their_window():
    """vLLM's hybrid allocator on gpt-oss-120b (18 sliding layers of 128 tokens, 18 full): two groups of 18, 16-token
    pages of 16 x 8 x 64 x 2 x 2 = 32 KiB; a 131,072-token request with 8,192 batched tokens needs 8,192 full blocks
    and cdiv(min(127 + 8192, 131072), 16) + 1 = 521 sliding ones (research: vllm_memory.md sec. 3.4)."""
    data = cli_json("serve", "gpt-oss-120b", "--gpu", "h200", "--max-model-len", "128k", "--vllm-version", "0.21")
    groups = data["kv_groups"]
    assert [(g["kind"], g["layers"], g["page_bytes"]) for g in groups] == [("sliding", 18, 32768), ("full", 18, 32768)]
    assert [g["blocks_per_request"] for g in groups] == [521, 8192] and data["blocks_per_sequence"] == 8713
    assert data["vllm_max_concurrency"] == pytest.approx(data["kv_blocks"] / 8713)
    # from 0.26 (#47728) the window keeps max_in_flight_tokens = 2 batches x 8,192 under async scheduling:
    # cdiv(min(127 + 16384, 131072), 16) + 1 = 1,033
    now = cli_json("serve", "gpt-oss-120b", "--gpu", "h200", "--max-model-len", "128k")
    assert [g["blocks_per_request"] for g in now["kv_groups"]] == [1033, 8192]
    old = cli_json("serve", "gpt-oss-120b", "--gpu", "h200", "--max-model-len", "128k", "--vllm-version", "0.8.5")
    assert len(old["kv_groups"]) == 1 and old["blocks_per_sequence"] == 8192  # no hybrid manager: full everywhere


def test_gemma_3_groups_are_padded_to_one_size():
    """Gemma-3-27B: 52 sliding (1,024) + 10 full layers: group size 10, 6 sliding groups (8 padding layers) + 1 full
    (kv_cache_utils.py _get_kv_cache_groups_uniform_page_size; research sec. 3.3)."""
    data = cli_json("serve", "gemma-3-27b", "--gpu", "h100-sxm", "--max-model-len", "16k")
    groups = data["kv_groups"]
    assert len(groups) == 7 and sum(g["padding_layers"] for g in groups) == 8
    assert [g["kind"] for g in groups].count("sliding") == 6


def test_mamba_state_pages_raise_the_attention_block():
    """Nemotron-H 8B: 24 Mamba-2 layers keep one state page each; the 4 attention layers' block grows until their
    page holds a state page (_align_hybrid_block_size); each group needs one state block per request."""
    data = cli_json("serve", "nemotron-h-8b", "--gpu", "l40s", "--max-model-len", "8k")
    state = [g for g in data["kv_groups"] if g["kind"] == "state"]
    attn = [g for g in data["kv_groups"] if g["kind"] == "full"]
    assert state and attn and all(g["blocks_per_request"] == 1 for g in state)
    assert attn[0]["page_bytes"] >= state[0]["page_bytes"] and attn[0]["block_size"] % 16 == 0


def test_logs_acceptance():
    """benchmarks/bench_vllm_logs.py on its 18 logs and 11 checkpoints: issue 21's thresholds."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import bench_vllm_logs as bench

    rows = json.loads((bench.HERE / "rows.json").read_text())["rows"]
    s = bench.summary(bench.evaluate(rows), bench.checkpoints())
    assert s["kv"]["median_abs_error"] <= 0.05 and s["kv"]["within"] >= 0.7 * s["kv"]["rows"]
    assert s["concurrency"]["median_abs_error"] <= 0.05
    assert s["weights"]["within"] >= s["weights"]["rows"] - 1 and s["checkpoints"]["within"] == s["checkpoints"]["rows"]


def test_pipeline_data_and_expert_parallel():
    """--pp splits the layers (vLLM get_pp_indices), --dp multiplies replicas, --enable-expert-parallel puts whole
    experts on tp x dp GPUs: per-GPU weights fall, the replica count multiplies sequences."""
    one = cli_json("serve", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--max-model-len", "32k")
    pp = cli_json("serve", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--pp", 2)
    ep = cli_json("serve", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--n-gpus", 2, "--dp", 2,
                  "--enable-expert-parallel")
    assert pp["n_gpus_total"] == 2 and pp["weights_bytes_per_gpu"] < 0.6 * one["weights_bytes_per_gpu"]
    assert ep["n_gpus_total"] == 4 and ep["total_concurrent_sequences"] == 2 * ep["max_concurrent_sequences"]
    assert ep["weights_bytes_per_gpu"] < 0.3 * one["weights_bytes_per_gpu"]


def test_fewest_gpus_for_a_concurrency():
    """serve --concurrency C answers the layout with the fewest GPUs whose replicas hold C requests."""
    data = cli_json("serve", "llama-3.1-70b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--concurrency", 64)
    assert data["layout"]["n_gpus"] == data["n_gpus_total"]
    assert data["total_concurrent_sequences"] >= 64
    assert all(c["n_gpus"] >= data["n_gpus_total"] for c in data["candidates"])
    result = run("serve", "llama-3-8b", "--gpu", "h100-sxm", "--max-ttft", "1")
    assert result.exit_code == 2 and "without --concurrency" in result.stderr


def test_vllm_concurrency_log_line():
    """A vLLM log (vllm-project/vllm#10517, Llama-3.1-8B on an RTX 3090): kv_cache_size=3.81GiB, '# GPU blocks:
    1952', 'Maximum concurrency for 20000 tokens per request: 1.56x'. A block of 16 tokens is 16 x 128 KiB."""
    spec = load_model("llama-3.1-8b")
    assert 16 * kv_cache_bytes_per_token_per_gpu(spec, "bf16", 1) == 2 * 2**20
    assert round(1952 * 2 * 2**20 / GIB, 2) == 3.81
    assert f"{vllm_max_concurrency(1952, 20000, 16):.2f}" == "1.56"


def test_int4_weights_carry_their_group_scales():
    """int4: 0.5 B per weight + (2 B fp16 scale + 0.5 B zero point) per group of 128 in the block matmuls;
    embeddings, head and norms stay bf16. Llama-3-8B: 6,979,321,856 block-matmul weights."""
    spec = load_model("llama-3-8b")
    matmuls = 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336)
    assert matmuls == 6_979_321_856
    rest = count_params(spec).total - matmuls
    assert weight_bytes(spec, "int4") == pytest.approx(matmuls * (0.5 + 2.5 / 128) + rest * 2)
    assert weight_bytes(spec, "bf16") == count_params(spec).total * 2


def test_serve_without_room_says_so():
    data = cli_json("serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", 8, "--max-model-len", "32k")
    assert data["max_concurrent_sequences"] == 0 and data["throughput"] == []
    fp8 = cli_json("serve", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", 8, "--max-model-len", "32k",
                   "--weight-dtype", "fp8")
    assert fp8["max_concurrent_sequences"] >= 1 and fp8["compute_dtype"] == "fp8"


def test_infer_keeps_its_keys():
    data = cli_json("infer", "mixtral-8x7b", "--gpu", "h100-sxm", "--n-gpus", 2, "--batch-size", 1, "--prompt", 512,
                    "--generate", 128)
    assert {"prefill_seconds", "decode_seconds_per_token", "tokens_per_second"} <= set(data)


def test_context_beyond_the_positions_is_refused_as_vllm_refuses_it(monkeypatch):
    """vLLM's config/model.py refuses a max_model_len beyond max_position_embeddings unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (its own error text: "User-specified max_model_len (N) is greater than the derived
    max_model_len (max_position_embeddings=M ..."); with that variable set llmcalc computes it with a warning."""
    for extra in ([], ["--input-len", 1000, "--output-len", 100], ["--concurrency", 2]):
        result = run("serve", "llama-3-8b", "--gpu", "h100-sxm", "--max-model-len", "16k", *extra)
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr.startswith('llmcalc: error: --max-model-len 16,384: vLLM refuses to start: '
                                        '"User-specified max_model_len (16384) is greater than the derived '
                                        'max_model_len (max_position_embeddings=8192 ')
        assert "Use --max-model-len 8,192 or less" in result.stderr and len(result.stderr.splitlines()) == 1
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    result = run("serve", "llama-3-8b", "--gpu", "h100-sxm", "--max-model-len", "16k", "--format", "json")
    assert result.exit_code == 0
    assert result.stderr.strip().splitlines() == [
        "llmcalc: warning: 16,384 tokens exceed llama-3-8b's max_position_embeddings (8,192); "
        "the figures are computed anyway"]
    assert json.loads(result.stdout)["max_model_len"] == 16384
    result = run("infer", "gpt2", "--gpu", "h100-sxm", "--prompt", 1000, "--generate", 100)
    assert result.exit_code == 0 and "exceed gpt2's max_position_embeddings (1,024)" in result.stderr


def test_a_max_length_the_kv_cache_cannot_hold_is_refused_as_vllm_refuses_it():
    """kv_cache_utils.py check_enough_kv_cache_memory: vLLM will not start when one request of max_model_len needs
    more KV memory than is left; its text names the bytes needed and available and the longest length that fits.
    Llama-3.1-8B at 128k: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 128 KiB per token, 16 GiB per request."""
    result = run("serve", "llama-3.1-8b", "--gpu", "rtx-4090", "--max-model-len", "128k")
    assert result.exit_code == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert ('vLLM refuses to start: "To serve at least one request with the model\'s max seq len (131072), 16.00 GiB '
            'KV cache is needed') in result.stderr
    longest = int(result.stderr.split("estimated maximum model length is ")[1].split(".")[0])
    ok = cli_json("serve", "llama-3.1-8b", "--gpu", "rtx-4090", "--max-model-len", longest)
    assert ok["fits"] and ok["max_concurrent_sequences"] == 1
    assert run("serve", "llama-3.1-8b", "--gpu", "rtx-4090", "--max-model-len", longest + 16).exit_code == 2


def test_the_workload_mode_refuses_a_default_length_vllm_would_not_start_with():
    """Llama-3.1-70B on 2 H100 at its config's 131,072 positions (vLLM's default max_model_len): the KV cache holds
    far less, so vLLM refuses to start even for 1k + 1k requests; with --max-model-len within it, the workload runs."""
    args = ("serve", "llama-3.1-70b", "--gpu", "h100-sxm", "--n-gpus", 2, "--input-len", "1k", "--output-len", "1k")
    result = run(*args)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "(the config's max_position_embeddings, vLLM's default): vLLM refuses to start" in result.stderr
    assert run(*args, "--max-model-len", "16k").exit_code == 0


def test_weights_that_leave_no_kv_cache_are_a_plan_that_does_not_fit():
    """DeepSeek-V3 (fp8, ~80 GiB of weights per H100 at tp 8) at 32k: no KV memory at all, so no refusal of the length
    but a plan whose first line and JSON say it does not fit."""
    result = run("serve", "deepseek-v3", "--gpu", "h100-sxm", "--n-gpus", 8, "--max-model-len", "32k")
    assert result.exit_code == 0 and result.stdout.startswith("does NOT fit: ")
    data = cli_json("serve", "deepseek-v3", "--gpu", "h100-sxm", "--n-gpus", 8, "--max-model-len", "32k")
    assert data["fits"] is False and data["memory_deficit_bytes_per_gpu"] > 0


@pytest.mark.parametrize("args, message", [
    (["serve", "qwen2.5-7b", "--gpu", "a100-80gb-sxm", "--kv-dtype", "fp8"],
     "a100-80gb-sxm has no fp8 support (its preset lists no fp8 rate), so it cannot hold a fp8 KV cache"),
    (["infer", "llama-3-8b", "--gpu", "v100-sxm", "--kv-dtype", "fp8", "--compute-dtype", "fp16"],
     "v100-sxm has no fp8 support"),
    (["serve", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 3], "--n-gpus 3 does not divide the 32 attention heads"),
    (["infer", "llama-3-8b", "--gpu", "h100-sxm", "--n-gpus", 5], "--n-gpus 5 does not divide the 32 attention heads"),
    # attention-free and hybrid models: vLLM's MambaMixer shards 2 x intermediate_size (mamba-2.8b: expand 2 x
    # d_model 2,560 = 5,120), MambaMixer2 asserts tp | num_heads and tp | n_groups (nemotron-h-8b: 8 groups)
    (["serve", "mamba-2.8b", "--gpu", "h100-sxm", "--n-gpus", 3, "--max-model-len", 2048],
     "--n-gpus 3 does not divide the 5,120 Mamba intermediate width of mamba-2.8b"),
    (["serve", "nemotron-h-8b", "--gpu", "h100-sxm", "--n-gpus", 16],
     "--n-gpus 16 does not divide the 8 Mamba-2 groups of nemotron-h-8b"),
    (["serve", "llama-3-8b", "--gpu", "h100-sxm", "--gpu-memory-utilization", 1.5], "must be in (0, 1]"),
    (["serve", "falcon-7b", "--gpu", "h100-sxm"], "gives no max_position_embeddings; pass --max-model-len"),
    (["serve", "t5-small", "--gpu", "h100-sxm"], "serve covers decoder-only models"),
    (["serve", "llama-3-8b", "--gpu", "h100-sxm", "--weight-dtype", "int3"], "'--weight-dtype': unknown dtype 'int3'"),
    (["memory", "llama-3-8b", "--inference"], "memory --inference has moved: use `llmcalc serve"),
])
def test_bad_serving_input(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_attention_free_models_split_over_their_mixers():
    """An attention-free model is not held to a placeholder head count: mamba-2.8b's 5,120-wide mixer splits 8
    ways (vLLM mamba_mixer.py), where the old rule refused it for its "1 attention head"."""
    result = run("serve", "mamba-2.8b", "--gpu", "h100-sxm", "--n-gpus", 8, "--max-model-len", 2048)
    assert result.exit_code == 0, result.output
    assert "served on 8 x h100-sxm" in result.stdout


@pytest.mark.parametrize("model, tp, length", [("qwen2.5-7b", 1, 3072), ("mixtral-8x7b", 2, 4096),
                                                ("deepseek-v3", 8, 8192), ("gpt-oss-120b", 1, 8192),
                                                ("qwen3.5-4b", 2, 4096)])
def test_a_replicas_rooflines_share_what_no_batch_changes(model, tp, length):
    """serve's rooflines (one per concurrency level) are handed the weight layout, decode slopes, KV bytes per token
    and state per sequence once computed for the replica: each is what an InferenceEstimate built afresh for that
    batch computes, and so are the throughput rows' prefill and decode figures."""
    from llmcalc.analytic.serving import plan_serving

    est = plan_serving(load_model(model), H100, tp=tp, max_model_len=length)
    for b in (1, 3, 64):
        shared = est.roofline(b, length)
        fresh = InferenceEstimate(est.spec, H100, b, length, 2, est.weight_dtype, est.kv_dtype, est.compute_dtype,
                                  n_gpus=tp, weight_format=est.weights)
        assert "layout" in shared.__dict__  # handed over, not computed
        assert (shared.layout, shared._slopes, shared.kv_per_token_per_gpu, shared.state_bytes_per_sequence) == (
            fresh.layout, fresh._slopes, fresh.kv_per_token_per_gpu, fresh.state_bytes_per_sequence)
        assert shared.prefill.seconds == fresh.prefill.seconds
        assert shared.decode_step(length).seconds == fresh.decode_step(length).seconds
