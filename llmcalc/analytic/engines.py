"""Serving engines in workload mode (issue 36): each engine's scheduler defaults, memory for the KV cache and per-step
host work, as data with their sources, and the step of a replica as that engine runs it (``EngineStepCost``: its
measured kernel tables, its fused-MoE tables, expert and pipeline parallelism).

Read from each engine's own source (file, option or function; the versions named in ``PROFILES``):

- vLLM (what serving_speed models today): V1's scheduler, max_num_seqs / max_num_batched_tokens by version and GPU
  memory (llmcalc/analytic/vllm.py), gpu_memory_utilization of the whole GPU for weights + activations + KV; host
  work per step (scheduling, input preparation, sampling's host side) not overlapped with the GPU in the default
  configuration: serving_speed.ENGINE_STEP_SECONDS, fitted to vLLM's measurements.
- TensorRT-LLM (PyTorch backend, `trtllm-bench throughput` and `trtllm-serve`): in-flight batching with the
  GUARANTEED_NO_EVICT capacity scheduler (a request is admitted when its whole input + output KV fits:
  tensorrt_llm/llmapi/llm_args.py, ``CapacitySchedulerPolicy.GUARANTEED_NO_EVICT`` the SchedulerConfig default);
  KV cache = kv_cache_free_gpu_mem_fraction (0.90, tensorrt_llm/bench/benchmark/throughput.py option
  ``--kv_cache_free_gpu_mem_fraction``, default .90; KvCacheConfig.free_gpu_memory_fraction 0.9 for trtllm-serve) of
  the memory free after the weights and the activation profiling; trtllm-bench's max_batch_size and max_num_tokens
  from ``tensorrt_llm/bench/build/tuning.py:calc_engine_setting`` / ``finetune_setting`` (KV requests estimated as
  0.95 x (GPU memory x GPUs - parameters x bytes) / (KV bytes per token x (ISL + OSL)); batch = min(that, 4096) /
  pp rounded up to 32/128/256 (at least 64); tokens = min(batch x (1 + ISL/OSL), 32768) rounded up to 256/512/1024
  (at least 2048)); trtllm-serve's defaults max_batch_size 2048, max_num_tokens 8192 (llm_args.py BaseLlmArgs);
  CUDA graphs for decode batches; the overlap scheduler on by default (``disable_overlap_scheduler=False``:
  the host prepares step n + 1 while the GPU runs step n).
- SGLang: chunked_prefill_size 8192 below 160 GB of GPU memory, 16384 above (B200, MI300)
  (python/sglang/srt/server_args.py ``_handle_chunked_prefill_size``: "elif gpu_mem < 160 * 1024: # H100, H200,
  A100, H20 / self.chunked_prefill_size = 8192 / else: # B200, MI300 / self.chunked_prefill_size = 16384");
  mem_fraction_static = (GPU memory - reserved) / GPU memory with reserved = 512 MiB + 1.5 x chunked_prefill_size +
  2 x cuda_graph_max_bs + tp x pp / 8 GiB, at least 10 GiB (server_args.py ``_handle_gpu_memory_settings``), the
  fraction of the whole GPU for weights + KV pool (model_runner.py ``profile_max_num_token``: what is left of it after
  the weights); max_running_requests = min(max(KV tokens / context_len x 512, 2048), 4096)
  (model_runner.py ``init_memory_pool``); schedule_policy "fcfs" and the radix cache matching nothing for random
  prompts; the overlap ("zero-overhead") scheduler on by default (server_args.py ``disable_overlap_schedule``
  False).

Per-step host overheads: no engine publishes its own measurement of them. TensorRT-LLM's and SGLang's overlap
schedulers hide the host's work under the GPU's, so a step takes max(GPU time, host time) where vLLM's takes the
sum; the host time is assumed to be vLLM's fitted ENGINE_STEP_SECONDS (an assumption, stated in every answer's
"assumptions"), and the per-layer kernel floor (LAYER_FLOOR_SECONDS) and TP sync (TP_SYNC_SECONDS) stay as fitted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import LlmcalcError
from ..records import dataclass
from . import comm, engine_versions, kernel_tables
from .inference import InferenceEstimate
from .measured_kernels import layer_gemm_shape
from .serving import ServeEstimate
from .vllm import v0_chunked_prefill


@dataclass(frozen=True)
class SchedulerPolicy:
    """How an engine's scheduler forms each step, the switches of serving_speed.simulate (each engine's source in
    ``POLICIES``).

    - admission: what a waiting request must find free in the KV cache to be admitted: "prompt" its prompt's blocks
      (vLLM; the running requests hold what they hold, and the latest admitted are preempted when the cache runs
      out), "whole" its prompt and its whole output (TensorRT-LLM's GUARANTEED_NO_EVICT: every running request's
      blocks to completion are reserved, nothing is ever evicted), "ratio" its prompt and its whole output while the
      running requests reserve new_token_ratio of their remaining output (SGLang's PrefillAdder; the ratio decays per
      decode step and is raised again on a retraction);
    - mixed: decodes and prefill chunks run in one step (vLLM V1's chunked prefill, TensorRT-LLM's in-flight
      batching); False: a step prefills only, and runs whenever it can admit or continue a prefill, the decodes
      waiting (SGLang's get_next_batch_to_run "Run prefill first if possible", vLLM V0 without chunked prefill);
    - chunked: a prompt may be split over steps within the token budget; False: it waits until the budget holds it
      whole (TensorRT-LLM's MicroBatchScheduler with context chunking off, the default);
    - first_in_decode: the prompt's last position is not sampled by the prefill; the first token comes from the
      request's first decode step, which feeds the prompt's last token (LMDeploy's TurboMind: LlamaBatch.cc
      InitializeGeneration sets sequence_lengths to the context length - 1, "the last generated token does not have
      k/v cache computed yet"), so TTFT is the prefill and one decode step;
    - admit_after_preempt: False where a step that had to preempt a running request admits no waiting one (vLLM V1's
      Scheduler.schedule: the waiting queue is scheduled only "if not preempted_reqs", so that the blocks just freed
      go to the running requests);
    - chunk_blocks: a prefilling request holds the KV blocks of the tokens scheduled so far, not its whole prompt's
      from admission (vLLM V1: kv_cache_manager.allocate_slots(request, num_new_tokens) allocates each step's chunk,
      a waiting request is admitted when its first chunk's blocks are free, and a running one that cannot get its
      next chunk's preempts the latest admitted, possibly itself);
    - prefix_cache: a request preempted in its prefill keeps what it had prefilled (vLLM V1's automatic prefix
      caching, on by default: kv_cache_manager.free returns a request's blocks to the free queue's tail in reverse
      order, so they are evicted last, and get_computed_blocks finds its full blocks when it is admitted again); a
      request preempted while decoding is still recomputed whole (the decodes that needed the room take its blocks);
    - multi_step: vLLM V0's multi-step scheduling (``--num-scheduler-steps N``, vllm-project/vllm#7000, V0 only): the
      scheduler runs once per pass of N decode steps (engine/llm_engine.py step: a new schedule only when the cached
      one has no remaining steps), each running sequence reserving N - 1 lookahead KV slots for it
      (core/scheduler.py _get_num_lookahead_slots: num_lookahead_slots = num_scheduler_steps - 1 for decodes, 0 for
      a prefill without chunking, whose step is one step: SequenceGroup.init_multi_step_from_lookahead_slots);
      requests that arrive wait for the pass to end, a sequence that finishes mid-pass keeps its row to the pass's
      end (llm_engine.py _has_remaining_steps: "All running sequence groups should have the same remaining steps";
      output_processor/multi_step.py _process_seq_outputs stops appending at its stop), and the host's scheduling
      and output processing are paid once a pass.
    """

    admission: str = "prompt"
    mixed: bool = True
    chunked: bool = True
    init_ratio: float = 0.0  # SGLang's new_token_ratio at start (SGLANG_INIT_NEW_TOKEN_RATIO)
    min_ratio: float = 0.0  # its floor (init x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR)
    ratio_decay: float = 0.0  # what each decode step takes off it ((init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)
    clip_new_tokens: int = 1 << 30  # the output a request reserves at most (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)
    retract_steps: int = 0  # SGLANG_RETRACT_DECODE_STEPS: the decode steps a retraction's new ratio provides for
    first_in_decode: bool = False
    admit_after_preempt: bool = True
    chunk_blocks: bool = False
    prefix_cache: bool = False
    multi_step: int = 1  # vLLM V0's --num-scheduler-steps


# python/sglang/srt/environ.py (sgl-project/sglang@d51c1c21): SGLANG_INIT_NEW_TOKEN_RATIO = 0.7,
# SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR = 0.14, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS = 600, SGLANG_RETRACT_DECODE_STEPS = 20,
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION = 4096
SGLANG_RATIO = (0.7, 0.14, 600, 20, 4096)
POLICIES = {
    # vllm/v1/core/sched/scheduler.py schedule(): running requests first (a decode token or the next chunk), then
    # waiting ones while their first chunk's blocks are free (kv_cache_manager.allocate_slots(num_new_tokens));
    # preempt the last admitted, and then admit none that step ("if not preempted_reqs:")
    "vllm": SchedulerPolicy(admit_after_preempt=False, chunk_blocks=True, prefix_cache=True),
    # vLLM V0 with chunked prefill off (max_model_len <= 32K; vllm/core/scheduler.py _schedule_default: "prefills
    # first", a step of waiting prompts whole within max_num_batched_tokens, else a decode step of the running)
    "vllm-v0": SchedulerPolicy(mixed=False, chunked=False),
    # LMDeploy's TurboMind (InternLM/lmdeploy src/turbomind/models/llama/LlamaBatch.cc InitializeGeneration): the
    # context phase fills the KV cache of all but the prompt's last token, whose decode step samples the first token;
    # llmcalc does not model TurboMind's kernels (an --engine of its own): benchmarks/bench_serving_speed.py runs
    # LMDeploy's rows on vLLM's step times with this scheduler
    "turbomind": SchedulerPolicy(first_in_decode=True),
    # TensorRT-LLM: cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp GuaranteedNoEvictScheduler (the default
    # CapacitySchedulerPolicy, tensorrt_llm/llmapi/llm_args.py SchedulerConfig) reserves each running request's
    # blocks to completion; microBatchScheduler.cpp (NVIDIA/TensorRT-LLM@0a949d31) puts generation and context
    # requests in one batch, and with context chunking off (llm_args.py enable_chunked_prefill default False) a
    # context request is scheduled whole or stops the batch ("if (maxNumTokensRuntime && batchNumTokens +
    # reqNumTokens > maxNumTokensRuntime.value()) break;"); trtllm-bench throughput alike
    # (tensorrt_llm/bench/benchmark/throughput.py: --enable_chunked_context is_flag default False,
    # --scheduler_policy default guaranteed_no_evict)
    "trtllm": SchedulerPolicy(admission="whole", chunked=False),
    # trtllm-bench throughput on a TensorRT engine (before 1.0: bench/run/dataclasses.py ExecutorSettingsConfig
    # ``chunking: bool = True``, engine_versions docstring) and of later releases chunks contexts by default
    # (tensorrt_llm/bench/benchmark/throughput.py,
    # the refactored command with GeneralExecSettings: "--enable_chunked_context/--disable_chunked_context",
    # default=True, passed as settings_config["chunking"]; the earlier 1.x file, NVIDIA/TensorRT-LLM@000a01de, has
    # "--enable_chunked_context", is_flag=True, default=False): a context too long for the step's remaining tokens is
    # split (microBatchScheduler.cpp setCtxRequestsChunkSize, first come first served) instead of stopping the batch
    "trtllm-bench": SchedulerPolicy(admission="whole", chunked=True),
    # SGLang: python/sglang/srt/managers/scheduler.py get_next_batch_to_run ("Run prefill first if possible", else
    # update_running_batch: decode, retract_decode when check_decode_mem fails); enable_mixed_chunk default False
    # (server_args.py); schedule_policy.py PrefillAdder: rem_total_tokens = free - running requests' remaining
    # output x new_token_ratio, a new request charged extend_input_len + min(max_new_tokens, CLIP)
    # (sgl-project/sglang@d51c1c21)
    "sglang": SchedulerPolicy(admission="ratio", mixed=False, init_ratio=SGLANG_RATIO[0],
                              min_ratio=SGLANG_RATIO[0] * SGLANG_RATIO[1],
                              ratio_decay=SGLANG_RATIO[0] * (1 - SGLANG_RATIO[1]) / SGLANG_RATIO[2],
                              retract_steps=SGLANG_RATIO[3], clip_new_tokens=SGLANG_RATIO[4]),
}


def scheduler_policy(prof: EngineProfile, est: ServeEstimate, offline: bool = False) -> SchedulerPolicy:
    """The scheduler `prof`'s engine runs `est` with: its own (POLICIES); vLLM's V0 engine (--vllm-version before
    0.8, or v0) without chunked prefill, which it turns on past max_model_len 32K except for an MLA model
    (``vllm.v0_chunked_prefill``), schedules as V0 did; an `offline` TensorRT-LLM run is trtllm-bench's, whose later
    releases chunk contexts (``EngineProfile.bench_chunked``)."""
    if prof.name == "vllm" and est.version.engine == "v0" and \
            not v0_chunked_prefill(est.max_model_len, est.spec.is_mla):
        return POLICIES["vllm-v0"]
    if prof.name == "trtllm" and offline and prof.bench_chunked:
        return POLICIES["trtllm-bench"]
    return POLICIES[prof.name]


def multi_step_policy(policy: SchedulerPolicy, prof: EngineProfile, est: ServeEstimate,
                      num_scheduler_steps: int) -> SchedulerPolicy:
    """`policy` with vLLM V0's multi-step scheduling of `num_scheduler_steps` decode steps a pass
    (SchedulerPolicy.multi_step); 1 leaves it as it is. Refused where the engine never had it: SGLang, TensorRT-LLM
    and vLLM's V1 engine (vllm/engine/arg_utils.py _is_v1_supported_oracle: "--num-scheduler-steps" falls back to
    V0 or is refused), and V0 with chunked
    prefill (max_model_len above 32K), whose multi-step prefills llmcalc does not model."""
    if num_scheduler_steps == 1:
        return policy
    option = f"--num-scheduler-steps {num_scheduler_steps}"
    if prof.name != "vllm":
        raise LlmcalcError(f"{option}: multi-step scheduling is vLLM V0's; leave it out with --engine {prof.name}")
    if est.version.engine != "v0":
        raise LlmcalcError(f"{option}: multi-step scheduling is vLLM's V0 engine's (0.6-0.10), which vLLM "
                           f"{est.version.key} does not run; add --vllm-version v0 (or 0.6.4; with --max-model-len "
                           f"32768 or less where the model's context is longer: V0 chunks prefills past it) or leave "
                           f"it out")
    if not policy.mixed and not policy.chunked:
        return dataclasses.replace(policy, multi_step=num_scheduler_steps)
    raise LlmcalcError(f"{option}: with chunked prefill (V0 turns it on past --max-model-len 32768) multi-step "
                       "prefills are not modelled; give --max-model-len 32768 or less, or leave it out")


V0_SCHEDULER = ("vLLM V0 without chunked prefill: a step of waiting prompts, whole, within max_num_batched_tokens "
                "whenever one can be admitted, else a decode step of the running requests")


MULTI_STEP = ("; multi-step scheduling (--num-scheduler-steps {n}): a decode pass of {n} steps per schedule, arrivals "
              "waiting for its end, sequences that finish mid-pass riding it out, the host's step work paid once a "
              "pass")


def scheduler_words(prof: EngineProfile, est: ServeEstimate, offline: bool = False, multi_step: int = 1) -> str:
    """The assumptions' words for the scheduler `prof`'s engine runs `est` with ("" for vLLM V1's, said there), and
    V0's `multi_step` passes (SchedulerPolicy.multi_step)."""
    if prof.name == "vllm":
        v0 = V0_SCHEDULER if scheduler_policy(prof, est) is POLICIES["vllm-v0"] else ""
        return v0 + (MULTI_STEP.format(n=multi_step) if multi_step > 1 else "")
    if scheduler_policy(prof, est, offline) is POLICIES["trtllm-bench"]:
        return prof.scheduler.replace("a context request whole or waiting (context chunking off)",
                                      "a context request chunked to fit (trtllm-bench's chunked context)")
    return prof.scheduler


@dataclass(frozen=True)
class EngineProfile:
    """One engine release's scheduler defaults and step behaviour (module docstring for the sources)."""

    name: str  # vllm | trtllm | sglang
    version: str
    scheduler: str  # the assumptions' words for its scheduler
    admission: str  # and for its admission into the KV cache
    kv_memory: str  # "vllm" (gpu_memory_utilization), "free_fraction" (TensorRT-LLM), "static_fraction" (SGLang)
    overlap: bool  # the host prepares the next step while the GPU runs this one: step = max(gpu, host)
    chunked_prefill: bool  # a prompt split across steps under the token budget
    sources: tuple[str, ...]
    answered: str = ""  # which release's profile answers, in words (engine_versions.profile_for); "" the tables'
    cuda_graphs: bool = True  # False: eager steps, at least the host's kernel dispatch (eager_dispatch_seconds)
    # trtllm-bench throughput chunks contexts (POLICIES["trtllm-bench"]): on TensorRT engines before 1.0 and in 1.1
    # and later, not in 1.0's PyTorch flow (engine_versions docstring; 1.1 for the PyTorch flip is an assumption)
    bench_chunked: bool = False
    # trtllm-bench without chunking raises max_num_tokens to the longest prompt + max_batch_size (PyTorch flow, 0.20
    # to 1.0: bench/benchmark/utils/general.py get_settings; engine_versions docstring), in batch_limits
    bench_isl_floor: bool = False
    # which steps replay a CUDA graph (cuda_graphs True): None every step's GPU work; "decode" decode-only steps
    # (TensorRT-LLM's PyTorch backend: llm_args.py TorchLlmArgs.cuda_graph_config, "CUDA graphs are only created for
    # the batch sizes in cuda_graph_config.batch_sizes, and are enabled for batches that consist of decoding requests
    # *only*"), the others eager; graph_batches: the decode batch sizes captured, () any (padded up to max_batch_size)
    graphed: str | None = None
    graph_batches: tuple[int, ...] = ()


PROFILES = {
    "vllm": EngineProfile(
        name="vllm", version="", scheduler="vLLM V1: running requests first (a decode token each, or the next "
        "prefill chunk), then waiting ones first come first served; chunked prefill within max_num_batched_tokens",
        admission="a request is admitted when the KV cache holds its prompt; when the next step's tokens outgrow the "
        "cache, the latest admitted are preempted and recomputed later (vLLM's recompute preemption)",
        kv_memory="vllm", overlap=False, chunked_prefill=True,
        sources=("vllm/v1/core/sched/scheduler.py", "vllm/engine/arg_utils.py")),
    "trtllm": EngineProfile(
        name="trtllm", version="1.3.0rc20", scheduler="TensorRT-LLM in-flight batching (PyTorch backend): "
        "generation and context requests in one step within max_num_tokens, a context request whole or waiting "
        "(context chunking off); overlap scheduler on",
        admission="GUARANTEED_NO_EVICT capacity scheduler: a request is admitted when the KV cache holds its prompt "
        "and its whole output beside every running request's to completion; nothing is ever evicted",
        kv_memory="free_fraction", overlap=True, chunked_prefill=False, bench_chunked=True, graphed="decode",
        sources=("tensorrt_llm/bench/build/tuning.py", "tensorrt_llm/bench/benchmark/throughput.py",
                 "tensorrt_llm/llmapi/llm_args.py")),
    "sglang": EngineProfile(
        name="sglang", version="0.5.14", scheduler="SGLang: a prefill-only step (chunked_prefill_size tokens) "
        "whenever a waiting request can be admitted, else a decode step of every running request (mixed chunks off); "
        "fcfs policy (radix cache matches nothing on random prompts); overlap scheduler on",
        admission="a request is admitted when the KV cache holds its prompt and its output beside new_token_ratio "
        "(0.7, decaying to 0.098 over 600 decode steps) of the running requests' remaining output; when decodes "
        "outgrow the cache the latest are retracted and recomputed later",
        kv_memory="static_fraction", overlap=True, chunked_prefill=True,
        sources=("python/sglang/srt/server_args.py", "python/sglang/srt/model_executor/model_runner.py")),
}
TRTLLM_FREE_FRACTION = 0.90  # throughput.py --kv_cache_free_gpu_mem_fraction default .90
TRTLLM_BENCH_FRACTION = 0.95  # tuning.py calc_engine_setting(kv_cache_gpu_mem_fraction=0.95)
TRTLLM_SERVE_DEFAULTS = (8192, 2048)  # (max_num_tokens, max_batch_size): llm_args.py BaseLlmArgs
# trtllm-serve's CUDA graphs (no cuda_graph_config given): TorchLlmArgs.validate_cuda_graph_config "max_batch_size =
# config.max_batch_size or 128", CudaGraphConfig._generate_cuda_graph_batch_sizes(128, enable_padding=False):
# "list(range(1, 32)) + [32, 64, 128]"; without padding a decode batch of another size runs eager (1.0's llm_args.py;
# trtllm-bench instead passes {"enable_padding": True, "max_batch_size": its max_batch_size}, general.py get_settings)
TRTLLM_SERVE_GRAPH_BATCHES = (*range(1, 33), 64, 128)
# SGLang's server_args.py `_handle_gpu_memory_settings`, by GPU memory (MiB, nvidia-smi's total): below each bound,
# (chunked_prefill_size, cuda_graph_max_bs at tp < 4, at tp >= 4)
SGLANG_BY_MEMORY = ((35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160), (90 * 1024, 8192, 256, 512),
                    (160 * 1024, 8192, 256, 512), (math.inf, 16384, 512, 512))
# The fused-MoE table dtypes TensorRT-LLM and SGLang run a checkpoint's experts in, by its weights' format (best
# first). A ModelOpt FP8 checkpoint (quant_method "modelopt", quant_algo "FP8": NVIDIA's Llama 4 Maverick / Scout FP8,
# nvidia/Qwen3-235B-A22B-FP8) is per-tensor FP8, the table's "fp8" rows, as a typed FP8 is: TensorRT-LLM maps
# QuantAlgo.FP8 to FP8 QDQ (tensorrt_llm/quantization/mode.py QuantMode.from_quant_algo: "elif quant_algo ==
# QuantAlgo.FP8: quant_mode = QuantMode.from_description(use_fp8_qdq=True)"), and its CUTLASS MoE runs that as
# per-tensor FP8 grouped GEMMs (NVIDIA/TensorRT-LLM@7b437aaa:tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py
# CutlassFusedMoE._get_quant_method: "if self.quant_config.layer_quant_mode.has_fp8_qdq(): return
# FP8QDQFusedMoEMethod()", forward_chunk: "x, _ = torch.ops.tensorrt_llm.static_quantize_e4m3_per_tensor(x,
# self.fc31_input_dequant)"). Without the "fp8-modelopt" entry such a checkpoint's experts found no key and fell back
# to the roofline inside linear_seconds (benchmarks/kernel_audit.py, docs/serving-validation.md section h36hop).
MOE_DTYPES = {"bf16": ("bf16",), "fp16": ("bf16",), "fp8": ("fp8", "fp8_block"), "fp8-block": ("fp8_block", "fp8"),
              "fp8-modelopt": ("fp8", "fp8_block"), "nvfp4": ("nvfp4",), "mxfp4": ("w4a16_mxfp4",)}
# An MXFP4 checkpoint's experts on Blackwell (sm100), where TensorRT-LLM and SGLang quantize the activations to MXFP8
# and run the W4A8 MXFP4 x MXFP8 grouped GEMMs instead of Hopper's BF16 x MXFP4 (W4A16) ones:
# - TensorRT-LLM: tensorrt_llm/_torch/model_config.py ModelConfig.get_mxfp4_quant_algo, read by load_hf_quant_config
#   for quant_method "mxfp4" (NVIDIA/TensorRT-LLM@008e0af8, and alike in every stored release since gpt-oss):
#   "if get_sm_version() >= 100: if moe_backend == 'TRITON': return QuantAlgo.W4A8_MXFP4_FP8 else: return
#   QuantAlgo.W4A8_MXFP4_MXFP8 / else: return QuantAlgo.W4A16_MXFP4"; the MoE backend is CUTLASS (MoeConfig.backend's
#   default in 1.0-1.1) or, from AUTO, "TRTLLM" for GptOssForCausalLM at 100 <= sm < 120 (resolve_moe_backend), never
#   TRITON on Blackwell unless asked; CutlassFusedMoE's _QUANT_SUPPORT_TABLE runs W4A16_MXFP4 on "SM == 90 only". The
#   gpt-oss blog says so too (docs/source/blogs/tech_blog/blog9_Deploying_GPT_OSS_on_TRTLLM.md @04a2a261): "For MXFP4
#   checkpoints, default quantization is `W4A8_MXFP4_MXFP8` for CUTLASS and TRTLLM backend and `W4A8_MXFP4_FP8` for
#   Triton backend on Blackwell. Default quantization for MXFP4 checkpoints on Hopper is `W4A16_MXFP4`".
# - SGLang: server_args.py sets moe_runner_backend "flashinfer_mxfp4" for GptOssForCausalLM on sm100 with an MXFP4
#   checkpoint, and Mxfp4MoEMethod.apply with flashinfer_mxfp4_moe_precision "default" (the option's default) runs
#   "x_quant, x_scale = mxfp8_quantize(x, False" before FlashInfer's TRT-LLM-gen MoE (sgl-project/sglang mxfp4.py).
# - vLLM keeps the W4A16 label: its B200 rows under it are FlashInfer's TRT-LLM-gen MXFP4 x BF16 kernel (aiconfigurator
#   kernel_source vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16, its SM100 default), measured as such.
# aiconfigurator 0.12.0 itself maps an "mxfp4" checkpoint to w4a16_mxfp4 on every system (sdk/models/helpers.py);
# its B200 TensorRT-LLM rows under that label (BF16 activations, which the engine does not run there) read 1.75 ms a
# layer of gpt-oss-120b at 256 tokens against 0.26 ms for the w4a8_mxfp4_mxfp8 rows and 0.22 ms for the expert weights
# at 7.7 TB/s (docs/serving-validation.md, branch h36bw).
BLACKWELL_MOE_DTYPES = {"trtllm": {"mxfp4": ("w4a8_mxfp4_mxfp8",)}, "sglang": {"mxfp4": ("w4a8_mxfp4_mxfp8",)}}
BLACKWELL_ARCHS = ("blackwell", "blackwell-ultra")  # sm100 / sm103: kernels.Device.arch
# vLLM's FP8 experts by checkpoint: its own fp8 method (quant_method "fp8": `--quantization fp8`, a typed FP8 and the
# block-scaled checkpoints of DeepSeek and Qwen) runs Fp8MoEMethod, Triton's fused_moe with FP8 w8a8
# (vllm/model_executor/layers/quantization/fp8.py; FlashInfer's CUTLASS MoE only with VLLM_USE_FLASHINFER_MOE_FP8=1),
# which aiconfigurator measured as its fp8_block rows (kernel_source vllm_fp8moe_triton_tritonexperts); its "fp8" rows
# are ModelOpt FP8 checkpoints' path (vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts: 3-5x slower at decode
# batches, e.g. Qwen3-235B's experts at moe_tp 4 and 8 tokens on H100 0.56 ms against the Triton kernel's 0.11 ms).
VLLM_MOE_DTYPES = {**MOE_DTYPES, "fp8": ("fp8_block", "fp8"), "fp8-modelopt": ("fp8", "fp8_block")}


def profile(engine: str, version: str | None = None) -> EngineProfile:
    """The profile of `engine` at `version` (None: the release its tables were measured in): for TensorRT-LLM and
    SGLang the fields that change with the release (engine_versions.profile_for); vLLM's release is --vllm-version's
    (llmcalc/analytic/vllm.py)."""
    if engine not in PROFILES:
        raise LlmcalcError(f"--engine {engine}: choose one of {', '.join(PROFILES)}")
    found = PROFILES[engine]
    if engine == "vllm" or version is None:
        return found
    released: EngineProfile = engine_versions.profile_for(found, version)
    return released


def assumptions(prof: EngineProfile, share: float, chunked: bool = False, offline: bool = False) -> dict[str, Any]:
    """What an answer on `prof`'s engine assumed beyond vLLM's (none for vLLM): the JSON's "assumptions"; `chunked`:
    the scheduler the answer ran split prompts across steps (trtllm-bench's chunked context, POLICIES); `offline`:
    a trtllm-bench run (its token floor, EngineProfile.bench_isl_floor)."""
    if prof.name == "vllm":
        return {}
    chunking = ("context chunking within the token budget (chunked_prefill_size)" if prof.chunked_prefill else
                "context chunking on (trtllm-bench's default in this release): a context split to fit the step's "
                "max_num_tokens" if chunked else
                "context chunking off (trtllm-bench's PyTorch flow in this release), max_num_tokens raised to the "
                "longest prompt + max_batch_size (bench/benchmark/utils/general.py), so a whole context fits beside a "
                "full batch of generations" if prof.bench_isl_floor and offline else
                "context chunking off by default (trtllm-bench); simulated with chunks of max_num_tokens, as the "
                "engine must for a prompt longer than it")
    hidden = ("hidden under the GPU's by the overlap scheduler" if prof.overlap else
              "added to the GPU's (no overlap scheduler in this release)")
    tables = PROFILES[prof.name].version
    return {"profile": prof.answered or f"{prof.name} {tables} (the release its kernel tables were measured in)",
            "kv_cache_vs_vllm": share, "context_chunking": chunking,
            "host_overhead": "the host's work per step (engine_step_seconds, vLLM's fitted value: no published "
                             f"measurement for this engine) {hidden}",
            "kernel_tables": f"aiconfigurator's tables measured in {prof.name} {tables} (fused MoE included)"
                             + ("" if prof.version == tables else f", applied to {prof.version}"),
            "sources": list(prof.sources)}


# --- memory and batch limits ---------------------------------------------------------------------------------


def kv_share(prof: EngineProfile, est: ServeEstimate) -> float:
    """The engine's KV-cache bytes on the limiting GPU over vLLM's (``est.kv_cache_bytes``): TensorRT-LLM keeps
    kv_cache_free_gpu_mem_fraction of what is free after weights, activations and the CUDA context; SGLang
    mem_fraction_static of the whole GPU less the weights. 1 for vLLM (and where vLLM's leaves nothing)."""
    vllm = est.kv_cache_bytes
    if prof.kv_memory == "vllm" or vllm <= 0:
        return 1.0
    total = est.accelerator.usable_bytes
    if prof.kv_memory == "free_fraction":
        free = total - est.weights_bytes_per_gpu - est.activation_bytes - est.non_torch_bytes
        mine = TRTLLM_FREE_FRACTION * free
    elif prof.kv_memory == "static_fraction_tp":  # SGLang before 0.5: the fraction by TP size
        mine = engine_versions.sglang_tp_fraction(est.tp) * total - est.weights_bytes_per_gpu
    else:
        mine = sglang_static_fraction(total / 2**20, tp=est.tp, pp=est.pp) * total - est.weights_bytes_per_gpu
    return max(0.0, mine) / vllm


def sglang_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, cuda_graph_max_bs) for a GPU of `gpu_mib` MiB at tensor parallelism `tp`
    (server_args.py `_handle_gpu_memory_settings`: "elif gpu_mem < 160 * 1024: # H20, H200 (chunked_prefill_size 8k,
    cuda_graph_max_bs 256 if tp < 4 else 512)", B200 and MI300 16k and 512)."""
    _, chunk, small, large = next(row for row in SGLANG_BY_MEMORY if gpu_mib < row[0])
    return chunk, small if tp < 4 else large


def sglang_static_fraction(gpu_mib: float, tp: int, pp: int) -> float:
    """SGLang's default mem_fraction_static, the share of the whole GPU for weights + KV pool (server_args.py):
    reserved = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MiB, at
    least 10 GiB on GPUs above 60 GiB; fraction = round((gpu_mem - reserved) / gpu_mem, 3). (Piecewise CUDA graphs,
    DP attention and speculative decoding, which reserve more, are off by default.)"""
    chunk, graph_bs = sglang_defaults(gpu_mib, tp)
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def trtllm_bench_settings(est: ServeEstimate, input_len: int, output_len: int) -> tuple[int, int]:
    """trtllm-bench's (max_num_tokens, max_batch_size) for a dataset of ISL/OSL (tuning.py calc_engine_setting and
    finetune_setting, module docstring): KV requests from the whole replica's memory less its parameters at the
    weights' bytes, 0.95 of it, over the KV bytes of one ISL + OSL request."""
    gpus = est.tp * est.pp
    memory = est.accelerator.usable_bytes * gpus - est.served_weights_bytes
    spec = est.spec
    # "adjusted_num_kv_heads = max(tp_size, model_config.num_key_value_heads)": each rank holds at least one KV head
    replicated = max(est.tp, spec.n_kv_heads) / spec.n_kv_heads if spec.n_kv_heads and spec.mla is None else 1.0
    per_request = est.kv_bytes_per_token * replicated * (input_len + output_len)
    requests = TRTLLM_BENCH_FRACTION * memory / per_request if per_request else 4096.0
    raw_bs = min(requests, 4096) / est.pp
    raw_token = min(raw_bs * (1 + input_len / output_len), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        tokens = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        tokens = 512 * math.ceil(raw_token / 512)
    else:
        tokens = 1024 * math.ceil(raw_token / 1024)
    return tokens, bs


def batch_limits(prof: EngineProfile, est: ServeEstimate, input_len: int, output_len: int,
                 offline: bool, longest_input: int | None = None) -> tuple[int, int]:
    """(token budget per step, most running requests) the engine runs with: typed --max-num-batched-tokens /
    --max-num-seqs first; else vLLM's defaults, trtllm-bench's tuning (offline; at mean lengths `input_len` /
    `output_len`, the dataset's avg_isl / avg_osl) or trtllm-serve's defaults, SGLang's chunked_prefill_size and its
    max_running_requests cap. trtllm-bench's unchunked PyTorch flow raises the tuned tokens to the longest prompt
    (`longest_input`, else `input_len`) + max_batch_size (``EngineProfile.bench_isl_floor``, general.py
    ``get_settings``: ``max(max_num_tokens, dataset_metadata.max_isl + max_batch_size)``)."""
    tokens, seqs = est.batch_defaults
    if prof.name == "trtllm":
        tokens, seqs = trtllm_bench_settings(est, input_len, output_len) if offline else TRTLLM_SERVE_DEFAULTS
        if offline and prof.bench_isl_floor and not est.max_num_batched_tokens:
            tokens = max(tokens, (longest_input or input_len) + (est.max_num_seqs or seqs))
    elif prof.name == "sglang":
        tokens = sglang_defaults(est.accelerator.usable_bytes / 2**20, est.tp)[0]
        if prof.kv_memory == "static_fraction_tp":  # before 0.5: "2048 if gpu_mem < 25_000 else 8192"
            tokens = 2048 if est.accelerator.usable_bytes / 1e6 < 25_000 else 8192
        seqs = 4096
    return est.max_num_batched_tokens or tokens, est.max_num_seqs or seqs


# --- the step ------------------------------------------------------------------------------------------------


def moe_dtypes(name: str, engine: str = "vllm", arch: str = "hopper") -> tuple[str, ...]:
    """The fused-MoE table dtypes `engine` runs a `name` checkpoint's routed experts in on a GPU of generation `arch`
    (kernels.Device.arch), best first: vLLM's VLLM_MOE_DTYPES; TensorRT-LLM's and SGLang's MOE_DTYPES, with MXFP4's
    W4A8 MXFP8-activation kernels on Blackwell (BLACKWELL_MOE_DTYPES, their sources there)."""
    if engine == "vllm":
        return VLLM_MOE_DTYPES.get(name, ())
    if arch in BLACKWELL_ARCHS and name in BLACKWELL_MOE_DTYPES.get(engine, {}):
        return BLACKWELL_MOE_DTYPES[engine][name]
    return MOE_DTYPES.get(name, ())


def moe_table_key(est: InferenceEstimate, serve: ServeEstimate, engine: str = "vllm",
                  arch: str = "hopper") -> tuple[str, ...]:
    """The MoE table keys one layer of `serve`'s model may be measured under, best first: the weights' format as
    `engine` runs it on a GPU of generation `arch` (moe_dtypes), the expert shape, and the experts' sharding over the n
    GPUs that hold them: the engine's own (moe_tp = tp, moe_ep = 1; with --enable-expert-parallel moe_tp = 1,
    moe_ep = tp x dp), then the other splits of the same n GPUs, nearest first (aiconfigurator measured some shapes
    under expert parallelism only, e.g. MXFP4 experts in TensorRT-LLM: each GPU then holds the same 1/n of the
    expert weights, grouped by expert rather than sliced)."""
    spec, fmt = est.spec, serve.weights
    name = fmt.name
    if name == "fp8" and fmt.quant is not None and fmt.quant.format.per == "block":
        name = "fp8-block"
    elif name == "fp8" and fmt.quant is not None and fmt.quant.method == "modelopt":
        name = "fp8-modelopt"
    dtypes = moe_dtypes(name, engine, arch)
    n = serve.ep if serve.expert_parallel else serve.tp
    tp = 1 if serve.expert_parallel else n
    splits = sorted(((t, n // t) for t in range(1, n + 1) if n % t == 0),
                    key=lambda s: abs(math.log2(s[0]) - math.log2(tp)))
    return tuple(kernel_tables.moe_key(d, hidden=spec.d_model, inter=spec.d_ff_expert, topk=spec.n_experts_per_token,
                                       experts=spec.n_experts, moe_tp=t, moe_ep=e)
                 for t, e in splits for d in dtypes)


class DenseOnly:
    """A replica's roofline estimate whose weight reads leave out the routed experts (the fused-MoE table times
    them, weights included); everything else is the estimate's."""

    def __init__(self, est: InferenceEstimate) -> None:
        self.est = est

    def __getattr__(self, name: str) -> Any:
        return getattr(self.est, name)

    def weights_read(self, tokens: int) -> float:
        """Every matmul weight one GPU streams but the routed experts (and the lookup tables' rows)."""
        layout = self.est.layout
        return float(layout.per_gpu - layout.lookups_per_gpu - layout.experts_per_gpu)


class EngineStepCost:
    """One engine step of a replica as `prof`'s engine runs it: serving_speed.StepCost's terms on the engine's own
    measured tables (decode attention, all-reduce; ``kernel_tables.source``), the routed experts from its fused-MoE
    table where the shape was measured, expert parallelism's dispatch and combine, pipeline parallelism's micro-
    batches, and the overlap scheduler's max(GPU, host). Built by ``step_cost``."""

    def __init__(self, base: Any, prof: EngineProfile, serve: ServeEstimate, host: float) -> None:
        self.base, self.prof, self.serve = base, prof, serve
        self.host = host  # the host's work per step (serving_speed.ENGINE_STEP_SECONDS, in base.seconds too)
        self.moe_keys = measured_moe(base, serve, prof.name)
        b = base
        if self.moe_keys:  # the experts come from the table: the base step's GEMMs and weight reads leave them out
            b.expert_flops = 0
            b.est = DenseOnly(b.est)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def expert_seconds(self, tokens: float) -> float:
        """The routed experts of every MoE layer from the engine's fused-MoE table (kernel_tables.moe_seconds) for the
        tokens of the whole expert-parallel group (tokens x dp with --enable-expert-parallel: the DP ranks run in
        lockstep)."""
        if not self.moe_keys or tokens <= 0:
            return 0.0
        spec = self.base.spec
        group_tokens = tokens * (self.serve.dp if self.serve.expert_parallel else 1)
        layer = kernel_tables.moe_seconds(self.base.gpu, group_tokens, self.moe_keys[0])
        return spec.n_moe_layers * layer

    def dispatch_seconds(self, tokens: float) -> float:
        """Expert parallelism over tp x dp GPUs with dp > 1: each MoE layer gathers every DP rank's tokens to the
        experts' owners and reduce-scatters their outputs back (vLLM's allgather_reducescatter all2all backend, the
        default; TensorRT-LLM's and SGLang's attention-DP paths do the same without DeepEP), tokens x d_model x 2
        bytes per rank, on comm's NCCL curves. With dp = 1 the experts' outputs join the tensor-parallel all-reduce
        the step already counts."""
        s = self.serve
        if not s.expert_parallel or s.dp == 1 or tokens <= 0:
            return 0.0
        spec = self.base.spec
        nbytes = tokens * s.dp * spec.d_model * 2.0
        net = self.base.dev.network
        one = sum(comm.Collective("ep", kind, s.ep, nbytes).seconds(net) for kind in ("all_gather", "reduce_scatter"))
        return spec.n_moe_layers * one

    def p2p_seconds(self, tokens: float) -> float:
        """Pipeline parallelism's hand-offs: pp - 1 sends of the micro-batch's activations (tokens x d_model x 2
        bytes) between stages, on comm's p2p curve."""
        if self.serve.pp == 1 or tokens <= 0:
            return 0.0
        nbytes = tokens * self.base.spec.d_model * 2.0
        one = comm.Collective("pp", "p2p", 2, nbytes, stride=self.serve.tp).seconds(self.base.dev.network)
        return (self.serve.pp - 1) * one

    def gpu_seconds(self, tokens: float, rows: float, kv_tokens: float, decodes: float, pairs: float,
                    length: float) -> float:
        """One micro-batch's forward through every layer (base terms without the host's part) with the table's
        experts and EP's collectives."""
        gpu = self.base.seconds(tokens, rows, kv_tokens=kv_tokens, decodes=decodes, pairs=pairs,
                                length=length) - self.host
        return gpu + self.expert_seconds(tokens) + self.dispatch_seconds(tokens)

    def seconds(self, tokens: float, rows: float, kv_tokens: float, decodes: float, pairs: float,
                length: float) -> float:
        """One scheduler step over the running requests. pp > 1: the requests split into m = min(pp, sequences)
        micro-batches in flight (vLLM's and TensorRT-LLM's pipeline schedulers keep pp batches in flight); each
        request's next token waits for its micro-batch to pass all pp stages, one cycle = max(pp, m) stage times
        of a micro-batch = the whole stack on 1/m of the tokens when m = pp, with pp - m stages idle (the bubble)
        when fewer sequences run, plus the hand-offs. Without CUDA graphs (TensorRT-LLM 0.17-0.18's PyTorch flow)
        the GPU runs behind the host's eager kernel dispatch, so it takes at least that long
        (engine_versions.eager_dispatch_seconds). The host's work per micro-batch is added (vLLM) or hidden under
        the GPU's (overlap scheduler: max)."""
        pp = self.serve.pp
        m = min(pp, max(1, math.ceil(max(rows, decodes)))) if pp > 1 else 1
        gpu = self.gpu_seconds(tokens / m, rows / m, kv_tokens=kv_tokens / m, decodes=decodes / m, pairs=pairs / m,
                               length=length)
        gpu += self.p2p_seconds(tokens / m)
        if self.eager(tokens, decodes):  # eager: each stage dispatches its layers' kernels per micro-batch
            spec = self.base.spec
            gpu = max(gpu, engine_versions.eager_dispatch_seconds(spec.n_layers, spec.n_moe_layers) * m / pp)
        host = self.host * m if pp > 1 else self.host
        return max(gpu, host) if self.prof.overlap else gpu + host

    def eager(self, tokens: float, decodes: float) -> bool:
        """Whether a step of `tokens` tokens, `decodes` of them decode rows, runs without a CUDA graph: every step
        without CUDA graphs (0.17-0.18's PyTorch flow); with TensorRT-LLM's PyTorch graphs (EngineProfile.graphed
        "decode") a step holding a prefill, or a decode batch of a size not captured (graph_batches)."""
        prof = self.prof
        if not prof.cuda_graphs:
            return True
        if prof.graphed != "decode":
            return False
        if tokens > decodes:
            return True
        return bool(prof.graph_batches) and round(decodes) not in prof.graph_batches

    def decode_attention_seconds(self, kv_tokens: float, sequences: float) -> float:
        return float(self.base.decode_attention_seconds(kv_tokens, sequences))


def measured_moe(base: Any, serve: ServeEstimate, engine: str = "vllm") -> tuple[str, ...]:
    """The fused-MoE table key (at most one) that times `serve`'s routed experts on `base`'s table, () if none: the
    first of ``moe_table_key``'s that the table holds, unless its rows are a split outlier (``split_outlier``); then
    the first other split of the same dtype that is not, else the first key that is not."""
    if not (base.spec.is_moe and base.measured):
        return ()
    curves = kernel_tables.table(base.gpu).get("moe", {}).get("curves", {})
    keys = [k for k in moe_table_key(base.est, serve, engine, base.dev.arch) if k in curves]
    if not keys or not split_outlier(base.gpu, keys[0], keys):
        return tuple(keys[:1])
    sane = [k for k in keys if not split_outlier(base.gpu, k, keys)]
    same = [k for k in sane if k.split("/")[0] == keys[0].split("/")[0]]
    return tuple((same or sane or keys)[:1])


# A pure tensor-parallel split's rows more than this many times the fastest other split of the same GPUs and dtype
# at MOE_PROBE_TOKENS, where each GPU's slice of an expert is at least MOE_WIDE_SLICE columns wide (split_outlier)
MOE_OUTLIER = 3.0
MOE_PROBE_TOKENS = 1024
MOE_WIDE_SLICE = 1024


def split_outlier(gpu: str, key: str, keys: list[str]) -> bool:
    """Whether `key`'s measured rows are an outlier among the splits of the same GPUs: a pure tensor-parallel split
    (moe_ep 1) whose slice of each expert is at least MOE_WIDE_SLICE columns wide, measured at MOE_PROBE_TOKENS tokens
    at more than MOE_OUTLIER times the fastest other split of the same dtype in `keys`. Every split of n GPUs
    (moe_tp x moe_ep = n) holds 1/n of the expert weights and does 1/n of their FLOPs; a pure tensor-parallel one
    sees no routing imbalance (every GPU works on every routed token's slice) and, that wide, no tile starvation, so
    nothing in the kernel's work makes it a multiple slower. Expert-parallel splits (the hottest expert's GPU waits
    for the others) and narrow slices (moe_tp 32 of a 512-wide expert) may be, and are read as measured. The rows
    this catches in aiconfigurator's tables: Llama 4 Scout's 16 x 5,120 x 8,192 experts (TensorRT-LLM's H100 and H200
    fp8 moe_tp 2 at 6.6x and 8.7x the weights' read at 1,024 tokens, moe_ep 2 at 1.7x and 1.9x; bf16 moe_tp 4 in
    TensorRT-LLM's H100 and vLLM's B200 tables) and TensorRT-LLM's Mixtral 8x22B bf16 moe_tp 8 and 16 on H100 and
    H200 (1.87 ms on H100 at 1,024 tokens against 0.55 ms at moe_tp 4 x moe_ep 2 and 0.25 ms for the fp8 moe_tp 8
    rows); docs/serving-validation.md section h36hop."""
    dtype, _, inter, _, _, moe_tp, moe_ep = key.split("/")
    if moe_ep != "1" or int(inter) // int(moe_tp) < MOE_WIDE_SLICE:
        return False
    peers = [k for k in keys if k != key and k.split("/")[0] == dtype]
    if not peers:
        return False
    try:
        mine = kernel_tables.moe_seconds(gpu, MOE_PROBE_TOKENS, key)
        best = min(kernel_tables.moe_seconds(gpu, MOE_PROBE_TOKENS, k) for k in peers)
    except kernel_tables.KernelTableError:
        return False
    return mine > MOE_OUTLIER * best


def served_profile(prof: EngineProfile, offline: bool) -> EngineProfile:
    """`prof` as a served run (trtllm-serve, not trtllm-bench) runs it: TensorRT-LLM's PyTorch backend replays CUDA
    graphs only for decode batches of TRTLLM_SERVE_GRAPH_BATCHES there; `prof` itself offline or for other engines."""
    if offline or prof.graphed != "decode":
        return prof
    return dataclasses.replace(prof, graph_batches=TRTLLM_SERVE_GRAPH_BATCHES)


def step_cost(base: Any, prof: EngineProfile, serve: ServeEstimate, host: float) -> Any:
    """`base` (a serving_speed.StepCost) as `prof`'s engine runs it: itself for vLLM on a tensor-parallel replica
    of a dense model (or an MoE whose expert shape was not measured), else an EngineStepCost over it, reading the
    engine's tables (kernel_tables.source) where they are shipped."""
    if prof.name == "vllm" and serve.pp == 1 and not serve.expert_parallel and not measured_moe(base, serve, "vllm"):
        return base
    if prof.name != "vllm":
        b = base
        b.pcie_pairs = prof.name != "trtllm"  # TensorRT-LLM runs NCCL on PCIe-only GPUs (comm.Network.custom_allreduce)
        if kernel_tables.has_tables(b.gpu, prof.name):
            b.gpu = kernel_tables.source(b.gpu, prof.name)
            if "gemm" in kernel_tables.table(b.gpu):  # the engine's own GEMM sweep times a dense model's projections
                b.gemm_shape = layer_gemm_shape(b.est, b.tp, b.gpu, b.stack_flops_per_token)
        else:  # no table of this engine: the roofline terms, never another engine's measurements
            b.measured = b.table_attention = False
    return EngineStepCost(base, prof, serve, host)
