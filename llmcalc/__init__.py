"""llmcalc: parameters, FLOPs, memory, time and cost of Transformer language models.

The public Python API. Importing llmcalc loads no heavy library (torch, pandas, matplotlib).
"""

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

__version__ = "0.1.0"

__all__ = [
    "Approximation", "LlmcalcError", "ModelSpec", "ParamCount", "PresetError", "SpecDraft", "SpecError", "UnitError",
    "approximations", "count_params", "hardware_names", "load_model", "model_names", "param_breakdown",
    "parse_count", "parse_length", "reconcile", "resolve", "spec_from_dict", "spec_from_hf", "spec_of",
]
