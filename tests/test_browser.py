"""The trace table in a real JupyterLab and a real Chromium (fails, never skips, without them)."""

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from _lab import chromium_page, jupyterlab

DOCS_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "widget.png"
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>window.__pwned=1</script>"
EVIL_NAME = "evil<img src=x onerror=window.__pwned=1>"

CELLS = [
    "%load_ext jaxtrace_nb\nimport jax, jax.numpy as jnp\nfrom functools import partial",
    "@partial(jax.jit, static_argnames='tag')\ndef step(x, tag):\n    return x * 2\n\n"
    f"def evil(x):\n    return x + 1\nevil.__qualname__ = {EVIL_NAME!r}\nevil = jax.jit(evil)",
    "%%tracewatch\nfor n in (1, 2, 3):\n    step(jnp.ones(n), tag='a')\n"
    f"step(jnp.ones(3), tag={IMG!r})\nstep(jnp.ones(3), tag={SCRIPT!r})\nevil(1.0)",
    # 10,000 events of 500 functions, to time the first page
    "import datetime, json, time\nstarted = time.time()\nfrom jaxtrace_nb._log import Event\nfrom jaxtrace_nb._views import Report\n"
    "from jaxtrace_nb._widget import TraceTable\n"
    "events = [Event(time=datetime.datetime.now(), cell=4, function=f'fn_{i % 500}', location=f'model.py:{i % 500}',\n"
    "                kind='trace', internal=False, nested=False, trace_number=i // 500 + 1,\n"
    "                cause='first' if i < 500 else 'shape', leaf=None if i < 500 else 'x', before='f32[1]',\n"
    "                after='f32[2]', explanation='`x` changed shape.', hint='', trace_s=0.001, lower_s=0.001,\n"
    "                compile_s=0.01 * (i % 7), eqns_total=i % 300, key=f'k{i % 500}', seq=i)\n"
    "          for i in range(10_000)]\n"
    "table = TraceTable(Report(events, 'synthetic: 10,000 events'))\n"
    "print(json.dumps({'started': started, 'built': time.time()}))\n"
    "table",
]

# Stamps, in the page's clock, when each output node appears and when a table's first row does.
_TIMING_OBSERVER = """() => {
  window.__jtnb = [];
  new MutationObserver(() => {
    for (const out of document.querySelectorAll('.jp-OutputArea-output')) {
      if (out.__seen === undefined) out.__seen = performance.now();
    }
    for (const w of document.querySelectorAll('.jtnb-widget')) {
      if (w.__timed || !w.querySelector('tr.jtnb-row')) continue;
      w.__timed = true;
      const out = w.closest('.jp-OutputArea-output');
      window.__jtnb.push({headline: w.querySelector('.jtnb-headline').textContent,
                          ms: performance.now() - out.__seen, render_ms: Number(w.dataset.firstPageMs),
                          at: Date.now()});
    }
  }).observe(document.body, {childList: true, subtree: true});
}"""


def _folders_and_notebook(tmp_path, cells):
    """A served root folder, a HOME for Jupyter and Chromium, and a notebook of `cells`."""
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return root, home, nb


def _names(widget):
    return widget.locator("tr.jtnb-row td:first-child").all_inner_texts()


@pytest.mark.browser
def test_trace_table_in_jupyterlab(tmp_path):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    root, home, nb = _folders_and_notebook(tmp_path, CELLS)
    nbformat.write(nb, root / "retrace.ipynb")

    with jupyterlab(root, home) as url, chromium_page(home) as (page, external):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{url}/lab/tree/retrace.ipynb?reset")
        status = page.locator("#jp-main-statusbar")
        expect(status).to_contain_text("| Idle")
        expect(status).not_to_contain_text("No Kernel")
        page.evaluate(_TIMING_OBSERVER)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")

        widget = page.locator(".jtnb-widget").filter(has_text="%%tracewatch")
        expect(widget.locator(".jtnb-live")).to_have_text("")  # the cell ended: final flush
        step = widget.locator("tr.jtnb-row").filter(has_text="step")
        expect(step.locator("td.jtnb-c-traces")).to_have_text("5")
        expect(step.locator("td.jtnb-c-last_cause")).to_have_text("static")
        expect(step.locator("td.jtnb-c-last_leaf")).to_have_text("tag")
        expect(widget.locator("tr.jtnb-row")).to_have_count(2)

        widget.locator("th[data-column=function]").click()
        expect(widget.locator("tr.jtnb-row").first).to_contain_text("evil")
        ascending = _names(widget)
        widget.locator("th[data-column=function]").click()
        expect(widget.locator("tr.jtnb-row").first).to_contain_text("step")
        assert _names(widget) == ascending[::-1] == ["step", EVIL_NAME]

        step.click()
        history = widget.locator(".jtnb-history-table tr.jtnb-event")
        expect(history).to_have_count(5)
        expect(history.nth(1)).to_contain_text("shape")
        expect(history.nth(1).locator("td.jtnb-c-leaf")).to_have_text("x")  # the changed leaf
        expect(history.nth(1).locator("td.jtnb-c-change")).to_have_text("f32[1] → f32[2]")
        expect(history.nth(3).locator("td.jtnb-c-leaf")).to_have_text("tag")
        expect(history.nth(3).locator("td.jtnb-c-change")).to_have_text(f"'a' → {IMG!r}")
        expect(history.nth(4).locator("td.jtnb-c-change")).to_have_text(f"{IMG!r} → {SCRIPT!r}")
        expect(widget.locator(".jtnb-slowest")).to_have_count(1)

        expect(widget.locator("tr.jtnb-row td:first-child")).to_have_text(["step", EVIL_NAME])
        assert page.locator("img[src=x]").count() == 0
        assert page.evaluate("window.__pwned") is None and dialogs == []

        widget.locator(".jtnb-filter").fill("EVIL")
        expect(widget.locator("tr.jtnb-row")).to_have_count(1)
        widget.locator(".jtnb-filter").fill("")
        expect(widget.locator("tr.jtnb-row")).to_have_count(2)
        widget.locator(".jtnb-export-variable").click()
        expect(widget.locator(".jtnb-status")).to_have_text("trace_df = DataFrame of 6 event(s) of 2 function(s)")

        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
        shot = tmp_path / "widget.png"
        widget.screenshot(path=str(shot))
        DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, DOCS_SCREENSHOT)

        big = page.locator(".jtnb-widget").filter(has_text="synthetic: 10,000 events")
        expect(big.locator("tr.jtnb-row")).to_have_count(50)
        expect(big.locator(".jtnb-range")).to_have_text("1–50 of 500")
        timing = page.evaluate("window.__jtnb").pop()
        assert timing["headline"].startswith("synthetic: 10,000 events")
        kernel = json.loads(page.locator(".jp-OutputArea-output").filter(has_text='"built"').inner_text())
        print(f"\n10,000 events / 500 functions, first page in the browser: {timing['at'] - 1000 * kernel['built']:.0f} ms "
              f"after the kernel built the table ({timing['ms']:.0f} ms after its output appeared, view's own "
              f"drawing {timing['render_ms']:.1f} ms); {timing['at'] - 1000 * kernel['started']:.0f} ms from the "
              f"cell's start, building 10,000 events included")
        big.locator(".jtnb-next").click()
        expect(big.locator(".jtnb-range")).to_have_text("51–100 of 500")

        assert page.locator("img[src=x]").count() == 0
        assert page.evaluate("window.__pwned") is None and dialogs == []
        assert external == []


@pytest.mark.browser
def test_headless_executed_notebook_opens_with_its_table(tmp_path):
    """Executed by nbclient, then opened in JupyterLab with no kernel model: the saved table shows."""
    from nbclient import NotebookClient
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    root, home, nb = _folders_and_notebook(tmp_path, CELLS[:3])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(root)}}).execute()
    nbformat.write(nb, root / "executed.ipynb")

    with jupyterlab(root, home) as url, chromium_page(home) as (page, external):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{url}/lab/tree/executed.ipynb?reset")
        output = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output").first
        expect(output).to_contain_text("%%tracewatch (cell 3)")
        expect(output).to_contain_text("f32[1] → f32[2]")
        expect(output).to_contain_text(f"'a' → {IMG!r}")
        expect(output).to_contain_text(EVIL_NAME)
        assert page.locator("img[src=x]").count() == 0
        assert page.evaluate("window.__pwned") is None and dialogs == []
        assert external == []
