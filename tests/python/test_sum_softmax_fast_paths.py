"""Fast paths for XLA:CPU speed, against CPU: float sums over leading dims
(run as a gemm with ones), softmax with a plain max reduce and one reciprocal
per row, and large sums without XLA's tree-reduction rewrite."""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, check


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)


# Shapes and dims that take the gemm path (leading dims, >= 64 rows, >= 16
# columns, >= 16384 elements) and ones that keep the plain reduce.
@pytest.mark.parametrize("shape,dims", [
    ((128, 256), (0,)),             # gemm
    ((8, 16, 128), (0, 1)),         # gemm: bias-gradient shape
    ((16, 16), (0,)),               # too small
    ((256, 128), (1,)),             # row sum
    ((4, 64, 96), (0, 2)),          # not leading
    ((1024, 8), (0,)),              # too few columns
])
def test_sum_over_dims(shape, dims):
    x = rand(*shape)
    check(lambda t: t.sum(dims), x)
    check(lambda t: t.mean(dims, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_column_sum_dtypes(dtype):
    x = rand(128, 160, dtype=dtype)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.sum(0, dtype=torch.float32), x)


def test_column_sum_nonfinite():
    x = rand(128, 128)
    x[3, 0], x[5, 1], x[7, 2], x[9, 2] = float("nan"), float("inf"), float("inf"), -float("inf")
    check(lambda t: t.sum(0), x)


def test_large_sum_precision():
    # Without the tree-reduction rewrite the plain reduce must still stay
    # within f32 tolerance of CPU's cascade sum.
    x = torch.rand(1 << 20, generator=torch.Generator().manual_seed(1)) + 1
    check(lambda t: t.sum(), x)
    check(lambda t: t.mean(), x)
    check(lambda t: t.view(1024, 1024).sum(1), x)


def test_linear_and_layer_norm_gradients(highest_precision):
    x, w, b = rand(8, 16, 128), rand(128) + 1, rand(128)
    g = rand(8, 16, 128)

    def grads(device):
        xs = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
        F.layer_norm(xs[0], (128,), xs[1], xs[2]).backward(g.to(device))
        return [t.grad for t in xs]
    assert_same(grads("tpu"), grads("cpu"), atol=1e-4, rtol=1e-4)

    lin = torch.nn.Linear(128, 64)

    def bias_grad(device):
        m = torch.nn.Linear(128, 64).to(device)
        m.load_state_dict(lin.state_dict())
        m(x.to(device)).sum().backward()
        return m.bias.grad
    assert_same(bias_grad("tpu"), bias_grad("cpu"))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_special_rows(log):
    x = rand(6, 64)
    x[0, 5] = float("nan")               # NaN row
    x[1] = -float("inf")                 # all -inf
    x[2, 7] = float("inf")               # one +inf
    x[3, :32] = -float("inf")            # half masked, like a causal row
    x[4] *= 100                          # large spread
    fn = (lambda t: t.log_softmax(-1)) if log else (lambda t: t.softmax(-1))
    check(fn, x)
    check(lambda t: fn(t.t()).t(), x)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_dims_and_backward(dim):
    x = rand(4, 8, 64)
    check(lambda t: t.softmax(dim), x)
    check(lambda t: torch.softmax(t, dim, dtype=torch.float64), x)

    def grad(device, fn):
        t = x.detach().to(device).requires_grad_()
        fn(t, dim).backward(rand(4, 8, 64).to(device))
        return t.grad
    for fn in (torch.softmax, torch.log_softmax):
        assert_same(grad("tpu", fn), grad("cpu", fn))


def test_softmax_half_and_empty():
    check(lambda t: t.softmax(-1), rand(4, 64, dtype=torch.bfloat16))
    check(lambda t: torch.softmax(t, -1, dtype=torch.float32), rand(4, 64, dtype=torch.bfloat16))
    check(lambda t: t.softmax(-1), torch.empty(0, 5))
    check(lambda t: t.log_softmax(0), torch.tensor(2.5))


def test_causal_sdpa_forward_backward(highest_precision):
    q, k, v = (rand(2, 2, 16, 8) for _ in range(3))

    def run(device):
        ts = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*ts, is_causal=True)
        out.backward(rand(2, 2, 16, 8).to(device))
        return [out] + [t.grad for t in ts]
    assert_same(run("tpu"), run("cpu"), atol=1e-4, rtol=1e-4)
