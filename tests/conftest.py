"""Test-session set-up: the calibrated peaks of `profile` (llmcalc.profiling.peak_cache) go to a folder of this
session, never to the user's cache, so that a test neither reads a peak another machine state measured nor leaves
one behind; `built_once` shares a costly fixture's value between the xdist workers of one session."""

import os
import pickle
import sys
import tempfile

import pytest

os.environ["LLMCALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="llmcalc-test-cache-")
# Never the network, never the user's Hugging Face cache: a repo id that is no preset is looked up in an empty cache
# and not fetched (tests that need a cache build one in tmp_path and point HF_HUB_CACHE at it).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="llmcalc-test-hf-cache-")
os.environ.pop("HUGGINGFACE_HUB_CACHE", None)

# Bytecode caches are written (the git-ignored __pycache__ folders) even where PYTHONDONTWRITEBYTECODE is set, as on
# the machine the fast tier is timed on: without them each xdist worker compiles llmcalc and pytest rewrites every
# test module's asserts again on every run (4 of the 9.6 s CPU a worker spends collecting, measured there), and each
# `python -m llmcalc` a test starts compiles what it imports. Set here, before the workers and subprocesses start,
# so they inherit it; what a test asserts does not depend on it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory, worker_id):
    """`built_once(key, build)`: build() run once in the whole session, its value pickled into the folder the
    session's workers share (pytest-xdist's documented pattern for a session fixture run once, under a file lock),
    so that a fixture whose tests land on both workers is not built twice. Without xdist: build()."""
    if worker_id == "master":
        return lambda key, build: build()
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # the parent of every worker's own base folder

    def get(key, build):
        path = shared / f"built-once-{key}.pickle"
        with FileLock(f"{path}.lock"):
            if path.is_file():
                return pickle.loads(path.read_bytes())
            value = build()
            path.write_bytes(pickle.dumps(value))
            return value
    return get
