"""`train --global-batch` for a model llmcalc has no formula for: the step model fed by what transformers built and ran.

``MeasuredStep`` reads ``MeasuredModel.step`` (``profiling.hf_measure.measure_step``) and the model's tensors, never a
module's name:

- GEMMs: every 2-D parameter of a module whose input (seen by a forward pre-hook) has the width of one of its
  dimensions is a linear of m = tokens x the input's rows per token, k = that width, n = the other dimension; the
  3-D tensors of a module handed 2-D integer routing indices (transformers' experts modules) are grouped GEMMs of
  E = their first dimension experts, (out, in) = their last two (reversed where the module ``is_transposed``), each
  expert receiving tokens x top-k / E rows, top-k the routing indices' width (the router's output); modules of one
  layer that read the same input tensor with the same tensor-parallel split run as one GEMM of the summed widths
  (q/k/v and gate/up, as Megatron-Core fuses linear_qkv and linear_fc1). Tensor parallelism splits each as
  transformers' plan says (``Tensor.split_dim``: colwise the output, rowwise the input; ``Tensor.check_tp`` refuses
  a tp the plan cannot split); expert parallelism splits the tensors the ep plan names;
- the attention core: per layer the s² term of the FLOPs torch's FlopCounterMode counted in the layer at two
  lengths (2·heads·(d_qk + d_v) per query-key pair), on the pairs a causal kernel computes, windowed where the
  measured cache stops growing (its cap + 1 tokens, ``MeasuredModel.kv_layers``), at the head_dim of the layer's
  attention module;
- a state layer (one whose measured cache keeps elements that do not grow: Mamba, Gated DeltaNet, short convolutions):
  its scan and depthwise convolution as memory-bound passes over its input projection's output and its output
  projection's input (``_scan_seconds``: the formula path's Mamba term), the backward twice the forward;
- elementwise traffic (norms, residual adds, activations, rotary): the bytes autograd saved per token in
  transformers' training forward (``MeasuredModel.activation_terms``), less the loss's fp32 logits, shared evenly by
  the layers, read once forward and twice backward, as bytes at the HBM rate.

Each is timed by the formula path's physics, not a copy of it: ``context.StepContext.gemm`` (the smooth roofline, tile
and wave quantization, the recipe's GEMM dtype), ``kernels.attention_seconds``, ``comm``'s TP, EP, PP and DP
collectives, ``layout.stage_split`` and the pipeline module, ``dp.one_rank_dp`` / ``dp_and_optimizer``
(ZeRO, FSDP, bucketed overlap) and ``prediction.pipeline_step``. Layouts: tp, pp (and vpp), dp with ZeRO 0-3, ep
where the ep plan names expert tensors; every other step option is refused in one line naming it.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any, cast

from ..errors import LlmcalcError
from ..records import dataclass
from ..validate import DEFAULT_ZERO
from .kernels import Device, attention_seconds, stream_seconds
from .measured import MeasuredModel, Tensor
from .memory import RECIPES, lookup
from .parallel import check_degrees, check_zero
from .pipeline import SCHEDULES, chunks_per_rank, path_bounds, stage_of
from .step.attention import ATTENTION_BACKWARD
from .step.collectives import add_ep_comm, add_tp_comm, p2p_seconds
from .step.constants import KERNEL_EFFICIENCY
from .step.context import StageTimes, StepContext
from .step.dp import dp_and_optimizer, one_rank_dp
from .step.layer import embedding_times, loss_seconds
from .step.layout import STEP_DEFAULTS, Layout, check_step_settings, describe_split, stage_split
from .step.moe import dispatch_seconds, expert_rows, permute_bytes, routed_tokens, router_bytes, rows_imbalance
from .step.prediction import Prepared, StepPrediction, pipeline_step, step_assumptions
from .step.stages import stage_passes
from .step.train import option_flag

# the step options a measured model's step is timed with (their STEP_DEFAULTS otherwise); the rest are refused
SUPPORTED_STEP = ("order", "attention_kernel", "fused_elementwise", "moe_imbalance", "ep_overlap", "optimizer",
                  "recipe")


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a layer (or the LM head) as transformers' modules run it: the tensors fused into it, its input
    width k and output width n (whole, before any split), how tensor parallelism splits it, the rows it gets per
    token (1; an experts module's top-k, spread over its `experts`), and whether the ep plan names it."""

    tensors: tuple[str, ...]
    k: int
    n: int
    split: str  # "column" (n over tp), "row" (k over tp) or "replicated"
    rows_per_token: float
    experts: int = 1  # a grouped GEMM over this many experts (each gets rows_per_token / experts of the tokens)
    expert_parallel: bool = False
    reads: int = 0  # the input tensor's place in its layer (GEMMs of the same input and split are fused)

    def flops(self, tokens: float) -> float:
        """Forward FLOPs over `tokens` tokens: 2·m·k·n, m = tokens x rows per token (all experts together)."""
        return 2 * tokens * self.rows_per_token * self.k * self.n


@dataclass
class MeasuredStep:
    """The GEMMs, attention cores and elementwise traffic of each layer of a measured model (module docstring)."""

    model: MeasuredModel
    name: str = ""
    d_model: int = 0  # the hidden width (the token embedding's)
    n_layers: int = 0
    layer_gemms: dict[int, list[Gemm]] = field(default_factory=dict)
    head: Gemm | None = None
    core: dict[int, float] = field(default_factory=dict)  # forward FLOPs per (query, key) pair, per layer
    head_dims: dict[int, int] = field(default_factory=dict)
    windows: dict[int, int] = field(default_factory=dict)  # layers whose cache stopped: the window in tokens
    layer_tensors: dict[int, list[Tensor]] = field(default_factory=dict)
    top_k: int | None = None
    n_experts: int = 0
    elementwise_per_token: float = 0.0  # bytes per token per layer (2-byte activations)
    tie_embeddings: bool = False
    scan_layers: frozenset[int] = frozenset()  # layers keeping a recurrent state (a scan, a short convolution)

    @property
    def is_moe(self) -> bool:
        return self.top_k is not None

    @classmethod
    def of(cls, model: MeasuredModel) -> MeasuredStep:
        """The step of `model` from its measured records, each read and checked in turn (module docstring)."""
        rec = model.step
        if "error" in rec:
            raise LlmcalcError(f"{model.model_type}: the step model's measurement failed ({rec['error']}); give this "
                               "model's time with train --mfu")
        if not rec or not model.activation_runs:
            raise LlmcalcError(f"{model.model_type}: transformers' measurement holds no step record; measure it with "
                               "a --seq-len (train does)")
        embedding = next((t for t in model.tensors if t.role == "embedding" and len(t.shape) == 2), None)
        if embedding is None:
            raise LlmcalcError(f"{model.model_type}: no token embedding among the tensors transformers built")
        out = cls(model, name=model.name, d_model=embedding.shape[-1], n_layers=model.n_layers,
                  tie_embeddings=model.tied, scan_layers=frozenset(kv.layer for kv in model.kv if kv.state_elements))
        out._read_modules(rec, embedding)
        out._check_untimed(rec["modules"])
        out._read_attention(rec)
        per_token, _ = model.activation_terms()
        assert out.head is not None  # _read_modules refuses a model without one
        logits = 4 * out.head.n  # the loss's fp32 logits, saved per token
        out.elementwise_per_token = max(0.0, per_token - logits) / max(1, out.n_layers)
        return out

    def _read_modules(self, rec: dict, embedding: Tensor) -> None:
        """Each module transformers' forward called: the LM head's GEMM, or a layer module's GEMMs, tensors, head_dim
        and routing (a lookup or a module outside the stack is elementwise)."""
        by_module: dict[str, list[Tensor]] = {}
        for t in self.model.tensors:
            by_module.setdefault(t.name.rsplit(".", 1)[0], []).append(t)
        for mod in rec["modules"]:
            tensors = by_module.get(mod["name"], [])
            if mod["name"] == rec.get("head_module"):
                weight = next((t for t in tensors if len(t.shape) == 2), embedding)  # tied: the embedding's
                k, n = _contracted(weight, mod["in_width"])
                self.head = Gemm((weight.name,), k, n, "column" if weight.split_dim() is not None else "replicated",
                                 mod["rows_per_token"])
                continue
            if mod["token_ids"] or not mod["layers"]:
                continue  # a lookup (the embedding), or a module outside the stack (final norm: elementwise)
            gemms = _module_gemms(mod, tensors, state=bool(self.scan_layers.intersection(mod["layers"])))
            for i in mod["layers"]:
                self.layer_gemms.setdefault(i, []).extend(gemms)
                self.layer_tensors.setdefault(i, []).extend(tensors)
                for t in tensors:
                    if t.head_dim:
                        self.head_dims.setdefault(i, t.head_dim)
            if mod["top_k"]:
                self.top_k = mod["top_k"]
                self.n_experts = mod["num_experts"] or next((g.experts for g in gemms if g.experts > 1), 0)
        if self.head is None:
            raise LlmcalcError(f"{self.model.model_type}: transformers names no output embedding (LM head) to time")

    def _check_untimed(self, modules: list[dict]) -> None:
        """Every 2-D or larger layer tensor is a timed GEMM's or a state layer's own kernel tensor; a state layer has
        the input and output projections its scan is sized by. Anything else is refused in one line."""
        assert self.head is not None
        timed = {name for gs in self.layer_gemms.values() for g in gs for name in g.tensors} | set(self.head.tensors)
        state_modules = {m["name"] for m in modules if self.scan_layers.intersection(m["layers"])}
        for t in self.model.tensors:
            if t.role == "layer" and t.trainable and len(t.shape) >= 2 and t.name not in timed:
                if _scan_tensor(t, state_modules):
                    continue  # a state layer's own kernel tensor (conv1d, A_log): in its scan's passes
                raise LlmcalcError(f"{t.name} (shape {list(t.shape)}) is not the weight of a linear or experts module "
                                   "transformers' forward called (nor a state layer's depthwise convolution): the "
                                   "step model has no kernel for it; give this model's time with train --mfu")
        for i in self.scan_layers:
            if not self.scan_widths(i):
                raise LlmcalcError(f"{self.model.model_type}: layer {i} keeps a recurrent state but no input and "
                                   "output projection of its own to size its scan by; give this model's time with "
                                   "train --mfu")

    def _read_attention(self, rec: dict) -> None:
        """Each layer's attention core, the s² term of the FLOPs counted at two lengths (flops(s) = a·s + b·s²: b per
        (query, key) pair), and the windows where the measured cache stops growing."""
        (s1, s2), (c1, c2) = rec["lengths"], rec["attention"]["core_flops"]
        for i, y1, y2 in zip(rec["attention"]["layers"], c1, c2, strict=True):
            quad = (y2 * s1 - y1 * s2) / (s1 * s2 * (s2 - s1))
            if quad > 0:
                if i not in self.head_dims:
                    raise LlmcalcError(f"{self.model.model_type}: layer {i} runs an attention core but no module of "
                                       "it gives a head_dim to time the kernel by")
                self.core[i] = quad
        for kv in self.model.kv:
            if kv.cap_tokens is not None:
                self.windows[kv.layer] = kv.cap_tokens + 1  # DynamicSlidingWindowLayer keeps window - 1 past tokens

    def scan_widths(self, layer: int) -> tuple[Gemm, Gemm] | None:
        """A state layer's (input projection, output projection): its first GEMM, and the first later one writing
        back to the hidden width (Mamba's in_proj and out_proj, Gated DeltaNet's in_proj_qkvz and out_proj)."""
        gemms = [g for g in self.layer_gemms.get(layer, []) if g.experts == 1]
        back = next((g for g in gemms[1:] if g.n == self.d_model), None)
        return None if not gemms or back is None else (gemms[0], back)

    def gemm_flops(self, layer: int, tokens: float) -> float:
        """Forward GEMM FLOPs of layer `layer` over `tokens` tokens (what the formula path's per-layer ops count for
        its projections, router and experts)."""
        return sum(g.flops(tokens) for g in self.layer_gemms.get(layer, []))

    def attended_pairs(self, layer: int, seq: int) -> float:
        """(query, key) pairs of a causal kernel over `seq` tokens, within the layer's window if it has one
        (``ModelSpec.attended_pairs``' arithmetic)."""
        w = self.windows.get(layer)
        if w is not None and seq > w:
            return w * (w + 1) / 2 + (seq - w) * w
        return seq * (seq + 1) / 2

    def kind(self, layer: int) -> tuple:
        """What makes two layers cost the same: their GEMMs, attention core, window, head_dim, cache width and
        whether they scan a recurrent state."""
        kv = next((k.elements_per_token for k in self.model.kv if k.layer == layer), 0)
        return (tuple(self.layer_gemms.get(layer, [])), self.core.get(layer), self.windows.get(layer),
                self.head_dims.get(layer), kv, layer in self.scan_layers)

    def params(self, layers: range) -> tuple[float, float]:
        """(parameters, of them routed experts) of the layers `layers` (whole, before any split)."""
        total = experts = 0.0
        for i in layers:
            for t in self.layer_tensors.get(i, []):
                if t.trainable:
                    total += t.numel
                    experts += t.numel if t.ep else 0
        return total, experts


def _contracted(t: Tensor, width: int) -> tuple[int, int]:
    """(k, n) of a 2-D weight its module's input of `width` contracts: an nn.Linear's (out, in) = shape, k = in."""
    out_dim, in_dim = t.shape[-2], t.shape[-1]
    if in_dim == width:
        return in_dim, out_dim
    if out_dim == width:  # stored (in, out): GPT-2's Conv1D
        return out_dim, in_dim
    raise LlmcalcError(f"{t.name} (shape {list(t.shape)}) is not contracted by its module's input of width {width}: "
                       "the step model times linears and experts only; give this model's time with train --mfu")


def _split(t: Tensor, dim: int) -> str:
    """How tensor parallelism splits GEMM tensor `t` whose output dimension is `dim` (negative index)."""
    s = t.split_dim()
    return "replicated" if s is None else "column" if s == dim else "row"


def _scan_tensor(t: Tensor, state_modules: set[str]) -> bool:
    """Whether `t` is a state layer's own kernel tensor rather than a GEMM's: a depthwise convolution (C, 1, K) or a
    2-D scan parameter (Mamba's A_log, E x N) of a module (or a child of one) that a state layer's forward called."""
    module = t.name.rsplit(".", 1)[0]
    inside = any(module == m or module.startswith(m + ".") for m in state_modules)
    return inside and (len(t.shape) == 2 or (len(t.shape) == 3 and t.shape[1] == 1))


def _module_gemms(mod: dict, tensors: list[Tensor], state: bool = False) -> list[Gemm]:
    """The GEMMs of one module (measure_step's record of it and its tensors); 1-D tensors are elementwise (norms,
    biases), a state layer's kernel tensors (`state`: its conv1d, its A_log, which its module's input does not
    contract) are its scan's, anything else is refused in one line. A module called more than once per layer runs its
    GEMMs as many times (its rows per token counted that often)."""
    out = []
    calls = mod["calls"] / max(1, len(mod["layers"]))
    for t in tensors:
        if len(t.shape) == 1 or not t.trainable:
            continue
        if state and mod["in_width"] not in t.shape[-2:] and _scan_tensor(t, {mod["name"]}):
            continue
        if mod["top_k"] and len(t.shape) == 3:  # an experts module: (E, out, in), or (E, in, out) if transposed
            n, k = (t.shape[2], t.shape[1]) if mod["is_transposed"] else (t.shape[1], t.shape[2])
            dim = -1 if mod["is_transposed"] else -2
            out.append(Gemm((t.name,), k, n, _split(t, dim), mod["top_k"] * calls, experts=t.shape[0],
                            expert_parallel=t.ep is not None, reads=mod["reads"]))
        elif len(t.shape) == 2:
            k, n = _contracted(t, mod["in_width"])
            dim = -2 if t.shape[-1] == k else -1
            out.append(Gemm((t.name,), k, n, _split(t, dim), mod["rows_per_token"] * calls, reads=mod["reads"]))
        else:
            raise LlmcalcError(f"{t.name} ({mod['class']}, shape {list(t.shape)}) is neither a linear nor an experts "
                               "tensor: the step model has no kernel for it; give this model's time with train --mfu")
    return out


def _fused(gemms: list[Gemm]) -> list[Gemm]:
    """GEMMs of one layer reading the same input with the same split and rows run as one (summed output widths)."""
    groups: dict[tuple, Gemm] = {}
    for g in gemms:
        if g.experts > 1:
            groups[(g.tensors,)] = g
            continue
        key = (g.reads, g.k, g.split, g.rows_per_token)
        have = groups.get(key)
        groups[key] = g if have is None else replace(have, tensors=have.tensors + g.tensors, n=have.n + g.n)
    return list(groups.values())


# --- the layout and the step ------------------------------------------------------------------------------------


def measured_layout(step: MeasuredStep, n_gpus: int, seq_len: int, global_batch: int, tp: int = 1, cp: int = 1,
                    pp: int = 1, vpp: int = 1, ep: int = 1, micro_batch: int = 1, schedule: str | None = None,
                    zero: int = DEFAULT_ZERO, sequence_parallel: bool = True, dp_overlap: bool = True,
                    tp_overlap: bool = False, etp: int | None = None, **settings: Any) -> Layout:
    """A checked ``layout.Layout`` for a measured model: the options it does not time refused in one line."""
    model = step.model
    what = f"{model.model_type} is measured by transformers"
    if cp > 1:
        raise LlmcalcError(f"--cp {cp}: {what}, whose step model has no context-parallel attention; use --cp 1")
    if etp is not None:
        raise LlmcalcError(f"--etp {etp}: {what}; its experts split over tp as transformers' plan says; drop --etp")
    for key, value in settings.items():
        if key not in STEP_DEFAULTS:
            raise LlmcalcError(f"unknown step setting {key}")
        if key not in SUPPORTED_STEP and value != STEP_DEFAULTS[key]:
            raise LlmcalcError(f"{option_flag(key)}: {what}; its step model does not time this option; drop it")
    if settings.get("optimizer", "adamw") == "muon":
        raise LlmcalcError(f"--optimizer muon: {what}; Muon's Newton-Schulz GEMMs need llmcalc's matrix shapes")
    check_degrees(**{"--vpp": vpp, "--ep": ep, "--micro-batch": micro_batch, "--global-batch": global_batch})
    schedule = schedule or ("interleaved" if vpp > 1 else "1f1b")
    if schedule not in SCHEDULES:
        raise LlmcalcError(f"unknown --schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if vpp > 1 and schedule != "interleaved":
        raise LlmcalcError(f"--vpp {vpp} needs --schedule interleaved (got {schedule})")
    lay = Layout.over(n_gpus, tp=tp, cp=1, pp=pp, vpp=vpp, ep=ep, zero=zero, sequence_parallel=sequence_parallel,
                      micro_batch=micro_batch, global_batch=global_batch, schedule=schedule, dp_overlap=dp_overlap,
                      tp_overlap=tp_overlap, **{**STEP_DEFAULTS, **{k: v for k, v in settings.items()
                                                                   if k != "recipe"}})
    model.check_tp(tp)
    if global_batch % (lay.dp * micro_batch):
        raise LlmcalcError(f"--global-batch {global_batch} is not a multiple of dp x micro-batch = {lay.dp} x "
                           f"{micro_batch} = {lay.dp * micro_batch} sequences")
    stages = pp * chunks_per_rank(schedule, vpp)
    if stages > step.n_layers:
        raise LlmcalcError(f"{stages} pipeline stages (pp x chunks) exceed the model's {step.n_layers} layers")
    if ep > 1:
        experts = [g for gs in step.layer_gemms.values() for g in gs if g.expert_parallel]
        if not experts:
            raise LlmcalcError(f"--ep {ep}: transformers' expert-parallel plan names no expert tensor of "
                               f"{model.model_type}; use --ep 1")
        if step.n_experts % ep:
            raise LlmcalcError(f"--ep {ep} must divide the {step.n_experts} routed experts")
        if lay.tp * lay.dp % (ep * lay.tp):
            raise LlmcalcError(f"ep x tp = {ep} x {lay.tp} must divide tp x dp = {lay.tp * lay.dp} (experts fold "
                               "over those ranks); use a smaller --ep or more GPUs")
    if lay.moe_imbalance != 1 and not step.is_moe:
        raise LlmcalcError(f"--moe-imbalance needs a mixture-of-experts model; {model.model_type} is dense")
    check_zero(zero)
    if tp_overlap and not sequence_parallel:
        raise LlmcalcError("--tp-overlap splits the all-gather / reduce-scatter of sequence parallelism around the "
                           "GEMMs; it needs --sequence-parallel (drop --no-sequence-parallel)")
    check_step_settings(step, lay)
    return lay


def _layer_cost(ctx: StepContext, step: MeasuredStep, i: int, full_recompute: bool) -> StageTimes:
    """One layer's ``context.StageTimes`` on this rank for one micro-batch (``layer._layer_cost_uncached``'s
    terms, fed by the measured GEMMs, core and elementwise bytes)."""
    lay, dev = ctx.lay, ctx.dev
    tp, T, D, act = lay.tp, ctx.tokens, step.d_model, ctx.act
    sp = tp if lay.sequence_parallel else 1
    fwd = dgrad = wgrad = 0.0
    elem_fwd = step.elementwise_per_token * T / sp * act / 2  # the measured bytes are a bf16 run's
    gemms = _fused(step.layer_gemms.get(i, []))
    routed = [g for g in gemms if g.experts > 1]
    tp_inputs = set()  # the inputs of tensor-parallel column GEMMs: each one all-gathered, its block reduced
    for g in gemms:
        if g.experts > 1:
            continue
        rows = T * g.rows_per_token
        if lay.alltoall and routed and g.reads == routed[0].reads and g.split == "replicated":
            rows = routed_tokens(rows, lay)  # the router reads the tokens this rank dispatches (moe._moe_cost)
        f, d, w = ctx.gemm(rows, g.k / tp if g.split == "row" else g.k, g.n / tp if g.split == "column" else g.n)
        fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
        if g.split == "column":
            tp_inputs.add(g.reads)
    ep_fwd = ep_bwd = 0.0
    if routed:  # moe._moe_cost: each local expert's rows (the most loaded rank's), as one grouped GEMM
        k, etp, ep = step.top_k or 1, lay.expert_tp, lay.ep
        E0 = routed[0].experts
        imbalance = rows_imbalance(T, k, E0, lay)
        local = routed_tokens(T, lay)  # tokens this rank routes
        elem_fwd += router_bytes(local, E0)
        for g in routed:  # rows per local expert: tokens x top-k / E (x ep / etp share routed to this rank)
            E = g.experts
            rows = expert_rows(T, g.rows_per_token, E, lay, imbalance)
            kk, nn = (g.k / etp if g.split == "row" else g.k), (g.n / etp if g.split == "column" else g.n)
            f, d, w = ctx.gemm(rows, kk, nn, batch=E / ep)
            fwd, dgrad, wgrad = fwd + f, dgrad + d, wgrad + w
            # (the activation between them is in the measured saved bytes, as a dense MLP's is)
        if lay.alltoall:
            elem_fwd += permute_bytes(local, k, D, act, local_experts=E0 / ep, ep=ep, dispatcher=lay.ep_dispatcher,
                                      imbalance=imbalance)
            ep_fwd = ep_bwd = dispatch_seconds(local * imbalance, k, step.n_experts, D, act, lay=lay,
                                               net=dev.network)
        else:
            tp_inputs.add(routed[0].reads)
    attn_f, attn_b = _core_seconds(ctx, step, i)
    elem = ctx.stream(elem_fwd)
    scan = _scan_seconds(ctx, step, i)
    attn_f, attn_b = attn_f + scan, attn_b + 2 * scan
    t = StageTimes(fwd=fwd + attn_f + elem, gemm_fwd=fwd, bwd_weight=wgrad, bwd_input=dgrad + attn_b + 2 * elem)
    passes = 2
    if full_recompute:
        t.bwd_input += t.fwd
        passes = 3
    if tp > 1 and tp_inputs:
        add_tp_comm(t, ctx, D, len(tp_inputs), passes, fwd=fwd, bwd=dgrad + wgrad)
    if routed and lay.alltoall:
        if full_recompute:
            ep_bwd += ep_fwd
        add_ep_comm(t, ctx, ep_fwd, ep_bwd)
    return t


def _core_seconds(ctx: StepContext, step: MeasuredStep, i: int) -> tuple[float, float]:
    """(forward, backward) seconds of layer `i`'s attention core on this rank (0, 0 without one): the measured FLOPs
    per (query, key) pair on the pairs its kernel computes, at the kernel's rate, floored by reading Q, K, V and
    writing O (``layer._layer_cost_uncached``'s attention terms)."""
    lay, dev, tp, act = ctx.lay, ctx.dev, ctx.lay.tp, ctx.act
    if i not in step.core:
        return 0.0, 0.0
    b, S = lay.micro_batch, ctx.seq
    work = b * step.core[i] / tp * step.attended_pairs(i, S)
    window = step.windows.get(i, S)
    hd, kernel, fp8 = step.head_dims[i], lay.attention_kernel, lay.fp8_attention
    sliding = window < S
    attn_f = attention_seconds(dev, kernel, work, hd, window, causal=True, backward=False, fp8=fp8,
                               efficiency=ctx.eff, windowed=sliding)
    attn_b = attention_seconds(dev, kernel, ATTENTION_BACKWARD * work, hd, window, causal=True, backward=True, fp8=fp8,
                               efficiency=ctx.eff, windowed=sliding)
    # the kernel's memory floor: Q and O (2·heads·d_head = core / 2 per token), K and V (the measured cache)
    kv = next((k.elements_per_token for k in step.model.kv if k.layer == i), 0)
    qkvo = b * S * (step.core[i] / 2 / tp + kv / tp) * act
    attn_f = max(attn_f, stream_seconds(qkvo, dev, ctx.eff))
    attn_b = max(attn_b, stream_seconds(ATTENTION_BACKWARD * qkvo, dev, ctx.eff))
    return attn_f, attn_b


def _scan_seconds(ctx: StepContext, step: MeasuredStep, i: int) -> float:
    """Forward seconds of a state layer's scan and short convolution on this rank (0 for other layers): memory-bound
    passes reading what its input projection wrote and reading and writing its output projection's input,
    T·(n_in + 2·E)·bytes at the HBM rate, n_in the input projection's width and E the output projection's input width
    (each split as tensor parallelism splits them). The formula path's Mamba term (steptime's state-mixer cost:
    T·(2E + 2GN + H) + 2·T·E elements, in_proj's width being 2E + 2GN + H); the backward costs twice the forward."""
    widths = step.scan_widths(i) if i in step.scan_layers else None
    if widths is None:
        return 0.0
    first, out = widths
    tp = ctx.lay.tp
    n_in = first.n / tp if first.split == "column" else first.n
    inner = out.k / tp if out.split == "row" else out.k
    return stream_seconds(ctx.tokens * (n_in + 2 * inner) * ctx.act, ctx.dev, ctx.eff)


def _head_and_embedding(ctx: StepContext, step: MeasuredStep) -> tuple[StageTimes, StageTimes]:
    """The LM head GEMM (split as the plan says) and the loss over its fp32 logits, and the embedding lookup's
    gather and scatter-add (``layer._head_times`` / ``_embedding_times``' terms)."""
    T, lay, head = ctx.tokens, ctx.lay, step.head
    assert head is not None  # MeasuredStep.of refuses a model without one
    split = lay.tp if head.split == "column" else 1
    f, d, w = ctx.gemm(T * head.rows_per_token, head.k, head.n / split)
    loss = loss_seconds(T, head.n, split, ctx.dev, ctx.eff)
    return (StageTimes(fwd=f + loss, bwd_input=d, bwd_weight=w, gemm_fwd=f),
            embedding_times(T, step.d_model, ctx.act, ctx.dev, ctx.eff))


@dataclass(frozen=True)
class MeasuredPrediction(StepPrediction):
    """A ``prediction.StepPrediction`` of a measured model, with what each figure came from (JSON ``method`` and
    ``measured_from``)."""

    measured_from: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**super().to_json(), "method": "transformers", "measured_from": dict(self.measured_from)}


def predict_measured(step: MeasuredStep, device: Device, lay: Layout, seq_len: int, *, recompute: str, recipe: str,
                     model_flops: float, hardware_flops: float, causal: bool) -> MeasuredPrediction:
    """The predicted step of `lay` for a measured model: per layer ``_layer_cost``, the stages as
    ``layout.stage_split`` splits the layers (embedding on the first, LM head on the last), the pipeline, DP and
    optimizer by ``prediction.pipeline_step`` / ``dp_and_optimizer``. `model_flops` / `hardware_flops`: the step's,
    counted by torch on transformers' forward (``fallback.step_flops``)."""
    if recompute == "selective":
        raise LlmcalcError(f"--recompute selective: {step.model.model_type} is measured by transformers, whose "
                           "forward is not split into the modules a selective recomputation re-runs; use none or full")
    rec = lookup(RECIPES, "recipe", recipe)
    # the context's model is the measured step itself: of it the collectives, DP and assumptions read d_model and
    # is_moe (p2p_seconds, step_assumptions), the layer costs nothing (measured_step's own, above)
    ctx = StepContext(cast(Any, step), device, lay, seq_len, rec, eff=KERNEL_EFFICIENCY)
    v = chunks_per_rank(lay.schedule, lay.vpp)
    n_stages = lay.pp * v
    split = stage_split(step.n_layers, lay, n_stages)
    starts = [sum(split[:k]) for k in range(n_stages)]
    head, embedding = _head_and_embedding(ctx, step)
    costs: dict[tuple, StageTimes] = {}  # per layer kind: layers that cost the same are timed once
    stages = []
    for k in range(n_stages):
        total = StageTimes()
        for i in range(starts[k], starts[k] + split[k]):
            kind = step.kind(i)
            if kind not in costs:
                costs[kind] = _layer_cost(ctx, step, i, recompute == "full")
            total.add(costs[kind])
        if k == 0:
            total.add(embedding)
        if k == n_stages - 1:
            total.add(head)
        stages.append(total)
    fwd, bwd, wgt = stage_passes(stages, range(n_stages), lay.schedule)
    p2p = p2p_seconds(ctx) if lay.pp > 1 else 0.0
    bound, exact, plain = path_bounds(lay.schedule, lay.pp, lay.grad_accum, fwd, bwd, w=wgt, vpp=lay.vpp,
                                      p2p_time=p2p)
    groups = [(r, tuple(stage_of(lay.schedule, r, c, lay.pp) for c in range(v))) for r in range(lay.pp)]
    infos = {r: _rank_dp(ctx, step, rank_stages, split) for r, rank_stages in groups}
    dp, opt = dp_and_optimizer(ctx, stages, split, starts, v=v, groups=groups, infos=infos)
    prep = Prepared(ctx, causal, recompute, stages, split, fwd=fwd, bwd=bwd, wgt=wgt, p2p=p2p, bound=bound,
                    exact=exact, dp=dp, optimizer=opt, plain_bound=plain, groups=groups)
    seconds, breakdown, how = pipeline_step(prep)
    assumptions = step_assumptions(ctx, recompute)
    if lay.pp > 1:
        assumptions["pipeline"] = how
    sources = measured_from(step)
    notes = [f"layers per pipeline stage ({n_stages} stages = pp {lay.pp} x {v} chunk{'s' if v > 1 else ''}): "
             + describe_split(split), *(f"measured by transformers, {k}: {text}" for k, text in sources.items()),
             "assumed: " + "; ".join(f"{k} {val}" for k, val in assumptions.items())]
    return MeasuredPrediction(cast(Any, step.model), device, lay, seq_len, causal=causal, recompute=recompute,
                              step_seconds=seconds, breakdown=breakdown, model_flops=model_flops,
                              hardware_flops=hardware_flops, layers_per_stage=split, notes=notes, attention="flash",
                              recipe=rec.name, assumptions=assumptions, measured_from=sources)


def _rank_dp(ctx: StepContext, step: MeasuredStep, rank_stages: tuple[int, ...], split: list[int]) -> Any:
    """``dp.one_rank_dp`` for one pipeline rank holding `rank_stages`: its parameters (and routed experts among them)
    from the measured tensors of its layers, the embedding on the first stage, the final norm and head on the last
    (and, under pp > 1, the tied embedding's copy there)."""
    n_stages = len(split)
    starts = [sum(split[:k]) for k in range(n_stages)]
    emb = next(t for t in step.model.tensors if t.role == "embedding" and len(t.shape) == 2).numel
    final = step.model.params_on_rank(1, ("norm/final", "head"))
    params = experts = 0.0
    n_layers = 0
    for st in rank_stages:
        p, e = step.params(range(starts[st], starts[st] + split[st]))
        params, experts, n_layers = params + p, experts + e, n_layers + split[st]
        params += emb if st == 0 else 0.0
        if st == n_stages - 1:
            params += final + (emb if step.tie_embeddings and st != 0 else 0.0)  # pp > 1: the tied copy
    return one_rank_dp(ctx, params, experts, n_layers, per_layer=params / max(1, n_layers))


def measured_from(step: MeasuredStep) -> dict[str, str]:
    """What each figure of the measured step came from (the JSON's `measured_from`)."""
    model = step.model
    n_gemms = sum(len(g) for g in step.layer_gemms.values())
    out = {
        "gemms": f"{n_gemms} GEMMs over {step.n_layers} layers and the LM head: the 2-D and expert tensors of "
                 f"{model.cls} (transformers {model.transformers_version}) each as m x k x n, k the width of the input "
                 "its module received in a forward (pre-hooks), split by transformers' tp_plan / ep_plan; modules "
                 "reading one input tensor with one split fused into one GEMM",
        "attention": f"the s² term of the attention FLOPs torch's FlopCounterMode counted per layer at seq "
                     f"{' and '.join(map(str, model.step['lengths']))}, on the causal pairs"
                     + (f", windowed where the measured cache stops ({len(step.windows)} layers)" if step.windows
                        else ""),
        "elementwise": f"{step.elementwise_per_token:,.0f} B per token per layer: the bytes autograd saved in "
                       "transformers' training forward less the loss's fp32 logits, over the layers",
        "step_flops": "3 x the forward FLOPs torch's FlopCounterMode counted on transformers' forward (MFU's model "
                      "FLOPs)",
    }
    if step.scan_layers:
        out["scan"] = (f"{len(step.scan_layers)} layers keep a recurrent state (the measured cache's elements that do "
                       "not grow): their scan and short convolution as memory-bound passes over the input "
                       "projection's output and the output projection's input, the backward twice the forward")
    if step.is_moe:
        out["routing"] = (f"top-{step.top_k} of {step.n_experts} experts: the width of the routing indices "
                          "transformers' experts module receives")
    return out


def train_measured_steptime(model: MeasuredModel, gpu: str, n_gpus: int, dtype: str, seq_len: int, causal: bool,
                            recompute: str, model_flops_per_token: float, hardware_flops_per_token: float,
                            options: dict) -> MeasuredPrediction:
    """`train --global-batch` for a measured model: the layout from the typed options (``measured_layout``), its
    step predicted (``predict_measured``) with MFU's model FLOPs counted by torch on transformers' forward."""
    from .step.train import LAYOUT_DEFAULTS, STEP_OPTIONS, global_batch_sequences, networked_device

    options = {k: v for k, v in options.items() if v is not None}
    attention = options.pop("attention", "flash")
    if attention != "flash":
        raise LlmcalcError(f"--attention {attention}: {model.model_type} is measured by transformers; its step model "
                           "times the fused (flash) attention kernel only")
    options.pop("tokens_per_second", None)
    gb = global_batch_sequences(options.pop("global_batch", None), options.pop("global_batch_tokens", None), seq_len)
    assert gb is not None  # the caller predicts only with a global batch
    step = {k: options.pop(k) for k in STEP_OPTIONS if k in options}
    recipe = step.pop("recipe", "bf16-mixed")
    dev = networked_device(gpu, dtype, step.pop("network", None), n_gpus)
    measured = MeasuredStep.of(model)
    lay = measured_layout(measured, n_gpus, seq_len, gb, **{**LAYOUT_DEFAULTS, **options}, **step)
    tokens = gb * seq_len
    return predict_measured(measured, dev, lay, seq_len, recompute=recompute, recipe=recipe,
                            model_flops=model_flops_per_token * tokens,
                            hardware_flops=hardware_flops_per_token * tokens, causal=causal)


# --- `layout` ---------------------------------------------------------------------------------------------------


def measured_stage_peak(step: MeasuredStep, lay: Layout, seq_len: int, recipe: str, optimizer: str) -> float:
    """Peak bytes per GPU of the most loaded pipeline stage for the layouts `layout` tries (no recomputation): with
    one stage ``measured.measured_training_memory``'s estimate (`memory`'s for this model); with pp > 1, the same
    MemoryEstimate for the first stage (the embedding and ceil(L / pp) layers, the activations of the micro-batches in
    flight, ``memory.in_flight``, as the formula path's ``memory.training_memory``) and for the last (its
    layers, the final norm and the LM head, one micro-batch and the loss's fp32 logits), each layer's tensors split by
    the tp plan and its activations the measured bytes per layer (the saved bytes less the logits, over the layers) /
    tp (sequence parallelism)."""
    import math

    from .activations import ActivationEstimate
    from .measured import measured_training_memory
    from .memory import OPTIMIZERS, MemoryEstimate, in_flight
    from .parallel import Parallel

    model, tp = step.model, lay.tp
    par = Parallel(tp=tp, pp=lay.pp, dp=lay.dp, zero=lay.zero, sequence_parallel=lay.sequence_parallel)
    if lay.pp == 1:
        return measured_training_memory(model, lay.micro_batch, seq_len, recipe=recipe, optimizer=optimizer,
                                        recompute="none", attention="flash", dropout=False, parallel=par,
                                        optimizer_impl="fused").phase_peak()
    rec, opt = RECIPES[recipe], OPTIMIZERS[optimizer]
    if rec.fp8:  # as measured_training_memory refuses it
        raise LlmcalcError(f"--recipe {recipe}: its saved FP8 casts are by llmcalc's tensor names, which a model "
                           "transformers measures does not have; use a bf16/fp16/fp32 recipe")
    assert step.head is not None  # MeasuredStep.of
    L, n = step.n_layers, math.ceil(step.n_layers / lay.pp)
    saved = model.activation_bytes(rec.act_bytes) * lay.micro_batch / tp
    logits = min(saved, 4 * step.head.n * seq_len * lay.micro_batch / tp)
    per_block = (saved - logits) / L
    emb = model.params_on_rank(tp, ("embedding",))
    head = model.params_on_rank(tp, ("head",)) if not step.tie_embeddings else emb  # pp > 1: the tied copy
    final = model.params_on_rank(tp, ("norm/final",))
    gathered_layer = max((sum(t.per_rank(tp) for t in ts if t.trainable) for ts in step.layer_tensors.values()),
                         default=0.0)
    peaks = []
    for which, layers in (("first", range(n)), ("last", range(L - n, L))):
        blocks = sum(t.per_rank(tp) for i in layers for t in step.layer_tensors.get(i, []) if t.trainable)
        first = which == "first"
        flight = in_flight(lay.pp, lay.vpp, 0 if first else lay.pp - 1, lay.grad_accum)
        acts = ActivationEstimate(per_layer={"saved for backward (measured)": per_block * n * flight
                                             + (0.0 if first else logits)},
                                  recompute_working_set=0.0, logits_and_loss=0.0, largest_layer=per_block,
                                  own_layer=per_block, head_saved=0.0 if first else logits, in_flight=flight)
        est = MemoryEstimate(spec=model, recipe=rec, optimizer=opt, parallel=par, batch=lay.micro_batch,
                             seq_len=seq_len, recompute="none", attention="flash",
                             params_on_gpu=emb + blocks if first else blocks + final + head, activations=acts,
                             stage=which, zero3_gathered=2 * gathered_layer * rec.weight_bytes
                             if lay.zero == 3 and lay.dp > 1 else 0.0, largest_tensor=model.largest_tensor(tp),
                             head_params_on_gpu=0.0 if first else head + final,
                             late_params_on_gpu=emb if first else 0.0)
        peaks.append(est.phase_peak())
    return max(peaks)


def rank_measured_layouts(model: MeasuredModel, gpu: str, n_gpus: int, seq_len: int, global_batch: int | None = None,
                          global_batch_tokens: float | None = None, *, model_flops_per_token: float,
                          hardware_flops_per_token: float, causal: bool = False, recompute: str | None = None,
                          tp_overlap: bool = False, top: int = 10, dtype: str = "bf16", progress: Any = None,
                          reserve_gib: float = 0.0, **options: Any) -> Any:  # long: the search's phases in order
    """`layout` for a measured model: tp over the divisors of GPUs per node that transformers' plan can split,
    pp dividing the GPUs (up to the layers, 64 at most), micro-batch 1, 2 or 4, vpp 2 or 4 where the micro-batches
    are a multiple of pp, as ``layout.layout_candidates``; ZeRO-1, else ZeRO-3 where dp > 1, whichever first fits
    (``measured_stage_peak``, no recomputation: the measured activations are of a forward that recomputes
    nothing); each fitting layout predicted exactly (``predict_measured``) and ranked by throughput; MFU against the
    dense `dtype` peak."""
    fixed = [k for k in ("tp", "cp", "pp", "vpp", "micro_batch", "ep", "etp", "zero", "sequence_parallel",
                         "first_stage_layers", "last_stage_layers", "pipeline_layout") if options.get(k) is not None]
    if fixed:
        raise LlmcalcError(f"{', '.join('--' + k.replace('_', '-') for k in fixed)}: layout fixes the degrees of a "
                           f"model with a formula; {model.model_type} is measured by transformers and searched whole: "
                           "drop them (time one layout with `llmcalc train`)")
    from .step.search import LayoutSearch, reserved_capacity, why_they_lose
    from .step.train import global_batch_sequences, networked_device

    batch = global_batch_sequences(global_batch, global_batch_tokens, seq_len, required=True)
    assert batch is not None
    if recompute not in (None, "none"):
        raise LlmcalcError(f"--recompute {recompute}: {model.model_type} is measured by transformers, whose saved "
                           "activations are of a forward that recomputes nothing; layout checks its memory with "
                           "--recompute none (time full recomputation with train --recompute full)")
    settings = {k: v for k, v in options.items() if v is not None}
    recipe = settings.pop("recipe", "bf16-mixed")
    optimizer = settings.get("optimizer", "adamw")
    measured = MeasuredStep.of(model)
    dev = networked_device(gpu, dtype, settings.pop("network", None), n_gpus)  # MFU against the dense --dtype peak
    capacity, per_node = reserved_capacity(dev.accelerator, reserve_gib), dev.network.gpus_per_node
    tps = []
    for t in (1, 2, 4, 8, 16):
        if t <= per_node and per_node % t == 0:
            try:
                model.check_tp(t)
            except LlmcalcError:
                continue
            tps.append(t)
    candidates = []
    for tp in tps:
        for pp in (p for p in range(1, min(measured.n_layers, 64) + 1) if n_gpus % p == 0):
            if n_gpus % (tp * pp):
                continue
            dp = n_gpus // (tp * pp)
            for mb in (1, 2, 4):
                if batch % (dp * mb):
                    continue
                m = batch // (dp * mb)
                candidates += [(tp, pp, v, mb) for v in [1] + ([2, 4] if pp > 1 and m % pp == 0 else [])
                               if pp * v <= measured.n_layers]
    tick = progress(len(candidates)) if progress else None
    counts = {"searched": 0, "fit": 0, "oom": 0, "invalid": 0, "bounded": 0}  # every layout evaluated
    ranked, oom = [], []
    for tp, pp, vpp, mb in candidates:
        counts["searched"] += 1
        if tick:
            tick()
        try:
            lay = measured_layout(measured, n_gpus, seq_len, batch, tp=tp, pp=pp, vpp=vpp, micro_batch=mb,
                                  tp_overlap=tp_overlap, **settings)
        except LlmcalcError:
            counts["invalid"] += 1
            continue
        peak = 0.0
        for zero in (1, 3) if lay.dp > 1 else (1,):
            lay = replace(lay, zero=zero)
            peak = measured_stage_peak(measured, lay, seq_len, recipe, optimizer)
            if peak <= capacity:
                break
        if peak > capacity:
            counts["oom"] += 1
            oom.append((lay, peak, "none" + (" and ZeRO-3" if lay.zero == 3 else "")))
            continue
        counts["fit"] += 1
        tokens = batch * seq_len
        ranked.append((predict_measured(measured, dev, lay, seq_len, recompute="none", recipe=recipe,
                                        model_flops=model_flops_per_token * tokens,
                                        hardware_flops=hardware_flops_per_token * tokens, causal=causal), peak))
    ranked.sort(key=lambda pm: -pm[0].tokens_per_second)
    if not ranked:
        raise LlmcalcError(f"no layout of {model.name} fits on {n_gpus:,} x {gpu} at seq {seq_len} with global batch "
                           f"{batch} (of the layouts tried, {counts['oom']:,} do not fit in memory and "
                           f"{counts['invalid']:,} contradict the model): use more GPUs or a larger --global-batch")
    return LayoutSearch(spec=cast(Any, model), gpu=gpu, n_gpus=n_gpus, seq_len=seq_len, global_batch=batch,
                        ranked=ranked, losers=why_they_lose(ranked, oom, capacity), counts=counts, recipe=recipe,
                        optimizer=optimizer, reserve_gib=reserve_gib)
