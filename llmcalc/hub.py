"""The one place llmcalc may reach the Hugging Face hub: a model's config.json, never its weights.

A repo id that is neither a preset nor in the local Hugging Face cache (``spec/hubcache.py``) is fetched with
``huggingface_hub.hf_hub_download`` (which keeps the file in that cache, so the next run answers offline), when
huggingface_hub is importable and the hub answers; ``HF_HUB_OFFLINE=1`` keeps it from trying. Anything else (no
huggingface_hub, no network, a gated or missing repo) leaves the repo id as given, and the loader's one line says
how to pass the file instead.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

CONFIG = "config.json"  # the one file fetched (and never the weights)
TIMEOUT_SECONDS = 5.0  # how long the hub may take to answer before llmcalc says it was not reached


def offline() -> bool:
    """Whether the hub is out of reach: $HF_HUB_OFFLINE set (huggingface_hub's switch), or no TCP connection to its
    endpoint ($HF_ENDPOINT, else huggingface.co) within TIMEOUT_SECONDS (huggingface_hub itself would retry five
    times over half a minute before giving up)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", endpoint.port or 443),
                                 timeout=TIMEOUT_SECONDS).close()
    except OSError:
        return True
    return False


def fetch_config(repo: str) -> Path | None:
    """`repo`'s config.json, downloaded into the local Hugging Face cache, or None where it cannot be."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import disable_progress_bars, logging
    except ImportError:
        return None
    if offline():
        return None
    disable_progress_bars()
    logging.set_verbosity_error()
    try:
        return Path(hf_hub_download(repo, CONFIG, etag_timeout=TIMEOUT_SECONDS))
    except Exception:  # offline, gated, no such repo, any hub error: the loader says what to do
        return None
