"""One record per model: the figures `compare` lines up and `report` summarises.

Everything here composes the other analytic modules; the settings it needs are explicit in
``Scenario`` and printed with the result.
"""

from __future__ import annotations

from dataclasses import asdict

from ..errors import LlmcalcError
from ..hardware import Accelerator
from ..records import dataclass
from ..spec import ModelSpec
from ..units import fmt_count, fmt_tokens
from ..validate import DEFAULT_GOODPUT, DEFAULT_SEQ_LEN, DEFAULT_ZERO
from .flops import flop_group, step_flops
from .inference import kv_cache_bytes_per_token
from .memory import training_memory
from .parallel import Parallel
from .params import count_params
from .training import TrainingEstimate


@dataclass(frozen=True)
class Scenario:
    """What a comparison assumes: the training run and the per-GPU setup."""

    seq_len: int = DEFAULT_SEQ_LEN
    tokens: float = 2e12
    gpu: Accelerator | None = None
    n_gpus: int = 256
    mfu: float = 0.4
    usd_per_gpu_hour: float | None = None
    dtype: str = "bf16"
    recipe: str = "bf16-mixed"
    optimizer: str = "adamw"
    zero: int = DEFAULT_ZERO
    tp: int = 1
    cp: int = 1  # context-parallel, pipeline-parallel and virtual-pipeline degrees (the report's planned layout)
    pp: int = 1
    vpp: int = 1
    ep: int = 1  # expert parallelism and expert tensor parallelism of the planned layout (0: etp = tp)
    etp: int = 0
    micro_batch: int = 1
    recompute: str = "none"
    causal: bool = False
    kv_dtype: str = "bf16"
    goodput: float = DEFAULT_GOODPUT  # share of the run's wall-clock spent training (--goodput)
    global_batch: int = 0  # sequences per step (0: micro-batch x dp, no gradient accumulation)
    first_stage_layers: int = 0  # the pipeline's stage layers, as train and layout take them (0, "": the even split)
    last_stage_layers: int = 0
    pipeline_layout: str = ""
    sequence_parallel: bool = True
    reserve_gib: float = 0.0  # memory kept free on the GPU (--reserve-gib)
    ep_dispatcher: str = "alltoall"  # the planned layout's expert dispatcher and EP overlap (layout searches them)
    ep_overlap: bool = False
    tp_overlap: bool = False  # the planned layout's TP comm+GEMM overlap (layout searches it where tp > 1 in a node)
    dp_shard: int = 0  # the planned layout's HSDP shard group (layout searches it where FSDP spans nodes); 0: none
    given: tuple[str, ...] = ()  # the layout options typed (report's search keeps them: `layout --tp 8`'s pins)

    def describe(self) -> str:
        gpu = self.gpu.key if self.gpu else "no GPU"
        return (f"seq {self.seq_len:,}, {fmt_tokens(self.tokens)}, {self.n_gpus:,} x {gpu} at MFU {self.mfu:g} "
                f"({self.dtype}), {self.recipe} + {self.optimizer}, ZeRO-{self.zero} over data parallel, tp "
                f"{self.tp}" + "".join(f", {k} {v}" for k, v in (("cp", self.cp), ("pp", self.pp), ("vpp", self.vpp))
                                       if v > 1) + f", micro-batch {self.micro_batch}, recompute {self.recompute}, "
                f"{'causal' if self.causal else 'full S²'} FLOPs, goodput {self.goodput:g}")

    def line(self, names: list[str]) -> str:
        """The line under every report figure's title: which models, which run."""
        models = ', '.join(names) if len(names) <= 3 else f'{len(names)} models'
        return (f"{models} · {fmt_count(self.tokens)} tokens at seq {self.seq_len:,} · "
                f"{self.n_gpus:,} x {self.accelerator.key} at {self.mfu:.0%} MFU · micro-batch {self.micro_batch}, "
                f"ZeRO-{self.zero}, tp {self.tp}")

    @property
    def accelerator(self) -> Accelerator:
        """`gpu`, where a figure needs one (training time and cost, memory fit)."""
        if self.gpu is None:
            raise LlmcalcError("this needs an accelerator: give --gpu (`llmcalc presets` lists them)")
        return self.gpu

    @property
    def parallel(self) -> Parallel:
        return Parallel.over(self.n_gpus, tp=self.tp, cp=self.cp, pp=self.pp, vpp=self.vpp, zero=self.zero,
                             ep=self.ep, etp=self.etp, sequence_parallel=self.sequence_parallel)

    @property
    def batch(self) -> int:
        """Sequences per optimizer step: --global-batch, else one micro-batch per data-parallel rank."""
        return self.global_batch or self.micro_batch * self.parallel.dp

    @property
    def capacity(self) -> float:
        """Bytes a layout may take per GPU: the usable memory less --reserve-gib (what `layout`, `train` and
        `memory` hold a layout against)."""
        return self.accelerator.usable_bytes - self.reserve_gib * 2**30

    def stage_layers(self, n_layers: int) -> tuple[int, ...] | None:
        from .pipeline_layout import rank_layers

        return rank_layers(n_layers, self.pp, self.first_stage_layers, self.last_stage_layers, self.pipeline_layout)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["gpu"] = self.gpu.key if self.gpu else None
        return data


# Record keys, their labels (with units) for people, and how they read best.
COLUMNS = {
    "model": ("model", "text"),
    "params": ("params", "count"),  # a count's label names its prefixes where printed (units.count_label)
    "active_params": ("active params per token", "count"),
    "non_embedding_params": ("non-embedding params", "count"),
    "context_length": ("context length (tokens)", "tokens"),
    "kv_cache_bytes_per_token": ("KV cache per token", "bytes"),
    "weights_bytes": ("weights as shipped (GiB)", "gib"),
    "serve_gpus": ("serving GPUs (tensor parallel)", "int"),
    "serve_kv_tokens": ("serving KV cache (tokens)", "int"),
    "serve_concurrency": ("serving concurrency at seq (requests)", "int"),
    "serve_tokens_per_second_1": ("decode, one request (tokens/s)", "rate"),
    "serve_tokens_per_second": ("decode, all requests (tokens/s)", "rate"),
    "forward_flops_per_token": ("forward FLOPs per token", "flops"),
    "training_flops_per_token": ("training FLOPs per token (fwd+bwd)", "flops"),
    "attention_share": ("attention S² share of FLOPs (%)", "pct"),
    "training_flops": ("training FLOPs (model)", "flops"),
    "gpu_hours": ("GPU-hours (h)", "hours"),
    "wall_clock_days": ("wall-clock (days)", "days"),
    "cost_usd": ("cost (USD)", "usd"),
    "memory_per_gpu_bytes": ("memory per GPU (GiB)", "gib"),
    "fits": ("fits on the GPU", "bool"),
}


def scenario_training(spec: ModelSpec, scenario: Scenario, step=None) -> TrainingEstimate:
    """The training run of `scenario` for one model: exact per-token FLOPs at its sequence length
    (`step`: that step's StepFlops, when the caller has it already)."""
    step = step or step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute)
    return TrainingEstimate(scenario.tokens, step.model_flops_per_token * scenario.tokens,
                            step.hardware_flops_per_token * scenario.tokens, scenario.accelerator, dtype=scenario.dtype,
                            n_gpus=scenario.n_gpus, mfu=scenario.mfu, usd_per_gpu_hour=scenario.usd_per_gpu_hour,
                            goodput=scenario.goodput)


def scenario_memory(spec: ModelSpec, scenario: Scenario, micro_batch: int | None = None):
    """Per-GPU training memory under `scenario` (its micro-batch unless one is given): its layout, the pipeline's
    stage layers and the micro-batches of its global batch where it has one (else the steady state), as `memory`
    and `layout` size it."""
    batch = micro_batch or scenario.micro_batch
    par = scenario.parallel
    if scenario.dp_shard:  # HSDP: the states sharded over the shard group (memory reads a step layout's dp_shard)
        from .step.layout import Layout

        par = Layout.over(scenario.n_gpus, tp=scenario.tp, cp=scenario.cp, pp=scenario.pp, vpp=scenario.vpp,
                          zero=scenario.zero, ep=scenario.ep, etp=scenario.etp,
                          sequence_parallel=scenario.sequence_parallel, dp_shard=scenario.dp_shard)
    return training_memory(spec, batch, scenario.seq_len, scenario.recipe, optimizer=scenario.optimizer,
                           recompute=scenario.recompute, parallel=par,
                           stage_layers=scenario.stage_layers(spec.n_layers),
                           micro_batches=max(1, scenario.batch // (batch * par.dp)) if scenario.global_batch else None)


def serving_record(spec: ModelSpec, scenario: Scenario) -> dict:
    """What one model serves on the scenario's GPU at --seq-len tokens per request, vLLM's defaults: the fewest
    tensor-parallel GPUs holding a request (``serving.smallest_serving_group``), its KV cache in tokens, the
    requests it holds at once, and the roofline's decode speed of one request and of all of them (an upper bound)."""
    from ..hardware import MemoryOnly
    from .serving import smallest_serving_group

    if spec.architecture != "decoder" or scenario.gpu is None:
        return {}
    try:
        est = smallest_serving_group(spec, scenario.gpu, scenario.seq_len, scenario.kv_dtype)
    except LlmcalcError:
        est = None
    if est is None:
        return {"serve_gpus": None}
    rows = [] if isinstance(scenario.gpu, MemoryOnly) else est.throughput()  # --gpu-memory: capacity, no speed
    return {"serve_gpus": est.tp, "serve_kv_tokens": est.kv_cache_tokens,
            "serve_concurrency": est.max_concurrent_sequences,
            "serve_tokens_per_second_1": rows[0]["tokens_per_second"] if rows else None,
            "serve_tokens_per_second": rows[-1]["tokens_per_second"] if rows else None}


TRAINING_KEYS = ("training_flops", "gpu_hours", "wall_clock_days", "cost_usd", "memory_per_gpu_bytes", "fits")


def model_record(spec: ModelSpec, scenario: Scenario, training: bool = True, serving: bool = False) -> dict:
    """The comparison figures for one model under `scenario` (base units: counts, FLOPs, bytes, h, USD);
    `training`: the run's FLOPs, time, cost and memory (compare: only when --tokens is given); `serving`: what the
    scenario's GPU serves (``serving_record``)."""
    count = count_params(spec)
    step = step_flops(spec, 1, scenario.seq_len, scenario.causal, scenario.recompute)
    groups: dict[str, int] = {}
    for op, value in step.ops.items():
        groups[flop_group(op)] = groups.get(flop_group(op), 0) + value
    record = {
        "model": spec.name,
        "params": count.total,
        "active_params": count.active_per_token,
        "non_embedding_params": count.non_embedding,
        "forward_flops_per_token": step.forward_per_token,
        "training_flops_per_token": step.model_flops_per_token,
        "attention_share": groups.get("attention S²", 0) / step.forward,
        "kv_cache_bytes_per_token": (kv_cache_bytes_per_token(spec, scenario.kv_dtype)
                                     if spec.architecture != "encoder" else None),
        "weights_bytes": shipped_weight_bytes(spec),
        "context_length": spec.max_seq_len,
    }
    if serving:
        record.update(serving_record(spec, scenario))
    if not training:
        return record
    record["training_flops"] = step.model_flops_per_token * scenario.tokens
    if scenario.gpu is not None:
        est = scenario_training(spec, scenario, step)
        record.update(gpu_hours=est.gpu_hours, wall_clock_days=est.wall_clock_days, cost_usd=est.cost_usd)
        if spec.architecture == "decoder":
            mem = scenario_memory(spec, scenario)
            record.update(memory_per_gpu_bytes=mem.peak, fits=mem.peak <= scenario.capacity)
    return record


def shipped_weight_bytes(spec: ModelSpec) -> float | None:
    """The weights as the checkpoint ships them (its quantization_config; quant.py), None for a format llmcalc does
    not size."""
    from .inference import weight_layout
    from .quant import weight_format

    try:
        return weight_layout(spec, fmt=weight_format(spec)).total
    except LlmcalcError:
        return None


def _measured_record(pair, scenario: Scenario, training: bool) -> dict:
    """A model without a formula's record (fallback.MeasuredPair.record), its training figures only when asked."""
    record = pair.record(scenario)
    return record if training else {k: v for k, v in record.items() if k not in TRAINING_KEYS}


def sort_records(records: list[dict], key: str | None, reverse: bool = False) -> list[dict]:
    """Records ordered by one of COLUMNS (those without the figure last); None keeps the given order."""
    if key is None:
        return records
    if key not in COLUMNS:
        raise LlmcalcError(f"cannot sort by {key!r}; columns: {', '.join(COLUMNS)}")
    present = [r for r in records if r.get(key) is not None]
    missing = [r for r in records if r.get(key) is None]
    return sorted(present, key=lambda r: r[key], reverse=reverse) + missing


def compare_models(specs: list, scenario: Scenario, sort_key: str | None = None,
                   reverse: bool = False, training: bool = True, serving: bool = False) -> list[dict]:
    """`llmcalc compare`: one record per model under `scenario`, sorted by `sort_key` (an unknown column is
    refused before any work); `training`, `serving`: as ``model_record``. A model without a formula
    (fallback.MeasuredPair) gives its own record, from what transformers counted and measured."""
    sort_records([], sort_key)
    if sort_key in TRAINING_KEYS and not training:
        raise LlmcalcError(f"--sort {sort_key} is a training figure: give --tokens (e.g. --tokens 2T) to price a run")
    records = [model_record(spec, scenario, training, serving) if isinstance(spec, ModelSpec)
               else _measured_record(spec, scenario, training) for spec in specs]
    return sort_records(records, sort_key, reverse)
