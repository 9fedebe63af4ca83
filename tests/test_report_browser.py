"""`ddplab report` opened in a real browser: headless Chromium loads the page from
disk, with no network, and every picture must load (the page's own check writes
``data-images="loaded/total"`` on its body). The inputs are built fast: a
calibration of hand-written probe records, a validation, and the demo's
simulations at two rank counts."""

import json
import shutil
import subprocess
from dataclasses import replace

import pytest
from fake_runs import probe_run, train_run

from calibrate.calib import calibrate
from calibrate.validate import validate
from output.calib_plots import predicted_vs_measured, write_calibration_plots
from workflow.report import write_report
from workflow.simstudy import run_study

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (make test installs it as root with apt; else this skips)"
)


def _chromium(*args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    probe = probe_run(d / "probe", model="gpt2-mini", seq_len=128, speed={1: 1.3})
    calib = calibrate([probe], command="ddplab calibrate probe -o calib.json")
    calib = replace(calib, plots=[p.name for p in write_calibration_plots(calib, d / "calib")])
    (d / "calib.json").write_text(json.dumps(calib.to_json()))
    train = train_run(d / "train", config={"model": "gpt2-mini", "seq_len": 128}, step_s=2.0, wait_s=0.5)
    v = validate(calib, str(d / "calib.json"), [train])
    predicted_vs_measured(v["rows"], v["mape"], d / "validation.png")
    (d / "validation.json").write_text(json.dumps(v))
    run_study(d, sweep=(2, 64), steps=20)
    return write_report(d)


def test_every_picture_loads_in_a_browser(report):
    html = report.read_text()
    assert "http://" not in html and "https://" not in html  # nothing fetched at view time
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", report.as_uri())
    loaded, total = (int(x) for x in dom.split('data-images="')[1].split('"')[0].split("/"))
    # calib x4, validation, 3 scaling, stragglers, 3 timelines
    assert total == 12 and loaded == total


def test_a_missing_picture_is_flagged(report, tmp_path):
    copy = tmp_path / "r"
    shutil.copytree(report.parent, copy)
    (copy / "validation.png").unlink()
    page = write_report(copy)
    assert "missing: validation.png" in page.read_text()
    # The in-page check catches a picture lost after the report was written.
    (copy / "calib-noise.png").unlink()
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert 'data-images="10/11"' in dom and "did not load" in dom


def test_screenshot(report, tmp_path):
    shot = tmp_path / "report.png"
    _chromium("--window-size=1280,2400", f"--screenshot={shot}", report.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
