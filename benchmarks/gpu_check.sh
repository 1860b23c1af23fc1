#!/usr/bin/env bash
# GPU check (run on a machine with one H100/H200 and a CUDA build of torch; about 2-4 minutes):
# a real bf16-mixed training profile of Llama-3.2-1B (a ~1B LLaMA-style preset) with sdpa (flash)
# and torch.compile, printing MFU, tokens/s, peak memory and the analytic-vs-measured table, then
# the same without compile for comparison. Usage: bash benchmarks/gpu_check.sh [extra profile options]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: needs a CUDA GPU and a CUDA build of torch (python: $PY)" >&2
  exit 2
fi
"$PY" -c "import llmcalc" 2>/dev/null || "$PY" -m pip install -q -e . >/dev/null
"$PY" -c "import torch; print('device:', torch.cuda.get_device_name(), '| torch', torch.__version__, '| CUDA', torch.version.cuda)"
OUT_DIR=${OUT:-$(mktemp -d)}
common=(profile llama-3.2-1b --device cuda --dtype bf16 --batch-size 4 --seq-len 2048 --warmup 3 --steps 10 "$@")
echo "== llama-3.2-1b, bf16-mixed, sdpa, torch.compile"
timeout 200 "$PY" -m llmcalc "${common[@]}" --compile | tee "$OUT_DIR/gpu_check_compiled.txt"
echo "== the same, eager (no compile), as JSON"
timeout 90 "$PY" -m llmcalc "${common[@]}" --format json | tee "$OUT_DIR/gpu_check_eager.json"
# Multi-GPU: FSDP2 + tensor parallelism over every GPU of the machine (issue 11), per-rank JSON.
n=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$n" -ge 2 ]; then
  tp=2; [ $((n % 2)) -eq 0 ] || tp=1
  echo "== llama-3.2-1b sharded over $n GPUs: FSDP2 (dp $((n / tp))) x TP $tp, bf16, per rank"
  timeout 400 "$PY" -m llmcalc profile llama-3.2-1b --device cuda --dtype bf16 --nproc "$n" --tp "$tp" \
    --batch-size 4 --seq-len 2048 --warmup 2 --steps 5 --format json | tee "$OUT_DIR/gpu_check_sharded.json"
else
  echo "== one GPU: the sharded run (FSDP2 + TP) needs 2 or more; skipped"
fi
echo "results in $OUT_DIR"
