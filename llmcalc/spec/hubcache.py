"""Hugging Face names as people paste them: a hub URL read as its repo id, and a repo id found in the local Hugging
Face cache, offline (standard library only: nothing here reaches the network; ``llmcalc/hub.py`` fetches).

The cache is huggingface_hub's layout (its "Manage the cache" guide): ``<cache>/models--<org>--<name>/refs/<branch>``
holds the commit a branch points to, ``<cache>/models--<org>--<name>/snapshots/<commit>/config.json`` the file. The
cache folder is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's
``constants.HF_HUB_CACHE``; the older ``$HUGGINGFACE_HUB_CACHE`` is read too).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# https://huggingface.co/<org>/<name>[/tree/<rev>[/...] | /blob/<rev>/<file> | /resolve/<rev>/<file> | ...]
_HUB_URL = re.compile(r"^\s*(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/(?!datasets/|spaces/)"
                      r"([A-Za-z0-9][\w.-]*)/([\w.-]+?)(?:\.git)?(?:[/?#].*)?\s*$")
_SNAPSHOT_NAME = re.compile(r"^models--(.+?)--(.+)$")


def repo_from_url(text: str) -> str | None:
    """The repo id a Hugging Face model URL names, or None for anything else:
    'https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json' -> 'meta-llama/Llama-3.1-8B'."""
    match = _HUB_URL.match(text)
    return f"{match.group(1)}/{match.group(2)}" if match else None


def cache_dir() -> Path:
    """The hub cache folder huggingface_hub uses: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_file(repo: str, filename: str = "config.json", revision: str = "main") -> Path | None:
    """`filename` of model `repo` in the local cache: the snapshot refs/<revision> points to, else (a cache filled
    by commit hash only) the newest snapshot holding the file; None when the cache does not hold it."""
    folder = cache_dir() / f"models--{repo.replace('/', '--')}"
    try:
        ref = folder / "refs" / revision
        if ref.is_file():
            path = folder / "snapshots" / ref.read_text().strip() / filename
            if path.is_file():
                return path
        snapshots = folder / "snapshots"
        found = [p / filename for p in snapshots.iterdir() if (p / filename).is_file()] if snapshots.is_dir() else []
    except OSError:  # an unreadable cache is a cache that does not hold it
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def name_of(config: Path) -> str | None:
    """The model name of a config.json in the cache (lower case, as presets are named), or None elsewhere:
    '.../models--meta-llama--Llama-3.1-8B/snapshots/<commit>/config.json' -> 'llama-3.1-8b'."""
    parts = config.parts
    if len(parts) >= 4 and parts[-3] == "snapshots":
        match = _SNAPSHOT_NAME.match(parts[-4])
        if match:
            return match.group(2).lower()
    return None
