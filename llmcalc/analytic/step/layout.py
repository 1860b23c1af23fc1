"""A training layout and where its ranks sit: Layout, the rank order's strides, the layouts a search tries, the
checks of every setting, and how layers split over pipeline stages."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ...errors import LlmcalcError
from ...records import dataclass, replaced
from ...spec import ModelSpec
from ...validate import DEFAULT_ZERO, RANK_ORDER, RANK_ORDER_DIMS, rank_order
from .. import pipeline_layout
from ..kernels import ATTENTION_KERNELS
from ..memory import OPTIMIZERS, MemoryEstimate, MemoryTables, lookup, training_memory
from ..parallel import (
    Parallel,
    _built,
    _defaults,
    check_degrees,
    check_experts,
    check_heads,
    check_stages,
    check_zero,
    data_parallel,
    whole,
)
from ..pipeline import SCHEDULES, chunks_per_rank, stage_of
from .constants import MOE_IMBALANCE

ORDER = RANK_ORDER  # Megatron-Core's default rank order (innermost first)


ORDER_DIMS = RANK_ORDER_DIMS


CP_COMMS = ("p2p", "all-gather", "a2a", "a2a+p2p")
# What a selective recomputation can re-run: Megatron-Core's --recompute-modules (core_attn, layernorm,
# mla_up_proj, moe_act, mlp, moe, shared_experts), and two torch/JAX policies: mlp_act (the dense MLP's activation,
# which MaxText's and torch's SAC policies re-run) and alternate_mm (torch per-op SAC, torchtitan's "op" policy:
# every other matmul of the block is recomputed, the others' outputs saved).


RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts", "mlp_act",
                     "alternate_mm")


FUSED_GEMMS = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "fc1", "up_proj": "fc1"}


ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "x_proj")  # input dimension split over tp


REPLICATED = ("q_a_proj", "kv_a_proj")  # MLA's down-projections: every TP rank runs them whole (Megatron-Core)


STREAMED = ("conv1d",)  # depthwise convolutions: memory-bound


def _order_dims(order: str) -> tuple[str, ...]:
    dims = _ORDERS.get(order)
    if dims is None:
        dims = _ORDERS[order] = rank_order(order)
    return dims


_ORDERS: dict[str, tuple[str, ...]] = {}  # the valid rank orders met, as their dimensions


@dataclass(frozen=True)
class Layout(Parallel):
    """A parallel layout (the degrees, ZeRO, sequence parallelism: ``parallel.Parallel``) with what one training
    step of it runs: micro-batch and global batch, the pipeline schedule, rank order, overlaps and the settings
    of the kernels (module docstring)."""

    micro_batch: int = 1
    global_batch: int = 1  # sequences per step
    schedule: str = "1f1b"
    dp_overlap: bool = True  # False: gradients reduced after the backward (Megatron-LM 2021)
    tp_overlap: bool = False  # True: TP collectives hidden behind the GEMMs next to them (see _tp_exposed)
    ep_overlap: bool = False  # True: expert all-to-alls under the other micro-batch's compute
    order: str = ORDER
    cp_comm: str = "p2p"
    cp_a2a_size: int = 0  # cp_comm "a2a+p2p": the inner (all-to-all) level's size; the ring runs over cp / it
    recompute_layers: int = 0  # with recompute "full": layers of each stage chunk that recompute (0: all)
    recompute_modules: tuple[str, ...] = ()  # with recompute "selective": what is recomputed (default core_attn)
    mtp_layers: int = 0  # multi-token prediction layers (DeepSeek-V3) on the last stage
    first_stage_layers: int = 0  # layers of the first pipeline rank, all its chunks (0: the even split)
    last_stage_layers: int = 0  # layers of the last pipeline rank (Megatron's num_layers_in_last_pipeline_stage)
    pipeline_layout: str = ""  # Megatron's layout string: each stage's layers (pipeline_layout.py); "" none
    fp8_param_gather: bool = False  # ZeRO / FSDP all-gather the FP8 copy of the weights (1 byte, not 2)
    dp_shard: int = 0  # HSDP: the weights and states sharded over this many of the dp ranks, replicated over the rest
    attention_kernel: str = "auto"
    fp8_attention: bool = False
    moe_imbalance: float = MOE_IMBALANCE
    ep_dispatcher: str = "alltoall"
    fused_elementwise: bool = True
    optimizer: str = "adamw"

    @property
    def grad_accum(self) -> int:
        """Micro-batches each pipeline runs per step (= gradient-accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def strides(self) -> dict[str, int]:
        """Rank distance between neighbours of each dense dimension (tp, cp, dp, pp) in this rank order."""
        sizes = {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}
        return _strides(self.order, sizes)

    def expert_strides(self) -> dict[str, int]:
        """The same for the experts' mesh (Megatron-Core's expert RankGenerator: tp -> etp, cp -> 1,
        dp -> expert dp)."""
        sizes = {"tp": self.expert_tp, "cp": 1, "ep": self.ep, "dp": self.expert_dp, "pp": self.pp}
        return _strides(self.order, sizes)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "ep": self.ep,
                "etp": self.expert_tp,
                "micro_batch": self.micro_batch, "global_batch": self.global_batch, "grad_accum": self.grad_accum}


def _strides(order: str, sizes: dict[str, int]) -> dict[str, int]:
    key = (order, *sizes.values())
    out = _STRIDES.get(key)
    if out is None:
        out, stride = {}, 1
        for dim in _order_dims(order):
            out[dim] = stride
            stride *= sizes[dim]
        if len(_STRIDES) > 100_000:
            _STRIDES.clear()
        _STRIDES[key] = out
    return dict(out)


_STRIDES: dict[tuple, dict[str, int]] = {}  # per rank order and sizes (in tp, cp, ep, dp, pp order): a layout
# search asks each layout's several times


def _group_per_node(dims: list[tuple[int, int]], per_node: int) -> int:
    """Members of a group made of dimensions (size, stride) that sit in one node of `per_node` consecutive ranks."""
    members = 1
    for size, stride in dims:
        members *= max(1, min(size, per_node // stride)) if stride < per_node else 1
    return members


class _Candidate(NamedTuple):
    """One layout `search_layouts` tries: parallel degrees and the micro-batch."""

    tp: int
    cp: int
    pp: int
    vpp: int
    micro_batch: int
    ep: int = 1
    etp: int = 0


def _expert_degrees(spec: ModelSpec, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) tried for an MoE model (etp 0 = tp): with etp = tp, ep 1 and the two largest powers of two
    (up to 64) dividing the experts and cp x dp; with tp > 1 also etp 1, each expert whole on its GPU, ep the two
    largest powers of two dividing the experts and tp x cp x dp (Megatron-Core's MoE parallel folding)."""
    if not spec.is_moe:
        return [(1, 0)]
    powers = (2, 4, 8, 16, 32, 64)
    fits = [e for e in powers if spec.n_experts % e == 0 and cp * dp % e == 0]
    out = [(1, 0)] + [(e, 0) for e in fits[-2:]]
    if tp > 1:
        folded = [e for e in powers if spec.n_experts % e == 0 and tp * cp * dp % e == 0]
        out += [(e, 1) for e in folded[-2:]]
    return out


PINNED = ("tp", "cp", "pp", "vpp", "micro_batch", "ep", "etp")  # the degrees `layout --tp ...` pins (layout_candidates)


def layout_candidates(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, per_node: int,
                pins: dict[str, int] | None = None) -> list[_Candidate]:
    """The layouts `search_layouts` tries: tp within a node dividing the heads, pp dividing the GPUs,
    cp keeping >= 1024 tokens per rank, micro-batch 1, 2 or 4 dividing the global batch, vpp 2 or 4
    where the micro-batch count is a multiple of pp; a degree of `pins` (PINNED: what `layout` was given, etp
    0 = tp) is that value alone, whatever the search would try (the divisions still hold)."""
    pins = pins or {}
    tps = [pins["tp"]] if "tp" in pins else \
        [t for t in (1, 2, 4, 8, 16) if t <= per_node and per_node % t == 0 and spec.n_heads % t == 0]
    pps = [pins["pp"]] if "pp" in pins else [p for p in range(1, min(spec.n_layers, 64) + 1) if n_gpus % p == 0]
    cps = [pins["cp"]] if "cp" in pins else \
        [c for c in (1, 2, 4, 8, 16) if seq_len % c == 0 and seq_len // c >= 1024 or c == 1]
    mbs = [pins["micro_batch"]] if "micro_batch" in pins else [1, 2, 4]
    candidates: list[_Candidate] = []
    new = tuple.__new__
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if n_gpus % (tp * cp * pp):
                    continue
                dp = n_gpus // (tp * cp * pp)
                experts = _expert_degrees(spec, tp, cp, dp)
                if "ep" in pins or "etp" in pins:
                    want = (pins.get("ep", 1), 0 if pins.get("etp", tp) == tp else pins["etp"])
                    experts = [e for e in experts if e == want] or [want]
                for mb in mbs:
                    if global_batch % (dp * mb):
                        continue
                    m = global_batch // (dp * mb)
                    vpps = [pins["vpp"]] if "vpp" in pins else [1] + ([2, 4] if pp > 1 and m % pp == 0 else [])
                    candidates += [new(_Candidate, (tp, cp, pp, v, mb, ep, etp)) for v in vpps  # _Candidate(...)
                                   if pp * v <= spec.n_layers for ep, etp in experts]
    return candidates


def check_modelled(spec: ModelSpec) -> None:
    """The step-time model times decoder layers from their per-layer ops: attention (full, sliding, chunked;
    GQA, MLA), Mamba / Mamba-2 / Gated DeltaNet / short-conv mixers, Zamba2's shared blocks, dense MLPs and MoE;
    an encoder or encoder-decoder is refused in one line."""
    if spec.architecture != "decoder":
        raise LlmcalcError(f"the step-time model (layout, train --global-batch) covers decoder-only models; "
                           f"{spec.name} is {spec.architecture}. Give its time with `llmcalc train --mfu ...`")


STEP_DEFAULTS = {"ep_overlap": False, "order": ORDER, "cp_comm": "p2p", "cp_a2a_size": 0,
                 "recompute_layers": 0,
                 "recompute_modules": (), "mtp_layers": 0, "first_stage_layers": 0,
                 "last_stage_layers": 0, "pipeline_layout": "", "fp8_param_gather": False, "dp_shard": 0,
                 "attention_kernel": "auto",
                 "fp8_attention": False,
                 "moe_imbalance": MOE_IMBALANCE, "ep_dispatcher": "alltoall", "fused_elementwise": True,
                 "optimizer": "adamw"}


EP_DISPATCHERS = ("alltoall", "allgather", "deepep")


def make_layout(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, tp: int = 1, cp: int = 1, pp: int = 1,
                vpp: int = 1, ep: int = 1, micro_batch: int = 1, schedule: str | None = None, zero: int = DEFAULT_ZERO,
                sequence_parallel: bool = True, dp_overlap: bool = True, tp_overlap: bool = False,
                etp: int | None = None, **step: Any) -> Layout:
    """A checked layout: dp = n_gpus / (tp·cp·pp); every contradiction is one clear LlmcalcError (the shared
    checks of ``parallel``; the step model splits layers unevenly over the stages, as Llama 3 did). `step`:
    the kernel and overlap settings of STEP_DEFAULTS."""
    options = dict(schedule=schedule, zero=zero, sequence_parallel=sequence_parallel, dp_overlap=dp_overlap,
                   tp_overlap=tp_overlap)
    make = _layout_maker(spec, n_gpus, seq_len, global_batch, options=options, step=step)
    return make((tp, cp, pp, vpp, micro_batch, ep, etp), True)


def _layout_maker(spec: ModelSpec, n_gpus: int, seq_len: int, global_batch: int, options: dict[str, Any],
                  step: dict[str, Any]) -> Callable[[tuple, bool], Layout]:  # long: make_layout's checks, in order
    """make_layout in two parts: its checks of the model and the step settings at once, then a function of the
    degrees (tp, cp, pp, vpp, micro-batch, ep, etp or None) that runs the rest, in make_layout's order, and builds
    the layout (the same Layout as Layout.over's, from one template of its fields: a layout search builds
    thousands). The checks that read no degree (the ZeRO stage, --tp-overlap without SP, and check_step_settings
    where _settings_inert finds that it passes every layout of the template) are decided once and make skips those
    that pass: the same layouts and the same first error; so are check_heads per tp and check_experts per expert
    mesh once they passed (each reached with whole numbers only). `make(degrees, checked=False)` (search_layouts')
    skips the checks that layout_candidates' degrees pass whenever the GPU count and the global batch are whole numbers:
    whole-number degrees, tp x cp x pp dividing the GPUs. `options`: make_layout's schedule, zero,
    sequence_parallel, dp_overlap and tp_overlap."""
    check_modelled(spec)
    unknown = sorted(set(step) - set(STEP_DEFAULTS))
    if unknown:
        raise LlmcalcError(f"unknown step settings {', '.join(unknown)}")
    settings = dict(step)  # the given ones: Layout's defaults are STEP_DEFAULTS' (fewer keywords build it faster)
    if isinstance(settings.get("recompute_modules"), str):  # "layernorm,moe_act" as typed
        settings["recompute_modules"] = tuple(m.strip() for m in settings["recompute_modules"].split(",")
                                              if m.strip())
    given_schedule, zero, sequence_parallel = options["schedule"], options["zero"], options["sequence_parallel"]
    tp_overlap = options["tp_overlap"]
    defaults = _defaults(Layout)
    assert defaults is not None  # every Layout field has a plain default
    template = {**defaults, **settings, "zero": zero, "sequence_parallel": sequence_parallel,
                "global_batch": global_batch, "dp_overlap": options["dp_overlap"], "tp_overlap": tp_overlap}
    # what make checks that reads no degree, once: whether it passes (make then skips it; else it checks in order)
    zero_ok = zero in (0, 1, 2, 3)  # check_zero's test
    overlap_ok = not (tp_overlap and not sequence_parallel)
    inert = _settings_inert(spec, template)
    trusted = whole(n_gpus, global_batch)  # checked=False may skip the checks of whole-number degrees
    heads_ok: set[int] = set()  # the tp values check_heads passed
    experts_ok: set[tuple[int, int, int]] = set()  # the (ep, etp, tp x cp x dp) check_experts passed
    new = object.__new__

    def make(degrees: tuple, checked: bool = True) -> Layout:
        tp, cp, pp, vpp, micro_batch, ep, etp = degrees
        checked = checked or not trusted
        if checked and not whole(vpp, ep, micro_batch, global_batch, 1 if etp is None else etp):
            check_degrees(**{"--vpp": vpp, "--ep": ep, "--micro-batch": micro_batch, "--global-batch": global_batch,
                             **({"--etp": etp} if etp is not None else {})})
        schedule = given_schedule or ("interleaved" if vpp > 1 else "1f1b")
        if schedule not in SCHEDULES:
            raise LlmcalcError(f"unknown --schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
        if vpp > 1 and schedule != "interleaved":
            raise LlmcalcError(f"--vpp {vpp} needs --schedule interleaved (got {schedule})")
        # Layout.over: its checks (data_parallel), then its fields over the template's (parallel._built's instance,
        # the template's fields in its order, each degree set in place)
        dp = data_parallel(n_gpus, tp, cp, pp) if checked else n_gpus // (tp * cp * pp)
        lay = new(Layout)
        fields = lay.__dict__
        fields.update(template)
        fields["tp"] = tp
        fields["cp"] = cp
        fields["pp"] = pp
        fields["dp"] = dp
        fields["vpp"] = vpp
        fields["ep"] = ep
        fields["etp"] = etp or 0
        fields["micro_batch"] = micro_batch
        fields["schedule"] = schedule
        if tp not in heads_ok:
            check_heads(spec, tp)
            heads_ok.add(tp)
        if seq_len % cp:
            raise LlmcalcError(f"--cp {cp} does not divide --seq-len {seq_len}")
        if global_batch % (dp * micro_batch):
            raise LlmcalcError(f"--global-batch {global_batch} is not a multiple of dp x micro-batch = {dp} x "
                               f"{micro_batch} = {dp * micro_batch} sequences")
        if pp * chunks_per_rank(schedule, vpp) > spec.n_layers + 2:  # the embedding and the loss may take a stage each
            check_stages(spec, pp, chunks_per_rank(schedule, vpp))
        if ep > 1 or etp is not None:
            mesh = (ep, lay.expert_tp, tp * cp * dp)
            if mesh not in experts_ok:
                check_experts(spec, *mesh, "tp x cp x dp")
                experts_ok.add(mesh)
        if not zero_ok:
            check_zero(zero)
        if not overlap_ok:
            raise LlmcalcError("--tp-overlap splits the all-gather / reduce-scatter of sequence parallelism around "
                               "the GEMMs; it needs --sequence-parallel (drop --no-sequence-parallel)")
        if tp_overlap and tp == 1:
            raise LlmcalcError("--tp-overlap overlaps the tensor-parallel collectives with the GEMMs; tp 1 has none: "
                               "give --tp 2 or more, or leave --tp-overlap out")
        if not inert:
            check_step_settings(spec, lay)
            _check_cp_heads(spec, lay)
        return lay
    return make


def _settings_inert(spec: ModelSpec, template: dict[str, Any]) -> bool:
    """Whether check_step_settings passes every layout built from `template` (_layout_maker's), whatever its
    degrees: none of the settings whose checks read a degree is set (cp_comm a2a or a2a+p2p: the heads over tp and
    cp; ep_overlap: the expert mesh and micro-batches; first / last stage layers: pp and the chunks; an ep_dispatcher
    other than alltoall: the expert mesh; dp_shard: dp), and the rest, which read only the template and the model,
    pass on the template's own layout."""
    if template["cp_comm"] not in ("p2p", "all-gather") or template["ep_overlap"] or template["first_stage_layers"] \
            or template["last_stage_layers"] or template["pipeline_layout"] or template["ep_dispatcher"] != "alltoall" \
            or template["dp_shard"]:
        return False
    try:
        check_step_settings(spec, _built(Layout, dict(template)))
    except Exception:  # noqa: BLE001 (make checks them in order, raising as it does)
        return False
    return True


class SettingsModel(Protocol):
    """What check_step_settings reads of a model: a ModelSpec, or the step record of a model transformers measured
    (``measured_step.MeasuredStep``)."""

    @property
    def name(self) -> str: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def is_moe(self) -> bool: ...


def check_step_settings(spec: SettingsModel, lay: Layout) -> None:
    """The kernel and overlap settings against the model and layout, one line each (the heads a CP all-to-all splits:
    _check_cp_heads)."""
    _order_dims(lay.order)
    if lay.cp_comm not in CP_COMMS:
        raise LlmcalcError(f"--cp-comm must be one of {', '.join(CP_COMMS)}; got {lay.cp_comm!r}")
    if lay.cp_a2a_size and lay.cp_comm != "a2a+p2p":
        raise LlmcalcError("--cp-a2a-size sizes the all-to-all level of hierarchical context parallelism: it needs "
                           "--cp-comm a2a+p2p")
    if lay.cp_comm == "a2a+p2p":
        a = lay.cp_a2a_size
        if not a:
            raise LlmcalcError("--cp-comm a2a+p2p needs --cp-a2a-size (Megatron's "
                               "--hierarchical-context-parallel-sizes A P: the all-to-all level A)")
        if a < 2 or lay.cp % a or a == lay.cp:
            raise LlmcalcError(f"--cp-a2a-size {a} must divide --cp {lay.cp} into 2 or more ring steps and be at "
                               f"least 2 (a = cp is --cp-comm a2a)")
    if lay.ep_overlap and not (spec.is_moe and lay.alltoall):
        raise LlmcalcError("--ep-overlap hides expert all-to-alls: it needs an MoE model with --ep > 1 (or --etp "
                           "other than --tp)")
    if lay.ep_overlap and lay.grad_accum < 2:
        raise LlmcalcError("--ep-overlap overlaps one micro-batch's all-to-alls with another's compute: it needs 2 "
                           "or more micro-batches per pipeline (raise --global-batch or lower --micro-batch)")
    _check_stage_layers(spec, lay)
    if lay.dp_shard and not (lay.zero >= 1 and 1 <= lay.dp_shard < lay.dp and lay.dp % lay.dp_shard == 0):
        raise LlmcalcError(f"--dp-shard {lay.dp_shard} shards the weights and states over that many data-parallel "
                           f"ranks and replicates them over the rest (HSDP): it needs --zero 1-3 and a divisor of dp "
                           f"= {lay.dp} below it")
    if lay.mtp_layers < 0:
        raise LlmcalcError(f"--mtp-layers must be >= 0, got {lay.mtp_layers}")
    if lay.attention_kernel not in ATTENTION_KERNELS:
        raise LlmcalcError(f"--attention-kernel must be one of {', '.join(ATTENTION_KERNELS)}")
    if not (lay.moe_imbalance >= 1 and math.isfinite(lay.moe_imbalance)):
        raise LlmcalcError(f"--moe-imbalance is the most loaded EP rank's tokens over the mean, >= 1; got "
                           f"{lay.moe_imbalance}")
    if lay.ep_dispatcher not in EP_DISPATCHERS:
        raise LlmcalcError(f"--ep-dispatcher must be one of {', '.join(EP_DISPATCHERS)}; got {lay.ep_dispatcher!r}")
    if lay.ep_dispatcher != "alltoall" and not (spec.is_moe and lay.alltoall):
        raise LlmcalcError("--ep-dispatcher picks how routed tokens travel between EP ranks: it needs an MoE model "
                           "with --ep > 1 (or --etp other than --tp)")
    if lay.moe_imbalance != 1 and not spec.is_moe:
        raise LlmcalcError(f"--moe-imbalance needs a mixture-of-experts model; {spec.name} is dense")
    bad = [m for m in lay.recompute_modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise LlmcalcError(f"--recompute-modules: unknown {', '.join(bad)}; use {', '.join(RECOMPUTE_MODULES)}")
    lookup(OPTIMIZERS, "optimizer", lay.optimizer)


def stage_split(n_layers: int, lay: Layout, n_stages: int) -> list[int]:
    """Layers per model stage: `split_layers` unless the layout fixes the first or last pipeline rank's layers.
    Then Megatron-Core's get_transformer_layer_offset (transformer_block.py, num_layers_in_first/last_pipeline_stage
    = --decoder-first/last-pipeline-num-layers): the first rank holds `first_stage_layers`, the last
    `last_stage_layers`, each split evenly over its vpp chunks; the other ranks share the rest evenly (every
    division exact, as Megatron asserts)."""
    if lay.pipeline_layout:  # --pipeline-layout: each stage's layers as the string places them
        return list(pipeline_layout.parse(lay.pipeline_layout, lay.pp).decoder_layers)
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if not (first or last):
        return split_layers(n_layers, n_stages)
    v = n_stages // lay.pp
    middle_ranks = lay.pp - bool(first) - bool(last)
    middle = n_layers - first - last
    per_rank = [first if r == 0 and first else last if r == lay.pp - 1 and last else
                (middle // middle_ranks if middle_ranks else 0) for r in range(lay.pp)]
    counts = [0] * n_stages
    for r in range(lay.pp):
        for c in range(v):
            counts[stage_of(lay.schedule, r, c, lay.pp)] = per_rank[r] // v
    return counts


def _check_cp_heads(spec: ModelSpec, lay: Layout) -> None:
    """The heads a CP all-to-all splits (--cp-comm a2a over cp, a2a+p2p over its all-to-all level): whole heads of
    the tp shard on each rank."""
    a = lay.cp_a2a_size
    if lay.cp_comm == "a2a+p2p" and a and (spec.n_heads // lay.tp) % a:
        raise LlmcalcError(f"--cp-a2a-size {a} splits the heads: {spec.n_heads} heads / tp {lay.tp} is not a "
                           f"multiple of {a}")
    if lay.cp_comm == "a2a" and lay.cp > 1 and (spec.n_heads // lay.tp) % lay.cp:
        raise LlmcalcError(f"--cp-comm a2a splits the heads over cp: {spec.n_heads} heads / tp {lay.tp} is not a "
                           f"multiple of cp {lay.cp}; use --cp-comm p2p")


def _check_stage_layers(spec: SettingsModel, lay: Layout) -> None:
    """--first-stage-layers / --last-stage-layers (or --pipeline-layout) against the pipeline, one line each
    (Megatron's asserts)."""
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if lay.pipeline_layout:
        return _check_pipeline_layout(spec, lay)
    if not (first or last):
        return
    if first < 0 or last < 0:
        raise LlmcalcError("--first-stage-layers / --last-stage-layers must be >= 1")
    if lay.pp < 2:
        raise LlmcalcError("--first-stage-layers / --last-stage-layers set the first and last pipeline ranks' "
                           "layers: they need --pp 2 or more")
    v = chunks_per_rank(lay.schedule, lay.vpp)
    for name, n in (("--first-stage-layers", first), ("--last-stage-layers", last)):
        if n and n % v:
            raise LlmcalcError(f"{name} {n} must be a multiple of the {v} model chunks per rank (--vpp)")
    middle_ranks = lay.pp - bool(first) - bool(last)
    middle = spec.n_layers - first - last
    if middle < 0 or (middle_ranks == 0 and middle) or (middle_ranks and (middle <= 0 or middle % (middle_ranks * v))):
        given = " and ".join(f"{name} {n}" for name, n in (("--first-stage-layers", first),
                                                            ("--last-stage-layers", last)) if n)
        raise LlmcalcError(f"{given} leave{'s' if not (first and last) else ''} {middle} of {spec.n_layers} layers "
                           f"for {middle_ranks} other pipeline ranks x {v} chunks: they must divide evenly")


def _check_pipeline_layout(spec: SettingsModel, lay: Layout) -> None:
    """--pipeline-layout against the layout and the model (pipeline_layout.check_layout: Megatron's rules)."""
    if lay.first_stage_layers or lay.last_stage_layers:
        raise LlmcalcError("--pipeline-layout places every stage's layers: drop --first-stage-layers / "
                           "--last-stage-layers")
    if lay.pp < 2:
        raise LlmcalcError("--pipeline-layout places layers on pipeline stages: it needs --pp 2 or more")
    if lay.schedule not in ("1f1b", "interleaved"):
        raise LlmcalcError(f"--pipeline-layout is Megatron's, for its 1f1b and interleaved schedules; --schedule "
                           f"{lay.schedule} places chunks otherwise")
    layout = pipeline_layout.parse(lay.pipeline_layout, lay.pp)
    if layout.vpp != lay.vpp:
        raise LlmcalcError(f"--pipeline-layout {lay.pipeline_layout!r} has {len(layout.stages)} stages = pp {lay.pp} "
                           f"x vpp {layout.vpp}, not --vpp {lay.vpp}")
    pipeline_layout.check_layout(layout, spec.n_layers, lay.mtp_layers)


def split_layers(n_layers: int, n_stages: int) -> list[int]:
    """Layers per pipeline stage: ceil(L/S) everywhere, the shortfall taken one layer at a time from the
    first and last stages inward (Llama 3: 126 layers on 16 x 4 stages -> 1, 2, ..., 2, 1)."""
    per = math.ceil(n_layers / n_stages)
    counts = [per] * n_stages
    short = per * n_stages - n_layers
    order = [i for pair in zip(range(n_stages), reversed(range(n_stages)), strict=True) for i in pair]
    seen = list(dict.fromkeys(order))  # each stage once, at its first place in `order`
    k = 0
    while short:
        counts[seen[k % n_stages]] -= 1
        short -= 1
        k += 1
    return counts


def _stride(lay: Layout, dim: str, experts: bool = False) -> int:
    """lay.strides()[dim] (lay.expert_strides()[dim] with `experts`), read from _strides' cache without building
    the sizes or copying the strides where they are cached (its key: the order, then the sizes in tp, cp, ep, dp, pp
    order)."""
    key = (lay.order, lay.expert_tp, 1, lay.ep, lay.expert_dp, lay.pp) if experts else \
        (lay.order, lay.tp, lay.cp, 1, lay.dp, lay.pp)
    out = _STRIDES.get(key)
    if out is None:
        return (lay.expert_strides() if experts else lay.strides())[dim]
    return out[dim]


def describe_split(split: list[int]) -> str:
    return _split_text(split)


def _split_text(split: list[int]) -> str:
    if len(set(split)) == 1:
        return f"{split[0]} each"
    runs: list[list[int]] = []
    for c in split:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ", ".join(f"{c}" if k == 1 else f"{c} x {k} stages" for c, k in runs) + \
        " (fewer layers where embedding and LM head sit; the slowest stage sets the pace)"


def _with_zero(lay: Layout, zero: int) -> Layout:
    """replace(lay, zero=zero): the same fields in the same order, built without __init__ (records.replaced)."""
    return replaced(lay, {"zero": zero})


def _describe(lay: Layout, rc: str | None = None) -> str:
    text = f"tp {lay.tp} cp {lay.cp} pp {lay.pp} dp {lay.dp}" + (f" vpp {lay.vpp}" if lay.vpp > 1 else "") + \
        (f" ep {lay.ep}" if lay.ep > 1 else "") + (f" etp {lay.expert_tp}" if lay.expert_tp != lay.tp else "")
    text += (f" {lay.ep_dispatcher}" if lay.ep_dispatcher != "alltoall" else "") + (" ep-overlap" if lay.ep_overlap
                                                                                      else "") \
        + (" tp-overlap" if lay.tp_overlap and lay.tp > 1 else "") \
        + (f" first-stage {lay.first_stage_layers}" if lay.first_stage_layers else "") \
        + (f" last-stage {lay.last_stage_layers}" if lay.last_stage_layers else "")
    return text + f" mb {lay.micro_batch}" + (f" recompute {rc}" if rc else "") + (" ZeRO-3" if lay.zero == 3 else "") \
        + (f" dp-shard {lay.dp_shard}" if lay.dp_shard else "")


def layout_memory(spec: ModelSpec, lay: Layout, seq_len: int, recompute: str, recipe: str = "bf16-mixed",
                  optimizer: str = "adamw", tables: MemoryTables | None = None,
                  attention: str = "flash") -> MemoryEstimate:
    """memory.training_memory of a step layout (no dropout, fused optimizer; flash attention as `layout` sizes it):
    its degrees, vpp and ZeRO stage, each pipeline rank's layers where --first/--last-stage-layers or
    --pipeline-layout fix them (pipeline_layout.rank_layers), and its micro-batches per step (the in-flight cap);
    `tables`: a search's memo of the pieces (memory.MemoryTables)."""
    stages = pipeline_layout.rank_layers(spec.n_layers, lay.pp, lay.first_stage_layers, lay.last_stage_layers,
                                         lay.pipeline_layout)
    return training_memory(spec, lay.micro_batch, seq_len, recipe, optimizer, recompute=recompute,
                           attention=attention, parallel=lay, stage_layers=stages, micro_batches=lay.grad_accum,
                           tables=tables)
