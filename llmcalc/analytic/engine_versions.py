"""Engine releases (issue 36): which profile answers a stated ``--engine-version`` of TensorRT-LLM or SGLang, and
what changes with the release, read from each engine's own source at the releases named.

TensorRT-LLM:

- 1.0 and later: the PyTorch backend (``trtllm-bench throughput --backend`` default "pytorch",
  tensorrt_llm/bench/benchmark/throughput.py; the LLM API's default since 1.0), the overlap scheduler on
  (llm_args.py ``disable_overlap_scheduler`` False) and CUDA graphs for decode batches: engines.PROFILES["trtllm"].
- before 1.0: a TensorRT engine built by ``trtllm-bench build`` and run by the C++ executor (batch manager): the
  same in-flight batching, GUARANTEED_NO_EVICT capacity scheduler and max_num_tokens budget (the C++
  capacityScheduler.cpp / microBatchScheduler.cpp the PyTorch backend later reused), max_batch_size and
  max_num_tokens from the build's tuning heuristic (bench/build/build.py ``get_benchmark_engine_settings`` ->
  tuning.py ``calc_engine_setting``, engines.trtllm_bench_settings), KV cache kv_cache_free_gpu_mem_fraction 0.90 of
  the memory free after the engine. trtllm-bench runs that engine with context chunking on, first come first served:
  the first command (tensorrt_llm/bench/run/dataclasses.py ``ExecutorSettingsConfig``: ``chunking: bool = True``,
  ``context_chunking_policy=trtllm.ContextChunkingPolicy.FIRST_COME_FIRST_SERVED``, passed as
  ``ExecutorConfig(enable_chunked_context=...)``; run/run.py never sets it otherwise), the build enabling what
  chunking needs (build.py: ``use_paged_context_fmha = True``; trtGptModelInflightBatching.cpp "Chunked context
  requires context FMHA, paged kv_cache and paged context FMHA"); NVIDIA/TensorRT-LLM PR #6956 (2025-08,
  "reverting a breaking change": "Set default based on backend: True for TensorRT, False for others") restored it
  after PR #4133 (2025-05) had made ``--enable_chunked_context`` an opt-in flag for both backends, so 0.20-0.21's
  command line defaulted it off for TensorRT engines; llmcalc answers those two releases with chunking on as well
  (an assumption, said in the answer). Without chunking the C++ MicroBatchScheduler, whose input lists running
  generations before new contexts (capacityScheduler.cpp GuaranteedNoEvictScheduler), stops the batch at the first
  whole context that outgrows the step's remaining max_num_tokens, and at an ISL equal to the tuned max_num_tokens
  (2,048 / 2,048: ``max(2048, ...)``) it ran one request at a time. The executor's host work per step runs
  between the GPU's steps, not beside them: its loop (cpp/tensorrt_llm/executor/executorImpl.cpp ``executionLoop``,
  the source as stored, 2025) waits for the step (``forwardSync``), builds the responses (``populateNewResponses``),
  fetches new requests, then schedules, allocates KV blocks and prepares the buffers of the next step before
  enqueueing it (trtGptModelInflightBatching.cpp ``forwardAsync``); with one micro-batch (``mNumMicroBatches =
  isTrtOverlap() ? 2 : 1``) nothing else runs on the GPU meanwhile, and the two-micro-batch overlap was dropped
  ("the parameter enable_trt_overlap has been removed ... it was found that the overlapping of micro-batches did
  not provide additional benefits", triton-inference-server/tensorrtllm_backend docs). So a step is GPU + host
  (``EngineProfile.overlap`` False), the host's part vLLM's fitted ENGINE_STEP_SECONDS (no published measurement of
  the C++ executor's); 0.16's executor, closed source then, is taken to run the same loop. The GEMMs of a dense
  model come from TensorRT-LLM's own measured GEMM table (serving_speed.StepCost.gemm_shape, measured in a 1.x
  release, applied to every release).
- a 0.17 or 0.18 release stated with "pytorch" (the opt-in ``--backend pytorch`` flow): PyTorchConfig's defaults
  then, ``use_cuda_graph: bool = False`` and ``enable_overlap_scheduler: bool = False``
  (tensorrt_llm/_torch/pyexecutor/config.py of those releases; 0.18.2's PyTorch quick start still opts in with
  ``--enable_overlap_scheduler``): the host's Python work per step adds to the GPU's. 0.19 to 0.21 with "pytorch"
  are taken as the PyTorch backend with its overlap scheduler (``disable_overlap_scheduler`` False, as in 1.0; the
  release that flipped the default is placed at 0.19 without a source read for it, an assumption).
- trtllm-bench's PyTorch flow without chunking (1.0: PR #6956's "False for others"; 0.20 and later with
  ``--backend pytorch``) raises the tuned max_num_tokens so that a whole context of the dataset's longest prompt fits
  beside a full batch of generations (tensorrt_llm/bench/benchmark/utils/general.py ``get_settings``, from PR #4133:
  "If chunked prefill is disabled, we need to ensure that the max_num_tokens is at least the max_isl" ...
  ``max_num_tokens = max(max_num_tokens, dataset_metadata.max_isl + max_batch_size)``): EngineProfile.bench_isl_floor,
  applied in engines.batch_limits. 1.1 and later chunk instead (engines.POLICIES["trtllm-bench"]).

KV cache dtype: ``trtllm-bench build`` "If the quantization is NVFP4 or FP8, force the KV cache dtype to FP8"
(bench/build/build.py: ``quant_config.kv_cache_quant_algo = QuantAlgo.FP8`` for QuantAlgo.NVFP4 / FP8, with
``use_fp8_context_fmha``); NVIDIA's ModelOpt FP8 and NVFP4 checkpoints, which the PyTorch backend loads, carry
``kv_cache_quant_algo: FP8`` in hf_quant_config.json likewise. So TensorRT-LLM serves per-tensor FP8 and NVFP4
weights with an FP8 KV cache unless --kv-dtype says otherwise (``default_kv_dtype``); block-scaled FP8 checkpoints
(DeepSeek's) and MXFP4 ones (gpt-oss) keep the model's KV dtype.

Offline maximum throughput is ``trtllm-bench throughput``: requests go to the LLM API in-process, not through an
HTTP server, unstreamed (``--streaming`` default False) and not detokenized (``post_proc_params = None  # No
detokenization``, throughput.py), so no API server paces it (``served``).

SGLang:

- 0.5 and later: engines.PROFILES["sglang"] (mem_fraction_static from the GPU's memory, server_args.py
  ``_handle_gpu_memory_settings``).
- before 0.5: mem_fraction_static by tensor-parallel size, "if self.tp_size >= 16: 0.79 elif >= 8: 0.81 elif >= 4:
  0.85 elif >= 2: 0.87 else: 0.88", chunked_prefill_size 8192 (2048 below 25 GB) (server_args.py of 0.3-0.4);
- before 0.4: the overlap scheduler off (server_args.py ``enable_overlap_schedule: bool = False``; 0.4 made the
  "zero-overhead" overlap scheduler the default, ``disable_overlap_schedule``).
The release at which the memory rule changed is placed at 0.5 from the sources read (0.4.x has the TP table); an
assumption stated in every answer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..errors import LlmcalcError

# "0.17", "v0.17.0", "1.0.0rc4", "0.17.post1.dev (PyTorch flow)", "0.4.3.post2", "TensorRT-LLM 0.12.0": an optional
# engine name, then major.minor, optional patch, then pre/post/dev/local tags, then an optional note in parentheses
VERSION = re.compile(r"^(?:(?:tensorrt-llm|trt-llm|trtllm|sglang)[\s_-]*)?v?(\d+)\.(\d+)(?:\.(\d+))?"
                     r"((?:[.\-+_]?[A-Za-z]*\d*)*)\s*(\([^()]*\))?$", re.IGNORECASE)
# the releases each engine has published (major.minor, inclusive): TensorRT-LLM 0.5 (2023-10) to 1.x, SGLang 0.1
# (2024-01) on; a major past these is not a release
RANGES = {"trtllm": ((0, 5), (2, 99)), "sglang": ((0, 1), (1, 99))}
EXAMPLES = {"trtllm": "0.12.0, 0.17.0, 1.0.0", "sglang": "0.3.6, 0.4.6, 0.5.2"}
NAMES = {"trtllm": "TensorRT-LLM", "sglang": "SGLang"}
# per-tensor FP8 and NVFP4 weights: TensorRT-LLM's KV cache FP8 (module docstring)
FP8_KV_WEIGHTS = ("fp8", "nvfp4")
# SGLang before 0.5: mem_fraction_static by tensor-parallel size (server_args.py of 0.3-0.4), (tp at least, fraction)
SGLANG_TP_FRACTION = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def parse(engine: str, version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of `version` as `engine` numbers its releases; one line naming --engine-version and the
    fix when it is no release number or outside the releases the engine has published."""
    m = VERSION.match(version.strip())
    name = NAMES[engine]
    if not m:
        raise LlmcalcError(f"--engine-version {version}: not a {name} release number; give one such as "
                           f"{EXAMPLES[engine]}, or leave it out for the release llmcalc's tables were measured in")
    found = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    low, high = RANGES[engine]
    if not low <= found[:2] <= high:
        raise LlmcalcError(f"--engine-version {version}: {name} has no such release (its releases run "
                           f"{low[0]}.{low[1]} to {high[0]}.x); give one such as {EXAMPLES[engine]}")
    return found


def trtllm_backend(version: str) -> str:
    """"pytorch", "pytorch-early" (0.x's opt-in PyTorch flow: no overlap scheduler, no CUDA graphs by default) or
    "tensorrt" (0.x's default: a TensorRT engine on the C++ executor) for a TensorRT-LLM release."""
    major, minor, _ = parse("trtllm", version)
    if major >= 1:
        return "pytorch"
    if "pytorch" not in version.lower():
        return "tensorrt"
    return "pytorch-early" if minor < 19 else "pytorch"


TRTLLM_TENSORRT_SCHEDULER = (
    "TensorRT-LLM {v} in-flight batching (TensorRT engine built by trtllm-bench build, C++ executor): generation and "
    "context requests in one step within max_num_tokens, a context request whole or waiting (context chunking off); "
    "the executor's C++ host work per step between the GPU's steps (one micro-batch), added to them")
# 0.20 and 0.21: trtllm-bench's --enable_chunked_context an opt-in flag (PR #4133) until PR #6956 (module docstring)
TRTLLM_OPT_IN_CHUNKING = ((0, 20), (0, 21))
TRTLLM_EARLY_PYTORCH_SCHEDULER = (
    "TensorRT-LLM {v} in-flight batching (the 0.x PyTorch flow): generation and context requests in one step within "
    "max_num_tokens, a context request whole or waiting (context chunking off); overlap scheduler and CUDA graphs "
    "off by default (PyTorchConfig), the host's work per step added to the GPU's")
SGLANG_OLD_SCHEDULER = (
    "SGLang {v}: a prefill-only step (chunked_prefill_size tokens) whenever a waiting request can be admitted, else "
    "a decode step of every running request (mixed chunks off); fcfs policy (radix cache matches nothing on random "
    "prompts); {overlap}")


def profile_for(base: Any, version: str) -> Any:
    """engines.EngineProfile `base` (the current release's) as release `version` of its engine runs: the fields that
    change with the release (module docstring), its ``version`` the one stated and ``answered`` naming the profile."""
    engine = base.name
    major, minor, _ = parse(engine, version)
    if engine == "trtllm":
        backend = trtllm_backend(version)
        if backend == "pytorch":
            chunked = (major, minor) >= (1, 1)  # trtllm-bench's chunked-context default (engines.EngineProfile)
            return dataclasses.replace(base, version=version, bench_chunked=chunked,
                                       bench_isl_floor=not chunked and (major, minor) >= (0, 20),
                                       answered=f"TensorRT-LLM {version}: PyTorch backend (the default from 1.0), "
                                       "overlap scheduler on" + ("" if chunked else ", trtllm-bench without "
                                                                 "chunked context, max_num_tokens at least the "
                                                                 "longest prompt + max_batch_size (general.py)"))
        if backend == "tensorrt":
            opt_in = (major, minor) in TRTLLM_OPT_IN_CHUNKING
            return dataclasses.replace(
                base, version=version, scheduler=TRTLLM_TENSORRT_SCHEDULER.format(v=version), overlap=False,
                bench_chunked=True, graphed=None,  # a TensorRT engine: no PyTorch-side graph rule
                answered=f"TensorRT-LLM {version}: TensorRT engine backend (before 1.0), C++ executor, trtllm-bench "
                         "with chunked context" + (" (an opt-in flag in this release, taken as on)" if opt_in else ""),
                sources=("tensorrt_llm/bench/build/build.py", "tensorrt_llm/bench/build/tuning.py",
                         "tensorrt_llm/bench/benchmark/throughput.py", "cpp/tensorrt_llm/batch_manager"))
        return dataclasses.replace(
            base, version=version, scheduler=TRTLLM_EARLY_PYTORCH_SCHEDULER.format(v=version), overlap=False,
            cuda_graphs=False, bench_chunked=False,
            answered=f"TensorRT-LLM {version}: the 0.x PyTorch flow (overlap scheduler off, no CUDA graphs: each "
                     "step at least the host's eager kernel dispatch)",
            sources=("tensorrt_llm/_torch/pyexecutor/config.py", "tensorrt_llm/bench/build/tuning.py"))
    if (major, minor) >= (0, 5):
        return dataclasses.replace(base, version=version,
                                   answered=f"SGLang {version}: mem_fraction_static by GPU memory (0.5 and later)")
    overlap = (major, minor) >= (0, 4)
    words = "overlap scheduler on" if overlap else "overlap scheduler off (before 0.4), the host's work added"
    return dataclasses.replace(
        base, version=version, scheduler=SGLANG_OLD_SCHEDULER.format(v=version, overlap=words), overlap=overlap,
        kv_memory="static_fraction_tp",
        answered=f"SGLang {version}: mem_fraction_static by tensor-parallel size (before 0.5), {words}")


# --- eager execution (no CUDA graphs) -------------------------------------------------------------------------
# Without CUDA graphs the host dispatches every kernel of every layer from Python each step and the GPU runs behind
# it, so a step lasts at least the host's dispatch time (at small batches it is the step). Measured where that is
# all a step does, at batch 1: sgl-project/sglang PR #1401 ("Support cuda graph in the triton attention backend",
# 2024-09-12, `sglang.bench_latency --batch-size 1 --input 128 --output 8`): Llama-3-8B "flashinfer w/o cuda graph #
# Decode.  median latency: 0.00823 s" over its 32 dense layers; DeepSeek-Coder-V2-Lite (27 layers: 1 dense, 26 MoE
# with MLA) "4x faster" with CUDA graphs, "triton w/ cuda graph # Decode.  median latency: 0.00622 s", so ~24.9 ms
# without (sgl-project/sglang issue #1369 measured 31 ms/token for the same eager path on an A100), seconds:
EAGER_DENSE_LAYER_SECONDS = 0.00823 / 32
EAGER_MOE_LAYER_SECONDS = (4 * 0.00622 - EAGER_DENSE_LAYER_SECONDS) / 26


def eager_dispatch_seconds(n_layers: int, n_moe_layers: int) -> float:
    """Seconds the host spends dispatching one eager forward (no CUDA graph) of `n_layers` layers, `n_moe_layers` of
    them MoE: dense layers x EAGER_DENSE_LAYER_SECONDS + MoE layers x EAGER_MOE_LAYER_SECONDS (sources above). A step
    on an engine without CUDA graphs lasts at least this long (EngineStepCost.seconds takes the max with the GPU)."""
    return (n_layers - n_moe_layers) * EAGER_DENSE_LAYER_SECONDS + n_moe_layers * EAGER_MOE_LAYER_SECONDS


# --- the API server's intake of a chat request ---------------------------------------------------------------
# vLLM 0.11.0 parses the model's Jinja chat template on every /v1/chat/completions request: apply_hf_chat_template
# calls resolve_chat_template_kwargs (vllm/entrypoints/chat_utils.py of the 0.11.0 sdist), which builds a fresh
# ImmutableSandboxedEnvironment, runs env.parse(chat_template) and jinja2.meta.find_undeclared_variables over it, on
# the API server's event loop before the request reaches the engine. 0.10.2 has no such call (apply_hf_chat_template
# passes the kwargs straight to tokenizer.apply_chat_template); 0.11.1 memoizes it
# (``_cached_resolve_chat_template_kwargs = lru_cache(_resolve_chat_template_kwargs)``, also in 0.11.2 and 0.12.0).
# gpt-oss renders its prompt with Harmony instead (serving_chat.py: ``self.use_harmony = model_config.hf_config.
# model_type == "gpt_oss"``, the template path skipped). Measured once (benchmarks/chat_template_parse.py): that
# parse of Qwen3-8B's chat template (4,168 characters, the tokenizer_config.json of Qwen/Qwen3-8B) takes 11.6-12.0 ms
# (the fastest of 40 calls, two runs; medians 12.0-13.2 ms) of one AMD EPYC core's CPU time under jinja2 3.1.6, where
# a rendering of the compiled template takes 0.03 ms; vllm-project/vllm#20065 measured the content-format detection
# (the same parse and a walk of the tree) at 6-8 ms a request on Llama's template. The cost grows with the template's
# length; templates of other models are taken at Qwen3's (an assumption, stated with the answer). Seconds:
VLLM_0110_TEMPLATE_PARSE_SECONDS = 12.0e-3
VLLM_UNCACHED_TEMPLATE_RELEASES = ((0, 11, 0),)
HARMONY_MODEL_TYPES = ("gpt_oss",)


def chat_intake_seconds(engine: str, release: str | None, model_type: str | None, chat: bool) -> float:
    """Seconds the API server spends on a request before the engine sees it, beyond serving_speed.REQUEST_SECONDS:
    VLLM_0110_TEMPLATE_PARSE_SECONDS for a chat request (`chat`: /v1/chat/completions, `vllm bench serve --backend
    openai-chat`) to vLLM 0.11.0 whose model renders an HF chat template (not Harmony: HARMONY_MODEL_TYPES), 0 for
    every other engine, release, endpoint and model (sources above)."""
    if not chat or engine != "vllm" or release is None or model_type in HARMONY_MODEL_TYPES:
        return 0.0
    text = release.strip().lower().removeprefix("v")
    parts = text.split("+")[0].split(".")
    try:
        key = tuple(int(p) for p in parts[:3])
    except ValueError:
        return 0.0
    return VLLM_0110_TEMPLATE_PARSE_SECONDS if key in VLLM_UNCACHED_TEMPLATE_RELEASES else 0.0


def intake_ends(sends: list[float], intake: float) -> list[float]:
    """When each request, sent at `sends` (in order), reaches the engine past an API server whose intake costs
    `intake` seconds of its one event loop's CPU. The intake runs on the loop itself: vLLM's `async def
    _preprocess_chat` calls `apply_hf_chat_template(...)` directly, neither awaited nor handed to an executor
    (vllm/entrypoints/openai/serving_engine.py, OpenAIServing._preprocess_chat, v0.9.0.1 L802-817, the same in later
    releases), which in 0.11.0 parses the template (VLLM_0110_TEMPLATE_PARSE_SECONDS); and one pass of asyncio's loop
    runs every callback ready at its start before it polls again (CPython Lib/asyncio/base_events.py
    BaseEventLoop._run_once: ``ntodo = len(self._ready)``, then each run in turn), so the handlers of the m requests
    sent by a pass's start T parse back to back and hand their prompts on, to the engine as to the tokenizer, only
    after the pass: every one reaches the engine at T + m x intake, the next pass starting then (or at the next send
    if none is waiting). Requests sent one at a time (a low request rate) each wait their own intake; an all-at-once
    burst of N reaches the engine together after N x intake (GPUStack's vLLM 0.11.0 bursts show it: no first token
    for the first 9.5-11 s of 1,000 chat requests, benchmarks/burst_phases.py)."""
    ends: list[float] = []
    free = 0.0
    while len(ends) < len(sends):
        start = max(free, sends[len(ends)])
        taken = sum(1 for s in sends[len(ends):] if s <= start)  # (sends are in order)
        free = start + taken * intake
        ends += [free] * taken
    return ends


def sglang_tp_fraction(tp: int) -> float:
    """SGLang's mem_fraction_static before 0.5 (SGLANG_TP_FRACTION): the share of the whole GPU for weights + KV."""
    return next(f for at_least, f in SGLANG_TP_FRACTION if tp >= at_least)


def default_kv_dtype(engine: str, weights: Any) -> str | None:
    """The KV dtype `engine` gives weights of format `weights` (quant.WeightFormat) when --kv-dtype is not typed:
    "fp8" for TensorRT-LLM with per-tensor FP8 or NVFP4 weights (module docstring), None (the model's own)
    otherwise, block-scaled FP8 checkpoints included."""
    block = weights.quant is not None and weights.quant.format.per == "block"
    if engine == "trtllm" and weights.name in FP8_KV_WEIGHTS and not block:
        return "fp8"
    return None


def served_offline(engine: str) -> bool:
    """Whether the engine's offline maximum-throughput benchmark goes through its API server: not TensorRT-LLM's
    (trtllm-bench throughput feeds the LLM API in-process, unstreamed, undetokenized)."""
    return engine != "trtllm"


OFFLINE_WORDS = {"trtllm": "trtllm-bench throughput: every request to the LLM API in-process at once, no HTTP server, "
                           "no streaming, no detokenization (throughput.py)"}
