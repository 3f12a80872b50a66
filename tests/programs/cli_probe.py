"""Run by tests/test_cli.py as `python cli_probe.py MODE ...` and as
`python -m jaxtrace_nb run cli_probe.py MODE ...`: everything it prints must be the same."""

import os
import sys

print("jax imported before the program:", "jax" in sys.modules)
os.environ["JAX_ENABLE_X64"] = "1"  # JAX reads it at import: recording must not import JAX first
print("argv", sys.argv)
print("path0", sys.path[0])
print("main", __name__, __file__, __package__, __spec__, sys.modules["__main__"].__dict__ is globals())

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

print("dtype", jnp.ones(1).dtype)


@jax.jit
def step(x, scale):
    return x * scale


for n in (3, 4):
    print("sum", float(step(jnp.ones(n), 2.0).sum()))
sys.stdout.flush()

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"


def inner():
    try:
        1 / 0
    except ZeroDivisionError as e:
        raise ValueError("boom in the program") from e


if mode == "raise":
    inner()
elif mode == "exit3":
    sys.exit(3)
elif mode == "exit_message":
    sys.exit("the program's own exit message")
elif mode == "interrupt":
    raise KeyboardInterrupt
print("end of program")
