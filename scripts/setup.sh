#!/usr/bin/env bash
# Sets up everything on a fresh machine: a virtual environment with the
# pinned CPU torch and the XLA:CPU PJRT plugin, then builds torch_tpu in place.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build tools from the distribution, when we may install them (best effort:
# ccache only speeds rebuilds, GoogleTest enables the C++ test tier).
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=""
  command -v ccache >/dev/null 2>&1 || missing="$missing ccache"
  command -v ninja >/dev/null 2>&1 || missing="$missing ninja-build"
  command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
  [ -f /usr/include/gtest/gtest.h ] || missing="$missing libgtest-dev"
  if [ -n "$missing" ]; then
    (apt-get install -y -q $missing >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $missing >/dev/null 2>&1)) ||
      echo "setup: could not install$missing; continuing without"
  fi
fi

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch is pinned to the CPU build (a plain `torch` would pull a CUDA build);
# every package beside it is pinned to a version that keeps that pin.
# transformers: the Hugging Face models the tests train and run (tiny configs,
# no downloads); accelerate: what its Trainer runs on (checked with
# `pip install --dry-run accelerate==1.15.0`: it keeps the torch pin);
# ray[train] and torchtitan: the distributed integrations the tests run
# (Ray Train's TorchTrainer, TorchTitan's llama3 trainer), each checked with
# `pip install --dry-run "torch==2.13.0" <pkg>` to keep the torch pin.
# triton: TorchTitan 0.3.0 imports it unconditionally (its expert-parallel
# kernels) without declaring it; it depends on nothing (no torch).
# pytest-xdist: scripts/test.sh runs the test files on one worker per core
# (adds execnet; no torch).
.venv/bin/pip install -q --disable-pip-version-check \
  "torch==2.13.0" "xla-cpu-pjrt" numpy pytest "pytest-xdist==3.8.0" ninja "cmake>=3.18" setuptools wheel \
  "transformers==5.24.0" "accelerate==1.15.0" "ray[train]==2.60.0" "torchtitan==0.3.0" \
  "triton==3.9.0"
# jax/jaxlib: authoring-time only (the `pallas` extra): torch.tpu.pallas.jax_op
# exports JAX/Pallas kernels with it, Inductor's Pallas path for tpu imports
# it; the tests of both need it. The runtime never imports it (kernel files
# run without). 0.10.2 checked with `pip install --dry-run "torch==2.13.0"
# jax==0.10.2 jaxlib==0.10.2`: it keeps the torch pin (adds ml_dtypes,
# opt_einsum, scipy; about 25 s to install).
.venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "jax==0.10.2" "jaxlib==0.10.2"
# helion: tests/python/test_helion.py runs its Pallas backend on tpu tensors. 1.5.1 checked with
# `pip install --dry-run "torch==2.13.0" "helion==1.5.1"`: it keeps the torch pin (adds cloudpickle,
# filecheck, joblib, narwhals, scikit-learn, threadpoolctl).
.venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "helion==1.5.1"
# torchrec: tests/python/test_torchrec_tpu.py runs its tpu embedding kernels (torchrec.experimental.torch_tpu)
# through jax_op. `pip install --dry-run "torch==2.13.0" "torchrec==1.9.2"` keeps the torch pin but adds
# fbgemm-gpu 1.9.0, the CUDA build (498 MB; needs libtorch_cuda), and fbgemm-gpu-cpu 1.9.0 is built for a
# newer torch (undefined symbols): so fbgemm-gpu-cpu 1.8.0 (6 MB, loads with 2.13.0), torchrec without
# deps, and its other deps as that dry-run resolved them (tensordict, torchmetrics, pyre-extensions, tqdm).
.venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "fbgemm-gpu-cpu==1.8.0" \
  "tensordict==0.15.3" "torchmetrics==1.0.3" "pyre-extensions==0.0.32" tqdm
.venv/bin/pip install -q --disable-pip-version-check --no-deps "torchrec==1.9.2"
# vllm: torch_tpu/vllm is its tpu platform plugin (tests/python/test_vllm.py serves a model through
# it). `pip install --dry-run "torch==2.13.0" "vllm==0.32.0"` keeps the torch pin but asks
# transformers<5.20 (we pin 5.24, which vLLM 0.32 runs with: the tests check tokens against it) and
# about 100 packages for CUDA (nvidia-*, flashinfer, cutlass-dsl, tilelang, several GB) that no tpu
# code path imports. So vllm without deps, and the runtime deps of its engine and OpenAI server as a
# dry run resolved them beside our pins.
.venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "transformers==5.24.0" \
  aiohttp==3.14.5 anthropic==2.17.0 blake3==1.0.11 cachetools==8.0.3 cbor2==6.3.0 cloudpickle==3.1.3 \
  compressed-tensors==0.17.0 \
  depyf==0.20.0 einops==0.8.2 "fastapi[standard]==0.136.3" ijson==3.6.0 lark==1.2.2 \
  llguidance==1.7.6 lm-format-enforcer==0.11.3 mcp==2.3.0 mistral_common==1.13.1 \
  model-hosting-container-standards==0.1.16 msgspec==0.23.0 \
  openai==3.63.0 oss-harmony==0.0.11 outlines_core==0.2.14 partial-json-parser==0.2.1.1.post7 \
  pillow==13.0.0 prometheus_client==0.26.0 prometheus-fastapi-instrumentator==8.1.0 psutil \
  py-cpuinfo==9.0.0 pybase64==1.5.1 python-json-logger==4.2.0 pyzmq==27.3.0 regex \
  sentencepiece==0.2.3 setproctitle==1.3.8 tiktoken==0.14.0 uvicorn==0.55.0 watchfiles==1.3.0 \
  xgrammar==0.2.8
.venv/bin/pip install -q --disable-pip-version-check --no-deps "vllm==0.32.0"
# ccache keys on the compile commands: with the checkout as its base
# directory they name paths relative to it, so a fresh clone in another
# folder (CI's) reuses the objects an earlier build of the same sources made.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
# No build isolation: the build must see the torch installed above.
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
