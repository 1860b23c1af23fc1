"""One rank of a real sharded profile, started by torch.distributed.run (see profiling/launch.py).

    python -m torch.distributed.run --standalone --nproc-per-node N -m llmcalc.profiling.worker ARGS OUT

ARGS is a JSON object (model spec file, tp, device, batch, seq, steps, warm-up, precision, peak FLOP/s);
rank 0 writes every rank's measurements, gathered with gather_object, to the JSON file OUT.
Each rank: the model of profiling/distributed.py (DTensor TP + FSDP2), one recorded step (collectives,
local FLOPs, sharded state bytes), warm-up steps, then `steps` timed steps (median). Peak memory: on
CUDA max_memory_allocated (and num_alloc_retries) over the timed steps; on CPU the rank process's
resident-set high-water mark over the timed steps minus its resident set before the model was built.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import timedelta


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from ..analytic.flops import step_flops
    from .distributed import PG_TIMEOUT_S, _loss, build_sharded, check_layout, make_mesh, sharded_state_bytes
    from .measure import _proc_status

    args, out_path = json.loads(argv[0]), argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = args["device"]
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if str(rank) in os.environ.get("LLMCALC_FAIL_RANKS", "").split(","):  # fault injection for tests
        raise SystemExit(f"rank {rank}: failing on purpose (LLMCALC_FAIL_RANKS)")
    rss_before = _proc_status("VmRSS") if device == "cpu" else None
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=timedelta(seconds=PG_TIMEOUT_S))
    try:
        spec = _spec(args)
        layout = check_layout(spec, world, args["tp"])
        mesh = make_mesh(device, layout)
        model = _initialised(build_sharded(spec, mesh, args["mixed"], args["attention"]), device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        torch.manual_seed(rank // layout.tp)  # the ranks of one TP group read the same batch
        ids = torch.randint(0, spec.vocab_size, (args["batch"], args["seq"]), device=device)

        def step(record=None):
            loss = _loss(model, ids, spec)
            loss.backward()
            state = sharded_state_bytes(model, optimizer) if record else None
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return state

        step()  # creates the AdamW states
        recorder, (params, grads, states) = _recorded_step(model, optimizer, ids, spec)
        times = _timed(step, device, warmup=args["warmup"], steps=args["steps"])
        peak, source = _peak(device, rss_before)
        median = statistics.median(times)
        model_flops = step_flops(spec, args["batch"], args["seq"]).model_flops / layout.tp
        measured = {"rank": rank, "param_bytes": params, "grad_bytes": grads, "optimizer_bytes": states,
                    "peak_memory_bytes": peak, "peak_memory_source": source, "collectives": recorder.by_kind(),
                    "collective_calls": recorder.summary(), "flops": float(recorder.flops),
                    "step_seconds": median, "step_times": times,
                    "tokens_per_second": args["batch"] * args["seq"] / median,
                    "mfu": model_flops / median / args["peak_flops"] if args.get("peak_flops") else None}
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(measured, gathered, dst=0)
        if rank == 0:
            _write(gathered, out_path)
    finally:
        dist.destroy_process_group()
    return 0


def _spec(args: dict):
    """The model ARGS names, cut to its first `layers` blocks where ARGS says so."""
    from ..spec import load_model
    from .distributed import with_layers

    spec = load_model(args["model"])
    if args.get("layers"):
        spec = with_layers(spec, args["layers"], name=f"{spec.name} ({args['layers']} layers)")
    return spec


def _recorded_step(model, optimizer, ids, spec) -> tuple:
    """One step with its collectives recorded: (the recorder, (parameter, gradient, optimizer-state bytes) of this
    rank's shards, the first two before the optimizer step, the states after it)."""
    from .distributed import CollectiveRecorder, _loss, sharded_state_bytes

    recorder = CollectiveRecorder()
    with recorder:
        loss = _loss(model, ids, spec)
        loss.backward()
    params, grads, _ = sharded_state_bytes(model, optimizer)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return recorder, (params, grads, sharded_state_bytes(model, optimizer)[2])


def _initialised(model, device: str):
    """The sharded model on `device`, its weights set (norms 1, the rest N(0, 0.02)) on every rank's shard."""
    import torch

    model.to_empty(device=device)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            local = p.to_local()
            local.fill_(1.0) if p.dim() == 1 else local.normal_(0.0, 0.02)
    return model


def _timed(step, device: str, *, warmup: int, steps: int) -> list[float]:
    """`warmup` steps, then the peak trackers reset and the ranks lined up, then the seconds of `steps` steps."""
    import torch
    import torch.distributed as dist

    from .measure import _reset_cpu_peak

    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        _reset_cpu_peak()
    dist.barrier()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def _peak(device: str, rss_before: float | None) -> tuple[float | None, str]:
    """(peak bytes over the timed steps, how it was read): CUDA's max_memory_allocated, or on CPU the rank's
    resident-set high-water mark minus its resident set before the model was built."""
    from .measure import _proc_status

    if device == "cuda":
        import torch

        return float(torch.cuda.max_memory_allocated()), (
            f"CUDA max_memory_allocated over the timed steps; "
            f"num_alloc_retries {torch.cuda.memory_stats().get('num_alloc_retries', 0)}")
    hwm = _proc_status("VmHWM")
    return (None if hwm is None or rss_before is None else hwm - rss_before,
            "CPU: the rank process's resident-set high-water mark over the timed steps minus its RSS before the model "
            "was built (includes allocator caching and torch's workspaces)")


def _write(gathered: list | None, out_path: str) -> None:
    """Every rank's measurements to OUT, atomically (a temporary file renamed)."""
    tmp = out_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(gathered, fh)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
