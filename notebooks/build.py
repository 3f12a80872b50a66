"""Execute the notebooks in a real kernel and store their outputs in place.

    python notebooks/build.py                 # every notebooks/[0-9]*.ipynb
    python notebooks/build.py 00_tour 03_...  # only these

Each notebook runs top to bottom in a fresh ``python3`` kernel with ``JAX_PLATFORMS=cpu``,
from the ``notebooks/`` folder, as a user would run it. Stored notebooks keep their outputs
(so GitHub shows them) and nothing that changes from run to run without meaning:
no per-cell timing metadata, and widget state only while it stays small.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

NOTEBOOKS_DIR = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 120
MAX_WIDGET_STATE_BYTES = 200_000
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def notebook_paths(names: list[str] | None = None) -> list[Path]:
    """The numbered notebooks (``notebooks/[0-9]*.ipynb``), or those named (stem or file name)."""
    paths = sorted(NOTEBOOKS_DIR.glob("[0-9]*.ipynb"))
    if not names:
        return paths
    wanted = {Path(name).stem for name in names}
    missing = wanted - {p.stem for p in paths}
    if missing:
        raise SystemExit(f"no such notebook(s) in {NOTEBOOKS_DIR}: {', '.join(sorted(missing))}")
    return [p for p in paths if p.stem in wanted]


def kernel_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment notebooks run in: `base` (default: this process's) on JAX's CPU backend."""
    env = dict(os.environ if base is None else base)
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    return env


def execute(nb, cwd: Path, env: dict[str, str]):
    """Run every cell of `nb` (an nbformat notebook) in place in a fresh python3 kernel in `cwd`.

    Stops at the first cell that fails, unless that cell is tagged ``raises-exception``.
    """
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        record_timing=False,
    )
    client.execute(env=env)
    return nb


def tidy(nb):
    """Keep `nb` small and stable: drop bulky widget state (the text/HTML fallbacks stay)."""
    widgets = nb.metadata.get("widgets", {})
    state = widgets.get(WIDGET_STATE)
    if state is not None and len(json.dumps(state)) > MAX_WIDGET_STATE_BYTES:
        del nb.metadata["widgets"]
        for cell in nb.cells:
            outputs = cell.get("outputs", [])
            # A widget's own output holds nothing else worth keeping: its static report follows it.
            cell["outputs"] = [o for o in outputs if WIDGET_VIEW not in o.get("data", {})]
    return nb


def main(argv: list[str]) -> int:
    """Execute the notebooks named in `argv` (default: all) and write them back with their
    outputs."""
    import nbformat

    env = kernel_env()
    for path in notebook_paths(argv):
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        execute(nb, NOTEBOOKS_DIR, env)
        nbformat.write(tidy(nb), path)
        print(
            f"{path.name}: executed in {time.perf_counter() - start:.1f} s, "
            f"{path.stat().st_size / 1000:.0f} kB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
