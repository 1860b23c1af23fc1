"""benchmarks/peer_aiconfigurator.py: one line and exit 0 without aiconfigurator; its printed estimate parsed (a
stand-in executable, so the test needs no aiconfigurator)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import peer_aiconfigurator as peer  # noqa: E402

FAKE = '''#!{python}
import sys
if sys.argv[1:] == ["version"]:
    print("aiconfigurator 0.12.0")
    sys.exit(0)
args = sys.argv[1:]
if "--bs" in args and int(args[args.index("--bs") + 1]) > 8:
    print("RuntimeError: OOM: the model does not fit", file=sys.stderr)
    sys.exit(1)
print("""
============================================================
  Performance Estimate (agg)
============================================================
  TTFT:             49.287 ms
  TPOT:             6.689 ms
  Request Latency:  1,520.890 ms
------------------------------------------------------------
  tokens/s:         1,578.61
  tokens/s/gpu:     578.61
  seq/s:            2.630
  Concurrency:      4
============================================================""")
'''


def test_absent_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("LLMCALC_AIC", raising=False)
    assert peer.main(["--aic", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "pip install aiconfigurator" in out


def test_estimate_parsed_and_failure_reported(monkeypatch, capsys, tmp_path):
    exe = tmp_path / "aiconfigurator"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setattr(peer, "CACHE", tmp_path / "cache.json")
    aic = peer.Aic([str(exe)], "0.12.0", timeout=60, use_cache=True, save=True)
    a = aic.estimate(["--bs", "4"], ["--bs", "4"])
    assert a["ttft"] == pytest.approx(0.049287) and a["tpot"] == pytest.approx(0.006689)
    assert a["latency"] == pytest.approx(1.52089)
    assert a["output_tokens_per_second"] == 1578.61 and a["requests_per_second"] == 2.63 and not a["kv_warning"]
    assert "OOM" in aic.estimate(["--bs", "16"], ["--bs", "16"])["error"]
    aic.write()
    assert peer.Aic([str(exe)], "0.12.0", 60, True, False).cache.keys() == {"--bs 4", "--bs 16"}
    # an offline row of fixed lengths: the largest --bs the stand-in holds, found by bisection
    assert peer.main(["--aic", str(exe), "--only", "gpustack-qwen3-32b-h100-tp1-vllm-random2k", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "1 expressed by both" in out and "vllm agg bs8" in out
