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
