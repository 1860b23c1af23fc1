"""Find and load presets: presets/models/*.json (HF config.json + "_source") and presets/hardware/*.json.

Lookup ignores case, and a Hugging Face repo id finds its preset: the one whose ``_source`` names it
(``meta-llama/Meta-Llama-3-8B``), or a published checkpoint of the same architecture listed in
``presets/checkpoints.json`` (instruct, chat and base variants: ``meta-llama/Llama-3.1-8B-Instruct``), with the
config keys that checkpoint changes applied. An unknown name raises ``PresetError`` listing the closest names
(difflib); an unknown repo id says so and how to pass its config.json (the hub is never reached).
A model argument that names a file (or a directory holding config.json) is read from disk: either
a Hugging Face config.json or a native llmcalc spec (SpecDraft field names). Only regular files are
read, at most ``MAX_CONFIG_BYTES``, in UTF-8 or UTF-16/32 (JSON's own encoding detection).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LlmcalcError
from ..records import dataclass
from ..units import GIB
from ..validate import GPU_MEMORY
from .draft import SpecError
from .hf import spec_from_hf
from .hubcache import cached_file, name_of, repo_from_url
from .model import ModelSpec
from .resolve import spec_from_dict

if TYPE_CHECKING:  # imported where used: hardware is not needed to read a model
    from ..hardware import Accelerator


class PresetError(LlmcalcError):
    """An unknown preset name, a missing or unreadable file."""


@cache
def presets_dir() -> Path:
    """The presets folder: inside the installed package, or at the top of a source checkout (found once)."""
    here = Path(__file__).resolve().parent.parent  # llmcalc/, this module being llmcalc/spec/presets.py
    for candidate in (here / "_presets", here.parent / "presets"):
        if (candidate / "models").is_dir():
            return candidate
    raise PresetError(f"presets folder not found next to {here}; reinstall llmcalc")


@cache
def _listed(kind: str) -> tuple[str, ...]:  # read once: `presets` resolves ~90 names, each against the list
    return tuple(sorted(p.stem for p in (presets_dir() / kind).glob("*.json")))


def _names(kind: str) -> list[str]:
    return list(_listed(kind))


def model_names() -> list[str]:
    return _names("models")


def hardware_names() -> list[str]:
    return _names("hardware")


MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few KiB; anything this big is not one


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _unknown(kind: str, name: str, known: list[str]) -> PresetError:
    if not name.strip():
        return PresetError(f"give a {kind} preset name (`llmcalc presets` lists all {len(known)})")
    key = name.strip().lower()[:100]
    # names that start with what was typed come first (h100 -> h100-sxm, h100-nvl before h200), then difflib's
    import difflib  # only for a name that is not known: not at every start-up

    prefixed = [k for k in known if k.startswith(key)] if len(key) >= 2 else []
    close = list(dict.fromkeys(prefixed + difflib.get_close_matches(key, known, n=4, cutoff=0.5)))[:4]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return PresetError(f"unknown {kind} preset {_shown(name)}{hint} (`llmcalc presets` lists all {len(known)})")


def read_json(path: Path) -> dict:
    """A JSON object from a regular file of at most MAX_CONFIG_BYTES, or one clear PresetError
    (missing, unreadable, a FIFO or device, too big, not JSON, too deeply nested, not an object)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder without config.json" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise PresetError(f"cannot read {_shown(str(path))}: {kind}")
        if info.st_size > MAX_CONFIG_BYTES:
            raise PresetError(f"{_shown(str(path))} is {info.st_size:,} bytes; a config.json is at most "
                              f"{MAX_CONFIG_BYTES:,}")
        with open(path, "rb") as handle:
            # what the size says, and one byte more to see a file that grew since: read(MAX + 1) at once would
            # allocate 16 MiB for every few-KiB preset (`presets` reads ~110 of them)
            raw = handle.read(min(info.st_size, MAX_CONFIG_BYTES) + 1)
            if len(raw) > info.st_size:  # it grew (or says 0, as /proc files do): the rest, up to MAX + 1 in all
                raw += handle.read(MAX_CONFIG_BYTES + 1 - len(raw))
    except FileNotFoundError:
        raise PresetError(f"no such file: {_shown(str(path))}") from None
    except OSError as exc:
        raise PresetError(f"cannot read {_shown(str(path))}: {exc.strerror or exc.__class__.__name__}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise PresetError(f"{_shown(str(path))} is over {MAX_CONFIG_BYTES:,} bytes; not a config.json")
    try:
        data = json.loads(raw)  # bytes: JSON's own UTF-8/16/32 detection (RFC 8259 section 8.1)
    except json.JSONDecodeError as exc:
        raise PresetError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError:
        raise PresetError(f"{path}: not text in UTF-8 or UTF-16/32") from None
    except RecursionError:
        raise PresetError(f"{path}: JSON nested too deeply to be a config") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise PresetError(f"{path}: unreadable JSON value: {exc}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{path}: expected a JSON object ({{\"model_type\": ...}}), got {_json_kind(data)}")
    return data


def _json_kind(value: object) -> str:
    """What JSON calls a value's type: null, true/false, a number, a string, an array."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return ("a number" if isinstance(value, (int, float)) else "a string" if isinstance(value, str)
            else "an array" if isinstance(value, list) else type(value).__name__)


_HF_REPO = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")


_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the hub spells repo ids


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint with a preset's architecture (presets/checkpoints.json): its repo id, the preset,
    instruct/chat/base, the config.json keys whose values differ from the preset's, and why they match."""

    repo: str
    preset: str
    variant: str
    basis: str
    config: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The preset's name where the shapes are the preset's own; else the repo's (lower case)."""
        return self.preset if not self.config else self.repo.split("/")[1].lower()

    def source(self, preset_source: str) -> str:
        changed = ", ".join(f"{k} {'null' if v is None else f'{v:,}' if isinstance(v, int) else v}"
                            for k, v in self.config.items())
        return (f"{self.repo} ({self.variant}): the {self.preset} preset's config.json"
                + (f" with {changed}" if changed else "") + f"; {self.basis}. Preset source: {preset_source}")


@cache
def checkpoints() -> dict[str, Checkpoint]:
    """Lower-cased repo id -> Checkpoint, for every checkpoint presets/checkpoints.json lists."""
    path = presets_dir() / "checkpoints.json"
    table = read_json(path) if path.exists() else {}
    out = {}
    for preset, entries in table.items():
        if preset.startswith("_"):
            continue
        for entry in entries:
            ckpt = Checkpoint(entry["repo"], preset, entry["variant"], entry["basis"], dict(entry.get("config", {})))
            out[ckpt.repo.lower()] = ckpt
    return out


@cache
def _repo_ids() -> dict[str, str]:
    """Lower-cased Hugging Face repo id (and its bare model name, and an instruct release's bare name without its
    "-instruct": `llama-3.3-70b` as benchmarks name meta-llama/Llama-3.3-70B-Instruct) -> model preset whose _source
    names it, or whose architecture a listed checkpoint has (presets/checkpoints.json)."""
    ids: dict[str, str] = {}
    for name in model_names():
        match = _HF_REPO.search(str(read_json(presets_dir() / "models" / f"{name}.json").get("_source", "")))
        if match:
            repo = match.group(1).lower()
            ids[repo] = name
            ids.setdefault(repo.split("/")[1], name)
    for repo, ckpt in checkpoints().items():
        ids.setdefault(repo, ckpt.preset)
        ids.setdefault(repo.split("/")[1], ckpt.preset)
    for bare, preset in list(ids.items()):
        if "/" not in bare and bare.endswith("-instruct"):
            ids.setdefault(bare.removesuffix("-instruct"), preset)
    return ids


@cache
def _by_bare_name() -> dict[str, Checkpoint]:
    """Bare model name (after the owner) -> the first listed checkpoint of that name, unless a preset has the name
    (any case): then the name means the preset."""
    presets = {n.lower() for n in model_names()}
    out: dict[str, Checkpoint] = {}
    for repo, ckpt in checkpoints().items():
        bare = repo.split("/")[1]
        if bare not in presets:
            out.setdefault(bare, ckpt)
    return out


def checkpoint_for(name: str) -> Checkpoint | None:
    """The listed checkpoint a model name means (its repo id, or the bare name after the owner), or None."""
    key = name.strip().lower()
    return checkpoints().get(key) or _by_bare_name().get(key)


def _unknown_repo(name: str) -> PresetError:
    return PresetError(f"{_shown(name)} is neither a file, a preset (`llmcalc presets` lists them and the "
                       f"checkpoints each stands for) nor in the local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub "
                       f"or ~/.cache/huggingface/hub), and the hub was not reached: download its config.json (https://huggingface.co/{name.strip()}/blob/main/"
                       f"config.json) and pass the file's path")


def locate(name_or_path: str, fetch: Callable[[str], Path | None] | None = None) -> str:
    """What a model argument names, as the loaders read it: a hub URL as its repo id (a pasted
    https://huggingface.co/org/name/tree/main); a repo id that is no preset as its config.json in the local Hugging
    Face cache (`hubcache.cached_file`), where the cache holds it, else as `fetch` (the command line's:
    `llmcalc.hub.fetch_config`) downloads it, where it can; anything else as given."""
    text = repo_from_url(name_or_path) or name_or_path
    repo = text.strip()
    if _REPO_ID.fullmatch(repo) and repo.lower() not in _repo_ids() and not Path(repo).exists():
        found = cached_file(repo) or (fetch(repo) if fetch is not None else None)
        return str(found) if found is not None else repo
    return text


def config_name(path: Path) -> str:
    """The name a model read from a config file answers under: the repo's, for the local Hugging Face cache's
    snapshots; else its folder's (config.json) or the file's stem."""
    return name_of(path) or (path.parent.name if path.name == "config.json" else path.stem)


def resolve_name(kind: str, name: str) -> str:
    """The preset file stem `name` means: exact, else ignoring case, else (models) a Hugging Face repo
    id from a preset's _source; one PresetError with suggestions otherwise."""
    known = _names(kind)
    label = "model" if kind == "models" else "hardware"
    if name in known:
        return name
    by_lower = {k.lower(): k for k in known}
    key = name.strip().lower()
    if key in by_lower:
        return by_lower[key]
    if kind == "models" and key in _repo_ids():
        return _repo_ids()[key]
    raise _unknown(label, name, known)


@cache
def _preset_json(kind: str, name: str) -> dict:
    return read_json(presets_dir() / kind / f"{resolve_name(kind, name)}.json")


def model_config(name: str) -> dict:
    """The raw preset dict (HF keys and "_source") of a model preset; for a listed checkpoint, the preset's
    with the keys that checkpoint changes, and a _source naming it."""
    config = dict(_preset_json("models", name))
    ckpt = checkpoint_for(name)
    if ckpt is not None and resolve_name("models", name) == ckpt.preset:
        config.update(ckpt.config)
        config["_source"] = ckpt.source(str(config.get("_source", "")))
    return config


def model_name(name: str) -> str:
    """The name a model answers under: the preset's, or a listed checkpoint's whose config differs."""
    ckpt = checkpoint_for(name)
    preset = resolve_name("models", name)
    return ckpt.name if ckpt is not None and ckpt.preset == preset else preset


def hardware_config(name: str) -> dict:
    if name.startswith(GPU_MEMORY):  # a GPU known by its memory has no preset file: what needs one needs its speed
        _memory_only(name).peak()
    return dict(_preset_json("hardware", name))


def _memory_only(name: str) -> Accelerator:
    """The GPU `--gpu-memory` gave (GPU_MEMORY + its bytes), naming the presets of that memory."""
    from ..hardware import memory_only

    size = float(name.removeprefix(GPU_MEMORY))
    return memory_only(size, tuple(n for n in hardware_names()
                                   if float(_preset_json("hardware", n)["memory_gib"]) * GIB == size))


def looks_like_path(text: str) -> bool:
    """A file or folder on disk (not a preset name or a Hugging Face repo id of a preset)."""
    if not text.strip():
        return False
    if text.endswith(".json") or "\\" in text:
        return True
    try:
        if "/" in text:
            return Path(text).exists() or (text.strip().lower() not in _repo_ids()
                                           and not _REPO_ID.fullmatch(text.strip()))
        return Path(text).is_dir()
    except OSError:  # a name too long to be a path
        return False


def spec_from_config(config: dict, name: str) -> ModelSpec:
    """A ModelSpec from a dict that is either an HF config.json or a native llmcalc spec."""
    if "model_type" not in config and "n_layers" in config:
        return spec_from_dict(config, name)
    return spec_from_hf(config, name)


def load_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec from a preset name, a config.json path, a directory holding config.json, a hub URL or a repo id
    in the local Hugging Face cache (`locate`)."""
    name_or_path = locate(name_or_path)
    if looks_like_path(name_or_path):
        path = Path(name_or_path)
        try:
            if path.is_dir():
                path = path / "config.json"
        except OSError as exc:
            raise PresetError(f"cannot read {_shown(name_or_path)}: {exc.strerror}") from None
        config = read_json(path)
        name = config_name(path)
        try:
            return spec_from_config(config, name or "config")
        except SpecError as exc:
            exc.args = (f"{path}: {exc}",)  # keeps the type: UnknownModelType carries the config on
            raise
    if "/" in name_or_path and name_or_path.strip().lower() not in _repo_ids():
        raise _unknown_repo(name_or_path)
    return spec_from_config(model_config(name_or_path), model_name(name_or_path))


def model_source(name_or_path: str) -> str:
    """Where a model's numbers come from: the preset's _source, or the file path."""
    name_or_path = locate(name_or_path)
    if looks_like_path(name_or_path):
        return str(Path(name_or_path))
    return str(model_config(name_or_path).get("_source", ""))


def load_hardware(name: str) -> Accelerator:
    """An Accelerator from a hardware preset name (exact; unknown names get suggestions), or the GPU `--gpu-memory`
    gave (hardware.GPU_MEMORY + its bytes): known by its memory alone, its speed refused in one line naming the
    presets of that memory (hardware.memory_only)."""
    from ..hardware import accelerator_from_preset

    if name.startswith(GPU_MEMORY):
        return _memory_only(name)

    return accelerator_from_preset(resolve_name("hardware", name), hardware_config(name))


def find_accelerator(device_name: str) -> Accelerator | None:
    """The hardware preset whose `device_names` include what the driver reports (e.g.
    torch.cuda.get_device_name(): "NVIDIA H100 80GB HBM3"), or None."""
    wanted = device_name.strip().lower()
    for name in hardware_names():
        names = [n.lower() for n in hardware_config(name).get("device_names", [])]
        if wanted in names:
            return load_hardware(name)
    return None
