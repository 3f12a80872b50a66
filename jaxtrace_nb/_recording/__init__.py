"""Recording from JAX: the probe's hooks and listeners, each trace from its start to its event,
what a program costs, and the session that owns them.
"""
