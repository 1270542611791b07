"""Worker for tests/python/test_dist_native.py: WORLD ranks as threads of this
process, rank r on tpu:r of one client (TORCH_TPU_NUM_DEVICES=WORLD), so that
`tpu_dist` takes its device-native transport.

    python dist_native_cases.py MODE WORLD OUT_JSON

Every rank knows every rank's inputs (seeded by rank), so each check compares
its tpu result with the collective computed on CPU tensors. Writes
{check: "ok" | error} per rank and each rank's metrics deltas to OUT_JSON.
"""
import datetime
import json
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
from torch.testing._internal.distributed import multi_threaded_pg

import torch_tpu

Op = dist.ReduceOp
shared = {}  # what the ranks (threads) see of each other, for the barrier check


def data(shape, rank, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(1, 8, shape, generator=g, dtype=dtype)


def reduce_cpu(xs, op):
    if op == Op.SUM:
        return torch.stack(xs).sum(0).to(xs[0].dtype)
    if op == Op.AVG:
        return (torch.stack(xs).sum(0) / len(xs)).to(xs[0].dtype)
    if op == Op.PRODUCT:
        return torch.stack(xs).prod(0).to(xs[0].dtype)
    if op == Op.MIN:
        return torch.stack(xs).amin(0)
    if op == Op.MAX:
        return torch.stack(xs).amax(0)
    out = xs[0].clone()
    for x in xs[1:]:
        out = {Op.BAND: torch.bitwise_and, Op.BOR: torch.bitwise_or,
               Op.BXOR: torch.bitwise_xor}[op](out, x)
    return out


def same(tpu, cpu, exact=True):
    assert tpu.device.type == "tpu", tpu.device
    if exact:
        torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(tpu.cpu(), cpu, equal_nan=True)


def checks(rank, world):
    dev = torch.device("tpu", rank)
    everyone = range(world)
    c = {}

    def allreduce(op, dtype, shape=(5, 7), exact=True):
        def run():
            t = data(shape, rank, dtype).to(dev)
            dist.all_reduce(t, op=op)
            same(t, reduce_cpu([data(shape, r, dtype) for r in everyone], op), exact)
        return run

    for name, op in {"sum": Op.SUM, "avg": Op.AVG, "min": Op.MIN, "max": Op.MAX,
                     "product": Op.PRODUCT}.items():
        # float sums may associate differently from torch.stack(...).sum(0)
        c[f"all_reduce_{name}"] = allreduce(op, torch.float32, exact=name in ("min", "max"))
    for name, op in {"band": Op.BAND, "bor": Op.BOR, "bxor": Op.BXOR, "sum": Op.SUM,
                     "max": Op.MAX, "product": Op.PRODUCT}.items():
        c[f"all_reduce_{name}_int32"] = allreduce(op, torch.int32)
    c["all_reduce_sum_int64"] = allreduce(Op.SUM, torch.int64)
    c["all_reduce_sum_bfloat16"] = allreduce(Op.SUM, torch.bfloat16, exact=False)
    c["all_reduce_avg_bfloat16"] = allreduce(Op.AVG, torch.bfloat16, exact=False)
    c["all_reduce_max_bool"] = allreduce(Op.MAX, torch.bool)
    c["all_reduce_scalar"] = allreduce(Op.SUM, torch.int64, shape=())

    def all_reduce_view():
        base = data((6, 8), rank).to(dev)
        view = base.t()[::2]  # non-contiguous: written back through the view
        dist.all_reduce(view, op=Op.MAX)
        expect = data((6, 8), rank)
        expect.t()[::2] = torch.stack([data((6, 8), r).t()[::2] for r in everyone]).amax(0)
        same(base, expect)
    c["all_reduce_view"] = all_reduce_view

    def broadcast(dtype, root):
        def run():
            t = data((3, 4), rank, dtype)
            if dtype.is_floating_point:
                t[0, 0], t[0, 1] = -0.0, float("nan")  # moved bit-exactly
            expect = t.clone() if rank == root else None
            t = t.to(dev)
            dist.broadcast(t, src=root)
            if expect is None:
                expect = data((3, 4), root, dtype)
                if dtype.is_floating_point:
                    expect[0, 0], expect[0, 1] = -0.0, float("nan")
            same(t, expect)
            if dtype.is_floating_point:
                assert torch.signbit(t[0, 0].cpu()), "-0.0 lost its sign"
        return run

    c["broadcast_float32"] = broadcast(torch.float32, world - 1)
    c["broadcast_bfloat16"] = broadcast(torch.bfloat16, 0)
    c["broadcast_int64"] = broadcast(torch.int64, 1)
    c["broadcast_bool"] = broadcast(torch.bool, 0)

    def all_gather():
        outs = [torch.empty(2, 3, device=dev) for _ in everyone]
        dist.all_gather(outs, data((2, 3), rank).to(dev))
        for r in everyone:
            same(outs[r], data((2, 3), r))
    c["all_gather"] = all_gather

    def all_gather_into_tensor():
        out = torch.empty(world * 4, 3, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, data((4, 3), rank, torch.bfloat16).to(dev))
        same(out, torch.cat([data((4, 3), r, torch.bfloat16) for r in everyone]))
    c["all_gather_into_tensor"] = all_gather_into_tensor

    def reduce_scatter():
        ins = [data((5,), rank, seed=i).to(dev) for i in everyone]
        out = torch.empty(5, device=dev)
        dist.reduce_scatter(out, ins, op=Op.MAX)
        same(out, torch.stack([data((5,), r, seed=rank) for r in everyone]).amax(0))
    c["reduce_scatter"] = reduce_scatter

    def reduce_scatter_tensor(op, dtype, exact):
        def run():
            out = torch.empty(3, 2, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, data((world * 3, 2), rank, dtype).to(dev), op=op)
            full = reduce_cpu([data((world * 3, 2), r, dtype) for r in everyone], op)
            same(out, full[rank * 3:(rank + 1) * 3], exact)
        return run
    c["reduce_scatter_tensor_sum"] = reduce_scatter_tensor(Op.SUM, torch.float32, False)
    c["reduce_scatter_tensor_avg"] = reduce_scatter_tensor(Op.AVG, torch.float32, False)
    c["reduce_scatter_tensor_int32"] = reduce_scatter_tensor(Op.SUM, torch.int32, True)

    def all_to_all_single():
        out = torch.empty(world * 2, 3, dtype=torch.int64, device=dev)
        dist.all_to_all_single(out, data((world * 2, 3), rank, torch.int64).to(dev))
        same(out, torch.cat([data((world * 2, 3), r, torch.int64)[rank * 2:rank * 2 + 2]
                             for r in everyone]))
    c["all_to_all_single"] = all_to_all_single

    def all_to_all():
        outs = [torch.empty(4, device=dev) for _ in everyone]
        dist.all_to_all(outs, [data((4,), rank, seed=j).to(dev) for j in everyone])
        for r in everyone:
            same(outs[r], data((4,), r, seed=rank))
    c["all_to_all"] = all_to_all

    def reduce(op, dtype, root, exact):
        def run():
            t = data((4, 3), rank, dtype).to(dev)
            dist.reduce(t, dst=root, op=op)
            # Only the root's tensor changes.
            expect = (reduce_cpu([data((4, 3), r, dtype) for r in everyone], op)
                      if rank == root else data((4, 3), rank, dtype))
            same(t, expect, exact)
        return run
    c["reduce_sum"] = reduce(Op.SUM, torch.float32, world - 1, False)
    c["reduce_max_int64"] = reduce(Op.MAX, torch.int64, 0, True)
    c["reduce_bor_int32"] = reduce(Op.BOR, torch.int32, 1, True)

    def gather(root, dtype):
        def run():
            x = data((2, 5), rank, dtype, seed=3).to(dev)
            outs = [torch.empty(2, 5, dtype=dtype, device=dev) for _ in everyone]
            dist.gather(x, outs if rank == root else None, dst=root)
            if rank == root:
                for r in everyone:
                    same(outs[r], data((2, 5), r, dtype, seed=3))
        return run
    c["gather_float32"] = gather(0, torch.float32)
    c["gather_int16_last_root"] = gather(world - 1, torch.int16)

    def scatter(root, dtype):
        def run():
            out = torch.empty(3, 2, dtype=dtype, device=dev)
            ins = [data((3, 2), j, dtype, seed=4).to(dev) for j in everyone]
            dist.scatter(out, ins if rank == root else None, src=root)
            same(out, data((3, 2), rank, dtype, seed=4))
        return run
    c["scatter_float32"] = scatter(world - 1, torch.float32)
    c["scatter_bool"] = scatter(0, torch.bool)

    def gather_mismatched_roots():
        # Every rank names itself the root: all raise naming each rank's call.
        outs = [torch.empty(2, device=dev) for _ in everyone]
        try:
            dist.gather(torch.ones(2, device=dev), outs, dst=rank)
        except dist.DistBackendError as e:
            msg = str(e)
            assert "gather" in msg and "same call" in msg, msg
            assert "rank 0: gather" in msg and f"root {world - 1}" in msg, msg
        else:
            raise AssertionError("mismatched roots did not raise")
        t = torch.full((2,), float(rank), device=dev)  # the group still works
        dist.reduce(t, dst=0)
        if rank == 0:
            same(t, torch.full((2,), float(sum(everyone))))
    c["gather_mismatched_roots_raise"] = gather_mismatched_roots

    # Point-to-point: every rank takes part (pairs 0-1, 2-3, or a ring).
    peer = rank + 1 if rank % 2 == 0 else rank - 1

    def send_recv_pairs():
        # Even ranks send, odd ranks receive into a non-contiguous view.
        if rank % 2 == 0:
            dist.send(data((4, 6), rank, torch.bfloat16, seed=5).to(dev), dst=peer)
        else:
            base = torch.zeros(6, 8, dtype=torch.bfloat16, device=dev)
            dist.recv(base.t()[::2], src=peer)
            expect = torch.zeros(6, 8, dtype=torch.bfloat16)
            expect.t()[::2] = data((4, 6), peer, torch.bfloat16, seed=5)
            same(base, expect)
    c["send_recv_pairs"] = send_recv_pairs

    def send_recv_ring():
        # isend/irecv around the ring, then wait: no rank blocks on its send.
        x = data((3, 4), rank, torch.int64, seed=6).to(dev)
        out = torch.empty(3, 4, dtype=torch.int64, device=dev)
        reqs = [dist.isend(x, (rank + 1) % world), dist.irecv(out, (rank - 1) % world)]
        for req in reqs:
            req.wait()
        same(out, data((3, 4), (rank - 1) % world, torch.int64, seed=6))
    c["send_recv_ring"] = send_recv_ring

    def batch_isend_irecv():
        x = data((5,), rank, seed=7).to(dev)
        out = torch.empty(5, device=dev)
        ops = [dist.P2POp(dist.irecv, out, (rank - 1) % world),
               dist.P2POp(dist.isend, x, (rank + 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        same(out, data((5,), (rank - 1) % world, seed=7))
    c["batch_isend_irecv"] = batch_isend_irecv

    def send_recv_tags():
        # Two messages to one peer, received in the other order by tag.
        if rank % 2 == 0:
            reqs = [dist.isend(data((3,), rank, seed=8).to(dev), peer, tag=1),
                    dist.isend(data((2,), rank, seed=9).to(dev), peer, tag=2)]
            for req in reqs:
                req.wait()
        else:
            two, one = torch.empty(2, device=dev), torch.empty(3, device=dev)
            dist.recv(two, peer, tag=2)
            dist.recv(one, peer, tag=1)
            same(one, data((3,), peer, seed=8))
            same(two, data((2,), peer, seed=9))
    c["send_recv_tags"] = send_recv_tags

    def recv_any_source():
        if rank % 2 == 0:
            dist.send(torch.full((2,), float(rank), device=dev), dst=peer)
        else:
            t = torch.empty(2, device=dev)
            src = dist.recv(t)
            assert src == peer, (src, peer)
            same(t, torch.full((2,), float(peer)))
    c["recv_any_source"] = recv_any_source

    def send_recv_mismatch():
        # The receiver expects one element more than is sent: both ends raise
        # naming both calls, and the pair still works afterwards.
        try:
            if rank % 2 == 0:
                dist.send(torch.ones(3, device=dev), dst=peer)
            else:
                dist.recv(torch.empty(4, device=dev), src=peer)
        except dist.DistBackendError as e:
            msg = str(e)
            sender, receiver = (rank, peer) if rank % 2 == 0 else (peer, rank)
            assert f"send from rank {sender} to rank {receiver}" in msg, msg
            assert f"recv at rank {receiver} from rank {sender}" in msg, msg
        else:
            raise AssertionError("mismatched sizes did not raise")
        t = torch.full((3,), float(rank), device=dev)
        if rank % 2 == 0:
            dist.send(t, dst=peer)
        else:
            dist.recv(t, src=peer)
            same(t, torch.full((3,), float(peer)))
    c["send_recv_mismatch_raise"] = send_recv_mismatch

    def send_recv_complex():
        if rank % 2 == 0:
            dist.send(data((3,), rank, seed=11).to(torch.complex64).to(dev) * 1j, dst=peer)
        else:
            t = torch.empty(3, dtype=torch.complex64, device=dev)
            dist.recv(t, src=peer)
            same(t, data((3,), peer, seed=11).to(torch.complex64) * 1j)
    c["send_recv_complex"] = send_recv_complex

    def send_recv_one_device():
        # Both ends on the receiver's device: the pair's program is a copy.
        there = torch.device("tpu", peer if rank % 2 == 0 else rank)
        if rank % 2 == 0:
            dist.send(data((2, 3), rank, seed=12).to(there), dst=peer)
        else:
            t = torch.empty(2, 3, device=there)
            dist.recv(t, src=peer)
            same(t, data((2, 3), peer, seed=12))
    c["send_recv_one_device"] = send_recv_one_device

    def send_without_recv():
        # Nobody receives: the send raises after its group's timeout, naming
        # both ends; nothing is left behind in the mailbox.
        g = dist.new_group(ranks=list(everyone), timeout=datetime.timedelta(seconds=2))
        if rank % 2 == 0:
            try:
                dist.send(torch.ones(2, device=dev), group_dst=peer, group=g)
            except dist.DistBackendError as e:
                msg = str(e)
                assert f"send from rank {rank} to rank {peer}" in msg, msg
                assert "timed out after 2000 ms: no matching recv" in msg, msg
            else:
                raise AssertionError("a send nobody received did not raise")
        try:
            dist.send(torch.ones(1, device=dev), dst=rank)
        except ValueError as e:
            assert "not another rank" in str(e) or "same as" in str(e), str(e)
        else:
            raise AssertionError("a send to itself did not raise")
    c["send_without_recv_raise"] = send_without_recv

    def barrier():
        # Rank 0 writes late; nobody leaves the barrier before it has written.
        if rank == 0:
            time.sleep(0.3)
            shared["barrier"] = True
        dist.barrier()
        assert shared.get("barrier"), f"rank {rank} left the barrier early"
        dist.barrier()  # nobody clears it before everyone has looked
        if rank == 0:
            shared.pop("barrier")
    c["barrier"] = barrier

    # Groups made from the world group: split_group, new_group, a DeviceMesh.
    halves = [[r for r in everyone if r % 2 == 0], [r for r in everyone if r % 2 == 1]]
    if world == 2:
        halves = [[0, 1]]
    mine = next(h for h in halves if rank in h)

    def in_group(g, ranks):
        t = data((4,), rank, seed=10).to(dev)
        dist.all_reduce(t, group=g)
        same(t, torch.stack([data((4,), r, seed=10) for r in ranks]).sum(0), exact=False)
        dist.barrier(group=g)
        if len(ranks) > 1:  # a send to the next rank of the group
            i = ranks.index(rank)
            x, y = torch.full((2,), float(rank), device=dev), torch.empty(2, device=dev)
            reqs = [dist.isend(x, group_dst=(i + 1) % len(ranks), group=g),
                    dist.irecv(y, group_src=(i - 1) % len(ranks), group=g)]
            for req in reqs:
                req.wait()
            same(y, torch.full((2,), float(ranks[(i - 1) % len(ranks)])))

    def split_group():
        in_group(dist.split_group(split_ranks=halves), mine)
    c["split_group"] = split_group

    def new_group():
        groups = [dist.new_group(ranks=h) for h in halves]
        in_group(groups[halves.index(mine)], mine)
    c["new_group"] = new_group

    def device_mesh():
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("tpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        tp = mesh.get_group("tp")
        in_group(tp, dist.get_process_group_ranks(tp))
    c["device_mesh"] = device_mesh

    # Host-staged on every rank, decided together: uneven splits, PREMUL_SUM.
    def all_to_all_uneven():
        in_splits = [r + 1 for r in everyone]            # rank sends r+1 rows to rank r
        out_splits = [rank + 1] * world
        out = torch.empty(sum(out_splits), device=dev)
        x = torch.arange(sum(in_splits), dtype=torch.float32) + 100 * rank
        dist.all_to_all_single(out, x.to(dev), out_splits, in_splits)
        start = sum(in_splits[:rank])
        same(out, torch.cat([torch.arange(start, start + rank + 1, dtype=torch.float32) + 100 * r
                             for r in everyone]))
    c["all_to_all_uneven_host"] = all_to_all_uneven

    def premul_sum():
        t = data((4,), rank).to(dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        same(t, torch.stack([data((4,), r) for r in everyone]).sum(0) * 0.5, exact=False)
    c["premul_sum_host"] = premul_sum

    def mismatch():
        t = torch.ones(3 + (rank == world - 1), device=dev)
        try:
            dist.all_reduce(t)
        except dist.DistBackendError as e:
            msg = str(e)
            assert "all_reduce" in msg or "allreduce" in msg, msg
            assert "rank 0" in msg and f"rank {world - 1}" in msg, msg
            assert "same call" in msg, msg
        else:
            raise AssertionError("mismatched shapes did not raise")
        t = torch.ones(3, device=dev)  # the group still works
        dist.all_reduce(t)
        same(t, torch.full((3,), float(world)))
    c["mismatched_shapes_raise"] = mismatch

    def dtype_mismatch():
        t = torch.ones(3, dtype=torch.float32 if rank else torch.int32, device=dev)
        try:
            dist.all_reduce(t)
        except dist.DistBackendError as e:
            assert "rank 0" in str(e) and "i32" in str(e), str(e)
        else:
            raise AssertionError("mismatched dtypes did not raise")
    c["mismatched_dtypes_raise"] = dtype_mismatch
    return c


def rank_main(rank, world, store, mode, results, barrier):
    out = {}
    try:
        torch_tpu.set_eager_mode(mode)
        # device_id binds the device, so that groups are split from this one.
        dist.init_process_group("tpu_dist", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60),
                                device_id=torch.device("tpu", rank))
        cases = checks(rank, world)
        for name, fn in cases.items():
            barrier.wait()
            before = torch_tpu.metrics()
            try:
                fn()
                out[name] = "ok"
            except Exception:  # noqa: BLE001 - reported per check
                out[name] = traceback.format_exc()
            after = torch_tpu.metrics()
            out[name + ":metrics"] = {
                k: after.get(k, 0) - before.get(k, 0)
                for k in ("collectives_native", "collectives_host_staged")}
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out["setup"] = traceback.format_exc()
        barrier.abort()
    results[rank] = out


def main():
    mode, world, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    assert torch.tpu.device_count() >= world, torch.tpu.device_count()
    multi_threaded_pg._install_threaded_pg()  # torch.distributed's state per thread
    torch._C._distributed_c10d._set_thread_isolation_mode(True)  # group names too
    store = dist.HashStore()
    results = [None] * world
    barrier = threading.Barrier(world)
    threads = [threading.Thread(target=rank_main,
                                args=(r, world, store, mode, results, barrier))
               for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
