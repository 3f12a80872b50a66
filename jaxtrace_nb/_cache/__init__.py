"""JAX's persistent compilation cache: each key's parts read as JAX computes them, the index beside
the cache, and its misses explained across runs.
"""
