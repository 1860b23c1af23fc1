"""Step-time model against published runs: a validation set from sources the model was not built on, and the
13 rows it was first built on (Narayanan et al. 2021 Table 1, Llama 3 Table 4).

    python benchmarks/bench_steptime.py            # the README tables (Markdown) and the summaries
    python benchmarks/bench_steptime.py --rows     # also every validation row (docs/steptime-validation.md)
    python benchmarks/bench_steptime.py --fit      # refit KERNEL_EFFICIENCY on every row (and print it)
    python benchmarks/bench_steptime.py --fit-imbalance  # refit MOE_DROPLESS_IMBALANCE, with its held-out errors

The validation set (benchmarks/published_runs.py, its rules and its exclusions): torchtitan, torchao, llm-foundry,
KempnerForge, OLMo-core, MaxText, Megatron-MoE-ModelZoo, BLOOM, MT-NLG and MLPerf Training v5.0/v5.1/v6.0, each row
with the layout its source states; compared by tokens/s per GPU (what every convention agrees on). Two baselines:
one constant MFU for every row, and one per GEMM precision (bf16, fp8, fp4), each fitted (least squares in log
space) to the same rows. Leave-one-source-out (LOSO): the one fitted constant of each method refitted without
the source's rows, the error taken on them. KERNEL_EFFICIENCY is fitted once on every row (validation + the 13)
by the same least squares.

The 13 rows (the README's earlier table):
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  arXiv 2104.04473, Table 1 (weak scaling, GPT, V = 51,200, S = 2048, A100 80GB on Selene, mixed precision,
  activation recomputation; achieved TFLOP/s per GPU counts recomputation: their eq. 3). Sec. 5.1: "we use
  the interleaved pipeline schedule with the scatter/gather optimization enabled".
  Settings not in the table, taken from Megatron-LM of the time (examples/pretrain_gpt3_175B.sh, 2021: --fp16,
  --checkpoint-activations; argument defaults): no sequence parallelism (2022); fp16 gradients all-reduced
  after the backward (local DDP: no overlap); attention with the S² scores materialised (strided batched
  GEMMs + fused scale-mask-softmax, sec. 4.2; FlashAttention came in 2022) and attention dropout 0.1 (the
  --attention-dropout default); Megatron's rank order (tp, dp, pp).
  The micro-batch size and the layers per virtual stage are not stated; sec. 5.5 says the best micro-batch
  is model-dependent and was tuned. Each row takes the setting the model itself ranks fastest among those
  Megatron-LM accepted and that fit in 80 GB (`tuned`): micro-batch 1, 2, 4 or 8 (sec. 5.5's range), virtual
  stages any divisor > 1 of the layers per stage with the micro-batches a multiple of pp (the interleaved
  schedule's condition in Megatron-LM 2021). The choice never looks at the measured figure.
- Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4 (405B on H100, BF16 MFU 43/41/38 %,
  430/400/380 TFLOP/s per GPU). Layout stated in sec. 3.3.2: [TP, CP, PP, DP] order, all-gather CP ("the
  all-gather communication latency is exposed in the critical path"), interleaved schedule, one layer fewer in
  the first and last stages (126 layers), no activation checkpointing at 8K, FSDP that shards optimizer states
  and gradients (ZeRO-2 here). Not stated, assumed: micro-batch 1, vpp 4, causal attention FLOPs in the MFU.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_runs  # noqa: E402

from llmcalc.analytic import kernels, memory
from llmcalc.analytic.flops import step_flops  # noqa: E402
from llmcalc.analytic.step import constants, layout, prediction  # noqa: E402
from llmcalc.spec import ModelSpec, load_model, spec_of  # noqa: E402

# (params B, heads, hidden, layers, tp, pp, GPUs, batch, achieved TFLOP/s per GPU)
NARAYANAN_TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# (GPUs, TP, CP, PP, DP, seq len, batch size per DP, TFLOP/s per GPU)
LLAMA3_TABLE_4 = [
    (8192, 8, 1, 16, 64, 8192, 32, 430), (16384, 8, 1, 16, 128, 8192, 16, 400),
    (16384, 8, 16, 16, 8, 131072, 16, 380),
]
GRID = [round(0.60 + 0.02 * i, 2) for i in range(21)]  # KERNEL_EFFICIENCY values the fits interpolate between
GROUPS = ("FP8/FP4", "MoE", ">= 32k context", "Blackwell", ">= 512 GPUs", "dense BF16 H100")


def gpt(layers: int, hidden: int, heads: int) -> ModelSpec:
    """Narayanan et al.'s GPT: learned positions, LayerNorm, GELU MLP 4h, biases, V = 51,200."""
    return spec_of(n_layers=layers, d_model=hidden, n_heads=heads, vocab_size=51200, d_ff=4 * hidden, mlp="gelu",
                   norm="layernorm", pos_emb="learned", max_seq_len=2048, qkv_bias=True, out_bias=True,
                   mlp_bias=True, name=f"GPT {layers}x{hidden}")


def tuned(spec: ModelSpec, dev, n: int, batch: int, tp: int, pp: int):
    """The fastest prediction over the settings Table 1 leaves open (see the module docstring):
    micro-batch 1/2/4/8, and for pp > 1 the interleaved schedule with every allowed number of virtual
    stages; settings whose most loaded stage does not fit the GPU are skipped."""
    from llmcalc.analytic.memory import training_memory
    from llmcalc.analytic.parallel import Parallel

    dp, per_stage = n // (tp * pp), spec.n_layers // pp
    best = None
    for mb in (1, 2, 4, 8):
        if batch % (dp * mb):
            continue
        m = batch // (dp * mb)
        vpps = [v for v in range(2, per_stage + 1) if per_stage % v == 0 and m % pp == 0] if pp > 1 else [1]
        fits = training_memory(spec, mb, 2048, recipe="fp16-mixed", recompute="full", attention="eager", dropout=True,
                               parallel=Parallel.over(n, tp=tp, pp=pp, zero=0, sequence_parallel=False)).peak
        if fits > dev.accelerator.memory_bytes:
            continue
        for v in vpps:
            lay = layout.make_layout(spec, n, 2048, batch, tp=tp, pp=pp, vpp=v, micro_batch=mb, zero=0,
                                       sequence_parallel=False, dp_overlap=False)
            pred = prediction.predict(spec, dev, lay, 2048, False, "full", "fp16-mixed", attention="eager",
                                    dropout=True)
            if best is None or pred.step_seconds < best.step_seconds:
                best = pred
    if best is None:
        raise RuntimeError(f"no Table 1 setting of {spec.name} fits")
    return best


def rows():
    """(label, measured TFLOP/s per GPU, peak, predict() -> predicted TFLOP/s per GPU in the paper's convention)."""
    out = []
    a100 = kernels.device_for("a100-80gb-sxm")
    for p, heads, h, L, tp, pp, n, batch, tflops in NARAYANAN_TABLE_1:
        spec = gpt(L, h, heads)

        def run(spec=spec, n=n, batch=batch, tp=tp, pp=pp):
            pred = tuned(spec, a100, n, batch, tp, pp)
            return pred.hardware_flops_per_gpu / 1e12, pred
        out.append((f"Narayanan T1 GPT {p:g}B, {n} A100, tp {tp} pp {pp}, batch {batch}", tflops, a100.peak, run))
    h100 = kernels.device_for("h100-sxm")
    spec = load_model("llama-3.1-405b")
    for n, tp, cp, pp, dp, s, per_dp, tflops in LLAMA3_TABLE_4:
        def run(n=n, tp=tp, cp=cp, pp=pp, dp=dp, s=s, per_dp=per_dp):
            lay = layout.make_layout(spec, n, s, per_dp * dp, tp=tp, cp=cp, pp=pp, vpp=4, micro_batch=1, zero=2,
                                       order="tp-cp-ep-pp-dp", cp_comm="all-gather")
            pred = prediction.predict(spec, h100, lay, s, True, "none")
            return pred.model_flops_per_gpu / 1e12, pred
        out.append((f"Llama 3 T4 405B, {n} H100, tp {tp} cp {cp} pp {pp} dp {dp}, seq {s}", tflops, h100.peak, run))
    return out


def constant_mfu(measured: list[float], peaks: list[float]) -> float:
    """The one MFU that fits all rows best (least squares on log(predicted / measured))."""
    return math.exp(sum(math.log(m * 1e12 / p) for m, p in zip(measured, peaks, strict=True)) / len(measured))


def evaluate() -> dict:
    table = rows()
    preds = [run() for _, _, _, run in table]
    measured = [m for _, m, _, _ in table]
    peaks = [p for _, _, p, _ in table]
    mfu = constant_mfu(measured, peaks)
    return {"rows": [(label, m, pr[0], mfu * peak / 1e12, pr[1]) for (label, m, peak, _), pr in zip(table, preds,
                                                                                                    strict=True)],
            "constant_mfu": mfu}


def markdown(result: dict, loo: list | None = None) -> list[str]:
    """The 13 rows' table and summary line, as the README shows them."""
    lines = ["| run (paper's layout) | measured TFLOP/s/GPU | predicted | error | constant MFU "
             f"{result['constant_mfu'] * 100:.1f} % | error |" + (" LOO model | LOO constant |" if loo else ""),
             "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if loo else "")]
    errs, const_errs = [], []
    for i, (label, m, pred, const, _) in enumerate(result["rows"]):
        e, c = pred / m - 1, const / m - 1
        errs.append(abs(e))
        const_errs.append(abs(c))
        extra = f" {loo[i][0] * 100:+.1f} % | {loo[i][1] * 100:+.1f} % |" if loo else ""
        lines.append(f"| {label} | {m:g} | {pred:.1f} | {e * 100:+.1f} % | {const:.1f} | {c * 100:+.1f} % |{extra}")
    lines += ["", f"mean |error|: model {sum(errs) / len(errs) * 100:.1f} %, constant MFU "
              f"{sum(const_errs) / len(const_errs) * 100:.1f} %; max: model {max(errs) * 100:.1f} %, constant "
              f"{max(const_errs) * 100:.1f} %"]
    return lines


# --- the validation set ------------------------------------------------------------------------------------


class Row:
    """One validation point: the run, its measured and (by KERNEL_EFFICIENCY on GRID) predicted tokens/s/GPU."""

    def __init__(self, run: published_runs.Run):
        self.run = run
        self.id, self.source, self.groups, self.measured = run.id, run.source, run.groups, run.measured
        dev = kernels.device_for(run.gpu, "bf16")
        flops = step_flops(run.spec, 1, run.seq_len, causal=True)
        self.mfu = run.measured * flops.model_flops_per_token / dev.accelerator.peak("bf16")  # against bf16
        self.precision = memory.RECIPES[run.recipe].gemm_dtype
        self.by_eta: dict[float, float] = {}

    def predicted(self, eta: float) -> float:
        """Predicted tokens/s/GPU at KERNEL_EFFICIENCY = eta (log-linear between GRID points)."""
        if eta in self.by_eta:
            return self.by_eta[eta]
        lo = max(g for g in GRID if g <= eta) if eta >= GRID[0] else GRID[0]
        hi = min(g for g in GRID if g >= eta) if eta <= GRID[-1] else GRID[-1]
        a, b = self.at(lo), self.at(hi)
        if hi == lo:
            return a
        w = (eta - lo) / (hi - lo)
        return math.exp((1 - w) * math.log(a) + w * math.log(b))

    def at(self, eta: float) -> float:
        if eta not in self.by_eta:
            self.by_eta[eta] = self.run.predicted_tokens_per_gpu(eta)
        return self.by_eta[eta]


class OldRow(Row):
    """One of the 13 rows the model was first built on, as a validation point (its paper's TFLOP/s convention)."""

    def __init__(self, label: str, measured: float, peak: float, run):
        self.run, self.id, self.measured, self.groups = run, label, measured, ()
        self.source = "Narayanan 2021" if label.startswith("Narayanan") else "Llama 3"
        self.mfu = measured * 1e12 / peak
        self.precision = "fp16" if self.source.startswith("Narayanan") else "bf16"
        self.by_eta = {}

    def at(self, eta: float) -> float:
        if eta not in self.by_eta:
            saved = constants.KERNEL_EFFICIENCY
            constants.KERNEL_EFFICIENCY = eta
            try:
                self.by_eta[eta] = self.run()[0]
            finally:
                constants.KERNEL_EFFICIENCY = saved
        return self.by_eta[eta]


def validation_rows() -> list[Row]:
    return [Row(r) for r in published_runs.runs()]


def old_rows() -> list[Row]:
    return [OldRow(label, m, peak, run) for label, m, peak, run in rows()]


def _log_fit(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fit_eta(rows: list[Row], old: list[tuple[float, float]] | None = None) -> float:
    """KERNEL_EFFICIENCY minimising the sum of log² errors over `rows` (golden section on GRID's span)."""
    def loss(eta: float) -> float:
        return sum(math.log(r.predicted(eta) / r.measured) ** 2 for r in rows)
    lo, hi = GRID[0], GRID[-1]
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    for _ in range(30):
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    return round((lo + hi) / 2, 3)


def baselines(rows: list[Row], fit_on: list[Row]) -> dict[str, dict[str, float]]:
    """Predicted tokens/s/GPU of each row under one constant MFU and under one MFU per GEMM precision, fitted on
    `fit_on` (least squares in log space)."""
    one = _log_fit([r.mfu for r in fit_on])
    per = {p: _log_fit([r.mfu for r in fit_on if r.precision == p] or [one]) for p in ("bf16", "fp16", "fp8", "fp4")}
    out: dict[str, dict[str, float]] = {"constant": {}, "per-precision": {}}
    for r in rows:
        out["constant"][r.id] = r.measured * one / r.mfu
        out["per-precision"][r.id] = r.measured * per.get(r.precision, one) / r.mfu
    return out


def validate(eta: float | None = None, with_old: bool = True) -> dict:
    """Errors of the model and both baselines on every validation row, fitted and leave-one-source-out (each
    method's constant refitted on every other source's rows, the 13 old rows included when `with_old`)."""
    rows = validation_rows()
    extra = old_rows() if with_old else []
    eta = constants.KERNEL_EFFICIENCY if eta is None else eta
    base = baselines(rows, rows + extra)
    out = {"eta": eta, "rows": rows, "model": {}, "constant": base["constant"], "per-precision": base["per-precision"],
           "loso": {"model": {}, "constant": {}, "per-precision": {}}}
    for r in rows:
        out["model"][r.id] = r.predicted(eta)
    everything = rows + extra
    for source in sorted({r.source for r in rows}):
        keep = [r for r in everything if r.source != source]
        held = [r for r in rows if r.source == source]
        e = fit_eta(keep)
        b = baselines(held, keep)
        for r in held:
            out["loso"]["model"][r.id] = r.predicted(e)
            out["loso"]["constant"][r.id] = b["constant"][r.id]
            out["loso"]["per-precision"][r.id] = b["per-precision"][r.id]
    return out


def _stats(rows: list[Row], pred: dict[str, float]) -> tuple[float, float]:
    errs = [pred[r.id] / r.measured - 1 for r in rows]
    return statistics.median(abs(e) for e in errs), sum(errs) / len(errs)


def summary_markdown(result: dict) -> list[str]:
    """The README's validation table: median |error| and mean signed error by group, model and baselines, fitted
    and leave-one-source-out."""
    rows = result["rows"]
    groups = [("all rows", rows)] + [(g, [r for r in rows if g in r.groups]) for g in GROUPS]
    lines = ["| rows | n | model: median abs. error | mean signed | LOSO median | constant MFU | LOSO | "
             "per-precision MFU | LOSO |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, sel in groups:
        if not sel:
            continue
        m, s = _stats(sel, result["model"])
        lm, _ = _stats(sel, result["loso"]["model"])
        c, _ = _stats(sel, result["constant"])
        lc, _ = _stats(sel, result["loso"]["constant"])
        p, _ = _stats(sel, result["per-precision"])
        lp, _ = _stats(sel, result["loso"]["per-precision"])
        lines.append(f"| {name} | {len(sel)} | {m * 100:.1f} % | {s * 100:+.1f} % | {lm * 100:.1f} % | "
                     f"{c * 100:.1f} % | {lc * 100:.1f} % | {p * 100:.1f} % | {lp * 100:.1f} % |")
    lines += ["",
              "| source (held out) | n | model LOSO median | mean signed | constant MFU LOSO | per-precision LOSO |",
              "|---|---:|---:|---:|---:|---:|"]
    for source in sorted({r.source for r in rows}):
        sel = [r for r in rows if r.source == source]
        lm, ls = _stats(sel, result["loso"]["model"])
        lc, _ = _stats(sel, result["loso"]["constant"])
        lp, _ = _stats(sel, result["loso"]["per-precision"])
        lines.append(f"| {source} | {len(sel)} | {lm * 100:.1f} % | {ls * 100:+.1f} % | {lc * 100:.1f} % | "
                     f"{lp * 100:.1f} % |")
    return lines


def rows_markdown(result: dict) -> list[str]:
    lines = ["| row | source | groups | measured tokens/s/GPU | predicted | error | LOSO | constant MFU | "
             "per-precision |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        e = result["model"][r.id] / r.measured - 1
        lo = result["loso"]["model"][r.id] / r.measured - 1
        c = result["constant"][r.id] / r.measured - 1
        p = result["per-precision"][r.id] / r.measured - 1
        lines.append(f"| {r.id} | {r.source} | {', '.join(r.groups)} | {r.measured:,.1f} | "
                     f"{result['model'][r.id]:,.1f} | {e * 100:+.1f} % | {lo * 100:+.1f} % | {c * 100:+.1f} % | "
                     f"{p * 100:+.1f} % |")
    return lines


def dropless_pairs() -> list[tuple[published_runs.Run, float]]:
    """The rows that publish forced-balance and dropless TFLOP/s of the same run (Megatron-MoE-ModelZoo's Qwen3-235B
    long-context table): (the forced-balance run, dropless / forced)."""
    out = []
    for r in published_runs.runs():
        v = r.row.get("value")
        if isinstance(v, dict) and "tflops_per_gpu_dropless" in v:
            out.append((r, v["tflops_per_gpu_dropless"] / v["tflops_per_gpu_forced_balance"]))
    return out


def fit_imbalance(pairs: list[tuple[published_runs.Run, float]]) -> float:
    """MOE_DROPLESS_IMBALANCE: the busiest EP rank's tokens over the mean that turns each pair's forced-balance
    prediction into its dropless one (least squares on log(predicted ratio / published ratio), golden section on
    1..3); the model's own error on the forced-balance run cancels in the ratio."""
    import dataclasses

    base = {r.id: r.predicted_tokens_per_gpu() for r, _ in pairs}
    cache: dict[float, float] = {}

    def loss(f: float) -> float:
        if f not in cache:
            total = 0.0
            for r, ratio in pairs:
                run = dataclasses.replace(r, layout={**r.layout, "moe_imbalance": f})
                total += math.log(run.predicted_tokens_per_gpu() / base[r.id] / ratio) ** 2
            cache[f] = total
        return cache[f]
    lo, hi = 1.0, 3.0
    g = (math.sqrt(5) - 1) / 2
    for _ in range(25):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    return round((lo + hi) / 2, 2)


def imbalance_report() -> list[str]:
    """MOE_DROPLESS_IMBALANCE fitted on every pair and leaving each pair out, and the rows it is applied to (MLPerf
    v6.0's MoE rows, a source the fit never sees: its leave-one-source-out error) with it and without it."""
    import dataclasses

    pairs = dropless_pairs()
    lines = [f"MOE_DROPLESS_IMBALANCE fitted on {len(pairs)} Megatron-MoE-ModelZoo forced/dropless pairs: "
             f"{fit_imbalance(pairs)}"]
    for i, (r, _) in enumerate(pairs):
        lines.append(f"  leaving out {r.id}: {fit_imbalance(pairs[:i] + pairs[i + 1:])}")
    used = [r for r in published_runs.runs() if r.layout.get("moe_imbalance")]
    for r in used:
        with_f = r.predicted_tokens_per_gpu() / r.measured - 1
        flat = dataclasses.replace(r, layout={**r.layout, "moe_imbalance": 1.0}).predicted_tokens_per_gpu()
        lines.append(f"  {r.id}: error {with_f * 100:+.1f} % with {published_runs.MOE_DROPLESS_IMBALANCE}, "
                     f"{(flat / r.measured - 1) * 100:+.1f} % balanced")
    return lines


def main() -> None:
    known = {"--rows", "--fit", "--fit-imbalance"}
    if "-h" in sys.argv or "--help" in sys.argv or set(sys.argv[1:]) - known:
        print(__doc__.split("\n\n")[0] + "\n\n" + "\n".join(
            line for line in __doc__.splitlines() if line.startswith("    python benchmarks/bench_steptime.py")))
        sys.exit(0 if "-h" in sys.argv or "--help" in sys.argv else 2)
    if "--fit-imbalance" in sys.argv:
        print("\n".join(imbalance_report()))
        return
    if "--fit" in sys.argv:
        points = validation_rows() + old_rows()
        print(f"KERNEL_EFFICIENCY fitted on all {len(points)} rows (validation + the 13): {fit_eta(points)}")
        return
    result = validate()
    print("\n".join(summary_markdown(result)))
    if "--rows" in sys.argv:
        print()
        print("\n".join(rows_markdown(result)))
    print()
    print("\n".join(markdown(evaluate())))


if __name__ == "__main__":
    main()
