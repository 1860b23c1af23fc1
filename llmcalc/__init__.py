"""llmcalc: parameters, FLOPs, memory, time and cost of Transformer language models.

``params``, ``flops``, ``memory``, ``train``, ``layout``, ``serve``: one function per command, each taking what the
command takes (keyword arguments named like its options: ``n_gpus=64`` for ``--n-gpus 64``) and returning the record
its ``--format json`` prints. A model is a preset name (``model_names()``), a path to a config.json or the config as
a dict; a GPU a preset name (``hardware_names()``). Bad input raises ``LlmcalcError``; warnings are
``LlmcalcWarning``s.

The model itself: ``load_model`` (a ``ModelSpec``), ``spec_of``, ``spec_from_dict``, ``spec_from_hf``, ``resolve``
(a ``SpecDraft``); ``count_params`` (a ``ParamCount``), ``param_breakdown``, ``approximations``, ``reconcile``;
``parse_count``, ``parse_length``. The records and errors (``ModelSpec``, ``SpecDraft``, ``ParamCount``,
``Approximation``, ``LlmcalcError``, ``SpecError``, ``PresetError``, ``UnitError``, ``LlmcalcWarning``) are here
too: ``help(llmcalc.ModelSpec)``. docs/architecture.md names the function behind every figure.

Importing llmcalc loads no heavy library and none of its modules: each name is imported on first use (PEP 562).
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
    "LlmcalcWarning": ".api", "flops": ".api", "layout": ".api", "memory": ".api", "params": ".api", "serve": ".api",
    "train": ".api",
}

# What help(llmcalc) documents and `from llmcalc import *` binds: the functions. The records and errors of _API
# (classes) are reached by name; their help is long (help(llmcalc.ModelSpec)).
__all__ = [
    "approximations", "count_params", "flops", "hardware_names", "layout", "load_model", "memory", "model_names",
    "param_breakdown", "params", "parse_count", "parse_length", "reconcile", "resolve", "serve", "spec_from_dict",
    "spec_from_hf", "spec_of", "train",
]  # = sorted(the functions of _API) (tests/test_imports.py)

if TYPE_CHECKING:  # the classes re-exported by name (`X as X`), outside __all__
    from .analytic.params import Approximation as Approximation
    from .analytic.params import ParamCount as ParamCount
    from .analytic.params import approximations, count_params, param_breakdown, reconcile
    from .api import LlmcalcWarning as LlmcalcWarning
    from .api import flops, layout, memory, params, serve, train
    from .errors import LlmcalcError as LlmcalcError
    from .spec import ModelSpec as ModelSpec
    from .spec import PresetError as PresetError
    from .spec import SpecDraft as SpecDraft
    from .spec import SpecError as SpecError
    from .spec import hardware_names, load_model, model_names, resolve, spec_from_dict, spec_from_hf, spec_of
    from .units import UnitError as UnitError
    from .units import parse_count, parse_length


def __getattr__(name: str) -> Any:
    if name in _API:
        from importlib import import_module

        value = getattr(import_module(_API[name], __name__), name)
        globals()[name] = value  # once: later lookups find it without this hook
        return value
    raise AttributeError(f"module 'llmcalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
