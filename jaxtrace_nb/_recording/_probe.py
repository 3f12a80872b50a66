"""The probe: installs and removes jaxtrace_nb's observation points, and turns what JAX
reports into typed calls on the session (`Sink`).

Two kinds of observation point (where and how they read JAX: `_jax._internals`):

* a hook on JAX's own ``test_event("trace_to_jaxpr")``, which JAX calls at the start of
  every real trace (a miss of its tracing cache): the hook reads the trace's arguments,
  hands the session a `TraceRecord`, and returns before the traced function runs. A
  cache-hit call of a jitted function never reaches Python, so never reaches this code;
* ``jax.monitoring`` listeners (public API): JAX's trace / lower / XLA compile seconds,
  read with the traced program, the lowering's inputs or the executable from the frame
  that reports them, and the persistent compilation cache's events (`_listeners`: this
  module installs them).

A trace is one `Trace` from its start to its event: made here at the start, kept on this
thread's stack of traces under way until JAX reports its end (`_trace_end`), then handed on to
the listeners to await its lowering and compile. Its program is measured by the `Measurer`
(`_measure`), the probe's collaborator.

Nothing is wrapped: no frame is added to any trace, lowering or compile, and the user's
exceptions and tracebacks pass untouched. Outside the supported JAX range only the
public listeners are installed (traces and their seconds per function name).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Callable

from .._core._vocabulary import JitKind
from .._diagnosis._divergence import DivergenceError
from .._jax import _internals as jaxi
from ._decode import Decoder
from ._listeners import Listeners
from ._measure import Measurer
from ._trace import Sink, Trace

_TRACEBACKS_EXCLUDED = False  # JAX cannot remove a traceback exclusion: add ours once per process
_MAX_HELPER_VERDICTS = 4096
_MAX_PENDING = 64  # top-level traces pending inside one another on one thread, at most
_MAX_PENDING_WALK = 512  # frames walked to tell which pending traces are gone
_MAX_WRAPPERS = 4  # other tools' wrappers of JAX's `test_event` between JAX's call and our hook


def _measurers(name: str, doc: str) -> property:
    """The probe's setting `name`, its `Measurer`'s."""
    return property(
        lambda probe: getattr(probe.measurer, name),
        lambda probe, value: setattr(probe.measurer, name, value),
        doc=doc,
    )


class _Stack(threading.local):
    """One thread's top-level traces started and not ended yet, innermost last."""

    def __init__(self):
        self.traces: list[Trace] = []


class Probe:
    """Installs and removes the observation points; forwards typed records to `sink`."""

    def __init__(self, sink: Sink):
        self._sink = sink
        self._tls = _Stack()
        self._installed = False
        self._hook = None
        self._orig_test_event = None
        self._registered: list[tuple] = []  # (unregister, callback) of each listener registered
        self._cache_generation = 0
        self._last_misses: int | None = 0
        # Who JAX's tracing cache holds keys of: the ids read when its entries last went down
        # unexplained (`_evicted`), plus every function traced since; None until the first reading.
        self._holders = None  # `_internals.Holders`
        self._gap_read: int | None = None  # the cache's misses less its entries at that reading
        self.internals = jaxi._reduced("not installed")
        self.decoder: Decoder | None = None
        self._cell_label = None
        self.nested_helpers = (
            False  # also decode JAX's own jitted helpers traced inside another trace
        )
        self._helpers: dict[int, weakref.ref] = {}  # id(function) -> a library's own helper, weakly
        self.measurer = Measurer(sink)  # the programs' sizes and line profiles, XLA's figures
        self.listeners = Listeners(self, sink, self.measurer)
        self.keys = self.listeners.keys  # the persistent cache's keys, read while the cache is on
        self.peers = None  # the comparison with the other processes of a run (`_peers.Peers`)
        self.warm = None  # `run --warm`: told each top-level trace of the user's (`_warm.Warm`)

    capture_cost = _measurers(
        "capture_cost", "Equation counts, unrolled loops, FLOPs and bytes of each compile."
    )
    xla_cost_share = _measurers(
        "xla_cost_share",
        "XLA's FLOPs and bytes: read where that costs at most this share of the compile's seconds.",
    )

    def make_pending(self) -> None:
        """Measure and profile the traces recorded but not compiled (yet) whose program JAX still
        holds."""
        self.measurer.make_pending()

    def forget_unprofiled(self) -> None:
        self.measurer.forget()

    @property
    def cell_label(self):
        """Set by the IPython glue: a notebook cell's file name -> "In[5]", or None."""
        return self._cell_label

    @cell_label.setter
    def cell_label(self, label) -> None:
        self._cell_label = label
        if self.decoder is not None:
            self.decoder.cell_label = label

    @property
    def installed(self) -> bool:
        return self._installed

    @property
    def full(self) -> bool:
        return self._installed and self.internals.full

    # ----------------------------------------------------------------- install
    def install(self, self_check: Callable[[], str] | None = None) -> str:
        """Install; returns a one-line notice of what is degraded ('' when nothing is).

        On a JAX newer than the tested range, `self_check()` says whether the full probe reads it
        right ('' when it does; why not, else): the session runs it (`_self_check`). Without one,
        the full probe is installed unchecked (the self-check's own private session)."""
        if self._installed:
            return ""
        self.internals = jaxi.detect()
        newer = self.internals.full and not self.internals.tested and self_check is not None
        if newer:
            failure = self_check()
            if failure:
                self.internals = jaxi._reduced(
                    f"{self.internals.reason}, and its self-check failed ({failure})",
                    self.internals.version,
                )
        self._register("duration", self.listeners.on_duration)
        self._register("event", self.listeners.on_event)
        if self.internals.full:
            self.decoder = Decoder(self.internals)
            self.decoder.cell_label = self.cell_label
            self.measurer.attach(self.decoder)
            cache_info = self.internals.trace_cache_info
            self._last_misses = cache_info().misses if cache_info is not None else None
            self._install_hook(self.internals.layout)
            _exclude_from_tracebacks()
            try:
                self.listeners.key_notice = self.keys.install()
            except Exception as e:
                self._sink.fault("install", e)
        self._installed = True
        self.listeners.attach(self.decoder, self.internals.full)
        if self.internals.full:
            return (
                f"jaxtrace_nb: {self.internals.reason}; self-check passed, recording in full."
                if newer
                else ""
            )
        if not self._registered:  # JAX < 0.8.1: jax.monitoring cannot remove a listener again
            return (
                f"jaxtrace_nb: {self.internals.reason}, and its jax.monitoring cannot unregister "
                "a listener; recording nothing."
            )
        return (
            f"jaxtrace_nb: {self.internals.reason}; recording traces and their seconds per "
            "function name only (no retrace causes, leaves or locations)."
        )

    def uninstall(self) -> None:
        if not self._installed:
            return
        for unregister, callback in self._registered:
            try:
                unregister(callback)
            except Exception:
                pass
        self._registered = []
        try:
            self.keys.uninstall()
        except Exception:
            pass
        if self._hook is not None:
            module = self.internals.layout.hook_module
            if getattr(module, "test_event", None) is self._hook:
                module.test_event = self._orig_test_event
            else:  # someone rebound it on top of us: leave theirs, make ours a plain forwarder
                self._hook.active = False
        self._hook = None
        self.decoder = None
        self.measurer.attach(None)
        self.listeners.attach(None, False)
        self._installed = False

    def process_index(self) -> int | None:
        """JAX's process index, read without initializing JAX's backends (None until JAX knows it).

        Asking ``jax.process_index()`` before the program has run any computation would start the
        backends, after which the program's own ``jax.distributed.initialize()`` fails. So: the
        index ``jax.distributed.initialize`` set, else ``jax.process_index()`` once the backends
        are up."""
        return jaxi.process_index()

    def _register(self, kind: str, callback) -> None:
        api = jaxi.listener_api(kind)
        if api is None:
            return  # never register what we could not remove again
        register, unregister = api
        register(callback)
        self._registered.append((unregister, callback))

    def _install_hook(self, layout) -> None:
        module, event = layout.hook_module, layout.event
        orig = module.test_event
        on_trace_start = self._on_trace_start

        def test_event(*args, **kwargs):
            orig(*args, **kwargs)  # exactly what JAX passed, to JAX's own hook
            if test_event.active and args and args[0] == event:
                __tracebackhide__ = True  # RetraceError: show the user's frame, not ours
                on_trace_start(sys._getframe(1))

        test_event.active = True
        self._orig_test_event, self._hook = orig, test_event
        module.test_event = test_event

    # -------------------------------------------------------------- traces
    def _on_trace_start(self, frame) -> None:
        __tracebackhide__ = True
        try:
            bodies = self.internals.layout.bodies
            if (
                frame.f_code.co_name not in bodies
            ):  # another tool's wrapper of `test_event` above ours
                frame = _announcing(frame, bodies)
                if frame is None:
                    return
            trace = self._trace(frame)
        except Exception as e:
            self._sink.fault("probe", e)
            return
        if trace is None:
            return
        if trace.record.nested:  # JAX reports no end of a nested trace: complete as far as we see
            if self._sink.on_trace(trace):  # may raise RetraceError, by design
                self._sink.on_trace_end(trace, None, None)
            return
        # Completed by the trace-duration event of the same trace (same debug info object). A
        # top-level trace may start inside another (an eager computation under
        # ``jax.ensure_compile_time_eval`` compiles at trace time): the traces under way are a
        # stack, and those gone from it count as attempts before this trace reads its function's
        # state.
        traces = self._tls.traces
        if traces:
            self._fail_gone(traces, frame)
        if self._sink.on_trace(trace):  # may raise RetraceError, by design
            peers = self.peers
            if peers is not None and not trace.record.identity.internal:
                try:
                    peers.on_trace(trace.record, frame)
                except DivergenceError:  # by design: the trace stops before its program is made
                    self._sink.on_trace_failed(trace)
                    raise
            warm = self.warm
            if warm is not None and not trace.record.identity.internal:
                try:
                    warm.on_trace(trace.record, frame)
                except Exception as e:
                    self._sink.fault("warm", e)
            traces.append(trace)

    def _fail_gone(self, traces: list[Trace], frame) -> None:
        """The pending traces whose frame is no longer on the stack under `frame` never completed:
        they raised, or their end was lost.

        A pending trace's frame is known by its id and its code. A frame object's id is stable
        while its function runs; once it has returned, a later frame may take its address (JAX 0.8
        makes a sibling call's frames at the same addresses), and is taken for it only if it runs
        the same code, JAX's announcing function. This trace's own frame, `frame`, is such a frame
        and surely not pending: the walk starts above it. Nothing else is skipped: a pending
        trace's frame may sit among any frames, a library's too (``diffrax.diffeqsolve``, called
        by the user, starts top-level traces inside its own trace, in Diffrax's code)."""
        alive: dict | None = {}
        f = frame.f_back
        for _ in range(_MAX_PENDING_WALK):
            if f is None:
                break
            alive[id(f)] = f.f_code
            f = f.f_back
        else:
            alive = None  # a stack this deep: decided at their ends instead
        while alive is not None and traces and alive.get(traces[-1].frame) is not traces[-1].code:
            self._sink.on_trace_failed(traces.pop())
        while len(traces) >= _MAX_PENDING:
            self._sink.on_trace_failed(traces.pop(0))

    def _trace_end(self, duration: float) -> Trace | None:
        """A top-level trace finished (the listeners' report): the pending trace this event is
        its own, ended and recorded, or None.

        JAX reports the duration of the call of its cached tracing function, so the event
        also comes when nothing was traced; it belongs to a pending trace only if it carries
        the same debug info object (the innermost pending one, unless those inside it raised).
        """
        traces = self._tls.traces
        if not traces:
            return None
        layout = self.internals.layout
        for walk in (False, True):  # where it was last time; if not its trace, frame by frame
            local = jaxi.trace_end_locals(layout, walk)
            if local is None:
                return None
            token = id(local.get(layout.end_token))
            if token == traces[-1].token:
                break
        else:  # the reporting frame's trace is not the innermost one pending
            for i in range(len(traces) - 2, -1, -1):
                if traces[i].token == token:
                    break
            else:
                return None  # a trace not recorded, or a hit of JAX's tracing cache
            while len(traces) > i + 1:  # started inside it and never ended: they raised
                self._sink.on_trace_failed(traces.pop())
        trace = traces.pop()
        jaxpr = local.get("jaxpr")
        if jaxpr is None:  # it raised: JAX cached nothing, and no trace is recorded
            self._sink.on_trace_failed(trace)
            return None
        # Its size, unrolled loop and line profile are made off the trace path (`Measurer`); a
        # program that cannot be referred to weakly is measured now.
        graph = self.measurer.at_end(trace, jaxpr)
        if not self._sink.on_trace_end(trace, duration, graph):
            return None
        self.measurer.wait(trace)
        return trace

    def _trace(self, frame) -> Trace | None:
        """The trace JAX announces (`frame`: its announcing function's), with its record and what
        pairs it with its end; None for a trace not recorded."""
        internals = self.internals
        layout = internals.layout
        nested = not internals.is_top_level()
        skip_helpers = nested and not self.nested_helpers
        if skip_helpers:  # a library's own helper inside a trace: no view shows it unless asked
            fun = layout.jitted(frame)
            known = self._helpers.get(id(fun)) if fun is not None else None
            if known is not None and known() is fun:
                return None
        local, debug_info = layout.begin(frame)
        if getattr(debug_info, "traced_for", None) != "jit":
            return None
        if skip_helpers and self._is_helper(frame, local, debug_info):
            return None
        decoder = self.decoder
        cache_info = internals.trace_cache_info
        evicted = False
        if cache_info is not None:
            info = cache_info()
            misses = info.misses
            if misses <= self._last_misses:
                self._cache_generation += 1  # the counter went back: JAX's caches were cleared
                self._holders = self._gap_read = None
            self._last_misses = misses
            if internals.trace_cache_holders is not None:
                evicted = self._evicted(layout.fun(frame, local), misses - info.currsize, nested)
        thread = threading.get_ident()
        plain = layout.plain_call(local)
        if plain is not None:
            record = decoder.plain_jit_record(
                plain,
                nested=nested,
                thread=thread,
                cache_generation=self._cache_generation,
                frame=frame,
            )
            if record is not None:
                record = record._replace(evicted=True) if evicted else record
                return _paired(record, plain.token, frame)
        start = layout.read(frame, local)
        if start is None:
            return None
        record = decoder.trace_record(
            start,
            nested=nested,
            thread=thread,
            cache_generation=self._cache_generation,
            on_fault=self._sink.fault,
            frame=frame,
        )
        return _paired(record._replace(evicted=True) if evicted else record, start.token, frame)

    def _evicted(self, fun, gap: int, nested: bool) -> bool:
        """Whether JAX's tracing cache holds no key of `fun` (traced before or not): its keys went
        with `f.clear_cache()`. The cache's misses less its entries (`gap`) is, at a trace that is
        no other's, the traces that raised or whose entries went, plus this one: read again only
        when that moved. (A trace inside another is counted, not judged: the gap there includes its
        callers.)"""
        if fun is None:
            return False
        holders = self._holders
        evicted = False
        if not nested:
            if gap != self._gap_read:
                if self._gap_read is not None:
                    self._holders = holders = self.internals.trace_cache_holders()
                self._gap_read = gap
            evicted = holders is not None and not holders.holds(fun)
        if holders is not None:
            holders.add(fun)
        return evicted

    def _is_helper(self, frame, local: dict, debug_info) -> bool:
        """Whether a trace inside another trace is of a library's own jitted helper: a library's
        function (not a library's jit wrapper around a user's function) that a library jitted
        (`Decoder.library_jitted`); one the user jitted (``jax.jit(optax.safe_norm)`` inside the
        user's step) is the user's. A helper its module jits where it defines it (JAX's ``jnp``
        functions) is kept per function object (weakly), for `_trace` to find before it
        reads the trace's arguments; the others are decided at each trace, by their caller."""
        fun = self.internals.layout.fun(frame, local)
        decoder = self.decoder
        if not decoder.is_library(decoder_source_file(debug_info)) or decoder.is_wrapper(fun):
            return False
        if not decoder.jitted_where_defined(fun):
            return decoder.library_jitted(frame, JitKind.JIT, fun)
        try:
            ref = weakref.ref(fun)
        except TypeError:  # not weakly referable: decided again at its next trace
            return True
        helpers = self._helpers
        if len(helpers) >= _MAX_HELPER_VERDICTS:
            helpers.clear()
        helpers[id(fun)] = ref
        return True


def _paired(record, token: int, frame) -> Trace:
    """A trace of `record`, paired with its end by JAX's `token` and its announcing `frame` (by the
    frame's id and code: a frame object's id is stable while its function runs)."""
    return Trace(record, record.identity.jax_name, token, id(frame), frame.f_code)


def _announcing(frame, bodies: tuple):
    """The frame of JAX's announcing function within `_MAX_WRAPPERS` callers of `frame`, or None."""
    for _ in range(_MAX_WRAPPERS):
        frame = frame.f_back
        if frame is None or frame.f_code.co_name in bodies:
            return frame
    return None


def decoder_source_file(debug_info) -> str:
    """The file of JAX's "f at file:line" source info of a traced function."""
    src = str(getattr(debug_info, "func_src_info", "") or "")
    at = src.rfind(" at ")
    return src[at + 4 :].rsplit(":", 1)[0] if at >= 0 else ""


def _exclude_from_tracebacks() -> None:
    """Hide our frames from JAX's filtered tracebacks, once per process: JAX cannot remove an
    exclusion, and each start would add one more."""
    global _TRACEBACKS_EXCLUDED
    if _TRACEBACKS_EXCLUDED:
        return
    try:
        jaxi.exclude_from_tracebacks(os.path.dirname(os.path.dirname(__file__)))  # the package
        _TRACEBACKS_EXCLUDED = True
    except Exception:
        pass
