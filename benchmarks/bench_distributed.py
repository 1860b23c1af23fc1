"""Acceptance benchmark (issue 11): virtual Llama-3.1-405B at world 64 (dp 8 x tp 8), one training
step of FSDP2 + TP on a fake process group, under a minute and 2 GiB RSS on the 2-core machine.

    .venv/bin/python benchmarks/bench_distributed.py [model] [world] [tp] [seq]
Prints wall time, the process's peak RSS (VmHWM) and rank 0's figures; exits 1 past either limit.
"""

import resource
import sys
import time

from llmcalc.profiling.distributed import virtual_distributed_profile
from llmcalc.spec import load_model

model, world, tp, seq = (sys.argv[1:] + ["llama-3.1-405b", "64", "8", "2048"][len(sys.argv) - 1:])[:4]
start = time.perf_counter()
result = virtual_distributed_profile(load_model(model), int(world), int(tp), 1, int(seq))
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kB
rank0 = result.ranks[0]
print(f"{model} world {world} (dp {result.mesh['dp']} x tp {result.mesh['tp']}) seq {seq}: "
      f"{seconds:.1f} s, peak RSS {rss / 2**30:.2f} GiB")
for key in ("param_bytes", "grad_bytes", "optimizer_bytes", "peak_memory_bytes", "flops"):
    print(f"  rank 0 {key}: analytic {rank0[key]['analytic']:.6g}, measured {rank0[key]['measured']:.6g}")
for kind, pair in rank0["collectives"].items():
    print(f"  rank 0 {kind} bytes sent: analytic {pair['analytic']:.6g}, measured {pair['measured']:.6g}")
exact = all(r["param_bytes"]["measured"] == r["param_bytes"]["analytic"] for r in result.ranks)
print(f"  per-rank sharded parameter bytes equal the formula on all {world} ranks: {exact}")
sys.exit(0 if seconds < 60 and rss < 2 * 2**30 and exact else 1)
