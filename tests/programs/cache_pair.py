"""One process of a pair sharing a persistent compilation cache (tests/test_persistent_cache.py).

    python cache_pair.py CACHE_DIR WORK_DIR [LOG]

Writes a small model to WORK_DIR/model.py, records with jaxtrace_nb (persisting to LOG when
given), turns JAX's persistent cache on at CACHE_DIR (or leaves it to JAX_COMPILATION_CACHE_DIR
when CACHE_DIR is "-"), trains one step, and prints one JSON line: the outputs, and what the log
says of every compile. One change at a time comes from the environment:

    PAIR_CONST      the constant the model's closure captures (default 0.5)
    PAIR_ACT        the activation on the model's line (default jnp.tanh)
    PAIR_X64        jax_enable_x64 on
    PAIR_PRECISION  jax_default_matmul_precision
    PAIR_OPTIONS    compiler_options for jax.jit, as JSON
    PAIR_MIN_TIME   jax_persistent_cache_min_compile_time_secs (default 0)
    PAIR_NO_RECORD  no jaxtrace_nb at all (prints the loss only)
    PAIR_DEBUG_KEY  JAX's DEBUG log of each key's parts, printed as "debug_parts" (key -> {part: hash})
(and XLA_FLAGS, read by JAX itself).
"""

import json
import os
import sys

cache_dir, work = sys.argv[1], sys.argv[2]
log = sys.argv[3] if len(sys.argv) > 3 else None
os.makedirs(work, exist_ok=True)
with open(os.path.join(work, "model.py"), "w") as f:
    f.write(f"""import jax
import jax.numpy as jnp
C = {os.environ.get("PAIR_CONST", "0.5")}

def layer(w, b, x):
    return {os.environ.get("PAIR_ACT", "jnp.tanh")}(x @ w + b) * C


def step(params, x):
    for w, b in params:
        x = layer(w, b, x)
    return jnp.mean(x ** 2)
""")
sys.path.insert(0, work)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

debug_parts: dict = {}
if os.environ.get("PAIR_DEBUG_KEY"):
    import logging
    import re

    class _Parts(logging.Handler):
        """JAX's own hash of each part ("get_cache_key hash of serialized <part>: <hex>"), by key."""

        def emit(self, rec):
            found = re.match(r"get_cache_key hash of serialized (.+): ([0-9a-f]{64})$", rec.getMessage())
            if found:
                debug_parts.setdefault("pending", {})[found.group(1)] = found.group(2)

    key_logger = logging.getLogger("jax._src.cache_key")
    key_logger.setLevel(logging.DEBUG)
    key_logger.addHandler(_Parts())
    key_logger.propagate = False
    from jax import monitoring

    def _keyed(event, **kwargs):  # the key just computed: the parts logged since belong to it
        if event == "/jax/compilation_cache/compile_requests_use_cache" and "pending" in debug_parts:
            key = sys._getframe(2).f_locals.get("cache_key")
            debug_parts[key] = debug_parts.pop("pending")

    monitoring.register_event_listener(_keyed)

if os.environ.get("PAIR_NO_RECORD"):
    jt = None
else:
    import jaxtrace_nb as jt

    jt.start(persist=log)
if os.environ.get("PAIR_X64"):
    jax.config.update("jax_enable_x64", True)
if os.environ.get("PAIR_PRECISION"):
    jax.config.update("jax_default_matmul_precision", os.environ["PAIR_PRECISION"])
if cache_dir != "-":
    jax.config.update("jax_compilation_cache_dir", cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ.get("PAIR_MIN_TIME", "0")))
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

import model  # noqa: E402

options = json.loads(os.environ.get("PAIR_OPTIONS", "null"))
step = jax.jit(model.step, compiler_options=options) if options else jax.jit(model.step)
params = [(jnp.full((16, 16), 0.1), jnp.zeros(16)) for _ in range(3)]
loss = float(step(params, jnp.ones((4, 16))))
if jt is None:
    print(json.dumps({"loss": loss, "jax": jax.__version__}))
    sys.exit(0)
df = jt.log()
compiles = df[df["persistent_cache"].notna()]
print(json.dumps({
    "loss": loss, "jax": jax.__version__, "faults": jt.faults(),
    "step": [{"cache": r.persistent_cache, "hint_ids": r.hint_ids, "hint": r.hint}
             for r in compiles[compiles["function"] == "step"].itertuples()],
    "verdicts": compiles["persistent_cache"].tolist(),
    "debug_parts": {k: v for k, v in debug_parts.items() if k != "pending"},
}))
