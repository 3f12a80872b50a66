"""A traced call in the user's terms: the function's identity, its leaf signature, the call site.

Reads what JAX's tracing function received (a `TraceStart`: the traced callable, the
arguments' abstract values and their ``(args, kwargs)`` treedef, in which static
arguments are node data, and JAX's debug info), and what a lowering received. Library
adapters (`_adapters`) recognise their own jit wrappers and pytree nodes. Nothing
decoded keeps a reference to an array, a tracer or a user object: leaves are text and
tokens, summaries are bounded (`_values`).
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from typing import Any, Callable, Sequence

from . import _adapters
from ._jax_internals import Internals, all_abstract, trace_context_function, trace_context_names
from ._jax_layouts import KEY_PARTS, PlainCall, TraceStart, cache_key
from ._records import FunctionIdentity, LoweringRecord, TraceRecord
from ._signature import DERIVED_LOWERING, Origin, Signature
from ._values import clip, printable, summarize_static
from ._arguments import (_SRC_INFO, DecodedCall, TreeArg, Walker, arg_name, argument, aval_leaf, parameters,
                         argument_plan, call_plan, keys_are_str, raw_identity)
from ._jax_tree import handle as tree_handle
from ._witness import Witness

LIBRARY_PACKAGES = ("jax", "jaxlib", "equinox", "optax", "chex", "flax", "jaxtyping", "jaxtrace_nb")
_CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|ipykernel_\d+[/\\]\d+\.py$")
_MAX_CALL_SITE_DEPTH = 64
_MAX_IDENTITIES = 4096


# ------------------------------------------------------------------ identity
def _library_dirs() -> tuple[str, ...]:
    """The folders of the libraries whose frames and functions are not the user's, whether or
    not they are imported yet (found without importing them)."""
    return tuple(d for name in LIBRARY_PACKAGES for d in _package_dirs(name))


def _package_dirs(name: str) -> tuple[str, ...]:
    """The folders of one package (found without importing it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    locations = (spec.submodule_search_locations or ()) if spec is not None else ()
    return tuple(os.path.abspath(location) + os.sep for location in locations)


def _jitted_where_defined(fun: Any, is_library: Callable[[str], bool]) -> bool:
    """Whether `fun`, a plain function of a library's, is wrapped where its module defines it (a
    ``@jax.jit`` at its definition): its module's attribute of its name is not `fun` itself."""
    import types

    if type(fun) is not types.FunctionType:
        return False
    code = getattr(fun, "__code__", None)
    qualname = getattr(fun, "__qualname__", "") or ""
    if code is None or "<locals>" in qualname or not is_library(code.co_filename):
        return False
    module = sys.modules.get(getattr(fun, "__module__", None) or "")
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None) if target is not None else None
    return target is not None and target is not fun


def _dead_ref() -> None:
    return None


class Decoder:
    """Turns what the probe reads of JAX into `TraceRecord`s and `LoweringRecord`s."""

    def __init__(self, internals: Internals):
        self.internals = internals
        self.library_dirs = _library_dirs()
        self.cell_label: Callable[[str], str | None] | None = None  # set by the IPython glue
        self._identities: dict[int, tuple] = {}  # id(function) -> (weakref, identity, parameters)
        # id(function) -> (its last `CallPlan`, its `_identities` entry, ((name, plan, start), ...), call,
        # the treedef of that call when it holds no object but str keys (else None), the treedef's hash)
        self._named_plans: dict[int, tuple] = {}
        self._context: tuple = ((), ())  # JAX's last trace-context values, and their texts
        self._library_files: dict[str, bool] = {}  # file name -> in a library's folder
        self._locations: dict[tuple, str] = {}  # (file name, line) -> its location text, outside cells
        self._lines: dict[tuple, tuple] = {}  # (id(code), offset) -> (weak reference to the code, line)
        self._call_path: tuple | None = None  # the stack of the last `call_site`, as it keeps it
        self._last_site: tuple = (_dead_ref, -1, "")  # (weak reference to a code object, instruction, text)
        self._trace_context = trace_context_function()  # JAX's: every config value its caches key on
        self._package_dirs: dict[str, tuple] = {}  # a library's package name -> its folders

    # ---------------------------------------------------------- locations
    def location(self, filename: str, line: int) -> str:
        """"file:line", or "In[5]:3" for a notebook cell (asked each time; other files' texts are kept)."""
        text = self._locations.get((filename, line))
        if text is not None:
            return text
        if _CELL_FILE.search(filename):
            label = None
            if self.cell_label is not None:
                try:
                    label = self.cell_label(filename)
                except Exception:
                    label = None
            return printable(f"{label or filename}:{line}", 400)
        if len(self._locations) >= _MAX_IDENTITIES:
            self._locations.clear()
        text = self._locations[(filename, line)] = printable(f"{filename}:{line}", 400)
        return text

    def is_library(self, filename: str) -> bool:
        known = self._library_files.get(filename)
        if known is None:
            if len(self._library_files) >= _MAX_IDENTITIES:
                self._library_files.clear()
            known = self._library_files[filename] = bool(self.library_dirs) and filename.startswith(self.library_dirs)
        return known

    def call_site(self, frame=None) -> str | None:
        """The innermost frame of the user's own code on the stack, from `frame` (by default the
        caller's) outwards.

        The library frames' code objects up to it are remembered: where the same code objects
        are on the stack again, so is the same answer (each frame's verdict depends on its code
        alone), and no frame is asked again. Its line is kept per code object (weakly) and
        instruction: finding a line scans the code's line table."""
        if frame is None:
            frame = sys._getframe(1)
        path = self._call_path  # (the library frames' code objects, a weak reference to the user frame's)
        if path is not None:
            f = frame
            try:
                for code in path[0]:
                    if f.f_code is not code:
                        break
                    f = f.f_back
                else:
                    if f.f_code is path[1]():
                        return self._site(f)
            except AttributeError:  # a shorter stack (`f` is None)
                pass
        library, codes = self._library_files, []
        for _ in range(_MAX_CALL_SITE_DEPTH):
            if frame is None:
                return None
            code = frame.f_code
            filename = code.co_filename
            known = library.get(filename)
            if known is None:
                known = self.is_library(filename)
            if not known and not filename.startswith("<frozen"):
                try:
                    self._call_path = (tuple(codes), weakref.ref(code))
                except TypeError:
                    self._call_path = None
                return self._site(frame)
            codes.append(code)
            frame = frame.f_back
        return None

    def _site(self, frame) -> str:
        """`frame`'s location text, its line found per code object and instruction (the last
        answer outside a cell is kept: a loop that retraces calls from one place)."""
        code = frame.f_code
        lasti = frame.f_lasti
        last = self._last_site
        if last[1] == lasti and last[0]() is code:
            return last[2]
        key = (id(code), lasti)
        seen = self._lines.get(key)
        line = seen[1] if seen is not None and seen[0]() is code else self._line(key, code, frame.f_lineno)
        filename = code.co_filename
        text = self._locations.get((filename, line))
        if text is None:
            return self.location(filename, line)
        seen = self._lines.get(key)
        if seen is not None:  # (`_line` keeps the weak reference to the code)
            self._last_site = (seen[0], lasti, text)
        return text

    def _line(self, key: tuple, code: Any, line: int) -> int:
        """Keep `line` for `key` (`call_site`), with a weak reference to `code`, which `key` names by id."""
        try:
            ref = weakref.ref(code)
        except TypeError:
            return line
        if len(self._lines) >= _MAX_IDENTITIES:
            self._lines.clear()
        self._lines[key] = (ref, line)
        return line

    # ------------------------------------------------------------- traces
    def trace_record(self, start: TraceStart, *, nested: bool, thread: int, cache_generation: int,
                     on_fault: Callable[[str, BaseException], None], frame=None) -> TraceRecord:
        """The record of a trace; `frame` is the trace's own (the user's call is found above it)."""
        adapters = _adapters.active()
        call = self.decode_call(start, adapters)
        identity = self.identity(start, call, frame)
        signature, arg_names = None, None
        try:
            signature, flat_paths = self._signature(start, call, adapters)
            if call.jit_kind != "jit":
                arg_names = _arg_names(start.debug_info, flat_paths)
        except Exception as e:  # the trace is still recorded, by name, without a cause
            on_fault("signature", e)
        ref = None
        if call.user_fun is not None:
            try:
                ref = weakref.ref(call.user_fun)
            except TypeError:
                ref = None
        return TraceRecord(identity, nested, signature, ref, thread, self.call_site(frame), cache_generation,
                           arg_names)

    def plain_jit_record(self, call: PlainCall, *, nested: bool, thread: int, cache_generation: int,
                         frame=None) -> TraceRecord | None:
        """`trace_record` of a retrace of a plain ``jax.jit`` function whose every argument is a
        tree of dicts with string keys, lists, tuples and None (`call_plan`), read from the
        whole call's treedef at once; None for any other call, and for a function's first trace
        (which `trace_record` reads, and whose identity and parameters it remembers).

        Only a function that `trace_record` found to be a plain ``jax.jit`` one qualifies: a
        library adapter claims a call by its function object or by a static argument, and a
        call of plain trees has none (``tests/test_tree_plans.py`` compares the two readings).
        The treedef of the function's last plain call is kept with its plan and hash: it holds
        node kinds and string keys only, and a retrace with the same tree (a new leaf type or
        shape, the common case) finds its plan by one comparison."""
        fun = call.fun
        known = self._identities.get(id(fun))
        if known is None or known[0]() is not fun:
            return None
        tree = call.tree
        named = self._named_plans.get(id(fun))
        if named is None or named[1] is not known or named[4] is None or named[4] != tree:
            plan = call_plan(tree, call.names)
            if plan is None:
                return None
            if known[1] is None or known[2] is None or known[1].jit_kind != "jit":
                return None
            if len(self._named_plans) >= _MAX_IDENTITIES:
                self._named_plans.clear()
            try:
                tree_hash = hash(tree)
            except Exception:
                tree_hash = None
            kept = tree if keys_are_str(tree) else None  # (a str subclass key would be a user object)
            named = self._named_plans[id(fun)] = (plan, known, *_named_arguments(plan, *known[2]), kept, tree_hash)
        vals = call.vals
        if not all_abstract(vals):
            return None  # (only abstract values are kept until the leaves are read)
        try:
            hashes = (hash(fun), named[5], hash(call.debug_info))  # (`cache_key`'s parts)
        except Exception:
            hashes = _key_hashes(cache_key(fun, tree, call.debug_info))
        signature = DeferredSignature((id(fun), self._trace_context_now(), named[3], hashes), named[2], vals,
                                      named[0].n_leaves)
        # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every retrace.
        return tuple.__new__(TraceRecord, (known[1], nested, signature, known[0], thread, self.call_site(frame),
                                           cache_generation, None))

    def is_wrapper(self, fun: Any) -> bool:
        """Whether `fun` is a library's jit wrapper around a user function (e.g. eqx.filter_jit's)."""
        return any(adapter.wraps(fun) for adapter in _adapters.active())

    def decode_call(self, start: TraceStart, adapters: tuple | None = None) -> DecodedCall:
        for adapter in _adapters.active() if adapters is None else adapters:
            decoded = adapter.decode_call(start, getattr(self.internals.layout, "static_type", None), self)
            if decoded is not None:
                return decoded
        return self._jit_call(start)

    def _jit_call(self, start: TraceStart) -> DecodedCall:
        positional, var = self.parameters(start.fun)
        named = [(arg_name(i, positional, var), part, "position") for i, part in enumerate(start.positional)]
        named += [(name, part, "keyword") for name, part in start.keyword]
        arguments = [(name, argument(part, start.vals, Origin.STATIC_ARGNUMS)) for name, part, _ in named]
        return DecodedCall("jit", start.fun, None, arguments, None, tuple((name, how) for name, _, how in named))

    def parameters(self, fun: Any) -> tuple[list[str], str | None]:
        """`parameters(fun)`, remembered per function object (inspect.signature is slow)."""
        cached = self._identities.get(id(fun))
        if cached is not None and cached[0]() is fun and cached[2] is not None:
            return cached[2]
        found = parameters(fun)
        if cached is not None and cached[0]() is fun:
            self._identities[id(fun)] = cached[:2] + (found,)
        else:
            self._remember(fun, None, found)
        return found

    def identity(self, start: TraceStart, call: DecodedCall, frame=None) -> FunctionIdentity:
        fun = call.user_fun
        cached = self._identities.get(id(fun)) if fun is not None and call.identity is None else None
        if cached is not None and cached[0]() is fun and cached[1] is not None:
            return cached[1]
        name, filename, line = call.identity or raw_identity(fun, start.debug_info)
        name = printable(name)
        in_cell = bool(_CELL_FILE.search(filename))
        identity = FunctionIdentity(
            name=name, filename=filename, line=line, location=self.location(filename, line),
            key=f"{'<cell>' if in_cell else filename}::{name}", in_cell=in_cell,
            internal=self._jitted_by_library(frame, call, filename), jit_kind=call.jit_kind,
            jax_name=str(self.internals.fun_name(start.fun)),
            src_info=str(getattr(start.debug_info, "func_src_info", "") or ""))
        if fun is not None and call.identity is None:
            self._remember(fun, identity, cached[2] if cached is not None and cached[0]() is fun else None)
        return identity

    def _jitted_by_library(self, frame, call: DecodedCall, filename: str) -> bool:
        """Whether a library, not the user, jitted the traced function: whoever called the jitted
        object (the frame above JAX's jit machinery and, for a library's jit wrapper such as
        ``eqx.filter_jit``, above that library's own frames) is library code, or the library
        jitted the function where it defined it (its module's attribute is a jit of it).
        Where the function is defined does not decide: ``jax.jit(model.apply)`` is the user's."""
        if not self.is_library(filename):
            return False  # (a function of the user's own, whoever jitted it, is the user's to fix)
        if frame is None:
            return self.is_library(filename)
        machinery = getattr(self.internals.layout, "machinery", ())
        wrapper = _adapters.wrapper_package(call.jit_kind)
        f, depth = frame, 0
        while f is not None and depth < _MAX_CALL_SITE_DEPTH:
            name = f.f_code.co_filename.replace("\\", "/")
            if not (name.endswith(machinery) or (wrapper and self._in_package(name, wrapper))):
                break
            f, depth = f.f_back, depth + 1
        if f is None or depth >= _MAX_CALL_SITE_DEPTH:
            return self.is_library(filename)
        caller = f.f_code.co_filename
        if self.is_library(caller) and not caller.startswith("<frozen"):
            return True
        return _jitted_where_defined(call.user_fun if call.jit_kind == "jit" else None, self.is_library)

    def _in_package(self, filename: str, package: str) -> bool:
        dirs = self._package_dirs.get(package)
        if dirs is None:
            dirs = self._package_dirs[package] = _package_dirs(package)
        return bool(dirs) and filename.startswith(dirs)

    def _remember(self, fun: Any, identity: FunctionIdentity | None, params: tuple | None) -> None:
        """Keep `fun`'s identity and parameters, by the object (a weak reference to it)."""
        try:
            if len(self._identities) >= _MAX_IDENTITIES:
                self._identities.clear()
            self._identities[id(fun)] = (weakref.ref(fun), identity, params)
        except TypeError:  # an object without weak references: asked again next time
            pass

    def _signature(self, start: TraceStart, call: DecodedCall, adapters: tuple) -> tuple[Signature, dict]:
        deferred = self._deferred_signature(start, call)
        if deferred is not None:
            return deferred, {}
        walker = Walker(adapters)
        function_path = None
        if call.function_leaf is not None:
            function_path, leaf = call.function_leaf
            walker.leaves[function_path] = leaf
        for name, part in call.arguments:
            part.emit(walker, name)
        values, texts = self._trace_context_now()
        return Signature(
            function_token=("id", id(call.user_fun)),
            context=texts,
            leaves=walker.leaves, function_path=function_path, jit_kind=call.jit_kind, call=call.call,
            owners=walker.owners or None, key_parts=_key_parts(start.key), context_values=values,
            tree_ref=tree_handle(start.in_avals)), walker.flat_paths

    def _deferred_signature(self, start: TraceStart, call: DecodedCall) -> DeferredSignature | None:
        """A plain ``jax.jit`` call whose every argument is a tree of dicts with string keys, lists,
        tuples and None, with its leaves read later; None for any other call."""
        if call.jit_kind != "jit" or call.function_leaf is not None:
            return None
        plans = []
        n_leaves = 0
        for name, part in call.arguments:
            found = argument_plan(part.td) if type(part) is TreeArg else None
            if found is None:
                return None
            plans.append((name, found[0], part.start))
            n_leaves += found[1]
        return self._deferred(call.user_fun, call.call, _key_hashes(start.key), tuple(plans), start.vals, n_leaves)

    def _deferred(self, fun: Any, call: tuple, key_hashes: tuple, plans: tuple, vals: Sequence,
                  n_leaves: int) -> DeferredSignature | None:
        """The `DeferredSignature` of a plain ``jax.jit`` call read through `plans`; None unless
        every value is abstract (only those are kept until the leaves are read). `key_hashes`: of
        `cache_key`'s parts, in the order of `KEY_PARTS`."""
        if not all_abstract(vals):
            return None
        return DeferredSignature((id(fun), self._trace_context_now(), call, key_hashes), plans, vals, n_leaves)

    def _trace_context_now(self) -> tuple:
        """(JAX's trace-context values, ((name, value text), ...)): the values are JAX's config
        values, kept to be compared with JAX's ``==``; texts remade only when values change."""
        try:
            values = tuple(self._trace_context())
        except Exception:
            values = ()
        kept = self._context
        if values is not kept[0] and not _same_values(values, kept[0]):
            names = trace_context_names(len(values))
            kept = self._context = (values, tuple((str(n), context_text(v)) for n, v in zip(names, values)))
        return kept

    # ---------------------------------------------------------- lowerings
    def lowering_record(self, local: dict | None, jax_name: str, thread: int) -> LoweringRecord:
        """What a lowering received (read from the lowering function's `local`s), as a signature
        with one leaf per argument under JAX's argument names."""
        closed = local.get("closed_jaxpr") if local else None
        in_avals = local.get("in_avals") if local else None
        if closed is None or in_avals is None:
            return LoweringRecord(jax_name, "", None, thread, None)
        debug = getattr(getattr(closed, "jaxpr", None), "debug_info", None)
        n_const = int(local.get("num_const_args") or 0)
        avals = list(in_avals)[n_const:]
        names = list(getattr(debug, "arg_names", None) or ())
        shardings = list(getattr(local.get("semantic_in_shardings"), "shardings", ()) or ())[n_const:]
        layouts = list(local.get("in_layouts") or ())[n_const:]
        donated = list(local.get("donated_invars") or ())[n_const:]
        leaves = {}
        for i, aval in enumerate(avals):
            name = names[i] if i < len(names) and names[i] else f"args[{i}]"
            sharding, layout, donate = _at(shardings, i), _at(layouts, i), bool(_at(donated, i))
            text, _ = _placement(sharding, layout, donate)
            leaf = aval_leaf(aval)
            # JAX's compile cache keys on the program and each argument's type and placement: JAX's
            # own objects, compared with its ``==``
            leaves[name] = leaf._replace(detail=text, witness=(aval, sharding, layout, donate))
        src_info = str(getattr(debug, "func_src_info", "") or "")
        # The program: JAX's compile cache keys on the traced program object itself (by identity). A
        # program JAX derived from a jitted function (its JVP or transpose under `jax.grad`) keeps no
        # argument names.
        kind = "lowering" if getattr(debug, "arg_names", None) is not None else DERIVED_LOWERING
        signature = Signature(("program", Witness(closed)), (), leaves, jit_kind=kind)
        return LoweringRecord(jax_name, src_info, signature, thread, self._identity_from_debug(jax_name, src_info))

    def _identity_from_debug(self, jax_name: str, src_info: str) -> FunctionIdentity:
        """A function known only from JAX's debug info (traced before recording started)."""
        match = _SRC_INFO.match(src_info)
        filename, line = (match["file"], int(match["line"])) if match else ("?", 0)
        name = printable(jax_name)
        in_cell = bool(_CELL_FILE.search(filename))
        return FunctionIdentity(name, filename, line, self.location(filename, line) if match else "?",
                                f"{'<cell>' if in_cell else filename}::{name}", in_cell, self.is_library(filename),
                                "jit", jax_name, src_info)


class DeferredSignature:
    """A trace's signature whose leaves are read when first asked for (`get`), from the plans
    of its arguments' treedefs and their abstract values (never a user object)."""

    __slots__ = ("_parts", "_plans", "_vals", "_built", "n_leaves")

    def __init__(self, parts: tuple, plans: tuple, vals: Sequence, n_leaves: int):
        # parts: the id of the function, the `Signature`'s context and call, the hashes of JAX's key's parts
        self._parts, self._plans, self._vals, self._built = parts, plans, vals, None
        self.n_leaves = n_leaves

    def get(self) -> Signature:
        built = self._built
        if built is not None:
            return built
        plans, vals, parts = self._plans, self._vals, self._parts
        if plans is None:  # another thread built it meanwhile (it sets `_built` before clearing these)
            return self._built
        walker = Walker(())
        for name, plan, start in plans:
            walker.apply_plan(name, plan, vals, start)
        function_id, (values, texts), call, hashes = parts
        built = self._built = Signature(("id", function_id), texts, walker.leaves, None, "jit", call, None,
                                        tuple(zip(KEY_PARTS, hashes)), values)
        self._plans = self._vals = self._parts = None
        return built


def _named_arguments(plan: Any, positional: list, var: str | None) -> tuple[tuple, tuple]:
    """A `CallPlan`'s arguments under the function's parameter names: ((name, plan, first leaf),
    ...), and the call ((name, "position" | "keyword"), ...)."""
    plans, call = [], []
    for where, tree, start in plan.arguments:
        name = arg_name(where, positional, var) if type(where) is int else where
        plans.append((name, tree, start))
        call.append((name, "position" if type(where) is int else "keyword"))
    return tuple(plans), tuple(call)


def _same_values(a: tuple, b: tuple) -> bool:
    """Whether two tuples of trace-context values are equal by JAX's ``==`` (identity first)."""
    try:
        return bool(a == b)  # (tuple equality in C: each pair by identity, then ``==``)
    except Exception:
        return False


def _arg_names(debug_info: Any, flat_paths: dict) -> dict | None:
    """JAX's name of each flat argument -> the user's path of that leaf."""
    names = getattr(debug_info, "arg_names", None) or ()
    mapping = {name: flat_paths[i] for i, name in enumerate(names) if i in flat_paths and name != flat_paths[i]}
    return mapping or None


def _at(items: list, i: int) -> Any:
    return items[i] if i < len(items) else None


def _placement(sharding: Any, layout: Any, donated: bool) -> tuple:
    """(text, token) of an argument's placement at a compile: device, sharding, layout, donation."""
    kind = type(sharding).__name__
    if sharding is None or kind == "UnspecifiedValue":
        text = "uncommitted"
    elif kind == "SingleDeviceSharding":
        device = getattr(sharding, "_device", None) or next(iter(getattr(sharding, "device_set", ()) or ()), None)
        text = f"committed to {summarize_static(device).text}" if device is not None else "committed"
    else:
        spec = getattr(sharding, "spec", None)
        text = f"sharded {clip(str(spec), 60)}" if spec is not None else clip(kind, 60)
    if layout is not None:
        text += f", layout {clip(str(layout), 60)}"
    if donated:
        text += ", donated"
    return text, text


def context_text(value: Any) -> str:
    """A trace-context value as text: plain values as such, devices as ``cpu:0``, other
    objects by type and hash, as JAX's cache key compares them."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return clip(repr(value), 80)
    info = summarize_static(value)
    if not info.text.endswith(" object>"):
        return clip(info.text, 80)
    try:
        token = f"{hash(value) & 0xFFFFFFFF:08x}"
    except Exception:
        token = "unhashable"
    return f"<{type(value).__name__} {token}>"


def _key_parts(key: tuple) -> tuple:
    """((part, hash), ...) of JAX's tracing-cache key (`cache_key`; JAX hashed its parts already)."""
    return tuple(zip((name for name, _ in key), _key_hashes(key)))


def _key_hashes(key: tuple) -> tuple:
    """The hash of each part of `key` (`cache_key`), None where one cannot be hashed."""
    hashes = []
    for _, value in key:
        try:
            hashes.append(hash(value))
        except Exception:
            hashes.append(None)
    return tuple(hashes)