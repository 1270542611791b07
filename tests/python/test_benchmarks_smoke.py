"""Each benchmark script runs with --smoke in a subprocess and writes valid
JSON and a markdown table. Keeps the scripts from rotting; times nothing."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = {
    "eager_ops": ["rows"],
    "training": ["rows", "cache_hit_loops"],
    "cold_warm": ["rows"],
    "quickstart_speed": ["add_latency_us", "quickstart_steps_per_s"],
    "soak": ["steps", "steps_per_s"],
    "index_checks": ["rows"],
    "collectives": ["rows"],
    "ddp_scaling": ["rows"],
    "inference": ["runs"],
    "optimizer_step": ["rows"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_benchmark_smoke(name, tmp_path):
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
