"""Published training runs the step-time model was not built on, as the step model's inputs.

`published_runs.json` holds every row collected (research/runs and research/runs2: 172 rows), each with its source,
the verbatim quote, the layout fields the source states and those it leaves unstated, the metric and its counting
convention. 72 rows carry an "excluded" reason and are not used: hardware that is no llmcalc preset (torchtitan's
96 GB H100s at 500 W, MI325X, an unstated Blackwell SKU), H800 rows without a stated layout (DeepSeek-V2),
power-limited B200s, row-wise scaled FP8 (no published kernel rate), low confidence, a missing global batch, and
MLPerf v6.0's DeepSeek-V3 rows, whose configs say their knobs come from Megatron-Bridge's performance recipes (the
acceptance set's source).

Each used row becomes one `Run` by the rules below, the same for every row (no per-row tuning):

- model: the preset the row names; else its `config` (MPT and GPT-style: LayerNorm, GELU 4h MLP, biases, learned
  positions; BLOOM: ALiBi and the embedding LayerNorm; KempnerForge 13B: Llama-style; OLMo 13B: OLMo-2 with the
  stated widths; gpt-oss-20b as MLPerf builds it: the preset with vocab 128,256).
- hardware: the preset; GPUs per node as the source states them when they differ from the preset (KempnerForge's
  4-GPU H200 nodes); GB200/GB300 NVLink domains of 72.
- unstated fields: micro-batch 1; vpp 1; ep 1; etp 1 for expert-parallel MoE rows (every Megatron-Core MoE layout
  in the set that states it uses ETP 1); GPUs 8 (one node) where the count is missing (OLMo-core); recompute none.
- ZeRO: FSDP / FULL_SHARD -> 3, SHARD_GRAD_OP -> 2, a distributed optimizer or ZeRO-1 -> 1, none -> 0.
- recompute: full; Megatron module lists as given (layernorm, moe_act = "moe activation"/"act", moe, mlp);
  torch per-op SAC (torchtitan "op") re-runs every other matmul and the elementwise ops -> modules alternate_mm,
  layernorm, mlp_act; torchtitan layer SAC (every second block) -> full with half the layers; MaxText's
  minimal_flash (saves matmul and attention outputs) -> layernorm, mlp_act.
- precision -> recipe: bf16 -> bf16-mixed; Transformer Engine delayed scaling -> fp8,
  current (tensorwise) -> fp8-current, blockwise -> fp8-blockwise, MXFP8 -> mxfp8, NVFP4 -> nvfp4; torchao
  tensorwise float8 -> fp8-torchao; FP8 attention only where stated.
- framework -> kernels and overlaps: torch SDPA, flash-attn and OLMo-core run FlashAttention-2 (SDPA's priority puts
  it first on Hopper: pytorch/pytorch#142132; llm-foundry's `attn_impl: triton`, its rows' `other` field, too: the one
  published rate of that kernel, the FlashAttention-2 paper's A100 ratio, misses its rows by -23 to -28 % at 32k-65k,
  docs/steptime-validation.md); Transformer Engine (Megatron-Core) runs today's cuDNN (kernels.CUDNN_MEASURED),
  MaxText's cudnn_flash_te of April 2024 the cuDNN of its time ("cudnn-2024", the FlashAttention-3 paper's curve of
  July 2024); Megatron-LM/DeepSpeed of 2021-22 (BLOOM, MT-NLG) materialise the scores; torch eager (compile off) runs
  unfused elementwise kernels (llm-foundry's tables too: Composer compiles only with a `compile_config`, which
  scripts/train/benchmarking/submit_benchmarks.py's `mod_parameters` never sets, and the README's tables predate it:
  "TODO: Update tables with torch 2.0 after next Composer release"); DeepSpeed's pipeline engine reduces gradients
  after the backward; Megatron-Core's rank order unless the source says otherwise ("dplast" -> tp-cp-ep-pp-dp); TP
  overlap, EP (1F1B A2A) overlap, FP8 parameter gathers (Megatron's --fp8-param-gather: "fp8 param gather",
  "fp8_param_gather=true"; torchao's float8 FSDP all-gather) and the CP communication type where the source states
  them; MoE routing balanced (benchmarks force it; every Megatron-MoE-ModelZoo table that says so does) except where
  the source says it is real (MLPerf v6.0: capacity factors 1.5-7; DeepSeek-V3's auxiliary-loss-free routing), there
  MOE_DROPLESS_IMBALANCE; an MTP depth where stated (DeepSeek-V3: 1); DualPipe as its V-shaped form (DualPipeV,
  deepseek-ai/DualPipe's README: DualPipe "cut in half") with the EP all-to-alls overlapped: `--schedule zb-v
  --ep-overlap`, the V placement putting "the shallowest layers (including the embedding layer) and deepest layers
  (including the output head) of the model on the same PP rank" (DeepSeek-V3 report sec. 3.2.1; 1F1B left the last
  stage three layers, the MTP module and two output heads) and the paired chunks hiding the all-to-alls
  (``step/collectives.py:ep_overlap_share``).
- network: the hardware preset's own build (one NIC per GPU on DGX-class nodes) unless the source states another:
  BLOOM's Jean Zay, four 100 Gb/s Omni-Path links per 8-GPU node (--network jean-zay-a100); MaxText's "A3" VMs,
  Google Cloud's a3-highgpu-8g, four 200 Gb/s GPUDirect-TCPX data NICs per 8 H100 (--network gcp-a3-high).
- sharding: MaxText's FSDP within a VM and pure data parallelism across VMs (ici_fsdp_parallelism x
  dcn_data_parallelism) is HSDP: --dp-shard of the in-VM FSDP degree.
- measured: tokens/s per GPU as stated; else tokens/s over the GPUs, the global batch x seq / step time per GPU,
  or the TFLOP/s per GPU turned into tokens by the source's own FLOP count (``source_flops_per_token``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcalc.analytic import kernels
from llmcalc.analytic.step import constants, layout, prediction
from llmcalc.spec import ModelSpec, load_model, spec_of

DATA = Path(__file__).resolve().parent / "published_runs.json"
# Tokens on the most loaded EP rank over the mean under dropless routing with an auxiliary balance loss: the
# Megatron-MoE-ModelZoo Qwen3-235B long-context rows publish forced-balance and dropless TFLOP/s for the same runs
# (295/237, 335/277, 368/320, 389/357 at 16k-128k); bench_steptime.fit_imbalance finds the factor that turns the
# model's forced-balance predictions into the dropless ones (fitted once on those pairs, nothing else; `python
# benchmarks/bench_steptime.py --fit-imbalance`: 1.59, 1.58-1.59 leaving each pair out). Its leave-one-source-out
# error is the error on the rows it is applied to, MLPerf v6.0's, a source the fit never sees (the README).
MOE_DROPLESS_IMBALANCE = 1.59


@dataclass
class Run:
    """One published row, ready for the step model."""

    id: str
    source: str
    spec: ModelSpec
    gpu: str
    n_gpus: int
    seq_len: int
    global_batch: int
    measured: float  # tokens/s per GPU
    layout: dict[str, Any]
    recompute: str
    recipe: str
    attention: str = "flash"
    dropout: bool = False
    gpus_per_node: int | None = None
    groups: tuple[str, ...] = ()
    row: dict = field(default_factory=dict, repr=False)
    network: str | None = None  # --network: the cluster's fabric where the source states one the preset lacks

    def predict(self, efficiency: float | None = None) -> prediction.StepPrediction:
        saved = constants.KERNEL_EFFICIENCY
        if efficiency is not None:
            constants.KERNEL_EFFICIENCY = efficiency
        try:
            dev = kernels.device_for(self.gpu, "bf16", gpus_per_node=self.gpus_per_node, network=self.network)
            lay = layout.make_layout(self.spec, self.n_gpus, self.seq_len, self.global_batch, **self.layout)
            return prediction.predict(self.spec, dev, lay, self.seq_len, causal=True, recompute=self.recompute,
                                    recipe=self.recipe, attention=self.attention, dropout=self.dropout)
        finally:
            constants.KERNEL_EFFICIENCY = saved

    def predicted_tokens_per_gpu(self, efficiency: float | None = None) -> float:
        p = self.predict(efficiency)
        return p.tokens_per_second / self.n_gpus


def source_of(row_id: str) -> str:
    """The source a row belongs to (leave-one-source-out drops them together)."""
    for prefix, name in (("ttperf", "torchtitan"), ("trainy", "torchtitan"), ("torchao", "torchao"),
                         ("llmfoundry", "llm-foundry"), ("kempnerforge", "KempnerForge"), ("olmocore", "OLMo-core"),
                         ("maxtext", "MaxText"), ("mzoo", "Megatron-MoE-ModelZoo"), ("bloom", "BLOOM"),
                         ("mtnlg", "MT-NLG"), ("mlperf50", "MLPerf v5.0"), ("mlperf51", "MLPerf v5.1"),
                         ("mlperf60", "MLPerf v6.0"), ("deepseek-v3-h800", "DeepSeek-V3 report")):
        if row_id.startswith(prefix):
            return name
    raise KeyError(row_id)


def _gpt(cfg: dict, seq: int, name: str, **extra: Any) -> ModelSpec:
    return spec_of(n_layers=cfg["layers"], d_model=cfg["hidden"], n_heads=cfg["heads"], vocab_size=cfg["vocab"],
                   d_ff=cfg["ffn"], mlp="gelu", norm="layernorm", pos_emb=extra.pop("pos_emb", "learned"),
                   max_seq_len=max(seq, 2048), qkv_bias=True, out_bias=True, mlp_bias=True,
                   tie_embeddings=cfg.get("tied_embeddings", True), name=name, **extra)


def model_of(row: dict) -> ModelSpec:
    """The row's model: its preset, or a spec from its `config` (module docstring)."""
    cfg, seq, rid = row.get("config"), row["seq_len"], row["id"]
    if rid.startswith("mlperf60-gptoss"):
        return dataclasses.replace(load_model("gpt-oss-20b"), vocab_size=cfg["vocab"], name="gpt-oss-20b (MLPerf)")
    if row.get("llmcalc_preset"):
        return load_model(row["llmcalc_preset"])
    if rid.startswith("llmfoundry"):
        return _gpt(cfg, seq, f"MPT {cfg['layers']}x{cfg['hidden']}")
    if rid.startswith("bloom"):
        return _gpt(cfg, seq, "BLOOM-176B", pos_emb="alibi", embedding_norm=True)
    if rid.startswith("mtnlg"):
        return _gpt({**cfg, "tied_embeddings": True}, seq, "MT-NLG 530B")
    if rid.startswith("kempnerforge"):
        return spec_of(n_layers=cfg["layers"], d_model=cfg["hidden"], n_heads=cfg["heads"], n_kv_heads=cfg["kv_heads"],
                       vocab_size=cfg["vocab"], d_ff=cfg["ffn"], name="KempnerForge 13B")
    if rid.startswith("olmocore"):
        return dataclasses.replace(load_model("olmo-2-7b"), n_layers=cfg["layers"], d_model=cfg["hidden"],
                                   n_heads=cfg["heads"], n_kv_heads=cfg["kv_heads"], d_ff=cfg["ffn"],
                                   vocab_size=cfg["vocab"], d_head=cfg["hidden"] // cfg["heads"], name="OLMo-2 13B")
    raise KeyError(f"no model rule for {rid}")


def _recipe(row: dict) -> str:
    p = row["precision"].lower()
    if p.startswith("nvfp4"):
        return "nvfp4"
    if p.startswith("mxfp8"):
        return "mxfp8"
    if p.startswith("fp8-blockwise"):
        return "fp8-blockwise"
    if p.startswith("fp8-delayed"):
        return "fp8"
    if p.startswith("fp8-tensorwise"):
        return "fp8-current" if "transformer engine" in p or "te fp8" in p else "fp8-torchao"
    return "bf16-mixed"


def _zero(text: str | None) -> int:
    t = (text or "").lower()
    if "shard_grad_op" in t or "zero-2" in t:
        return 2
    if "fsdp" in t or "full_shard" in t or "zero-3" in t:
        return 3 if "megatron fsdp" not in t else 3
    if "distributed optimizer" in t or "zero-1" in t:
        return 1
    return 0


def _recompute(row: dict, spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    text = (row.get("recompute") or "").lower()
    rid = row["id"]
    if rid.startswith("mtnlg"):  # unstated; the source's hardware-FLOP convention counts the recomputed forward
        return "full", {}
    if text.startswith("full"):
        return "full", {}
    if "selective layer" in text:  # torchtitan layer SAC: every second block
        return "full", {"recompute_layers": max(1, spec.n_layers // 2)}
    if "per-op" in text or "selective op" in text:
        return "selective", {"recompute_modules": ("alternate_mm", "layernorm", "mlp_act")}
    if "minimal_flash" in text:
        return "selective", {"recompute_modules": ("layernorm", "mlp_act")}
    if text.startswith("selective"):
        mods = []
        if "layernorm" in text or "norm" in text:
            mods.append("layernorm")
        if "mla up-projection" in text or "mla_up_proj" in text:
            mods.append("mla_up_proj")
        if "moe activation" in text or "moe_act" in text:
            mods.append("moe_act")
        elif "moe" in text:
            mods.append("moe")
        return "selective", {"recompute_modules": tuple(mods)}
    return "none", {}


def run_of(row: dict) -> Run:  # long: the module docstring's rules, one per line
    rid = row["id"]
    spec = model_of(row)
    seq = row["seq_len"]
    n = row["n_gpus"] or 8  # OLMo-core: one node
    gb = row["global_batch"]
    batch = gb["value"] // seq if gb["unit"].startswith("tokens") else gb["value"]
    mb = row["micro_batch"] or 1
    tp, cp, pp = row["tp"] or 1, row["cp"] or 1, row["pp"] or 1
    ep = row["ep"] or 1
    etp = row["etp"] if row["etp"] else (1 if ep > 1 else None)
    vpp = row["vpp"] or 1
    if pp == 1:
        vpp = 1
    other = (row.get("other") or "").lower() + " " + (row.get("precision") or "").lower()
    framework = (row.get("framework") or "").lower()
    recompute, extra = _recompute(row, spec)
    megatron = "megatron-core" in framework or "nemo" in framework or rid.startswith("mzoo")
    layout: dict[str, Any] = dict(tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, micro_batch=mb, zero=_zero(row["fsdp_or_zero"]),
                                  sequence_parallel=bool(row.get("sequence_parallel")) or megatron and tp > 1,
                                  etp=etp, **extra)
    if "dplast" in other:
        layout["order"] = "tp-cp-ep-pp-dp"
    if "tp comm overlap" in other and "commented" not in other and "off" not in other:
        layout["tp_overlap"] = True
    if "1f1b overlap" in (row.get("quote") or "").lower() or "a2a overlap" in other and "a2a_overlap=0" not in \
            (row.get("quote") or "").lower():
        layout["ep_overlap"] = True
    if "cp comm type a2a" in other:
        layout["cp_comm"] = "a2a"
    if "fp8 dot-product attention" in other or "fp8 attention" in other and "not enabled" not in other \
            and "attention in bf16" not in other:
        layout["fp8_attention"] = True
    attention, dropout = "flash", False
    if rid.startswith(("bloom", "mtnlg")):
        attention, dropout = "eager", rid.startswith("mtnlg")
        layout["dp_overlap"] = False
    elif rid.startswith("maxtext"):  # April 2024: the cuDNN of the time (FlashAttention-3 paper's curve, July 2024)
        layout["attention_kernel"] = "cudnn-2024"
    elif megatron or "transformer engine" in framework:
        layout["attention_kernel"] = "cudnn" if row["gpu"] not in ("mi355x", "mi300x") else "auto"
    else:
        layout["attention_kernel"] = "fa2" if row["gpu"] not in ("mi355x", "mi300x") else "auto"
    if "compile=false" in other or rid.startswith(("ttperf2404", "llmfoundry")):  # eager PyTorch (docstring)
        layout["fused_elementwise"] = False
    if spec.is_moe and ep > 1 and ("deepep" in other or "hybridep" in other):
        layout["ep_dispatcher"] = "deepep"
    if spec.is_moe and (rid.startswith("mlperf60") or "real routing" in other):  # MLPerf: capacity factors 1.5-7
        layout["moe_imbalance"] = MOE_DROPLESS_IMBALANCE
    if re.search(r"fp8 param gather|fp8_param_gather=true|fp8 params \(fp8_param_gather\)|float8 all-gather",
                 other):
        layout["fp8_param_gather"] = True  # Megatron's --fp8-param-gather, as the row's config states it
    if "mtp depth 1" in other:
        layout["mtp_layers"] = 1
    if "dualpipe" in other and pp > 1:  # DualPipe's V form: the first and last chunks on one rank (zb-v's placement)
        layout["schedule"] = "zb-v"
    per_node = 4 if rid.startswith("kempnerforge") else None
    groups = tuple(_groups(row, spec, _recipe(row)))
    network = "jean-zay-a100" if rid.startswith("bloom") else None  # its gpu_note: 4x Omni-Path 100 Gb/s per node
    hsdp = re.search(r"fsdp (\d+)-way within vm .* pure dp \d+-way across vms", (row["fsdp_or_zero"] or "").lower())
    if hsdp and n > int(hsdp.group(1)):  # MaxText's ici_fsdp_parallelism x dcn_data_parallelism: HSDP
        layout["dp_shard"] = int(hsdp.group(1))
    if rid.startswith("maxtext-a3") and n > 8:  # Google Cloud A3 (a3-highgpu-8g) VMs: GPUDirect-TCPX between them
        network = "gcp-a3-high"
    return Run(rid, source_of(rid), spec, row["gpu"], n, seq, batch, measured_tokens_per_gpu(row, spec, n, batch),
               layout, recompute, _recipe(row), attention, dropout, per_node, groups, row, network=network)


def _groups(row: dict, spec: ModelSpec, recipe: str) -> list[str]:
    out = []
    if recipe not in ("bf16-mixed",):
        out.append("FP8/FP4")
    if spec.is_moe:
        out.append("MoE")
    if row["seq_len"] >= 32768:
        out.append(">= 32k context")
    if row["gpu"] in ("b200", "gb200", "b300", "gb300"):
        out.append("Blackwell")
    if row["gpu"] == "h100-sxm" and recipe == "bf16-mixed" and not spec.is_moe:
        out.append("dense BF16 H100")
    if (row["n_gpus"] or 8) >= 512:
        out.append(">= 512 GPUs")
    return out


def measured_tokens_per_gpu(row: dict, spec: ModelSpec, n: int, batch: int) -> float:
    v = row["value"]
    seq = row["seq_len"]
    if not isinstance(v, dict):
        if "tflop" in row["metric"].lower():
            return v * 1e12 / source_flops_per_token(row, spec)
        return float(v)
    for key in ("tokens_per_s_per_gpu", "wps_tokens_per_s_per_gpu"):
        if key in v:
            return float(v[key])
    if "tokens_per_s_total" in v:
        return v["tokens_per_s_total"] / n
    if "step_time_s" in v:
        return batch * seq / v["step_time_s"] / n
    for key in ("tflops_per_gpu_forced_balance", "tflops_per_gpu"):
        if key in v:
            return v[key] * 1e12 / source_flops_per_token(row, spec)
    raise KeyError(f"{row['id']}: no throughput in {v}")


def source_flops_per_token(row: dict, spec: ModelSpec) -> float:
    """FLOPs per token in the row's own convention, to read a TFLOP/s figure as tokens/s.
    - MaxText (Apr 2024): 6·N_all + 12·L·D·S/2 (causal-halved attention).
    - Megatron-Core num_floating_point_operations (megatron/training/training.py): 12·L·h per token times the
      layer widths, attention S/h halved ("only half of the attention matrix is non-zero"), 6·h·V logits;
      checked on Megatron-MoE-ModelZoo's Qwen3-235B row that publishes both step time and TFLOP/s (245 TFLOP/s,
      19.7 s, 2,048 x 4,096 tokens, 256 GPUs: 147.3 G per token; this formula: 148.0 G)."""
    from llmcalc.analytic.params import count_params

    S = row["seq_len"]
    if row["id"].startswith("maxtext"):
        return 6 * count_params(spec).total + 6 * spec.n_layers * spec.d_model * S
    return megatron_flops_per_token(spec, S)


def megatron_flops_per_token(spec: ModelSpec, S: int) -> float:
    L, h, V = spec.n_layers, spec.d_model, spec.vocab_size
    q_ratio = spec.n_heads * spec.d_head / h
    attn = 12 * L * h * h * (1 + spec.n_kv_heads / spec.n_heads + S / h * 0.5) * q_ratio
    n_moe = spec.n_moe_layers
    gated = 1.5 if spec.gated else 1.0
    mlp = 12 * h * ((L - n_moe) * spec.d_ff * gated + n_moe * (spec.d_ff_expert * spec.n_experts_per_token
                                                                + spec.d_ff_shared) * gated)
    return attn + mlp + 6 * h * V


def runs() -> list[Run]:
    rows = json.loads(DATA.read_text())
    return [run_of(r) for r in rows if "excluded" not in r]


def excluded() -> list[dict]:
    return [r for r in json.loads(DATA.read_text()) if "excluded" in r]


if __name__ == "__main__":
    for r in runs():
        p = r.predict()
        got = p.tokens_per_second / r.n_gpus
        print(f"{r.id[:46]:46s} {r.measured:9.1f} {got:9.1f} {got / r.measured - 1:+7.1%}  {', '.join(r.groups)}")
    print(math.nan if False else "")
