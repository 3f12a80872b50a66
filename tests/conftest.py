import os
import sys

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


@pytest.fixture
def shell():
    """A real IPython InteractiveShell whose displays are captured; the extension unloaded after."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    import jaxtrace_nb

    jaxtrace_nb.reset()
    sh = InteractiveShell.instance()
    publisher = CapturingDisplayPublisher()
    old = sh.display_pub
    sh.display_pub = publisher
    sh.run_cell("import jax, jax.numpy as jnp")
    yield sh
    sh.run_cell("%unload_ext jaxtrace_nb")
    sh.display_pub = old
    jaxtrace_nb.reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """No test may leave a trace with cause `unknown` in this process's log, unless it clears or
    evicts JAX's caches on purpose (`@pytest.mark.allows_unknown`): `unknown` means "the key JAX
    caches on is identical to an earlier one", never "could not tell". And no diagnosis may break
    the runtime check that JAX's own comparison backs it (`_diagnosis.checked`), unless the test
    breaks it on purpose (`@pytest.mark.breaks_invariant`)."""
    jt = sys.modules.get("jaxtrace_nb")
    invariant_before = jt.faults().get("invariant", 0) if jt is not None else 0
    result = yield
    jt = sys.modules.get("jaxtrace_nb")  # a test that never imported it recorded nothing
    if jt is None:
        return result
    broken = jt.faults().get("invariant", 0) - invariant_before
    if broken > 0 and item.get_closest_marker("breaks_invariant") is None:
        pytest.fail(
            f"{broken} diagnosis(es) that JAX's own comparison does not back "
            "(jt.faults()['invariant'])",
            pytrace=False,
        )
    if item.get_closest_marker("allows_unknown") is not None:
        return result
    unknown = [e for e in jt.get_session().log.events() if e.cause == "unknown"]
    if unknown:
        e = unknown[0]
        pytest.fail(
            f"{len(unknown)} trace(s) with cause 'unknown', first {e.function!r} "
            f"#{e.trace_number}: {e.explanation}",
            pytrace=False,
        )
    return result
