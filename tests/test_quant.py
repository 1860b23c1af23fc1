"""Weights as shipped (analytic/quant.py): each format's bytes against the library that writes it, on tiny shapes
(bitsandbytes on CPU, transformers' FP8 and MXFP4 layouts), published checkpoint sizes, and the CLI's handling."""

import json
import math
from pathlib import Path

import pytest
import torch
from clirun import run  # noqa: E402

from llmcalc.analytic.quant import (
    Module,
    checkpoint_bytes,
    modules,
    parse_quantization,
    unquantized_linear_flops,
    weight_format,
)
from llmcalc.errors import LlmcalcError
from llmcalc.spec import load_model
from llmcalc.spec.hf import spec_from_hf

SHAPES = [(64, 128), (300, 200), (1024, 384)]  # (d_out, d_in)


def _tensor_bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("d_out, d_in", SHAPES)
def test_bitsandbytes_4bit_bytes_are_what_it_serializes(d_out, d_in, quant_type, double):
    """bitsandbytes 0.50.2 on CPU: quantize_4bit (block 64) and QuantState.as_dict(packed=True), the tensors
    transformers saves under weight.*; the JSON state's length varies with the shape and offset digits (~80/~170 B)."""
    bnb = pytest.importorskip("bitsandbytes.functional")
    w = torch.randn(d_out, d_in, dtype=torch.bfloat16)
    packed, state = bnb.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=double)
    stored = packed.numel() * packed.element_size() + _tensor_bytes(state.as_dict(packed=True))
    fmt = parse_quantization({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": quant_type,
                              "bnb_4bit_use_double_quant": double}).format
    assert fmt.linear_bytes(d_in, d_out) == pytest.approx(stored, abs=24)


@pytest.mark.parametrize("d_out, d_in", SHAPES)
def test_bitsandbytes_int8_bytes_are_what_it_stores(d_out, d_in):
    """LLM.int8: int8_vectorwise_quant gives CB int8 [out, in] and SCB fp32 [out] (Int8Params.CB / .SCB)."""
    bnb = pytest.importorskip("bitsandbytes.functional")
    cb, scb, _ = bnb.int8_vectorwise_quant(torch.randn(d_out, d_in, dtype=torch.float16))
    fmt = parse_quantization({"quant_method": "bitsandbytes", "load_in_8bit": True}).format
    assert fmt.linear_bytes(d_in, d_out) == cb.numel() * cb.element_size() + scb.numel() * scb.element_size()


def _tiny_llama_config(**extra):
    return {"model_type": "llama", "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", **extra}


@pytest.mark.parametrize("block", [(128, 128), (64, 96)])
def test_fp8_block_bytes_are_transformers_fp8_linear(block):
    """transformers' FineGrainedFP8 replacement of a tiny Llama (meta device): weight fp8 [out, in] and
    weight_scale_inv fp32 [ceil(out/bn), ceil(in/bk)] per linear; embeddings, norms and the LM head stay bf16."""
    from transformers import FineGrainedFP8Config, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    hf = _tiny_llama_config()
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in hf.items() if k != "torch_dtype"})).to(torch.bfloat16)
    qc = FineGrainedFP8Config(weight_block_size=block)
    model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"], quantization_config=qc,
                                    pre_quantized=True)
    stored = sum(p.numel() * p.element_size() for p in model.parameters())
    spec = spec_from_hf({**hf, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                                       "weight_block_size": list(block)}})
    assert checkpoint_bytes(spec) == stored


def test_mxfp4_bytes_are_transformers_gpt_oss_layout():
    """gpt-oss's MXFP4 experts as transformers holds them (Mxfp4GptOssExperts: gate_up_proj uint8 [E, 2I, D/2],
    down_proj uint8 [E, D, I/2]: two e2m1 values a byte) plus the checkpoint's e8m0 scales, one uint8 per 32 values:
    convert_moe_packed_tensors turns blocks [E, out, in/32, 16] and scales [E, out, in/32] into exactly the
    [E, in, out] bf16 experts. Everything else (attention, router, embeddings, head) stays bf16."""
    from transformers import GptOssConfig
    from transformers.integrations.mxfp4 import Mxfp4GptOssExperts, convert_moe_packed_tensors

    cfg = GptOssConfig(hidden_size=64, intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=300)
    experts = Mxfp4GptOssExperts(cfg)
    E, I, D = 4, 96, 64  # noqa: E741 (the papers' names)
    packed = experts.gate_up_proj.numel() + experts.down_proj.numel()
    assert packed == E * 3 * I * D // 2
    blocks, scales = torch.zeros(E, 2 * I, D // 32, 16, dtype=torch.uint8), torch.full((E, 2 * I, D // 32), 127,
                                                                                        dtype=torch.uint8)
    assert convert_moe_packed_tensors(blocks, scales).shape == (E, D, 2 * I)
    n = E * 3 * I * D
    fmt = parse_quantization({"quant_method": "mxfp4"}).format
    assert sum(fmt.linear_bytes(d_in, d_out) * E for d_in, d_out in ((D, I), (D, I), (I, D))) == n // 2 + n // 32
    spec = load_model("gpt-oss-20b")
    quant = parse_quantization(spec.quantization_config)
    assert {m.kind for m in modules(spec) if quant.quantizes(m)} == {"expert"}


def test_gpt_oss_checkpoints_to_the_byte():
    """Published safetensors total_size: gpt-oss-20b 13,761,264,768 and gpt-oss-120b 65,248,815,744 (their
    model.safetensors.index.json; research/serving/checkpoint_sizes.json)."""
    assert checkpoint_bytes(load_model("gpt-oss-20b")) == 13_761_264_768
    assert checkpoint_bytes(load_model("gpt-oss-120b")) == 65_248_815_744
    assert checkpoint_bytes(load_model("llama-3.1-8b")) == 16_060_522_496  # bf16: 2 bytes a parameter


def test_deepseek_v3_checkpoint_holds_fp8_scales_and_the_mtp_layer():
    """DeepSeek-V3 as shipped: fp8 block 128 x 128 with fp32 weight_scale_inv, bf16 embeddings/head/norms/router, and
    the MTP layer (num_nextn_predict_layers 1: one more MoE layer with eh_proj and its own embed/head copies, ~14 B
    parameters, README). Its repository's weight files are 688,586,727,753 B, safetensors headers included."""
    spec = load_model("deepseek-v3")
    fmt = weight_format(spec)
    assert fmt.name == "fp8" and not fmt.typed
    assert checkpoint_bytes(spec) == pytest.approx(688_586_727_753, rel=5e-4)
    assert 13e9 < fmt.mtp_bytes(spec) < 16e9
    per = parse_quantization(spec.quantization_config).format.linear_bytes(7168, 2048)
    assert per == 7168 * 2048 + 4 * math.ceil(2048 / 128) * math.ceil(7168 / 128)


@pytest.mark.parametrize("qc, d_in, d_out, expected", [
    # AWQ GEMM g128: qweight n/2 + qzeros (in/128)·out/2 + fp16 scales 2·(in/128)·out
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, 4096, 4096,
     4096 * 4096 // 2 + 32 * 4096 // 2 + 2 * 32 * 4096),
    # GPTQ 4-bit g128: the same plus g_idx int32 [in]
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, 4096, 4096,
     4096 * 4096 // 2 + 32 * 4096 // 2 + 2 * 32 * 4096 + 4 * 4096),
    # compressed-tensors W4A16 symmetric g128: weight_packed n/2 + bf16 scales 2·out·in/128 + weight_shape 16 B
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                           "group_size": 128}}}, "ignore": ["lm_head"]}, 4096, 4096,
     4096 * 4096 // 2 + 2 * 4096 * 32 + 16),
    # nvfp4: packed n/2 + fp8 scale per 16 + two fp32 global scales
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}, 4096, 4096,
     4096 * 4096 // 2 + 4096 * 4096 // 16 + 8),
    # fp8 per-tensor with a static input scale
    ({"quant_method": "fp8", "activation_scheme": "static"}, 4096, 1024, 4096 * 1024 + 4 + 4),
])
def test_formats_by_hand(qc, d_in, d_out, expected):
    """vLLM's create_weights shapes for each method (quant_formats.md), written out."""
    assert parse_quantization(qc).format.linear_bytes(d_in, d_out) == expected


def test_skip_lists_match_as_the_libraries_match():
    """gpt-oss's globs, compressed-tensors' "re:" regexes and the substrings of transformers/vLLM."""
    spec = spec_from_hf(_tiny_llama_config(quantization_config={
        "quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["layers.0.", "re:.*v_proj$"]}))
    quant = parse_quantization(spec.quantization_config)
    kept = {m.name for m in modules(spec) if not quant.quantizes(m)}
    assert "model.layers.0.mlp.down_proj" in kept and "model.layers.1.self_attn.v_proj" in kept
    assert "model.layers.1.mlp.down_proj" not in kept and {"model.embed_tokens", "lm_head"} <= kept


def test_unknown_format_is_refused_in_one_line():
    path_args = ["serve", "llmcalc-tiny", "--gpu", "h100-sxm"]
    spec = spec_from_hf(_tiny_llama_config(quantization_config={"quant_method": "hqq"}))
    with pytest.raises(LlmcalcError, match="quant_method 'hqq' is not a format llmcalc sizes"):
        weight_format(spec)
    assert weight_format(spec, "int4").typed  # --weight-dtype sizes it instead
    assert run(*path_args).exit_code == 0


def test_unknown_format_from_a_config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_tiny_llama_config(quantization_config={"quant_method": "quark"})))
    result = run("serve", path, "--gpu", "h100-sxm")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "quant_method 'quark' is not a format llmcalc sizes" in result.stderr
    assert run("serve", path, "--gpu", "h100-sxm", "--weight-dtype", "int4").exit_code == 0
    assert run("params", path).exit_code == 0  # counting parameters needs no storage format


def test_weight_dtype_overrides_and_says_so():
    shipped = json.loads(run("serve", "gpt-oss-120b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--format",
                             "json").stdout)
    typed = run("serve", "gpt-oss-120b", "--gpu", "h100-sxm", "--max-model-len", "32k", "--weight-dtype", "bf16")
    assert shipped["weight_dtype"] == "mxfp4" and not shipped["weight_dtype_typed"]
    assert "bf16 as typed (--weight-dtype)" in typed.stdout and "does NOT fit" in typed.stdout


# --- issue 40: a quantization_config is checked once, where the config is read --------------------------------

GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
CT_FP8_BLOCK = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
                                       "block_structure": [128, 128]}}}, "ignore": ["lm_head"]}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _ct_weights(**weights):
    group = CT_FP8_BLOCK["config_groups"]["group_0"]
    return {**CT_FP8_BLOCK, "config_groups": {"group_0": {**group, "weights": {**group["weights"], **weights}}}}


MALFORMED = [  # (quantization_config, what the one line says)
    (_ct_weights(block_structure=[0, 128]), "weights.block_structure must be two whole numbers >= 1"),  # 1
    ({**CT_FP8_BLOCK, "config_groups": {"group_0": {"targets": ["Linear"], "weights": [4]}}},
     "config_groups.group_0.weights must be a JSON object, got [4]"),  # 1
    ({**GPTQ, "group_size": 0}, "group_size must be a whole number >= 1 (or -1, one group per column), got 0"),  # 2
    ({**GPTQ, "group_size": -8}, "group_size must be a whole number >= 1"),  # 2
    ({**GPTQ, "group_size": 64.5}, "group_size must be a whole number >= 1"),  # 2
    (_ct_weights(block_structure="128"), "block_structure must be two whole numbers >= 1"),  # 3
    (_ct_weights(block_structure=None), "block_structure is missing"),  # 3: the block strategy has no default
    ({**GPTQ, "bits": 0}, "bits must be a bit width gptq defines (2, 3, 4, 8), got 0"),  # 4
    ({**GPTQ, "bits": -4}, "bits must be a bit width gptq defines (2, 3, 4, 8), got -4"),  # 4
    ({**GPTQ, "bits": 10**6}, "bits must be a bit width gptq defines (2, 3, 4, 8), got 1000000"),  # 4
    ({k: v for k, v in GPTQ.items() if k != "bits"}, "gptq has no bits"),  # 4: GPTQConfig(bits) has no default
    ({**AWQ, "bits": 8}, "bits must be a bit width awq defines (4), got 8"),  # 4
    ({**AWQ, "zero_point": "false"}, "zero_point must be true or false (a JSON boolean), got 'false'"),  # 5
    ({**GPTQ, "desc_act": "true"}, "desc_act must be true or false"),  # 5
    ({**FP8, "weight_block_size": [float("nan"), 128]}, "weight_block_size must be two whole numbers >= 1"),  # 13
    ({**FP8, "weight_block_size": [128.0, 128]}, "weight_block_size must be two whole numbers >= 1"),  # 13
    ({**FP8, "weight_block_size": [128, 128, 128]}, "weight_block_size must be two whole numbers >= 1"),
    ({**FP8, "activation_scheme": 1}, "activation_scheme must be a string"),
    ({**FP8, "quant_method": 8}, "quant_method must be a method name such as \"gptq\", got 8"),
    ({"bits": 4, "group_size": 128}, "quantization_config has no quant_method"),
    ({**AWQ, "modules_to_not_convert": 5}, "modules_to_not_convert must be a list of module names"),
    ({**AWQ, "modules_to_not_convert": ["lm_head", 5]}, "modules_to_not_convert must be a list of module names"),
    ({**GPTQ, "dynamic": ["-:lm_head"]}, "dynamic must be a JSON object"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": "true"}, "load_in_4bit must be true or false"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, "sets both load_in_4bit"),
    (_ct_weights(type="fp"), "weights.type must be int or float"),
    (_ct_weights(strategy="tensor", num_bits=True), "weights.num_bits must be a whole number"),
    (_ct_weights(strategy="group", block_structure=None), "weights.group_size must be a whole number >= 1 for "
                                                          "strategy group"),
]


def _config_file(tmp_path, quantization_config, name="config.json"):
    """A real config: the llama-3.2-1b preset (Meta's config.json) with a quantization_config block."""
    from llmcalc.spec import model_config

    path = tmp_path / name
    path.write_text(json.dumps({**model_config("llama-3.2-1b"), "quantization_config": quantization_config}))
    return path


@pytest.mark.parametrize("qc, says", MALFORMED)
def test_a_malformed_block_is_refused_where_the_config_is_read(tmp_path, qc, says):
    """Issue 40: a ZeroDivisionError and an AttributeError, a g0 and an int0 format, "128x128" read as 1x2, a string
    "false" read as true, a NaN echoed into JSON; now each is one line, the same one from every command (params
    too: the block is checked where the config is read, not where each command sizes it)."""
    from clirun import one_line_error

    path = _config_file(tmp_path, qc)
    commands = (["params", path, "--format", "json"], ["serve", path, "--gpu", "h100-sxm"],
                ["infer", path, "--gpu", "h100-sxm"], ["memory", path, "--finetune", "qlora"],
                ["compare", path, "llmcalc-tiny"])
    lines = {one_line_error(*args) for args in commands}
    assert len(lines) == 1, lines
    line = lines.pop()
    assert f"{path}: quantization_config " in line and says in line, line


def test_a_missing_group_size_is_the_libraries_default(tmp_path):
    """GPTQConfig, AwqConfig and AutoRoundConfig default group_size to 128 (transformers utils/quantization_config.py),
    and -1 is one group per column: both are sized, to the byte of the explicit block."""
    spec = spec_from_hf(_tiny_llama_config(quantization_config={k: v for k, v in GPTQ.items() if k != "group_size"}))
    explicit = spec_from_hf(_tiny_llama_config(quantization_config=GPTQ))
    assert weight_format(spec).describe() == weight_format(explicit).describe() == "gptq int4 g128, the rest bf16"
    assert checkpoint_bytes(spec) == checkpoint_bytes(explicit)
    awq = spec_from_hf(_tiny_llama_config(quantization_config={"quant_method": "awq", "bits": 4}))
    assert weight_format(awq).describe().startswith("awq int4 g128")
    per_column = parse_quantization({**GPTQ, "group_size": -1}).format
    assert per_column.linear_bytes(256, 640) == 256 * 640 / 2 + 640 / 2 + 2 * 640 + 4 * 256  # one group of 256 inputs


def test_compressed_tensors_older_block_string_is_read_as_the_library_reads_it(tmp_path):
    """compressed-tensors QuantizationArgs.validate_block_structure still reads its older "128x128" string as
    [128, 128] ("for backward compatibility"): sized as the list is, not as the characters "1", "2"."""
    path = _config_file(tmp_path, _ct_weights(block_structure="128x128"))
    listed = _config_file(tmp_path, CT_FP8_BLOCK, "listed.json")
    shipped = json.loads(run("serve", path, "--gpu", "h100-sxm", "--format", "json").stdout)
    reference = json.loads(run("serve", listed, "--gpu", "h100-sxm", "--format", "json").stdout)
    assert "block 128x128" in run("serve", path, "--gpu", "h100-sxm").stdout
    assert shipped["weights_bytes_per_gpu"] == reference["weights_bytes_per_gpu"]


def test_params_json_holds_no_bare_nan(tmp_path):
    """A NaN weight_block_size was echoed into `params --format json` as a bare NaN (not JSON); now refused."""
    path = _config_file(tmp_path, {**FP8, "weight_block_size": [float("nan"), 128]})
    result = run("params", path, "--format", "json")
    assert result.exit_code == 2 and "NaN" not in result.stdout


def test_typed_int8_sizes_a_state_space_model_s_linears_at_one_byte():
    """`infer mamba-2.8b --weight-dtype int8` printed the bf16 bytes labelled "int8 as typed": the Mamba mixers'
    linears were left 16-bit. The reference is transformers' own model (meta device): every nn.Linear weight but the
    LM head at 1 byte (as the note says: embeddings, LM head, norms and router stay 16-bit), every other parameter
    (embeddings, conv1d, A_log, D, dt_proj's bias, norms) at 2 bytes."""
    from transformers import MambaConfig, MambaForCausalLM

    from llmcalc.spec import model_config

    hf = {k: v for k, v in model_config("mamba-2.8b").items() if not k.startswith("_")}
    with torch.device("meta"):
        model = MambaForCausalLM(MambaConfig(**hf))
    linear = {id(m.weight) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"}
    params = list(model.parameters())  # unique: the tied LM head once, as the embedding
    int8 = sum(p.numel() for p in params if id(p) in linear)
    rest = sum(p.numel() for p in params if id(p) not in linear)
    assert int8 > 0.9 * (int8 + rest)
    out = json.loads(run("infer", "mamba-2.8b", "--gpu", "h100-sxm", "--weight-dtype", "int8", "--format",
                         "json").stdout)
    assert out["weight_format"] == "int8 as typed (--weight-dtype)"
    assert out["weights_bytes"] == int8 * 1 + rest * 2


# The block of a published QLoRA checkpoint (llama-2-13b-computer-engineering-bnb4's config.json), as transformers
# serializes BitsAndBytesConfig
BNB4 = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "float16",
        "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
        "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
        "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}


def test_qlora_of_a_bitsandbytes_checkpoint_reads_the_block_as_checked(tmp_path):
    """memory --finetune read bnb_4bit_quant_type again, past the check: a null one (absent: BitsAndBytesConfig's
    default fp4) printed "frozen base in None". The frozen base's dtype is now the one the config was read with."""
    shipped = run("memory", _config_file(tmp_path, BNB4, "nf4.json"), "--finetune", "qlora")
    null = run("memory", _config_file(tmp_path, {**BNB4, "bnb_4bit_quant_type": None}), "--finetune", "qlora")
    assert shipped.exit_code == null.exit_code == 0, null.output
    assert "frozen block linears in nf4" in shipped.stdout
    assert "frozen block linears in fp4" in null.stdout and "None" not in null.stdout


def test_minimax_m2_checkpoint_keeps_its_experts_in_fp8():
    """Issue 39: MiniMax-M2.7's quantization_config skips "gate", its router (block_sparse_moe.gate); read as a
    substring it also left every expert's gate_proj and the experts beside it at bf16 (284 GiB, no KV cache left on
    2 x H200). Its checkpoint, as a stored model-info report lists it tensor by tensor (presets/minimax-m2.7.json's
    _source; 228,703,644,928 elements, 214.32 GiB): experts and attention fp8 with fp32 128x128 block scales,
    embeddings, head and norms bf16, the routers fp32 and the e_score_correction_bias fp32."""
    L, E, D, F, V = 62, 256, 3072, 1536, 200064
    listed = (2 * V * D * 2 + L * E * 4 + 3 * L * E * F * D + 3 * L * E * (12 * 24) * 4 + L * E * D * 4
              + L * (2 * D + 1024 + 6144) * 2 + D * 2 + L * (2 * 1024 * D + 2 * 6144 * D)
              + L * (2 * 8 * 24 + 2 * 48 * 24) * 4)
    assert listed == 230_121_630_720
    spec = load_model("minimax-m2.7")
    expert = next(m for m in modules(spec) if m.kind == "expert")
    assert parse_quantization(spec.quantization_config).quantizes(expert)
    router = next(m for m in modules(spec) if m.kind == "router")
    assert not parse_quantization(spec.quantization_config).quantizes(router)
    # llmcalc stores the routers at the checkpoint's bf16, where this one keeps them fp32: L·E·D·2 bytes short
    assert checkpoint_bytes(spec) == listed - L * E * D * 2 - L * E * 2
    assert checkpoint_bytes(spec) == pytest.approx(listed, rel=5e-4)


@pytest.mark.parametrize("entry, name, skipped", [
    ("gate", "model.layers.0.block_sparse_moe.gate", True),
    ("gate", "model.layers.0.block_sparse_moe.experts.gate_proj", False),
    ("gate", "model.layers.0.mlp.gate_proj", False),
    ("self_attn", "model.layers.3.self_attn.q_proj", True),
    ("model.layers.1", "model.layers.11.self_attn.q_proj", False),
    ("model.layers.1", "model.layers.1.mlp.down_proj", True),
    ("lm_head", "lm_head", True),
])
def test_a_skip_entry_matches_whole_module_names(entry, name, skipped):
    """A skip entry names modules by whole dotted parts, as transformers 5.25's should_convert_module reads it
    ("mlp.gate" does not skip "mlp.gate_proj"; "layer.1" does not skip "layer.11")."""
    from transformers.quantizers.quantizers_utils import should_convert_module

    quant = parse_quantization({"quant_method": "fp8", "weight_block_size": [128, 128],
                                "modules_to_not_convert": [entry]})
    module = Module(name, "x", 128, 128)
    assert (not quant.quantizes(module)) == skipped
    if not entry.startswith("self_attn"):  # transformers matches a prefix or a suffix; a middle part is vLLM's reading
        assert should_convert_module(name, [entry]) != skipped


# Meta's FBGEMM FP8 checkpoint's config.json, shipped with the serving validation set
META_405B_FP8 = str(Path(__file__).resolve().parent.parent / "benchmarks" / "configs" / "Llama-3.1-405B-FP8")


@pytest.fixture(scope="module")
def meta_fp8_405b():
    """transformers' Llama 3.1 405B (meta device) with its fbgemm_fp8 replacement as the shipped config's
    modules_to_not_convert directs it (integrations/fbgemm_fp8.py replace_with_fbgemm_fp8_linear; fbgemm's CUDA
    quantize op, which the replacement only looks up, stubbed out)."""
    from unittest import mock

    import transformers.integrations.fbgemm_fp8 as fbgemm
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = json.loads((Path(META_405B_FP8) / "config.json").read_text())
    skip = hf.pop("quantization_config")["modules_to_not_convert"]
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in hf.items() if not k.startswith("_")
                                                 and k != "torch_dtype"})).to(torch.bfloat16)
    with mock.patch.object(fbgemm, "get_quantize_fp8_per_row", lambda: None):
        model = fbgemm.replace_with_fbgemm_fp8_linear(model, modules_to_not_convert=skip, pre_quantized=True)
    return model, fbgemm.FbgemmFp8Linear


def test_meta_fp8_405b_bytes_are_transformers_fbgemm_layout(meta_fp8_405b):
    """Meta's FP8 Llama 3.1 405B, quantized per module: the FFNs of layers 1-124 fp8 with an fp32 scale per output
    row, every attention projection, layers 0 and 125, the embeddings and the LM head bf16; llmcalc's checkpoint
    bytes are the parameters transformers builds for it, to the byte (453.77 GiB, ~19 % above all-FP8)."""
    model, _ = meta_fp8_405b
    stored = sum(p.numel() * p.element_size() for p in model.parameters())
    spec = load_model(META_405B_FP8)
    assert checkpoint_bytes(spec) == stored
    assert checkpoint_bytes(spec) > 1.15 * checkpoint_bytes(spec, weight_format(spec, "fp8"))


def test_a_checkpoint_quantized_per_module_runs_its_16_bit_linears_as_bf16_gemms(meta_fp8_405b):
    """The serving step's GEMM FLOPs by dtype (serving_speed.StepCost.gemm_flops) for Meta's FP8 405B: BF16 for
    exactly the nn.Linear modules transformers leaves unconverted (the LM head aside, timed on its own), FP8 for
    the FbgemmFp8Linear ones; --weight-dtype fp8 runs every block linear in FP8, as before."""
    from llmcalc.analytic.kernels import device_for
    from llmcalc.analytic.serving import plan_serving
    from llmcalc.analytic.serving_speed import StepCost
    from llmcalc.spec import load_hardware

    model, fp8_linear = meta_fp8_405b
    bf16 = sum(2 * m.in_features * m.out_features for n, m in model.named_modules()
               if type(m) is torch.nn.Linear and n != "lm_head")
    fp8 = sum(2 * m.in_features * m.out_features for m in model.modules() if isinstance(m, fp8_linear))
    spec, gpu = load_model(META_405B_FP8), load_hardware("h100-sxm")
    shipped, typed = (plan_serving(spec, gpu, 8, max_model_len=4096, weight_dtype=w) for w in (None, "fp8"))
    cost = StepCost(shipped.roofline(1, 128), device_for("h100-sxm"), 8)
    assert cost.gemm_flops() == {"fp8": fp8, "bf16": bf16}
    assert StepCost(typed.roofline(1, 128), device_for("h100-sxm"), 8).gemm_flops() == {"fp8": fp8 + bf16}


def test_meta_fp8_405b_unquantized_linear_flops_are_the_linears_fbgemm_leaves(meta_fp8_405b):
    """quant.unquantized_linear_flops (the serving step's 16-bit GEMMs of a checkpoint quantized per module) is
    2·in·out over the decoder's nn.Linear modules transformers' fbgemm_fp8 replacement leaves unconverted, attention's
    and the rest's apart. Its memo key is the whole (spec, format) pair it reads: the same checkpoint read at a typed
    --weight-dtype, or with a skip list of its own, answers for itself after the shipped one was memoized."""
    model, fp8_linear = meta_fp8_405b
    attention = other = 0
    for name, m in model.model.layers.named_modules():
        if isinstance(m, torch.nn.Linear) and not isinstance(m, fp8_linear):
            flops = 2 * m.in_features * m.out_features
            attention, other = (attention + flops, other) if ".self_attn." in f".{name}" else (attention, other + flops)
    spec = load_model(META_405B_FP8)
    assert unquantized_linear_flops(spec, weight_format(spec)) == (attention, other)
    assert other == 2 * 3 * 2 * spec.d_model * spec.d_ff  # layers 0 and 125's MLPs, the config's skip list
    assert unquantized_linear_flops(spec, weight_format(spec, "fp8")) == (0, 0)
    hf = json.loads((Path(META_405B_FP8) / "config.json").read_text())
    hf["quantization_config"]["modules_to_not_convert"] = [
        e for e in hf["quantization_config"]["modules_to_not_convert"] if ".mlp." not in e]
    attention_only = spec_from_hf(hf)
    assert unquantized_linear_flops(attention_only, weight_format(attention_only)) == (attention, 0)
