"""Which measured kernel each term of a serving step reads (issue 36), for the models, checkpoints and GPUs of
TensorRT-LLM's trtllm-bench matrix, on TensorRT-LLM and vLLM: per (model, checkpoint, GPU, engine, TP/EP) the table
and key of each term of a decode step (1, 64 and 512 sequences at 2,048 cached tokens each) and of one 8,192-token
prefill, or "roofline" where no table answers, the term's seconds beside its roofline (weight / KV bytes at the HBM
peak, FLOPs at the dense peak of the dtype the engine multiplies in, the all-reduce's bytes at NVLink's peak), and
flags:

- ``slow``: more than 3x the roofline; ``fast``: below it (a table or model faster than the hardware allows);
- ``fallback``: the roofline where the engine's shipped tables should answer (a GEMM, MoE or attention table exists
  for that GPU and engine);
- ``dtype``: a key read for another dtype than the engine runs the checkpoint in (``EXPECTED``: the engine's
  source facts, cited in docs/serving-validation.md section h36hop).

Run on demand (a few seconds a case):

    python benchmarks/kernel_audit.py [--engine trtllm|vllm] [--only SUBSTRING] [--flags]
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from llmcalc.analytic import engine_versions, engines, kernel_tables
from llmcalc.analytic.flops import forward_ops
from llmcalc.analytic.inference import expected_experts
from llmcalc.analytic.kernels import device_for
from llmcalc.analytic.measured_kernels import windowed_kv_bytes
from llmcalc.analytic.serving import plan_serving
from llmcalc.analytic.serving_speed import ENGINE_STEP_SECONDS, StepCost
from llmcalc.spec import load_hardware, load_model

# (model or HF checkpoint, typed weight dtype or None, GPU, TP, expert parallel): the trtllm-bench matrix's kinds
CASES = (
    ("nvidia/Llama-3.1-8B-Instruct-FP8", None, "h100-sxm", 1, False),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", None, "b200", 1, False),
    ("nvidia/Llama-3.1-8B-Instruct-FP4", None, "b200", 1, False),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", None, "h100-sxm", 2, False),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", None, "h200", 1, False),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", None, "b200", 1, False),
    ("nvidia/Llama-3.1-405B-Instruct-FP8", None, "h200", 8, False),
    ("nvidia/Llama-3.1-405B-Instruct-FP4", None, "b200", 4, False),
    ("mixtral-8x7b", "fp8", "h100-sxm", 2, False),
    ("mixtral-8x7b", "fp8", "h200", 1, False),
    ("mixtral-8x22b", "fp8", "h100-sxm", 8, False),
    ("deepseek-ai/DeepSeek-R1", None, "h200", 8, False),
    ("deepseek-ai/DeepSeek-R1", None, "h200", 8, True),
    ("nvidia/DeepSeek-R1-FP4", None, "b200", 8, True),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", None, "h200", 8, True),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", None, "b200", 8, True),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP4", None, "b200", 8, True),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP8", None, "h100-sxm", 2, False),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", None, "b200", 1, False),
    ("nvidia/Qwen3-235B-A22B-FP8", None, "h200", 8, True),
    ("Qwen/Qwen3-235B-A22B-FP8", None, "h200", 8, True),
    ("nvidia/Qwen3-235B-A22B-FP4", None, "b200", 4, True),
    ("Qwen/Qwen3-30B-A3B-FP8", None, "h100-sxm", 1, False),
    ("gpt-oss-120b", None, "h200", 1, False),
    ("gpt-oss-120b", None, "b200", 1, False),
    ("gpt-oss-20b", None, "h100-sxm", 1, False),
)
BATCHES = (1, 64, 512)
CONTEXT = 2048  # cached tokens per decoding sequence
PREFILL = 8192  # one prompt's prefill
SLOW = 3.0  # flag a term more than this many times its roofline

# What the engine multiplies a checkpoint's dense GEMMs and routed experts in, by (engine, weights, arch) where the
# weights' format name is "fp8" (per-tensor), "fp8-block" (128 x 128 blocks), "nvfp4", "mxfp4", "bf16"; the key's
# dtype the table should be read under (None: no expectation). Sources: docs/serving-validation.md, section h36hop.
EXPECTED_GEMM = {"fp8": "fp8", "nvfp4": "nvfp4", "bf16": "bf16"}
EXPECTED_MOE = {
    ("trtllm", "fp8"): "fp8", ("trtllm", "fp8-block"): "fp8_block", ("trtllm", "nvfp4"): "nvfp4",
    ("trtllm", "mxfp4", "hopper"): "w4a16_mxfp4", ("trtllm", "mxfp4", "blackwell"): "w4a8_mxfp4_mxfp8",
    ("vllm", "fp8-block"): "fp8_block", ("vllm", "nvfp4"): "nvfp4", ("vllm", "mxfp4"): "w4a16_mxfp4",
}


# the dense peak each fused-MoE table dtype multiplies at (its activations' and weights' narrower type)
MOE_PEAK = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp8",
            "w4a16_mxfp4": "bf16", "int4_wo": "bf16"}


def weights_name(fmt: Any) -> str:
    """The checkpoint's weights as the MoE tables name them (engines.moe_table_key's naming)."""
    if fmt.name == "fp8" and fmt.quant is not None and fmt.quant.format.per == "block":
        return "fp8-block"
    if fmt.name == "fp8" and fmt.quant is not None and fmt.quant.method == "modelopt":
        return "fp8-modelopt"
    return fmt.name


def build(model: str, weight_dtype: str | None, gpu: str, tp: int, ep: bool, engine: str) -> tuple[Any, Any]:
    """(serve estimate, the engine's step cost) as serving_speed.plan_workload builds them for trtllm-bench."""
    spec, acc = load_model(model), load_hardware(gpu)
    args = dict(max_model_len=PREFILL + 1024, weight_dtype=weight_dtype, expert_parallel=ep)
    est = plan_serving(spec, acc, tp, **args)
    kv = engine_versions.default_kv_dtype(engine, est.weights)
    if kv:
        est = plan_serving(spec, acc, tp, kv_dtype=kv, **args)
    prof = engines.profile(engine, None)
    base = StepCost(est.roofline(1, PREFILL), device_for(acc.key), est.tp)
    return est, engines.step_cost(base, prof, est, host=ENGINE_STEP_SECONDS)


def peak(dev: Any, dtype: str) -> float:
    """The dense peak FLOP/s of `dtype` ("fp4": the preset's FP4 peak)."""
    if dtype == "fp4":
        return dev.fp4_peak or dev.accelerator.peak("fp8")
    return dev.accelerator.peak("fp8" if dtype == "fp8" else "bf16")


def sources(est: Any, cost: Any) -> dict[str, str]:
    """Each term's table and key, or how the roofline stands in."""
    gpu, spec = cost.gpu, cost.spec
    out = {}
    shape = getattr(cost, "gemm_shape", None)
    mla = cost.mla_key()
    out["linear"] = f"{gpu}:gemm/{shape.dtype}" if shape is not None else \
        f"roofline ({cost.gemm_dtype} MAMF{', MLA projections in the MLA block' if mla else ''})"
    keys = getattr(cost, "moe_keys", ())
    if spec.is_moe:
        out["experts"] = f"{gpu}:moe/{keys[0]}" if keys else f"roofline in linear ({cost.gemm_dtype})"
    out["head"] = "roofline (bf16 MAMF)"
    if mla:
        out["decode_attn"] = f"{gpu}:mla_generation_module/{mla}/{spec.n_heads // cost.tp}"
        out["prefill_attn"] = f"{gpu}:mla_context_module/{mla}/{spec.n_heads // cost.tp}"
    elif cost.mla_parts():
        out["decode_attn"] = f"{gpu}:generation_mla+mla_bmm/{cost.mla_parts()}"
        out["prefill_attn"] = "roofline (FlashAttention rate)"
    else:
        kv = "fp8" if est.kv_dtype == "fp8" else "bf16"
        out["decode_attn"] = f"{gpu}:generation_attention/{kv}" if cost.table_attention else "roofline (KV bytes)"
        ratio = f" x {gpu}:context_attention fp8/bf16" if kv == "fp8" and cost.table_attention else ""
        out["prefill_attn"] = "roofline (FlashAttention rate)" + ratio
    out["allreduce"] = "none (tp 1)" if cost.tp == 1 else f"{gpu}:custom_allreduce/nccl_all_reduce" \
        if cost.measured else "roofline (NVLink)"
    return out


def rooflines(est: Any, cost: Any, tokens: float, kv_tokens: float, pairs: float) -> dict[str, float]:
    """Each term's roofline: bytes at the HBM peak, FLOPs at the dtype's dense peak (the larger of the two)."""
    spec, dev, tp = cost.spec, cost.dev, cost.tp
    bw = dev.accelerator.memory_bandwidth
    layout = est.roofline(1, PREFILL).layout
    out = {}
    dense_bytes = layout.per_gpu - layout.lookups_per_gpu - layout.experts_per_gpu
    shape = getattr(cost, "gemm_shape", None)
    dtype = "fp4" if shape is not None and shape.dtype == "nvfp4" else cost.gemm_dtype
    mla_flops = cost.mla_flops_per_token if cost.mla_key() else 0
    stack = cost.stack_flops_per_token - mla_flops
    out["linear"] = max((dense_bytes - (cost.mla_bytes if cost.mla_key() else 0)) / bw,
                        tokens * stack / tp / peak(dev, dtype))
    if spec.is_moe:
        hit = expected_experts(spec, math.ceil(tokens)) / spec.n_experts
        flops = forward_ops(spec, 1, 1).get("moe/experts", 0)
        keys = getattr(cost, "moe_keys", ())
        moe = MOE_PEAK.get(keys[0].split("/")[0], dtype) if keys else dtype
        out["experts"] = max(layout.experts_per_gpu * hit / bw, tokens * flops / tp / peak(dev, moe))
        if not getattr(cost, "moe_keys", ()):  # the experts are inside the linear term's roofline
            out["linear"] = max(out["linear"], (dense_bytes + layout.experts_per_gpu * hit) / bw)
    head = 2 * spec.d_model * spec.vocab_size / tp
    rows = kv_tokens / CONTEXT or 1  # the rows that sample: each decode, a prefill's last token
    out["head"] = max(head / bw * (1 if spec.lm_head else 0), rows * head / peak(dev, "bf16"))
    sequences = kv_tokens / CONTEXT
    kv = windowed_kv_bytes(cost.est, spec, tp, kv_tokens, sequences)  # a windowed layer's window only
    out["decode_attn"] = kv / bw + (cost.mla_bytes / bw if cost.mla_key() else 0)
    attn = 4 * pairs * spec.n_heads / tp * spec.d_head * spec.n_attention_layers
    out["prefill_attn"] = attn / peak(dev, "bf16") + (cost.mla_bytes / bw if cost.mla_key() else 0)
    nbytes = tokens * spec.d_model * 2
    out["allreduce"] = 0.0 if tp == 1 else 2 * spec.n_layers * 2 * nbytes * (tp - 1) / tp / \
        dev.network.scale_up_bandwidth
    return out


def step_terms(cost: Any, tokens: float, kv_tokens: float, decodes: float, pairs: float) -> dict[str, float]:
    """The step's terms, seconds (serving_speed.StepCost and engines.EngineStepCost)."""
    out = {"linear": cost.linear_seconds(tokens)}
    if cost.spec.is_moe:
        out["experts"] = cost.expert_seconds(tokens) if hasattr(cost, "expert_seconds") else 0.0
    rows = decodes if decodes else 1
    out["head"] = cost.head_seconds(rows)
    out["decode_attn"] = cost.decode_attention_seconds(kv_tokens, decodes) if decodes else 0.0
    out["prefill_attn"] = cost.prefill_attention_seconds(pairs, PREFILL, tokens=tokens) if pairs else 0.0
    out["allreduce"] = cost.allreduce_seconds(tokens)
    return out


def flags(term: str, src: str, t: float, roof: float, expected: str | None, tables: set[str]) -> list[str]:
    """The audit's flags for one term (module docstring)."""
    out = []
    if roof > 0 and t > SLOW * roof:
        out.append(f"slow x{t / roof:.1f}")
    if roof > 0 and 0 < t < roof * 0.999:
        out.append(f"fast x{t / roof:.2f}")
    want = {"linear": "gemm", "experts": "moe", "decode_attn": "generation_attention"}.get(term)
    if src.startswith("roofline") and want in tables:
        out.append("fallback")
    if expected and not src.startswith("roofline") and f"/{expected}/" not in src + "/" and \
            not src.endswith(f"/{expected}"):
        out.append(f"dtype (runs {expected})")
    return out


def expectations(est: Any, cost: Any, engine: str) -> dict[str, str | None]:
    """The dtype each table term should read (EXPECTED_GEMM, EXPECTED_MOE)."""
    name = weights_name(est.weights)
    arch = "blackwell" if cost.dev.arch in engines.BLACKWELL_ARCHS else "hopper"
    moe = EXPECTED_MOE.get((engine, name, arch)) or EXPECTED_MOE.get((engine, name))
    if name == "fp8-modelopt":
        moe = "fp8"
    gemm = EXPECTED_GEMM.get("fp8" if name == "fp8-modelopt" else name)
    return {"linear": gemm, "experts": moe}


def audit(case: tuple, engine: str, only_flags: bool) -> int:
    """Print one case's table; returns its number of flags."""
    model, wd, gpu, tp, ep = case
    est, cost = build(model, wd, gpu, tp, ep, engine)
    src = sources(est, cost)
    tables = set(kernel_tables.table(cost.gpu)) if cost.measured else set()
    want = expectations(est, cost, engine)
    title = (f"{model}{' --weight-dtype ' + wd if wd else ''} on {tp}x {gpu}{' EP' if ep else ''}, {engine}: weights "
             f"{weights_name(est.weights)}, KV {est.kv_dtype}, table {cost.gpu if cost.measured else 'none'}")
    lines, count = [], 0
    steps = [(f"decode {b}", b, b * CONTEXT, b, 0.0) for b in BATCHES] + \
        [(f"prefill {PREFILL}", PREFILL, 0.0, 0, PREFILL * PREFILL / 2)]
    for label, tokens, kv_tokens, decodes, pairs in steps:
        t = step_terms(cost, tokens, kv_tokens, decodes, pairs)
        roof = rooflines(est, cost, tokens, kv_tokens, pairs)
        for term, seconds in t.items():
            if seconds == 0 and roof.get(term, 0) == 0:
                continue
            f = flags(term, src.get(term, ""), seconds, roof.get(term, 0.0), want.get(term), tables)
            count += len(f)
            if f or not only_flags:
                lines.append(f"  {label:>13} {term:<12} {seconds * 1e3:9.3f} ms  roof {roof.get(term, 0) * 1e3:9.3f}"
                             f" ms  {src.get(term, ''):<58} {' '.join(f)}")
    if lines or not only_flags:
        print(title)
        print("\n".join(lines))
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("trtllm", "vllm"), action="append")
    parser.add_argument("--only", default="", help="cases whose model or GPU contains this")
    parser.add_argument("--flags", action="store_true", help="print flagged terms only")
    args = parser.parse_args()
    total = 0
    for engine in args.engine or ("trtllm", "vllm"):
        for case in CASES:
            if args.only.lower() in f"{case[0]} {case[2]}".lower():
                total += audit(case, engine, args.flags)
    print(f"{total} flags")


if __name__ == "__main__":
    main()
