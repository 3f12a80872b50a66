"""Start/stop leaves JAX and IPython as found; hostile strings never reach a page raw."""

import json
import os
import pathlib
import warnings

import jax
import jax.numpy as jnp
import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

import jaxtrace_nb as jt
from jaxtrace_nb._recording._session import get_session
from jaxtrace_nb._views._report import Report
from jaxtrace_nb._views._text import mimebundle, render_html, render_text


def _jax_state() -> tuple:
    """Everything of JAX's that jaxtrace_nb touches, as values comparable with ==."""
    from jax._src import compiler, config, traceback_util
    from jax._src import monitoring as mon
    from jax._src.interpreters import partial_eval as pe

    from jaxtrace_nb._jax._layouts import detect_layout

    hook_module = (
        detect_layout().hook_module
    )  # where the trace hook goes: partial_eval, or util on JAX 0.8
    return (
        hook_module.test_event,
        getattr(pe, "trace_to_jaxpr", None),
        compiler.compile_or_get_cached,
        list(mon._event_listeners),
        list(mon._event_duration_secs_listeners),
        list(mon._event_time_span_listeners),
        list(mon._scalar_listeners),
        config.explain_cache_misses.value,
        config.log_compiles.value,
        list(traceback_util._exclude_paths),
    )


def _one_trace_records_one_event() -> None:
    jt.reset()

    @jax.jit
    def once(x):
        return x + 1

    once(1.0)
    once(2.0)
    assert jt.log(internal=False)[["function", "cause"]].values.tolist() == [
        ["_one_trace_records_one_event.<locals>.once", "first"]
    ]
    jt.reset()


def test_start_stop_100_times_leaves_jax_as_found():
    jt.stop()
    jt.start()  # the first start registers our traceback exclusion (kept: JAX cannot remove one)
    jt.stop()
    before = _jax_state()
    for _ in range(100):
        jt.start()
        jt.start()
        assert get_session().recording
        jt.stop()
        jt.stop()
        assert not get_session().recording
    assert _jax_state() == before
    with jt.watch():
        with jt.watch():
            pass
    assert _jax_state() == before
    jt.start()
    try:
        _one_trace_records_one_event()
    finally:
        jt.stop()
    assert _jax_state() == before
    ours = os.path.dirname(jt.__file__)
    assert before[-1].count(ours) == 1


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    old = sh.display_pub
    sh.display_pub = CapturingDisplayPublisher()
    sh.run_cell("import jax")
    yield sh
    sh.run_cell("%unload_ext jaxtrace_nb")
    sh.display_pub = old
    jt.reset()


def _ipython_state(sh) -> tuple:
    return (
        {name: list(callbacks) for name, callbacks in sh.events.callbacks.items()},
        {kind: sorted(magics) for kind, magics in sh.magics_manager.magics.items()},
        sorted(sh.magics_manager.registry),
    )


def test_load_unload_reload_100_times_leaves_jax_and_ipython_as_found(shell):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("%unload_ext jaxtrace_nb")
    before_jax = _jax_state()
    before_ipython = _ipython_state(shell)
    for _ in range(100):
        shell.run_cell("%load_ext jaxtrace_nb")
        shell.run_cell("%load_ext jaxtrace_nb")
        shell.run_cell("%reload_ext jaxtrace_nb")
        shell.run_cell("%unload_ext jaxtrace_nb")
    assert _jax_state() == before_jax
    assert _ipython_state(shell) == before_ipython
    assert (
        "tracewatch" not in shell.magics_manager.magics["line"]
    )  # unloaded: no magic of ours left
    assert "tracewatch" not in shell.magics_manager.magics["cell"]
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("%reload_ext jaxtrace_nb")
    _one_trace_records_one_event()


# ------------------------------------------------------------------ hostile strings
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "</script><script>alert(1)</script>"
CONTROL = "\x00\x1b[31m\u202e"  # NUL, a terminal colour escape, a right-to-left override
RAW_CONTROL = ("\x00", "\x1b", "\u202e")


def _hostile_events() -> list:
    def step(x, mode, batch):
        return x + sum(jax.tree_util.tree_leaves(batch))

    step.__qualname__ = step.__name__ = IMG + CONTROL
    jitted = jax.jit(step, static_argnums=1)
    batch = {IMG: jnp.ones(1), CONTROL: jnp.ones(1)}
    jitted(jnp.ones(2), SCRIPT, batch)
    jitted(jnp.ones(3), SCRIPT, batch)
    jitted(jnp.ones(3), SCRIPT + CONTROL, batch)
    jitted(jnp.ones(3), SCRIPT + CONTROL, {**batch, "<b>" + CONTROL: jnp.ones(1)})
    return get_session().log.events()


@pytest.fixture
def hostile(jt):
    events = _hostile_events()
    assert [e.cause for e in events if not e.internal] == ["first", "shape", "static", "structure"]
    return events


def _assert_safe_html(page: str) -> None:
    lower = page.lower()
    assert "<img" not in lower and "<script" not in lower and "</script" not in lower
    assert not any(c in page for c in RAW_CONTROL)


def test_log_carries_user_text_without_raw_control_characters(hostile):
    df = jt.log(internal=False)
    for column in ("function", "location", "leaf", "before", "after", "explanation", "hint"):
        for value in df[column].dropna():
            assert not any(c in value for c in RAW_CONTROL), (column, value)
    assert df["function"].iloc[0].startswith(IMG)  # as data: escaping is each view's job
    assert SCRIPT in df["after"].iloc[2]


def test_html_and_text_views_escape_user_text(hostile):
    for internal in (False, True):
        report = Report(hostile, IMG + SCRIPT, internal=internal)
        page = render_html(report)
        _assert_safe_html(page)
        assert "&lt;img src=x onerror=alert(1)&gt;" in page
        assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
        text = render_text(report)
        assert not any(c in text for c in RAW_CONTROL)
        bundle = mimebundle(report)
        _assert_safe_html(bundle["text/html"])
        assert not any(c in bundle["text/plain"] for c in RAW_CONTROL)


def test_magic_output_escapes_user_text(jt):
    sh = InteractiveShell.instance()
    old = sh.display_pub
    sh.display_pub = publisher = CapturingDisplayPublisher()
    try:
        sh.run_cell("%load_ext jaxtrace_nb")
        sh.user_ns["_hostile_events"] = _hostile_events
        sh.run_cell("%%tracewatch --internal\n_hostile_events()\n")
        sh.run_cell("%tracewatch --internal")
    finally:
        sh.run_cell("%unload_ext jaxtrace_nb")
        sh.display_pub = old
    outputs = [o["data"] for o in publisher.outputs]
    assert len(outputs) == 2
    for data in outputs:
        _assert_safe_html(data["text/html"])
        assert not any(c in data["text/plain"] for c in RAW_CONTROL)


def test_widget_carries_user_text_as_data(hostile):
    from jaxtrace_nb._views._widget import TraceTable

    table = TraceTable(Report(hostile, IMG), show_all=True)
    table.selected = table.rows[0]["key"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ipywidgets' own, on get_state
        state = table.get_state()
    assert not any(c in state["rows_json"] for c in RAW_CONTROL)
    state["rows_json"] = json.loads(state["rows_json"])
    strings = _strings(state)
    assert any(s.startswith(IMG) for s in strings)  # data, set through textContent by the view
    assert not any(c in s for s in strings for c in RAW_CONTROL)
    data, _ = table._repr_mimebundle_()
    assert set(data) == {"text/plain", "application/vnd.jupyter.widget-view+json"}
    _assert_safe_html(table.static_bundle()["text/html"])
    script = os.path.join(os.path.dirname(jt.__file__), "_views", "_widget.js")
    with open(script, encoding="utf-8") as f:
        source = f.read()
    assert (
        "innerHTML" not in source
        and "insertAdjacentHTML" not in source
        and "outerHTML" not in source
    )


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def test_standalone_report_carries_user_text_as_data(hostile, tmp_path):
    """The self-contained report: user text only inside the escaped JSON and the escaped static
    copy."""
    import re

    path = jt.report(tmp_path / "hostile.html", events=hostile, internal=True)
    page = pathlib.Path(path).read_text(encoding="utf-8")
    (data,) = re.findall(
        r"<script type='application/json' id='jtnb-data'>(.*?)</script>", page, re.S
    )
    outside = page.replace(data, "")
    lower = outside.lower()
    assert "<img" not in lower and lower.count("<script") == 2 and lower.count("</script") == 2
    assert "&lt;img src=x onerror=alert(" in outside  # escaped (and breakable: <wbr> after "(")
    assert "<" not in data and ">" not in data and "&" not in data
    strings = _strings(json.loads(data))
    assert any(s.startswith(IMG) for s in strings) and any(SCRIPT in s for s in strings)
    assert not any(c in page for c in RAW_CONTROL)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
