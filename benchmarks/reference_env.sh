#!/usr/bin/env bash
# Creates .venv-ref in the repository root: a virtual environment holding the
# reference design's package (`torch-tpu` 0.2.0 from PyPI), for
# benchmarks/vs_reference.py. Its import name is `torch_tpu`, the same as
# ours, so it never goes into the project's venv.
#
#     benchmarks/reference_env.sh            # create (or complete) .venv-ref
#     REF_VENV=/some/dir benchmarks/reference_env.sh
#
# torch is pinned to the version of the project's venv (2.13.0, which the
# reference accepts: it asks for torch>=2.11,<=2.15); the resolution is
# checked with --dry-run first and refused if it would bring a CUDA build
# (nvidia-* packages) or another torch. The reference also pulls libtpu,
# which it does not use here: the benchmark points it at the XLA:CPU plugin
# through TPU_LIBRARY_PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${REF_VENV:-$root/.venv-ref}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  # The interpreter the project's venv was made from (the reference's wheel is
  # cp311), else python3.
  for candidate in "$root/.venv/bin/python" /work/main/.venv/bin/python; do
    if [ -x "$candidate" ]; then
      python="$("$candidate" -c 'import sys; print(sys._base_executable)')"
      break
    fi
  done
  python="${python:-python3}"
fi
torch_pin="${REF_TORCH:-torch==2.13.0}"
packages=(torch-tpu==0.2.0 "$torch_pin")

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
"${pip[@]}" install -q --dry-run --report "$report" "${packages[@]}"
"$venv/bin/python" - "$report" <<'EOF'
import json, sys
install = json.load(open(sys.argv[1]))["install"]
names = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in install}
cuda = sorted(n for n in names if n.startswith(("nvidia-", "triton")))
if cuda:
    sys.exit(f"refusing: the resolution brings a CUDA build ({', '.join(cuda)})")
if "torch" in names and "+cpu" not in names["torch"]:
    sys.exit(f"refusing: torch {names['torch']} is not a CPU build")
print("installing:", ", ".join(f"{n}=={v}" for n, v in sorted(names.items())) or "nothing new")
EOF
"${pip[@]}" install -q "${packages[@]}"
"$venv/bin/python" -c 'import importlib.metadata as m; print("reference", m.version("torch-tpu"), "torch", m.version("torch"))'
echo "ready: $venv"
