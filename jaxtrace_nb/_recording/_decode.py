"""A traced call in the user's terms: the function's identity, its leaf signature, the call site.

Reads what JAX's tracing function received (a `TraceStart`: the traced callable, the
arguments' abstract values and their ``(args, kwargs)`` treedef, in which static
arguments are node data, and JAX's debug info), and what a lowering received. Library
adapters (`_adapters`) recognise their own jit wrappers and pytree nodes. Nothing
decoded keeps a reference to an array, a tracer or a user object: leaves are text and
tokens, summaries are bounded (`_values`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import types
import weakref
from typing import Any, Callable, NamedTuple

from .. import _adapters
from .._core._bounded import Bounded
from .._core._values import clip, printable, summarize_static
from .._core._vocabulary import JitKind, Origin
from .._core._witness import LookupVerdicts
from .._jax._internals import (
    Internals,
    all_abstract,
    compile_inputs,
    lowered_module,
    lowering_inputs,
    trace_context_function,
    trace_context_names,
)
from .._jax._layouts import PlainCall, TraceStart, cache_key
from .._keys._calls import (
    SRC_INFO,
    DecodedCall,
    TreeArg,
    arg_name,
    argument,
    parameters,
    raw_identity,
)
from .._keys._deferred import DeferredSignature, PlannedArgument, key_hashes, key_parts
from .._keys._jax_tree import handle as tree_handle
from .._keys._lowering import lowering_signature
from .._keys._plans import CallPlan, argument_plan, call_plan, keys_are_str
from .._keys._records import (
    Binding,
    CompileRecord,
    FunctionIdentity,
    LoweringRecord,
    TraceRecord,
)
from .._keys._signature import Signature, function_token
from .._keys._sites import CELL_FILE, MAX_CALL_SITE_DEPTH, CallSites
from .._keys._walker import Walker

# the kinds whose user function JAX's cache compares itself, with ``==`` (`function_token`)
_COMPARED = frozenset({JitKind.JIT, JitKind.EQUINOX})
_MAX_KEPT = 4096  # functions whose identity and last plain call are kept


def weak(obj: Any) -> weakref.ref | None:
    """A weak reference to `obj` (one per live object: two compare by identity), or None."""
    if obj is None:
        return None
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


class KnownFunction(NamedTuple):
    """What the decoder keeps of a traced function object, by its id."""

    ref: weakref.ref  # the function object (weakly)
    identity: FunctionIdentity | None
    params: tuple | None  # `parameters(fun)`: (positional names, the *args name)


class NamedPlan(NamedTuple):
    """A function's last plain call (`Decoder.plain_jit_record`), ready for its next retrace."""

    plan: CallPlan
    known: KnownFunction  # the function's entry when this was made (a new entry makes it stale)
    arguments: tuple  # `PlannedArgument`s under the function's parameter names
    call: tuple  # ((name, "position" | "keyword"), ...)
    tree: Any  # the call's treedef when it holds node kinds and str keys only (else None)
    tree_hash: int | None


class TraceContext(NamedTuple):
    """JAX's trace-context values (its config values, compared with JAX's ``==``) and their
    texts."""

    values: tuple
    texts: tuple  # ((name, value text), ...)


_STDLIB = os.path.dirname(contextlib.__file__).replace("\\", "/") + "/"


def _stdlib(filename: str) -> bool:
    """Whether `filename` is Python's own library (a `contextlib` decorator between JAX's jit
    machinery and the library that called it, as JAX 0.8's ``jnp.einsum`` has): never the caller."""
    return filename.startswith(_STDLIB) and "-packages/" not in filename


def _jitted_where_defined(fun: Any, is_library: Callable[[str], bool]) -> bool:
    """Whether `fun`, a plain function of a library's, is wrapped where its module defines it (a
    ``@jax.jit`` at its definition): its module's attribute of its name is not `fun` itself."""
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


class Decoder(CallSites):
    """Turns what the probe reads of JAX into `TraceRecord`s and `LoweringRecord`s."""

    def __init__(self, internals: Internals):
        super().__init__(_adapters.library_packages())
        self.internals = internals
        self._identities = Bounded(_MAX_KEPT)  # id(function) -> KnownFunction
        self._named_plans = Bounded(_MAX_KEPT)  # id(function) -> NamedPlan
        self._bound = Bounded(
            _MAX_KEPT
        )  # id(function) -> weak reference: its binding was looked for
        self.verdicts = LookupVerdicts()  # static values compared when JAX compares them
        self._context = TraceContext((), ())  # JAX's last trace-context values, and their texts
        self._trace_context = (
            trace_context_function()
        )  # JAX's: every config value its caches key on

    # ------------------------------------------------------------- traces
    def trace_record(
        self,
        start: TraceStart,
        *,
        nested: bool,
        thread: int,
        cache_generation: int,
        on_fault: Callable[[str, BaseException], None],
        frame=None,
    ) -> TraceRecord:
        """The record of a trace; `frame` is the trace's own (the user's call is found above it)."""
        adapters = _adapters.active()
        call = self.decode_call(start, adapters)
        identity = self._called_by(self.identity(start, call, frame), call, frame)
        signature, arg_names, live = None, None, ()
        try:
            signature, flat_paths, live = self._signature(start, call, adapters)
            if type(signature) is Signature and self.is_library(identity.filename):
                signature = signature._replace(library=True)
            if call.jit_kind != JitKind.JIT:
                arg_names = _arg_names(start.debug_info, flat_paths)
        except Exception as e:  # the trace is still recorded, by name, without a cause
            on_fault("signature", e)
        if live:
            try:  # (now: JAX's lookup has just compared these values)
                self.verdicts.record(identity.key, signature.leaves, live)
            except Exception as e:
                on_fault("signature", e)
        ref = None
        if call.user_fun is not None:
            try:
                ref = weakref.ref(call.user_fun)
            except TypeError:
                ref = None
        return TraceRecord(
            identity=identity,
            nested=nested,
            signature=signature,
            function_ref=ref,
            thread=thread,
            call_site=self.call_site(frame),
            cache_generation=cache_generation,
            arg_names=arg_names,
            binding=None if identity.internal else self._first_binding(call.user_fun, ref, frame),
        )

    def _called_by(self, identity: FunctionIdentity, call: DecodedCall, frame) -> FunctionIdentity:
        """`identity` with `internal` as this call makes it: whoever called the jitted object
        decides, call by call (a function object's kept identity is its first call's: Lineax's
        ``linear_solve`` is internal inside Optimistix's solve, the user's called directly)."""
        if frame is None or not self.is_library(identity.filename):
            return identity
        internal = self._jitted_by_library(frame, call, identity.filename)
        return identity if internal == identity.internal else identity._replace(internal=internal)

    def _first_binding(self, fun: Any, ref: weakref.ref | None, frame) -> Binding | None:
        """`binding` of a function object's first trace (None after: a retrace does not ask)."""
        if ref is None or frame is None:
            return None
        seen = self._bound.get(id(fun))
        if seen is not None and seen() is fun:
            return None
        self._bound.put(id(fun), ref)
        try:
            return self.binding(fun, frame)
        except Exception:
            return None

    def plain_jit_record(
        self, call: PlainCall, *, nested: bool, thread: int, cache_generation: int, frame=None
    ) -> TraceRecord | None:
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
        if known is None or known.ref() is not fun:
            return None
        tree = call.tree
        named = self._named_plans.get(id(fun))
        if named is None or named.known is not known or named.tree is None or named.tree != tree:
            named = self._named_plan(fun, known, tree, call.names)
            if named is None:
                return None
        vals = call.vals
        if not all_abstract(vals):
            return None  # (only abstract values are kept until the leaves are read)
        try:
            # (`cache_key`'s parts; the reference's hash is its function's, kept from now on)
            hashes = (hash(known.ref), named.tree_hash, hash(call.debug_info))
            token = ("fun", known.ref)  # (`function_token`)
        except Exception:
            hashes = key_hashes(cache_key(fun, tree, call.debug_info))
            token = function_token(fun, True)
        signature = DeferredSignature(
            token,
            self._trace_context_now(),
            named.call,
            hashes,
            named.arguments,
            vals,
            named.plan.n_leaves,
        )
        # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every
        # retrace.
        return tuple.__new__(
            TraceRecord,
            (
                known.identity,
                nested,
                signature,
                known.ref,
                thread,
                self.call_site(frame),
                cache_generation,
                None,
                None,
                False,
            ),
        )

    def _named_plan(
        self, fun: Any, known: KnownFunction, tree: Any, names: Any
    ) -> NamedPlan | None:
        """The `NamedPlan` of a plain ``jax.jit`` function's call with `tree`, kept for its next
        retrace; None for any other call or function."""
        plan = call_plan(tree, names)
        if plan is None:
            return None
        if known.identity is None or known.params is None or known.identity.jit_kind != JitKind.JIT:
            return None
        try:
            tree_hash = hash(tree)
        except Exception:
            tree_hash = None
        kept = tree if keys_are_str(tree) else None  # (a str subclass key would be a user object)
        arguments, how = _named_arguments(plan, *known.params)
        return self._named_plans.put(
            id(fun),
            NamedPlan(
                plan=plan,
                known=known,
                arguments=arguments,
                call=how,
                tree=kept,
                tree_hash=tree_hash,
            ),
        )

    def is_wrapper(self, fun: Any) -> bool:
        """Whether `fun` is a library's jit wrapper around a user function (e.g.
        eqx.filter_jit's)."""
        return any(adapter.wraps(fun) for adapter in _adapters.active())

    def decode_call(self, start: TraceStart, adapters: tuple | None = None) -> DecodedCall:
        """The call in the user's terms: the first adapter's reading that claims it, else
        `plain_call`."""
        for adapter in _adapters.active() if adapters is None else adapters:
            decoded = adapter.decode_call(start, self)
            if decoded is not None:
                return decoded
        return self.plain_call(start)

    def plain_call(self, start: TraceStart) -> DecodedCall:
        """The call read as a plain ``jax.jit`` call: the traced function's parameter names, each
        static argument a `StaticArg` of `Origin.STATIC_ARGNUMS`, each other a `TreeArg`."""
        positional, var = self.parameters(start.fun)
        named = [
            (arg_name(i, positional, var), part, "position")
            for i, part in enumerate(start.positional)
        ]
        named += [(name, part, "keyword") for name, part in start.keyword]
        arguments = [
            (name, argument(part, start.vals, Origin.STATIC_ARGNUMS)) for name, part, _ in named
        ]
        return DecodedCall(
            jit_kind=JitKind.JIT,
            user_fun=start.fun,
            identity=None,
            arguments=arguments,
            function_leaf=None,
            call=tuple((name, how) for name, _, how in named),
        )

    def parameters(self, fun: Any) -> tuple[list[str], str | None]:
        """`parameters(fun)`, remembered per function object (inspect.signature is slow)."""
        cached = self._identities.get(id(fun))
        if cached is not None and cached.ref() is fun and cached.params is not None:
            return cached.params
        found = parameters(fun)
        if cached is not None and cached.ref() is fun:
            self._identities.put(id(fun), cached._replace(params=found))
        else:
            self._remember(fun, None, found)
        return found

    def identity(self, start: TraceStart, call: DecodedCall, frame=None) -> FunctionIdentity:
        fun = call.user_fun
        cached = (
            self._identities.get(id(fun)) if fun is not None and call.identity is None else None
        )
        if cached is not None and cached.ref() is fun and cached.identity is not None:
            return cached.identity
        name, filename, line = call.identity or raw_identity(fun, start.debug_info)
        name = printable(name)
        in_cell = bool(CELL_FILE.search(filename))
        identity = FunctionIdentity(
            name=name,
            filename=filename,
            line=line,
            location=self.location(filename, line),
            key=function_key(filename, name, line, in_cell, fun),
            in_cell=in_cell,
            internal=self._jitted_by_library(frame, call, filename),
            jit_kind=call.jit_kind,
            jax_name=str(self.internals.fun_name(start.fun)),
            src_info=str(getattr(start.debug_info, "func_src_info", "") or ""),
        )
        if fun is not None and call.identity is None:
            self._remember(
                fun, identity, cached.params if cached is not None and cached.ref() is fun else None
            )
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
            return True
        return self.library_jitted(
            frame, call.jit_kind, call.user_fun if call.jit_kind == JitKind.JIT else None
        )

    def library_jitted(self, frame, jit_kind: str, fun: Any) -> bool:
        """Whether a library jitted the function of the trace announced at `frame` (a library's
        function): whoever called the jitted object is library code, or `fun`, a plain ``jax.jit``
        function (else None), is jitted where its module defines it."""
        machinery = getattr(self.internals.layout, "machinery", ())
        wrapper = _adapters.wrapper_package(jit_kind)
        f, depth = frame, 0
        while f is not None and depth < MAX_CALL_SITE_DEPTH:
            name = f.f_code.co_filename.replace("\\", "/")
            if not (
                name.endswith(machinery)
                or (wrapper and self.in_package(name, wrapper))
                or _stdlib(name)
            ):
                break
            f, depth = f.f_back, depth + 1
        if f is None or depth >= MAX_CALL_SITE_DEPTH:
            return True
        caller = f.f_code.co_filename
        if self.is_library(caller) and not caller.startswith("<frozen"):
            return True
        return self.jitted_where_defined(fun)

    def jitted_where_defined(self, fun: Any) -> bool:
        """`_jitted_where_defined`: a library's function its module jits where it defines it."""
        return _jitted_where_defined(fun, self.is_library)

    def _remember(self, fun: Any, identity: FunctionIdentity | None, params: tuple | None) -> None:
        """Keep `fun`'s identity and parameters, by the object (a weak reference to it)."""
        try:
            self._identities.put(id(fun), KnownFunction(weakref.ref(fun), identity, params))
        except TypeError:  # an object without weak references: asked again next time
            pass

    def _signature(
        self, start: TraceStart, call: DecodedCall, adapters: tuple
    ) -> tuple[Signature, dict]:
        deferred = self._deferred_signature(start, call)
        if deferred is not None:
            return deferred, {}, ()
        walker = Walker(adapters)
        function_path = None
        if call.function_leaf is not None:
            function_path, leaf = call.function_leaf
            walker.set(function_path, leaf)
        for name, part in call.arguments:
            part.emit(walker, name)
        values, texts = self._trace_context_now()
        return (
            Signature(
                function_token=function_token(call.user_fun, call.jit_kind in _COMPARED),
                context=texts,
                leaves=walker.leaves,
                function_path=function_path,
                jit_kind=call.jit_kind,
                call=call.call,
                owners=walker.owners or None,
                key_parts=key_parts(start.key),
                context_values=values,
                tree_ref=tree_handle(start.in_avals),
            ),
            walker.flat_paths,
            walker.live,
        )

    def _deferred_signature(self, start: TraceStart, call: DecodedCall) -> DeferredSignature | None:
        """A plain ``jax.jit`` call whose every argument is a tree of dicts with string keys, lists,
        tuples and None, with its leaves read later (only abstract values are kept until then);
        None for any other call."""
        if call.jit_kind != JitKind.JIT or call.function_leaf is not None:
            return None
        plans = []
        n_leaves = 0
        for name, part in call.arguments:
            plan = argument_plan(part.td) if type(part) is TreeArg else None
            if plan is None:
                return None
            # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this may run per
            # retrace.
            plans.append(tuple.__new__(PlannedArgument, (name, plan, part.start)))
            n_leaves += len(plan)
        if not all_abstract(start.vals):
            return None
        return DeferredSignature(
            function_token(call.user_fun, True),
            self._trace_context_now(),
            call.call,
            key_hashes(start.key),
            tuple(plans),
            start.vals,
            n_leaves,
        )

    def _trace_context_now(self) -> TraceContext:
        """JAX's trace-context values and their texts: the values are JAX's config values, kept to
        be compared with JAX's ``==``; texts remade only when values change."""
        try:
            values = tuple(self._trace_context())
        except Exception:
            values = ()
        kept = self._context
        if values is not kept.values and not _same_values(values, kept.values):
            names = trace_context_names(len(values))
            kept = self._context = TraceContext(
                values, tuple((str(n), context_text(v)) for n, v in zip(names, values))
            )
        return kept

    # ---------------------------------------------------------- lowerings
    def lowering_record(self, local: dict | None, jax_name: str, thread: int) -> LoweringRecord:
        """What a lowering received (read from the lowering function's `local`s), as a signature
        with one leaf per argument under JAX's argument names."""
        read = lowering_signature(lowering_inputs(local))
        signature, src_info = read if read is not None else (None, "")
        return LoweringRecord(
            jax_name=jax_name,
            src_info=src_info,
            signature=signature,
            thread=thread,
            identity=self._identity_from_debug(jax_name, src_info) if read is not None else None,
            module_ref=weak(lowered_module(local)),
        )

    @staticmethod
    def compile_record(local: dict | None, jax_name: str, thread: int) -> CompileRecord | None:
        """What a compile received (read from the compile function's `local`s): the lowered
        module, weakly, and its devices; None where they cannot be read."""
        inputs = compile_inputs(local)
        if inputs is None:
            return None
        return CompileRecord(jax_name, weak(inputs.program), inputs.devices, thread, inputs.options)

    def _identity_from_debug(self, jax_name: str, src_info: str) -> FunctionIdentity:
        """A function known only from JAX's debug info (traced before recording started)."""
        match = SRC_INFO.match(src_info)
        filename, line = (match["file"], int(match["line"])) if match else ("?", 0)
        name = printable(jax_name)
        in_cell = bool(CELL_FILE.search(filename))
        return FunctionIdentity(
            name=name,
            filename=filename,
            line=line,
            location=self.location(filename, line) if match else "?",
            key=function_key(filename, name, line, in_cell),
            in_cell=in_cell,
            internal=self.is_library(filename),
            jit_kind=str(JitKind.JIT),
            jax_name=jax_name,
            src_info=src_info,
        )


_ANONYMOUS = ("<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def function_key(filename: str, name: str, line: int, in_cell: bool, fun: Any = None) -> str:
    """The key that groups a function's traces across re-definitions (a re-run cell, a function
    re-created by a factory): its file (any cell) and qualified name, and where the name is an
    anonymous one its line and column (two lambdas are two functions, wherever they sit)."""
    where = "<cell>" if in_cell else filename
    if name.endswith(">") and name.rsplit(".", 1)[-1] in _ANONYMOUS:
        column = _body_column(fun)
        return f"{where}::{name}@{line}" + (f":{column}" if column is not None else "")
    return f"{where}::{name}"


def _body_column(fun: Any) -> int | None:
    """The column where a function's body starts (Python 3.11+ keeps instruction positions)."""
    code = getattr(fun, "__code__", None)
    positions = getattr(code, "co_positions", None)
    if positions is None:
        return None
    try:
        for _, _, column, _ in itertools.islice(positions(), 1, 4):
            if column is not None:
                return column
    except Exception:
        pass
    return None


def _named_arguments(plan: CallPlan, positional: list, var: str | None) -> tuple[tuple, tuple]:
    """A `CallPlan`'s arguments under the function's parameter names (`PlannedArgument`s), and the
    call ((name, "position" | "keyword"), ...)."""
    plans, call = [], []
    for where, tree, start in plan.arguments:
        name = arg_name(where, positional, var) if type(where) is int else where
        plans.append(PlannedArgument(name, tree, start))
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
    mapping = {
        name: flat_paths[i]
        for i, name in enumerate(names)
        if i in flat_paths and name != flat_paths[i]
    }
    return mapping or None


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
