"""Ray Train's TorchTrainer with the `tpu_dist` backend: 2 Ray workers on
this machine train the quickstart MLP with DDP on tpu; their losses and
parameters equal the same DDP run on CPU through Gloo (float32, matmul
precision "highest"), and the two replicas agree exactly. The run itself is
tests/python/ray_train_script.py, in a subprocess (its own Ray instance)."""
import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("ray")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STEPS = 8


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray_train")
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS"):
        env.pop(name, None)
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "ray_train_script.py"),
                               str(out), str(STEPS)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=400)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"Ray Train run hung past {e.timeout} s:\n{(e.stdout or '')[-4000:]}")
    assert proc.returncode == 0, proc.stdout[-6000:]
    results = []
    for rank in range(2):
        with open(out / f"rank{rank}.json") as f:
            results.append(json.load(f))
    return results


def test_workers_use_tpu_dist_from_this_checkout(ranks):
    for rank, r in enumerate(ranks):
        assert (r["rank"], r["world"], r["backend"]) == (rank, 2, "tpu_dist"), r
        assert os.path.dirname(os.path.dirname(r["torch_tpu"])) == ROOT, r["torch_tpu"]
        # DDP's gradient all-reduces went through tpu_dist (host-staged on XLA:CPU).
        assert r["host_staged"] >= STEPS, r["host_staged"]


def test_losses_and_params_equal_ddp_on_cpu_with_gloo(ranks):
    for r in ranks:
        assert len(r["tpu_losses"]) == STEPS
        torch.testing.assert_close(torch.tensor(r["tpu_losses"]), torch.tensor(r["cpu_losses"]),
                                   rtol=1e-5, atol=1e-6)
        for p, q in zip(r["tpu_params"], r["cpu_params"], strict=True):
            torch.testing.assert_close(torch.tensor(p), torch.tensor(q), rtol=1e-4, atol=1e-5)


def test_replicas_agree(ranks):
    # Each worker trained on its own half of the batch, so the losses differ,
    # but DDP keeps the parameters identical.
    assert ranks[0]["tpu_losses"] != ranks[1]["tpu_losses"]
    assert ranks[0]["tpu_params"] == ranks[1]["tpu_params"]
