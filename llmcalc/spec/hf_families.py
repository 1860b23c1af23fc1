"""The transformer families of ``llmcalc.spec.hf``: what each HF model_type leaves implicit in its modelling code
(gated MLP, norm kind, which linears carry biases, position embeddings), the HF class defaults that apply when a
config.json omits a key, and each family's derive step (``FAMILIES``, one ``hf_family.Family`` per model_type). Each
entry names the transformers file it mirrors. The table also holds the 2026 families (``hf_2026.RECENT_FAMILIES``)
and the hybrid and state-space ones (``hf_ssm.SSM_FAMILIES``), in that order. Nothing is inferred from a model's name.
"""

from __future__ import annotations

from typing import Any

from .hf_2026 import RECENT_FAMILIES
from .hf_family import Family, NoFormula, attention_bias, deepseek_mla, mlp_kind
from .hf_ssm import SSM_FAMILIES

_attention_bias = attention_bias


def _falcon(hf: dict, kw: dict) -> None:
    # modeling_falcon.py: n_kv = num_kv_heads (new arch) | 1 (multi_query) | n_heads; one `bias` flag.
    new_arch = hf.get("new_decoder_architecture", False)
    if new_arch:
        kw["n_kv_heads"] = hf.get("num_kv_heads") or kw["n_heads"]
    else:
        kw["n_kv_heads"] = 1 if hf.get("multi_query", True) else kw["n_heads"]
    # FalconMLP reads ffn_hidden_size only (default 4 * hidden_size), never intermediate_size.
    kw["d_ff"] = hf.get("ffn_hidden_size") or 4 * kw["d_model"]
    bias = bool(hf.get("bias", False))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    # FalconDecoderLayer: two norms unless attention and MLP run in parallel; then one shared norm,
    # or ln_attn + ln_mlp when num_ln_in_parallel_attn == 2 (its default under the new architecture).
    parallel = hf.get("parallel_attn", True)
    n_ln = hf.get("num_ln_in_parallel_attn") or (2 if new_arch else None)
    kw["norms_per_layer"] = 2 if not parallel or n_ln == 2 else 1
    kw["parallel_residual"] = bool(parallel or new_arch)
    kw["pos_emb"] = "alibi" if hf.get("alibi", False) else "rope"


def _gpt2(hf: dict, kw: dict) -> None:
    if hf.get("n_inner") is None:
        kw["d_ff"] = 4 * kw["d_model"]  # GPT2MLP: inner_dim = n_inner or 4 * n_embd


def _gpt_neox(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("attention_bias", True))  # GPTNeoXConfig.attention_bias defaults to True
    kw.update(qkv_bias=bias, out_bias=bias, parallel_residual=bool(hf.get("use_parallel_residual", True)))


def _t5(hf: dict, kw: dict) -> None:
    # T5: feed_forward_proj "relu" | "gelu" | "gated-gelu" | "gated-silu" (configuration_t5.py).
    proj = hf.get("feed_forward_proj", "relu")
    act = proj.split("-")[-1]
    if proj.startswith("gated-"):  # check_config_values admits gelu, gelu_new and silu only
        kw["mlp"] = "swiglu" if act == "silu" else "geglu"
    else:
        kw["mlp"] = "relu" if act == "relu" else "gelu" if "gelu" in act else "silu"


_deepseek = deepseek_mla


def _marian(hf: dict, kw: dict) -> None:
    # MarianConfig has separate encoder_*/decoder_* sizes; llmcalc models symmetric stacks.
    for enc, dec in (("encoder_ffn_dim", "decoder_ffn_dim"), ("encoder_attention_heads", "decoder_attention_heads")):
        if hf.get(dec) is not None and hf.get(enc) is not None and hf[dec] != hf[enc]:
            raise NoFormula(f"marian with {enc} {hf[enc]} and {dec} {hf[dec]}: no formula for asymmetric "
                            f"encoder and decoder stacks (llmcalc's are symmetric)")
    if hf.get("decoder_vocab_size") not in (None, hf.get("vocab_size")) or not hf.get(
        "share_encoder_decoder_embeddings", True
    ):
        raise NoFormula("marian with separate encoder and decoder vocabularies: no formula for unshared embeddings")
    kw["lm_head_bias"] = True  # MarianMTModel.final_logits_bias (1, V): a persistent buffer the checkpoint stores



FAMILIES: dict[str, Family] = {
    "llama": Family("models/llama/modeling_llama.py", {}, {"tie_word_embeddings": False}, _attention_bias),
    "mistral": Family("models/mistral/modeling_mistral.py", {}, {"tie_word_embeddings": False}),
    "mixtral": Family("models/mixtral/modeling_mixtral.py", {}, {"tie_word_embeddings": False}),
    "qwen2": Family(
        "models/qwen2/modeling_qwen2.py: q/k/v bias=True, o_proj bias=False",
        {"qkv_bias": True}, {"tie_word_embeddings": False},
    ),
    "gemma": Family("models/gemma/modeling_gemma.py", {}, {"tie_word_embeddings": True}, _attention_bias),
    "gemma2": Family(
        "models/gemma2/modeling_gemma2.py: input, post-attention, pre- and post-feedforward norms",
        {"norms_per_layer": 4}, {"tie_word_embeddings": True}, _attention_bias,
    ),
    "phi3": Family("models/phi3/modeling_phi3.py: fused qkv_proj and gate_up_proj, no biases", {},
                   {"tie_word_embeddings": False}),
    "olmo": Family(
        "models/olmo/modeling_olmo.py: OlmoLayerNorm has no weight or bias",
        {"norm": "layernorm", "norm_affine": False}, {"tie_word_embeddings": False}, _attention_bias,
    ),
    "gpt_neox": Family(
        "models/gpt_neox/modeling_gpt_neox.py: biased linears, LayerNorm, untied embed_out",
        {"norm": "layernorm", "mlp_bias": True}, {"tie_word_embeddings": False}, _gpt_neox, gated=False,
    ),
    "falcon": Family(
        "models/falcon/modeling_falcon.py", {"norm": "layernorm"}, {"tie_word_embeddings": True}, _falcon,
        gated=False,
    ),
    "gpt2": Family(
        "models/gpt2/modeling_gpt2.py: Conv1D with biases, learned wpe, LayerNorm",
        {"norm": "layernorm", "pos_emb": "learned", "qkv_bias": True, "out_bias": True, "mlp_bias": True},
        {"tie_word_embeddings": True, "n_positions": 1024, "activation_function": "gelu_new"}, _gpt2,
        gated=False,
    ),
    "deepseek_v2": Family(
        "models/deepseek_v2/modeling_deepseek_v2.py: MLA + MoE with shared experts",
        {}, {"tie_word_embeddings": False, "first_k_dense_replace": 0, "n_shared_experts": 2}, _deepseek,
    ),
    "deepseek_v3": Family(
        "models/deepseek_v3/modeling_deepseek_v3.py: MLA + MoE; e_score_correction_bias a stored buffer",
        {}, {"tie_word_embeddings": False, "first_k_dense_replace": 3, "n_shared_experts": 1}, _deepseek,
    ),
    "bert": Family(
        "models/bert/modeling_bert.py (BertModel): post-LN, embedding LayerNorm, token types, pooler",
        {"architecture": "encoder", "norm": "layernorm", "pos_emb": "learned", "qkv_bias": True,
         "out_bias": True, "mlp_bias": True, "final_norm": False, "embedding_norm": True,
         "lm_head": False, "pooler": True, "post_norm": True},
        {"type_vocab_size": 2, "max_position_embeddings": 512, "tie_word_embeddings": True}, gated=False,
    ),
    "t5": Family(
        "models/t5/modeling_t5.py: shared embedding, T5LayerNorm (weight only), relative bias in block 0",
        {"architecture": "encoder-decoder", "pos_emb": "relative"},
        {"tie_word_embeddings": True, "relative_attention_num_buckets": 32}, _t5, gated=False,
    ),
    "marian": Family(
        "models/marian/modeling_marian.py: post-LN, biased linears, sinusoidal positions, no final norm",
        {"architecture": "encoder-decoder", "norm": "layernorm", "pos_emb": "sinusoidal", "qkv_bias": True,
         "out_bias": True, "mlp_bias": True, "final_norm": False, "post_norm": True},
        {"tie_word_embeddings": True, "activation_function": "gelu"}, _marian, gated=False,
    ),
}


# --- Current-generation decoders (issue 9 part 1). Defaults are the HF config-class defaults of
# transformers 5 for every size/tying/bias key a published config may omit. ---


def _qk_norm_head(hf: dict, kw: dict) -> None:
    _attention_bias(hf, kw)
    kw["qk_norm"] = "head"  # q_norm/k_norm = RMSNorm(head_dim), shared by all heads


def _moe_every(hf: dict, kw: dict, expert_width_key: str = "moe_intermediate_size") -> None:
    """The routed-expert width and, Qwen-MoE's rule, which layers are MoE: layer i unless listed in
    mlp_only_layers, and only every decoder_sparse_step-th ((i + 1) % step == 0)."""
    kw["d_ff_expert"] = hf.get(expert_width_key) or kw.get("d_ff")
    step = hf.get("decoder_sparse_step") or 1
    only = set(hf.get("mlp_only_layers") or ())
    kw["moe_layers"] = tuple(i for i in range(kw["n_layers"]) if i not in only and (i + 1) % step == 0)


def _qwen3_moe(hf: dict, kw: dict) -> None:
    _qk_norm_head(hf, kw)
    _moe_every(hf, kw)


def _qwen2_moe(hf: dict, kw: dict) -> None:
    # Qwen2MoeAttention: q/k/v bias = config.qkv_bias (default True), o_proj bias-free; one shared
    # expert of shared_expert_intermediate_size behind a sigmoid gate Linear(D, 1).
    kw["qkv_bias"] = bool(hf.get("qkv_bias", True))
    _moe_every(hf, kw)
    kw.update(n_shared_experts=1, d_ff_shared=hf["shared_expert_intermediate_size"], shared_expert_gate=True)


def _llama4(hf: dict, kw: dict) -> None:
    # Llama4TextDecoderLayer: MoE in config.moe_layers (default every interleave_moe_layer_step-th,
    # counting from step - 1), experts and the shared expert of intermediate_size, dense layers of
    # intermediate_size_mlp. The QK-norm is an L2 norm without weights (no parameters).
    _attention_bias(hf, kw)
    L, width = kw["n_layers"], hf["intermediate_size"]
    step = hf.get("interleave_moe_layer_step") or 1
    layers = hf.get("moe_layers")
    kw["moe_layers"] = tuple(layers) if layers is not None else tuple(range(step - 1, L, step))
    kw.update(d_ff=hf["intermediate_size_mlp"], d_ff_expert=width, n_shared_experts=1, d_ff_shared=width)


def _gpt_oss(hf: dict, kw: dict) -> None:
    # GptOssAttention: biased q/k/v/o (attention_bias, default True) and a learned sink per head;
    # GptOssTopKRouter: Linear with bias; GptOssExperts: gate_up/down with biases, width intermediate_size.
    _attention_bias(hf, kw)
    kw.update(attention_sinks=True, router_bias=True, expert_bias=True, d_ff_expert=hf["intermediate_size"])


def _olmo2(hf: dict, kw: dict) -> None:
    _attention_bias(hf, kw)
    kw["qk_norm"] = "full"  # q_norm = RMSNorm(H·d_head), k_norm = RMSNorm(KV·d_head)


def _olmoe(hf: dict, kw: dict) -> None:
    _olmo2(hf, kw)
    kw["d_ff_expert"] = hf["intermediate_size"]  # OlmoeExperts use intermediate_size


def _experts_of_width_ffn(hf: dict, kw: dict) -> None:
    # Granite-MoE, PhiMoE: every layer MoE, experts of intermediate_size.
    _attention_bias(hf, kw)
    kw["d_ff_expert"] = hf["intermediate_size"]


def _granitemoeshared(hf: dict, kw: dict) -> None:
    _experts_of_width_ffn(hf, kw)
    if hf.get("shared_intermediate_size"):  # GraniteMoeSharedMLP, only when shared_intermediate_size > 0
        kw.update(n_shared_experts=1, d_ff_shared=hf["shared_intermediate_size"])


def _phi(hf: dict, kw: dict) -> None:
    # PhiDecoderLayer: one input_layernorm feeds attention and MLP in parallel; qk_layernorm is
    # LayerNorm(head_dim) with bias, shared by the heads.
    if hf.get("qk_layernorm"):
        kw.update(qk_norm="head", qk_norm_bias=True)


def _phimoe(hf: dict, kw: dict) -> None:
    _experts_of_width_ffn(hf, kw)
    kw["lm_head_bias"] = bool(hf.get("lm_head_bias", False))
    # modeling_phimoe.sparsemixer picks a first and a second expert whatever num_experts_per_tok says.
    if kw.get("n_experts", 0) >= 2 and kw.get("n_experts_per_token") != 2:
        kw["notes"] = kw.get("notes", ()) + (
            f"num_experts_per_tok {kw.get('n_experts_per_token')} is ignored, as transformers' PhiMoE "
            f"sparsemixer routes every token to 2 experts",)
        kw["n_experts_per_token"] = 2


def _four_d(hf: dict, kw: dict, key: str) -> None:
    if hf.get(key) is None:  # GPT-J n_inner, GPT-Neo intermediate_size: None means 4·d_model
        kw["d_ff"] = 4 * kw["d_model"]


def _gptj(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "n_inner")


def _gpt_neo(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "intermediate_size")


def _gpt_bigcode(hf: dict, kw: dict) -> None:
    _four_d(hf, kw, "n_inner")
    kw["n_kv_heads"] = 1 if hf.get("multi_query", True) else kw["n_heads"]  # c_attn: D + 2·d_head with MQA


def _opt(hf: dict, kw: dict) -> None:
    # OPTDecoder: positions table of max_position_embeddings + 2 rows (the offset of 2), biases from
    # enable_bias, ffn_dim wide fc1/fc2, post-LN without a final norm when do_layer_norm_before is
    # false (OPT-350m), project_in/out when word_embed_proj_dim differs from hidden_size.
    kw["n_positions"] = hf["max_position_embeddings"] + 2
    kw["d_ff"] = hf["ffn_dim"]
    bias = bool(hf.get("enable_bias", True))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    kw["norm_affine"] = bool(hf.get("layer_norm_elementwise_affine", True))
    pre = bool(hf.get("do_layer_norm_before", True))
    kw["post_norm"] = not pre
    kw["final_norm"] = pre and not hf.get("_remove_final_layer_norm", False)
    proj = hf.get("word_embed_proj_dim")
    if proj is not None and proj != kw["d_model"]:
        kw["d_embed"] = proj


def _bloom(hf: dict, kw: dict) -> None:
    kw["d_ff"] = 4 * kw["d_model"]  # BloomMLP: dense_h_to_4h is always 4·hidden_size


def _starcoder2(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("use_bias", True))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)


def _stablelm(hf: dict, kw: dict) -> None:
    # StableLmAttention: q/k/v bias = use_qkv_bias; qk_layernorm is one bias-free LayerNorm(head_dim)
    # per head; use_parallel_residual drops post_attention_layernorm (one shared norm).
    kw["qkv_bias"] = bool(hf.get("use_qkv_bias", False))
    if hf.get("qk_layernorm"):
        kw["qk_norm"] = "full"
    if hf.get("use_parallel_residual"):
        kw.update(parallel_residual=True, norms_per_layer=1)


def _cohere(hf: dict, kw: dict) -> None:
    # CohereDecoderLayer: attention and MLP in parallel off one input_layernorm; CohereLayerNorm has a
    # weight only; use_qk_norm is a CohereLayerNorm over (heads, head_dim): a weight per head.
    _attention_bias(hf, kw)
    if hf.get("use_qk_norm"):
        kw["qk_norm"] = "full"


def _mpt(hf: dict, kw: dict) -> None:
    # MptBlock: Wqkv (3·D) and out_proj bias-free, norms with their bias set to None, ALiBi, and an
    # FFN of 4·d_model whatever expansion_ratio says (modeling_mpt.py MptMLP).
    kw["d_ff"] = 4 * kw["d_model"]
    ratio = hf.get("expansion_ratio", 4)
    if ratio != 4:
        kw["notes"] = kw.get("notes", ()) + (
            f"expansion_ratio {ratio} is ignored, as transformers' MptMLP does: its FFN is 4·d_model",)


def _dbrx(hf: dict, kw: dict) -> None:
    # DbrxAttention: Wqkv of D + 2·kv_n_heads·d_head, no biases; DbrxExperts w1/v1/w2 of ffn_hidden_size.
    attn, ffn = hf.get("attn_config") or {}, hf.get("ffn_config") or {}
    kw["n_kv_heads"] = attn.get("kv_n_heads", 1)
    width = ffn.get("ffn_hidden_size", 3584)
    kw.update(n_experts=ffn.get("moe_num_experts", 4), n_experts_per_token=ffn.get("moe_top_k", 1),
              d_ff_expert=width, d_ff=width)
    act = (ffn.get("ffn_act_fn") or {}).get("name", "silu")
    kw["mlp"] = mlp_kind(act, True)


def _glm(hf: dict, kw: dict) -> None:
    kw["qkv_bias"] = bool(hf.get("attention_bias", True))  # GlmAttention: o_proj is bias-free


def _glm4_moe(hf: dict, kw: dict) -> None:
    # Glm4MoeAttention: q/k/v bias = attention_bias, o_proj bias-free, optional per-head QK RMSNorm;
    # DeepSeek-style MoE (first_k_dense_replace dense layers, shared experts). The MTP layers of
    # num_nextn_predict_layers are not part of the transformers model and are not counted.
    kw["qkv_bias"] = bool(hf.get("attention_bias", False))
    if hf.get("use_qk_norm"):
        kw["qk_norm"] = "head"


def _ernie(hf: dict, kw: dict) -> None:
    bias = bool(hf.get("use_bias", False))  # every linear (Ernie4_5ForCausalLM's LM head excepted)
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)


def _ernie_moe(hf: dict, kw: dict) -> None:
    # Ernie4_5_MoeDecoderLayer: MoE when (i + 1) % moe_layer_interval == 0 and start <= i <= end
    # (end -1 = the last layer); shared experts of moe_intermediate_size·moe_num_shared_experts.
    _ernie(hf, kw)
    kw["lm_head_bias"] = kw["mlp_bias"]  # Ernie4_5_MoeForCausalLM: lm_head bias=config.use_bias
    L = kw["n_layers"]
    start, end = hf.get("moe_layer_start_index", 1), hf.get("moe_layer_end_index", -1)
    end = L - 1 if end == -1 else end
    step = hf.get("moe_layer_interval", 1)
    kw["moe_layers"] = tuple(i for i in range(L) if (i + 1) % step == 0 and start <= i <= end)
    kw["n_shared_experts"] = hf.get("moe_num_shared_experts", 2) or 0
    kw["router_score_bias"] = bool(kw.get("n_experts"))  # Ernie4_5_MoeStatics: e_score_correction_bias, frozen


def _seed_oss(hf: dict, kw: dict) -> None:
    kw.update(qkv_bias=bool(hf.get("attention_bias", True)), out_bias=bool(hf.get("attention_out_bias", False)),
              mlp_bias=bool(hf.get("mlp_bias", False)))


def _per_layer(hf: dict, key: str, default: Any) -> Any:
    """Hunyuan-MoE keys may be one value or one per layer (HunYuanMoEV1Moe reads config.moe_topk[layer_idx]); the
    formula models one MoE shape, so a list whose entries differ has none (NoFormula)."""
    value = hf.get(key, default)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise NoFormula(f"hunyuan_v1_moe with {key} differing between layers ({sorted(set(value))}): no formula "
                            f"for MoE layers of different shapes")
        value = value[0]
    return value


def _hunyuan_moe(hf: dict, kw: dict) -> None:
    # HunYuanMoEV1Moe: every layer MoE; experts and one shared_mlp of intermediate_size; router wg bias-free.
    _qk_norm_head(hf, kw)
    kw.update(n_experts=_per_layer(hf, "num_experts", 1), n_experts_per_token=_per_layer(hf, "moe_topk", 1),
              d_ff_expert=hf["intermediate_size"], n_shared_experts=1, d_ff_shared=hf["intermediate_size"])


def _sizes(**keys: Any) -> dict:
    return keys


FAMILIES.update({
    "qwen3": Family(
        "models/qwen3/modeling_qwen3.py: per-head QK RMSNorm, attention_bias on q/k/v/o",
        {}, _sizes(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False),
        _qk_norm_head,
    ),
    "qwen3_moe": Family(
        "models/qwen3_moe/modeling_qwen3_moe.py: per-head QK-norm, top-k experts, mlp_only_layers",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                   num_attention_heads=32, num_key_value_heads=4, tie_word_embeddings=False, num_experts=128,
                   num_experts_per_tok=8, moe_intermediate_size=768), _qwen3_moe,
    ),
    "qwen2_moe": Family(
        "models/qwen2_moe/modeling_qwen2_moe.py: q/k/v bias, gated shared expert",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                   num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False, num_experts=60,
                   num_experts_per_tok=4, moe_intermediate_size=1408, shared_expert_intermediate_size=5632),
        _qwen2_moe,
    ),
    "gemma3_text": Family(
        "models/gemma3/modeling_gemma3.py (Gemma3ForCausalLM): sandwich norms, per-head QK-norm, tied",
        {"norms_per_layer": 4}, _sizes(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                                       num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                                       head_dim=256, tie_word_embeddings=True,
                                       hidden_activation="gelu_pytorch_tanh"), _qk_norm_head,
    ),
    "llama4_text": Family(
        "models/llama4/modeling_llama4.py (Llama4ForCausalLM): interleaved MoE with a shared expert",
        {}, _sizes(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                   num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                   tie_word_embeddings=False, num_local_experts=16, num_experts_per_tok=1), _llama4,
    ),
    "gpt_oss": Family(
        "models/gpt_oss/modeling_gpt_oss.py: attention sinks, biased attention, router and experts",
        {}, _sizes(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
                   attention_bias=True, num_local_experts=128, num_experts_per_tok=4), _gpt_oss,
    ),
    "olmo2": Family(
        "models/olmo2/modeling_olmo2.py: QK RMSNorm over all heads, norms after each sublayer",
        {}, _sizes(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _olmo2,
    ),
    "olmo3": Family(
        "models/olmo3/modeling_olmo3.py: as OLMo-2, with sliding-window layers",
        {}, _sizes(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _olmo2,
    ),
    "olmoe": Family(
        "models/olmoe/modeling_olmoe.py: QK-norm over all heads, experts of intermediate_size",
        {}, _sizes(vocab_size=50304, hidden_size=2048, intermediate_size=2048, num_hidden_layers=16,
                   num_attention_heads=16, tie_word_embeddings=False, num_experts=64, num_experts_per_tok=8),
        _olmoe,
    ),
    "granite": Family(
        "models/granite/modeling_granite.py: Llama with scalar multipliers (no parameters)",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _attention_bias,
    ),
    "granitemoe": Family(
        "models/granitemoe/modeling_granitemoe.py: every layer MoE, experts of intermediate_size",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False, num_local_experts=8,
                   num_experts_per_tok=2), _experts_of_width_ffn,
    ),
    "granitemoeshared": Family(
        "models/granitemoeshared/modeling_granitemoeshared.py: Granite-MoE plus a shared MLP",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False, num_local_experts=8,
                   num_experts_per_tok=2), _granitemoeshared,
    ),
    "phi": Family(
        "models/phi/modeling_phi.py: parallel block with one LayerNorm, biased linears and LM head",
        {"norm": "layernorm", "parallel_residual": True, "norms_per_layer": 1, "qkv_bias": True, "out_bias": True,
         "mlp_bias": True, "lm_head_bias": True},
        _sizes(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
               num_attention_heads=32, tie_word_embeddings=False, hidden_act="gelu_new"), _phi, gated=False,
    ),
    "phimoe": Family(
        "models/phimoe/modeling_phimoe.py: LayerNorm, biased attention (attention_bias), optional LM-head bias",
        {"norm": "layernorm"}, _sizes(vocab_size=32064, hidden_size=4096, intermediate_size=6400,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                      tie_word_embeddings=False, num_local_experts=16, num_experts_per_tok=2),
        _phimoe,
    ),
    "gptj": Family(
        "models/gptj/modeling_gptj.py: parallel block with one LayerNorm, bias-free attention, LM-head bias",
        {"norm": "layernorm", "parallel_residual": True, "norms_per_layer": 1, "mlp_bias": True,
         "lm_head_bias": True},
        _sizes(vocab_size=50400, n_embd=4096, n_layer=28, n_head=16, n_positions=2048, tie_word_embeddings=False,
               activation_function="gelu_new"), _gptj, gated=False,
    ),
    "gpt_neo": Family(
        "models/gpt_neo/modeling_gpt_neo.py: learned positions, bias-free q/k/v, biased out_proj and MLP",
        {"norm": "layernorm", "pos_emb": "learned", "out_bias": True, "mlp_bias": True},
        _sizes(vocab_size=50257, hidden_size=2048, num_layers=24, num_heads=16, max_position_embeddings=2048,
               tie_word_embeddings=True, activation_function="gelu_new"), _gpt_neo, gated=False,
    ),
    "opt": Family(
        "models/opt/modeling_opt.py: learned positions with an offset of 2, project_in/out, ffn_dim",
        {"norm": "layernorm", "pos_emb": "learned"},
        _sizes(vocab_size=50272, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072,
               max_position_embeddings=2048, tie_word_embeddings=True, activation_function="relu"),
        _opt, gated=False,
    ),
    "bloom": Family(
        "models/bloom/modeling_bloom.py: ALiBi, embedding LayerNorm, fused biased qkv, 4·D MLP",
        {"norm": "layernorm", "pos_emb": "alibi", "embedding_norm": True, "qkv_bias": True, "out_bias": True,
         "mlp_bias": True},
        _sizes(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True), _bloom,
        gated=False,
    ),
    "gpt_bigcode": Family(
        "models/gpt_bigcode/modeling_gpt_bigcode.py: GPT-2 with multi-query attention (multi_query)",
        {"norm": "layernorm", "pos_emb": "learned", "qkv_bias": True, "out_bias": True, "mlp_bias": True},
        _sizes(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024, tie_word_embeddings=True,
               activation_function="gelu_pytorch_tanh"), _gpt_bigcode, gated=False,
    ),
    "starcoder2": Family(
        "models/starcoder2/modeling_starcoder2.py: LayerNorm, use_bias on every linear, plain GELU MLP",
        {"norm": "layernorm"}, _sizes(vocab_size=49152, hidden_size=3072, intermediate_size=12288,
                                      num_hidden_layers=30, num_attention_heads=24, num_key_value_heads=2,
                                      tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh"),
        _starcoder2, gated=False,
    ),
    "stablelm": Family(
        "models/stablelm/modeling_stablelm.py: LayerNorm, use_qkv_bias, per-head qk_layernorm, parallel option",
        {"norm": "layernorm"}, _sizes(vocab_size=50304, hidden_size=2560, intermediate_size=6912,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                      tie_word_embeddings=False), _stablelm,
    ),
    "cohere": Family(
        "models/cohere/modeling_cohere.py: parallel block, one bias-free LayerNorm, QK-norm per head, tied",
        {"norm": "layernorm", "norm_bias": False, "parallel_residual": True, "norms_per_layer": 1},
        _sizes(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, tie_word_embeddings=True), _cohere,
    ),
    "cohere2": Family(
        "models/cohere2/modeling_cohere2.py: Cohere's parallel block with sliding-window layers, tied",
        {"norm": "layernorm", "norm_bias": False, "parallel_residual": True, "norms_per_layer": 1},
        _sizes(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
               num_attention_heads=64, tie_word_embeddings=True), _attention_bias,
    ),
    "mpt": Family(
        "models/mpt/modeling_mpt.py: ALiBi, no biases at all (norms included), FFN of 4·d_model",
        {"norm": "layernorm", "norm_bias": False, "pos_emb": "alibi"},
        _sizes(vocab_size=50368, d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, tie_word_embeddings=True),
        _mpt, gated=False,
    ),
    "dbrx": Family(
        "models/dbrx/modeling_dbrx.py: fused GQA Wqkv, bias-free LayerNorm, every layer MoE",
        {"norm": "layernorm", "norm_bias": False},
        _sizes(vocab_size=32000, d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048,
               tie_word_embeddings=False), _dbrx,
    ),
    "glm": Family(
        "models/glm/modeling_glm.py: q/k/v bias, fused gate_up_proj",
        {}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                   num_attention_heads=32, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False), _glm,
    ),
    "glm4": Family(
        "models/glm4/modeling_glm4.py: GLM with post-attention and post-MLP norms (4 per block)",
        {"norms_per_layer": 4}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=13696,
                                       num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2,
                                       head_dim=128, tie_word_embeddings=False), _glm,
    ),
    "glm4_moe": Family(
        "models/glm4_moe/modeling_glm4_moe.py: DeepSeek-style MoE, q/k/v bias, optional QK-norm (MTP not built)",
        {}, _sizes(vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
                   num_attention_heads=96, num_key_value_heads=8, tie_word_embeddings=False,
                   moe_intermediate_size=1408, n_shared_experts=1, n_routed_experts=128, num_experts_per_tok=8,
                   first_k_dense_replace=1), _glm4_moe,
    ),
    "ernie4_5": Family(
        "models/ernie4_5/modeling_ernie4_5.py: use_bias on every linear and the LM head, tied",
        {}, _sizes(vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
                   num_attention_heads=16, num_key_value_heads=2, head_dim=128, tie_word_embeddings=True), _ernie,
    ),
    "ernie4_5_moe": Family(
        "models/ernie4_5_moe/modeling_ernie4_5_moe.py: MoE from moe_layer_start_index, shared experts",
        {}, _sizes(vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
                   num_attention_heads=20, num_key_value_heads=4, tie_word_embeddings=True,
                   moe_intermediate_size=1536, moe_num_experts=64, moe_k=6), _ernie_moe,
    ),
    "exaone4": Family(
        "models/exaone4/modeling_exaone4.py: per-head QK-norm, norms after each sublayer, no biases",
        {"qk_norm": "head"}, _sizes(vocab_size=102400, hidden_size=4096, intermediate_size=16384,
                                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                    tie_word_embeddings=False),
    ),
    "smollm3": Family(
        "models/smollm3/modeling_smollm3.py: Llama with NoPE layers (no parameters), tied",
        {}, _sizes(vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                   num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=True), _attention_bias,
    ),
    "seed_oss": Family(
        "models/seed_oss/modeling_seed_oss.py: q/k/v bias (attention_bias), o bias (attention_out_bias)",
        {}, _sizes(vocab_size=155136, hidden_size=4096, intermediate_size=27648, num_hidden_layers=64,
                   num_attention_heads=80, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
        _seed_oss,
    ),
    "hunyuan_v1_dense": Family(
        "models/hunyuan_v1_dense/modeling_hunyuan_v1_dense.py: per-head query/key RMSNorm",
        {}, _sizes(vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _qk_norm_head,
    ),
    "hunyuan_v1_moe": Family(
        "models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py: per-head QK-norm, experts plus one shared MLP",
        {}, _sizes(vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                   num_attention_heads=32, tie_word_embeddings=False), _hunyuan_moe,
        per_layer=("num_experts", "moe_topk"),
    ),
    "ministral": Family(
        "models/ministral/modeling_ministral.py: Mistral with sliding-window layers, no biases",
        {}, _sizes(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    ),
    "nemotron": Family(
        "models/nemotron/modeling_nemotron.py: Nemotron-4, LayerNorm1P (weight and bias), a plain relu2 MLP "
        "(up/down), partial rotary, untied head",
        {"norm": "layernorm"}, _sizes(vocab_size=256000, hidden_size=6144, intermediate_size=24576,
                                      num_hidden_layers=32, num_attention_heads=48, hidden_act="relu2",
                                      tie_word_embeddings=False), _attention_bias, gated=False,
    ),
})
# Kimi-K2's published config says model_type "kimi_k2" and loads DeepseekV3 classes (auto_map); Kimi_K25Config's
# __post_init__ reads a text_config "kimi_k2" as deepseek_v3 too (models/kimi_k25/configuration_kimi_k25.py).
FAMILIES["kimi_k2"] = FAMILIES["deepseek_v3"]


def _glm4v_moe_text(hf: dict, kw: dict) -> None:
    # Glm4vMoeTextAttention (models/glm4v_moe/modeling_glm4v_moe.py): q/k/v bias = attention_bias (default True),
    # o_proj bias-free, no QK-norm whatever use_qk_norm says; head_dim from the key when given, else D // H.
    kw["qkv_bias"] = bool(hf.get("attention_bias", True))


def _minimax_m2(hf: dict, kw: dict) -> None:
    # MiniMaxM2Attention: q_norm = RMSNorm(H·d_head), k_norm = RMSNorm(KV·d_head), always built (use_qk_norm is
    # not read); every layer MoE with experts of intermediate_size, no shared expert (shared_intermediate_size
    # is not read); the router's e_score_correction_bias is a stored buffer (SCORE_BIAS_STORED).
    _olmoe(hf, kw)


# 2026's relabels: families whose layers an existing entry already describes, with their own config-class defaults
# (configuration_<type>.py of transformers 5.24).
FAMILIES.update({
    "minimax_m2": Family(
        "models/minimax_m2/modeling_minimax_m2.py: QK RMSNorm over all heads, every layer MoE with experts of "
        "intermediate_size, untied (MTP modules not built)",
        {}, _sizes(vocab_size=200064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
                   num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                   num_local_experts=256, num_experts_per_tok=8), _minimax_m2,
        aliases={"num_experts": "num_local_experts"},
    ),
    "ministral3": Family(
        "models/ministral3/modeling_ministral3.py: Mistral's layers (its llama-4 query scale has no parameters), an "
        "optional sliding window on every layer",
        {}, _sizes(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=34,
                   num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    ),
    "qwen3_vl_text": Family(
        "models/qwen3_vl/modeling_qwen3_vl.py (Qwen3VLTextModel): Qwen3's layers (per-head QK-norm, attention_bias "
        "on q/k/v/o); M-RoPE and DeepStack have no text parameters",
        {}, _sizes(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False),
        _qk_norm_head,
    ),
    "qwen3_vl_moe_text": Family(
        "models/qwen3_vl_moe/modeling_qwen3_vl_moe.py (Qwen3VLMoeTextModel): Qwen3-MoE's layers",
        {}, _sizes(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                   num_attention_heads=16, num_key_value_heads=16, head_dim=128, tie_word_embeddings=False,
                   num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408), _qwen3_moe,
        aliases={"num_experts": "num_local_experts"},
    ),
    "glm4v_moe_text": Family(
        "models/glm4v_moe/modeling_glm4v_moe.py (Glm4vMoeTextModel): GLM-4.5's MoE layers with q/k/v bias on by "
        "default and no QK-norm",
        {}, _sizes(vocab_size=151424, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
                   num_attention_heads=96, num_key_value_heads=8, tie_word_embeddings=False,
                   moe_intermediate_size=1408, n_shared_experts=1, n_routed_experts=128, num_experts_per_tok=8,
                   first_k_dense_replace=1), _glm4v_moe_text,
        aliases={"num_local_experts": "n_routed_experts"},
    ),
})
FAMILIES.update(RECENT_FAMILIES)

# Hybrid and state-space model_types (Mamba, Mamba-2, Jamba, Bamba, Nemotron-H, ...): hf_ssm.py.
FAMILIES.update(SSM_FAMILIES)
