"""Every notebook in notebooks/ runs top to bottom in a real kernel, shows the right cause and
leaf for its case, and its stored outputs are those of a real run of its current code.

The checks read the kernel's own log after the last cell (not the widget), the text shown by
the cell that retraced, and the log table that each notebook displays in its cell tagged
``jaxtrace-log``. For every ``%%tracewatch`` output, the text, the static HTML and the widget's
saved state must say the same numbers, under labels that mean what the DataFrame's columns of
the same name hold; and no output may hold a path of the machine that ran it.
"""

import copy
import importlib.util
import json
import os
import re
from collections import Counter
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
NOTEBOOKS_JAX = (
    "0.10.2"  # the JAX the stored notebooks were built with (`python notebooks/build.py`)
)
# Run after a notebook's last cell, then removed: prints the session's log, each cell's
# per-function summary (of the functions every view shows), and the kernel's working folder (the
# views show a file's path relative to it), as JSON.
LOG_PROBE = (
    "import json, os, jaxtrace_nb\n"
    "from jaxtrace_nb._views._frames import summary_frame\n"
    "from jaxtrace_nb._recording._session import get_session\n"
    "_events = [e for e in get_session().log.events() if not e.internal]\n"
    'print(json.dumps({"log": json.loads(jaxtrace_nb.log(internal=False)[["cell", '
    '"function", "nested", '
    '"cause", "leaf", "before", "after"]].to_json(orient="records")), "summaries": {\n'
    "    c: json.loads(summary_frame([e for e in _events if e.cell == "
    'c]).to_json(orient="records"))\n'
    '    for c in {e.cell for e in _events}}, "cwd": os.getcwd()}))'
)


def row(function, cause, leaf=None, before=None, after=None, **more):
    return dict(function=function, cause=cause, leaf=leaf, before=before, after=after, **more)


# The session log each notebook must end with, in order (non-internal events).
EXPECTED = {
    "00_tour": [
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
        row(
            "loss",
            "static",
            "model.activation",
            "<function make_model.<locals>.<lambda>>",
            "<function make_model.<locals>.<lambda>> (another object)",
        ),
        row(
            "loss",
            "static",
            "model.activation",
            "<function make_model.<locals>.<lambda>>",
            "<function make_model.<locals>.<lambda>> (another object)",
        ),
        row(
            "loss",
            "static",
            "model.activation",
            "<function make_model.<locals>.<lambda>>",
            "<function gelu_exact>",
        ),
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
    "10_persistent_cache": [
        row("make_train_step.<locals>.train_step", "first"),
        row("train_step_lr", "first"),
    ],
    "11_where_compile_time_goes": [
        row("train_step", "first"),
        *(
            row("train_step", "shape", "tokens", f"i32[8,{a}]", f"i32[8,{b}]")
            for a, b in zip(
                *(lambda n: (n, n[1:]))([34, 119, 21, 58, 203, 16, 84, 136, 41, 250, 27, 96])
            )
        ),
        row("train_step_bucketed", "first"),
        *(
            row("train_step_bucketed", "shape", "tokens", f"i32[8,{a}]", f"i32[8,{b}]")
            for a, b in zip(*(lambda n: (n, n[1:]))([34, 136, 58, 250, 96]))
        ),
    ],
    "12_precompile": [
        row("make_step.<locals>.step", "first"),
        *(
            row("make_step.<locals>.step", "shape", "x", f"f32[{a},64]", f"f32[{b},64]")
            for a, b in ((8, 12), (12, 16), (16, 24), (24, 32))
        ),
        row("make_step.<locals>.step", "new_function"),
        *(  # the worker's traces, each from the size before (the keys the new object holds)
            row("make_step.<locals>.step", "shape", "x", f"f32[{a},64]", f"f32[{b},64]")
            for a, b in ((8, 12), (12, 16), (16, 24), (24, 32))
        ),
    ],
    "09_flax_nnx": [
        row("train_step", "first"),
        row("train_step", "static", "model.calls", "0", "1"),
        row("train_step", "static", "model.calls", "1", "2"),
        row("train_step", "static", "model.calls", "2", "3"),
        row("train_step", "static", "model.calls", "3", "i32[]"),
    ],
}

PATHS = build.notebook_paths()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run a notebook once per test module, in a temporary folder: (executed notebook as stored,
    log records); `executed.raw(path)` gives (the notebook with its widget state, per-cell
    summaries)."""
    home = tmp_path_factory.mktemp("home")
    env = build.kernel_env(
        dict(
            os.environ,
            HOME=str(home),
            IPYTHONDIR=str(home / "ipython"),
            JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
            JUPYTER_DATA_DIR=str(home / "jupyter-data"),
            JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
        )
    )
    runs = {}

    def execute(path: Path):
        if path.stem not in runs:
            nb = nbformat.read(path, as_version=4)
            nb.cells.append(new_code_cell(LOG_PROBE))
            build.execute(nb, tmp_path_factory.mktemp(path.stem), env)
            (printed,) = [o.text for o in nb.cells.pop().outputs if o.get("name") == "stdout"]
            probe = json.loads(printed)
            raw = copy.deepcopy(nb)
            runs[path.stem] = (
                (build.tidy(nb), probe["log"]),
                (raw, {int(c): rows for c, rows in probe["summaries"].items()}),
            )
            run.cwd[path.stem] = probe["cwd"]
        return runs[path.stem]

    def run(path: Path):
        return execute(path)[0]

    run.raw = lambda path: execute(path)[1]
    run.cwd = {}  # notebook -> the kernel's working folder after its last cell
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


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_shows_the_right_cause_and_leaf(path, executed):
    nb, log = executed(path)
    expected = EXPECTED.get(path.stem)
    assert expected is not None, f"add {path.stem}'s expected log to EXPECTED"
    columns = {name for e in expected for name in e}
    assert [{k: r[k] for k in columns} for r in log] == [
        {k: e.get(k) for k in columns} for e in expected
    ]

    by_count = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}
    repeats = Counter(
        (r["cell"], r["function"], r["cause"], r["leaf"]) for r in log if r["cause"] != "first"
    )
    for r in log:
        if r["cause"] == "first":
            continue
        shown = cell_text(by_count[r["cell"]])  # the %%tracewatch report of the cell that retraced
        assert r["cause"] in shown
        for value in (r["leaf"], r["before"], r["after"]):
            if value is None or value in shown:
                continue
            # a long group of repeats shows its first and last changes and elides the middle ones:
            # then the group's line, with its count, must be there
            n = repeats[(r["cell"], r["function"], r["cause"], r["leaf"])]
            assert f"×{n} {r['cause']} at `{r['leaf']}`: " in shown and "…" in shown, value

    for cell in nb.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if RAISES_TAG in cell.metadata.get("tags", []):
            assert [e.ename for e in errors] == ["RetraceError"]
        else:
            assert errors == [], cell.source


# ------------------------------------------------- stored outputs are those of a fresh run
# What a fresh run may change in a stored output: its timings, and nothing else. A timing is a
# number of seconds (`_TIMED` in prose: "0.763 s", "trace 0.035 + lower 0.043 + XLA compile 0.530"),
# a seconds column of a report or a DataFrame (`TIMED_COLUMNS`), the wall-clock `time` of an event,
# and what follows from them: a report's function rows are sorted by their seconds (compared as a
# set) and its bars are drawn to them (markup is not compared, only texts). Widget model ids are
# random per run: each is replaced by its order of first use. A DataFrame's text/plain is laid out
# by the widths of its (timed) values; its text/html twin, cell by cell, is compared instead.
# Issue 30's views follow the timings too: a line's `compile_s_est` (the compile's seconds shared
# out), the timeline (its texts are compared, timings masked, less its axis' tick labels, whose
# count follows the wall time), and `jt.plot_timeline()`'s image (not compared).
TIMED_COLUMNS = {
    "trace_s",
    "lower_s",
    "compile_s",
    "total_s",
    "time",
    "compile_s_per_keqn",
    "compile_s_est",
}
UNCOMPARED_CLASSES = {"jtnb-tl-tick-label"}
IMAGE = "<image drawn to the timings>"
_TIMED = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?= ?(?:s|ms|µs)\b)|(?<=trace )\d+\.\d+|(?<=lower )\d+\.\d+"
    r"|(?<=XLA compile )\d+\.\d+|(?<=\+ compile )\d+\.\d+"
)
_MODEL_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME_LINE = re.compile(r"^(Cell In\[\d+\], line \d+|File \S+|-+> ?\d+ )")
TIME = "<time>"
# Another run's identity, which a persistent cache miss names: when it ran, its process and host.
_RUN = re.compile(r"the run of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, pid \d+ on [^\s)]+")
RUN = "the run of <run>"
# A function's id in the views hashes its key, which holds its file's path: a program written to a
# new temporary folder each run (notebook 10's train.py) gets new ids. Ids are not shown: masked.
_FUNCTION_ID = re.compile(r"(?<![0-9A-Za-z])f[0-9a-f]{12}(?![0-9a-f])")
FUNCTION_ID = "<function id>"


def _untimed(text: str) -> str:
    return _RUN.sub(RUN, _TIMED.sub(TIME, text))


def _report_text(text: str) -> str:
    """A text report with its timings masked: the headline's, and the seconds columns of its
    function table (whose rows are sorted by them: compared sorted)."""
    from jaxtrace_nb._views._report import TABLE_COLUMNS

    lines = _untimed(text).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("function")), None)
    if start is None:
        return "\n".join(lines)
    spans = _text_spans(lines[start], TABLE_COLUMNS)
    end = next((i for i in range(start + 2, len(lines)) if not lines[i].strip()), len(lines))
    rows = []
    for line in lines[start + 2 : end]:
        cells = [line[a:b].strip() for _, a, b in spans]
        rows.append(
            " | ".join(
                TIME if c.name in TIMED_COLUMNS and v else v for (c, _, _), v in zip(spans, cells)
            )
        )
    return "\n".join(lines[: start + 2] + sorted(rows) + lines[end:])


def _text_spans(header: str, columns) -> list:
    """(column, start, end) of each column the terminal table's `header` shows (end None: the last).
    A text column starts at its label and ends before the next column; a number's column ends at its
    label, as wide as its `text_width` (text columns widen to their values, numbers do not)."""
    from jaxtrace_nb._views._text import _NUMERIC

    found, at = [], 0
    for c in columns:
        position = (
            re.search(rf"(?<!\S){re.escape(c.label)}(?!\S)", header[at:]) if c.text_width else None
        )
        if position is not None:
            found.append((c, at + position.start()))
            at += position.end()
    starts = [
        p + len(c.label) - max(c.text_width, len(c.label)) if c.kind in _NUMERIC else p
        for c, p in found
    ]
    return [
        (c, a, b - 1 if b is not None else None)
        for (c, _), a, b in zip(found, starts, [*starts[1:], None])
    ]


class _Texts(HTMLParser):
    """Every text of an HTML output, in order (data, and `title` attributes, which hold full
    values), with the cells of timed columns masked: a report's (``jtnb-c-<column>`` classes) and a
    DataFrame's (by its header). A report's function rows are sorted (they follow their seconds)."""

    def __init__(self, html: str):
        super().__init__()
        self.texts: list = []
        self._timed = 0  # depth inside a timed cell
        self._header: list[str] = []
        self._column = 0
        self._in_head = False
        self._summary_rows: list | None = None
        self._where: list[tuple[str, set]] = []
        self._skipped = 0  # depth inside an element not compared (`UNCOMPARED_CLASSES`)
        self.feed(html)
        self.close()

    def _timed_cell(self, tag, classes) -> bool:
        if tag == "td" and any(
            c.startswith("jtnb-c-") and c[len("jtnb-c-") :] in TIMED_COLUMNS for c in classes
        ):
            return True
        if tag == "td" and self._header:
            index = self._column - 1
            return 0 <= index < len(self._header) and self._header[index] in TIMED_COLUMNS
        return False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag in ("wbr", "br"):
            return
        if self._skipped or classes & UNCOMPARED_CLASSES:
            self._skipped += 1
            return
        if tag == "thead":
            self._in_head, self._header = True, []
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr":
            self._column = 0
            if self._summary_rows is not None and not self._in_head:
                self.texts.append(["row"])
        elif tag in ("td", "th"):
            self._column += 1
            if tag == "th" and self._in_head:
                self._header.append("")
        if tag == "table":
            self._summary_rows = [] if "jtnb-summary" in classes else None
        timed = self._timed or self._timed_cell(tag, classes)
        self._where.append((tag, timed))
        if timed:
            self._timed += 1
            if self._timed == 1:
                self._emit(TIME)
        elif attrs.get("title"):
            self._emit(f"title={_untimed(attrs['title'])}")

    def handle_endtag(self, tag):
        if tag in ("wbr", "br"):
            return
        if self._skipped:
            self._skipped -= 1
            return
        if not self._where:
            return
        _, timed = self._where.pop()
        if timed:
            self._timed -= 1
        if tag == "table" and self._summary_rows is not None:
            rows = [r for r in self.texts if isinstance(r, list)]
            self.texts = [t for t in self.texts if not isinstance(t, list)] + sorted(
                map(tuple, rows)
            )
            self._summary_rows = None

    def handle_data(self, data):
        if self._timed or self._skipped or not data.strip():
            return
        if self._in_head and self._where and self._where[-1][0] == "th" and self._header:
            self._header[-1] += data.strip()
        self._emit(_untimed(data.strip()))

    def _emit(self, text):
        last = self.texts[-1] if self.texts else None
        (last if isinstance(last, list) else self.texts).append(text)


def _output(output, ids: dict) -> tuple:
    """What a reader sees of one stored output, its timings masked (see `TIMED_COLUMNS`)."""
    kind = output.output_type
    if kind == "stream":
        return (
            kind,
            output.name,
            _report_text(output.text.rstrip()),
        )  # (a script's report, printed at its exit)
    if kind == "error":
        # IPython's own layout of the source around each frame differs between its versions: the
        # frames (cell and line, file) and the line each points at are compared, not the context.
        frames = [
            line
            for line in _ANSI.sub("", "\n".join(output.traceback)).splitlines()
            if _FRAME_LINE.match(line)
        ]
        return kind, output.ename, _untimed(output.evalue), _untimed("\n".join(frames))
    data = output.get("data", {})
    seen = []
    for mime in sorted(data):
        value = data[mime]
        if mime == WIDGET_VIEW:
            seen.append((mime, ids.setdefault(value["model_id"], f"model {len(ids)}")))
        elif mime == "text/html":
            seen.append((mime, _Texts(value).texts))
        elif mime == "text/plain":
            if "text/html" in data and "dataframe" in data["text/html"]:
                continue  # laid out by its values' widths: its text/html twin is compared
            seen.append((mime, _report_text(value)))
        elif mime.startswith("image/"):
            seen.append((mime, IMAGE))
        else:
            seen.append((mime, value))
    return kind, seen


def _widget_state(nb, ids: dict) -> list:
    """The stored widget models, in the order their views were shown, their timings masked."""
    states = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    shown, done = [], 0
    while done < len(ids):  # the models the views show, then those they refer to (`IPY_MODEL_<id>`)
        model_id = list(ids)[done]
        done += 1
        model = states.get(model_id)
        if model is None:
            continue
        state = dict(model["state"])
        for key in ("headline", "headline_all", "timeline_caption"):
            if key in state:
                state[key] = _untimed(state[key])
        if state.get("timeline_svg"):
            state["timeline_svg"] = _Texts(state["timeline_svg"]).texts
        if "rows_json" in state:
            rows = [
                {k: (TIME if k in TIMED_COLUMNS and v is not None else v) for k, v in row.items()}
                for row in json.loads(state["rows_json"])
            ]
            for row in rows:
                if isinstance(row.get("key"), str):
                    row["key"] = FUNCTION_ID
            state["rows_json"] = sorted(json.dumps(r, sort_keys=True) for r in rows)
        text = _MODEL_ID.sub(
            lambda m: ids.setdefault(m.group(), f"model {len(ids)}"),
            json.dumps(state, sort_keys=True),
        )
        text = _RUN.sub(RUN, _FUNCTION_ID.sub(FUNCTION_ID, text))
        shown.append((model["model_name"], text))
    others = [m for i, m in states.items() if i not in ids]
    return shown + sorted(json.dumps(m, sort_keys=True) for m in others)


def as_shown(nb) -> list:
    """Every code cell's outputs and the widgets' stored state, as a reader sees them, timings
    masked."""
    ids: dict = {}
    cells = [
        (index, [_output(o, ids) for o in cell.get("outputs", [])])
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
    ]
    return cells + [("widgets", _widget_state(nb, ids))]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_stored_outputs_are_not_stale(path, executed):
    """Every stored output (streams, errors, reports in text, HTML and widget state, DataFrames)
    says what a fresh run of the notebook says: the same texts and numbers, timings masked."""
    import jax

    if jax.__version__ != NOTEBOOKS_JAX:
        pytest.skip(
            f"the stored outputs were made with JAX {NOTEBOOKS_JAX} (notebooks/build.py), and "
            f"another JAX gives its own equation counts and internal functions: {jax.__version__} "
            "is checked by the cause-and-leaf tests only; CI's newest environment runs this check"
        )
    stored = nbformat.read(path, as_version=4)
    counts = [c.execution_count for c in stored.cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), (
        "stored outputs must come from one run, top to bottom"
    )
    fresh, _ = executed(path)
    stale = [(a[0], a, b) for a, b in zip(as_shown(stored), as_shown(fresh)) if a != b]
    assert not stale, (
        f"{path.name}: outputs that differ from a fresh run (cell index, stored, fresh): "
        f"{str(stale)[:3000]}; re-run `python notebooks/build.py`"
    )


def test_the_staleness_check_sees_each_edit_of_a_stored_output():
    """Issue 32's edits of stored notebook 06, each in one place (one MIME type of one output, or
    the widget state): counts, a row's number, a hint's words. Each must make `as_shown` differ from
    the stored notebook; a timing edit must not (timings are masked)."""
    path = NOTEBOOKS_DIR / "06_python_scalar_weak_type.ipynb"
    shown = as_shown(nbformat.read(path, as_version=4))
    edits = [
        ("2 trace(s), 2 compile(s)", "7 trace(s), 9 compile(s)"),
        ("1 retrace(s)", "3 retrace(s)"),
        ("pass the same kind every call", "pass any kind"),
        ("weak_type", "dtype"),
    ]

    def edited(old, new, where):
        nb = nbformat.read(path, as_version=4)
        if where == "widgets":
            state = nb.metadata["widgets"][WIDGET_STATE]
            text = json.dumps(state)
            assert old in text, (old, where)
            nb.metadata["widgets"][WIDGET_STATE] = json.loads(text.replace(old, new))
            return nb
        output, mime = where
        data = nb.cells[2].outputs[output]["data"]
        assert old in data[mime], (old, where)
        data[mime] = data[mime].replace(old, new)
        return nb

    places = [(1, "text/plain"), (1, "text/html"), "widgets"]
    seen = 0
    for old, new in edits:
        for where in places:
            try:
                nb = edited(old, new, where)
            except AssertionError:
                continue  # this place does not show that text
            seen += 1
            assert as_shown(nb) != shown, f"editing {old!r} to {new!r} in {where} went unnoticed"
    assert seen >= len(edits) * 2, seen
    stored = nbformat.read(path, as_version=4).cells[2].outputs[1]["data"]["text/plain"]
    total = re.search(r"retrace\(s\); (\d+\.\d+ s) = trace", stored).group(
        1
    )  # this build's own seconds
    nb = edited(total, "9.999 s", (1, "text/plain"))
    assert as_shown(nb) == shown  # a timing: masked


def test_every_notebook_has_expectations():
    assert PATHS[0].name == "00_tour.ipynb"
    assert sorted(EXPECTED) == [p.stem for p in PATHS]


def test_the_persistent_cache_notebook_explains_the_miss_then_hits(executed):
    """10_persistent_cache, run fresh: after the "restart" (another process filled the cache), the
    miss names the captured learning rate at its line, with its hint; after the fix, a hit."""
    nb, log = executed(NOTEBOOKS_DIR / "10_persistent_cache.ipynb")
    texts = [cell_text(c) for c in nb.cells if c.cell_type == "code"]
    (miss,) = [t for t in texts if "persistent cache miss:" in t]
    assert "persistent cache: 0 hit(s), 1 miss(es)" in miss
    assert (
        "persistent cache miss: the computation differs first at train.py:24 "
        "(`jit(train_step)/mul`, `stablehlo.constant`): `0.001` → `0.0003` (closest earlier key of "
        "`jit_train_step`: the run of "
    ) in miss
    assert "hint: train.py:24 puts a value captured from Python" in miss
    (hit,) = [
        t for t in texts if "%%tracewatch" in t and "persistent cache: 1 hit(s), 0 miss(es)" in t
    ]
    assert "train_step_lr" in hit and "persistent cache miss" not in hit


# ------------------------------------------------- every view says the same thing
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
HEADLINE = re.compile(
    r": (\d+) trace\(s\), (\d+) compile\(s\) of (\d+) function\(s\), (\d+) retrace\(s\); "
    r"([\d.]+) s = trace ([\d.]+) \+ lower ([\d.]+) \+ XLA compile ([\d.]+)"
    r"(?: \((\d+) event\(s\) of (\d+) internal function\(s\) hidden\))?"
)
MACHINE_PATH = re.compile(
    r"/root/|/home/|/Users/|/tmp/|site-packages/|dist-packages/|[A-Z]:\\\\Users"
)


class _Tables(HTMLParser):
    """The static report's headline and tables: per table class, its header (column name, label)
    and rows (column name -> (cell text, text of its <code>))."""

    def __init__(self, html: str):
        super().__init__()
        self.headline, self.tables = "", {}
        self._where: list[str] = []
        self._table = self._cell = None
        self.feed(html)

    @staticmethod
    def _column(attrs) -> str:
        return next(
            (
                c[len("jtnb-c-") :]
                for c in dict(attrs).get("class", "").split()
                if c.startswith("jtnb-c-")
            ),
            "",
        )

    def handle_starttag(self, tag, attrs):
        classes = dict(attrs).get("class", "").split()
        if tag in ("wbr", "br"):  # void: no end tag
            return
        self._where.append(tag)
        if tag == "div" and "jtnb-headline" in classes:
            self._cell = ["headline", [], []]
        elif tag == "table":
            self._table = self.tables.setdefault(
                next(c[5:] for c in classes if c != "jtnb-table"), {"header": [], "rows": []}
            )
        elif tag == "tr" and self._table is not None and "tbody" in self._where:
            self._table["rows"].append({})
        elif tag in ("th", "td") and self._table is not None:
            self._cell = [self._column(attrs), [], []]

    def handle_endtag(self, tag):
        if self._where:
            self._where.pop()
        if self._cell is None:
            return
        name, text, code = self._cell
        if tag == "div" and name == "headline":
            self.headline, self._cell = "".join(text), None
        elif tag == "th":
            self._table["header"].append((name, "".join(text)))
            self._cell = None
        elif tag == "td":
            self._table["rows"][-1][name] = ("".join(text).strip(), "".join(code))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1].append(data)
            if self._where and self._where[-1] == "code":
                self._cell[2].append(data)


def _numbers(headline: str) -> tuple:
    match = HEADLINE.search(headline)
    assert match, headline
    return tuple(float(g or 0) for g in match.groups())


def _missing(value) -> bool:
    return value is None or value != value


def _shown(column, value) -> str:
    """How every view prints `value` of `column` (the DataFrame's value)."""
    from jaxtrace_nb._core._format import short_path

    if _missing(value):
        return ""
    if column.kind in ("seconds", "bar"):
        return f"{value:.3f}"
    if column.kind == "int":
        return str(int(value))
    return short_path(value) if column.kind == "path" else str(value)


def _text_rows(text: str, columns) -> tuple[list[str], list[dict]]:
    """The terminal table of a text report: its labels and, per row, column name -> text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("function"))
    spans = _text_spans(lines[start], columns)
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append({c.name: line[a:b].strip() for c, a, b in spans})
    return [c.label for c, _, _ in spans], rows


def _tracewatch_outputs(raw):
    """(cell, widget state, static text, static HTML) of each %%tracewatch cell that displayed."""
    states = raw.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in raw.cells:
        if (
            cell.cell_type != "code"
            or not cell.source.startswith("%%tracewatch")
            or "--quiet" in cell.source
        ):
            continue
        displays = [o for o in cell.outputs if o.output_type == "display_data"]
        (widget,) = [o for o in displays if WIDGET_VIEW in o.data]
        (static,) = [o for o in displays if "text/html" in o.data]
        yield (
            cell,
            states[widget.data[WIDGET_VIEW]["model_id"]]["state"],
            static.data["text/plain"],
            static.data["text/html"],
        )


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_every_view_shows_the_same_numbers_under_the_same_labels(path, executed, monkeypatch):
    from jaxtrace_nb._views._report import TABLE_COLUMNS
    from jaxtrace_nb._views._rows import SPECS
    from jaxtrace_nb._views._text import _TEXT_GROWS

    raw, summaries = executed.raw(path)
    monkeypatch.chdir(executed.cwd[path.stem])  # paths shortened as the kernel shortened them
    framed = [c for c in TABLE_COLUMNS if c.in_frame]
    text_columns = [
        c for c in TABLE_COLUMNS if c.text_width and c.collapse != "empty"
    ]  # (test: under pytest)
    seen = 0
    for cell, state, text, html in _tracewatch_outputs(raw):
        seen += 1
        frame = summaries.get(cell.execution_count, [])
        tables = _Tables(html)
        headlines = {
            "text": text.splitlines()[0],
            "html": tables.headline,
            "widget": state["headline"],
        }
        numbers = {view: _numbers(line) for view, line in headlines.items()}
        assert len(set(numbers.values())) == 1, (cell.source, headlines)
        traces, compiles, functions = numbers["text"][:3]
        assert (functions, traces, compiles) == (
            len(frame),
            sum(r["traces"] for r in frame),
            sum(r["compiles"] for r in frame),
        ), (cell.source, frame)
        for stage, at in (("trace_s", 5), ("lower_s", 6), ("compile_s", 7)):
            assert abs(numbers["text"][at] - sum(r[stage] or 0 for r in frame)) <= 0.0015, stage

        summary = tables.tables.get("summary", {"header": [], "rows": []})
        # a column that gives way where empty (`collapse="empty"`: loop ×) is left out when no row
        # has a value
        in_html = [
            c
            for c in TABLE_COLUMNS
            if c.collapse != "empty" or any(not _missing(r.get(c.name)) for r in frame)
        ]
        assert summary["header"] == ([(c.name, c.label) for c in in_html] if frame else [])
        assert state["columns"] == SPECS["columns"]
        shown = [r for r in json.loads(state["rows_json"]) if not r["hidden"]]
        labels, text_rows = _text_rows(text, text_columns) if frame else ([], [])
        assert labels == ([c.label for c in text_columns] if frame else [])
        assert len(summary["rows"]) == len(shown) == len(text_rows) == len(frame)
        for expected, html_row, widget_row, text_row in zip(
            frame, summary["rows"], shown, text_rows
        ):
            for c in framed:
                value = expected[c.name]
                want = _shown(c, value)
                if c in in_html:
                    got_html = html_row[c.name][1] if c.kind == "code" else html_row[c.name][0]
                    assert got_html == want, (path.stem, c.name, got_html, want)
                got = widget_row[c.name]
                assert (
                    (got is None)
                    if _missing(value)
                    else (
                        got == pytest.approx(value)
                        if isinstance(value, float)
                        else _shown(c, got) == want
                    )
                ), (c.name, got, value)
                if c.text_width:
                    width = max(
                        c.text_width, len(c.label), _TEXT_GROWS.get(c.name, 0)
                    )  # (names here: shorter)
                    assert text_row[c.name] == (want if c is text_columns[-1] else want[:width]), (
                        c.name,
                        text_row,
                    )
    assert seen, "every notebook shows at least one %%tracewatch report"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_fresh_outputs_hold_no_machine_paths(path, executed):
    raw, _ = executed.raw(path)
    found = sorted(set(MACHINE_PATH.findall(json.dumps(raw))))
    assert not found, f"{path.stem}: a fresh run's outputs hold machine paths: {found}"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_stored_notebooks_hold_no_machine_paths(path):
    text = path.read_text(encoding="utf-8")
    found = sorted(
        {text[max(0, m.start() - 60) : m.end() + 40] for m in MACHINE_PATH.finditer(text)}
    )
    assert not found, (
        f"{path.name} holds paths of the machine that built it (re-run notebooks/build.py): {found}"
    )
