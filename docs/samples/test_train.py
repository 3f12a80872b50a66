import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.1 * jnp.mean(x @ w) * w


def test_train():
    w = jnp.ones(3)
    for rows in (32, 32, 32):
        w = train_step(w, jnp.ones((rows, 3)))
