"""The live comparison across processes (issue 45) at scale: key-value operations and seconds per
trace for 2 to 1,000 processes, simulated.

    python benchmarks/divergence_scale.py   # -> benchmarks/results/divergence-scale-<commit>.txt
    python benchmarks/divergence_scale.py --processes 2,8 --out /tmp

1. **The real store's round trips.** A one-process `jax.distributed` run on this machine (JAX's own
   coordination service on localhost); each operation the comparison uses (``key_value_set``,
   ``key_value_increment``, ``blocking_key_value_get`` of a key that is there, ``key_value_dir_get``
   of a directory of 1,000 entries) timed 200 times: the medians.
2. **The protocol, simulated.** N threads, one per process, each running jaxtrace_nb's own
   comparison (`_peers.Peers._compare`, unchanged) for one trace of one function, at once, against
   an in-memory store with the key-value client's API whose every operation takes the round trip
   measured in 1 (a thread sleeps meanwhile). Counted per process by the comparison's own `Store`:
   operations and bytes; timed: the wall seconds from the start until every process has its answer.
   Two cases: every process traced the same key (16 argument leaves), and one process's static
   value differs (its leaf named in every process).

What the simulation leaves out: the network between hosts (a round trip here is localhost's), the
coordinator's own limits under a thousand connections, and the processes' skew (they all trace at
once here; in a real run the wait is for the slowest process). Its seconds are those of N Python
threads on this machine's cores, so they over-state a real run's per-process work. This script
asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))

from jaxtrace_nb._core._vocabulary import DivergenceMode  # noqa: E402
from jaxtrace_nb._diagnosis._divergence import PortableKey  # noqa: E402
from jaxtrace_nb._recording._peers import Comparison, Peers, Store  # noqa: E402

LEAVES = 16
REPEATS = 200


class SimulatedStore:
    """JAX's key-value client's API in memory; each operation takes its measured round trip."""

    def __init__(self, latency: dict[str, float]):
        self.latency = latency
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()
        self.arrived: dict[str, threading.Event] = {}

    def _event(self, key: str) -> threading.Event:
        with self.lock:
            return self.arrived.setdefault(key, threading.Event())

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        time.sleep(self.latency["set"])
        with self.lock:
            if key in self.data and not allow_overwrite:
                raise RuntimeError(f"ALREADY_EXISTS: {key}")
            self.data[key] = value
        self._event(key).set()

    def key_value_increment(self, key: str, increment: int) -> int:
        time.sleep(self.latency["increment"])
        with self.lock:
            value = int(self.data.get(key, "0")) + increment
            self.data[key] = str(value)
        return value

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        time.sleep(self.latency["blocking_get"])
        if not self._event(key).wait(timeout_ms / 1000):
            raise TimeoutError(f"DEADLINE_EXCEEDED: {key}")
        return self.data[key]

    def key_value_dir_get(self, prefix: str) -> list[tuple[str, str]]:
        time.sleep(self.latency["dir_get"])
        with self.lock:
            return [(k, v) for k, v in self.data.items() if k.startswith(prefix)]

    def key_value_try_get(self, key: str) -> str:
        time.sleep(self.latency["set"])
        with self.lock:
            return self.data[key]


def _key(scale: str) -> PortableKey:
    leaves = [
        (f"params['w{i}']", "array:('array', (512, 512), 'float32')", "f32[512,512]")
        for i in range(LEAVES - 1)
    ]
    leaves.append(("scale", f"static::float:{scale}", scale))
    return PortableKey(tuple(leaves))


def simulate(processes: int, latency: dict[str, float], differs: bool) -> dict:
    store = SimulatedStore(latency)
    found: list = []
    peers, jobs = [], []
    for p in range(processes):
        peer = Peers(report=found.append, fault=lambda stage, e: found.append(e))
        peer.mode = DivergenceMode.WARN
        peer._store = Store(store)
        key = _key("3.0" if differs and p == processes - 1 else "2.0")
        jobs.append(
            Comparison(
                function="step",
                location="train.py:1",
                log_key="train.py::step",
                function_id="f",
                number=1,
                key=key,
                digest=key.digest(),
                process=p,
                processes=processes,
                grace_s=60.0,
            )
        )
        peers.append(peer)
    threads = [
        threading.Thread(target=peer._compare, args=(job,)) for peer, job in zip(peers, jobs)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    ops = [sum(peer._store.operations.values()) for peer in peers]
    sent = [peer._store.bytes for peer in peers]
    errors = [f for f in found if isinstance(f, BaseException)]
    assert not errors, errors
    named = {f.divergent[0].leaves[0].path for f in found} if differs else set()
    return {
        "processes": processes,
        "differs": differs,
        "seconds": seconds,
        "ops_per_process_mean": statistics.mean(ops),
        "ops_per_process_max": max(ops),
        "ops_total": sum(ops),
        "bytes_per_process_mean": statistics.mean(sent),
        "bytes_per_process_max": max(sent),
        "bytes_total": sum(sent),
        "reported_in": len([f for f in found if not isinstance(f, BaseException)]),
        "named": sorted(named),
    }


def measure_store() -> dict[str, float]:
    """Median seconds of each operation on JAX's real coordination service (one process,
    localhost)."""
    import jax

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}", num_processes=1, process_id=0
    )
    from jax._src import distributed

    client = distributed.global_state.client
    for i in range(1000):
        client.key_value_set(f"bench/dir/{i}", "0123456789abcdef0123456789abcdef")

    def timed(fn) -> float:
        samples = []
        for i in range(REPEATS):
            t = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    out = {
        "set": timed(
            lambda i: client.key_value_set(f"bench/set/{i}", "0123456789abcdef0123456789abcdef")
        ),
        "increment": timed(lambda i: client.key_value_increment("bench/count", 1)),
        "blocking_get": timed(lambda i: client.blocking_key_value_get("bench/dir/1", 1000)),
        "dir_get": timed(lambda i: client.key_value_dir_get("bench/dir/")),
    }
    jax.distributed.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="2,8,64,1000")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    import jax

    commit = _results.commit()
    started = time.perf_counter()
    load_before = _results.load()
    latency = measure_store()
    runs = [
        simulate(int(n), latency, differs)
        for n in args.processes.split(",")
        for differs in (False, True)
    ]
    lines = [
        f"jaxtrace_nb divergence scale — {datetime.datetime.now().isoformat(timespec='seconds')}",
        _results.machine_line(jax.__version__, commit, load_before, started),
        f"command: python benchmarks/divergence_scale.py --processes {args.processes}",
        "",
        "JAX's coordination service on localhost, median of "
        f"{REPEATS}: " + ", ".join(f"{op} {s * 1e6:.0f} µs" for op, s in latency.items()),
        "",
        "| processes | case | KV operations per process (mean / max) | "
        "KV operations per trace, all processes | "
        "bytes per process (mean / max) | bytes per trace, all processes | "
        "seconds per trace (simulated) | "
        "reported in | leaf named |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        lines.append(
            f"| {r['processes']} | {'one differs' if r['differs'] else 'all agree'} | "
            f"{r['ops_per_process_mean']:.3f} / {r['ops_per_process_max']} | {r['ops_total']} | "
            f"{r['bytes_per_process_mean']:.1f} / {r['bytes_per_process_max']} | "
            f"{r['bytes_total']} | "
            f"{r['seconds']:.3f} | {r['reported_in']} | {', '.join(r['named']) or '—'} |"
        )
    text = "\n".join(lines) + "\n"
    data = {"commit": commit, "latency_s": latency, "runs": runs}
    _results.write(args.out, f"divergence-scale-{commit}", text, data)


if __name__ == "__main__":
    main()
