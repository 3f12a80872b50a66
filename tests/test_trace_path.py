"""What the probe remembers to keep a retrace cheap gives the answers it would find afresh.

At a trace the probe remembers: the stack from the trace to the user's call (`Decoder.call_site`),
which nested traces are of a library's own helpers (`Probe._is_helper`), where JAX's frame
reporting a trace's end is (`trace_end_locals`); and the session builds a trace's event, with the
function's state, when the log is read rather than at the trace (`Lifecycle.on_trace`). Each test
here compares the remembered or deferred answer with the one found without it.
"""

import functools
import importlib.util
import inspect
import pathlib
import random
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrace_nb._core._bounded import Bounded
from jaxtrace_nb._jax import _internals as _jax_internals
from jaxtrace_nb._jax._layouts import FlatTreeLayout
from jaxtrace_nb._recording._decode import Decoder
from jaxtrace_nb._recording._session import get_session


class _CountingDict(Bounded):
    """A copy of a `Bounded` cache that counts its `get` calls."""

    gets = 0

    def __init__(self, kept: Bounded):
        super().__init__(kept.limit)
        self.update(kept)

    def get(self, *args):
        self.gets += 1
        return super().get(*args)


def _via_helper(f, x, depth):
    return f(x) if depth == 0 else _via_helper(f, x, depth - 1)  # the helper's call


def _line(obj, marker: str) -> str:
    """`file:line` of the one line of `obj`'s own source that ends with `marker` (a comment), found
    with `inspect`: the line a call site must name, computed from the program's text, not from a
    walk of the stack."""
    lines, first = inspect.getsourcelines(obj)
    hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
    assert len(hits) == 1, f"{marker!r} is on lines {hits} of {obj!r}"
    return f"{inspect.getsourcefile(obj)}:{hits[0]}"


@pytest.mark.parametrize("seed", range(6))
def test_call_site_from_the_remembered_stack_is_the_one_walked(jt, seed, monkeypatch):
    """Calls from different depths, through user helpers, library frames (`jax.tree.map`) and
    C builtins (`map`), by `f(x)` and `f.trace(x)`: each trace's call site, answered from the
    stack remembered at the trace before, is the one a fresh walk of the frames finds."""
    rng = random.Random(seed)
    decoder = get_session().probe.decoder
    original = Decoder.call_site
    compared, remembered = [], []

    def checked(self, frame=None):
        frame = frame if frame is not None else sys._getframe(1)
        library = self._library_files = _CountingDict(self._library_files)
        got = original(self, frame)
        remembered.append(library.gets == 0)  # answered without asking any frame's file
        self._call_path = None
        compared.append((got, original(self, frame)))
        return got

    monkeypatch.setattr(Decoder, "call_site", checked)

    @jax.jit
    def f(x):
        return x * 2

    ways = [
        lambda x: f(x),  # way 0
        lambda x: f.trace(x),  # way 1
        lambda x: _via_helper(f, x, 1),
        lambda x: _via_helper(f, x, 3),
        lambda x: jax.tree.map(lambda a: f(a), [x])[0],  # way 4
        lambda x: list(map(f, [x]))[0],  # way 5
        functools.partial(_via_helper, f, depth=2),
    ]
    this = test_call_site_from_the_remembered_stack_is_the_one_walked
    helper = _line(_via_helper, "# the helper's call")
    lines = [
        _line(this, "# way 0"),
        _line(this, "# way 1"),
        helper,
        helper,
        _line(this, "# way 4"),
        _line(this, "# way 5"),
        helper,
    ]  # where each way calls `f`, from the source
    order = [rng.randrange(len(ways)) for _ in range(12)]
    expected = []
    for n, i in enumerate(
        (i for i in order for _ in range(rng.randint(1, 3))), start=1
    ):  # some ways repeated
        ways[i](jax.ShapeDtypeStruct((n,), jnp.float32) if i == 1 else np.ones(n, np.float32))
        expected.append(lines[i])
    assert decoder is get_session().probe.decoder and len(compared) >= 12
    assert [got for got, _ in compared] == [walked for _, walked in compared]
    assert [got for got, _ in compared] == expected
    assert jt.log(internal=False)["call_site"].tolist() == expected
    assert any(
        remembered
    )  # the remembered stack served the traces that came the same way as the one before


def _helper_in_another_file():
    path = pathlib.Path(__file__).parent / "programs" / "call_helper.py"
    spec = importlib.util.spec_from_file_location("_jaxtrace_call_helper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outer_calls_inner():
    @jax.jit
    def inner(x):
        return x - 1

    @jax.jit
    def outer(x):
        return inner(x) * 2  # the nested call

    outer(jnp.ones(2))  # the outer call
    return {
        "inner": [_line(_outer_calls_inner, "# the nested call")],
        "outer": [_line(_outer_calls_inner, "# the outer call")],
    }


def _calls_of_each_kind():
    """Traces started from each kind of caller; {function name: the call sites its traces must have,
    computed from the source}."""
    import equinox as eqx
    from flax import nnx

    this = _calls_of_each_kind

    @jax.jit
    def plain(x):
        return x + 1

    plain(jnp.ones(2))  # plain, first
    plain(jnp.ones(3))  # plain, a new shape

    @eqx.filter_jit
    def filtered(x, n):
        return x * n

    filtered(jnp.ones(2), 2)  # filter_jit, first
    filtered(jnp.ones(2), 3)  # filter_jit, a new static value

    @nnx.jit
    def apply(model, x):
        return model(x)

    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    apply(model, jnp.ones((1, 2)))  # nnx.jit, first
    apply(model, jnp.ones((4, 2)))  # nnx.jit, a new shape

    @jax.jit
    def helped(x):
        return x * 3

    _via_helper(helped, jnp.ones(2), 2)
    _helper_in_another_file().call(helped, jnp.ones(5))

    for n in range(2):
        recreated = jax.jit(lambda x: x / 2)  # created anew
        recreated(jnp.ones(2))  # the re-created function's call

    helper = _line(_via_helper, "# the helper's call")
    other_file = _line(_helper_in_another_file().call, "# the helper's call")
    return {
        "plain": [_line(this, "# plain, first"), _line(this, "# plain, a new shape")],
        "filtered": [
            _line(this, "# filter_jit, first"),
            _line(this, "# filter_jit, a new static value"),
        ],
        "apply": [_line(this, "# nnx.jit, first"), _line(this, "# nnx.jit, a new shape")],
        "helped": [helper, other_file],
        "<lambda>": [_line(this, "# the re-created function's call")] * 2,
    }, _line(this, "# created anew")


def test_call_site_is_the_line_that_called(jt):
    """Each trace's `call_site` is the line of the user's code that made the call, as the program's
    own source says (`inspect`): a plain `jax.jit`, `eqx.filter_jit`, `nnx.jit`, a jit called inside
    another, a helper in this file and one in another file; a function re-created at each call is
    defined (`location`) where it was created."""
    expected, created = _calls_of_each_kind()
    expected.update(_outer_calls_inner())
    df = jt.log(internal=False)
    df = df[df["kind"] == "trace"]
    got = {
        name: df[df["function"].str.split(".").str[-1] == name]["call_site"].tolist()
        for name in expected
    }
    assert got == expected
    recreated = df[df["function"].str.endswith("<lambda>")]
    assert recreated["cause"].tolist() == ["first", "new_function"]
    assert set(recreated["location"]) == {created}
    assert df[df["function"].str.endswith("inner")]["nested"].tolist() == [True]


def test_call_site_in_a_cell_is_its_line_in_that_cell(shell):
    """In IPython a call site reads `In[n]:k`: line k of the cell that ran n-th, found in that
    cell's own text; a helper defined in one cell and called from another is at its own cell's
    line."""
    import jaxtrace_nb

    shell.run_cell("%load_ext jaxtrace_nb")
    helper_cell = "def run(f, x):\n    return f(x)  # the helper's call\n"
    caller_cell = (
        "@jax.jit\n"
        "def step(x):\n"
        "    return x + 1\n"
        "\n"
        "step(jnp.ones(2))  # the call\n"
        "run(step, jnp.ones(3))\n"
    )
    numbers = [
        shell.run_cell(cell, store_history=True).execution_count
        for cell in (helper_cell, caller_cell)
    ]

    def at(n, cell, marker):
        (k,) = [k for k, text in enumerate(cell.splitlines(), start=1) if text.endswith(marker)]
        return f"In[{n}]:{k}"

    df = jaxtrace_nb.log(internal=False)
    assert df["call_site"].tolist() == [
        at(numbers[1], caller_cell, "# the call"),
        at(numbers[0], helper_cell, "# the helper's call"),
    ]
    assert df["cell"].tolist() == [numbers[1]] * 2


def _program(jt):
    """Retraces of several kinds: shapes, a static value, a re-created function, a nested user
    function, a trace that raises, compiles with and without a new trace, a cache clear."""

    @jax.jit
    def inner(x):
        return x + 1

    def make():
        @functools.partial(jax.jit, static_argnums=1)
        def f(x, n):
            return inner(x) * n

        return f

    f = make()
    f(jnp.ones(2), 2)
    f(jnp.ones(3), 2)
    f(jnp.ones(3), 3)
    f.trace(jax.ShapeDtypeStruct((4,), jnp.float32), 3)
    with pytest.raises(ValueError, match="Non-hashable static"):
        f(jnp.ones(5), [1])  # raises before any trace
    f(jnp.ones(2), 2)  # a cache hit
    g = make()
    g(jnp.ones(2), 2)  # a new function object, same code

    @jax.jit
    def broken(x):
        if x.shape[0] > 2:
            raise ValueError("user error")
        return x

    broken(jnp.ones(2))
    with pytest.raises(ValueError):
        broken(jnp.ones(3))
    broken(jnp.ones(4).reshape(2, 2))
    jax.clear_caches()
    g(jnp.ones(2), 2)
    jax.eval_shape(g, jnp.ones(7), 2)
    return f, g, inner, broken


COLUMNS = [
    "function",
    "kind",
    "trace_number",
    "cause",
    "leaf",
    "before",
    "after",
    "explanation",
    "hint",
    "nested",
    "call_site",
    "eqns",
    "eqns_total",
    "jit",
]


def _logged(jt, program, followed: bool) -> list:
    """The log's rows of `program`, with the log followed live from the start or not at all."""
    jt.reset()
    unsubscribe = get_session().log.subscribe(lambda event, what: None) if followed else None
    assert get_session().log.followed == followed
    try:
        # The program's functions live until the log is read: the equations of a trace never
        # compiled
        # are counted from its program, which JAX holds (and jaxtrace_nb refers to weakly) only
        # while
        # its function lives; in a loaded run our thread can reach it after `program` returned.
        kept = program()
    finally:
        if unsubscribe is not None:
            unsubscribe()
    df = jt.log(internal=False)
    del kept
    return df[COLUMNS].astype(object).where(df[COLUMNS].notna(), None).values.tolist()


@pytest.mark.allows_unknown
def test_events_built_when_read_are_those_built_at_the_trace(jt):
    """The same program gives the same events whether each trace's event (and the function's
    state it reads) is made at the trace, as while a view follows the log, or when the log is
    read."""
    logs = [_logged(jt, lambda: _program(jt), followed) for followed in (True, False)]
    assert logs[0] == logs[1]
    causes = [row[3] for row in logs[0]]
    assert {"first", "shape", "static"} <= set(causes) and any(
        row[9] for row in logs[0]
    )  # a nested trace


def test_a_helper_inside_a_trace_is_recognised_from_its_function(jt, monkeypatch):
    """JAX's own jitted helpers traced inside a trace (here `jnp.multiply` for each new shape) are
    told apart once per function: after that the trace's arguments are not read for them. A user's
    function traced inside another is still recorded every time."""
    layout = get_session().probe.internals.layout
    begun = []
    original = type(layout).begin
    monkeypatch.setattr(
        type(layout), "begin", lambda self, frame: begun.append(1) or original(self, frame)
    )

    @jax.jit
    def nested(x):
        return x - 1

    @jax.jit
    def outer(x):
        return nested(x * 2.0)

    for n in range(1, 9):
        outer.trace(jax.ShapeDtypeStruct((n,), jnp.float32))
    df = jt.log(internal=True)
    assert df.groupby("function")["nested"].agg(["sum", "count"]).to_dict("index") == {
        "test_a_helper_inside_a_trace_is_recognised_from_its_function.<locals>.outer": {
            "sum": 0,
            "count": 8,
        },
        "test_a_helper_inside_a_trace_is_recognised_from_its_function.<locals>.nested": {
            "sum": 8,
            "count": 8,
        },
    }
    if isinstance(layout, FlatTreeLayout) and hasattr(jax._src.pjit, "_infer_params"):
        assert len(begun) < 8 * 2 + 3  # one per user trace, the helper's only at its first
    else:  # JAX 0.8 and 0.9.0 have no `_infer_params`: every trace's arguments are read
        assert len(begun) >= 8 * 2


def test_trace_end_found_when_not_where_it_was(jt, monkeypatch):
    """A trace's end is found from the listener where it was last time; where the stack differs,
    frame by frame: the trace is completed either way, with its seconds."""
    monkeypatch.setattr(_jax_internals, "_TRACE_END_DEPTH", [1])  # a frame that is not JAX's

    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    monkeypatch.setattr(
        _jax_internals, "_TRACE_END_DEPTH", [_jax_internals._TRACE_END_DEPTH[0] + 1]
    )
    f(jnp.ones(3))
    df = jt.log(internal=False)
    assert df["cause"].tolist() == ["first", "shape"] and df["trace_s"].notna().all()
    assert jt.faults() == {}


def test_trace_end_found_when_its_frame_is_not_the_trace_pending(jt, monkeypatch):
    """Where the frame at the remembered depth has the right name but reports another trace (its
    token differs), the frames are walked again, and the trace is completed all the same."""
    original_locals = _jax_internals.trace_end_locals
    mismatches, walks = [1], []

    def trace_end_locals(layout, walk=False):
        walks.append(walk)
        local = original_locals(layout, walk)
        if local is not None and mismatches:
            mismatches.pop()
            return {**local, layout.end_token: object()}  # once: the token of some other trace
        return local

    monkeypatch.setattr(_jax_internals, "trace_end_locals", trace_end_locals)

    @jax.jit
    def f(x):
        return x + 1

    for n in (2, 3, 4):
        f(jnp.ones(n))
    df = jt.log(internal=False)
    assert df["cause"].tolist() == ["first", "shape", "shape"] and df["trace_s"].notna().all()
    assert walks[:2] == [False, True]  # the mismatch made a walk at once
    # The remembered depth served the other lookups (on JAX 0.8 a nested helper's seconds, reported
    # while the trace is pending, carry another token: those are walked to be sure).
    assert walks.count(False) > walks.count(True)
    assert jt.faults() == {}


def test_a_trace_reads_the_state_its_function_had_when_it_started(jt):
    """A jitted function calling itself with another static argument is traced inside its own
    trace. The traces inside are complete when they start (JAX reports no end of a nested trace);
    the outermost started before them and ends after them, so it is its function's first, and the
    same events come whether they are built at the trace or when the log is read (in end order)."""

    def program():
        @functools.partial(jax.jit, static_argnums=1)
        def f(x, n):
            return x if n == 0 else f(x, n - 1) + 1

        f(jnp.ones(2), 3)  # four traces, the outermost ends last
        f(jnp.ones(3), 3)  # four retraces: the shape
        f(jnp.ones(3), 4)  # one retrace (the inner calls are cache hits): the static argument

    followed, read = _logged(jt, program, True), _logged(jt, program, False)
    assert followed == read
    assert [(row[2], row[3], row[4], row[9]) for row in read] == [
        (1, "first", None, True),
        (2, "static", "n", True),
        (3, "static", "n", True),
        (4, "first", None, False),
        (5, "shape", "x", True),
        # (f32[3], 2): one type from (f32[2], 2), one static value from (f32[3], 3): the type
        # difference is the closer (issue 54), and likewise for (f32[3], 1)
        (6, "shape", "x", True),
        (7, "shape", "x", True),
        (8, "shape", "x", False),
        (9, "static", "n", False),
    ]


def test_a_trace_that_compiles_eagerly_inside_is_recorded(jt):
    """An eager computation under ``jax.ensure_compile_time_eval`` inside a trace traces and
    compiles at the top level (JAX reports the ends of those traces) while the outer trace is
    pending: each end completes its own trace, and the outer one ends last, with its seconds and
    equations; the same events come whether they are built at the trace or when the log is read."""

    def program():
        @jax.jit
        def f(x):
            with jax.ensure_compile_time_eval():
                table = jnp.arange(x.shape[0] + 7) * 3  # traced and compiled while f's trace runs
            return x * table[: x.shape[0]]

        f(jnp.ones(3))
        f(jnp.ones(4))

    followed, read = _logged(jt, program, True), _logged(jt, program, False)
    assert followed == read
    df = jt.log()
    outer = df[df["function"].str.endswith("f")]
    assert outer["kind"].tolist() == ["trace", "trace"] and outer["cause"].tolist() == [
        "first",
        "shape",
    ]
    assert (
        outer["trace_s"].notna().all()
        and outer["compile_s"].notna().all()
        and (outer["eqns"] > 0).all()
    )
    assert not outer["nested"].any() and jt.faults() == {}


def test_a_trace_whose_end_never_came_fails_at_the_end_of_the_trace_around_it(jt, monkeypatch):
    """A top-level trace started inside another whose end was never reported (here: dropped) is
    still pending when the outer trace ends: it counts as an attempt, the outer one is completed."""
    probe = get_session().probe
    original, dropped = type(probe)._trace_end, []

    def trace_end(self, duration):
        pending = self._tls.traces
        if not dropped and len(pending) == 2:  # the inner trace's own end only: JAX
            layout = self.internals.layout  # also reports the seconds of tracing-cache hits
            local = _jax_internals.trace_end_locals(layout, True)
            if local is not None and id(local.get(layout.end_token)) == pending[-1].token:
                dropped.append(pending[-1].name)
                return None
        return original(self, duration)

    monkeypatch.setattr(type(probe), "_trace_end", trace_end)

    @jax.jit
    def f(x):
        with jax.ensure_compile_time_eval():
            table = (
                jnp.arange(x.shape[0] + 23) * 5
            )  # (sizes no other test traces, not in JAX's caches)
        return x * table[: x.shape[0]]

    f(jnp.ones(6))
    assert dropped and probe._tls.traces == []
    df = jt.log()
    outer = df[df["function"].str.endswith("f")]
    assert outer["cause"].tolist() == ["first"] and outer["trace_s"].notna().all()
    failed = {
        key.rpartition("::")[2]: state.failed for key, state in get_session().functions.items()
    }
    assert failed[dropped[0]] == 1 and sum(failed.values()) == 1
    assert jt.faults() == {}


def test_a_trace_announced_through_another_tools_wrapper_is_recorded(jt, monkeypatch):
    """Another tool rebinds JAX's ``test_event`` on top of our hook after we start: our hook's
    caller is its wrapper, not JAX's announcing function, and each trace is still recorded and
    paired with its end, lowering and compile."""
    module = get_session().probe.internals.layout.hook_module
    ours = module.test_event

    def other_tool(*args, **kwargs):
        return ours(*args, **kwargs)

    monkeypatch.setattr(module, "test_event", other_tool)

    @jax.jit
    def wrapped_announce(x):
        return x * 3 + 1

    wrapped_announce(jnp.ones(37))
    wrapped_announce(jnp.ones(41))
    df = jt.log(internal=False)
    df = df[df["function"].str.endswith("wrapped_announce")]
    assert df["kind"].tolist() == ["trace", "trace"] and df["cause"].tolist() == ["first", "shape"]
    assert df[["trace_s", "lower_s", "compile_s"]].notna().all().all() and jt.faults() == {}


def test_a_pending_trace_whose_end_never_came_fails_at_the_next_start(jt, monkeypatch):
    """A trace whose end was never reported (here: its report dropped) is not on the stack when the
    next top-level trace starts: it counts as an attempt, and traces after it pair as before."""
    probe = get_session().probe
    original, dropped = type(probe)._trace_end, []

    def trace_end(self, duration):
        pending = self._tls.traces
        # g's own end only (JAX 0.8 reports nested ones)
        if not dropped and pending and pending[-1].name == "g":
            layout = self.internals.layout
            local = _jax_internals.trace_end_locals(layout, True)
            if local is not None and id(local.get(layout.end_token)) == pending[-1].token:
                dropped.append(duration)
                return None
        return original(self, duration)

    @jax.jit
    def g(x):
        return x * 2

    @jax.jit
    def h(x):
        return x - 1

    x2, x3, x4 = jnp.ones(2), jnp.ones(3), jnp.ones(4)  # (their own traces come before the patch)
    monkeypatch.setattr(type(probe), "_trace_end", trace_end)
    g(x2)  # its end is dropped
    h(x2)
    h(x3)
    g(x4)  # (JAX cached its first trace: a new shape traces again)
    assert len(probe._tls.traces) == 0 and dropped
    df = jt.log(internal=False)
    assert df[df["kind"] == "trace"]["cause"].tolist() == ["first", "shape", "first"]
    assert "earlier attempt" in df[df["kind"] == "trace"]["explanation"].iloc[-1]
    assert jt.faults() == {}


def test_pending_traces_whose_frames_are_gone_fail_and_the_pending_stay_bounded(monkeypatch):
    """At a top-level trace's start, the pending traces whose frames are no longer on the stack
    count as attempts (innermost first), and at most `_MAX_PENDING` stay pending on a thread, also
    where the stack is too deep to tell which are gone. A pending trace's frame is known by its id
    and its code: a live frame of other code at its address, or the starting trace's own frame,
    is not it."""
    from jaxtrace_nb._recording import _probe
    from jaxtrace_nb._recording._probe import _MAX_PENDING, Probe
    from jaxtrace_nb._recording._trace import Trace

    class Sink:
        failed: list = []

        def on_trace_failed(self, trace):
            self.failed.append(trace.name)

    probe = Probe(Sink())
    frame = sys._getframe()
    here = (id(frame), frame.f_code)

    def start(pending, own=False):  # a trace starting in a call made under this test's frame
        new = sys._getframe()
        if own:
            pending.append(Trace(None, "own frame", 3, id(new), new.f_code))
        probe._fail_gone(pending, new)

    pending = [
        Trace(None, "outer", 0, *here),
        Trace(None, "gone", 1, id(object()), frame.f_code),
        Trace(None, "other code", 2, id(frame), start.__code__),
    ]
    start(pending, own=True)
    assert [p.name for p in pending] == ["outer"]
    assert Sink.failed == ["own frame", "other code", "gone"]
    Sink.failed.clear()
    pending = [Trace(None, i, i, *here) for i in range(_MAX_PENDING + 5)]
    start(pending)
    assert len(pending) == _MAX_PENDING - 1 and Sink.failed == list(range(6))
    Sink.failed.clear()
    monkeypatch.setattr(_probe, "_MAX_PENDING_WALK", 2)  # this test's frame is deeper than that
    pending = [Trace(None, i, i, id(object()), frame.f_code) for i in range(_MAX_PENDING + 2)]
    start(pending)
    assert len(pending) == _MAX_PENDING - 1 and Sink.failed == [0, 1, 2]


def test_traces_of_one_function_in_two_threads_at_once_are_both_first(jt):
    """Two threads trace one function at the same time (each waits inside its trace for the
    other): neither trace had ended when the other started, so both are the function's first."""

    def program():
        @jax.jit
        def f(x):
            barrier.wait(timeout=30)
            return x * 2

        threads = [threading.Thread(target=f, args=(jnp.ones(n),)) for n in (2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads)

    rows = []
    for followed in (True, False):
        barrier = threading.Barrier(2)
        rows.append(_logged(jt, program, followed))
        assert not barrier.broken
    assert rows[0] == rows[1]
    assert sorted((row[2], row[3]) for row in rows[0]) == [(1, "first"), (2, "first")]


def test_reading_and_resetting_the_log_while_another_thread_traces_never_blocks(jt):
    """One thread traces (each trace reads and updates its function's state under the session's
    lock) while another reads, follows, unfollows and resets the log (building drafts under the
    log's): one lock for both, so neither waits for the other forever."""

    @jax.jit
    def f(x):
        return x + 1

    done = threading.Event()
    errors = []

    def trace():
        try:
            for n in range(1, 60):
                f.trace(jax.ShapeDtypeStruct((n,), jnp.float32))
        except Exception as e:
            errors.append(e)
        finally:
            done.set()

    def read():
        try:
            while not done.is_set():
                get_session().log.subscribe(lambda event, what: None)()
                jt.log(internal=False)
                get_session().functions
                jt.reset()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=trace), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads) and errors == []
    assert jt.faults() == {}
