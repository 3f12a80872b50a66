"""Programs of varying size and kind for `eqns_vs_compile.py`: Equinox transformers, MLPs, unrolled
loops, scans, convolutions (from the research for issue 30)."""

import equinox as eqx
import jax
import jax.numpy as jnp


class Block(eqx.Module):
    ln1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    ln2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, d, heads, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.ln1 = eqx.nn.LayerNorm(d)
        self.attn = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.ln2 = eqx.nn.LayerNorm(d)
        self.up = eqx.nn.Linear(d, 4 * d, key=k2)
        self.down = eqx.nn.Linear(4 * d, d, key=k3)

    def __call__(self, x, mask):
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h, mask=mask)  # attention line
        h = jax.vmap(self.ln2)(x)
        x = x + jax.vmap(lambda t: self.down(jax.nn.gelu(self.up(t))))(h)  # MLP line
        return x


class Transformer(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list
    ln: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, vocab, d, heads, n_blocks, key):
        keys = jax.random.split(key, n_blocks + 2)
        self.embed = eqx.nn.Embedding(vocab, d, key=keys[0])
        self.blocks = [Block(d, heads, k) for k in keys[1:-1]]
        self.ln = eqx.nn.LayerNorm(d)
        self.head = eqx.nn.Linear(d, vocab, key=keys[-1])

    def __call__(self, tokens):
        x = jax.vmap(self.embed)(tokens)
        n = tokens.shape[0]
        mask = jnp.tril(jnp.ones((n, n), bool))
        for block in self.blocks:
            x = block(x, mask)
        return jax.vmap(self.head)(jax.vmap(self.ln)(x))


def lm_loss(model, tokens, targets):
    logits = jax.vmap(model)(tokens)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def transformer_step(n_blocks=4, d=64, heads=4, seq=32, batch=4, vocab=256, grad=True):
    model = Transformer(vocab, d, heads, n_blocks, jax.random.PRNGKey(0))
    tokens = jnp.zeros((batch, seq), jnp.int32)
    if grad:
        f = eqx.filter_jit(eqx.filter_value_and_grad(lm_loss))
    else:
        f = eqx.filter_jit(lm_loss)
    return f, (model, tokens, tokens)


def mlp_step(depth=8, width=256, batch=32, grad=True):
    keys = jax.random.split(jax.random.PRNGKey(1), depth)
    params = [(jax.random.normal(k, (width, width)) * 0.05, jnp.zeros(width)) for k in keys]
    x = jnp.ones((batch, width))

    def loss(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return jnp.mean(x**2)

    f = jax.jit(jax.value_and_grad(loss)) if grad else jax.jit(loss)
    return f, (params, x)


def velocity(state):
    position, speed = state
    return jnp.stack([speed, -jnp.sin(position) - 0.1 * speed])


def unrolled_step(steps=100):
    def simulate(state, dt):
        for _ in range(steps):  # unrolled loop line
            state = state + dt * velocity(state)
        return state

    simulate.__name__ = f"simulate_{steps}"
    return jax.jit(simulate), (jnp.array([1.0, 0.0]), 0.05)


def scan_step(steps=100, width=64, layers=1):
    w = jnp.eye(width) * 0.9

    def run(x, w):
        def body(c, _):
            for _ in range(layers):
                c = jnp.tanh(c @ w) + 0.1 * jnp.sin(c)
            return c, c.sum()

        c, ys = jax.lax.scan(body, x, None, length=steps)
        return c, ys

    return jax.jit(jax.value_and_grad(lambda x, w: run(x, w)[1].sum())), (jnp.ones(width), w)


def conv_step(depth=4, ch=16, size=32):
    keys = jax.random.split(jax.random.PRNGKey(2), depth)
    convs = [
        eqx.nn.Conv2d(3 if i == 0 else ch, ch, 3, padding=1, key=k) for i, k in enumerate(keys)
    ]
    x = jnp.ones((8, 3, size, size))

    def loss(convs, x):
        def one(x):
            for c in convs:
                x = jax.nn.relu(c(x))
            return x.mean()

        return jax.vmap(one)(x).mean()

    return eqx.filter_jit(eqx.filter_value_and_grad(loss)), (convs, x)
