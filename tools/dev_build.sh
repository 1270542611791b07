#!/usr/bin/env bash
# Incremental in-place build of torch_tpu._C for development (any checkout or
# worktree). Uses the project venv's python unless PYTHON is set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=/work/main/.venv/bin/python
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-/work}"
export TORCH_TPU_BUILD_JOBS="${TORCH_TPU_BUILD_JOBS:-2}"
cd "$root"
"$py" setup.py -q build_ext --inplace 2>&1 | grep -vE "^(running|copying|creating)" || true
test -f "$root"/torch_tpu/_C*.so
