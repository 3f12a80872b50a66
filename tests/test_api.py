"""The Python API and the log's contract."""

import gc
import weakref

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

import jaxtrace_nb as jt_module
from jaxtrace_nb._log import COLUMNS, Event
from jaxtrace_nb._session import get_session

CONTRACT = ["time", "cell", "function", "location", "kind", "internal", "nested", "trace_number", "cause",
            "leaf", "before", "after", "explanation", "hint", "trace_s", "lower_s", "compile_s"]


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
    assert set(df["cause"].cat.categories) >= {"first", "shape", "static", "structure", "new_function"}


def test_summary_one_row_per_function(jt):
    _retracing()
    s = jt.summary()
    assert len(s) == 1
    row = s.iloc[0]
    assert (row["traces"], row["compiles"], row["last_cause"], row["last_leaf"]) == (2, 2, "shape", "x")
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
    from jaxtrace_nb._frames import export_frame

    _retracing()
    path = export_frame(jt.log(), str(tmp_path / f"log.{ext}"))
    back = {"csv": pd.read_csv, "parquet": pd.read_parquet, "json": pd.read_json}[ext](path)
    assert back["cause"].astype(str).tolist() == jt.log()["cause"].astype(str).tolist()


def test_event_has_every_column():
    e = Event(function="f")
    assert len(e.as_tuple()) == len(COLUMNS)


def test_start_stop_idempotent_and_restores_jax():
    from jax import monitoring
    from jax._src import monitoring as mon
    from jax._src import pjit

    from jaxtrace_nb._jax_internals import detect

    hooked = detect().layout.hook_module  # partial_eval (JAX >= 0.9) or util (0.8)
    traced = getattr(hooked, "trace_to_jaxpr", None) or pjit._create_pjit_jaxpr
    before = (hooked.test_event, traced, list(mon._event_duration_secs_listeners), list(mon._event_listeners))
    for _ in range(3):
        jt_module.start()
        jt_module.start()
        assert hooked.test_event is not before[0]  # the one rebound name
        assert (getattr(hooked, "trace_to_jaxpr", None) or pjit._create_pjit_jaxpr) is before[1]  # never wrapped
        jt_module.stop()
        jt_module.stop()
    after = (hooked.test_event, traced, list(mon._event_duration_secs_listeners), list(mon._event_listeners))
    assert after == before
    assert monitoring is not None
