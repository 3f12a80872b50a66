"""Live comparison of cache keys across the processes of a `jax.distributed` run (issue 45).

Real clusters of local CPU processes (gloo collectives, a coordinator on localhost, a global array
over every process's device) run `tests/programs/dist_divergence.py`:

* two processes under ``python -m jaxtrace_nb run --persist`` (recording starts before
  ``jax.distributed.initialize``), in "warn" mode, and the same program without jaxtrace_nb;
* four processes that start recording after ``initialize`` with ``divergence="raise"``.

A cluster that cannot start fails these tests (it is never skipped). The other tests check the
pure parts (`_divergence`, the store's protocol texts) and that a failing store is contained.
"""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from _support import free_port, report_command

from jaxtrace_nb._core._vocabulary import DivergenceMode
from jaxtrace_nb._diagnosis._divergence import (
    STDERR_PREFIX,
    Finding,
    Group,
    PortableKey,
    differing_leaves,
    event_fields,
    finding,
    function_id,
    judge,
    withdrawal,
)
from jaxtrace_nb._recording._lifecycle import WITHDRAWN
from jaxtrace_nb._recording._peers import (
    Comparison,
    Peers,
    Store,
    decode_groups,
    encode_groups,
    partial_groups,
)

PROGRAMS = pathlib.Path(__file__).parent / "programs"
PROGRAM = PROGRAMS / "dist_divergence.py"
REPO = PROGRAMS.parent.parent
TIMEOUT_S = 240
RUN = [sys.executable, "-m", "jaxtrace_nb", "run"]


def _start(n: int, scenario: str, tmp: pathlib.Path, *, record: bool) -> list:
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    procs = []
    for i in range(n):
        log = tmp / f"{scenario}-{'rec' if record else 'plain'}-{i}.jsonl"
        program = [str(PROGRAM), str(i), str(n), str(port), scenario]
        if scenario == "two" and record:
            command = [*RUN, "--persist", str(log), "--divergence-grace", "3", *program]
        else:
            command = [sys.executable, *program, *([str(log)] if record else [])]
        procs.append((log, _popen(command, env)))
    return procs


def _popen(command: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(procs: list) -> list[dict]:
    out = []
    try:
        for log, p in procs:
            stdout, stderr = p.communicate(timeout=TIMEOUT_S)
            out.append({"log": log, "stdout": stdout, "stderr": stderr, "rc": p.returncode})
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, r in enumerate(out):
        assert r["rc"] == 0, f"process {i} of the cluster failed:\n{r['stderr'][-4000:]}"
    return out


def _lines(r: dict, tag: str) -> list[str]:
    return [line[len(tag) + 1 :] for line in r["stdout"].splitlines() if line.startswith(tag + " ")]


def _rows(r: dict) -> list[dict]:
    (text,) = _lines(r, "ROWS")
    cols = ["function", "leaf", "before", "after", "explanation", "process", "trace_number"]
    return [dict(zip(cols, row)) for row in json.loads(text)]


def _stderr_lines(r: dict) -> list[str]:
    return [line for line in r["stderr"].splitlines() if line.startswith(STDERR_PREFIX)]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """The three runs, started together (9 processes at once would crowd 2 cores: the four-process
    run starts when the two-process ones are done)."""
    tmp = tmp_path_factory.mktemp("divergence")
    two = _start(2, "two", tmp, record=True)
    plain = _start(2, "two", tmp, record=False)
    runs = {"two": _finish(two), "plain": _finish(plain)}
    runs["four"] = _finish(_start(4, "four", tmp, record=True))
    return runs


# ------------------------------------------------------------------ real clusters
def test_identical_traces_report_nothing(clusters):
    for r in clusters["two"] + clusters["four"]:
        assert not [row for row in _rows(r) if row["function"] == "same"]
        assert not [line for line in _stderr_lines(r) if "`same`" in line]
    assert len(_lines(clusters["four"][0], "RESULT")) == 4  # same ×3, double: nothing stopped them


def test_a_static_value_differing_on_one_process_is_named_live_in_every_process(clusters):
    expected = "`scale`: 2.0 on process 0 → 3.0 on process 1"
    for i, r in enumerate(clusters["two"]):
        (row,) = [row for row in _rows(r) if row["function"] == "step"]
        assert (row["leaf"], row["before"], row["after"]) == ("scale", "2.0", "3.0")
        assert row["process"] == i and row["trace_number"] == 2
        assert expected in row["explanation"] and "process 1 traced it" in row["explanation"]
        (line,) = [line for line in _stderr_lines(r) if "`step`" in line]
        assert expected in line


def test_a_local_batch_one_row_short_is_named_with_both_global_shapes(clusters):
    for i, r in enumerate(clusters["two"]):
        (row,) = [row for row in _rows(r) if row["function"] == "batch_sum"]
        assert row["leaf"] == "x" and row["process"] == i
        assert re.match(r"f32\[8\b", row["before"]) and re.match(r"f32\[6\b", row["after"])
        (line,) = [line for line in _stderr_lines(r) if "`batch_sum`" in line]
        assert "on process 0 → " in line and "on process 1" in line
        assert "process 1 traced another key than process 0" in line


def test_a_dtype_on_one_of_four_processes_is_named_in_all_four(clusters):
    for i, r in enumerate(clusters["four"]):
        (row,) = [row for row in _rows(r) if row["function"] == "double"]
        assert row["leaf"] == "x" and row["process"] == i
        assert row["before"].startswith("f32[") and row["after"].startswith("f16[")
        (line,) = [line for line in _stderr_lines(r) if "`double`" in line]
        assert "on processes 0, 1, 2 → f16[" in line and "on process 3" in line


def test_raise_stops_the_differing_process_before_its_program_runs(clusters):
    for i, r in enumerate(clusters["four"]):
        raised = _lines(r, "RAISED")
        if i != 3:
            assert not raised
            assert any(line.split()[1] == "double" for line in _lines(r, "RESULT"))
            continue
        (text,) = raised
        process, body_traced, message = text.split(" ", 2)
        assert (process, body_traced) == ("3", "0")  # `double`'s body never ran: nothing compiled
        assert json.loads(message).startswith(STDERR_PREFIX)
        assert "f16[" in json.loads(message)


def test_a_cache_hit_call_of_a_compared_function_runs_none_of_our_code(clusters):
    for i, r in enumerate(clusters["two"]):
        assert _lines(r, "HIT_FRAMES") == [f"{i} 0"]


def test_a_function_over_process_local_arrays_is_never_compared(clusters):
    local = function_id("local_only", "dist_divergence.py")
    step = function_id("step", "dist_divergence.py")
    for r in clusters["two"]:
        (keys,) = _lines(r, "KEYS")
        keys = json.loads(keys)
        assert any(f"/{step}/" in k for k in keys)  # (the store is read right)
        assert not any(f"/{local}/" in k for k in keys)
        assert not [row for row in _rows(r) if row["function"] == "local_only"]


def test_the_report_over_the_persisted_logs_shows_the_divergence_and_the_skew(clusters):
    logs = [str(r["log"]) for r in clusters["two"]]
    out = report_command(logs)
    assert out.returncode == 0, out.stderr
    assert "Diverged across processes, found while the run ran:" in out.stdout
    assert "`scale`: 2.0 on process 0 → 3.0 on process 1" in out.stdout
    assert "in the logs of process 0, process 1" in out.stdout
    skew = out.stdout.split("Trace + compile seconds per process")[1]
    assert re.search(r"step: process 0 [\d.]+, process 1 [\d.]+ \(spread", skew)


def test_results_with_recording_equal_those_without(clusters):
    for recorded, plain in zip(clusters["two"], clusters["plain"]):
        assert _lines(recorded, "RESULT") == _lines(plain, "RESULT")
        assert len(_lines(plain, "RESULT")) >= 7
        assert not _stderr_lines(plain)


def _cluster(program: pathlib.Path, n: int, *args: str, seeds: bool = True) -> list[dict]:
    """`program` run by `n` processes of one `jax.distributed` run, each with its own
    ``PYTHONHASHSEED`` (where `seeds`), to the end: each one's stdout, stderr and exit status."""
    port = free_port()
    procs = []
    for i in range(n):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
        if seeds:
            env["PYTHONHASHSEED"] = str(101 + 7 * i)
        command = [sys.executable, str(program), str(i), str(n), str(port), *args]
        procs.append(_popen(command, env))
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=TIMEOUT_S)
            out.append({"stdout": stdout, "stderr": stderr, "rc": p.returncode})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return out


def test_library_models_under_other_hash_seeds_report_nothing_in_raise_mode():
    for i, r in enumerate(_cluster(PROGRAMS / "dist_portable.py", 2, "same")):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-4000:]}"
        assert not _stderr_lines(r)
        assert _lines(r, "ROWS") == ["[]"]
        names = [line.split()[1] for line in _lines(r, "RESULT")]
        assert names == ["nnx", "split", "linen", "eqx", "dataclass"]


def test_an_nnx_hidden_size_is_named_without_leaves_that_read_alike():
    for i, r in enumerate(_cluster(PROGRAMS / "dist_portable.py", 2, "hidden")):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-4000:]}"
        (line,) = _stderr_lines(r)
        assert "`model.l1.bias`: f32[8] on process 0 → f32[16] on process 1" in line
        assert "Param" not in line
        for part in line.split("`")[3::2]:  # each leaf's "before on … → after on …"
            before, _, after = part.partition(" → ")
            assert before.rsplit(" on ", 1)[0] != after.rsplit(" on ", 1)[0], line


def test_the_portable_form_of_every_leaf_kind_is_the_same_under_any_hash_seed():
    def forms(seed: str) -> list:
        out = subprocess.run(
            [sys.executable, str(PROGRAMS / "portable_forms.py")],
            cwd=REPO,
            env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert out.returncode == 0, out.stderr[-4000:]
        return json.loads(out.stdout)

    first, second = forms("1"), forms("2")
    assert first == second
    text = json.dumps(first)
    for kind in ("nnx variable", "dataclass", "identity:", "static:", "array:", "diffrax"):
        assert kind in text, kind  # (every kind of leaf was traced)
    assert len(first) >= 20


LONE = [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2), (4, 0), (4, 1), (4, 2), (4, 3)]


@pytest.mark.parametrize("n,lone", LONE, ids=[f"{n}-processes-lone-{i}" for n, i in LONE])
def test_a_lone_retrace_raises_in_the_process_that_traced_and_the_job_ends(n, lone):
    runs = _cluster(PROGRAMS / "dist_lone.py", n, str(lone), "raise", "3", seeds=False)
    for i, r in enumerate(runs):
        raised = _lines(r, "RAISED")
        if i != lone:  # (its collective failed when the lone process ended, or it ran alone;
            # JAX 0.8's coordination agent ends it itself, status 1, when process 0 was the lone)
            assert not raised and r["rc"] in (0, 1, 4), f"process {i}:\n{r['stderr'][-3000:]}"
            continue
        assert r["rc"] == 3, f"process {i}:\n{r['stderr'][-3000:]}"
        (text,) = raised
        message = json.loads(text.split(" ", 1)[1])
        assert f"process {lone} traced it, " in message
        # (JAX 0.9+ write a global array's sharding into its type, `f32[9@d,4]`; 0.8 beside it)
        lone_key = rf"→ f32\[{3 * n}(@d,4\]|,4\] \{{mesh d={n}\}}) on process {lone}\b"
        assert "`x`: f32[" in message and re.search(lone_key, message), message


def test_a_lone_retrace_is_reported_once_the_others_traced_a_later_key():
    for i, r in enumerate(_cluster(PROGRAMS / "dist_lone.py", 2, "1", "warn", "600", seeds=False)):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-3000:]}"
        (row,) = json.loads(_lines(r, "ROWS")[0])
        assert "process 1 traced it, process 0 did not, and has since gone past it" in row
        assert "abandoned" not in r["stderr"]


def test_a_lone_retrace_at_the_end_is_reported_when_every_process_stops():
    runs = _cluster(PROGRAMS / "dist_lone.py", 2, "0", "end", "600", seeds=False)
    for i, r in enumerate(runs):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-3000:]}"
    (row,) = json.loads(_lines(runs[0], "ROWS")[0])
    assert "process 0 traced it, process 1 did not, and has since gone past it" in row
    assert "abandoned" not in runs[0]["stderr"]


def test_a_comparison_still_waiting_at_stop_is_abandoned_not_waited_for():
    # (a grace of 600 s: waited for, the run would outlast the test's timeout)
    runs = _cluster(PROGRAMS / "dist_lone.py", 2, "0", "stop", "600", seeds=False)
    for i, r in enumerate(runs):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-3000:]}"
        assert json.loads(_lines(r, "ROWS")[0]) == []
    abandoned = [line for line in runs[0]["stderr"].splitlines() if "abandoned" in line]
    assert len(abandoned) == 1 and "1 comparison(s)" in abandoned[0]
    assert "abandoned" not in runs[1]["stderr"]


def test_a_false_alarm_is_withdrawn_in_every_process_when_the_late_key_matches():
    runs = _cluster(PROGRAMS / "dist_lone.py", 2, "1", "late", "3", seeds=False)
    for i, r in enumerate(runs):
        assert r["rc"] == 0, f"process {i}:\n{r['stderr'][-3000:]}"
        alarm, withdrawn = json.loads(_lines(r, "ROWS")[0])
        assert "process 0 traced it, process 1 did not within 3 s" in alarm
        assert alarm.startswith(WITHDRAWN)  # the alarm's own row, marked
        assert "compared key #1: withdrawn: every process has traced the same key" in withdrawn
        assert [line for line in _stderr_lines(r) if "withdrawn" in line] == [withdrawn]


# ------------------------------------------------------------------ the pure parts
def _key(**leaves) -> PortableKey:
    return PortableKey(tuple((path, form, text) for path, (form, text) in leaves.items()))


def test_who_differs_is_the_minority_and_a_tie_goes_to_process_0():
    reference, others = judge([Group("b", (1,)), Group("a", (0,))])
    assert reference.processes == (0,) and [g.processes for g in others] == [(1,)]
    reference, others = judge([Group("a", (0,)), Group("b", (1, 2, 3))])
    assert reference.processes == (1, 2, 3) and others[0].processes == (0,)
    reference, _ = judge([Group("a", (1,)), Group(None, (0,))])  # retraced alone: differs
    assert reference.digest is None


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_lone_tracer_differs_whatever_its_index(n):
    for lone in range(n):
        others = tuple(p for p in range(n) if p != lone)
        reference, differ = judge([Group("a", (lone,)), Group(None, others)])
        assert reference.processes == others and [g.processes for g in differ] == [(lone,)]


def _two(a: PortableKey, b: PortableKey) -> Finding:
    """The finding of process 0's key `a` against process 1's `b`."""
    return finding(
        function="f",
        location="",
        key="t.py::f",
        function_id="f",
        number=1,
        groups=[Group(a.digest(), (0,)), Group(b.digest(), (1,))],
        keys={a.digest(): a, b.digest(): b},
        grace_s=5,
    )


def test_leaves_that_read_alike_are_never_shown_as_a_change():
    a = _key(w=("node:a", "Param"), x=("array:8", "f32[8]"))
    message = _two(a, _key(w=("node:b", "Param"), x=("array:16", "f32[16]"))).message()
    assert "`x`: f32[8] on process 0 → f32[16] on process 1" in message
    assert "Param" not in message and "and 1 leaf that differs in metadata not shown" in message
    found = _two(a, _key(w=("node:c", "Param"), x=("array:8", "f32[8]")))
    assert found.message().endswith("`w`: differs in metadata not shown")
    fields = event_fields(found, 1)
    assert (fields["leaf"], fields["before"], fields["after"]) == ("w", None, None)


def test_a_withdrawal_is_reported_only_where_its_alarm_was_and_stops_a_later_one():
    reported = []
    peers = Peers(report=reported.append, fault=lambda stage, e: None)
    about = {"function": "f", "location": "", "key": "k", "number": 1, "grace_s": 3}
    alarm = Finding(**about, function_id="id", reference=(1,), reference_traced=False, divergent=())
    back = withdrawal(2, function_id="id", **about)
    assert Finding.from_json(back.to_json()) == back and "withdrawn" in back.message()
    peers._report_once(back)  # (no alarm reported here: nothing to withdraw)
    peers._report_once(alarm)  # (withdrawn already: never shown)
    assert reported == []
    other = dataclasses.replace(alarm, function_id="other")
    peers._report_once(other)
    peers._report_once(dataclasses.replace(back, function_id="other"))
    assert [f.withdrawn for f in reported] == [False, True]


def test_the_groups_travel_compactly_and_back():
    published = {0: "a", 1: "a", 2: "b", 3: "a"}
    text = encode_groups(published)
    assert json.loads(text) == {"rest": "a", "listed": {"b": [2]}}
    groups = decode_groups(text, 4)
    assert {g.digest: g.processes for g in groups} == {"a": (0, 1, 3), "b": (2,)}
    assert partial_groups({1: "a"}, 3) == [Group("a", (1,)), Group(None, (0, 2))]


def test_leaves_are_compared_by_form_and_named_by_text():
    a = _key(x=("array:('array', (8, 2), 'float32')", "f32[8,2]"), s=("static::float:2.0", "2.0"))
    b = _key(x=("array:('array', (8, 2), 'float32')", "f32[8,2]"), s=("static::float:3.0", "3.0"))
    (d,) = differing_leaves(a, b)
    assert (d.path, d.before, d.after, d.by_text) == ("s", "2.0", "3.0", False)
    assert (
        a.digest() != b.digest()
        and a.digest() == _key(**dict((p, (f, "other text")) for p, f, _ in a.leaves)).digest()
    )
    found = finding(
        function="step",
        location="t.py:1",
        key="t.py::step",
        function_id="f",
        number=2,
        groups=[Group(a.digest(), (0, 2)), Group(b.digest(), (1,))],
        keys={a.digest(): a, b.digest(): b},
        grace_s=5,
    )
    assert found.differs(1) and not found.differs(0)
    assert found.message() == (
        f"{STDERR_PREFIX} in `step` (t.py:1), compared key #2: process 1 traced another key than "
        "processes 0, 2: `s`: 2.0 on processes 0, 2 → 3.0 on process 1"
    )
    assert Finding.from_json(found.to_json()) == found


def test_static_forms_are_exact_and_the_same_in_every_process():
    from jaxtrace_nb._core._values import summarize_static
    from jaxtrace_nb._diagnosis._divergence import portable_key
    from jaxtrace_nb._keys._signature import Signature, static_leaf

    def key_of(value):
        leaf = static_leaf(summarize_static(value), "static_argnums", value)
        return portable_key(Signature(function_token=(), context=(), leaves={"v": leaf}))

    assert key_of(0.1 + 0.2).digest() != key_of(0.3).digest()  # repr round-trips: no rounding
    assert key_of(frozenset({"a", "b", "c"})).leaves == key_of(frozenset({"c", "b", "a"})).leaves
    assert key_of(1).digest() != key_of(1.0).digest()  # a static_argnums value: its type too
    assert key_of(float("nan")).leaves[0][1].startswith("text:")  # a NaN equals nothing


class _Failing:
    """A key-value client whose every operation fails (a coordinator gone)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RuntimeError(f"{name}: UNAVAILABLE")

        return fail


def test_a_failing_store_is_contained_and_counted():
    faults, reported = [], []
    peers = Peers(report=reported.append, fault=lambda stage, e: faults.append(stage))
    peers.mode = DivergenceMode.RAISE
    peers._store = Store(_Failing())
    job = Comparison(
        function="f",
        location="t.py:1",
        log_key="t.py::f",
        function_id="id",
        number=1,
        key=_key(),
        digest=_key().digest(),
        process=0,
        processes=2,
        grace_s=0.1,
    )
    assert peers._compare(job) is None
    assert faults == ["divergence"] and not reported


def test_start_refuses_an_unknown_mode():
    import jaxtrace_nb as jt

    with pytest.raises(ValueError, match="'warn', 'raise' or 'off'"):
        jt.start(divergence="loud")
    with pytest.raises(ValueError, match="positive"):
        jt.start(divergence_grace_s=0)


def test_run_takes_the_divergence_options():
    from jaxtrace_nb._integrations._cli import _parse_run, build_parser

    ns = _parse_run(build_parser(), ["--divergence=raise", "--divergence-grace", "5", "t.py", "a"])
    assert (ns.divergence, ns.divergence_grace_s, ns.script, ns.args) == (
        "raise",
        5.0,
        "t.py",
        ["a"],
    )
    with pytest.raises(SystemExit):
        _parse_run(build_parser(), ["--divergence=loud", "t.py"])


def test_the_readme_example_runs_on_one_machine():
    out = subprocess.run(
        [sys.executable, str(REPO / "notebooks" / "divergence_demo.py")],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "exit status 0" in out.stdout and "exit status 1" not in out.stdout
    assert out.stdout.count("`scale`: 2.0 on process 0 → 3.0 on process 1") == 2
    assert out.stdout.count("`x`: f32[8") == 2


def test_a_divergence_row_reads_in_the_table_escaped():
    from jaxtrace_nb._core._vocabulary import EventKind
    from jaxtrace_nb._log._events import Event
    from jaxtrace_nb._views._report import Report
    from jaxtrace_nb._views._rows import group_row
    from jaxtrace_nb._views._text import render_html, render_text

    line = f"{STDERR_PREFIX} in `f<script>` (t.py:1), compared key #1: process 1 traced another key"
    event = Event(
        kind=EventKind.DIVERGENCE,
        function="f<script>",
        key="t.py::f<script>",
        location="t.py:1",
        internal=False,
        nested=False,
        trace_number=1,
        leaf="x",
        before="f32[8,2]",
        after="f32[6,2]",
        explanation=line,
        process=0,
        seq=0,
    )
    report = Report([event], "t")
    (group,) = report.groups("t.py::f<script>")
    row = group_row(group)
    assert (row["kind"], row["cause"], row["leaf"]) == ("divergence", "across processes", "x")
    assert "f32[8,2] → f32[6,2]" in render_text(report)
    page = render_html(report)
    assert "f<script>" not in page and "f&lt;script&gt;" in page
    assert report.counts().traces == 0 and report.counts().retraces == 0
