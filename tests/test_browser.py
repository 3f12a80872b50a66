"""The trace table in a real JupyterLab and a real Chromium, nbconvert's HTML offline, the
self-contained report offline, and the report's and timeline's layout at 1,280 and 1,920 px (fails,
never skips, without a browser).

Screenshots go to the test's temporary folder; with ``JAXTRACE_README_SCREENSHOT=1`` the tour's
table is also written to ``docs/widget.png`` (the README's picture).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from _lab import CONTRAST, chromium_page, jupyterlab, open_notebook, run_all

REPO = Path(__file__).resolve().parent.parent
README_SCREENSHOT = REPO / "docs" / "widget.png"
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>window.__pwned=1</script>"
EVIL_NAME = "evil<img src=x onerror=window.__pwned=1>"
# Every text of the table, and the lowest contrast ratio it may have (WCAG AA: 4.5 for text).
READABLE = {
    ".jtnb-headline": 4.5,
    "th": 4.5,
    "tr.jtnb-row td": 4.5,
    "tr.jtnb-selected td": 4.5,
    "tr.jtnb-selected code": 4.5,
    ".jtnb-why-line": 4.5,
    ".jtnb-count": 4.5,
    "tr.jtnb-group td": 4.5,
    ".jtnb-hint": 4.5,
    ".jtnb-note": 4.5,
    "tr.jtnb-event td": 4.5,
}

CELLS = [
    "%load_ext jaxtrace_nb\nimport jax, jax.numpy as jnp\nfrom functools import partial",
    "@partial(jax.jit, static_argnames='tag')\ndef step(x, tag):\n    return x * 2\n\n"
    f"def evil(x):\n    return x + 1\nevil.__qualname__ = {EVIL_NAME!r}\nevil = jax.jit(evil)",
    "%%tracewatch\nfor n in (1, 2, 3):\n    step(jnp.ones(n), tag='a')\n"
    f"step(jnp.ones(3), tag={IMG!r})\nstep(jnp.ones(3), tag={SCRIPT!r})\nevil(1.0)",
    # 10,000 events of 500 functions, to time the first page
    "import datetime, json, time\nstarted = time.time()\nfrom jaxtrace_nb._log._events import "
    "Event\n"
    "from jaxtrace_nb._views._report import Report\nfrom jaxtrace_nb._views._widget import "
    "TraceTable\n"
    "events = [Event(time=datetime.datetime.now(), cell=4, function=f'fn_{i % 500}', "
    "location=f'model.py:{i % 500}',\n"
    "                kind='trace', internal=False, nested=False, trace_number=i // 500 + 1,\n"
    "                cause='first' if i < 500 else 'shape', leaf=None if i < 500 else 'x', "
    "before='f32[1]',\n"
    "                after='f32[2]', explanation='`x` changed shape.', hint='', trace_s=0.001, "
    "lower_s=0.001,\n"
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
                          ms: performance.now() - out.__seen, \
render_ms: Number(w.dataset.firstPageMs),
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
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    return root, home, nb


def _names(table):
    return table.locator("tr.jtnb-row td.jtnb-c-function code").all_inner_texts()


def _no_script_ran(page, dialogs):
    assert page.locator("img[src=x]").count() == 0
    assert page.evaluate("window.__pwned") is None and dialogs == []


def _assert_readable(root, theme: str):
    ratios = root.evaluate(CONTRAST, list(READABLE))
    print(f"\n{theme}: lowest contrast ratio per element: {json.dumps(ratios)}")
    low = {s: r for s, r in ratios.items() if r is not None and r < READABLE[s]}
    assert not low, f"{theme}: text below its contrast ratio: {low}"
    assert all(
        ratios[s] is not None for s in ("tr.jtnb-selected td", ".jtnb-hint", ".jtnb-why-line")
    ), ratios


@pytest.mark.browser
def test_sort_filter_group_and_history_in_jupyterlab(tmp_path):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    root, home, nb = _folders_and_notebook(tmp_path, CELLS)
    nbformat.write(nb, root / "retrace.ipynb")

    with jupyterlab(root, home) as url, chromium_page(home) as (page, external):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        open_notebook(page, url, "retrace.ipynb")
        page.evaluate(_TIMING_OBSERVER)
        run_all(page)

        table = page.locator(".jtnb-widget").filter(has_text="%%tracewatch")
        expect(table.locator(".jtnb-live")).to_have_text("")  # the cell ended: final flush
        step = table.locator("tr.jtnb-row").filter(has_text="step")
        expect(table.locator("tr.jtnb-row")).to_have_count(2)
        expect(step.locator("td.jtnb-c-traces")).to_have_text("5")
        expect(step.locator("td.jtnb-c-last_cause")).to_have_text("static")
        # the why without a click: the latest group, its count, before → after, where, and the hint
        why = step.locator("td.jtnb-c-why")
        expect(why.locator(".jtnb-why-line")).to_have_text(
            f"×2 static at tag: 'a' → {IMG!r}, {IMG!r} → {SCRIPT!r} · first called at In[3]:3"
        )
        expect(why.locator(".jtnb-hint code").first).to_have_text("tag")  # backticks became <code>
        expect(step.locator("button.jtnb-open")).to_be_visible()  # clicking is offered
        expect(table.locator(".jtnb-offer")).to_contain_text("click a function for its history")
        # the static copy is hidden next to the live table
        expect(page.locator(".jp-Cell").nth(2).locator(".jtnb-static")).to_be_hidden()

        # sorting: by name, both ways; by traces
        table.locator("th[data-column=function]").click()
        expect(table.locator("tr.jtnb-row").first).to_contain_text("evil")
        assert _names(table) == [EVIL_NAME, "step"]
        table.locator("th[data-column=function]").click()
        expect(table.locator("tr.jtnb-row").first).to_contain_text("step")
        table.locator("th[data-column=traces]").click()
        expect(table.locator("th[data-column=traces]")).to_have_attribute("data-arrow", "▼")
        assert _names(table) == ["step", EVIL_NAME]

        # filter: by cause, by leaf, by cell, by name
        for words, expected in (
            ("static", ["step"]),
            ("shape", ["step"]),
            ("tag", ["step"]),
            ("In[3]", ["step", EVIL_NAME]),
            ("EVIL", [EVIL_NAME]),
            ("static evil", []),
        ):
            table.locator(".jtnb-filter").fill(words)
            expect(table.locator("tr.jtnb-row")).to_have_count(len(expected))
            assert _names(table) == expected, words
        table.locator(".jtnb-filter").fill("")
        expect(table.locator("tr.jtnb-row")).to_have_count(2)

        # the history: repeats grouped, the events of a group one click away
        step.click()
        groups = table.locator(".jtnb-history tr.jtnb-group")
        expect(groups).to_have_count(3)
        expect(groups.nth(1).locator("td.jtnb-c-cause")).to_have_text("shape")
        expect(groups.nth(1).locator("td.jtnb-c-count")).to_have_text("2")
        expect(groups.nth(1).locator("td.jtnb-c-change")).to_have_text(
            "f32[1] → f32[2], f32[2] → f32[3]"
        )
        expect(groups.nth(2).locator("td.jtnb-c-change")).to_have_text(
            f"'a' → {IMG!r}, {IMG!r} → {SCRIPT!r}"
        )
        expect(table.locator("tr.jtnb-event")).to_have_count(0)
        groups.nth(2).click()
        events = table.locator("tr.jtnb-event")
        expect(events).to_have_count(2)
        expect(events.nth(1).locator("td.jtnb-c-change")).to_have_text(f"{IMG!r} → {SCRIPT!r}")
        expect(events.nth(1).locator("td.jtnb-c-call_site")).to_have_text("In[3]:4")
        _assert_readable(table.element_handle(), "JupyterLab Light")
        _no_script_ran(page, dialogs)

        # where and when: the history's equations per line and shape census, the timeline (a mark
        # per compile)
        expect(table.locator(".jtnb-history .jtnb-profile-table tr")).to_have_count(1)
        expect(table.locator(".jtnb-history .jtnb-census-line")).to_contain_text(
            "`x` dim 0: 3 size(s): 1, 2, 3"
        )
        expect(table.locator(".jtnb-timeline-box summary")).to_contain_text(
            "timeline: 6 compile(s) of 2 function(s)"
        )
        expect(table.locator("svg.jtnb-timeline")).to_have_count(0)  # drawn when opened
        table.locator(".jtnb-timeline-box summary").click()
        expect(table.locator("svg.jtnb-timeline .jtnb-mark")).to_have_count(6)
        expect(table.locator("svg.jtnb-timeline")).to_be_visible()
        _no_script_ran(page, dialogs)

        table.locator(".jtnb-export-variable").click()
        expect(table.locator(".jtnb-status")).to_have_text(
            "trace_df = DataFrame of 6 event(s) of 2 function(s)"
        )

        big = page.locator(".jtnb-widget").filter(has_text="synthetic: 10,000 events")
        expect(big.locator("tr.jtnb-row")).to_have_count(50)
        expect(big.locator(".jtnb-range")).to_have_text("1–50 of 500")
        timing = page.evaluate("window.__jtnb").pop()
        assert timing["headline"].startswith("synthetic: 10,000 events")
        kernel = json.loads(
            page.locator(".jp-OutputArea-output").filter(has_text='"built"').inner_text()
        )
        print(
            "\n10,000 events / 500 functions, first page in the browser: "
            f"{timing['at'] - 1000 * kernel['built']:.0f} ms after the kernel built the table "
            f"({timing['ms']:.0f} ms after its output appeared, view's own drawing "
            f"{timing['render_ms']:.1f} ms); {timing['at'] - 1000 * kernel['started']:.0f} ms from "
            "the cell's start, building 10,000 events included"
        )
        big.locator(".jtnb-next").click()
        expect(big.locator(".jtnb-range")).to_have_text("51–100 of 500")
        _no_script_ran(page, dialogs)
        assert external == []


def _tour(tmp_path):
    """The tour notebook, without its stored outputs, in a fresh served folder."""
    root, home, _ = _folders_and_notebook(tmp_path, [])
    nb = nbformat.read(REPO / "notebooks" / "00_tour.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, root / "00_tour.ipynb")
    return root, home


@pytest.mark.browser
@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_tour_shows_the_why_readably_in_light_and_dark(tmp_path, theme):
    """A real training case (the tour): the why at a glance, readable in both themes."""
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)
    root, home = _tour(tmp_path)
    with jupyterlab(root, home, theme=theme) as url, chromium_page(home) as (page, external):
        open_notebook(page, url, "00_tour.ipynb")
        assert page.evaluate("document.body.dataset.jpThemeLight") == (
            "true" if "Light" in theme else "false"
        )
        run_all(page)
        table = page.locator(".jtnb-widget").filter(has_text="%%tracewatch (cell 4)")
        expect(table.locator(".jtnb-live")).to_have_text("")
        row = table.locator("tr.jtnb-row").filter(has_text="train_step")
        expect(row.locator("td.jtnb-c-traces")).to_have_text("5")
        line = row.locator(".jtnb-why-line")
        expect(line).to_contain_text(
            "×4 static at i: 0 → 1, 1 → 2, …, 3 → 4 · first called at In[4]:2"
        )
        expect(row.locator(".jtnb-hint")).to_contain_text("treats a Python int as static")
        row.click()
        table.locator(".jtnb-history tr.jtnb-group").filter(has_text="static").click()
        expect(table.locator("tr.jtnb-event")).to_have_count(4)
        _assert_readable(table.element_handle(), theme)
        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
        shot = tmp_path / f"tour-{theme.split()[-1].lower()}.png"
        table.screenshot(path=str(shot))
        if "Light" in theme and os.environ.get("JAXTRACE_README_SCREENSHOT") == "1":
            shutil.copyfile(shot, README_SCREENSHOT)
        assert external == []


@pytest.mark.browser
def test_headless_executed_notebook_opens_with_its_table(tmp_path):
    """Executed by nbclient, then opened in JupyterLab with no kernel model: the saved table
    shows."""
    from nbclient import NotebookClient
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    root, home, nb = _folders_and_notebook(tmp_path, CELLS[:3])
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(root)}}
    ).execute()
    nbformat.write(nb, root / "executed.ipynb")

    with jupyterlab(root, home) as url, chromium_page(home) as (page, external):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{url}/lab/tree/executed.ipynb?reset")
        outputs = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")
        expect(outputs).to_contain_text("%%tracewatch (cell 3)")
        expect(outputs).to_contain_text(f"'a' → {IMG!r}")
        expect(outputs).to_contain_text(EVIL_NAME)
        _no_script_ran(page, dialogs)
        assert external == []


@pytest.mark.browser
def test_nbconvert_html_offline_shows_the_static_table(tmp_path):
    """`jupyter nbconvert --to html` of a notebook executed with its widget state, opened offline:
    the widget cannot load (its manager comes from a CDN), the static table is visible."""
    from nbclient import NotebookClient
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    root, home, nb = _folders_and_notebook(tmp_path, CELLS[:3])
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(root)}}
    ).execute()
    assert "widgets" in nb.metadata
    nbformat.write(nb, root / "executed.ipynb")
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "executed.ipynb"],
        cwd=root,
        check=True,
        capture_output=True,
        env=dict(os.environ, HOME=str(home)),
    )

    with chromium_page(home) as (page, external):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto((root / "executed.html").as_uri())
        static = page.locator(".jtnb-static")
        expect(static).to_be_visible()
        expect(static.locator(".jtnb-headline")).to_contain_text(
            "%%tracewatch (cell 3): 6 trace(s)"
        )
        expect(static.locator("table.jtnb-groups")).to_contain_text("f32[1] → f32[2]")
        expect(static.locator("table.jtnb-summary td.jtnb-c-function").first).to_be_visible()
        # nbconvert right-aligns and wraps every cell of rendered HTML: ours stay text left, numbers
        # right, unwrapped
        for table in ("jtnb-summary", "jtnb-groups"):
            cells = static.locator(f"table.{table} tbody tr").first.evaluate(
                "row => Array.from(row.cells, c => [c.className, getComputedStyle(c).textAlign, "
                "getComputedStyle(c).whiteSpace])"
            )
            for css, align, space in cells:
                number = "jtnb-n" in css.split()
                assert (align, number and space) == (
                    "right" if number else "left",
                    number and "nowrap",
                ), cells
        _no_script_ran(page, dialogs)
        assert any("cdn" in u or "unpkg" in u for u in external), (
            external
        )  # the widget manager it could not load


@pytest.mark.browser
def test_self_contained_report_offline(tmp_path, jt):
    """`jt.report`: sorting, filtering and the history work from a file, with no request at all."""
    import jax
    import jax.numpy as jnp
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)

    def evil(x, tag):
        return x + 1

    evil.__qualname__ = EVIL_NAME
    evil = jax.jit(evil, static_argnames="tag")
    step = jax.jit(lambda x: x * 2)
    for n in (1, 2, 3):
        step(jnp.ones(n))
    jnp.full(
        (3, 1237), 7, jnp.int16
    )  # an eager op of a shape no other test uses: JAX's internal helpers trace
    evil(1.0, tag=IMG)
    evil(1.0, tag=SCRIPT)
    path = jt.report(tmp_path / "report.html")
    home = tmp_path / "home"
    home.mkdir()

    with chromium_page(home) as (page, external):
        requests, dialogs = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(Path(path).as_uri())
        table = page.locator(".jtnb-widget")
        expect(table.locator("tr.jtnb-row")).to_have_count(2)
        expect(page.locator(".jtnb-static")).to_be_hidden()
        expect(table.locator(".jtnb-export-variable")).to_have_count(0)  # no kernel to export to
        lam = "test_self_contained_report_offline.<locals>.<lambda>"
        table.locator("th[data-column=function]").click()
        expect(table.locator("th[data-column=function]")).to_have_attribute("data-arrow", "▲")
        assert _names(table) == [EVIL_NAME, lam]
        table.locator("th[data-column=function]").click()
        expect(table.locator("th[data-column=function]")).to_have_attribute("data-arrow", "▼")
        assert _names(table) == [lam, EVIL_NAME]
        table.locator(".jtnb-filter").fill("static")
        expect(table.locator("tr.jtnb-row")).to_have_count(1)
        assert _names(table) == [EVIL_NAME]
        table.locator("tr.jtnb-row").first.click()
        group = table.locator(".jtnb-history tr.jtnb-group").filter(has_text="static")
        expect(group.locator("td.jtnb-c-change")).to_have_text(f"{IMG!r} → {SCRIPT!r}")
        group.click()
        expect(table.locator("tr.jtnb-event")).to_have_count(1)
        table.locator(".jtnb-filter").fill("")
        expect(table.locator(".jtnb-headline")).to_contain_text("internal function(s) hidden")
        table.locator(".jtnb-toggle input").check()
        expect(table.locator("tr.jtnb-row.jtnb-internal").first).to_be_visible()
        expect(table.locator(".jtnb-headline")).not_to_contain_text("hidden")
        # the timeline, a mark per compile of the shown functions (3 of step, 2 of evil), and the
        # census
        timeline = page.locator(".jtnb-where svg.jtnb-timeline")
        expect(timeline).to_be_visible()
        expect(timeline.locator(".jtnb-mark")).to_have_count(5)
        expect(page.locator(".jtnb-where .jtnb-census")).to_contain_text(
            "`x` dim 0: 3 size(s): 1, 2, 3"
        )
        expect(page.locator(".jtnb-where .jtnb-profile-table").first).to_be_visible()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        _no_script_ran(page, dialogs)
        assert external == [] and [u for u in requests if not u.startswith("file://")] == []
    text = Path(path).read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", text)


# For `element_handle.evaluate(NUMBERS_WHOLE)`: every number in the why cells under the element
# drawn
# on one line, and no line-break opportunity (<wbr>) inside one: [{text, lines, wbr_inside}].
NUMBERS_WHOLE = """(root) => {
  const out = [];
  for (const cell of root.querySelectorAll("td.jtnb-c-why")) {
    const nodes = [];
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
    let text = "";
    const wbr = new Set();
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.nodeType === Node.ELEMENT_NODE) { if (n.tagName === "WBR") wbr.add(text.length); \
continue; }
      nodes.push([n, text.length]);
      text += n.data;
    }
    for (const m of text.matchAll(/\\d+(?:\\.\\d+)?(?:e-?\\d+)?/g)) {
      const at = (offset) => { let k = nodes.length - 1; while (k > 0 && nodes[k][1] > offset) \
k--; return k; };
      const [a, b] = [at(m.index), at(m.index + m[0].length - 1)];
      const range = document.createRange();
      range.setStart(nodes[a][0], m.index - nodes[a][1]);
      range.setEnd(nodes[b][0], m.index + m[0].length - nodes[b][1]);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)\
.map((r) => Math.round(r.top)));
      const inside = [...wbr].some((p) => p > m.index && p < m.index + m[0].length);
      out.push({ text: m[0], lines: tops.size, wbr_inside: inside });
    }
  }
  return out;
}"""

LAYOUT_CELLS = [
    "%load_ext jaxtrace_nb\nimport equinox as eqx, jax, jax.numpy as jnp",
    "@jax.jit\ndef two(x, mask):\n    return x.sum() + mask.sum()\n\n"
    "@eqx.filter_jit\ndef train_with_a_long_name(w, lr):\n    return w * lr",
    "%%tracewatch\ntwo(jnp.ones(2), jnp.ones(2))\ntwo(jnp.ones(3), jnp.ones(2, jnp.int32))\nw = "
    "jnp.ones(2)\n"
    "for lr in (0.0375, 0.0412578125, 0.0451171875, 0.04962890625):\n    w = "
    "train_with_a_long_name(w, lr)",
]


@pytest.mark.browser
def test_table_fits_1280_px_with_the_file_browser_open(tmp_path):
    """JupyterLab at 1,280 px with its file browser open: the table fits without a horizontal
    scroll (its less important columns give way, the why wraps), no number breaks across lines,
    the filter finds a leaf named only under "Also changed", and anywidget warns of nothing."""
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)
    root, home, nb = _folders_and_notebook(tmp_path, LAYOUT_CELLS)
    nbformat.write(nb, root / "layout.ipynb")
    with jupyterlab(root, home) as url, chromium_page(home) as (page, external):
        console = []
        page.on("console", lambda m: console.append(m.text))
        page.set_viewport_size({"width": 1280, "height": 900})
        open_notebook(page, url, "layout.ipynb")
        expect(
            page.locator(".jp-FileBrowser")
        ).to_be_visible()  # JupyterLab's default: the file browser open
        run_all(page)
        table = page.locator(".jtnb-widget").filter(has_text="%%tracewatch")
        expect(table.locator(".jtnb-live")).to_have_text("")
        expect(table.locator("tr.jtnb-row")).to_have_count(2)
        train = table.locator("tr.jtnb-row").filter(has_text="train_with_a_long_name")
        expect(train.locator(".jtnb-why-line")).to_contain_text(
            "×3 static at lr: 0.0375 → 0.0413, 0.0413 → 0.0451"
        )

        size = table.evaluate("""(w) => { const s = w.querySelector('.jtnb-scroll');
            const panel = w.closest('.jp-NotebookPanel').getBoundingClientRect();
            return {scroll: s.scrollWidth, room: s.clientWidth, \
right: w.querySelector('table').getBoundingClientRect().right,
                    panel: panel.right, widget: w.getBoundingClientRect().width}; }""")
        print(f"\n1,280 px, file browser open: {size}")
        assert (
            size["widget"] < 1000
            and size["scroll"] <= size["room"] + 1
            and size["right"] <= size["panel"]
        ), size
        for name in ("trace_s", "lower_s", "eqns_total", "last_cause", "last_leaf"):  # gave way
            expect(table.locator(f"th[data-column={name}]")).to_be_hidden()
        for name in ("function", "why", "traces", "compiles", "compile_s", "total_s", "location"):
            expect(table.locator(f"th[data-column={name}]")).to_be_visible()
        why = train.locator("td.jtnb-c-why").element_handle()
        lines = why.evaluate(
            "(td) => { const r = document.createRange(); r.selectNodeContents(td);"
            " return new Set([...r.getClientRects()].map((x) => "
            "Math.round(x.top))).size; }"
        )
        assert lines > 2, (
            lines
        )  # the why wraps (its line and its hint), it does not widen the table
        numbers = table.element_handle().evaluate(NUMBERS_WHOLE)
        assert {n["text"] for n in numbers} >= {"0.0375", "0.0413", "0.0496"}, numbers
        assert [n for n in numbers if n["lines"] != 1 or n["wbr_inside"]] == [], numbers

        page.screenshot(path=str(tmp_path / "layout-1280.png"))

        # the filter matches a leaf named only under "Also changed" (the retrace's leaf is `x`)
        two = table.locator("tr.jtnb-row").filter(has_text="two")
        expect(two.locator(".jtnb-why-line")).to_contain_text("shape at x")
        for words, expected in (
            ("mask", ["two"]),
            ("lr", ["train_with_a_long_name"]),
            ("mask lr", []),
        ):
            table.locator(".jtnb-filter").fill(words)
            expect(table.locator("tr.jtnb-row td.jtnb-c-function code")).to_have_text(expected)
        assert [m for m in console if "anywidget" in m.lower() or "deprecat" in m.lower()] == [], (
            console
        )
        assert external == []


_PYTEST_SUITE = """
import jax
import jax.numpy as jnp
import pytest


@jax.jit
def step(x, mask):
    return x.sum() + mask.sum()


def test_one():
    step(jnp.ones(2), jnp.ones(2))
    step(jnp.ones(3), jnp.ones(2, jnp.int32))


@pytest.mark.parametrize("n", [5])
def test_two(n):
    step(jnp.ones(n), jnp.ones(2))
"""


@pytest.mark.browser
def test_pytest_report_shows_and_filters_by_test(tmp_path):
    """`pytest --jaxtrace-report=report.html`: each group and event names its test, the filter
    finds a function by test and by a leaf named only under "Also changed"."""
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_steps.py").write_text(_PYTEST_SUITE)
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--jaxtrace-report=report.html",
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    home = tmp_path / "home"
    home.mkdir()
    with chromium_page(home) as (page, external):
        page.goto((suite / "report.html").as_uri())
        table = page.locator(".jtnb-widget")
        expect(table.locator("tr.jtnb-row")).to_have_count(1)
        for words, count in (
            ("test_steps.py::test_one", 1),
            ("test_three", 0),
            ("test_two[5]", 1),
            ("dtype", 0),
            ("mask", 1),
        ):
            table.locator(".jtnb-filter").fill(words)
            expect(table.locator("tr.jtnb-row")).to_have_count(count)
        table.locator(".jtnb-filter").fill("")
        table.locator("tr.jtnb-row").first.click()
        groups = table.locator(".jtnb-history tr.jtnb-group")
        expect(table.locator(".jtnb-history th.jtnb-c-tests")).to_have_text("test")
        expect(table.locator(".jtnb-history th.jtnb-c-cells")).to_have_count(0)  # no notebook here
        shape = groups.filter(has_text="shape")
        expect(shape.locator("td.jtnb-c-tests")).to_have_text(
            "▸ 2 event(s) test_steps.py::test_one, test_steps.py::test_two[5]"
        )
        shape.click()
        events = table.locator("tr.jtnb-event")
        expect(events).to_have_count(2)
        expect(events.nth(0).locator("td.jtnb-c-test")).to_have_text("test_steps.py::test_one")
        expect(events.nth(1).locator("td.jtnb-c-test")).to_have_text("test_steps.py::test_two[5]")
        expect(events.nth(0).locator("td.jtnb-c-explanation")).to_contain_text(
            "Also changed: mask (dtype)"
        )
        assert external == []


# ------------------------------------------------- layout at the widths a reader's screen has
_LONG_DIR = "/home/someone/projects/a_rather_long_project_name/src/package_name/training_loops"
_LONG_NAME = "make_train_step.<locals>.train_step_with_a_rather_long_descriptive_name"


def _layout_events(functions: int) -> list:
    """A run's compiles with long names, long paths and every kind of text cell: the first compile
    the slowest (the largest mark, at 0 s), retraces of several causes (a legend of several
    entries)."""
    import datetime

    from jaxtrace_nb._log._events import Event

    t0 = datetime.datetime(2026, 11, 28, 12, 0, 0)
    rows = [
        (_LONG_NAME, "first", None, None, None, 2.0),
        (_LONG_NAME, "shape", "batch", "f32[32,3]", "f32[17,3]", 0.3),
        (_LONG_NAME, "shape", "batch", "f32[17,3]", "f32[9,3]", 0.2),
        ("evaluate", "first", None, None, None, 0.4),
        ("evaluate", "dtype", "mask", "f32[2]", "i32[2]", 0.5),
        ("evaluate", "structure", "opt_state[0].trace.b", "f32[2]", "None", 0.3),
        ("loss_and_grad_of_the_model_over_a_batch", "first", None, None, None, 0.1),
        (
            "loss_and_grad_of_the_model_over_a_batch",
            "static",
            "config.learning_rate_schedule_name",
            "'cosine_with_warmup_and_decay'",
            "'linear_with_warmup'",
            0.2,
        ),
    ]
    names = list(dict.fromkeys(r[0] for r in rows))[:functions]
    events = []
    for i, (fn, cause, leaf, before, after, seconds) in enumerate(r for r in rows if r[0] in names):
        n = sum(1 for e in events if e.function == fn) + 1
        where = f"{_LONG_DIR}/{fn.rsplit('.', 1)[-1]}_module.py"
        events.append(
            Event(
                time=t0 + datetime.timedelta(seconds=0.7 * i),
                function=fn,
                location=f"{where}:{10 + i}",
                kind="trace",
                internal=False,
                nested=False,
                trace_number=n,
                cause=cause,
                leaf=leaf,
                before=before,
                after=after,
                explanation="First trace of this function."
                if cause == "first"
                else f"`{leaf}` changed {cause}: {before} → {after}.",
                hint="" if cause == "first" else f"Give `{leaf}` one {cause} every call.",
                trace_s=0.05 * seconds,
                lower_s=0.05 * seconds,
                compile_s=0.9 * seconds,
                eqns_total=40 + i,
                call_site=f"{where}:{100 + i}",
                key=f"k::{fn}",
                seq=i,
            )
        )
    return events


# For `page.evaluate(LAYOUT)`: what runs past the page or out of its cell, text cells' alignment,
# and
# the timeline's texts that meet another text or a mark.
LAYOUT = """() => {
  const doc = document.documentElement, page = doc.clientWidth;
  const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const name = (e) => `${e.tagName.toLowerCase()}.${e.getAttribute("class") || ""}`;
  const past = [...document.body.querySelectorAll("*")].filter(shown)
    .filter((e) => e.getBoundingClientRect().right > page + 0.5 \
|| e.getBoundingClientRect().left < -0.5)
    .map((e) => `${name(e)} \
${Math.round(e.getBoundingClientRect().left)}..${Math.round(e.getBoundingClientRect().right)}`);
  const cells = [...document.querySelectorAll("th, td")].filter(shown);
  const spilled = cells.filter((c) => c.scrollWidth > c.clientWidth + 1)
    .map((c) => `${name(c)} '${c.textContent.slice(0, 40)}' ${c.scrollWidth} > ${c.clientWidth}`);
  const misaligned = cells.filter((c) => c.closest("table.jtnb-table") && c.textContent.trim())
    .filter((c) => getComputedStyle(c).textAlign !== (c.classList.contains("jtnb-n") \
? "right" : "left"))
    .map((c) => `${name(c)} ${getComputedStyle(c).textAlign}`);
  const meets = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 \
&& a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const collisions = [];
  for (const svg of document.querySelectorAll("svg.jtnb-timeline")) {
    const texts = [...svg.querySelectorAll("text")].map((t) => \
[t.textContent.replace(/^.*\\)/, ""), t.getBoundingClientRect()]);
    const marks = [...svg.querySelectorAll("circle, .jtnb-mark rect")]\
.map((m) => m.getBoundingClientRect());
    texts.forEach(([a, ra], i) => {
      texts.slice(i + 1).forEach(([b, rb]) => { if (meets(ra, rb)) \
collisions.push(`'${a}' meets '${b}'`); });
      marks.forEach((rm) => { if (meets(ra, rm)) \
collisions.push(`'${a}' meets a mark at x ${Math.round(rm.left)}`); });
    });
  }
  const widths = {};
  for (const th of document.querySelectorAll(".jtnb-widget table.jtnb-summary th")) {
    if (shown(th)) widths[th.dataset.column] = Math.round(th.getBoundingClientRect().width);
  }
  return {page, scroll: doc.scrollWidth, past, spilled, misaligned, collisions, widths,
          texts: document.querySelectorAll("svg.jtnb-timeline text").length};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 1920])
def test_report_and_timeline_fit_the_page(tmp_path, width):
    """The self-contained report at 1,280 and 1,920 px, with long names and paths, its history open:
    no horizontal scroll, nothing past the page, no cell whose content runs out of it, text cells
    left and numbers right; the timeline's labels meet no other label and no mark (with several rows
    and with one: its first mark the largest, at 0 s)."""
    from playwright.sync_api import expect

    import jaxtrace_nb as jt

    expect.set_options(timeout=30_000)
    home = tmp_path / "home"
    home.mkdir()
    reports = {n: jt.report(tmp_path / f"report-{n}.html", _layout_events(n)) for n in (3, 1)}
    with chromium_page(home) as (page, external):
        page.set_viewport_size({"width": width, "height": 900})
        for n, path in reports.items():
            page.goto(Path(path).as_uri())
            table = page.locator(".jtnb-widget")
            expect(table.locator("tr.jtnb-row")).to_have_count(n)
            table.locator("tr.jtnb-row").filter(has_text="descriptive_name").click()
            table.locator(".jtnb-history tr.jtnb-group").last.click()  # the group's events
            expect(table.locator("tr.jtnb-event")).not_to_have_count(0)
            expect(page.locator("svg.jtnb-timeline")).to_be_visible()
            layout = page.evaluate(LAYOUT)
            print(
                f"\n{width} px, {n} function(s): column widths {layout['widths']}, "
                f"page {layout['scroll']} of {layout['page']} px"
            )
            page.screenshot(path=str(tmp_path / f"report-{n}-{width}.png"), full_page=True)
            assert layout["scroll"] <= layout["page"], layout
            assert (layout["past"], layout["spilled"], layout["misaligned"]) == ([], [], []), layout
            assert layout["texts"] >= 3 * n + 3 and layout["collisions"] == [], layout
            if width == 1920:  # room for every column
                assert {"trace_s", "lower_s", "last_cause", "last_leaf", "location"} <= set(
                    layout["widths"]
                ), layout
        assert external == []
