"""Serving capacity the way vLLM sizes it (analytic/vllm.py: the memory vLLM sees, its KV groups), for a layout of
tp x pp GPUs per replica and dp replicas (with or without expert parallelism), and the roofline throughput
against the number of concurrent sequences; and the inverse question, the fewest GPUs that serve a concurrency.

Per GPU (vLLM V1 gpu_worker.py determine_available_memory; kv_cache_utils.py get_kv_cache_configs):
- requested = CUDA-visible total x gpu_memory_utilization (0.92 from v0.21, 0.9 before);
- available KV = requested - weights as loaded - the profiling run's activation peak - non-torch memory - CUDA
  graphs (from v0.21);
- num_blocks = available // (page bytes x layers per group), the least over the pipeline stages;
- "Maximum concurrency for L tokens per request" = num_blocks / blocks one request needs over all groups;
- "GPU KV cache size" as the version logs it (vllm.py VllmVersion.tokens).
Throughput: one replica's roofline (inference.py) on its tp GPUs, its decode pipelined over pp stages (a stage
holds 1/pp of the weights and KV; with pp micro-batches in flight a token leaves every step / pp), times dp.
"""

from __future__ import annotations

import math
from dataclasses import field
from functools import cached_property
from typing import Any

from ..dtypes import dtype_bytes
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass, short_repr
from ..spec import ModelSpec
from .inference import (
    InferenceEstimate,
    KvLayer,
    check_tp,
    context_warning,
    default_compute_dtype,
    kv_cache_bytes_per_token,
    kv_cache_bytes_per_token_per_gpu,
    kv_heads_per_gpu,
    kv_layers,
    resolve_dtypes,
)
from .quant import TYPED_BYTES, WeightFormat, shipped_bytes, weight_format
from .vllm import (
    CURRENT,
    KvGroup,
    VisionTower,
    VllmVersion,
    activation_peak,
    admission_tokens,
    batch_defaults,
    cudagraph_bytes,
    default_block_size,
    encoder_cache_bytes,
    encoder_items,
    encoder_peak,
    kv_groups,
    logged_block_size,
    mla_absorbed_bytes,
    non_torch_bytes,
    not_enough_kv_message,
    rank_weight_bytes,
    vision_tower,
    vision_weight_bytes,
    vllm_version,
)


def vllm_max_concurrency(kv_blocks: int, max_model_len: int, block_size: int) -> float:
    """vLLM's 'Maximum concurrency for N tokens per request' for one full-attention group: KV blocks /
    ceil(N / block_size)."""
    return kv_blocks / -(-max_model_len // block_size)


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: n // pp layers per stage, the remainder to the last stages (one each)."""
    per, extra = divmod(n_layers, pp)
    out, start = [], 0
    for s in range(pp):
        size = per + (1 if s >= pp - extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's rank: its layers, weights, activation peak, KV groups and blocks."""

    layers: range
    weights: float
    activation: float
    non_torch: float
    cudagraphs: float
    groups: tuple[KvGroup, ...]
    state_layers: tuple[KvLayer, ...]
    available: float

    @property
    def group_size(self) -> int:
        return (self.groups[0].layers + self.groups[0].padding) if self.groups else 0

    @property
    def page_bytes(self) -> float:
        return self.groups[0].page_bytes if self.groups else 0.0

    @property
    def blocks(self) -> int:
        if not self.groups:
            return 0
        return max(0, math.floor(self.available / (self.page_bytes * self.group_size)))


@dataclass(frozen=True)
class ServeEstimate:
    """A model served by vLLM on `tp` x `pp` GPUs per replica, `dp` replicas."""

    __repr__ = short_repr(("spec", "accelerator", "tp", "pp", "max_model_len"))  # a handful of fields

    spec: ModelSpec
    accelerator: Accelerator
    tp: int
    max_model_len: int
    gpu_memory_utilization: float | None = None  # None: the version's default
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str = "bf16"
    block_size: int | None = None  # None: the attention backend's
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    version: VllmVersion = CURRENT
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    weights_format: WeightFormat | None = None
    notes: tuple[str, ...] = field(default=())
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs captured, none charged
    language_model_only: bool = False  # vLLM --language-model-only: no vision tower loaded or profiled

    def __post_init__(self) -> None:
        util = self.gpu_memory_utilization
        if util is not None and not 0 < util <= 1:
            raise LlmcalcError(f"--gpu-memory-utilization must be in (0, 1], got {util:g}")
        for name in ("max_model_len", "pp", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LlmcalcError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")
        if self.pp > self.spec.n_layers:
            raise LlmcalcError(f"--pp {self.pp} is more stages than {self.spec.name}'s {self.spec.n_layers} layers")
        if self.expert_parallel and not self.spec.is_moe:
            raise LlmcalcError(f"--enable-expert-parallel: {self.spec.name} has no experts")
        if self.expert_parallel and self.spec.n_experts % self.ep:
            raise LlmcalcError(f"--enable-expert-parallel over {self.ep} GPUs (tp x dp) does not divide the "
                               f"{self.spec.n_experts} experts of {self.spec.name}")

    # --- settings ---
    @property
    def utilization(self) -> float:
        return self.gpu_memory_utilization or self.version.util

    @property
    def ep(self) -> int:
        """Expert-parallel ranks: tp x dp with --enable-expert-parallel (vLLM's EP group), else 1."""
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def weights(self) -> WeightFormat:
        return self.weights_format or weight_format(self.spec, self.weight_dtype)

    @property
    def block(self) -> int:
        return self.block_size or default_block_size(self.spec, self.accelerator)

    @property
    def batch_defaults(self) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) of the profiling run: as typed, else vLLM's defaults."""
        return batch_defaults(self.accelerator, self.version, self.max_model_len, self.max_num_batched_tokens,
                              self.max_num_seqs, mla=self.spec.is_mla)

    @property
    def admission_tokens(self) -> int:
        """The tokens beyond its window a windowed layer holds per request (vllm.admission_tokens)."""
        return admission_tokens(self.version, self.batch_defaults[0], self.pp)

    @property
    def vocab_size(self) -> int:
        """Rows of the dummy sampler's logits (the vocabulary)."""
        return self.spec.vocab_size

    @property
    def act_bytes(self) -> float:
        return 4.0 if self.compute_dtype == "fp32" else 2.0

    @property
    def warnings(self) -> list[str]:
        line = context_warning(self.spec, self.max_model_len)
        return [line] if line else []

    # --- per stage ---
    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        tokens, seqs = self.batch_defaults
        all_layers = kv_layers(self.spec, self.kv_dtype, self.tp)
        requested = math.ceil(self.accelerator.usable_bytes * self.utilization)
        out = []
        ranges = stage_layers(self.spec.n_layers, self.pp)
        for s, layers in enumerate(ranges):
            weights = rank_weight_bytes(self.spec, self.weights, self.accelerator, tp=self.tp, layers=layers,
                                        ep=self.ep, pp=self.pp)
            if self.version.mla_absorbed:  # 0.7.x's absorbed MLA decode matrices beside the weights
                weights += mla_absorbed_bytes(self.spec, self.weights, self.tp, len(layers))
            act = activation_peak(self.spec, tokens, min(seqs, tokens) if self.version.engine == "v1" else seqs,
                                  self.version, tp=self.tp, act_bytes=self.act_bytes, last_stage=s == self.pp - 1,
                                  expert_parallel=self.expert_parallel)
            if s == 0 and self.vision is not None:  # the tower and its profiling run live on the first stage
                typed = TYPED_BYTES[self.weights.name] if self.weights.typed else None
                weights += vision_weight_bytes(self.vision, self.tp, dtype_bytes(self.weights.base), typed)
                act = self.with_encoder(act)
            nt = non_torch_bytes(self.version, self.tp * self.pp * self.dp)
            graphs = cudagraph_bytes(self.spec, self.version, len(layers), eager=self.enforce_eager)
            mine = [layer for layer in all_layers if layer.index in layers]
            groups = kv_groups(mine, self.block, self.version.hybrid)
            out.append(Stage(layers, weights, act, non_torch=nt, cudagraphs=graphs, groups=tuple(groups),
                             state_layers=tuple(layer for layer in mine if layer.kind == "state"),
                             available=requested - weights - act - nt - graphs))
        return tuple(out)

    @cached_property
    def vision(self) -> VisionTower | None:
        """The vision tower vLLM loads beside the language model (none with --language-model-only)."""
        return None if self.language_model_only else vision_tower(self.spec)

    @property
    def encoder_items(self) -> int:
        """Dummy images the profiling run encodes (0: no tower, or one whose profiling is not modelled)."""
        return encoder_items(self.vision, self.batch_defaults[0]) if self.vision is not None else 0

    def with_encoder(self, language_peak: float) -> float:
        """The profiling peak with the dummy encoder run (gpu_model_runner.py profile_run): the encoder's own peak,
        or the language model's with the encoder outputs kept beside it, whichever is larger."""
        items = self.encoder_items
        if not items or self.vision is None:
            return language_peak
        return max(encoder_peak(self.vision, items, self.tp, self.act_bytes),
                   language_peak + encoder_cache_bytes(self.vision, items, self.act_bytes))

    @property
    def limiting(self) -> Stage:
        """The stage with the fewest KV blocks (vLLM takes the least over all workers)."""
        return min(self.stages, key=lambda s: (s.blocks, s.available))

    # --- memory per GPU (the limiting stage) ---
    @property
    def usable_bytes(self) -> float:
        return math.ceil(self.accelerator.usable_bytes * self.utilization)

    @property
    def weights_bytes_per_gpu(self) -> float:
        return self.limiting.weights

    @property
    def activation_bytes(self) -> float:
        return self.limiting.activation

    @property
    def non_torch_bytes(self) -> float:
        return self.limiting.non_torch

    @property
    def cudagraph_bytes(self) -> float:
        return self.limiting.cudagraphs

    @property
    def kv_cache_bytes(self) -> float:
        """Memory left for the KV cache on the limiting GPU (negative: the rest alone does not fit)."""
        return self.limiting.available

    @cached_property
    def served_weights_bytes(self) -> float:
        """All weights of one replica as vLLM holds them (every rank's, replicated parts counted on each)."""
        return self.tp * sum(s.weights for s in self.stages)

    @cached_property
    def checkpoint_bytes(self) -> float | None:
        """What the download holds: the checkpoint's tensors (quantization scales and MTP layers included); None for
        a format llmcalc does not know (sized at a typed --weight-dtype)."""
        return shipped_bytes(self.spec)

    # --- the KV cache ---
    @property
    def groups(self) -> tuple[KvGroup, ...]:
        return self.limiting.groups

    @property
    def has_windows_kept(self) -> bool:
        """Some group keeps less than the whole context (a window, a chunk, a recurrent state)."""
        return any(g.kind in ("sliding", "chunked", "state") for g in self.groups)

    @property
    def kv_bytes_per_token(self) -> float:
        return kv_cache_bytes_per_token(self.spec, self.kv_dtype)

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """One token's KV bytes on one GPU (all layers of the replica / pp)."""
        return kv_cache_bytes_per_token_per_gpu(self.spec, self.kv_dtype, self.tp) / self.pp

    @property
    def kv_heads_per_gpu(self) -> int:
        return kv_heads_per_gpu(self.spec, self.tp)

    @property
    def kv_replicated(self) -> bool:
        return self.tp > 1 and (self.spec.is_mla or self.tp > self.spec.n_kv_heads)

    @property
    def kv_block_bytes(self) -> float:
        """Bytes one block index takes across one group's layers (what available KV memory is divided by)."""
        stage = self.limiting
        return stage.page_bytes * stage.group_size

    @property
    def kv_blocks(self) -> int:
        return min(s.blocks for s in self.stages)

    @property
    def state_bytes_per_sequence(self) -> float:
        return sum(layer.state_bytes for s in self.stages for layer in s.state_layers) / max(1, self.pp)

    @property
    def blocks_per_sequence(self) -> int:
        tokens = self.admission_tokens
        return sum(g.blocks_per_request(self.max_model_len, tokens) for g in self.groups)

    @property
    def vllm_max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for N tokens per request": num_blocks / blocks per request (V1 before 0.9.1
        and V0: tokens / max_model_len, no ceil)."""
        if not self.groups:
            return 0.0
        if self.version.tokens == "blocks":
            return self.kv_blocks * self.groups[0].block_size / self.max_model_len
        tokens = self.admission_tokens
        return min(self.kv_blocks / sum(g.blocks_per_request(self.max_model_len, tokens) for g in s.groups)
                   for s in self.stages if s.groups)

    @property
    def kv_cache_tokens(self) -> int:
        """"GPU KV cache size: N tokens" as the version logs it."""
        if not self.groups:
            return 0
        if self.version.tokens == "concurrency":
            return int(self.vllm_max_concurrency * self.max_model_len)
        block = logged_block_size(self.groups, self.max_model_len)
        if self.version.tokens == "groups":
            return self.kv_blocks // len(self.groups) * block
        return self.kv_blocks * block

    @property
    def max_concurrent_sequences(self) -> int:
        """Whole requests of max_model_len tokens that fit at once in one replica."""
        return max(0, math.floor(self.vllm_max_concurrency + 1e-9))

    @property
    def total_concurrent_sequences(self) -> int:
        return self.dp * self.max_concurrent_sequences

    @property
    def kv_bytes_per_request(self) -> float:
        """The KV bytes one request of max_model_len needs on the limiting GPU: blocks per request x page over each
        group's real layers (kv_cache_utils.py max_memory_usage_bytes summed over the layers)."""
        tokens = self.admission_tokens
        return sum(g.blocks_per_request(self.max_model_len, tokens) * g.page_bytes * g.layers for g in self.groups)

    def check_starts(self) -> None:
        """Refuse, as vLLM refuses to start, a max_model_len the KV cache cannot hold once (weights that leave no KV
        memory at all are a plan that does not fit, not a refusal: `fits` false)."""
        if self.kv_cache_bytes > 0 and self.groups and self.max_concurrent_sequences < 1:
            raise LlmcalcError(not_enough_kv_message(self.max_model_len, self.kv_bytes_per_request,
                                                     self.kv_cache_bytes, self.longest_fitting_len(),
                                                     default=self.max_model_len == self.spec.max_seq_len))

    def longest_fitting_len(self) -> int:
        """vLLM's estimate_max_model_len: the longest request the blocks hold (full-attention groups bound it)."""
        lo, hi = 0, self.max_model_len
        tokens = self.admission_tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            need = max(sum(g.blocks_per_request(mid, tokens) for g in s.groups) for s in self.stages if s.groups)
            lo, hi = (mid, hi) if need <= self.kv_blocks else (lo, mid - 1)
        return lo

    # --- throughput ---
    def roofline(self, concurrency: int, prompt: int, generate: int = 2) -> InferenceEstimate:
        est = self._estimate(concurrency, prompt, generate)
        est.__dict__.update(self._per_replica)  # (cached_property values: est computes nothing it already has)
        return est

    def _estimate(self, concurrency: int, prompt: int, generate: int) -> InferenceEstimate:
        return InferenceEstimate(self.spec, self.accelerator, concurrency, prompt, generate=generate,
                                 weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype,
                                 compute_dtype=self.compute_dtype, n_gpus=self.tp, weight_format=self.weights)

    @cached_property
    def _per_replica(self) -> dict[str, Any]:
        """What every roofline of this replica shares whatever its batch, prompt and generation (they read only the
        spec, the dtypes and tp): its weight layout, decode slopes, KV bytes per token and state per sequence, as
        InferenceEstimate's cached properties hold them; `throughput` builds one roofline per concurrency level and
        would compute each again."""
        one = self._estimate(1, 1, 2)
        return {"layout": one.layout, "_slopes": one._slopes, "kv_per_token_per_gpu": one.kv_per_token_per_gpu,
                "state_bytes_per_sequence": one.state_bytes_per_sequence}

    @property
    def concurrency_levels(self) -> list[int]:
        top = self.max_concurrent_sequences
        levels = [2**i for i in range(top.bit_length()) if 2**i < top]
        return levels + [top] if top else []

    @property
    def decode_context(self) -> int:
        return self.max_model_len

    def throughput(self) -> list[dict]:
        """Per concurrency level of one replica: prefilling that many max-length prompts together, a decode step
        with every sequence at max_model_len tokens (pipelined over pp stages), and all dp replicas together."""
        rows = []
        for b in self.concurrency_levels:
            est = self.roofline(b, self.max_model_len)
            step = est.decode_step(self.decode_context)
            pre = est.prefill
            rows.append({"concurrency": b, "prefill_seconds": pre.seconds,
                         "prefill_tokens_per_second": b * self.max_model_len / pre.seconds,
                         "decode_seconds_per_token": step.seconds,
                         "tokens_per_second": b * self.pp / step.seconds * self.dp if b >= self.pp else
                         b / step.seconds * self.dp,
                         "decode_bound": step.bound})
        return rows


def plan_serving(spec: ModelSpec, accelerator: Accelerator, tp: int = 1, max_model_len: int | None = None,
                 gpu_memory_utilization: float | None = None, weight_dtype: str | None = None,
                 kv_dtype: str | None = None, compute_dtype: str | None = None, block_size: int | None = None,
                 pp: int = 1, dp: int = 1, expert_parallel: bool = False, version: str | None = None,
                 max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                 enforce_eager: bool = False, language_model_only: bool = False) -> ServeEstimate:
    """`llmcalc serve`: a decoder on tp x pp GPUs per replica and dp replicas (vLLM's TP rule), weights as the
    checkpoint ships them unless `weight_dtype` is typed, requests of `max_model_len` tokens (default: the model's
    max_position_embeddings), the memory accounting of vLLM `version` (default: the current release)."""
    if spec.architecture != "decoder":
        raise LlmcalcError(f"serve covers decoder-only models; {spec.name} is {spec.architecture}")
    check_tp(spec, tp)
    fmt = weight_format(spec, weight_dtype)
    weight, kv, compute = resolve_dtypes(accelerator, fmt.name, kv_dtype, compute_dtype)
    if max_model_len is None:
        if spec.max_seq_len is None:
            raise LlmcalcError(f"{spec.name}'s config gives no max_position_embeddings; pass --max-model-len")
        max_model_len = spec.max_seq_len
    return ServeEstimate(spec, accelerator, tp, max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                         weight_dtype=weight, kv_dtype=kv, compute_dtype=compute, block_size=block_size, pp=pp, dp=dp,
                         expert_parallel=expert_parallel, version=vllm_version(version),
                         max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                         weights_format=fmt, enforce_eager=enforce_eager, language_model_only=language_model_only)


def smallest_serving_group(spec: ModelSpec, gpu: Accelerator, max_model_len: int, kv_dtype: str,
                           weight_dtype: str | None = None) -> ServeEstimate | None:
    """The fewest tensor-parallel GPUs (1, 2, 4, 8, 16) of `gpu` that hold one `max_model_len` request, weights as
    shipped (or `weight_dtype`), vLLM's defaults (the report's serving section)."""
    fmt = weight_format(spec, weight_dtype)
    for tp in (1, 2, 4, 8, 16):
        try:
            check_tp(spec, tp)
            weight, kv, compute = resolve_dtypes(gpu, fmt.name, kv_dtype, default_compute_dtype(fmt.name, gpu))
        except LlmcalcError:
            continue
        est = ServeEstimate(spec, gpu, tp, max_model_len, weight_dtype=weight, kv_dtype=kv, compute_dtype=compute,
                            weights_format=fmt)
        if est.max_concurrent_sequences >= 1:
            return est
    return None


# --- the inverse question: the fewest GPUs that serve a concurrency ------------------------------------------

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)
PP_DEGREES = (1, 2, 4, 8)
MAX_REPLICA_GPUS = 4096


@dataclass(frozen=True)
class CapacityPlan:
    """`serve --concurrency C` (optionally a time-to-first-token and a tokens-per-second target): the layout with the
    fewest GPUs that holds C concurrent max-length requests and meets the targets, and the best layout of each
    (tp, pp, expert parallelism) tried."""

    concurrency: int
    ttft_seconds: float | None
    tokens_per_second: float | None
    best: ServeEstimate
    candidates: tuple[dict, ...]


def _meets(est: ServeEstimate, concurrency: int, ttft: float | None, rate: float | None) -> dict | None:
    """The figures of a layout at `concurrency` sequences, or None when it falls short."""
    per_replica = est.max_concurrent_sequences
    if per_replica < 1 or est.dp * per_replica < concurrency:
        return None
    first = est.roofline(1, est.max_model_len).prefill.seconds
    if ttft is not None and first > ttft:
        return None
    c = -(-concurrency // est.dp)
    step = est.roofline(c, est.max_model_len).decode_step(est.max_model_len).seconds
    tps = est.dp * c * (est.pp if c >= est.pp else 1) / step
    if rate is not None and tps < rate:
        return None
    return {"tp": est.tp, "pp": est.pp, "dp": est.dp, "enable_expert_parallel": est.expert_parallel,
            "n_gpus": est.n_gpus, "concurrency_per_replica": per_replica, "ttft_seconds": first,
            "tokens_per_second": tps}


def plan_capacity(spec: ModelSpec, accelerator: Accelerator, max_model_len: int, concurrency: int,
                  ttft_seconds: float | None = None, tokens_per_second: float | None = None,
                  **settings: object) -> CapacityPlan:
    """The fewest GPUs (tp x pp x dp, tp and pp powers of two as vLLM's layouts go, expert parallelism tried for MoE)
    whose replicas hold `concurrency` requests of `max_model_len` tokens at once; with a TTFT target the prefill of
    one max-length prompt on a replica's roofline must take at most that; with a tokens/s target the decode of all
    `concurrency` sequences at max_model_len context must reach it. Ties: fewer pipeline stages, then faster."""
    if not isinstance(concurrency, int) or concurrency < 1:
        raise LlmcalcError(f"--concurrency must be a whole number >= 1, got {concurrency!r}")
    found: list[tuple[tuple, dict, ServeEstimate]] = []
    for tp in TP_DEGREES:
        try:
            check_tp(spec, tp)
        except LlmcalcError:
            continue
        for pp in PP_DEGREES:
            if pp > spec.n_layers:
                continue
            for ep in ((False, True) if spec.is_moe else (False,)):
                best = _fewest_replicas(spec, accelerator, max_model_len, concurrency,
                                        (ttft_seconds, tokens_per_second), layout=(tp, pp, ep), settings=settings)
                if best is not None:
                    row, est = best
                    found.append(((row["n_gpus"], pp, -row["tokens_per_second"]), row, est))
    if not found:
        raise LlmcalcError(f"no layout of up to {MAX_REPLICA_GPUS:,} {accelerator.key} GPUs serves {concurrency:,} "
                           f"requests of {max_model_len:,} tokens" + (" within the targets" if ttft_seconds or
                                                                      tokens_per_second else ""))
    found.sort(key=lambda f: f[0])
    return CapacityPlan(concurrency, ttft_seconds, tokens_per_second, found[0][2], tuple(f[1] for f in found))


def _fewest_replicas(spec: ModelSpec, gpu: Accelerator, length: int, concurrency: int,
                     targets: tuple[float | None, float | None], layout: tuple[int, int, bool],
                     settings: dict) -> tuple[dict, ServeEstimate] | None:
    """The fewest replicas (dp) of one tp x pp layout that meet the targets (doubling, then the least that does)."""
    ttft, rate = targets
    tp, pp, ep = layout
    def estimate(dp: int) -> ServeEstimate | None:
        try:
            return plan_serving(spec, gpu, tp, length, pp=pp, dp=dp, expert_parallel=ep, **settings)
        except LlmcalcError:
            return None

    one = estimate(1)
    if one is None or one.max_concurrent_sequences < 1:
        return None
    if ttft is not None and one.roofline(1, length).prefill.seconds > ttft:
        return None
    lo, dp = 0, max(1, -(-concurrency // one.max_concurrent_sequences))
    while tp * pp * dp <= MAX_REPLICA_GPUS:
        est = estimate(dp)
        if est is not None and (row := _meets(est, concurrency, ttft, rate)) is not None:
            while dp - lo > 1:  # the least dp in (lo, dp] that meets them
                mid = (lo + dp) // 2
                trial = estimate(mid)
                trial_row = _meets(trial, concurrency, ttft, rate) if trial is not None else None
                if trial_row is not None and trial is not None:
                    dp, row, est = mid, trial_row, trial
                else:
                    lo = mid
            return row, est
        lo, dp = dp, dp * 2
    return None
