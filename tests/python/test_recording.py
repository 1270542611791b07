"""What the recording path leaves out must not change results: an alpha of 1
is dropped from add/sub/rsub (and their in-place and _foreach forms), a beta
or alpha of 1 from the addmm family, and reshape round trips between ops fold
away."""
import pytest
import torch

import torch_tpu
from conftest import assert_same, check


@pytest.mark.parametrize("alpha", [1, 1.0, 2, -0.5])
def test_add_sub_rsub_alpha(alpha):
    a, b = torch.randn(3, 4), torch.randn(4)
    check(lambda x, y: torch.add(x, y, alpha=alpha), a, b)
    check(lambda x, y: torch.sub(x, y, alpha=alpha), a, b)
    check(lambda x, y: torch.rsub(x, y, alpha=alpha), a, b)
    check(lambda x: torch.add(x, 3, alpha=alpha), a)


def test_integer_and_bool_alpha():
    i, j = torch.arange(6).reshape(2, 3), torch.arange(3)
    check(lambda x, y: x.add(y, alpha=1), i, j)
    check(lambda x, y: x.sub(y, alpha=3), i, j)
    p, q = torch.tensor([True, False, False]), torch.tensor([False, True, False])
    check(lambda x, y: torch.add(x, y, alpha=True), p, q)
    check(lambda x, y: torch.add(x, y, alpha=False), p, q)


def test_in_place_and_foreach_with_unit_alpha():
    a, b = torch.randn(5), torch.randn(5)
    ta, tb = a.to("tpu"), b.to("tpu")
    ta.add_(tb, alpha=1).sub_(tb, alpha=1.0).add_(tb)
    assert_same(ta, a.add(b).sub(b).add(b))
    xs = [torch.randn(3), torch.randn(2, 2)]
    ys = [torch.randn(3), torch.randn(2, 2)]
    txs = [x.to("tpu") for x in xs]
    torch._foreach_add_(txs, [y.to("tpu") for y in ys], alpha=1)
    for t, x, y in zip(txs, xs, ys):
        assert_same(t, x + y)


def test_unit_alpha_emits_no_multiply():
    f = torch.compile(lambda x, y: torch.add(x, y, alpha=1) - y, backend="tpu")
    x, y = torch.randn(4, 4).to("tpu"), torch.randn(4, 4).to("tpu")
    assert_same(f(x, y), x.cpu() + y.cpu() - y.cpu())
    text = torch_tpu.compiler.graphs()[-1][1]
    assert "stablehlo.multiply" not in text
    # Each op reads the value where the previous op wrote it, and y is
    # reshaped once: the parameters' two reshapes and the two writes remain
    # (unfolded, the reads of the sum and of y again would add two more).
    assert text.count("stablehlo.reshape") <= 4


@pytest.mark.parametrize("beta, alpha", [(1, 1), (1.0, 2), (0, 1), (0.5, 1.0)])
def test_addmm_family_unit_scales(beta, alpha):
    s = torch.randn(3, 4)
    s[0, 0] = float("nan")  # propagates unless beta == 0
    a, b = torch.randn(3, 5), torch.randn(5, 4)
    with torch_tpu.precision.precision("highest"):
        check(lambda s, a, b: torch.addmm(s, a, b, beta=beta, alpha=alpha), s, a, b)
        check(lambda s, a, b: torch.baddbmm(s, a, b, beta=beta, alpha=alpha),
              torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(2, 5, 4))
        check(lambda s, x, y: torch.addr(s, x, y, beta=beta, alpha=alpha), s,
              torch.randn(3), torch.randn(4))
        check(lambda s, a, b: s.clone().addmm_(a, b, beta=beta, alpha=alpha), s, a, b)


def test_linear_bias_is_added_without_scales():
    w, bias, x = torch.randn(4, 8), torch.randn(4), torch.randn(3, 8)
    f = torch.compile(lambda x, w, b: torch.nn.functional.linear(x, w, b), backend="tpu")
    t = [v.to("tpu") for v in (x, w, bias)]
    torch.testing.assert_close(f(*t).cpu(), torch.nn.functional.linear(x, w, bias),
                               atol=5e-2, rtol=5e-2)  # DEFAULT precision: bf16 operands
    text = torch_tpu.compiler.graphs()[-1][1]
    assert "stablehlo.select" not in text and "stablehlo.multiply" not in text


def test_offset_views_read_as_slices_of_storage():
    # q, k, v of an attention block: views at offsets 0, 8, 16 of one storage.
    x = torch.randn(2, 3, 24)

    def heads(x):
        q, k, v = x.split(8, dim=2)
        return [z.reshape(2, 3, 2, 4).transpose(1, 2) * 2 for z in (q, k, v)]

    f = torch.compile(heads, backend="tpu")
    for got, want in zip(f(x.to("tpu")), heads(x)):
        assert_same(got, want)
    # Each view is one slice of the storage, not a shifted, zero-padded copy.
    assert "stablehlo.pad" not in torch_tpu.compiler.graphs()[-1][1]


def test_views_still_read_and_write_through_storage():
    base = torch.arange(12.0).reshape(3, 4)
    t = base.to("tpu")
    v = t[:, 1]  # a strided view
    v.add_(1)
    t.view(-1)[::5].mul_(2)
    expect = base.clone()
    expect[:, 1] += 1
    expect.view(-1)[::5] *= 2
    assert_same(t, expect)
