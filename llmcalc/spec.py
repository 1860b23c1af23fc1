"""ModelSpec: the one description of a Transformer that every formula and the profiler read.

A ModelSpec is frozen. Values that can be derived (n_kv_heads, d_head, n_decoder_layers, ...) are
filled in only where absent, never overwritten. Invalid shapes raise ``SpecError`` (a ValueError)
naming the offending fields and values. Reading Hugging Face config.json dicts lives in
``llmcalc.hfconfig``; this module knows nothing about HF key names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from .errors import LlmcalcError
from .validate import MAX_LAYERS, MAX_WIDTH

ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")
GATED_MLPS = ("swiglu", "geglu")  # three matrices: gate, up, down (Shazeer 2020)
PLAIN_MLPS = ("gelu", "relu", "silu",
              "relu2")  # two matrices: up, down (Vaswani et al. 2017); relu2 = ReLU² (So et al. 2021)
MLPS = GATED_MLPS + PLAIN_MLPS
NORMS = ("rmsnorm", "layernorm")
LAYER_MIXERS = ("attention", "mamba", "mamba2", "short_conv", "gated_deltanet")  # what layer_types may name
LAYER_FFNS = ("mlp", "moe")
POS_EMBS = ("rope", "learned", "sinusoidal", "alibi", "relative", "none")
QK_NORMS = ("none", "head", "full")  # see ModelSpec.qk_norm


class SpecError(LlmcalcError):
    """A model description that cannot be a real Transformer (bad shape, unknown option)."""


@dataclass(frozen=True)
class ModelSpec:
    """Shapes and options of a Transformer language model.

    For an encoder-decoder, ``n_layers`` is the encoder depth and ``n_decoder_layers`` the
    decoder depth; both stacks share d_model, heads and d_ff (as T5 and the 2017 Transformer do).
    """

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    d_ff: int | None = None  # dense FFN inner width (for MoE models: the dense layers' width)
    n_kv_heads: int | None = None  # default n_heads (MHA); 1 is MQA; in between is GQA
    d_head: int | None = None  # default d_model // n_heads; may differ (Gemma: 256)
    max_seq_len: int | None = None
    tie_embeddings: bool = False  # LM head shares the token-embedding matrix
    architecture: str = "decoder"
    n_decoder_layers: int | None = None  # encoder-decoder only
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    norm_affine: bool = True  # False: normalisation without weight or bias (OLMo's LayerNorm)
    norm_bias: bool | None = None  # default: True for layernorm, False for rmsnorm
    norms_per_layer: int = 2  # per block: 2 pre/post-LN, 4 Gemma-2 sandwich, 1 Falcon-7B parallel
    final_norm: bool = True  # a norm after the last block (pre-LN stacks have one)
    embedding_norm: bool = False  # a norm right after the embeddings (BERT)
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    pos_emb: str = "rope"
    n_positions: int | None = None  # rows of a learned position table; default max_seq_len
    type_vocab_size: int = 0  # BERT token-type (segment) embeddings
    rel_pos_buckets: int = 0  # T5 relative-position buckets (one table per stack)
    parallel_residual: bool = False  # attention and MLP read the same input (GPT-J/NeoX/Falcon)
    post_norm: bool = False  # norm after each residual add (BERT, the 2017 Transformer), not before
    lm_head: bool = True  # False: a bare encoder with no output projection (BertModel)
    pooler: bool = False  # BERT's [CLS] pooler, a D x D dense layer with bias
    # Mixture of experts (n_experts == 0 means dense).
    n_experts: int = 0  # routed experts per MoE layer
    n_experts_per_token: int = 0  # top-k routed experts each token uses
    n_shared_experts: int = 0  # experts every token uses (DeepSeek)
    d_ff_expert: int | None = None  # inner width of one expert; default d_ff
    n_dense_layers: int = 0  # the first k layers keep a dense FFN (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1  # layer i >= n_dense_layers is MoE when i % moe_layer_freq == 0
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank set means MLA.
    q_lora_rank: int | None = None  # None: a plain q_proj
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # --- Current-generation decoder details (issue 9 part 1: Qwen3, Gemma 3, gpt-oss, OLMo-2, OPT, ...) ---
    # QK-norm: a norm on queries and keys before RoPE. "head": one weight of d_head shared by all heads
    # (Qwen3, Gemma 3, GLM-4.5, Phi); "full": a weight per head, H·d_head for Q and KV·d_head for K
    # (OLMo-2 over the flat projection, Cohere's (H, d_head) weight, StableLM's per-head LayerNorms).
    qk_norm: str = "none"
    qk_norm_bias: bool = False  # the QK-norms carry a bias (Phi's LayerNorm(d_head))
    attention_sinks: bool = False  # one learned sink logit per head and layer (gpt-oss)
    lm_head_bias: bool = False  # the LM head carries a bias of vocab_size (GPT-J, Phi-2)
    d_embed: int | None = None  # token-embedding width when it differs from d_model (OPT's
    #   word_embed_proj_dim): project_in (d_embed -> D) and project_out (D -> d_embed), bias-free
    router_bias: bool = False  # the MoE router linear has a bias (gpt-oss)
    expert_bias: bool = False  # every routed expert's linears have biases (gpt-oss)
    d_ff_shared: int | None = None  # inner width of the one shared-expert MLP; default
    #   n_shared_experts·d_ff_expert (DeepSeek); Qwen2-MoE, Llama 4, Granite-MoE-shared give their own
    shared_expert_gate: bool = False  # a sigmoid gate Linear(D, 1) on the shared expert (Qwen2-MoE)
    moe_layers: tuple[int, ...] | None = None  # explicit MoE layer indices (Llama 4 interleaving,
    #   Qwen-MoE mlp_only_layers, ERNIE start/end/interval); overrides n_dense_layers/moe_layer_freq
    notes: tuple[str, ...] = field(default=(), compare=False)  # what the reader must know (vision
    #   tower left out, quantization ignored); printed under the results
    # --- Hybrid and state-space layers (issue 9 part 2; formulas in llmcalc/analytic/ssm.py) ---
    # layer_types: one entry per layer, "<mixer>+<ffn>", either part optional: mixers "attention",
    # "mamba" (Mamba-1 selective scan), "mamba2" (Mamba-2 SSD), "short_conv" (LFM2's gated depthwise
    # conv), "gated_deltanet" (Qwen3-Next's linear attention), "attention|mamba2" (both in parallel on
    # one norm, Falcon-H1); FFNs "mlp", "moe". Each "+"-part has its own pre-norm. None: every layer
    # is attention + FFN as above. Gated DeltaNet reuses the Mamba-2 fields: ssm_n_heads = value
    # heads, ssm_n_groups = key heads, ssm_d_state = key head dim, ssm_d_inner = value heads x value dim.
    layer_types: tuple[str, ...] | None = None
    ssm_d_inner: int | None = None  # E, the mixer's inner width (expand x d_model; Mamba-2: heads x head_dim)
    ssm_d_state: int | None = None  # N, state size per channel
    ssm_n_heads: int | None = None  # Mamba-2 heads (one dt, A, D each)
    ssm_n_groups: int = 1  # Mamba-2 groups sharing B and C
    ssm_dt_rank: int | None = None  # Mamba-1 low-rank dt projection width
    ssm_conv_kernel: int = 4  # depthwise causal conv1d width
    ssm_conv_bias: bool = True
    ssm_proj_bias: bool = False  # biases on in_proj (and out_proj unless ssm_out_bias says otherwise)
    ssm_out_bias: bool | None = None  # out_proj bias; default ssm_proj_bias (Falcon-H1: projectors_bias)
    ssm_norm: bool = True  # Mamba-2 gated RMSNorm over E before out_proj
    ssm_dt_norms: bool = False  # Jamba: RMSNorms on dt (R), B (N) and C (N) inside the Mamba-1 mixer
    attn_output_gate: bool = False  # q_proj also emits a per-head sigmoid gate on the output (Qwen3-Next): 2·H·d_head
    name: str = field(default="custom", compare=False)
    model_type: str | None = field(default=None, compare=False)  # HF model_type it came from

    def __post_init__(self) -> None:
        _check_types(self)
        _positive(self, "n_heads")  # before d_model // n_heads below
        derived: dict[str, object] = {}
        if self.n_kv_heads is None:
            derived["n_kv_heads"] = self.n_heads
        if self.d_head is None:
            if self.kv_lora_rank is not None:
                derived["d_head"] = _positive(self, "qk_nope_head_dim") + _positive(self, "qk_rope_head_dim")
            elif self.d_model % self.n_heads == 0:
                derived["d_head"] = self.d_model // self.n_heads
            else:
                raise SpecError(
                    f"d_model ({self.d_model}) is not a multiple of n_heads ({self.n_heads}); "
                    f"give d_head (head_dim) explicitly"
                )
        if self.norm_bias is None:
            derived["norm_bias"] = self.norm == "layernorm"
        if self.architecture == "encoder-decoder" and self.n_decoder_layers is None:
            derived["n_decoder_layers"] = self.n_layers
        if self.pos_emb == "learned" and self.n_positions is None:
            derived["n_positions"] = self.max_seq_len
        if self.n_experts and self.d_ff_expert is None:
            derived["d_ff_expert"] = self.d_ff
        if isinstance(self.moe_layers, list):  # from JSON
            derived["moe_layers"] = tuple(self.moe_layers)
        if isinstance(self.notes, list):
            derived["notes"] = tuple(self.notes)
        d_ff_expert = derived.get("d_ff_expert", self.d_ff_expert)
        if self.n_shared_experts and self.d_ff_shared is None and d_ff_expert is not None:
            derived["d_ff_shared"] = self.n_shared_experts * d_ff_expert
        if self.ssm_out_bias is None:
            derived["ssm_out_bias"] = self.ssm_proj_bias
        if isinstance(self.layer_types, list):  # from JSON: keep the spec hashable and frozen
            derived["layer_types"] = tuple(self.layer_types)
        for key, value in derived.items():
            object.__setattr__(self, key, value)
        _validate(self)

    # --- derived views (computed, never stored) ---
    @property
    def gated(self) -> bool:
        return self.mlp in GATED_MLPS

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """MLA's query/key head width: the no-RoPE part plus the decoupled RoPE part
        (qk_nope_head_dim + qk_rope_head_dim; DeepSeek-V2, arXiv:2405.04434, sec. 2.1.3)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

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
        if self.layer_types is not None:
            return self.layer_parts(index)[1] == "moe"
        if self.moe_layers is not None:
            return self.is_moe and index in self.moe_layers
        return self.is_moe and index >= self.n_dense_layers and index % self.moe_layer_freq == 0

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
        mixers: tuple[str, ...] = ()
        ffn = None
        for part in self.layer_types[index].split("+"):
            if part in LAYER_FFNS:
                ffn = part
            else:
                mixers = tuple(part.split("|"))
        return mixers, ffn

    def norms_in_layer(self, index: int) -> int:
        """Pre-norms of a hybrid layer: one per "+"-part (parallel mixers share one)."""
        return len(self.layer_types[index].split("+"))

    @property
    def n_attention_layers(self) -> int:
        """Layers with an attention mixer (those that keep a KV cache)."""
        if self.layer_types is None:
            return self.n_layers
        return sum("attention" in self.layer_parts(i)[0] for i in range(self.n_layers))

    def n_mixer_layers(self, kind: str) -> int:
        return sum(kind in self.layer_parts(i)[0] for i in range(self.n_layers))

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    @property
    def total_layers(self) -> int:
        return self.n_layers + (self.n_decoder_layers or 0)

    def replace(self, **changes) -> ModelSpec:
        """A copy with some fields changed. A derived field (n_kv_heads, d_head, ...) is derived again
        only where this spec holds its derived value; one the spec was given (GQA's n_kv_heads = 8,
        Gemma's d_head = 256) is kept unless changed."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        try:
            derived: ModelSpec | None = ModelSpec(**{**values, **{key: None for key in _DERIVED}})
        except SpecError:  # a given value has nothing to derive it from (Nemotron-H: experts, no dense d_ff)
            derived = None
        for key in _DERIVED:
            if derived is not None and key not in changes and values[key] == getattr(derived, key):
                values[key] = None
        values.update(changes)
        return ModelSpec(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """A short line: 'decoder, 32 layers, GQA 32/8 heads, swiglu, vocab 128,256, untied'."""
        parts = [self.architecture,
                 f"{self.n_layers}{'+' + str(self.n_decoder_layers) if self.n_decoder_layers else ''} layers"]
        heads = f"{self.attention_kind.upper()} {self.n_heads}/{self.n_kv_heads} heads"
        if self.is_hybrid:  # 'decoder, 52 layers: 24 mamba2 + 4 attention (GQA 32/8), relu2, ...'
            mixers: dict[str, int] = {}
            for i in range(self.n_layers):
                for kind in self.layer_parts(i)[0]:
                    mixers[kind] = mixers.get(kind, 0) + 1
            parts[-1] += ": " + " + ".join(
                f"{n} {kind}" + (f" ({self.attention_kind.upper()} {self.n_heads}/{self.n_kv_heads})"
                                 if kind == "attention" else "") for kind, n in mixers.items())
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
                parts.append(f"SSM(E={self.ssm_d_inner}, N={self.ssm_d_state}"
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
        if self.is_mla:
            parts.append(f"MLA(q_rank={self.q_lora_rank}, kv_rank={self.kv_lora_rank})")
        has_ffn = not self.is_hybrid or any(self.layer_parts(i)[1] for i in range(self.n_layers))
        parts += [f"V={self.vocab_size}"] + ([self.mlp] if has_ffn else []) + [self.norm, self.pos_emb]
        if self.qk_norm != "none":
            parts.append(f"qk-norm({self.qk_norm})")
        if self.attention_sinks:
            parts.append("sinks")
        if self.lm_head:
            parts.append("tied" if self.tie_embeddings else "untied")
        return " ".join(parts)


_DERIVED = ("n_kv_heads", "d_head", "norm_bias", "n_decoder_layers", "n_positions", "d_ff_expert", "d_ff_shared",
            "ssm_out_bias")
_INT_FIELDS = {
    f.name for f in fields(ModelSpec) if f.type in ("int", "int | None")
}
_BOOL_FIELDS = {f.name for f in fields(ModelSpec) if f.type in ("bool", "bool | None")}


def _check_types(spec: ModelSpec) -> None:
    for name in _INT_FIELDS:
        value = getattr(spec, name)
        if value is None and name not in ("n_layers", "d_model", "n_heads", "vocab_size"):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{name} must be a whole number, got {value!r}")
    for name in _BOOL_FIELDS:
        value = getattr(spec, name)
        if value is not None and not isinstance(value, bool):
            raise SpecError(f"{name} must be true or false, got {value!r}")
    for name, allowed in (("architecture", ARCHITECTURES), ("mlp", MLPS), ("norm", NORMS), ("pos_emb", POS_EMBS),
                          ("qk_norm", QK_NORMS)):
        if getattr(spec, name) not in allowed:
            raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {getattr(spec, name)!r}")


def _positive(spec: ModelSpec, name: str) -> int:
    value = getattr(spec, name)
    if value is None or value <= 0:
        raise SpecError(f"{name} must be a positive whole number, got {value!r}")
    return value


def _validate(spec: ModelSpec) -> None:
    """Every contradiction in a spec is one SpecError naming the fields; checked in this order."""
    _validate_ranges(spec)
    if spec.layer_types is not None:
        _validate_layers(spec)
    _validate_block(spec)
    _validate_moe(spec)
    _validate_mla(spec)


def _validate_ranges(spec: ModelSpec) -> None:
    """Required sizes positive, optional ones positive when given, counts non-negative, all below sane maxima."""
    for name in ("n_layers", "d_model", "n_heads", "vocab_size", "n_kv_heads", "d_head"):
        _positive(spec, name)
    for name in (f.name for f in fields(ModelSpec) if f.name in _INT_FIELDS):  # sane maxima: short loops,
        limit = MAX_LAYERS if name in ("n_layers", "n_decoder_layers", "n_dense_layers") else MAX_WIDTH  # finite sums
        value = getattr(spec, name) or 0
        if value > limit:
            shown = f"{value:,}" if value < 10**15 else f"a {len(str(value))}-digit number"
            raise SpecError(f"{name} ({shown}) is beyond the sane maximum of {limit:,}")
    for name in ("d_ff", "max_seq_len", "n_decoder_layers", "n_positions", "q_lora_rank", "d_embed", "d_ff_shared"):
        if getattr(spec, name) is not None:
            _positive(spec, name)
    for name in ("type_vocab_size", "rel_pos_buckets", "n_experts", "n_shared_experts", "n_dense_layers"):
        if getattr(spec, name) < 0:
            raise SpecError(f"{name} must be zero or positive, got {getattr(spec, name)}")


def _validate_block(spec: ModelSpec) -> None:
    """Head grouping, the block's norm layout, the architecture and the position embedding."""
    if spec.n_heads % spec.n_kv_heads:
        raise SpecError(
            f"n_heads ({spec.n_heads}) must be a multiple of n_kv_heads ({spec.n_kv_heads}): "
            f"each key/value head serves a whole group of query heads"
        )
    if spec.parallel_residual and spec.norms_per_layer not in (1, 2):
        raise SpecError(f"a parallel-residual block has 1 or 2 norms, got norms_per_layer={spec.norms_per_layer}")
    if not spec.parallel_residual and spec.norms_per_layer not in (2, 4):
        raise SpecError(f"a sequential block has 2 norms (4 with Gemma-2's sandwich norms), "
                        f"got norms_per_layer={spec.norms_per_layer}")
    if spec.post_norm and (spec.parallel_residual or spec.norms_per_layer != 2):
        raise SpecError("post_norm blocks are sequential with 2 norms")
    if spec.architecture == "encoder-decoder":
        if spec.n_decoder_layers is None:
            raise SpecError("an encoder-decoder needs n_decoder_layers")
    elif spec.n_decoder_layers is not None:
        raise SpecError(f"n_decoder_layers ({spec.n_decoder_layers}) is only for encoder-decoder models")
    if spec.pos_emb == "learned" and spec.n_positions is None:
        raise SpecError("learned position embeddings need n_positions (or max_seq_len)")
    if spec.pos_emb == "relative" and spec.rel_pos_buckets <= 0:
        raise SpecError("relative position bias needs rel_pos_buckets > 0")


def _validate_moe(spec: ModelSpec) -> None:
    """Mixture-of-experts fields: consistent when n_experts > 0, absent otherwise; d_ff where MLPs are dense."""
    if spec.is_moe:
        if spec.architecture != "decoder":
            raise SpecError("mixture-of-experts layers are supported in decoder-only models")
        if not 1 <= spec.n_experts_per_token <= spec.n_experts:
            raise SpecError(
                f"n_experts_per_token ({spec.n_experts_per_token}) must be between 1 and "
                f"n_experts ({spec.n_experts})"
            )
        _positive(spec, "d_ff_expert")
        _positive(spec, "moe_layer_freq")
        if spec.n_dense_layers > spec.n_layers:
            raise SpecError(f"n_dense_layers ({spec.n_dense_layers}) exceeds n_layers ({spec.n_layers})")
        if spec.moe_layers is not None:
            bad = [i for i in spec.moe_layers if isinstance(i, bool) or not isinstance(i, int)
                   or not 0 <= i < spec.n_layers]
            if bad:
                raise SpecError(f"moe_layers must be layer indices in 0..{spec.n_layers - 1}, got {bad}")
        dense = (any(spec.layer_parts(i)[1] == "mlp" for i in range(spec.n_layers)) if spec.layer_types is not None
                 else spec.n_moe_layers < spec.n_layers)  # a Mamba-only layer has no FFN at all
        if dense and spec.d_ff is None:
            raise SpecError("dense layers in an MoE model need d_ff")
    elif spec.layer_types is None or any(spec.layer_parts(i)[1] == "mlp" for i in range(spec.n_layers)):
        _positive(spec, "d_ff")
    if not spec.is_moe:
        if spec.n_experts_per_token or spec.n_shared_experts:
            raise SpecError("n_experts_per_token/n_shared_experts given but n_experts is 0")
        if spec.router_bias or spec.expert_bias or spec.shared_expert_gate or spec.moe_layers:
            raise SpecError("router_bias/expert_bias/shared_expert_gate/moe_layers given but n_experts is 0")


def _validate_mla(spec: ModelSpec) -> None:
    """Multi-head latent attention (DeepSeek-V2): its ranks and head widths, and what it excludes."""
    if spec.is_mla:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            _positive(spec, name)
        if spec.d_head != spec.qk_head_dim:
            raise SpecError(
                f"with MLA, d_head ({spec.d_head}) must be qk_nope_head_dim + qk_rope_head_dim "
                f"({spec.qk_nope_head_dim} + {spec.qk_rope_head_dim})"
            )
        if spec.n_kv_heads != spec.n_heads:
            raise SpecError("with MLA every query head has its own key/value head: n_kv_heads = n_heads")
        if spec.qk_norm != "none" or spec.attention_sinks:
            raise SpecError("qk_norm and attention_sinks are not modelled with MLA")
    elif spec.q_lora_rank is not None:
        raise SpecError("q_lora_rank is only used with MLA (set kv_lora_rank too)")


def _validate_layers(spec: ModelSpec) -> None:
    types = spec.layer_types
    if not isinstance(types, tuple) or not all(isinstance(t, str) for t in types):
        raise SpecError(f"layer_types must be a list of strings, got {types!r}")
    if len(types) != spec.n_layers:
        raise SpecError(f"layer_types has {len(types)} entries for n_layers={spec.n_layers}; give one per layer")
    if spec.architecture != "decoder":
        raise SpecError("layer_types (hybrid and state-space layers) are supported in decoder-only models")
    for i, entry in enumerate(types):
        parts = entry.split("+")
        mixers = [m for p in parts if p not in LAYER_FFNS for m in p.split("|")]
        ffns = [p for p in parts if p in LAYER_FFNS]
        if not entry or len(ffns) > 1 or len(parts) - len(ffns) > 1 or any(m not in LAYER_MIXERS for m in mixers) \
                or len(set(mixers)) != len(mixers):
            raise SpecError(
                f"layer_types[{i}] = {entry!r} is not '<mixer>+<ffn>' with mixers {', '.join(LAYER_MIXERS)} "
                f"(parallel ones joined by '|') and FFNs {', '.join(LAYER_FFNS)}"
            )
        if "moe" in ffns and not spec.is_moe:
            raise SpecError(f"layer_types[{i}] = {entry!r} has an MoE FFN but n_experts is 0")
    kinds = {m for i in range(spec.n_layers) for m in spec.layer_parts(i)[0]}
    if "short_conv" in kinds:
        _positive(spec, "ssm_conv_kernel")
    if kinds & {"mamba", "mamba2", "gated_deltanet"}:
        for name in ("ssm_d_inner", "ssm_d_state", "ssm_conv_kernel"):
            _positive(spec, name)
    if "mamba" in kinds:
        _positive(spec, "ssm_dt_rank")
    if kinds & {"mamba2", "gated_deltanet"}:
        _positive(spec, "ssm_n_heads")
        _positive(spec, "ssm_n_groups")
        if spec.ssm_d_inner % spec.ssm_n_heads or spec.ssm_n_heads % spec.ssm_n_groups:
            raise SpecError(
                f"Mamba-2/Gated DeltaNet: ssm_d_inner ({spec.ssm_d_inner}) must be a multiple of ssm_n_heads "
                f"({spec.ssm_n_heads}), itself a multiple of ssm_n_groups ({spec.ssm_n_groups})"
            )


def spec_from_dict(values: dict, name: str = "custom") -> ModelSpec:
    """A ModelSpec from llmcalc's own field names (a native spec file); unknown keys are an error."""
    known = {f.name for f in fields(ModelSpec)}
    unknown = sorted(k for k in values if k not in known and not k.startswith("_"))
    if unknown:
        raise SpecError(f"unknown spec keys: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    missing = [k for k in ("n_layers", "d_model", "n_heads", "vocab_size") if k not in values]
    if missing:
        raise SpecError(f"spec is missing {', '.join(missing)}")
    kwargs = {k: v for k, v in values.items() if k in known}
    kwargs.setdefault("name", name)
    return ModelSpec(**kwargs)
