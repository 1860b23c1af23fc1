"""Find and load presets: presets/models/*.json (HF config.json + "_source") and presets/hardware/*.json.

Lookup is exact. An unknown name raises ``PresetError`` listing the closest names (difflib).
A model argument that names a file (or a directory holding config.json) is read from disk: either
a Hugging Face config.json or a native llmcalc spec (ModelSpec field names).
"""

from __future__ import annotations

from .errors import LlmcalcError

import difflib
import json
from functools import lru_cache
from pathlib import Path

from .hfconfig import spec_from_hf
from .spec import ModelSpec, SpecError, spec_from_dict


class PresetError(LlmcalcError):
    """An unknown preset name, a missing or unreadable file."""


def presets_dir() -> Path:
    """The presets folder: inside the installed package, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_presets", here.parent / "presets"):
        if (candidate / "models").is_dir():
            return candidate
    raise PresetError(f"presets folder not found next to {here}; reinstall llmcalc")


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in (presets_dir() / kind).glob("*.json"))


def model_names() -> list[str]:
    return _names("models")


def hardware_names() -> list[str]:
    return _names("hardware")


def _unknown(kind: str, name: str, known: list[str]) -> PresetError:
    close = difflib.get_close_matches(name.lower(), known, n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return PresetError(f"unknown {kind} preset {name!r}{hint} (`llmcalc presets` lists all {len(known)})")


def read_json(path: Path) -> dict:
    """A JSON object from disk, or one clear PresetError (missing file, bad JSON, not an object)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PresetError(f"no such file: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise PresetError(f"cannot read {path}: {exc.__class__.__name__}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PresetError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


@lru_cache(maxsize=None)
def _preset_json(kind: str, name: str) -> dict:
    path = presets_dir() / kind / f"{name}.json"
    if not path.is_file():
        raise _unknown("model" if kind == "models" else "hardware", name, _names(kind))
    return read_json(path)


def model_config(name: str) -> dict:
    """The raw preset dict (HF keys and "_source") of a model preset."""
    return dict(_preset_json("models", name))


def hardware_config(name: str) -> dict:
    return dict(_preset_json("hardware", name))


def looks_like_path(text: str) -> bool:
    return text.endswith(".json") or "/" in text or "\\" in text or Path(text).is_dir()


def spec_from_config(config: dict, name: str) -> ModelSpec:
    """A ModelSpec from a dict that is either an HF config.json or a native llmcalc spec."""
    if "model_type" not in config and "n_layers" in config:
        return spec_from_dict(config, name)
    return spec_from_hf(config, name)


def load_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec from a preset name, a config.json path, or a directory holding config.json."""
    if looks_like_path(name_or_path):
        path = Path(name_or_path)
        if path.is_dir():
            path = path / "config.json"
        config = read_json(path)
        name = path.parent.name if path.name == "config.json" else path.stem
        try:
            return spec_from_config(config, name or "config")
        except SpecError as exc:
            exc.args = (f"{path}: {exc}",)  # keeps the type: UnknownModelType carries the config on
            raise
    return spec_from_config(model_config(name_or_path), name_or_path)


def model_source(name_or_path: str) -> str:
    """Where a model's numbers come from: the preset's _source, or the file path."""
    if looks_like_path(name_or_path):
        return str(Path(name_or_path))
    return str(model_config(name_or_path).get("_source", ""))


def load_hardware(name: str):
    """An Accelerator from a hardware preset name (exact; unknown names get suggestions)."""
    from .hardware import accelerator_from_preset

    return accelerator_from_preset(name, hardware_config(name))


def find_accelerator(device_name: str):
    """The hardware preset whose `device_names` include what the driver reports (e.g.
    torch.cuda.get_device_name(): "NVIDIA H100 80GB HBM3"), or None."""
    wanted = device_name.strip().lower()
    for name in hardware_names():
        names = [n.lower() for n in hardware_config(name).get("device_names", [])]
        if wanted in names:
            return load_hardware(name)
    return None
