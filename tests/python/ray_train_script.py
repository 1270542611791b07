"""Ray Train on tpu, as a user runs it: `python ray_train_script.py OUT_DIR [STEPS]`.

A local Ray instance with its resources declared by hand (2 CPUs: there is
no TPU for Ray to count) runs `ray.train.torch.TorchTrainer` with
`TorchConfig(backend="tpu_dist")` on 2 workers. Ray's worker setup imports
`torch_tpu._loader` and calls `load()` before `init_process_group("tpu_dist")`.
Each worker trains the quickstart MLP on tpu, wrapped in DDP by
`ray.train.torch.prepare_model`, on its half of each global batch; then the
same DDP run on CPU through a Gloo group of the same workers. Each worker
writes its losses and final parameters (as lists) to OUT_DIR/rank<R>.json;
tests/python/test_ray_train.py compares them.

`ScalingConfig(use_tpu=True)` is for TPU slices (it asks for a topology and
an accelerator type and reserves a slice by node labels), so the workers ask
for CPUs and the loop names its device: `prepare_model(model, move_to_device=
torch.device("tpu"))`.
"""
import json
import os
import shutil
import sys
import tempfile
import time

# Quiet and quick: none of Ray Train's background helpers is needed here.
for key, value in {"RAY_USAGE_STATS_ENABLED": "0", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
                   "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
                   "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
                   "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
                   "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0",
                   "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}.items():
    os.environ.setdefault(key, value)
os.environ.pop("RAY_ADDRESS", None)

import ray  # noqa: E402
from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402

WORKERS = 2
BATCH = 16  # global batch; each worker takes BATCH // WORKERS rows


def train_loop(config):
    """One Ray Train worker: DDP on tpu (tpu_dist), then DDP on CPU (Gloo)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import ray.train
    import ray.train.torch
    import torch_tpu
    from benchmarks.common import quickstart_data, quickstart_mlp

    # TPU matmuls round operands to bf16 by default; compare with CPU at f32.
    torch.set_float32_matmul_precision("highest")
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    steps, per = config["steps"], BATCH // world
    x, y = quickstart_data(n=steps * BATCH)
    local = [(a[rank * per:(rank + 1) * per], b[rank * per:(rank + 1) * per])
             for a, b in zip(x.split(BATCH), y.split(BATCH))]

    def run(model, device):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses = []
        for a, b in local:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(a.to(device)), b.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu().flatten().tolist() for p in model.parameters()]

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(quickstart_mlp(),
                                          move_to_device=torch.device("tpu"))
    assert isinstance(model, nn.parallel.DistributedDataParallel), type(model)
    assert next(model.parameters()).device.type == "tpu"
    tpu_losses, tpu_params = run(model, "tpu")

    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    cpu_model = nn.parallel.DistributedDataParallel(quickstart_mlp(), process_group=gloo)
    cpu_losses, cpu_params = run(cpu_model, "cpu")

    result = {"rank": rank, "world": world, "backend": dist.get_backend(),
              "torch_tpu": torch_tpu.__file__,
              "host_staged": torch_tpu.metrics().get("collectives_host_staged", 0),
              "tpu_losses": tpu_losses, "tpu_params": tpu_params,
              "cpu_losses": cpu_losses, "cpu_params": cpu_params}
    with open(os.path.join(config["out_dir"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    ray.train.report({"loss": tpu_losses[-1]})


def main():
    out_dir = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    start = time.perf_counter()
    # A private instance (its own temp dir, never another user's cluster).
    # (A short path: Ray's socket paths must fit in 107 bytes.)
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray.init(address="local", num_cpus=WORKERS, include_dashboard=False,
             log_to_driver=False, _temp_dir=temp_dir)
    try:
        trainer = TorchTrainer(
            train_loop, train_loop_config={"out_dir": out_dir, "steps": steps},
            torch_config=TorchConfig(backend="tpu_dist", timeout_s=120),
            scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False,
                                         resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(out_dir, "ray_results"),
                                 name="tpu_dist_mlp"))
        result = trainer.fit()
        if result.error is not None:
            raise result.error
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    print(f"ray_train_script: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
