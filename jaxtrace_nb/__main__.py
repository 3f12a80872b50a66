"""``python -m jaxtrace_nb run ...`` / ``report ...``: see :mod:`jaxtrace_nb._integrations._cli`."""

import sys

from jaxtrace_nb._integrations._cli import main

if __name__ == "__main__":
    sys.exit(main())
