#!/usr/bin/env bash
# The device check of issue 53, as ONE command on the GPU machine (JAX 0.11.2, CUDA 13, H200):
#
#   bash benchmarks/device/prepare.sh            # here, once: the wheels into .whl/
#   run(command="bash benchmarks/device/run.sh", carry=[".whl"], timeout_s=560)
#
# Writes under $OUT: newest-jax.txt (versions, the forced self-check under every user setting,
# JAX's internals looked for in the installed JAX, a real Equinox + Optax AdamW step on the GPU
# beside JAX's own events, cache-hit and steady-step costs) and suite.txt (the suite on CPU).
# Copy them to benchmarks/results/device-jax-<version>-h200-<commit>-{newest-jax,suite}.txt.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || true
timeout 300 python3 -m benchmarks.device.newest_jax --out "$OUT/newest-jax.txt"
echo "newest_jax exit $?"
# The suite, on the CPU, as issue 53 ran it (pytest-benchmark is installed there and breaks xdist)
JAX_PLATFORMS=cpu timeout 230 python3 -m pytest -m "not browser and not kernel" -n 13 \
  -p no:benchmark -q -p no:cacheprovider --maxfail=200 2>&1 | tail -150 > "$OUT/suite.txt"
tail -3 "$OUT/suite.txt"
