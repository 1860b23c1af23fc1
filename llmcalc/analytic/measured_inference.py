"""`infer` of a model transformers measured: the roofline of ``inference.InferenceEstimate``, fed from the record.

``MeasuredInference`` keeps every line of the roofline's arithmetic (prefill, the closed-form decode sum, the
compute-bound batch, the fit check) and takes what it knows of the model from ``measured.MeasuredModel``:

- weights: every parameter tensor transformers built, the matrices of the layer stack (2-D and wider: linears,
  fused experts) at the weight dtype, the rest (embeddings, head, norms, biases) at 16 bits, as llmcalc's typed
  formats do (``quant.TYPED_BYTES``); a config's ``quantization_config`` read by quant.py (``format_of``) and applied
  per tensor by its module name (``tensor_bytes``, as measured serve does), unless --weight-dtype is typed;
- MoE: the tensors the model's expert-parallel plan names (``model.ep_plan``) are the routed experts, E the
  first dimension, k the config's top-k; a step over t tokens reads E·(1 - (1 - k/E)^t) of them per layer
  (``inference.expected_experts``' uniform routing);
- KV cache: the elements per token per layer the model's Cache allocated, at the KV dtype (no window cap: the
  roofline's convention); recurrent and conv state per sequence at the bytes transformers allocated them;
- decode FLOPs: FlopCounterMode's count of a decode step after two prefills, per sequence and per key attended;
  prefill FLOPs: the causal sum of those steps over the prompt, P·per_sequence + per_key·P(P+1)/2 (token t attends
  t keys), which is the counted forward's linear and attention work when each token's cost is its decode step's.

Tensor parallelism (--n-gpus) as vLLM shards (``MeasuredModel.vllm_share``): every tensor by its style in
transformers' plan, the embedding and head by vocabulary rows, a K/V projection max(1, KV heads // tp) of its heads;
the cache per rank the same heads (``MeasuredModel.kv_layers(tp=)``), a state 1/tp; FLOPs split tp ways. No TP
all-reduce time, as the formula path's roofline (inference.InferenceEstimate) has none.
"""

from __future__ import annotations

from functools import cached_property

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from .inference import InferenceEstimate, WeightLayout, bytes_per_weight, check_inference, resolve_dtypes
from .measured import MeasuredModel, Tensor
from .quant import Module, WeightFormat, format_of

SIXTEEN_BITS = 2.0


def tensor_bytes(t: Tensor, fmt: WeightFormat | None, weight_dtype: str) -> float:
    """Bytes of measured tensor `t` in all its layers, whole: under a shipped quantization_config (`fmt` with a
    quant, quant.format_of) a matrix of the layer stack or the head at its format where ``Quantization.quantizes``
    takes it by its module name (the skip lists as the libraries match them; a fused [E, out, in] experts tensor
    is E matrices), else 16 bits; at a typed --weight-dtype (`fmt` None or typed) the layer stack's matrices at it;
    the rest (embeddings, head, norms, biases) at 16 bits."""
    quant = fmt.quant if fmt is not None else None
    if quant is not None and len(t.shape) >= 2 and t.role in ("layer", "head"):
        m = Module(t.name.removesuffix(".weight"), "", d_in=t.shape[-1], d_out=t.shape[-2],
                   count=t.shape[0] if len(t.shape) == 3 else 1,
                   kind="expert" if t.ep else "head" if t.role == "head" else "linear")
        if quant.quantizes(m):
            return t.count * m.count * quant.format.linear_bytes(m.d_in, m.d_out)
        return t.numel * t.count * SIXTEEN_BITS
    wide = t.role == "layer" and len(t.shape) >= 2 and (fmt is None or fmt.typed)
    return t.numel * t.count * (bytes_per_weight(weight_dtype) if wide else SIXTEEN_BITS)


@dataclass(frozen=True)
class MeasuredInference(InferenceEstimate):
    """``spec`` holds the MeasuredModel (its name is what the shared lines print); every method of
    InferenceEstimate that reads a ModelSpec is overridden here."""

    @property
    def model(self) -> MeasuredModel:
        model = self.spec
        assert isinstance(model, MeasuredModel), "MeasuredInference without its record"
        return model

    def __post_init__(self) -> None:
        self.model.check_vllm_tp(self.n_gpus)

    def _bytes(self, t) -> float:
        return tensor_bytes(t, self.weight_format, self.weight_dtype)

    @cached_property
    def layout(self) -> WeightLayout:
        tensors = [t for t in self.model.tensors if t.trainable]
        tp = self.n_gpus
        total = sum(self._bytes(t) for t in tensors)
        per_gpu = sum(self._bytes(t) * self.model.vllm_share(t, tp) for t in tensors)
        lookups = 0.0 if self.model.tied else sum(self._bytes(t) * self.model.vllm_share(t, tp) for t in tensors
                                                  if t.role == "embedding")
        experts = sum(self._bytes(t) for t in tensors if t.ep)
        experts_per_gpu = sum(self._bytes(t) * self.model.vllm_share(t, tp) for t in tensors if t.ep)
        return WeightLayout(total, per_gpu, lookups, experts_per_gpu,
                            experts / max(1, self._moe_layers * self._n_experts))

    @cached_property
    def _n_experts(self) -> int:
        return max((t.shape[0] for t in self.model.tensors if t.ep), default=0)

    @cached_property
    def _moe_layers(self) -> int:
        return max((t.count for t in self.model.tensors if t.ep), default=0)

    def weights_read(self, tokens: int) -> float:
        lay = self.layout
        dense = lay.per_gpu - lay.lookups_per_gpu - lay.experts_per_gpu
        if not lay.experts_per_gpu:
            return dense
        E, k = self._n_experts, self.model.experts_per_token
        if not k or k > E:
            return dense + lay.experts_per_gpu  # no top-k in the config: every expert counted as read
        share = lay.experts_per_gpu / (self._moe_layers * E * lay.expert_bytes)  # 1/tp: experts split by tp
        return dense + self._moe_layers * E * (1 - (1 - k / E) ** tokens) * lay.expert_bytes * share

    @cached_property
    def _slopes(self) -> tuple[int, int]:
        return int(self.model.decode["per_sequence"]), int(self.model.decode["per_key"])

    def prefill_flops(self) -> float:
        f0, f1 = self._slopes
        p = self.prompt
        return self.batch * (p * f0 + f1 * p * (p + 1) / 2)

    def tp_fits(self, tp: int) -> bool:
        try:
            self.model.check_vllm_tp(tp)
            self.model.kv_layers(self.kv_dtype, tp)
        except LlmcalcError:
            return False
        return True

    @property
    def state_bytes_per_sequence(self) -> float:
        """Per GPU: the state split over the tp ranks with its channels (``MeasuredModel.kv_layers``)."""
        return sum(k.state_elements * k.element_bytes for k in self.model.kv) / self.n_gpus

    @property
    def kv_per_token(self) -> float:
        from ..dtypes import dtype_bytes

        return sum(k.elements_per_token for k in self.model.kv) * dtype_bytes(self.kv_dtype)

    @property
    def kv_per_token_per_gpu(self) -> float:
        return sum(layer.bytes_per_token for layer in self.model.kv_layers(self.kv_dtype, self.n_gpus))

    @property
    def warnings(self) -> list[str]:
        longest, tokens = self.model.max_seq_len, self.prompt + self.generate
        out = self.model.unplanned_warning(self.n_gpus, bytes_per_weight(self.weight_dtype))
        if longest is not None and tokens > longest:
            out.append(f"{tokens:,} tokens exceed {self.model.name}'s max_position_embeddings ({longest:,}); the "
                       "figures are computed anyway")
        return out


def measured_inference(model: MeasuredModel, accelerator: Accelerator, batch: int, prompt: int, generate: int, *,
                       weight_dtype: str | None, kv_dtype: str | None, compute_dtype: str | None,
                       n_gpus: int) -> MeasuredInference:
    """`llmcalc infer` of a measured model (``inference.plan_inference``'s checks, then its fit check)."""
    from .inference import check_fits

    check_inference(batch, prompt, generate)
    fmt = format_of(model.quantization_config, "bf16", weight_dtype)
    weight, kv, compute = resolve_dtypes(accelerator, fmt.name, kv_dtype, compute_dtype)
    est = MeasuredInference(model, accelerator, batch, prompt, generate=generate,  # type: ignore[arg-type]
                            weight_dtype=weight, kv_dtype=kv, compute_dtype=compute, n_gpus=n_gpus,
                            weight_format=None if fmt.typed else fmt)
    check_fits(est)
    return est


def plan_inference(model, accelerator: Accelerator, batch: int, prompt: int, generate: int,
                   weight_dtype: str | None = None, kv_dtype: str | None = None, compute_dtype: str | None = None,
                   n_gpus: int = 1) -> InferenceEstimate:
    """`llmcalc infer` of either kind of model: ``inference.plan_inference`` for a ModelSpec, ``measured_inference``
    for what transformers measured."""
    from .inference import plan_inference as analytic

    if isinstance(model, MeasuredModel):
        return measured_inference(model, accelerator, batch, prompt, generate, weight_dtype=weight_dtype,
                                  kv_dtype=kv_dtype, compute_dtype=compute_dtype, n_gpus=n_gpus)
    return analytic(model, accelerator, batch, prompt, generate, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                    compute_dtype=compute_dtype, n_gpus=n_gpus)
