"""`serve` of a model transformers measured: ``serving.ServeEstimate``'s vLLM accounting, fed from the record.

``MeasuredServe`` keeps every line of vLLM's arithmetic (requested memory, non-torch and CUDA-graph charges, the hybrid
allocator's groups and blocks, concurrency, the roofline throughput) and takes what it knows of the model from
``measured.MeasuredModel``:

- weights as vLLM loads them: every parameter tensor transformers built, the layer stack's matrices (2-D and wider)
  at the weight dtype, the rest at 16 bits (``measured_inference``'s convention); the embedding and LM-head rows
  padded to a multiple of 64 as vLLM's VocabParallelEmbedding / ParallelLMHead pad them (vllm.VOCAB_PADDING); the
  rotary cos/sin cache vLLM makes at load on every rank, positions x rotary dim x the model dtype's bytes per
  distinct rotary table transformers built (``MeasuredModel.rotary_cache_bytes``, vllm.rotary_cache_bytes' rule on
  the measured tables: a partial rotary's dimension, Gemma 3's two tables). A config's quantization_config is read
  by quant.py (``format_of``) and applied per tensor by its module name (``Quantization.quantizes``' skip lists);
  the layers are measured as one pattern per name (``model.layers.*.``), so a skip entry naming one layer's index
  does not match (the unquantized rest at 16 bits);
- the KV cache: ``MeasuredModel.kv_layers``, the records vLLM's hybrid allocator groups (vllm.kv_groups), from the
  cache transformers allocated (a layer that stopped growing is a sliding window of cap + 1 tokens);
- the profiling run's activation peak (vllm.activation_peak): the forward's largest transient over the layers
  (``MeasuredModel.ffn``, hf_measure._ffn): a dense MLP's T·(C + R + 3D)·a (vllm.dense_peak), C + R its width from
  transformers' tensor-parallel plan: the output rows of the colwise and the input columns of the rowwise 2-D
  weights outside the attention modules (gated: gate + up + down = 3F; plain: fc_in + fc_out = 2F, as
  vllm.forward_peak's 3F / 2F); a MoE layer's fused-MoE workspaces T·k·(max(N, D) + I)·a + 3·T·D·a and its shared
  experts' T·(C + R)·a (vllm.moe_peak), with N and I the fused experts tensors' colwise and rowwise widths and k
  the last dimension of the top_k_index transformers' router handed the experts module in the prefills; D the
  embedding's width; the dummy sampler over the LM head's rows (the vocabulary);
- tensor parallelism as vLLM shards (``MeasuredModel.vllm_share``, ``check_vllm_tp``): every tensor by its style in
  transformers' plan, the embedding and LM head by vocabulary rows, a K/V projection max(1, KV heads // tp) of its
  heads (the heads the cache's K and V were allocated with); the cache per rank likewise (``kv_layers(tp=)``), the
  MLP and expert widths of the profiling transient 1/tp; one stage, one replica, experts split by tp (no
  --enable-expert-parallel).
"""

from __future__ import annotations

from functools import cached_property

from ..dtypes import dtype_bytes
from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from .inference import KvLayer, resolve_dtypes
from .measured import FfnLayer, MeasuredModel
from .measured_inference import MeasuredInference, tensor_bytes
from .quant import format_of
from .serving import ServeEstimate, Stage
from .vllm import (
    VOCAB_PADDING,
    cudagraph_bytes,
    dense_peak,
    kv_groups,
    moe_peak,
    non_torch_bytes,
    round_up,
    sampler_peak,
    vllm_version,
)


def ffn_layers(model: MeasuredModel) -> list[FfnLayer]:
    """The measured feed-forward widths of every layer (MeasuredModel.ffn), checked: one clear line where
    transformers' plan names no MLP projection, or a MoE layer's experts were not measured whole (fused
    [E, ...] tensors split by colwise / rowwise styles, called with a top_k_index)."""
    layers = [f for f in model.ffn if f.dense_width or f.moe]
    if not layers:
        raise LlmcalcError(f"serve: {model.model_type}'s tensor-parallel plan names no MLP projection, so the MLP "
                           "width vLLM's profiling run holds (its activation peak) cannot be measured")
    for f in layers:
        moe = f.moe
        if moe is None:
            continue
        if not (moe.n_experts and moe.up_width and moe.inner):
            raise LlmcalcError(f"serve: {model.model_type}'s experts ({moe.experts_module or 'layer ' + str(f.layer)}, "
                               f"tp styles {', '.join(map(str, moe.styles)) or 'none'}) are not fused [E, out, in] "
                               "tensors split colwise / rowwise, so the expert width vLLM's fused-MoE workspace holds "
                               "cannot be measured")
        if moe.top_k is None:
            raise LlmcalcError(f"serve: {model.model_type}'s experts module {moe.experts_module} was not called with "
                               "a top_k_index in transformers' forward, so the routed experts per token vLLM's "
                               "fused-MoE workspace holds cannot be measured")
    return layers


@dataclass(frozen=True)
class MeasuredServe(ServeEstimate):
    """``spec`` holds the MeasuredModel; every member of ServeEstimate that reads a ModelSpec is overridden."""

    @property
    def model(self) -> MeasuredModel:
        model = self.spec
        assert isinstance(model, MeasuredModel), "MeasuredServe without its record"
        return model

    def __post_init__(self) -> None:
        util = self.gpu_memory_utilization
        if util is not None and not 0 < util <= 1:
            raise LlmcalcError(f"--gpu-memory-utilization must be in (0, 1], got {util:g}")
        if not isinstance(self.max_model_len, int) or self.max_model_len < 1:
            raise LlmcalcError(f"--max-model-len must be a whole number >= 1, got {self.max_model_len!r}")
        clash = [name for bad, name in ((self.pp > 1, f"--pp {self.pp}"), (self.dp > 1, f"--dp {self.dp}"),
                                        (self.expert_parallel, "--enable-expert-parallel")) if bad]
        if clash:
            raise LlmcalcError(f"{', '.join(clash)}: {self.model.model_type} is measured by transformers as one "
                               "tensor-parallel group (a stage split, replicas and whole experts per rank are not "
                               "measured); use --n-gpus alone")
        self.model.check_vllm_tp(self.tp)

    @property
    def block(self) -> int:
        return self.block_size or 16  # FlashAttention's (vllm.default_block_size; MLA is not told from the cache)

    @property
    def warnings(self) -> list[str]:
        from .inference import bytes_per_weight

        longest = self.model.max_seq_len
        out = self.model.unplanned_warning(self.tp, bytes_per_weight(self.weight_dtype))
        if longest is not None and self.max_model_len > longest:
            out.append(f"{self.max_model_len:,} tokens exceed {self.model.name}'s max_position_embeddings "
                       f"({longest:,}); the figures are computed anyway")
        return out

    def _bytes(self, t) -> float:
        """Bytes of tensor `t` (all its layers) on one of the tp ranks (``MeasuredModel.vllm_share``)."""
        return self._whole_bytes(t) * self.model.vllm_share(t, self.tp)

    def _whole_bytes(self, t) -> float:
        """``measured_inference.tensor_bytes``, the embedding and LM-head rows padded to a multiple of 64."""
        rows = round_up(t.shape[0], VOCAB_PADDING) / t.shape[0] if t.role in ("embedding", "head") else 1.0
        return tensor_bytes(t, self.weights, self.weight_dtype) * rows

    @cached_property
    def d_model(self) -> int:
        return next(t.shape[-1] for t in self.model.tensors if t.role == "embedding")

    @property
    def vocab_size(self) -> int:
        role = "embedding" if self.model.tied else "head"
        return next(t.shape[0] for t in self.model.tensors if t.role == role and len(t.shape) == 2)

    def forward_peak(self, tokens: int) -> float:
        """vllm.forward_peak over `tokens` from the measured widths (``ffn_layers``), the largest layer's: a dense
        MLP's T·(C + R + 3D)·a (vllm.dense_peak), a MoE layer's fused-MoE workspaces T·k·(max(N, D) + I)·a + 3·T·D·a
        with the shared experts' T·(C + R)·a (vllm.moe_peak), each width split over the tp ranks."""
        D, a, tp = self.d_model, self.act_bytes, self.tp
        peak = 0.0
        for f in ffn_layers(self.model):
            if f.dense_width:
                peak = max(peak, dense_peak(tokens, f.dense_width / tp, D, a))
            if f.moe is not None:
                m = f.moe
                assert m.top_k is not None  # ffn_layers checked it
                peak = max(peak, moe_peak(tokens, m.top_k, m.up_width / tp, m.inner / tp, d_model=D,
                                          shared_width=m.shared_width / tp, act_bytes=a))
        return peak

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        import math
        from types import SimpleNamespace

        tokens, seqs = self.batch_defaults
        rows = min(seqs, tokens) if self.version.engine == "v1" else seqs
        sampler = sampler_peak(SimpleNamespace(vocab_size=self.vocab_size), rows, self.version)  # type: ignore[arg-type]
        act = max(self.forward_peak(tokens), sampler + tokens * self.d_model * self.act_bytes)
        weights = sum(self._bytes(t) for t in self.model.tensors if t.trainable) + \
            self.model.rotary_cache_bytes(dtype_bytes(self.weights.base))
        requested = math.ceil(self.accelerator.usable_bytes * self.utilization)
        layers = range(self.model.n_layers)
        nt = non_torch_bytes(self.version, self.tp)
        graphs = cudagraph_bytes(self.spec, self.version, len(layers), eager=self.enforce_eager)
        mine = self.model.kv_layers(self.kv_dtype, self.tp)
        groups = kv_groups(mine, self.block, self.version.hybrid)
        return (Stage(layers, weights, act, non_torch=nt, cudagraphs=graphs, groups=tuple(groups),
                      state_layers=tuple(layer for layer in mine if layer.kind == "state"),
                      available=requested - weights - act - nt - graphs),)

    @cached_property
    def checkpoint_bytes(self) -> float | None:
        return None

    @property
    def kv_layers(self) -> list[KvLayer]:
        return self.model.kv_layers(self.kv_dtype, self.tp)

    @property
    def kv_bytes_per_token(self) -> float:
        return sum(layer.bytes_per_token for layer in self.model.kv_layers(self.kv_dtype))

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return sum(layer.bytes_per_token for layer in self.kv_layers)

    @property
    def kv_heads_per_gpu(self) -> int:
        """The K/V heads one rank keeps of those the cache was allocated with (0: they differ by layer)."""
        heads = self.model.kv_head_count
        return max(1, heads // self.tp) if heads else 0

    @property
    def kv_replicated(self) -> bool:
        heads = self.model.kv_head_count
        return heads is not None and self.tp > 1 and self.tp > heads

    def roofline(self, concurrency: int, prompt: int, generate: int = 2) -> MeasuredInference:
        return MeasuredInference(self.model, self.accelerator, concurrency, prompt,  # type: ignore[arg-type]
                                 generate=generate, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype,
                                 compute_dtype=self.compute_dtype, n_gpus=self.tp)


def measured_serving(model: MeasuredModel, accelerator: Accelerator, tp: int = 1, max_model_len: int | None = None,
                     gpu_memory_utilization: float | None = None, weight_dtype: str | None = None,
                     kv_dtype: str | None = None, compute_dtype: str | None = None, block_size: int | None = None,
                     pp: int = 1, dp: int = 1, expert_parallel: bool = False, version: str | None = None,
                     max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                     enforce_eager: bool = False, language_model_only: bool = False) -> MeasuredServe:
    """`llmcalc serve` of a measured model (``serving.plan_serving``'s settings)."""
    if max_model_len is None:
        if model.max_seq_len is None:
            raise LlmcalcError(f"{model.name}'s config gives no max_position_embeddings; pass --max-model-len")
        max_model_len = model.max_seq_len
    fmt = format_of(model.quantization_config, "bf16", weight_dtype)
    weight, kv, compute = resolve_dtypes(accelerator, fmt.name, kv_dtype, compute_dtype)
    est = MeasuredServe(model, accelerator, tp, max_model_len,  # type: ignore[arg-type]
                        gpu_memory_utilization=gpu_memory_utilization, weight_dtype=weight, kv_dtype=kv,
                        compute_dtype=compute, block_size=block_size, pp=pp, dp=dp, expert_parallel=expert_parallel,
                        version=vllm_version(version), max_num_batched_tokens=max_num_batched_tokens,
                        max_num_seqs=max_num_seqs, weights_format=fmt, enforce_eager=enforce_eager,
                        language_model_only=language_model_only)
    ffn_layers(model)  # the activation peak's one clear line before any figure
    return est
