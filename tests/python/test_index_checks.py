"""Out-of-range indices are checked on the device and reported as CPU reports
them (IndexError or RuntimeError, naming the op and its line) at the latest at
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
