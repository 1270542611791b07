"""The conformance harness (torch_tpu.tools.conformance): how it compares
sorts with tied values, indices of kthvalue/mode, and which sample arguments
it moves to tpu."""
import torch

from torch_tpu.tools import conformance


def _Sample(input, args=(), kwargs=None):
    conformance.opinfos()  # imports PyTorch's OpInfo database
    from torch.testing._internal.opinfo.core import SampleInput
    return SampleInput(input, args=tuple(args), kwargs=kwargs or {})


def test_tied_indices_compare_by_selected_values():
    op = conformance.opinfos()["sort"]
    x = torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    sample = _Sample(x, (1,))
    expected = torch.sort(x, 1)
    other = (expected.values, torch.tensor([[2, 1, 0], [2, 0, 1]]))  # other tie order
    actual, want = conformance._without_tie_order(op, sample, list(other), expected)
    conformance._compare(actual, want)
    wrong = (expected.values, torch.tensor([[0, 1, 2], [2, 0, 1]]))  # not a sort
    actual, want = conformance._without_tie_order(op, sample, list(wrong), expected)
    try:
        conformance._compare(actual, want)
    except AssertionError:
        return
    raise AssertionError("a wrong sort index was accepted")


def test_stable_sort_indices_compared_exactly():
    op = conformance.opinfos()["sort"]
    x = torch.tensor([1.0, 1.0, 0.0])
    sample = _Sample(x, (), {"dim": 0, "stable": True})
    expected = torch.sort(x, dim=0, stable=True)
    other = [expected.values, torch.tensor([2, 1, 0])]
    actual, want = conformance._without_tie_order(op, sample, other, expected)
    assert actual[1] is other[1]  # left as is: a stable sort's indices are defined


def test_kthvalue_and_mode_indices_without_keepdim():
    x = torch.tensor([[3, 1, 3, 1], [2, 2, 5, 2]])
    for name, args, fn in (("kthvalue", (2, 1), torch.kthvalue), ("mode", (1,), torch.mode)):
        op = conformance.opinfos()[name]
        sample = _Sample(x, args)
        expected = fn(x, *args)
        actual = [v.to("tpu") for v in fn(x.to("tpu"), *args)]
        actual, want = conformance._without_tie_order(op, sample, [v.cpu() for v in actual],
                                                      expected)
        conformance._compare(actual, want)


def test_tensor_split_indices_stay_on_cpu_and_to_cpu_becomes_tpu():
    x = torch.arange(6.0)
    moved = conformance._on_tpu(_Sample(x, (torch.tensor([1, 4]),)), False, "tensor_split")
    assert moved.input.device.type == "tpu" and moved.args[0].device.type == "cpu"
    moved = conformance._on_tpu(_Sample(x, ("cpu", torch.float32)), False, "to")
    assert moved.args[0] == "tpu"


def test_as_strided_samples_keep_their_storage_layout():
    base = torch.arange(15.0)
    view = base[5:]  # storage offset 5: as_strided may address the whole storage
    moved = conformance._on_tpu(_Sample(view, ((2, 2), (1, 2)), {"storage_offset": 0}), False,
                                "as_strided.partial_views")
    assert moved.input.storage_offset() == 5
    got = torch.as_strided(moved.input, (2, 2), (1, 2), 0).cpu()
    assert torch.equal(got, torch.as_strided(view, (2, 2), (1, 2), 0))
