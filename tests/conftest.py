import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402


@pytest.fixture
def jt():
    """The jaxtrace_nb API, recording, with a clean log; stopped and reset afterwards."""
    import jaxtrace_nb

    jaxtrace_nb.reset()
    jaxtrace_nb.start()
    yield jaxtrace_nb
    jaxtrace_nb.stop()
    jaxtrace_nb.reset()


def rows(jt, function=None):
    """Non-internal trace events as (function, cause, leaf, before, after) tuples."""
    df = jt.log(internal=False)
    df = df[df["kind"] == "trace"]
    if function is not None:
        df = df[df["function"] == function]
    return [tuple(None if v is None or v != v else v for v in r)
            for r in df[["function", "cause", "leaf", "before", "after"]].itertuples(index=False)]
