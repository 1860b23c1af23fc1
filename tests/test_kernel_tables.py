"""llmcalc/analytic/kernel_tables.py: the measured kernel tables from NVIDIA aiconfigurator, read back and
interpolated as aiconfigurator's engine does.

The references below are aiconfigurator's own answers (aiconfigurator 0.12.0, its compiled engine, vLLM 0.24.0
tables), produced outside llmcalc by

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install aiconfigurator==0.12.0
    /work/venv-aic/bin/python -c "$AIC_REFERENCE"   (AIC_REFERENCE: the script below)

Off-grid points include (n, k) that were never measured (4000 x 4000, 3000 x 7000: the log2-IDW utilisation
transfer), m between grid points and beyond, decode context lengths averaged over +-10 %.
"""

import gzip
import json
import math
import subprocess
import sys

import pytest

from llmcalc.analytic import kernel_tables as kt

AIC_REFERENCE = '''
import logging; logging.disable(logging.WARNING)
from aiconfigurator_core.sdk import perf_database, common
from aiconfigurator_core.sdk.engine import _evaluate_single_op
from aiconfigurator_core.sdk.operations.gemm import GEMM
from aiconfigurator_core.sdk.operations.attention import GenerationAttention
from aiconfigurator_core.sdk.operations.communication import CustomAllReduce
for system in ("h100_sxm", "h200_sxm"):
    db = perf_database.get_database(system, "vllm", "0.24.0")
    for dt, q in (("bf16", common.GEMMQuantMode.bfloat16), ("fp8", common.GEMMQuantMode.fp8)):
        for m, n, k in ((100, 4096, 4096), (3000, 5120, 5120), (777, 14336, 4096), (1000, 4000, 4000),
                        (96, 3000, 7000)):
            r = _evaluate_single_op(db, GEMM("g", 1, n, k, q), is_context=True, batch_size=1, s=m, x=m)
            print("gemm", system, dt, m, n, k, float(r))
    for kvd, kq in (("bf16", common.KVCacheQuantMode.bfloat16), ("fp8", common.KVCacheQuantMode.fp8)):
        for b, s, n, nkv in ((16, 4096, 32, 8), (24, 3000, 32, 8), (48, 10000, 64, 8)):
            r = _evaluate_single_op(db, GenerationAttention("a", 1, n, nkv, kq, head_size=128),
                                    is_context=False, batch_size=b, s=s)
            print("decode", system, kvd, b, s, n, nkv, float(r))
    for tokens, h, tp in ((1, 4096, 2), (100, 4096, 8), (3000, 8192, 4)):
        r = _evaluate_single_op(db, CustomAllReduce("ar", 1, h, tp), is_context=True, batch_size=1, s=tokens, x=tokens)
        print("allreduce", system, tokens * h * 2, tp, float(r))
db = perf_database.get_database("b200_sxm", "trtllm", "1.3.0rc20")  # TensorRT-LLM's NVFP4 GEMMs on Blackwell
for m, n, k in ((100, 4096, 4096), (3000, 5120, 5120), (777, 14336, 4096), (1000, 4000, 4000), (8192, 57344, 8192),
                (1, 8192, 28672)):
    r = _evaluate_single_op(db, GEMM("g", 1, n, k, common.GEMMQuantMode.nvfp4), is_context=True, batch_size=1, s=m, x=m)
    print("gemm", "b200_sxm.trtllm", "nvfp4", m, n, k, float(r))
'''

# (gpu, dtype, m, n, k, aiconfigurator ms)
GEMM_REFERENCE = [
    ("h100_sxm", "bf16", 100, 4096, 4096, 0.015039288666513231),
    ("h100_sxm", "bf16", 3000, 5120, 5120, 0.19951509369744194),
    ("h100_sxm", "bf16", 777, 14336, 4096, 0.1182768388690039),
    ("h100_sxm", "bf16", 1000, 4000, 4000, 0.04044125457500386),
    ("h100_sxm", "bf16", 96, 3000, 7000, 0.020410054504785804),
    ("h100_sxm", "fp8", 100, 4096, 4096, 0.014570310711860657),
    ("h100_sxm", "fp8", 3000, 5120, 5120, 0.17805805315379222),
    ("h100_sxm", "fp8", 777, 14336, 4096, 0.13644726695456097),
    ("h100_sxm", "fp8", 1000, 4000, 4000, 0.038433862969479385),
    ("h100_sxm", "fp8", 96, 3000, 7000, 0.019014538587667832),
    ("h200_sxm", "bf16", 100, 4096, 4096, 0.01319591138097975),
    ("b200_sxm.trtllm", "nvfp4", 100, 4096, 4096, 0.014069333672523499),
    ("b200_sxm.trtllm", "nvfp4", 3000, 5120, 5120, 0.06154190965727264),
    ("b200_sxm.trtllm", "nvfp4", 777, 14336, 4096, 0.039820544064229524),
    ("b200_sxm.trtllm", "nvfp4", 1000, 4000, 4000, 0.017961001569961117),
    ("b200_sxm.trtllm", "nvfp4", 8192, 57344, 8192, 1.8096905766847315),
    ("b200_sxm.trtllm", "nvfp4", 1, 8192, 28672, 0.06763173289072733),
    ("h200_sxm", "bf16", 3000, 5120, 5120, 0.20196506151186874),
    ("h200_sxm", "bf16", 777, 14336, 4096, 0.11833962392539121),
    ("h200_sxm", "bf16", 1000, 4000, 4000, 0.04124747164177544),
    ("h200_sxm", "bf16", 96, 3000, 7000, 0.017097140379607183),
    ("h200_sxm", "fp8", 100, 4096, 4096, 0.013821155329545339),
    ("h200_sxm", "fp8", 3000, 5120, 5120, 0.16958265039655895),
    ("h200_sxm", "fp8", 777, 14336, 4096, 0.1230950005588515),
    ("h200_sxm", "fp8", 1000, 4000, 4000, 0.037031413271940344),
    ("h200_sxm", "fp8", 96, 3000, 7000, 0.018211904032739985),
]
# (gpu, kv dtype, batch, context, heads, kv heads, aiconfigurator ms); head dim 128
DECODE_REFERENCE = [
    ("h100_sxm", "bf16", 16, 4096, 32, 8, 0.11296090897909986),
    ("h100_sxm", "bf16", 24, 3000, 32, 8, 0.1118346135772299),
    ("h100_sxm", "bf16", 48, 10000, 64, 8, 0.6461867876842128),
    ("h100_sxm", "fp8", 16, 4096, 32, 8, 0.06467429340215555),
    ("h100_sxm", "fp8", 24, 3000, 32, 8, 0.07136350095970556),
    ("h100_sxm", "fp8", 48, 10000, 64, 8, 0.37414120280022334),
    ("h200_sxm", "bf16", 16, 4096, 32, 8, 0.08224410268012436),
    ("h200_sxm", "bf16", 24, 3000, 32, 8, 0.08416111432597972),
    ("h200_sxm", "bf16", 48, 10000, 64, 8, 0.48278028320373806),
    ("h200_sxm", "fp8", 16, 4096, 32, 8, 0.059261977483644535),
    ("h200_sxm", "fp8", 24, 3000, 32, 8, 0.06562215801386628),
    ("h200_sxm", "fp8", 48, 10000, 64, 8, 0.3408058855213942),
]
# (gpu, bytes, GPUs, aiconfigurator ms): vLLM custom all-reduce
ALLREDUCE_REFERENCE = [
    ("h100_sxm", 8192, 2, 0.004375999867916107),
    ("h100_sxm", 819200, 8, 0.013667019903659821),
    ("h100_sxm", 49152000, 4, 0.2557104181498289),
    ("h200_sxm", 8192, 2, 0.004639680087566376),
    ("h200_sxm", 819200, 8, 0.012792179957032204),
    ("h200_sxm", 49152000, 4, 0.24493137650191782),
]

# DeepSeek-V3's whole MLA block (aiconfigurator's MLAModule op, the primary it times DeepSeek's attention with: its
# mla_context_module / mla_generation_module tables), produced outside llmcalc by
AIC_MLA_REFERENCE = '''
import logging; logging.disable(logging.WARNING)
from aiconfigurator_core.sdk import perf_database, common
from aiconfigurator_core.sdk.engine import _evaluate_single_op
from aiconfigurator_core.sdk.operations.mla import MLAModule
K, G = common.KVCacheQuantMode, common.GEMMQuantMode
for system, backend, ver, kv, gemm, heads in (("h200_sxm", "vllm", "0.24.0", K.bfloat16, G.fp8_block, 16),
                                             ("h100_sxm", "vllm", "0.24.0", K.fp8, G.fp8_block, 32),
                                             ("h200_sxm", "vllm", "0.24.0", K.fp8, G.bfloat16, 32),
                                             ("h200_sxm", "trtllm", "1.3.0rc20", K.bfloat16, G.fp8_block, 16)):
    db = perf_database.get_database(system, backend, ver)
    for context, points in ((False, ((4, 3600), (24, 3000), (1, 4096), (100, 700))),
                            (True, ((1, 3200), (3, 1000), (2, 2048)))):
        op = MLAModule("m", 1, context, heads, kv, common.FMHAQuantMode.bfloat16, gemm, native_num_heads=128)
        for b, s in points:
            print(context, system, backend, kv, gemm, heads, b, s, float(_evaluate_single_op(db, op, is_context=context,
                                                                                          batch_size=b, s=s)))
'''
# (context, table, kv/gemm key, heads per GPU, batch, prompt or KV length, aiconfigurator ms)
MLA_REFERENCE = [
    (False, "h200_sxm", "bf16/fp8_block", 16, 4, 3600, 0.1041322265625),
    (False, "h200_sxm", "bf16/fp8_block", 16, 24, 3000, 0.12987236328125001),
    (False, "h200_sxm", "bf16/fp8_block", 16, 1, 4096, 0.095998876953125),
    (False, "h200_sxm", "bf16/fp8_block", 16, 100, 700, 0.136801611328125),
    (True, "h200_sxm", "bf16/fp8_block", 16, 1, 3200, 0.5572303025901961),
    (True, "h200_sxm", "bf16/fp8_block", 16, 3, 1000, 0.4977179699503547),
    (True, "h200_sxm", "bf16/fp8_block", 16, 2, 2048, 0.6538),
    (False, "h200_sxm", "fp8/bf16", 32, 4, 3600, 0.12326904296874999),
    (False, "h200_sxm", "fp8/bf16", 32, 24, 3000, 0.1599132080078125),
    (False, "h200_sxm", "fp8/bf16", 32, 1, 4096, 0.11489853515625001),
    (False, "h200_sxm", "fp8/bf16", 32, 100, 700, 0.1851319091796875),
    (True, "h200_sxm", "fp8/bf16", 32, 1, 3200, 0.8731166415827125),
    (True, "h200_sxm", "fp8/bf16", 32, 3, 1000, 0.7444546299012048),
    (True, "h200_sxm", "fp8/bf16", 32, 2, 2048, 1.039),
    (False, "h100_sxm", "fp8/fp8_block", 32, 4, 3600, 0.142702099609375),
    (False, "h100_sxm", "fp8/fp8_block", 32, 24, 3000, 0.16053295898437497),
    (False, "h100_sxm", "fp8/fp8_block", 32, 1, 4096, 0.1335984375),
    (False, "h100_sxm", "fp8/fp8_block", 32, 100, 700, 0.17925130615234378),
    (True, "h100_sxm", "fp8/fp8_block", 32, 1, 3200, 0.8578254550434642),
    (True, "h100_sxm", "fp8/fp8_block", 32, 3, 1000, 0.7321809288684922),
    (True, "h100_sxm", "fp8/fp8_block", 32, 2, 2048, 1.0009),
    (False, "h200_sxm.trtllm", "bf16/fp8_block", 16, 4, 3600, 0.061705029296875005),
    (False, "h200_sxm.trtllm", "bf16/fp8_block", 16, 24, 3000, 0.082572265625),
    (False, "h200_sxm.trtllm", "bf16/fp8_block", 16, 1, 4096, 0.056898828125),
    (False, "h200_sxm.trtllm", "bf16/fp8_block", 16, 100, 700, 0.08339926757812499),
    (True, "h200_sxm.trtllm", "bf16/fp8_block", 16, 1, 3200, 0.5108178947098156),
    (True, "h200_sxm.trtllm", "bf16/fp8_block", 16, 3, 1000, 0.410011803229757),
    (True, "h200_sxm.trtllm", "bf16/fp8_block", 16, 2, 2048, 0.6039),
]

# SGLang's MLA decode in parts (aiconfigurator's GenerationMLA and MLABmm ops on its sglang 0.5.14 tables), produced
# outside llmcalc by
AIC_MLA_PARTS_REFERENCE = '''
import logging; logging.disable(logging.WARNING)
from aiconfigurator_core.sdk import perf_database, common
from aiconfigurator_core.sdk.engine import _evaluate_single_op
from aiconfigurator_core.sdk.operations.mla import GenerationMLA, MLABmm
for system in ("h200_sxm", "h100_sxm"):
    db = perf_database.get_database(system, "sglang", "0.5.14")
    for kv, kvn in ((common.KVCacheQuantMode.bfloat16, "bf16"), (common.KVCacheQuantMode.fp8, "fp8")):
        for heads in (16, 32):
            op = GenerationMLA("a", 1, heads, kv)
            for b, s in ((4, 3600), (24, 3000), (1, 4096), (100, 700), (7, 50)):
                print(system, kvn, heads, b, s, float(_evaluate_single_op(db, op, is_context=False, batch_size=b, s=s)))
    for q, qn in ((common.GEMMQuantMode.bfloat16, "bf16"), (common.GEMMQuantMode.fp8, "fp8")):
        for pre in (True, False):
            op = MLABmm("b", 1, 16, q, if_pre=pre)
            for b in (4, 24, 100, 1000):
                print(system, qn, "pre" if pre else "post", 16, b,
                      float(_evaluate_single_op(db, op, is_context=False, batch_size=b, s=1)))
'''
# (table, kv dtype, heads per GPU, batch, KV length, aiconfigurator ms)
GENERATION_MLA_REFERENCE = [
    ("h200_sxm.sglang", "bf16", 16, 4, 3600, 0.019960549450479446),
    ("h200_sxm.sglang", "bf16", 16, 24, 3000, 0.03831619049306028),
    ("h200_sxm.sglang", "bf16", 16, 1, 4096, 0.018990400433540344),
    ("h200_sxm.sglang", "bf16", 16, 100, 700, 0.036736176726117266),
    ("h200_sxm.sglang", "bf16", 16, 7, 50, 0.011940149962902068),
    ("h200_sxm.sglang", "fp8", 16, 4, 3600, 0.046027961466461424),
    ("h200_sxm.sglang", "fp8", 16, 24, 3000, 0.16554940050700678),
    ("h200_sxm.sglang", "fp8", 16, 1, 4096, 0.02985759973526001),
    ("h200_sxm.sglang", "fp8", 16, 100, 700, 0.16133570548845455),
    ("h200_sxm.sglang", "fp8", 16, 7, 50, 0.017477324907667936),
    ("h100_sxm.sglang", "bf16", 32, 4, 3600, 0.021525874640792607),
    ("h100_sxm.sglang", "bf16", 32, 24, 3000, 0.049915425467770544),
    ("h100_sxm.sglang", "bf16", 32, 1, 4096, 0.019721600413322448),
    ("h100_sxm.sglang", "bf16", 32, 100, 700, 0.048798699921462685),
    ("h100_sxm.sglang", "bf16", 32, 7, 50, 0.012202300212811679),
]
# (table, dtype, op, heads per GPU, tokens, aiconfigurator ms)
MLA_BMM_REFERENCE = [
    ("h200_sxm.sglang", "fp8", "pre", 16, 4, 0.007612799853086471),
    ("h200_sxm.sglang", "fp8", "pre", 16, 24, 0.008054400235414505),
    ("h200_sxm.sglang", "fp8", "pre", 16, 100, 0.010180799756199121),
    ("h200_sxm.sglang", "fp8", "pre", 16, 1000, 0.03459680117666721),
    ("h200_sxm.sglang", "fp8", "post", 16, 4, 0.007769600301980972),
    ("h200_sxm.sglang", "fp8", "post", 16, 24, 0.007940800115466117),
    ("h200_sxm.sglang", "fp8", "post", 16, 100, 0.01021799985319376),
    ("h200_sxm.sglang", "fp8", "post", 16, 1000, 0.032951399218291044),
]

# The shipped values carry 5 significant digits.
REL = 2e-4


@pytest.mark.parametrize(("gpu", "dtype", "m", "n", "k", "ms"), GEMM_REFERENCE)
def test_gemm_matches_aiconfigurator(gpu, dtype, m, n, k, ms):
    assert kt.gemm_ms(gpu, m, n, k, dtype) == pytest.approx(ms, rel=REL)
    assert kt.gemm_seconds(gpu, m, n, k, dtype) == pytest.approx(ms / 1e3, rel=REL)


@pytest.mark.parametrize(("gpu", "kv", "batch", "context", "heads", "kv_heads", "ms"), DECODE_REFERENCE)
def test_decode_attention_matches_aiconfigurator(gpu, kv, batch, context, heads, kv_heads, ms):
    got = kt.decode_attention_seconds(gpu, batch, context, heads, kv_heads=kv_heads, kv_dtype=kv)
    assert got == pytest.approx(ms / 1e3, rel=REL)


@pytest.mark.parametrize(("gpu", "nbytes", "n_gpus", "ms"), ALLREDUCE_REFERENCE)
def test_allreduce_matches_aiconfigurator(gpu, nbytes, n_gpus, ms):
    assert kt.allreduce_seconds(gpu, nbytes, n_gpus) == pytest.approx(ms / 1e3, rel=REL)


def _raw(gpu):
    """The shipped files of `gpu` read directly, each section as its file holds it."""
    return {p.name.removesuffix(".json.gz"): json.loads(gzip.decompress(p.read_bytes()))
            for p in (kt.DATA / gpu).glob("*.json.gz")}


@pytest.mark.parametrize(("context", "gpu", "key", "heads", "batch", "seq", "ms"), MLA_REFERENCE)
def test_mla_block_matches_aiconfigurator(context, gpu, key, heads, batch, seq, ms):
    """vLLM's and TensorRT-LLM's DeepSeek-V3 attention block (projections, absorbed BMMs, FlashMLA / FA3 attention,
    o_proj) on grid points and between them, prefill and decode."""
    # 5 significant digits blended over three axes (heads, batch, length): up to 3.4e-4 apart
    assert kt.mla_module_ms(gpu, heads, batch, seq, key, context=context) == pytest.approx(ms, rel=5e-4)
    assert kt.mla_module_seconds(gpu, heads, batch, seq, key, context=context) == pytest.approx(ms / 1e3, rel=5e-4)


def test_mla_block_grows_with_batch_and_context_and_says_what_it_lacks():
    decode = [kt.mla_module_ms("h200_sxm", 16, b, 4096, "bf16/fp8_block", context=False) for b in (1, 8, 64, 512)]
    assert decode == sorted(decode)
    longer = [kt.mla_module_ms("h200_sxm", 16, 32, c, "bf16/fp8_block", context=False) for c in (1024, 8192, 65536)]
    assert longer == sorted(longer)
    with pytest.raises(kt.KernelTableError, match="mla_generation_module"):
        kt.mla_module_ms("a100_sxm", 16, 4, 1024, "bf16/bf16", context=False)


@pytest.mark.parametrize(("gpu", "kv", "heads", "batch", "context", "ms"), GENERATION_MLA_REFERENCE)
def test_sglang_mla_kernel_matches_aiconfigurator(gpu, kv, heads, batch, context, ms):
    assert kt.generation_mla_ms(gpu, heads, batch, context, kv) == pytest.approx(ms, rel=REL)


@pytest.mark.parametrize(("gpu", "dtype", "op", "heads", "tokens", "ms"), MLA_BMM_REFERENCE)
def test_sglang_mla_bmm_matches_aiconfigurator(gpu, dtype, op, heads, tokens, ms):
    assert kt.mla_bmm_ms(gpu, tokens, heads, dtype, op) == pytest.approx(ms, rel=REL)


def test_grid_points_read_back_as_stored():
    raw = _raw("h100_sxm")
    ms, lats = raw["gemm"]["bf16"]["sites"]["4096,4096"]
    for m, lat in list(zip(ms, lats, strict=True))[::7]:
        assert kt.gemm_ms("h100-sxm", m, 4096, 4096) == lat  # no point here is below its SOL
    ctx = raw["context_attention"]["grids"]["bf16/8/128"]["32"]
    for seq, by_batch in list(ctx.items())[::3]:
        for batch, lat in by_batch.items():
            assert kt.prefill_attention_ms("h100_sxm", int(batch), int(seq), 32, 8) == lat
    gen = raw["generation_attention"]["grids"]["fp8/8/128"]["32"]
    for batch, by_seq in list(gen.items())[::3]:
        for seq, lat in by_seq.items():
            assert kt.decode_attention_ms("h100_sxm", int(batch), int(seq), 32, 8, kv_dtype="fp8", smooth=False) == lat
    sizes, ar = raw["custom_allreduce"]["curves"]["8"]
    assert [kt.allreduce_ms("h100_sxm", 2 * s, 8) for s in sizes] == ar
    sizes, ar = _raw("h200_sxm")["nccl_all_reduce"]["curves"]["4"]
    assert [kt.allreduce_ms("h200", 2 * s, 4, kind="nccl") for s in sizes] == ar


def test_prefill_blends_sqrt_latency_along_the_sequence():
    """Between two measured lengths the engine blends sqrt(latency) (perf_interp.rs, grid_sqrt_axis on seq)."""
    grid = _raw("h100_sxm")["context_attention"]["grids"]["bf16/8/128"]["32"]
    lo, hi = grid["2048"]["4"], grid["3072"]["4"]
    expected = ((math.sqrt(lo) + math.sqrt(hi)) / 2) ** 2
    assert kt.prefill_attention_ms("h100_sxm", 4, 2560, 32, 8) == pytest.approx(expected, rel=1e-12)
    # raw (linear) blend along the batch axis
    expected = grid["2048"]["4"] + (grid["2048"]["8"] - grid["2048"]["4"]) * 0.5
    assert kt.prefill_attention_ms("h100_sxm", 6, 2048, 32, 8) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_more_work_takes_longer(gpu):
    gemm = [kt.gemm_seconds(gpu, m, 8192, 8192) for m in (64, 512, 4096, 32768, 100_000)]
    assert gemm == sorted(gemm) and gemm[-1] > 10 * gemm[1]
    prefill = [kt.prefill_attention_seconds(gpu, 1, s, 32, 8) for s in (1024, 4096, 16384, 65536)]
    assert prefill == sorted(prefill)
    decode = [kt.decode_attention_seconds(gpu, 64, c, 32, 8) for c in (1024, 8192, 32768, 131072)]
    assert decode == sorted(decode)
    ar = [kt.allreduce_seconds(gpu, b, 8) for b in (1 << 16, 1 << 22, 1 << 28, 1 << 31)]
    assert ar == sorted(ar)
    assert kt.allreduce_seconds(gpu, 1 << 20, 1) == 0.0


def test_a_question_without_a_table_says_so():
    with pytest.raises(kt.KernelTableError, match="no measured kernel table for GPU 'mi300x'"):
        kt.gemm_seconds("mi300x", 128, 4096, 4096)
    with pytest.raises(kt.KernelTableError, match="no measured gemm table for 'fp8'"):
        kt.gemm_seconds("a100_sxm", 128, 4096, 4096, "fp8")
    with pytest.raises(kt.KernelTableError, match="within 2 octaves"):
        kt.gemm_seconds("h100_sxm", 128, 4, 4)
    with pytest.raises(kt.KernelTableError, match="no measured context_attention"):
        kt.prefill_attention_seconds("h100_sxm", 1, 1024, 32, 8, head_dim=96)
    with pytest.raises(kt.KernelTableError, match="measured for"):
        kt.allreduce_seconds("h100_sxm", 1024, 3)


def test_loading_is_lazy_and_standard_library_only():
    """Importing the reader reads no table; a question reads the sections of one GPU's tables it needs (a GEMM: the
    GEMM sites and the datasheet) and imports nothing heavy."""
    code = ("import sys\nfrom llmcalc.analytic import kernel_tables as kt\nbefore = kt._load.cache_info().currsize\n"
            "read, load = [], kt._load\nkt._load = lambda system, name: read.append((system, name)) or load(system, "
            "name)\nkt.gemm_seconds('h100-sxm', 128, 4096, 4096)\nheavy = {'numpy', 'torch', 'pandas', 'pyarrow'} & "
            "{m.split('.')[0] for m in sys.modules}\nprint(before, ','.join(sorted({s for s, _ in read})), "
            "','.join(sorted({n for _, n in read})), sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "h100_sxm", "gemm,spec", "[]"]


def test_the_tables_ship_with_their_license_and_notice():
    names = {p.name for p in kt.DATA.iterdir()}
    assert {"LICENSE", "NOTICE", "h100_sxm", "h200_sxm"} <= names
    assert {"spec", "gemm", "generation_attention"} <= set(kt.table("h100_sxm"))  # a file per section
    assert "Apache License" in (kt.DATA / "LICENSE").read_text()
    assert "aiconfigurator-core 0.12.0" in (kt.DATA / "NOTICE").read_text()
    assert sum(p.stat().st_size for p in kt.DATA.glob("*/*.json.gz") if "." not in p.parent.name) < 2_000_000  # vLLM's
    # others: TensorRT-LLM's and SGLang's (3.1 MB for H100/H200/B200 with B200's NVFP4 GEMM sweep, 0.6 MB more with
    # L40S's, issue 36)
    assert sum(p.stat().st_size for p in kt.DATA.glob("*/*.json.gz") if "." in p.parent.name) < 4_000_000
    assert sum(p.stat().st_size for p in kt.DATA.glob("*/*.json.gz")) < 6_000_000  # the whole set: a few MB


def test_nearest_leaves_search_finds_what_a_full_scan_finds():
    """Past a grid's edge the util of the 4 nearest leaves is held (perf_interp.rs grid_hold scans every leaf); the
    branch and bound down the leaf tree (kt._nearest_leaves) must rank the same 5 nearest, ties included, on random
    points inside, beyond and between every shipped grid kind (decode, prefill, MLA), and so must its search over a
    span of the last axis for every point in the span."""
    import heapq
    import random

    rng, checked = random.Random(36), 0
    for gpu in ("h100-sxm", "h200", "a100-sxm", "b200"):
        doc = kt.table(gpu)
        for name in ("generation_attention", "context_attention", "mla_context_module", "mla_generation_module",
                     "generation_mla"):
            for key in list(doc.get(name, {}).get("grids", {}))[:3]:
                where = (gpu, name, key)
                leaves = kt._log_leaves(*where)
                for _ in range(60):
                    at = leaves[rng.randrange(len(leaves))][0]
                    q = [x + rng.choice((0.0, rng.uniform(-3, 3), round(rng.uniform(-2, 2)))) for x in at]
                    scan = heapq.nsmallest(5, ((math.dist(q, lq), p, lat) for lq, p, lat in leaves))
                    found = heapq.nsmallest(5, ((math.dist(q, lq), p, lat) for lq, p, lat in
                                                kt._nearest_leaves(where, q, 5)))
                    assert found == scan, (where, q)
                    # decode's five context samples share one search over their span of the last axis
                    hi = q[-1] + rng.choice((0.0, 0.1, 0.3))
                    span = kt._nearest_leaves(where, q, 5, last_hi=hi)
                    for x in (q[-1], (q[-1] + hi) / 2, hi):
                        point = [*q[:-1], x]
                        scan = heapq.nsmallest(5, ((math.dist(point, lq), p, lat) for lq, p, lat in leaves))
                        assert heapq.nsmallest(5, ((math.dist(point, lq), p, lat) for lq, p, lat in span)) == scan
                    checked += 1
    assert checked > 1000


def test_a_grids_speed_of_light_is_what_its_key_says_and_each_leafs_is_kept_by_grid():
    """kernel_tables._grid_sol reads the grid's key alone (the attention grids' kv dtype / kv heads / head dim, the MLA
    blocks' kv dtype / GEMM dtype, the bare MLA kernel's kv dtype): each key's SOL is the kernel's roofline at those
    fields (attention.rs generation_attention_sol / context_attention_sol as ported), and a key that differs in any
    field answers differently; _leaf_sols, memoized by (gpu, table, key), holds each leaf's SOL at its coordinates."""
    c = [32.0, 64.0, 4096.0]
    decode = kt._grid_sol("h100_sxm", "generation_attention", "bf16/8/128")
    assert decode(c) == kt._generation_sol("h100_sxm", 8, 128, 2.0, c)
    assert kt._grid_sol("h100_sxm", "context_attention", "fp8/0/64")(c) == kt._context_sol("h100_sxm", 0, 64, 1.0, c)
    others = [kt._grid_sol("h100_sxm", "generation_attention", key)(c) for key in ("fp8/8/128", "bf16/0/128",
                                                                                    "bf16/8/64")]
    others.append(kt._grid_sol("h200_sxm", "generation_attention", "bf16/8/128")(c))
    assert all(other != decode(c) for other in others)
    assert kt._grid_sol("h200_sxm", "mla_generation_module", "fp8/fp8_block")(c) == kt._mla_module_sol(
        "h200_sxm", "fp8_block", 1.0, c, context=False)
    assert kt._grid_sol("h200_sxm", "mla_context_module", "bf16/bf16")(c) != kt._grid_sol(
        "h200_sxm", "mla_generation_module", "bf16/bf16")(c)
    where = ("h100_sxm", "generation_attention", "bf16/8/128")
    sols = kt._leaf_sols(*where)
    assert len(sols) == len(kt._log_leaves(*where))
    assert all(sols[p] == kt._grid_sol(*where)(list(p)) for _, p, _ in kt._log_leaves(*where))


def _members_equal(found, expected) -> bool:
    if isinstance(found, kt.Members):
        return isinstance(expected, dict) and dict(found) == expected
    return type(found) is type(expected) and found == expected


def test_members_parsed_alone_are_what_the_whole_parse_holds():
    """kt.Members parses a section member's value alone (the one key a run reads): for every shipped section and every
    key of the root and the first and last three of each member that is an object, present or not, the value and
    membership are json.loads' of the whole text, and most are found without parsing the rest (the point of it)."""
    alone = asked = 0
    for path in sorted(kt.DATA.glob("*/*.json.gz")):
        text = gzip.decompress(path.read_bytes()).decode()
        whole = json.loads(text)
        if not isinstance(whole, dict):
            continue
        for key in [*whole, "absent", "bf16", "fp8", "grids", "sites", "curves"]:
            section = kt.Members(text)
            if key not in whole:
                assert key not in section and section.get(key) is None, (path, key)
                continue
            assert _members_equal(section[key], whole[key]), (path, key)
            asked, alone = asked + 1, alone + (section.whole is None)
            if isinstance(whole[key], dict):
                member = kt.Members(text)[key]
                inners = list(whole[key])
                for inner in [*inners[:3], *inners[-3:], "absent", "1"]:  # (a translate of the text up to each)
                    if inner in whole[key]:
                        assert _members_equal(member[inner], whole[key][inner]), (path, key, inner)
                    else:
                        assert inner not in member, (path, key, inner)
        assert dict(kt.Members(text)) == whole and list(kt.Members(text)) == list(whole)
    assert alone > asked / 2


@pytest.mark.parametrize("text", [
    '{"a":{"k":1},"b":{"k":2}}',  # the key in two siblings
    '{"a":{"x":{"k":1}},"k":2}',  # deeper first, then the root's own
    '{"a":{"x":1},"b":{"k":3}}',  # a later sibling's key, none in "a"
    '{"k":1,"k":2,"a":{"k":[1,{"k":4}],"k":5}}',  # spelled twice: json.loads keeps the last
    '{"a":"{\\"k\\":9}","k":7}',  # an escaped quote
    '{"a{":{"k":1},"b":{"k":6}}',  # a bracket in a string
    '{"a":["k",{"k":8}],"b":{"y":{"k":0}},"k":[]}',  # the key a string value, in an array, and the root's own
])
def test_members_never_take_another_objects_key(text):
    """Where a key is spelled in another object too (a sibling, a deeper one, an array), twice, or the text has an
    escape or a bracket inside a string, Members answer as json.loads: its own member or none (what a false match
    there would break)."""
    whole = json.loads(text)
    for key in ("k", "a", "b", "x", "y"):
        section = kt.Members(text)
        assert (key in section) == (key in whole)
        if key in whole:
            assert _members_equal(section[key], whole[key]), key
        for outer in ("a", "b"):
            if isinstance(whole.get(outer), dict):
                member = kt.Members(text)[outer]
                assert (key in member) == (key in whole[outer]), (outer, key)
                if key in whole[outer]:
                    assert _members_equal(member[key], whole[outer][key]), (outer, key)
