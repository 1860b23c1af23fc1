"""Activation memory: the tensors autograd saves for backward, itemised per block.

Each entry names the tensor it stands for, so a measurement can be held against it term by term.
The itemisation follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", sec. 4.1), generalised from their GPT-3 block to the architecture actually
used: RMSNorm or LayerNorm, gated (SwiGLU/GeGLU) or plain MLPs, GQA/MQA/MLA, MoE, parallel
residuals, Gemma-2 sandwich norms, FlashAttention (no S² buffers) or eager attention.

Conventions:
- `act_bytes` per element for activations (2 for bf16/fp16); dropout masks are 1 byte; norm
  statistics (rstd, LayerNorm's mean) and FlashAttention's logsumexp are fp32.
- A tensor two ops save (the norm output feeding Q, K and V) is counted once: autograd keeps one.
- Scope says how tensor parallelism (t) splits a tensor: "tensor_parallel" is split across t always (inside
  the column/row-parallel region), "sequence_parallel" only with sequence parallelism (norm inputs, the inputs
  of the first linear of each sub-block, residual dropout masks: Korthikanti's "10·sbh"), and
  "attention_scores" marks the attention S² buffers (split across t; dropped by selective recomputation).
  A tensor of K/V heads (``kv_heads`` set) splits across t only down to one head per rank: when
  t > KV heads each rank keeps a replica of one (GQA/MQA), so it is divided by min(t, KV heads).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec

ATTENTION_IMPLS = ("flash", "eager")
RECOMPUTE_MODES = ("none", "selective", "full")
FP32 = 4


@dataclass(frozen=True)
class Saved:
    """One tensor saved for backward, in bytes for the whole micro-batch (one layer)."""

    name: str
    nbytes: float
    scope: str  # "tensor_parallel", "sequence_parallel" or "attention_scores"
    kv_heads: int | None = None  # K/V heads it holds: never split below one per rank

    def per_rank(self, tp: int, sequence_parallel: bool) -> float:
        if self.scope == "sequence_parallel" and not sequence_parallel:
            return self.nbytes
        return self.nbytes / (min(tp, self.kv_heads) if self.kv_heads else tp)


def _norm_saved(spec: ModelSpec, what: str, tokens: int, width: int, act_bytes: float) -> list[Saved]:
    """A norm saves its input and its fp32 statistics (rstd; LayerNorm also the mean)."""
    stats = 2 if spec.norm == "layernorm" else 1
    return [Saved(f"{what} norm input", tokens * width * act_bytes, "sequence_parallel"),
            Saved(f"{what} norm statistics (fp32)", tokens * stats * FP32, "sequence_parallel")]


def _attention_saved(spec: ModelSpec, tokens: int, batch: int, seq: int, act_bytes: float, attention: str,
                     dropout: bool, layer: int = 0) -> list[Saved]:
    H = spec.n_heads
    out: list[Saved] = []
    mla = spec.mla
    keys = seq
    if mla is not None:
        qk = mla.qk_head_dim
        v_dim = mla.v_head_dim
        if mla.q_lora_rank:
            out += [Saved("q_a output (q_a_norm input)", tokens * mla.q_lora_rank * act_bytes, "sequence_parallel"),
                    Saved("q_a_norm statistics (fp32)", tokens * FP32, "sequence_parallel"),
                    Saved("q_b input (normed q latent)", tokens * mla.q_lora_rank * act_bytes, "sequence_parallel")]
        out += [Saved("kv_a output: KV latent (kv_a_norm input)", tokens * mla.kv_lora_rank * act_bytes,
                      "sequence_parallel"),
                Saved("kv_a_norm statistics (fp32)", tokens * FP32, "sequence_parallel"),
                Saved("kv_b input (normed KV latent)", tokens * mla.kv_lora_rank * act_bytes, "sequence_parallel"),
                Saved("Q, K after RoPE, V (attention inputs)", tokens * H * (2 * qk + v_dim) * act_bytes,
                      "tensor_parallel")]
    else:
        dh, kv = spec.layer_d_head(layer), spec.layer_kv_heads(layer)
        v_dim = dh
        if spec.query_rank:  # DeepSeek-V4's low-rank query: the latent before and after its norm
            r = spec.query_rank
            out += [Saved("q_a output (q_a_norm input)", tokens * r * act_bytes, "sequence_parallel"),
                    Saved("q_a_norm statistics (fp32)", tokens * FP32, "sequence_parallel"),
                    Saved("q_b input (normed q latent)", tokens * r * act_bytes, "sequence_parallel")]
        out.append(Saved("Q after RoPE (attention input)", tokens * H * dh * act_bytes, "tensor_parallel"))
        if not spec.kv_shared(layer):  # Gemma 4's KV-shared layers read tensors an earlier layer saved
            # K and V apart, or DeepSeek-V4's one K = V tensor, which also carries the compressed entries
            kv_tensors = 1 if spec.k_eq_v == "all" else 2
            keys = seq + spec.compressed_entries(layer, seq)
            out.append(Saved("K after RoPE, V (attention inputs; GQA: unexpanded)",
                             batch * keys * kv_tensors * kv * dh * act_bytes, "tensor_parallel", kv))
        if spec.compression(layer) != "none":  # the compressor's kv and gate projections and its softmax weights
            width = dh * (2 if spec.compression(layer) == "csa" else 1)
            out += [Saved("compressor kv and gate projections", tokens * 2 * width * act_bytes, "sequence_parallel"),
                    Saved("compressor window weights (fp32 softmax)", tokens * width * FP32, "sequence_parallel")]
    if attention == "flash":  # sdpa flash/efficient: saves its output and fp32 logsumexp, no S²
        out += [Saved("attention output O (saved by sdpa)", tokens * H * v_dim * act_bytes, "tensor_parallel"),
                Saved("attention logsumexp (fp32)", tokens * H * FP32, "tensor_parallel")]
    else:  # eager: softmax output P (B·H·S²), needed by softmax backward and by P @ V
        scores = batch * H * seq * keys
        out.append(Saved("softmax output P (B·H·S²)", scores * act_bytes, "attention_scores"))
        if dropout:
            out += [Saved("attention-probs dropout mask (B·H·S², 1 byte)", scores, "attention_scores"),
                    Saved("dropout(P), the AV input (B·H·S²)", scores * act_bytes, "attention_scores")]
    out.append(Saved("O-projection input (heads merged)", tokens * H * v_dim * act_bytes, "tensor_parallel"))
    if spec.o_groups and mla is None:  # DeepSeek-V4's grouped output: the g·o_lora_rank latent feeds o_b_proj
        out.append(Saved("o_b input (grouped output latent)", tokens * spec.o_groups * spec.o_lora_rank * act_bytes,
                         "tensor_parallel"))
    return out


def _extras_saved(spec: ModelSpec, tokens: int, act_bytes: float) -> list[Saved]:
    """Gemma 4's per-layer input (the gate's output and its activation, the projection input) and DeepSeek-V4's
    hyper-connections (per sublayer: the n streams, their fp32 normed copy and the (2+n)·n mixing weights, fp32;
    the lightning indexer saves nothing, it has no backward)."""
    out: list[Saved] = []
    P, n, D = spec.per_layer_embed_dim, spec.hc_mult, spec.d_model
    if P:
        out += [Saved("per-layer input gate output (activation input)", tokens * P * act_bytes, "tensor_parallel"),
                Saved("per-layer projection input (gated, times the per-layer embedding)", tokens * P * act_bytes,
                      "tensor_parallel"),
                Saved("per-layer input residual (post_per_layer_input_norm input)", tokens * D * act_bytes,
                      "sequence_parallel")]
    for where in ("attention", "FFN") if n else ():
        out += [Saved(f"{where} hyper-connection input streams (n·D)", tokens * n * D * act_bytes, "sequence_parallel"),
                Saved(f"{where} hyper-connection normed streams (fp32, n·D)", tokens * n * D * FP32,
                      "sequence_parallel"),
                Saved(f"{where} hyper-connection weights (fp32, (2+n)·n)", tokens * (2 + n) * n * FP32,
                      "sequence_parallel")]
    return out


def _mlp_saved(spec: ModelSpec, tokens: float, width: int, act_bytes: float, what: str = "MLP") -> list[Saved]:
    names: tuple[str, ...]
    if spec.gated:  # gate = x Wg, a = act(gate), u = x Wu, y = (a * u) Wd
        names = ("gate output (activation input)", "activation output", "up output", "down-projection input")
    else:  # y = act(x W1) W2
        names = ("fc1 output (activation input)", "activation output (fc2 input)")
    return [Saved(f"{what} {n}", tokens * width * act_bytes, "tensor_parallel") for n in names]


def _moe_saved(spec: ModelSpec, tokens: int, act_bytes: float) -> list[Saved]:
    """Router softmax (fp32) and, per routed token copy, the expert input, the expert MLP's saved
    tensors and the expert output that the weighted combine multiplies (top-k copies per token), each of the
    experts' width (the MoE latent where there is one: Nemotron 3 Super, whose fc2_latent_proj saves its latent
    input, one per token)."""
    k, width = spec.n_experts_per_token, spec.expert_d_in
    out = [Saved("router probabilities (fp32)", tokens * spec.n_experts * FP32, "tensor_parallel"),
           Saved("routed expert inputs (top-k copies)", tokens * k * width * act_bytes, "tensor_parallel")]
    out += _mlp_saved(spec, tokens * k, spec.d_ff_expert, act_bytes, "expert")
    out.append(Saved("routed expert outputs (weighted in the combine)", tokens * k * width * act_bytes,
                     "tensor_parallel"))
    if spec.moe_latent_size:
        out.append(Saved("latent projection input (fc2_latent_proj)", tokens * width * act_bytes, "tensor_parallel"))
    if spec.n_shared_experts:
        out += _mlp_saved(spec, tokens, spec.d_ff_shared, act_bytes, "shared-expert")
    return out


def layer_saved(spec: ModelSpec, layer: int, batch: int, seq: int, act_bytes: float, attention: str = "flash",
                dropout: bool = False) -> list[Saved]:
    """Tensors one decoder block saves for backward (no recomputation), for `batch` x `seq` tokens."""
    if attention not in ATTENTION_IMPLS:
        raise LlmcalcError(f"attention must be one of {', '.join(ATTENTION_IMPLS)}; got {attention!r}")
    tokens = batch * seq
    D = spec.d_model
    if spec.is_hybrid:
        return _hybrid_layer_saved(spec, layer, batch, seq, act_bytes=act_bytes, attention=attention, dropout=dropout)
    out: list[Saved] = []
    # Norm inputs: sequential pre-LN normalises x and then h = x + attn; a parallel block
    # normalises x once (one norm, or two norms reading the same x: NeoX, Falcon-40B).
    out += _norm_saved(spec, "attention", tokens, D, act_bytes)
    if not spec.parallel_residual:
        out += _norm_saved(spec, "MLP", tokens, D, act_bytes)
    elif spec.norms_per_layer == 2:  # second norm of x: its own statistics, x itself already saved
        out.append(Saved("MLP norm statistics (fp32)", tokens * (2 if spec.norm == "layernorm" else 1) * FP32,
                         "sequence_parallel"))
    if spec.norms_per_layer == 4:  # Gemma-2: post-attention and post-FFN norms of the sub-block outputs
        out += _norm_saved(spec, "post-attention", tokens, D, act_bytes)
        out += _norm_saved(spec, "post-FFN", tokens, D, act_bytes)
    out.append(Saved("attention input (norm output)", tokens * D * act_bytes, "sequence_parallel"))
    out += _attention_saved(spec, tokens, batch, seq, act_bytes=act_bytes, attention=attention, dropout=dropout,
                            layer=layer)
    if not (spec.parallel_residual and spec.norms_per_layer == 1):  # one shared norm output otherwise
        out.append(Saved("MLP input (norm output)", tokens * D * act_bytes, "sequence_parallel"))
    moe = spec.is_moe_layer(layer)
    if moe:
        out += _moe_saved(spec, tokens, act_bytes)
    if not moe or spec.moe_dense_parallel:  # Gemma 4: the dense MLP beside the experts, its own norms
        out += _mlp_saved(spec, tokens, spec.layer_d_ff(layer), act_bytes)
    if moe and spec.moe_dense_parallel:
        out += _norm_saved(spec, "expert pre-FFN", tokens, D, act_bytes)
        out += _norm_saved(spec, "MLP post-FFN", tokens, D, act_bytes)
        out += _norm_saved(spec, "expert post-FFN", tokens, D, act_bytes)
    out += _extras_saved(spec, tokens, act_bytes)
    if dropout:
        out += [Saved("attention residual dropout mask (1 byte)", tokens * D, "sequence_parallel"),
                Saved("MLP residual dropout mask (1 byte)", tokens * D, "sequence_parallel")]
    return out


def _mamba_saved(spec: ModelSpec, kind: str, batch: int, seq: int, act_bytes: float) -> list[Saved]:
    """What mamba_ssm's fused training kernels save for backward (they recompute the rest):
    - Mamba-1, MambaInnerFn (ops/selective_scan_interface.py, checkpoint_lvl=1, conv output and Δ
      recomputed): xz = in_proj output (T·2E), x_dbl = x_proj output (T·(R+2N)), the scan output
      (T·E) and the scan's chunk states (B·E·ceil(S/2048)·2N, fp32);
    - Mamba-2, MambaSplitConv1dScanCombinedFn (ops/triton/ssd_combined.py): zxbcdt = in_proj output
      (T·(2E+2GN+H)), the SSD output before the gated norm (T·E), and the norm's rstd (T·G, fp32).
    The in_proj input (the norm output) is saved by the in_proj matmul (counted by the caller)."""
    T, E, N = batch * seq, spec.ssm_d_inner, spec.ssm_d_state
    if kind == "short_conv":  # LFM2 through autograd (no fused kernel): B, C, x are views of in_proj's output
        D = spec.d_model
        return [Saved("short-conv in_proj output (B, C, x)", T * 3 * D * act_bytes, "tensor_parallel"),
                Saved("short-conv conv input B·x", T * D * act_bytes, "tensor_parallel"),
                Saved("short-conv conv output", T * D * act_bytes, "tensor_parallel"),
                Saved("short-conv out_proj input C·conv", T * D * act_bytes, "tensor_parallel")]
    if kind == "kda":  # fla's chunk_kda keeps q, k, v (conv outputs), the per-channel decay g and beta
        G, H = spec.ssm_n_groups, spec.ssm_n_heads
        dv = E // H
        return [Saved("KDA projections q, k, v (conv inputs)", T * (2 * G * N + E) * act_bytes, "tensor_parallel"),
                Saved("KDA conv outputs q, k, v (kernel inputs)", T * (2 * G * N + E) * act_bytes, "tensor_parallel"),
                Saved("KDA forget-gate and output-gate latents (rank d)", T * (N + dv) * act_bytes, "tensor_parallel"),
                Saved("KDA per-channel decay g (fp32)", T * G * N * FP32, "tensor_parallel"),
                Saved("KDA output gate (gated-norm gate)", T * E * act_bytes, "tensor_parallel"),
                Saved("KDA output (gated-norm input)", T * E * act_bytes, "tensor_parallel"),
                Saved("KDA gated-norm rstd (fp32)", T * H * FP32, "tensor_parallel")]
    if kind == "gated_deltanet":  # fla's chunk_gated_delta_rule keeps q, k, v (conv outputs), g and beta
        G, H = spec.ssm_n_groups, spec.ssm_n_heads
        return [Saved("Gated DeltaNet in_proj outputs (q, k, v, z, b, a)",
                      T * (2 * G * N + 2 * E + 2 * H) * act_bytes, "tensor_parallel"),
                Saved("Gated DeltaNet conv outputs q, k, v (kernel inputs)", T * (2 * G * N + E) * act_bytes,
                      "tensor_parallel"),
                Saved("Gated DeltaNet output (gated-norm input)", T * E * act_bytes, "tensor_parallel"),
                Saved("Gated DeltaNet gated-norm rstd (fp32)", T * H * FP32, "tensor_parallel")]
    if kind == "mamba":
        chunks = -(-seq // 2048)
        return [Saved("Mamba in_proj output xz", T * 2 * E * act_bytes, "tensor_parallel"),
                Saved("Mamba x_proj output (dt, B, C)", T * (spec.ssm_dt_rank + 2 * N) * act_bytes, "tensor_parallel"),
                Saved("Mamba scan output", T * E * act_bytes, "tensor_parallel"),
                Saved("Mamba scan chunk states (fp32)", batch * E * chunks * 2 * N * FP32, "tensor_parallel")]
    G, H = spec.ssm_n_groups, spec.ssm_n_heads
    out = [Saved("Mamba-2 in_proj output zxbcdt", T * (2 * E + 2 * G * N + H) * act_bytes, "tensor_parallel"),
           Saved("Mamba-2 SSD output (gated-norm input)", T * E * act_bytes, "tensor_parallel")]
    if spec.ssm_norm:
        out.append(Saved("Mamba-2 gated-norm rstd (fp32)", T * G * FP32, "tensor_parallel"))
    return out


def _shared_block_saved(spec: ModelSpec, batch: int, seq: int, act_bytes: float, attention: str,
                        dropout: bool) -> list[Saved]:
    """One use of Zamba2's shared block: the RMSNorm over the 2D-wide [hidden, embeddings] input and
    its output (the q, k, v and q/k/v-adapter input), the attention's own tensors, the pre-FFN norm
    and MLP (gate_up is one matmul), the adapters' rank-r inner activations, and the block output
    that the use's Linear(D, D) saves."""
    tokens, D, r = batch * seq, spec.d_model, spec.shared_adapter_rank
    out = _norm_saved(spec, "shared block", tokens, 2 * D, act_bytes)
    out.append(Saved("shared block attention input (norm output, 2D)", tokens * 2 * D * act_bytes, "sequence_parallel"))
    out += _attention_saved(spec, tokens, batch, seq, act_bytes=act_bytes, attention=attention, dropout=dropout)
    out += _norm_saved(spec, "shared block MLP", tokens, D, act_bytes)
    out.append(Saved("shared block MLP input (norm output)", tokens * D * act_bytes, "sequence_parallel"))
    out += _mlp_saved(spec, tokens, spec.d_ff, act_bytes, what="shared block MLP")
    adapters = 1 + 3 * spec.shared_attention_adapters
    out.append(Saved("shared block adapter inner activations (rank r)", tokens * adapters * r * act_bytes,
                     "sequence_parallel"))
    out.append(Saved("shared block output (Linear input)", tokens * D * act_bytes, "sequence_parallel"))
    return out


def _hybrid_layer_saved(spec: ModelSpec, layer: int, batch: int, seq: int, act_bytes: float, attention: str,
                        dropout: bool) -> list[Saved]:
    """A hybrid layer: per pre-normed part (mixer, FFN) its norm's saved tensors and the norm output
    the part's first matmul saves, then the part's own tensors (attention, Mamba, MLP or MoE)."""
    tokens, D = batch * seq, spec.d_model
    mixers, ffn = spec.layer_parts(layer)
    out: list[Saved] = []
    if "shared_block" in mixers:  # Zamba2: the shared block runs first, on its own norms
        out += _shared_block_saved(spec, batch, seq, act_bytes, attention=attention, dropout=dropout)
        mixers = tuple(m for m in mixers if m != "shared_block")
    if mixers:
        what = "/".join(mixers)
        out += _norm_saved(spec, what, tokens, D, act_bytes)
        out.append(Saved(f"{what} input (norm output)", tokens * D * act_bytes, "sequence_parallel"))
        for kind in mixers:
            out += (_attention_saved(spec, tokens, batch, seq, act_bytes=act_bytes, attention=attention,
                                     dropout=dropout, layer=layer) if kind == "attention"
                    else _mamba_saved(spec, kind, batch, seq, act_bytes))
    if ffn:
        out += _norm_saved(spec, "MLP", tokens, D, act_bytes)
        out.append(Saved("MLP input (norm output)", tokens * D * act_bytes, "sequence_parallel"))
        out += _moe_saved(spec, tokens, act_bytes) if ffn == "moe" else _mlp_saved(spec, tokens, spec.d_ff, act_bytes)
    if dropout:
        out += [Saved("residual dropout masks (1 byte)", tokens * D * spec.norms_in_layer(layer), "sequence_parallel")]
    return out


def scaled(items: list[Saved], tp: int, sequence_parallel: bool) -> float:
    """Bytes per GPU of a layer's saved tensors under tensor parallelism t (Korthikanti Table 2)."""
    return sum(s.per_rank(tp, sequence_parallel) for s in items)


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation bytes per GPU for one micro-batch, by kind, and the recomputation working set."""

    per_layer: dict[str, float]  # saved tensor name -> bytes per GPU, summed over this GPU's layers
    recompute_working_set: float  # full recompute: one layer's activations rebuilt during backward
    logits_and_loss: float  # logits and the cross-entropy buffers (on the GPU that holds the head)
    # For the phases of the backward (memory.MemoryEstimate.phase_components), per GPU, one micro-batch:
    largest_layer: float = 0.0  # the largest block's tensors with nothing recomputed: a block in its backward
    own_layer: float = 0.0  # that block's saved tensors under this recomputation (a checkpoint under full)
    head_saved: float = 0.0  # the final norm's and LM head's saved inputs (freed before the blocks' backward)
    in_flight: int | float = 1  # micro-batches held at once, in whole stages (a 1F1B first stage: pp; memory.in_flight)
    loss_impl: str = "full"  # how logits_and_loss was counted (full_logits_bytes or fused_loss_bytes)

    @property
    def total(self) -> float:
        return sum(self.per_layer.values()) + self.recompute_working_set + self.logits_and_loss


def stage_activations(blocks: ActivationEstimate, head: ActivationEstimate | None,
                      in_flight: int | float) -> ActivationEstimate:
    """activation_memory(layers, in_flight, head=head is not None) from its parts, float for float: `blocks`, the
    same layers' at one micro-batch without the head (head=False), each tensor x `in_flight`; `head`, the final
    norm's, LM head's and loss's alone (layers=range(0), head=True), its tensors put in as activation_memory puts
    them. A layout search keeps the parts and pairs them with each pipeline rank's micro-batches in flight."""
    per_layer = {name: value * in_flight for name, value in blocks.per_layer.items()} if in_flight != 1 \
        else dict(blocks.per_layer)
    logits = head_saved = 0.0
    if head is not None:
        for name, value in head.per_layer.items():
            per_layer[name] = value
        logits, head_saved = head.logits_and_loss, head.head_saved
    return ActivationEstimate(per_layer, blocks.recompute_working_set, logits, largest_layer=blocks.largest_layer,
                              own_layer=blocks.own_layer, head_saved=head_saved, in_flight=in_flight,
                              loss_impl=blocks.loss_impl)


def layer_terms(spec: ModelSpec, layer: int, batch: int, seq: int, act_bytes: float, recompute: str, attention: str,
                dropout: bool, tp: int, sequence_parallel: bool) -> tuple[list[tuple[str, float]], float, float]:
    """One block's part of activation_memory, per GPU and micro-batch: the (name, bytes) of what it keeps under
    `recompute` ("full": its input, the checkpoint; "selective": all but the S² buffers), its whole saved size with
    nothing recomputed (what it holds in its backward), and the size of what it keeps."""
    items = layer_saved(spec, layer, batch, seq, act_bytes=act_bytes, attention=attention, dropout=dropout)
    return kept_terms(spec, items, batch * seq, act_bytes, recompute=recompute, tp=tp,
                      sequence_parallel=sequence_parallel)


def kept_terms(spec: ModelSpec, items: list[Saved], tokens: int, act_bytes: float, *, recompute: str, tp: int,
               sequence_parallel: bool, ranks: list[float] | None = None) -> tuple[list[tuple[str, float]], float,
                                                                                    float]:
    """layer_terms from the block's layer_saved `items` (of `tokens` = batch x seq tokens): the saved tensors are
    the same whatever the recomputation and tp, so a caller may list them once and keep them for each. Each
    item's per-rank bytes are taken once (`ranks`, given: the same whatever the recomputation, so a caller may keep
    them for each): `scaled` sums the same values in the same order."""
    ranks = [s.per_rank(tp, sequence_parallel) for s in items] if ranks is None else ranks
    whole = sum(ranks)
    if recompute == "full":
        checkpoint = Saved("block input (full recomputation checkpoint)", tokens * spec.d_model * act_bytes,
                           "sequence_parallel")
        kept = [(checkpoint.name, checkpoint.per_rank(tp, sequence_parallel))]
    elif recompute == "selective":
        kept = [(s.name, r) for s, r in zip(items, ranks, strict=True) if s.scope != "attention_scores"]
    else:
        kept = [(s.name, r) for s, r in zip(items, ranks, strict=True)]
    return kept, whole, sum([r for _, r in kept])


def full_logits_bytes(tokens: int, vocab: int, act_bytes: float) -> float:
    """Logits and cross-entropy as transformers' ForCausalLMLoss runs them (HF Trainer's default): the whole
    tokens x V logits tensor is materialised.

    At the end of forward: the logits (act dtype), their fp32 copy (`logits.float()`) and the fp32 log-probs
    cross-entropy saves (10 bytes per logit in bf16, 8 in fp32); at the start of backward the saved log-probs, their
    gradient and the logits' fp32 gradient (12 bytes): the larger of the two, while every block's activations are
    still alive. Llama-3-8B at 4,096 tokens: 4,096 x 128,256 x 12 B = 5.87 GiB.
    """
    forward_end = act_bytes + (FP32 if act_bytes != FP32 else 0) + FP32
    return tokens * vocab * max(forward_end, 3 * FP32)


def fused_chunk_tokens(tokens: int, vocab: int, d_model: int) -> int:
    """Tokens per chunk of Liger-Kernel's fused linear cross-entropy: chunk = next_pow2(ceil(BT / ceil(V / H))),
    so one chunk of logits (chunk x V) is about as large as the hidden states (BT x H); at most BT.

    Source: linkedin/Liger-Kernel, src/liger_kernel/ops/fused_linear_cross_entropy.py,
    fused_linear_cross_entropy_forward (`inc_factor = triton.cdiv(V, chunk_mem_const * H)` with chunk_mem_const 1,
    `chunk_size = min(triton.next_power_of_2(triton.cdiv(BT, inc_factor)), BT)`); Llama-3-8B at 4,096 tokens:
    inc 32, chunk 128.
    """
    inc_factor = -(-vocab // d_model)
    per_chunk = -(-tokens // inc_factor)
    return min(1 << (per_chunk - 1).bit_length(), tokens)


def fused_loss_bytes(tokens: int, vocab: int, d_model: int, act_bytes: float) -> float:
    """Liger-Kernel's fused linear cross-entropy (LigerFusedLinearCrossEntropyLoss, `use_liger_kernel=True` in HF
    Trainer): the head's matmul, the loss and its gradient run chunk by chunk inside the forward, so the tokens x V
    logits never exist whole.

    bytes = chunk x V x act_bytes (one chunk of logits, overwritten in place by its gradient)
          + BT x H x act_bytes (grad_input: the gradient of the head's input, kept for the backward)
          + BT x 4 (the fp32 per-token loss)
    The head's weight gradient (V x H) is allocated only when the head trains: never with LoRA/QLoRA (the head is
    frozen), the case this is used for. Source: linkedin/Liger-Kernel, src/liger_kernel/ops/
    fused_linear_cross_entropy.py (`grad_input = torch.zeros_like(_input)`, `loss_1d = torch.zeros(BT,
    dtype=torch.float32)`, `logits_chunk = _input_chunk @ weight.t()`); Hsu et al. 2024, "Liger Kernel", arXiv
    2410.10989, sec. 3.
    """
    return (fused_chunk_tokens(tokens, vocab, d_model) * vocab * act_bytes + tokens * d_model * act_bytes
            + tokens * FP32)


def activation_memory(spec: ModelSpec, batch: int, seq: int, act_bytes: float, recompute: str = "none",
                      attention: str = "flash", dropout: bool = False, tp: int = 1, sequence_parallel: bool = True,
                      layers: range | None = None, in_flight: int | float = 1, head: bool = True,
                      loss_impl: str = "full", terms_of: Callable[..., tuple] | None = None) -> ActivationEstimate:
    """Activations per GPU for a decoder-only model, for the blocks in `layers` (default all).

    - recompute "none": every block's saved tensors; "selective": minus the S² buffers
      (Korthikanti sec. 5: recompute the attention core); "full": each block keeps only its input
      (B·S·D), and one block is rebuilt at a time during backward (the working set).
    - `in_flight`: micro-batches whose activations are held at once (a 1F1B pipeline's first stage
      holds p of them, Korthikanti sec. 4.2.3).
    - `head`: count the final norm, LM head and loss buffers (the last pipeline stage has them).
    - `loss_impl`: "full", the logits and cross-entropy as HF Trainer runs them (`full_logits_bytes`), or "fused",
      Liger-Kernel's fused linear cross-entropy (`fused_loss_bytes`; one GPU: it does not split the vocabulary).
    - `terms_of`: what gives each block's terms, `layer_terms` or a memo of it with its arguments (a layout search's
      ``memory.MemoryTables``).
    """
    if recompute not in RECOMPUTE_MODES:
        raise LlmcalcError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}; got {recompute!r}")
    if loss_impl not in ("full", "fused"):
        raise LlmcalcError(f"--loss-impl must be full or fused, got {loss_impl!r}")
    if spec.architecture != "decoder":
        raise LlmcalcError(f"activation memory covers decoder-only models; {spec.name} is {spec.architecture}")
    layers = range(spec.n_layers) if layers is None else layers
    terms_of = layer_terms if terms_of is None else terms_of
    per_layer: dict[str, float] = {}
    largest = own = 0.0
    runs: list[list] = []  # [terms, how many] of each run of consecutive blocks that keep the same tensors
    for i in layers:
        terms, whole, kept = terms_of(spec, i, batch, seq, act_bytes, recompute=recompute, attention=attention,
                                      dropout=dropout, tp=tp, sequence_parallel=sequence_parallel)
        if whole > largest:
            largest, own = whole, kept
        if runs and (runs[-1][0] is terms or runs[-1][0] == terms):
            runs[-1][1] += 1
        else:
            runs.append([terms, 1])
    for terms, count in runs:  # each tensor's bytes x the blocks of the run, then x the micro-batches in flight
        for name, value in terms:
            per_layer[name] = per_layer.get(name, 0.0) + value * count
    if in_flight != 1:
        per_layer = {name: value * in_flight for name, value in per_layer.items()}
    tokens = batch * seq
    final = _norm_saved(spec, "final", tokens, spec.d_model, act_bytes) + [
        Saved("LM-head input (final norm output)", tokens * spec.d_model * act_bytes, "sequence_parallel")]
    logits = head_saved = 0.0
    if head:
        for s in final:
            per_layer[s.name] = s.nbytes / (tp if sequence_parallel else 1)
            head_saved += per_layer[s.name]
        logits = (full_logits_bytes(tokens, spec.vocab_size, act_bytes) / tp if loss_impl == "full" else
                  fused_loss_bytes(tokens, spec.vocab_size, spec.d_model, act_bytes))
    return ActivationEstimate(per_layer, largest if recompute == "full" else 0.0, logits, largest_layer=largest,
                              own_layer=own, head_saved=head_saved, in_flight=in_flight, loss_impl=loss_impl)
