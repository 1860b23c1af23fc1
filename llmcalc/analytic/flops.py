"""Forward and backward FLOPs per operation for one (batch, sequence) step.

Conventions (printed under every table that uses them):
- FLOPs, not MACs: a multiply-add is 2 FLOPs, so an (m x k) @ (k x n) matmul is 2·m·k·n.
- Only matmuls are counted, which is what torch's FlopCounterMode counts (mm/addmm/bmm/sdpa);
  a bias add, norms, softmax and activations are estimated separately (``elementwise_ops``).
- Embedding lookup: 0 FLOPs. LM head: a matmul, counted whether tied or not.
- Attention S² terms (QKᵀ and AV): full S² by default (PaLM App. B, nanoGPT, torchtitan; what
  torch's counter sees); ``causal=True`` halves them (Megatron-LM/NeMo; FlashAttention's real work).
- Backward = 2 x forward (one matmul for the input gradient, one for the weight gradient).
  Model FLOPs = forward + backward, without recomputation (the MFU numerator). Hardware FLOPs add
  what activation recomputation re-runs: selective recomputes the attention core (QKᵀ, softmax,
  AV; Korthikanti et al. 2022), full recomputes every block's forward (not the embedding or LM head,
  as Megatron-LM does; Narayanan et al. 2021 eq. 3).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from ..validate import DEFAULT_SEQ_LEN, positive_int
from .ssm import SSM_MIXERS as SSM_GROUPS
from .ssm import mixer_ops

RECOMPUTE = ("none", "selective", "full")
ATTENTION_CORE = ("scores", "values")  # the S² matmuls
EMBED_PROJECTIONS = ("embedding/project_in", "head/project_out")  # OPT's word_embed_proj_dim


def utilization(flops: float, seconds: float, n_gpus: float, peak: float) -> float:
    """The share of the dense peak some work achieved: FLOPs / (seconds x GPUs) / peak (PaLM, Chowdhery et al.
    2022, App. B). Model FLOPs give the MFU; hardware FLOPs, recomputation counted as work, the HFU."""
    return flops / (seconds * n_gpus) / peak


def _mm(tokens: int, k: int, n: int) -> int:
    """FLOPs of a (tokens x k) @ (k x n) matmul: 2·tokens·k·n."""
    return 2 * tokens * k * n


def _core(batch: int, heads: int, q_len: int, kv_len: int, dim: int, causal: bool) -> int:
    """One of QKᵀ or AV over all heads: 2·B·H·q·kv·dim, halved when causal (q == kv)."""
    flops = 2 * batch * heads * q_len * kv_len * dim
    return flops // 2 if causal else flops


def _attention(spec: ModelSpec, prefix: str, batch: int, q_len: int, kv_len: int, causal: bool,
               cross: bool = False, layer: int = 0) -> dict[str, int]:
    """One attention block's forward FLOPs in decoder layer `layer` (its geometry, K/V of its own or not, its
    compressed KV entries and lightning indexer), by op. `cross`: encoder-decoder cross-attention."""
    D, H = spec.d_model, spec.n_heads
    Tq, Tkv = batch * q_len, batch * kv_len
    mla = spec.mla
    if mla is not None and not cross:
        # MLA as the HF/DeepSeek reference runs it (no weight absorption): low-rank Q, a shared KV
        # latent plus a decoupled RoPE key, per-head K/V up-projection (arXiv 2405.04434 sec. 2.1).
        qk = mla.qk_head_dim
        ops = {}
        if mla.q_lora_rank:
            ops["q_a_proj"] = _mm(Tq, D, mla.q_lora_rank)
            ops["q_b_proj"] = _mm(Tq, mla.q_lora_rank, H * qk)
        else:
            ops["q_proj"] = _mm(Tq, D, H * qk)
        ops["kv_a_proj"] = _mm(Tkv, D, mla.kv_lora_rank + mla.qk_rope_head_dim)
        ops["kv_b_proj"] = _mm(Tkv, mla.kv_lora_rank, H * (mla.qk_nope_head_dim + mla.v_head_dim))
        ops["scores"] = _core(batch, H, q_len, kv_len, dim=qk, causal=causal)
        ops["values"] = _core(batch, H, q_len, kv_len, dim=mla.v_head_dim, causal=causal)
        ops["o_proj"] = _mm(Tq, H * mla.v_head_dim, D)
        ops.update(indexer_ops(spec, layer, batch, q_len, causal))
        return {f"{prefix}/{k}": v for k, v in ops.items() if v}
    dh = spec.d_head if cross else spec.layer_d_head(layer)
    kv_heads = H if cross else spec.layer_kv_heads(layer)
    own_k = cross or not spec.kv_shared(layer)  # Gemma 4's KV-shared layers project no K/V of their own
    own_v = cross or spec.has_v_proj(layer)
    q_out = H * dh * (2 if spec.attn_output_gate and not cross else 1)
    r = 0 if cross else spec.query_rank
    # DeepSeek-V4 concatenates its compressed entries to the window's keys (K = V): every query scores them all
    # in eager attention (the causality and the indexer's top-k are masks), 2·B·H·S·(S + Nc)·d_head each.
    keys = kv_len + (0 if cross else spec.compressed_entries(layer, kv_len))
    ops = {
        **({"q_a_proj": _mm(Tq, D, r), "q_b_proj": _mm(Tq, r, q_out)} if r else {"q_proj": _mm(Tq, D, q_out)}),
        "k_proj": _mm(Tkv, D, kv_heads * dh) * own_k,  # GQA/MQA: fewer K/V heads, smaller projections
        "v_proj": _mm(Tkv, D, kv_heads * dh) * own_v,
        "scores": _core(batch, H, q_len, keys, dim=dh, causal=causal),  # QKᵀ: every query head, all keys
        "values": _core(batch, H, q_len, keys, dim=dh, causal=causal),  # AV
        # DeepSeek-V4's grouped output: g bmm blocks (H·d_head/g -> o_lora_rank), then g·o_lora_rank -> D
        **({"o_a_proj": _mm(Tq, H * dh, spec.o_lora_rank), "o_b_proj": _mm(Tq, spec.o_groups * spec.o_lora_rank, D)}
           if spec.o_groups and not cross else {"o_proj": _mm(Tq, H * dh, D)}),
    }
    if not cross:
        ops["compressor"] = _compressor(spec, layer, Tq)
        ops.update(indexer_ops(spec, layer, batch, q_len, causal))
    return {f"{prefix}/{k}": v for k, v in ops.items() if v}


def _compressor(spec: ModelSpec, layer: int, tokens: int) -> int:
    """DeepSeek-V4's KV compressor projections (kv_proj and gate_proj from D: d_head wide in an HCA layer, 2·d_head
    in a CSA layer); its softmax pooling of each window is elementwise."""
    kind, D, dh = spec.compression(layer), spec.d_model, spec.d_head
    return 2 * _mm(tokens, D, dh * (2 if kind == "csa" else 1)) if kind != "none" else 0


def indexer_ops(spec: ModelSpec, layer: int, batch: int, seq: int, causal: bool) -> dict[str, int]:
    """The lightning indexer of layer `layer` ({} where it has none), as transformers runs it:
    - DeepSeek Sparse Attention (modeling_deepseek_v32.py DeepseekV32Indexer; GLM-5): wq_b on the query latent
      (2·T·q·Hi·di), wk (2·T·D·di), weights_proj (2·T·D·Hi); then q·kᵀ against every key, 2·B·S·Hi·di·S, and the
      head weighting weights·scores, 2·B·S·Hi·S (full S², as the counter sees it; --causal halves them);
    - DeepSeek-V4's, in a CSA layer (DeepseekV4Indexer): its compressor's kv_proj and gate_proj (2 x 2·T·D·2·di),
      q_b_proj, weights_proj, and q·kᵀ against the S/m compressed keys, 2·B·S·Hi·di·(S/m) (its weighting is
      elementwise).
    The indexer has no backward: transformers runs the DSA one under no_grad, and the top-k indices that
    DeepSeek-V4's produces carry no gradient (``NO_BACKWARD``)."""
    if not spec.has_indexer(layer):
        return {}
    D, Hi, di, q, T = spec.d_model, spec.index_n_heads, spec.index_head_dim, spec.q_latent, batch * seq
    if spec.compression(layer) == "csa":
        entries = spec.compressed_entries(layer, seq)
        return {"indexer": 2 * _mm(T, D, 2 * di) + _mm(T, q, Hi * di) + _mm(T, D, Hi),
                "indexer_scores": _core(batch, Hi, seq, entries, dim=di, causal=causal)}
    return {"indexer": _mm(T, q, Hi * di) + _mm(T, D, di) + _mm(T, D, Hi),
            "indexer_scores": _core(batch, Hi, seq, seq, dim=di, causal=causal)
            + _core(batch, Hi, seq, seq, dim=1, causal=causal)}


def _hyper_connections(spec: ModelSpec, tokens: int) -> dict[str, int]:
    """DeepSeek-V4's hyper-connections around each sublayer (DeepseekV4HyperConnection, DeepseekV4DecoderLayer):
    the stream projection fn (2·T·n·D·(2+n)·n) and the residual mix comb·streams (2·T·n·n·D), twice per layer."""
    n, D = spec.hc_mult, spec.d_model
    one = _mm(tokens, n * D, (2 + n) * n) + _mm(tokens, n * n, D)
    return {"hyper_connections/attention": one, "hyper_connections/ffn": one} if n else {}


def _per_layer_input(spec: ModelSpec, tokens: int) -> dict[str, int]:
    """Gemma 4's per-layer input in a decoder layer: per_layer_input_gate D -> P, per_layer_projection P -> D."""
    P, D = spec.per_layer_embed_dim, spec.d_model
    return {"per_layer/gate": _mm(tokens, D, P), "per_layer/projection": _mm(tokens, P, D)} if P else {}


def _shared_block(spec: ModelSpec, batch: int, seq: int, causal: bool) -> dict[str, int]:
    """One use of Zamba2's shared block (models/zamba2/modeling_zamba2.py): attention whose q, k, v
    read the 2D-wide concatenation [hidden, embeddings] (head dim d_head = 2D/H), o back to D, the
    gated MLP (gate_up D→2F as one matmul, down F→D), the use's LoRA adapters (x·A then ·B, added to
    gate_up and, with shared_attention_adapters, to q, k, v) and its Linear(D, D)."""
    D, H, dh, F, r = spec.d_model, spec.n_heads, spec.d_head, spec.d_ff, spec.shared_adapter_rank
    T = batch * seq
    ops = {
        "q_proj": _mm(T, 2 * D, H * dh),
        "k_proj": _mm(T, 2 * D, spec.n_kv_heads * dh),
        "v_proj": _mm(T, 2 * D, spec.n_kv_heads * dh),
        "scores": _core(batch, H, seq, seq, dim=dh, causal=causal),
        "values": _core(batch, H, seq, seq, dim=dh, causal=causal),
        "o_proj": _mm(T, H * dh, D),
        "gate_up_proj": _mm(T, D, 2 * F),
        "down_proj": _mm(T, F, D),
        "adapters": _mm(T, D, r) + _mm(T, r, 2 * F) + 3 * (_mm(T, 2 * D, r) + _mm(T, r, 2 * D))
        * spec.shared_attention_adapters,
        "linear": _mm(T, D, D),
    }
    return {f"shared_block/{k}": v for k, v in ops.items()}


def _ffn(spec: ModelSpec, tokens: int, width: int, prefix: str, d_in: int = 0) -> dict[str, int]:
    D = d_in or spec.d_model
    ops = {"gate_proj": _mm(tokens, D, width)} if spec.gated else {}
    ops["up_proj"] = _mm(tokens, D, width)
    ops["down_proj"] = _mm(tokens, width, D)
    return {f"{prefix}/{k}": v for k, v in ops.items()}


def _moe(spec: ModelSpec, tokens: int, prefix: str) -> dict[str, int]:
    """Router over all experts, then each token through its top-k routed experts and the shared-expert
    MLP (width d_ff_shared; Qwen2-MoE adds its sigmoid gate, a D x 1 matmul)."""
    one = sum(_ffn(spec, tokens, spec.d_ff_expert, "x", d_in=spec.expert_d_in).values())  # one expert, all tokens
    shared = sum(_ffn(spec, tokens, spec.d_ff_shared, "x").values()) if spec.n_shared_experts else 0
    ops = {
        f"{prefix}/router": _mm(tokens, spec.d_model, spec.n_experts),
        f"{prefix}/experts": spec.n_experts_per_token * one,
        f"{prefix}/shared_experts": shared + spec.shared_expert_gate * _mm(tokens, spec.d_model, 1),
    }
    if spec.moe_latent_size:  # Nemotron 3 Super: every token D -> latent before the experts, latent -> D after
        ops[f"{prefix}/latent_proj"] = 2 * _mm(tokens, spec.d_model, spec.moe_latent_size)
    return ops


def _add(total: dict[str, int], ops: dict[str, int]) -> None:
    for key, value in ops.items():
        total[key] = total.get(key, 0) + value


def _stack(spec: ModelSpec, stack: str, n_layers: int, batch: int, seq: int, causal: bool,
           enc_seq: int | None = None, recurrent: bool = False) -> dict[str, int]:
    """layer_ops of each layer added up in layer order, each distinct _layer_reads computed once (layers that read
    the same per-layer fields have the same ops: the same dict is added, the same additions in the same order)."""
    out: dict[str, int] = {}
    seen: dict[tuple, dict[str, int]] = {}
    for i in range(n_layers):
        reads = _layer_reads(spec, i, seq)
        ops = seen.get(reads)
        if ops is None:
            ops = seen[reads] = layer_ops(spec, i, batch, seq, causal, stack=stack, enc_seq=enc_seq,
                                          recurrent=recurrent)
        _add(out, ops)
    return out


def _layer_reads(spec: ModelSpec, i: int, seq: int) -> tuple:
    """Every per-layer field layer_ops (and _attention, _compressor, indexer_ops under it) reads of layer i at
    sequence `seq`: its parts (hybrid), MoE or not, dense FFN width, head width, K/V heads, K/V sharing, V projection,
    KV compression and its entries, lightning indexer. Everything else layer_ops reads is the same for every
    layer."""
    return (spec.layer_parts(i) if spec.is_hybrid else None, spec.is_moe_layer(i), spec.layer_d_ff(i),
            spec.layer_d_head(i), spec.layer_kv_heads(i), spec.kv_shared(i), spec.has_v_proj(i), spec.compression(i),
            spec.compressed_entries(i, seq), spec.has_indexer(i))


def layer_ops(spec: ModelSpec, layer: int, batch: int, seq: int, causal: bool = False, stack: str = "",
              enc_seq: int | None = None, recurrent: bool = False) -> dict[str, int]:
    """Forward matmul FLOPs of one decoder (or encoder) layer, by op: its mixers (attention of its own geometry,
    MLA, state-space and linear-attention mixers, DeepSeek-V4's compressor and indexer), its FFN (dense, MoE, or
    both beside each other), Gemma 4's per-layer input and DeepSeek-V4's hyper-connections. What the step-time
    model times layer by layer; ``forward_ops`` sums it over the stack. `recurrent`: the delta-rule mixers' scan
    in its token-by-token (decode) form."""
    out: dict[str, int] = {}
    tokens = batch * seq
    if spec.is_hybrid:  # layer by layer: attention or state-space mixers, an optional FFN
        mixers, ffn = spec.layer_parts(layer)
        for kind in mixers:
            _add(out, _attention(spec, "attention", batch, seq, seq, causal=causal, layer=layer)
                 if kind == "attention" else _shared_block(spec, batch, seq, causal) if kind == "shared_block"
                 else mixer_ops(spec, kind, batch, seq, recurrent=recurrent))
        if ffn is not None:
            _add(out, _moe(spec, tokens, "moe") if ffn == "moe" else _ffn(spec, tokens, spec.d_ff, "mlp"))
        return out
    _add(out, _attention(spec, f"{stack}attention", batch, seq, seq, causal=causal, layer=layer))
    if enc_seq is not None:  # decoder of an encoder-decoder: queries here, keys/values from the encoder
        _add(out, _attention(spec, f"{stack}cross_attention", batch, seq, enc_seq, causal=False, cross=True))
    moe = spec.is_moe_layer(layer)
    if moe:
        _add(out, _moe(spec, tokens, f"{stack}moe"))
    if not moe or spec.moe_dense_parallel:  # Gemma 4 runs its dense MLP beside the experts
        _add(out, _ffn(spec, tokens, spec.layer_d_ff(layer), f"{stack}mlp"))
    _add(out, _per_layer_input(spec, tokens))
    _add(out, _hyper_connections(spec, tokens))
    return out


def forward_ops(spec: ModelSpec, batch: int, seq_len: int, causal: bool = False,
                decoder_seq_len: int | None = None, recurrent: bool = False) -> dict[str, int]:
    """Forward matmul FLOPs per op, "group/op" -> FLOPs, summed over layers, in model order.

    For an encoder-decoder, `seq_len` is the encoder input and `decoder_seq_len` (default the same)
    the decoder input; `causal` applies to decoder self-attention only (encoders are bidirectional).
    `recurrent`: the delta-rule mixers' scan token by token, as a decode step runs it (``ssm.delta_rule_scan``).
    """
    for name, value in (("batch", batch), ("seq_len", seq_len), ("decoder_seq_len", decoder_seq_len)):
        if value is not None:
            positive_int(name, value)
    out: dict[str, int] = {"embedding/lookup": 0}
    E = spec.d_embed or spec.d_model
    if spec.d_embed:  # OPT: project_in from word_embed_proj_dim to d_model (and project_out back)
        out["embedding/project_in"] = _mm(batch * (decoder_seq_len or seq_len), E, spec.d_model)
    if spec.architecture == "encoder-decoder":
        dec = decoder_seq_len or seq_len
        out.update(_stack(spec, "encoder.", spec.n_layers, batch, seq_len, causal=False))
        out.update(_stack(spec, "decoder.", spec.n_decoder_layers, batch, dec, causal=causal, enc_seq=seq_len))
        head_tokens = batch * dec
    elif spec.architecture == "encoder":
        out.update(_stack(spec, "", spec.n_layers, batch, seq_len, causal=False))
        head_tokens = batch * seq_len
    else:
        if spec.per_layer_embed_dim:  # Gemma 4 (Gemma4TextModel.project_per_layer_inputs): D -> L·P, once
            out["embedding/per_layer_projection"] = _mm(batch * seq_len, spec.d_model,
                                                        spec.n_layers * spec.per_layer_embed_dim)
        out.update(_stack(spec, "", spec.n_layers, batch, seq_len, causal=causal, recurrent=recurrent))
        head_tokens = batch * seq_len
    if spec.hc_mult:  # DeepSeek-V4's DeepseekV4HyperHead: hc_fn over the n streams, 2·T·n·D·n
        out["head/hc_head"] = _mm(head_tokens, spec.hc_mult * spec.d_model, spec.hc_mult)
    if spec.pooler:
        out["head/pooler"] = _mm(batch, spec.d_model, spec.d_model)  # [CLS] token only
    if spec.d_embed:
        out["head/project_out"] = _mm(head_tokens, spec.d_model, E)
    if spec.lm_head:
        out["head/lm_head"] = _mm(head_tokens, E, spec.vocab_size)  # tied or not
    return out


def is_attention_core(op: str) -> bool:
    return op.split("/")[0].endswith("attention") and op.split("/")[1] in ATTENTION_CORE


def is_block_op(op: str) -> bool:
    """Ops inside the Transformer blocks (what full recomputation re-runs)."""
    return op.split("/")[0].split(".")[-1] in ("attention", "cross_attention", "mlp", "moe", "per_layer",
                                               "hyper_connections", *SSM_GROUPS)


NO_BACKWARD = ("indexer", "indexer_scores")  # the lightning indexer's ops: no gradient flows through them


def has_backward(op: str) -> bool:
    """Whether an op runs in the backward pass: all but the lightning indexer's (``indexer_ops``)."""
    return op.split("/")[-1] not in NO_BACKWARD


class StepTotals:
    """Hardware FLOPs and per-token figures of a step; a subclass defines `tokens`, `model_flops` and
    `recompute_flops` (full training: StepFlops; LoRA: analytic/finetune.FinetuneFlops)."""

    @property
    def hardware_flops(self) -> float:
        """Model FLOPs plus the forward work recomputation repeats (the numerator of HFU)."""
        return self.model_flops + self.recompute_flops  # type: ignore[attr-defined]  # the subclass's

    @property
    def model_flops_per_token(self) -> float:
        return self.model_flops / self.tokens  # type: ignore[attr-defined]

    @property
    def hardware_flops_per_token(self) -> float:
        return self.hardware_flops / self.tokens  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StepFlops(StepTotals):
    """FLOPs of one training step (forward + backward) for a batch of `tokens` tokens."""

    spec: ModelSpec
    batch: int
    seq_len: int
    causal: bool
    recompute: str
    ops: dict[str, int]  # forward FLOPs per op
    decoder_seq_len: int | None = None

    @property
    def tokens(self) -> int:
        """Tokens processed: B·S (encoder-decoder: B·(S_enc + S_dec))."""
        if self.spec.architecture == "encoder-decoder":
            return self.batch * (self.seq_len + (self.decoder_seq_len or self.seq_len))
        return self.batch * self.seq_len

    @property
    def forward(self) -> int:
        return sum(self.ops.values())

    @property
    def backward(self) -> int:
        """Input gradient + weight gradient, each one forward's worth, for every op but the lightning indexer's
        (no gradient reaches it: ``has_backward``)."""
        return 2 * sum(v for k, v in self.ops.items() if has_backward(k))

    @property
    def model_flops(self) -> int:
        """Forward + backward, no recomputation: the numerator of MFU."""
        return self.forward + self.backward

    @property
    def recompute_flops(self) -> int:
        if self.recompute == "selective":
            return sum(v for k, v in self.ops.items() if is_attention_core(k))
        if self.recompute == "full":
            return sum(v for k, v in self.ops.items() if is_block_op(k))
        return 0

    @property
    def forward_per_token(self) -> float:
        return self.forward / self.tokens

    def groups(self) -> dict[str, int]:
        """Forward FLOPs per group: attention projections, attention core (S²), FFN, head."""
        out: dict[str, int] = {}
        for op, value in self.ops.items():
            out[flop_group(op)] = out.get(flop_group(op), 0) + value
        return out


def flop_group(op: str) -> str:
    """The component an op belongs to: 'attention projections', 'attention S²', 'FFN', 'LM head', ..."""
    group = op.split("/")[0].split(".")[-1]
    if group in ("attention", "cross_attention"):
        return "attention S²" if is_attention_core(op) else "attention projections"
    if group in ("mlp", "moe"):
        return "FFN"
    if group in SSM_GROUPS:
        return "SSM scan" if op.endswith("/scan") else "SSM/conv projections"
    if group == "hyper_connections" or op == "head/hc_head":
        return "hyper-connections"
    if group == "per_layer" or op == "embedding/per_layer_projection":
        return "per-layer inputs"
    if op == "head/lm_head":
        return "LM head"
    if op in EMBED_PROJECTIONS:
        return "embedding projections"
    return "other" if group != "embedding" else "embedding"


def step_flops(spec: ModelSpec, batch: int = 1, seq_len: int = DEFAULT_SEQ_LEN, causal: bool = False,
               recompute: str = "none", decoder_seq_len: int | None = None) -> StepFlops:
    """FLOPs of one training step of `spec` on `batch` sequences of `seq_len` tokens, per operation.

    The forward matmuls come from ``forward_ops`` (2·m·k·n each, FLOPs not MACs); backward is twice
    the forward; `causal` halves the attention S² terms (Megatron-LM/NeMo convention, default full S²
    as PaLM App. B and torch's FlopCounterMode count); `recompute` ("none", "selective", "full") adds
    the re-run forward to the hardware FLOPs only (Korthikanti et al. 2022; Narayanan et al. 2021
    eq. 3). `decoder_seq_len` is the target length of an encoder-decoder (default `seq_len`).
    Raises LlmcalcError for an unknown `recompute`."""
    if recompute not in RECOMPUTE:
        raise LlmcalcError(f"recompute must be one of {', '.join(RECOMPUTE)}; got {recompute!r}")
    ops = forward_ops(spec, batch, seq_len, causal, decoder_seq_len)
    return StepFlops(spec=spec, batch=batch, seq_len=seq_len, causal=causal, recompute=recompute, ops=ops,
                     decoder_seq_len=decoder_seq_len)


def component_flops(ops: dict[str, int]) -> dict[str, int]:
    """Forward FLOPs per component as a profiler reports them: "attention projections",
    "attention S²", "cross-attention ...", "FFN" (per stack prefix), "LM head", "pooler"."""
    out: dict[str, int] = {}
    for op, value in ops.items():
        group, part = op.split("/")
        stack, _, name = group.rpartition(".")
        prefix = f"{stack}." if stack else ""
        if name in ("attention", "cross_attention"):
            label = "cross-attention" if name == "cross_attention" else "attention"
            key = f"{prefix}{label} {'S²' if part in ATTENTION_CORE else 'projections'}"
        elif name in ("mlp", "moe"):
            key = f"{prefix}FFN"
        elif name in SSM_GROUPS:
            key = "SSM scan" if part == "scan" else "SSM/conv projections"
        elif op == "head/lm_head":
            key = "LM head"
        elif op == "head/pooler":
            key = "pooler"
        elif op in EMBED_PROJECTIONS:
            key = "embedding projections"
        elif name == "hyper_connections" or op == "head/hc_head":
            key = "hyper-connections"
        elif name == "per_layer" or op == "embedding/per_layer_projection":
            key = "per-layer inputs"
        else:
            continue  # the embedding lookup: 0 FLOPs
        out[key] = out.get(key, 0) + value
    return out


def counted_step_flops(ops: dict[str, int], recompute: str,
                       recomputing: AbstractSet[str] = frozenset()) -> dict[str, int]:
    """What a FLOP counter sees for forward + backward, per component (the hardware convention).

    Model FLOPs (3 x forward), plus: with full recomputation every block's forward once more; for
    the attention components in `recomputing` (those whose kernel is flash-style), the backward
    recomputes QKᵀ (torch's sdpa_backward_flop_count: 5 matmuls against the forward's 2, i.e. 2.5x).
    """
    out: dict[str, int] = {}
    for op, value in ops.items():
        if op == "embedding/lookup":
            continue
        key = next(iter(component_flops({op: value})))
        extra = value if recompute == "full" and is_block_op(op) else 0
        if key in recomputing and op.endswith("/scores"):
            extra += value
        out[key] = out.get(key, 0) + (3 if has_backward(op) else 1) * value + extra
    return out
