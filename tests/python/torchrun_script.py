"""A script as users launch it: `torchrun --nproc-per-node=N torchrun_script.py OUT_DIR`.

No setup beyond what torchrun exports (the env:// rendezvous): each rank
finds its device (tpu:LOCAL_RANK when its client shows several, else
tpu:0), and a few collectives and DDP steps run. (A bare
`init_process_group()` registers only the accelerator's backend, as on CUDA,
and DDP's logger then looks for Gloo: name the backends.)
Each rank writes {check: "ok" | error} to OUT_DIR/rank<R>.json.
"""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_tpu  # noqa: F401  (the torch.backends entry point loads it too)


def main():
    out_dir = sys.argv[1]
    results = {}
    dist.init_process_group("cpu:gloo,tpu:tpu_dist")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])

    def check(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=4)

    def device():
        expected = local if torch.tpu.device_count() > 1 else 0
        assert torch.tpu.current_device() == expected, (torch.tpu.current_device(), expected)
        assert torch.ones(1, device="tpu").device.index == expected
        assert "tpu:tpu_dist" in dist.get_backend_config(), dist.get_backend_config()
    check("device_is_local_rank", device)

    def all_reduce():
        t = torch.full((3,), rank + 1.0, device="tpu")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [world * (world + 1) / 2] * 3, t.cpu()
        c = torch.full((2,), rank + 1.0)  # CPU tensors take Gloo
        dist.all_reduce(c)
        assert c.tolist() == [world * (world + 1) / 2] * 2, c
    check("all_reduce", all_reduce)

    def ddp():
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to("tpu"))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(2):
            loss = model(torch.randn(3, 4, generator=g).to("tpu")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        # Gathered on tpu (tpu_dist), not as objects through Gloo: a Gloo
        # worker thread drops its last reference to a Python-made CPU tensor
        # a moment after the collective returns, and when the interpreter is
        # already finalizing then, Python ends that thread and libstdc++
        # aborts (a PyTorch race: DDP keeps the group alive past
        # destroy_process_group, so Gloo's threads are never joined).
        weight = model.module.weight.detach()
        weights = [torch.empty_like(weight) for _ in range(world)]
        dist.all_gather(weights, weight)
        assert all(torch.equal(w.cpu(), weights[0].cpu()) for w in weights), weights
    check("ddp_replicas_agree", ddp)

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
