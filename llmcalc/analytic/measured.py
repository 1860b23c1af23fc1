"""A model llmcalc has no formula for, as transformers built and ran it: the measured-model record.

``MeasuredModel`` is torch-free and JSON-cachable: it reads what ``llmcalc.profiling.hf_measure`` measured on the
model transformers built (every parameter tensor with the model's own tensor- and expert-parallel plans, the KV
cache its ``Cache`` class allocated, the bytes autograd saved in a training forward) and answers what `memory`
needs beside a ``ModelSpec``. ``measured_training_memory`` is ``memory.training_memory`` for such a model: the
same ``MemoryEstimate`` (recipes, optimizers, ZeRO sharding over dp, the phases of the step and their peak), fed
with the counted parameters and the measured activations instead of llmcalc's formulas.

Tensor parallelism follows transformers' plan styles (``transformers/integrations/tensor_parallel.py``):
``colwise`` (and ``colwise_gather_output``, ``packed_colwise``, ``local_colwise``) splits a weight's output
dimension (dim -2; a 1-D bias along its only one), ``rowwise`` (``local_rowwise``) its input dimension (dim -1; the
bias is replicated), ``embedding_rowwise`` the vocabulary rows; ``replicated*`` and tensors the plan does not name
are whole on every rank. A colwise / rowwise projection of an attention module splits whole heads: its sharded
dimension over the module's ``head_dim`` must divide by tp.
"""

from __future__ import annotations

from dataclasses import field

from ..errors import LlmcalcError
from ..records import dataclass, short_repr
from .inference import KvLayer

COLWISE = ("colwise", "colwise_gather_output", "packed_colwise", "local_colwise")
ROWWISE = ("rowwise", "local_rowwise")
EMBEDDING = ("embedding_rowwise",)
# mla_kv_a_proj (transformers >= 5.25): MLA's kv_a_proj_with_mqa kept whole on every rank, its gradient averaged
# (tensor_parallel.py, MlaKvAProjParallel), as vLLM keeps it (ReplicatedLinear)
REPLICATED = ("replicated_with_grad_allreduce", "replicated", "replicate", "local", "sequence_parallel", "isolated",
              "mla_kv_a_proj")


ROLES = ("embedding", "head", "norm/final", "layer", "other")


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor of every layer that holds it (``count`` of them), as built, with its plan styles."""

    name: str  # "model.layers.*.self_attn.q_proj.weight"
    shape: tuple[int, ...]
    count: int
    trainable: bool
    tp: str | None  # the tensor-parallel plan's style for it (None: not in the plan, replicated)
    ep: str | None  # the expert-parallel plan's style
    head_dim: int | None  # the head_dim of the attention module holding its projection
    role: str  # "embedding", "head" (transformers' input / output embeddings), "norm/final", "layer" or "other"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def split_dim(self) -> int | None:
        """The dimension tensor parallelism splits (negative index), None where it stays whole."""
        if self.tp in COLWISE:
            return -2 if len(self.shape) >= 2 else -1
        if self.tp in ROWWISE:
            return -1 if len(self.shape) >= 2 else None
        if self.tp in EMBEDDING:
            return -2
        return None

    def check_tp(self, tp: int, option: str = "--tp") -> None:
        if tp == 1 or self.tp is None or self.tp in REPLICATED:
            return
        dim = self.split_dim()
        if self.tp not in COLWISE + ROWWISE + EMBEDDING:
            raise LlmcalcError(f"{option} {tp}: transformers' tensor-parallel plan shards {self.name} as {self.tp!r}, "
                               f"which llmcalc does not model for a model it measures; use {option} 1")
        if dim is None:
            return
        size = self.shape[dim]
        if self.head_dim and self.role == "layer" and size % self.head_dim == 0:
            heads = size // self.head_dim
            if heads % tp:
                raise LlmcalcError(f"{option} {tp} does not divide the {heads} heads of {self.name} ({size} = {heads} "
                                   f"x head_dim {self.head_dim}, as transformers built it); use a tp that divides "
                                   f"{heads}")
        if size % tp:
            raise LlmcalcError(f"{option} {tp} does not divide dimension {size} of {self.name} (shape "
                               f"{list(self.shape)}, {self.tp} in transformers' plan)")

    def per_rank(self, tp: int) -> float:
        """Elements of one layer's tensor on one tensor-parallel rank."""
        return self.numel / tp if self.split_dim() is not None else float(self.numel)


@dataclass(frozen=True)
class KvLayerMeasured:
    """One layer of the cache transformers allocated: elements per token, the window it stops at, fixed state."""

    layer: int
    cache_class: str  # transformers' cache layer class (DynamicLayer, DynamicSlidingWindowLayer, ...)
    elements_per_token: int
    cap_tokens: int | None  # a sliding layer keeps at most this many tokens
    state_elements: int  # a linear-attention / SSM layer's conv and recurrent state (per sequence)
    element_bytes: float  # as allocated by the bf16 model (a state may mix bf16 and fp32)


@dataclass(frozen=True)
class MoeMeasured:
    """A MoE layer's routed experts as transformers built and called them (hf_measure._ffn)."""

    experts_module: str  # "model.layers.*.mlp.experts"
    n_experts: int  # E: the fused experts tensors' first dimension (0: not fused, one module per expert)
    up_width: int  # the colwise experts' width other than the hidden size (gate + up: 2I gated)
    inner: int  # the rowwise experts' input width (I)
    shared_width: int  # the shared experts' colwise output rows + rowwise input columns (3F gated)
    top_k: int | None  # k: the last dimension of the top_k_index the router produced (None: not seen)
    styles: tuple[str | None, ...]  # the experts tensors' tp styles


@dataclass(frozen=True)
class FfnLayer:
    """One decoder layer's feed-forward widths (what vLLM's profiling transient needs, hf_measure._ffn)."""

    layer: int
    dense_width: int  # the dense MLP's colwise output rows + rowwise input columns (gated 3F, plain 2F; 0: none)
    moe: MoeMeasured | None


def real_forward_note(real: dict) -> str:
    """Why a model's forwards ran on real tensors (hf_fallback._real_model)."""
    return (f"its forward needs tensor values ({real['reason']}, at the {real['step']} step), which the meta device "
            "and fake tensors do not have: the forwards ran on real CPU tensors of the shortened stack, initialised "
            "as transformers initialises them (seed 0), and the counts were scaled to every layer")


@dataclass
class MeasuredModel:
    """What transformers built and ran, for `memory`; built by ``from_counted`` from hf_fallback's dict."""

    __repr__ = short_repr(("name", "model_type", "total", "seq_len"))  # a handful of fields

    name: str
    model_type: str
    cls: str
    transformers_version: str
    seq_len: int  # the training forward's length (0: measured for `infer`, no activations)
    total: int  # parameters counted (the FallbackModel's total)
    tensors: list[Tensor]
    kv: list[KvLayerMeasured]
    activation_runs: list[dict]  # [{"seq_len", "bytes", "bytes_by_element"}] at seq_len // 2 and seq_len
    decode: dict  # hf_measure._decode: {"per_sequence", "per_key", "contexts", "flops"} of one decode step ({}:
    #   measured for `memory`, which needs none)
    experts_per_token: int | None = None  # k of the config's top-k routing (fallback.TOP_K_KEYS), if a MoE
    max_seq_len: int | None = None  # the config's max_position_embeddings, if it gives one
    quantized: bool = False  # the config has a quantization_config
    notes: list[str] = field(default_factory=list)
    quantization_config: dict | None = None  # the config's, as published (serve sizes the shipped formats by it)
    ffn: list[FfnLayer] = field(default_factory=list)  # per decoder layer, as transformers built and routed it
    kv_heads: list[int | None] = field(default_factory=list)  # per cache layer, the K/V heads allocated (None: state)
    rotary: list[dict] = field(default_factory=list)  # hf_measure._rotary: the rotary tables transformers built
    step: dict = field(default_factory=dict)  # hf_measure.measure_step (`train`'s step model; {}: not measured)
    real_forward: dict | None = None  # {"step", "reason"}: the forwards needed tensor values and ran on real ones

    @classmethod
    def from_counted(cls, name: str, model_type: str, counted: dict, experts_per_token: int | None = None,
                     max_seq_len: int | None = None, quantized: bool = False,
                     quantization_config: dict | None = None) -> MeasuredModel:
        m = counted["measured"]
        tensors = [Tensor(name=t["name"], shape=tuple(t["shape"]), count=t["count"], trainable=t["trainable"],
                          tp=t["tp"], ep=t["ep"], head_dim=t["head_dim"], role=t["role"]) for t in m["tensors"]]
        kv = [KvLayerMeasured(layer=k["layer"], cache_class=k["class"], elements_per_token=k["elements_per_token"],
                              cap_tokens=k["cap_tokens"], state_elements=k["state_elements"],
                              element_bytes=k["element_bytes"]) for k in m["kv"]["layers"]]
        total = sum(t.numel * t.count for t in tensors if t.trainable)
        ffn = [FfnLayer(f["layer"], f["dense_width"],
                        MoeMeasured(**{**f["moe"], "styles": tuple(f["moe"]["styles"])}) if f["moe"] else None)
               for f in m.get("ffn", [])]
        runs = m.get("activations", {}).get("runs", [])  # none when measured for `infer`
        return cls(name=name, model_type=model_type, cls=counted["class"],
                   transformers_version=counted["transformers_version"],
                   seq_len=runs[-1]["seq_len"] if runs else 0, total=total, tensors=tensors, kv=kv,
                   activation_runs=runs, decode=m.get("decode", {}), experts_per_token=experts_per_token,
                   max_seq_len=max_seq_len, quantized=quantized, quantization_config=quantization_config, ffn=ffn,
                   kv_heads=list(m.get("kv_heads", [])), rotary=list(m.get("rotary", [])),
                   step=m.get("step") or ({"error": m["step_error"]} if "step_error" in m else {}),
                   real_forward=counted.get("real_forward"))

    @property
    def n_layers(self) -> int:
        """Layers of the stack (the most layers any per-layer tensor is in)."""
        return max((t.count for t in self.tensors if t.role == "layer"), default=0)

    @property
    def is_mla(self) -> bool:
        """False: vLLM's MLA-only rules (V0's unchunked prefills, vllm.v0_chunked_prefill) are read from a formula's
        attention; a measured model's attention is what transformers ran, timed and sized as measured."""
        return False

    @property
    def forward_tensors(self) -> str:
        """What the forwards ran on: fake tensors, or real CPU ones where the forward needs values (`.item()`)."""
        return "real CPU" if self.real_forward else "fake"

    def describe(self) -> str:
        return (f"model_type {self.model_type}: {self.cls} built and run by transformers {self.transformers_version} "
                f"on {self.forward_tensors} tensors, not by a formula")

    def check_tp(self, tp: int) -> None:
        for t in self.tensors:
            t.check_tp(tp)

    def params_on_rank(self, tp: int, roles: tuple[str, ...] = ROLES) -> float:
        return sum(t.per_rank(tp) * t.count for t in self.tensors if t.trainable and t.role in roles)

    def largest_tensor(self, tp: int) -> float:
        return max((t.per_rank(tp) for t in self.tensors if t.trainable), default=0.0)

    def kv_layers(self, kv_dtype: str = "bf16", tp: int = 1) -> list[KvLayer]:
        """The measured cache as ``inference.kv_layers``' records (what vLLM's hybrid allocator, vllm.kv_groups,
        groups), on one of `tp` ranks: a layer whose cache grows keeps `elements_per_token` at the KV dtype per
        token, a "sliding" layer where the cache stopped at `cap_tokens` (span = cap + 1: transformers'
        DynamicSlidingWindowLayer keeps window - 1 past tokens, ``KvLayer.cached_tokens``; a chunked layer is
        cached the same way and cannot be told apart from the measurement), "full" otherwise; a layer with
        elements that do not grow adds a "state" record of those elements at the bytes transformers allocated
        them (after its attention record, as ``inference.kv_layers`` orders a parallel mixer's). Over tp ranks
        (``check_vllm_tp``) an attention layer keeps max(1, heads // tp) of the heads its K and V were allocated
        with (vLLM's QKVParallelLinear: replicated where tp > the KV heads; one latent head, MLA's, whole on every
        rank), a state its 1/tp share (split with its channels, as ``inference.kv_layers``)."""
        from ..dtypes import dtype_bytes

        b = dtype_bytes(kv_dtype)
        out: list[KvLayer] = []
        for k in self.kv:
            if k.elements_per_token:
                kind, span = ("sliding", k.cap_tokens + 1) if k.cap_tokens is not None else ("full", 0)
                per = k.elements_per_token * b
                if tp > 1:
                    heads = self._heads_of(k.layer, tp)
                    per = k.elements_per_token // heads * max(1, heads // tp) * b
                out.append(KvLayer(k.layer, kind, per, span=span))
            if k.state_elements:
                out.append(KvLayer(k.layer, "state", state_bytes=k.state_elements * k.element_bytes / tp))
        return out

    def _heads_of(self, layer: int, tp: int) -> int:
        heads = self.kv_heads[layer] if layer < len(self.kv_heads) else None
        if not heads:
            raise LlmcalcError(f"--n-gpus {tp}: the heads of {self.model_type}'s cache layer {layer} were not measured "
                               "(its tensors are not [batch, heads, tokens, width] alike), so how vLLM splits it over "
                               "ranks is unknown; use one GPU")
        return heads

    @property
    def kv_head_count(self) -> int | None:
        """The K/V heads every attention cache layer was allocated with, where they agree."""
        found = {h for h in self.kv_heads if h}
        return next(iter(found)) if len(found) == 1 else None

    def _heads(self, t: Tensor) -> int | None:
        """A colwise attention projection's heads: its split dimension over the module's head_dim."""
        if t.tp not in COLWISE or not t.head_dim or t.role != "layer" or len(t.shape) not in (1, 2):
            return None
        size = t.shape[0]  # a weight's output rows, a bias's length
        return size // t.head_dim if size % t.head_dim == 0 else None

    def is_kv_projection(self, t: Tensor) -> bool:
        """A colwise attention projection with as many heads as the cache's K and V and fewer than the module's
        widest projection (the queries'): a K or V projection (vLLM's QKVParallelLinear keeps max(1, KV heads //
        tp) of its heads per rank)."""
        kv, heads = self.kv_head_count, self._heads(t)
        widest = max((h for u in self.tensors if (h := self._heads(u))), default=0)
        return kv is not None and heads == kv and kv < widest

    def check_vllm_tp(self, tp: int, option: str = "--n-gpus") -> None:
        """`check_tp` as vLLM shards: K/V projections with fewer heads than tp are replicated (tp must then be a
        multiple of them, as vLLM's QKVParallelLinear asserts), every other tensor split by its plan style."""
        kv = self.kv_head_count
        for t in self.tensors:
            if kv and tp > kv and self.is_kv_projection(t):
                if tp % kv:
                    raise LlmcalcError(f"{option} {tp} is not a multiple of the {kv} KV heads of {self.name} (vLLM "
                                       "replicates K/V heads only when tp is); use a tp that divides or is a multiple "
                                       f"of {kv}")
                continue
            t.check_tp(tp, option)

    def unplanned(self) -> list[Tensor]:
        """Matrices of the layer stack that transformers' tensor-parallel plan gives no style (whole on every rank
        here), a MoE block's router excepted (vLLM replicates it too): DeepSeek-V3's MLA projections that the
        installed transformers' plan leaves out (5.24: all five, though vLLM splits q_b_proj, kv_b_proj and o_proj;
        5.25: q_a_proj, which vLLM keeps whole too)."""
        blocks = {f.moe.experts_module.rsplit(".", 1)[0] for f in self.ffn if f.moe and f.moe.experts_module}
        out = []
        for t in self.tensors:
            if t.role != "layer" or len(t.shape) < 2 or t.tp is not None or t.ep is not None:
                continue
            module = t.name.rsplit(".", 1)[0]
            if module.rsplit(".", 1)[0] in blocks:
                continue  # the router beside the experts
            out.append(t)
        return out

    def unplanned_warning(self, tp: int, per_weight: float) -> list[str]:
        """One line where tp > 1 leaves unplanned matrices whole on every rank (``unplanned``)."""
        whole = self.unplanned()
        if tp == 1 or not whole:
            return []
        nbytes = sum(t.numel * t.count for t in whole) * per_weight
        names = ", ".join(t.name for t in whole[:4]) + (f" and {len(whole) - 4} more" if len(whole) > 4 else "")
        return [f"--n-gpus {tp}: {names} have no style in transformers' tensor-parallel plan and are counted whole "
                f"on every GPU ({nbytes / 1e9:,.2f} GB per GPU); vLLM may split them"]

    def vllm_share(self, t: Tensor, tp: int) -> float:
        """The share of `t` one of `tp` vLLM ranks holds: the embedding and LM head by vocabulary rows
        (VocabParallelEmbedding, ParallelLMHead), a K/V projection max(1, KV heads // tp) of its heads, every other
        tensor as its plan style splits it (``Tensor.per_rank``)."""
        if tp == 1:
            return 1.0
        if t.role in ("embedding", "head") and len(t.shape) == 2:
            return 1.0 / tp
        kv = self.kv_head_count
        if kv and self.is_kv_projection(t):
            return max(1, kv // tp) / kv
        return t.per_rank(tp) / t.numel

    def rotary_tables(self) -> list[tuple[int, int]]:
        """(positions, rotary dim) of each cos/sin cache vLLM makes at load: one per distinct rotary table transformers
        built (dimension, positions cached, rope parameters: vLLM's get_rope shares a cache between equal ones, and
        makes Gemma 3's sliding and global tables, of different bases, two), positions the module's
        max_seq_len_cached or, where it has none, the config's max_position_embeddings."""
        import json

        seen: dict[str, tuple[int, int]] = {}
        for r in self.rotary:
            positions = r.get("max_positions") or self.max_seq_len
            if not positions:
                continue
            key = json.dumps([r["rotary_dim"], positions, r.get("rope")], sort_keys=True)
            seen.setdefault(key, (positions, r["rotary_dim"]))
        return list(seen.values())

    def rotary_cache_bytes(self, act_bytes: float) -> float:
        """vllm.rotary_cache_bytes for the measured tables: positions x rotary dim x the model dtype's bytes each
        (RotaryEmbedding's cos_sin_cache: cos and sin of rotary dim / 2 frequencies per position)."""
        return sum(positions * dim * act_bytes for positions, dim in self.rotary_tables())

    @property
    def tied(self) -> bool:
        return not any(t.role == "head" for t in self.tensors)

    def activation_terms(self) -> tuple[float, float]:
        """(bytes per token, bytes per token²) of batch 1 solving the two measured lengths: bytes(s) = a·s + b·s²."""
        (s1, y1), (s2, y2) = ((r["seq_len"], r["bytes"]) for r in self.activation_runs)
        if s1 == s2:
            return y2 / s2, 0.0
        b = (y2 * s1 - y1 * s2) / (s1 * s2 * (s2 - s1))  # whole-number numerator: exactly 0 for a linear count
        return y1 / s1 - b * s1, b

    def activation_bytes(self, act_bytes: float) -> float:
        """Saved bytes of one sequence at the measured seq_len; `act_bytes` 4 (fp32 activations) doubles the
        measured 2-byte (bf16) tensors, the fp32 ones stay."""
        run = self.activation_runs[-1]
        two = run["bytes_by_element"].get("2", 0)
        return run["bytes"] + two * (act_bytes / 2 - 1)


def measured_training_memory(model: MeasuredModel, batch: int, seq_len: int, *, recipe: str, optimizer,
                             recompute: str, attention: str, dropout: bool, parallel, optimizer_impl: str):
    """`memory.training_memory` for a measured model: the same MemoryEstimate, its parameters counted per rank from
    the tensors transformers built (tensor-parallel shards by its plan) and its activations the bytes autograd
    saved in transformers' training forward at this seq_len, times the micro-batch, split tp ways under sequence
    parallelism (Korthikanti et al. 2022 sec. 4.2.2: with tensor and sequence parallelism every saved tensor of
    a block is 1/t per rank). Options whose effect only llmcalc's per-tensor formula knows are refused."""
    from .activations import ActivationEstimate
    from .memory import OPTIMIZER_IMPLS, OPTIMIZERS, RECIPES, MemoryEstimate, Optimizer, lookup

    if seq_len != model.seq_len:
        raise LlmcalcError(f"{model.model_type}: measured at seq {model.seq_len}, asked for {seq_len}")
    refuse = [(recompute != "none", f"--recompute {recompute}"), (attention != "flash", f"--attention {attention}"),
              (dropout, "--dropout"), (parallel.pp > 1, f"--pp {parallel.pp}"),
              (parallel.ep > 1, f"--ep {parallel.ep}"),
              (parallel.expert_tp != parallel.tp, f"--etp {parallel.expert_tp}"),
              (parallel.cp > 1, f"--cp {parallel.cp}"),
              (parallel.tp > 1 and not parallel.sequence_parallel, "--no-sequence-parallel")]
    clash = [name for bad, name in refuse if bad]
    if clash:
        raise LlmcalcError(f"{', '.join(clash)}: {model.model_type} is measured by transformers (one training "
                           "forward, its own attention, every layer on one pipeline stage); llmcalc's per-tensor "
                           "formula models these options and has none for it; drop them")
    rec = lookup(RECIPES, "recipe", recipe)
    if rec.fp8:
        raise LlmcalcError(f"--recipe {recipe}: its saved FP8 casts are by llmcalc's tensor names, which a model "
                           f"transformers measures does not have; use a bf16/fp16/fp32 recipe")
    if optimizer_impl not in OPTIMIZER_IMPLS:
        raise LlmcalcError(f"optimizer implementation must be one of {', '.join(OPTIMIZER_IMPLS)}")
    opt = optimizer if isinstance(optimizer, Optimizer) else lookup(OPTIMIZERS, "optimizer", optimizer)
    tp = parallel.tp
    model.check_tp(tp)
    params = model.params_on_rank(tp)
    head = model.params_on_rank(tp, ("head", "norm/final")) if not model.tied else \
        model.params_on_rank(tp, ("embedding", "norm/final"))
    late = model.params_on_rank(tp, ("embedding",)) if not model.tied else 0.0
    layers = model.n_layers or 1
    saved = model.activation_bytes(rec.act_bytes) * batch / tp
    per_block = saved / layers  # one block's share (the measured forward is not split by block)
    acts = ActivationEstimate(per_layer={"saved for backward (measured)": saved}, recompute_working_set=0.0,
                              logits_and_loss=0.0, largest_layer=per_block, own_layer=per_block)
    gathered = (2 * model.params_on_rank(tp, ("layer",)) / layers * rec.weight_bytes
                if parallel.zero == 3 and parallel.dp > 1 else 0.0)
    return MemoryEstimate(spec=model, recipe=rec, optimizer=opt, parallel=parallel, batch=batch, seq_len=seq_len,
                          recompute=recompute, attention=attention, params_on_gpu=params, activations=acts,
                          stage="only", zero3_gathered=gathered, optimizer_impl=optimizer_impl,
                          largest_tensor=model.largest_tensor(tp), head_params_on_gpu=head, late_params_on_gpu=late)

