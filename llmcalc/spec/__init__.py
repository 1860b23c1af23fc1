"""The description of a model: what a file says (``SpecDraft``), what the formulas read (``ModelSpec``,
resolved: plain ints), and where both come from (Hugging Face config.json, presets).

Modules, each importing only those above it: ``draft`` (the vocabulary and ``SpecDraft``), ``quantization``
(a config's quantization_config read and checked, once), ``checks`` (every rule, on a draft), ``model``
(``ModelSpec``, ``MLA``), ``resolve`` (derivations, ``resolve``, ``spec_of``, native spec dicts), ``hf_family`` /
``hf_keys`` / ``hf_layers`` / ``hf_ssm`` / ``hf_2026`` / ``hf_families`` / ``hf`` (config.json -> draft), ``presets``
(files under ``presets/``). Standard library only.
"""

from .draft import (
    ARCHITECTURES,
    GATED_MLPS,
    LAYER_FFNS,
    LAYER_MIXERS,
    MLPS,
    NORMS,
    PLAIN_MLPS,
    POS_EMBS,
    QK_NORMS,
    SpecDraft,
    SpecError,
)
from .hf import (
    FAMILIES,
    HF_KEYS,
    UnknownModelType,
    check_config_values,
    check_sizes,
    draft_from_hf,
    spec_from_hf,
)
from .model import MLA, ModelSpec
from .presets import (
    PresetError,
    find_accelerator,
    hardware_config,
    hardware_names,
    load_hardware,
    load_model,
    model_config,
    model_names,
    model_source,
    read_json,
)
from .resolve import draft_from_dict, resolve, spec_from_dict, spec_of

__all__ = [
    "ARCHITECTURES", "FAMILIES", "GATED_MLPS", "HF_KEYS", "LAYER_FFNS", "LAYER_MIXERS", "MLA", "MLPS", "NORMS",
    "PLAIN_MLPS", "POS_EMBS", "QK_NORMS", "ModelSpec", "PresetError", "SpecDraft", "SpecError", "UnknownModelType",
    "check_config_values", "check_sizes", "draft_from_dict", "draft_from_hf", "find_accelerator", "hardware_config",
    "hardware_names", "load_hardware", "load_model", "model_config", "model_names", "model_source", "read_json",
    "resolve", "spec_from_dict", "spec_from_hf", "spec_of",
]
