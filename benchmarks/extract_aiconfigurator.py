"""Extract llmcalc's measured kernel tables (llmcalc/data/kernels/<gpu>/<section>.json.gz) from NVIDIA aiconfigurator.

Run in a separate environment that has aiconfigurator installed (never a dependency of llmcalc):

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install aiconfigurator==0.12.0
    /work/venv-aic/bin/python benchmarks/extract_aiconfigurator.py                      # vLLM: <gpu>/
    /work/venv-aic/bin/python benchmarks/extract_aiconfigurator.py --backend trtllm     # <gpu>.trtllm/
    /work/venv-aic/bin/python benchmarks/extract_aiconfigurator.py --backend sglang     # <gpu>.sglang/

Reads the parquet tables aiconfigurator-core ships under aiconfigurator_core/systems/data/<system>/<family>/vllm/
<latest version>/ and keeps, per GPU, the rows aiconfigurator's engine itself loads for a vLLM query (see
llmcalc/data/kernels/NOTICE): GEMM bf16, per-tensor fp8 and (Blackwell) NVFP4, context and generation attention
(window 0), vLLM's custom all-reduce (CUDA-graph rows; "_eager" rows dropped as the engine does) and NCCL all_reduce
at the system's nccl_version, and DeepSeek-V3's whole MLA attention block (``mla_context_module`` /
``mla_generation_module``; SGLang's files its bare MLA decode kernel, ``generation_mla``, and the absorbed BMMs,
``mla_bmm``).
Latencies stay in milliseconds, rounded to 5 significant digits.

--backend trtllm / sglang (issue 36): the same tables measured inside TensorRT-LLM (torch flow) or SGLang, each
family at the version directory with the most rows (aiconfigurator's newest directories are often partial
re-collections of a few shapes), the engine's own custom all-reduce, and the fused-MoE tables (one layer's routed
experts by dtype, hidden, inter, top-k, experts, moe_tp, moe_ep: a curve in tokens, aiconfigurator's default
power_law_1.01 routing distribution). The vLLM files carry the fused-MoE tables too (vLLM's own MoE kernels).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import aiconfigurator_core
import pandas as pd
import yaml
from aiconfigurator_core.sdk.perf_database import _version_sort_tuple

SYSTEMS = Path(aiconfigurator_core.__file__).parent / "systems"
OUT = Path(__file__).resolve().parent.parent / "llmcalc" / "data" / "kernels"
GPUS = ("h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s")
# Systems whose files keep only the sections the serving step reads (decode attention, the all-reduces, fused MoE, and
# TensorRT-LLM's GEMMs, which time its projections): L40S's prefill attention, MLA tables (DeepSeek-V3 does not fit
# 8 x 48 GB) and vLLM GEMM sweep stay out, to keep the data small
SERVING_ONLY = ("l40s",)
SERVING_SECTIONS = ("generation_attention", "custom_allreduce", "nccl_all_reduce", "moe")
BACKENDS = ("vllm", "trtllm", "sglang")
BACKEND = "vllm"  # set by --backend
# SGLang's files keep only what the serving step reads (decode attention, all-reduce, MoE): the total stays small
FULL_BACKENDS = ("vllm", "trtllm")
MOE_DISTRIBUTION = "power_law_1.01"  # aiconfigurator's default (sdk/models/*.py: _power_law_alpha = 1.01)


def r5(x: float) -> float:
    return float(f"{x:.5g}")


def latest(path: Path) -> Path | None:
    if not path.is_dir():
        return None
    versions = [p for p in path.iterdir() if p.is_dir()]
    return max(versions, key=lambda p: _version_sort_tuple(p.name)) if versions else None


def fullest(path: Path, name: str) -> Path | None:
    """The version directory whose `name` has the most rows (its file is the largest)."""
    if not path.is_dir():
        return None
    versions = [p for p in path.iterdir() if (p / name).exists()]
    return max(versions, key=lambda p: ((p / name).stat().st_size, _version_sort_tuple(p.name))) if versions else None


def table(root: Path, family: str, name: str) -> tuple[pd.DataFrame, str] | None:
    found = latest(root / family / BACKEND) if BACKEND == "vllm" else fullest(root / family / BACKEND, name)
    if found is None or not (found / name).exists():
        return None
    return pd.read_parquet(found / name), found.name


def moe(root: Path) -> dict:
    """Fused-MoE layer latency (routed experts only) by dtype/hidden/inter/topk/experts/moe_tp/moe_ep, a curve in
    tokens; one kernel_source per shape (the first listed, as the engine's loader keeps the first row)."""
    got = table(root, "moe", "moe_perf.parquet")
    if got is None:
        return {}
    df, version = got
    df = df[df.distribution == MOE_DISTRIBUTION]
    keys = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    df = df.drop_duplicates(keys + ["num_tokens"], keep="first")
    out: dict = {"version": version, "distribution": MOE_DISTRIBUTION,
                 "kernel_source": sorted(df.kernel_source.unique()), "curves": {}}
    for key, rows in df.groupby(keys, sort=True):
        rows = rows.sort_values("num_tokens")
        dtype = {"bfloat16": "bf16"}.get(key[0], key[0])
        name = "/".join([dtype, *(str(int(v)) for v in key[1:])])
        out["curves"][name] = [[int(t) for t in rows.num_tokens], [r5(v) for v in rows.latency]]
    return out


def gemm(root: Path) -> dict:
    got = table(root, "gemm", "gemm_perf.parquet")
    if got is None:
        return {}
    df, version = got
    out = {"version": version}
    # nvfp4: TensorRT-LLM's NVFP4 linear on Blackwell (fp4_quantize of the activations, then nvfp4_gemm)
    for ours, theirs in (("bf16", "bfloat16"), ("fp8", "fp8"), ("nvfp4", "nvfp4")):
        part = df[df.gemm_dtype == theirs].drop_duplicates(["m", "n", "k"], keep="first")  # the engine: first wins
        if part.empty:
            continue
        sites: dict[str, list] = {}
        for (n, k), rows in part.groupby(["n", "k"], sort=True):
            rows = rows.sort_values("m")
            sites[f"{n},{k}"] = [[int(m) for m in rows.m], [r5(v) for v in rows.latency]]
        out[ours] = {"kernel_source": sorted(part.kernel_source.unique()), "sites": sites}
    return out


def kv_lookup(n: int, n_kv: int) -> int:
    return 0 if n == n_kv else n_kv  # aiconfigurator's MHA sentinel (attention.rs normalize_kv)


def attention(root: Path, name: str, context: bool) -> dict:
    got = table(root, "attention", name)
    if got is None:
        return {}
    df, version = got
    if "window_size" in df:
        df = df[df.window_size == 0]
    if context and "attn_dtype" in df:
        df = df[df.attn_dtype == "bfloat16"]
    out: dict = {"version": version, "kernel_source": sorted(df.kernel_source.unique()), "grids": {}}
    seq = df.isl if context else df.isl + df.step  # generation: the KV length the step attends over
    df = df.assign(seq=seq)
    df = df.drop_duplicates(["kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "seq", "batch_size"])
    for (kv, n, n_kv, head), rows in df.groupby(["kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim"]):
        kvd = "bf16" if kv == "bfloat16" else kv
        key = f"{kvd}/{kv_lookup(n, n_kv)}/{head}"
        grid = out["grids"].setdefault(key, {})
        by_n = grid.setdefault(str(n), {})
        for row in rows.itertuples():
            outer, inner = (row.seq, row.batch_size) if context else (row.batch_size, row.seq)
            by_n.setdefault(str(outer), {})[str(inner)] = r5(row.latency)
    return out


def mla_module(root: Path, context: bool) -> dict:
    """DeepSeek-V3's whole MLA attention block on one rank (vLLM's DeepseekV2MLAAttention forward, TensorRT-LLM's
    MLA module: the fused q_a/kv_a down-projection, the latent norms, q_b, the absorbed kv_b BMMs, RoPE, the KV
    write, attention and o_proj; no all-reduce) by KV dtype and GEMM dtype ("<kv>/<gemm>"), a grid over the rank's
    heads, then (context) prompt length and batch, or (generation) batch and KV length (``step``, the current token
    included). One kernel per point, the engine's own choice (kernel_source)."""
    name = "mla_context_module_perf.parquet" if context else "mla_generation_module_perf.parquet"
    got = table(root, "mla", name)
    if got is None:
        return {}
    df, version = got
    # bf16 and block-FP8 projections only: NVFP4 DeepSeek checkpoints keep their attention in bf16
    df = df[(df.model == "deepseek-ai/DeepSeek-V3") & df.gemm_type.isin(["bfloat16", "fp8_block"])]
    df = df.drop_duplicates(["kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "isl", "step"], keep="first")
    out: dict = {"version": version, "model": "deepseek-ai/DeepSeek-V3",
                 "kernel_source": sorted(df.kernel_source.unique()), "grids": {}}
    for (kv, gemm), rows in df.groupby(["kv_cache_dtype", "gemm_type"]):
        key = f"{'bf16' if kv == 'bfloat16' else kv}/{'bf16' if gemm == 'bfloat16' else gemm}"
        grid = out["grids"].setdefault(key, {})
        for row in rows.itertuples():
            outer, inner = (row.isl, row.batch_size) if context else (row.batch_size, row.step)
            grid.setdefault(str(row.num_heads), {}).setdefault(str(outer), {})[str(inner)] = r5(row.latency)
    return out


def generation_mla(root: Path) -> dict:
    """The bare MLA decode kernel (SGLang: no module table): by KV dtype, a grid over the rank's heads (num_heads;
    tp_size only names the split), batch and KV length (isl + step), the first row per point kept."""
    got = table(root, "mla", "generation_mla_perf.parquet")
    if got is None:
        return {}
    df, version = got
    df = df.assign(seq=df.isl + df.step)
    df = df.drop_duplicates(["kv_cache_dtype", "num_heads", "batch_size", "seq"], keep="first")
    out: dict = {"version": version, "kernel_source": sorted(df.kernel_source.unique()), "grids": {}}
    for kv, rows in df.groupby("kv_cache_dtype"):
        grid = out["grids"].setdefault("bf16" if kv == "bfloat16" else kv, {})
        for row in rows.itertuples():
            grid.setdefault(str(row.num_heads), {}).setdefault(str(row.batch_size), {})[str(row.seq)] = r5(row.latency)
    return out


def mla_bmm(root: Path) -> dict:
    """MLA decode's absorbed projections (mla_gen_pre: the query's no-RoPE part into the latent, W_UK; mla_gen_post:
    the latent output back to the heads, W_UV) by op/dtype/heads, a curve in tokens."""
    got = table(root, "mla_bmm", "mla_bmm_perf.parquet")
    if got is None:
        return {}
    df, version = got
    df = df.drop_duplicates(["op_name", "bmm_dtype", "num_heads", "num_tokens"], keep="first")
    out: dict = {"version": version, "kernel_source": sorted(df.kernel_source.unique()), "curves": {}}
    for (op, dtype, heads), rows in df.groupby(["op_name", "bmm_dtype", "num_heads"]):
        rows = rows.sort_values("num_tokens")
        name = f"{op.removeprefix('mla_gen_')}/{'bf16' if dtype == 'bfloat16' else dtype}/{heads}"
        out["curves"][name] = [[int(t) for t in rows.num_tokens], [r5(v) for v in rows.latency]]
    return out


def comm(root: Path, spec: dict) -> dict:
    out: dict = {}
    got = table(root, "comm", "custom_allreduce_perf.parquet")
    if got is not None:
        df, version = got
        keep = ~df.kernel_source.str.endswith("_eager")
        if "backend" in df:
            keep &= ~df.backend.str.endswith("_eager")
        df = df[keep].drop_duplicates(["num_gpus", "message_size"]).sort_values(["num_gpus", "message_size"])
        out["custom_allreduce"] = {"version": version, "dtype": "bf16",
                                   "kernel_source": sorted(df.kernel_source.unique()),
                                   "curves": {str(g): [[int(s) for s in r.message_size], [r5(v) for v in r.latency]]
                                              for g, r in df.groupby("num_gpus")}}
    nccl_version = str(spec.get("misc", {}).get("nccl_version", ""))
    path = root / "comm" / "nccl" / nccl_version / "nccl_perf.parquet"
    if path.exists():
        df = pd.read_parquet(path)
        df = df[(df.op_name == "all_reduce") & (df.nccl_dtype == "half")]
        df = df.drop_duplicates(["num_gpus", "message_size"]).sort_values(["num_gpus", "message_size"])
        out["nccl_all_reduce"] = {"version": nccl_version, "dtype": "fp16",
                                  "curves": {str(g): [[int(s) for s in r.message_size], [r5(v) for v in r.latency]]
                                             for g, r in df.groupby("num_gpus")}}
    return out


def extract(gpu: str) -> dict | None:
    spec = yaml.safe_load((SYSTEMS / f"{gpu}.yaml").read_text())
    root = SYSTEMS / spec["data_dir"]
    g = spec["gpu"]
    doc = {
        "gpu": gpu, "backend": BACKEND, "aiconfigurator_core": aiconfigurator_core.__version__
        if hasattr(aiconfigurator_core, "__version__") else "0.12.0",
        "units": {"latency": "ms", "message_size": "elements", "mem_bw": "B/s", "tc_flops": "FLOP/s"},
        "spec": {"mem_bw": g["mem_bw"], "bf16_tc_flops": g["bfloat16_tc_flops"], "fp8_tc_flops": g.get("fp8_tc_flops"),
                 "num_gpus_per_node": spec["node"]["num_gpus_per_node"],
                 **({"fp4_tc_flops": g["fp4_tc_flops"]} if g.get("fp4_tc_flops") else {})},
        "generation_attention": attention(root, "generation_attention_perf.parquet", False),
    }
    if BACKEND in FULL_BACKENDS:
        doc["gemm"] = gemm(root)
        doc["context_attention"] = attention(root, "context_attention_perf.parquet", True)
        doc["mla_context_module"] = mla_module(root, context=True)
        doc["mla_generation_module"] = mla_module(root, context=False)
    else:  # SGLang: no MLA module table; its decode kernel and absorbed BMMs
        doc["generation_mla"] = generation_mla(root)
        doc["mla_bmm"] = mla_bmm(root)
    doc.update(comm(root, spec))
    doc["moe"] = moe(root)
    if not doc["generation_attention"]:
        return None
    if gpu in SERVING_ONLY:
        keep = SERVING_SECTIONS + (("gemm",) if BACKEND == "trtllm" else ())
        doc = {k: v for k, v in doc.items() if k in keep or not isinstance(v, dict) or k in ("units", "spec")}
    return doc


def main() -> None:
    global BACKEND
    args = sys.argv[1:]
    if args[:1] == ["--backend"]:
        BACKEND, args = args[1], args[2:]
        assert BACKEND in BACKENDS, BACKENDS
    OUT.mkdir(parents=True, exist_ok=True)
    for gpu in args or GPUS:
        doc = extract(gpu)
        if doc is None:
            print(gpu, f"no {BACKEND} attention table: skipped")
            continue
        folder = OUT / (gpu if BACKEND == "vllm" else f"{gpu}.{BACKEND}")  # a file per section, read as needed
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.json.gz"):
            old.unlink()
        size = packed = 0
        for name, part in doc.items():
            raw = json.dumps(part, separators=(",", ":"), sort_keys=True).encode()
            path = folder / f"{name}.json.gz"
            path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
            size, packed = size + len(raw), packed + path.stat().st_size
        print(gpu, size, "bytes JSON,", packed, "gzipped")


if __name__ == "__main__":
    main()
