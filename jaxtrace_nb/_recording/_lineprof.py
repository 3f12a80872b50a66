"""Equations per user source line of a traced program: where a jaxpr's equations come from.

Each jaxpr equation carries the Python traceback of the call that made it
(``eqn.source_info.traceback``). Its frames, innermost first, are read raw (code objects and
instruction offsets: ``Traceback.raw_frames``, a few microseconds an equation), and only the
frames kept are turned into lines. A frame is the user's unless its file is in a library's
folder (`Decoder.is_library`: JAX, Equinox, Flax, Optax, ...), in Python's standard library or
frozen. JAX's own notion of user code (``source_info_util.user_frames``) is not used: it depends
on where packages are installed (under pyenv every site-package counts as JAX's; in a venv,
Equinox counts as the user's).

For every equation, sub-jaxprs included (scan, cond and while bodies, nested jits):

* ``self``: the innermost user line. An equation with no user line inside its own trace (a
  library helper's nested jit, Equinox's wrapper, a library's scan body) is folded into the
  line of the equation that holds its sub-jaxpr, i.e. the user's calling line; the self counts
  sum to the trace's `eqns_total` exactly;
* ``incl``: every user line the equation's stack passes through (inside its trace): an unrolled
  loop's line holds every equation its body made, even those of the helpers it calls.

JAX 0.10 roots each equation's traceback at its own trace; JAX 0.8 records the whole Python
stack, so the scan stops at JAX's ``trace_to_*`` frame, which emulates that.

The walk costs microseconds an equation (`benchmarks/lineprof_cost.py`), so the probe never runs it
on the user's thread while JAX works: a thread of its own (`_background`) walks a program while
XLA compiles it (the compile releases the GIL), and a read walks the programs not compiled. It
keeps a weak reference to the jaxpr until then. Nothing is kept but location texts and counts.
"""

from __future__ import annotations

import json
import os
import sysconfig
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._core._bounded import Bounded
from .._jax._internals import traceback_lines, traceback_type_hashes
from ._cost import sub_jaxprs

MAX_ROWS = 20  # lines kept per trace, most inclusive equations first; the rest in one "other" row
OTHER = "<other>"  # the row of the lines not kept and of equations with no user line at all
_USER, _LIBRARY, _BOUNDARY = 1, 0, 2
_MAX_CODES = 1 << 16
_MAX_SUBS = 4096


class LineProfiler:
    """Walks traced jaxprs into bounded per-line rows; its caches hold code objects and weak
    references to sub-jaxprs only, bounded."""

    def __init__(self, is_library: Callable[[str], bool], location: Callable[[str, int], str]):
        self._is_library = is_library
        self._location = location
        # id(code) -> _USER / _LIBRARY / _BOUNDARY, and (id(code), offset) -> (file, line); keyed by
        # id
        # (a code object hashes its whole contents), the code objects kept alive in `_codes`
        self._verdicts: dict[int, int] = {}
        self._codes: list = []
        self._lines: dict[tuple, tuple] = {}
        self._subs = Bounded(_MAX_SUBS)  # id(jaxpr) -> (weak reference, _Walked)
        self._stdlib = os.path.abspath(sysconfig.get_path("stdlib")) + os.sep
        self._addr2line, self._pe_file = traceback_lines()
        self._tracebacks_hash = traceback_type_hashes()

    # ------------------------------------------------------------------ frames
    def _verdict(self, code) -> int:
        filename = code.co_filename
        if filename == self._pe_file and code.co_name.startswith("trace_to_"):
            verdict = (
                _BOUNDARY  # JAX 0.8: where the trace began (0.10 roots tracebacks there itself)
            )
        elif (
            filename.startswith("<frozen")
            or self._is_library(filename)
            or (filename.startswith(self._stdlib) and "-packages" not in filename)
        ):
            verdict = _LIBRARY
        else:
            verdict = _USER
        if len(self._codes) >= _MAX_CODES:
            self._verdicts.clear(), self._lines.clear(), self._codes.clear()
        self._codes.append(code)  # keyed by id: a code object hashes its whole contents
        self._verdicts[id(code)] = verdict
        return verdict

    def user_stack(self, traceback: Any) -> tuple:
        """The user's (file, line)s of an equation's traceback inside its trace, innermost first."""
        if traceback is None:
            return ()
        codes, offsets = traceback.raw_frames()
        verdicts, lines = self._verdicts, self._lines
        out = []
        for i, code in enumerate(codes):
            verdict = verdicts.get(id(code))
            if verdict is None:
                verdict = self._verdict(code)
            if verdict == _USER:
                key = (id(code), offsets[i])
                line = lines.get(key)
                if line is None:
                    line = lines[key] = (code.co_filename, self._addr2line(code, offsets[i]))
                out.append(line)
            elif verdict == _BOUNDARY:
                break
        return tuple(out)

    # ------------------------------------------------------------------ walk
    def _walk(self, jaxpr: Any) -> _Walked:
        known = self._subs.get(id(jaxpr))
        if known is not None and known[0]() is jaxpr:
            return known[1]
        walked = _Walked()
        own, under = walked.own, walked.under
        # Equations grouped by traceback: each equation has a traceback object of its own, but
        # jaxlib's tracebacks compare and hash by their frames, so the equations one line made
        # share one count and one user stack (342 equations, 15 tracebacks in a 16-layer MLP step).
        counts: dict = {}  # traceback (or its id, where tracebacks do not hash) -> equations
        visits: list = []  # (key, traceback, sub-jaxpr's _Walked or None), in equation order
        by_content = self._tracebacks_hash
        for eqn in jaxpr.eqns:
            traceback = getattr(getattr(eqn, "source_info", None), "traceback", None)
            key = traceback if by_content else id(traceback)
            n = counts.get(key)
            if n is None:
                counts[key] = 1
                visits.append((key, traceback, None))
            else:
                counts[key] = n + 1
            for sub in sub_jaxprs(eqn):
                visits.append((key, traceback, self._walk(sub)))
        walked.total = len(jaxpr.eqns)
        stacks: dict = {}  # key -> (user stack, its lines once each)
        for key, traceback, inner in visits:
            known_stack = stacks.get(key)
            if known_stack is None:
                stack = self.user_stack(traceback)
                known_stack = stacks[key] = (stack, tuple(dict.fromkeys(stack)))
            stack, lines = known_stack
            if inner is None:  # the equations of this traceback at this level
                n = counts[key]
                if stack:
                    own[stack[0]] += n
                    for line in lines:
                        under[line] += n
                else:
                    walked.orphans += n
                continue
            walked.total += inner.total
            own.update(inner.own)
            under.update(inner.under)
            if stack:
                if inner.orphans:
                    own[stack[0]] += inner.orphans  # a library's equations: the user's calling line
                for line in lines:  # every inner equation is under the calling lines, once
                    under[line] += inner.total - inner.under.get(line, 0)
            else:
                walked.orphans += inner.orphans
        try:
            self._subs.put(id(jaxpr), (weakref.ref(jaxpr), walked))
        except TypeError:  # not weakly referable: walked again next time
            pass
        return walked

    def profile(self, closed_jaxpr: Any, max_rows: int = MAX_ROWS) -> tuple:
        """((location, self, incl), ...) of a traced program, the lines with the most inclusive
        equations first, at most `max_rows`, then (`OTHER`, the rest of the self counts, None)."""
        walked = self._walk(getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
        ranked = sorted(
            walked.under.items(), key=lambda item: (-item[1], -walked.own.get(item[0], 0))
        )
        rows = [
            (self._location(*line), walked.own.get(line, 0), incl)
            for line, incl in ranked[:max_rows]
        ]
        rest = walked.total - sum(row[1] for row in rows)
        if rest:
            rows.append((OTHER, rest, None))
        return tuple(rows)


class _Walked:
    """One jaxpr's own result: self and inclusive counts per (file, line), its equations in all,
    and those with no user line (folded into the line of whoever holds the jaxpr)."""

    __slots__ = ("own", "under", "orphans", "total", "__weakref__")

    def __init__(self):
        self.own: Counter = Counter()
        self.under: Counter = Counter()
        self.orphans = 0
        self.total = 0


# --------------------------------------------------------------- the column
def profile_text(rows: tuple) -> str:
    """The profile as its event column holds it (JSON: a log persists and reloads it)."""
    return json.dumps([list(row) for row in rows], ensure_ascii=False, separators=(",", ":"))


def profile_rows(text: str | None) -> list[tuple]:
    """The rows of a `line_profile` column's value ([] for none, or for a value not ours)."""
    if not text or not isinstance(text, str):
        return []
    try:
        rows = json.loads(text)
        return [
            (str(loc), int(own), None if incl is None else int(incl)) for loc, own, incl in rows
        ]
    except (ValueError, TypeError):
        return []
