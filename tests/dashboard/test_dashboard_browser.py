"""Real-browser smoke test: headless Chromium loads the running dashboard (`nas dashboard`, on
127.0.0.1) over the session's finished search (a real one, conftest.py) and finds the Pareto plot's points in the
DOM. The screenshot is kept as a CI artifact
under test-artifacts/. Chromium comes from Debian's package (.ci/run installs it); Playwright
drives that binary, it never downloads a browser of its own.
"""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed (.ci/run installs it)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "dashboard exited"
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the dashboard did not start")


@pytest.fixture
def dashboard_url(tmp_path, finished_search):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nas.cli", "dashboard", "--storage", finished_search.url, "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc)
        # `nas dashboard` became the server (exec): killing it cannot orphan a listening streamlit
        assert "streamlit" in psutil.Process(proc.pid).cmdline() and not psutil.Process(proc.pid).children()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()  # the one process this test started (streamlit runs as it)
        proc.wait(timeout=30)


def test_chromium_finds_the_pareto_points(dashboard_url):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(dashboard_url, wait_until="domcontentloaded")
            page.locator("label").filter(has_text="Pareto front").first.click(timeout=60_000)
            page.wait_for_selector(".js-plotly-plot .scatterlayer path.point", timeout=60_000)
            points = page.locator(".js-plotly-plot .scatterlayer path.point").count()
            page.screenshot(path=str(ARTIFACTS / "dashboard_pareto.png"), full_page=True)
        finally:
            browser.close()
    assert points >= 3  # at least the completed trials of the shown search (it has 4)
