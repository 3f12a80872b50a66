"""The probe's `jax.monitoring` listeners: JAX's trace, lower and XLA compile seconds, read with
the program that was traced, lowered or compiled; the persistent compilation cache's events and
keys.

`Listeners` runs after JAX has done the work it reports (the trace-start hook is `_probe`'s): it
translates each event into calls on the probe (a trace's end), the sink and the measurer
(`_measure.Measurer`), and follows per thread the traces awaiting their lowerings and the compile
under way. Public listeners only (`jax.monitoring`); where they read a frame, `_jax._internals`
says how.
"""

from __future__ import annotations

import sys
import threading
import time

from .._jax import _internals as jaxi
from .._jax._cache_key import REQUEST_EVENT, KeyReader
from .._keys._records import Stage
from ._measure import Measurer
from ._trace import Sink, Trace

_MAX_AWAITING = 16  # ended traces awaiting their lowerings around a later trace's, on one thread
_MAX_LOWERING_DEPTH = 200
_TRACE_EVENT = jaxi.TRACE_EVENT
_CACHE_EVENTS = (jaxi.CACHE_HIT_EVENT, jaxi.CACHE_MISS_EVENT)  # listened to always
_KEY_EVENTS = frozenset(
    (*_CACHE_EVENTS, REQUEST_EVENT)
)  # while the persistent cache is on (keys read)


class _Thread(threading.local):
    """What the listeners follow on one thread: the traces ended and awaiting their lowerings, and
    the compile under way."""

    def __init__(self):
        self.ended: Trace | None = None  # the last trace to end, awaiting its lowering
        self.awaiting: list[Trace] = []  # earlier ones, kept around a later one's (`_await_around`)
        self.compiling = None  # the compile's handle (its event), from its lowering to its end
        self.compiled: Trace | None = None  # the trace it compiles, if one was recorded
        self.cache_key = (
            None  # the persistent cache's key of it, from its lookup (`KeyReader.begin`)
        )
        self.compile_handle = None  # the last compile's handle, once it ended
        self.cache_hit = None  # the persistent cache's outcome of a compile with no handle yet
        self.lowered = None  # the module the last lowering made, weakly


class Listeners:
    """The probe's `jax.monitoring` listeners: each of JAX's events is translated into calls on
    the probe (a trace's end, which it pairs with its stack of traces), on the sink (a lowering, a
    stage's seconds, the persistent cache's outcome and key) and on the measurer (when a traced
    program may be measured; XLA's figures of a compile). The probe installs them, and says at
    its install what it reads JAX with (`attach`)."""

    def __init__(self, probe, sink: Sink, measurer: Measurer):
        self._probe, self._sink, self._measurer = probe, sink, measurer
        self._tls = _Thread()
        self.full = False  # installed with the full probe
        self.decoder = None  # the probe's `Decoder` while installed in full
        self.keys = KeyReader(self._keys_switched)  # the persistent cache's keys, while it is on
        self.cache_events = _CACHE_EVENTS  # the `jax.monitoring` events `on_event` handles
        self.key_notice = ""  # why keys cannot be read on this JAX, said once the cache is used

    def attach(self, decoder, full: bool) -> None:
        self.decoder, self.full = decoder, full

    def on_duration(self, *args, **kwargs) -> None:
        try:
            event, duration = args[0], args[1]
            if event == _TRACE_EVENT and self.full:  # the trace's own listener: the common case
                trace = self._probe._trace_end(float(duration))  # (the probe's stack of traces)
                if trace is not None:
                    self._ended(trace)
            elif type(event) is str and event.startswith("/jax/co"):
                self._duration(event, float(duration), str(kwargs.get("fun_name")))
        except Exception as e:
            self._sink.fault("timing", e)

    def _ended(self, trace: Trace) -> None:
        """`trace` ended, recorded: it awaits its lowering."""
        tls = self._tls
        if tls.ended is not None and _inside_lowering():
            self._await_around(tls.ended)
        tls.ended = trace

    def _duration(self, event: str, duration: float, fun_name: str) -> None:
        tls = self._tls
        if event == jaxi.TRACE_EVENT:
            if self.full:
                trace = self._probe._trace_end(duration)
                if trace is not None:
                    self._ended(trace)
            else:
                tls.ended = self._sink.on_public_trace(fun_name, duration, threading.get_ident())
        elif event == jaxi.LOWER_EVENT:
            name = _jit_inner_name(fun_name)
            if name is None:
                return
            trace = self._awaited(name)
            if trace is not None and self.cache_events is not _KEY_EVENTS:
                self._measurer.beside_compile(trace)  # in our thread while XLA compiles it
            peers = self._probe.peers
            if peers is not None:
                peers.beside_compile()
            stage = jaxi.stage_frame(event) if self.full else None
            if stage is not None and stage.raised:
                return  # the lowering failed: nothing is compiled
            record = (
                self.decoder.lowering_record(stage and stage.locals, name, threading.get_ident())
                if self.full
                else _public_lowering(name)
            )
            if record is not None:
                record = record._replace(started=time.monotonic() - duration)
            handle = self._sink.on_lowering(trace, record)
            tls.compiling, tls.compiled = handle, trace
            tls.lowered = getattr(record, "module_ref", None)
            if handle is not None:
                self._sink.on_timing(handle, Stage.LOWER, duration)
        elif event == jaxi.COMPILE_EVENT:
            handle, trace, lowered = tls.compiling, tls.compiled, tls.lowered
            tls.compiling = tls.compiled = tls.lowered = None
            measurer = self._measurer
            try:
                stage = jaxi.stage_frame(event) if self.full else None
                if stage is not None and stage.raised:
                    stage = None
                compiled = self._compile_record(stage, fun_name)
                if compiled is not None:
                    compiled = compiled._replace(started=time.monotonic() - duration)
                hit, tls.cache_hit = tls.cache_hit, None
                if (
                    compiled is not None
                    and lowered is not None
                    and compiled.module_ref is not lowered
                ):  # the last lowering was never compiled (`.lower()` alone): not this compile's
                    handle = trace = None
                if compiled is not None:
                    if handle is None:  # a module lowered before, compiled for other devices
                        handle = self._sink.on_compile_only(compiled)
                        if handle is not None and hit is not None:
                            self._sink.on_cache(handle, hit)
                    else:
                        self._sink.on_compiled_for(handle, compiled)
                tls.compile_handle = handle
                if handle is not None:
                    equations = measurer.equations(trace, duration)  # XLA's reads need its size
                    self._sink.on_timing(handle, Stage.COMPILE, duration)
                    if measurer.capture_cost and stage is not None:
                        self._xla_cost(handle, duration, equations, stage)
            finally:
                if trace is not None:  # loaded from the persistent cache, or compiled without a
                    measurer.compiled(trace)  # lookup or despite its entry: handed over now
        elif event == jaxi.CACHE_SAVED_EVENT:
            handle = tls.compiling
            if handle is not None:
                self._sink.on_timing(handle, Stage.CACHE_SAVED, duration)

    def _compile_record(self, stage, fun_name: str):
        """What the compile ending now received (its module, its devices), or None."""
        name = _jit_inner_name(fun_name) if stage is not None else None
        if name is None:
            return None
        try:
            return self.decoder.compile_record(stage.locals, name, threading.get_ident())
        except Exception as e:  # (the compile's seconds are recorded all the same)
            self._sink.fault("timing", e)
            return None

    def _xla_cost(self, handle, compile_s: float, equations: int | None, stage) -> None:
        """XLA's FLOPs and bytes of the program just compiled, those whose reading is cheap
        (`Measurer.xla_plan`), read from the executable JAX compiled (`stage`: the compile's
        frame)."""
        plan = self._measurer.xla_plan(equations, compile_s)
        if not any(plan):
            return
        executable = stage.locals.get("xla_executable")
        if executable is not None:
            self._sink.on_xla_cost(handle, self._measurer.read_xla(executable, plan, equations))

    def _await_around(self, earlier: Trace) -> None:  # (only inside a lowering: `_inside_lowering`)
        """A trace ended while an earlier one still awaits its lowering: kept, by name, should the
        new one's lowering come inside the earlier one's (a lowering rule that computes eagerly,
        as Equinox's ``unvmap_any`` in an Optimistix solve: a whole trace, lowering and compile
        of its own while the solve is lowered)."""
        awaiting = self._tls.awaiting
        awaiting.append(earlier)
        if len(awaiting) > _MAX_AWAITING:  # never lowered (``jit(f).trace(x)``, ``jax.eval_shape``)
            del awaiting[0]

    def _awaited(self, name: str) -> Trace | None:
        """The ended trace a lowering of `name` is of: the last to end, else the latest of that
        name kept by `_await_around` (those kept after it were never lowered: dropped)."""
        tls = self._tls
        last, tls.ended = tls.ended, None
        if last is not None and last.name == name:
            return last
        awaiting = tls.awaiting
        for i in range(len(awaiting) - 1, -1, -1):
            if awaiting[i].name == name:
                found = awaiting[i]
                del awaiting[i:]
                return found
        return None

    def on_event(self, *args, **kwargs) -> None:
        try:
            event = args[0] if args else None
            if event not in self.cache_events:
                return
            tls = self._tls
            if self.cache_events is _KEY_EVENTS:
                if event == REQUEST_EVENT:  # the key is computed, the cache not read yet
                    frame = _caller(sys._getframe(1), "compile_or_get_cached")
                    pending = tls.cache_key = self.keys.begin(frame)
                    if not (
                        pending is not None and self.keys.stored(pending.key)
                    ):  # XLA will compile it
                        self._measurer.hurry()
                        if tls.compiled is not None:
                            self._measurer.beside_compile(tls.compiled)  # meanwhile
                    return
                pending = tls.cache_key
                if pending is not None:
                    pending.outcome = "hit" if event == jaxi.CACHE_HIT_EVENT else "written"
            elif self.key_notice:  # the cache is used, and its keys cannot be read on this JAX
                print(self.key_notice, file=sys.stderr)
                self.key_notice = ""
            handle = tls.compiling
            if handle is not None:
                self._sink.on_cache(handle, event == jaxi.CACHE_HIT_EVENT)
            else:  # a compile with no lowering of its own: its handle comes at its end
                tls.cache_hit = event == jaxi.CACHE_HIT_EVENT
        except Exception as e:
            self._sink.fault("timing", e)

    # ------------------------------------------------------ persistent cache keys
    def _keys_switched(self, on: bool) -> None:
        """JAX's persistent cache went on or off: listen to its lookups and compiles' ends, or not.
        Off, the listeners run exactly the code they ran before keys were read."""
        if on:
            self.cache_events = _KEY_EVENTS
            self._duration = self._duration_with_key
        else:
            self.cache_events = _CACHE_EVENTS
            self.__dict__.pop("_duration", None)
            self._tls.cache_key = None

    def _duration_with_key(self, event: str, duration: float, fun_name: str) -> None:
        """`_duration`, and at a compile's end its key's record, with the lookup's outcome."""
        if event != jaxi.COMPILE_EVENT:
            Listeners._duration(self, event, duration, fun_name)
            return
        tls = self._tls
        Listeners._duration(self, event, duration, fun_name)
        handle, tls.compile_handle = tls.compile_handle, None
        pending, tls.cache_key = tls.cache_key, None
        if pending is not None:
            stage = jaxi.stage_frame(event)
            if (
                stage is not None and stage.raised
            ):  # JAX reports the seconds of a compile that raised
                # (0.8.0 to 0.11.0: `log_elapsed_time.__exit__`): it cached nothing, no verdict
                return
            try:
                record = self.keys.finish(pending, duration)
            except Exception as e:
                self._sink.fault("persistent cache", e)
                return
            self._sink.on_cache_key(handle, record)


def _caller(frame, name: str, depth: int = 4):
    """The frame of function `name` within `depth` frames up from `frame` (None if not there)."""
    for _ in range(depth):
        if frame is None or frame.f_code.co_name == name:
            return frame
        frame = frame.f_back
    return None


def _public_lowering(jax_name: str):
    from .._keys._records import LoweringRecord

    return LoweringRecord(
        jax_name=jax_name, src_info="", signature=None, thread=threading.get_ident(), identity=None
    )


def _jit_inner_name(fun_name: str) -> str | None:
    if fun_name.startswith("jit(") and fun_name.endswith(")"):
        return fun_name[4:-1]
    return None


def _inside_lowering() -> bool:
    """Whether one of JAX's lowering functions is running on this thread (a trace ending now was
    made inside a lowering; an earlier trace that was never lowered, `jit(f).trace(x)`, is not
    awaited)."""
    f, depth = sys._getframe(1), 0
    while f is not None and depth < _MAX_LOWERING_DEPTH:
        if f.f_code.co_name in jaxi.LOWERING_FRAMES:
            return True
        f, depth = f.f_back, depth + 1
    return False
