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
  int(concurrency x max_model_len) from 0.21, #41069).
"""

from __future__ import annotations

import math
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

    @property
    def label(self) -> str:
        return f"vLLM {self.key}" + (" (V0 engine)" if self.engine == "v0" else "")


SORT, TRITON = 38.0, 14.0  # sampler bytes per B x V element (research/serving/vllm_memory.md sec. 2.3)
VERSIONS = (
    VllmVersion("0.6.4", "v0", SORT, True, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="V0 engine: non-torch memory as measured after profiling, CUDA context included"),
    VllmVersion("0.6.5", "v0", SORT, False, True, hybrid=False, cudagraphs=False, util=0.9, tokens="blocks",
                what="V0 engine with memory_profiling (#10511): only non-torch growth is charged"),
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
)
CURRENT = VERSIONS[-1]


def _parse(text: str) -> tuple[int, ...]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.\-+].*)?", text.strip().lower())
    if not match:
        raise LlmcalcError(f"--vllm-version {text!r}: write a release such as 0.11.0 or 0.21 (or v0 for the V0 "
                           f"engine)")
    return tuple(int(g or 0) for g in match.groups())


def vllm_version(text: str | None) -> VllmVersion:
    """The accounting of release `text` (the latest span starting at or before it); None: the current release.
    "v0" is the V0 engine of 0.6.5-0.10 (VLLM_USE_V1=0)."""
    if text is None:
        return CURRENT
    if text.strip().lower() == "v0":
        return VERSIONS[1]
    wanted = _parse(text)
    if wanted < _parse(VERSIONS[0].key):
        raise LlmcalcError(f"--vllm-version {text}: llmcalc models vLLM {VERSIONS[0].key} and later")
    return [v for v in VERSIONS if _parse(v.key) <= wanted][-1]


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


def batch_defaults(gpu: Accelerator, version: VllmVersion, max_model_len: int, tokens: int | None = None,
                   seqs: int | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` picks them where not typed (engine/arg_utils.py
    get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args): V1 from 0.9.0, total memory >= 70 GiB
    and not an A100: 8192 tokens and 1024 sequences, else 2048 and 256 (0.8.x: H100/H200 by name); a defaulted token
    budget is at most max_num_seqs x max_model_len, defaulted sequences at most the tokens. V0: 256 sequences,
    max(max_model_len, 2048) tokens without chunked prefill, which it turns on past 32K (then 2048)."""
    if version.engine == "v0":
        default_tokens, default_seqs = (max(max_model_len, 2048) if max_model_len <= 32768 else 2048), 256
        return tokens or default_tokens, seqs or default_seqs
    big = gpu.usable_bytes >= 70 * GIB and "a100" not in gpu.key.lower()
    if _parse(version.key) < (0, 9, 1):
        big = generation(gpu) == "hopper" and not gpu.key.lower().startswith("gh")
    default_tokens, default_seqs = (8192, 1024) if big else (2048, 256)
    seqs_now = seqs or default_seqs
    tokens = tokens or min(seqs_now * max_model_len, default_tokens)
    return tokens, seqs or min(default_seqs, tokens)


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
