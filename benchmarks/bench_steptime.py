"""Step-time model against published runs: Narayanan et al. 2021 Table 1 and Llama 3 Table 4.

    python benchmarks/bench_steptime.py            # the per-row table (Markdown) and the summary
    python benchmarks/bench_steptime.py --loo      # also leave-one-out errors (refits the one fitted constant)

Rows, with their sources:
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  arXiv 2104.04473, Table 1 (weak scaling, GPT, V = 51,200, S = 2048, A100 80GB on Selene, mixed precision,
  activation recomputation; achieved TFLOP/s per GPU counts recomputation: their eq. 3). Sec. 5.1: "we use
  the interleaved pipeline schedule with the scatter/gather optimization enabled".
  Settings not in the table, taken from Megatron-LM of the time (examples/pretrain_gpt3_175B.sh, 2021: --fp16,
  --checkpoint-activations; argument defaults): no sequence parallelism (2022); fp16 gradients all-reduced
  after the backward (local DDP: no overlap; gradients reduced in fp32 only with
  --accumulate-allreduce-grads-in-fp32 or bf16); attention with the S² scores materialised (strided batched
  GEMMs + fused scale-mask-softmax, sec. 4.2; FlashAttention came in 2022) and attention dropout 0.1 (the
  --attention-dropout default).
  The micro-batch size and the layers per virtual stage are not stated; sec. 5.5 says the best micro-batch
  is model-dependent and was tuned. Each row takes the setting the model itself ranks fastest among those
  Megatron-LM accepted and that fit in 80 GB (`tuned`): micro-batch 1, 2, 4 or 8 (sec. 5.5's range), virtual
  stages any divisor > 1 of the layers per stage with the micro-batches a multiple of pp (the interleaved
  schedule's condition in Megatron-LM 2021). The choice never looks at the measured figure.
- Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4 (405B on H100, BF16 MFU 43/41/38 %,
  430/400/380 TFLOP/s per GPU). Layout stated in sec. 3.3.2: [TP, CP, PP, DP] order, interleaved schedule,
  one layer fewer in the first and last stages (126 layers), no activation checkpointing at 8K, FSDP that
  shards optimizer states and gradients (ZeRO-2 here). Not stated, assumed: micro-batch 1, vpp 4, causal
  attention FLOPs in the MFU.
The baseline: one constant MFU (fraction of peak) fitted to the same 13 rows (least squares in log space).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmcalc.analytic import steptime  # noqa: E402
from llmcalc.spec import (  # noqa: E402
    ModelSpec,
    load_model,  # noqa: E402
    spec_of,
)

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
            lay = steptime.make_layout(spec, n, 2048, batch, tp=tp, pp=pp, vpp=v, micro_batch=mb, zero=0,
                                       sequence_parallel=False, dp_overlap=False)
            pred = steptime.predict(spec, dev, lay, 2048, False, "full", "fp16-mixed", attention="eager",
                                    dropout=True)
            if best is None or pred.step_seconds < best.step_seconds:
                best = pred
    if best is None:
        raise RuntimeError(f"no Table 1 setting of {spec.name} fits")
    return best


def rows():
    """(label, measured TFLOP/s per GPU, peak, predict() -> predicted TFLOP/s per GPU in the paper's convention)."""
    out = []
    a100 = steptime.device_for("a100-80gb-sxm")
    for p, heads, h, L, tp, pp, n, batch, tflops in NARAYANAN_TABLE_1:
        spec = gpt(L, h, heads)

        def run(spec=spec, n=n, batch=batch, tp=tp, pp=pp):
            pred = tuned(spec, a100, n, batch, tp, pp)
            return pred.hardware_flops_per_gpu / 1e12, pred
        out.append((f"Narayanan T1 GPT {p:g}B, {n} A100, tp {tp} pp {pp}, batch {batch}", tflops, a100.peak, run))
    h100 = steptime.device_for("h100-sxm")
    spec = load_model("llama-3.1-405b")
    for n, tp, cp, pp, dp, s, per_dp, tflops in LLAMA3_TABLE_4:
        def run(n=n, tp=tp, cp=cp, pp=pp, dp=dp, s=s, per_dp=per_dp):
            lay = steptime.make_layout(spec, n, s, per_dp * dp, tp=tp, cp=cp, pp=pp, vpp=4, micro_batch=1, zero=2)
            pred = steptime.predict(spec, h100, lay, s, True, "none")
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


def leave_one_out(grid=None) -> list[tuple[float, float]]:
    """Refit KERNEL_EFFICIENCY (model) and the MFU (baseline) without each row; errors on the held-out row."""
    grid = grid or [round(0.70 + 0.01 * i, 2) for i in range(26)]
    table = rows()
    measured = [m for _, m, _, _ in table]
    peaks = [p for _, _, p, _ in table]
    saved = steptime.KERNEL_EFFICIENCY
    by_eta = {}
    try:
        for eta in grid:
            steptime.KERNEL_EFFICIENCY = eta
            by_eta[eta] = [run()[0] for _, _, _, run in table]
    finally:
        steptime.KERNEL_EFFICIENCY = saved
    out = []
    for i in range(len(table)):
        keep = [j for j in range(len(table)) if j != i]
        eta = min(grid, key=lambda e: sum(math.log(by_eta[e][j] / measured[j]) ** 2 for j in keep))
        mfu = constant_mfu([measured[j] for j in keep], [peaks[j] for j in keep])
        out.append((by_eta[eta][i] / measured[i] - 1, mfu * peaks[i] / 1e12 / measured[i] - 1))
    return out


def markdown(result: dict, loo: list | None = None) -> list[str]:
    """The per-row table and the summary line, as the README shows them."""
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


def main() -> None:
    result = evaluate()
    loo = leave_one_out() if "--loo" in sys.argv else None
    print("\n".join(markdown(result, loo)))
    if loo:
        print(f"leave-one-out mean |error|: model {sum(abs(a) for a, _ in loo) / len(loo) * 100:.1f} %, constant MFU "
              f"{sum(abs(b) for _, b in loo) / len(loo) * 100:.1f} %")


if __name__ == "__main__":
    main()
