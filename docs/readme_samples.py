"""Write, or check, the README's sample outputs from real runs of their programs.

    python docs/readme_samples.py            # run each sample and write its output into README.md
    python docs/readme_samples.py --check    # run each sample; exit 1 if README.md says otherwise

A sample is a ```text block of README.md right after a line ``<!-- sample: NAME -->``. Its output
comes from (`SAMPLES`):

* ``ipython-demo``: the README's own ```python block just above it, run as ``demo.ipy`` in terminal
  IPython (``ipython --ext=jaxtrace_nb demo.ipy``), as the README says;
* ``run``: ``python -m jaxtrace_nb run --persist traces.jsonl train.py`` on `docs/samples/train.py`;
* ``cache-notebook``: the group of a persistent cache miss in notebook 10's stored output (which
  `tests/test_notebooks.py` compares with a fresh run of the notebook).

Each runs in a new temporary folder on JAX's CPU backend. A check compares texts with every time
masked (`masked`): seconds, and the time, process and host of another run a cache miss names.
The outputs were made with JAX `SAMPLES_JAX`; another JAX gives other equation counts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SAMPLES_JAX = "0.10.2"
TIMEOUT_S = 300
_MARKER = re.compile(r"^<!-- sample: ([\w-]+) -->\n```text\n(.*?)^```$", re.S | re.M)
_PROGRAM = re.compile(r"```python\n(.*?)```", re.S)
# A number of seconds: three decimals (with the spaces that right-align it in a table), or one
# followed by "s"; and another run's identity in a persistent cache miss's words.
_SECONDS = re.compile(r" *(?<![\w.])\d+\.\d{3}(?!\d)| *(?<![\w.])\d+(?:\.\d+)?(?= ?s\b)")
_RUN = re.compile(r"the run of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, pid \d+ on [^\s)]+")


def masked(text: str) -> str:
    """`text` with every time masked (`<s>` for seconds, `<run>` for another run)."""
    return _SECONDS.sub(" <s>", _RUN.sub("the run of <run>", text))


def _env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", HOME=home, IPYTHONDIR=os.path.join(home, "ipython"),
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return env


def _run(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def ipython_demo(readme: str, at: int, cwd: str) -> str:
    program = _PROGRAM.findall(readme[:at])[-1]
    Path(cwd, "demo.ipy").write_text(program, encoding="utf-8")
    return _run([sys.executable, "-m", "IPython", "--ext=jaxtrace_nb", "--no-banner", "demo.ipy"], cwd).stdout


def run(readme: str, at: int, cwd: str) -> str:
    Path(cwd, "train.py").write_text((REPO / "docs" / "samples" / "train.py").read_text(encoding="utf-8"))
    command = ["-m", "jaxtrace_nb", "run", "--persist", "traces.jsonl", "train.py"]
    done = _run([sys.executable, *command], cwd)
    return f"$ python {' '.join(command)}\n{done.stdout}{done.stderr}"


def cache_notebook(readme: str, at: int, cwd: str) -> str:
    notebook = json.loads((REPO / "notebooks" / "10_persistent_cache.ipynb").read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/plain", ""))
            if "persistent cache miss: " in text:
                lines = text.splitlines()
                start = next(i for i, line in enumerate(lines) if line.startswith("  In["))
                end = next(i for i, line in enumerate(lines) if line.lstrip().startswith("hint: "))
                return "\n".join(lines[start:end + 1]) + "\n"
    raise LookupError("notebook 10 shows no persistent cache miss")


SAMPLES = {"ipython-demo": ipython_demo, "run": run, "cache-notebook": cache_notebook}


def produce(readme: str) -> dict[str, tuple[str, str]]:
    """Each sample of `readme`: (what the README says, what a run says now)."""
    found = {}
    for match in _MARKER.finditer(readme):
        name = match.group(1)
        with tempfile.TemporaryDirectory(prefix=f"jaxtrace-sample-{name}-") as cwd:
            found[name] = (match.group(2), SAMPLES[name](readme, match.start(), cwd).rstrip() + "\n")
    return found


def main(argv: list[str]) -> int:
    readme = README.read_text(encoding="utf-8")
    found = produce(readme)
    if "--check" in argv:
        stale = [name for name, (said, now) in found.items() if masked(said) != masked(now)]
        for name in stale:
            print(f"README.md sample {name!r} differs from a run:\n--- README\n{found[name][0]}--- run\n"
                  f"{found[name][1]}", file=sys.stderr)
        return 1 if stale else 0
    README.write_text(_MARKER.sub(lambda m: f"<!-- sample: {m.group(1)} -->\n```text\n{found[m.group(1)][1]}```",
                                  readme), encoding="utf-8")
    print(f"README.md: {len(found)} sample(s) written: {', '.join(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
