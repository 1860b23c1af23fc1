"""Exact parameter counts per component, and the classic approximations beside them.

A breakdown is an ordered mapping "group/part" -> count of the tensors a checkpoint stores (a tied LM
head is counted once, in embedding/tokens). Totals are computed from it, never stored. The counts are
those of what transformers' ``save_pretrained`` writes of the matching model (its ``state_dict()`` less
``_keys_to_ignore_on_save`` and tied copies); tests hold every preset to that. So a frozen parameter
(ERNIE-4.5's score bias) and a persistent buffer (DeepSeek-V3's, GLM-4.5's, MiniMax-M2's router
e_score_correction_bias) are counted; non-persistent buffers (rotary frequencies, causal masks) and
Marian's sinusoidal tables (dropped on save) are not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..records import dataclass, short_repr
from ..spec import ModelSpec
from .ssm import SSM_MIXERS, mixer_params

EMBEDDING_PARTS = ("embedding/tokens", "embedding/positions", "embedding/token_types", "embedding/per_layer_tokens",
                   "head/lm_head", "head/lm_head_bias")


def _norm(spec: ModelSpec, width: int) -> int:
    """Parameters of one norm over `width` features: weight (gain) and, for LayerNorm, bias."""
    if not spec.norm_affine:
        return 0
    return width * (2 if spec.norm_bias else 1)


def _attention(spec: ModelSpec, prefix: str, cross: bool = False, layer: int = 0) -> dict[str, int]:
    """One attention block's parameters, by part, in decoder layer `layer` (its head width and K/V heads, whether it
    has K/V projections of its own, its indexer and KV compressor). `cross`: encoder-decoder cross-attention."""
    D, H = spec.d_model, spec.n_heads
    mla = spec.mla
    if mla is not None and not cross:
        # DeepSeek-V2 MLA (arXiv 2405.04434, sec. 2.1): low-rank Q (optional) and a shared KV latent
        # plus one decoupled RoPE key per token; RMSNorm on both latents.
        qk = mla.qk_head_dim
        parts = {}
        if mla.q_lora_rank:
            parts["q_a_proj"] = D * mla.q_lora_rank
            parts["q_a_norm"] = mla.q_lora_rank
            parts["q_b_proj"] = mla.q_lora_rank * H * qk
        else:
            parts["q_proj"] = D * H * qk
        parts["kv_a_proj"] = D * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        parts["kv_a_norm"] = mla.kv_lora_rank
        parts["kv_b_proj"] = mla.kv_lora_rank * H * (mla.qk_nope_head_dim + mla.v_head_dim)
        parts["o_proj"] = H * mla.v_head_dim * D
        # attention_bias (modeling_deepseek_v3.py DeepseekV3Attention): q_a_proj, kv_a_proj_with_mqa and o_proj
        parts["bias"] = (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim) * spec.qkv_bias + D * spec.out_bias
        parts["indexer"] = _indexer(spec, layer)
        return {f"{prefix}/{k}": v for k, v in parts.items()}
    dh = spec.d_head if cross else spec.layer_d_head(layer)
    kv = H if cross else spec.layer_kv_heads(layer)  # cross-attention K/V come from the encoder, one per head
    own_k = cross or not spec.kv_shared(layer)  # Gemma 4's KV-shared layers read another layer's K and V
    own_v = cross or spec.has_v_proj(layer)
    q = H * (2 if spec.attn_output_gate and not cross else 1)  # Qwen3-Next: queries and output gates
    r = spec.query_rank
    parts = {
        # DeepSeek-V4 (models/deepseek_v4/modeling_deepseek_v4.py DeepseekV4Attention): q_a_proj D->r, q_a_norm,
        # q_b_proj r->H·d_head (its q_b_norm has no weight); else one q_proj.
        **({"q_a_proj": D * r, "q_a_norm": r, "q_b_proj": r * q * dh} if r and not cross else {"q_proj": D * q * dh}),
        "k_proj": D * kv * dh * own_k,
        "v_proj": D * kv * dh * own_v,
        # DeepSeek-V4's grouped low-rank output (DeepseekV4GroupedLinear): g blocks of (H·d_head/g -> o_lora_rank),
        # then o_b_proj g·o_lora_rank -> D; else one o_proj.
        **({"o_a_proj": spec.o_lora_rank * H * dh, "o_b_proj": spec.o_groups * spec.o_lora_rank * D}
           if spec.o_groups and not cross else {"o_proj": H * dh * D}),
        "bias": (q + kv * (own_k + own_v)) * dh * spec.qkv_bias + D * spec.out_bias,
        # QK-norm (Qwen3/Gemma 3/LFM2: one d_head weight each for Q and K; OLMo-2/Cohere: per head; DeepSeek-V4: K).
        "qk_norm": (dh * (1 + own_k) if spec.qk_norm == "head" else (H + kv * own_k) * dh if spec.qk_norm == "full"
                    else dh if spec.qk_norm == "key" else 0) * (2 if spec.qk_norm_bias else 1),
        "sinks": H * spec.attention_sinks,  # gpt-oss: a learned logit per head joins the softmax
    }
    if not cross:
        parts["compressor"] = _compressor(spec, layer)
        parts["indexer"] = _indexer(spec, layer)
    return {f"{prefix}/{k}": v for k, v in parts.items()}


def _indexer(spec: ModelSpec, layer: int) -> int:
    """The lightning indexer of layer `layer`, 0 where it has none. DeepSeek Sparse Attention (DeepSeek-V3.2,
    models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer; GLM-5's GlmMoeDsaIndexer): wq_b q_lora_rank ->
    Hi·di, wk D -> di, k_norm LayerNorm(di) with bias, weights_proj D -> Hi. DeepSeek-V4's, in a CSA layer
    (DeepseekV4Indexer): its own compressor at di (kv_proj and gate_proj D -> 2·di, position_bias m x 2·di,
    kv_norm RMSNorm(di)), q_b_proj q_lora_rank -> Hi·di and the scorer's weights_proj D -> Hi."""
    if not spec.has_indexer(layer):
        return 0
    D, Hi, di, q = spec.d_model, spec.index_n_heads, spec.index_head_dim, spec.q_latent
    if spec.compression(layer) == "csa":
        return 2 * D * 2 * di + spec.kv_compress_csa * 2 * di + di + q * Hi * di + D * Hi
    return q * Hi * di + D * di + 2 * di + D * Hi


def _compressor(spec: ModelSpec, layer: int) -> int:
    """DeepSeek-V4's KV compressor of layer `layer` (models/deepseek_v4/modeling_deepseek_v4.py): HCA
    (DeepseekV4HCACompressor) kv_proj and gate_proj D -> d_head, position_bias m' x d_head, kv_norm RMSNorm(d_head);
    CSA (DeepseekV4CSACompressor) the same at 2·d_head (two overlapping series) with position_bias m x 2·d_head."""
    kind, D, dh = spec.compression(layer), spec.d_model, spec.d_head
    if kind == "hca":
        return 2 * D * dh + spec.kv_compress_hca * dh + dh
    if kind == "csa":
        return 2 * D * 2 * dh + spec.kv_compress_csa * 2 * dh + dh
    return 0


def _hyper_connections(spec: ModelSpec) -> dict[str, int]:
    """DeepSeek-V4's manifold-constrained hyper-connections around each sublayer (DeepseekV4HyperConnection, Xie et
    al. 2026): fn ((2+n)·n x n·D), base ((2+n)·n) and scale (3), for attention and for the FFN (n = hc_mult)."""
    n, D = spec.hc_mult, spec.d_model
    one = (2 + n) * n * n * D + (2 + n) * n + 3
    return {"hyper_connections/attention": one, "hyper_connections/ffn": one} if n else {}


def _per_layer_input(spec: ModelSpec) -> dict[str, int]:
    """Gemma 4's per-layer input in each decoder layer (models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer):
    per_layer_input_gate D -> P and per_layer_projection P -> D, bias-free (its RMSNorm(D) is with the norms)."""
    P, D = spec.per_layer_embed_dim, spec.d_model
    return {"per_layer/gate": D * P, "per_layer/projection": P * D} if P else {}


def _ffn(spec: ModelSpec, width: int, prefix: str, bias: bool | None = None, d_in: int = 0) -> dict[str, int]:
    """A dense FFN of inner width `width` reading and writing `d_in` (0: D): gated (gate, up, down) or plain (up,
    down)."""
    D = d_in or spec.d_model
    parts = {"gate_proj": D * width} if spec.gated else {}
    parts["up_proj"] = D * width
    parts["down_proj"] = width * D
    parts["bias"] = ((2 if spec.gated else 1) * width + D) * (spec.mlp_bias if bias is None else bias)
    return {f"{prefix}/{k}": v for k, v in parts.items()}


def _expert(spec: ModelSpec) -> int:
    """One expert: an FFN of width d_ff_expert, bias-free (Mixtral, DeepSeek) or biased (gpt-oss), on D or on the
    MoE latent (Nemotron 3 Super: NemotronHExperts' up_proj E x F x latent, down_proj E x latent x F)."""
    return sum(_ffn(spec, spec.d_ff_expert, "x", bias=spec.expert_bias, d_in=spec.expert_d_in).values())


def _moe(spec: ModelSpec, prefix: str, hash_routed: bool = False) -> dict[str, int]:
    """One MoE FFN: a linear router over experts (biased in gpt-oss), routed experts, and the shared
    experts as one bias-free MLP of width d_ff_shared (plus Qwen2-MoE's sigmoid gate, Linear(D, 1)).
    A hash-routed layer (DeepSeek-V4's first moe_hash_layers, modeling_deepseek_v4.py DeepseekV4HashRouter) keeps
    the gate's weight (E x D) and, instead of a score-correction bias, a token-id table tid2eid of V x top-k (a
    persistent buffer the checkpoint stores)."""
    shared = sum(_ffn(spec, spec.d_ff_shared, "x", bias=False).values()) if spec.n_shared_experts else 0
    # Gemma 4 (Gemma4TextRouter): proj D -> E, an input scale of D and a per-expert scale of E.
    scales = (spec.d_model + spec.n_experts) * spec.router_scales
    # The router's score-correction bias (E), stored in the checkpoint: ERNIE-4.5's Ernie4_5_MoeStatics (a frozen
    # parameter, (1, E)), DeepSeek-V3's and its kin's e_score_correction_bias (a persistent buffer).
    if hash_routed:
        scales += spec.vocab_size * spec.n_experts_per_token
    else:
        scales += spec.n_experts * spec.router_score_bias
    parts = {
        f"{prefix}/router": (spec.d_model + spec.router_bias) * spec.n_experts + scales,
        f"{prefix}/experts": spec.n_experts * _expert(spec),
        f"{prefix}/shared_experts": shared + spec.d_model * spec.shared_expert_gate,
    }
    if spec.moe_latent_size:  # NemotronHMoE: fc1_latent_proj Linear(D, latent), fc2_latent_proj Linear(latent, D)
        latent, D = spec.moe_latent_size, spec.d_model
        parts[f"{prefix}/latent_proj"] = 2 * D * latent + (latent + D) * spec.mlp_bias
    return parts


def _shared_block(spec: ModelSpec, use: int) -> dict[str, int]:
    """Zamba2's shared block at its `use`-th hybrid layer (models/zamba2/modeling_zamba2.py
    Zamba2HybridLayer): the block's own weights only the first time each of the shared_blocks blocks
    is used (later uses tie to it); every use adds its Linear(D, D) and its LoRA adapters, which live
    in the block's adapter lists at the slots of that use. Block: RMSNorm(2D) + attention from 2D
    (q, k, v; o back to D; no biases) + RMSNorm(D) + a gated MLP (gate_up D→2F, down F→D).
    transformers ties the reused blocks through _tied_weights_keys, which it applies only when
    tie_word_embeddings is true (modeling_utils.get_expanded_tied_weights_keys): untied, every use
    builds a whole block, holding adapters at the slots of all uses of its block id."""
    D, H, dh, F, r = spec.d_model, spec.n_heads, spec.d_head, spec.d_ff, spec.shared_adapter_rank
    b = int(spec.mlp_bias)
    slots = 1 if spec.tie_embeddings else len(range(use % spec.shared_blocks, spec.n_mixer_layers("shared_block"),
                                                     spec.shared_blocks))
    parts = {"linear": D * D,
             "adapters": slots * ((D * r + r * 2 * F) + 3 * (2 * D * r + r * 2 * D) * spec.shared_attention_adapters)}
    if use < spec.shared_blocks or not spec.tie_embeddings:
        parts["attention"] = 2 * D * (H + 2 * spec.n_kv_heads) * dh + H * dh * D
        parts["mlp"] = D * 2 * F + 2 * F * b + F * D + D * b
        parts["norms"] = _norm(spec, 2 * D) + _norm(spec, D)
    return {f"shared_block/{k}": v for k, v in parts.items()}


def layer_norms(spec: ModelSpec, layer: int, norms: int) -> int:
    """D-wide norms of a (non-hybrid) decoder layer with `norms` per block: Gemma 4 adds three in an MoE layer whose
    dense FFN runs beside the experts (post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2) and one after
    the per-layer input (post_per_layer_input_norm)."""
    return (norms + 3 * (spec.moe_dense_parallel and spec.is_moe_layer(layer))
            + bool(spec.per_layer_embed_dim))


def _add(total: dict[str, int], parts: dict[str, int], times: int = 1) -> None:
    for key, value in parts.items():
        total[key] = total.get(key, 0) + value * times


def _layer_shapes(spec: ModelSpec, n_layers: int) -> list[tuple[bool, str, bool, bool, str, bool]]:
    """Each layer's (MoE, attention span, KV-shared, own indexer, compression, hash-routed), as ModelSpec's per-layer
    methods give them (is_moe_layer, attention_span, kv_shared, has_indexer, compression; index < moe_hash_layers); a
    part the spec does not vary by layer
    (no experts nor layer_types, no attention_spans, no KV-shared layers, no indexer, no kv_compress: most models) is
    the one answer its method gives for every layer then, not asked layer by layer."""
    layers = range(n_layers)

    def each(varies: bool, of_layer: Callable[[int], Any], always: Any) -> list:
        return [of_layer(i) for i in layers] if varies else [always] * n_layers

    parts = (each(spec.n_experts > 0 or spec.layer_types is not None, spec.is_moe_layer, False),
             each(spec.attention_spans is not None, spec.attention_span, "full"),
             each(bool(spec.kv_shared_layers), spec.kv_shared, False),
             each(bool(spec.index_n_heads), spec.has_indexer, False),
             each(spec.kv_compress is not None, spec.compression, "none"),
             each(bool(spec.moe_hash_layers), spec.moe_hash_layers.__gt__, False))
    return list(zip(*parts, strict=True))


def _hybrid_layers(spec: ModelSpec, n_layers: int) -> list[dict[str, int]]:
    """A hybrid stack's layers, each its parameters by part: mixers (attention, Mamba, Zamba2's shared block with
    what its use adds), an optional FFN, a pre-norm per part."""
    out = []
    uses = 0  # Zamba2 shared-block uses so far
    # a state-space mixer's and an FFN's parts read no layer index: made once per kind, added at each layer
    per_kind: dict[str, dict[str, int]] = {}
    for i in range(n_layers):
        layer: dict[str, int] = {}
        mixers, ffn = spec.layer_parts(i)
        for kind in mixers:
            if kind == "shared_block":
                _add(layer, _shared_block(spec, uses))
                uses += 1
                continue
            if kind == "attention":
                _add(layer, _attention(spec, "attention", layer=i))
                continue
            if kind not in per_kind:
                per_kind[kind] = mixer_params(spec, kind)
            _add(layer, per_kind[kind])
        if ffn is not None:
            if ffn not in per_kind:
                per_kind[ffn] = _moe(spec, "moe") if ffn == "moe" else _ffn(spec, spec.d_ff, "mlp")
            _add(layer, per_kind[ffn])
        _add(layer, {"norm/layers": spec.norms_in_layer(i) * _norm(spec, spec.d_model)})
        out.append(layer)
    return out


Shape = tuple[bool, str, bool, bool, str, bool]


def _kinds(spec: ModelSpec, stack: str, n_layers: int) -> tuple[list[Shape], dict[Shape, tuple[dict[str, int],
                                                                                         dict[str, int]]],
                                                                 dict[str, int]]:
    """A (non-hybrid) stack's layer kinds: each layer's shape (_layer_shapes), each shape's (attention, the rest of
    its block) by part, and the cross-attention every block of a decoder stack adds. Every block of a stack is one of
    a few kinds, each made once: keyed by what can differ between layers (MoE or dense; Gemma 4's per-span geometry
    and KV-shared layers; GLM-5's indexer layers; DeepSeek-V4's compression), all else being the same in every
    layer."""
    cross = stack == "decoder."
    norms = spec.norms_per_layer + (1 if cross else 0)  # a decoder block adds a cross-attention norm
    cross_attention = _attention(spec, f"{stack}cross_attention", cross=True) if cross else {}
    shapes = _layer_shapes(spec, n_layers)
    blocks: dict[Shape, tuple[dict[str, int], dict[str, int]]] = {}
    for i, shape in enumerate(shapes):
        if shape not in blocks:
            moe = shape[0]
            rest: dict[str, int] = {}
            if moe:
                _add(rest, _moe(spec, f"{stack}moe", hash_routed=shape[5]))
            if not moe or spec.moe_dense_parallel:  # Gemma 4 keeps its dense MLP beside the experts
                _add(rest, _ffn(spec, spec.layer_d_ff(i), f"{stack}mlp"))
            _add(rest, _per_layer_input(spec))
            _add(rest, _hyper_connections(spec))
            _add(rest, {f"{stack}norm/layers": layer_norms(spec, i, norms) * _norm(spec, spec.d_model)})
            if spec.layer_scalar:  # Gemma4TextDecoderLayer.layer_scalar: a stored buffer of one element
                rest[f"{stack}norm/layer_scalar"] = 1
            blocks[shape] = (_attention(spec, f"{stack}attention", layer=i), rest)
    return shapes, blocks, cross_attention


def layer_blocks(spec: ModelSpec) -> list[dict[str, int]]:
    """Each block's parameters by part ("group/part" -> count, as param_breakdown names them), layer by layer: the
    encoder's, then the decoder's; the stacks' blocks sum to param_breakdown's less the embedding, the head and the
    final norms (T5's relative-position table is in the first block of its stack, as transformers holds it)."""
    if spec.is_hybrid:
        return _hybrid_layers(spec, spec.n_layers)
    stacks = ([("encoder.", spec.n_layers), ("decoder.", spec.n_decoder_layers)]
              if spec.architecture == "encoder-decoder" else [("", spec.n_layers)])
    out = []
    for stack, n_layers in stacks:
        shapes, blocks, cross_attention = _kinds(spec, stack, n_layers)
        for i, shape in enumerate(shapes):
            layer: dict[str, int] = {}
            _add(layer, blocks[shape][0])
            _add(layer, cross_attention)
            if spec.pos_emb == "relative" and i == 0:
                layer[f"{stack}attention/relative_position_bias"] = spec.rel_pos_buckets * spec.n_heads
            _add(layer, blocks[shape][1])
            out.append(layer)
    return out


def _stack(spec: ModelSpec, stack: str, n_layers: int) -> dict[str, int]:
    """Parameters of one stack of blocks. `stack`: '' (decoder-only/encoder), 'encoder.', 'decoder.'."""
    out: dict[str, int] = {}
    if spec.is_hybrid:  # layer by layer: mixers (attention, Mamba), an optional FFN, a pre-norm per part
        for layer in _hybrid_layers(spec, n_layers):
            _add(out, layer)
        out["norm/final"] = _norm(spec, spec.d_model)
        return out
    shapes, blocks, cross_attention = _kinds(spec, stack, n_layers)
    counts: dict[Shape, int] = {}  # blocks of each kind, in order of first appearance
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    for first, (shape, n) in enumerate(counts.items()):  # each kind's count x its blocks, keys in model order
        _add(out, blocks[shape][0], n)
        _add(out, cross_attention, n)
        if spec.pos_emb == "relative" and first == 0:  # T5: one bias table per stack, in block 0
            out[f"{stack}attention/relative_position_bias"] = spec.rel_pos_buckets * spec.n_heads
        _add(out, blocks[shape][1], n)
    if spec.final_norm:
        out[f"{stack}norm/final"] = _norm(spec, spec.d_model)
    return out


def param_breakdown(spec: ModelSpec) -> dict[str, int]:
    """Exact parameter counts, "group/part" -> count, in model order; zero entries dropped."""
    D = spec.d_model
    E = spec.d_embed or D  # OPT: tokens (and the LM head) at word_embed_proj_dim, projected to D
    out: dict[str, int] = {"embedding/tokens": spec.vocab_size * E}
    if spec.d_embed:
        out["embedding/project_in"] = E * D
    if spec.pos_emb == "learned":
        out["embedding/positions"] = spec.n_positions * D
    if spec.type_vocab_size:
        out["embedding/token_types"] = spec.type_vocab_size * D
    if spec.embedding_norm:
        out["embedding/norm"] = _norm(spec, D)
    if spec.per_layer_embed_dim:  # Gemma 4 (Gemma4TextModel): embed_tokens_per_layer, per_layer_model_projection
        P, L = spec.per_layer_embed_dim, spec.n_layers
        out["embedding/per_layer_tokens"] = spec.per_layer_embed_vocab * L * P
        out["embedding/per_layer_projection"] = D * L * P
        out["embedding/per_layer_norm"] = _norm(spec, P)
    if spec.architecture == "encoder-decoder":
        out.update(_stack(spec, "encoder.", spec.n_layers))
        out.update(_stack(spec, "decoder.", spec.n_decoder_layers))
    else:
        out.update(_stack(spec, "", spec.n_layers))
    if spec.hc_mult:  # DeepSeek-V4's DeepseekV4HyperHead: hc_fn (n x n·D), hc_base (n), hc_scale (1)
        out["head/hc_head"] = spec.hc_mult * spec.hc_mult * D + spec.hc_mult + 1
    if spec.pooler:
        out["head/pooler"] = D * D + D
    if spec.d_embed:
        out["head/project_out"] = D * E
    if spec.lm_head and not spec.tie_embeddings:
        out["head/lm_head"] = spec.vocab_size * E
    if spec.lm_head and spec.lm_head_bias:
        out["head/lm_head_bias"] = spec.vocab_size
    keys = list(out)  # stable sort: stack, then group, then first appearance
    return {k: out[k] for k in sorted(keys, key=lambda k: (*_order(k), keys.index(k))) if out[k]}


_STACKS = ("", "encoder.", "decoder.")
_GROUPS = ("embedding", "attention", "cross_attention", "shared_block", *SSM_MIXERS, "mlp", "moe", "per_layer",
           "hyper_connections", "norm", "head")


def _order(key: str) -> tuple[int, int]:
    group = key.split("/")[0]
    stack, _, name = group.rpartition(".")
    if group in ("embedding", "head"):  # outside the stacks: embeddings first, head last
        return (-1 if group == "embedding" else len(_STACKS)), 0
    return _STACKS.index(stack + "." if stack else ""), _GROUPS.index(name)


class BreakdownTotals:
    """The totals of a parameter breakdown ("group/part" -> count, `components`), for ParamCount and for a model
    transformers counted (fallback.FallbackModel) alike."""

    components: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.components.values())

    @property
    def embedding(self) -> int:
        """Token, position and token-type tables plus an untied LM head (Kaplan et al. 2020 sec. 2.1)."""
        return sum(self.components.get(k, 0) for k in EMBEDDING_PARTS)

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding

    def groups(self) -> dict[str, int]:
        """Totals per group ('attention', 'mlp', 'decoder.cross_attention', ...), in model order."""
        return group_totals(self.components)


@dataclass(frozen=True)
class ParamCount(BreakdownTotals):
    """A model's exact parameter breakdown and the totals computed from it."""

    __repr__ = short_repr(("spec", "total"))  # a handful of fields

    spec: ModelSpec
    components: dict[str, int]

    @property
    def inactive_per_token(self) -> int:
        """Routed-expert parameters a token does not use: (E - k) experts in every MoE layer."""
        spec = self.spec
        if not spec.is_moe:
            return 0
        return (spec.n_experts - spec.n_experts_per_token) * _expert(spec) * spec.n_moe_layers

    @property
    def active_per_token(self) -> int:
        """Parameters one token's forward pass touches (embeddings and head included, as Mixtral's 12.9B)."""
        return self.total - self.inactive_per_token



def group_totals(components: dict[str, int]) -> dict[str, int]:
    """Totals per group ("attention" for "attention/q_proj"), in the order the groups first appear."""
    out: dict[str, int] = {}
    for key, value in components.items():
        group = key.split("/")[0]
        out[group] = out.get(group, 0) + value
    return out


def largest_tensor(spec: ModelSpec) -> int:
    """Elements of the largest single parameter tensor, in the HF/reference layout: the token
    embedding or LM head (V x D), a projection, an FFN matrix, or all experts' matrices of one kind
    stored as one E x F x D tensor (transformers >= 5, llmcalc's reference model)."""
    D = spec.d_model
    sizes = [spec.vocab_size * (spec.d_embed or D), D * spec.n_heads * spec.d_head]
    if spec.d_ff:
        sizes.append(D * spec.d_ff)
    if spec.is_moe:
        sizes += [spec.n_experts * spec.d_ff_expert * spec.expert_d_in, spec.d_ff_shared * D]
    if spec.mla is not None:
        sizes.append(spec.mla.kv_lora_rank * spec.n_heads * (spec.mla.qk_nope_head_dim + spec.mla.v_head_dim))
    if spec.per_layer_embed_dim:  # Gemma 4's per-layer embedding table, Vp x L·P
        sizes.append(spec.per_layer_embed_vocab * spec.n_layers * spec.per_layer_embed_dim)
    if spec.d_head_global:
        sizes.append(D * spec.n_heads * spec.d_head_global)
    return max(sizes)


def count_params(spec: ModelSpec) -> ParamCount:
    """The exact parameter count of `spec`, by component ("group/part" -> unique parameters, a tied
    LM head counted once), with total, non-embedding and MoE active-per-token totals derived from it.
    Equals ``sum(p.numel() for p in model.parameters() if p.requires_grad)`` of the matching
    ``transformers`` model (tests hold every preset to it)."""
    return ParamCount(spec, dict(_breakdown(spec)))


@functools.lru_cache(maxsize=256)
def _breakdown(spec: ModelSpec) -> dict[str, int]:
    """param_breakdown, once per distinct (frozen, hashable) spec: the layout search and the step model ask for
    the same model's counts thousands of times. Callers get a copy (count_params)."""
    return param_breakdown(spec)


# --- The classic approximations -------------------------------------------------------------


@dataclass(frozen=True)
class Approximation:
    """A closed-form estimate, the exact figure it stands for, and how far off it is."""

    name: str  # the formula as people quote it
    formula: str  # the formula instantiated for this model, e.g. "L·(4D² + 3·D·F) + 2·V·D"
    value: int
    compared_with: str  # "non_embedding" or "total"
    exact: int
    source: str

    @property
    def rel_error(self) -> float:
        return (self.value - self.exact) / self.exact


def approximations(count: ParamCount) -> list[Approximation]:
    """12·L·D² and friends beside the exact counts they approximate.

    L counts every block (encoder + decoder). 12·L·D² assumes per block 4·D² of attention (MHA,
    H·d_head = D, no biases) and 8·D² of FFN (plain with F = 4D, or gated with F = 8D/3).
    """
    spec = count.spec
    L, D, V = spec.total_layers, spec.d_model, spec.vocab_size
    heads = 2 if (spec.lm_head and not spec.tie_embeddings) else 1  # embedding + untied head
    k = 3 if spec.gated else 2  # matrices per FFN
    F, ffn_label = spec.d_ff, "F"
    if spec.is_moe:  # the FFN term summed over the experts a layer holds (routed + shared)
        F = spec.n_experts * spec.d_ff_expert * spec.expert_d_in // D + spec.d_ff_shared  # latent experts: x latent/D
        ffn_label = "F_moe"
    emb_label = "2·V·D" if heads == 2 else "V·D"
    twelve = 12 * L * D * D
    base = _approximations_base(count, twelve, heads, emb_label)
    if spec.is_hybrid:
        return base + [_hybrid_approximation(count, heads, emb_label)]
    return base + [
        Approximation(
            f"L·(4D² + {k}·D·F) + {emb_label}", f"L·(4D² + {k}·D·{ffn_label}) + {emb_label}",
            L * (4 * D * D + k * D * F) + heads * V * D, "total", exact=count.total,
            source="per-block attention 4·D² plus the FFN matrices at their real width, plus embeddings",
        ),
    ]


def _approximations_base(count: ParamCount, twelve: int, heads: int, emb_label: str) -> list[Approximation]:
    V, D = count.spec.vocab_size, count.spec.d_model
    return [
        Approximation("12·L·D²", "12·L·D²", twelve, "non_embedding", exact=count.non_embedding,
                      source="Kaplan et al. 2020, eq. 2.1: N ≈ 2·d_model·n_layer·(2·d_attn + d_ff) = 12·L·D²"),
        Approximation(f"12·L·D² + {emb_label}", f"12·L·D² + {emb_label}", twelve + heads * V * D, "total",
                      exact=count.total,
                      source="12·L·D² plus the token embedding (and an untied LM head)"),
    ]


def _hybrid_approximation(count: ParamCount, heads: int, emb_label: str) -> Approximation:
    """Per-layer sum for hybrid/state-space models: 4·D² per attention layer, k·D·F per FFN layer
    (k·D·F_expert·(E + shared) per MoE layer), 3·E·D per Mamba mixer (mamba_ssm's README: "roughly
    3 * expand * d_model^2 parameters" -- in_proj 2·E·D plus out_proj E·D)."""
    spec = count.spec
    D, V = spec.d_model, spec.vocab_size
    k = 3 if spec.gated else 2
    n_attn = spec.n_mixer_layers("attention")
    n_ssm = sum(m in ("mamba", "mamba2") for i in range(spec.n_layers) for m in spec.layer_parts(i)[0])
    n_conv = spec.n_mixer_layers("short_conv")
    n_mlp = sum(spec.layer_parts(i)[1] == "mlp" for i in range(spec.n_layers))
    value = n_attn * 4 * D * D + n_ssm * 3 * spec.ssm_d_inner * D + heads * V * D
    formula = f"{n_attn}·4D² + {n_ssm}·3·E·D"
    if n_conv:  # LFM2's short conv: in_proj 3·D² + out_proj D²
        value += n_conv * 4 * D * D
        formula += f" + {n_conv}·4D² (short conv)"
    if n_mlp:
        value += n_mlp * k * D * spec.d_ff
        formula += f" + {n_mlp}·{k}·D·F"
    if spec.n_moe_layers:
        value += spec.n_moe_layers * k * spec.d_ff_expert * (spec.n_experts * spec.expert_d_in
                                                             + spec.n_shared_experts * D)
        formula += f" + {spec.n_moe_layers}·{k}·D·F_moe"
    uses = spec.n_mixer_layers("shared_block")
    if uses:  # Zamba2: each distinct shared block once (q, k, v from 2D, o to D: 6D² at MHA; its MLP)
        blocks = min(uses, spec.shared_blocks) if spec.tie_embeddings else uses  # untied: a block per use
        value += blocks * (6 * D * D + k * D * spec.d_ff)
        formula += f" + {blocks}·(6D² + {k}·D·F) (shared blocks)"
    return Approximation(
        "per layer: 4D² (attention) + 3·E·D (Mamba) + k·D·F (FFN)", f"{formula} + {emb_label}", value, "total",
        exact=count.total,
        source="each layer's own parts: attention 4·D², Mamba ≈ 3·expand·D² (mamba_ssm README), FFN at its width",
    )


def _reconcile_labels(spec: ModelSpec) -> tuple[str, str]:
    """The attention and FFN rows' labels of ``reconcile``: what makes each part differ from 4·D² and 8·D² a block."""
    L, D = spec.total_layers, spec.d_model
    attention_label = {
        "mha": "attention differs from 4·D² per block (H·d_head ≠ D)",
        "gqa": f"attention below 4·D² per block (GQA: {spec.n_kv_heads} K/V heads for {spec.n_heads})",
        "mqa": "attention below 4·D² per block (MQA: one K/V head)",
        "mla": "attention differs from 4·D² per block (MLA low-rank projections)",
    }[spec.attention_kind]
    ffn_label = (
        f"FFN differs from 8·D² per block ({spec.n_experts} experts of F={spec.d_ff_expert}"
        + (f", {spec.n_shared_experts} shared" if spec.n_shared_experts else "") + ")"
        if spec.is_moe else
        f"FFN differs from 8·D² per block ({'3' if spec.gated else '2'}·D·F with F={spec.d_ff} "
        f"is {(3 if spec.gated else 2) * spec.d_ff / D:.3g}·D², not 8·D²)" if spec.d_ff else ""
    )
    if spec.is_hybrid:  # 12·L·D² assumes attention and an FFN in every block; say how many have them
        n_ffn = sum(spec.layer_parts(i)[1] is not None for i in range(L))
        attention_label = (f"attention in {spec.n_mixer_layers('attention')} of {L} layers "
                           f"({spec.attention_kind.upper()}), not 4·D² in every block")
        ffn_label = f"FFN in {n_ffn} of {L} layers, not 8·D² in every block"
    return attention_label, ffn_label


def reconcile(count: ParamCount) -> list[tuple[str, int]]:
    """Why 12·L·D² differs from the exact total: signed terms that add up from one to the other.

    The first row is 12·L·D²; every other row is a named difference; their sum is the exact total.
    """
    spec = count.spec
    L, D = spec.total_layers, spec.d_model
    c = count.components
    extras = ("/bias", "/qk_norm", "/sinks")
    attention = sum(v for k, v in c.items() if "attention/" in k and "cross_attention" not in k
                    and not k.endswith(extras) and "relative_position_bias" not in k)
    cross = sum(v for k, v in c.items() if "cross_attention/" in k and not k.endswith("/bias"))
    ffn = sum(v for k, v in c.items() if ("mlp/" in k or "moe/" in k) and not k.endswith("/bias"))
    biases = sum(v for k, v in c.items() if k.endswith("/bias"))
    norms = sum(v for k, v in c.items() if "norm/" in k or k == "embedding/norm")
    attention_label, ffn_label = _reconcile_labels(spec)
    rows = [
        ("12·L·D²", 12 * L * D * D),
        (attention_label, attention - 4 * L * D * D),
        ("cross-attention (4·D² per decoder block, not in 12·L·D²)", cross),
        (ffn_label, ffn - 8 * L * D * D),
        ("biases", biases),
        ("norms", norms),
        ("QK-norms", sum(v for k, v in c.items() if k.endswith("/qk_norm"))),
        ("attention sinks (one logit per head)", sum(v for k, v in c.items() if k.endswith("/sinks"))),
        ("embedding projections (project_in/out)", c.get("embedding/project_in", 0) + c.get("head/project_out", 0)),
        ("state-space and conv mixers (Mamba, LFM2 short conv)", sum(v for k, v in c.items()
                                                                 if k.split("/")[0] in SSM_MIXERS)),
        ("Zamba2 shared blocks, their per-use Linear(D, D) and LoRA adapters",
         sum(v for k, v in c.items() if k.startswith("shared_block/"))),
        ("relative position bias (T5)", sum(v for k, v in c.items() if "relative_position_bias" in k)),
        ("DeepSeek-V4 hyper-connections (mHC) and their head", sum(v for k, v in c.items()
                                                                  if k.startswith("hyper_connections/"))
         + c.get("head/hc_head", 0)),
        ("Gemma 4 per-layer inputs (table, projections, norm)", sum(v for k, v in c.items() if k.startswith(
            ("per_layer/", "embedding/per_layer_")))),
        ("token embedding (V·D)", c.get("embedding/tokens", 0)),
        ("position embedding (learned)", c.get("embedding/positions", 0)),
        ("token-type embedding", c.get("embedding/token_types", 0)),
        ("pooler", c.get("head/pooler", 0)),
        ("LM head, untied (V·D)", c.get("head/lm_head", 0)),
        ("LM head bias (V)", c.get("head/lm_head_bias", 0)),
    ]
    return [rows[0]] + [(label, value) for label, value in rows[1:] if value]
