"""What the stand-alone benchmark scripts share: the commit measured, the machine line of a results
file's header, and writing the results (`.txt` for the docs, `.json` for the raw runs)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def commit() -> str:
    """The short hash of the commit the working tree is at."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_line(jax_version: str, measured: str, load_before: str, started: float) -> str:
    """The header's second line: the machine, the versions, the commit, the load and the wall."""
    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
        f"{platform.python_version()}; jax {jax_version}; commit {measured}; load average before / "
        f"after: {load_before} / {load()}; wall {time.perf_counter() - started:.0f} s"
    )


def write(out: str, stem: str, text: str, data: dict) -> None:
    """`text` to ``<out>/<stem>.txt`` and `data` to ``<out>/<stem>.json``; the text printed too."""
    print(text)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, stem + ".txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, stem + ".json"), "w") as f:
        json.dump(data, f, indent=1)
