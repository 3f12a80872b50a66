import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)

for rows in (32, 32, 32, 17):  # the last batch is short
    loss = train_step(jnp.ones((3, 2)), jnp.ones((rows, 3)))
print("done", float(loss))
