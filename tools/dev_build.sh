#!/usr/bin/env bash
# Incremental in-place build of torch_tpu._C for development (any checkout or
# worktree). Uses the project venv's python unless PYTHON is set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=/work/main/.venv/bin/python
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-/work}" CCACHE_NOHASHDIR=1
export TORCH_TPU_BUILD_JOBS="${TORCH_TPU_BUILD_JOBS:-2}"
# The build imports torch, which would autoload this (possibly stale) extension.
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
cd "$root"
log=$(mktemp)
if ! "$py" setup.py -q build_ext --inplace >"$log" 2>&1; then
  grep -E "error|Error" -A3 "$log" | head -60
  exit 1
fi
rm -f "$log"
test -f "$root"/torch_tpu/_C*.so
