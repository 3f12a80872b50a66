"""Issue 54, item 1: a static value is compared when JAX compares it, on the object JAX holds.

JAX's tracing cache compares a static argument at its lookup: the hash first (a key of another
hash is another key), then ``==`` of the new value with the object its key holds, as that object
is then. Each test builds a program where comparing later (at the log's read), on a copy taken at
the trace, or by hash alone gives another answer, and checks the row against JAX's own verdict:
a counter in the traced function (JAX's explainer, in a separate process, for the leaf).
"""

import dataclasses
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp

from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._core._witness import LookupVerdicts, Witness
from jaxtrace_nb._keys._signature import static_leaf


def _rows(jt, name):
    df = jt.log()
    df = df[(df["kind"] == "trace") & ~df["internal"] & df["function"].str.endswith(name)]
    return df.to_dict("records")


class Counter:
    def __init__(self):
        self.n = 0


class NoRef:
    """A value with no weak reference, no plain form, and one hash for all: only JAX's key holds
    it, and only ``==`` tells two apart."""

    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a

    def __eq__(self, other):
        return type(other) is NoRef and self.a == other.a

    def __hash__(self):
        return 7


class Box:
    """A mutable value taking weak references, hashed alike: JAX compares the live object."""

    def __init__(self, a):
        self.a = a

    def __eq__(self, other):
        return type(other) is Box and self.a == other.a

    def __hash__(self):
        return 7


@dataclasses.dataclass
class Config:
    """A dataclass that is not frozen, hashed alike (its generated ``==`` compares fields)."""

    a: int

    def __hash__(self):
        return 7


def _holds_statics_in_its_key() -> bool:
    """Whether this JAX's tracing-cache key holds static values where jaxtrace_nb can reach them
    (JAX 0.9 – 0.10's ``FlatTree`` of ``Static`` nodes; not JAX 0.8's cache)."""
    from jaxtrace_nb._recording._session import get_session

    return get_session().probe.internals.layout.name == "0.9"


def test_a_static_only_jaxs_key_holds_is_compared_there_and_named(jt):
    """`NoRef` takes no weak reference: before, two of them with one hash were "equal" to
    jaxtrace_nb, the retrace at `c` said in JAX's terms with no leaf. Now compared by ``==`` with
    the object JAX's key holds, at the trace."""
    count = Counter()

    def scaled(x, c):
        count.n += 1
        return x * c.a

    f = jax.jit(scaled, static_argnums=1)
    f(jnp.ones(2), NoRef(1))
    f(jnp.ones(2), NoRef(1))  # another object, equal: JAX hits
    f(jnp.ones(2), NoRef(2))
    f(jnp.ones(2), NoRef(1))
    f(jnp.ones(3), NoRef(2))  # closest: trace 2 (equal `c`), not trace 1
    rows = _rows(jt, "scaled")
    assert count.n == len(rows) == 3  # JAX's verdict
    assert jt.faults() == {}
    retrace, shape = rows[1], rows[2]
    if not _holds_statics_in_its_key():
        # JAX 0.8.0: no value to compare; said in JAX's terms, never `unknown`, never a guess
        assert retrace["cause"] != "unknown" and retrace["leaf"] is None
        return
    assert (retrace["cause"], retrace["leaf"]) == ("static", "c")
    assert retrace["after"].endswith("(unequal by ==, same summary)")
    assert (shape["cause"], shape["leaf"], shape["before"], shape["after"]) == (
        "shape",
        "x",
        "f32[2]",
        "f32[3]",
    )
    assert "Also changed" not in shape["explanation"]


def test_jaxs_explainer_agrees_on_the_leaf():
    """JAX's explainer (run apart: it writes to the log) finds the `NoRef` retrace at the static
    argument `c`, the leaf the test above names: "input path [0][1]" (JAX 0.9 on), "static args"
    (JAX 0.8)."""
    program = textwrap.dedent(
        """
        import logging, jax, jax.numpy as jnp
        logging.basicConfig(level=logging.WARNING)
        jax.config.update("jax_explain_cache_misses", True)

        class NoRef:
            __slots__ = ("a",)
            def __init__(self, a): self.a = a
            def __eq__(self, other): return type(other) is NoRef and self.a == other.a
            def __hash__(self): return 7

        f = jax.jit(lambda x, c: x * c.a, static_argnums=1)
        f(jnp.ones(2), NoRef(1))
        print("MARK", flush=True)
        f(jnp.ones(2), NoRef(2))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=True
    )
    after = (out.stdout + out.stderr).split("MARK", 1)[-1]
    assert "TRACING CACHE MISS" in after
    assert "input path [0][1]" in after or "static args" in after


def test_a_value_changed_after_jax_compared_it_keeps_jaxs_verdict(jt):
    """`Box(2)` differed from `Box(1)` when JAX compared them; the program then makes it equal.
    Read afterwards, the retrace is still `static` at `c` (before: `unknown`, compared at the
    read)."""
    count = Counter()

    def scaled(x, c):
        count.n += 1
        return x * c.a

    f = jax.jit(scaled, static_argnums=1)
    one, two = Box(1), Box(2)
    f(jnp.ones(2), one)
    f(jnp.ones(2), two)
    two.a = 1
    f(jnp.ones(3), two)
    rows = _rows(jt, "scaled")
    assert count.n == len(rows) == 3
    assert (rows[1]["cause"], rows[1]["leaf"]) == ("static", "c")
    assert (rows[2]["cause"], rows[2]["leaf"]) == ("shape", "x")
    assert jt.faults() == {}


def test_an_earlier_value_changed_in_place_is_compared_as_jax_found_it(jt):
    """`cfg` is traced, then changed in place to `Config(2)`: JAX's key holds that object, so a
    new `Config(2)` hits and a new `Config(1)` (what the copy taken at the trace reads) misses.
    The retrace says what JAX compared."""
    count = Counter()

    def scaled(x, cfg):
        count.n += 1
        return x * cfg.a

    f = jax.jit(scaled, static_argnums=1)
    cfg = Config(1)
    f(jnp.ones(2), cfg)
    cfg.a = 2
    f(jnp.ones(2), Config(2))  # JAX hits: equal to the object its key holds
    f(jnp.ones(2), Config(1))
    rows = _rows(jt, "scaled")
    assert count.n == len(rows) == 2
    last = rows[1]
    assert (last["cause"], last["leaf"]) == ("static", "cfg")
    assert (last["before"], last["after"]) == (
        "Config(a=2) (changed in place after its trace)",
        "Config(a=1)",
    )
    assert jt.faults() == {}


class Recorded:
    """Counts the ``==`` calls made on it, and says which hash it has."""

    calls = 0

    def __init__(self, a, h):
        self.a, self.h = a, h

    def __eq__(self, other):
        Recorded.calls += 1
        return type(other) is Recorded and self.a == other.a

    def __hash__(self):
        return self.h


def _eq_calls(record: bool, hashes) -> tuple[int, int]:
    import jaxtrace_nb as jt_module

    Recorded.calls = 0
    count = Counter()

    def scaled(x, c):
        count.n += 1
        return x * c.a

    if record:
        jt_module.start()
    try:
        f = jax.jit(scaled, static_argnums=1)
        for i, h in enumerate(hashes):
            f(jnp.ones(2), Recorded(i, h))
        if record:
            jt_module.log()
    finally:
        if record:
            jt_module.stop()
    return Recorded.calls, count.n


def test_values_of_other_hashes_are_never_compared_by_eq():
    """As JAX's lookup: a value of another hash is another key, and its ``==`` is not called (the
    calls made with recording on are JAX's own, the same as with it off)."""
    hashes = [1, 2, 3, 4]
    _eq_calls(False, hashes)  # (JAX's first calls compare more: its own caches warming)
    assert _eq_calls(True, hashes) == _eq_calls(False, hashes)


def test_verdicts_are_taken_once_and_bounded():
    """The registry compares a new value with the earlier ones at its place, keeps none of the
    user's objects, and drops the places it holds beyond its bound, oldest first."""
    verdicts = LookupVerdicts()

    def leaf(value):
        return static_leaf(summarize_static(value), "static_argnums", value)

    boxes = [Box(1), Box(2), Box(1)]
    leaves = [leaf(b) for b in boxes]
    for lf in leaves:
        verdicts.record("f", {"c": lf}, ["c"])
    w = [lf.witness for lf in leaves]
    assert w[2].verdicts == {w[0].serial: True, w[1].serial: False}
    boxes[1].a = 1  # changed after the lookup: the verdict stands
    assert not w[1].equals(w[0]) and not w[2].equals(w[1]) and w[2].equals(w[0])
    assert all(w[i].certain(w[j]) for i in range(3) for j in range(3))
    assert isinstance(w[0], Witness) and w[0].verdicts is None
    del boxes, leaves, w, lf
    assert all(ref() is None for refs in verdicts._places.values() for ref in refs)
