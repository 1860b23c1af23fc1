"""One parallel layout for every model in llmcalc: training memory, the step-time model, the sharded profiler.

``Parallel`` holds the degrees of a layout: tensor (tp), context (cp), pipeline (pp, with vpp virtual stages per
rank), data (dp), expert (ep) and expert tensor (etp, 0 = tp) parallelism, the ZeRO stage over the data-parallel
group and whether TP runs with sequence parallelism. GPUs = tp x cp x pp x dp; ranks are laid out TP innermost,
then CP, PP, DP for memory (which depends on the degrees, not on where the ranks sit; the step model places them in
Megatron-Core's order, step.layout.Layout.order). Routed experts fold their own mesh [etp, ep, expert dp] over the
tp x cp x dp ranks (Megatron-Core's "MoE parallel folding", Liu et al. 2025, arXiv 2504.14960; its expert data
parallel group is world / (etp x ep x pp)): a GPU holds 1/(etp x ep) of the routed experts, replicated over the
expert data-parallel group of tp x cp x dp / (etp x ep) ranks.

The checks, one per purpose, each one ``LlmcalcError`` naming the fix: ``check_degrees`` (whole numbers >= 1),
``over`` (the GPUs divide into tp x cp x pp), ``check_heads`` (the training TP rule), ``check_stages`` (pipeline
stages against the layers), ``check_experts`` (ep and etp against the experts and tp x cp x dp), ``check_zero``.
A caller asks for those that apply to what it models (memory wants equal stages, the step model does not).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from ..errors import LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from ..units import plural
from ..validate import DEFAULT_ZERO

P = TypeVar("P", bound="Parallel")
R = TypeVar("R")


@dataclass(frozen=True)
class Parallel:
    """The degrees of a parallel layout (see the module docstring); GPUs = tp x cp x pp x dp."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1  # expert parallelism: routed experts split over ep ranks (Megatron-LM's expert-model-parallel)
    etp: int = 0  # expert tensor parallelism: each routed expert split over etp ranks; 0 = tp (Megatron's default)
    vpp: int = 1  # virtual pipeline stages (model chunks) per pipeline rank
    zero: int = DEFAULT_ZERO  # ZeRO stage over the data-parallel group
    sequence_parallel: bool = True  # TP shards the norm/dropout activations over the sequence (Korthikanti 2022)

    @classmethod
    def over(cls: type[P], n_gpus: int, *, tp: int = 1, cp: int = 1, pp: int = 1, what: str = "--n-gpus",
             **degrees: Any) -> P:
        """The layout of `n_gpus` GPUs with these degrees: dp = n_gpus / (tp x cp x pp), refused in one line when
        it is not a whole number (`what`: the option that gave the GPU count)."""
        return _build(cls, tp=tp, cp=cp, pp=pp, dp=data_parallel(n_gpus, tp, cp, pp, what), **degrees)

    @property
    def n_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same routed-expert shard: tp x cp x dp / (etp x ep)."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def alltoall(self) -> bool:
        """Routed tokens travel by all-to-all (Megatron-Core's alltoall token dispatcher) once experts have
        a layout of their own; with ep 1 and etp = tp the MoE block is tensor-parallel like a dense MLP."""
        return self.ep > 1 or self.expert_tp != self.tp

    def check(self, spec: ModelSpec, *, equal_stages: bool = False) -> None:
        """The checks a training layout of `spec` needs (degrees, heads, stages, experts, ZeRO stage)."""
        check_degrees(**{f"--{name}": getattr(self, name) for name in ("tp", "cp", "pp", "dp", "ep", "vpp")})
        if self.etp:
            check_degrees(**{"--etp": self.etp})
        check_zero(self.zero)
        check_heads(spec, self.tp)
        check_stages(spec, self.pp, self.vpp, equal=equal_stages)
        if self.ep > 1 or self.etp:
            check_experts(spec, self.ep, self.expert_tp, self.tp * self.cp * self.dp)


def whole(*values: Any) -> bool:
    """Whether every value passes check_degrees (a plain int >= 1; anything else goes to check_degrees itself), without
    building its keywords: the layout search asks it of every candidate."""
    for value in values:  # noqa: SIM110 (a loop, not all() over a generator: half the time)
        if type(value) is not int or value < 1:
            return False
    return True


def data_parallel(n_gpus: int, tp: int, cp: int, pp: int, what: str = "--n-gpus") -> int:
    """dp = n_gpus / (tp x cp x pp), each a whole number >= 1 (check_degrees) and refused in one line when the
    quotient is not one (`what`: the option that gave the GPU count)."""
    if not whole(n_gpus, tp, cp, pp):
        check_degrees(**{what: n_gpus, "--tp": tp, "--cp": cp, "--pp": pp})
    if n_gpus % (tp * cp * pp):
        rest = n_gpus // (cp * pp) if n_gpus % (cp * pp) == 0 else 0  # GPUs per cp x pp group, where whole
        fix = (f"; the nearest --tp that divides the {n_gpus:,} GPUs"
               f"{f' at cp {cp} x pp {pp}' if cp * pp > 1 else ''}: "
               f"{nearest_of(tp, [d for d in range(1, rest + 1) if rest % d == 0])}" if rest and tp > 1 else
               f"; the product must divide the {n_gpus:,} GPUs (GPUs = tp x cp x pp x dp)")
        raise LlmcalcError(f"tp x cp x pp = {tp} x {cp} x {pp} = {tp * cp * pp} does not divide {what} {n_gpus}"
                           + fix)
    return n_gpus // (tp * cp * pp)


def nearest_of(value: int, valid: list[int]) -> str:
    """The valid degrees on either side of `value`, as a refusal names them: '2 or 4' (or the one there is)."""
    below = [v for v in valid if v < value]
    above = [v for v in valid if v > value]
    return " or ".join(str(v) for v in (below[-1:] + above[:1])) or "1"


def _build(cls: type[P], **values: Any) -> P:
    """cls(**values) for a frozen dataclass whose fields all have plain defaults and that has no __post_init__ (a
    Parallel, a step.layout.Layout): the same instance, its fields in the same order, without __init__'s
    object.__setattr__ per field (a Layout has 32: a layout search builds thousands)."""
    defaults = _defaults(cls)
    if defaults is None:
        return cls(**values)
    unknown = values.keys() - defaults.keys()
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    out = object.__new__(cls)
    out.__dict__.update(defaults)
    out.__dict__.update(values)
    return out


def _defaults(cls: type) -> dict[str, Any] | None:
    """Each field's default, in field order, of a class _build can build without __init__ (else None)."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        fields = dataclasses.fields(cls)
        if any(f.default is dataclasses.MISSING for f in fields) or hasattr(cls, "__post_init__"):
            return None
        defaults = _DEFAULTS[cls] = {f.name: f.default for f in fields}
    return defaults


def _built(cls: type[R], fields: dict[str, Any]) -> R:
    """_build(cls, **fields) where `fields` is already every field's value in field order (_defaults(cls) updated
    with known fields only): the same instance, for a caller that builds many from one template (or, of any frozen
    record without __post_init__, such as comm.Collective, every field given in field order)."""
    out = object.__new__(cls)
    out.__dict__.update(fields)
    return out


_DEFAULTS: dict[type, dict[str, Any]] = {}  # _build's defaults per class


def check_degrees(**named: object) -> None:
    """Each value a whole number >= 1: '--tp must be a whole number >= 1, got 0'."""
    for name, value in named.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LlmcalcError(f"{name} must be a whole number >= 1, got {value!r}")


def check_zero(zero: int) -> None:
    if zero not in (0, 1, 2, 3):
        raise LlmcalcError(f"--zero must be 0, 1, 2 or 3, got {zero}")


def check_heads(spec: ModelSpec, tp: int) -> None:
    """The training TP rule: tp divides the query heads, and the key/value heads either split evenly over the
    tp ranks or each is replicated on tp / kv of them (tp a multiple of the KV heads; Megatron-LM)."""
    kv = spec.n_kv_heads
    if spec.n_heads % tp or kv % tp and tp % kv:
        valid = [t for t in range(1, spec.n_heads + 1) if spec.n_heads % t == 0 and (kv % t == 0 or t % kv == 0)]
        raise LlmcalcError(f"tp={tp} does not divide the heads ({spec.n_heads} query, {kv} key/value): --tp must "
                           f"divide the {plural(spec.n_heads, 'attention head')} and divide (or be a multiple of) the "
                           f"{plural(kv, 'KV head')}; the nearest valid --tp: {nearest_of(tp, valid)}")


def check_stages(spec: ModelSpec, pp: int, vpp: int = 1, *, equal: bool = False) -> None:
    """Pipeline stages (pp x vpp) against the layers: no stage without a layer; `equal`: the layers split evenly
    over the pp stages (what training memory models; the step model splits unevenly, as Llama 3 did)."""
    if equal and spec.n_layers % pp:
        raise LlmcalcError(f"pp={pp} does not divide {spec.n_layers} layers into equal stages")
    if pp * vpp > spec.n_layers:
        raise LlmcalcError(f"{pp * vpp} pipeline stages (pp x chunks) exceed the model's {spec.n_layers} layers")


def check_experts(spec: ModelSpec, ep: int, etp: int, folded: int, folded_name: str = "tp x cp x dp") -> None:
    """Expert parallelism (ep) and expert tensor parallelism (etp) over `folded` ranks (tp x cp x dp): one line
    naming the fix."""
    if not spec.is_moe or not spec.d_ff_expert:
        raise LlmcalcError(f"--ep/--etp need a mixture-of-experts model; {spec.name} is dense")
    if spec.n_experts % ep:
        raise LlmcalcError(f"--ep {ep} must divide the {spec.n_experts} routed experts")
    if spec.d_ff_expert % etp:
        raise LlmcalcError(f"--etp {etp} must divide the expert width ({spec.d_ff_expert})")
    if folded % (ep * etp):
        raise LlmcalcError(f"ep x etp = {ep} x {etp} must divide {folded_name} = {folded} (experts fold over those "
                           f"ranks); use smaller --ep/--etp or more GPUs")
