"""Joins this process to a `jax.distributed` run of local CPU processes (gloo collectives, the
coordinator on localhost), for the programs of tests/test_divergence.py."""

import jax


def join(process_id: int, num_processes: int, port: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )
