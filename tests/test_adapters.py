"""The adapters' registry (`jaxtrace_nb._adapters`): one module per library, found and registered.

A library is taught in one file: its packages (library frames), its jit wrapper, its origins
of static values with the words hints name them by, its hints, its nodes. These tests check the
contract every registered adapter keeps, and that a new module in the package is all it takes.
"""

from __future__ import annotations

import enum
import inspect
import sys
import textwrap

import pytest

from jaxtrace_nb import _adapters
from jaxtrace_nb._adapters import _registry
from jaxtrace_nb._core._vocabulary import JitKind, Origin
from jaxtrace_nb._diagnosis._hints import _MECHANISM, HINTS

_MEMBERS = (
    "name",
    "packages",
    "jit",
    "origins",
    "hints",
    "precedence",
    "available",
    "wraps",
    "decode_call",
    "walk_node",
    "hint",
)


def test_every_adapter_keeps_the_contract():
    adapters = _adapters.adapters()
    assert [a.name for a in adapters] == ["flax.nnx", "optax", "diffrax", "equinox", "jax"]
    for adapter in adapters:
        assert all(hasattr(adapter, member) for member in _MEMBERS), adapter
        assert adapter.jit is None or (adapter.jit.kind in set(JitKind) and adapter.jit.package)
        assert all(
            isinstance(origin, str) and isinstance(origin, enum.Enum) and words.startswith(" (")
            for origin, words in adapter.origins.items()
        )
    assert [a.precedence for a in adapters] == sorted(a.precedence for a in adapters)
    assert adapters[-1].name == "jax"  # JAX's own pytree kinds: every node no other adapter claimed


def test_library_packages_come_from_the_registry():
    assert _adapters.library_packages() == (
        "flax",
        "optax",
        "diffrax",
        "lineax",
        "optimistix",
        "equinox",
        "jax",
        "jaxlib",
        "jaxtrace_nb",
        "chex",
        "jaxtyping",
    )
    assert _adapters.wrapper_package(JitKind.EQUINOX) == "equinox"
    assert _adapters.wrapper_package("nnx") == "flax"
    assert _adapters.wrapper_package(JitKind.JIT) is None


def test_hints_and_origins_of_every_adapter_are_registered_once():
    for adapter in _adapters.adapters():
        for hint in adapter.hints:
            assert HINTS[hint.id] is hint
        for origin, words in adapter.origins.items():
            assert _MECHANISM[origin] == words
    assert set(Origin) <= set(_MECHANISM) | {Origin.FUNCTION}


def test_adapters_write_through_the_walker_and_the_decoder_public_methods():
    for adapter in _adapters.adapters():
        source = inspect.getsource(sys.modules[type(adapter).__module__])
        for private in (
            "walker.leaves",
            "walker.owners",
            "walker.flat_paths",
            "decoder._",
            "walker._",
        ):
            assert private not in source, (adapter.name, private)


def test_a_new_library_is_one_module(tmp_path, monkeypatch):
    """A module dropped into the package registers its adapter: its packages are library code, its
    hints and origins join the rest, and it is asked while its library is imported."""
    (tmp_path / "mylib_adapter.py").write_text(
        textwrap.dedent("""
        import sys

        from .._core._vocabulary import Cause, StrEnum
        from ._registry import Hint, Library, register


        class MyOrigin(StrEnum):
            KNOB = "mylib knob"


        @register
        class MyLib(Library):
            name = "mylib"
            packages = ("mylib",)
            origins = {MyOrigin.KNOB: " (a knob of `mylib`)"}
            hints = (Hint("static.mylib_knob", "{p} is a knob of mylib.", False),)

            def available(self):
                return "mylib" in sys.modules

            def hint(self, evidence):
                if evidence.cause == Cause.STATIC and evidence.new.origin == MyOrigin.KNOB:
                    return "static.mylib_knob", {}
                return None
    """)
    )
    monkeypatch.setattr(_adapters, "__path__", [*_adapters.__path__, str(tmp_path)])
    registered = list(_registry._REGISTERED)
    try:
        _adapters._import_adapters()
        names = [a.name for a in _adapters.adapters()]
        assert "mylib" in names and names.index("mylib") < names.index("jax")
        assert "mylib" in _adapters.library_packages()
        assert "mylib" not in [a.name for a in _adapters.active()]
        assert [h.id for h in _adapters.hints()].count("static.mylib_knob") == 1
    finally:
        _registry._REGISTERED[:] = registered
        sys.modules.pop("jaxtrace_nb._adapters.mylib_adapter", None)


def test_a_second_adapter_of_one_name_is_refused():
    with pytest.raises(ValueError, match="a second adapter named 'optax'"):

        @_registry.register
        class Again(_registry.Library):
            name = "optax"
