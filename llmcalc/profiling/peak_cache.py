"""The calibrated matmul peak of a device without a datasheet figure (a CPU, a GPU not in the catalog), measured
once and kept with the conditions it was measured under, so that every later MFU is against the same peak.

A CPU's best matmul rate moves with the machine's load (the same 2-core machine measured 60-80 % MFU on the same
profile when the peak was re-timed on every run); measuring it once and reusing it makes MFUs comparable, and
the conditions (CPU model, torch threads, torch version, matrix size, the load average when it was timed) are
printed with it so a stale or loaded measurement can be recognised. `llmcalc calibrate` measures again and
replaces the entry. The file is ``$LLMCALC_CACHE_DIR/peaks.json`` (default ``$XDG_CACHE_HOME/llmcalc`` or
``~/.cache/llmcalc``); an unreadable or foreign file is ignored and rewritten. Standard library only.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any


def cache_path() -> Path:
    """Where the calibrated peaks are kept."""
    root = os.environ.get("LLMCALC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "llmcalc")
    return Path(root) / "peaks.json"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else platform's)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def key(device_name: str, dtype: str, size: int, threads: int, torch_version: str) -> str:
    """One entry per device, dtype, matrix size, thread count and torch version: what the rate depends on."""
    return f"{device_name} | {dtype} | {size} | {threads} threads | torch {torch_version}"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(entry_key: str) -> dict[str, Any] | None:
    """The cached entry (flops_per_s, measured_at, load_average, ...), or None."""
    entry = _read(cache_path()).get(entry_key)
    if isinstance(entry, dict) and isinstance(entry.get("flops_per_s"), (int, float)) and entry["flops_per_s"] > 0:
        return entry
    return None


def store(entry_key: str, flops_per_s: float, seconds: float, threads: int) -> dict[str, Any]:
    """Record a measurement (atomically: a temporary file renamed over the old one); returns the entry. A cache
    that cannot be written is no error: the measurement is used once, as before."""
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    entry = {"flops_per_s": flops_per_s, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "seconds": seconds, "threads": threads, "load_average": load, "cpus": os.cpu_count()}
    path = cache_path()
    data = _read(path)
    data[entry_key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(staging, path)
        entry["cached_in"] = str(path)
    except OSError:
        entry["cached_in"] = None
    return entry


def describe(entry: dict[str, Any]) -> str:
    """How the peak was measured, for the profile's peak source."""
    load = entry.get("load_average")
    where = entry.get("cached_in") or str(cache_path())
    return (f"measured {entry.get('measured_at', '?')} with {entry.get('threads', '?')} torch threads"
            + (f", load average {load:g} on {entry.get('cpus', '?')} CPUs" if isinstance(load, (int, float)) else "")
            + f"; cached in {where} (`llmcalc calibrate` measures it again)")
