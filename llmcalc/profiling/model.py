"""The reference PyTorch model built from a ModelSpec: the same shapes the formulas describe.

Module names map onto the analytic breakdown's keys (``component_of``): `layers.3.attention.k_proj`
is "attention/k_proj", `encoder.layers.0.mlp.up_proj` is "encoder.mlp/up_proj". Every family the
analytic side reads is built: pre-norm (LLaMA, Mistral, Qwen2, Gemma, Phi-3, OLMo, DeepSeek),
parallel-residual (GPT-NeoX, Falcon), Gemma-2 sandwich norms, post-norm (BERT, the 2017
Transformer), learned/sinusoidal/rotary/ALiBi/T5-relative positions, MHA/GQA/MQA through sdpa
(`enable_gqa`, K/V never expanded), MLA, and MoE (router, top-k routed experts run only on the
tokens routed to them, shared experts). The current-generation details are built too: QK-norm
(per head or over all heads), biased routers and experts, Qwen2-MoE's shared-expert gate, explicit
MoE layer lists, an LM-head bias, OPT's project_in/out, and gpt-oss attention sinks (a learned
logit per head that joins the softmax; exact in eager attention; sdpa has no input for it, so there
the sink parameters are held but unused: they add no matmul either way).

Two choices that matter for memory measurements, both as fused training kernels behave:
RMSNorm saves only its input and an fp32 rstd (torch's composite rms_norm on CPU keeps three fp32
tensors), and attention is sdpa (FlashAttention on GPU and CPU: no B·H·S² buffers) unless
``attention="eager"``. ``routing="balanced"`` sends each token to k experts by a fixed pattern
(token t, slot j -> expert (t·k + j) mod E): the same FLOPs as learned routing, without the
data-dependent shapes that FakeTensorMode cannot follow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import LlmcalcError
from ..spec import ModelSpec

ACTIVATIONS = {"swiglu": F.silu, "silu": F.silu, "geglu": lambda x: F.gelu(x, approximate="tanh"),
               "gelu": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu,
               "relu2": lambda x: F.relu(x).square()}


class _RMSNormFn(torch.autograd.Function):
    """y = x / rms(x) * w, computed in fp32; saves x (its own dtype) and rstd (fp32) only."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        y = xf * rstd
        return (y * weight.float() if weight is not None else y).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, rstd, weight = ctx.saved_tensors
        xhat = x.float() * rstd
        g = grad.float()
        grad_w = (g * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype) if weight is not None else None
        if weight is not None:
            g = g * weight.float()
        grad_x = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_w, None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, affine: bool = True, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.eps = eps

    def forward(self, x):
        return _RMSNormFn.apply(x, self.weight, self.eps)


def make_norm(spec: ModelSpec, dim: int | None = None) -> nn.Module:
    dim = dim or spec.d_model
    if spec.norm == "rmsnorm":
        return RMSNorm(dim, spec.norm_affine)
    return nn.LayerNorm(dim, elementwise_affine=spec.norm_affine, bias=bool(spec.norm_bias))


def make_qk_norm(spec: ModelSpec, dim: int) -> nn.Module:
    """A QK-norm over `dim` features: RMSNorm, or LayerNorm when it carries a bias (Phi)."""
    return nn.LayerNorm(dim, bias=True) if spec.qk_norm_bias else RMSNorm(dim)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary embedding over the last dim of x (B, H, S, d) (Su et al. 2021), rotate-half layout."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = torch.outer(positions.float(), inv)
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def t5_buckets(q_len: int, k_len: int, buckets: int, bidirectional: bool, device, max_distance: int = 128):
    """T5's relative-position buckets (Raffel et al. 2020, modeling_t5._relative_position_bucket)."""
    rel = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
    out = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        out += (rel > 0).long() * buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    exact = buckets // 2
    large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).long()
    return out + torch.where(rel < exact, rel, large.clamp(max=buckets - 1))


def alibi_bias(heads: int, q_len: int, k_len: int, device, dtype) -> torch.Tensor:
    """ALiBi (Press et al. 2022): head h adds -slope_h x distance; slopes 2^(-8h/H)."""
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device=device)
    dist = (torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]).abs()
    return (-slopes[:, None, None] * dist).to(dtype)


class Attention(nn.Module):
    """Self- or cross-attention with GQA/MQA or MLA projections, through sdpa (or eager)."""

    def __init__(self, spec: ModelSpec, cross: bool = False, relative_bias: bool = False, attention: str = "sdpa"):
        super().__init__()
        D, H = spec.d_model, spec.n_heads
        self.spec, self.cross, self.attention = spec, cross, attention
        self.mla = None if cross else spec.mla
        self.kv_heads = H if cross else spec.n_kv_heads
        mla = self.mla
        if mla is not None:
            qk = mla.qk_head_dim
            if mla.q_lora_rank:
                # attention_bias: q_a_proj, kv_a_proj_with_mqa, o_proj (modeling_deepseek_v3.py DeepseekV3Attention)
                self.q_a_proj = nn.Linear(D, mla.q_lora_rank, bias=spec.qkv_bias)
                self.q_a_norm = RMSNorm(mla.q_lora_rank)
                self.q_b_proj = nn.Linear(mla.q_lora_rank, H * qk, bias=False)
            else:
                self.q_proj = nn.Linear(D, H * qk, bias=False)
            self.kv_a_proj = nn.Linear(D, mla.kv_lora_rank + mla.qk_rope_head_dim, bias=spec.qkv_bias)
            self.kv_a_norm = RMSNorm(mla.kv_lora_rank)
            self.kv_b_proj = nn.Linear(mla.kv_lora_rank, H * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
            self.o_proj = nn.Linear(H * mla.v_head_dim, D, bias=spec.out_bias)
        else:
            dh = spec.d_head
            self.q_proj = nn.Linear(D, H * dh, bias=spec.qkv_bias)
            self.k_proj = nn.Linear(D, self.kv_heads * dh, bias=spec.qkv_bias)
            self.v_proj = nn.Linear(D, self.kv_heads * dh, bias=spec.qkv_bias)
            self.o_proj = nn.Linear(H * dh, D, bias=spec.out_bias)
            if spec.qk_norm != "none" and not cross:  # "head": over d_head; "full": over all heads' width
                self.q_norm = make_qk_norm(spec, dh if spec.qk_norm == "head" else H * dh)
                self.k_norm = make_qk_norm(spec, dh if spec.qk_norm == "head" else self.kv_heads * dh)
            if spec.attention_sinks and not cross:
                self.sinks = nn.Parameter(torch.zeros(H))
        if relative_bias:  # T5: one table per stack, in its first block
            self.relative_position_bias = nn.Embedding(spec.rel_pos_buckets, H)

    def _heads(self, x, heads, dim):
        B, S, _ = x.shape  # -1 heads: a tensor-parallel rank holds heads / tp of them
        return x.view(B, S, -1, dim).transpose(1, 2)

    def _qkv(self, x, memory):
        spec, H = self.spec, self.spec.n_heads
        S = x.shape[1]
        mla = self.mla
        if mla is not None:
            nope, rot = mla.qk_nope_head_dim, mla.qk_rope_head_dim
            q_in = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))) if mla.q_lora_rank else self.q_proj(x)
            q = self._heads(q_in, H, nope + rot)
            latent, k_rot = self.kv_a_proj(x).split([mla.kv_lora_rank, rot], -1)
            kv = self._heads(self.kv_b_proj(self.kv_a_norm(latent)), H, nope + mla.v_head_dim)
            k_nope, v = kv.split([nope, mla.v_head_dim], -1)
            pos = torch.arange(S, device=x.device)
            q = torch.cat([q[..., :nope], rope(q[..., nope:], pos)], -1)
            k_rot = rope(k_rot.view(x.shape[0], 1, S, rot), pos).expand(-1, H, -1, -1)
            return q, torch.cat([k_nope, k_rot], -1), v
        dh = spec.d_head
        source = x if memory is None else memory
        q_flat, k_flat = self.q_proj(x), self.k_proj(source)
        if spec.qk_norm == "full" and hasattr(self, "q_norm"):
            q_flat, k_flat = self.q_norm(q_flat), self.k_norm(k_flat)
        q = self._heads(q_flat, H, dh)
        k = self._heads(k_flat, self.kv_heads, dh)
        v = self._heads(self.v_proj(source), self.kv_heads, dh)
        if spec.qk_norm == "head" and hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        if spec.pos_emb == "rope" and memory is None:
            pos = torch.arange(S, device=x.device)
            q, k = rope(q, pos), rope(k, pos)
        return q, k, v

    def forward(self, x, causal: bool, memory=None, bias=None):
        q, k, v = self._qkv(x, memory)
        scale = 1.0 if self.spec.pos_emb == "relative" else None  # T5 folds the scale into init
        gqa = self.mla is None and self.kv_heads != self.spec.n_heads  # python ints: stays a bool under jit tracing
        if bias is not None and causal:  # additive bias and a causal mask in one float mask
            S, K = q.shape[2], k.shape[2]
            bias = bias.masked_fill(torch.ones(S, K, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            causal = False
        if self.attention == "eager":
            if gqa:
                k = k.repeat_interleave(self.spec.n_heads // self.kv_heads, 1)
                v = v.repeat_interleave(self.spec.n_heads // self.kv_heads, 1)
            scores = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
            if bias is not None:
                scores = scores + bias
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores[0, 0], dtype=torch.bool).triu(1), float("-inf"))
            if hasattr(self, "sinks"):  # gpt-oss: the sink logit joins the softmax, then is dropped
                sink = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
                out = torch.cat([scores, sink], -1).softmax(-1)[..., :-1] @ v
            else:
                out = scores.softmax(-1) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale,
                                                 enable_gqa=gqa)
        B, H, S, dv = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(B, S, H * dv))  # H: this rank's heads


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, width: int, bias: bool | None = None):
        super().__init__()
        bias = spec.mlp_bias if bias is None else bias
        self.act = ACTIVATIONS[spec.mlp]
        self.gate_proj = nn.Linear(spec.d_model, width, bias=bias) if spec.gated else None
        self.up_proj = nn.Linear(spec.d_model, width, bias=bias)
        self.down_proj = nn.Linear(width, spec.d_model, bias=bias)

    def forward(self, x):
        if self.gate_proj is not None:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(self.act(self.up_proj(x)))


class Experts(nn.Module):
    """E expert MLPs as 3-D weights (E x F x D), run on the token rows routed to each."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        E, D, Fe = spec.n_experts, spec.d_model, spec.d_ff_expert
        self.act = ACTIVATIONS[spec.mlp]
        self.gate_proj = nn.Parameter(torch.empty(E, Fe, D)) if spec.gated else None
        self.up_proj = nn.Parameter(torch.empty(E, Fe, D))
        self.down_proj = nn.Parameter(torch.empty(E, D, Fe))
        for p in self.parameters():
            nn.init.normal_(p, std=0.02)
        # gpt-oss: every expert's linears carry biases
        self.gate_bias = nn.Parameter(torch.zeros(E, Fe)) if spec.expert_bias and spec.gated else None
        self.up_bias = nn.Parameter(torch.zeros(E, Fe)) if spec.expert_bias else None
        self.down_bias = nn.Parameter(torch.zeros(E, D)) if spec.expert_bias else None

    @staticmethod
    def _b(bias, experts):
        return None if bias is None else bias[experts]

    def run(self, e: int, x):
        """Expert e on its rows x (n x D)."""
        up = F.linear(x, self.up_proj[e], self._b(self.up_bias, e))
        if self.gate_proj is not None:
            h = self.act(F.linear(x, self.gate_proj[e], self._b(self.gate_bias, e))) * up
        else:
            h = self.act(up)
        return F.linear(h, self.down_proj[e], self._b(self.down_bias, e))

    def run_batched(self, x, experts: slice):
        """Experts[experts] on equally many rows each, batched: x is (E', n, D) -> (E', n, D)."""
        def mm(inp, weight, bias):
            out = torch.bmm(inp, weight[experts].transpose(1, 2))
            return out if bias is None else out + bias[experts].unsqueeze(1)

        up = mm(x, self.up_proj, self.up_bias)
        h = self.act(mm(x, self.gate_proj, self.gate_bias)) * up if self.gate_proj is not None else self.act(up)
        return mm(h, self.down_proj, self.down_bias)


class MoE(nn.Module):
    def __init__(self, spec: ModelSpec, routing: str = "learned"):
        super().__init__()
        self.spec, self.routing = spec, routing
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=spec.router_bias)
        self.experts = Experts(spec)
        self.shared = MLP(spec, spec.d_ff_shared, bias=False) if spec.n_shared_experts else None
        # Qwen2-MoE: the shared expert's output is scaled by sigmoid(Linear(D, 1)(x))
        self.shared_gate = nn.Linear(spec.d_model, 1, bias=False) if spec.shared_expert_gate else None

    def forward(self, x):
        B, S, D = x.shape
        E, k = self.spec.n_experts, self.spec.n_experts_per_token
        flat = x.reshape(-1, D)
        T = flat.shape[0]
        probs = self.router(flat).float().softmax(-1)
        if self.routing == "balanced":  # slot r = t·k + j goes to expert r mod E: no data dependence
            weights, _ = probs.topk(k, -1)
            rows = flat.unsqueeze(1).expand(T, k, D).reshape(T * k, D)
            q, r = divmod(T * k, E)  # every expert gets q rows; experts 0..r-1 one more
            main = self.experts.run_batched(rows[: q * E].view(q, E, D).transpose(0, 1), slice(None))
            parts = [main.transpose(0, 1).reshape(q * E, D)] if q else []
            if r:
                parts.append(self.experts.run_batched(rows[q * E:].view(r, 1, D), slice(0, r)).view(r, D))
            routed = torch.cat(parts) if len(parts) > 1 else parts[0]
        else:
            weights, chosen = probs.topk(k, -1)
            routed = flat.new_zeros(T * k, D)
            for e in range(E):
                slots = (chosen.reshape(-1) == e).nonzero().squeeze(-1)
                if slots.numel():
                    routed = routed.index_copy(0, slots, self.experts.run(e, flat[slots // k]))
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = (routed.view(T, k, D) * weights.unsqueeze(-1)).sum(1).view(B, S, D)
        if self.shared is None:
            return out
        shared = self.shared(x)
        return out + (torch.sigmoid(self.shared_gate(x)) * shared if self.shared_gate is not None else shared)


class Block(nn.Module):
    """One Transformer block: pre-norm, parallel residual, sandwich (Gemma-2) or post-norm."""

    def __init__(self, spec: ModelSpec, index: int, cross: bool = False, relative_bias: bool = False,
                 attention: str = "sdpa", routing: str = "learned"):
        super().__init__()
        self.spec = spec
        self.attention = Attention(spec, relative_bias=relative_bias, attention=attention)
        self.norm_attention = make_norm(spec)
        if cross:
            self.cross_attention = Attention(spec, cross=True, attention=attention)
            self.norm_cross = make_norm(spec)
        if spec.is_moe_layer(index):
            self.moe = MoE(spec, routing)
        else:
            self.mlp = MLP(spec, spec.d_ff)
        if spec.norms_per_layer >= 2 or spec.post_norm:
            self.norm_mlp = make_norm(spec)
        if spec.norms_per_layer == 4:
            self.norm_post_attention = make_norm(spec)
            self.norm_post_mlp = make_norm(spec)

    def ffn(self, x):
        return self.moe(x) if hasattr(self, "moe") else self.mlp(x)

    def forward(self, x, causal: bool, memory=None, bias=None):
        spec = self.spec
        if spec.post_norm:  # BERT / 2017 Transformer: x = norm(x + sublayer(x))
            x = self.norm_attention(x + self.attention(x, causal, bias=bias))
            if memory is not None:
                x = self.norm_cross(x + self.cross_attention(x, False, memory=memory))
            return self.norm_mlp(x + self.ffn(x))
        if spec.parallel_residual:  # GPT-J/NeoX/Falcon: both read x
            h = self.norm_attention(x)
            # One shared norm (Falcon-7B): the MLP gets a view of h, a tensor of its own to autograd, so
            # that FlopCounterMode's module tracking does not file attention's backward under the MLP.
            h_mlp = self.norm_mlp(x) if hasattr(self, "norm_mlp") else h.view_as(h)
            return x + self.attention(h, causal, bias=bias) + self.ffn(h_mlp)
        a = self.attention(self.norm_attention(x), causal, bias=bias)
        x = x + (self.norm_post_attention(a) if spec.norms_per_layer == 4 else a)
        if memory is not None:
            x = x + self.cross_attention(self.norm_cross(x), False, memory=memory)
        f = self.ffn(self.norm_mlp(x))
        return x + (self.norm_post_mlp(f) if spec.norms_per_layer == 4 else f)


class Stack(nn.Module):
    def __init__(self, spec: ModelSpec, n_layers: int, decoder: bool, cross: bool, attention: str, routing: str):
        super().__init__()
        self.spec, self.decoder = spec, decoder
        relative = spec.pos_emb == "relative"
        self.layers = nn.ModuleList(
            Block(spec, i, cross, relative_bias=relative and i == 0, attention=attention, routing=routing)
            for i in range(n_layers))
        self.norm_final = make_norm(spec) if spec.final_norm else None
        self.checkpoint = False  # full activation recomputation, one checkpoint per block

    def _bias(self, x, q_len):
        spec = self.spec
        if spec.pos_emb == "relative":
            buckets = t5_buckets(q_len, q_len, spec.rel_pos_buckets, not self.decoder, x.device)
            return self.layers[0].attention.relative_position_bias(buckets).permute(2, 0, 1).to(x.dtype)
        if spec.pos_emb == "alibi":
            return alibi_bias(spec.n_heads, q_len, q_len, x.device, x.dtype)
        return None

    def forward(self, x, memory=None):
        bias = self._bias(x, x.shape[1])
        for layer in self.layers:
            if self.checkpoint and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, x, self.decoder, memory, bias, use_reentrant=False)
            else:
                x = layer(x, self.decoder, memory, bias)
        return self.norm_final(x) if self.norm_final is not None else x


class Embeddings(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.tokens = nn.Embedding(spec.vocab_size, spec.d_embed or spec.d_model)
        # OPT: embeddings at word_embed_proj_dim, projected to d_model
        self.project_in = nn.Linear(spec.d_embed, spec.d_model, bias=False) if spec.d_embed else None
        self.positions = nn.Embedding(spec.n_positions, spec.d_model) if spec.pos_emb == "learned" else None
        self.token_types = nn.Embedding(spec.type_vocab_size, spec.d_model) if spec.type_vocab_size else None
        self.norm = make_norm(spec) if spec.embedding_norm else None

    def forward(self, ids):
        x = self.tokens(ids)
        if self.project_in is not None:
            x = self.project_in(x)
        S = ids.shape[1]
        if self.positions is not None:
            x = x + self.positions(torch.arange(S, device=ids.device))
        elif self.spec.pos_emb == "sinusoidal":  # Vaswani et al. 2017 sec. 3.5: a fixed table, no parameters
            pos = torch.arange(S, device=ids.device, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, self.spec.d_model, 2,
                                         device=ids.device) * (-math.log(1e4) / self.spec.d_model))
            x = x + torch.cat([(pos * div).sin(), (pos * div).cos()], -1).to(x.dtype)
        if self.token_types is not None:
            x = x + self.token_types(torch.zeros_like(ids))
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    """Decoder-only, encoder (with BERT's pooler) or encoder-decoder, from a ModelSpec."""

    def __init__(self, spec: ModelSpec, attention: str = "sdpa", routing: str = "learned"):
        super().__init__()
        self.spec = spec
        self.embedding = Embeddings(spec)
        if spec.architecture == "encoder-decoder":
            self.encoder = Stack(spec, spec.n_layers, decoder=False, cross=False, attention=attention, routing=routing)
            self.decoder = Stack(spec, spec.n_decoder_layers, decoder=True, cross=True, attention=attention,
                                 routing=routing)
        else:
            self.body = Stack(spec, spec.n_layers, decoder=spec.architecture == "decoder", cross=False,
                              attention=attention, routing=routing)
        self.pooler = nn.Linear(spec.d_model, spec.d_model) if spec.pooler else None
        self.project_out = nn.Linear(spec.d_model, spec.d_embed, bias=False) if spec.d_embed else None
        self.lm_head = None
        if spec.lm_head:
            self.lm_head = nn.Linear(spec.d_embed or spec.d_model, spec.vocab_size, bias=spec.lm_head_bias)
            if spec.tie_embeddings:
                self.lm_head.weight = self.embedding.tokens.weight

    def set_checkpointing(self, enabled: bool) -> None:
        for module in self.modules():
            if isinstance(module, Stack):
                module.checkpoint = enabled

    def forward(self, ids, decoder_ids=None):
        if self.spec.architecture == "encoder-decoder":
            memory = self.encoder(self.embedding(ids))
            x = self.decoder(self.embedding(ids if decoder_ids is None else decoder_ids), memory)
        else:
            x = self.body(self.embedding(ids))
        if self.project_out is not None:
            x = self.project_out(x)
        out = self.lm_head(x) if self.lm_head is not None else x
        if self.pooler is not None:  # BERT: the [CLS] token's pooled vector beside the main output
            return out, torch.tanh(self.pooler(x[:, 0]))
        return out


def check_buildable(spec: ModelSpec) -> None:
    """The reference model has attention + FFN blocks only: refuse hybrid/state-space specs and issue 22's layer
    parts (ModelSpec.layer_extras) in one line."""
    if spec.is_hybrid:
        raise LlmcalcError(
            f"{spec.name} has per-layer mixers ({spec.layer_mix()}); the profiler's reference model builds "
            f"attention + FFN blocks only, so it cannot profile it. Use params/flops/memory/infer (checked "
            f"against transformers' modelling code in tests/test_ssm.py)"
        )
    if spec.layer_extras():
        raise LlmcalcError(
            f"{spec.name} has {', '.join(spec.layer_extras())}; the profiler's reference model builds attention + "
            f"FFN blocks only, so it cannot profile it. Use params/flops/memory/infer (checked against transformers' "
            f"modelling code in tests/test_recent_families.py)"
        )


def build_model(spec: ModelSpec, dtype: torch.dtype = torch.float32, device="cpu", attention: str = "sdpa",
                routing: str = "learned") -> Transformer:
    """The reference model, its parameters in `dtype` on `device` ("meta" builds no storage).

    Built under that default dtype rather than converted afterwards, so it also works inside
    FakeTensorMode (whose parameters cannot be swapped by ``Module.to``)."""
    check_buildable(spec)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return Transformer(spec, attention, routing)
    finally:
        torch.set_default_dtype(previous)


def component_of(name: str) -> str:
    """The analytic breakdown key of a parameter or module name: 'layers.3.attention.k_proj.weight'
    -> 'attention/k_proj'; 'decoder.layers.0.cross_attention.q_proj.bias' -> 'decoder.cross_attention/bias'."""
    parts = name.split(".")
    stack = ""
    if parts[0] in ("encoder", "decoder"):
        stack, parts = parts[0] + ".", parts[1:]
    elif parts[0] == "body":
        parts = parts[1:]
    if parts[0] == "embedding":
        return f"embedding/{parts[1]}"
    if parts[0] == "norm_final":
        return f"{stack}norm/final"
    if parts[0] == "lm_head" and parts[-1] == "bias":
        return "head/lm_head_bias"
    if parts[0] in ("pooler", "lm_head", "project_out"):
        return f"head/{parts[0]}"
    if parts[0] != "layers" or len(parts) < 3:
        raise KeyError(f"no component for {name}")
    module, rest = parts[2], parts[3:]
    if module.startswith("norm"):
        return f"{stack}norm/layers"
    if module == "moe":
        return f"{stack}moe/" + {"router": "router", "experts": "experts", "shared": "shared_experts",
                                 "shared_gate": "shared_experts"}[rest[0]]
    if rest and rest[0] in ("q_norm", "k_norm"):
        return f"{stack}{module}/qk_norm"
    if rest and rest[-1] == "bias" and module in ("attention", "cross_attention",
                                                  "mlp") and rest[0] != "relative_position_bias":
        return f"{stack}{module}/bias"
    return f"{stack}{module}/{rest[0]}" if rest else f"{stack}{module}"


def measured_breakdown(model: nn.Module) -> dict[str, int]:
    """sum(p.numel()) of the model's unique trainable parameters, by analytic component key."""
    out: dict[str, int] = {}
    for name, p in model.named_parameters():  # named_parameters() yields a tied weight once
        if p.requires_grad:
            key = component_of(name)
            out[key] = out.get(key, 0) + p.numel()
    return out
