"""Multi-process runs: one log per process, merged; what differs across processes.

The real test starts 2 processes of a `jax.distributed` run on CPU (coordinator on
127.0.0.1, a free port), each through `python -m jaxtrace_nb run --persist`; the other
tests feed `_processes.differences` hand-made events.
"""

import os
import pathlib
import socket
import subprocess
import sys
import types

import pytest
from _support import free_port, report_command, run_command

import jaxtrace_nb as jt
from jaxtrace_nb._diagnosis._processes import (
    Difference,
    differences,
    parse_signature_column,
    render_html_section,
    render_text_section,
    signature_column,
)
from jaxtrace_nb._log._events import COLUMNS, Event
from jaxtrace_nb._log._persist import load_events
from jaxtrace_nb._views._frames import events_frame

PROGRAMS = pathlib.Path(__file__).parent / "programs"
REPO = PROGRAMS.parent.parent
HAS_SIGNATURE = "signature" in COLUMNS


def _run_processes(tmp_path, n: int, timeout: float = 150) -> list[pathlib.Path]:
    port = free_port()
    logs = [tmp_path / f"p{i}.jsonl" for i in range(n)]
    procs = [
        run_command("--persist", logs[i], PROGRAMS / "dist_step.py", i, n, port) for i in range(n)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (p, (out, err)) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"process {i}: {err[-3000:]}"
        assert out.split()[:3] == [
            str(i),
            str(i),
            str(n),
        ]  # process_id, jax.process_index(), process_count()
    return logs


@pytest.fixture(scope="module")
def two_process_logs(tmp_path_factory):
    return _run_processes(tmp_path_factory.mktemp("dist"), 2)


def test_each_process_logs_its_own_index(two_process_logs):
    for i, log in enumerate(two_process_logs):
        events = load_events(log)
        assert events and {e.process for e in events} == {i}
        assert {e.host for e in events} == {socket.gethostname()}
    df = jt.load([str(p) for p in two_process_logs])
    assert sorted(df["process"].unique().tolist()) == [0, 1]
    assert df["time"].is_monotonic_increasing


def test_differs_across_processes_names_function_leaf_and_values(two_process_logs):
    events = [e for p in two_process_logs for e in load_events(p)]
    diffs = differences(events)
    by_function = {(d.function, d.trace_number): d for d in diffs}
    # The ragged last batch of process 1: a retrace only there.
    ragged = by_function[("train_step", 2)]
    assert ragged.leaf == "x"
    assert ragged.values == (
        ("process 0", "(no trace #2)"),
        ("process 1", "f32[8,3] → f32[5,3] (shape)"),
    )
    # A different batch at the first trace of eval_step.
    first = by_function[("eval_step", 1)]
    if HAS_SIGNATURE:
        assert (first.leaf, first.basis) == ("x", "arguments")
        assert first.values == (("process 0", "f32[8,3]"), ("process 1", "f32[4,3]"))
    else:  # without the signature column only the argument bytes XLA reported tell them apart
        assert (first.leaf, first.basis) == (None, "argument bytes")
        assert first.values == (
            ("process 0", "arguments: 108 bytes"),
            ("process 1", "arguments: 60 bytes"),
        )
    assert len(diffs) == 2
    # The DataFrame of jt.load gives the same answer.
    assert differences(jt.load([str(p) for p in two_process_logs])) == diffs
    text = render_text_section(diffs)
    assert text.startswith("Differs across processes:")
    assert (
        "train_step" in text and "`x`" in text and "process 1: f32[8,3] → f32[5,3] (shape)" in text
    )
    assert "process 0: (no trace #2)" in text


def test_report_command_shows_the_section(two_process_logs):
    out = report_command(two_process_logs)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("p0.jsonl, p1.jsonl (processes 0, 1): ")
    assert (
        "Differs across processes:" in out.stdout
        and "process 1: f32[8,3] → f32[5,3] (shape)" in out.stdout
    )


def test_a_trace_before_distributed_initialize_is_left_alone(tmp_path):
    log = tmp_path / "p.jsonl"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrace_nb",
            "run",
            "--persist",
            str(log),
            str(PROGRAMS / "trace_then_initialize.py"),
            str(free_port()),
        ],
        cwd=REPO,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert "backends initialized by the trace: False" in out.stdout
    assert out.returncode == 0, out.stderr[-2000:]
    assert "process 0 of 1 6.0" in out.stdout
    events = [(e.function, e.kind, e.process) for e in load_events(log) if not e.internal]
    # The trace ran before the process had an index; it is the same process as the compile after
    # initialize, which has it (a persisted run is one process).
    assert events == [("<lambda>", "trace", 0), ("<lambda>", "compile", 0)]


# ------------------------------------------------------------------ pure
def _event(
    process,
    function="step",
    n=1,
    cause="first",
    leaf=None,
    before=None,
    after=None,
    host="h",
    signature=None,
    internal=False,
    kind="trace",
    arg_bytes=None,
):
    fields = dict(
        function=function,
        location="/a/train.py:3",
        kind=kind,
        internal=internal,
        trace_number=n,
        cause=cause,
        leaf=leaf,
        before=before,
        after=after,
        key="/a/train.py::" + function,
        host=host,
        process=process,
        arg_bytes=arg_bytes,
    )
    if signature is None:
        return Event(**fields)
    fields["signature"] = signature
    if HAS_SIGNATURE:
        return Event(**fields)
    return types.SimpleNamespace(**{**{c: None for c in COLUMNS}, **fields})  # the column proposed


def test_signature_column_round_trip_and_bound():
    text = signature_column({"x": "f32[8,3]", "model.fn": "<function g>"})
    assert parse_signature_column(text) == {"x": "f32[8,3]", "model.fn": "<function g>"}
    big = signature_column({f"w[{i}]": "f32[1024,1024]" for i in range(1000)}, max_chars=500)
    assert len(big) <= 520 and parse_signature_column(big)["…"].endswith("more leaves")
    assert parse_signature_column(None) is None and parse_signature_column("not json") is None


def test_first_traces_compared_by_signature():
    events = [
        _event(0, signature=signature_column({"x": "f32[8,3]", "s": "1"})),
        _event(1, signature=signature_column({"x": "f32[4,3]", "s": "1"})),
        _event(2, signature=signature_column({"x": "f32[8,3]", "s": "1"})),
    ]
    diffs = differences(events)
    assert diffs == [
        Difference(
            "step",
            "/a/train.py:3",
            1,
            "x",
            (("process 0", "f32[8,3]"), ("process 1", "f32[4,3]"), ("process 2", "f32[8,3]")),
            "arguments",
        )
    ]
    text = render_text_section(diffs)
    assert "processes 0, 2: f32[8,3]" in text and "process 1: f32[4,3]" in text


def test_without_signature_a_first_trace_difference_is_only_seen_through_bytes():
    same_bytes = [_event(0, arg_bytes=96), _event(1, arg_bytes=96)]
    assert differences(same_bytes) == []  # f32[8,3] vs f32[4,6]: honest, not detectable
    assert (
        differences([_event(0, arg_bytes=96), _event(1, arg_bytes=48)])[0].basis == "argument bytes"
    )
    assert differences([_event(0), _event(1)]) == []


def test_retraces_for_different_reasons_and_missing_functions():
    events = [
        _event(0),
        _event(1),
        _event(0, n=2, cause="shape", leaf="x", before="f32[8]", after="f32[5]"),
        _event(1, n=2, cause="static", leaf="mode", before="'train'", after="'eval'"),
        _event(0, function="log_metrics"),
    ]
    diffs = differences(events)
    assert [(d.function, d.trace_number, d.leaf) for d in diffs] == [
        ("step", 2, "x"),
        ("step", 2, "mode"),
        ("log_metrics", 1, None),
    ]
    assert diffs[0].values == (
        ("process 0", "f32[8] → f32[5] (shape)"),
        ("process 1", "retraced for static at `mode`"),
    )
    assert diffs[2].values == (("process 0", "traced"), ("process 1", "(never traced)"))


def test_one_process_internal_and_compile_events_are_ignored():
    assert (
        differences([_event(0), _event(0, n=2, cause="shape", leaf="x", before="a", after="b")])
        == []
    )
    events = [
        _event(0),
        _event(1),
        _event(0, function="add", internal=True),
        _event(1, function="step", n=1, kind="compile", cause="sharding", leaf="x"),
    ]
    assert differences(events) == []


def test_hosts_and_escaping():
    events = [
        _event(0, host="node-a"),
        _event(0, host="node-b"),
        _event(
            0,
            n=2,
            cause="shape",
            leaf="<script>alert(1)</script>",
            before="f32[1]",
            after="f32[2]",
            host="node-a",
        ),
    ]
    diffs = differences(events)
    assert (
        diffs[0].values[0][0] == "process 0 (node-a)"
        and diffs[0].values[1][0] == "process 0 (node-b)"
    )
    html = render_html_section(diffs)
    assert (
        "<script>" not in html and "&lt;script&gt;" in html and "Differs across processes" in html
    )
    assert render_html_section([]) == "" and render_text_section([]) == ""


def test_dataframe_input_with_missing_values():
    events = [
        _event(0),
        _event(1),
        _event(1, n=2, cause="shape", leaf="x", before="f32[8]", after="f32[5]"),
    ]
    assert differences(events_frame(events)) == differences(events)
    assert differences(events)[0].values == (
        ("process 0", "(no trace #2)"),
        ("process 1", "f32[8] → f32[5] (shape)"),
    )
