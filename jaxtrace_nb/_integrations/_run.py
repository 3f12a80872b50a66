"""Running a program under recording, exactly as ``python script.py`` / ``python -m module`` would.

`run` is what ``python -m jaxtrace_nb run`` does: the program gets the same ``sys.argv``,
``__main__``, ``sys.path[0]``, stdout, exceptions, tracebacks and exit status; recording starts
when the program imports JAX (`after_import`), and the text report goes to stderr at exit.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import types
from collections.abc import Callable

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call `callback()` once top-level package `name` has been imported (now, if it is).

    Used to start recording only when the program imports JAX: importing JAX ourselves first
    would read ``JAX_*`` environment variables before the program could set them.
    """
    if name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport:
    """A one-shot meta path finder: lets the real finders find `name`, and runs `callback`
    right after the module's code ran (the module itself, its loader and spec unchanged)."""

    def __init__(self, name: str, callback: Callable[[], None]):
        self.name = name
        self.callback = callback

    def _remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self._remove()
        import importlib.util

        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:
            spec = None
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec  # the import fails (or is unusual) as it would have
        original = loader.exec_module
        callback = self.callback

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del (
                        loader.exec_module
                    )  # the loader is this spec's own: back to its class's method
                except AttributeError:
                    pass
            callback()

        loader.exec_module = exec_module
        return spec


class _Recording:
    """What `run` holds: the session started with persistence, a watch with the limits."""

    def __init__(
        self,
        persist: str | None,
        max_traces: int | None,
        max_retraces: int | None,
        divergence: str | None = None,
        divergence_grace_s: float | None = None,
        warm: list[str] | None = None,
    ):
        self.persist = persist
        self.warm = warm
        self.divergence = divergence
        self.divergence_grace_s = divergence_grace_s
        self.max_traces = max_traces
        self.max_retraces = max_retraces
        self.watch = None
        self.started = False
        self.error: str | None = None

    def begin(self) -> None:
        try:
            import jaxtrace_nb as jt

            from ._watch import Watch

            jt.start(
                persist=self.persist,
                divergence=self.divergence,
                divergence_grace_s=self.divergence_grace_s,
            )
            # A watch holds recording even if the program calls jt.stop(); it carries the limits.
            watch = Watch(jt.get_session(), self.max_traces, self.max_retraces, scope="in this run")
            watch.__enter__()
            self.watch = watch
            self.started = True
            if self.warm:
                from ._warm import Warm

                session = jt.get_session()
                session.probe.warm = Warm(self.warm, session)
        except Exception as e:  # never let our start break the program's `import jax`
            self.error = f"{type(e).__name__}: {e}"
            print(
                f"jaxtrace_nb: could not start recording ({self.error}); the program runs "
                "unrecorded.",
                file=sys.stderr,
            )

    def end(self) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            try:
                watch.__exit__(None, None, None)
            except Exception:
                pass


def _expand(path: str | None) -> str | None:
    if path is None:
        return None
    return path.replace("{pid}", str(os.getpid())).replace("{host}", socket.gethostname())


def run(
    script: str | None,
    args: list[str],
    *,
    module: str | None = None,
    persist: str | None = None,
    max_traces: int | None = None,
    max_retraces: int | None = None,
    title: str | None = None,
    divergence: str | None = None,
    divergence_grace_s: float | None = None,
    warm: list[str] | None = None,
) -> int:
    """Run `script` (or `module`) as python would, recording; the report goes to stderr at exit.
    With `warm` (persisted logs), each ``jax.jit`` function's signatures recorded there are
    precompiled from its first call (`_warm`).

    Returns the exit status for an uncaught exception (1, after printing its traceback as
    python does) or a normal end (0); the program's own ``SystemExit`` propagates unchanged.
    """
    target = f"-m {module}" if module else script
    persist = _expand(persist)
    if persist is not None:
        try:  # fail now, not when the program imports JAX
            open(persist, "a", encoding="utf-8").close()
        except OSError as e:
            print(
                f"jaxtrace_nb run: cannot write the log {persist!r}: {e.strerror or e}",
                file=sys.stderr,
            )
            return 2
    for path in warm or ():
        if not os.path.isfile(path):
            print(f"jaxtrace_nb run: no log {path!r} to warm from", file=sys.stderr)
            return 2
    recording = _Recording(
        persist, max_traces, max_retraces, divergence, divergence_grace_s, warm=warm
    )
    status = {"interrupted": False, "pid": os.getpid()}
    title = title or f"jaxtrace_nb run {target}"
    runner = _runner(script, module, args)
    if isinstance(runner, int):
        return runner
    # Registered before the program runs, so it runs after the program's own atexit handlers.
    atexit.register(_at_exit, recording, title, status)
    after_import("jax", recording.begin)
    try:
        runner()
    except SystemExit:
        raise  # python prints its message, if any, and exits with its code; the report at exit
    except BaseException as e:  # noqa: BLE001 - printed as python prints an uncaught exception
        _print_uncaught(e, status)
        return 1
    return 0


def _runner(script: str | None, module: str | None, args: list[str]):
    """What runs the program, with ``sys.argv`` and ``sys.path[0]`` set as python sets them; or
    python's exit status when there is nothing to run."""
    if module is not None:
        import importlib.util

        sys.argv = ["-m", *args]  # as python, until the module is found
        try:
            found = importlib.util.find_spec(module) is not None
        except Exception:
            found = False
        if not found:
            print(f"{sys.executable}: No module named {module}", file=sys.stderr)
            return 1
        return lambda: _run_module(module)
    else:
        assert script is not None
        if not os.path.exists(script):
            print(
                f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
                f"[Errno 2] No such file or directory",
                file=sys.stderr,
            )
            return 2
        sys.argv = [script, *args]
        _set_path0(script)
        return lambda: _run_path(script)


def _print_uncaught(e: BaseException, status: dict) -> None:
    """Print an exception the program did not catch as python does, and note a ^C."""
    tb = _user_traceback(e.__traceback__)
    e.__traceback__ = tb  # python's display reads the exception's own traceback
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = e
    try:
        sys.excepthook(type(e), e, tb)
    except Exception:
        import traceback

        traceback.print_exception(type(e), e, tb)
    if isinstance(e, KeyboardInterrupt):
        status["interrupted"] = True  # exit as python does: killed by SIGINT, after atexit


def _set_path0(script: str) -> None:
    """``sys.path[0]`` as ``python script.py`` sets it: the script's real directory (or the
    directory / zip itself); nothing with ``-P`` / ``PYTHONSAFEPATH``."""
    if getattr(sys.flags, "safe_path", False):
        return
    if os.path.isdir(script) or _is_zip(script):
        entry = os.path.abspath(script)
    else:
        entry = os.path.dirname(os.path.realpath(script))
    cwd = os.getcwd()
    if sys.path and sys.path[0] in ("", cwd):  # what `python -m jaxtrace_nb` put there
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


def _run_path(script: str) -> None:
    """Run a file in a fresh ``__main__`` module, as python runs a script."""
    import runpy

    if os.path.isdir(script) or _is_zip(script):
        as_main = getattr(runpy, "_run_module_as_main", None)
        if as_main is not None and sys.path and sys.path[0] == os.path.abspath(script):
            # What python does for a directory or zip: find `__main__` on sys.path[0], run it
            # in the __main__ module, sys.argv untouched.
            sys.modules["__main__"] = types.ModuleType("__main__")
            as_main("__main__", False)
            return
        runpy.run_path(script, run_name="__main__")
        return
    if script.endswith((".pyc", ".pyo")):
        runpy.run_path(script, run_name="__main__")
        return
    from importlib.machinery import SourceFileLoader

    filename = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    with open(script, "rb") as f:
        source = f.read()
    code = compile(source, filename, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=filename,
        __cached__=None,
        __package__=None,
        __spec__=None,
        __loader__=SourceFileLoader("__main__", filename),
        __builtins__=__builtins__,
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _run_module(module: str) -> None:
    import runpy

    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _user_traceback(tb):
    """`tb` without its leading frames in jaxtrace_nb and runpy: what python would show."""
    import runpy

    ours = _PACKAGE_DIR + os.sep
    runpy_files = {runpy.__file__, runpy.run_path.__code__.co_filename}  # "<frozen runpy>" on 3.11+
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(ours) or filename in runpy_files:
            tb = tb.tb_next
            continue
        break
    return tb


def _at_exit(recording: _Recording, title: str, status: dict) -> None:
    """Print the report to stderr once the program (its threads, its atexit handlers) is done."""
    if os.getpid() != status["pid"]:
        return  # a child the program forked, leaving through sys.exit: not the run we report on
    recording.end()
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        text = _session_report(title)
        if recording.persist and recording.started:
            text += f"\n(log: {recording.persist})"
        if recording.error:
            text += f"\n(recording could not start: {recording.error})"
        print(text, file=sys.stderr)
    except Exception as e:  # the report must never change the program's exit
        try:
            print(
                f"jaxtrace_nb: could not print the report ({type(e).__name__}: {e})",
                file=sys.stderr,
            )
        except Exception:
            pass
    if status.get("interrupted"):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def _session_report(title: str) -> str:
    from .._recording._session import get_session
    from .._views._text import Report, render_text

    session = get_session()
    if not session.log.next_seq and "jax" not in sys.modules:
        return f"{title}: the program never imported JAX; nothing was recorded."
    events = session.log.events()
    return render_text(Report(events, title, dropped=session.log.dropped))


# ------------------------------------------------------------------ report
