#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite: the C++ tiers
# (GoogleTest, no torch) and the Python tier (tpu against CPU PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit 1

export TORCH_TPU_PJRT_PLUGIN="$(.venv/bin/python -c 'import torch_tpu._plugin as p; print(p.plugin_path())')"
export TORCH_TPU_DISK_CACHE=0
status=0
if [ -x build/cmake/tpu_cpp_tests ]; then
  build/cmake/tpu_cpp_tests --gtest_brief=1 || status=1
else
  echo "test: GoogleTest not available; C++ tier skipped"
fi
# One worker per core, each test file on one worker (a file's tests share
# their module's setup): 61 -> 40-43 minutes on two cores.
.venv/bin/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile \
  tests/python tests/conformance "$@"
rc=$?
# pytest exits 5 when it collected no tests: that is not a pass.
if [ $rc -eq 5 ]; then echo "test: pytest collected no tests"; status=1; fi
[ $rc -ne 0 ] && status=1
exit $status
