"""`llmcalc report`: the request's refusals (before any work), the build with its progress bar, the atomic
write, and one outcome: the report, or the interrupt with what is on disk.

The measured sections come from a ``Profiler`` the caller passes (``llmcalc.profiling.run.ReportProfiles``):
the report package never imports the profiler.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import Interrupted, LlmcalcError
from ..records import dataclass
from ..spec import ModelSpec
from .workload import ServingWorkload

if TYPE_CHECKING:
    from ..analytic.finetune import LoraConfig
    from ..analytic.summary import Scenario
    from ..render.progress import Progress
    from ..results import ProfileResult
    from .document import Report


class Profiler(Protocol):
    """What the report measures besides its formulas (llmcalc.profiling.run.ReportProfiles)."""

    def steps(self, n_models: int) -> int: ...

    def check_size(self, specs: list[ModelSpec]) -> None: ...

    def check_sharded(self, specs: list[ModelSpec]) -> None: ...

    def profiles(self, specs: list[ModelSpec], recipe: str,
                 progress: Progress) -> dict[str, ProfileResult] | None: ...

    def sharded(self, specs: list[ModelSpec], progress: Progress) -> dict[str, dict[str, Any]] | None: ...


def need_report_libraries() -> None:
    missing = [m for m in ("pandas", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise LlmcalcError(f"reports need {' and '.join(missing)}: pip install 'llmcalc[report]'")


@dataclass(frozen=True)
class ReportRequest:
    """Where the report goes and which optional sections it has; `argv`: the command line as typed (the
    report's provenance)."""

    models: tuple[str, ...]  # as typed: where each preset comes from
    out: str | None = None  # default: reports/<model names>
    force: bool = False
    serve: bool = False
    finetune: LoraConfig | None = None
    serve_work: ServingWorkload | None = None  # the traffic --serve sizes for
    given_layout: bool = False  # --plan-layout given
    argv: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.out is not None and not self.out.strip():
            raise LlmcalcError("--out is empty; give a directory for the report (default: reports/<model names>)")
        need_report_libraries()


def run_report(request: ReportRequest, specs: list, scenario: Scenario, profiler: Profiler,
               announce: Callable[[Path, list[str]], None]) -> None:
    """Check, build and write the report; `announce(folder, files)` says so, only if no signal came first
    (one outcome, one message). Run it under ``interrupts.signals_as_interrupts``."""
    from ..spec import model_source
    from .document import check_destination, outcome, provenance, safe_name, write_report
    from .interrupts import interrupt_behind

    _check(request, specs, profiler)
    target = Path(request.out) if request.out else Path("reports") / "+".join(safe_name(s.name) for s in specs)
    check_destination(target, request.force)
    sources = {s.name: model_source(m) for s, m in zip(specs, request.models, strict=True)}
    meta = provenance(request.argv, sources, scenario)
    formula = [s for s in specs if isinstance(s, ModelSpec)]  # the rest: fallback.MeasuredPair
    try:
        built = _build(request, formula, scenario, profiler, sources=sources, meta=meta,
                       measured=[s for s in specs if not isinstance(s, ModelSpec)])
        _finish(write_report(built, target, request.force, meta), built, announce)
    except (Interrupted, Exception) as exc:  # an error raised while an interrupt unwound is that interrupt
        interrupt = interrupt_behind(exc)
        if interrupt is None:
            raise
        interrupt.state = interrupt.state or outcome(target, meta)  # write_report says when it knows
        raise interrupt from None


def _check(request: ReportRequest, specs: list, profiler: Profiler) -> None:
    """Refuse, before any work, what the report cannot take: a model named twice, a profile this machine cannot
    run, a fine-tuning set-up or a sharded profile a model cannot take (models with a formula: the others have
    their own section, without these)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise LlmcalcError(f"models must differ; got {', '.join(request.models)}")
    specs = [s for s in specs if isinstance(s, ModelSpec)]
    profiler.check_size(specs)
    if request.finetune is not None:
        from ..analytic.finetune import finetune

        for spec in specs:
            finetune(spec, request.finetune)  # a target set that adapts no linear of the model is refused
    profiler.check_sharded(specs)


def _build(request: ReportRequest, specs: list[ModelSpec], scenario: Scenario, profiler: Profiler,
           sources: dict[str, str], meta: dict[str, Any], measured: list) -> Report:
    """The report's blocks, with a progress bar over its sections and measurements."""
    from ..render.progress import Progress
    from ..spec import load_hardware
    from .planning import Extras, build_report

    steps = 6 + request.serve + (request.finetune is not None) + profiler.steps(len(specs))
    progress = Progress(steps, "report")
    try:
        profiles = profiler.profiles(specs, scenario.recipe, progress)
        sharded = profiler.sharded(specs, progress)
        extras = Extras(profiles=profiles, serve=request.serve, finetune=request.finetune, sharded=sharded,
                        measured=measured, serve_work=request.serve_work, given_layout=request.given_layout)
        return build_report(specs, sources, scenario, load_hardware, progress=progress, meta=meta, extras=extras)
    finally:
        progress.close()


def _finish(written: Path, built: Report, announce: Callable[[Path, list[str]], None]) -> None:
    """Announce the report only when no signal came: success from then on, a later signal cannot turn it into a
    second message."""
    from .document import MARKER
    from .interrupts import checkpoint, settle, signal_pending, signals_deferred

    with signals_deferred():
        checkpoint()  # one that came earlier and whose exception Python dropped
        if not signal_pending():
            settle()
            announce(written, sorted(["report.md", "report.html", MARKER, *built.files]))
