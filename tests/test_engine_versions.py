"""llmcalc/analytic/engine_versions.py: `serve --engine trtllm|sglang --engine-version V` answers any release, with
what changes between releases read from the engines' sources, and TensorRT-LLM's offline maximum throughput as
trtllm-bench measures it.

Held to: the engines' sources as quoted (tensorrt_llm/bench/build/build.py's FP8 KV cache, throughput.py's in-process
requests, PyTorchConfig's 0.x defaults, SGLang's server_args.py of 0.3-0.4), the release strings the validation
set's sources wrote, and NVIDIA's published maximum throughput of Llama 3.1 405B on 8 x H200."""

import json
import sys
from pathlib import Path

import pytest
from clirun import cli_json, one_line_error

from llmcalc.analytic import engine_versions, engines, serving_speed
from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.serving import plan_serving
from llmcalc.errors import LlmcalcError
from llmcalc.spec import load_hardware, load_model

BENCH = Path(__file__).parent.parent / "benchmarks"
ROWS = {r["id"]: r for r in json.loads((BENCH / "serving_validation.json").read_text())["rows"]}


def test_release_numbers_as_sources_write_them_are_accepted():
    """The versions the validation set's sources state, verbatim (dstack, GPUStack)."""
    stated = {(r["engine"], r["engine_version"]) for r in ROWS.values()
              if r["engine"] in ("trtllm", "sglang") and r.get("engine_version")}
    assert ("trtllm", "0.17.post1.dev (PyTorch flow)") in stated and len(stated) >= 6
    for engine, version in stated:
        assert engines.profile(engine, version).version == version
    assert engine_versions.parse("trtllm", "1.0.0rc4") == (1, 0, 0)
    assert engine_versions.parse("sglang", "v0.4.3.post2") == (0, 4, 3)


@pytest.mark.parametrize("engine, version", [("trtllm", "abc"), ("trtllm", "7.0"), ("trtllm", "0.1.0"),
                                             ("sglang", "latest"), ("sglang", "5.0")])
def test_no_release_is_refused(engine, version):
    with pytest.raises(LlmcalcError, match=f"--engine-version {version}"):
        engines.profile(engine, version)


def test_each_trtllm_release_gets_its_backend():
    """Before 1.0 trtllm-bench ran a TensorRT engine (build.py builds it); 0.17-0.18's PyTorch flow had PyTorchConfig's
    ``enable_overlap_scheduler: bool = False``; 1.0 on, the PyTorch backend with the overlap scheduler."""
    trt = engines.profile("trtllm", "0.12.0")
    assert "TensorRT engine" in trt.answered and "tensorrt_llm/bench/build/build.py" in trt.sources
    early = engines.profile("trtllm", "0.17.post1.dev (PyTorch flow)")
    assert not early.overlap and "overlap scheduler off" in early.answered
    current = engines.profile("trtllm", "1.0.0")
    assert current.overlap and "PyTorch backend" in current.answered
    assert engines.profile("trtllm", "0.20.0 (pytorch)").overlap  # the overlap scheduler the default by then
    assert engines.profile("trtllm") is engines.PROFILES["trtllm"]


def test_old_sglang_sizes_its_memory_by_tp_and_has_no_overlap_before_0_4():
    """server_args.py of 0.3-0.4: "if self.tp_size >= 16: 0.79 elif >= 8: 0.81 elif >= 4: 0.85 elif >= 2: 0.87 else:
    0.88"; ``enable_overlap_schedule: bool = False`` before 0.4."""
    assert [engine_versions.sglang_tp_fraction(tp) for tp in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]
    old, mid, new = (engines.profile("sglang", v) for v in ("0.3.6", "0.4.6", "0.5.2"))
    assert not old.overlap and mid.overlap and new.overlap
    assert old.kv_memory == mid.kv_memory == "static_fraction_tp" and new.kv_memory == "static_fraction"
    serve = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, 4096)
    total = serve.accelerator.usable_bytes
    assert engines.kv_share(mid, serve) * serve.kv_cache_bytes == pytest.approx(
        0.88 * total - serve.weights_bytes_per_gpu)


def _step(serve, version):
    est = serve.roofline(1, 1024)
    base = serving_speed.StepCost(est, device_for(serve.accelerator.key), serve.tp)
    return engines.step_cost(base, engines.profile("trtllm", version), serve, host=serving_speed.ENGINE_STEP_SECONDS)


def test_the_early_pytorch_flow_adds_the_host_to_the_gpu():
    """Without the overlap scheduler (0.x PyTorch flow) a step is GPU + host; with it (1.0 on) max(GPU, host)."""
    serve = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, 4096)
    early, current = _step(serve, "0.17.0 (pytorch)"), _step(serve, "1.0.0")
    shape = dict(tokens=64, rows=64, kv_tokens=64 * 1024, decodes=64, pairs=0, length=1024)
    gpu = current.gpu_seconds(**shape)
    assert early.seconds(**shape) == pytest.approx(gpu + early.host, rel=1e-9)
    assert current.seconds(**shape) == pytest.approx(max(gpu, current.host), rel=1e-9)


def test_tensorrt_engines_add_the_executors_host_work():
    """TensorRT engines (before 1.0): the C++ executor's loop waits for a step (forwardSync), builds responses and
    prepares the next step before enqueueing it (executorImpl.cpp executionLoop, one micro-batch since
    enable_trt_overlap was removed), so a step is GPU + host, as the 0.x PyTorch flow's."""
    serve = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, 4096)
    trt = _step(serve, "0.16.0")
    assert not trt.prof.overlap and "added to them" in trt.prof.scheduler
    shape = dict(tokens=64, rows=64, kv_tokens=64 * 1024, decodes=64, pairs=0, length=1024)
    assert trt.seconds(**shape) == pytest.approx(trt.gpu_seconds(**shape) + trt.host, rel=1e-9)


def test_trtllm_dense_projections_from_its_measured_kernels():
    """Llama-3.1-70B's config (hidden 8,192, 64 heads, 8 KV heads of 128, intermediate 28,672) at TP 8 gives the
    GEMMs TensorRT-LLM runs per GPU: fused QKV 1,280 x 8,192, o_proj 8,192 x 1,024, fused gate/up 7,168 x 8,192, down
    8,192 x 3,584. A TensorRT-LLM step times them from its own measured table (aiconfigurator-core's, measured in
    TensorRT-LLM), where from 2,000 tokens on they run at 65-80 % of the FP8 MAMF (mamf-finder's 1,402.6 TFLOP/s,
    measured on a 1024 x 9216 x 14336 GEMM); vLLM keeps its roofline GEMMs."""
    from llmcalc.analytic import kernel_tables, measured_kernels

    serve = plan_serving(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), 8, 4096, weight_dtype="fp8")
    sites = ((1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))
    assert measured_kernels.dense_gemm_sites(serve.spec, 8) == sites
    trt = _step(serve, "0.16.0")
    for m in (256, 2000, 8000):  # (the step's tokens read to 3 figures)
        layer = sum(kernel_tables.gemm_seconds("h100_sxm.trtllm", m, n, k, "fp8") for n, k in sites)
        assert trt.base.linear_seconds(m) == pytest.approx(80 * layer, rel=1e-9)
        rate = 2 * m * sum(n * k for n, k in sites) / layer
        assert m < 2000 or 0.65 * 1402.6e12 < rate < 0.80 * 1402.6e12  # compute-bound steps
    vllm = serving_speed.StepCost(serve.roofline(1, 1024), device_for("h100-sxm"), 8)
    assert vllm.gemm_shape is None


def test_trtllm_serves_fp8_and_nvfp4_weights_with_an_fp8_kv_cache():
    """bench/build/build.py: "If the quantization is NVFP4 or FP8, force the KV cache dtype to FP8"; DeepSeek's
    block-scaled FP8 checkpoint and gpt-oss's MXFP4 keep the model's KV dtype, and vLLM never changes it."""
    def weights(model, dtype=None):
        return plan_serving(load_model(model), load_hardware("b200"), 8, 4096, weight_dtype=dtype).weights

    assert engine_versions.default_kv_dtype("trtllm", weights("llama-3.1-8b", "fp8")) == "fp8"
    assert engine_versions.default_kv_dtype("trtllm", weights("llama-3.1-8b", "nvfp4")) == "fp8"
    assert engine_versions.default_kv_dtype("trtllm", weights("deepseek-v3")) is None
    assert engine_versions.default_kv_dtype("trtllm", weights("gpt-oss-120b")) is None
    assert engine_versions.default_kv_dtype("vllm", weights("llama-3.1-8b", "fp8")) is None
    args = ("serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "1024", "--output-len", "1024", "--engine",
            "trtllm", "--weight-dtype", "fp8")
    fp8 = cli_json(*args)["performance"]["assumptions"]["kv_cache_requests"]
    bf16 = cli_json(*args, "--kv-dtype", "bf16")["performance"]["assumptions"]["kv_cache_requests"]
    assert fp8 == pytest.approx(2 * bf16, rel=0.05)  # one byte per element instead of two


def test_trtllm_offline_is_trtllm_bench_in_process():
    """throughput.py feeds the LLM API in-process, unstreamed, undetokenized ("post_proc_params = None  # No
    detokenization"): no API server paces the offline run; a closed loop of clients goes through trtllm-serve."""
    args = ("serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "128", "--output-len", "128", "--engine",
            "trtllm", "--engine-version", "0.12.0")
    offline = cli_json(*args)["performance"]
    assert offline["assumptions"]["frontend_token_seconds"] == 0.0
    assert "trtllm-bench" in offline["assumptions"]["arrivals"]
    assert "TensorRT engine" in offline["assumptions"]["profile"] and offline["engine_version"] == "0.12.0"
    clients = cli_json(*args, "--max-concurrency", "64")["performance"]
    assert clients["assumptions"]["frontend_token_seconds"] > 0


@pytest.mark.parametrize("row_id", ["nvidia-blog-405b-h200-tp8-trtllm-modelopt-fp8-2048-128",
                                    "nvidia-blog-405b-h200-tp8-trtllm-modelopt-fp8-120000-2048"])
def test_405b_maximum_throughput_on_8_h200(row_id):
    """NVIDIA's Llama 3.1 405B ModelOpt FP8 (FP8 KV) on 8 x H200, maximum throughput in output tokens/s: 463.1 at
    2,048 in / 128 out and 71.5 at 120,000 / 2,048 (NVIDIA Technical Blog, 2024-08-28, Table 1); within 25 %."""
    sys.path.insert(0, str(BENCH))
    from bench_serving_speed import predict_workload

    row = ROWS[row_id]
    measured = row["metrics"]["output_tokens_per_second"]
    assert predict_workload(row)["output_tokens_per_second"] == pytest.approx(measured, rel=0.25)


def test_a_nonsense_version_is_one_line_exit_2():
    line = one_line_error("serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "128", "--output-len", "128",
                          "--engine", "trtllm", "--engine-version", "abc")
    assert "--engine-version abc" in line


def test_eager_dispatch_is_the_measured_eager_step():
    """sgl-project/sglang PR #1401, batch 1 decode without CUDA graphs: Llama-3-8B (32 dense layers) 8.23 ms a step;
    DeepSeek-Coder-V2-Lite (1 dense + 26 MoE/MLA layers) 4 x its 6.22 ms with CUDA graphs."""
    assert engine_versions.eager_dispatch_seconds(32, 0) == pytest.approx(8.23e-3)
    assert engine_versions.eager_dispatch_seconds(27, 26) == pytest.approx(4 * 6.22e-3)


@pytest.mark.parametrize("row_id", ["dstack-deepseek-r1-h200-tp8-trtllm-3200-800-c4",
                                    "dstack-deepseek-r1-h200-tp8-trtllm-3200-800-c16"])
def test_trtllm_0_17_pytorch_flow_steps_at_the_eager_dispatch(row_id):
    """dstack's DeepSeek-R1 on 8 x H200 through TensorRT-LLM 0.17's PyTorch flow (`trtllm-serve --backend pytorch`,
    no option file: PyTorchConfig ``use_cuda_graph: bool = False``), 3,200 in / 800 out: median TPOT 55.1 ms at 4
    clients and 57.6 ms at 16 (dstackai/benchmarks online_results.csv); its 61 layers' eager dispatch (3 dense, 58
    MoE) predicts it within 10 %, where the same step with CUDA graphs (1.0's) is under 60 % of it."""
    sys.path.insert(0, str(BENCH))
    from bench_serving_speed import predict_workload

    row = ROWS[row_id]
    measured = row["metrics"]["tpot_seconds_median"]
    assert predict_workload(row)["tpot_seconds_median"] == pytest.approx(measured, rel=0.10)
    assert predict_workload({**row, "engine_version": "1.0.0"})["tpot_seconds_median"] < 0.6 * measured


def test_trtllm_bench_chunks_contexts_in_later_releases():
    """trtllm-bench throughput's later command chunks contexts by default ("--enable_chunked_context/
    --disable_chunked_context", default=True), so an ISL as long as trtllm-bench's tuned max_num_tokens (tuning.py
    finetune_setting: max(2048, ...) for 2,048 / 2,048 at a few hundred KV requests) still shares steps with the running
    generations; without chunking (microBatchScheduler.cpp: a whole context that outgrows the step's tokens stops the
    batch) one request at a time would run. A served trtllm (trtllm-serve: enable_chunked_prefill default False) and
    TensorRT-engine releases keep the whole-context rule."""
    from llmcalc.analytic import engines
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.spec import load_hardware, load_model

    est = plan_serving(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), 4, weight_dtype="fp8")
    current = engines.profile("trtllm")
    assert engines.scheduler_policy(current, est, offline=True).chunked
    assert not engines.scheduler_policy(current, est, offline=False).chunked
    assert not engines.scheduler_policy(engines.profile("trtllm", "1.0.0"), est, offline=True).chunked
    tokens, _ = engines.trtllm_bench_settings(est, 2048, 2048)
    assert tokens == 2048  # the heuristic's floor: a 2,048-token context fills a step alone


def _offline_8b(version: str, input_len: int = 2048, output_len: int = 2048) -> serving_speed.Performance:
    """trtllm-bench's offline run of Llama-3.1-8B FP8 on one H100 at `version` (the serial case of issue 36: the
    tuned max_num_tokens, max(2048, ...), equals the 2,048-token ISL)."""
    est = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, weight_dtype="fp8")
    work = serving_speed.Workload(input_len, output_len, num_prompts=300, served=False)
    return serving_speed.plan_workload(est, work, "trtllm", version)


@pytest.mark.parametrize("version", ["0.12.0", "0.16.0", "0.21.0"])
def test_trtllm_bench_tensorrt_engines_chunk_contexts(version):
    """trtllm-bench's TensorRT-engine flow runs the C++ executor with chunked context, first come first served
    (bench/run/dataclasses.py ExecutorSettingsConfig ``chunking: bool = True`` passed as
    ``enable_chunked_context``; PR #6956: "True for TensorRT"): a 2,048-token context beside running generations
    under the tuned 2,048-token max_num_tokens is split, not serialised, so many sequences run at once."""
    perf = _offline_8b(version)
    assert perf.chunked and perf.max_num_batched_tokens == 2048
    assert perf.run.mean_running > 50


def test_trtllm_bench_1_0_raises_max_num_tokens_past_the_longest_prompt():
    """1.0's trtllm-bench (PyTorch flow, chunking off: PR #6956 "False for others") raises the tuned max_num_tokens to
    the dataset's max ISL + max_batch_size (bench/benchmark/utils/general.py get_settings: ``max(max_num_tokens,
    dataset_metadata.max_isl + max_batch_size)``), so a whole 2,048-token context fits beside every running
    generation (microBatchScheduler.cpp schedules generations first, one token each) and many sequences run."""
    perf = _offline_8b("1.0.0")
    assert not perf.chunked
    assert perf.max_num_batched_tokens == 2048 + perf.max_num_seqs
    assert perf.run.mean_running > 50
    words = perf.record()["assumptions"]["context_chunking"]
    assert "longest prompt + max_batch_size" in words


def test_trtllm_bench_token_floor_only_where_the_code_has_it():
    """The floor is the PyTorch flow's without chunking (0.20 to 1.0); 1.1 and later chunk instead, the 0.17-0.18
    PyTorch flow predates it (PR #4133), TensorRT engines chunk, and a served run keeps trtllm-serve's defaults."""
    est = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, weight_dtype="fp8")
    floor = {v: engines.profile("trtllm", v).bench_isl_floor
             for v in ("0.12.0", "0.17.0 (pytorch)", "0.20.0 (pytorch)", "1.0.0", "1.1.0")}
    assert floor == {"0.12.0": False, "0.17.0 (pytorch)": False, "0.20.0 (pytorch)": True, "1.0.0": True,
                     "1.1.0": False}
    prof = engines.profile("trtllm", "1.0.0")
    assert engines.batch_limits(prof, est, 2048, 2048, offline=False) == engines.TRTLLM_SERVE_DEFAULTS
    tokens, seqs = engines.batch_limits(prof, est, 500, 2000, offline=True, longest_input=900)
    assert tokens == max(engines.trtllm_bench_settings(est, 500, 2000)[0], 900 + seqs)


def test_trtllm_bench_answer_says_its_chunking():
    """The JSON's assumptions name the chunking the answer ran: on for trtllm-bench of the tables' release, off for
    a served trtllm run (trtllm-serve) of the same release."""
    from clirun import cli_json

    args = ("serve", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", 2048, "--output-len", 256, "--engine",
            "trtllm")
    offline = cli_json(*args)["performance"]["assumptions"]["context_chunking"]
    served = cli_json(*args, "--max-concurrency", 8)["performance"]["assumptions"]["context_chunking"]
    assert offline.startswith("context chunking on") and served.startswith("context chunking off")


def test_trtllm_pytorch_cuda_graphs_only_for_decode_batches_captured():
    """TensorRT-LLM's PyTorch backend replays CUDA graphs only for decode-only batches ("enabled for batches that
    consist of decoding requests *only*", llm_args.py TorchLlmArgs.cuda_graph_config) of the captured sizes:
    trtllm-serve's default "max_batch_size = config.max_batch_size or 128" without padding captures "list(range(1,
    32)) + [32, 64, 128]", so a decode batch of 50 or 200 runs eager; trtllm-bench pads its graphs up to its
    max_batch_size (general.py get_settings: enable_padding True), so every decode batch replays one. A step holding a
    prefill runs eager on either; a TensorRT engine (0.x) has no such rule."""
    est = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, weight_dtype="fp8")

    def cost(prof: engines.EngineProfile) -> engines.EngineStepCost:
        base = serving_speed.StepCost(est.roofline(1, 128), device_for(est.accelerator.key), est.tp)
        return engines.step_cost(base, prof, est, host=serving_speed.ENGINE_STEP_SECONDS)

    prof = engines.profile("trtllm", "1.0.0")
    served, bench = cost(engines.served_profile(prof, offline=False)), cost(engines.served_profile(prof, True))
    assert (*range(1, 33), 64, 128) == engines.TRTLLM_SERVE_GRAPH_BATCHES
    assert [served.eager(b, b) for b in (1, 32, 50, 64, 128, 200)] == [False, False, True, False, False, True]
    assert not any(bench.eager(b, b) for b in (1, 50, 200))
    assert served.eager(2048 + 8, 8) and bench.eager(2048 + 8, 8)
    assert not cost(engines.profile("trtllm", "0.12.0")).eager(2048 + 8, 8)
    eager = engine_versions.eager_dispatch_seconds(est.spec.n_layers, 0)
    assert served.seconds(200, 200, kv_tokens=200 * 300, decodes=200, pairs=0, length=0) >= eager


def test_trtllm_burst_through_the_api_server_is_trtllm_serve():
    """Every request at once through `vllm bench serve` (rate inf) reaches trtllm-serve, not trtllm-bench: its
    defaults max_num_tokens 8,192 / max_batch_size 2,048 (llm_args.py BaseLlmArgs), not the tuning heuristic."""
    est = plan_serving(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, weight_dtype="fp8")
    work = serving_speed.Workload(2048, 128, num_prompts=50, served=True)
    perf = serving_speed.plan_workload(est, work, "trtllm", "1.0.0")
    assert (perf.max_num_batched_tokens, perf.max_num_seqs) == engines.TRTLLM_SERVE_DEFAULTS


def test_chat_intake_is_vllm_0110s_template_parse_alone():
    """vLLM 0.11.0 alone parses the chat template on every chat request (its chat_utils.py resolve_chat_template_kwargs;
    0.10.2 has no such call, 0.11.1 memoizes it), and only where the model renders an HF template: gpt-oss goes
    through Harmony (serving_chat.py use_harmony), the completions endpoint renders none."""
    parse, chat_intake_seconds = engine_versions.VLLM_0110_TEMPLATE_PARSE_SECONDS, engine_versions.chat_intake_seconds
    assert chat_intake_seconds("vllm", "v0.11.0", "qwen3", chat=True) == parse
    assert chat_intake_seconds("vllm", "0.11.0", "deepseek_v3", chat=True) == parse
    for engine, release, model_type, chat in (("vllm", "v0.10.2", "qwen3", True), ("vllm", "0.11.1", "qwen3", True),
                                              ("vllm", "0.12.0", "qwen3", True), ("vllm", "v0.11.0", "gpt_oss", True),
                                              ("vllm", "v0.11.0", "qwen3", False), ("vllm", None, "qwen3", True),
                                              ("sglang", "0.11.0", "qwen3", True)):
        assert chat_intake_seconds(engine, release, model_type, chat=chat) == 0.0


def test_chat_intake_moves_ttft_alone():
    """GPUStack's Qwen3-8B rows ran `vllm bench serve --backend openai-chat` against vLLM 0.11.0: the template parse
    is paid before the engine sees the request, so it adds to TTFT and e2e exactly and leaves TPOT as it was."""
    sys.path.insert(0, str(BENCH))
    from bench_serving_speed import predict_workload

    row = ROWS["gpustack-qwen3-8b-h100-tp1-vllm-sharegpt-c1"]
    parse = engine_versions.VLLM_0110_TEMPLATE_PARSE_SECONDS
    assert row["endpoint"] == "chat" and row["engine_version"] == "v0.11.0"
    chat, plain = predict_workload(row), predict_workload({**row, "endpoint": None})
    assert chat["ttft_seconds_median"] - plain["ttft_seconds_median"] == pytest.approx(parse)
    assert chat["e2e_seconds_mean"] - plain["e2e_seconds_mean"] == pytest.approx(parse)
    assert chat["tpot_seconds_median"] == plain["tpot_seconds_median"]


def test_intake_runs_one_loop_pass_at_a_time():
    """The API server's intake runs on its one event loop, and a pass of asyncio's loop runs every handler ready at its
    start (BaseEventLoop._run_once): requests sent together reach the engine together, after all their intakes;
    requests sent apart each wait their own; a request sent during a pass waits for it and the next."""
    ends = engine_versions.intake_ends
    assert ends([0.0] * 4, 0.01) == pytest.approx([0.04] * 4)
    assert ends([0.0, 1.0, 2.0], 0.01) == pytest.approx([0.01, 1.01, 2.01])
    assert ends([0.0, 0.0, 0.005, 0.5], 0.01) == pytest.approx([0.02, 0.02, 0.03, 0.51])
    assert ends([], 0.01) == []


def test_chat_burst_waits_for_every_requests_intake():
    """GPUStack's vLLM 0.11.0 bursts of ~1,000 chat requests at once (`vllm bench serve --backend openai-chat
    --request-rate inf`): no first token reached a client for the first ~11 s (DeepSeek-R1 on 8 x H200; 9.5 s GLM-4.6;
    12.9 s Qwen3-14B, whose Qwen3 template is the one VLLM_0110_TEMPLATE_PARSE_SECONDS was measured on: 1,000 x 12 ms),
    benchmarks/burst_phases.py from each page's TTFT mean and p99. With the intake queued (intake_ends) the median TTFT
    lands within 20 % of the measured (DeepSeek-R1 17.7 s, GLM-4.6 15.4 s; it was predicted 2.6-6x too fast with one
    parse a request), the burst's TTFT grows by about the burst's parses (not one parse), and its TPOT, which counts
    from each request's first token, is left as it was."""
    sys.path.insert(0, str(BENCH))
    from bench_serving_speed import predict_workload

    parse = engine_versions.VLLM_0110_TEMPLATE_PARSE_SECONDS
    for name in ("gpustack-deepseek-r1-h200-tp8-vllm-sharegpt", "gpustack-glm-4.6-h200-tp8-vllm-sharegpt"):
        row = ROWS[name]
        assert row["endpoint"] == "chat" and row["engine_version"] == "v0.11.0" and row["mode"] == "offline"
        chat, plain = predict_workload(row), predict_workload({**row, "endpoint": None})
        assert row["metrics"]["ttft_seconds_median"] / chat["ttft_seconds_median"] == pytest.approx(1.0, abs=0.2)
        assert chat["ttft_seconds_median"] - plain["ttft_seconds_median"] >= 0.8 * row["n_prompts"] * parse
        assert chat["tpot_seconds_median"] == pytest.approx(plain["tpot_seconds_median"], rel=0.05)


def test_trtllm_steps_past_the_gemm_tables_rows_take_the_roofline():
    """The measured TensorRT-LLM GEMM sweeps on H200 end at m = 32,768 rows; trtllm-bench's 0.12 engine for Llama 2
    70B at TP 8 (2,048 in, 128 out) steps 32,768 context tokens beside its decodes, past every sweep near the fused
    QKV's 1,280 x 8,192. Such a step's projections take the smooth roofline, as on a GPU without tables (the way
    attention and all-reduces leave their tables), instead of refusing the whole run; within the sweeps the table
    still answers."""
    serve = plan_serving(load_model("llama-2-70b"), load_hardware("h200"), 8, 2176, weight_dtype="fp8")
    trt = _step(serve, "0.12.0")
    roofline = serving_speed.StepCost(serve.roofline(1, 1024), device_for("h200"), 8)
    assert trt.base.gemm_shape is not None and roofline.gemm_shape is None
    assert trt.base.linear_seconds(32800) == roofline.linear_seconds(32800)
    assert trt.base.linear_seconds(8000) != roofline.linear_seconds(8000)
    answer = cli_json("serve", "meta-llama/Llama-2-70b-hf", "--gpu", "h200", "--n-gpus", "8", "--input-len", "2048",
                      "--output-len", "128", "--engine", "trtllm", "--engine-version", "0.12.0", "--weight-dtype",
                      "fp8")["performance"]
    assert 0 < answer["output_tokens_per_second"] < answer["roofline"]["output_tokens_per_second"]
