"""Models llmcalc has no formula for, counted with transformers' modelling code (torch-free side).

``load_counted`` returns a ``ModelSpec`` for every model_type with an analytic family, and a
``FallbackModel`` for any other model_type that the installed transformers can build (``count_model`` and
``model_flops`` answer `params` and `flops` for either): its numbers
come from ``llmcalc.profiling.hf_fallback`` (parameters of the model built on fake tensors, forward
FLOPs from torch's FlopCounterMode), imported only here and only then, so the analytic path never
imports torch. Results are cached on disk per (config, seq_len, transformers, torch, hf_fallback
source) under ``$LLMCALC_CACHE_DIR`` (default ``~/.cache/llmcalc``), so a repeated call does not
rebuild the model.

``load_measured`` returns, for such a model, a ``MeasuredModel`` (analytic/measured.py) of what `memory`
needs, measured by ``llmcalc.profiling.hf_measure`` on the model transformers built, cached the same way.

``LLMCALC_FORCE_TRANSFORMERS=1`` in the environment sends every model, those with a formula too, through
transformers (to hold the two paths against each other, or to time the fallback on a config llmcalc knows).
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analytic.params import BreakdownTotals, ParamCount
from .errors import LlmcalcError
from .records import dataclass
from .spec import ModelSpec, UnknownModelType

if TYPE_CHECKING:
    from .analytic.finetune import Finetune, FinetuneFlops, LoraConfig
    from .analytic.flops import StepFlops
    from .analytic.measured import MeasuredModel
    from .analytic.training import FlopsBasis, TrainRequest

METHOD_ANALYTIC, METHOD_TRANSFORMERS = "analytic", "transformers"
INSTALL = "pip install 'llmcalc[dev]' (or: pip install transformers torch)"
# config keys that name the routed experts per token (k) and per MoE layer (E), per transformers family
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k", "num_selected_experts")
N_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


@dataclass
class FallbackModel(BreakdownTotals):
    """A model counted by transformers' modelling code; `counted` is hf_fallback.fallback_count's dict."""

    name: str
    model_type: str
    config: dict
    counted: dict
    flops: dict | None = None  # forward FLOPs of one sequence (hf_fallback._flops), when asked
    notes: list[str] = field(default_factory=list)
    no_formula: str | None = None  # a known model_type with a part no formula covers: what (UnknownModelType.note)
    components: dict[str, int] = field(init=False)  # the counted breakdown ("group/part" -> count)

    def __post_init__(self) -> None:
        self.components = self.counted["components"]

    @property
    def cls(self) -> str:
        return self.counted["class"]

    @property
    def routing(self) -> tuple[int, int] | None:
        """(k routed experts per token, E experts per MoE layer) from the config, if it is a MoE."""
        if not self.components.get("moe/experts"):
            return None
        k = next((self.config[key] for key in TOP_K_KEYS if isinstance(self.config.get(key), int)), None)
        e = next((self.config[key] for key in N_EXPERT_KEYS if isinstance(self.config.get(key), int)), None)
        return (k, e) if k and e and k <= e else None

    @property
    def active_per_token(self) -> int | None:
        """Total minus the routed experts a token skips: experts x (1 - k/E); None where k, E are unknown."""
        if not self.components.get("moe/experts"):
            return self.total
        if self.routing is None:
            return None
        k, e = self.routing
        return self.total - self.components["moe/experts"] * (e - k) // e

    def describe(self) -> str:
        return (f"model_type {self.model_type}, counted by transformers {self.counted['transformers_version']} "
                f"({self.cls}, no weights), not by a formula")

    def train_basis(self, request: TrainRequest) -> FlopsBasis:
        """`train`'s FLOPs for this model: 3 x the counted forward per token x tokens; N of 6·N·T counted on the
        same model (unknown for a MoE config that names no top-k and expert count: refused)."""
        from .analytic.training import FlopsBasis

        refuse_finetune(self, request.finetune.config())
        step = step_flops(self, 1, request.causal, request.recompute)
        n = self.active_per_token
        if n is None:
            raise LlmcalcError(f"{self.model_type}: the config names no top-k and expert count, so the active "
                               "parameters per token (N of 6·N·T) are unknown")
        why = self.no_formula or f"no llmcalc formula for {self.model_type}"
        text = (f"training FLOPs = 3 x forward FLOPs per token counted by torch's FlopCounterMode on transformers' "
                f"{self.cls} at seq {request.seq_len} ({request._s2()}; {why}) x "
                f"tokens; 6·N·T with N = {n:,} {'active ' if n != self.total else ''}params counted on the same model")
        return FlopsBasis(step["flops_per_token"] * request.tokens, step["hardware_flops_per_token"] * request.tokens,
                          n, text, method=METHOD_TRANSFORMERS)


def need_libraries() -> None:
    missing = [m for m in ("transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise LlmcalcError(f"llmcalc has no formula for this model_type, and counting it with transformers' "
                           f"modelling code needs {' and '.join(missing)}: {INSTALL}")


# the modules whose code makes a measured record: a change to any of them measures again
RECORD_SOURCES = ("hf_fallback", "hf_measure", "hf_shorten", "counters")


def installed() -> dict[str, str | None]:
    """The transformers and torch a record is measured with (their metadata: nothing imported)."""
    from .errors import installed_version

    return {"transformers_version": installed_version("transformers"), "torch_version": installed_version("torch")}


def _cache_path(config: dict, seq_len: int | None, measured: bool = False) -> Path | None:
    import hashlib  # here, not at start-up: only a model transformers counts has a cache entry

    versions = installed()
    if None in versions.values():
        return None
    sources = [Path(__file__).resolve().parent / "profiling" / f"{name}.py" for name in RECORD_SOURCES]
    digest = [hashlib.sha256(source.read_bytes()).hexdigest() for source in sources]
    key = json.dumps([config, seq_len, list(versions.values()), digest] + (["measured"] if measured else []),
                     sort_keys=True)
    root = Path(os.environ.get("LLMCALC_CACHE_DIR") or Path.home() / ".cache" / "llmcalc")
    return root / "hf_fallback" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _cached(path: Path | None) -> dict | None:
    """The record at `path`, where it is whole and was measured with the transformers and torch installed now
    (each record names both); else None: measure again."""
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    now = installed()
    if not isinstance(record, dict) or any(record.get(k) != v.split("+")[0] for k, v in now.items() if v):
        return None
    return record


def fallback_count(config: dict, seq_len: int | None = None, measured: bool = False) -> dict:
    """hf_fallback.fallback_count, cached on disk (a damaged or unwritable cache is ignored, a record of another
    transformers or torch measured again); a config beyond the formula path's sane maxima is refused first, as the
    formula path refuses it (nothing is built). An exception transformers raises while llmcalc builds or runs the
    model is one line naming the step and the tested transformers releases (errors.MeasurementFailed)."""
    from .spec import check_sizes

    check_sizes(config)
    need_libraries()
    path = _cache_path(config, seq_len, measured)
    record = _cached(path)
    if record is not None:
        return record
    from .render.progress import activity

    with activity(f"building {config.get('model_type')} with transformers (first time only; cached after)"):
        counted = _measure(config, seq_len, measured)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(counted))
            tmp.replace(path)
        except OSError:
            pass
    return counted


def _measure(config: dict, seq_len: int | None, measured: bool) -> dict:
    from .errors import MeasurementFailed
    from .profiling.hf_fallback import fallback_count as count

    try:
        return count(config, seq_len, measured)
    except (LlmcalcError, MemoryError, RecursionError):
        raise
    except Exception as exc:  # raised outside the steps hf_fallback names (a bug of llmcalc or of transformers)
        if os.environ.get("LLMCALC_DEBUG"):
            raise
        text = str(exc).strip().splitlines()
        raise MeasurementFailed("measure", f"measuring {config.get('model_type')!r} with transformers failed",
                                f"{type(exc).__name__}: {text[0] if text else ''}"[:300]) from None


def _fallback_config(exc: UnknownModelType) -> tuple[dict, str | None]:
    """The config transformers is to build ("_source" and notes dropped), and a note when its text_config is ignored:
    the language model read from text_config (a multimodal checkpoint), unless transformers' config class of the
    model_type as given has no text_config sub-config; then the top-level keys are the model, as transformers builds
    it (a persimmon config carrying a text_config key is a persimmon model)."""
    chosen, note = exc.config, None
    if exc.outer is not None:
        need_libraries()
        from .profiling.hf_fallback import has_text_config, text_model_type

        model_type = exc.outer.get("model_type")
        if has_text_config(model_type) is False:  # built without it: transformers 5.25 would read the dict as the
            # text config when it sets up generation ('dict' object has no attribute 'to_dict'), nothing else
            chosen = {k: v for k, v in exc.outer.items() if k != "text_config"}
            note = (f"text_config ignored: transformers' {model_type} config has no text_config sub-config, so the "
                    f"top-level keys are the model, as its modelling code builds it")
        elif chosen.get("model_type") == model_type and (text := text_model_type(model_type)) is not None:
            # a text_config that names no model_type (MiniMax-M3's) is the wrapper's text config class, not the
            # wrapper: built as the outer class, its keys would be ignored for the class defaults
            chosen = {**chosen, "model_type": text}
    return {k: v for k, v in chosen.items() if not k.startswith("_")}, note


def fallback_model(exc: UnknownModelType, seq_len: int | None = None) -> FallbackModel:
    config, note = _fallback_config(exc)
    counted = fallback_count(config, seq_len)
    model = FallbackModel(exc.name, str(config.get("model_type")), config, counted, counted.get("flops"),
                          no_formula=exc.note)
    model.notes.extend(n for n in (exc.note, note) if n)
    if counted.get("real_forward"):
        from .analytic.measured import real_forward_note

        model.notes.append(real_forward_note(counted["real_forward"]))
    if model.components.get("moe/experts") and model.active_per_token is None:
        model.notes.append("active_per_token not derived: the config names no top-k and expert count "
                           f"({'/'.join(TOP_K_KEYS[:2])}, {'/'.join(N_EXPERT_KEYS[:2])})")
    return model


FORCE_ENV = "LLMCALC_FORCE_TRANSFORMERS"


def forced() -> bool:
    """Whether $LLMCALC_FORCE_TRANSFORMERS asks for transformers on every model (1, true or yes)."""
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes")


def _load(name_or_path: str) -> ModelSpec:
    """load_model, or under $LLMCALC_FORCE_TRANSFORMERS the UnknownModelType of any config (carrying it)."""
    from .spec import SpecError, check_sizes, load_model, model_config, read_json
    from .spec.presets import config_name, locate, looks_like_path, model_name
    from .spec.quantization import check_quantization_config

    if not forced():
        return load_model(name_or_path)
    name_or_path = locate(name_or_path)
    if looks_like_path(name_or_path):
        path = Path(name_or_path)
        path = path / "config.json" if path.is_dir() else path
        config, name = read_json(path), config_name(path)
        try:
            check_sizes(config)
        except SpecError as exc:  # as load_model words it
            raise SpecError(f"{path}: {exc}") from None
    else:
        config, name = model_config(name_or_path), model_name(name_or_path)
    if isinstance(config, dict):  # the config as read: its quantization_config checked as draft_from_hf checks it
        check_quantization_config(config.get("quantization_config"))
    raise UnknownModelType(f"{FORCE_ENV} is set", config, name or "config")


def load_counted(name_or_path: str, seq_len: int | None = None):
    """A ModelSpec (analytic), or a FallbackModel for a model_type only transformers knows."""
    try:
        return _load(name_or_path)
    except UnknownModelType as exc:
        return fallback_model(exc, seq_len)


def load_measured(name_or_path: str, seq_len: int | None) -> ModelSpec | MeasuredModel:
    """A ModelSpec (analytic), or for a model_type only transformers knows what it measured (with `seq_len`, the
    activations of a training forward of that length too)."""
    try:
        return _load(name_or_path)
    except UnknownModelType as exc:
        from .analytic.measured import MeasuredModel

        config, _ = _fallback_config(exc)
        counted = fallback_count(config, seq_len, measured=True)
        k = next((config[key] for key in TOP_K_KEYS if isinstance(config.get(key), int)), None)
        longest = config.get("max_position_embeddings")
        measured = MeasuredModel.from_counted(exc.name, str(config.get("model_type")), counted, experts_per_token=k,
                                              max_seq_len=longest if isinstance(longest, int) else None,
                                              quantized=config.get("quantization_config") is not None,
                                              quantization_config=qc if isinstance(
                                                  qc := config.get("quantization_config"), dict) else None)
        if exc.note:  # a known model_type with a part no formula covers: said once, under every answer
            measured.notes.append(exc.note)
        return measured


def step_flops(model: FallbackModel, batch: int, causal: bool, recompute: str) -> dict:
    """One training step from the counted forward, in llmcalc's conventions: backward = 2 x forward
    (as the analytic path), batch scales linearly (matmul FLOPs are linear in the batch), --causal
    halves the self-attention core that the counter saw (sdpa kernels or an eager attention's bmm;
not an encoder's, nor cross-attention, as the analytic --causal), full
    recomputation adds one forward to the hardware FLOPs. Selective recomputation needs the split of
    each block's ops, which a counted forward does not give."""
    counted = model.flops
    assert counted is not None, "a FallbackModel loaded without FLOPs"  # narrows the Optional for mypy
    if recompute == "selective":
        raise LlmcalcError(f"--recompute selective needs llmcalc's per-op formula; {model.model_type} is counted "
                           "by transformers (use none or full)")
    halved = ("attention S²", "decoder.attention S²")  # self-attention that can be causal; never the encoder's
    if causal and not any(counted["groups"].get(k) for k in halved):
        raise LlmcalcError(f"--causal: no causal self-attention core was seen in {model.cls}'s forward to halve")
    groups = {k: batch * (v // 2 if causal and k in halved else v) for k, v in counted["groups"].items()}
    forward = sum(groups.values())
    recompute_flops = forward if recompute == "full" else 0
    tokens = batch * counted["seq_len"]
    return {"tokens": tokens, "forward_flops": forward, "backward_flops": 2 * forward, "total_flops": 3 * forward,
            "recompute_flops": recompute_flops, "hardware_flops": 3 * forward + recompute_flops,
            "flops_per_token": 3 * forward / tokens, "forward_flops_per_token": forward / tokens,
            "hardware_flops_per_token": (3 * forward + recompute_flops) / tokens, "groups": groups}


# --- `params` and `flops` for either kind of model ------------------------------------------------------------


def refuse_finetune(model: FallbackModel, cfg: LoraConfig | None) -> None:
    """--finetune adapts the linears llmcalc's formula knows; a counted model has none."""
    if cfg is not None:
        raise LlmcalcError(f"--finetune needs llmcalc's formula for the layers it adapts; {model.model_type} is "
                           "counted by transformers' modelling code")


def count_model(model: ModelSpec | FallbackModel,
                cfg: LoraConfig | None = None) -> tuple[ParamCount | FallbackModel, Finetune | None]:
    """`params`: the exact count (and, with a LoRA set-up, its adapters), or the model transformers counted."""
    if isinstance(model, FallbackModel):
        refuse_finetune(model, cfg)
        return model, None
    from .analytic.params import count_params

    count = count_params(model)
    if cfg is None:
        return count, None
    from .analytic.finetune import finetune

    return count, finetune(model, cfg)


@dataclass(frozen=True)
class FallbackStep:
    """One training step of a counted model (`step_flops`' totals), as `flops` prints it."""

    model: FallbackModel
    batch: int
    causal: bool
    recompute: str
    totals: dict[str, Any]


@dataclass(frozen=True)
class AnalyticStep:
    """One training step by llmcalc's formula, the parameter count its rules of thumb use, and with a LoRA
    set-up the fine-tuning step."""

    step: StepFlops
    count: ParamCount
    finetune: FinetuneFlops | None = None


def model_flops(model: ModelSpec | FallbackModel, batch: int, seq_len: int, causal: bool = False,
                recompute: str = "none", decoder_seq_len: int | None = None,
                cfg: LoraConfig | None = None) -> AnalyticStep | FallbackStep:
    """`flops`: one step of `batch` sequences of `seq_len` tokens (decoder tokens apart for encoder-decoders)."""
    if isinstance(model, FallbackModel):
        refuse_finetune(model, cfg)
        if decoder_seq_len is not None:
            raise LlmcalcError(f"--decoder-seq-len: {model.model_type} is counted by transformers' modelling code, "
                               "which runs the decoder on --seq-len tokens")
        return FallbackStep(model, batch, causal, recompute, step_flops(model, batch, causal, recompute))
    from .analytic.finetune import FinetuneFlops, finetune
    from .analytic.flops import step_flops as analytic_step
    from .analytic.params import count_params

    if decoder_seq_len is not None and model.architecture != "encoder-decoder":
        raise LlmcalcError(f"--decoder-seq-len is for encoder-decoder models; {model.name} is a {model.architecture}")
    step = analytic_step(model, batch, seq_len, causal=causal, recompute=recompute, decoder_seq_len=decoder_seq_len)
    count = count_params(model)
    return AnalyticStep(step, count, None if cfg is None else FinetuneFlops(finetune(model, cfg), step))


# --- `compare` (and every command that lines models up) for either kind of model -------------------------------


@dataclass(frozen=True)
class MeasuredPair:
    """A model without a formula as `compare` lines it up: what transformers counted (parameters, the forward's
    FLOPs at the scenario's length: `params`, `flops`) and measured (tensors, cache, activations: `memory`)."""

    counted: FallbackModel
    measured: MeasuredModel

    @property
    def name(self) -> str:
        return self.counted.name

    def describe(self) -> str:
        return self.counted.describe()

    def record(self, scenario) -> dict:
        """summary.model_record's figures for this model under `scenario` (analytic/summary.py:Scenario), from
        `flops`' counted step, `memory`'s measured estimate and `infer`'s measured cache and weights; memory is
        None where `memory` refuses the scenario (its message says why)."""
        from .analytic.measured_inference import tensor_bytes
        from .analytic.memory_plan import MemoryRequest, plan_memory
        from .analytic.training import TrainingEstimate

        counted, measured = self.counted, self.measured
        step = step_flops(counted, 1, scenario.causal, scenario.recompute)
        forward = step["forward_flops"]
        record = {
            "model": self.name, "params": counted.total, "active_params": counted.active_per_token,
            "non_embedding_params": counted.non_embedding,
            "forward_flops_per_token": step["forward_flops_per_token"],
            "training_flops_per_token": step["flops_per_token"],
            "attention_share": step["groups"].get("attention S²", 0) / forward if forward else 0.0,
            "kv_cache_bytes_per_token": sum(k.bytes_per_token for k in measured.kv_layers(scenario.kv_dtype)),
            "training_flops": step["flops_per_token"] * scenario.tokens,
            "weights_bytes": None if measured.quantized else sum(tensor_bytes(t, None, "bf16")
                                                                  for t in measured.tensors),
            "method": METHOD_TRANSFORMERS,
        }
        if scenario.gpu is None:
            return record
        est = TrainingEstimate(scenario.tokens, record["training_flops"],
                               step["hardware_flops_per_token"] * scenario.tokens, scenario.gpu,
                               dtype=scenario.dtype, n_gpus=scenario.n_gpus, mfu=scenario.mfu,
                               usd_per_gpu_hour=scenario.usd_per_gpu_hour, goodput=scenario.goodput)
        record.update(gpu_hours=est.gpu_hours, wall_clock_days=est.wall_clock_days, cost_usd=est.cost_usd)
        request = MemoryRequest(batch=scenario.micro_batch, seq_len=scenario.seq_len, recipe=scenario.recipe,
                                optimizer=scenario.optimizer, recompute=scenario.recompute,
                                n_gpus=scenario.n_gpus, zero=scenario.zero, tp=scenario.tp)
        try:
            peak = plan_memory(measured, request).estimate.peak
        except LlmcalcError:
            return record
        record.update(memory_per_gpu_bytes=peak, fits=peak <= scenario.gpu.memory_bytes)
        return record


def load_any(name_or_path: str, seq_len: int) -> ModelSpec | MeasuredPair:
    """A ModelSpec (analytic), or for a model_type only transformers knows both what it counted and what it
    measured at `seq_len` (`compare`: every model `params` and `memory` answer)."""
    try:
        return _load(name_or_path)
    except UnknownModelType as exc:
        measured = load_measured(name_or_path, seq_len)
        assert not isinstance(measured, ModelSpec)
        return MeasuredPair(fallback_model(exc, seq_len), measured)
