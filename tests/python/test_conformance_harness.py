"""Regressions for lowerings the OpInfo conformance sweep found wrong, each
compared against CPU PyTorch, and for the conformance harness itself."""
import torch

from conftest import check, check_grad
from torch_tpu.tools import conformance


def test_floor_divide_16bit_rounds_once():
    # 16-bit quotients computed in f32 and rounded once, as on CPU: here
    # the 16-bit quotient would round up to an integer before the floor.
    for dtype, x0, y0 in ((torch.bfloat16, [8.625, -8.625], [1.7265625, -0.06982421875]),
                          (torch.float16, [8.0390625, 13.09375], [-0.200927734375, 0.873046875])):
        x = torch.tensor(x0 + [-7.0, 0.5, -0.0, 3.0, 1.0], dtype=dtype)
        y = torch.tensor(y0 + [2.0, -3.0, 1.0, 0.0, -0.0], dtype=dtype)
        check(torch.floor_divide, x, y)
        check(lambda a, b: torch.div(a, b, rounding_mode="floor"), x, y)


def test_floor_divide_float32_matches_cpu_formula():
    x = torch.tensor([7.0, -7.0, 1e-30, -0.25, 5.0, float("nan"), float("inf")])
    y = torch.tensor([0.1, 0.1, 3.0, 8.0, -0.5, 1.0, 2.0])
    check(torch.floor_divide, x, y)


def test_addr_bool():
    m = torch.tensor([[True, False, False], [False, True, False]])
    v1, v2 = torch.tensor([True, False]), torch.tensor([True, True, False])
    check(torch.addr, m, v1, v2)
    check(lambda *a: torch.addr(*a, beta=False), m, v1, v2)
    check(lambda *a: torch.addr(*a, alpha=False), m, v1, v2)


def test_sgn_backward_uses_zero_tensor():
    x = torch.tensor([-2.0, 0.0, 3.0])
    check_grad(torch.sgn, x, grad=torch.tensor([1.0, 2.0, 3.0]))


def test_efficientzerotensor_factory():
    z = torch.ops.aten._efficientzerotensor([2, 3], dtype=torch.float16, device="tpu")
    assert z.device.type == "tpu" and z.dtype == torch.float16
    assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=torch.float16))


def test_cdist_backward_empty_batch():
    for s1, s2 in (((1, 4, 5), (0, 3, 5)), ((0, 4, 5), (3, 5))):
        x1, x2 = torch.randn(s1), torch.randn(s2)
        out = torch.cdist(x1, x2)
        check_grad(lambda a, b: torch.cdist(a, b), x1, x2, grad=torch.ones(out.shape))


def test_cdist_backward_values():
    torch.manual_seed(0)
    x1, x2 = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    check_grad(lambda a, b: torch.cdist(a, b, p=2.0), x1, x2,
               grad=torch.randn(2, 3, 5), atol=1e-4, rtol=1e-4)


# -- harness ------------------------------------------------------------------

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
