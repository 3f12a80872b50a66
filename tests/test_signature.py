"""The diff on plain data, without JAX."""

from jaxtrace_nb._adapters.equinox import EqxOrigin
from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._diagnosis._diagnose import diagnose
from jaxtrace_nb._keys._signature import NONE_LEAF, Signature, array_leaf, static_leaf


def sig(leaves, *, fun=1, context=(), function_path=None, jit_kind="jit", owners=None):
    return Signature(("id", fun), context, leaves, function_path, jit_kind, owners=owners)


def test_first_trace():
    assert diagnose(sig({"x": array_leaf((3,), "float32")}), []).cause == "first"


def test_shape_change_names_leaf_and_values():
    old = sig({"x": array_leaf((3,), "float32"), "y": array_leaf((), "float32")})
    new = sig({"x": array_leaf((4,), "float32"), "y": array_leaf((), "float32")})
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.before, d.after) == ("shape", "x", "f32[3]", "f32[4]")
    assert "pad" in d.hint


def test_weak_type_and_dtype():
    weak = sig({"y": array_leaf((), "float32", weak=True)})
    strong = sig({"y": array_leaf((), "float32")})
    d = diagnose(strong, [weak])
    assert (d.cause, d.leaf, d.before, d.after) == ("weak_type", "y", "f32[] (weak)", "f32[]")
    assert "jnp.asarray" in d.hint
    f64 = sig({"y": array_leaf((), "float64")})
    d = diagnose(f64, [strong])
    assert (d.cause, d.before, d.after) == ("dtype", "f32[]", "f64[]")
    assert "float64" in d.hint


def test_structure_none_leaf_hint_names_optax_only_with_evidence():
    owners = {"opt_state[0]": "optax._src.transform.TraceState"}
    old = sig({"opt_state[0].trace.b": array_leaf((2,), "float32")}, owners=owners)
    new = sig({"opt_state[0].trace.b": NONE_LEAF}, owners=owners)
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.before, d.after) == (
        "structure",
        "opt_state[0].trace.b",
        "f32[2]",
        "None",
    )
    assert "optim.init" in d.hint and "TraceState" in d.hint
    plain = diagnose(sig({"y": NONE_LEAF}), [sig({"y": array_leaf((2,), "float32")})])
    assert "optax" not in plain.hint and "optim.init" not in plain.hint


def test_static_same_name_new_object():
    a, b = (lambda x: x), (lambda x: x)
    old = sig({"model.fn": static_leaf(summarize_static(a))})
    new = sig({"model.fn": static_leaf(summarize_static(b))})
    d = diagnose(new, [old])
    assert (d.cause, d.leaf) == ("static", "model.fn")
    assert "same name" in d.explanation and "lambda" in d.hint


def test_static_python_int_under_equinox_hint():
    old = sig({"s": static_leaf(summarize_static(1), EqxOrigin.FILTER_JIT)}, jit_kind="equinox")
    new = sig({"s": static_leaf(summarize_static(2), EqxOrigin.FILTER_JIT)}, jit_kind="equinox")
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.before, d.after) == ("static", "s", "1", "2")
    assert "filter_jit" in d.hint


def test_closest_previous_signature_is_used():
    s3 = sig({"x": array_leaf((3,), "float32"), "n": static_leaf(summarize_static(1))})
    s4 = sig({"x": array_leaf((4,), "float32"), "n": static_leaf(summarize_static(2))})
    new = sig({"x": array_leaf((4,), "float32"), "n": static_leaf(summarize_static(1))})
    d = diagnose(new, [s3, s4])
    assert d.distance == 1  # one leaf differs from the closest (either earlier) signature


def test_many_changes_listed_up_to_five():
    old = sig({f"x{i}": array_leaf((1,), "float32") for i in range(8)})
    new = sig({f"x{i}": array_leaf((2,), "float32") for i in range(8)})
    d = diagnose(new, [old])
    assert d.leaf == "x0"
    assert (
        "`x1` (shape), `x2` (shape), `x3` (shape), `x4` (shape)" in d.explanation
        and "3 more" in d.explanation
    )


def test_new_function_and_context():
    leaves = {"x": array_leaf((3,), "float32")}
    d = diagnose(
        sig(leaves, fun=2), [sig(leaves)], new_object=True, rerun_note="its cell was re-run"
    )
    assert d.cause == "new_function" and "re-run" in d.explanation
    d = diagnose(
        sig(leaves, context=(("enable_x64", "True"),)),
        [sig(leaves, context=(("enable_x64", "False"),))],
    )
    assert d.cause == "context" and "enable_x64" in d.explanation


def test_identical_inputs_are_unknown():
    leaves = {"x": array_leaf((3,), "float32")}
    assert diagnose(sig(leaves), [sig(leaves)]).cause == "unknown"


def test_summary_is_bounded_and_runs_no_user_repr():
    class Hostile:
        def __repr__(self):
            raise AssertionError("repr must not run")

    info = summarize_static(Hostile())
    assert info.text == "<test_summary_is_bounded_and_runs_no_user_repr.<locals>.Hostile object>"
    assert len(summarize_static("x" * 10_000).text) <= 200
    assert len(summarize_static(tuple(range(10_000))).text) <= 200
    assert summarize_static("<img src=x onerror=alert(1)>").text == "'<img src=x onerror=alert(1)>'"
