"""FSDP2 and tensor-parallel scenarios for tests/python/dist_cases.py: the same
training run on tpu (tpu_dist) and on CPU (Gloo) in each rank, compared."""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def gpt():
    """The benchmarks' small GPT, without the qkv bias: its key part has a zero
    gradient, which AdamW turns into noise-driven steps of size lr on any two
    backends."""
    from benchmarks.common import TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(vocab=64, dim=32, heads=2, layers=2, seq=8)
    for block in model.blocks:
        block.qkv.register_parameter("bias", None)
    return model


def tokens(rank, steps, batch=2, seq=8, vocab=64):
    """Each rank's batch, the same every step (the loss falls)."""
    g = torch.Generator().manual_seed(10 + rank)
    return [torch.randint(0, vocab, (batch, seq + 1), generator=g)] * steps


def train_fsdp(device, data, mixed):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = gpt().to(device)
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if mixed else MixedPrecisionPolicy())
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    losses = []
    for batch in data:
        batch = batch.to(device)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.full_tensor().detach().cpu() for p in model.parameters()]
    return losses, params


def start(mode, rank, world, init_file):
    """One group serving both devices: Gloo for cpu, tpu_dist for tpu."""
    import torch_tpu
    from dist_cases import init

    torch_tpu.set_eager_mode(mode)
    # TPU matmuls round operands to bf16 by default; compare with CPU at f32.
    torch.set_float32_matmul_precision("highest")
    init("cpu:gloo,tpu:tpu_dist", init_file, rank, world)


def run_fsdp(mode, rank, world, init_file, steps=3):
    """mode: an eager mode, optionally "+mixed" (bf16 parameters, f32 reduction)."""
    mode, *options = mode.split("+")
    mixed = "mixed" in options
    start(mode, rank, world, init_file)
    data = tokens(rank, steps)
    tpu_losses, tpu_params = train_fsdp("tpu", data, mixed)
    cpu_losses, cpu_params = train_fsdp("cpu", data, mixed)
    # AdamW steps an element by lr·m/√v: where the gradient is near zero, a
    # rounding difference moves it by a fair part of lr (1e-2); in bf16 by
    # up to lr a step, either way, on either backend.
    if mixed:
        return compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params,
                            dict(rtol=2e-2, atol=2e-2), dict(rtol=2e-2, atol=5e-2))
    return compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params)


def compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params,
                 loss_tol=dict(rtol=1e-4, atol=1e-4), tol=dict(rtol=1e-3, atol=1e-3)):
    results = {}
    try:
        torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses),
                                   **loss_tol)
        results["losses_match"] = "ok"
    except AssertionError as e:
        results["losses_match"] = f"{tpu_losses} vs {cpu_losses}: {e}"
    try:
        for a, b in zip(tpu_params, cpu_params):
            torch.testing.assert_close(a, b, **tol)
        results["params_match"] = "ok"
    except AssertionError as e:
        results["params_match"] = str(e)
    results["loss_falls"] = "ok" if tpu_losses[-1] < tpu_losses[0] else str(tpu_losses)
    return results


def train_tp(device, steps):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(device)
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)  # the same batch on every rank
    x, y = torch.randn(8, 16, generator=g).to(device), torch.randn(8, 16, generator=g).to(device)
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.full_tensor().detach().cpu() for p in model.parameters()]


def run_tp(mode, rank, world, init_file, steps=3):
    """Tensor parallelism (ColwiseParallel then RowwiseParallel) on an MLP."""
    start(mode, rank, world, init_file)
    tpu_losses, tpu_params = train_tp("tpu", steps)
    cpu_losses, cpu_params = train_tp("cpu", steps)
    return compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params)


# --- torch.distributed.checkpoint -----------------------------------------

def sharded_gpt(world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = gpt().to("tpu")
    mesh = init_device_mesh("tpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def checkpoint_paths(init_file):
    import os

    folder = os.path.dirname(init_file)
    return os.path.join(folder, "checkpoint"), os.path.join(folder, "reference.pt")


def full_params(model):
    return {k: v.full_tensor().detach().cpu() for k, v in model.state_dict().items()}


def run_dcp_save(mode, rank, world, init_file, steps=2):
    """Trains the FSDP2-sharded GPT on tpu for a few steps, saves it with
    torch.distributed.checkpoint, and loads it back into a model whose
    parameters were zeroed; rank 0 also keeps the full parameters for
    run_dcp_load."""
    import torch.distributed.checkpoint as dcp

    start(mode, rank, world, init_file)
    path, reference = checkpoint_paths(init_file)
    model = sharded_gpt(world)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in tokens(rank, steps):
        batch = batch.to("tpu")
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    saved = full_params(model)
    dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    if rank == 0:
        torch.save(saved, reference)
    results = {}
    fresh = sharded_gpt(world)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=path)
    try:
        local = next(iter(state["model"].values())).to_local()
        assert local.device.type == "tpu", local.device
        for k, v in full_params(fresh).items():
            torch.testing.assert_close(v, saved[k], rtol=0, atol=0)
        results["loads_back"] = "ok"
    except AssertionError as e:
        results["loads_back"] = str(e)
    return results


def run_dcp_load(mode, rank, world, init_file):
    """Loads run_dcp_save's checkpoint into the GPT sharded over another
    number of processes; the full parameters equal the saved ones."""
    import torch.distributed.checkpoint as dcp

    start(mode, rank, world, init_file)
    path, reference = checkpoint_paths(init_file)
    model = sharded_gpt(world)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=path)
    expected = torch.load(reference)
    try:
        for k, v in full_params(model).items():
            torch.testing.assert_close(v, expected[k], rtol=0, atol=0)
        return {"loads_resharded": "ok"}
    except AssertionError as e:
        return {"loads_resharded": str(e)}



# --- SequenceParallel on the GPT blocks, and a 2-D mesh (FSDP x TP) ---------

def parallelize_gpt(model, tp_mesh):
    """Tensor and sequence parallelism on the small GPT's blocks: the
    residual stream is sharded on the sequence (Shard(1)) between the
    LayerNorms (SequenceParallel); qkv and fc are ColwiseParallel (qkv's
    output gathered: the fused q/k/v split and the attention run on whole
    tensors), proj and out RowwiseParallel back to sequence shards; the head
    gathers the logits. The embeddings stay replicated."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    plan = {"blocks.0": PrepareModuleInput(input_layouts=(Replicate(),),
                                           desired_input_layouts=(Shard(1),),
                                           use_local_output=False),
            "ln": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    for i in range(len(model.blocks)):
        plan.update({
            f"blocks.{i}.ln1": SequenceParallel(),
            f"blocks.{i}.qkv": ColwiseParallel(input_layouts=Shard(1),
                                               output_layouts=Replicate()),
            f"blocks.{i}.proj": RowwiseParallel(input_layouts=Replicate(),
                                                output_layouts=Shard(1),
                                                use_local_output=False),
            f"blocks.{i}.ln2": SequenceParallel(),
            f"blocks.{i}.fc": ColwiseParallel(input_layouts=Shard(1)),
            f"blocks.{i}.out": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
    return parallelize_module(model, tp_mesh, plan)


def full(p):
    from torch.distributed.tensor import DTensor

    return (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()


def train_parallel_gpt(device, data, dp):
    """`dp` 1: tensor/sequence parallelism over all ranks; else a 2-D mesh
    (dp, tp) with FSDP2 over dp (per block and root) and TP/SP over tp."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    model = gpt().to(device)
    if dp == 1:
        parallelize_gpt(model, init_device_mesh(device, (world,)))
    else:
        mesh = init_device_mesh(device, (dp, world // dp), mesh_dim_names=("dp", "tp"))
        parallelize_gpt(model, mesh["tp"])
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    # Per parameter (foreach=False): replicated embeddings next to DTensors.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2, foreach=False)
    losses = []
    for batch in data:
        batch = batch.to(device)
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    layout = str(model.blocks[0].qkv.weight.placements)
    return losses, [full(p) for p in model.parameters()], layout


def run_sp(mode, rank, world, init_file, steps=3):
    """The GPT with TP + SequenceParallel over all ranks (one batch)."""
    start(mode, rank, world, init_file)
    data = tokens(0, steps)
    tpu_losses, tpu_params, layout = train_parallel_gpt("tpu", data, dp=1)
    cpu_losses, cpu_params, _ = train_parallel_gpt("cpu", data, dp=1)
    results = compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params)
    results["layout"] = layout
    return results


def run_fsdp_tp(mode, rank, world, init_file, steps=3):
    """A 2-D mesh: FSDP2 over 2 data-parallel groups x TP/SP over 2 ranks;
    each data-parallel group trains on its own batch."""
    start(mode, rank, world, init_file)
    dp = 2
    data = tokens(rank // (world // dp), steps)
    tpu_losses, tpu_params, layout = train_parallel_gpt("tpu", data, dp=dp)
    cpu_losses, cpu_params, _ = train_parallel_gpt("cpu", data, dp=dp)
    results = compare_runs(tpu_losses, tpu_params, cpu_losses, cpu_params)
    results["layout"] = layout
    results["losses"] = tpu_losses  # the same within a TP pair, not across
    return results
