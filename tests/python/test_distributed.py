"""The `tpu_dist` process-group backend with 2 processes on this machine:
every collective against the same collective on CPU tensors through Gloo,
the ways to create a group, clear errors, and DDP against one process on the
global batch. The ranks run tests/python/dist_cases.py."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import torch_tpu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORLD = 2

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch without distributed")


def run_ranks(scenario, tmp_path, mode="DEFER_NEVER", timeout=120, env=None, world=WORLD):
    """Runs one scenario on `world` processes; returns each rank's results."""
    init_file = str(tmp_path / f"{scenario}.init")
    out = str(tmp_path / f"{scenario}.out")
    # The ranks share a compile cache of their own (each program compiles
    # once: the other ranks wait for it and load it, csrc/engine/cache.h).
    environ = dict(os.environ, TORCH_TPU_DISK_CACHE="1",
                   TORCH_TPU_CACHE_DIR=str(tmp_path / "compile_cache"), **(env or {}),
                   PYTHONPATH=os.pathsep.join(
                       p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "dist_cases.py"), scenario,
                               mode, str(r), str(world), init_file, out],
                              env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{scenario} ranks hung past {timeout} s")
    results = []
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{logs[r][-4000:]}"
        with open(f"{out}.{r}") as f:
            results.append(json.load(f))
    for r in results:
        assert "scenario" not in r, r["scenario"]
    return results


@pytest.fixture(scope="module", params=["DEFER_NEVER", "DEFER_AND_FUSE"])
def collectives(request, tmp_path_factory):
    return run_ranks("collectives", tmp_path_factory.mktemp("collectives"), mode=request.param)


COLLECTIVES = [
    "all_reduce_sum", "all_reduce_avg", "all_reduce_min", "all_reduce_max",
    "all_reduce_product", "all_reduce_band_int32", "all_reduce_bor_int32",
    "all_reduce_bxor_int32", "all_reduce_sum_bfloat16", "all_reduce_sum_int64",
    "all_reduce_sum_float16", "all_reduce_avg_bfloat16", "all_reduce_premul_sum",
    "all_reduce_view_updates_base", "all_reduce_async_wait_and_future",
    "all_reduce_coalesced", "broadcast", "all_gather", "all_gather_into_tensor", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single_uneven", "all_to_all",
    "gather", "scatter", "send_recv", "batch_isend_irecv_recv_first", "barrier",
    "functional_all_reduce", "functional_all_reduce_avg_bfloat16",
    "functional_all_gather_into_tensor", "functional_reduce_scatter_tensor",
    "functional_all_to_all_single", "functional_broadcast", "functional_all_reduce_coalesced",
    "funcol_api", "compiled_functional_all_reduce", "metrics_count_host_staged",
]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_matches_gloo_on_cpu(collectives, name):
    for rank, results in enumerate(collectives):
        assert results.get(name) == "ok", f"rank {rank}: {results.get(name)}"


def test_every_collective_check_is_listed(collectives):
    assert sorted(collectives[0]) == sorted(COLLECTIVES)


def test_init_process_group_variants(tmp_path):
    for rank, results in enumerate(run_ranks("init", tmp_path)):
        assert len(results) == 5, results
        for key, value in results.items():
            assert value == "ok", f"rank {rank} {key}: {value}"


SPLITS = ["split_group_whole", "split_group_singletons", "new_group_rank_outside",
          "device_mesh_sub_meshes"]


def test_groups_split_from_a_bound_device(tmp_path):
    for rank, results in enumerate(run_ranks("split", tmp_path)):
        assert sorted(results) == sorted(SPLITS), results
        for key, value in results.items():
            assert value == "ok", f"rank {rank} {key}: {value}"


@pytest.mark.parametrize("devices", ["1", "2"])
def test_torchrun_needs_no_setup(tmp_path, devices):
    """`torchrun --nproc-per-node=2 script.py` with nothing else set up; with
    TORCH_TPU_NUM_DEVICES=2 each rank's client shows 2 devices and the rank
    takes tpu:LOCAL_RANK, with 1 it takes tpu:0."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", TORCH_TPU_NUM_DEVICES=devices,
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
         os.path.join(HERE, "torchrun_script.py"), str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for rank in range(WORLD):
        with open(tmp_path / f"rank{rank}.json") as f:
            results = json.load(f)
        assert sorted(results) == ["all_reduce", "ddp_replicas_agree", "device_is_local_rank"]
        for key, value in results.items():
            assert value == "ok", f"rank {rank} {key}: {value}"


def test_errors_are_clear_and_do_not_hang(tmp_path):
    for rank, results in enumerate(run_ranks("errors", tmp_path, timeout=90)):
        for key in ("cpu_tensor", "cpu_output", "after_errors", "mismatched_shapes",
                    "after_mismatch"):
            assert results.get(key) == "ok", f"rank {rank} {key}: {results.get(key)}"


def test_rank_that_exits_early_gives_an_error_naming_the_collective(tmp_path):
    for rank, results in enumerate(run_ranks("early_exit", tmp_path, timeout=90)):
        assert results.get("early_exit") == "ok", f"rank {rank}: {results}"


# The quickstart MLP and the small GPT ("+gpt"), on 2 and 4 processes, in
# Strict, Fused and compiled; on this 2-core machine each run takes 25-55 s
# (the ranks share one compile cache, so each program compiles once).
DDP_RUNS = [
    (f"{mode}{model}", world)
    for world in (2, 4) for model in ("", "+gpt")
    for mode in ("DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER+compiled")
] + [("DEFER_NEVER+bucket_view+find_unused", 2)]


@pytest.mark.parametrize("mode,world", DDP_RUNS, ids=[f"{m}-{w}procs" for m, w in DDP_RUNS])
def test_ddp_matches_single_process(tmp_path, mode, world):
    """20 steps of DDP (the quickstart MLP or the small GPT) equal 20 steps of
    one process on the global batch (on CPU; float32 matmuls on tpu)."""
    results = run_ranks("ddp", tmp_path, mode=mode, world=world, timeout=400)
    for rank, r in enumerate(results):
        assert r.get("ranks_agree") == "ok", f"rank {rank}: {r}"
        assert r.get("allreduces_were_host_staged") == "ok", f"rank {rank}: {r}"
    assert results[0].get("equals_single_process") == "ok", results[0]


def test_ddp_logger_times_tpu_modules(tmp_path):
    """DDP's logger has a timer for tpu modules (host timestamps, as for CPU
    ones), so it reports step times instead of warning that it cannot."""
    import torch.nn as nn

    dist.init_process_group("tpu_dist", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to("tpu"))
        for _ in range(2):
            model(torch.randn(3, 4, device="tpu")).sum().backward()
        logged = model._get_ddp_logging_data()
    finally:
        dist.destroy_process_group()
    for key in ("avg_forward_compute_time", "avg_backward_compute_time",
                "avg_backward_comm_time"):
        assert logged.get(key, 0) > 0, (key, logged)


def test_backend_registered_at_import():
    assert "tpu_dist" in dist.Backend.backend_list and "tpu" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]


def test_loader_load_registers():
    from torch_tpu import _loader

    _loader.load()
    _loader.load()  # idempotent
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"


def test_storage_resize_to_zero_and_back():
    t = torch.arange(6, dtype=torch.float32).to("tpu")
    storage = t.untyped_storage()
    before = torch.tpu.memory_allocated()
    storage.resize_(0)
    assert storage.nbytes() == 0
    assert torch.tpu.memory_allocated() == before - 24
    storage.resize_(24)
    assert storage.nbytes() == 24
    t.copy_(torch.ones(6))  # FSDP2 writes the regrown storage in place
    assert t.cpu().tolist() == [1.0] * 6


def test_storage_resize_keeps_prefix():
    t = torch.arange(6, dtype=torch.float32).to("tpu")
    storage = t.untyped_storage()
    storage.resize_(16)
    assert torch.tensor([], device="tpu").set_(storage, 0, (4,)).cpu().tolist() == [0, 1, 2, 3]
    storage.resize_(32)
    grown = torch.tensor([], device="tpu").set_(storage, 0, (8,))
    assert grown.cpu().tolist() == [0, 1, 2, 3, 0, 0, 0, 0]
    with pytest.raises(RuntimeError, match="whole number of elements"):
        storage.resize_(30)


def test_pinned_host_memory_is_pinned():
    # DDP's Reducer (find_unused_parameters) asserts its staging tensor is pinned.
    pinned = torch.ones(3).pin_memory()
    assert pinned.is_pinned() and torch.empty(4, pin_memory=True).is_pinned()
    assert not torch.ones(3).is_pinned()
    assert pinned.to("tpu", non_blocking=True).cpu().tolist() == [1.0] * 3


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER+mixed"])
def test_fsdp2_matches_gloo_on_cpu(tmp_path, mode):
    for rank, r in enumerate(run_ranks("fsdp", tmp_path, mode=mode)):
        for key in ("losses_match", "params_match", "loss_falls"):
            assert r.get(key) == "ok", f"rank {rank} {key}: {r.get(key)}"


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_tensor_parallel_matches_gloo_on_cpu(tmp_path, mode):
    for rank, r in enumerate(run_ranks("tp", tmp_path, mode=mode)):
        for key in ("losses_match", "params_match", "loss_falls"):
            assert r.get(key) == "ok", f"rank {rank} {key}: {r.get(key)}"


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_sequence_parallel_gpt_matches_gloo_on_cpu(tmp_path, mode):
    """ColwiseParallel/RowwiseParallel/SequenceParallel on the small GPT's
    blocks over 2 processes (dist_training_cases.parallelize_gpt)."""
    for rank, r in enumerate(run_ranks("sp", tmp_path, mode=mode)):
        for key in ("losses_match", "params_match", "loss_falls"):
            assert r.get(key) == "ok", f"rank {rank} {key}: {r.get(key)}"
        assert r["layout"] == "(Shard(dim=0),)", r["layout"]  # qkv: column shards


def test_fsdp_by_tp_mesh_matches_gloo_on_cpu(tmp_path):
    """A 2-D mesh on 4 processes: FSDP2 over 2 data-parallel groups, TP and
    SequenceParallel over the 2 ranks of each."""
    results = run_ranks("fsdp_tp", tmp_path, world=4, timeout=300)
    for rank, r in enumerate(results):
        for key in ("losses_match", "params_match", "loss_falls"):
            assert r.get(key) == "ok", f"rank {rank} {key}: {r.get(key)}"
        # qkv's weight: rows sharded by FSDP over dp and by TP over tp.
        assert r["layout"] == "(_StridedShard(dim=0, sf=2), Shard(dim=0))", r["layout"]
    losses = [r["losses"] for r in results]
    assert losses[0] == losses[1] and losses[2] == losses[3], losses
    assert losses[0] != losses[2], losses


def test_checkpoint_saves_sharded_and_loads_into_other_world_sizes(tmp_path):
    """FSDP2 on 2 processes saves with torch.distributed.checkpoint and loads
    back; 4 processes then load the same checkpoint resharded."""
    for rank, r in enumerate(run_ranks("dcp_save", tmp_path, timeout=300)):
        assert r.get("loads_back") == "ok", f"rank {rank}: {r}"
    for rank, r in enumerate(run_ranks("dcp_load", tmp_path, world=4, timeout=300)):
        assert r.get("loads_resharded") == "ok", f"rank {rank}: {r}"
