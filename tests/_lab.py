"""A real JupyterLab on loopback and a real Chromium driven by Playwright, for the browser tests.

Everything Jupyter, IPython and Chromium write goes into a temporary folder; every request
that is not to 127.0.0.1 is aborted and recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
_USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
    # every cell in the DOM, so that a test sees outputs below the fold
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, home: Path, timeout_s: float = 90):
    """Run JupyterLab serving `root` on 127.0.0.1 with `home` as HOME; yields its base URL."""
    env = dict(os.environ, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
               JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"), IPYTHONDIR=str(home / "ipython"),
               JAX_PLATFORMS="cpu")
    for name, settings in _USER_SETTINGS.items():
        path = home / "jupyter-config" / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    port = _free_port()
    log = open(home / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.root_dir={root}", "--allow-root",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=None",
         "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True"],
        env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {server.returncode}:\n"
                                   + (home / "jupyterlab.log").read_text(errors="replace")[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not answer /api/status in time") from None
                time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@contextlib.contextmanager
def chromium_page(home: Path):
    """A Playwright page in Debian's Chromium; yields (page, external) where `external`
    lists every request to a host other than 127.0.0.1 (each was aborted)."""
    from playwright.sync_api import sync_playwright

    external: list[str] = []

    def route(r):
        if r.request.url.startswith(("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:")):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                     env=dict(os.environ, HOME=str(home)))
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", route)
            yield context.new_page(), external
        finally:
            browser.close()
