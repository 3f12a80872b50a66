"""How each JAX release range announces a real trace, and how its arguments are read then.

JAX calls its own test hook ``test_event(name)`` at the start of every real trace (a miss
of its tracing cache); jaxtrace_nb rebinds that name in the module that calls it. What
the caller's frame holds differs by release, so each range has a `TraceLayout`:

* **0.9 – 0.10**: ``partial_eval.trace_to_jaxpr`` announces ``"trace_to_jaxpr"``; its
  locals ``fun``, ``in_avals`` (a ``tree_util.FlatTree``: ``.vals`` abstract values,
  ``.tree`` the ``(args, kwargs)`` treedef with static arguments as ``Static`` node data)
  and ``debug_info``.
* **0.11**: the same announcement from ``trace_to_jaxpr_nocache``; ``in_avals`` is a
  ``flattree`` value: ``in_avals.unpack()`` gives the positional and keyword parts, each
  an ``FTStatic(val)`` or a subtree with ``.tree`` and one value per leaf.
* **0.8**: ``pjit._create_pjit_jaxpr`` announces ``"create_pjit_jaxpr"`` through
  ``util.test_event``; the arguments are read two frames up, in ``_infer_params_impl``
  (``fun``, ``ji``, ``dbg``, ``in_avals``, ``in_tree`` of the dynamic arguments) and
  ``_infer_params_internal`` (``args``, ``kwargs``, with the static values).

Every layout yields the same `TraceStart`. `detect_layout` picks one by feature, not by
version number.

The announcing frame's locals are read once per trace (`TraceLayout.begin`) and
handed to every reading: in CPython before 3.13 each ``frame.f_locals`` rebuilds the whole
dict, raising and clearing a ``KeyError`` for every local not bound yet.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple


class ArgPart(NamedTuple):
    """One argument of a traced call: a static value, or a subtree of dynamic leaves."""

    static: bool
    value: Any  # the static value (static arguments only)
    tree: Any  # the argument's treedef (dynamic arguments only)
    start: int  # index of its first leaf in `TraceStart.vals`
    size: int  # number of leaves
    holder: Any = None  # a static value's `HeldStatic`: reaches it in JAX's key (or None)


class TraceStart(NamedTuple):
    """The arguments of one real trace, as JAX's tracing function received them."""

    fun: Any  # the traced callable
    debug_info: Any  # DebugInfo: traced_for, func_src_info, arg_names
    vals: list  # the abstract value of every dynamic leaf, in order
    positional: list  # [ArgPart]
    keyword: list  # [(name, ArgPart)], sorted by name as JAX flattens them
    key: tuple  # `cache_key(...)`: what JAX's cache key is made of, to hash
    token: int  # pairs this trace with the report of its end (see `TraceLayout.end_token`)
    in_avals: Any = None  # the layout's own argument structure, for adapters that need more


class JitCall(NamedTuple):
    """A ``jax.jit`` call as JAX's jit machinery holds it while it traces (`TraceLayout.jit_call`):
    enough to make the same jitted function again (`_internals.remade_jit`) and call it alike."""

    fun: Any  # the user's function
    info: Any  # JAX's ``PjitInfo``: every parameter of the ``jax.jit`` call
    args: tuple  # the call's positional arguments, as the user passed them
    kwargs: dict  # and its keyword arguments

    @property
    def static_argnums(self) -> tuple:
        return tuple(getattr(self.info, "static_argnums", ()) or ())

    @property
    def static_argnames(self) -> tuple:
        return tuple(getattr(self.info, "static_argnames", ()) or ())


class PlainCall(NamedTuple):
    """A trace's call read without splitting its arguments (`TraceLayout.plain_call`)."""

    fun: Any  # the traced callable
    tree: Any  # the treedef of the whole ``(args, kwargs)``
    vals: tuple  # the abstract value of every leaf, in order
    debug_info: (
        Any  # DebugInfo; with `fun` and `tree`, what JAX's cache key is made of (`TraceStart.key`)
    )
    token: int  # as `TraceStart.token`
    names: Any  # JAX's name of every leaf (``DebugInfo.arg_names``): a tuple of strings, or None


def _dynamic(tree: Any, start: int) -> ArgPart:
    return ArgPart(static=False, value=None, tree=tree, start=start, size=tree.num_leaves)


def _static(value: Any, holder: Any = None) -> ArgPart:
    return ArgPart(static=True, value=value, tree=None, start=0, size=0, holder=holder)


class HeldStatic:
    """Reaches the static value JAX's tracing-cache key holds at one argument position, through a
    weak reference to the key's argument structure (alive while JAX holds the entry): for a value
    that takes no weak reference of its own, compared as JAX compares it (`Witness.holder`)."""

    __slots__ = ("_owner", "_index")

    def __init__(self, owner: weakref.ref, index: int):
        self._owner, self._index = owner, index

    def __call__(self) -> Any:
        owner = self._owner()
        if owner is None:
            raise LookupError("JAX no longer holds the entry")
        args_td, kwargs_td = owner.tree.children()
        child = (*args_td.children(), *kwargs_td.children())[self._index]
        return child.node_data()[1].val


class TraceLayout:
    """How one JAX range announces a trace and where its arguments are."""

    name = ""
    event = "trace_to_jaxpr"  # the test_event name announcing a real trace
    bodies: tuple = ()  # the code names of the frame that announces it
    trace_frames: tuple = ()  # the code names of the frame reporting a trace's seconds

    def __init__(self, hook_module: Any):
        self.hook_module = hook_module

    def begin(self, frame) -> tuple[dict, Any]:
        """The locals of the frame announcing a trace (read once, for every reading below), and the
        trace's DebugInfo, read before deciding whether to read the rest."""
        local = frame.f_locals
        return local, local.get("debug_info")

    def read(self, frame, local: dict) -> TraceStart | None:
        raise NotImplementedError

    def plain_call(self, local: dict) -> PlainCall | None:
        """The call with its whole ``(args, kwargs)`` treedef, where the layout has one: read
        faster than `read` when every argument turns out plain (`Decoder.plain_jit_record`)."""
        return None

    def fun(self, frame, local: dict) -> Any:
        """The traced callable, read before deciding whether to read the rest."""
        return local.get("fun")

    def jitted(self, frame) -> Any:
        """The function a jit trace is of, where it can be read without the announcing frame's
        locals (`begin`); else None. It is the object `fun` reads."""
        return None

    def jit_call(self, frame) -> JitCall | None:
        """The ``jax.jit`` call a top-level trace announced at `frame` is for: its function, its
        jit parameters and the call's own arguments; None where this JAX range is not read."""
        return None

    # The files of JAX's jit machinery between a jitted object's caller and the announcing frame
    # (whoever called the jitted object is the frame above them).
    machinery = (
        "jax/_src/pjit.py",
        "jax/_src/interpreters/partial_eval.py",
        "jax/_src/traceback_util.py",
        "jax/_src/linear_util.py",
    )

    # The local of the frame reporting a trace's seconds whose id is the trace's pairing token. That
    # frame's ``jaxpr`` (the traced program) is bound only when the trace returned: JAX reports the
    # seconds of one that raised all the same.
    end_token = "dbg"


class FlatTreeLayout(TraceLayout):
    """JAX 0.9 – 0.10: ``tree_util.FlatTree`` with ``Static`` nodes."""

    name = "0.9"
    bodies = ("trace_to_jaxpr", "trace_to_jaxpr_nocache")
    trace_frames = ("_trace_for_jit",)

    def __init__(self, hook_module: Any, static_type: type):
        super().__init__(hook_module)
        self.static_type = static_type

    def jitted(self, frame) -> Any:
        # From JAX 0.9.2, ``pjit._infer_params(fun, ...)`` hands its `fun` to ``_trace_for_jit``,
        # which hands it to the announcing frame; its locals are fewer and mostly bound (a cheaper
        # read).
        caller = _infer_params_frame(frame)
        return None if caller is None else caller.f_locals.get("fun")

    def jit_call(self, frame) -> JitCall | None:
        caller = _infer_params_frame(frame)
        if caller is None:
            return None
        local = caller.f_locals
        fun, info = local.get("fun"), local.get("ji")
        args, kwargs = local.get("args"), local.get("kwargs")
        if fun is None or info is None or type(args) is not tuple or type(kwargs) is not dict:
            return None
        return JitCall(fun, info, args, kwargs)

    def plain_call(self, local: dict) -> PlainCall | None:
        fun, in_avals, debug_info = local.get("fun"), local.get("in_avals"), local.get("debug_info")
        if fun is None or in_avals is None or debug_info is None:
            return None
        # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every
        # trace.
        return tuple.__new__(
            PlainCall,
            (
                fun,
                in_avals.tree,
                in_avals.vals,
                debug_info,
                id(debug_info),
                getattr(debug_info, "arg_names", None),
            ),
        )

    def read(self, frame, local: dict) -> TraceStart | None:
        debug_info, in_avals = local.get("debug_info"), local.get("in_avals")
        if debug_info is None or in_avals is None:
            return None
        args_td, kwargs_td = in_avals.tree.children()
        start, parts = 0, []
        kw_node = kwargs_td.node_data()
        arg_children = args_td.children()
        n_pos = len(arg_children)
        names = [None] * n_pos + list(kw_node[1] if kw_node else ())
        owner = _NOT_YET
        for index, child in enumerate((*arg_children, *kwargs_td.children())):
            node = child.node_data()
            if node is not None and node[0] is self.static_type:
                if owner is _NOT_YET:
                    owner = _weak(in_avals)
                holder = None if owner is None else HeldStatic(owner, index)
                parts.append(_static(node[1].val, holder))
            else:
                parts.append(_dynamic(child, start))
                start += child.num_leaves
        fun = local.get("fun")
        # The types are compared leaf by leaf; the key's other parts: the tree (with the statics).
        return TraceStart(
            fun=fun,
            debug_info=debug_info,
            vals=list(in_avals.vals),
            positional=parts[:n_pos],
            keyword=list(zip(map(str, names[n_pos:]), parts[n_pos:])),
            key=cache_key(fun, in_avals.tree, debug_info),
            token=id(debug_info),
            in_avals=in_avals,
        )


def _infer_params_frame(frame) -> Any:
    """``pjit._infer_params(fun, ji, args, kwargs)``, two frames above the announcing one through
    ``_trace_for_jit`` (JAX 0.9.2 on); None elsewhere."""
    caller = frame.f_back
    if caller is None or caller.f_code.co_name != "_trace_for_jit":
        return None
    caller = caller.f_back
    if caller is None or caller.f_code.co_name != "_infer_params":
        return None
    return caller


_NOT_YET = object()


def _weak(obj: Any) -> weakref.ref | None:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


KEY_PARTS = ("function", "inputs", "debug info")  # what JAX's tracing-cache key is made of


def cache_key(fun: Any, inputs: Any, debug_info: Any) -> tuple:
    """((part, object), ...): what JAX's tracing-cache key is made of, besides the argument types
    (compared leaf by leaf); the parts named as `KEY_PARTS`."""
    return tuple(zip(KEY_PARTS, (fun, inputs, debug_info)))


class FTLayout(FlatTreeLayout):
    """JAX 0.11: ``flattree`` values (``FTStatic`` for a static argument)."""

    name = "0.11"

    def __init__(self, hook_module: Any, ft_static: type):
        TraceLayout.__init__(self, hook_module)
        self.ft_static = ft_static

    def plain_call(self, local: dict) -> PlainCall | None:
        return None  # a flattree's treedef shows a static argument as a leaf: every call is `read`

    def read(self, frame, local: dict) -> TraceStart | None:
        debug_info, in_avals = local.get("debug_info"), local.get("in_avals")
        if debug_info is None or in_avals is None:
            return None
        args_ft, kwargs_ft = in_avals.unpack()
        start, positional, keyword = 0, [], []
        for part in args_ft.unpack():
            positional.append(self._part(part, start))
            start += len(part)
        for key, part in zip(kwargs_ft.keys, kwargs_ft._vals):
            keyword.append((str(key), self._part(part, start)))
            start += len(part)
        fun = local.get("fun")
        return TraceStart(
            fun=fun,
            debug_info=debug_info,
            vals=list(in_avals.vals),
            positional=positional,
            keyword=keyword,
            key=cache_key(fun, in_avals, debug_info),
            token=id(debug_info),
            in_avals=in_avals,
        )

    def _part(self, part: Any, start: int) -> ArgPart:
        if isinstance(part, self.ft_static):
            return _static(part.val)
        try:
            tree = part.tree
        except Exception:  # FTSingleton / FTFiltered (e.g. JAX's jvp of a jit) have no treedef
            tree = None
        if tree is None or tree.num_leaves != len(
            part
        ):  # (an FTStatic inside a tuple: 1 leaf, 0 values)
            import jax

            tree = jax.tree_util.tree_structure((0,) * len(part))
        return _dynamic(tree, start)


class PjitLayout(TraceLayout):
    """JAX 0.8: ``pjit._create_pjit_jaxpr``, the arguments two and three frames up."""

    name = "0.8"
    event = "create_pjit_jaxpr"
    bodies = ("_create_pjit_jaxpr",)
    trace_frames = ("_create_pjit_jaxpr",)
    _DEPTH = 6

    def read(self, frame, local: dict) -> TraceStart | None:
        token = id(local.get("fun"))
        impl = _find(frame, "_infer_params_impl", self._DEPTH)
        internal = _find(impl, "_infer_params_internal", 2) if impl is not None else None
        if impl is None or internal is None:
            return None
        here, outer = impl.f_locals, internal.f_locals
        ji, dbg, in_tree = here.get("ji"), here.get("dbg"), here.get("in_tree")
        args, kwargs = outer.get("args"), outer.get("kwargs")
        if ji is None or dbg is None or in_tree is None or args is None or kwargs is None:
            return None
        vals = [getattr(a, "aval", a) for a in here.get("in_avals") or ()]
        n = len(args)
        static_pos = {i % n for i in ji.static_argnums if -n <= i < n}
        args_td, kwargs_td = in_tree.children()
        dynamic_args = iter(args_td.children())
        kw_node = kwargs_td.node_data()
        dynamic_kw = dict(zip(kw_node[1] if kw_node else (), kwargs_td.children()))
        start, positional, keyword = 0, [], []
        for i, value in enumerate(args):
            if i in static_pos:
                positional.append(_static(value))
            else:
                positional.append(_dynamic(next(dynamic_args), start))
                start += positional[-1].size
        for key in sorted(kwargs):
            if key in ji.static_argnames:
                keyword.append((str(key), _static(kwargs[key])))
            else:
                keyword.append((str(key), _dynamic(dynamic_kw[key], start)))
                start += keyword[-1][1].size
        fun = here.get("fun")
        statics = tuple(p.value for p in positional if p.static) + tuple(
            p.value for _, p in keyword if p.static
        )
        return TraceStart(
            fun=fun,
            debug_info=dbg,
            vals=vals,
            positional=positional,
            keyword=keyword,
            key=cache_key(fun, (in_tree, tuple(vals), statics), dbg),
            token=token,
        )

    end_token = "fun"

    def begin(self, frame) -> tuple[dict, Any]:
        impl = _find(frame, "_infer_params_impl", self._DEPTH)
        return frame.f_locals, impl.f_locals.get("dbg") if impl is not None else None

    def fun(self, frame, local: dict) -> Any:  # the frame's own `fun` is a `linear_util.WrappedFun`
        impl = _find(frame, "_infer_params_impl", self._DEPTH)
        return impl.f_locals.get("fun") if impl is not None else None


def _find(frame, code_name: str, depth: int):
    for _ in range(depth):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return None
        if frame.f_code.co_name == code_name:
            return frame
    return None


def detect_layout() -> TraceLayout | str:
    """The layout of the installed JAX, or the reason none fits."""
    from jax._src.interpreters import partial_eval as pe

    if callable(getattr(pe, "test_event", None)):
        cached = getattr(pe, "trace_to_jaxpr", None)
        if cached is None or not hasattr(cached, "cache_info"):
            return "it has no cached partial_eval.trace_to_jaxpr"
        try:
            from jax._src import flattree
        except Exception:
            flattree = None
        if flattree is not None and hasattr(flattree, "FTStatic"):
            return FTLayout(pe, flattree.FTStatic)
        try:
            from jax._src.tree_util import FlatTree, Static  # noqa: F401
        except Exception:
            return "its FlatTree has neither Static nodes nor flattree parts"
        return FlatTreeLayout(pe, Static)
    try:
        from jax._src import pjit, util
    except Exception:
        return "its pjit internals are not importable"
    if not callable(getattr(util, "test_event", None)):
        return "it announces no trace through test_event"
    if not hasattr(getattr(pjit, "_create_pjit_jaxpr", None), "cache_clear"):
        return "it has no cached pjit._create_pjit_jaxpr"
    return PjitLayout(util)
