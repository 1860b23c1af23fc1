"""Progress on stderr for long work when stderr is a terminal, nothing when it is not: real subprocesses, stderr on
a pseudo-terminal (os.openpty) or on a pipe, stdout on a pipe in both (so the result stays clean)."""

import json
import os
import select
import subprocess
import sys
import time

import pytest

from llmcalc.render import progress

torch = pytest.importorskip("torch")

TINY_PROFILE = ["profile", "llmcalc-tiny", "--device", "cpu", "--steps", 2, "--warmup", 0, "--batch-size", 1,
                "--seq-len", 32, "--peak-tflops", 1, "--format", "json"]


def llmcalc(args, tmp_path, terminal: bool) -> tuple[subprocess.CompletedProcess, str]:
    """Run `python -m llmcalc ARGS` with stderr on a pseudo-terminal (terminal) or a pipe; its stdout and what
    reached stderr."""
    env = {**os.environ, "LLMCALC_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm", "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "llmcalc", *map(str, args)]
    if not terminal:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        return done, done.stderr
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the slave side closed: the process is gone
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        stdout = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        os.close(master)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout.decode(), ""), seen.decode(errors="replace")


def test_calibrate_shows_progress_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    args = ["calibrate", "--device", "cpu", "--size", 256, "--seconds", 1.5, "--format", "json"]
    on_tty, drawn = llmcalc(args, tmp_path, terminal=True)
    assert on_tty.returncode == 0, drawn
    assert "calibrating cpu fp32 matmuls: " in drawn and drawn.endswith("\x1b[K")  # erased before the result
    piped, stderr = llmcalc(args, tmp_path, terminal=False)
    assert piped.returncode == 0 and stderr == ""
    assert json.loads(on_tty.stdout).keys() == json.loads(piped.stdout).keys()


@pytest.mark.slow
def test_a_real_profile_shows_progress_on_a_terminal_only(tmp_path):
    on_tty, drawn = llmcalc(TINY_PROFILE, tmp_path, terminal=True)
    assert on_tty.returncode == 0, drawn
    assert "profiling llmcalc-tiny on cpu: " in drawn and " s" in drawn and " of 4, " in drawn  # 2 counted + 2 timed
    assert drawn.rstrip().endswith("\x1b[K")  # the line is erased before the result prints
    piped, stderr = llmcalc(TINY_PROFILE, tmp_path, terminal=False)
    assert piped.returncode == 0 and stderr == ""  # nothing when stderr is not a terminal
    # the result on stdout is the same JSON either way (the measured times aside)
    assert json.loads(on_tty.stdout).keys() == json.loads(piped.stdout).keys()


def test_a_first_fallback_build_shows_progress_and_the_cached_one_needs_none(tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "codegen.json"
    config.write_text(json.dumps({"model_type": "codegen", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8,
                                  "vocab_size": 1000, "n_positions": 256}))
    first, drawn = llmcalc(["params", config], tmp_path, terminal=True)
    assert first.returncode == 0, drawn
    assert "building codegen with transformers" in drawn
    cached, drawn = llmcalc(["params", config], tmp_path, terminal=True)
    assert cached.returncode == 0 and "building codegen" not in drawn  # counted once, then read from the cache
    assert cached.stdout == first.stdout


def test_activity_is_silent_off_a_terminal_and_erases_its_line_on_one(monkeypatch, capsys):
    with progress.activity("working"):
        time.sleep(progress.FIRST_DRAW_S + 0.2)
    assert capsys.readouterr().err == ""

    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with progress.activity("quick"):  # done before the first draw: nothing at all
        pass
    assert terminal.text == ""
    with pytest.raises(RuntimeError), progress.activity("slow"):
        time.sleep(progress.FIRST_DRAW_S + progress.REDRAW_S + 0.3)
        raise RuntimeError("the work failed")
    assert terminal.text.count("slow: ") >= 2 and terminal.text.endswith("\r\x1b[K")  # erased even on failure


@pytest.mark.slow
def test_a_torchrun_launch_shows_progress_on_a_terminal(tmp_path):
    args = ["profile", "llmcalc-tiny", "--device", "cpu", "--nproc", 2, "--steps", 1, "--seq-len", 32,
            "--format", "json"]
    done, drawn = llmcalc(args, tmp_path, terminal=True)
    assert done.returncode == 0, drawn
    assert "profiling llmcalc-tiny (2 ranks, torchrun): " in drawn


@pytest.mark.slow
def test_a_long_layout_search_shows_its_bar_on_a_terminal(tmp_path):
    args = ["layout", "llama-3.1-405b", "--gpu", "h100-sxm", "--n-gpus", 16384, "--global-batch", 2048,
            "--seq-len", 8192, "--top", 1]
    done, drawn = llmcalc(args, tmp_path, terminal=True)
    assert done.returncode == 0, drawn
    assert "layouts" in drawn
    piped, stderr = llmcalc(args, tmp_path, terminal=False)
    assert piped.returncode == 0 and stderr == "" and piped.stdout == done.stdout


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_counted_work_shows_steps_done_and_left_and_an_eta(monkeypatch):
    """Before a step is measured the ETA is the predicted one (steps left x the predicted seconds per step); once
    steps have run, the measured mean replaces it."""
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    clock = progress.StepClock(12, predicted=10.0)
    assert clock.text() == "step 0 of 12, 12 left, about 2 min 00 s to go (predicted)"
    now[0] += 30.0  # three steps in 30 s: 10 s each, 9 left
    for _ in range(3):
        clock.tick()
    assert clock.eta() == 90.0 and clock.text() == "step 3 of 12, 9 left, about 1 min 30 s to go"
    assert progress.StepClock(3).text() == "step 0 of 3, 3 left"  # nothing predicted: no ETA yet
    assert progress.duration(4000) == "1 h 06 min"


def test_the_activity_line_carries_the_open_step_clock(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setattr(progress, "FIRST_DRAW_S", 0.0)
    monkeypatch.setattr(progress, "REDRAW_S", 0.01)
    with progress.activity("profiling x on cpu"), progress.step_clock(4, predicted=1.0):
        progress.tick()
        time.sleep(0.2)
    assert "profiling x on cpu: " in terminal.text and "step 1 of 4, 3 left, about " in terminal.text
    assert terminal.text.endswith("\x1b[K")  # erased on the way out
    progress.tick()  # no clock open: nothing to count, no error
