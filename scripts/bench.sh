#!/usr/bin/env bash
# The main job: build openfia and its benchmark, then run the benchmark side by side with PyTorch.
#   scripts/bench.sh               # demo preset: every workload at 1/8 size (a few minutes)
#   scripts/bench.sh full          # the full model shapes (docs/benchmark.md)
#   scripts/bench.sh demo --only D1,P2 --runs 5   # extra arguments go to python -m openfia.bench
#   scripts/bench.sh demo --ops fia               # FIA rows only (default --ops all adds the
#                                                 # KvQuantSparseFlashAttention / SparseAttnSharedkv rows)
# Writes bench_out/: results.md (the table), results.json, roofline.png, limits.json,
# openfia-bench.txt (C++ benchmark: thread scaling, decode time vs KV length, memory check).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=demo
if [ $# -gt 0 ] && { [ "$1" = demo ] || [ "$1" = full ]; }; then PRESET=$1; shift; fi
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
OUT=bench_out
mkdir -p "$OUT"

# ---- what the benchmark needs: build tools, libbenchmark-dev (C++), the openfia module, matplotlib ----
bash scripts/install_deps.sh
if [ ! -f /usr/include/benchmark/benchmark.h ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libbenchmark-dev >/dev/null
fi
$PY -c "import matplotlib" 2>/dev/null || $PY -m pip install -q matplotlib
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q "torch==2.13.0"
# One build for both: pip builds the Python module and, in the same CMake tree (build/bench), the
# C++ benchmark binary, so the library compiles once. -v shows the build's own progress lines.
echo "== building openfia: the Python module and the C++ benchmark (one build, $JOBS jobs) =="
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS $PY -m pip install -v --no-build-isolation \
  --config-settings=build-dir=build/bench \
  --config-settings=cmake.define.OPENFIA_BUILD_BENCH=ON .
BIN=build/bench/bench/openfia-bench

echo "== C++ benchmark (preset $PRESET): limits, workloads, thread scaling, KV-length sweep =="
# Both parts always run; the script fails at the end if either found a wrong result.
status=0
"$BIN" --preset "$PRESET" --limits-out "$OUT/limits.json" \
  --benchmark_out="$OUT/openfia-bench.json" --benchmark_out_format=json 2>&1 |
  tee "$OUT/openfia-bench.txt" || status=1

echo "== openfia vs PyTorch SDPA (preset $PRESET) =="
LIMITS=()
[ -s "$OUT/limits.json" ] && LIMITS=(--limits-json "$OUT/limits.json")
$PY -m openfia.bench --preset "$PRESET" "${LIMITS[@]}" --bench-bin "$BIN" --out "$OUT" "$@" ||
  status=1
exit $status
