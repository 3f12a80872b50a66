"""`benchmarks/timed_calls.py`: its plugin counts a ``jaxtrace_nb…`` thread's CPU seconds during a
timed call when the thread runs, and none when it waits (a positive and a negative control, in a
real pytest session); its report counts tests whose outcomes differ. No timing is asserted."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from benchmarks.timed_calls import report

REPO = pathlib.Path(__file__).resolve().parent.parent

PEER_TEST = textwrap.dedent(
    """
    import threading, time, timeit

    def _spin(stop):
        while not stop.is_set():
            sum(range(1000))

    def test_busy():
        stop = threading.Event()
        thread = threading.Thread(target=_spin, args=(stop,), name="jaxtrace_nb-busy")
        thread.start()
        timeit.timeit(lambda: time.sleep(0.5), number=1)
        stop.set()
        thread.join()

    def test_idle():
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait, name="jaxtrace_nb-idle")
        thread.start()
        timeit.repeat(lambda: time.sleep(0.05), number=1, repeat=3)
        stop.set()
        thread.join()
    """
)


def test_the_plugin_counts_our_threads_cpu_during_each_timing(tmp_path):
    (tmp_path / "test_peer.py").write_text(PEER_TEST)
    out = tmp_path / "timed.json"
    env = {
        **os.environ,
        "PYTEST_PLUGINS": "benchmarks._timed_calls_plugin",
        "TIMED_CALLS_OUT": str(out),
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_peer.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["timings"]
    busy = [row for row in rows if row["test"].endswith("::test_busy")]
    idle = [row for row in rows if row["test"].endswith("::test_idle")]
    assert len(busy) == 1 and len(idle) == 3  # timeit once; each of repeat's three rounds
    assert busy[0]["ours_cpu_s"]["jaxtrace_nb-busy"] > 0
    assert all(set(row["ours_cpu_s"]) == {"jaxtrace_nb-idle"} for row in idle)
    # A thread blocked on an event uses no CPU while it waits (the clock's resolution aside).
    assert max(row["ours_cpu_s"]["jaxtrace_nb-idle"] for row in idle) < 0.001


def test_the_report_counts_tests_whose_outcomes_differ_and_flaky_ones():
    def session(number, mode, outcomes, ours=0.0):
        timings = [{"test": test, "seconds": 0.1, "ours_cpu_s": {"t": ours}} for test in outcomes]
        return {
            "round": number,
            "mode": mode,
            "outcomes": outcomes,
            "timings": timings,
            "ours_cpu_s_whole_session": {"t": 0.5} if mode == "with" else {},
        }

    text = report(
        [
            session(0, "without", {"a": "passed", "b": "passed", "c": "passed"}),
            session(0, "with", {"a": "passed", "b": "failed", "c": "passed"}, ours=0.25),
            session(1, "with", {"a": "passed", "b": "failed", "c": "failed"}),
            session(1, "without", {"a": "passed", "b": "passed", "c": "failed"}),
        ]
    )
    assert "  b: passed passed | failed failed; 0.1000 | 0.1000 over 2 timings" in text
    assert "3 tests; 1 with another set of outcomes with recording than without; 1 whose" in text
    assert "during the 6 recorded timings: 0.7500 (largest 0.2500)" in text
    assert "in each recorded session in all: 0.500, 0.500" in text
