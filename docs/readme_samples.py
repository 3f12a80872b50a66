"""Write, or check, the sample outputs of README.md, docs/samples.md and docs/pytest.md from real
runs of their programs.

    python docs/readme_samples.py          # run each sample and write its output into its document
    python docs/readme_samples.py --check  # run each sample; exit 1 if a document says otherwise

A sample is a ```text block of a document (`DOCUMENTS`) right after a line
``<!-- sample: NAME -->``. Its output comes from (`SAMPLES`):

* ``ipython-demo``: its document's own ```python block just above it, run as ``demo.ipy`` in
  terminal IPython (``ipython --ext=jaxtrace_nb demo.ipy``), as the document says;
* ``run``: ``python -m jaxtrace_nb run --persist traces.jsonl train.py`` on `docs/samples/train.py`;
* ``distributed``: two processes of `tests/programs/dist_step.py` (``jax.distributed`` on CPU, a
  coordinator on a free port of 127.0.0.1, shown as ``$PORT``) under ``python -m jaxtrace_nb run
  --persist``, then ``python -m jaxtrace_nb report`` of both logs, down to its "Differs across
  processes" section;
* ``cache-notebook``: the group of a persistent cache miss in notebook 10's stored output (which
  `tests/test_notebooks.py` compares with a fresh run of the notebook);
* ``pytest-baseline`` and ``github-annotation``: `docs/samples/test_train.py` run by pytest with
  ``--jaxtrace-baseline``, once to write the budget, then with a last batch of 17 rows added, under
  GitHub Actions: the test's failure, and the annotation (cut after the cause's leaf). The folder is
  shown as ``/tmp/demo/pt``, and caret lines (Python 3.11 on) are left out.

Each runs in a new temporary folder on JAX's CPU backend. A check compares texts with every time
masked (`masked`): seconds, and the time, process and host of another run a cache miss names.
The outputs were made with JAX `SAMPLES_JAX`; another JAX gives other equation counts.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCUMENTS = (README, REPO / "docs" / "samples.md", REPO / "docs" / "pytest.md")
SHOWN_FOLDER = "/tmp/demo/pt"
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
    env.update(
        JAX_PLATFORMS="cpu",
        HOME=home,
        IPYTHONDIR=os.path.join(home, "ipython"),
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    return env


def _run(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        args, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def ipython_demo(readme: str, at: int, cwd: str) -> str:
    program = _PROGRAM.findall(readme[:at])[-1]
    Path(cwd, "demo.ipy").write_text(program, encoding="utf-8")
    return _run(
        [sys.executable, "-m", "IPython", "--ext=jaxtrace_nb", "--no-banner", "demo.ipy"], cwd
    ).stdout


def run(readme: str, at: int, cwd: str) -> str:
    Path(cwd, "train.py").write_text(
        (REPO / "docs" / "samples" / "train.py").read_text(encoding="utf-8")
    )
    command = ["-m", "jaxtrace_nb", "run", "--persist", "traces.jsonl", "train.py"]
    done = _run([sys.executable, *command], cwd)
    return f"$ python {' '.join(command)}\n{done.stdout}{done.stderr}"


def distributed(text: str, at: int, cwd: str) -> str:
    Path(cwd, "dist_step.py").write_text(
        (REPO / "tests" / "programs" / "dist_step.py").read_text(encoding="utf-8")
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    commands = [
        [
            "-m",
            "jaxtrace_nb",
            "run",
            "--persist",
            f"p{i}.jsonl",
            "dist_step.py",
            str(i),
            "2",
            str(port),
        ]
        for i in range(2)
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, *command],
            cwd=cwd,
            env=_env(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    try:
        for i, process in enumerate(processes):
            _, err = process.communicate(timeout=TIMEOUT_S)
            if process.returncode != 0:
                raise RuntimeError(
                    f"process {i} of dist_step.py exited {process.returncode}:\n{err[-3000:]}"
                )
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    report = ["-m", "jaxtrace_nb", "report", "p0.jsonl", "p1.jsonl"]
    lines = _run([sys.executable, *report], cwd).stdout.splitlines()
    start = lines.index("Differs across processes:")
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    shown = [" ".join(["$ python", *c]).replace(str(port), "$PORT") for c in commands]
    return (
        "\n".join([shown[0] + " &", shown[1], f"$ python {' '.join(report)}", *lines[:end]]) + "\n"
    )


def cache_notebook(readme: str, at: int, cwd: str) -> str:
    notebook = json.loads(
        (REPO / "notebooks" / "10_persistent_cache.ipynb").read_text(encoding="utf-8")
    )
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/plain", ""))
            if "persistent cache miss: " in text:
                lines = text.splitlines()
                start = next(i for i, line in enumerate(lines) if line.startswith("  In["))
                end = next(i for i, line in enumerate(lines) if line.lstrip().startswith("hint: "))
                return "\n".join(lines[start : end + 1]) + "\n"
    raise LookupError("notebook 10 shows no persistent cache miss")


@functools.lru_cache(maxsize=1)
def _pytest_session() -> str:
    """What pytest prints when `docs/samples/test_train.py` goes past its compile budget."""
    with tempfile.TemporaryDirectory(prefix="jaxtrace-sample-pytest-") as cwd:
        test = Path(cwd, "test_train.py")
        source = (REPO / "docs" / "samples" / "test_train.py").read_text(encoding="utf-8")
        test.write_text(source, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--jaxtrace-baseline=compiles.json",
        ]
        _run([*command, "--jaxtrace-baseline-update", test.name], cwd)
        test.write_text(source.replace("(32, 32, 32)", "(32, 32, 32, 17)"), encoding="utf-8")
        env = dict(_env(cwd), GITHUB_ACTIONS="true")
        done = subprocess.run(
            [*command, test.name],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        if done.returncode != 1:
            raise RuntimeError(
                f"pytest over its budget exited {done.returncode}, not 1:\n{done.stdout[-3000:]}"
            )
        return done.stdout.replace(os.path.realpath(cwd), SHOWN_FOLDER).replace(cwd, SHOWN_FOLDER)


def pytest_baseline(text: str, at: int, cwd: str) -> str:
    lines = [
        line for line in _pytest_session().splitlines() if not re.fullmatch(r"\s*\^+\s*", line)
    ]
    start = next(i for i, line in enumerate(lines) if line.startswith(">"))
    end = next(i for i, line in enumerate(lines) if line.endswith(": RetraceError") and i > start)
    return "\n".join(lines[start : end + 1]) + "\n"


def github_annotation(text: str, at: int, cwd: str) -> str:
    line = next(line for line in _pytest_session().splitlines() if line.startswith("::error "))
    return line[: line.index("`: ", line.index(" cause: ")) + 3] + "…\n"


SAMPLES = {
    "ipython-demo": ipython_demo,
    "run": run,
    "distributed": distributed,
    "cache-notebook": cache_notebook,
    "pytest-baseline": pytest_baseline,
    "github-annotation": github_annotation,
}


def produce(text: str) -> dict[str, tuple[str, str]]:
    """Each sample of a document's `text`: (what the document says, what a run says now)."""
    found = {}
    for match in _MARKER.finditer(text):
        name = match.group(1)
        with tempfile.TemporaryDirectory(prefix=f"jaxtrace-sample-{name}-") as cwd:
            found[name] = (match.group(2), SAMPLES[name](text, match.start(), cwd).rstrip() + "\n")
    return found


def main(argv: list[str]) -> int:
    stale = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        found = produce(text)
        if "--check" in argv:
            for name, (said, now) in found.items():
                if masked(said) != masked(now):
                    stale.append(name)
                    print(
                        f"{document.name} sample {name!r} differs from a run:\n"
                        f"--- {document.name}\n{said}--- run\n"
                        f"{now}",
                        file=sys.stderr,
                    )
            continue
        document.write_text(
            _MARKER.sub(
                lambda m: f"<!-- sample: {m.group(1)} -->\n```text\n{found[m.group(1)][1]}```", text
            ),
            encoding="utf-8",
        )
        print(f"{document.name}: {len(found)} sample(s) written: {', '.join(found)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
