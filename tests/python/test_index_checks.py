"""Out-of-range indices (and integer divisors that are zero) are checked on
the device and reported as CPU reports them (IndexError or RuntimeError,
naming the op and its line) at the latest at
the next host read or synchronize, in every eager mode; the switch turns the
checks off. The bad-input tier (test_bad_inputs.py, family "indices") covers
each op; these tests cover the mechanism."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_reports_the_step_whose_index_is_out_of_range(mode):
    # In Fused Eager later steps replay a cached trace without lowering: the
    # checks come with it.
    table = torch.randn(10, 4)
    with torch_tpu.eager_mode(mode):
        w = table.to("tpu")
        for step in range(6):
            ids = torch.tensor([1, 2, 9 if step < 5 else 10])
            out = F.embedding(ids.to("tpu"), w).sum(0)
            if step < 5:
                torch.testing.assert_close(out.cpu(), F.embedding(ids, table).sum(0))
            else:
                with pytest.raises(IndexError, match=r"index out of range in self \(in aten::index_select at .*test_index_checks.py"):
                    out.cpu()
        # Reported once; the runtime goes on.
        torch.testing.assert_close((w * 2).cpu(), table * 2)


def test_a_long_loop_without_host_reads_reads_its_checks_in_batches():
    # Strict: each lookup is a checked program; past 256 unread check codes the
    # engine reads them all at once (issued together, then awaited). A failure
    # found there, inside an op, is raised by the next synchronize as an
    # IndexError, as at any host read (it left the op as a RuntimeError).
    table = torch.randn(10, 4)
    w = table.to("tpu")
    good, bad = torch.tensor([1, 9]).to("tpu"), torch.tensor([1, 10]).to("tpu")
    with torch_tpu.eager_mode("DEFER_NEVER"):
        total = torch.zeros(4, device="tpu")
        for _ in range(600):
            total += F.embedding(good, w).sum(0)
        want = F.embedding(torch.tensor([1, 9]), table).sum(0) * 600
        torch.testing.assert_close(total.cpu(), want, rtol=1e-4, atol=1e-3)
        with pytest.raises(IndexError, match=r"index out of range in self \(in aten::index_select"):
            for step in range(600):
                F.embedding(bad if step == 300 else good, w).sum(0)
            torch.tpu.synchronize()
        torch.testing.assert_close((w * 2).cpu(), table * 2)


@pytest.mark.parametrize("mode", MODES)
def test_a_write_into_a_dead_temporary_is_still_checked(mode):
    with torch_tpu.eager_mode(mode):
        t = torch.zeros(3, device="tpu")
        t[torch.tensor([5], device="tpu")] = 1.0
        del t
        with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
            torch.tpu.synchronize()


def test_gather_reports_runtime_error_as_cpu_does():
    x = torch.randn(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match="aten::gather") as info:
        x.gather(1, torch.tensor([[0, 3], [1, 2]], device="tpu")).cpu()
    assert not isinstance(info.value, IndexError)


def test_checks_can_be_turned_off():
    x = torch.randn(4, 2, device="tpu")
    assert torch_tpu.index_checks()
    torch_tpu.set_index_checks(False)
    try:
        out = x.index_select(0, torch.tensor([0, 7], device="tpu"))
        assert out.cpu().shape == (2, 2)  # clamped, silently, as XLA does
    finally:
        torch_tpu.set_index_checks(True)
    with pytest.raises(IndexError):
        x.index_select(0, torch.tensor([0, 7], device="tpu")).cpu()


def test_valid_negative_indices_pass_where_pytorch_wraps_them():
    x = torch.arange(12.0).reshape(4, 3)
    idx = torch.tensor([-1, -4, 2])
    torch.testing.assert_close(x.to("tpu")[idx.to("tpu")].cpu(), x[idx])
    with pytest.raises(IndexError):
        x.to("tpu")[torch.tensor([-5], device="tpu")].cpu()


def test_compiled_graphs_run_without_checks():
    f = torch.compile(lambda w, i: w[i] * 2, backend="tpu")
    w = torch.randn(5, 2)
    i = torch.tensor([0, 4])
    torch.testing.assert_close(f(w.to("tpu"), i.to("tpu")).cpu(), w[i] * 2)


# ---- integer division by a zero on the device ------------------------------------

DIVISIONS = {
    "floor_divide": lambda x, y: torch.floor_divide(x, y),
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "fmod": lambda x, y: torch.fmod(x, y),
    "remainder": lambda x, y: torch.remainder(x, y),
    "remainder_scalar_self": lambda x, y: torch.remainder(7, y),
    "floor_divide_": lambda x, y: x.clone().floor_divide_(y),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", DIVISIONS)
def test_integer_division_by_a_zero_on_the_device_raises_as_cpu_does(name, mode):
    f = DIVISIONS[name]
    x, y = torch.tensor([7, -7, 5], dtype=torch.int32), torch.tensor([2, 0, -3], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x, y)
    with torch_tpu.eager_mode(mode):
        with pytest.raises(RuntimeError, match="ZeroDivisionError") as info:
            f(x.to("tpu"), y.to("tpu")).cpu()
        assert not isinstance(info.value, IndexError)
        # Reported once; nonzero divisors divide as on CPU.
        ok = torch.tensor([2, -1, -3], dtype=torch.int32)
        torch.testing.assert_close(f(x.to("tpu"), ok.to("tpu")).cpu(), f(x, ok))


@pytest.mark.parametrize("name", ["floor_divide", "div_trunc", "fmod", "remainder"])
def test_float_division_by_zero_is_not_an_error(name):
    x, y = torch.tensor([7.0, -7.0, 0.0]), torch.tensor([0.0, 0.0, 0.0])
    torch.testing.assert_close(DIVISIONS[name](x.to("tpu"), y.to("tpu")).cpu(),
                               DIVISIONS[name](x, y), equal_nan=True)


def test_integer_division_of_nothing_by_zero_is_not_an_error():
    x, y = torch.zeros(0, 3, dtype=torch.long), torch.zeros(3, dtype=torch.long)
    assert (x.to("tpu") // y.to("tpu")).cpu().shape == (x // y).shape


def test_integer_division_checks_can_be_turned_off():
    x, y = torch.tensor([7, 8]), torch.tensor([0, 2])
    torch_tpu.set_index_checks(False)
    try:
        out = (x.to("tpu") // y.to("tpu")).cpu()
        assert out[1] == 4  # the zero's quotient is whatever the device gives
    finally:
        torch_tpu.set_index_checks(True)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        (x.to("tpu") // y.to("tpu")).cpu()
