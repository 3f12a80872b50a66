"""One process of a real `jax.distributed` run in which one process retraces alone (tests/
test_divergence.py).

    python dist_lone.py PROCESS_ID NUM_PROCESSES PORT LONE MODE GRACE

Every process calls `step` (a sum over a global batch: a collective) twice; at the second call the
process LONE's local batch is a row short, so it alone traces a new key. With MODE "raise", a
process that raises `DivergenceError` prints "RAISED <process> <message>" and ends at once with
status 3, as a job runner ends a failed job (JAX's own shutdown would wait minutes for the others,
which sit in the collective); a process whose collective fails then prints "FAILED <process>".
With MODE "warn", step 2 runs everywhere, then every process traces `after` (so every process
has moved on past step 2), stops recording and prints its divergence rows ("ROWS <json>"). MODE
"end" is "warn" without `after`: every process stops recording at once, and the lone process's
comparison still waits then; "stop" is "end" with the other processes stopping 3 s later. MODE
"late": no retrace, but LONE reaches step 1 three seconds after the grace period.
"""

import json
import os
import sys
import time

process_id, num_processes, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lone, mode, grace = int(sys.argv[4]), sys.argv[5], float(sys.argv[6])

import jax  # noqa: E402
from _dist import join  # noqa: E402

join(process_id, num_processes, port)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxtrace_nb as jt  # noqa: E402

jt.start(divergence="raise" if mode == "raise" else "warn", divergence_grace_s=grace)
mesh = jax.make_mesh((num_processes,), ("d",), devices=jax.devices())
sharding = NamedSharding(mesh, P("d"))


def global_array(rows):
    local = np.ones((rows, 4), np.float32)
    return jax.make_array_from_process_local_data(sharding, local)


@jax.jit
def step(x):
    return (x * 2).sum()


if mode == "late" and process_id == lone:
    time.sleep(grace + 3)  # (it reaches step 1 after the grace period: no retrace anywhere)
print("STEP", process_id, 1, float(step(global_array(4))), flush=True)
if mode == "late":
    jt.stop()
    rows = jt.log()
    rows = rows[rows["kind"] == "divergence"]
    print("ROWS", json.dumps(rows["explanation"].tolist()), flush=True)
    sys.exit(0)
try:
    out = step(global_array(3 if process_id == lone else 4))
    print("STEP", process_id, 2, float(out), flush=True)
except jt.DivergenceError as e:
    print("RAISED", process_id, json.dumps(str(e)), flush=True)
    os._exit(3)
except Exception as e:  # another process ended: its collective failed
    print("FAILED", process_id, type(e).__name__, flush=True)
    os._exit(4)


@jax.jit
def after(x):  # traced by every process after the lone retrace: they have all moved on
    return x * 3


if mode == "stop" and process_id != lone:
    time.sleep(3)  # (the lone process stops first, its comparison waiting: abandoned)
if mode == "warn":
    print("AFTER", process_id, float(after(global_array(4)).addressable_data(0)[0, 0]), flush=True)
jt.stop()
rows = jt.log()
rows = rows[rows["kind"] == "divergence"]
print("ROWS", json.dumps(rows["explanation"].tolist()), flush=True)
