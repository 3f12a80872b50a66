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
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
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
def jupyterlab(root: Path, home: Path, timeout_s: float = 90, theme: str | None = None):
    """Run JupyterLab serving `root` on 127.0.0.1 with `home` as HOME; yields its base URL.

    `theme` ("JupyterLab Dark", ...) is set as the user's theme setting."""
    env = dict(
        os.environ,
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
        IPYTHONDIR=str(home / "ipython"),
        JAX_PLATFORMS="cpu",
    )
    settings_files = dict(_USER_SETTINGS)
    if theme:
        settings_files["@jupyterlab/apputils-extension/themes.jupyterlab-settings"] = {
            "theme": theme
        }
    for name, settings in settings_files.items():
        path = home / "jupyter-config" / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    port = _free_port()
    log = open(home / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly",
            "--LabApp.expose_app_in_browser=True",
        ],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with {server.returncode}:\n"
                    + (home / "jupyterlab.log").read_text(errors="replace")[-3000:]
                )
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
    lists every request to a host other than 127.0.0.1 or a local file (each was aborted)."""
    from playwright.sync_api import sync_playwright

    external: list[str] = []

    def route(r):
        if r.request.url.startswith(
            ("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:", "file://")
        ):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            env=dict(os.environ, HOME=str(home)),
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", route)
            yield context.new_page(), external
        finally:
            browser.close()


def open_notebook(page, url: str, name: str) -> None:
    """Open `name` in JupyterLab and wait until its kernel is idle."""
    from playwright.sync_api import expect

    page.goto(f"{url}/lab/tree/{name}?reset")
    status = page.locator("#jp-main-statusbar")
    expect(status).to_contain_text("| Idle")
    expect(status).not_to_contain_text("No Kernel")


def run_all(page) -> None:
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


# For `element_handle.evaluate(CONTRAST, selectors)`: the lowest WCAG contrast ratio of the text in
# each group of elements under the element, colours
# composited over the backgrounds they sit on ("selector": ratio).
CONTRAST = """(root, selectors) => {
  const parse = (c) => {
    const p = (c.match(/\\(([^)]*)\\)/) || [0, "0,0,0,0"])[1].split(/[ ,\\/]+/)\
.filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => top.slice(0, 3).map((v, i) => v * top[3] + under[i] * (1 - top[3]));
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    return layers.reverse().reduce((under, c) => over(c, under), [255, 255, 255]);
  };
  const lum = (rgb) => rgb.map((v) => { v /= 255; \
return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (el) => {
    const bg = background(el);
    const fg = over(parse(getComputedStyle(el).color), bg);
    const [a, b] = [lum(fg), lum(bg)];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  };
  const out = {};
  for (const s of selectors) {
    const els = [...root.querySelectorAll(s)].filter((e) => e.textContent.trim());
    out[s] = els.length ? Math.min(...els.map(ratio)) : null;
  }
  return out;
}"""
