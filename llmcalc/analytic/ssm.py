"""State-space and linear-attention mixers (Mamba-1, Mamba-2, Gated DeltaNet, KDA): exact parameters, forward
FLOPs, recurrent state bytes.

Used by ``params``, ``flops`` and ``inference`` for the layers a ``ModelSpec.layer_types`` entry
names "mamba", "mamba2", "gated_deltanet", "kda" or "short_conv" (LFM2: in_proj D→3D giving B, C, x; y = out_proj(C ·
conv1d(B·x)), a depthwise conv of width K over D channels; its only state is the conv window D·K).
Symbols: D d_model, E ssm_d_inner, N ssm_d_state, R ssm_dt_rank,
H ssm_n_heads (head dim P = E/H), G ssm_n_groups, K ssm_conv_kernel, T = B·S tokens.

Parameters mirror transformers' modelling code:
- Mamba-1 (models/mamba/modeling_mamba.py MambaMixer; jamba/modeling_jamba.py JambaMambaMixer):
  in_proj D→2E, depthwise conv1d E·K (+E bias), x_proj E→R+2N (no bias), dt_proj R→E (+E bias),
  A_log E·N, D E, out_proj E→D; Jamba adds RMSNorms over dt (R), B (N) and C (N).
- Mamba-2 (models/mamba2/modeling_mamba2.py Mamba2Mixer; bamba, nemotron_h, falcon_h1 copy it):
  in_proj D→2E+2GN+H (z, x, B, C, dt), depthwise conv1d over x, B, C ((E+2GN)·K, + bias),
  dt_bias/A_log/D one per head, a gated RMSNorm over E (optional in Falcon-H1), out_proj E→D.

FLOPs convention (2 FLOPs per multiply-add, as elsewhere in llmcalc):
- Projections: 2·T·in·out each, what torch's FlopCounterMode counts for them (aten.mm/addmm).
- conv1d: transformers runs nn.Conv1d with padding K-1 on both sides and keeps the first S
  outputs, so torch computes (and its counter counts) 2·B·(S+K-1)·C·K for C channels.
- The scan (no S² term: work is linear in S), in its recurrent form, counting multiplies and adds
  per (token, channel, state) and leaving exp/softplus/SiLU, the D skip and the gating out, as llmcalc
  leaves norms and activations out everywhere:
  * Mamba-1 selective scan (Gu & Dao 2023, "Mamba", Alg. 2 and eq. 2; mamba_ssm selective_scan_ref):
    Ā = exp(Δ·A) 1 multiply, B̄x = Δ·B·x 2, h = Ā·h + B̄x 2, y = C·h 2 → 7·B·S·E·N.
  * Mamba-2 SSD (Dao & Gu 2024, "Transformers are SSMs", eq. 1 with scalar A per head, the linear/
    recurrent mode of sec. 6): h = ā·h + B·(Δx) 3, y = C·h 2 → 5·B·S·E·N.
  * Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks"; Qwen3-Next, Qwen3.5) and KDA
    (Kimi Delta Attention; Kimi-Linear): in the chunked form transformers' torch path and fla's chunk kernels
    run, which is what torch's counter sees (``delta_rule_scan``: chunks of 64, S padded to a whole chunk);
    a decode step runs the recurrent form (eq. 10): u = S·k 2·dk·dv, decay α·S dk·dv, the rank-one delta
    update 2·dk·dv, output S·q 2·dk·dv → 7·B·S·E·N (E = Hv·dv, N = dk).
  What the counter sees of the scan depends on the torch path: transformers' Mamba-1 fallback runs
  y = C·h as a bmm (2·B·S·E·N of the 7), the elementwise update is invisible to it; its Mamba-2
  fallback runs the chunked SSD algorithm (chunk Q) whose einsums do chunk-dependent quadratic work
  (~2·B·H·S·(Q·N + Q·P + 2·N·P)) that a fused kernel or the recurrent form does not. llmcalc reports
  the scan as its own op ("<mixer>/scan"), never folded into the projections.

Recurrent state (inference): per sequence and layer a conv state of C·K elements (the last K
inputs of the conv, as transformers' cache and mamba_ssm allocate it) and an SSM state of E·N
elements (Mamba-2: H·P·N = E·N), constant in the context length.
"""

from __future__ import annotations

from ..spec import ModelSpec

SSM_MIXERS = ("mamba", "mamba2", "short_conv", "gated_deltanet", "kda")
DELTA_RULE = ("gated_deltanet", "kda")  # chunked delta-rule mixers (Qwen3-Next / Qwen3.5, Kimi-Linear)
CHUNK = 64  # the delta rule's chunk: transformers' torch_chunk_gated_delta_rule / chunk_kimi_delta_attention, fla


def _mm(tokens: int, k: int, n: int) -> int:
    return 2 * tokens * k * n


def conv_channels(spec: ModelSpec, kind: str) -> int:
    """Channels of the depthwise conv1d: x (Mamba-1), x, B and C (Mamba-2), d_model (LFM2)."""
    if kind == "short_conv":
        return spec.d_model
    if kind == "mamba":
        return spec.ssm_d_inner
    return spec.ssm_d_inner + 2 * spec.ssm_n_groups * spec.ssm_d_state


def _delta_rule_params(spec: ModelSpec, kind: str) -> dict[str, int]:
    """A delta-rule mixer's parameters by part (Gated DeltaNet, KDA), without the "<kind>/" prefix."""
    D, E, N, K = spec.d_model, spec.ssm_d_inner, spec.ssm_d_state, spec.ssm_conv_kernel
    C = conv_channels(spec, kind)
    if kind == "gated_deltanet":
        # models/qwen3_next/modeling_qwen3_next.py Qwen3NextGatedDeltaNet: in_proj_qkvz D→2·Hk·dk + 2·Hv·dv,
        # in_proj_ba D→2·Hv, bias-free conv1d over q, k, v, dt_bias and A_log per value head, a gated
        # RMSNorm over one value head (dv, shared by all heads), out_proj Hv·dv→D.
        H, G = spec.ssm_n_heads, spec.ssm_n_groups
        parts = {
            "in_proj_qkvz": D * (2 * G * N + 2 * E),
            "in_proj_ba": D * 2 * H,
            "conv1d": C * K + C * spec.ssm_conv_bias,
            "dt_bias": H,
            "A_log": H,
            "norm": E // H * spec.ssm_norm,
            "out_proj": E * D + D * spec.ssm_out_bias,
        }
    else:  # "kda"
        # models/kimi_linear/modeling_kimi_linear.py KimiLinearDeltaAttention: q/k/v_proj D -> H·d each, a bias-free
        # depthwise conv1d over the 3·H·d channels, the forget gate (KimiLinearForgetGate: f_a_proj D -> d,
        # f_b_proj d -> H·d, dt_bias H·d, A_log H), b_proj D -> H, the output gate g_a_proj D -> d, g_b_proj
        # d -> H·d, o_norm (a gated RMSNorm of d, shared by the heads), o_proj H·d -> D; all bias-free.
        H, G = spec.ssm_n_heads, spec.ssm_n_groups
        dv = E // H
        parts = {
            "q_proj": D * G * N,
            "k_proj": D * G * N,
            "v_proj": D * E,
            "conv1d": C * K + C * spec.ssm_conv_bias,
            "f_proj": D * N + N * G * N,
            "dt_bias": G * N,
            "A_log": H,
            "b_proj": D * H,
            "g_proj": D * dv + dv * E,
            "norm": dv * spec.ssm_norm,
            "out_proj": E * D + D * spec.ssm_out_bias,
        }
    return parts


def mixer_params(spec: ModelSpec, kind: str) -> dict[str, int]:
    """One state-space mixer's parameters by part (biases inside their part), keys "<kind>/<part>"."""
    D, E, N, K = spec.d_model, spec.ssm_d_inner, spec.ssm_d_state, spec.ssm_conv_kernel
    pb, C = int(spec.ssm_proj_bias), conv_channels(spec, kind)
    if kind == "short_conv":  # LFM2 (models/lfm2/modeling_lfm2.py Lfm2ShortConv): one conv_bias flag for all
        cb = int(spec.ssm_conv_bias)
        parts = {"in_proj": D * 3 * D + 3 * D * cb, "conv1d": D * K + D * cb, "out_proj": D * D + D * cb}
    elif kind == "mamba":
        R = spec.ssm_dt_rank
        parts = {
            "in_proj": D * 2 * E + 2 * E * pb,
            "conv1d": C * K + C * spec.ssm_conv_bias,
            "x_proj": E * (R + 2 * N),
            "dt_proj": R * E + E,
            "dt_norms": (R + 2 * N) * spec.ssm_dt_norms,
            "A_log": E * N,
            "D": E,
            "out_proj": E * D + D * spec.ssm_out_bias,
        }
    elif kind in DELTA_RULE:
        parts = _delta_rule_params(spec, kind)
    else:
        H, G = spec.ssm_n_heads, spec.ssm_n_groups
        width = 2 * E + 2 * G * N + H
        parts = {
            "in_proj": D * width + width * pb,
            "conv1d": C * K + C * spec.ssm_conv_bias,
            "dt_bias": H,
            "A_log": H,
            "D": H,
            "norm": E * spec.ssm_norm,
            "out_proj": E * D + D * spec.ssm_out_bias,
        }
    return {f"{kind}/{k}": v for k, v in parts.items()}


def delta_rule_scan(spec: ModelSpec, kind: str, batch: int, seq: int, recurrent: bool = False) -> int:
    """FLOPs of a chunked delta rule over `seq` tokens (Gated DeltaNet, KDA), as transformers' torch path and fla's
    chunk kernels run it: the sequence padded to Sp = ceil(S/64)·64 tokens, chunks of c = 64, per batch and head
    (dk key and dv value widths):
    - Gated DeltaNet (models/qwen3_next/modeling_qwen3_next.py, qwen3_5 :287 torch_chunk_gated_delta_rule):
      k_β·kᵀ and q·kᵀ in each chunk (2 x 2·Sp·c·dk), then per chunk k_cumdecay·S, q·S and kᵀ·v_new
      (3 x 2·Sp·dk·dv) and the intra-chunk attention times v_new (2·Sp·c·dv):
      B·H·[2·Sp·c·(2·dk + dv) + 6·Sp·dk·dv];
    - KDA (models/kimi_linear/modeling_kimi_linear.py chunk_kimi_delta_attention): the UT-transformed values and
      decayed keys (2·Sp·c·dv + 2·Sp·c·dk), then per chunk the same three state products and intra·v_new:
      B·H·[2·Sp·c·(dk + 2·dv) + 6·Sp·dk·dv] (its per-channel decay makes k·kᵀ and q·kᵀ elementwise sums there).
    The triangular solves (the UT transform) are not matmuls torch's FlopCounterMode counts, nor counted here.
    `recurrent`: the token-by-token form a decode step runs (torch_recurrent_gated_delta_rule, fla's fused
    recurrent kernel; Yang et al. 2024 eq. 10): decay, S·k, the rank-one update and S·q, 7·B·S·H·dk·dv."""
    H, dk = spec.ssm_n_heads, spec.ssm_d_state
    dv = spec.ssm_d_inner // H
    if recurrent:
        return 7 * batch * seq * H * dk * dv
    padded = -(-seq // CHUNK) * CHUNK
    inner = 2 * CHUNK * ((2 * dk + dv) if kind == "gated_deltanet" else (dk + 2 * dv))
    return batch * H * padded * (inner + 6 * dk * dv)


def mixer_ops(spec: ModelSpec, kind: str, batch: int, seq: int, recurrent: bool = False) -> dict[str, int]:
    """One state-space mixer's forward FLOPs by op, keys "<kind>/<op>" (see the module docstring). `recurrent`: the
    delta-rule mixers' scan in its token-by-token form (a decode step) instead of the chunked one."""
    D, E, N, K = spec.d_model, spec.ssm_d_inner, spec.ssm_d_state, spec.ssm_conv_kernel
    T, C = batch * seq, conv_channels(spec, kind)
    conv = 2 * batch * (seq + K - 1) * C * K  # depthwise, padded: S+K-1 output positions
    if kind == "short_conv":  # B, C, x = in_proj(h); y = out_proj(C * conv(B * x)): no scan, no state matrix
        ops = {"in_proj": _mm(T, D, 3 * D), "conv1d": conv, "out_proj": _mm(T, D, D)}
    elif kind == "mamba":
        R = spec.ssm_dt_rank
        ops = {
            "in_proj": _mm(T, D, 2 * E),
            "conv1d": conv,
            "x_proj": _mm(T, E, R + 2 * N),
            "dt_proj": _mm(T, R, E),
            "scan": 7 * T * E * N,
            "out_proj": _mm(T, E, D),
        }
    elif kind == "gated_deltanet":
        ops = {
            "in_proj_qkvz": _mm(T, D, 2 * spec.ssm_n_groups * N + 2 * E),
            "in_proj_ba": _mm(T, D, 2 * spec.ssm_n_heads),
            "conv1d": conv,
            "scan": delta_rule_scan(spec, kind, batch, seq, recurrent),
            "out_proj": _mm(T, E, D),
        }
    elif kind == "kda":
        G, H = spec.ssm_n_groups, spec.ssm_n_heads
        dv = E // H
        ops = {
            "q_proj": _mm(T, D, G * N),
            "k_proj": _mm(T, D, G * N),
            "v_proj": _mm(T, D, E),
            "conv1d": conv,
            "f_proj": _mm(T, D, N) + _mm(T, N, G * N),
            "b_proj": _mm(T, D, H),
            "g_proj": _mm(T, D, dv) + _mm(T, dv, E),
            "scan": delta_rule_scan(spec, kind, batch, seq, recurrent),
            "out_proj": _mm(T, E, D),
        }
    else:
        width = 2 * E + 2 * spec.ssm_n_groups * N + spec.ssm_n_heads
        ops = {
            "in_proj": _mm(T, D, width),
            "conv1d": conv,
            "scan": 5 * T * E * N,
            "out_proj": _mm(T, E, D),
        }
    return {f"{kind}/{k}": v for k, v in ops.items()}


def recurrent_state_elements(spec: ModelSpec) -> dict[str, int]:
    """Elements of recurrent state one sequence keeps across all state-space layers:
    {"conv state": ..., "SSM state": ...}; zero for a model without such layers."""
    conv = ssm = 0
    for i in range(spec.n_layers):
        for kind in spec.layer_parts(i)[0]:
            if kind in SSM_MIXERS:
                conv += conv_channels(spec, kind) * spec.ssm_conv_kernel
                if kind != "short_conv":  # LFM2's short conv keeps only its conv window
                    ssm += spec.ssm_d_inner * spec.ssm_d_state
    return {"conv state": conv, "SSM state": ssm}


def layer_state_parts(spec: ModelSpec, mixers: tuple[str, ...]) -> tuple[int, int]:
    """(conv window, SSM state) elements one sequence keeps in one layer with these mixers: the conv's last K inputs
    (C·K, as transformers' LinearAttentionLayer and mamba_ssm keep them) and the E·N state (Gated DeltaNet, KDA:
    H·dk·dv), none for LFM2's short conv; (0, 0) for attention alone."""
    conv = sum(conv_channels(spec, kind) * spec.ssm_conv_kernel for kind in mixers if kind in SSM_MIXERS)
    ssm = sum(spec.ssm_d_inner * spec.ssm_d_state for kind in mixers if kind in SSM_MIXERS and kind != "short_conv")
    return conv, ssm


def layer_state_elements(spec: ModelSpec, mixers: tuple[str, ...]) -> int:
    """Elements of recurrent state one sequence keeps in one layer with these mixers (its conv window, and
    the SSM state but for LFM2's short conv); 0 for attention alone."""
    return sum(layer_state_parts(spec, mixers))
