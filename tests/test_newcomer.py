"""Issue 25's answers that contradicted each other or physics, and its messages, each against a reference
worked out here: hand arithmetic written out, another command's output, or peft/transformers on the meta device.
"""

import json
import warnings

import pytest
from clirun import cli_json, one_line_error, run

GIB = 2**30


# --- QLoRA on Nemotron-H-8B: positive weights, the adapters peft would make -----------------------------------

D, E, G, N, H, K, F, V = 4096, 8192, 8, 128, 128, 4, 21504, 131072  # nemotron-h-8b's config.json
MAMBA_OUT = 2 * E + 2 * G * N + H  # in_proj's output: z, x, B, C and dt


def test_qlora_on_nemotron_h_8b_has_positive_weights_and_peft_s_adapter_count():
    """`memory nemotron-h-8b --finetune qlora --lora-rank 64` printed `weights -0.59 GiB`. By hand: 24 Mamba-2
    layers adapt in_proj (D -> 2E + 2GN + H; out_proj frozen, as peft has it for nemotron_h), 4 attention
    layers q, o (D <-> 32·128) and k, v (D -> 8·128), 24 MLP layers up, down (D <-> F); r·(d_in + d_out) each.
    The frozen block linears are nf4 at 0.5 + 1/64 + 4/(64·256) bytes per weight, the rest bf16."""
    r = 64
    adapters = r * (24 * (D + MAMBA_OUT) + 4 * (2 * (D + 32 * 128) + 2 * (D + 8 * 128)) + 24 * 2 * (D + F))
    assert adapters == 120_258_560
    data = cli_json("memory", "nemotron-h-8b", "--finetune", "qlora", "--lora-rank", r)
    ft = cli_json("params", "nemotron-h-8b", "--finetune", "qlora", "--lora-rank", r)
    assert ft["trainable"] == adapters, ft
    linears = (24 * (D * MAMBA_OUT + E * D) + 4 * (2 * D * 32 * 128 + 2 * D * 8 * 128) + 24 * 2 * D * F)
    rest = 2 * V * D + 52 * D + D + 24 * ((E + 2 * G * N) * (K + 1) + 3 * H + E)
    nf4 = linears * (0.5 + 1 / 64 + 4 / (64 * 256)) + 2 * rest
    weights = data["components"]["weights"]
    assert 0 < weights == pytest.approx(nf4, rel=1e-3)
    assert data["components"]["adapters"] == 4 * adapters  # fp32 adapters


@pytest.mark.slow
def test_lora_count_on_nemotron_h_8b_is_peft_s():
    """The same count from peft's own LoraModel over transformers' NemotronH on the meta device (all-linear,
    which peft resolves to every nn.Linear but the LM head; out_proj is excluded for nemotron_h)."""
    peft = pytest.importorskip("peft")
    from reference import build_hf  # noqa: PLC0415

    from llmcalc.spec.presets import model_config  # noqa: PLC0415

    model = build_hf(model_config("nemotron-h-8b"))
    targets = sorted({name.split(".")[-1] for name, m in model.named_modules()
                      if type(m).__name__ == "Linear" and name != "lm_head"} - {"out_proj"})
    config = peft.LoraConfig(r=64, target_modules=targets, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainable = peft.get_peft_model(model, config).get_nb_trainable_parameters()[0]
    assert trainable == 120_258_560
    assert cli_json("params", "nemotron-h-8b", "--finetune", "lora", "--lora-rank", 64)["trainable"] == trainable


def test_report_of_mamba_2_8b_answers(tmp_path):
    """`report mamba-2.8b` crashed on a shipped preset (no dense FFN width); its parameter table is that of
    `params` (hand count of the same preset in test_ssm: 2,768,345,600)."""
    result = run("report", "mamba-2.8b", "--out", tmp_path / "r", "--n-gpus", 8)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "report.md").is_file()
    assert cli_json("params", "mamba-2.8b")["total"] == 2_768_345_600
    assert "2,768,345,600" in (tmp_path / "r" / "tables" / "params-mamba-2.8b.csv").read_text().replace(
        "2768345600", "2,768,345,600")


# --- infer refuses weights that do not fit and names the tensor-parallel degree that does ---------------------

@pytest.mark.parametrize("model, gpu, n_gpus, capacity_gib, tp", [
    ("mixtral-8x7b", "h100-sxm", 1, 80, 2),  # 86.99 GiB of bf16 weights: 43.5 GiB per GPU at tp 2
    ("llama-3.1-405b", "h200", 2, 141, 8),  # 378 GiB at tp 2, 189 at tp 4, 94.5 at tp 8
])
def test_infer_refuses_weights_that_do_not_fit(model, gpu, n_gpus, capacity_gib, tp):
    """Weights = 2 bytes x `params`'s total, split over the tensor-parallel GPUs; `serve` says the same."""
    total = cli_json("params", model)["total"]
    per_gpu = 2 * total / n_gpus
    assert per_gpu > capacity_gib * GIB
    assert 2 * total / tp < capacity_gib * GIB < 2 * total / (tp // 2)  # tp is the smallest power of two that fits
    line = one_line_error("infer", model, "--gpu", gpu, "--n-gpus", n_gpus)
    assert f"({per_gpu / GIB:.2f} GiB per GPU) do not fit in {gpu}'s {capacity_gib} GiB" in line
    assert f"--n-gpus {tp} (tensor parallel) fits" in line
    assert cli_json("serve", model, "--gpu", gpu, "--n-gpus", n_gpus)["fits"] is False
    assert run("infer", model, "--gpu", gpu, "--n-gpus", tp).exit_code == 0


# --- full recomputation never peaks above none ----------------------------------------------------------------

@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"])
def test_more_recomputation_never_peaks_higher(model):
    """Recomputation only drops saved activations; the gradients are the same in every mode, so the peak can only
    fall from none to selective to full (it was higher under full for these three MoE models)."""
    peaks = {mode: cli_json("memory", model, "--recompute", mode)["per_gpu_bytes"]
             for mode in ("none", "selective", "full")}
    assert peaks["full"] <= peaks["selective"] <= peaks["none"], peaks
    for mode in ("none", "selective"):
        assert cli_json("memory", model, "--recompute", mode)["peak_phase"] in (
            "blocks' backward", "end of forward", "optimizer step")


# --- numbers that should not print ------------------------------------------------------------------------------

def test_an_mfu_above_one_is_refused():
    line = one_line_error("profile", "llmcalc-tiny", "--device", "cpu", "--peak-tflops", "1e-300", "--steps", 1,
                          "--warmup", 0, "--batch-size", 1, "--seq-len", 32)
    assert "above the peak of 1e-300 TFLOP/s" in line and "> 1" in line and len(line) < 300


def test_serve_with_no_room_has_a_deficit_and_no_negative_bytes():
    """Llama-2-70B in fp16: 2 x 68,976,648,192 parameters = 137,953,296,384 bytes on one 80 GiB A100, so the KV
    cache gets nothing and the deficit is at least the weights less the 80 GiB."""
    data = cli_json("serve", "llama-2-70b", "--gpu", "a100-80gb-sxm", "--max-model-len", 1)

    def numbers(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from numbers(v)
        elif isinstance(value, list):
            for v in value:
                yield from numbers(v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield value

    assert min(numbers(data)) >= 0
    assert data["fits"] is False and data["kv_cache_memory_bytes_per_gpu"] == 0
    assert data["checkpoint_bytes"] == 2 * cli_json("params", "llama-2-70b")["total"]
    assert data["memory_deficit_bytes_per_gpu"] > data["checkpoint_bytes"] - 80 * GIB


# --- names -------------------------------------------------------------------------------------------------------

def test_published_repo_ids_resolve_to_their_architecture():
    """Hand counts from each checkpoint's published config.json. Llama-3.1-8B-Instruct: 32 layers of D 4096,
    8 KV heads of 128, F 14336, V 128256 untied. Mistral-7B-Instruct-v0.3 differs from the mistral-7b preset
    (v0.1) in vocab_size 32768 (32000 there), 32k positions and no sliding window. Qwen2.5-7B-Instruct: 28 layers
    of D 3584, 4 KV heads of 128 with q/k/v biases, F 18944, V 152064 untied. DeepSeek-R1 is DeepSeek-V3's."""
    def dense(L, D, kv, F, V, bias=0):
        attention = 2 * D * D + 2 * D * kv * 128 + bias * (D + 2 * kv * 128)
        return 2 * V * D + L * (attention + 3 * D * F + 2 * D) + D

    assert cli_json("params", "meta-llama/Llama-3.1-8B-Instruct")["total"] == dense(32, 4096, 8, 14336, 128256)
    mistral = cli_json("params", "mistralai/Mistral-7B-Instruct-v0.3")
    assert mistral["total"] == dense(32, 4096, 8, 14336, 32768) == 7_248_023_552
    assert cli_json("params", "mistral-7b")["total"] == dense(32, 4096, 8, 14336, 32000)
    assert "vocab_size 32,768" in mistral["source"] and "sliding_window null" in mistral["source"]
    assert cli_json("params", "Qwen/Qwen2.5-7B-Instruct")["total"] == dense(28, 3584, 4, 18944, 152064, bias=1)
    r1, v3 = cli_json("params", "deepseek-ai/DeepSeek-R1"), cli_json("params", "deepseek-v3")
    assert r1["total"] == v3["total"] and r1["active_per_token"] == v3["active_per_token"]
    for repo in ("meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"):
        assert repo in run("presets").stdout


@pytest.mark.parametrize(("repo", "model"), [
    ("Qwen/Qwen3-14B", "qwen3-14b"), ("Qwen/Qwen3-4B", "qwen3-4b"), ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b"), ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("microsoft/phi-4", "phi-4"),
    ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b-instruct"), ("Qwen/Qwen2.5-32B-Instruct", "qwen2.5-32b-instruct"),
    ("Qwen/Qwen2-72B-Instruct", "qwen2-72b-instruct"),
])
def test_serving_benchmarks_repo_ids_resolve(repo, model):
    """Checkpoints public serving benchmarks name (TensorRT-LLM's perf tables, vLLM CI, NIM) answer offline, under
    the preset's name or, where their config.json differs, the repo's."""
    data = cli_json("params", repo)
    assert data["model"] == model and data["total"] > 0


def test_an_unknown_repo_id_says_how_to_pass_its_config():
    line = one_line_error("params", "some-org/some-model-7b")
    assert "'some-org/some-model-7b'" in line and "config.json" in line
    assert "https://huggingface.co/some-org/some-model-7b/blob/main/config.json" in line


@pytest.mark.parametrize("typed", ["LLAMA-3-8B", " llama-3-8b ", "Llama-3-8B"])
def test_train_prints_the_canonical_name(typed):
    args = ["--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 8, "--mfu", 0.4]
    result = run("train", typed, *args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("llama-3-8b: "), result.stdout[:80]
    assert cli_json("train", typed, *args)["model"] == cli_json("params", typed)["model"] == "llama-3-8b"


def test_gpu_suggestions_start_with_the_typed_name():
    line = one_line_error("memory", "llama-3-8b", "--gpu", "H100")
    suggested = line.split("did you mean ")[1].split("?")[0].split(", ")
    h100 = [n for n in run("presets", "--format", "json").stdout.split('"') if n.startswith("h100-")]
    assert suggested[:len(set(h100))] == sorted(set(h100)), suggested


# --- messages ----------------------------------------------------------------------------------------------------

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_missing_width_names_the_config_key(tmp_path):
    llama = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "vocab_size": 1000}
    line = one_line_error("params", write(tmp_path, "a.json", json.dumps(llama)))
    assert "config key intermediate_size (llmcalc's d_ff) must be a positive whole number; the config has none" in line
    line = one_line_error("params", write(tmp_path, "b.json", json.dumps({**llama, "intermediate_size": None})))
    assert "config key intermediate_size (llmcalc's d_ff)" in line and "it is null" in line
    assert "None" not in line


def test_a_config_of_null_says_null(tmp_path):
    line = one_line_error("params", write(tmp_path, "c.json", "null"))
    assert line.endswith("expected a JSON object ({\"model_type\": ...}), got null") and "NoneType" not in line
    assert one_line_error("params", write(tmp_path, "d.json", "[1]")).endswith("got an array")


def test_length_examples_use_the_length_suffixes():
    """The length error listed the count examples 7B and 1.5T, which its own suffix list refuses; each example
    it gives now reads back as the length it names."""
    line = one_line_error("memory", "llama-3-8b", "--seq-len", "4x")
    assert "7B" not in line and "1.5T" not in line
    assert "e.g. 2048, 4k (= 4,096), 32k, 1M (= 1,048,576)" in line
    for example, tokens in (("4k", 4096), ("32k", 32768), ("1M", 1_048_576), ("2048", 2048)):
        assert cli_json("memory", "llama-3-8b", "--seq-len", example)["seq_len"] == tokens


def test_global_batch_tokens_answers_the_nearest_multiple_and_says_16mi():
    """Issue 41: `--global-batch-tokens 16M` (the help text's own example) failed at every power-of-two sequence
    length. 16M = 16,000,000 tokens over 8,192-token sequences = 1,953.125 sequences: the nearest whole number,
    1,953 x 8,192 = 15,998,976 tokens, is used with a note, which names 16Mi = 2,048 x 8,192 = 16,777,216 (what a
    16M batch means in Llama 3's and DeepSeek-V3's papers)."""
    args = ["train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 1, "--seq-len", "8k"]
    result = run(*args, "--global-batch-tokens", "16M")
    assert result.exit_code == 0, result.output
    assert ("using the nearest, 1,953 sequences = 15,998,976 tokens; for 2,048 x 8,192 = 16,777,216 write 16Mi"
            in result.stderr)
    exact = run(*args, "--global-batch-tokens", "16Mi")
    assert exact.exit_code == 0 and "warning" not in exact.stderr, exact.output
    by_sequences = cli_json(*args, "--global-batch", 2048)
    assert cli_json(*args, "--global-batch-tokens", "16Mi")["step_seconds"] == by_sequences["step_seconds"]


def test_plurals_agree_with_one(monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")  # 32k past Llama-2-70B's 4,096 positions, as vLLM allows
    result = run("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 8)
    assert result.exit_code == 0, result.output
    assert "global batch 8 sequences = 1 micro-batch per pipeline" in result.stdout
    assert "1 micro-batches" not in result.stdout
    serve_args = ["serve", "llama-2-70b", "--gpu", "h100-sxm", "--n-gpus", 2, "--max-model-len", "32k"]
    assert cli_json(*serve_args)["max_concurrent_sequences"] == 1
    serve = run(*serve_args)
    assert serve.exit_code == 0, serve.output
    assert "1 concurrent sequence of 32,768 tokens" in serve.stdout and "1 concurrent sequences" not in serve.stdout
    layout = run("layout", "llmcalc-tiny", "--gpu", "h100-sxm", "--n-gpus", 1, "--global-batch", 1,
                 "--seq-len", 128)
    assert layout.exit_code == 0, layout.output
    assert "global batch 1 sequence" in layout.stdout and "1 sequences" not in layout.stdout


def test_a_counted_model_s_line_names_its_model_type_once(tmp_path):
    pytest.importorskip("transformers")
    path = write(tmp_path, "codegen.json", json.dumps({"model_type": "codegen", "n_layer": 2, "n_embd": 64,
                                                        "n_head": 4, "rotary_dim": 8, "vocab_size": 1000,
                                                        "n_positions": 256}))
    result = run("params", path)
    assert result.exit_code == 0, result.output
    assert "codegen: codegen:" not in result.stdout
    assert result.stdout.startswith("codegen: model_type codegen, counted by transformers")


def test_the_unknown_model_type_line_is_short(tmp_path):
    line = one_line_error("params", write(tmp_path, "z.json", json.dumps({"model_type": "zzz", "hidden_size": 64})))
    assert "model_type 'zzz' is unknown" in line and '"mlp", "norm", "pos_emb"' in line
    # was ~1,000 characters listing 62 model types (the path is the test's: pytest-xdist's workers make it longer)
    assert len(line.replace(str(tmp_path), "")) < 338 and "llama, " not in line  # 400 with pytest-NNN/ inside


def test_memory_help_does_not_describe_inference():
    result = run("memory", "--help")
    assert result.exit_code == 0 and "--inference" not in result.output


def test_the_eager_attention_kernel_only_under_eager():
    """The footnotes named an eager-attention constant under --attention flash; the step model's notes now name
    the attention kernel it timed: eager (materialised scores) only when eager is asked for."""
    args = ["train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--n-gpus", 8, "--global-batch", 8]
    flash = run(*args)
    eager = run(*args, "--attention", "eager")
    assert flash.exit_code == eager.exit_code == 0
    assert "eager" not in flash.stdout
    assert any("attention_kernel eager" in line for line in eager.stdout.splitlines() if "assumed:" in line)


@pytest.mark.parametrize("args, says", [
    # Llama-3-8B: 32 query heads, 8 KV heads (its config.json); 8 GPUs split as tp x cp x pp x dp
    (["--n-gpus", 8, "--tp", 3], "= 3 does not divide --n-gpus 8; the nearest --tp that divides the 8 GPUs: 2 or 4"),
    (["--n-gpus", 3, "--tp", 3], "--tp must divide the 32 attention heads and divide (or be a multiple of) the 8 KV "
                                 "heads; the nearest valid --tp: 2 or 4"),
    (["--n-gpus", 8, "--tp", 3, "--pp", 2], "the nearest --tp that divides the 8 GPUs at cp 1 x pp 2: 2 or 4"),
])
def test_tp_refusals_name_the_count_and_the_nearest_valid_degrees(args, says):
    """Issue 41: `--tp 3 --n-gpus 8` said "does not divide" without naming what; the refusal names the count the
    degree must divide (GPUs, attention heads, KV heads) and the nearest degrees that do."""
    line = one_line_error("train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--global-batch", 48, *args)
    assert says in line


def test_gpu_memory_answers_memory_for_any_card_and_names_presets_where_speed_is_needed():
    """Issue 41: `--gpu-memory 24GB` is a GPU known by its memory alone: `memory` answers whether a plan fits on it,
    the same as on a preset of that memory with no runtime figure; a command that needs the GPU's speed says in one
    line which presets have that memory (the 24 GB cards: A10, A10G, L4, RTX 3090, RTX 4090, RTX A5000)."""
    import dataclasses

    from llmcalc.analytic.memory_plan import MemoryRequest, plan_memory
    from llmcalc.spec import load_hardware, load_model

    data = cli_json("memory", "llama-3-8b", "--gpu-memory", "24GB", "--finetune", "qlora")
    card = dataclasses.replace(load_hardware("rtx-4090"), cuda_visible_bytes=0.0)  # 24 GiB nominal, as a card's GB
    request = MemoryRequest(1, 4096, finetune=cli_finetune_qlora())
    plan = plan_memory(load_model("llama-3-8b"), request, card)
    assert data["fit_on_gpu"] == plan.fit and plan.fit
    assert data["capacity_bytes"] + data["cuda_context_bytes"] == 24 * 2**30 and data["device"] == "24 GiB GPU"
    line = one_line_error("train", "llama-3-8b", "--tokens", "1T", "--gpu-memory", "24GB", "--mfu", 0.4)
    assert "give --gpu with a preset instead (24 GiB: a10, a10g, l4, rtx-3090, rtx-4090, rtx-a5000)" in line
    for speed in (["serve", "llama-3-8b", "--input-len", 1024, "--output-len", 128],
                  ["layout", "llama-3-8b", "--n-gpus", 8, "--global-batch", 64]):
        assert "h800-sxm" in one_line_error(*speed, "--gpu-memory", "80GB")
    assert "h800-sxm" in cli_json("serve", "llama-3-8b", "--gpu-memory", "80GB")["speed_note"]  # capacity answered
    assert "not both" in one_line_error("memory", "llama-3-8b", "--gpu-memory", "24GB", "--gpu", "rtx-4090")
    assert "e.g. 24GB" in one_line_error("memory", "llama-3-8b", "--gpu-memory", "24XB")


def cli_finetune_qlora():
    from llmcalc.analytic.finetune_request import FinetuneRequest

    return FinetuneRequest(method="qlora")


def test_infer_takes_vllm_bench_latency_spelling():
    """`vllm bench latency` spells a static batch --input-len, --output-len, --batch-size; infer answers it as it
    answers --prompt and --generate (the same request), and a zero length is one line naming both spellings."""
    bench = cli_json("infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", 128, "--output-len", 64,
                     "--batch-size", 4)
    ours = cli_json("infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt", 128, "--generate", 64,
                    "--batch-size", 4)
    assert bench == ours
    assert "--output-len" in one_line_error("infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--output-len", 0)
