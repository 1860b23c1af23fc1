"""llmcalc: parameters, FLOPs, memory, time and cost of Transformer language models.

The public Python API. Importing llmcalc loads no heavy library (torch, pandas, matplotlib).
"""

from .analytic.params import Approximation, ParamCount, approximations, count_params, param_breakdown, reconcile
from .errors import LlmcalcError
from .hfconfig import spec_from_hf
from .presets import PresetError, hardware_names, load_model, model_names
from .spec import ModelSpec, SpecError, spec_from_dict
from .units import UnitError, parse_count, parse_length

__version__ = "0.1.0"

__all__ = [
    "Approximation", "LlmcalcError", "ModelSpec", "ParamCount", "PresetError", "SpecError", "UnitError",
    "approximations", "count_params", "hardware_names", "load_model", "model_names", "param_breakdown",
    "parse_count", "parse_length", "reconcile", "spec_from_dict", "spec_from_hf",
]
