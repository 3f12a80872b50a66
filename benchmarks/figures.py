"""Every figure in README.md and docs/*.md, with the committed results file it comes from.

    python benchmarks/figures.py            # list every figure: where, the figure, its source
    python benchmarks/figures.py --check    # only the figures without a source; exit 1 if any

`tests/test_figures.py` runs the check in CI: a figure without a source fails the suite.

**A figure** is a measured number stated in the prose or the tables of README.md or docs/*.md.
Fenced code blocks, indented code and `code spans` are not read: they hold code and example
transcripts (the output of one run, shown for its form), not results. Read, a figure is

1. a number with a unit of time, memory or share: ``s``, ``ms``, ``µs``, ``ns``, ``B``, ``KB``,
   ``KiB``, ``MB``, ``MiB``, ``GB``, ``GiB``, ``%`` ("4.39 µs", "430 B", "0.005 s");
2. a number with three or more decimals (the ratios and milliseconds of tables: "1.044", "0.087");
3. any number in a table row that names a results file (the counts of the peer-suite table).

Not figures: a bound, that is a number right after ``≤ ≥ < >``, "under", "over", "within",
"at most" or "at least", or inside "max(…)" (a goal, or a limit the code sets, not a measurement);
versions ("0.10.2"); and the phrases of `NOT_MEASURED`, each with its reason.

**Its source** is the results files (``benchmarks/results/<name>``) named in the figure's table row,
else those named in its section (from one heading to the next, any level). The figure is sourced
when one of them

* exists,
* states in its header (first 5 lines) the command that made it (``command: python …``, or a first
  line ``$ python …``) and the commit it measured (``commit <hex>``; a peer-suite report carries it
  in its file name, ``…-<hex>.txt``),
* and holds the figure's number (thousands separators ignored; as a number, not inside a longer
  one).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

UNITS = ("s", "ms", "µs", "ns", "B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "%")
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A number not inside a version or a longer number, with its unit if one follows.
_FIGURE = re.compile(
    rf"(?<![\w.,])({_NUMBER})(?!\.\d|\w|,\d)(?:\s?({'|'.join(map(re.escape, UNITS))})(?!\w))?"
)
_BOUND = re.compile(r"(?:≤|≥|<|>|\bunder|\bover|\bwithin|\bat most|\bat least)\s*$")
_CITED = re.compile(r"benchmarks/results/([\w.\-]+\.(?:txt|json))")
_HEADING = re.compile(r"^#{1,6} ")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_COMMIT = re.compile(r"\bcommit ([0-9a-f]{7,40})\b")
_NAMED_COMMIT = re.compile(r"-([0-9a-f]{7,40})\.(?:txt|json)$")
_COMMAND = re.compile(r"command: python |^\$ python ", re.M)

#: (document, phrase) -> why the numbers of that phrase are not measurements.
NOT_MEASURED = {
    (
        "docs/safety.md",
        "returns 10 MB",
    ): "the size of a hostile input that tests/test_faults.py builds",
}


class Figure(NamedTuple):
    document: str  # relative to the repository
    line: int
    text: str  # the number, with its unit
    number: str  # as it must appear in the source (thousands separators removed)
    cited: tuple  # the results files named for it
    source: str | None  # the one it was found in; None: unsourced
    problem: str  # why it has no source ("" when it has one)


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _prose(line: str) -> str:
    """`line` without its code spans and link targets (numbers there are code, paths and
    anchors)."""
    line = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
    return re.sub(r"\]\([^)]*\)", lambda m: "]" + " " * (len(m.group(0)) - 1), line)


def _not_measured(document: str, line: str) -> list[tuple[int, int]]:
    return [
        (m.start(), m.end())
        for (doc, phrase), _ in NOT_MEASURED.items()
        if doc == document
        for m in re.finditer(re.escape(phrase), line)
    ]


def figures_in(path: Path, root: Path = ROOT) -> list[tuple[int, str, str, tuple]]:
    """(line, figure text, number, results files cited for it) of every figure in the document."""
    document = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    sections: list[tuple] = []  # per line: the files its section names
    section_files: set = set()
    start = 0
    in_fence = False
    for i, line in enumerate(lines + ["# end"]):
        if _FENCE.match(line):
            in_fence = not in_fence
        if (_HEADING.match(line) and not in_fence) or i == len(lines):
            sections.extend([tuple(sorted(section_files))] * (i - start))
            section_files, start = set(), i
        section_files.update(_CITED.findall(line))
    found = []
    in_fence = False
    previous = ""  # the paragraph's text so far (a bound's words may end the line before)
    for number, line in enumerate(lines, start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith(("    ", "\t")) or not line.strip():
            previous = ""
            continue
        row_files = (
            tuple(sorted(set(_CITED.findall(line)))) if line.lstrip().startswith("|") else ()
        )
        if row_files:
            previous = ""
        prose = _prose(line)
        skip = _not_measured(document, line)
        for m in _FIGURE.finditer(prose):
            value, unit = m.group(1), m.group(2)
            decimals = len(value.split(".")[1]) if "." in value else 0
            if not (unit or decimals >= 3 or row_files):
                continue
            before = previous + " " + prose[: m.start()]
            if (
                _BOUND.search(before)
                or before.rfind("max(") > before.rfind(")")
                or any(a <= m.start() < b for a, b in skip)
            ):
                continue
            text = f"{value} {unit}" if unit else value
            found.append((number, text, value.replace(",", ""), row_files or sections[number - 1]))
        previous = (previous + " " + prose)[-400:]
    return found


def _header_problem(path: Path) -> str:
    head = "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[:5])
    if not _COMMAND.search(head):
        return "its header names no command"
    if not (_COMMIT.search(head) or _NAMED_COMMIT.search(path.name)):
        return "its header names no commit"
    return ""


def _holds(path: Path, number: str) -> bool:
    text = path.read_text(encoding="utf-8", errors="replace")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return re.search(rf"(?<![\d.]){re.escape(number)}(?!\d|\.\d)", text) is not None


def figures(root: Path = ROOT) -> list[Figure]:
    """Every figure of README.md and docs/*.md under `root`, with its source or why it has none."""
    results = root / "benchmarks" / "results"
    out = []
    for path in documents(root):
        if not path.exists():
            continue
        document = path.relative_to(root).as_posix()
        for line, text, number, cited in figures_in(path, root):
            source, problems = None, []
            if not cited:
                problems.append("its section and table row name no benchmarks/results/ file")
            for name in cited:
                file = results / name
                if not file.exists():
                    problems.append(f"{name} does not exist")
                    continue
                header = _header_problem(file)
                if header:
                    problems.append(f"{name}: {header}")
                elif not _holds(file, number):
                    problems.append(f"{name} does not hold {number}")
                else:
                    source = name
                    break
            out.append(
                Figure(
                    document,
                    line,
                    text,
                    number,
                    cited,
                    source,
                    "" if source else "; ".join(problems),
                )
            )
    return out


def unsourced(root: Path = ROOT) -> list[Figure]:
    return [f for f in figures(root) if f.source is None]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    found = figures()
    for f in found:
        if f.source is None:
            print(f"{f.document}:{f.line}: {f.text}: NO SOURCE ({f.problem})")
        elif not check:
            print(f"{f.document}:{f.line}: {f.text}: benchmarks/results/{f.source}")
    missing = [f for f in found if f.source is None]
    print(f"{len(found)} figure(s), {len(missing)} without a source", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
