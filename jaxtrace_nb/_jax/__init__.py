"""Every read of JAX's internals, in one place: ``jax._src`` modules, the names and locals of
JAX's functions while they run, the persistent cache key as JAX computes it. A JAX release is
ported here; `_reads.READS` names each read with the JAX versions it was checked on. Imports
nothing of the package but `_core`.
"""
