"""A user's helper in a file of its own, for tests/test_trace_path.py: the call site of a trace it
starts is its own line (found there by the text of the comment on it), not the test's."""


def call(f, x):
    return f(x)  # the helper's call
