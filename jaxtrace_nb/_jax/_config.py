"""A configuration of jaxtrace_nb's own, for the self-check's canary traces.

The canary's expectations (a Python float is ``f32[] (weak)``, ``int32 + float32`` promotes)
hold in JAX's default configuration; a user's ``jax_enable_x64``, strict dtype promotion and the
like would change what the canary records, not whether the probe reads JAX right. So the canary
runs with every option that can change what it traces, or print beside it, set to JAX's default,
through each option's own context manager: thread-local, on this thread only, and restored after
(the user's configuration and other threads are untouched).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

# JAX's defaults of the options that change a traced value's type, how types promote, what a
# trace checks or prints (checked on JAX 0.8.0, 0.10.2 and 0.11.0's ``jax/_src/config.py``).
DEFAULTS = {
    "jax_enable_x64": False,
    "jax_numpy_dtype_promotion": "standard",
    "jax_numpy_rank_promotion": "allow",
    "jax_default_matmul_precision": None,
    "jax_enable_checks": False,
    "jax_debug_nans": False,
    "jax_debug_infs": False,
    "jax_disable_jit": False,
    "jax_explain_cache_misses": False,
    "jax_log_compiles": False,
    "jax_check_tracer_leaks": False,
}


@contextlib.contextmanager
def own_configuration() -> Iterator[None]:
    """JAX's default for each option of `DEFAULTS` this JAX has, on this thread, inside the block.

    An option this JAX lacks is left out; one whose context manager cannot be entered too.

    ```python
    with own_configuration():
        jax.jit(f).trace(1.0)  # x: f32[] (weak), whatever jax_enable_x64 says outside
    ```
    """
    try:
        from jax._src import config

        states = dict(getattr(config, "config_states", {}) or {})
    except Exception:
        states = {}
    with contextlib.ExitStack() as stack:
        for name, value in DEFAULTS.items():
            state = states.get(name)
            if state is None:
                continue
            try:
                stack.enter_context(state(value))
            except Exception:
                continue
        yield
