"""Issue 43: each retrace judged against every key JAX still holds, as JAX compares them.

Each test here failed on the code before (a bounded, hashed, most-recent memory of keys; function
objects in an 8-entry list; lambdas merged by name) and is checked against JAX's own trace count.
"""

import dataclasses
import functools
import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrace_nb._core._witness import Witness


def _rows(jt, name=None):
    df = jt.log()
    df = df[(df["kind"] == "trace") & ~df["internal"]]
    if name is not None:
        df = df[df["function"].str.endswith(name)]
    return df.to_dict("records")


def _clears_seen() -> bool:
    """Whether the probe sees `jax.clear_caches()`: through the trace cache's counter, which JAX
    0.8's tracing cache (`lu.cache`) does not have (there the explanations cannot say it)."""
    from jaxtrace_nb._recording._session import get_session

    return get_session().probe.internals.trace_cache_info is not None


class Counter:
    """JAX's own trace count: the traced body runs once per trace."""

    def __init__(self):
        self.n = 0

    def tick(self):
        self.n += 1


def test_the_closest_key_is_searched_among_all_keys_not_the_last_eight(jt):
    """9 batch shapes with `train=True`, then shape 1 with `train=False`: trace 1 differs only at
    `train`, every other key at `x` and `train`."""
    count = Counter()

    @functools.partial(jax.jit, static_argnames="train")
    def step(x, train):
        count.tick()
        return x * 2 if train else x

    for n in range(1, 10):
        step(jnp.ones(n), train=True)
    step(jnp.ones(1), train=False)
    rows = _rows(jt, "step")
    assert len(rows) == count.n == 10
    last = rows[-1]
    assert (last["cause"], last["leaf"], last["before"], last["after"]) == (
        "static",
        "train",
        "True",
        "False",
    )
    assert "pad" not in (last["hint"] or "")


def test_many_keys_a_static_change_is_found_whichever_key_it_matches(jt):
    """100 shapes; then the 37th shape with the other flag: the only key one component away
    is #37."""

    @functools.partial(jax.jit, static_argnums=1)
    def step(x, flag):
        return x + 1 if flag else x

    for n in range(1, 101):
        step(jnp.ones(n), True)
    step(jnp.ones(37), False)
    last = _rows(jt, "step")[-1]
    assert (last["cause"], last["leaf"]) == ("static", "flag")


def _f_traced_at_3_and_4():
    """A jitted `f` traced with f32[3] then f32[4], and JAX's count of its traces."""
    count = Counter()

    @jax.jit
    def f(x):
        count.tick()
        return x + 1

    f(jnp.ones(3))
    f(jnp.ones(4))
    return f, count


@pytest.mark.allows_unknown
def test_a_key_identical_to_one_before_clear_caches_is_unknown_and_says_cleared(jt):
    f, count = _f_traced_at_3_and_4()
    jax.clear_caches()
    f(jnp.ones(3))
    rows = _rows(jt, "f")
    assert len(rows) == count.n == 3
    assert rows[-1]["cause"] == "unknown"
    assert "cleared" in rows[-1]["explanation"] or not _clears_seen()


def test_a_change_after_clear_caches_names_it_and_says_cleared(jt):
    f = jax.jit(lambda x, s: x * int(s), static_argnums=1)
    f(jnp.ones(2), np.int64(-1))  # hash(np.int64(-1)) == hash(np.int64(-2))
    jax.clear_caches()
    f(jnp.ones(2), np.int64(-2))
    last = _rows(jt)[-1]
    assert (last["cause"], last["leaf"]) == ("static", "s")
    assert last["before"] != last["after"]
    assert "cleared" in last["explanation"] or not _clears_seen()


def _evictions_seen() -> bool:
    """Whether the probe reads which functions JAX's tracing cache holds keys of (JAX 0.9+:
    ``trace_to_jaxpr.cache_keys()``); `f.clear_cache()` moves no counter JAX 0.8 has."""
    from jaxtrace_nb._recording._session import get_session

    return get_session().probe.internals.trace_cache_holders is not None


@pytest.mark.allows_unknown
def test_after_f_clear_cache_the_keys_jax_dropped_are_not_compared_as_held(jt):
    """`f.clear_cache()` empties JAX's cache of `f` alone: the next trace is compared with the
    closest key JAX held before, and says the cache was emptied; a key identical to one dropped is
    said so, beside the change from the key JAX does hold."""
    f, count = _f_traced_at_3_and_4()
    f.clear_cache()
    f(jnp.ones(5))
    f(jnp.ones(3))  # JAX holds only f32[5]'s key now
    f.clear_cache()
    f(jnp.ones(3))
    rows = _rows(jt, "f")
    assert len(rows) == count.n == 5
    if not _evictions_seen():
        return
    third, fourth, fifth = rows[2:]
    assert (third["cause"], third["before"], third["after"]) == ("shape", "f32[4]", "f32[5]")
    assert "`f.clear_cache()`" in third["explanation"]
    assert (fourth["cause"], fourth["before"], fourth["after"]) == ("shape", "f32[5]", "f32[3]")
    assert "identical to trace #1's, which JAX no longer held" in fourth["explanation"]
    assert fifth["cause"] == "unknown" and "`f.clear_cache()`" in fifth["explanation"]


def test_another_function_gone_or_a_failed_trace_is_not_an_emptied_cache(jt):
    """JAX's cache loses entries when another function object dies, and a trace that raises leaves
    none: neither empties `f`'s keys."""

    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(3))
    for n in range(3):
        jax.jit(lambda x: x - 1)(jnp.ones(n + 1))  # dies at once: its entries leave JAX's cache
    gc.collect()
    with pytest.raises(TypeError):
        jax.jit(lambda x: x + "a")(jnp.ones(2))
    f(jnp.ones(4))
    last = _rows(jt, "f")[-1]
    assert (last["cause"], last["before"], last["after"]) == ("shape", "f32[3]", "f32[4]")
    assert "clear" not in last["explanation"] and "no longer held" not in last["explanation"]


def test_a_hash_colliding_static_is_not_unknown_while_the_function_lives(jt):
    f = jax.jit(lambda x, s: x * int(s), static_argnums=1)
    f(jnp.ones(2), np.int64(-1))
    f(jnp.ones(2), np.int64(-2))
    last = _rows(jt)[-1]
    assert (last["cause"], last["leaf"], last["before"], last["after"]) == (
        "static",
        "s",
        "np.int64(-1)",
        "np.int64(-2)",
    )


@dataclasses.dataclass(frozen=True)
class Slotted:
    __slots__ = ("a",)
    a: int


@dataclasses.dataclass(unsafe_hash=True)
class Mutable:
    a: int


def test_witnesses_compare_values_never_hashes():
    """Values that take no weak reference and are not small builtins: compared by a plain form taken
    when JAX compared them, never by hash (`hash(-1) == hash(-2)`)."""
    assert hash(np.int64(-1)) == hash(np.int64(-2))
    assert not Witness(np.int64(-1)).equals(Witness(np.int64(-2)))
    assert Witness(np.int64(-1)).equals(Witness(np.int64(-1)))
    assert not Witness(Slotted(-1)).equals(Witness(Slotted(-2)))
    assert Witness(Slotted(-1)).equals(Witness(Slotted(-1)))
    long = tuple(range(40))
    assert not Witness(long).equals(Witness(long[:-1] + (-1,)))
    assert Witness(long).equals(Witness(tuple(range(40))))
    assert not Witness(np.dtype("float32")).equals(Witness(np.dtype("float64")))
    # NumPy scalars equal the Python numbers they hold, as JAX's `==` finds them
    assert Witness(np.float32(0.5)).equals(Witness(0.5))
    assert not Witness(np.float32(0.1)).equals(Witness(0.1))


def test_a_static_mutated_after_its_trace_is_compared_as_it_was(jt):
    f = jax.jit(lambda x, cfg: x * cfg.a, static_argnums=1)
    one, two = Mutable(1), Mutable(2)
    f(jnp.ones(2), one)
    f(jnp.ones(2), two)
    two.a = 1  # now equal to `one`, after JAX compared them
    last = _rows(jt)[-1]
    assert (last["cause"], last["leaf"]) == ("static", "cfg")
    assert (last["before"], last["after"]) == ("Mutable(a=1)", "Mutable(a=2)")


@dataclasses.dataclass
class ConstantHash:
    a: int

    def __hash__(self):
        return 7


@pytest.mark.parametrize("cls", [ConstantHash, Mutable])
def test_a_static_mutated_in_place_is_one_object_to_jax(jt, cls):
    """A config object mutated between two calls is, to JAX's lookup, the object its key holds: the
    retrace at a new shape reads `shape` alone (a plain form taken at each trace would say `cfg`
    changed too). JAX's verdict on the first key's call again, the object mutated: with its hash
    unchanged (`ConstantHash`), no trace; with its hash changed too (`Mutable`), JAX 0.8.0 traces
    again and 0.10.2 does not. There jaxtrace_nb names no leaf (it cannot tell which JAX does) and
    says the difference in JAX's terms, never `unknown`."""
    traces = Counter()

    def scaled(x, cfg):
        traces.tick()
        return x * cfg.a

    f = jax.jit(scaled, static_argnums=1)
    cfg = cls(1)
    f(jnp.ones(2), cfg)
    cfg.a = 2
    f(jnp.ones(3), cfg)
    f(jnp.ones(2), cfg)
    f.trace(jnp.ones(2), cfg)
    rows = _rows(jt, "scaled")
    retrace = rows[1]
    assert (retrace["cause"], retrace["leaf"], retrace["before"], retrace["after"]) == (
        "shape",
        "x",
        "f32[2]",
        "f32[3]",
    )
    assert "Also changed" not in retrace["explanation"]
    assert traces.n == len(rows)
    if cls is ConstantHash:
        assert traces.n == 2  # JAX's verdict, for calls and `.trace`
    elif traces.n == 3:  # JAX 0.8.0: the new hash sent its lookup elsewhere
        last = rows[2]
        assert last["cause"] != "unknown" and last["leaf"] is None
        assert "jaxtrace_nb's reading of the arguments shows no difference" in last["explanation"]
    else:
        assert traces.n == 2  # JAX 0.10.2: the same object, equal whatever its hash
    assert jt.faults() == {}


def test_the_first_of_many_closures_is_the_same_object_with_a_new_shape(jt):
    count = Counter()

    def make():
        @jax.jit
        def h(x):
            count.tick()
            return x * 3

        return h

    hs = [make() for _ in range(9)]
    for h in hs:
        h(jnp.ones(2))
    hs[0](jnp.ones(5))
    rows = _rows(jt, "h")
    assert len(rows) == count.n == 10
    assert [r["cause"] for r in rows[1:9]] == ["new_function"] * 8
    assert (rows[-1]["cause"], rows[-1]["leaf"]) == ("shape", "x")


def test_lambdas_on_adjacent_lines_and_one_line_are_distinct_functions(jt):
    a = jax.jit(lambda x: x + 1)
    b = jax.jit(lambda x: x - 1)
    c, d = jax.jit(lambda x: x * 2), jax.jit(lambda x: x * 3)
    for f in (a, b, c, d):
        f(jnp.ones(2))
    rows = _rows(jt, "<lambda>")
    assert [r["cause"] for r in rows] == ["first"] * 4
    assert [r["trace_number"] for r in rows] == [1] * 4


def test_a_mutable_ref_is_named_by_its_jax_type(jt):
    @jax.jit
    def r(x):
        return x[...] * 2

    r(jnp.ones(3))
    r(jax.new_ref(jnp.ones(3)))
    last = _rows(jt, "r")[-1]
    assert (last["leaf"], last["before"], last["after"]) == ("x", "f32[3]", "Ref{f32[3]}")
    assert last["cause"] != "sharding" and "device_put" not in (last["hint"] or "")


def test_alike_statics_read_differently(jt):
    d = jax.jit(lambda x, t: x.astype(t), static_argnums=1)
    d(jnp.ones(2), jnp.float32)
    d(jnp.ones(2), np.float32)
    last = _rows(jt)[-1]
    assert last["cause"] == "static" and last["before"] != last["after"]
    assert "jax.numpy.float32" in last["before"] and "numpy.float32" in last["after"]

    q = jax.jit(lambda x, s: x * s, static_argnums=1)
    q(jnp.ones(2), float("nan"))
    q(jnp.ones(2), float("nan"))
    last = _rows(jt)[-1]
    assert last["cause"] == "static" and "NaN never equals NaN" in last["after"]


class EqualToNothing:
    def __eq__(self, other):
        return False

    def __hash__(self):
        return 1


@pytest.mark.parametrize("make", [lambda: float("nan"), EqualToNothing], ids=["nan", "eq_false"])
def test_the_same_static_object_is_one_key_however_it_compares(jt, make):
    """JAX's lookup tries identity first: the same NaN object, or an object ``==`` to nothing
    (itself included), passed again is a cache hit (JAX's verdict: no trace, with calls after
    another key and with `.trace`), so nothing is recorded; `Witness` does the same."""
    traces = Counter()

    def with_static(x, s):
        traces.tick()
        return x

    f = jax.jit(with_static, static_argnums=1)
    value = make()
    f(jnp.ones(2), value)
    f(jnp.ones(3), value)
    f(jnp.ones(2), value)
    f.trace(jnp.ones(2), value)
    assert traces.n == 2
    assert [r["cause"] for r in _rows(jt, "with_static")] == ["first", "shape"]
    assert Witness(value).equals(Witness(value))


def test_an_ordered_dict_static_shows_its_contents(jt):
    import collections

    f = jax.jit(lambda x, axes: x, static_argnums=1)

    class Axes(collections.OrderedDict):  # hashable, as penzai's named axes are frozen mappings
        def __hash__(self):
            return hash(tuple(self.items()))

    f(jnp.ones(2), Axes(batch=2, seq=3))
    f(jnp.ones(2), Axes(batch=2, seq=4))
    last = _rows(jt)[-1]
    assert last["before"] != last["after"]
    assert "seq" in last["after"] and "4" in last["after"]


def test_equally_close_keys_are_named_and_the_type_difference_breaks_the_tie(jt):
    """(x f32[2], True), (x f32[3], False), then (x f32[3], True): one component from each earlier
    key. A type difference is closer than a pytree (static) one (issue 54; JAX's explainer ranks
    the other way)."""

    @functools.partial(jax.jit, static_argnums=1)
    def step(x, train):
        return x

    step(jnp.ones(2), True)
    step(jnp.ones(3), False)
    step(jnp.ones(3), True)
    last = _rows(jt, "step")[-1]
    assert (last["cause"], last["leaf"]) == ("shape", "x")
    assert "As close: trace #2 (differs at `train`)" in last["explanation"]


def test_a_function_gone_and_made_again_is_new_with_its_keys_dropped(jt):
    def make():
        return jax.jit(lambda x: x * 2)

    f = make()
    f(jnp.ones(2))
    del f
    gc.collect()
    g = make()
    g(jnp.ones(3))
    last = _rows(jt)[-1]
    assert last["cause"] == "new_function"


def test_a_library_static_field_gets_no_instruction_to_make_it_traced(jt):
    """Lineax's operator `tags` is the library's own `eqx.field(static=True)`: the user cannot make
    it an array, so no hint tells them to."""
    import equinox as eqx
    import lineax as lx

    @eqx.filter_jit
    def solve(op, b):
        return lx.linear_solve(op, b).value

    a, b = jnp.eye(2) * 2.0, jnp.ones(2)
    solve(lx.MatrixLinearOperator(a), b)
    solve(lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag), b)
    last = _rows(jt, "solve")[-1]
    assert (last["cause"], last["leaf"]) == ("static", "op.tags")
    assert last["hint_ids"] == "static.library_field"
    assert (last["before"], last["after"]) == (
        "frozenset({})",
        "frozenset({positive_semidefinite_tag})",
    )
    assert "ordinary field" not in last["hint"] and "array" not in last["hint"]


def test_a_retrace_made_by_its_callers_retrace_says_so_and_gives_no_fix(jt):
    """Diffrax's `diffeqsolve` inside the user's jit, `SaveAt(ts=...)` one longer: the user's
    `solve` retraces at `ts`; the nested solve's retrace follows from it and says so, with no
    hint."""
    import diffrax

    term = diffrax.ODETerm(lambda t, y, args: -y)

    @jax.jit
    def solve(y0, ts):
        return diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, 1.0, 0.1, y0, saveat=diffrax.SaveAt(ts=ts)
        ).ys

    solve(jnp.ones(2), jnp.linspace(0, 1, 5))
    solve(jnp.ones(2), jnp.linspace(0, 1, 7))
    df = jt.log()
    retraces = df[(df["kind"] == "trace") & (df["trace_number"] > 1)]
    outer = retraces[retraces["function"].str.endswith("solve") & ~retraces["nested"]]
    assert outer[["cause", "leaf"]].values.tolist() == [["shape", "ts"]]
    inner = retraces[retraces["function"] == "diffeqsolve"]
    assert len(inner) == 1
    assert "a consequence of `" in inner.iloc[0]["explanation"] and not inner.iloc[0]["hint"]
    assert pd_na_or_none(inner.iloc[0]["hint_ids"])


def pd_na_or_none(value) -> bool:
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def test_penzai_named_axes_show_their_names(jt):
    """Penzai's `NamedArray` keeps its axis names in an `OrderedDict` (node metadata): before and
    after show its items, never `<OrderedDict object>` on both sides."""
    from penzai import pz

    @jax.jit
    def f(a):
        return a

    f(pz.nx.wrap(jnp.ones((2, 3))).tag("batch", "seq"))
    f(pz.nx.wrap(jnp.ones((2, 3))).tag("batch", "feat"))
    last = _rows(jt, "f")[-1]
    assert (last["cause"], last["leaf"]) == ("static", "a.named_axes")
    assert (last["before"], last["after"]) == (
        "OrderedDict({'batch': 2, 'seq': 3})",
        "OrderedDict({'batch': 2, 'feat': 3})",
    )


def test_the_sessions_bound_drops_keys_jax_no_longer_holds_first():
    """Past `KeyBudget`'s limit, keys of a cleared generation go first; then the oldest of the
    function that keeps the most, which counts them as forgotten (its explanations say a closer key
    may exist)."""
    import weakref

    from jaxtrace_nb._keys._signature import Signature, array_leaf
    from jaxtrace_nb._recording._functions import FunctionState, KeptKey, KeyBudget

    class Fn:
        pass

    fn = Fn()
    ref = weakref.ref(fn)
    sig = Signature(("id", 1), (), {f"x{i}": array_leaf((i,), "float32") for i in range(10)})
    big, small = FunctionState(None), FunctionState(None)
    functions, budget = {"big": big, "small": small}, KeyBudget(limit=100)
    for n in range(4):  # generation 0: cleared since
        budget.added(big.add_key(KeptKey(sig, ref, 0, n + 1)), functions, 1)
    for n in range(5):
        budget.added(big.add_key(KeptKey(sig, ref, 1, n + 5)), functions, 1)
    budget.added(small.add_key(KeptKey(sig, ref, 1, 1)), functions, 1)  # 100 leaves: at the limit
    budget.added(big.add_key(KeptKey(sig, ref, 1, 10)), functions, 1)  # past it: generation 0 goes
    assert [k.trace_number for k in big.keys] == [5, 6, 7, 8, 9, 10] and big.forgotten == 0
    for n in range(11, 15):
        budget.added(big.add_key(KeptKey(sig, ref, 1, n)), functions, 1)
    assert budget.leaves <= 100 and big.forgotten == 2  # held keys dropped, oldest first: forgotten
    assert [k.trace_number for k in big.keys] == [7, 8, 9, 10, 11, 12, 13, 14] and len(
        small.keys
    ) == 1
    assert big.kept_leaves == 10 * len(big.keys)
