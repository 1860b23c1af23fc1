"""The report's HTML in a real browser (headless Chromium): no console error, every figure decodes,
figures shown at half their pixel size (2x for HiDPI screens) inside the page. Slow: marked `slow`;
skipped, saying why, where no Chromium is installed (CI installs the Debian package `chromium`)."""

import json
import re
import shutil
import subprocess

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from click.testing import CliRunner  # noqa: E402

from llmcalc.cli import cli  # noqa: E402

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

# Run first in <head>: records errors (scripts, and resources that fail to load: capture phase) and
# console.error calls; after load, writes what it saw about every image into the DOM for --dump-dom.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(
  e.message || ('failed to load ' + ((e.target && (e.target.src || '').slice(0, 40)) || '?'))), true);
const __consoleError = console.error;
console.error = (...args) => { window.__errors.push('console.error: ' + args.join(' ')); __consoleError(...args); };
window.addEventListener('load', () => {
  const images = [...document.images].map(i => ({complete: i.complete, natural: i.naturalWidth,
    shown: i.getBoundingClientRect().width, alt: i.alt.slice(0, 40)}));
  const pre = document.createElement('pre');
  pre.id = 'llmcalc-probe';
  pre.textContent = JSON.stringify({errors: window.__errors, images: images,
                                    page: document.documentElement.scrollWidth});
  document.body.appendChild(pre);
});
</script>"""


def render(html_path, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(html_path.read_text().replace("<head>", "<head>" + PROBE, 1))
    done = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1440,4000",
                           "--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0", "--dump-dom",
                           probed.as_uri()], capture_output=True, text=True, timeout=180)
    match = re.search(r'<pre id="llmcalc-probe">(.*?)</pre>', done.stdout, re.S)
    assert match, f"the page did not finish loading:\n{done.stderr[-2000:]}"
    data = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return data, console


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no headless browser: install the Debian package 'chromium' "
                                            "(apt-get install -y chromium) to render the report")
@pytest.mark.parametrize("models", [["llama-3-8b"], ["llama-3-8b", "mixtral-8x7b", "t5-base"]])
def test_report_renders_in_chromium(tmp_path, monkeypatch, models):
    from llmcalc.report import plots

    collided, original = {}, plots.save

    def save(fig, path):  # the 2x figure's text boxes as saved: nothing overlaps, runs off or sits on data
        collided[fig._suptitle.get_text().splitlines()[0]] = plots.collisions(fig)
        original(fig, path)

    monkeypatch.setattr(plots, "save", save)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", *models, "--tokens", "15T", "--n-gpus", "1024", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(collided) >= 6 and all(found == [] for found in collided.values()), collided
    data, console = render(out / "report.html", tmp_path)
    assert data["errors"] == [] and console == [], (data["errors"], console)
    figures = sorted((out / "figures").glob("*.png"))
    assert len(data["images"]) == len(figures) >= 6
    for image in data["images"]:
        assert image["complete"] and image["natural"] > 0, image  # decoded, not a broken image
        # shown at half its pixel width (2x for HiDPI), or smaller only to fit the 1100 px column
        assert image["natural"] / image["shown"] >= 2 - 1e-6, image
        assert image["natural"] / image["shown"] <= 2 * 1100 / 1000, image  # text >= 10 px stays readable
    assert data["page"] <= 1440  # nothing wider than the window


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no headless browser: install the Debian package 'chromium'")
def test_the_probe_sees_a_broken_image(tmp_path):
    """The check itself can fail: a page with a broken image and a console error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><head></head><body><img src='data:image/png;base64,AAAA'>"
                    "<script>console.error('boom')</script></body></html>")
    data, console = render(page, tmp_path)
    assert data["images"][0]["natural"] == 0
    assert any("boom" in e for e in data["errors"]) and any("failed to load" in e for e in data["errors"])
