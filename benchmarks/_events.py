"""Realistic synthetic events: copies of events recorded for real, each owning its strings."""

from __future__ import annotations

import datetime

# Per-event text that the session builds afresh for each event (f-strings), so each
# synthetic event gets its own copy; names shared across events stay shared.
_OWN_STRINGS = ("location", "key", "before", "after", "explanation", "hint", "loop_line")


def real_templates() -> list:
    """Events recorded from a small real session: retraces by shape, dtype, static value,
    structure and an Equinox module, plus JAX's own helpers traced on the way."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session

    def train_step(params, batch, lr):
        return jax.tree.map(lambda p: p - lr * jnp.mean(batch) * p, params)

    step = jax.jit(train_step, static_argnums=2)
    model = eqx.nn.MLP(4, 4, 8, 2, key=jax.random.PRNGKey(0))
    forward = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))
    jt.reset()
    jt.start()
    try:
        params = {"w": jnp.ones((4, 4)), "b": jnp.zeros(4)}
        for n in (8, 16, 32):
            step(params, jnp.ones((n, 4)), 0.1)
        step(params, jnp.ones((32, 4), jnp.int32), 0.1)
        step(params, jnp.ones((32, 4)), 0.01)
        step({**params, "extra": jnp.ones(2)}, jnp.ones((32, 4)), 0.01)
        for n in (1, 2, 3):
            forward(model, jnp.ones((n, 4)))
        events = list(get_session().log.events())
    finally:
        jt.stop()
        jt.reset()
    return events


def _own(value):
    return None if value is None else (value + "\x00")[:-1]  # a new string object, same text


def synthetic(templates: list, n: int, functions: int = 200):
    """`n` events cycling through `templates`, spread over `functions` distinct functions, made one
    at a time as a session makes them (a list of a million fresh events, each with its own texts the
    log then shares, would leave the freed texts' pages behind and measure the allocator, not the
    log)."""
    from jaxtrace_nb._log._events import COLUMNS, Event

    start = datetime.datetime(2025, 1, 1, 12, 0, 0)
    names = [f"{t.function}" for t in templates]
    for i in range(n):
        t = templates[i % len(templates)]
        fields = {c: getattr(t, c) for c in COLUMNS}
        f = i % functions
        fields["function"] = (
            names[i % len(templates)] if f == 0 else f"{names[i % len(templates)]}_{f}"
        )
        for c in _OWN_STRINGS:
            fields[c] = _own(fields[c])
        fields["key"] = f"{t.key}_{f}"
        fields["time"] = start + datetime.timedelta(milliseconds=i)
        fields["trace_number"] = i // functions + 1
        fields["cell"] = 1 + i // 1000
        fields["seq"] = None
        yield Event(**fields)
