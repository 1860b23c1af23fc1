"""The linear weights of one block, as transformers builds them: (component key, peft target, d_in, d_out) for
each nn.Linear of an attention block (MLA, Gemma 4's global layers, KV-shared layers, K = V, DeepSeek-V4's grouped
output, its compressor and the lightning indexer), of an MLP, and of a state-space or conv mixer.

Read by `finetune` (which of them LoRA adapts: the peft target) and by `quant` (every weight matrix a checkpoint
ships): its own module so that `infer` and `serve` do not import the fine-tuning and training-memory models.
Shapes as analytic/params.py and ssm.mixer_params count the same weights (named beside each function).
"""

from __future__ import annotations

from ..errors import LlmcalcError
from ..spec import ModelSpec

Shape = tuple[str, str | None, int, int]  # (component key, peft target, d_in, d_out)
# model_types whose Mamba mixers' out_proj peft refuses to adapt (peft 0.21 tuners_utils.py,
# _check_lora_target_modules_mamba: incompatible_modules {"out_proj", "conv1d"})
PEFT_NO_OUT_PROJ = ("falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h")


def attention_linears(spec: ModelSpec, prefix: str, cross: bool = False, layer: int = 0) -> list[Shape]:
    """The nn.Linear modules of one attention block in layer `layer`, each with the peft target that adapts it: its
    own geometry (Gemma 4's global layers), no K/V of a KV-shared layer, no v_proj where K = V, DeepSeek-V4's
    low-rank query and grouped output (its o_a_proj is one nn.Linear of H·d_head/g -> g·o_lora_rank applied per
    group), and the lightning indexer's and KV compressor's projections (all-linear only)."""
    D, H = spec.d_model, spec.n_heads
    mla = spec.mla
    if mla is not None and not cross:
        qk = mla.qk_head_dim
        out: list[tuple[str, str | None, int, int]] = []
        if mla.q_lora_rank:
            out += [(f"{prefix}/q_a_proj", "q_proj", D, mla.q_lora_rank),
                    (f"{prefix}/q_b_proj", "q_proj", mla.q_lora_rank, H * qk)]
        else:
            out.append((f"{prefix}/q_proj", "q_proj", D, H * qk))
        return out + [(f"{prefix}/kv_a_proj", "kv", D, mla.kv_lora_rank + mla.qk_rope_head_dim),
                      (f"{prefix}/kv_b_proj", "kv", mla.kv_lora_rank, H * (mla.qk_nope_head_dim + mla.v_head_dim)),
                      (f"{prefix}/o_proj", "o_proj", H * mla.v_head_dim, D)] + indexer_linears(spec, prefix, layer)
    dh = spec.d_head if cross else spec.layer_d_head(layer)
    kv = H if cross else spec.layer_kv_heads(layer)
    q = H * dh * (2 if spec.attn_output_gate and not cross else 1)  # Qwen3-Next: queries and output gates
    r = 0 if cross else spec.query_rank
    shapes: list[Shape] = ([(f"{prefix}/q_a_proj", "q_proj", D, r), (f"{prefix}/q_b_proj", "q_proj", r, q)] if r
                           else [(f"{prefix}/q_proj", "q_proj", D, q)])
    if cross or not spec.kv_shared(layer):
        if not cross and spec.k_eq_v == "all":  # DeepSeek-V4's kv_proj: one K = V head
            shapes.append((f"{prefix}/k_proj", "kv", D, kv * dh))
        else:
            shapes.append((f"{prefix}/k_proj", "k_proj", D, kv * dh))
            if cross or spec.has_v_proj(layer):
                shapes.append((f"{prefix}/v_proj", "v_proj", D, kv * dh))
    if spec.o_groups and not cross:
        g, ro = spec.o_groups, spec.o_lora_rank
        shapes += [(f"{prefix}/o_a_proj", "o_proj", H * dh // g, g * ro), (f"{prefix}/o_b_proj", "o_proj", g * ro, D)]
    else:
        shapes.append((f"{prefix}/o_proj", "o_proj", H * dh, D))
    if not cross and spec.compression(layer) != "none":  # kv_proj and gate_proj of the compressor
        width = spec.d_head * (2 if spec.compression(layer) == "csa" else 1)
        shapes += [(f"{prefix}/compressor", "compressor", D, width)] * 2
    return shapes + ([] if cross else indexer_linears(spec, prefix, layer))


def indexer_linears(spec: ModelSpec, prefix: str, layer: int) -> list[Shape]:
    """The lightning indexer's linears (shapes as analytic/params.py:_indexer), adapted by all-linear only."""
    if not spec.has_indexer(layer):
        return []
    D, Hi, di, q = spec.d_model, spec.index_n_heads, spec.index_head_dim, spec.q_latent
    key = f"{prefix}/indexer"
    shapes: list[Shape]
    if spec.compression(layer) == "csa":  # DeepseekV4Indexer: kv_proj, gate_proj, q_b_proj, scorer.weights_proj
        shapes = [(key, "indexer", D, 2 * di), (key, "indexer", D, 2 * di), (key, "indexer", q, Hi * di),
                  (key, "indexer", D, Hi)]
    else:
        shapes = [(key, "indexer", q, Hi * di), (key, "indexer", D, di), (key, "indexer", D, Hi)]
    return shapes


def ffn_linears(spec: ModelSpec, prefix: str, width: int, d_in: int = 0) -> list[Shape]:
    """A (gated) MLP's nn.Linear shapes, reading and writing `d_in` (0: D; a routed expert: spec.expert_d_in)."""
    D = d_in or spec.d_model
    out: list[Shape] = [(f"{prefix}/gate_proj", "gate_proj", D, width)] if spec.gated else []
    return out + [(f"{prefix}/up_proj", "up_proj", D, width), (f"{prefix}/down_proj", "down_proj", width, D)]


def mixer_linears(spec: ModelSpec, kind: str) -> list[Shape]:
    """The projections of one state-space or conv mixer (shapes as llmcalc.analytic.ssm.mixer_params)."""
    D, E, N, H, G = spec.d_model, spec.ssm_d_inner, spec.ssm_d_state, spec.ssm_n_heads, spec.ssm_n_groups
    if kind == "mamba":  # MambaMixer: in_proj D -> 2E (x, z), x_proj E -> R + 2N (dt, B, C), dt_proj R -> E
        R = spec.ssm_dt_rank
        shapes = [("in_proj", D, 2 * E), ("x_proj", E, R + 2 * N), ("dt_proj", R, E), ("out_proj", E, D)]
    elif kind == "mamba2":  # Mamba2Mixer: in_proj D -> z, x, B, C, dt
        shapes = [("in_proj", D, 2 * E + 2 * G * N + H), ("out_proj", E, D)]
    elif kind == "gated_deltanet" and spec.ssm_split_in_proj:  # Qwen3_5GatedDeltaNet: the same weights, 4 linears
        shapes = [("in_proj_qkv", D, 2 * G * N + E), ("in_proj_z", D, E), ("in_proj_b", D, H), ("in_proj_a", D, H),
                  ("out_proj", E, D)]
    elif kind == "gated_deltanet":  # Qwen3NextGatedDeltaNet
        shapes = [("in_proj_qkvz", D, 2 * G * N + 2 * E), ("in_proj_ba", D, 2 * H), ("out_proj", E, D)]
    elif kind == "kda":  # KimiLinearDeltaAttention: q/k/v, the low-rank forget and output gates, b_proj, o_proj
        dv = E // H
        shapes = [("q_proj", D, G * N), ("k_proj", D, G * N), ("v_proj", D, E), ("f_proj", D, N), ("f_proj", N, G * N),
                  ("b_proj", D, H), ("g_proj", D, dv), ("g_proj", dv, E), ("out_proj", E, D)]
    elif kind == "short_conv":  # Lfm2ShortConv: in_proj D -> B, C, x
        shapes = [("in_proj", D, 3 * D), ("out_proj", D, D)]
    else:
        raise LlmcalcError(f"{spec.name}: fine-tuning is not modelled for its {kind} layers (Zamba2's shared "
                           f"blocks are one module reused by many layers, with adapters of their own)")
    frozen = ("out_proj",) if kind in ("mamba", "mamba2") and spec.model_type in PEFT_NO_OUT_PROJ else ()
    # KDA's q/k/v/o are the mixer's own: all-linear adapts them, a q,k,v,o list names attention's (its o_proj
    # included, as peft matches module names)
    own = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "out_proj": "o_proj"} if kind == "kda" else {}
    return [(f"{kind}/{name}", None if name in frozen else own.get(name, name), d_in, d_out)
            for name, d_in, d_out in shapes]
