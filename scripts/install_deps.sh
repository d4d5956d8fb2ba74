#!/usr/bin/env bash
# Installs what building and testing openfia needs on a fresh Debian machine (idempotent).
set -euo pipefail
need_apt=()
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
command -v ninja >/dev/null || need_apt+=(ninja-build)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
PY=${PYTHON:-python3}
# torch: the pinned CPU build only (a bare "torch" would pull a multi-GB CUDA build).
$PY - <<'PYEOF' || $PY -m pip install -q "torch==2.13.0"
import torch, sys
sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)
PYEOF
# transformers: the optional integration's test and example (it does not pull torch).
$PY -m pip install -q "torch==2.13.0" numpy pytest "nanobind>=2.0" "scikit-build-core>=0.10" cmake ninja matplotlib \
  "transformers>=5,<6"
