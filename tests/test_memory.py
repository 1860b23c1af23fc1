"""Memory for training and inference: the published figures, and the model's own consistency."""

import json

import pytest
from clirun import run  # noqa: E402

from llmcalc.analytic.activations import activation_memory, layer_saved, scaled
from llmcalc.analytic.inference import InferenceEstimate, kv_cache_bytes_per_token
from llmcalc.analytic.memory import OPTIMIZERS, RECIPES, training_memory
from llmcalc.analytic.parallel import Parallel
from llmcalc.analytic.params import count_params
from llmcalc.spec import load_hardware, load_model, spec_of

GIB = 2**30


def test_kv_cache_llama_2_7b_fp16():
    """2 (K and V) x 32 layers x 32 heads x 128 x 2 bytes = 0.5 MiB per token; 4,608 tokens = 2.25 GiB.
    (A widely used calculator says 1.12 GiB: it drops the factor 2 for K and V.)"""
    spec = load_model("llama-2-7b")
    assert kv_cache_bytes_per_token(spec, "fp16") * 4608 == 2.25 * GIB


def test_kv_cache_gqa_and_mla():
    assert kv_cache_bytes_per_token(load_model("llama-3-8b"), "bf16") == 128 * 2**10  # GQA: 8 of 32 heads
    assert kv_cache_bytes_per_token(load_model("llama-3-8b"), "fp8") == 64 * 2**10
    # DeepSeek-V2 sec. 2.1.2: MLA caches (d_c + d_h^R) = 512 + 64 elements per token and layer.
    assert kv_cache_bytes_per_token(load_model("deepseek-v3"), "bf16") == 61 * (512 + 64) * 2
    assert kv_cache_bytes_per_token(load_model("falcon-7b"), "bf16") == 2 * 32 * 1 * 64 * 2  # MQA


GPT3_BLOCK = dict(n_layers=4, d_model=2048, n_heads=16, vocab_size=51200, d_ff=8192, mlp="gelu", norm="layernorm",
                  pos_emb="learned", n_positions=2048, qkv_bias=True, out_bias=True, mlp_bias=True)


def _korthikanti_layer(t=1, sp=True, recompute="none"):
    """Per-layer activation bytes for a GPT-3 block, norm statistics aside (the paper ignores them)."""
    spec = spec_of(**GPT3_BLOCK)
    items = [x for x in layer_saved(spec, 0, 2, 2048, 2, attention="eager", dropout=True) if "statistics" not in x.name]
    if recompute == "selective":
        items = [x for x in items if x.scope != "attention_scores"]
    return scaled(items, t, sp)


def test_korthikanti_table_2():
    """Korthikanti et al. 2022, Table 2: activation bytes per layer of a GPT-3 block (2-byte activations)."""
    s, b, h, a = 2048, 2, 2048, 16
    sbh = s * b * h
    assert _korthikanti_layer() == sbh * (34 + 5 * a * s / h)
    assert _korthikanti_layer(recompute="selective") == 34 * sbh
    for t in (2, 4, 8):
        assert _korthikanti_layer(t, sp=False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
        assert _korthikanti_layer(t, sp=True) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    full = activation_memory(spec_of(**GPT3_BLOCK), b, s, 2, recompute="full", head=False)
    assert full.per_layer == {"block input (full recomputation checkpoint)": 4 * 2 * sbh}  # 2·sbh per layer
    # Backward re-runs one layer at a time, which holds that layer's activations (FlashAttention, no dropout):
    # Table 2's 34·sbh less the two 1-byte dropout masks (2·sbh) plus sdpa's saved output O (2·sbh), plus
    # fp32 statistics the paper leaves out: mean and rstd of 2 LayerNorms (16·sb) and the logsumexp (4·a·s·b).
    assert full.recompute_working_set == 34 * sbh + 16 * s * b + 4 * a * s * b


def test_flash_attention_has_no_s2_buffers():
    spec = load_model("llama-2-7b")
    flash = activation_memory(spec, 1, 4096, 2, attention="flash")
    eager = activation_memory(spec, 1, 4096, 2, attention="eager")
    s2 = eager.total - flash.total
    # eager keeps the softmax output P (B·H·S² at 2 bytes) and drops sdpa's O and logsumexp
    assert s2 == pytest.approx(32 * (32 * 4096 * 4096 * 2 - 4096 * 32 * (128 * 2 + 4)))


def test_zero_paper_model_states():
    """Rajbhandari et al. 2020, Fig. 1: mixed-precision Adam, Psi = 7.5B parameters, N_d = 64 GPUs: model
    states per GPU are 120 GB (baseline), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p)."""
    spec = load_model("llama-2-7b")
    n = count_params(spec).total
    for zero, figure in ((0, 120), (1, 31.4), (2, 16.6), (3, 1.9)):
        est = training_memory(spec, 1, 1, "bf16-mixed", "adamw", parallel=Parallel.over(64, zero=zero))
        assert round(est.model_states / n * 7.5e9 / 1e9, 1) == figure


@pytest.mark.parametrize("recipe, optimizer, total", [
    ("fp32", "adamw", 4 + 4 + 8), ("bf16-mixed", "adamw", 16), ("bf16-mixed-fp32-grads", "adamw", 18),
    ("bf16", "adamw", 2 + 2 + 4), ("amp", "adamw", 16), ("bf16-mixed", "sgd", 2 + 2 + 4 + 4),
    ("bf16-mixed", "adam8bit", 2 + 2 + 4 + 2 + 8 / 2048),
])
def test_bytes_per_parameter(recipe, optimizer, total):
    rec, opt = RECIPES[recipe], OPTIMIZERS[optimizer]
    assert rec.weight_bytes + rec.grad_bytes + rec.master_bytes + opt.bytes_per_param(rec) == pytest.approx(total)


def test_optimizer_bytes_option():
    """`--optimizer-bytes 3` with bf16-mixed: 2 (weights) + 2 (grads) + 4 (master) + 3 = 11 bytes per parameter."""
    data = json.loads(run("memory", "llama-2-7b", "--optimizer-bytes", 3, "--format", "json").stdout)
    assert data["model_states_bytes"] == 11 * 6_738_415_616


def test_peak_is_the_larger_phase():
    spec = load_model("llama-2-7b")
    n = 6_738_415_616
    tiny = training_memory(spec, 1, 16)  # activations negligible: the optimizer step holds the peak,
    assert tiny.peak == 16 * n and tiny.peak_phase == "optimizer step"  # 2 + 2 + 4 + 8 bytes per parameter
    big = training_memory(spec, 8, 4096)
    # end of forward: weights, master and Adam states (2 + 4 + 8 bytes/param, gradients freed) + activations
    assert big.peak_phase == "end of forward" and big.peak == 14 * n + big.activations.total > 16 * n
    megatron = training_memory(spec, 8, 4096, "bf16-mixed-fp32-grads")
    assert megatron.peak - big.peak == 4 * n  # Megatron's fp32 main-grad buffer lives through forward


def test_largest_micro_batch_is_the_boundary():
    spec = load_model("llama-3-8b")
    capacity = load_hardware("h100-sxm").memory_bytes
    par = Parallel.over(64, tp=8, zero=3)
    b = training_memory(spec, 1, 4096, parallel=par).largest_micro_batch(capacity)
    assert b >= 1
    assert training_memory(spec, b, 4096, parallel=par).peak <= capacity
    assert training_memory(spec, b + 1, 4096, parallel=par).peak > capacity


def test_pipeline_first_stage_holds_p_micro_batches():
    spec = load_model("llama-2-7b")
    whole = activation_memory(spec, 1, 2048, 2, head=False)
    first = activation_memory(spec, 1, 2048, 2, layers=range(8), in_flight=4, head=False)
    assert first.total == pytest.approx(whole.total)  # 4 in flight x 8 of 32 layers = all 32 layers' worth
    est = training_memory(spec, 1, 2048, parallel=Parallel.over(4, pp=4))
    assert est.stage in ("first", "last") and est.params_on_gpu < count_params(spec).total / 3


def test_decode_is_memory_bound_at_batch_1():
    """Llama-2-7B fp16 on H100 SXM (3.35 TB/s): about 4 ms per token, about 250 tokens/s (upper bound)."""
    est = InferenceEstimate(load_model("llama-2-7b"), load_hardware("h100-sxm"), 1, 128, 64, "fp16", "fp16", "fp16")
    assert est.decode_seconds_per_token == pytest.approx(4e-3, rel=0.05)
    assert est.decode_tokens_per_second == pytest.approx(250, rel=0.05)
    assert est.decode_step(128).bound == "memory" and est.prefill.flops > 0
    # With no KV cache to read, decode turns compute-bound near peak / bandwidth x bytes per param / 2:
    # 989.4e12 / 3.35e12 x 2 / 2 = 295 sequences.
    assert est.compute_bound_batch(with_kv=False) == pytest.approx(989.4 / 3.35, rel=0.02)


def test_memory_cli_json():
    result = run("memory", "llama-3-70b", "--gpu", "h100-sxm", "--n-gpus", 64, "--zero", 3, "--tp", 8, "--format",
                 "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is True and data["largest_micro_batch"] >= 1
    # By hand: Llama-3-70B, N = 70,553,706,496; tp = 8 splits all but the (2·80 + 1) x 8,192 norm gains,
    # which every TP rank keeps whole; ZeRO-3 then shards 16 bytes per parameter over dp = 64 / 8 = 8.
    n, norms = 70_553_706_496, (2 * 80 + 1) * 8192
    assert data["model_states_bytes"] == 16 * ((n - norms) / 8 + norms) / 8
    assert data["per_gpu_bytes"] <= 80 * GIB and data["per_gpu_bytes"] > data["model_states_bytes"]
    infer = json.loads(run("infer", "llama-3-8b", "--gpu", "h100-sxm", "--prompt", "2k", "--generate", 256,
                           "--batch-size", 8, "--format", "json").stdout)
    assert {"prefill_seconds", "decode_seconds_per_token", "tokens_per_second"} <= set(infer)
    assert infer["prefill_bound"] == "compute" and infer["decode_bound_first"] == "memory"


@pytest.mark.parametrize("args, message", [
    (["memory", "llama-3-8b", "--zero", "4"], "'--zero': 4 is not in the range 0<=x<=3"),
    (["memory", "llama-3-8b", "--tp", "3"], "tp=3 does not divide the heads"),
    (["memory", "llama-3-8b", "--inference", "--context", "32k"], "memory --inference has moved: use `llmcalc serve"),
    (["memory", "llama-3-8b", "--recipe", "fp64"], "'--recipe': 'fp64' is not one of 'fp32', 'bf16-mixed'"),
    (["memory", "llama-3-8b", "--optimizer", "adagrad"], "'--optimizer': 'adagrad' is not one of 'adamw'"),
    (["memory", "llama-3-8b", "--n-gpus", "12", "--tp", "8"], "= 8 does not divide --n-gpus 12"),
    (["memory", "t5-small"], "covers decoder-only models"),
    (["infer", "bert-base-uncased", "--gpu", "h100-sxm"], "is an encoder: it generates nothing"),
    (["infer", "llama-3-8b", "--gpu", "h100-sxm", "--weight-dtype", "int3"], "'--weight-dtype': unknown dtype 'int3'"),
])
def test_bad_input(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize("impl", ["fused", "foreach", "for-loop"])
def test_optimizer_impl_scratch_against_torch_mem_tracker(impl):
    """`--optimizer-impl`: the scratch an AdamW step allocates, against torch's MemTracker watching
    torch.optim.AdamW(fused= / foreach= / neither) step the fp32 reference model on fake tensors.
    By hand for fp32 (4-byte states): fused 0; foreach one fp32 copy of every state (sqrt(v)): 4·N bytes;
    for-loop sqrt(v) and its quotient for one tensor at a time: 2 x 4 bytes x the largest tensor."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from llmcalc.profiling.model import build_model

    spec = load_model("llmcalc-tiny")  # tied: the 8,000 x 256 embedding is the largest tensor, and the first
    est = training_memory(spec, 1, 16, "fp32", "adamw", optimizer_impl=impl)
    n = count_params(spec).total
    expected = {"fused": 0, "foreach": 4 * n, "for-loop": 2 * 4 * 8000 * 256}[impl]
    assert est.optimizer_temporaries == expected
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model(spec, torch.float32, "cpu")
        params = list(model.parameters())
        flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]
        optimizer = torch.optim.AdamW(params, **flags)
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()  # creates exp_avg, exp_avg_sq (and a 4-byte step counter per tensor)
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            optimizer.step()
    peak = tracker.get_tracker_snapshot("peak")
    total = sum(v for device in peak.values() for k, v in device.items() if str(k) == "Total")
    steady = 4 * n + 4 * n + 2 * 4 * n + 4 * len(params)  # weights, grads, two states, step counters
    assert total - steady == est.optimizer_temporaries
    data = json.loads(run("memory", "llmcalc-tiny", "--recipe", "fp32", "--seq-len", 16, "--optimizer-impl", impl,
                          "--format", "json").stdout)
    assert data["optimizer_impl"] == impl and data["components"]["optimizer temporaries"] == expected



def test_kv_activations_never_split_below_one_head():
    """Llama-3-70B has 8 KV heads: at tp 16 each rank still saves one head of K and V (replicated), not half."""
    spec = load_model("llama-3-70b")
    items = layer_saved(spec, 0, 1, 4096, 2)
    (kv,) = [x for x in items if x.kv_heads]
    (q,) = [x for x in items if x.name.startswith("Q after RoPE")]
    one_head = 4096 * 2 * 1 * 128 * 2  # tokens x (K, V) x one head x d_head x 2 bytes
    assert kv.per_rank(8, True) == kv.per_rank(16, True) == one_head
    assert kv.per_rank(4, True) == 2 * one_head
    assert q.per_rank(16, True) == 4096 * 64 * 128 * 2 / 16
    est8, est16 = (training_memory(spec, 1, 4096, parallel=Parallel.over(tp, tp=tp)) for tp in (8, 16))
    assert est16.activations.per_layer[kv.name] == est8.activations.per_layer[kv.name] == 80 * one_head


def _hf_layer_params(config: dict) -> list[int]:
    """Each decoder layer's parameters in the transformers model for `config`, built on the meta device: the
    numel of every parameter under model.layers.<i>. (the independent reference)."""
    import re

    from reference import build_hf

    sizes: dict[int, int] = {}
    for name, p in build_hf(config).named_parameters():
        found = re.match(r"model\.layers\.(\d+)\.", name)
        if found:
            sizes[int(found[1])] = sizes.get(int(found[1]), 0) + p.numel()
    return [sizes[i] for i in sorted(sizes)]


HEAVY_DENSE_FIRST = {"model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 1024,
                     "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
                     "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                     "num_hidden_layers": 4, "num_attention_heads": 4,
                     "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 16,
                     "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 256, "tie_word_embeddings": False,
                     "topk_method": "greedy", "n_group": 1, "topk_group": 1}


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "heavy-dense-first"])
def test_zero3_gathered_layer_is_the_two_largest_real_blocks(tmp_path, model):
    """Issue 40 F: the ZeRO-3 gathered layer was two MEAN blocks (2,264,748,411.26 B on DeepSeek-V2-Lite, a
    fraction of a byte); FSDP holds the block it computes and the next one, real blocks: at most the two largest
    (there 2,339,391,488 B: two MoE layers, heavier than the dense first one). Held to the per-layer parameters of
    the transformers model on the meta device, at bf16 (2 bytes), in `memory` and in `layout`'s memory check (the
    same state terms: test_memory_search), for the published config and for one whose dense first layer is the
    heaviest."""
    from pathlib import Path

    if model == "heavy-dense-first":
        config = HEAVY_DENSE_FIRST
        arg = tmp_path / "config.json"
        arg.write_text(json.dumps(config))
    else:
        arg = model
        config = json.loads((Path(__file__).resolve().parent.parent / f"presets/models/{model}.json").read_text())
    layers = sorted(_hf_layer_params(config))
    if model == "heavy-dense-first":
        assert layers[-1] != layers[-2]  # the dense layer and an MoE one: not two of one kind
    result = run("memory", arg, "--zero", "3", "--n-gpus", 8, "--format", "json")
    assert result.exit_code == 0, result.output
    gathered = json.loads(result.stdout)["components"]["ZeRO-3 gathered layer"]
    assert gathered == 2 * (layers[-1] + layers[-2])
    if model == "deepseek-v2-lite":
        assert gathered == 2_339_391_488
