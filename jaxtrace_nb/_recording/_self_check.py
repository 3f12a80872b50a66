"""The self-check a JAX newer than the tested range passes before jaxtrace_nb records in full.

A canary: tiny functions traced (``jax.jit(f).trace``, no compile) with known changes,
run through the full probe in a private session; each recorded cause, leaf and before →
after must be the expected one. A few milliseconds; nothing reaches the user's log. The canary
traces in JAX's default configuration (`_jax._config.own_configuration`), so no user setting
(x64, strict dtype promotion, ...) changes what it expects.
"""

from __future__ import annotations

from typing import Callable

from .._core._vocabulary import EventKind
from .._jax._config import own_configuration

_CANARY = "_canary_calls.<locals>."


def _canary_calls():
    """(description, thunk, expected) for each canary trace, in order."""
    import functools

    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, static_argnums=1)
    def canary(x, n, opts=None):
        return x if opts is None else x + opts["a"].sum()

    def moved(a, b):
        return a + b

    moved = jax.jit(moved)

    def ones(shape, dtype=jnp.float32):  # abstract: tracing them compiles nothing
        return jax.ShapeDtypeStruct(shape if isinstance(shape, tuple) else (shape,), dtype)

    return [
        ("first trace", lambda: canary.trace(ones(2), 1), ("first", None, None, None)),
        ("a new shape", lambda: canary.trace(ones(3), 1), ("shape", "x", "f32[2]", "f32[3]")),
        ("a static argument", lambda: canary.trace(ones(3), 2), ("static", "n", "1", "2")),
        (
            "a new dtype",
            lambda: canary.trace(ones(3, jnp.int32), 2),
            ("dtype", "x", "f32[3]", "i32[3]"),
        ),
        (
            "a keyword argument passed",
            lambda: canary.trace(ones(3, jnp.int32), 2, opts={"a": ones(1)}),
            ("structure", "opts", "(not passed)", "dict with keys 'a'"),
        ),
        (
            "a leaf inside a dict",
            lambda: canary.trace(ones(3, jnp.int32), 2, opts={"a": ones(2)}),
            ("shape", "opts['a']", "f32[1]", "f32[2]"),
        ),
        ("a 0-d array", lambda: canary.trace(ones(()), 2), ("shape", "x", "i32[3]", "f32[]")),
        (
            "a Python scalar",
            lambda: canary.trace(1.0, 2),
            ("weak_type", "x", "f32[]", "f32[] (weak)"),
        ),
        ("first trace", lambda: moved.trace(ones(2), ones(2)), ("first", None, None, None)),
        (
            "position to keyword",
            lambda: moved.trace(ones(2), b=ones(2)),
            ("structure", "b", "by position", "by keyword"),
        ),
    ]


_RESULT: list = []  # the outcome, once per process: the same JAX gives the same answer


def run_self_check(make_session: Callable, *, again: bool = False) -> str:
    """'' when the full probe decodes the canary right on this JAX, else what went wrong.
    `make_session()` gives a private session that records in full without checking again."""
    if _RESULT and not again:
        return _RESULT[0]
    _RESULT[:] = [_check(make_session())]
    return _RESULT[0]


def run_self_check_with(make_session: Callable) -> Callable[[], str]:
    """`run_self_check` of sessions from `make_session`, as the probe's install asks for it."""
    return lambda: run_self_check(make_session)


def _check(session) -> str:
    session.acquire()
    try:
        if not session.probe.full:
            return session.notice or "the full probe could not be installed"
        calls = _canary_calls()
        with own_configuration():  # the expectations hold there, whatever the user configured
            for _, thunk, _ in calls:
                thunk()
        events = [
            e
            for e in session.log.events()
            if e.kind == EventKind.TRACE and e.function.startswith(_CANARY)
        ]
    except Exception as e:
        return f"the canary raised {type(e).__name__}: {str(e)[:200]}"
    finally:
        session.release()
    if session.fault_counts:
        return f"internal errors in stage(s) {', '.join(sorted(session.fault_counts))}"
    got = [(e.cause, e.leaf, e.before, e.after) for e in events]
    for i, (what, _, expected) in enumerate(calls):
        seen = got[i] if i < len(got) else None
        if seen != expected:
            return f"{what}: expected {expected}, recorded {seen}"
    return ""
