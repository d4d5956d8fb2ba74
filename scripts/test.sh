#!/usr/bin/env bash
# Installs openfia's dependencies, then builds and runs every test: C++ (GoogleTest, dev build and
# release build, the install route with the example built against the installed library, the
# scalar-only build, an AArch64 cross build run under user-mode QEMU: the NEON targets, an
# ASan+UBSan build with a seeded run of the fuzz target, a ThreadSanitizer build of the thread
# tests) and Python (pytest against PyTorch).
# Usage: scripts/test.sh            (OPENFIA_TIER=full for the full case list)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install_deps.sh
JOBS=${JOBS:-$(nproc)}

echo "== C++ tests (dev build) =="
cmake --preset dev >/dev/null
cmake --build build/dev -j"$JOBS"
ctest --test-dir build/dev -j"$JOBS" --output-on-failure

echo "== C++ tests (release build: the kernels as the optimizer builds them for users) =="
cmake --preset release -DOPENFIA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/release -j"$JOBS"
ctest --test-dir build/release -j"$JOBS" --output-on-failure

echo "== C++ install route (the library alone, static and shared; the example against it) =="
bash scripts/test_install.sh

echo "== C++ tests (scalar-only build: no SIMD targets) =="
cmake --preset scalar -DOPENFIA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/scalar -j"$JOBS"
ctest --test-dir build/scalar -j"$JOBS" --output-on-failure

echo "== C++ tests (AArch64 cross build under qemu-user: the neon and neonbf16 targets) =="
bash scripts/install_cross_deps.sh
cmake --preset aarch64 >/dev/null
cmake --build build/aarch64 -j"$JOBS"
# QEMU's default CPU ("max") has FEAT_BF16: the neonbf16 table (BFDOT dot tiles) is the best one;
# a Cortex-A72 has none: the neon table.
ctest --test-dir build/aarch64 -j"$JOBS" --output-on-failure
QEMU_CPU=cortex-a72 ctest --test-dir build/aarch64 -j"$JOBS" --output-on-failure

echo "== C++ tests (ASan + UBSan) =="
cmake --preset asan >/dev/null
cmake --build build/asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan -j"$JOBS" --output-on-failure

echo "== fuzz (ASan + UBSan): random valid and invalid calls of every operator, seeded =="
cmake --build build/asan -j"$JOBS" --target openfia_fuzz
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build/asan/tests/fuzz/openfia_fuzz --seed 1 --calls 400

echo "== C++ thread tests (ThreadSanitizer: concurrent calls, thread-count changes, the pool) =="
cmake --preset tsan >/dev/null
cmake --build build/tsan -j"$JOBS" --target openfia_thread_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build/tsan/tests/cpp/openfia_thread_tests

if [ -f pyproject.toml ]; then
  echo "== Python tests (pytest vs PyTorch float64) =="
  $PY -m pip install -q --no-build-isolation .
  # The module links libopenfia statically with its symbols hidden inside the module
  # (python/CMakeLists.txt): no symbol of the openfia namespace in its dynamic symbol table.
  so=$($PY -c "import openfia._openfia as m; print(m.__file__)")
  if nm -DC --defined-only "$so" | grep 'openfia::'; then
    echo "FAIL: $so exports the symbols above of the openfia library" >&2
    exit 1
  fi
  (cd tests/python && $PY -m pytest -q -x .)
fi
