"""Every notebook in notebooks/ runs top to bottom in a real kernel, shows the right cause and
leaf for its case, and its stored outputs are those of a real run of its current code.

The checks read the kernel's own log after the last cell (not the widget), the text shown by
the cell that retraced, and the log table that each notebook displays in its cell tagged
``jaxtrace-log``.
"""

import importlib.util
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
_spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS_DIR / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

pytestmark = pytest.mark.kernel

RAISES_TAG = "raises-exception"
LOG_TAG = "jaxtrace-log"
# Run after a notebook's last cell, then removed: prints the session's log as JSON records.
LOG_PROBE = ('import jaxtrace_nb\n'
             'print(jaxtrace_nb.log(internal=False)[["cell", "function", "nested", "cause", "leaf", '
             '"before", "after"]].to_json(orient="records"))')


def row(function, cause, leaf=None, before=None, after=None, **more):
    return dict(function=function, cause=cause, leaf=leaf, before=before, after=after, **more)


# The session log each notebook must end with, in order (non-internal events).
EXPECTED = {
    "00_tour": [
        row("tree_bias_correction", "first"),  # optax's own jitted helper, inlined in train_step
        row("train_step", "first"),
        row("train_step", "static", "i", "0", "1"),
        row("train_step", "static", "i", "1", "2"),
        row("train_step", "static", "i", "2", "3"),
        row("train_step", "static", "i", "3", "4"),
        row("train_step", "static", "i", "4", "i32[] (weak)"),
    ],
    "01_decorator_order_chex": [
        row("predict", "first"),
        row("predict", "shape", "x", "f32[32,3]", "f32[4,3]"),
        row("evaluate", "first"),
        row("evaluate", "shape", "x", "f32[32,3]", "f32[4,3]"),
        row("evaluate_full", "first"),
    ],
    "02_callable_attribute_recreated": [
        row("loss", "first"),
        row("loss", "static", "model.activation", "<function make_model.<locals>.<lambda>>",
            "<function make_model.<locals>.<lambda>>"),
        row("loss", "static", "model.activation", "<function make_model.<locals>.<lambda>>",
            "<function make_model.<locals>.<lambda>>"),
        row("loss", "static", "model.activation", "<function make_model.<locals>.<lambda>>",
            "<function gelu_exact>"),
    ],
    "03_optimizer_state_structure": [
        row("step_fn", "first"),
        row("step_fn", "structure", "opt_state[0].trace.b", "f32[2]", "None"),
    ],
    "04_compile_time_split": [
        row("forward", "first"),
        row("forward", "dtype", "x", "f32[32,128]", "f16[32,128]"),
    ],
    "05_inline_filter_jit_nested": [
        row("build.<locals>.add_one", "first", nested=True),
        row("build.<locals>.outer", "first", nested=False),
        row("build.<locals>.add_one", "shape", "y", "f32[3]", "f32[5]", nested=True),
        row("build.<locals>.outer", "shape", "x", "f32[3]", "f32[5]", nested=False),
    ],
    "06_python_scalar_weak_type": [
        row("update_average", "first"),
        row("update_average", "weak_type", "average", "f32[] (weak)", "f32[]"),
    ],
    "07_jit_recreated_in_loop": [
        row("<lambda>", "first"),
        row("<lambda>", "new_function"),
        row("<lambda>", "new_function"),
        row("<lambda>", "new_function"),
        row("loss_fn", "first"),
    ],
    "08_unrolled_loop": [
        row("simulate", "first"),
        row("simulate_rolled", "first"),
    ],
}

PATHS = build.notebook_paths()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run a notebook once per test module, in a temporary folder: (executed notebook, log records)."""
    home = tmp_path_factory.mktemp("home")
    env = build.kernel_env(dict(
        os.environ, HOME=str(home), IPYTHONDIR=str(home / "ipython"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"), JUPYTER_DATA_DIR=str(home / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
    ))
    runs = {}

    def run(path: Path):
        if path.stem not in runs:
            nb = nbformat.read(path, as_version=4)
            nb.cells.append(new_code_cell(LOG_PROBE))
            build.execute(nb, tmp_path_factory.mktemp(path.stem), env)
            (printed,) = [o.text for o in nb.cells.pop().outputs if o.get("name") == "stdout"]
            runs[path.stem] = build.tidy(nb), json.loads(printed)
        return runs[path.stem]

    return run


def cell_text(cell) -> str:
    """What a reader sees as text in a code cell's outputs (plain text, streams, errors)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


class _HtmlTable(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def shown_log(nb) -> list[dict[str, str]]:
    """The rows of the log DataFrame displayed by the notebook's cell tagged jaxtrace-log."""
    cells = [c for c in nb.cells if LOG_TAG in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"one cell must be tagged {LOG_TAG!r}"
    (html,) = [o["data"]["text/html"] for o in cells[0].outputs if "text/html" in o.get("data", {})]
    parser = _HtmlTable()
    parser.feed(html)
    (_, *header), *body = parser.rows
    return [dict(zip(header, values)) for _, *values in body]


def what_matters(nb) -> list[tuple[int, frozenset]]:
    """Per code cell: the functions, causes, leaves and before/after values its text shows.

    The vocabulary is the displayed log's values, so seconds, counts of equations or of JAX's
    own helpers, and the wording of the report may vary (JAX versions, machines) while every
    function, cause and leaf must stay where it was.
    """
    log = shown_log(nb)
    vocabulary = {word for r in log for k in ("function", "cause", "leaf", "before", "after")
                  for word in r.get(k, "").split()}
    return [(index, frozenset(w for w in cell_text(cell).split() if w in vocabulary))
            for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_shows_the_right_cause_and_leaf(path, executed):
    nb, log = executed(path)
    expected = EXPECTED.get(path.stem)
    assert expected is not None, f"add {path.stem}'s expected log to EXPECTED"
    columns = {name for e in expected for name in e}
    assert [{k: r[k] for k in columns} for r in log] == [{k: e.get(k) for k in columns} for e in expected]

    by_count = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}
    for r in log:
        if r["cause"] == "first":
            continue
        shown = cell_text(by_count[r["cell"]])  # the %%tracewatch report of the cell that retraced
        assert r["cause"] in shown
        for value in (r["leaf"], r["before"], r["after"]):
            assert value is None or value in shown

    for cell in nb.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if RAISES_TAG in cell.metadata.get("tags", []):
            assert [e.ename for e in errors] == ["RetraceError"]
        else:
            assert errors == [], cell.source


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_stored_outputs_are_not_stale(path, executed):
    stored = nbformat.read(path, as_version=4)
    counts = [c.execution_count for c in stored.cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "stored outputs must come from one run, top to bottom"
    fresh, _ = executed(path)
    assert shown_log(stored) == shown_log(fresh), "re-run `python notebooks/build.py`"
    stale = [(index, sorted(a ^ b)) for (index, a), (_, b) in zip(what_matters(stored), what_matters(fresh))
             if a != b]
    assert not stale, f"(cell index, words) whose stored outputs differ from a fresh run: {stale}; " \
                      "re-run `python notebooks/build.py`"


def test_every_notebook_has_expectations():
    assert PATHS[0].name == "00_tour.ipynb"
    assert sorted(EXPECTED) == [p.stem for p in PATHS]
