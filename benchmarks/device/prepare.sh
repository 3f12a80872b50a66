#!/usr/bin/env bash
# Run HERE (not on the device), once, from the repository root: downloads the wheels of
# benchmarks/device/wheels.txt for the GPU machine's Python 3.12 into .whl/ (ignored by git),
# which `run` then carries (carry: [".whl"]). See benchmarks/device/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
grep -v '^#' benchmarks/device/wheels.txt | while read -r spec; do
  [ -n "$spec" ] || continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$spec"
done
ls .whl | wc -l
du -sh .whl
