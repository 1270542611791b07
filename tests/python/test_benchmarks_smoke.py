"""Each benchmark script runs with --smoke in a subprocess and writes valid
JSON and a markdown table. Keeps the scripts from rotting; times nothing."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = {
    "eager_ops": ["rows"],
    "training": ["rows", "cache_hit_loops", "host_cost"],
    "cold_warm": ["rows", "async_rows"],
    "quickstart_speed": ["add_latency_us", "quickstart_steps_per_s"],
    "soak": ["steps", "steps_per_s"],
    "index_checks": ["rows"],
    "collectives": ["rows"],
    "ddp_scaling": ["rows"],
    "inference": ["runs"],
    "optimizer_step": ["rows"],
    "profiler_overhead": ["rows"],
    "conv": ["rows"],
    "transfers": ["rows"],
    "dynamic": ["rows", "results"],
    "kernels": ["results", "kernel_file"],
    "single_trace_trainer": ["rows"],
    "aot_warmup": ["rows"],
    "vllm_serve": ["configs"],
    "norms": ["rows"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_benchmark_smoke(name, tmp_path):
    if name == "kernels" and importlib.util.find_spec("jax") is None:
        pytest.skip("benchmarks/kernels.py authors its kernels with JAX (the pallas extra), not installed")
    if name == "vllm_serve" and importlib.util.find_spec("vllm") is None:
        pytest.skip("benchmarks/vllm_serve.py serves through vLLM, not installed")
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    script = os.path.join(ROOT, "benchmarks", name + ".py")
    done = subprocess.run([sys.executable, script, "--smoke", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    with open(tmp_path / f"{name}.json") as f:
        data = json.load(f)
    assert data["benchmark"] == name and data["smoke"] is True
    for key in SCRIPTS[name]:
        assert data[key], f"{name}.json has no {key}"
    assert "environment" in data
    markdown = (tmp_path / f"{name}.md").read_text()
    assert "| ---" in markdown


def test_dynamic_llama_smoke(tmp_path):
    """dynamic.py's transformers Llama variant: the bucketed forward and
    training steps give CPU eager's final loss."""
    pytest.importorskip("transformers")
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    script = os.path.join(ROOT, "benchmarks", "dynamic.py")
    done = subprocess.run([sys.executable, script, "--smoke", "--model", "llama", "--batch", "2",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    with open(tmp_path / "dynamic_llama.json") as f:
        results = json.load(f)["results"]
    for kind in ("forward", "train"):
        cpu, tpu = results[f"{kind}/cpu_eager"], results[f"{kind}/tpu_compiled_buckets"]
        assert tpu["steps"] == tpu["of"] and "bucket_compiles" in tpu, tpu
        assert abs(tpu["final_loss"] - cpu["final_loss"]) < 1e-3, (kind, cpu, tpu)


def _reference_python():
    venv = os.environ.get("TORCH_TPU_REF_VENV") or os.path.join(ROOT, ".venv-ref")
    path = os.path.join(venv, "bin", "python")
    return path if os.path.exists(path) else None


def test_vs_reference_without_the_reference(tmp_path):
    """No reference venv: the script says how to make one and exits 0."""
    env = dict(os.environ, TORCH_TPU_REF_VENV=str(tmp_path / "missing"))
    script = os.path.join(ROOT, "benchmarks", "vs_reference.py")
    done = subprocess.run([sys.executable, script, "--smoke", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "reference not installed; run benchmarks/reference_env.sh" in done.stdout
    assert not (tmp_path / "vs_reference.json").exists()


@pytest.mark.skipif(_reference_python() is None,
                    reason="reference venv missing (benchmarks/reference_env.sh)")
def test_vs_reference_smoke(tmp_path):
    """Strict Eager of both packages, steady and cold children (about 2
    minutes: the reference's import alone takes seconds)."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    script = os.path.join(ROOT, "benchmarks", "vs_reference.py")
    done = subprocess.run([sys.executable, script, "--smoke", "--configs", "ours-strict,ref-strict",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    with open(tmp_path / "vs_reference.json") as f:
        data = json.load(f)
    assert data["benchmark"] == "vs_reference" and data["smoke"] is True
    assert data["reference_version"] == "0.2.0"
    runs = data["runs"]
    assert "/.venv-ref/" in runs["ref-strict"][0]["package"] or \
        os.environ.get("TORCH_TPU_REF_VENV")
    # Both sides ran every workload, and trained the same model to the same loss.
    for config in ("ours-strict", "ref-strict"):
        for key in ("ops", "mlp_train", "gpt_train", "gpt_infer", "cold_mlp"):
            assert "error" not in runs[config][0][key], (config, key, runs[config][0][key])
    ours, ref = (runs[c][0]["gpt_train"]["loss"] for c in ("ours-strict", "ref-strict"))
    assert abs(ours - ref) < 1e-2 * max(1.0, abs(ref))
    assert any(r["workload"].startswith("GPT train (steps/s)") and r["ratio_median"]
               for r in data["rows"])
    assert "| ---" in (tmp_path / "vs_reference.md").read_text()
