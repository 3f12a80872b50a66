"""The Python API and the log's contract."""

import gc
import weakref

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

import jaxtrace_nb as jt_module
from jaxtrace_nb._log._events import COLUMNS, Event
from jaxtrace_nb._recording._session import get_session

CONTRACT = [
    "time",
    "cell",
    "function",
    "location",
    "kind",
    "internal",
    "nested",
    "trace_number",
    "cause",
    "leaf",
    "before",
    "after",
    "explanation",
    "hint",
    "trace_s",
    "lower_s",
    "compile_s",
]


def _retracing():
    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    f(jnp.ones(3))
    return f


def test_columns_and_dtypes(jt):
    _retracing()
    df = jt.log()
    assert list(df.columns[: len(CONTRACT)]) == CONTRACT
    assert str(df["time"].dtype).startswith("datetime64")
    assert str(df["cell"].dtype) == "Int64"
    for col in ("trace_s", "lower_s", "compile_s"):
        assert df[col].dtype == "float64"
    assert isinstance(df["cause"].dtype, pd.CategoricalDtype)
    assert set(df["cause"].cat.categories) >= {
        "first",
        "shape",
        "static",
        "structure",
        "new_function",
    }


def test_summary_one_row_per_function(jt):
    _retracing()
    s = jt.summary()
    assert len(s) == 1
    row = s.iloc[0]
    assert (row["traces"], row["compiles"], row["last_cause"], row["last_leaf"]) == (
        2,
        2,
        "shape",
        "x",
    )
    assert row["total_s"] == pytest.approx(row["trace_s"] + row["lower_s"] + row["compile_s"])


def test_watch_without_start_and_nested():
    jt_module.reset()
    session = get_session()
    assert not session.recording
    with jt_module.watch() as outer:
        f = _retracing()
        with jt_module.watch() as inner:
            f(jnp.ones(4))
        assert session.recording
    assert not session.recording  # the scope stopped what it started
    assert len(outer.events.query("not internal")) == 3
    assert inner.events.query("not internal")["cause"].tolist() == ["shape"]
    jt_module.reset()


def test_max_traces_guard_names_leaf(jt):
    @jax.jit
    def g(x):
        return x * 2

    with pytest.raises(jt.RetraceError) as info:
        with jt.watch(max_traces=2):
            for n in range(1, 5):
                g(jnp.ones(n))
    message = str(info.value)
    assert "traced 3 times" in message and "`x`" in message and "f32[2] → f32[3]" in message


def test_log_cap_and_dropped(jt):
    get_session().log.set_max_events(5)
    try:

        @jax.jit
        def h(x):
            return x

        for n in range(1, 9):
            h(jnp.ones(n))
        df = jt.log(internal=False)
        assert len(jt.log()) <= 5 and jt.dropped() > 0
        assert df["trace_number"].max() == 8  # the newest are kept
    finally:
        get_session().log.set_max_events(100_000)


def test_holds_no_user_data(jt):
    class Config:
        pass

    @jax.jit
    def k(x, c=None):
        return x * 2

    from functools import partial

    cfg = Config()
    x = jnp.ones(1000)
    kk = jax.jit(partial(lambda x, c: x * 2, c=cfg))
    kk(x)
    k(x)
    refs = [weakref.ref(cfg), weakref.ref(x)]
    del cfg, x, kk
    jax.clear_caches()
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert len(jt.log()) > 0


@pytest.mark.parametrize("ext", ["csv", "parquet", "json"])
def test_export(jt, tmp_path, ext):
    from jaxtrace_nb._views._frames import export_frame

    _retracing()
    path = export_frame(jt.log(), str(tmp_path / f"log.{ext}"))
    back = {"csv": pd.read_csv, "parquet": pd.read_parquet, "json": pd.read_json}[ext](path)
    assert back["cause"].astype(str).tolist() == jt.log()["cause"].astype(str).tolist()


def test_event_has_every_column():
    e = Event(function="f")
    assert len(e.as_tuple()) == len(COLUMNS)


def test_start_stop_idempotent_and_restores_jax():
    from jax._src import monitoring as mon
    from jax._src import pjit

    from jaxtrace_nb._jax._internals import detect

    hooked = detect().layout.hook_module  # partial_eval (JAX >= 0.9) or util (0.8)
    traced = getattr(hooked, "trace_to_jaxpr", None) or pjit._create_pjit_jaxpr
    before = (
        hooked.test_event,
        traced,
        list(mon._event_duration_secs_listeners),
        list(mon._event_listeners),
    )
    for _ in range(3):
        jt_module.start()
        jt_module.start()
        assert hooked.test_event is not before[0]  # the one rebound name
        assert (getattr(hooked, "trace_to_jaxpr", None) or pjit._create_pjit_jaxpr) is before[
            1
        ]  # never wrapped
        jt_module.stop()
        jt_module.stop()
    after = (
        hooked.test_event,
        traced,
        list(mon._event_duration_secs_listeners),
        list(mon._event_listeners),
    )
    assert after == before


def test_start_adds_its_own_listeners_and_stop_removes_only_those():
    """Another library's `jax.monitoring` listeners, registered before `start`, are still there
    after `stop` (jaxtrace_nb never calls `clear_event_listeners`, which removes everyone's); the
    ones `start` adds are jaxtrace_nb's, and `stop` removes exactly them."""
    from jax import monitoring
    from jax._src import monitoring as mon

    from jaxtrace_nb._jax._internals import listener_api

    jt_module.stop()

    def foreign_duration(event, seconds, **kwargs):
        pass

    def foreign_event(event, **kwargs):
        pass

    monitoring.register_event_duration_secs_listener(foreign_duration)
    monitoring.register_event_listener(foreign_event)
    try:
        before = list(mon._event_duration_secs_listeners), list(mon._event_listeners)
        jt_module.start()
        during = list(mon._event_duration_secs_listeners), list(mon._event_listeners)
        jt_module.stop()
        after = list(mon._event_duration_secs_listeners), list(mon._event_listeners)
    finally:
        if foreign_duration in mon._event_duration_secs_listeners:
            listener_api("duration")[1](foreign_duration)
        if foreign_event in mon._event_listeners:
            listener_api("event")[1](foreign_event)
    added = [[f for f in now if f not in then] for now, then in zip(during, before)]
    assert added[0] and added[1], "start registers a duration and an event listener of its own"
    assert all(f.__module__.startswith("jaxtrace_nb") for f in added[0] + added[1]), added
    assert during[0][: len(before[0])] == before[0] and during[1][: len(before[1])] == before[1]
    assert after == before, "stop removes its own listeners and nothing else"
    assert foreign_duration in after[0] and foreign_event in after[1]
