"""Batched host<->device copies: torch.tpu.batch_to_device / batch_to_host
and the reference's torch_tpu._internal.batch_transfer, against CPU
PyTorch (Tensor.to / Tensor.cpu / slice assignment) in every eager mode."""
import gc

import pytest
import torch

import torch_tpu
from torch_tpu._internal import batch_transfer as bt

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]


@pytest.fixture(params=MODES)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def host_sources():
    """CPU tensors of every kind Tensor.to accepts: dtypes, views, zero-size."""
    base = make((6, 5), torch.float32, 1)
    return [make((4, 3), d, i) for i, d in enumerate(DTYPES)] + [
        base.t(),                       # transposed: dense, strides kept
        base[1:5:2, ::2],               # strided slice: not dense
        base[2:],                       # storage offset
        base[:, 1],                     # column
        torch.arange(3.0).expand(4, 3),  # zero stride
        torch.empty(0, 3),              # zero-size
        torch.tensor(2.5),              # 0-d
        make((2, 3, 4, 5), torch.float32, 2).permute(0, 2, 3, 1),
        make((3, 2), torch.complex64, 3).conj(),  # conjugate view
        make((7,), torch.float32, 4).neg()[::3],
    ]


def test_batch_to_device_matches_to(mode):
    srcs = host_sources()
    out = torch.tpu.batch_to_device(srcs)
    assert len(out) == len(srcs)
    for s, o in zip(srcs, out):
        ref = s.to("tpu")
        assert o.device == ref.device and o.dtype == s.dtype and o.shape == s.shape
        assert o.stride() == ref.stride(), (s.shape, s.stride())
        assert not o.requires_grad
        torch.testing.assert_close(o.cpu(), s.resolve_conj().resolve_neg(), rtol=0, atol=0)


def test_batch_to_device_results_are_independent_tensors(mode):
    src = torch.arange(12.0).reshape(3, 4)
    view = src[1:]
    a, b = torch.tpu.batch_to_device([src, view])
    src.zero_()                          # the copies are done once it returns
    a.add_(1)                            # in-place on one result leaves the other alone
    torch.testing.assert_close(a.cpu(), torch.arange(12.0).reshape(3, 4) + 1)
    torch.testing.assert_close(b.cpu(), torch.arange(4.0, 12.0).reshape(2, 4))
    assert (a * 2).sum().item() == 2 * (torch.arange(12.0) + 1).sum().item()


def test_batch_to_device_device_argument():
    x = torch.ones(3)
    for dev in (None, "tpu", "tpu:0", torch.device("tpu", 0), 0):
        (y,) = torch.tpu.batch_to_device([x], dev)
        assert y.device == torch.device("tpu", 0)
    assert torch.tpu.batch_to_device([]) == []
    assert torch.tpu.batch_to_device((x, x))[1].device.type == "tpu"


def tpu_sources():
    """tpu tensors: computed (pending in Fused Eager), views, zero-size."""
    base = (torch.arange(30.0).reshape(6, 5).to("tpu") * 1.5).sin()
    srcs = [make((4, 3), d, i).to("tpu") for i, d in enumerate(DTYPES)]
    srcs += [
        base, base.t(), base[1:5:2, ::2], base[2:], base[:, 1],
        torch.arange(3.0, device="tpu").expand(4, 3),
        torch.empty(0, 3, device="tpu"), torch.tensor(2.5, device="tpu"),
        make((2, 3, 4, 5), torch.float32, 2).to("tpu").permute(0, 2, 3, 1),
        base + 1, (base @ base.t()).relu(),
    ]
    return srcs


@pytest.mark.parametrize("pin_memory", [False, True])
def test_batch_to_host_matches_cpu(mode, pin_memory):
    srcs = tpu_sources()
    expected = [s.cpu() for s in srcs]
    out = torch.tpu.batch_to_host(srcs, pin_memory=pin_memory)
    assert len(out) == len(srcs)
    for s, o, e in zip(srcs, out, expected):
        assert o.device.type == "cpu" and o.dtype == e.dtype and o.shape == e.shape
        assert o.stride() == e.stride(), (s.shape, s.stride())
        assert o.is_pinned() == pin_memory
        torch.testing.assert_close(o, e, rtol=0, atol=0)


def test_batch_to_host_runs_the_pending_program_once():
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        x = torch.randn(64, 64).to("tpu")
        torch_tpu.sync()
        outs = [x * i + 1 for i in range(8)]   # pending: one recording
        torch_tpu.reset_metrics()
        got = torch.tpu.batch_to_host(outs)
        m = torch_tpu.metrics()
        assert m.get("flush_host_read", 0) == 1, m
        assert m.get("transfers_to_host", 0) == 8, m
    xc = x.cpu()
    for i, g in enumerate(got):
        torch.testing.assert_close(g, xc * i + 1)


def test_async_futures(mode):
    srcs = [make((128, 64), torch.float32, i) for i in range(5)]
    fut = torch.tpu.batch_to_device(srcs, async_op=True)
    assert isinstance(fut, torch.tpu.TransferFuture)
    dev = fut.wait()
    assert fut.done()
    assert fut.wait() is not None                # a second wait is harmless
    back = torch.tpu.batch_to_host([d * 2 for d in dev], async_op=True)
    res = back.wait()
    assert back.done()
    for s, r in zip(srcs, res):
        torch.testing.assert_close(r, s * 2)


def test_reference_h2d_row_copies(mode):
    srcs = [make((8, 3), torch.float32, 0), make((5,), torch.int64, 1),
            make((6, 2, 2), torch.bfloat16, 2).transpose(1, 2), make((4, 4), torch.float32, 3)]
    dst_cpu = [make((10, 3), torch.float32, 4), make((5,), torch.int64, 5),
               make((3, 2, 2), torch.bfloat16, 6), make((4, 4), torch.float32, 7)]
    dsts = [d.to("tpu") for d in dst_cpu]
    src_off, dst_off, sizes = [2, 0, 3, 0], [5, 1, 0, 0], [4, 3, 3, 4]
    fut = bt.batch_transfer_h2d(srcs, dsts, src_off, dst_off, sizes)
    assert isinstance(fut, bt.TransferFuture)
    assert fut.wait() is None
    for s, d, so, do, n in zip(srcs, dst_cpu, src_off, dst_off, sizes):
        d[do:do + n] = s[so:so + n]
    for d, e in zip(dsts, dst_cpu):
        torch.testing.assert_close(d.cpu(), e, rtol=0, atol=0)


def test_reference_d2h_row_copies(mode):
    src_cpu = [make((8, 3), torch.float32, 0), make((5,), torch.int32, 1),
               make((6, 4), torch.float16, 2), make((3, 2), torch.complex64, 3)]
    srcs = [s.to("tpu") + 0 for s in src_cpu]          # computed on the device
    srcs[2] = srcs[2].t().contiguous().t()             # a non-contiguous source
    dsts = [torch.zeros(10, 3), torch.zeros(5, dtype=torch.int32),
            torch.zeros(4, 6, dtype=torch.float16).t(),  # a non-contiguous destination
            torch.zeros(4, 2, dtype=torch.complex64)]
    expected = [d.clone() for d in dsts]
    src_off, dst_off, sizes = [1, 2, 0, 1], [4, 0, 2, 2], [6, 3, 4, 2]
    bt.batch_transfer_d2h_sync(srcs, dsts, src_off, dst_off, sizes)
    for s, e, so, do, n in zip(src_cpu, expected, src_off, dst_off, sizes):
        e[do:do + n] = s[so:so + n]
    for d, e in zip(dsts, expected):
        torch.testing.assert_close(d, e, rtol=0, atol=0)


def test_reference_sync_h2d_and_await_all(mode):
    dst = torch.zeros(6, 2, device="tpu")
    bt.batch_transfer_h2d_sync([torch.ones(2, 2)], [dst], [0], [4], [2])
    out = [torch.empty(6, 2), torch.empty(3, 2)]
    futs = [bt.batch_transfer_d2h([dst], [out[0]], [0], [0], [6]),
            bt.batch_transfer_d2h([dst], [out[1]], [3], [0], [3])]
    assert bt.await_all(futs) is None
    expected = torch.zeros(6, 2)
    expected[4:] = 1
    torch.testing.assert_close(out[0], expected)
    torch.testing.assert_close(out[1], expected[3:])
    assert all(f.done() for f in futs)


def test_zero_rows_and_empty_lists():
    dst = torch.full((3, 2), 7.0, device="tpu")
    bt.batch_transfer_h2d_sync([torch.ones(2, 2)], [dst], [1], [3], [0])
    bt.batch_transfer_h2d_sync([], [], [], [], [])
    bt.batch_transfer_d2h_sync([], [], [], [], [])
    torch.testing.assert_close(dst.cpu(), torch.full((3, 2), 7.0))


def test_destinations_version_counter():
    dst = torch.zeros(4, device="tpu")
    host = torch.zeros(4)
    v_dst, v_host = dst._version, host._version
    bt.batch_transfer_h2d_sync([torch.ones(4)], [dst], [0], [0], [4])
    bt.batch_transfer_d2h_sync([dst], [host], [0], [0], [4])
    assert dst._version > v_dst and host._version > v_host


def test_dropped_future_still_completes():
    src = torch.arange(8.0, device="tpu") * 2
    dst = torch.zeros(2, 8).t()                      # staged: non-contiguous rows
    fut = bt.batch_transfer_d2h([src.reshape(8, 1)], [dst[:, :1]], [0], [0], [8])
    del fut
    gc.collect()
    torch.testing.assert_close(dst[:, 0], torch.arange(8.0) * 2)


# ---- bad input: a clear exception, raised before any copy ----

def test_mismatched_lists_raise_before_any_copy():
    dsts = [torch.zeros(2, device="tpu"), torch.zeros(2, device="tpu")]
    with pytest.raises(ValueError, match="one entry per copy"):
        bt.batch_transfer_h2d([torch.ones(2), torch.ones(2)], dsts, [0, 0], [0], [2, 2])
    with pytest.raises(IndexError, match="out of range"):
        bt.batch_transfer_h2d([torch.ones(2), torch.ones(2)], dsts, [0, 1], [0, 0], [2, 2])
    with pytest.raises(TypeError, match="Int"):
        bt.batch_transfer_h2d([torch.ones(2), torch.ones(2, dtype=torch.int32)], dsts,
                              [0, 0], [0, 0], [2, 2])
    with pytest.raises(ValueError, match="shape"):
        bt.batch_transfer_h2d([torch.ones(2), torch.ones(2, 1)], dsts, [0, 0], [0, 0], [2, 2])
    with pytest.raises(ValueError, match="expected a CPU tensor"):
        bt.batch_transfer_h2d([torch.ones(2), dsts[0]], dsts, [0, 0], [0, 0], [2, 2])
    with pytest.raises(ValueError, match="expected a tpu tensor"):
        bt.batch_transfer_d2h([dsts[0], torch.ones(2)], [torch.ones(2)] * 2, [0, 0], [0, 0], [2, 2])
    with pytest.raises(ValueError, match="at least one dimension"):
        bt.batch_transfer_h2d([torch.tensor(1.0)], [torch.tensor(0.0, device="tpu")], [0], [0], [1])
    with pytest.raises(IndexError, match="out of range"):
        bt.batch_transfer_d2h([dsts[0]], [torch.ones(2)], [-1], [0], [1])
    # Nothing was copied by the calls that failed on their second entry.
    for d in dsts:
        torch.testing.assert_close(d.cpu(), torch.zeros(2))


def test_public_api_bad_inputs():
    with pytest.raises(TypeError, match=r"tensors\[1\] is a int"):
        torch.tpu.batch_to_device([torch.ones(2), 3])
    with pytest.raises(TypeError, match="list or tuple"):
        torch.tpu.batch_to_device(torch.ones(2))
    with pytest.raises(ValueError, match="expected a CPU tensor"):
        torch.tpu.batch_to_device([torch.ones(2), torch.ones(2, device="tpu")])
    with pytest.raises(ValueError, match="expected a tpu device"):
        torch.tpu.batch_to_device([torch.ones(2)], "cpu")
    with pytest.raises(IndexError, match="tpu"):
        torch.tpu.batch_to_device([torch.ones(2)], 99)
    with pytest.raises(ValueError, match="expected a tpu tensor"):
        torch.tpu.batch_to_host([torch.ones(2, device="tpu"), torch.ones(2)])
    with pytest.raises(ValueError, match="strided"):
        torch.tpu.batch_to_device([torch.ones(2, 2).to_sparse()])
    with pytest.raises(TypeError, match="TransferFuture"):
        bt.await_all([None])


def test_names_of_the_reference():
    assert set(bt.__all__) == {"TransferFuture", "batch_transfer_d2h", "batch_transfer_h2d",
                               "batch_transfer_d2h_sync", "batch_transfer_h2d_sync", "await_all"}
    assert torch.tpu.TransferFuture is bt.TransferFuture


def test_device_side_error_is_raised_by_wait_and_reported_once(mode):
    # An out-of-range index found on the device surfaces at the batch's host
    # read, as CPU raises it; every later wait of that future raises it again,
    # and the runtime goes on.
    table = torch.randn(10, 4)
    w = table.to("tpu")
    good = torch.nn.functional.embedding(torch.tensor([1, 2]).to("tpu"), w)
    bad = torch.nn.functional.embedding(torch.tensor([1, 10]).to("tpu"), w)
    fut = torch.tpu.batch_to_host([good, bad], async_op=True)
    for _ in range(2):
        with pytest.raises(IndexError, match="index out of range"):
            fut.wait()
    assert fut.done()
    torch.testing.assert_close(torch.tpu.batch_to_host([w * 2])[0], table * 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_reads_of_computed_values_around_the_direct_read_bound(mode, dtype):
    """On XLA:CPU small host reads copy the buffer's memory on the reading
    thread and larger ones (over 1 MiB) keep the plugin's copy: every size
    around the bound, read alone, batched and through a dropped future,
    equals CPU. Values come from programs (not uploads), so the reads wait for
    them."""
    size = torch.empty((), dtype=dtype).element_size()
    for numel in (0, 1, 1000, (1 << 20) // size, (1 << 20) // size + 1):
        src = make((numel,), dtype, seed=numel)
        want = src.flip(0)
        on_tpu = src.to("tpu").flip(0)
        torch.testing.assert_close(on_tpu.cpu(), want, rtol=0, atol=0)
        got = torch.tpu.batch_to_host([on_tpu, src.to("tpu").flip(0)])
        for g in got:
            torch.testing.assert_close(g, want, rtol=0, atol=0)
        rows = torch.zeros(numel, 2, dtype=dtype).t()  # staged: a non-contiguous destination
        future = bt.batch_transfer_d2h([src.to("tpu").flip(0)], [rows[1]], [0], [0], [numel])
        del future  # dropped before wait(): its copy still lands
        gc.collect()
        torch.testing.assert_close(rows[1], want, rtol=0, atol=0)
