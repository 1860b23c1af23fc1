"""SpecDraft: what a file or a caller says about a model, before anything is derived or checked.

Every field a config may leave out is optional here (``None`` = "not said"): the key count of heads,
the head width, the FFN width of a model whose layers may have none, the MLA and state-space widths.
``llmcalc.spec.resolve`` turns a draft into a ``ModelSpec`` (derivations, then checks); a draft is
never used by a formula. The field names, order and defaults are the spec's own vocabulary: a native
spec file (``spec_from_dict``) uses them, and ``ModelSpec.to_dict`` answers in them.

This module also holds the vocabulary both a draft and a resolved spec use (architectures, MLP and
norm kinds, per-layer mixers) and ``parse_layer``, which reads one ``layer_types`` entry.
"""

from __future__ import annotations

from dataclasses import field

from ..errors import LlmcalcError
from ..records import dataclass, short_repr

ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")
GATED_MLPS = ("swiglu", "geglu")  # three matrices: gate, up, down (Shazeer 2020)
PLAIN_MLPS = ("gelu", "relu", "silu",
              "relu2")  # two matrices: up, down (Vaswani et al. 2017); relu2 = ReLU² (So et al. 2021)
MLPS = GATED_MLPS + PLAIN_MLPS
NORMS = ("rmsnorm", "layernorm")
# what layer_types may name
LAYER_MIXERS = ("attention", "mamba", "mamba2", "short_conv", "gated_deltanet", "kda", "shared_block")
LAYER_FFNS = ("mlp", "moe")
POS_EMBS = ("rope", "learned", "sinusoidal", "alibi", "relative", "none")
QK_NORMS = ("none", "head", "full", "key")  # see SpecDraft.qk_norm
K_EQ_V = ("none", "global", "all")  # see SpecDraft.k_eq_v
KV_COMPRESS = ("none", "csa", "hca")  # see SpecDraft.kv_compress
ATTENTION_SPANS = ("full", "sliding", "chunked")  # see SpecDraft.attention_spans
REQUIRED = ("n_layers", "d_model", "n_heads", "vocab_size")


class SpecError(LlmcalcError):
    """A model description that cannot be a real Transformer (bad shape, unknown option)."""


def parse_layer(entry: str) -> tuple[tuple[str, ...], str | None]:
    """(mixers, ffn) of one ``layer_types`` entry: "mamba2+mlp" -> (("mamba2",), "mlp"),
    "attention|mamba2+mlp" -> (("attention", "mamba2"), "mlp"), "mlp" -> ((), "mlp"); ffn None when absent."""
    mixers: tuple[str, ...] = ()
    ffn = None
    for part in entry.split("+"):
        if part in LAYER_FFNS:
            ffn = part
        else:
            mixers = tuple(part.split("|"))
    return mixers, ffn


def is_moe_layer(index: int, *, layer_types: tuple[str, ...] | None, moe_layers: tuple[int, ...] | None,
                 n_experts: int, n_dense_layers: int, moe_layer_freq: int) -> bool:
    """Whether layer `index` (0-based) has a routed-expert FFN: its ``layer_types`` entry when given, else
    whether `moe_layers` lists it, else DeepSeek's rule (after the first n_dense_layers, every
    moe_layer_freq-th)."""
    if layer_types is not None:
        return parse_layer(layer_types[index])[1] == "moe"
    if moe_layers is not None:
        return n_experts > 0 and index in moe_layers
    return n_experts > 0 and index >= n_dense_layers and index % moe_layer_freq == 0


@dataclass(frozen=True)
class SpecDraft:
    """Shapes and options of a Transformer language model, as given: ``None`` where a value is not said.

    For an encoder-decoder, ``n_layers`` is the encoder depth and ``n_decoder_layers`` the
    decoder depth; both stacks share d_model, heads and d_ff (as T5 and the 2017 Transformer do).
    """

    __repr__ = short_repr(("name", "n_layers", "d_model", "n_heads", "n_kv_heads", "vocab_size"))  # a handful of fields

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
    # (OLMo-2 over the flat projection, Cohere's (H, d_head) weight, StableLM's per-head LayerNorms);
    # "key": a weight of d_head on the keys only, the queries' norm has none (DeepSeek-V4's kv_norm, q_b_norm).
    qk_norm: str = "none"
    qk_norm_bias: bool = False  # the QK-norms carry a bias (Phi's LayerNorm(d_head))
    attention_sinks: bool = False  # one learned sink logit per head and layer (gpt-oss)
    # Windowed attention: what each decoder layer's queries attend to. attention_spans has one entry per layer:
    # "full" (the whole causal context), "sliding" (the last attention_window tokens, itself included: HF's
    # sliding_window, as transformers' sliding-window mask has it) or "chunked" (the tokens of its own chunk of
    # attention_chunk tokens: Llama 4's attention_chunk_size); None: every layer full. A mask in transformers'
    # eager attention: no parameters, and the full S² matmuls torch's counter sees; a windowed kernel computes
    # only the span, and a KV cache keeps only the span (``ModelSpec.span_tokens``).
    attention_spans: tuple[str, ...] | None = None
    attention_window: int = 0  # tokens a "sliding" layer attends (0: no sliding layer)
    attention_chunk: int = 0  # tokens of a "chunked" layer's chunk (0: no chunked layer)
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
    # "shared_block|mamba2" (Zamba2): a use of a shared block (its own norms; fields below), whose output
    # is added to the Mamba-2 mixer's input, under the Mamba-2 layer's one pre-norm.
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
    # Zamba2's "shared_block" mixer (models/zamba2/modeling_zamba2.py): an attention + gated-MLP block
    # whose input is the layer input concatenated with the token embeddings (2·d_model wide), its
    # output projected by a per-use Linear(D, D); shared_blocks distinct blocks are reused in turn
    # (use u runs block u mod shared_blocks), each use adding its own LoRA adapters of rank
    # shared_adapter_rank on gate_up (and on q, k, v when shared_attention_adapters).
    shared_blocks: int = 0
    shared_adapter_rank: int = 0
    shared_attention_adapters: bool = False
    # --- 2026's layer kinds (issue 22; formulas in analytic/params.py, flops.py, ssm.py, inference.py) ---
    # Gated DeltaNet and KDA keep their recurrent state in ssm_state_dtype ("fp32": transformers'
    # LinearAttentionLayer always, vLLM for KDA and where mamba_ssm_dtype says so); None: the serving state dtype.
    # "kda" (Kimi Delta Attention, Kimi-Linear) reuses the Gated DeltaNet fields: ssm_n_heads = ssm_n_groups = H,
    # ssm_d_state = head dim d, ssm_d_inner = H·d.
    ssm_state_dtype: str | None = None
    ssm_split_in_proj: bool = False  # Gated DeltaNet's in_proj as four linears (Qwen3.5's in_proj_qkv, in_proj_z,
    #   in_proj_b, in_proj_a) rather than Qwen3-Next's two fused ones: the same weights and FLOPs, other LoRA targets
    # Per-span attention geometry (Gemma 4): the full-span ("global") layers' head width and K/V heads where they
    # differ from the sliding layers' d_head and n_kv_heads (global_head_dim, num_global_key_value_heads).
    d_head_global: int | None = None
    n_kv_heads_global: int | None = None
    # k_eq_v: the key projection is also the value one (no v_proj): "global" in the full-span layers only (Gemma 4's
    # attention_k_eq_v; the cache still holds K and V), "all" in every layer (DeepSeek-V4's single kv_proj, whose
    # one tensor is both and is cached once).
    k_eq_v: str = "none"
    kv_shared_layers: int = 0  # the last k layers read the K/V of the last earlier layer of their span (Gemma 4
    #   num_kv_shared_layers): no k/v projections, K norm or cache of their own
    d_ff_kv_shared: int | None = None  # the dense FFN width of those layers (Gemma 4 use_double_wide_mlp: 2·d_ff)
    per_layer_embed_dim: int | None = None  # Gemma 4's per-layer embeddings (hidden_size_per_layer_input P): a table
    #   of per_layer_embed_vocab rows x L·P, a projection D -> L·P with an RMSNorm(P), and in every layer a gate
    #   D -> P, a projection P -> D and an RMSNorm(D)
    per_layer_embed_vocab: int | None = None  # default vocab_size
    moe_dense_parallel: bool = False  # an MoE layer keeps its dense FFN (d_ff) beside the experts, each branch with
    #   its own post-norm and the experts with a pre-norm (Gemma 4 enable_moe_block): 3 norms more
    layer_scalar: bool = False  # every decoder layer scales its output by a stored scalar (Gemma 4's layer_scalar, a
    #   persistent buffer of one element per layer)
    router_scales: bool = False  # the router scales its input per channel (D) and its top-k weights per expert (E)
    router_score_bias: bool = False  # the router's per-expert score-correction bias (E), updated by aux-loss-free
    #   balancing rather than by gradients and stored in the checkpoint: ERNIE-4.5's moe_statics.e_score_correction_bias
    #   (a frozen parameter), DeepSeek-V3's, GLM-4.5's, MiniMax-M2's (a persistent buffer); counted as a parameter
    moe_latent_size: int | None = None  # the routed experts work in a latent of this width: fc1_latent_proj (D -> it)
    #   before them, fc2_latent_proj (it -> D) after, the router and the shared expert on D (Nemotron 3 Super/Ultra:
    #   modeling_nemotron_h.py NemotronHMoE, NemotronHExperts)
    moe_hash_layers: int | None = None  # the first moe_hash_layers layers pick their experts by token id: a stored
    #   table tid2eid (vocab x top-k, a persistent int64 buffer) where the other MoE layers keep the score-correction
    #   bias (DeepSeek-V4's "hash_moe" layers: modeling_deepseek_v4.py DeepseekV4HashRouter); counted as a parameter
    # DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5; DeepSeek-V4's CSA layers, on compressed
    # keys): index_n_heads heads of index_head_dim score every key, and the attention reads the index_topk best.
    index_n_heads: int | None = None
    index_head_dim: int | None = None
    index_topk: int | None = None
    index_layers: tuple[int, ...] | None = None  # layers with an indexer of their own (GLM-5's "shared" layers reuse
    #   the previous one's top-k); None: every attention layer (DeepSeek-V4: its CSA layers)
    # DeepSeek-V4's attention: a low-rank query (q_lora_rank without kv_lora_rank: q_a_proj, RMSNorm, q_b_proj),
    # one K=V head (k_eq_v "all"), a grouped low-rank output (o_groups groups of H·d_head/g -> o_lora_rank each,
    # then g·o_lora_rank -> D), and per layer a compressed KV (kv_compress: "none"; "csa": overlapping windows of
    # kv_compress_csa tokens, two series of 2·d_head, with an indexer; "hca": windows of kv_compress_hca tokens)
    # beside its sliding window; hc_mult residual streams mixed by hyper-connections (mHC) around each sublayer.
    o_groups: int | None = None
    o_lora_rank: int | None = None
    kv_compress: tuple[str, ...] | None = None
    kv_compress_csa: int | None = None
    kv_compress_hca: int | None = None
    hc_mult: int | None = None
    # --- The checkpoint as it ships (storage, not shape: never in a parameter count) ---
    # quantization_config: the config's own, as published (read by analytic/quant.py into bytes per module);
    # checkpoint_dtype: what the unquantized tensors are stored as (HF torch_dtype / dtype); n_mtp_layers: layers
    # the checkpoint stores that transformers does not build (DeepSeek-V3's num_nextn_predict_layers MTP module).
    quantization_config: dict | None = field(default=None, compare=False)
    checkpoint_dtype: str | None = field(default=None, compare=False)
    n_mtp_layers: int = field(default=0, compare=False)
    # vision_config: a multimodal checkpoint's vision tower as published (never counted in params: the language
    # model is; analytic/vllm.py sizes the tower vLLM loads beside it and its profiling run)
    vision_config: dict | None = field(default=None, compare=False)
    name: str = field(default="custom", compare=False)
    model_type: str | None = field(default=None, compare=False)  # HF model_type it came from
