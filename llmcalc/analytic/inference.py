"""Inference: KV cache, weight memory at a serving dtype, and a roofline for prefill and decode.

Roofline (Williams et al. 2009): a step takes max(FLOPs / peak FLOP/s, bytes moved / memory
bandwidth). Prefill moves the weights once and writes the prompt's KV cache; each decode step
reads every weight and the whole KV cache so far. Peaks are the datasheet's dense figures: the
result is an upper bound on speed (a lower bound on time), not a forecast.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..spec import ModelSpec
from .flops import forward_ops
from .memory import dtype_bytes
from .params import count_params
from .ssm import recurrent_state_elements


def kv_cache_bytes_per_token(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """Bytes of KV cache one token adds across all layers.

    MHA/GQA/MQA: 2 (K and V) x layers x n_kv_heads x d_head x bytes. MLA (DeepSeek-V2 sec. 2.1.2):
    the compressed latent plus the decoupled RoPE key, layers x (kv_lora_rank + qk_rope_head_dim)
    x bytes, as DeepSeek serves it (the HF reference caches decompressed K and V instead).
    Encoder-decoder: the decoder's self-attention cache (cross-attention K/V are per source token,
    see ``cross_kv_bytes``). Hybrid models: only their attention layers keep a KV cache; state-space
    layers keep a constant state instead (``recurrent_state_bytes``).
    """
    if spec.architecture == "encoder":
        raise LlmcalcError(f"{spec.name} is an encoder: it generates nothing and keeps no KV cache")
    b = dtype_bytes(kv_dtype)
    layers = spec.n_decoder_layers if spec.architecture == "encoder-decoder" else spec.n_attention_layers
    if spec.is_mla:
        return layers * (spec.kv_lora_rank + spec.qk_rope_head_dim) * b
    return 2 * layers * spec.n_kv_heads * spec.d_head * b


def recurrent_state_bytes(spec: ModelSpec, state_dtype: str = "bf16") -> float:
    """Bytes of recurrent state ONE sequence keeps in the state-space (Mamba) layers, constant in
    the context length: per layer a conv state (conv channels x kernel) and an SSM state (E x N), at
    `state_dtype` (transformers' cache and mamba_ssm allocate both in the model dtype; some serving
    stacks keep the SSM state in fp32). 0 for a model without such layers. See analytic/ssm.py."""
    return sum(recurrent_state_elements(spec).values()) * dtype_bytes(state_dtype)


def cross_kv_bytes_per_source_token(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """Encoder-decoder: cross-attention K and V for one encoder token, over all decoder layers."""
    if spec.architecture != "encoder-decoder":
        return 0.0
    return 2 * spec.n_decoder_layers * spec.n_heads * spec.d_head * dtype_bytes(kv_dtype)


def weight_bytes(spec: ModelSpec, weight_dtype: str = "bf16") -> float:
    """All parameters at one dtype (int4 = 0.5 bytes). Quantisation scales/zero-points not included."""
    return count_params(spec).total * dtype_bytes(weight_dtype)


def weight_bytes_read_per_step(spec: ModelSpec, weight_dtype: str = "bf16") -> float:
    """Weights one forward step streams from memory: every matmul weight (LM head included), but of
    the lookup tables (untied token embedding, positions, token types) only the rows used, ~0."""
    count = count_params(spec)
    lookups = sum(count.components.get(k, 0) for k in ("embedding/positions", "embedding/token_types"))
    if not (spec.lm_head and spec.tie_embeddings):  # a tied table is read whole by the head matmul
        lookups += count.components["embedding/tokens"]
    return (count.total - lookups) * dtype_bytes(weight_dtype)


def decode_ops(spec: ModelSpec, batch: int, context: int) -> dict[str, int]:
    """Forward FLOPs of one decode step: one new token per sequence attending to `context` tokens."""
    if spec.architecture != "decoder":
        raise LlmcalcError("the decode roofline covers decoder-only models")
    ops = forward_ops(spec, batch, 1)  # projections, FFN and head for one token per sequence
    for op in ops:  # at S = 1 the S² ops cost 2·B·H·d for one key; the new token sees `context` keys
        if op.endswith(("/scores", "/values")):
            ops[op] *= context
        elif op.endswith("/conv1d"):  # one conv output per step (causal_conv1d_update), not S+K-1 = K padded ones
            ops[op] //= spec.ssm_conv_kernel
    return ops


@dataclass(frozen=True)
class Roofline:
    flops: float
    bytes: float
    peak: float
    bandwidth: float

    @property
    def compute_seconds(self) -> float:
        return self.flops / self.peak

    @property
    def memory_seconds(self) -> float:
        return self.bytes / self.bandwidth

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class InferenceEstimate:
    spec: ModelSpec
    accelerator: Accelerator
    batch: int
    prompt: int
    generate: int
    weight_dtype: str
    kv_dtype: str
    compute_dtype: str
    n_gpus: int = 1  # tensor-parallel devices sharing the weights, FLOPs and bandwidth

    def _roof(self, flops: float, nbytes: float) -> Roofline:
        n = self.n_gpus
        return Roofline(flops, nbytes, self.accelerator.peak(self.compute_dtype) * n,
                        self.accelerator.memory_bandwidth * n)

    @property
    def weights(self) -> float:
        return weight_bytes(self.spec, self.weight_dtype)

    @property
    def kv_per_token(self) -> float:
        return kv_cache_bytes_per_token(self.spec, self.kv_dtype)

    @property
    def kv_cache(self) -> float:
        """KV cache at the end of generation: batch x (prompt + generated) tokens."""
        return self.batch * (self.prompt + self.generate) * self.kv_per_token

    @property
    def state_per_sequence(self) -> float:
        """Recurrent (Mamba) state of one sequence, at the KV dtype; constant in context length."""
        return recurrent_state_bytes(self.spec, self.kv_dtype)

    @property
    def recurrent_state(self) -> float:
        return self.batch * self.state_per_sequence

    @property
    def weights_read(self) -> float:
        return weight_bytes_read_per_step(self.spec, self.weight_dtype)

    @property
    def prefill(self) -> Roofline:
        ops = forward_ops(self.spec, self.batch, self.prompt, causal=True)  # causal, as serving kernels run
        return self._roof(sum(ops.values()), self.weights_read + self.batch * self.prompt * self.kv_per_token
                          + self.recurrent_state)  # prefill writes the final recurrent state once

    def decode_step(self, context: int) -> Roofline:
        """One new token per sequence: read the weights and the `context` cached tokens, write one;
        state-space layers read and write their whole recurrent state (2 x state bytes)."""
        flops = sum(decode_ops(self.spec, self.batch, context).values())
        return self._roof(flops, self.weights_read + self.batch * (context + 1) * self.kv_per_token
                          + 2 * self.recurrent_state)

    @property
    def decode_seconds(self) -> float:
        """All decode steps: the first generated token comes from prefill, each later one from a step
        whose context has grown by one."""
        return sum(self.decode_step(self.prompt + i).seconds for i in range(1, self.generate))

    @property
    def decode_seconds_per_token(self) -> float:
        steps = self.generate - 1
        return self.decode_seconds / steps if steps else self.decode_step(self.prompt).seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.batch / self.decode_seconds_per_token

    @property
    def total_seconds(self) -> float:
        return self.prefill.seconds + self.decode_seconds

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second over the whole request (prefill included)."""
        return self.batch * self.generate / self.total_seconds

    def compute_bound_batch(self, context: int | None = None, with_kv: bool = True) -> float | None:
        """Batch size at which a decode step turns compute-bound at `context` (default: the prompt).

        Per sequence a step costs f FLOPs and k bytes of KV cache; the weights W are read once per
        step: B·f / peak = (W + B·k) / bandwidth  =>  B* = (W / bw) / (f / peak - k / bw).
        None when the KV traffic alone outpaces compute: then no batch makes decode compute-bound.
        `with_kv=False` gives the textbook figure that ignores the cache (k = 0).
        """
        context = self.prompt if context is None else context
        kv = (context + 1) * self.kv_per_token + 2 * self.state_per_sequence if with_kv else 0.0
        one = self._roof(sum(decode_ops(self.spec, 1, context).values()), kv)
        denominator = one.compute_seconds - one.memory_seconds
        if denominator <= 0:
            return None
        return (self.weights_read / one.bandwidth) / denominator


def check_inference(batch: int, prompt: int, generate: int) -> None:
    for name, value in (("batch size", batch), ("prompt", prompt), ("generate", generate)):
        if not isinstance(value, int) or value < 1:
            raise LlmcalcError(f"{name} must be a whole number >= 1, got {value!r}")


def inference_memory(spec: ModelSpec, batch: int, context: int, weight_dtype: str = "bf16",
                     kv_dtype: str = "bf16", act_dtype: str = "bf16", tp: int = 1,
                     prefill_chunk: int = 8192) -> dict[str, float]:
    """Bytes per GPU to serve `batch` sequences of `context` tokens, by component.

    - weights: every parameter at `weight_dtype`, split over tp;
    - KV cache: batch x context x per-token cache (split over tp by heads; MLA's latent is not split);
    - recurrent state (models with Mamba layers only): batch x the per-sequence conv + SSM state,
      independent of `context` (split over tp by SSM heads/channels);
    - prefill working set: the largest transient of a block while prefilling one chunk of
      `prefill_chunk` tokens (chunked prefill, as vLLM's max_num_batched_tokens): the FFN's
      intermediates (input, gate and up outputs, and their product: T·(D + 3F), plain MLPs
      T·(D + 2F)) at `act_dtype`, plus fp32 logits for the last position of each sequence (B·V·4).
    """
    if tp < 1 or spec.n_heads % tp:
        raise LlmcalcError(f"tp={tp} does not divide the {spec.n_heads} query heads")
    kv = batch * context * kv_cache_bytes_per_token(spec, kv_dtype) / (1 if spec.is_mla else tp)
    kv += batch * context * cross_kv_bytes_per_source_token(spec, kv_dtype) / tp
    state = batch * recurrent_state_bytes(spec, kv_dtype) / tp
    if spec.is_hybrid:
        ffn = _hybrid_transient_width(spec) / tp
    else:
        width = spec.d_ff_expert * spec.n_experts_per_token if spec.is_moe and not spec.n_dense_layers else \
            spec.d_ff
        ffn = (3 if spec.gated else 2) * width / tp
    chunk = min(prefill_chunk, batch * context)
    working = chunk * (spec.d_model + ffn) * dtype_bytes(act_dtype) + batch * spec.vocab_size * 4 / tp
    out = {"weights": weight_bytes(spec, weight_dtype) / tp, "KV cache": kv}
    if state:
        out["recurrent state"] = state
    out["prefill working set"] = working
    return out


def _hybrid_transient_width(spec: ModelSpec) -> int:
    """Per-token width of the largest intermediates of any layer of a hybrid model: an FFN's (as above)
    or a Mamba mixer's in_proj output (2E; Mamba-2 2E + 2GN + H) and its conv output (Mamba-2 E + 2GN)."""
    k = 3 if spec.gated else 2
    widths = [0]
    for i in range(spec.n_layers):
        mixers, ffn = spec.layer_parts(i)
        if ffn == "mlp":
            widths.append(k * spec.d_ff)
        elif ffn == "moe":
            widths.append(k * spec.d_ff_expert * spec.n_experts_per_token)
        if "mamba" in mixers:
            widths.append(3 * spec.ssm_d_inner)
        if "mamba2" in mixers:
            gn = 2 * spec.ssm_n_groups * spec.ssm_d_state
            widths.append(3 * spec.ssm_d_inner + 2 * gn + spec.ssm_n_heads)
    return max(widths)


def largest_batch(spec: ModelSpec, context: int, capacity: float, **kwargs) -> int:
    """The largest batch whose inference memory (``inference_memory`` with `kwargs`) fits `capacity`."""
    def fits(batch: int) -> bool:
        return sum(inference_memory(spec, batch, context, **kwargs).values()) <= capacity

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 2**40:
            return low
    while high - low > 1:  # fits(low), not fits(high)
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
