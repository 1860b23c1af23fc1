"""The memory vLLM sees on one GPU, version by version: what it requests, the weights as it loads them, the
profiling run's activation peak, non-torch and CUDA-graph memory, and its hybrid KV-cache allocator.

Sources (vLLM git history, upstream commits/PRs as cited; the research notes are /work/research/serving/):
- requested = total x gpu_memory_utilization, total = cudaMemGetInfo's (the preset's cuda_visible_gib), not the
  nominal size (vllm/v1/worker/utils.py request_memory; gpu_worker.py determine_available_memory);
- available KV = requested - weights - activation peak - non-torch growth - CUDA graphs (charged from v0.21,
  #38284, which also made util 0.92 the default; vllm/config/cache.py);
- the activation peak is the profile run's torch allocated peak: the forward over max_num_batched_tokens tokens
  (attention kernels skipped in V1), then the dummy sampler over min(max_num_seqs, max_num_batched_tokens) rows x the
  whole vocabulary with top-k and top-p on (gpu_model_runner.py _dummy_sampler_run, since 0.8.0 #14508): bf16
  logits, an fp32 copy and torch.sort's values, int64 indices and scratch ~38 B per element until the Triton top-k/top-p
  kernel (#33538, 2026-02-17: logits, fp32, probs and exponential noise, ~14 B); the sampler's logits are
  all-gathered, so it is not divided by tp. V0 profiled max(max_model_len, 2048) tokens unless chunked prefill
  (max_model_len > 32K) and max_num_seqs = 256 rows;
- KV: kv_cache_interface.py page sizes, kv_cache_utils.py get_kv_cache_groups (page unification, groups of equal
  size with padding layers), get_num_blocks (available // (page x group size)), max_memory_usage_bytes per layer
  (full cdiv(L, block); sliding window cdiv(min(w - 1 + T, L), block) + 1; chunked cdiv(min(c + T, L), block);
  Mamba one state page), get_max_concurrency_for_kv_cache_config (blocks / sum of blocks per request) and
  _report_kv_cache_config ("GPU KV cache size": blocks x block before 0.9.1, blocks // groups x block until 0.20,
  the attention groups' block on a hybrid, int(concurrency x max_model_len) from 0.21, #41069); T is
  max_num_batched_tokens, from 0.26 VllmConfig.max_in_flight_tokens (two batches under async scheduling, #47728);
- batch defaults by device (engine/arg_utils.py get_batch_defaults): >= 70 GiB and not an A100, and from 0.28
  >= 160 GiB (#51726);
- a multimodal checkpoint's vision tower, loaded beside the language model, and the profiling run's dummy images
  (gpu_model_runner.py profile_run);
- what vLLM refuses to start with, in its own words (config/model.py _get_and_verify_max_len; kv_cache_utils.py
  check_enough_kv_cache_memory).
"""

from __future__ import annotations

import math
import os
import re

from ..dtypes import dtype_bytes
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..spec import ModelSpec
from ..units import GIB
from .inference import KvLayer, kv_heads_per_gpu
from .params import count_params
from .quant import Module, WeightFormat, modules

# --- versions -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmVersion:
    """One span of vLLM releases with the same memory accounting."""

    key: str  # the first release of the span
    engine: str  # "v0" or "v1"
    sampler_bytes: float  # per element of the dummy sampler's [B, V] working set
    charges_context: bool  # V0 0.6.4 and V1 <= 0.9.0: everything used on the GPU (CUDA context) is charged
    charges_nccl: bool  # NCCL buffers made after the init snapshot (before 0.11.0, #25359)
    hybrid: bool  # the hybrid KV-cache manager: sliding/chunked layers keep their window (0.9.1, #17996)
    cudagraphs: bool  # the CUDA-graph estimate is charged (0.21, #38284)
    util: float  # the default gpu_memory_utilization
    tokens: str  # how "GPU KV cache size" is logged: "blocks", "groups" or "concurrency"
    what: str  # what changed, for the docs and notes
    largest_tier: bool = False  # devices of >= 160 GiB get 16,384 batched tokens (0.28, arg_utils.py)
    in_flight: bool = False  # windowed layers reserve every in-flight batch's tokens (0.26, #47728)
    runner_v2: bool = False  # Model Runner V2 by default (0.29): pp + 1 batches in flight under async scheduling
    mla_absorbed: bool = False  # MLA's absorbed decode matrices materialized beside the checkpoint's (0.7.1-0.7.x)

    @property
    def label(self) -> str:
        return f"vLLM {self.key}" + (" (V0 engine)" if self.engine == "v0" else "")


SORT, TRITON = 38.0, 14.0  # sampler bytes per B x V element (research/serving/vllm_memory.md sec. 2.3)
VERSIONS = (
    VllmVersion("0.6.4", "v0", SORT, True, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="V0 engine: non-torch memory as measured after profiling, CUDA context included"),
    VllmVersion("0.6.5", "v0", SORT, False, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="V0 engine with memory_profiling (#10511): only non-torch growth is charged"),
    VllmVersion("0.7.1", "v0", SORT, False, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="MLA decode in the absorbed form (#12528): W_Q_UK and W_UV_O materialized beside the checkpoint's "
                "projections, requantized to FP8 for FP8 weights (attention/backends/mla/utils.py "
                "process_weights_after_loading), until #14770 (0.8.0)", mla_absorbed=True),
    VllmVersion("0.8.0", "v1", SORT, True, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="V1 engine by default (#13726), the dummy sampler in the profile (#14508); the torch peak plus "
                "all non-torch memory on the GPU is charged"),
    VllmVersion("0.9.1", "v1", SORT, False, True, hybrid=True, cudagraphs=False, util=0.9, tokens="groups",
                what="memory_profiling from the init snapshot (#19312) and the hybrid KV-cache manager (#17996)"),
    VllmVersion("0.11.0", "v1", SORT, False, False, hybrid=True, cudagraphs=False, util=0.9, tokens="groups",
                what="the init snapshot after NCCL initialisation (#25359): NCCL buffers are no longer charged"),
    VllmVersion("0.16.0", "v1", TRITON, False, False, hybrid=True, cudagraphs=False, util=0.9, tokens="groups",
                what="Triton top-k/top-p sampling (#33538): the sampler's peak falls from ~38 to ~14 B per element"),
    VllmVersion("0.21.0", "v1", TRITON, False, False, hybrid=True, cudagraphs=True, util=0.92, tokens="concurrency",
                what="CUDA-graph memory charged by default and gpu_memory_utilization 0.92 (#38284); \"GPU KV cache "
                "size\" = int(concurrency x max_model_len) (#41069)"),
    VllmVersion("0.26.0", "v1", TRITON, False, False, hybrid=True, cudagraphs=True, util=0.92, tokens="concurrency",
                what="sliding-window and chunked-local layers reserve max_in_flight_tokens = max_concurrent_batches x "
                "max_num_batched_tokens per request (2 batches under async scheduling; #47728, config/vllm.py)",
                in_flight=True),
    VllmVersion("0.28.0", "v1", TRITON, False, False, hybrid=True, cudagraphs=True, util=0.92, tokens="concurrency",
                what="a batch-default tier for devices of >= 160 GiB (B200, B300, MI300X, MI355X): vllm serve profiles "
                "16,384 batched tokens, not 8,192 (engine/arg_utils.py get_batch_defaults, #51726)", largest_tier=True,
                in_flight=True),
    VllmVersion("0.29.0", "v1", TRITON, False, False, hybrid=True, cudagraphs=True, util=0.92, tokens="concurrency",
                what="Model Runner V2 by default: pp + 1 batches in flight under async scheduling (config/vllm.py "
                "max_concurrent_batches)", largest_tier=True, in_flight=True, runner_v2=True),
)
CURRENT = VERSIONS[-1]


def _parse(text: str, option: str = "--vllm-version") -> tuple[int, ...]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.\-+].*)?", text.strip().lower())
    if not match:
        raise LlmcalcError(f"{option} {text!r}: write a release such as 0.11.0 or 0.21 (or v0 for the V0 "
                           f"engine)")
    return tuple(int(g or 0) for g in match.groups())


def vllm_version(text: str | None, option: str = "--vllm-version") -> VllmVersion:
    """The accounting of release `text` (the latest span starting at or before it); None: the current release.
    "v0" is the V0 engine of 0.6.5-0.10 (VLLM_USE_V1=0); a release from 0.2 to 0.6.3 is answered as 0.6.4, the earliest
    span read. `option` names where the user gave it, in a refusal."""
    if text is None:
        return CURRENT
    if text.strip().lower() == "v0":
        return VERSIONS[1]
    wanted = _parse(text, option)
    if wanted < _parse("0.2"):  # before 0.2 there was no gpu_memory_utilization to account
        raise LlmcalcError(f"{option} {text}: llmcalc models vLLM 0.2 and later (write e.g. 0.6.4)")
    # a V0 release before 0.6.4 is answered with 0.6.4's accounting, the earliest llmcalc has read (an assumption;
    # the answer is labelled vLLM 0.6.4)
    return [v for v in VERSIONS if _parse(v.key) <= wanted][-1] if wanted >= _parse(VERSIONS[0].key) else VERSIONS[0]


def fp8_kv_on_xformers(version: VllmVersion, arch: str) -> bool:
    """Whether `version` ran an FP8 KV cache on an NVIDIA GPU of `arch` through the XFormers backend, whose decode is
    vLLM's paged_attention v1/v2 kernel dequantizing per query head: V0 chose it for any FP8 cache ("Cannot use
    FlashAttention-2 backend for FP8 KV cache", vllm/attention/selector.py, later vllm/platforms/cuda.py) until
    FlashAttention 3's FP8 path (vllm-project/vllm PR #14570, "[Attention] Flash Attention 3 - fp8", 2025-03, V0 and
    V1, Hopper only). Every V0 span llmcalc reads starts before it ("v0", the V0 engine of 0.6.5-0.10, is read as
    0.6.5's); AMD Instinct (``cdna``) ran ROCm's own paged attention."""
    return version.engine == "v0" and not arch.startswith("cdna")


# What serve says of such a run: its prompts' attention read the step's own 16-bit K/V (xformers'
# memory_efficient_attention; a chunk after a prompt's first reads its prefix from the cache through the Triton
# prefix-prefill kernel, not modeled), so prefill is timed as with a 16-bit cache; its decode ran paged_attention
# over the FP8 cache, which no table times and which ran slower than an FP16 cache on the same backend: vLLM PR #7798
# (2024-08, H200, Llama-3-70B FP8, benchmark_throughput.py 256/256) "xformers | 2606.275 | 1792.68 (lagging around
# 30%)".
XFORMERS_FP8_WORDS = ("vLLM's V0 engine ran an FP8 cache on the XFormers backend: prefill attention as with a 16-bit "
                      "cache (its prompt attention reads the new 16-bit K/V); decode from the measured FlashAttention "
                      "FP8 rows, though it ran vLLM's paged_attention kernel, slower (vLLM PR #7798: 30 % below an "
                      "FP16 cache on the same backend), which is not modeled")


# --- what vLLM refuses to start with ------------------------------------------------------------------------

ALLOW_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def check_max_model_len(max_model_len: int, derived: int | None) -> None:
    """vLLM refuses a max_model_len beyond the config's (vllm/config/model.py _get_and_verify_max_len, every release
    llmcalc models): "User-specified max_model_len (N) is greater than the derived max_model_len
    (max_position_embeddings=M or model_max_length=None in model's config.json)", unless the environment sets
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, which llmcalc honours as vLLM does (the figures then come with a warning)."""
    if derived is None or max_model_len <= derived or os.environ.get(ALLOW_LONG, "").strip().lower() in ("1", "true"):
        return
    raise LlmcalcError(f"--max-model-len {max_model_len:,}: vLLM refuses to start: \"User-specified max_model_len "
                       f"({max_model_len}) is greater than the derived max_model_len (max_position_embeddings="
                       f"{derived} or model_max_length=None in model's config.json). To allow overriding this "
                       f"maximum, set the env var {ALLOW_LONG}=1.\" Use --max-model-len {derived:,} or less (or "
                       f"set {ALLOW_LONG}=1 for llmcalc too)")


def not_enough_kv_message(max_model_len: int, needed: float, available: float, longest: int,
                          default: bool = False) -> str:
    """vLLM's refusal when the KV cache cannot hold one request of max_model_len (vllm/v1/core/kv_cache_utils.py
    check_enough_kv_cache_memory, V1; V0's "The model's max seq len (N) is larger than the maximum number of tokens
    that can be stored in KV cache (M)" says the same): needed = the per-request bytes of every layer
    (max_memory_usage_bytes), available = the KV memory, and the estimated longest length (estimate_max_model_len);
    `default`: the length is the config's."""
    which = " (the config's max_position_embeddings, vLLM's default)" if default else ""
    return (f"--max-model-len {max_model_len:,}{which}: vLLM refuses to start: \"To serve at least one request "
            f"with the model's max seq len ({max_model_len}), {needed / GIB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({available / GIB:.2f} GiB). Based on the available memory, "
            f"the estimated maximum model length is {longest}. Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine.\" Use --max-model-len {longest:,} or less, add "
            f"GPUs (--n-gpus) or raise --gpu-memory-utilization")


# --- the device -----------------------------------------------------------------------------------------

GENERATIONS = (("h100", "hopper"), ("h200", "hopper"), ("gh200", "hopper"), ("b200", "blackwell"),
               ("b300", "blackwell"), ("gb200", "blackwell"), ("gb300", "blackwell"), ("a100", "ampere"),
               ("rtx-3090", "ampere"), ("a10", "ampere"), ("l4", "ada"), ("l40", "ada"), ("l20", "ada"),
               ("rtx-4090", "ada"), ("v100", "volta"), ("t4", "turing"), ("mi3", "cdna3"), ("mi355", "cdna4"),
               ("tpu", "tpu"))


def generation(gpu: Accelerator) -> str:
    """The GPU generation of a preset (by its name): which kernels vLLM picks, what the CUDA context costs."""
    key = gpu.key.lower()
    for prefix, gen in sorted(GENERATIONS, key=lambda p: -len(p[0])):
        if key.startswith(prefix):
            return gen
    return "unknown"


LARGE_DEVICE = 70 * GIB  # arg_utils.py get_batch_defaults: "For GPUs like H100 and MI300x, use larger default values"
LARGEST_DEVICE = 160 * GIB  # v0.28: "for GPUs like B200/B300 with >= 160GB memory, use the largest defaults"


def device_batch_tier(gpu: Accelerator, version: VllmVersion) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` (UsageContext.OPENAI_API_SERVER) picks for this device
    where neither is typed, before the max_model_len clamps (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults,
    the device's total memory from current_platform.get_device_total_memory):
    - 0.8.x: 8,192 tokens and 1,024 sequences on an H100/H200 (by device name), else 2,048 and 256;
    - 0.9.0 to 0.27: total >= 70 GiB and not an A100 (#17885: larger batches cost the A100 throughput): 8,192 and
      1,024, else 2,048 and 256;
    - 0.28.0: a tier above, total >= 160 GiB (B200, B300, MI300X, MI355X): 16,384 tokens (sequences 1,024)."""
    if _parse(version.key) < (0, 9, 1):
        big = generation(gpu) == "hopper" and not gpu.key.lower().startswith("gh")
    else:
        big = gpu.usable_bytes >= LARGE_DEVICE and "a100" not in gpu.key.lower()
    if version.largest_tier and gpu.usable_bytes >= LARGEST_DEVICE:
        return 16384, 1024
    return (8192, 1024) if big else (2048, 256)


V0_LONG_CONTEXT = 32768  # V0 turns chunked prefill on past this max_model_len (engine/arg_utils.py use_long_context)


def v0_chunked_prefill(max_model_len: int, mla: bool = False) -> bool:
    """Whether vLLM's V0 engine chunks prefills by default: past max_model_len 32K (arg_utils.py "Chunked prefill is
    enabled by default for models with max_model_len > 32K"), except for a model that runs MLA (DeepSeek-V2/V3/R1),
    whose V0 attention had no chunked prefill: vLLM 0.7.2/0.7.3 forced it off after the fact (config.py
    VllmConfig.__post_init__, "MLA is enabled; forcing chunked prefill and prefix caching to be disabled", #12642),
    0.7.4 onwards leaves it off from the start (0.8.0 engine/arg_utils.py _set_default_args_v0: "Chunked prefill not
    supported for Multimodal or MLA in V0"), so the scheduler's token budget is max(max_model_len, 2048): 163,840 for
    DeepSeek-R1 served at its full context, every prompt prefilled whole and the profiling run over that many
    tokens. (0.7.3 alone left the budget at chunked prefill's 2,048 when it forced chunking off, #13370/#13374,
    refusing longer prompts; llmcalc follows 0.7.4's arithmetic.)"""
    return max_model_len > V0_LONG_CONTEXT and not mla


CHUNK_TOKENS_BEFORE_10544 = 512  # config.py SchedulerConfig, 0.6.0-0.6.4: "best balance between ITL and TTFT on A100"
CHUNK_TOKENS = 2048  # from 0.6.5 (#10544, "Update default max_num_batch_tokens for chunked prefill to 2048")


def v0_chunk_tokens(version: VllmVersion) -> int:
    """V0's default max_num_batched_tokens when chunked prefill is on and none is typed (one scheduler step):
    vllm/config.py SchedulerConfig, "if enable_chunked_prefill: # It is the values that have the best balance between
    ITL and TTFT on A100. Note it is not optimized for throughput. max_num_batched_tokens = 512" through 0.6.4;
    vLLM PR #10544 (mgoin, 2024-11-21, after 0.6.4.post1 of 2024-11-15: first in 0.6.5) made it 2048 ("We have seen
    that 512 is a very conservative value, especially once on H100"). A 10,000-token prompt served at max_model_len
    131,072 by 0.6.3 (chunked prefill on past 32K) is prefilled in 20 steps of 512 tokens, not 5 of 2,048."""
    return CHUNK_TOKENS_BEFORE_10544 if _parse(version.key) < _parse("0.6.5") else CHUNK_TOKENS


def batch_defaults(gpu: Accelerator, version: VllmVersion, max_model_len: int, tokens: int | None = None,
                   seqs: int | None = None, mla: bool = False) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` picks them where not typed (engine/arg_utils.py
    _set_default_max_num_seqs_and_batched_tokens_args): V1 the device's tier (``device_batch_tier``); a defaulted
    token budget is at most max_num_seqs x max_model_len, defaulted sequences at most the tokens. V0: 256 sequences,
    max(max_model_len, 2048) tokens without chunked prefill, which it turns on past 32K (then ``v0_chunk_tokens``:
    512 before 0.6.5, 2048 after) unless the model runs MLA (``v0_chunked_prefill``)."""
    if version.engine == "v0":
        chunked = v0_chunked_prefill(max_model_len, mla)
        default_tokens = v0_chunk_tokens(version) if chunked else max(max_model_len, 2048)
        default_seqs = 256
        return tokens or default_tokens, seqs or default_seqs
    default_tokens, default_seqs = device_batch_tier(gpu, version)
    seqs_now = seqs or default_seqs
    tokens = tokens or min(seqs_now * max_model_len, default_tokens)
    return tokens, seqs or min(default_seqs, tokens)


def admission_tokens(version: VllmVersion, batched_tokens: int, pp: int = 1) -> int:
    """The tokens a sliding-window or chunked-local layer must hold beyond its window per request (the T of
    ``KvGroup.blocks_per_request``): max_num_batched_tokens before 0.26; from 0.26 (#47728, blocks out of the window
    freed on the processed-token basis) VllmConfig.max_in_flight_tokens = max_concurrent_batches x
    max_num_batched_tokens, max_concurrent_batches = 2 under async scheduling (on by default) with one stage, pp with
    more on the V1 runner, pp + 1 on Model Runner V2 (default from 0.29) (vllm/config/vllm.py). Gemma-4-E2B on an
    MI300X under 0.29.1 at 32,768 tokens: 4 sliding groups of 1,025 blocks of 32 + 2,048 full blocks per request
    ("Maximum concurrency ... 275.45x" over 155.04 GiB of 3 x 32 KiB pages), not 529 each."""
    if not version.in_flight:
        return batched_tokens
    batches = pp + 1 if version.runner_v2 else (2 if pp == 1 else pp)
    return batches * batched_tokens


# Non-torch memory growth during profiling (cuBLAS/cuBLASLt and attention workspaces, NCCL for tp > 1 before 0.11),
# read from the logs' own "non_torch_memory" lines (research/serving/vllm_logs.json): one GPU 0.01, 0.04, 0.05, 0.12
# GiB (rows 22, 11, 25, 24: median 0.045), tensor parallel 0.20, 0.20, 0.30 GiB (rows 10, 23, 12: median 0.20).
# Where the version charges everything on the GPU, the CUDA context is added: 0.35 GiB on an RTX 3090 under
# vLLM 0.6.4 (row 1, "non_torch_memory=0.35GiB"; ptrblck, pytorch#109888: "around 400MB").
NON_TORCH_ONE_GPU = 0.045 * GIB
NON_TORCH_TP = 0.20 * GIB
# V1 logs no non-torch line; what its single-GPU logs leave after weights and the profile's peak (requested - weights -
# available KV - activation_peak) is 0.11 GiB (gpt-oss-120b H100, 0.10.1, row 7), 0.27 GiB (the same at util 0.95 and
# 1,024 batched tokens, 0.11, row 8) and 0.55 GiB (gpt-oss-20b A100, 0.19, row 19): cuBLASLt and attention-backend
# workspaces, torch.compile's. A fitted constant (no closed form known): their median, 0.27 GiB; refitted without
# each row in turn (0.41, 0.33, 0.19 GiB) the KV predictions of rows 7, 8 and 19 move by -0.14, -0.06 and +0.36 GiB
# (leave-one-out, by hand from the rows' logged figures).
NON_TORCH_V1_ONE_GPU = 0.27 * GIB
CUDA_CONTEXT_VLLM = 0.35 * GIB
# CUDA-graph pool charged from 0.21: no closed form (vLLM captures ~67 batch sizes in two modes and extrapolates,
# gpu_model_runner.py profile_cudagraph_memory). Fitted once per decoder layer on the one log of a known model that
# shows it: Qwen2.5-1.5B, 28 layers, "Graph capturing finished in 3 secs, took 0.48 GiB" (vLLM 0.28, row 38).
CUDAGRAPH_BYTES_PER_LAYER = 0.48 * GIB / 28


def non_torch_bytes(version: VllmVersion, tp: int) -> float:
    """Non-torch memory the version charges on one GPU: the fitted growth (V0 from its logged lines, V1 from what
    its logs leave), NCCL under tensor parallelism while it was charged, the CUDA context where everything was."""
    one = NON_TORCH_ONE_GPU if version.engine == "v0" else NON_TORCH_V1_ONE_GPU
    base = max(one, NON_TORCH_TP) if tp > 1 and version.charges_nccl else one
    return base + (CUDA_CONTEXT_VLLM if version.charges_context else 0.0)


def cudagraph_bytes(spec: ModelSpec, version: VllmVersion, layers: int, eager: bool = False) -> float:
    """The CUDA-graph pool charged against the KV cache from 0.21 (gpu_worker.py, VLLM_MEMORY_PROFILER_ESTIMATE_
    CUDAGRAPHS): CUDAGRAPH_BYTES_PER_LAYER per decoder layer of the stage; none with --enforce-eager (no graph is
    captured) or before 0.21."""
    return 0.0 if eager or not version.cudagraphs else CUDAGRAPH_BYTES_PER_LAYER * layers


# --- the profiling run ----------------------------------------------------------------------------------


def forward_peak(spec: ModelSpec, tokens: int, tp: int, act_bytes: float, expert_parallel: bool = False) -> float:
    """The largest transient of one block over `tokens` tokens (weights excluded; research sec. 2.3): a gated MLP
    T·(3F/tp + 3D)·a (gate_up [T, 2F/tp] and its product [T, F/tp] beside residual, normed input and output [T, D]),
    plain T·(2F/tp + 3D)·a; vLLM's fused MoE workspaces M·k·max(2I/tp, D) and M·k·I/tp (fused_moe.py cache13 and
    cache2; whole experts under expert parallelism) plus 3·T·D."""
    D = spec.d_model
    # a dense MLP's transient where some layer runs one: a dense layer, or Gemma 4's MLP beside the experts (a model
    # whose every FFN is routed, qwen3_moe, has no dense MLP whatever its config's intermediate_size says)
    has_dense = not spec.is_moe or spec.moe_dense_parallel or spec.n_moe_layers < spec.n_layers
    dense = dense_peak(tokens, (3 if spec.gated else 2) * spec.d_ff / tp, D, act_bytes) if spec.d_ff and has_dense \
        else 0.0
    if not spec.is_moe:
        return dense
    k, inner = spec.n_experts_per_token, spec.d_ff_expert / (1 if expert_parallel else tp)
    moe = moe_peak(tokens, k, (2 if spec.gated else 1) * inner, inner, d_model=D,
                   shared_width=3 * spec.d_ff_shared / tp, act_bytes=act_bytes)
    return max(dense, moe)


def dense_peak(tokens: int, width: float, d_model: int, act_bytes: float) -> float:
    """A dense MLP block's transient on one rank: T·(C + R + 3D)·a, C + R the MLP's column- and row-parallel widths
    on the rank (gate_up [T, 2F/tp] and its product [T, F/tp]: 3F/tp gated, 2F/tp plain) beside the residual,
    normed input and output [T, D]."""
    return tokens * (width + 3 * d_model) * act_bytes


def moe_peak(tokens: int, k: int, up_width: float, inner: float, d_model: int, shared_width: float,
             act_bytes: float) -> float:
    """A fused-MoE block's transient on one rank (fused_moe.py): the workspaces cache13, M·k·max(N, D) (N the
    gate_up width on the rank, 2I/tp gated), and cache2, M·k·I/tp, plus 3·T·D, plus a shared expert's T·(C + R)
    (3F/tp gated)."""
    moe = tokens * k * (max(up_width, d_model) + inner) * act_bytes + 3 * tokens * d_model * act_bytes
    if shared_width:
        moe += tokens * shared_width * act_bytes
    return moe


def sampler_peak(spec: ModelSpec, rows: int, version: VllmVersion) -> float:
    """The dummy sampler over `rows` x vocabulary (not split by tp): ~38 B per element on the torch-sort path, ~14
    on the Triton top-k/top-p path (which serves only batches of 8 and more)."""
    per = version.sampler_bytes if rows >= 8 else SORT
    return rows * spec.vocab_size * per


def activation_peak(spec: ModelSpec, tokens: int, rows: int, version: VllmVersion, tp: int, act_bytes: float,
                    last_stage: bool = True, expert_parallel: bool = False) -> float:
    """max(forward, sampler + the dummy run's hidden states T·D·a); a pipeline stage that does not sample: the
    forward alone."""
    fwd = forward_peak(spec, tokens, tp, act_bytes, expert_parallel)
    if not last_stage:
        return fwd
    return max(fwd, sampler_peak(spec, rows, version) + tokens * spec.d_model * act_bytes)


# --- the vision tower of a multimodal checkpoint ---------------------------------------------------------

QWEN_VIT = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5_vision", "qwen3_5_moe_vision")  # vision_config model_types
QWEN_VIT_MAX_PIXELS = 16_777_216  # Qwen3-VL's image processor size["longest_edge"]: the dummy image's pixels


@dataclass(frozen=True)
class VisionTower:
    """The vision encoder vLLM loads beside a multimodal checkpoint's language model: its parameters (``sharded``:
    the block and merger matrices vLLM splits over tp; ``whole``: patch and position embeddings, norms), and for
    the Qwen-VL towers the profiling run's dummy images (``tokens_per_item`` after the spatial merge)."""

    kind: str
    sharded: int
    whole: int
    hidden: int = 0
    intermediate: int = 0
    patch_elements: int = 0  # pixel values per patch (channels x temporal patch x patch^2)
    merge: int = 1  # patches per output token along each side
    out_hidden: int = 0
    deepstack: int = 0
    tokens_per_item: int = 0  # 0: the profiling run is not modelled for this tower

    @property
    def params(self) -> int:
        return self.sharded + self.whole


def qwen_vit(vc: dict) -> VisionTower:
    """Qwen3-VL / Qwen3.5's vision tower (transformers modeling_qwen3_vl.py Qwen3VLVisionModel; vLLM qwen3_vl.py):
    a Conv3d patch embedding c·t·p²·h + h, learned positions npos·h, `depth` blocks of qkv + proj 4h² + 4h, an MLP
    fc1/fc2 2hi + i + h and two LayerNorms 4h, a patch merger (LayerNorm h, fc1 h'² + h', fc2 h'·out + out with
    h' = h·m²) and one merger per deepstack layer (its LayerNorm over h'). Qwen3-VL-30B-A3B: 538,631,408, as
    transformers builds it."""
    h, i, depth = vc["hidden_size"], vc["intermediate_size"], vc["depth"]
    p, t, c = vc.get("patch_size", 16), vc.get("temporal_patch_size", 2), vc.get("in_channels", 3)
    m, out = vc.get("spatial_merge_size", 2), vc["out_hidden_size"]
    hm, deep = h * m * m, len(vc.get("deepstack_visual_indexes") or ())
    merger = hm * hm + hm + hm * out + out
    sharded = depth * (4 * h * h + 4 * h + 2 * h * i + i + h) + (1 + deep) * merger
    whole = depth * 4 * h + c * t * p * p * h + h + vc.get("num_position_embeddings", 2304) * h + 2 * h + deep * 2 * hm
    return VisionTower("qwen-vit", sharded, whole, hidden=h, intermediate=i, patch_elements=c * t * p * p, merge=m,
                       out_hidden=out, deepstack=deep, tokens_per_item=QWEN_VIT_MAX_PIXELS // (p * m) ** 2)


def siglip_vit(vc: dict, text_d_model: int) -> VisionTower:
    """A SigLIP vision tower and Gemma 3's projector (transformers SiglipVisionModel, Gemma3MultiModalProjector):
    patch embedding c·p²·h + h, (image/p)² positions, `num_hidden_layers` blocks of q/k/v/o with biases 4h² + 4h, an
    MLP 2hi + i + h and two LayerNorms 4h, a post LayerNorm 2h; the projector h·D + h (D the language model's
    width). Gemma-3-27B: 416,866,032 + 6,194,304, as transformers builds it. Its profiling run is not modelled."""
    h, i, layers = vc["hidden_size"], vc["intermediate_size"], vc["num_hidden_layers"]
    p, c, image = vc.get("patch_size", 14), vc.get("num_channels", 3), vc.get("image_size", 224)
    sharded = layers * (4 * h * h + 4 * h + 2 * h * i + i + h) + h * text_d_model
    whole = layers * 4 * h + c * p * p * h + h + (image // p) ** 2 * h + 2 * h + h
    return VisionTower("siglip", sharded, whole)


def gemma4_vit(vc: dict, text_d_model: int) -> VisionTower:
    """Gemma 4's vision tower and its embed_vision projector (transformers modeling_gemma4.py Gemma4VisionModel):
    a patch embedding c·p²·h (no bias), two position tables 2·npos·h, `num_hidden_layers` blocks of q/k/v/o
    h·d·(2·heads + 2·kv_heads), a gated MLP 3hi, four RMSNorms 4h and q/k norms 2d; the projector h·D. Gemma-4-E2B:
    167,364,608 + 1,179,648; Gemma-4-31B: 569,548,080 + 6,193,152, as transformers builds them (the E2B's audio
    tower is not counted). Its profiling run is not modelled."""
    h, i, layers = vc.get("hidden_size", 768), vc.get("intermediate_size", 3072), vc.get("num_hidden_layers", 16)
    heads = vc.get("num_attention_heads", 12)
    kv, d = vc.get("num_key_value_heads", heads), vc.get("head_dim", h // heads)
    p, npos = vc.get("patch_size", 16), vc.get("position_embedding_size", 10240)
    sharded = layers * (h * d * (2 * heads + 2 * kv) + 3 * h * i) + h * text_d_model
    whole = layers * (4 * h + 2 * d) + 3 * p * p * h + 2 * npos * h
    return VisionTower("gemma4-vit", sharded, whole)


def vision_tower(spec: ModelSpec) -> VisionTower | None:
    """The tower of `spec`'s vision_config where llmcalc knows its family (Qwen3-VL / Qwen3.5, SigLIP, Gemma 4);
    None for a text model or a tower it does not size (its weights and profiling then left out, as serve's notes
    say)."""
    vc = getattr(spec, "vision_config", None)  # a model transformers measured has none
    if not isinstance(vc, dict):
        return None
    kind = vc.get("model_type")
    if kind in QWEN_VIT and {"hidden_size", "intermediate_size", "depth", "out_hidden_size"} <= set(vc):
        return qwen_vit(vc)
    if kind == "siglip_vision_model" and {"hidden_size", "intermediate_size", "num_hidden_layers"} <= set(vc):
        return siglip_vit(vc, spec.d_model)
    if kind == "gemma4_vision":  # the config class's defaults where the published config leaves them out
        return gemma4_vit(vc, spec.d_model)
    return None


def vision_weight_bytes(tower: VisionTower, tp: int, base_bytes: float, matrix_bytes: float | None = None) -> float:
    """The tower on one rank: its block and merger matrices split over tp (mm_encoder_tp_mode "weights", vLLM's
    default) at `matrix_bytes`, the rest whole at the 16-bit `base_bytes`. A quantized checkpoint leaves its tower
    unquantized (matrix_bytes None: 16-bit); vLLM's online quantization (a typed --weight-dtype, --quantization
    fp8) quantizes every linear layer, the tower's too."""
    return tower.sharded / tp * (base_bytes if matrix_bytes is None else matrix_bytes) + tower.whole * base_bytes


def encoder_items(tower: VisionTower, batched_tokens: int) -> int:
    """Dummy images of the maximum feature size the profiling run encodes (gpu_model_runner.py profile_run,
    multimodal budget): the encoder budget max(max_num_batched_tokens, tokens per item) // tokens per item
    ("Encoder cache will be initialized with a budget of N tokens, and profiled with K image items")."""
    if not tower.tokens_per_item:
        return 0
    return max(batched_tokens, tower.tokens_per_item) // tower.tokens_per_item


def encoder_peak(tower: VisionTower, items: int, tp: int, act_bytes: float) -> float:
    """The dummy encoder run's peak on one rank, over P = items x tokens x merge² patches: the pixel values
    P·c·t·p², a block's MLP transient P·(2i/tp + 3h) (fc1 output and its activation beside the residual, normed
    input and output, as dense_peak), and the deepstack features items·tokens·out per deepstack layer."""
    patches = items * tower.tokens_per_item * tower.merge ** 2
    block = patches * (2 * tower.intermediate / tp + 3 * tower.hidden)
    deep = tower.deepstack * items * tower.tokens_per_item * tower.out_hidden
    return (patches * tower.patch_elements + block + deep) * act_bytes


def encoder_cache_bytes(tower: VisionTower, items: int, act_bytes: float) -> float:
    """The dummy encoder outputs vLLM keeps (encoder_cache["tmp"]) through the language model's profiling forward:
    items x tokens x out, and the deepstack features beside them."""
    return items * tower.tokens_per_item * tower.out_hidden * (1 + tower.deepstack) * act_bytes


# --- the KV cache: vLLM's groups --------------------------------------------------------------------------


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group of vLLM's hybrid allocator: `layers` layers of one kind sharing a block table, each
    holding `page_bytes` per block of `block_size` tokens (a state group: one page per sequence)."""

    kind: str  # full, sliding, chunked, mla, state
    layers: int  # real layers in the group
    padding: int  # padding layers vLLM adds so that every group has the same size
    span: int
    bytes_per_token: float  # per layer, on this GPU (0 for a state group)
    page_bytes: float
    block_size: int

    def blocks_per_request(self, max_model_len: int, batched_tokens: int) -> int:
        """max_memory_usage_bytes / page of one request of max_model_len tokens (kv_cache_interface.py)."""
        b, L = self.block_size, max_model_len
        if self.kind == "state":
            return 1
        if self.kind == "sliding":
            return -(-min(self.span - 1 + batched_tokens, L) // b) + 1
        if self.kind == "chunked":
            return -(-min(self.span + batched_tokens, L) // b)
        return -(-L // b)


def kv_groups(layers: list[KvLayer], block_size: int, hybrid: bool = True) -> list[KvGroup]:
    """vLLM's KV groups for these layers (kv_cache_utils.py get_kv_cache_groups): one group when every layer has
    the same spec; else page sizes unified to the largest (a smaller page's block grows; attention blocks grow to
    hold a Mamba state page, _align_hybrid_block_size), group_size = the fewest layers of a kind (the most when
    max < 1.5 x min), each kind split into ceil(n / group_size) groups, padded. Without the hybrid manager (before
    0.9.1, V0) windowed layers keep the whole context."""
    kinds: dict[tuple[str, int, float, float], int] = {}
    for layer in layers:
        kind, span = layer.kind, layer.span
        if not hybrid and kind in ("sliding", "chunked"):
            kind, span = "full", 0
        key = (kind, span, layer.bytes_per_token, layer.state_bytes)
        kinds[key] = kinds.get(key, 0) + 1
    if not kinds:
        return []
    attn = [k for k in kinds if k[0] != "state"]
    blocks = {k: block_size for k in attn}
    states = [k for k in kinds if k[0] == "state"]
    if states and attn:  # attention block grows so that its page holds the largest state page
        state_page = max(k[3] for k in states)
        per_token = min(k[2] for k in attn)
        grown = block_size * math.ceil(state_page / (block_size * per_token))
        blocks = {k: max(block_size, grown) for k in attn}
    pages = {k: blocks[k] * k[2] for k in attn} | {k: k[3] for k in states}
    page = max(pages.values())
    for k in attn:  # unify_kv_cache_spec_page_size: a smaller page's block size grows by page / its page
        blocks[k] = int(round(blocks[k] * page / pages[k]))
    counts = list(kinds.values())
    size = counts[0] if len(kinds) == 1 else min(counts)
    if len(kinds) > 1 and max(counts) < 1.5 * min(counts):
        size = max(counts)
    out = []
    for k, n in kinds.items():
        n_groups = -(-n // size)
        for g in range(n_groups):
            real = min(size, n - g * size)
            out.append(KvGroup(k[0], real, size - real, span=k[1], bytes_per_token=k[2], page_bytes=page,
                               block_size=blocks.get(k, block_size)))
    return out


def logged_block_size(groups: list[KvGroup] | tuple[KvGroup, ...], max_model_len: int) -> int:
    """The block size "GPU KV cache size" multiplies by from 0.9.1 to 0.20 (kv_cache_utils.py
    _report_kv_cache_config: num_blocks // len(groups) x min(group block sizes)). A Mamba/linear-attention group's
    block is mamba_block_size = max_model_len (models/config.py MambaModelConfig.verify_and_update_config, without
    prefix caching; cache_config.block_size, the unified attention block, with it), never the smaller, so the least
    is the attention groups' block as unified for the state page (Qwen3-Next on 2 H200 under 0.10.2: 544 tokens,
    "Setting attention block size to 544 tokens"), not the backend's 16."""
    attention = [g.block_size for g in groups if g.kind != "state"]
    return min(attention) if attention else max_model_len


def default_block_size(spec: ModelSpec, gpu: Accelerator) -> int:
    """The attention backend's block (platforms update_block_size_for_backend): 16 (FlashAttention, FlashInfer,
    Triton); MLA 64 on Hopper (FlashMLA), 128 on Blackwell (CUTLASS MLA)."""
    if spec.is_mla:
        return {"hopper": 64, "blackwell": 128}.get(generation(gpu), 16)
    return 16


# --- weights as vLLM loads them ---------------------------------------------------------------------------

VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE, pad_vocab_size


def mxfp4_padding(gpu: Accelerator) -> tuple[int, int]:
    """(hidden, intermediate) multiples vLLM rounds gpt-oss's MXFP4 experts up to for its MoE kernel
    (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size): Marlin on Ampere/Hopper/Ada:
    hidden 256, intermediate 128; FlashInfer TRT-LLM on Blackwell: 256 and 256; ROCm: 256 and 256."""
    gen = generation(gpu)
    if gen in ("blackwell", "cdna3", "cdna4"):
        return 256, 256
    return 256, 128


def round_up(n: float, multiple: int) -> int:
    return int(-(-n // multiple) * multiple)


def mla_absorbed_bytes(spec: ModelSpec, fmt: WeightFormat, tp: int, n_layers: int) -> float:
    """What vLLM 0.7.1-0.7.x kept per rank beside an MLA model's weights for the absorbed decode (#12528, attention/
    backends/mla/utils.py MLACommonImpl.process_weights_after_loading; removed by #14770, "[Attention] MLA get rid of
    materialization", before 0.8.0, which says the materialization "eats up too much of the GPU memory"), per MLA
    layer with N = heads / tp, Lq = q_lora_rank (d_model without a query latent), Lkv = kv_lora_rank:
    W_Q_UK = einsum(W_Q, W_UK), Lq x N·Lkv, and W_UV_O = einsum(W_UV, W_O), N·Lkv x d_model, each requantized to FP8
    (1 byte, block scales negligible) where the weights are FP8, else in the activation dtype; W_QR, the query's
    RoPE columns Lq x N·qk_rope_head_dim copied out in the activation dtype; and for quantized weights the dequantized
    kv_b_proj, Lkv x N·(qk_nope + v) in the activation dtype, which W_UK and W_UV stay views of.
    DeepSeek-V3/R1 FP8 at tp 8: (12.6 + 58.7) MB + 3.1 MB + 4.2 MB = 78.6 MB a layer, 4.5 GiB over 61 layers."""
    mla = spec.mla
    if mla is None or n_layers <= 0:
        return 0.0
    act = dtype_bytes(fmt.base)
    kv_b = next(m for m in modules(spec) if m.name.endswith("kv_b_proj"))
    held = fmt.module_bytes(kv_b) / kv_b.params  # bytes per weight as loaded
    quantized, fp8 = held < act - 0.01, abs(held - 1.0) < 0.01
    n, lkv = spec.n_heads / tp, mla.kv_lora_rank
    lq = mla.q_lora_rank or spec.d_model
    absorbed = (lq * n * lkv + n * lkv * spec.d_model) * (1.0 if fp8 else act)
    rope = lq * n * mla.qk_rope_head_dim * act
    dequantized = lkv * n * (mla.qk_nope_head_dim + mla.v_head_dim) * act if quantized else 0.0
    return n_layers * (absorbed + rope + dequantized)


def rotary_cache_bytes(spec: ModelSpec, act_bytes: float) -> float:
    """RotaryEmbedding's cos_sin_cache, made during load on every rank: max_position_embeddings x rotary dim in the
    model dtype (Llama-3.1-8B: 131072 x 128 x 2 B = 32 MiB, the 0.03 GiB between its checkpoint and
    "Model loading took 14.9889 GiB")."""
    if spec.pos_emb != "rope" or not spec.max_seq_len:
        return 0.0
    dim = spec.mla.qk_rope_head_dim if spec.mla is not None else spec.d_head
    return spec.max_seq_len * dim * act_bytes



REPLICATED = ("q_a_proj", "kv_a_proj_with_mqa")  # MLA down-projections: ReplicatedLinear in vLLM's DeepSeek


def _layer_of(name: str) -> int | None:
    match = re.match(r"model\.(?:decoder\.)?layers\.(\d+)\.", name)
    return int(match.group(1)) if match else None


def _matrix_share(spec: ModelSpec, m: Module, tp: int, ep: int) -> float:
    """The share of matrix `m` one rank holds: column/row-parallel linears split by tp; routers and MLA's
    down-projections whole (ReplicatedLinear); K/V keep max(1, kv_heads // tp) heads; routed experts split by tp,
    or whole experts split over the ep ranks with --enable-expert-parallel."""
    if m.kind == "router" or m.name.rsplit(".", 1)[-1] in REPLICATED:
        return 1.0
    if m.name.endswith(("self_attn.k_proj", "self_attn.v_proj")):
        return kv_heads_per_gpu(spec, tp) / spec.n_kv_heads
    if m.kind == "expert" and ep > 1:
        return 1.0 / ep
    return 1.0 / tp


def _rest_share(key: str, tp: int, ep: int) -> float:
    """Parameters beside the matrices: norms whole on every rank, expert biases with their experts, the rest
    (biases, sinks, SSM parameters) split with their heads/channels."""
    if key.startswith("norm") or key.endswith("norm"):
        return 1.0
    if key.endswith("moe/experts") and ep > 1:
        return 1.0 / ep
    return 1.0 / tp


def rank_weight_bytes(spec: ModelSpec, fmt: WeightFormat, gpu: Accelerator, tp: int = 1, layers: range | None = None,
                      ep: int = 1, pp: int = 1) -> float:
    """Bytes one rank holds after load_model ("Model loading took X GiB"): its share of every matrix of its pipeline
    stage's `layers` (the first stage the embedding, the last the LM head: a tied head is a second copy there when
    pp > 1), vocabulary rows padded to a multiple of 64 (VocabParallelEmbedding, ParallelLMHead), gpt-oss's MXFP4
    experts padded for the MoE kernel (``mxfp4_padding``), the rotary cos/sin cache; checkpoint MTP layers are not
    loaded."""
    layers = range(spec.n_layers) if layers is None else layers
    first, last = layers.start == 0, layers.stop == spec.n_layers
    vocab_pad = round_up(spec.vocab_size, VOCAB_PADDING) / spec.vocab_size
    mxfp4 = fmt.quant is not None and fmt.quant.experts_only and not fmt.typed
    hidden_to, inner_to = mxfp4_padding(gpu)
    base = dtype_bytes(fmt.base)
    total, matrices = 0.0, dict[str, int]()
    for m in modules(spec):
        matrices[m.key] = matrices.get(m.key, 0) + m.params
        layer = _layer_of(m.name)
        if layer is None:
            held = (m.kind == "embedding" and (first or (last and spec.tie_embeddings and pp > 1))) or \
                   (m.kind == "head" and last)
            if held:
                total += fmt.module_bytes(m) * vocab_pad / tp
            continue
        if layer not in layers:
            continue
        if mxfp4 and m.kind == "expert":  # per rank: E (or E/ep) experts at the kernel's padded sizes
            inner = round_up(spec.d_ff_expert / (1 if ep > 1 else tp), inner_to)
            experts = m.count / ep if ep > 1 else m.count
            total += experts * inner * round_up(spec.expert_d_in, hidden_to) * (1 / 2 + 1 / 32)  # n/2 + n/32
            continue
        total += fmt.module_bytes(m) * _matrix_share(spec, m, tp, ep)
    n_in = sum(1 for i in layers)
    for key, n in count_params(spec).components.items():
        rest = n - matrices.get(key, 0)
        if rest <= 0:
            continue
        if key.startswith("embedding"):
            frac = 1.0 if first else 0.0
        elif key.startswith("head") or key == "norm/final":
            frac = 1.0 if last else 0.0
        else:
            frac = n_in / spec.n_layers
        if mxfp4 and key == "moe/experts":  # expert biases at the padded widths
            inner = round_up(spec.d_ff_expert / (1 if ep > 1 else tp), inner_to)
            per_expert = (2 * inner + round_up(spec.expert_d_in, hidden_to)) * base
            total += frac * spec.n_moe_layers * spec.n_experts / (ep if ep > 1 else 1) * per_expert
            continue
        total += frac * rest * base * _rest_share(key, tp, ep)
    return total + rotary_cache_bytes(spec, base)
