"""State-space mixers (Mamba-1, Mamba-2): exact parameters, forward FLOPs, recurrent state bytes.

Used by ``params``, ``flops`` and ``inference`` for the layers a ``ModelSpec.layer_types`` entry
names "mamba", "mamba2" or "short_conv" (LFM2: in_proj D→3D giving B, C, x; y = out_proj(C ·
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
  * Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", eq. 10, recurrent
    form; Qwen3-Next): per token and value head, with S a dk x dv state, u = S·k 2·dk·dv, decay α·S
    dk·dv, rank-one delta update S -= β(u - v)kᵀ 2·dk·dv, output S·q 2·dk·dv → 7·B·S·E·N
    (E = Hv·dv, N = dk).
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

SSM_MIXERS = ("mamba", "mamba2", "short_conv", "gated_deltanet")


def _mm(tokens: int, k: int, n: int) -> int:
    return 2 * tokens * k * n


def conv_channels(spec: ModelSpec, kind: str) -> int:
    """Channels of the depthwise conv1d: x (Mamba-1), x, B and C (Mamba-2), d_model (LFM2)."""
    if kind == "short_conv":
        return spec.d_model
    if kind == "mamba":
        return spec.ssm_d_inner
    return spec.ssm_d_inner + 2 * spec.ssm_n_groups * spec.ssm_d_state


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
    elif kind == "gated_deltanet":
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


def mixer_ops(spec: ModelSpec, kind: str, batch: int, seq: int) -> dict[str, int]:
    """One state-space mixer's forward FLOPs by op, keys "<kind>/<op>" (see the module docstring)."""
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
            "scan": 7 * T * E * N,
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


def layer_state_elements(spec: ModelSpec, mixers: tuple[str, ...]) -> int:
    """Elements of recurrent state one sequence keeps in one layer with these mixers (its conv window, and
    the SSM state but for LFM2's short conv); 0 for attention alone."""
    return sum(conv_channels(spec, kind) * spec.ssm_conv_kernel
               + (spec.ssm_d_inner * spec.ssm_d_state if kind != "short_conv" else 0)
               for kind in mixers if kind in SSM_MIXERS)
