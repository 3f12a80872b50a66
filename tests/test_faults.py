"""Contained faults and hostile inputs (issue 5, item 2).

A failure inside jaxtrace_nb, injected at each stage, never reaches the user's call:
the call returns (or raises) exactly as without recording, the failure is counted in
``jt.faults()`` under its stage, reported by exactly one ``JaxtraceWarning`` naming the
stage, and later traces are recorded once the failure is gone.

Hostile user objects (a static value or dict key whose ``repr`` raises, sleeps 5 s or
returns 10 MB, whose ``__eq__``/``__hash__`` raise; a pytree 10,000 deep; 100,000
leaves; keys that are not strings) run through the differential harness of
``test_differential``: the user sees the same outputs, exceptions and warnings, and
jaxtrace_nb itself calls no user ``__repr__`` or ``__eq__`` (only ``__hash__``, which JAX
calls on every call anyway).

Cost of pathological inputs, our part only (time inside the probe's decoding and the
session, measured by ``python tests/test_faults.py``; no timing is asserted): a static
value or dict key whose ``repr`` takes 5 s or returns 10 MB costs nothing extra, since no
user ``repr`` runs (summaries are at most 200 characters, dict keys 80); the rest is
linear in the leaves and the path depth: about 0.1 s for a pytree 10,000 deep and
10-20 us per leaf (1-2 s at 100,000 leaves, where JAX's own first call takes 3-6 s) on
the 2-core CI machine.
"""

import os
import re
import sys
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import Run, run_program, without_and_with_recording

import jaxtrace_nb as jt
from jaxtrace_nb import JaxtraceWarning
from jaxtrace_nb._jax import _internals as _jax_internals
from jaxtrace_nb._jax import _layouts as _jax_layouts
from jaxtrace_nb._log._events import EventLog
from jaxtrace_nb._recording import _drafts
from jaxtrace_nb._recording._decode import Decoder
from jaxtrace_nb._recording._lifecycle import Lifecycle
from jaxtrace_nb._recording._probe import Probe
from jaxtrace_nb._recording._session import get_session
from jaxtrace_nb._views import _text as _views


@pytest.fixture
def fresh():
    """Recording, with an empty log and no fault counted yet (each stage warns once per session)."""
    session = get_session()
    jt.stop()
    jt.reset()
    session.fault_counts.clear()
    jt.start()
    yield session
    jt.stop()
    jt.reset()
    session.fault_counts.clear()


def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


def _inject_binding(mp):
    for layout in (_jax_layouts.FlatTreeLayout, _jax_layouts.FTLayout, _jax_layouts.PjitLayout):
        for reading in (
            "begin",
            "read",
            "plain_call",
            "jitted",
        ):  # the arguments JAX passed, whatever the JAX
            mp.setattr(layout, reading, _boom)


def _inject_probe(mp):
    mp.setattr(Decoder, "trace_record", _boom)


def _inject_signature(mp):
    mp.setattr(Decoder, "_signature", _boom)


def _inject_stage_frame(mp):
    mp.setattr(_jax_internals, "stage_frame", _boom)  # reading a stage's frame in a listener
    mp.setattr(_jax_internals, "trace_end_locals", _boom)  # and a trace's


def _inject_diagnosis(mp):
    mp.setattr(_drafts, "diagnose", _boom)


def _inject_log(mp):
    mp.setattr(
        EventLog, "append", _boom
    )  # an event handed to the log, at its trace or when the log is read


def _inject_event_build(mp):
    mp.setattr(Lifecycle, "_build", _boom)  # building a trace's event when the log is read


def _inject_subscriber(mp):
    return get_session().log.subscribe(_boom)


def _inject_timing(mp):
    mp.setattr(Lifecycle, "on_timing", _boom)


# (injection, the stage it must be counted under, whether the trace itself is still logged)
INJECTIONS = {
    "binding": (_inject_binding, "probe", False),
    "probe": (_inject_probe, "probe", False),
    "stage frame": (_inject_stage_frame, "timing", False),
    "signature": (_inject_signature, "signature", True),
    "diff": (_inject_diagnosis, "diagnosis", True),  # logged, its cause "unknown"
    "log": (_inject_log, "log", False),
    "event build": (_inject_event_build, "log", False),
    "subscriber": (_inject_subscriber, "log", True),
    "timing": (_inject_timing, "timing", True),
}


def _user_program():
    """Three traces of a user function, a user error while tracing, and results."""

    @jax.jit
    def affine(x, n):
        return x * n + 1

    @jax.jit
    def broken(x):
        raise ValueError("the user's own error")

    results = [
        np.asarray(affine(jnp.arange(3.0), 2)),
        np.asarray(affine(jnp.arange(4.0), 2)),
        np.asarray(affine(jnp.arange(4.0), jnp.asarray(3, jnp.int8))),
    ]
    with pytest.raises(ValueError, match="^the user's own error\\n"):
        broken(jnp.ones(2))
    return results


def _caught_jaxtrace(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, JaxtraceWarning)]


@pytest.mark.parametrize("where", sorted(INJECTIONS))
def test_injected_fault_is_contained_counted_and_reported_once(fresh, monkeypatch, where):
    inject, stage, still_logged = INJECTIONS[where]
    expected = [np.arange(3.0) * 2 + 1, np.arange(4.0) * 2 + 1, np.arange(4.0) * 3 + 1]
    remove = inject(monkeypatch)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = _user_program()
            results_again = _user_program()
            jt.log()  # a view reads the log: deferred diagnoses run now
    finally:
        monkeypatch.undo()
        if remove is not None:
            remove()
    for got, want in zip(results + results_again, expected + expected):
        assert got.dtype == np.float32 and np.array_equal(got, want)
    messages = _caught_jaxtrace(caught)
    assert len(messages) == 1 and f"stage '{stage}'" in messages[0], messages
    faults = jt.faults()
    assert set(faults) == {stage} and faults[stage] >= 2
    if still_logged:
        assert len(jt.log(internal=False).query("kind == 'trace'")) == 6
    jt.reset()

    @jax.jit
    def later(x):
        return x

    later(jnp.ones(2))
    later(jnp.ones(3))
    assert [
        (f, c, None if leaf != leaf else leaf)
        for f, c, leaf in jt.log(internal=False)[["function", "cause", "leaf"]].values.tolist()
    ] == [
        (
            "test_injected_fault_is_contained_counted_and_reported_once.<locals>.later",
            "first",
            None,
        ),
        ("test_injected_fault_is_contained_counted_and_reported_once.<locals>.later", "shape", "x"),
    ]


def test_failure_while_displaying_is_contained(fresh, monkeypatch):
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    old = shell.display_pub
    shell.display_pub = CapturingDisplayPublisher()
    monkeypatch.setattr(_views, "render_html", _boom)
    try:
        shell.run_cell("%load_ext jaxtrace_nb")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = shell.run_cell(
                "%%tracewatch\nimport jax\nz = jax.jit(lambda x: x + 1)(41.0)\n"
            )
            shell.run_cell("%%tracewatch\nz2 = jax.jit(lambda x: x + 2)(40.0)\n")
        assert result.error_in_exec is None and result.error_before_exec is None
        assert float(shell.user_ns["z"]) == 42.0 and float(shell.user_ns["z2"]) == 42.0
        messages = _caught_jaxtrace(caught)
        assert len(messages) == 1 and "stage 'display'" in messages[0]
        assert jt.faults() == {"display": 2}
    finally:
        shell.run_cell("%unload_ext jaxtrace_nb")
        shell.display_pub = old


def test_user_traceback_is_unchanged():
    """The user's exception, its message and its (JAX-filtered) traceback are the same."""
    import traceback

    def failing():
        @jax.jit
        def inner(x):
            raise ValueError("user")

        @eqx.filter_jit
        def outer(x):
            return inner(x)

        seen = []
        for fn in (inner, outer):
            try:
                fn(jnp.ones(2))
            except ValueError as e:
                seen.append(
                    (
                        [
                            (f.filename, f.lineno, f.name)
                            for f in traceback.extract_tb(e.__traceback__)
                        ],
                        traceback.format_exception_only(e),
                    )
                )
        return seen

    without, with_recording, _ = without_and_with_recording(failing)
    assert with_recording == without and len(without) == 2


# ------------------------------------------------------------------ hostile objects
_OURS = os.path.dirname(jt.__file__) + os.sep
_FORWARDERS = ("__call__", "_observe_jit")  # the probe's frames that hand the trace to JAX


class Hostile:
    """A user object whose methods misbehave in one chosen way; counts calls into `run`."""

    run: Run | None = None

    def __init__(self, mode: str, value: int = 0):
        self.mode = mode
        self.value = value
        self.salt = id(
            Hostile.run
        )  # no hash collision with a previous run's objects in JAX's caches

    def _count(self, method: str) -> None:
        """Count calls made by jaxtrace_nb's own code (JAX's own calls vary with its caches' state).

        The innermost jaxtrace_nb frame on the stack says who asked: our probe forwarding
        the trace to JAX (JAX's call) or our own decoding work (ours).
        """
        frame = sys._getframe(2)
        while frame is not None and not frame.f_code.co_filename.startswith(_OURS):
            frame = frame.f_back
        if Hostile.run is None:
            return
        if frame is None or frame.f_code.co_name in _FORWARDERS:
            if method == "__eq__":
                Hostile.run.body("__eq__ called by JAX")
        elif method == "__eq__" and frame.f_code.co_name == "_lookup_equal":
            Hostile.run.body("__eq__ called by jaxtrace_nb at JAX's lookup")
        else:
            Hostile.run.body(f"{method} called by jaxtrace_nb")

    def __repr__(self):
        self._count("__repr__")
        if self.mode == "repr_raises":
            raise RuntimeError("repr exploded")
        if self.mode == "repr_sleeps":
            time.sleep(5)
        if self.mode == "repr_huge":
            return "h" * 10_000_000
        return f"Hostile({self.value})"

    __str__ = __repr__

    def __hash__(self):
        self._count("__hash__")
        if self.mode == "hash_raises":
            raise TypeError("hash exploded")
        return hash((self.salt, 12345))  # every value of one run collides: JAX must call __eq__

    def __eq__(self, other):
        self._count("__eq__")
        if self.mode == "eq_raises":
            raise TypeError("eq exploded")
        return isinstance(other, Hostile) and (self.mode, self.value) == (other.mode, other.value)

    def __lt__(self, other):  # dict keys are sorted by JAX
        return (self.value, id(self)) < (other.value, id(other))


MODES = ("repr_raises", "repr_sleeps", "repr_huge", "eq_raises", "hash_raises")


class WithStaticField(eqx.Module):
    w: jax.Array
    tag: object = eqx.field(static=True)


def _static_argnums(r, make):
    f = jax.jit(lambda x, s: x + 1, static_argnums=1)
    r.step("first", lambda: f(jnp.ones(2), make(1)))
    r.step("equal", lambda: f(jnp.ones(2), make(1)))
    r.step("other", lambda: f(jnp.ones(2), make(2)))


def _filter_jit_static(r, make):
    f = eqx.filter_jit(lambda x, s: x + 1)
    r.step("first", lambda: f(jnp.ones(2), make(1)))
    r.step("equal", lambda: f(jnp.ones(2), make(1)))
    r.step("other", lambda: f(jnp.ones(2), make(2)))


def _eqx_static_field(r, make):
    f = eqx.filter_jit(lambda m: m.w * 2)
    r.step("first", lambda: f(WithStaticField(jnp.ones(2), make(1))))
    r.step("equal", lambda: f(WithStaticField(jnp.ones(2), make(1))))
    r.step("other", lambda: f(WithStaticField(jnp.ones(2), make(2))))


def _dict_key(r, make):
    f = jax.jit(lambda d: jax.tree_util.tree_leaves(d)[0] * 2)
    r.step("first", lambda: f({make(1): jnp.ones(2)}))
    r.step("new shape", lambda: f({make(1): jnp.ones(3)}))
    r.step("other key", lambda: f({make(2): jnp.ones(3)}))


CHANNELS = {
    "static_argnums": _static_argnums,
    "filter_jit_static": _filter_jit_static,
    "eqx_static_field": _eqx_static_field,
    "dict_key": _dict_key,
}


def _differential(program, *, warm: bool = False) -> tuple:
    """`program(run)`'s outcome without and with recording, and the recorded events."""
    try:
        return without_and_with_recording(lambda: run_program(program)[0], warm=warm)
    finally:
        Hostile.run = None


def _assert_same_outcome(without, with_recording) -> None:
    """Same steps, warnings and cache sizes; no user `__repr__`/`__eq__` called by jaxtrace_nb.

    jaxtrace_nb may call a static value's or dict key's ``__hash__`` while decoding a trace
    (to tell values apart in the diff, hashing the pytree structure, rebuilding a dict):
    JAX hashes them on every call, cache hits included, so a ``__hash__`` that works for
    JAX works for us. At a trace it compares a static value by ``==`` with each earlier one of
    the same hash and type (`LookupVerdicts`), as JAX's lookup just did: never more often than
    JAX itself called it in the run.
    """
    steps, warned, _, cache = without
    steps_r, warned_r, ours, cache_r = with_recording
    assert (steps_r, warned_r, cache_r) == (steps, warned, cache)
    ours.pop("__hash__ called by jaxtrace_nb", None)
    at_lookup = ours.pop("__eq__ called by jaxtrace_nb at JAX's lookup", 0)
    assert at_lookup <= ours.pop("__eq__ called by JAX", 0)  # (JAX's count varies with its caches)
    assert ours == {}


# JAX itself calls a dict key's repr (to name the argument): a 5 s repr costs 5 s without us too.
HOSTILE_CASES = [
    (c, m) for c in sorted(CHANNELS) for m in MODES if (c, m) != ("dict_key", "repr_sleeps")
]


@pytest.mark.parametrize(("channel", "mode"), HOSTILE_CASES)
def test_hostile_static_values_and_keys(fresh, channel, mode):
    def program(r):
        Hostile.run = r
        CHANNELS[channel](r, lambda v: Hostile(mode, v))

    without, with_recording, events = _differential(program, warm=True)
    _assert_same_outcome(without, with_recording)
    assert jt.faults() == {}
    for column in ("leaf", "before", "after"):
        texts = events[column].dropna().tolist()
        assert all(len(t) <= 400 for t in texts), [len(t) for t in texts]
    steps_ok = [label for label, outcome in with_recording[0] if outcome[0] == "ok"]
    if steps_ok:
        assert len(events[events["kind"] == "trace"]) >= 1


class _Key:
    reprs = 0

    def __repr__(self):
        _Key.reprs += 1
        return "Key()"


def test_keys_that_are_not_strings_are_named_without_repr(fresh):
    @jax.jit
    def f(d):
        return sum(jax.tree_util.tree_leaves(d))

    key = _Key()
    f({1: jnp.ones(2), 2: jnp.ones(2)})
    f({1: jnp.ones(3), 2: jnp.ones(3)})
    f({(1, "a"): jnp.ones(3)})
    before = _Key.reprs
    f({key: jnp.ones(3)})
    reprs_by_jax = _Key.reprs - before  # JAX names the argument (debug info) with the key's repr
    f({key: jnp.ones(4)})
    f({"\x00\x1b[31m": jnp.ones(4)})
    leaves = jt.log(internal=False)["leaf"].tolist()
    assert leaves[1:] == [
        "d[1]",
        "d[(1, 'a')]",
        "d[<_Key object>]",
        "d[<_Key object>]",
        "d['\\x00\\x1b[31m']",
    ]
    assert _Key.reprs - before == 2 * reprs_by_jax
    assert jt.faults() == {}


def _deep(depth: int):
    tree = jnp.ones(())
    for _ in range(depth):
        tree = (tree,)
    return tree


def test_pytree_10000_deep_fails_or_succeeds_as_without_recording(fresh):
    """At the default recursion limit JAX refuses it; with a raised limit it traces (before Python
    3.12, where raising the limit raises the C stack's too). Either way, as without recording."""

    def program(r):
        f = jax.jit(lambda t: jax.tree_util.tree_leaves(t)[0] + 1)
        r.step("10,000 deep", lambda: f(_deep(10_000)))
        r.step("900 deep", lambda: f(_deep(900)))

    without, with_recording, _ = _differential(program)
    # Which of nanobind's callables hits the recursion limit first is a detail of the C stack:
    # JAX 0.8 names a method or a function there from one process state to another.
    assert _nanobind_masked(with_recording) == _nanobind_masked(without)
    assert without[0][0][1][0] == "raised" and without[0][1][1][0] == "ok"

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(30_000)
    try:
        without, with_recording, events = _differential(program)
    finally:
        sys.setrecursionlimit(limit)
    assert with_recording == without
    assert jt.faults() == {}
    if sys.version_info >= (
        3,
        12,
    ):  # C recursion has its own limit from 3.12: still refused, as without recording
        return
    assert without[0][0][1][0] == "ok"
    assert events["cause"].tolist() == ["first", "structure"]


def _nanobind_masked(outcome):
    return re.sub(r"nanobind\.nb_\w+", "nanobind.nb_?", repr(outcome))


def test_nested_equinox_modules_deeper_than_the_recursion_limit_allows_us(fresh):
    class Node(eqx.Module):
        child: object
        w: jax.Array

    def chain(n):
        node = None
        for _ in range(n):
            node = Node(node, jnp.ones(()))
        return node

    def program(r):
        f = eqx.filter_jit(lambda m: m.w * 2)
        r.step("600 modules deep", lambda: f(chain(600)))
        r.step("601 modules deep", lambda: f(chain(601)))

    without, with_recording, events = _differential(program)
    assert with_recording == without
    assert [o[0] for _, o in without[0]] == ["ok", "ok"]
    assert jt.faults() == {}
    assert len(events) == 2


def test_100000_leaves(fresh):
    xs = [np.float32(i) for i in range(100_000)]
    out = jax.jit(lambda xs: xs[0] + xs[-1])(xs)
    assert np.asarray(out).dtype == np.float32 and float(out) == 99_999.0
    events = jt.log(internal=False)
    assert jt.faults() == {} and len(events) == 1


def _measure() -> None:  # pragma: no cover - run by hand: python tests/test_faults.py
    """Prints the seconds jaxtrace_nb's own work takes per trace of pathological inputs.

    "Ours" is the time spent in the probe's trace hook and trace-end listener (decoding,
    diagnosis, the session), next to the whole first call.
    """
    ours = [0.0]
    start_hook, end_hook = Probe._on_trace_start, Probe._trace_end

    def timed(fn):
        def run(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                ours[0] += time.perf_counter() - start

        return run

    Probe._on_trace_start, Probe._trace_end = timed(start_hook), timed(end_hook)
    cases = {
        "static repr 10 MB": lambda: jax.jit(lambda x, s: x, static_argnums=1)(
            1.0, Hostile("repr_huge")
        ),
        "dict key repr 10 MB": lambda: jax.jit(lambda d: 1)({Hostile("repr_huge"): jnp.ones(2)}),
        "pytree 10,000 deep": lambda: jax.jit(lambda t: 0)(_deep(10_000)),
        "1,000 leaves": lambda: jax.jit(lambda xs: xs[0])([np.float32(i) for i in range(1_000)]),
        "100,000 leaves": lambda: jax.jit(lambda xs: xs[0])(
            [np.float32(i) for i in range(100_000)]
        ),
    }
    sys.setrecursionlimit(30_000)
    jt.start()
    for name, case in cases.items():
        ours[0] = 0.0
        start = time.perf_counter()
        case()
        total = time.perf_counter() - start
        print(f"{name:22} first call {total:7.3f} s   of which jaxtrace_nb {ours[0]:7.3f} s")
    jt.stop()


if __name__ == "__main__":
    _measure()
