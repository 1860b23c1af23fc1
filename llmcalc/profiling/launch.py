"""`llmcalc profile --world-size/--nproc`: the virtual sharded run in this process, or a real one
launched under torch.distributed.run (standalone rendezvous on localhost), then held to the formulas.

No hang, no orphans: every process group has a timeout (distributed.PG_TIMEOUT_S); torchrun stops all
ranks when one fails; the launcher runs torchrun in its own session with a wall-clock bound and kills
that whole process group on timeout or interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from ..errors import LlmcalcError
from ..spec import ModelSpec
from .distributed import DistributedResult, _notes, analytic_figures, check_layout, rank_rows

LAUNCH_TIMEOUT_S = 1800  # wall-clock bound on a whole real run


def sharded_profile(spec: ModelSpec, model_arg: str, layers: int | None, virtual: bool, world_size: int | None,
                    nproc: int | None, tp: int, device: str, dtype: str, batch: int, seq: int, steps: int,
                    warmup: int, attention: str, peak_tflops: float | None, all_layers: bool = False) -> dict:
    if virtual:
        if nproc is not None:
            raise LlmcalcError("--nproc launches real ranks; with --virtual give --world-size N instead")
        if world_size is None:
            raise LlmcalcError("a virtual sharded run needs --world-size N")
        if dtype not in ("auto", "bf16", "fp32"):
            raise LlmcalcError(f"sharded runs use --dtype bf16 (FSDP2 mixed precision) or fp32; got {dtype!r}")
        from .distributed import virtual_distributed_profile

        return virtual_distributed_profile(spec, world_size, tp, batch, seq=seq, mixed=dtype != "fp32",
                                           attention=attention, all_layers=all_layers).to_json()
    if world_size is not None and nproc is None:
        raise LlmcalcError("--world-size is for --virtual runs; a real sharded run takes --nproc N")
    return real_sharded_profile(spec, model_arg, layers, nproc, tp, device=device, dtype=dtype, batch=batch, seq=seq,
                                steps=steps, warmup=warmup, attention=attention, peak_tflops=peak_tflops)


def real_sharded_profile(spec, model_arg, layers, nproc, tp, device, dtype, batch, seq, steps, warmup, attention,
                         peak_tflops) -> dict:
    import torch

    from .measure import peak_for, resolve_device

    layout = check_layout(spec, nproc, tp)
    device = resolve_device(device)
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise LlmcalcError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} CUDA devices present; "
                           f"use --nproc <= {torch.cuda.device_count()} (or --virtual --world-size {nproc})")
    if dtype == "auto":
        dtype = "bf16" if device == "cuda" else "fp32"
    if dtype not in ("bf16", "fp32"):
        raise LlmcalcError(f"sharded runs use --dtype bf16 (FSDP2 mixed precision) or fp32; got {dtype!r}")
    mixed = dtype == "bf16"
    peak, peak_source = peak_for(device, dtype, peak_tflops)
    with tempfile.TemporaryDirectory(prefix="llmcalc-ranks-") as tmp:
        out = os.path.join(tmp, "ranks.json")
        args = {"model": model_arg, "layers": layers, "tp": tp, "device": device, "batch": batch, "seq": seq,
                "steps": steps, "warmup": warmup, "mixed": mixed, "attention": attention, "peak_flops": peak}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "--max-restarts=0", "--tee=0", "-m", "llmcalc.profiling.worker", json.dumps(args), out]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "TORCHELASTIC_ERROR_FILE": os.path.join(tmp, "error.json")}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
        except BaseException:  # timeout or Ctrl-C: the whole torchrun session goes, no orphans
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise LlmcalcError(f"the {nproc}-rank run did not finish within {LAUNCH_TIMEOUT_S} s; stopped it") from None
        if proc.returncode != 0 or not os.path.exists(out):
            raise LlmcalcError(f"the {nproc}-rank torchrun failed (exit {proc.returncode}): {_first_error(err)}")
        with open(out) as fh:
            measured = json.load(fh)
    analytic = analytic_figures(spec, layout, batch, seq, mixed)
    result = DistributedResult(spec.name, "real", nproc, {"dp": layout.dp, "tp": layout.tp}, batch_size=batch,
                               seq_len=seq, precision="bf16 compute, fp32 sharded state" if mixed else "fp32")
    result.ranks = rank_rows(analytic, [m["param_bytes"] for m in measured], {}, measured)
    result.collective_calls = measured[0]["collective_calls"]
    result.notes = _notes(analytic, layout, mixed) + [
        f"real run: {nproc} ranks under torch.distributed.run, {'nccl' if device == 'cuda' else 'gloo'} on "
        f"{device}; every rank measured and gathered to rank 0; step time = median of {steps} timed steps after "
        f"{warmup} warm-up; MFU = model FLOPs per rank (6·N·tokens convention of analytic/flops.py, / tp) / step "
        f"time / peak ({peak_source})",
        f"peak memory: {measured[0]['peak_memory_source']}; the analytic peak is the formula's (GPU) peak"]
    return result.to_json()


def _first_error(stderr: str) -> str:
    """The most telling line of torchrun's output: a rank's own error before torchrun's summary."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "failing on purpose" in ln or "Error:" in ln or "error:" in ln:
            return ln.split("]:", 1)[-1].strip()[:300]
    return (lines[-1] if lines else "no output")[:300]
