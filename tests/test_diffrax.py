"""Diffrax: ``diffrax.diffeqsolve`` retraces named in the user's terms (`_adapters/diffrax.py`).

``diffeqsolve`` is an ``eqx.filter_jit`` function: its solver, ``SaveAt``, step-size controller
and terms are part of what it compiles for. Each scenario traces ``diffeqsolve`` twice with one
of them changed (and a ``y0`` shape of its own, so that no scenario hits another's cache), and
the second trace's diagnosis names that change as the user wrote it.
"""

import jax.numpy as jnp
import pytest

diffrax = pytest.importorskip(
    "diffrax",
    reason="the Diffrax adapter is tested with diffrax installed "
    "(pip install diffrax; it is in the [test] extra)",
)

from _support import rows  # noqa: E402

from jaxtrace_nb._diagnosis._diagnose import diagnose  # noqa: E402

TERM = diffrax.ODETerm(lambda t, y, args: -y)


def _solve(n: int, *, term=TERM, solver=None, saveat=None, controller=None, **kwargs):
    return diffrax.diffeqsolve(
        term,
        solver or diffrax.Tsit5(),
        0.0,
        1.0,
        0.1,
        jnp.ones(n),
        saveat=saveat or diffrax.SaveAt(t1=True),
        stepsize_controller=controller or diffrax.PIDController(rtol=1e-3, atol=1e-6),
        **kwargs,
    )


def _signatures(monkeypatch, calls) -> list:
    """The signature of each ``diffeqsolve`` trace that `calls` make, as the decoder read it."""
    from jaxtrace_nb._recording._session import get_session

    probe = get_session().probe
    original, found = probe._trace, []

    def capture(frame):
        trace = original(frame)
        if trace is not None and trace.record.identity.name == "diffeqsolve":
            found.append(trace.record.signature.get())
        return trace

    monkeypatch.setattr(probe, "_trace", capture)
    for call in calls:
        call()
    monkeypatch.undo()
    return found


SCENARIOS = {
    # name: (first call, second call, cause, leaf, before, after, hint id)
    "saveat_ts_given": (
        dict(),
        dict(saveat=diffrax.SaveAt(ts=jnp.linspace(0, 1, 5))),
        "structure",
        "saveat.ts",
        "None",
        "f32[5]",
        "diffrax.saveat",
    ),
    "saveat_ts_length": (
        dict(saveat=diffrax.SaveAt(ts=jnp.linspace(0, 1, 5))),
        dict(saveat=diffrax.SaveAt(ts=jnp.linspace(0, 1, 7))),
        "shape",
        "saveat.ts",
        "f32[5]",
        "f32[7]",
        "diffrax.saveat",
    ),
    "saveat_steps": (
        dict(saveat=diffrax.SaveAt(steps=1)),
        dict(saveat=diffrax.SaveAt(steps=2)),
        "static",
        "saveat.steps",
        "1",
        "2",
        "static.value",
    ),
    "solver": (
        dict(),
        dict(solver=diffrax.Dopri5()),
        "structure",
        "solver",
        "Tsit5",
        "Dopri5",
        "diffrax.component",
    ),
    "controller": (
        dict(),
        dict(controller=diffrax.ConstantStepSize()),
        "structure",
        "stepsize_controller",
        "PIDController",
        "ConstantStepSize",
        "diffrax.component",
    ),
    "rtol": (
        dict(),
        dict(controller=diffrax.PIDController(rtol=1e-4, atol=1e-6)),
        "static",
        # (a library's argument: no instruction to pass an array, which no proof covers for
        # Diffrax)
        "stepsize_controller.rtol",
        "0.001",
        "0.0001",
        "static.library_number",
    ),
    "max_steps": (
        dict(max_steps=4096),
        dict(max_steps=100),
        "static",
        "max_steps",
        "4096",
        "100",
        "static.value",
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_diffeqsolve_retrace_names_the_change_as_the_user_wrote_it(jt, monkeypatch, scenario):
    first, second, cause, leaf, before, after, hint_id = SCENARIOS[scenario]
    n = 10 + list(SCENARIOS).index(
        scenario
    )  # a y0 of its own: JAX has traced no other scenario with it
    old, new = _signatures(monkeypatch, [lambda: _solve(n, **first), lambda: _solve(n, **second)])
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.before, d.after, d.hint_id) == (
        cause,
        leaf,
        before,
        after,
        hint_id,
    ), d


def test_a_vector_field_created_anew_is_a_new_object_with_the_same_name(jt, monkeypatch):
    calls = [lambda: _solve(30, term=diffrax.ODETerm(lambda t, y, args: -y)) for _ in range(2)]
    old, new = _signatures(monkeypatch, calls)
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.hint_id) == ("static", "terms.vector_field", "identity.lambda")


def test_origins_say_what_diffrax_makes_static(jt, monkeypatch):
    (signature,) = _signatures(
        monkeypatch, [lambda: _solve(31, saveat=diffrax.SaveAt(t0=True, t1=True), max_steps=64)]
    )
    leaves = signature.leaves
    assert leaves["saveat.t0"].origin == leaves["saveat.t1"].origin == "diffrax.SaveAt option"
    assert leaves["max_steps"].origin == "diffeqsolve max_steps"
    assert (
        leaves["stepsize_controller.rtol"].origin == "filter_jit"
    )  # traced once passed as an array
    assert "saveat.subs.t1" not in leaves and leaves["saveat (structure)"].text == "SaveAt"
    d = diagnose(
        _signatures(
            monkeypatch, [lambda: _solve(31, saveat=diffrax.SaveAt(t0=True, t1=True), max_steps=65)]
        )[0],
        [signature],
    )
    assert d.hint_id == "static.value" and "sizes the buffers" in d.hint, d


def test_diffrax_frames_are_library_code(jt):
    _solve(32)
    _solve(32, solver=diffrax.Dopri5())
    df = jt.log()
    user = df[~df["internal"] & (df["kind"] == "trace")]
    assert set(user["function"]) == {"diffeqsolve"}
    assert all(site.startswith(__file__) for site in user["call_site"]), list(user["call_site"])
    assert jt.faults() == {}


# (JAX's caches cleared: Diffrax's own helpers are traced again, inside diffeqsolve's trace)
@pytest.mark.allows_unknown
def test_diffeqsolve_rows(jt):
    import jax

    jax.clear_caches()
    _solve(33)
    _solve(33, solver=diffrax.Dopri5())
    assert rows(jt, "diffeqsolve") == [
        ("diffeqsolve", "first", None, None, None),
        ("diffeqsolve", "structure", "solver", "Tsit5", "Dopri5"),
    ]
