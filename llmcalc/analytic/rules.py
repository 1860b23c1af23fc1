"""Rules of thumb for FLOPs per token, as their authors wrote them, beside the exact per-op count.

Each rule returns training FLOPs per token (forward + backward), except 2N (forward). Where a
rule needs a parameter count N it says which one; for MoE models N is the active count.
Also: the crossover sequence length where attention's S² work overtakes the projections, and a
rough estimate of the non-matmul (elementwise) work that matmul counts leave out.
"""

from __future__ import annotations

from ..records import dataclass
from ..spec import ModelSpec
from .flops import StepFlops, forward_ops, is_attention_core, step_flops
from .params import ParamCount
from .ssm import SSM_MIXERS


@dataclass(frozen=True)
class Rule:
    name: str
    per_token: float  # FLOPs per token
    kind: str  # "forward" or "training"
    convention: str  # "full" or "causal" S², or "none" when the rule has no S² term
    source: str


def six_n(count: ParamCount | float) -> float:
    """Training FLOPs per token ≈ 6·N: forward 2N + backward 4N (Kaplan et al. 2020; Hoffmann et al. 2022's
    C ≈ 6·N·D). N: a parameter count, or a ParamCount's active parameters per token (MoE: the active ones)."""
    n = count if isinstance(count, (int, float)) else count.active_per_token
    return 6 * n


def palm(count: ParamCount, seq_len: int) -> float:
    """6·N + 12·L·H·Q·T per token (PaLM, Chowdhery et al. 2022, App. B; torchtitan's
    get_nparams_and_flops): N the matmul parameters, i.e. without the lookup tables (token,
    position and token-type embeddings, which cost no FLOPs), but with the LM head: a tied model's
    head is the embedding table used as a matmul, so its V·D come back in. L layers, H heads, Q head
    dim, T sequence length. Full S². Against the exact per-op count it differs only by 6 x the
    biases and norm weights (not matmuls)."""
    spec = count.spec
    lookups = sum(count.components.get(k, 0) for k in ("embedding/tokens", "embedding/positions",
                                                        "embedding/token_types"))
    head = count.components["embedding/tokens"] if spec.lm_head and spec.tie_embeddings else 0
    n = count.active_per_token - lookups + head
    layers = spec.n_attention_layers if spec.is_hybrid else spec.total_layers  # hybrids: attention layers only
    return 6 * n + 12 * layers * spec.n_heads * spec.d_head * seq_len


def megatron(spec: ModelSpec, seq_len: int) -> float | None:
    """Megatron-LM's num_floating_point_operations (training.py), per token. Causal S².

    12·L·D²·[(1 + G/H + S/(2D))·(H·d_head/D) + (F/D)·k·g + F_shared/D·g + V/(2·L·D)], with
    k experts routed to (1 if dense), g = 3/2 for a gated MLP. None for MLA, encoder and hybrid/
    state-space models, which that formula does not describe (Megatron has a separate hybrid one).
    """
    if spec.is_mla or spec.architecture != "decoder" or spec.is_hybrid:
        return None
    L, D, H = spec.n_layers, spec.d_model, spec.n_heads
    gated = 1.5 if spec.gated else 1.0
    if spec.is_moe:
        ffn = spec.d_ff_expert / D * spec.n_experts_per_token * gated
        ffn += spec.d_ff_shared / D * gated  # the shared-expert MLP (n_shared·d_ff_expert for DeepSeek)
        if spec.n_moe_layers < L:  # Megatron has no dense-layers term; weight the dense layers in exactly
            dense = spec.d_ff / D * gated
            ffn = (ffn * spec.n_moe_layers + dense * (L - spec.n_moe_layers)) / L
    else:
        ffn = spec.d_ff / D * gated
    attention = (1 + spec.n_kv_heads / H + seq_len / D / 2) * (H * spec.d_head / D)
    return 12 * L * D * D * (attention + ffn + spec.vocab_size / (2 * L * D))


def narayanan_forward(spec: ModelSpec, seq_len: int) -> float:
    """24·S·D²·L·(1 + S/(6D) + V/(12·L·D)) per sequence, forward only, here per token.

    Narayanan et al. 2021 (Megatron PTD-P) App. A, Korthikanti et al. 2022: a GPT-3 block (MHA,
    F = 4D, plain MLP), full S². Training without recomputation is 3x; with full recomputation the
    paper's 96·B·s·l·h²·(1 + s/6h + V/16lh).
    """
    L, D = spec.total_layers, spec.d_model
    return 24 * D * D * L * (1 + seq_len / (6 * D) + spec.vocab_size / (12 * L * D))


def rules_of_thumb(count: ParamCount, seq_len: int) -> list[Rule]:
    spec = count.spec
    rules = [
        Rule("2N", 2 * count.active_per_token, "forward", "none",
             "Kaplan et al. 2020: forward ≈ 2 FLOPs per parameter per token"),
        Rule("6N", six_n(count), "training", "none",
             "Kaplan et al. 2020 / Hoffmann et al. 2022: C ≈ 6·N·D (forward 2N + backward 4N)"),
        Rule("6N + 12·L·H·Q·T", palm(count, seq_len), "training", "full",
             "PaLM App. B / torchtitan: N without the lookup tables, with the (tied) LM head, full S²"),
        Rule("3 x 24·S·D²·L·(1 + S/6D + V/12LD)", 3 * narayanan_forward(spec, seq_len), "training", "full",
             "Narayanan et al. 2021 App. A: GPT-3 block (MHA, F = 4D), full S²"),
    ]
    mega = megatron(spec, seq_len)
    if mega is not None:
        rules.append(Rule("Megatron-LM num_floating_point_operations", mega, "training", "causal",
                          "Megatron-LM training.py (NeMo uses the same): GQA, gated MLP and MoE aware, causal S²"))
    return rules


@dataclass(frozen=True)
class RuleCheck:
    """A rule of thumb held to the exact per-token count in the rule's own S² convention (a rule without an S²
    term, to the step's)."""

    rule: Rule
    exact_per_token: float  # forward for a forward rule, else model FLOPs (forward + backward)
    convention: str  # "full S²", "causal", or the step's convention + " (exact)"

    @property
    def rel_error(self) -> float:
        """rule / exact - 1."""
        return self.rule.per_token / self.exact_per_token - 1


def check_rules(step: StepFlops, rules: list[Rule]) -> list[RuleCheck]:
    """Each rule beside the exact count of `step` (recounted in the other S² convention where the rule has it)."""
    exact_for = {}
    for causal in (False, True):
        other = step if causal == step.causal else step_flops(step.spec, step.batch, step.seq_len, causal=causal,
                                                               recompute=step.recompute,
                                                               decoder_seq_len=step.decoder_seq_len)
        exact_for[causal] = (other.forward_per_token, other.model_flops_per_token)
    checks = []
    for rule in rules:
        causal = step.causal if rule.convention == "none" else rule.convention == "causal"
        convention = ("full S²" if rule.convention == "full" else "causal" if rule.convention == "causal"
                      else ("causal" if step.causal else "full S²") + " (exact)")
        checks.append(RuleCheck(rule, exact_for[causal][0 if rule.kind == "forward" else 1], convention))
    return checks


@dataclass(frozen=True)
class Crossover:
    """Sequence lengths where the S² attention matmuls equal other work, per token (decoder stack)."""

    vs_projections: float  # attention S² = Q/K/V/O projections
    vs_block: float  # attention S² = projections + FFN


def crossover(spec: ModelSpec, causal: bool = False) -> Crossover | None:
    """Per token, projections and FFN cost a constant and the S² terms grow linearly with S, so
    each crossover is (constant work) / (S² work per token per unit of S). None for a model with no
    attention layer (pure Mamba): nothing grows with S there."""
    ops = forward_ops(spec, 1, 1, causal=False)  # at S = 1 the S² ops give their per-unit-S slope
    core: float = sum(v for k, v in ops.items() if is_attention_core(k) and "cross" not in k)
    if not core:
        return None
    if causal:
        core /= 2
    projections = sum(v for k, v in ops.items() if k.split("/")[0].endswith("attention")
                      and not is_attention_core(k) and "cross" not in k)
    ffn = sum(v for k, v in ops.items() if k.split("/")[0].split(".")[-1] in ("mlp", "moe", *SSM_MIXERS))
    return Crossover(projections / core, (projections + ffn) / core)


# Rough FLOPs per element of the non-matmul work (our own estimates, not measured; torch's
# FlopCounterMode counts none of it): softmax = max, subtract, exp, sum, divide.
SOFTMAX_PER_SCORE = 5
NORM_PER_ELEMENT = {"rmsnorm": 4, "layernorm": 7}  # square/mean/rsqrt/scale (+ centre, shift)
ACTIVATION_PER_ELEMENT = {"swiglu": 5, "geglu": 9, "gelu": 8, "relu": 1, "silu": 4, "relu2": 2}
ROPE_PER_ELEMENT = 3  # two multiplies and an add per rotated element
RESIDUAL_ADDS_PER_BLOCK = 2


def elementwise_ops(step: StepFlops) -> dict[str, float]:
    """A rough estimate of forward non-matmul FLOPs by kind (softmax, norms, activation, RoPE, residual)."""
    spec = step.spec
    if spec.is_hybrid:
        return _hybrid_elementwise_ops(step)
    layers = spec.total_layers
    tokens = step.tokens
    scores = sum(v for k, v in step.ops.items() if k.endswith("/scores"))
    qk_dim = spec.mla.qk_head_dim if spec.mla is not None else spec.d_head
    out = {
        "softmax": SOFTMAX_PER_SCORE * scores / (2 * qk_dim),  # score elements = FLOPs / (2·d_head)
        "norms": NORM_PER_ELEMENT[spec.norm] * tokens * spec.d_model * (spec.norms_per_layer * layers + 1),
        "residual adds": RESIDUAL_ADDS_PER_BLOCK * tokens * spec.d_model * layers,
    }
    if spec.is_moe:
        width = spec.d_ff_expert * spec.n_experts_per_token + spec.d_ff_shared
        dense_layers = layers - spec.n_moe_layers
        out["activation"] = ACTIVATION_PER_ELEMENT[spec.mlp] * tokens * (
            width * spec.n_moe_layers + spec.d_ff * dense_layers)
    else:
        out["activation"] = ACTIVATION_PER_ELEMENT[spec.mlp] * tokens * spec.d_ff * layers
    if spec.pos_emb == "rope":
        rotated = spec.mla.qk_rope_head_dim * (spec.n_heads + 1) if spec.mla is not None else \
            spec.d_head * (spec.n_heads + spec.n_kv_heads)
        out["rope"] = ROPE_PER_ELEMENT * tokens * rotated * layers
    return out


def _hybrid_elementwise_ops(step: StepFlops) -> dict[str, float]:
    """elementwise_ops for per-layer (hybrid/state-space) models: the same per-element costs, summed
    over the layers that have each part (softmax and RoPE in attention layers, activations in FFNs);
    the Mamba scan is an op of its own in the totals, not here."""
    spec, tokens = step.spec, step.tokens
    scores = sum(v for k, v in step.ops.items() if k.endswith("/scores"))
    parts = sum(spec.norms_in_layer(i) for i in range(spec.n_layers))  # "+"-parts: one pre-norm, one residual each
    norms = parts + 1
    width = 0
    for i in range(spec.n_layers):
        ffn = spec.layer_parts(i)[1]
        width += spec.d_ff_expert * (spec.n_experts_per_token + spec.n_shared_experts) if ffn == "moe" else \
            spec.d_ff if ffn == "mlp" else 0
    # Zamba2's shared block, per use: norms over 2D and D (3 D-wide units), its MLP's activation, and
    # the add of its projected output to the Mamba layer's input (the block itself has no residuals)
    uses = spec.n_mixer_layers("shared_block")
    norms += 3 * uses
    width += spec.d_ff * uses
    out = {
        "softmax": SOFTMAX_PER_SCORE * scores / (2 * spec.d_head),
        "norms": NORM_PER_ELEMENT[spec.norm] * tokens * spec.d_model * norms,
        "residual adds": tokens * spec.d_model * (parts + uses),
        "activation": ACTIVATION_PER_ELEMENT.get(spec.mlp, 1) * tokens * width,
    }
    if spec.pos_emb == "rope" and spec.n_attention_layers:
        out["rope"] = (ROPE_PER_ELEMENT * tokens * spec.d_head * (spec.n_heads + spec.n_kv_heads)
                            * spec.n_attention_layers)
    return out
