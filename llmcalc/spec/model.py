"""ModelSpec: the one resolved description of a Transformer that every formula and the profiler read.

A ModelSpec is frozen and resolved: ``llmcalc.spec.resolve`` made it from a ``SpecDraft`` (what a file
says), deriving what the draft left out and refusing contradictions. Every shape a formula does
arithmetic on is a plain ``int`` or ``bool``. A part a model may lack is typed one of two ways:

- **0 = "this model has none"**, for one width or count of an optional part, as the spec always did for
  ``n_experts``, ``type_vocab_size``, ``rel_pos_buckets`` and ``shared_blocks``: ``d_ff`` (no dense FFN:
  Mamba, MoE-only Nemotron-H), ``n_decoder_layers`` (no decoder stack), ``n_positions`` (no learned
  position table), ``d_embed`` (tokens embedded at d_model), ``d_ff_expert`` (no experts), ``d_ff_shared``
  (no shared expert), ``ssm_d_inner``/``ssm_d_state`` (no Mamba or DeltaNet mixer), ``ssm_n_heads`` (no
  Mamba-2/DeltaNet heads), ``ssm_dt_rank`` (no Mamba-1 dt projection). A formula reads such a width only
  for the layers that have the part, and the checks (``checks.validate``) make it positive exactly there;
  a sum over the parts a model lacks is then 0, not a crash.
- **An optional sub-record**, ``mla: MLA | None``, where several widths exist together or not at all and
  a formula that reads one reads them all: mypy makes every reader check ``spec.mla is not None``.

``None`` is left only where a value is not a shape: ``max_seq_len`` (a context length the config may not
state; compared, never multiplied), ``model_type``, and ``layer_types`` / ``moe_layers`` (None: "the uniform
rule", read through ``layer_parts`` and ``is_moe_layer``).

Every construction is checked (``__post_init__``; ``resolve``, which has just checked the same draft, says so), so
``dataclasses.replace`` on a resolved spec changes exactly the fields given and still refuses a contradiction (a
``layer_types`` of the wrong length); it derives nothing again: a caller that changes ``n_layers`` adjusts
``n_decoder_layers``, ``moe_layers``, ``n_dense_layers`` itself. ``to_dict`` answers in the draft's flat
vocabulary (null for what is absent).
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, field
from typing import Any

from ..records import construct, dataclass, short_repr
from .checks import check
from .draft import GATED_MLPS, SpecDraft, SpecError, is_moe_layer, parse_layer

# Fields where the resolved spec says 0 and the draft (and to_dict) None: "this model has no such part".
ZERO_IS_NONE = ("d_ff", "n_decoder_layers", "n_positions", "d_ff_expert", "d_embed", "d_ff_shared",
                "ssm_d_inner", "ssm_d_state", "ssm_n_heads", "ssm_dt_rank", "d_head_global", "n_kv_heads_global",
                "d_ff_kv_shared", "per_layer_embed_dim", "per_layer_embed_vocab", "index_n_heads", "index_head_dim",
                "index_topk", "o_groups", "o_lora_rank", "kv_compress_csa", "kv_compress_hca", "hc_mult",
                "moe_hash_layers", "moe_latent_size")
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, sec. 2.1): queries through an optional
    low-rank latent, keys and values from one compressed latent plus a decoupled RoPE key."""

    kv_lora_rank: int  # the KV latent width (what the cache keeps per token, with the RoPE key)
    qk_rope_head_dim: int  # the decoupled RoPE part of each query/key head (one shared RoPE key)
    qk_nope_head_dim: int  # the no-RoPE part of each query/key head
    v_head_dim: int
    q_lora_rank: int = 0  # 0: a plain q_proj (DeepSeek-V2-Lite)

    @property
    def qk_head_dim(self) -> int:
        """The query/key head width: qk_nope_head_dim + qk_rope_head_dim (sec. 2.1.3); the spec's d_head."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shapes and options of a Transformer language model, resolved (see the module docstring).

    For an encoder-decoder, ``n_layers`` is the encoder depth and ``n_decoder_layers`` the
    decoder depth; both stacks share d_model, heads and d_ff (as T5 and the 2017 Transformer do).
    The fields mean what ``SpecDraft``'s fields of the same name mean.
    """

    __repr__ = short_repr(("name", "n_layers", "d_model", "n_heads", "n_kv_heads", "vocab_size"))  # a handful of fields

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    d_ff: int = 0  # dense FFN inner width; 0: no layer has a dense FFN
    n_kv_heads: int
    d_head: int
    max_seq_len: int | None = None
    tie_embeddings: bool = False
    architecture: str = "decoder"
    n_decoder_layers: int = 0  # encoder-decoder only; 0 otherwise
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    norm_affine: bool = True
    norm_bias: bool
    norms_per_layer: int = 2
    final_norm: bool = True
    embedding_norm: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    pos_emb: str = "rope"
    n_positions: int = 0  # rows of a learned position table; 0: none
    type_vocab_size: int = 0
    rel_pos_buckets: int = 0
    parallel_residual: bool = False
    post_norm: bool = False
    lm_head: bool = True
    pooler: bool = False
    n_experts: int = 0
    n_experts_per_token: int = 0
    n_shared_experts: int = 0
    d_ff_expert: int = 0  # 0: no experts
    n_dense_layers: int = 0
    moe_layer_freq: int = 1
    mla: MLA | None = None
    qk_norm: str = "none"
    qk_norm_bias: bool = False
    attention_sinks: bool = False
    attention_spans: tuple[str, ...] | None = None  # None: every layer attends to the whole causal context
    attention_window: int = 0
    attention_chunk: int = 0
    lm_head_bias: bool = False
    d_embed: int = 0  # 0: tokens embedded at d_model (no project_in/out)
    router_bias: bool = False
    expert_bias: bool = False
    d_ff_shared: int = 0  # 0: no shared expert
    shared_expert_gate: bool = False
    moe_layers: tuple[int, ...] | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    layer_types: tuple[str, ...] | None = None
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_heads: int = 0
    ssm_n_groups: int = 1
    ssm_dt_rank: int = 0
    ssm_conv_kernel: int = 4
    ssm_conv_bias: bool = True
    ssm_proj_bias: bool = False
    ssm_out_bias: bool
    ssm_norm: bool = True
    ssm_dt_norms: bool = False
    attn_output_gate: bool = False
    shared_blocks: int = 0
    shared_adapter_rank: int = 0
    shared_attention_adapters: bool = False
    ssm_state_dtype: str | None = None  # None: the serving state dtype
    ssm_split_in_proj: bool = False
    d_head_global: int = 0  # 0: the full-span layers have d_head too
    n_kv_heads_global: int = 0  # 0: n_kv_heads
    k_eq_v: str = "none"
    kv_shared_layers: int = 0
    d_ff_kv_shared: int = 0  # 0: no KV-shared layer
    per_layer_embed_dim: int = 0  # 0: no per-layer embeddings
    per_layer_embed_vocab: int = 0
    moe_dense_parallel: bool = False
    layer_scalar: bool = False
    router_scales: bool = False
    router_score_bias: bool = False
    moe_hash_layers: int = 0  # 0: every MoE layer routes by its scores
    moe_latent_size: int = 0  # 0: the routed experts read and write D
    index_n_heads: int = 0  # 0: no lightning indexer
    index_head_dim: int = 0
    index_topk: int = 0
    index_layers: tuple[int, ...] | None = None
    query_rank: int = 0  # the draft's q_lora_rank outside MLA (DeepSeek-V4's low-rank query); 0: a plain q_proj
    o_groups: int = 0  # 0: a plain o_proj
    o_lora_rank: int = 0
    kv_compress: tuple[str, ...] | None = None  # None: no layer compresses its KV
    kv_compress_csa: int = 0
    kv_compress_hca: int = 0
    hc_mult: int = 0  # 0: one residual stream, no hyper-connections
    quantization_config: dict | None = field(default=None, compare=False)  # as published (analytic/quant.py)
    checkpoint_dtype: str | None = field(default=None, compare=False)  # torch_dtype of the stored tensors
    n_mtp_layers: int = field(default=0, compare=False)  # stored by the checkpoint, not built by transformers
    vision_config: dict | None = field(default=None, compare=False)  # a multimodal checkpoint's tower (serve)
    name: str = field(default="custom", compare=False)
    model_type: str | None = field(default=None, compare=False)
    # True only from resolve(), which has just checked the very draft that to_draft() gives back (resolve.round_trips):
    # the check below would repeat it. Every other construction, dataclasses.replace included, checks.
    _checked: InitVar[bool] = False

    def __post_init__(self, _checked: bool) -> None:
        if not _checked:
            check(self.to_draft())

    # --- the draft vocabulary ---
    def to_draft(self) -> SpecDraft:
        """The same model as a draft: 0 -> None for the parts it lacks, the MLA record flattened."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("mla", "query_rank")}
        for name in ZERO_IS_NONE:
            values[name] = values[name] or None
        mla = self.mla
        values.update({**dict.fromkeys(MLA_FIELDS), "q_lora_rank": self.query_rank or None} if mla is None else {
            "q_lora_rank": mla.q_lora_rank or None, "kv_lora_rank": mla.kv_lora_rank,
            "qk_rope_head_dim": mla.qk_rope_head_dim, "qk_nope_head_dim": mla.qk_nope_head_dim,
            "v_head_dim": mla.v_head_dim})
        return construct(SpecDraft, values)  # SpecDraft(**values)

    def with_layers(self, n_layers: int, **changes: Any) -> ModelSpec:
        """The same model with `n_layers` layers in its (first) stack: the per-layer descriptions (layer_types,
        attention_spans) cut to the first n_layers, or continued with their own pattern when n_layers is larger;
        moe_layers keep the indices below n_layers, n_dense_layers at most n_layers. `changes` pass through to
        dataclasses.replace (and win over these)."""
        def fit(pattern: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return None if pattern is None else tuple(pattern[i % len(pattern)] for i in range(n_layers))

        moe = None if self.moe_layers is None else tuple(i for i in self.moe_layers if i < n_layers)
        index = None if self.index_layers is None else tuple(i for i in self.index_layers if i < n_layers)
        resized: dict[str, Any] = dict(n_layers=n_layers, n_dense_layers=min(self.n_dense_layers, n_layers),
                                       layer_types=fit(self.layer_types), attention_spans=fit(self.attention_spans),
                                       kv_compress=fit(self.kv_compress), moe_layers=moe, index_layers=index,
                                       moe_hash_layers=min(self.moe_hash_layers, n_layers),
                                       kv_shared_layers=max(0, n_layers - (self.n_layers - self.kv_shared_layers))
                                       if self.kv_shared_layers else 0)
        return dataclasses.replace(self, **{**resized, **changes})

    def to_dict(self) -> dict:
        """The flat mapping of the draft's fields, in their order, null for what the model lacks
        (``params --format json`` prints it as "spec")."""
        return dataclasses.asdict(self.to_draft())

    # --- derived views (computed, never stored) ---
    @property
    def expert_d_in(self) -> int:
        """The width a routed expert reads and writes: the MoE latent (moe_latent_size) when there is one, else D."""
        return self.moe_latent_size or self.d_model

    @property
    def gated(self) -> bool:
        return self.mlp in GATED_MLPS

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def attention_kind(self) -> str:
        if self.is_mla:
            return "mla"
        if self.n_kv_heads == self.n_heads:
            return "mha"
        return "mqa" if self.n_kv_heads == 1 else "gqa"

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer `index` (0-based) has a routed-expert FFN: the layer's entry in
        ``layer_types`` when given, else in `moe_layers` when given, else DeepSeek's rule (after the
        first n_dense_layers, every moe_layer_freq-th)."""
        return is_moe_layer(index, layer_types=self.layer_types, moe_layers=self.moe_layers,
                            n_experts=self.n_experts, n_dense_layers=self.n_dense_layers,
                            moe_layer_freq=self.moe_layer_freq)

    # --- windowed attention ---
    def attention_span(self, index: int) -> str:
        """"full", "sliding" or "chunked": what decoder layer `index`'s queries attend to (attention_spans)."""
        return "full" if self.attention_spans is None else self.attention_spans[index]

    def span_tokens(self, index: int) -> int:
        """Keys a query of decoder layer `index` attends at most (its sliding window or chunk); 0: unbounded."""
        kind = self.attention_span(index)
        return self.attention_window if kind == "sliding" else self.attention_chunk if kind == "chunked" else 0

    def attended_pairs(self, index: int, seq: int) -> int:
        """(query, key) pairs decoder layer `index` computes for one causal sequence of `seq` tokens, what a
        block-sparse causal kernel (FlashAttention) does: full causal S(S+1)/2; a sliding window w
        sum_i min(i+1, w) = w(w+1)/2 + (S - w)·w for S > w; chunks of c: c(c+1)/2 for each whole chunk plus
        r(r+1)/2 for the rest r (Llama 4's chunked attention)."""
        span, kind = self.span_tokens(index), self.attention_span(index)
        if kind == "chunked":
            whole, rest = divmod(seq, span)
            return whole * span * (span + 1) // 2 + rest * (rest + 1) // 2
        if kind == "sliding" and seq > span:
            return span * (span + 1) // 2 + (seq - span) * span
        return seq * (seq + 1) // 2

    # --- per-layer attention shapes (Gemma 4, DeepSeek-V3.2 / V4) ---
    def layer_d_head(self, index: int) -> int:
        """Head width of decoder layer `index`: d_head_global in a full-span layer where the spec gives one
        (Gemma 4's global_head_dim), else d_head."""
        return self.d_head_global if self.d_head_global and self.attention_span(index) == "full" else self.d_head

    def layer_kv_heads(self, index: int) -> int:
        """K/V heads of decoder layer `index`: n_kv_heads_global in a full-span layer where given, else n_kv_heads."""
        return self.n_kv_heads_global if self.n_kv_heads_global and self.attention_span(index) == "full" \
            else self.n_kv_heads

    def kv_shared(self, index: int) -> bool:
        """Layer `index` reads an earlier layer's K/V (one of the last kv_shared_layers): no k/v of its own."""
        return bool(self.kv_shared_layers) and index >= self.n_layers - self.kv_shared_layers

    def has_v_proj(self, index: int) -> bool:
        """Layer `index` projects values apart from keys (k_eq_v says where it does not)."""
        if self.kv_shared(index) or self.k_eq_v == "all":
            return False
        return not (self.k_eq_v == "global" and self.attention_span(index) == "full")

    def layer_d_ff(self, index: int) -> int:
        """The dense FFN width of layer `index`: d_ff_kv_shared in a KV-shared layer where given, else d_ff."""
        return self.d_ff_kv_shared if self.d_ff_kv_shared and self.kv_shared(index) else self.d_ff

    def compression(self, index: int) -> str:
        """"none", "csa" or "hca": how layer `index` compresses its KV beside the window (DeepSeek-V4)."""
        return "none" if self.kv_compress is None else self.kv_compress[index]

    def compress_ratio(self, index: int) -> int:
        """Tokens per compressed KV entry of layer `index`; 0 for a layer that keeps none."""
        kind = self.compression(index)
        return self.kv_compress_csa if kind == "csa" else self.kv_compress_hca if kind == "hca" else 0

    def compressed_entries(self, index: int, seq: int) -> int:
        """Compressed KV entries of layer `index` after `seq` tokens: one per whole window (the partial one waits)."""
        ratio = self.compress_ratio(index)
        return seq // ratio if ratio else 0

    def has_indexer(self, index: int) -> bool:
        """Layer `index` runs a lightning indexer of its own: every CSA layer of a compressed model, else the layers
        index_layers names (all when None)."""
        if not self.index_n_heads:
            return False
        if self.kv_compress is not None:
            return self.compression(index) == "csa"
        return self.index_layers is None or index in self.index_layers

    @property
    def q_latent(self) -> int:
        """Width of the low-rank query latent (MLA's q_lora_rank or DeepSeek-V4's), which the indexer reads; 0: none."""
        return self.mla.q_lora_rank if self.mla is not None else self.query_rank

    def layer_extras(self) -> tuple[str, ...]:
        """Issue 22's attention/layer parts this spec uses beyond attention + FFN blocks (the profiler's reference
        model builds none of them): empty for every earlier family."""
        parts = (("lightning indexer", self.index_n_heads), ("compressed KV", self.kv_compress is not None),
                 ("hyper-connections", self.hc_mult), ("per-layer embeddings", self.per_layer_embed_dim),
                 ("K = V projection", self.k_eq_v != "none"), ("KV-shared layers", self.kv_shared_layers),
                 ("per-span head geometry", self.d_head_global or self.n_kv_heads_global),
                 ("grouped low-rank output", self.o_groups), ("low-rank query without MLA", self.query_rank),
                 ("key-only QK-norm", self.qk_norm == "key"), ("dense FFN beside the experts", self.moe_dense_parallel),
                 ("scaled router", self.router_scales), ("router score-correction bias", self.router_score_bias))
        return tuple(name for name, on in parts if on)

    @property
    def has_windows(self) -> bool:
        """Some attention layer attends a bounded span (sliding window or chunk)."""
        return self.attention_spans is not None and any(s != "full" for s in self.attention_spans)

    # --- hybrid / state-space views ---
    @property
    def is_hybrid(self) -> bool:
        """Layers described one by one (``layer_types``): state-space, attention, FFN-only layers."""
        return self.layer_types is not None

    def layer_parts(self, index: int) -> tuple[tuple[str, ...], str | None]:
        """(mixers, ffn) of layer `index`: e.g. (("mamba2",), "mlp"), (("attention", "mamba2"), "mlp"),
        ((), "mlp") for an FFN-only layer; ffn is None when the layer has none."""
        if self.layer_types is None:
            return ("attention",), ("moe" if self.is_moe_layer(index) else "mlp")
        return parse_layer(self.layer_types[index])

    def norms_in_layer(self, index: int) -> int:
        """Pre-norms of a hybrid layer: one per "+"-part (parallel mixers share one)."""
        if self.layer_types is None:
            raise SpecError(f"{self.name} is not described layer by layer (layer_types): use norms_per_layer")
        return len(self.layer_types[index].split("+"))

    @property
    def n_attention_layers(self) -> int:
        """Layers with an attention mixer (those that keep a KV cache)."""
        if self.layer_types is None:
            return self.n_layers
        return sum(bool({"attention", "shared_block"} & set(self.layer_parts(i)[0])) for i in range(self.n_layers))

    def is_attention_layer(self, index: int) -> bool:
        """Layer `index` has an attention mixer (plain, MLA or Zamba2's shared block)."""
        return bool({"attention", "shared_block"} & set(self.layer_parts(index)[0]))

    def n_mixer_layers(self, kind: str) -> int:
        return sum(kind in self.layer_parts(i)[0] for i in range(self.n_layers))

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    @property
    def total_layers(self) -> int:
        return self.n_layers + self.n_decoder_layers

    def summary(self) -> str:
        """A short line: 'decoder, 32 layers, GQA 32/8 heads, swiglu, vocab 128,256, untied'."""
        parts = [self.architecture,
                 f"{self.n_layers}{'+' + str(self.n_decoder_layers) if self.n_decoder_layers else ''} layers"]
        heads = f"{self.attention_kind.upper()} {self.n_heads}/{self.n_kv_heads} heads"
        if self.is_hybrid:  # 'decoder, 52 layers: 24 mamba2 + 24 mlp + 4 attention (GQA 32/8), relu2, ...'
            kinds: dict[str, int] = {}  # each layer once, by what it holds (a Jamba layer: 'mamba+moe')
            for i in range(self.n_layers):
                mixers, ffn = self.layer_parts(i)
                kind = "+".join(mixers + ((ffn,) if ffn else ()))
                kinds[kind] = kinds.get(kind, 0) + 1
            parts[-1] += ": " + " + ".join(
                f"{n} {kind}" + (f" ({self.attention_kind.upper()} {self.n_heads}/{self.n_kv_heads})"
                                 if "attention" in kind.split("+") else "") for kind, n in kinds.items())
        elif self.n_attention_layers:
            parts.append(heads)
        if not self.is_hybrid or any(self.layer_parts(i)[1] for i in range(self.n_layers)):
            parts.append(
                f"MoE {self.n_experts}x top-{self.n_experts_per_token}"
                + (f" +{self.n_shared_experts} shared" if self.n_shared_experts else "") + f" {self.mlp}"
                if self.is_moe else self.mlp
            )
        parts.append(f"vocab {self.vocab_size:,}")
        if self.lm_head:
            parts.append("tied" if self.tie_embeddings else "untied")
        return ", ".join(parts)

    def layer_mix(self) -> str:
        """'24 mamba2, 4 attention, 24 mlp': how many layers carry each mixer and FFN kind."""
        counts: dict[str, int] = {}
        for i in range(self.n_layers):
            mixers, ffn = self.layer_parts(i)
            for kind in mixers + ((ffn,) if ffn else ()):
                counts[kind] = counts.get(kind, 0) + 1
        return ", ".join(f"{n} {kind}" for kind, n in counts.items())

    def describe(self) -> str:
        """One line of shapes, e.g.
        'decoder L=32 D=4096 H=32 KV=8 d_head=128 F=14336 V=128256 swiglu rmsnorm rope untied'."""
        parts = [self.architecture, f"L={self.n_layers}"]
        if self.n_decoder_layers:
            parts[-1] = f"L={self.n_layers}+{self.n_decoder_layers}"
        parts.append(f"D={self.d_model}")
        if self.n_attention_layers:
            parts += [f"H={self.n_heads}", f"KV={self.n_kv_heads}", f"d_head={self.d_head}"]
        if self.is_hybrid:
            parts.append(f"[{self.layer_mix()}]")
            if self.ssm_d_inner:
                parts.append(f"SSM(E={self.ssm_d_inner}, N={self.ssm_d_state or None}"
                             + (f", heads={self.ssm_n_heads}, groups={self.ssm_n_groups}" if self.ssm_n_heads else "")
                             + f", conv={self.ssm_conv_kernel})")
        if self.d_ff:
            parts.append(f"F={self.d_ff}")
        if self.is_moe:
            parts.append(
                f"experts={self.n_experts} top{self.n_experts_per_token}"
                + (f"+{self.n_shared_experts} shared" if self.n_shared_experts else "")
                + f" F_expert={self.d_ff_expert}"
            )
        if self.mla is not None:
            parts.append(f"MLA(q_rank={self.mla.q_lora_rank or None}, kv_rank={self.mla.kv_lora_rank})")
        has_ffn = not self.is_hybrid or any(self.layer_parts(i)[1] for i in range(self.n_layers))
        parts += [f"V={self.vocab_size}"] + ([self.mlp] if has_ffn else []) + [self.norm, self.pos_emb]
        if self.qk_norm != "none":
            parts.append(f"qk-norm({self.qk_norm})")
        if self.attention_sinks:
            parts.append("sinks")
        if self.lm_head:
            parts.append("tied" if self.tie_embeddings else "untied")
        return " ".join(parts)
