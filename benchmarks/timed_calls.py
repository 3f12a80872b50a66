"""A peer suite's timing tests without and with recording, round after round, and what
jaxtrace_nb's own threads did while each test timed a call.

    python -m benchmarks.timed_calls --suite equinox --src /tmp/peer/equinox \\
        --files tests/test_while_loop.py -k speed --rounds 3 [--out PATH]

Some peer tests assert on seconds (Equinox's ``test_while_loop.py``: a call timed right after its
compile against a bound, the scaling of a loop's time with its length). When one of them passes
without recording and fails with it, two things can be the cause: the machine's load, or work of
ours running while the test times (our own thread making a program's size and line profile,
`_recording/_measure.py`). This separates them: each round runs the selection once without and
once with recording (the order alternates round by round), in fresh pytest sessions set up as
``benchmarks/peer_suites.py`` sets them up, with ``benchmarks/_timed_calls_plugin.py`` loaded
(``PYTEST_PLUGINS``); it records every ``timeit`` timing and the CPU seconds each ``jaxtrace_nb…``
thread used during it. The report gives, per test, its outcomes in each mode, the median of its
timings in each mode, and our threads' CPU seconds during its timings (0 means none of our threads
ran at all meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from types import SimpleNamespace

from benchmarks import peer_suites

MODES = ("without", "with")


def run(args) -> list[dict]:
    """Every session: {"round", "mode", "outcomes", "timings", "ours_cpu_s_whole_session"}."""
    logdir = args.out + ".logs" if args.out else tempfile.mkdtemp(prefix="timed-calls-")
    os.makedirs(logdir, exist_ok=True)
    pytest_args = SimpleNamespace(
        jaxtrace_path=args.jaxtrace_path, k=args.k, timeout=args.timeout, explain=False
    )
    os.environ["PYTEST_PLUGINS"] = "benchmarks._timed_calls_plugin"
    sessions = []
    for number in range(args.rounds):
        order = MODES if number % 2 == 0 else MODES[::-1]
        for mode in order:
            tag = f"round{number}-{mode}"
            os.environ["TIMED_CALLS_OUT"] = timed = os.path.join(logdir, f"{tag}.timed.json")
            result = peer_suites.run_pytest(
                args.suite, args.src, args.files, mode == "with", pytest_args, logdir, tag
            )
            timings = {"timings": [], "ours_cpu_s_whole_session": {}}
            if os.path.exists(timed):
                with open(timed) as f:
                    timings = json.load(f)
            sessions.append(
                {
                    "round": number,
                    "mode": mode,
                    "outcomes": {k: v["outcome"] for k, v in result["outcomes"].items()},
                    **timings,
                }
            )
            print(f"round {number} {mode}: {result['wall_s']} s, exit {result['returncode']}")
    return sessions


def report(sessions: list[dict]) -> str:
    outcomes = defaultdict(lambda: defaultdict(list))  # test -> mode -> [outcome per round]
    seconds = defaultdict(lambda: defaultdict(list))  # test -> mode -> [timing]
    ours = defaultdict(list)  # test -> [our CPU seconds during each recorded timing]
    for s in sessions:
        for test, outcome in s["outcomes"].items():
            outcomes[test][s["mode"]].append(outcome)
        for row in s["timings"]:
            seconds[row["test"]][s["mode"]].append(row["seconds"])
            if s["mode"] == "with":
                ours[row["test"]].append(sum(row["ours_cpu_s"].values()))
    lines = [
        "test: outcomes per round without | with; median timing (s) without | with; our "
        "threads' CPU s during its timings with recording (sum, largest)"
    ]
    for test in sorted(set(outcomes) | set(seconds)):
        medians = [
            f"{statistics.median(seconds[test][m]):.4f}" if seconds[test][m] else "-" for m in MODES
        ]
        cpu = ours.get(test) or [0.0]
        lines.append(
            f"  {test}: {' '.join(outcomes[test]['without'])} | {' '.join(outcomes[test]['with'])}"
            f"; {medians[0]} | {medians[1]} over {len(seconds[test]['with'])} timings"
            f"; ours {sum(cpu):.4f}, {max(cpu):.4f}"
        )
    differ = sum(
        1 for per_mode in outcomes.values() if set(per_mode["without"]) != set(per_mode["with"])
    )
    flaky = sum(1 for per_mode in outcomes.values() if len(set(per_mode["without"])) > 1)
    timed = [c for cpu in ours.values() for c in cpu]
    whole = [sum(s["ours_cpu_s_whole_session"].values()) for s in sessions if s["mode"] == "with"]
    lines += [
        "",
        f"{len(outcomes)} tests; {differ} with another set of outcomes with recording than "
        f"without; {flaky} whose outcome varies between rounds without recording",
        f"our threads' CPU seconds during the {len(timed)} recorded timings: {sum(timed):.4f} "
        f"(largest {max(timed, default=0.0):.4f}); in each recorded session in all: "
        + ", ".join(f"{w:.3f}" for w in whole),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(peer_suites.SUITE_ENV), required=True)
    parser.add_argument("--src", required=True, help="the peer project's source checkout")
    parser.add_argument("--files", nargs="+", required=True, help="relative to the checkout")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--jaxtrace-path", help="import jaxtrace_nb from this folder")
    parser.add_argument("--out", help="write the report here, the sessions' logs to OUT.logs")
    args = parser.parse_args(argv)
    if args.out:
        args.out = os.path.abspath(args.out)
    sessions = run(args)
    text = peer_suites.header("benchmarks.timed_calls") + "\n" + report(sessions)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(sessions, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
