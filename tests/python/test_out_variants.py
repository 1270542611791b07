"""out= forms and resize_, against CPU: results land in the tensors given
(strided views stay views of their base), a resized out= tensor takes the
layout CPU gives it, and out= forms whose functional decomposes above the
backend or has no PyTorch meta function run too."""
import pytest
import torch

import torch_tpu  # noqa: F401

# out= tensors of the wrong size are resized on purpose (as CPU warns).
pytestmark = pytest.mark.filterwarnings("ignore:.*resized since it had shape")


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def _strided(shape, device):
    """A zero tensor of `shape` as a transposed view of a larger base."""
    base = torch.zeros([n + 1 for n in reversed(shape)], device=device)
    view = base[tuple(slice(0, n) for n in reversed(shape))].permute(*reversed(range(len(shape))))
    return view, base


class _OnHost:
    """A tpu tensor read back, with the strides it had on tpu."""

    def __init__(self, t):
        self.value, self.stride = t.cpu(), t.stride()


def _both(fn):
    """fn(device) on CPU and on tpu; returns (cpu tensors, tpu ones read back)."""
    return fn("cpu"), [_OnHost(t) for t in fn("tpu")]


def _assert_same(cpu, tpu):
    for c, t in zip(cpu, tpu):
        assert (t.value.shape, t.value.dtype, t.stride) == (c.shape, c.dtype, c.stride())
        torch.testing.assert_close(t.value, c, atol=1e-5, rtol=1e-5, equal_nan=True)


# -- resize_ ----------------------------------------------------------------

def test_resize_to_the_same_sizes_keeps_a_strided_view():
    """softmax's out= form resizes its (non-contiguous) out= tensor to the
    size it has, then copies into it: the view must stay a view."""
    (x,) = _inputs((5, 4))

    def run(device):
        out, base = _strided((5, 4), device)
        torch.softmax(x.to(device), 1, out=out)
        return [out, base]

    _assert_same(*_both(run))


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_resize_with_a_memory_format_restrides(fmt):
    def run(device):
        same = torch.zeros(2, 3, 4, 5, device=device).resize_(2, 3, 4, 5, memory_format=fmt)
        grown = torch.zeros(2, 3, device=device).resize_(2, 3, 4, 5, memory_format=fmt)
        return [same.fill_(1), grown.fill_(2)]

    _assert_same(*_both(run))


def test_resize_to_new_sizes_is_contiguous_and_keeps_the_prefix():
    def run(device):
        t = torch.arange(6.0, device=device).reshape(2, 3).t()
        t.resize_(2, 2)
        return [t]

    _assert_same(*_both(run))


def test_resize_with_preserve_format_raises_as_cpu():
    with pytest.raises(RuntimeError, match="Unsupported memory format"):
        torch.zeros(2, device="tpu").resize_(3, memory_format=torch.preserve_format)


# -- out= forms ---------------------------------------------------------------

def test_out_into_strided_views_of_the_right_size():
    a, b = _inputs((4, 6), (4, 6))

    def run(device):
        add_out, add_base = _strided((4, 6), device)
        torch.add(a.to(device), b.to(device), alpha=2, out=add_out)
        gelu_out, gelu_base = _strided((4, 6), device)
        torch.ops.aten.gelu.out(a.to(device), out=gelu_out)
        return [add_out, add_base, gelu_out, gelu_base]

    cpu, tpu = _both(run)
    _assert_same(cpu[:2], tpu[:2])
    # CPU's gelu leaves a strided out= tensor unwritten; tpu writes gelu.
    torch.testing.assert_close(tpu[2].value, torch.nn.functional.gelu(a), atol=1e-6, rtol=1e-6)
    assert tpu[3].value.sum() == pytest.approx(torch.nn.functional.gelu(a).sum().item(), rel=1e-5)


def test_out_resized_from_empty_and_with_a_wider_dtype():
    a, b = _inputs((3, 5), (3, 5))

    def run(device):
        resized = torch.empty(0, device=device)
        torch.mul(a.to(device), b.to(device), out=resized)
        wide = torch.empty(3, 5, dtype=torch.float64, device=device)
        torch.add(a.to(device), b.to(device), out=wide)
        return [resized, wide]

    _assert_same(*_both(run))


def test_out_with_a_narrower_dtype_raises_as_cpu():
    a = torch.randn(3, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.add(a, a, out=torch.empty(3, dtype=torch.long, device="tpu"))
    assert (a + 1).cpu().shape == (3,)  # the process keeps working


def test_conj_physical_out_and_in_place():
    re, im = _inputs((3, 4), (3, 4))

    def run(device):
        z = torch.complex(re, im).to(device)
        out = torch.empty(0, dtype=torch.complex64, device=device)
        torch.conj_physical(z, out=out)
        real_out = torch.empty(0, device=device)
        torch.conj_physical(re.to(device), out=real_out)
        inplace = z.clone().conj_physical_()
        return [torch.view_as_real(out), real_out, torch.view_as_real(inplace)]

    _assert_same(*_both(run))


def test_fft_out_forms_that_conjugate():
    (x,) = _inputs((8,))

    def run(device):
        out = torch.empty(0, dtype=torch.complex64, device=device)
        torch.fft.ihfft(x.to(device), out=out)
        return [torch.view_as_real(out)]

    _assert_same(*_both(run))


@pytest.mark.parametrize("dim,start,length", [(0, 1, 2), (1, -3, 2), (1, 0, 0)])
def test_narrow_copy_and_its_out_form(dim, start, length):
    (x,) = _inputs((4, 5))

    def run(device):
        out = torch.empty(0, device=device)
        torch.narrow_copy(x.to(device), dim, start, length, out=out)
        return [torch.narrow_copy(x.to(device), dim, start, length), out]

    _assert_same(*_both(run))


def test_out_forms_without_a_pytorch_meta_function():
    """geqrf, histogram and lstsq have meta functions of torch_tpu's own for
    their functional forms; their out= forms take those."""
    a, b, h = _inputs((4, 4), (4, 2), (50,))

    def run(device):
        qr, tau = torch.empty(0, device=device), torch.empty(0, device=device)
        torch.geqrf(a.to(device), out=(qr, tau))
        hist, edges = torch.empty(0, device=device), torch.empty(0, device=device)
        torch.histogram(h.to(device), 5, out=(hist, edges))
        sol, res, rank, sv = (torch.empty(0, device=device), torch.empty(0, device=device),
                              torch.empty(0, dtype=torch.long, device=device),
                              torch.empty(0, device=device))
        torch.linalg.lstsq(a.to(device), b.to(device), driver="gelsy",
                           out=(sol, res, rank, sv))
        return [qr, tau, hist, edges, sol]

    cpu, tpu = _both(run)
    torch.testing.assert_close(tpu[0].value, cpu[0], atol=1e-4, rtol=1e-4)
    assert tpu[0].stride == cpu[0].stride() == (1, 4)  # column-major, as LAPACK leaves it
    _assert_same(cpu[1:4], tpu[1:4])
    torch.testing.assert_close(tpu[4].value, cpu[4], atol=1e-3, rtol=1e-3)


def test_geqrf_out_wider_than_its_result_and_narrower_raises():
    (a,) = _inputs((3, 3))
    qr, tau = torch.empty(0, dtype=torch.float64, device="tpu"), torch.empty(0, device="tpu")
    torch.geqrf(a.to("tpu"), out=(qr, tau))
    assert qr.dtype == torch.float64
    torch.testing.assert_close(qr.cpu(), torch.geqrf(a)[0].double(), atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="castable"):  # CPU's own message
        torch.geqrf(a.to("tpu"), out=(torch.empty(0, dtype=torch.long, device="tpu"), tau))


@pytest.mark.parametrize("training", [False, True])
def test_native_batch_norm_out_statistics(training):
    """CPU's out= form leaves eval mode's saved statistics as given (PyTorch's
    meta function would resize them to [C]); in training it fills them and
    _native_batch_norm_legit.out updates the running statistics too."""
    x, w, b = _inputs((6, 3), (3,), (3,))

    def run(device):
        rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
        outs = [torch.empty(0, device=device) for _ in range(3)]
        torch.ops.aten.native_batch_norm.out(x.to(device), w.to(device), b.to(device), rm, rv,
                                             training, 0.1, 1e-5, out=outs[0],
                                             save_mean=outs[1], save_invstd=outs[2])
        legit = [torch.empty(0, device=device) for _ in range(3)]
        rm2, rv2 = torch.zeros(3, device=device), torch.ones(3, device=device)
        torch.ops.aten._native_batch_norm_legit.out(x.to(device), w.to(device), b.to(device),
                                                    rm2, rv2, training, 0.1, 1e-5, out=legit[0],
                                                    save_mean=legit[1], save_invstd=legit[2])
        return outs + [rm, rv] + legit + [rm2, rv2]

    _assert_same(*_both(run))


def test_lapack_out_forms_leave_resized_matrices_column_major():
    """CPU's LAPACK-backed out= kernels leave an out= matrix they resize in
    column-major order (pivots, eigenvalues and info stay row-major);
    PyTorch's meta functions say row-major, so tpu followed them before."""
    torch.manual_seed(0)
    a = torch.randn(2, 4, 4)
    h = a @ a.mT + 4 * torch.eye(4)
    l = torch.linalg.cholesky(h)
    b = torch.randn(2, 4, 3)
    g, tau = torch.geqrf(a)
    lu, piv = torch.linalg.lu_factor(a)
    ld, lpiv = torch.linalg.ldl_factor(h)

    def calls(d):
        def e(dtype=torch.float32):
            return torch.empty(0, dtype=dtype, device=d)
        m = {k: v.to(d) for k, v in dict(a=a, h=h, l=l, b=b, g=g, tau=tau, lu=lu, piv=piv,
                                              ld=ld, lpiv=lpiv).items()}
        i32 = torch.int32
        return [
            torch.cholesky_inverse(m["l"], out=e()),
            torch.linalg.eigh(m["h"], out=(e(), e())),
            torch.linalg.householder_product(m["g"], m["tau"], out=e()),
            torch.linalg.ldl_factor_ex(m["h"], out=(e(), e(i32), e(i32))),
            torch.linalg.ldl_solve(m["ld"], m["lpiv"], m["b"], out=e()),
            torch.linalg.lu_factor_ex(m["a"], out=(e(), e(i32), e(i32))),
            torch.linalg.lu_solve(m["lu"], m["piv"], m["b"], out=e()),
            torch.linalg.qr(m["a"], out=(e(), e())),
            torch.ormqr(m["g"], m["tau"], m["b"], out=e()),
            torch.linalg.solve_triangular(m["l"], m["b"], upper=False, out=e()),
        ]

    for k, (got, want) in enumerate(zip(calls("tpu"), calls("cpu"))):
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for x, y in zip(got, want):
            assert x.stride() == y.stride(), k
            if k == 1:  # eigenvectors: unique up to sign
                x, y = x.abs(), y.abs()
            torch.testing.assert_close(x.cpu(), y, atol=1e-4, rtol=1e-4, msg=lambda m: f"call {k}: {m}")


def test_cat_out_resized_takes_the_inputs_common_memory_format():
    """CPU's cat.out resizes its out= tensor to the memory format its inputs
    share (contiguous when they differ); PyTorch's meta function says
    contiguous, so tpu followed it before."""
    x4, x5 = _inputs((2, 3, 4, 5), (2, 3, 4, 5, 2))
    cl = x4.to(memory_format=torch.channels_last)
    cl3 = x5.to(memory_format=torch.channels_last_3d)

    def calls(d):
        def e():
            return torch.empty(0, device=d)
        a, b, c = cl.to(d), x4.to(d), cl3.to(d)
        return [torch.cat([a, a], out=e()), torch.cat([a, a], dim=1, out=e()),
                torch.cat([a, b], dim=3, out=e()),  # formats differ: contiguous
                torch.cat([a, torch.empty(0, device=d)], dim=1, out=e()),
                torch.cat([c, c], dim=2, out=e()),
                torch.cat([a, a], out=torch.empty(4, 3, 4, 5, device=d))]  # kept as given

    _assert_same(calls("cpu"), [_OnHost(t) for t in calls("tpu")])


def test_nonzero_out_resized_is_column_major():
    """CPU's nonzero writes an out= tensor of another size as [N, ndim] with
    strides (1, N); one of the result's size keeps its strides."""
    mask = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])

    def calls(d):
        m = mask.to(d)
        long = dict(dtype=torch.long, device=d)
        return [torch.nonzero(m, out=torch.empty(0, **long)),
                torch.nonzero(m, out=torch.empty(3, 2, **long)),
                torch.nonzero(m, out=torch.empty(4, 2, **long)),
                torch.nonzero(torch.zeros(3, 2, device=d), out=torch.empty(0, **long)),
                torch.nonzero(torch.tensor(0.0, device=d), out=torch.empty(0, **long))]

    _assert_same(calls("cpu"), [_OnHost(t) for t in calls("tpu")])


def test_max_unpool2d_out_takes_the_inputs_memory_format():
    """CPU's max_unpool2d restrides its out= tensor to the input's memory
    format even when it has the right size (a strided view of a larger base
    included: the values land at the front of its storage)."""
    x = _inputs((1, 2, 4, 4))[0]

    def calls(d):
        out = []
        for xin in (x, x.to(memory_format=torch.channels_last)):
            y, i = torch.nn.functional.max_pool2d(xin.to(d), 2, return_indices=True)
            for given in (torch.empty(0, device=d), torch.empty(1, 2, 4, 4, device=d),
                          torch.empty(1, 2, 4, 4, device=d).to(memory_format=torch.channels_last),
                          torch.empty(1, 2, 5, 4, device=d)[:, :, :4]):
                out.append(torch._C._nn.max_unpool2d(y, i, [4, 4], out=given))
        return out

    _assert_same(calls("cpu"), [_OnHost(t) for t in calls("tpu")])


def test_pointwise_out_resized_takes_a_transposed_inputs_layout():
    """CPU's TensorIterator gives an out= tensor it resizes the layout it
    gives the functional result (a transposed input: transposed strides);
    PyTorch's Python meta functions resize it contiguous. An out= tensor of
    the right size keeps its own strides."""
    x = _inputs((5, 7, 6))[0]

    def calls(d):
        t = x.to(d).transpose(1, 2)
        e = lambda: torch.empty(0, device=d)  # noqa: E731
        return [torch.neg(t, out=e()), torch.add(t, t, out=e()), torch.add(t, 1.5, out=e()),
                torch.tanh(t, out=e()), torch.mul(t, t.contiguous(), out=e()),
                torch.where(t > 0, t, torch.zeros_like(t), out=e()),
                torch.neg(t, out=torch.empty(5, 6, 7, device=d))]

    _assert_same(calls("cpu"), [_OnHost(t) for t in calls("tpu")])
