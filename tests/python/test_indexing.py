"""Indexing ops on tpu against CPU: advanced indexing, gathers, scatters,
boolean masks (host-synced), and their backward."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, check, to_tpu, check_grad


def needs_native(*ops):
    """Skips until the listed ops (owned by other families) are lowered."""
    missing = [op for op in ops if op not in torch_tpu.native_ops()]
    return pytest.mark.skipif(bool(missing), reason=f"not lowered yet: {missing}")


X = torch.randn(3, 4)
Y = torch.randn(2, 3, 4, 5)
IDX = torch.tensor([2, -1, 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_index_one_tensor_dtypes(dtype):
    x = (torch.randn(3, 4) * 5).to(dtype)
    check(lambda x, i: x[i], x, IDX)


def test_index_tensor_after_slice():
    check(lambda x, i: x[:, i], X, IDX)


def test_index_adjacent_tensors_keep_position():
    check(lambda y, i, j: y[:, i, j], Y, IDX, torch.tensor([[0], [3]]))


def test_index_separated_tensors_go_first():
    check(lambda y, i, j: y[:, i, :, j], Y, IDX, torch.tensor([4, 0, -2]))


def test_index_none_and_ellipsis():
    check(lambda y, i: y[None, ..., i], Y, torch.tensor([1, 4]))


def test_index_int32_and_empty_indices():
    check(lambda x, i: x[i], X, torch.tensor([0, 2], dtype=torch.int32))
    check(lambda x, i: x[i], X, torch.tensor([], dtype=torch.long))


def test_index_with_cpu_index_tensor():
    assert_same(X.to("tpu")[torch.tensor([2, 0])], X[torch.tensor([2, 0])])


def test_index_bool_masks():
    check(lambda x: x[x > 0], X)
    check(lambda x: x[x[:, 0] > 0], X)
    check(lambda y, m: y[:, m], Y, torch.tensor([[True, False, True, False]] * 3))


def test_index_mask_shape_mismatch_raises():
    with pytest.raises(IndexError):
        X.to("tpu")[torch.tensor([True, False]).to("tpu")]


def test_masked_select_broadcasts():
    check(lambda x, m: torch.masked_select(x, m), X, torch.tensor([True, False, False, True]))
    check(lambda x: torch.masked_select(x, x > 0), torch.tensor(2.0))


def test_nonzero_and_nonzero_static():
    check(lambda x: x.nonzero(), X > 0)
    check(lambda x: torch.nonzero_static(x, size=20, fill_value=-7), X > 0)
    check(lambda x: torch.argwhere(x), torch.zeros(2, 3))


@pytest.mark.parametrize("a, b", [
    ([1, 2], [1.0, 2.0]),              # promoted, equal
    ([1.0, float("nan")], [1.0, float("nan")]),  # NaN is unequal
    ([[1, 2]], [1, 2]),                # sizes differ
    ([1, 2], [1, 3]),
    ([], []),
])
def test_equal_matches_cpu(a, b):
    x, y = torch.tensor(a), torch.tensor(b)
    assert torch.equal(x.to("tpu"), y.to("tpu")) == torch.equal(x, y)


def test_equal_across_devices_raises():
    with pytest.raises(RuntimeError, match="different devices"):
        torch.equal(torch.ones(2, device="tpu"), torch.ones(2))


def test_print_uses_masked_select():
    if "aten::max" not in torch_tpu.native_ops():
        pytest.skip("print also needs max/min (reduction family)")
    assert "device='tpu:0'" in str(X.to("tpu"))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    def f(x, i, v):
        return x.index_put((i,), v, accumulate=accumulate)
    check(f, X, torch.tensor([0, -1]), torch.randn(2, 4))
    if accumulate:  # duplicates add up
        check(f, X, torch.tensor([1, 1, 1]), torch.randn(4))


# index_put_ into an expanded view writes its source's storage, as on CPU:
# each indexed element writes (or adds to) the element it aliases.
EXPANDED = {
    "rows": (lambda x: x.expand(2, 3), (torch.tensor([0, 1]), torch.tensor([1, 2]))),
    "column": (lambda x: x.unsqueeze(1).expand(3, 4), (torch.tensor([2, 0]), torch.tensor([3, 3]))),
    "same_element_twice": (lambda x: x.expand(2, 3), (torch.tensor([0, 1]), torch.tensor([1, 1]))),
    "negative_and_broadcast": (lambda x: x.expand(4, 3), (torch.tensor([[-1], [0]]), torch.tensor([0, 2]))),
    "bool_mask": (lambda x: x.expand(2, 3), (torch.tensor([True, False]),)),
    "offset_source": (lambda x: x[1:].expand(2, 2), (torch.tensor([1]), torch.tensor([0]))),
}


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("name", EXPANDED)
def test_index_put_into_an_expanded_view(name, accumulate):
    view, idx = EXPANDED[name]
    if name == "same_element_twice" and not accumulate:
        return  # which write wins is unspecified
    def f(x, v, *idx):
        x = x.clone()
        view(x).index_put_(idx, v, accumulate=accumulate)
        return x
    values = torch.tensor([10.0, 20.0]) if name != "bool_mask" else torch.tensor(5.0)
    if name in ("negative_and_broadcast", "offset_source"):
        values = torch.tensor(4.0)
    check(f, torch.tensor([1.0, 2.0, 3.0]), values, *idx)


def test_setitem_into_an_expanded_view():
    def f(x, i):
        x = x.clone()
        x.expand(3, 3)[i, 1] = 7.0
        return x
    check(f, torch.arange(3.0), torch.tensor([2]))


def test_index_put_two_tensors_int():
    x = torch.arange(12).reshape(3, 4)
    check(lambda x, i, j, v: x.index_put((i, j), v, accumulate=True), x,
          torch.tensor([0, 2]), torch.tensor([[1], [-1]]), torch.tensor(5))


def test_setitem_bool_mask_and_values():
    def f(x, v):
        x = x.clone()
        x[x > 0] = v
        return x
    check(f, X, torch.tensor(0.0))
    check(f, X, torch.arange(float((X > 0).sum())))


def test_setitem_updates_view_base():
    x = X.clone()
    t = x.to("tpu")
    t[1][torch.tensor([0, 2]).to("tpu")] = torch.tensor(9.0)
    x[1][torch.tensor([0, 2])] = torch.tensor(9.0)
    assert_same(t, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_index_select(dtype):
    x = (torch.randn(3, 4) * 5).to(dtype)
    check(lambda x, i: x.index_select(1, i), x, torch.tensor([3, 0, 0]))
    check(lambda x, i: x.index_select(0, i), x, torch.tensor([], dtype=torch.long))


def test_index_add_copy_fill():
    i = torch.tensor([2, 0])
    check(lambda x, i, s: x.index_add(0, i, s, alpha=2), X, i, torch.randn(2, 4))
    check(lambda x, i, s: x.index_add(0, i, s), X, torch.tensor([1, 1]), torch.randn(2, 4))
    check(lambda x, i, s: x.index_copy(1, i, s), X, i, torch.randn(3, 2))
    check(lambda x, i: x.index_fill(1, i, -1.5), X, i)
    check(lambda x, i: x.clone().index_fill_(0, i, 3), torch.arange(12).reshape(3, 4), i)


GATHER_IDX = torch.tensor([[0, 3], [1, 1], [2, 0]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_gather(dtype):
    x = (torch.randn(3, 4) * 5).to(dtype)
    check(lambda x, i: x.gather(1, i), x, GATHER_IDX)
    check(lambda x, i: torch.take_along_dim(x, i, dim=1), x, GATHER_IDX)


def test_scatter_src_value_and_reduce():
    z = torch.randn(3, 5)
    check(lambda z, i, s: z.scatter(1, i, s), z, GATHER_IDX, X)
    check(lambda z, i: z.scatter(1, i, 2.5), z, GATHER_IDX[:2])
    check(lambda z, i, s: z.scatter(1, i, s, reduce="multiply"), z, GATHER_IDX, X)
    check(lambda z, i: z.scatter(1, i, 2.0, reduce="add"), z, GATHER_IDX)


def test_scatter_add_duplicates():
    check(lambda z, i, s: z.scatter_add(1, i, s), torch.randn(3, 5), GATHER_IDX, X)
    check(lambda z, i, s: z.clone().scatter_add_(0, i, s), torch.arange(15).reshape(3, 5),
          torch.tensor([[0, 2, 1], [0, 2, 1]]), torch.tensor([[1, 2, 3], [4, 5, 6]]))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    def f(z, i, s):
        return z.scatter_reduce(1, i, s, reduce, include_self=include_self)
    check(f, torch.randn(3, 5), GATHER_IDX, X)
    if reduce == "mean":  # integer mean rounds toward -inf
        check(f, torch.arange(-6, 9).reshape(3, 5), GATHER_IDX, torch.arange(-6, 6).reshape(3, 4))


def test_take_and_put():
    check(lambda x, i: x.take(i), X, torch.tensor([[0, 11], [-1, 5]]))
    check(lambda x, i, s: x.put(i, s), X, torch.tensor([0, -1]), torch.tensor([9.0, 8.0]))
    check(lambda x, i, s: x.clone().put_(i, s, accumulate=True), X, torch.tensor([1, 1]),
          torch.tensor([9.0, 8.0]))


def test_masked_scatter():
    check(lambda x, m, s: x.masked_scatter(m, s), X, X > 0, torch.arange(20.0))
    check(lambda x, m, s: x.masked_scatter(m, s), X, torch.tensor([True, False, False, True]),
          torch.arange(12.0))


def test_embedding_and_dense_backward():
    w, i = torch.randn(6, 3), torch.tensor([[0, 2], [5, 2]])
    check(lambda w, i: F.embedding(i, w), w, i)
    g = torch.randn(2, 2, 3)
    for padding_idx, scale in [(-1, False), (2, True)]:
        check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 6, padding_idx, scale),
              g, i, atol=1e-6, rtol=1e-6)


def test_repeat_interleave():
    check(lambda r: torch.repeat_interleave(r), torch.tensor([1, 0, 3]))
    check(lambda x, r: x.repeat_interleave(r, dim=0), X, torch.tensor([1, 0, 2]))


def test_out_of_range_index_raises_index_error_at_the_host_read():
    # Checked on the device (test_index_checks.py), reported as CPU reports it.
    out = X.to("tpu")[torch.tensor([7]).to("tpu")]
    assert out.shape == (1, 4)
    with pytest.raises(IndexError, match="out of bounds for dimension 0"):
        out.cpu()


# ---- backward ---------------------------------------------------------------

@needs_native("aten::zero_")
def test_index_backward_accumulates_duplicates():
    check_grad(lambda x: x[torch.tensor([0, 0, 2]).to(x.device)], X, grad=torch.randn(3, 4))


@needs_native("aten::zero_")
def test_index_bool_mask_backward():
    m = X > 0
    check_grad(lambda x: x[m.to(x.device)], X, grad=torch.randn(int(m.sum())))


@needs_native("aten::zero_")
def test_index_select_backward():
    check_grad(lambda x: x.index_select(1, torch.tensor([3, 3, 0]).to(x.device)), X,
               grad=torch.randn(3, 3))


@needs_native("aten::zero_")
def test_gather_backward():
    check_grad(lambda x: x.gather(1, GATHER_IDX.to(x.device)), X, grad=torch.randn(3, 2))


def test_scatter_add_and_index_put_backward():
    check_grad(lambda z, s: z.scatter_add(1, GATHER_IDX.to(z.device), s),
               torch.randn(3, 5), torch.randn(3, 2), grad=torch.randn(3, 5))
    check_grad(lambda x, v: x.index_put((torch.tensor([1, 1]).to(x.device),), v, accumulate=True),
               X, torch.randn(2, 4), grad=torch.randn(3, 4))


@pytest.mark.parametrize("value", [torch.tensor(2.5), torch.tensor(7)])
def test_fills_take_a_cpu_scalar_value(value):
    """masked_fill and index_fill accept a 0-dim CPU tensor as the value on an
    accelerator (PyTorch's decompositions rejected it next to a meta tensor)."""
    x = torch.arange(12.0).reshape(3, 4)
    mask, index = x > 4, torch.tensor([0, 2])
    t = x.to("tpu")
    assert_same(t.masked_fill(mask.to("tpu"), value), x.masked_fill(mask, value))
    assert_same(t.clone().masked_fill_(mask.to("tpu"), value), x.clone().masked_fill_(mask, value))
    assert_same(t.long().masked_fill(mask.to("tpu"), value), x.long().masked_fill(mask, value))
    assert_same(t.index_fill(1, index.to("tpu"), value), x.index_fill(1, index, value))
    assert_same(t.clone().index_fill_(0, index.to("tpu"), value), x.clone().index_fill_(0, index, value))
