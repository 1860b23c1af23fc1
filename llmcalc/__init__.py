"""llmcalc: parameters, FLOPs, memory, time and cost of Transformer language models.

The public Python API. Importing llmcalc loads no heavy library (torch, pandas, matplotlib), and none of its
own modules either: each name below is imported on first use (PEP 562), so that `llmcalc --version`, `--help`
and the commands that read no model start without the spec and formula modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_API = {
    "Approximation": ".analytic.params", "ParamCount": ".analytic.params", "approximations": ".analytic.params",
    "count_params": ".analytic.params", "param_breakdown": ".analytic.params", "reconcile": ".analytic.params",
    "LlmcalcError": ".errors",
    "ModelSpec": ".spec", "PresetError": ".spec", "SpecDraft": ".spec", "SpecError": ".spec",
    "hardware_names": ".spec", "load_model": ".spec", "model_names": ".spec", "resolve": ".spec",
    "spec_from_dict": ".spec", "spec_from_hf": ".spec", "spec_of": ".spec",
    "UnitError": ".units", "parse_count": ".units", "parse_length": ".units",
}

__all__ = [
    "Approximation", "LlmcalcError", "ModelSpec", "ParamCount", "PresetError", "SpecDraft", "SpecError", "UnitError",
    "approximations", "count_params", "hardware_names", "load_model", "model_names", "param_breakdown",
    "parse_count", "parse_length", "reconcile", "resolve", "spec_from_dict", "spec_from_hf", "spec_of",
]  # = sorted(_API) (tests/test_imports.py)

if TYPE_CHECKING:
    from .analytic.params import Approximation, ParamCount, approximations, count_params, param_breakdown, reconcile
    from .errors import LlmcalcError
    from .spec import (
        ModelSpec,
        PresetError,
        SpecDraft,
        SpecError,
        hardware_names,
        load_model,
        model_names,
        resolve,
        spec_from_dict,
        spec_from_hf,
        spec_of,
    )
    from .units import UnitError, parse_count, parse_length


def __getattr__(name: str) -> Any:
    if name in _API:
        from importlib import import_module

        value = getattr(import_module(_API[name], __name__), name)
        globals()[name] = value  # once: later lookups find it without this hook
        return value
    raise AttributeError(f"module 'llmcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
