"""The device-native transport of `tpu_dist`: ranks as threads of one process,
rank r on tpu:r of one XLA:CPU client with N devices, so each collective is a
StableHLO collective in one PJRT program run across the N devices. Every
collective is compared with the same collective computed on CPU tensors, in
Strict and Fused Eager, on 2 and 4 devices; the metrics show which transport
ran. The ranks run tests/python/dist_native_cases.py."""
import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch without distributed")

# Checks that must run host-staged on every rank (decided together).
HOST = {"all_to_all_uneven_host", "premul_sum_host"}
# Checks that raise before any collective runs.
NONE = {"mismatched_dtypes_raise", "send_without_recv_raise"}


@pytest.fixture(scope="module", params=[(2, "DEFER_NEVER"), (2, "DEFER_AND_FUSE"),
                                        (4, "DEFER_NEVER"), (4, "DEFER_AND_FUSE")],
                ids=lambda p: f"{p[0]}dev-{p[1]}")
def results(request, tmp_path_factory):
    world, mode = request.param
    out = str(tmp_path_factory.mktemp("native") / "out.json")
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", TORCH_TPU_NUM_DEVICES=str(world),
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    p = subprocess.run([sys.executable, os.path.join(HERE, "dist_native_cases.py"), mode,
                        str(world), out], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with open(out) as f:
        ranks = json.load(f)
    for r in ranks:
        assert "setup" not in r, r["setup"]
    return ranks


def case_names():
    sys.path.insert(0, HERE)
    import dist_native_cases
    return list(dist_native_cases.checks(0, 2))


@pytest.mark.parametrize("name", case_names())
def test_native(results, name):
    for rank, r in enumerate(results):
        assert r[name] == "ok", f"rank {rank}: {r[name]}"
        counts = r[name + ":metrics"]
        if name in NONE:
            assert counts == {"collectives_native": 0, "collectives_host_staged": 0}, counts
        elif name in HOST:
            assert counts["collectives_native"] == 0 and counts["collectives_host_staged"] >= 1
        else:
            assert counts["collectives_native"] >= 1 and counts["collectives_host_staged"] == 0, \
                counts
