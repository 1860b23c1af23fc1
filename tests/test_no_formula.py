"""Issue 39: a formula where one exists, transformers where it does not.

A config of a family llmcalc has formulas for, with one part none of them covers (Nemotron 3 Super's latent MoE
projection, a per-layer list the formula reads as one number, an activation or stack layout it has no formula for),
is counted by transformers for the whole model with one note line saying what; the options that need the
formula (a sharded `profile`, `--finetune`) refuse, in one line. Per-layer lists (moe_layer_freq masks, HunYuan's
moe_topk, Gemma 3n's intermediate_size) no longer stop a config before either path is tried. References: the
transformers model built from the same config on the meta device (sum of its parameters, per module), or counts by hand.
"""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clirun import cli_json, one_line_error, run  # noqa: E402

from llmcalc.analytic.params import count_params  # noqa: E402
from llmcalc.spec import UnknownModelType, spec_from_hf  # noqa: E402

CONFIGS = Path(__file__).parent / "configs" / "fallback"
SUPER = CONFIGS / "nemotron-3-super-shape.json"
MIMO = CONFIGS / "mimo-v2-flash-shape.json"
M3 = CONFIGS / "minimax-m3-shape.json"
# NemotronHMoE with mlp_bias: a biased shared expert (and latent projections) beside bias-free routed experts
BIASED_NOTE = "nemotron_h with mlp_bias true in its MoE layers: no formula"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "cache"))


def load(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def meta_model(hf: dict, text: bool = False):
    """transformers' causal LM of `hf` on the meta device (its text model when `text`: a multimodal config)."""
    kwargs = {k: v for k, v in hf.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(hf["model_type"], **kwargs)
    if text:
        config = config.text_config
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def n_params(model, part: str = "") -> int:
    """What the checkpoint stores (llmcalc's convention, tests/reference.py:stored_state: parameters, frozen ones
    too, and persistent buffers such as a router's e_score_correction_bias; not Marian's sinusoidal tables, which
    save_pretrained leaves out), the tensors whose name holds `part`."""
    from reference import stored_state

    return sum(t.numel() for name, t in stored_state(model).items() if part in name)


BIASED = {**{k: v for k, v in json.loads(SUPER.read_text()).items() if not k.startswith("_")}, "mlp_bias": True}


def write(tmp_path, hf: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    return path


def test_nemotron_3_super_latent_moe_has_a_formula_exact_against_transformers():
    """Was counted by transformers ("no formula for the latent MoE projection"). transformers 5.25's NemotronHMoE
    builds fc1_latent_proj (D -> latent) and fc2_latent_proj (latent -> D) around experts whose up/down read the
    latent width; the formula counts the same tensors (the FLOPs against torch's counter: tests/test_ssm.py, whose
    generated nemotron_h configs draw moe_latent_size)."""
    model = meta_model(load(SUPER))
    data = cli_json("params", SUPER)
    assert data["method"] == "analytic" and data["total"] == n_params(model)
    assert data["components"]["moe/latent_proj"] == n_params(model, "latent_proj") == 2 * 2 * 64 * 16
    assert data["components"]["moe/experts"] == n_params(model, "experts.") - n_params(model, "shared_experts")


@pytest.mark.parametrize("argv", [
    ["flops", "--seq-len", "64"],
    ["memory", "--gpu", "h100-sxm", "--seq-len", "64"],
    ["serve", "--n-gpus", "1", "--gpu", "h100-sxm"],
    ["infer", "--gpu", "h100-sxm", "--prompt", "64", "--generate", "8"],
    ["train", "--tokens", "1e9", "--gpu", "h100-sxm", "--n-gpus", "8", "--global-batch", "64", "--seq-len", "64"],
])
def test_every_command_answers_for_the_latent_moe(argv):
    """Issue 39: `train --global-batch` refused Nemotron 3 Super (the measured step model has no Mamba kernels)."""
    data = cli_json(argv[0], SUPER, *argv[1:])
    assert data.get("method", "analytic") == "analytic"


@pytest.mark.parametrize("argv", [
    ["flops", "--seq-len", "64"],
    ["memory", "--gpu", "h100-sxm", "--seq-len", "64"],
    ["serve", "--n-gpus", "1", "--gpu", "h100-sxm"],
    ["infer", "--gpu", "h100-sxm", "--prompt", "64", "--generate", "8"],
    ["train", "--tokens", "1e9", "--gpu", "h100-sxm", "--n-gpus", "8", "--global-batch", "64", "--seq-len", "64",
     "--mfu", "0.4"],
])
def test_every_command_answers_for_a_part_without_a_formula_and_says_why_once(tmp_path, argv):
    path = write(tmp_path, BIASED)
    result = run(argv[0], path, *argv[1:])
    assert result.exit_code == 0, result.output
    assert result.stdout.count(BIASED_NOTE) == 1, result.stdout
    data = cli_json(argv[0], path, *argv[1:])
    assert data["method"] == "transformers"


def test_options_that_need_the_formula_say_which_in_one_line(tmp_path):
    line = one_line_error("profile", write(tmp_path, BIASED), "--virtual", "--world-size", "2")
    assert "--world-size" in line and "nemotron_h has no llmcalc formula" in line


def test_the_exception_carries_the_config_for_transformers():
    with pytest.raises(UnknownModelType) as caught:
        spec_from_hf(BIASED)
    assert caught.value.config["mlp_bias"] is True and BIASED_NOTE in caught.value.note


@pytest.mark.parametrize("changes, note", [
    # NemotronHMoE with mlp_bias: a biased shared expert (and latent projections) beside bias-free experts
    (dict(moe_latent_size=None, mlp_bias=True), "nemotron_h with mlp_bias true in its MoE layers"),
])
def test_other_nemotron_parts_without_a_formula_fall_back(tmp_path, changes, note):
    hf = {**load(SUPER), **changes}
    data = cli_json("params", write(tmp_path, hf))
    assert data["total"] == n_params(meta_model(hf)) and any(note in n for n in data["notes"])


LLAMA = dict(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=1000)
MARIAN = dict(model_type="marian", d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=96, vocab_size=1000,
              decoder_start_token_id=0, pad_token_id=0)


@pytest.mark.parametrize("hf, note", [
    ({**LLAMA, "hidden_act": "relu"}, "activation 'relu' in a gated (gate/up/down) MLP: no formula"),
    (MARIAN, "marian with encoder_ffn_dim 128 and decoder_ffn_dim 96: no formula for asymmetric"),
], ids=["gated-relu", "marian-asymmetric"])
def test_formula_families_with_a_part_no_formula_covers_fall_back(tmp_path, hf, note):
    """Were refused ("activation 'relu' is not supported", "llmcalc needs symmetric stacks"); transformers builds
    both."""
    data = cli_json("params", write(tmp_path, hf))
    kwargs = {k: v for k, v in hf.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(hf["model_type"], **kwargs)
    auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    assert data["method"] == "transformers" and data["total"] == n_params(model)
    assert any(note in n for n in data["notes"])


# --- per-layer lists ------------------------------------------------------------------------------------------------


def test_mimo_v2_flash_list_moe_layer_freq_reaches_transformers():
    """Was: "moe_layer_freq must be a whole number, got [0, 1, 1, ...]" before the fallback was tried. transformers'
    MiMoV2FlashConfig builds layer 0 dense (mlp_layer_types), the rest MoE, as the mask says."""
    model = meta_model(load(MIMO))
    data = cli_json("params", MIMO)
    assert data["method"] == "transformers" and data["total"] == n_params(model)
    D, F, E, f = 64, 256, 8, 32
    assert data["components"]["mlp"] == 3 * D * F  # the one dense layer (gate, up, down)
    assert data["components"]["moe/experts"] == 5 * E * 3 * D * f


def test_minimax_m3_text_model_is_built_from_its_text_config():
    """Was refused on moe_layer_freq; then (its text_config names no model_type) built as the wrapper class, which
    ignored every text key for its defaults (447 G parameters). transformers' MiniMaxM3VLTextConfig maps the mask to
    mlp_layer_types: two dense layers of dense_intermediate_size, three MoE."""
    model = meta_model(load(M3), text=True)
    data = cli_json("params", M3)
    assert data["transformers_class"] == type(model).__name__ == "MiniMaxM3VLForCausalLM"
    assert data["total"] == n_params(model)
    assert data["components"]["mlp"] == 2 * 3 * 64 * 128
    assert data["components"]["moe/experts"] == 3 * 8 * 3 * 64 * 32


DEEPSEEK = dict(model_type="deepseek_v3", num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8,
                num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, vocab_size=1000, n_group=1, topk_group=1)


def test_a_formula_family_reads_a_list_moe_layer_freq_as_the_per_layer_mask():
    """By hand: layers 0 (first_k_dense_replace) and 2 (mask 0) dense, 1 and 3 MoE."""
    count = count_params(spec_from_hf({**DEEPSEEK, "moe_layer_freq": [1, 1, 0, 1]}))
    D, F, E, f = 64, 128, 8, 32
    assert count.components["mlp/gate_proj"] == 2 * D * F
    assert count.components["moe/experts"] == 2 * E * 3 * D * f
    all_moe = count_params(spec_from_hf({**DEEPSEEK, "moe_layer_freq": [1, 1, 1, 1]}))
    assert all_moe.total == count_params(spec_from_hf(DEEPSEEK)).total  # all ones: every layer after the dense one


@pytest.mark.parametrize("mask, message", [
    ([1, 1, 0], "moe_layer_freq given per layer must hold 0 (dense) or 1 (MoE) for each of the 4 layers"),
    ([1, 2, 0, 1], "must hold 0 (dense) or 1 (MoE)"),
    ([1, "x", 0, 1], "moe_layer_freq must be a whole number (or a list of them, one per layer)"),
])
def test_a_malformed_mask_is_one_line(tmp_path, mask, message):
    assert message in one_line_error("params", write(tmp_path, {**DEEPSEEK, "moe_layer_freq": mask}))


HUNYUAN = dict(model_type="hunyuan_v1_moe", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, num_experts=4)


def test_hunyuan_per_layer_moe_topk_is_read_by_the_formula():
    """Hunyuan-A13B's config gives moe_topk per layer; HunYuanMoEV1Gate reads moe_topk[layer_idx]. Was refused as
    "moe_topk must be a whole number" before its family's per-layer reader ran."""
    hf = {**HUNYUAN, "moe_topk": [2, 2]}
    count = count_params(spec_from_hf(hf))
    assert count.total == n_params(meta_model(hf))
    assert count.active_per_token == count_params(spec_from_hf({**HUNYUAN, "moe_topk": 2})).active_per_token


def test_hunyuan_top_k_differing_between_layers_falls_back(tmp_path):
    hf = {**HUNYUAN, "moe_topk": [1, 2]}
    data = cli_json("params", write(tmp_path, hf))
    assert data["method"] == "transformers" and data["total"] == n_params(meta_model(hf))
    assert any("moe_topk differing between layers" in n for n in data["notes"])


def test_a_per_layer_width_no_formula_reads_falls_back(tmp_path):
    """A per-layer list where the family's formula reads one number: transformers decides what it means (here
    it cannot build a Llama MLP from a list: its one line)."""
    line = one_line_error("params", write(tmp_path, {**LLAMA, "intermediate_size": [128, 96]}))
    assert "transformers" in line
    with pytest.raises(UnknownModelType, match=r"llama with intermediate_size given per layer \[128, 96\]"):
        spec_from_hf({**LLAMA, "intermediate_size": [128, 96]})


def test_gemma3n_per_layer_intermediate_size_reaches_transformers(tmp_path):
    """Gemma 3n's text config gives intermediate_size per layer (Gemma3nTextConfig: int | list[int]); it was refused
    as "intermediate_size must be a whole number" before the fallback was tried."""
    hf = dict(model_type="gemma3n_text", num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, intermediate_size=[128, 128, 96, 96], vocab_size=1000,
              vocab_size_per_layer_input=1000, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
              laurel_rank=8, altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 4,
              layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=32)
    data = cli_json("params", write(tmp_path, hf))
    assert data["method"] == "transformers" and data["total"] == n_params(meta_model(hf))
