"""Issue 41: Hugging Face names as people paste them. A hub URL is read as its repo id (it was mangled to
`https:/`); a repo id that is no preset is read from the local Hugging Face cache, offline, in huggingface_hub's
layout (models--org--name/refs/main -> snapshots/<commit>/config.json); with huggingface_hub and the hub there only
config.json is fetched; offline one line says how to pass the file. Never the network: conftest sets HF_HUB_OFFLINE
and an empty HF_HUB_CACHE; the caches here are built in tmp_path."""

import json
import socket
import sys
import types
from pathlib import Path

import pytest
from clirun import cli_json, one_line_error

from llmcalc import hub
from llmcalc.spec.hubcache import cache_dir, cached_file, repo_from_url

PRESETS = Path(__file__).resolve().parent.parent / "presets" / "models"
LLAMA_3_8B = 8_030_261_248  # Meta's Llama-3-8B: the parameter count its safetensors hold (model card: 8B)


@pytest.mark.parametrize("url, repo", [
    ("https://huggingface.co/meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
    ("https://huggingface.co/meta-llama/Llama-3.1-8B/tree/main", "meta-llama/Llama-3.1-8B"),
    ("https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json", "meta-llama/Llama-3.1-8B"),
    ("https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json?download=true", "Qwen/Qwen3-8B"),
    ("huggingface.co/Qwen/Qwen3-8B/", "Qwen/Qwen3-8B"),
    ("https://hf.co/deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3"),
    ("https://huggingface.co/datasets/HuggingFaceFW/fineweb", None),
    ("meta-llama/Llama-3.1-8B", None), ("configs/model.json", None),
])
def test_a_hub_url_is_read_as_its_repo_id(url, repo):
    assert repo_from_url(url) == repo


def test_a_pasted_url_answers_as_the_repo_id_does():
    by_id = cli_json("params", "meta-llama/Llama-3.1-8B")
    for url in ("https://huggingface.co/meta-llama/Llama-3.1-8B", "https://huggingface.co/meta-llama/Llama-3.1-8B/"
                "tree/main", "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json"):
        assert cli_json("params", url)["total"] == by_id["total"]


def _cache(root: Path, repo: str, snapshots: dict[str, dict], main: str | None) -> Path:
    """A hub cache as huggingface_hub lays it out: each snapshot's config.json, refs/main naming one of them."""
    folder = root / f"models--{repo.replace('/', '--')}"
    for commit, config in snapshots.items():
        (folder / "snapshots" / commit).mkdir(parents=True)
        (folder / "snapshots" / commit / "config.json").write_text(json.dumps(config))
    if main is not None:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(main)
    return root


def _llama(**changed) -> dict:
    config = {k: v for k, v in json.loads((PRESETS / "llama-3-8b.json").read_text()).items() if k != "_source"}
    return {**config, **changed}


def test_a_repo_id_in_the_local_cache_answers_offline(tmp_path, monkeypatch):
    """refs/main picks the snapshot: the other one (a 2-layer edit) is never read."""
    monkeypatch.setenv("HF_HUB_CACHE", str(_cache(tmp_path, "acme/llama-copy", {
        "aaa111": _llama(), "bbb222": _llama(num_hidden_layers=2)}, main="aaa111")))
    monkeypatch.setattr(socket, "create_connection", _no_network)
    data = cli_json("params", "acme/llama-copy")
    assert data["total"] == LLAMA_3_8B and data["model"] == "llama-copy"
    assert cli_json("params", "https://huggingface.co/acme/llama-copy/tree/main")["total"] == LLAMA_3_8B
    memory = cli_json("memory", "acme/llama-copy", "--seq-len", "2k")
    assert memory["model"] == "llama-copy"
    assert memory["per_gpu_bytes"] == cli_json("memory", "llama-3-8b", "--seq-len", "2k")["per_gpu_bytes"]


def test_the_cache_folder_is_huggingface_hubs(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "hub"
    _cache(tmp_path / "home" / "hub", "acme/m", {"c0ffee": _llama()}, main=None)  # no refs: the one snapshot
    assert cached_file("acme/m") == tmp_path / "home" / "hub" / "models--acme--m" / "snapshots" / "c0ffee" / \
        "config.json"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def _no_network(*args, **kwargs):
    raise AssertionError("a test reached for the network")


def test_offline_a_repo_not_in_the_cache_says_how_in_one_line(monkeypatch):
    monkeypatch.setattr(socket, "create_connection", _no_network)  # HF_HUB_OFFLINE: not even a connection tried
    line = one_line_error("params", "acme/not-cached-anywhere")
    assert "local Hugging Face cache" in line and "hub was not reached" in line
    assert "download its config.json (https://huggingface.co/acme/not-cached-anywhere/blob/main/config.json)" in line


def test_online_only_config_json_is_fetched(tmp_path, monkeypatch):
    """With huggingface_hub and the hub there, one file is asked for: config.json, never weights."""
    asked = []

    def hf_hub_download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        path = tmp_path / filename
        path.write_text(json.dumps(_llama()))
        return str(path)

    fake = types.ModuleType("huggingface_hub")
    fake.hf_hub_download = hf_hub_download
    utils = types.ModuleType("huggingface_hub.utils")
    utils.disable_progress_bars = lambda: None
    utils.logging = types.SimpleNamespace(set_verbosity_error=lambda: None)
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    monkeypatch.setitem(sys.modules, "huggingface_hub.utils", utils)
    monkeypatch.setattr(hub, "offline", lambda: False)
    assert cli_json("params", "acme/online-only")["total"] == LLAMA_3_8B
    assert asked == [("acme/online-only", "config.json")]


def test_hf_hub_offline_means_no_connection_is_tried(monkeypatch):
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.offline() and hub.fetch_config("acme/x") is None
