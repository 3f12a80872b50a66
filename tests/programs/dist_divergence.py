"""One process of a real `jax.distributed` run on CPU whose processes diverge on purpose
(tests/test_divergence.py).

    python dist_divergence.py PROCESS_ID NUM_PROCESSES PORT SCENARIO [LOG]

SCENARIO "two": recording (if any) started before `jax.distributed.initialize` by
`python -m jaxtrace_nb run`; the same `same` on both processes; `local_only` over process-local
arrays on process 0 only; `step(x, scale)` with scale 3.0 on process 1 at step 2 (2.0 elsewhere);
`batch_sum` with process 1's local batch one row short. Run without jaxtrace_nb too: its results
must be the same.
SCENARIO "four": recording started after initialize with ``divergence="raise"``; `same` everywhere;
`double` with float16 local data on process 3 only, which raises DivergenceError there.

Each process prints lines "RESULT ..." (the program's results), and, when recording, "ROWS <json>"
(its log's divergence rows), "KEYS <json>" (the key-value store's keys under jaxtrace_nb/) and, in
"two", "HIT_FRAMES" (how many calls of jaxtrace_nb's code 20 cache-hit calls made on this thread).
"""

import functools
import json
import sys

process_id, num_processes, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
scenario = sys.argv[4]
log = sys.argv[5] if len(sys.argv) > 5 else None

import jax  # noqa: E402
from _dist import join  # noqa: E402

join(process_id, num_processes, port)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

recording = "jaxtrace_nb" in sys.modules or scenario == "four"
if scenario == "four":
    import jaxtrace_nb as jt

    jt.start(persist=log, divergence="raise", divergence_grace_s=20)
mesh = jax.make_mesh((num_processes,), ("d",), devices=jax.devices())
sharding = NamedSharding(mesh, P("d"))


def global_array(rows, dtype=np.float32):
    local = np.arange(rows * 2, dtype=dtype).reshape(rows, 2) + process_id
    return jax.make_array_from_process_local_data(sharding, local)


@jax.jit
def same(x):
    return x * 2 + 1


def result(name, value):
    print("RESULT", process_id, name, json.dumps(np.asarray(value).tolist()), flush=True)


def gathered(x):
    return jax.experimental.multihost_utils.process_allgather(x, tiled=True)


import jax.experimental.multihost_utils  # noqa: E402

for rows in (4, 4, 2):  # a retrace on every process alike: nothing to report
    result("same", gathered(same(global_array(rows))))

if scenario == "two" and recording:  # cache-hit calls of a compared function: none of our code runs
    import os

    import jaxtrace_nb

    package = os.path.dirname(jaxtrace_nb.__file__) + os.sep
    ours = []
    x = global_array(4)

    def profile(frame, event, arg):
        if frame.f_code.co_filename.startswith(package):
            ours.append(frame.f_code.co_name)

    sys.setprofile(profile)
    for _ in range(20):
        same(x)
    sys.setprofile(None)
    print("HIT_FRAMES", process_id, len(ours), flush=True)

if scenario == "two":

    @jax.jit
    def local_only(y):
        return y.sum()

    if process_id == 0:  # process-local arrays, one process only: never compared
        result("local_only", local_only(np.ones(3, np.float32)))
        result("local_only", local_only(np.ones(5, np.float32)))

    @functools.partial(jax.jit, static_argnums=1)
    def step(x, scale):
        return (x * scale).sum()

    x = global_array(4)
    for i in range(3):
        scale = 3.0 if (process_id == 1 and i == 2) else 2.0
        result(f"step{i}", step(x, scale))

    @jax.jit
    def batch_sum(x):
        return x.sum()

    result("batch_sum", batch_sum(global_array(3 if process_id == 1 else 4)))

if scenario == "four":
    body_traced = []

    @jax.jit
    def double(x):
        body_traced.append(1)
        return x * 2

    try:  # elementwise: no collective, so the others need not wait for process 3
        doubled = double(global_array(4, np.float16 if process_id == 3 else np.float32))
        result("double", doubled.addressable_data(0))
    except jt.DivergenceError as e:
        print("RAISED", process_id, len(body_traced), json.dumps(str(e)), flush=True)

if recording:
    import jaxtrace_nb as jt

    jt.stop()  # every process's findings reported here before it returns
    rows = jt.log()
    rows = rows[rows["kind"] == "divergence"]
    cols = ["function", "leaf", "before", "after", "explanation", "process", "trace_number"]
    print("ROWS", json.dumps(rows[cols].astype(object).where(rows[cols].notna(), None).values.tolist()), flush=True)
    from jax._src import distributed

    keys = [k for k, _ in distributed.global_state.client.key_value_dir_get("jaxtrace_nb/")]
    print("KEYS", json.dumps(keys), flush=True)
