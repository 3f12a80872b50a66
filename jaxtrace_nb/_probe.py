"""The probe: installs and removes jaxtrace_nb's observation points, and turns what JAX
reports into typed calls on the session (`Sink`).

Two kinds of observation point (where and how they read JAX: `_jax_internals`):

* a hook on JAX's own ``test_event("trace_to_jaxpr")``, which JAX calls at the start of
  every real trace (a miss of its tracing cache): the hook reads the trace's arguments,
  hands the session a `TraceRecord`, and returns before the traced function runs. A
  cache-hit call of a jitted function never reaches Python, so never reaches this code;
* ``jax.monitoring`` listeners (public API): JAX's trace / lower / XLA compile seconds,
  read with the traced program, the lowering's inputs or the executable from the frame
  that reports them, and the persistent compilation cache's events.

Nothing is wrapped: no frame is added to any trace, lowering or compile, and the user's
exceptions and tracebacks pass untouched. Outside the supported JAX range only the
public listeners are installed (traces and their seconds per function name).
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import weakref
from typing import Callable

from . import _jax_internals as jaxi
from ._cost import graph_stats, xla_cost
from ._decode import Decoder
from ._jax_cache_key import REQUEST_EVENT, KeyReader
from ._records import Sink, Stage

_TRACEBACKS_EXCLUDED = False  # JAX cannot remove a traceback exclusion: add ours once per process
XLA_COST_SHARE = 0.02  # at most this share of a compile's seconds goes to reading XLA's cost figures
XLA_COST_S_PER_ARGUMENT = 25e-6  # what reading them costs (benchmarks/run.py, "XLA cost read")
_MAX_HELPER_VERDICTS = 4096
_MAX_PENDING = 64  # top-level traces pending inside one another on one thread, at most
_MAX_PENDING_WALK = 512  # frames walked to tell which pending traces are gone
_MAX_UNPROFILED = 256  # traces whose program waits for its line profile (until its compile, or a read)
_TRACE_EVENT = jaxi.TRACE_EVENT
_CACHE_EVENTS = (jaxi.CACHE_HIT_EVENT, jaxi.CACHE_MISS_EVENT)  # listened to always
_KEY_EVENTS = frozenset((*_CACHE_EVENTS, REQUEST_EVENT))  # while the persistent cache is on (keys read)


class Probe:
    """Installs and removes the observation points; forwards typed records to `sink`."""

    def __init__(self, sink: Sink):
        self._sink = sink
        self._tls = threading.local()
        self._installed = False
        self._full = False  # installed with the full probe (as `full`, read by the listeners)
        self._hook = None
        self._orig_test_event = None
        self._listeners: list[tuple[str, object]] = []
        self._cache_generation = 0
        self._last_misses: int | None = 0
        self.internals = jaxi._reduced("not installed")
        self.decoder: Decoder | None = None
        self._cell_label = None
        self.capture_cost = True  # equation counts, unrolled loops, FLOPs and bytes of each compile
        self.nested_helpers = False  # also decode JAX's own jitted helpers traced inside another trace
        self._helpers: dict[int, tuple] = {}  # id(function) -> (weak reference, a library's own helper)
        self._jax_state: tuple | None = None  # JAX's modules that know the process index
        self.keys = KeyReader(self._keys_switched)  # the persistent cache's keys, read while the cache is on
        self._cache_events = _CACHE_EVENTS  # the `jax.monitoring` events `_on_event` handles
        self._key_notice = ""  # why keys cannot be read on this JAX, said once the cache is used
        self._profiler = None  # a `_lineprof.LineProfiler`, made at the first profile
        # id(handle) -> (handle, weak reference to its traced program): top-level traces not compiled
        # yet; profiled at their compile, or when the log is read (`profile_pending`).
        self._unprofiled: collections.OrderedDict = collections.OrderedDict()

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
                self.internals = jaxi._reduced(f"{self.internals.reason}, and its self-check failed ({failure})",
                                               self.internals.version)
        self._register("duration", self._on_duration)
        self._register("event", self._on_event)
        if self.internals.full:
            self.decoder = Decoder(self.internals)
            self.decoder.cell_label = self.cell_label
            cache_info = self.internals.trace_cache_info
            self._last_misses = cache_info().misses if cache_info is not None else None
            self._install_hook(self.internals.layout)
            _exclude_from_tracebacks()
            try:
                self._key_notice = self.keys.install()
            except Exception as e:
                self._sink.fault("install", e)
        self._installed = True
        self._full = self.internals.full
        if self.internals.full:
            return f"jaxtrace_nb: {self.internals.reason}; self-check passed, recording in full." if newer else ""
        if not self._listeners:  # JAX < 0.8.1: jax.monitoring cannot remove a listener again
            return (f"jaxtrace_nb: {self.internals.reason}, and its jax.monitoring cannot unregister "
                    "a listener; recording nothing.")
        return (f"jaxtrace_nb: {self.internals.reason}; recording traces and their seconds per "
                "function name only (no retrace causes, leaves or locations).")

    def uninstall(self) -> None:
        if not self._installed:
            return
        for unregister, callback in self._listeners:
            try:
                unregister(callback)
            except Exception:
                pass
        self._listeners = []
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
        self._installed = self._full = False

    def process_index(self) -> int | None:
        """JAX's process index, read without initializing JAX's backends (None until JAX knows it).

        Asking ``jax.process_index()`` before the program has run any computation would start the
        backends, after which the program's own ``jax.distributed.initialize()`` fails. So: the
        index ``jax.distributed.initialize`` set, else ``jax.process_index()`` once the backends
        are up."""
        try:
            if self._jax_state is None:
                from jax._src import distributed, xla_bridge

                self._jax_state = (distributed, xla_bridge)
            distributed, xla_bridge = self._jax_state
            if distributed.global_state.client is not None:
                return int(distributed.global_state.process_id)
            if xla_bridge.backends_are_initialized():
                import jax

                return int(jax.process_index())
        except Exception:
            pass
        return None

    def _register(self, kind: str, callback) -> None:
        api = jaxi.listener_api(kind)
        if api is None:
            return  # never register what we could not remove again
        register, unregister = api
        register(callback)
        self._listeners.append((unregister, callback))

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
            record, token = self._trace_record(frame)
        except Exception as e:
            self._sink.fault("probe", e)
            return
        if record is None:
            return
        if record.nested:  # JAX reports no end of a nested trace: it is complete as far as we see
            handle = self._sink.on_trace(record)  # may raise RetraceError, by design
            if handle is not None:
                self._sink.on_trace_end(handle, None, None)
            return
        # Completed by the trace-duration event of the same trace (same debug info object). A
        # top-level trace may start inside another (an eager computation under
        # ``jax.ensure_compile_time_eval`` compiles at trace time): the pending traces are a stack,
        # and those gone from it count as attempts before this trace reads its function's state.
        pending = self._tls.__dict__.get("pending")
        if pending is None:
            pending = self._tls.pending = []
        elif pending:
            self._fail_gone(pending, frame)
        handle = self._sink.on_trace(record)  # may raise RetraceError, by design
        if handle is not None:
            pending.append((token, record.identity.jax_name, handle, id(frame)))

    def _fail_gone(self, pending: list, frame) -> None:
        """The pending traces whose frame is no longer on the stack under `frame` never completed:
        they raised, or their end was lost (a frame object's id is stable while its function runs).

        A pending trace inside which this one starts has the user's traced function between the
        two, so the library frames right above `frame` (this trace's own call, made afresh) are
        not looked at: one of them may sit at the address of a frame gone since (a sibling call)."""
        alive: set | None = set()
        f = frame
        if self.decoder is not None:
            is_library = self.decoder.is_library
            while f is not None and is_library(f.f_code.co_filename):
                f = f.f_back
        for _ in range(_MAX_PENDING_WALK):
            if f is None:
                break
            alive.add(id(f))
            f = f.f_back
        else:
            alive = None  # a stack this deep: decided at their ends instead
        while alive is not None and pending and pending[-1][3] not in alive:
            self._sink.on_trace_failed(pending.pop()[2])
        while len(pending) >= _MAX_PENDING:
            self._sink.on_trace_failed(pending.pop(0)[2])

    def _trace_record(self, frame) -> tuple:
        """(the trace's record, its pairing token), or (None, None) for a trace not recorded."""
        internals = self.internals
        layout = internals.layout
        if frame.f_code.co_name not in layout.bodies:
            return None, None
        nested = not internals.is_top_level()
        skip_helpers = nested and not self.nested_helpers
        if skip_helpers:  # a library's own helper inside a trace: no view shows it unless asked
            fun = layout.jitted(frame)
            known = self._helpers.get(id(fun)) if fun is not None else None
            if known is not None and known[1] and known[0]() is fun:
                return None, None
        local, debug_info = layout.begin(frame)
        if getattr(debug_info, "traced_for", None) != "jit":
            return None, None
        if skip_helpers and self._is_helper(frame, local, debug_info):
            return None, None
        decoder = self.decoder
        cache_info = internals.trace_cache_info
        if cache_info is not None:
            misses = cache_info().misses
            if misses <= self._last_misses:
                self._cache_generation += 1  # the counter went back: JAX's caches were cleared
            self._last_misses = misses
        thread = threading.get_ident()
        plain = layout.plain_call(local)
        if plain is not None:
            record = decoder.plain_jit_record(plain, nested=nested, thread=thread,
                                              cache_generation=self._cache_generation, frame=frame)
            if record is not None:
                return record, plain.token
        start = layout.read(frame, local)
        if start is None:
            return None, None
        record = decoder.trace_record(start, nested=nested, thread=thread, cache_generation=self._cache_generation,
                                      on_fault=self._sink.fault, frame=frame)
        return record, start.token

    def _is_helper(self, frame, local: dict, debug_info) -> bool:
        """Whether a trace inside another trace is of a library's own jitted function (not a
        library's jit wrapper around a user's function). Kept per function object (weakly), for
        `_trace_record` to find before it reads the trace's arguments."""
        fun = self.internals.layout.fun(frame, local)
        decoder = self.decoder
        verdict = decoder.is_library(decoder_source_file(debug_info)) and not decoder.is_wrapper(fun)
        try:
            ref = weakref.ref(fun)
        except TypeError:  # not weakly referable: decided again at its next trace
            return verdict
        helpers = self._helpers
        if len(helpers) >= _MAX_HELPER_VERDICTS:
            helpers.clear()
        helpers[id(fun)] = (ref, verdict)
        return verdict

    # ---------------------------------------------------------- monitoring
    def _on_duration(self, *args, **kwargs) -> None:
        try:
            event, duration = args[0], args[1]
            if event == _TRACE_EVENT and self._full:  # the trace's own listener: the common case
                self._trace_end(float(duration))
            elif type(event) is str and event.startswith("/jax/co"):
                self._duration(event, float(duration), str(kwargs.get("fun_name")))
        except Exception as e:
            self._sink.fault("timing", e)

    def _duration(self, event: str, duration: float, fun_name: str) -> None:
        tls = self._tls
        if event == jaxi.TRACE_EVENT:
            if self.full:
                self._trace_end(duration)
            else:
                handle = self._sink.on_public_trace(fun_name, duration, threading.get_ident())
                tls.lowering = None if handle is None else (fun_name, handle)
        elif event == jaxi.LOWER_EVENT:
            name = _jit_inner_name(fun_name)
            if name is None:
                return
            pending = tls.__dict__.get("lowering")
            tls.lowering = None
            handle = pending[1] if pending is not None and pending[0] == name else None
            program = None
            if handle is not None and len(pending) > 2:
                program = pending[2]
                self._unprofiled.pop(id(handle), None)  # profiled at its compile
            stage = jaxi.stage_frame(event) if self.full else None
            if stage is not None and stage.raised:
                return  # the lowering failed: nothing is compiled
            record = self.decoder.lowering_record(stage and stage.locals, name, threading.get_ident()) \
                if self.full else _public_lowering(name)
            handle = self._sink.on_lowering(handle, record)
            tls.compiling = handle
            tls.program = program
            tls.arguments = len(record.signature.leaves) if record.signature is not None else 0
            if handle is not None:
                self._sink.on_timing(handle, Stage.LOWER, duration)
        elif event == jaxi.COMPILE_EVENT:
            handle = tls.__dict__.get("compiling")
            tls.compiling = None
            if handle is not None:
                self._sink.on_timing(handle, Stage.COMPILE, duration)
                if self.capture_cost and self.full:
                    self._xla_cost(handle, duration, tls.__dict__.get("arguments", 0))
                program = tls.__dict__.get("program")
                tls.program = None
                if program is not None:
                    self._profile(handle, program())
        elif event == jaxi.CACHE_SAVED_EVENT:
            handle = tls.__dict__.get("compiling")
            if handle is not None:
                self._sink.on_timing(handle, Stage.CACHE_SAVED, duration)

    def _xla_cost(self, handle, compile_s: float, arguments: int) -> None:
        """XLA's FLOPs and bytes of the program just compiled, when reading them is cheap.

        Reading them is XLA work that grows with the program's buffers (about 25 µs per argument
        on a 2-core CPU: 25 ms for a program of a thousand arguments), so it is skipped when
        that predicts more than `XLA_COST_SHARE` of this compile's own seconds.
        """
        if XLA_COST_S_PER_ARGUMENT * arguments > XLA_COST_SHARE * compile_s:
            return
        stage = jaxi.stage_frame(jaxi.COMPILE_EVENT)
        executable = stage.locals.get("xla_executable") if stage is not None and not stage.raised else None
        if executable is None:
            return
        self._sink.on_xla_cost(handle, xla_cost(executable))

    def _trace_end(self, duration: float) -> None:
        """A top-level trace finished: complete the pending trace if this event is its own.

        JAX reports the duration of the call of its cached tracing function, so the event
        also comes when nothing was traced; it belongs to a pending trace only if it carries
        the same debug info object (the innermost pending one, unless those inside it raised).
        """
        tls = self._tls
        stack = tls.__dict__.get("pending")
        if not stack:
            return
        layout = self.internals.layout
        for walk in (False, True):  # where it was last time; if that is not its trace, frame by frame
            local = jaxi.trace_end_locals(layout, walk)
            if local is None:
                return
            token = id(local.get(layout.end_token))
            if token == stack[-1][0]:
                break
        else:  # the reporting frame's trace is not the innermost one pending
            for i in range(len(stack) - 2, -1, -1):
                if stack[i][0] == token:
                    break
            else:
                return  # a trace not recorded, or a hit of JAX's tracing cache
            while len(stack) > i + 1:  # started inside it and never ended: they raised
                self._sink.on_trace_failed(stack.pop()[2])
        pending = stack.pop()
        jaxpr = local.get("jaxpr")
        if jaxpr is None:  # it raised: JAX cached nothing, and no trace is recorded
            self._sink.on_trace_failed(pending[2])
            return
        if not self.capture_cost:
            jaxpr = None
        graph = graph_stats(jaxpr, self.decoder.location) if jaxpr is not None else None
        handle = self._sink.on_trace_end(pending[2], duration, graph)
        if handle is not None:
            program = None
            if jaxpr is not None:
                try:
                    program = weakref.ref(jaxpr)  # its line profile: at its compile, or when read
                except TypeError:
                    pass
            if program is None:
                tls.lowering = (pending[1], handle)
            else:
                tls.lowering = (pending[1], handle, program)
                unprofiled = self._unprofiled
                unprofiled[id(handle)] = (handle, program)
                if len(unprofiled) > _MAX_UNPROFILED:
                    unprofiled.popitem(last=False)

    # ------------------------------------------------------- line profiles
    def _profile(self, handle, jaxpr) -> None:
        """Equations per user line of a traced program (`_lineprof`), to the sink; never raises."""
        if jaxpr is None or (self._profiler is None and self.decoder is None):
            return
        try:
            if self._profiler is None:
                from ._lineprof import LineProfiler

                self._profiler = LineProfiler(self.decoder.is_library, self.decoder.location)
            self._sink.on_line_profile(handle, self._profiler.profile(jaxpr))
        except Exception as e:
            self._sink.fault("profile", e)

    def forget_unprofiled(self) -> None:
        self._unprofiled.clear()

    def profile_pending(self) -> None:
        """Profile the traces recorded but not compiled (yet) whose program JAX still holds."""
        unprofiled = self._unprofiled
        while unprofiled:
            try:
                _, (handle, program) = unprofiled.popitem(last=False)
            except KeyError:  # emptied by another thread
                return
            self._profile(handle, program())

    def _on_event(self, *args, **kwargs) -> None:
        try:
            event = args[0] if args else None
            if event not in self._cache_events:
                return
            tls = self._tls.__dict__
            if self._cache_events is _KEY_EVENTS:
                if event == REQUEST_EVENT:  # the key is computed, the cache not read yet
                    tls["cache_key"] = self.keys.begin(_caller(sys._getframe(1), "compile_or_get_cached"))
                    return
                pending = tls.get("cache_key")
                if pending is not None:
                    pending.outcome = "hit" if event == jaxi.CACHE_HIT_EVENT else "written"
            elif self._key_notice:  # the cache is used, and its keys cannot be read on this JAX
                print(self._key_notice, file=sys.stderr)
                self._key_notice = ""
            handle = tls.get("compiling")
            if handle is not None:
                self._sink.on_cache(handle, event == jaxi.CACHE_HIT_EVENT)
        except Exception as e:
            self._sink.fault("timing", e)

    # ------------------------------------------------------ persistent cache keys
    def _keys_switched(self, on: bool) -> None:
        """JAX's persistent cache went on or off: listen to its lookups and compiles' ends, or not.
        Off, the listeners run exactly the code they ran before keys were read."""
        if on:
            self._cache_events = _KEY_EVENTS
            self._duration = self._duration_with_key
        else:
            self._cache_events = _CACHE_EVENTS
            self.__dict__.pop("_duration", None)
            self._tls.__dict__.pop("cache_key", None)

    def _duration_with_key(self, event: str, duration: float, fun_name: str) -> None:
        """`_duration`, and at a compile's end its key's record, with the lookup's outcome."""
        if event != jaxi.COMPILE_EVENT:
            Probe._duration(self, event, duration, fun_name)
            return
        tls = self._tls.__dict__
        handle = tls.get("compiling")
        Probe._duration(self, event, duration, fun_name)
        pending = tls.pop("cache_key", None)
        if pending is not None:
            try:
                record = self.keys.finish(pending, duration)
            except Exception as e:
                self._sink.fault("persistent cache", e)
                return
            self._sink.on_cache_key(handle, record)


def decoder_source_file(debug_info) -> str:
    """The file of JAX's "f at file:line" source info of a traced function."""
    src = str(getattr(debug_info, "func_src_info", "") or "")
    at = src.rfind(" at ")
    return src[at + 4:].rsplit(":", 1)[0] if at >= 0 else ""


def _caller(frame, name: str, depth: int = 4):
    """The frame of function `name` within `depth` frames up from `frame` (None if not there)."""
    for _ in range(depth):
        if frame is None or frame.f_code.co_name == name:
            return frame
        frame = frame.f_back
    return None


def _public_lowering(jax_name: str):
    from ._records import LoweringRecord

    return LoweringRecord(jax_name, "", None, threading.get_ident(), None)


def _jit_inner_name(fun_name: str) -> str | None:
    if fun_name.startswith("jit(") and fun_name.endswith(")"):
        return fun_name[4:-1]
    return None


def _exclude_from_tracebacks() -> None:
    """Hide our frames from JAX's filtered tracebacks, once per process: JAX cannot remove an
    exclusion, and each start would add one more."""
    global _TRACEBACKS_EXCLUDED
    if _TRACEBACKS_EXCLUDED:
        return
    try:
        jaxi.exclude_from_tracebacks(os.path.dirname(__file__))
        _TRACEBACKS_EXCLUDED = True
    except Exception:
        pass
