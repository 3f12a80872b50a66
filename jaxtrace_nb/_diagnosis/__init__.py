"""Why a trace happened: causes, explanations, hints, changes between keys, programs and processes
compared (pure, no JAX).
"""
