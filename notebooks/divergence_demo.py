"""Two processes of one `jax.distributed` run that compile different programs, named while they run.

    python notebooks/divergence_demo.py

Runs on one machine, CPU only: it starts two local processes of itself (a coordinator on localhost,
gloo collectives, one global array over both processes' devices), each under
``python -m jaxtrace_nb run``. Process 1 passes ``scale=3.0`` at step 2 where process 0 passes 2.0,
and its last local batch is one row short. Neither mistake stops the run; jaxtrace_nb prints, in
both processes, which function, which processes and which leaf, with both values.
"""

import functools
import os
import socket
import subprocess
import sys


def process(process_id: int, port: int) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id
    )
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("d",), devices=jax.devices())
    sharding = NamedSharding(mesh, P("d"))

    def batch(rows):
        local = np.ones((rows, 2), np.float32)
        return jax.make_array_from_process_local_data(sharding, local)

    @functools.partial(jax.jit, static_argnums=1)
    def step(x, scale):
        return (x * scale).sum()

    for i in range(3):
        scale = 3.0 if process_id == 1 and i == 2 else 2.0  # a host-local setting gone wrong
        print(f"process {process_id} step {i}: {float(step(batch(4), scale))}", flush=True)

    @jax.jit
    def evaluate(x):
        return x.mean()

    rows = 3 if process_id == 1 else 4  # the last batch, one row short on process 1
    print(f"process {process_id} evaluate: {float(evaluate(batch(rows)))}", flush=True)


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here), env.get("PYTHONPATH", "")])
    run = [sys.executable, "-m", "jaxtrace_nb", "run", "--divergence-grace", "5"]
    children = [
        subprocess.Popen(
            [*run, os.path.abspath(__file__), "--process", str(i), str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for i, child in enumerate(children):
        out, err = child.communicate(timeout=300)
        print(f"--- process {i} (exit status {child.returncode})")
        print(out, end="")
        for line in err.splitlines():
            if line.startswith("jaxtrace_nb: divergence"):
                print(line)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--process"]:
        process(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
