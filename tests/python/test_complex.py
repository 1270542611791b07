"""Complex tensors on tpu against CPU: the modulus, PyTorch's lazy conjugate
and negative views, and complex ranges.

Each of these gave silent wrong answers before: `abs()` of a complex tensor
returned |real part|; the ops PyTorch lets a conjugate view through to the
backend (mm, addmm, bmm, baddbmm, dot, ...) ignored the conjugation, and so
did a copy into a conjugate view; reading a negative view (`z.conj().imag`)
on the host recursed until the process crashed; complex `linspace` and
`logspace` dropped the imaginary parts. The OpInfo conformance suite now runs
complex64 too (tests/conformance)."""
import pytest
import torch

import torch_tpu  # noqa: F401

pytestmark = pytest.mark.usefixtures("highest_precision")
TOL = dict(atol=1e-5, rtol=1e-5)


def complex_randn(*shape):
    return torch.complex(torch.randn(*shape), torch.randn(*shape))


def same(fn, *tensors):
    want = fn(*tensors)
    got = fn(*(t.to("tpu") for t in tensors))
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu().resolve_conj().resolve_neg(),
                               want.resolve_conj().resolve_neg(), **TOL)


def test_abs_is_the_modulus():
    torch.manual_seed(0)
    z = complex_randn(4, 5)
    same(torch.abs, z)
    same(lambda t: t.abs().pow(2), z)
    same(lambda t: torch.nn.functional.l1_loss(t, torch.zeros_like(t)), z)
    same(lambda t: torch.polar(t.abs(), t.angle()), z)
    # Whisper's and torchaudio's spectrogram magnitude: |stft|^2.
    signal = torch.randn(2, 400)
    window = torch.hann_window(64)
    same(lambda s, w: torch.stft(s, 64, 16, window=w, return_complex=True).abs() ** 2,
         signal, window)
    assert torch.tensor([3 + 4j]).to("tpu").abs().item() == 5.0


CONJUGATE_OPS = {
    "mm_conj_lhs": lambda a, b, v: a.conj() @ b,
    "mm_conj_transposed_rhs": lambda a, b, v: a @ b.mT.conj(),
    "mm_both": lambda a, b, v: torch.mm(a.conj(), b.conj()),
    "addmm": lambda a, b, v: torch.addmm(a.conj(), a, b.conj()),
    "bmm": lambda a, b, v: torch.bmm(a[None].conj(), b[None]),
    "baddbmm": lambda a, b, v: torch.baddbmm(a[None].conj(), a[None], b[None].conj()),
    "dot": lambda a, b, v: torch.dot(v.conj(), v),
    "matmul_batched": lambda a, b, v: a[None].expand(2, 3, 3).conj() @ b,
    "einsum": lambda a, b, v: torch.einsum("ij,jk->ik", a.conj(), b),
    "cov": lambda a, b, v: torch.cov(a),
    "corrcoef": lambda a, b, v: torch.corrcoef(a),
    "elementwise": lambda a, b, v: a.conj() * b + 1,
    "copy_into_a_conjugate_view": lambda a, b, v: a.clone().conj().copy_(b).resolve_conj(),
    "copy_from_a_conjugate_view": lambda a, b, v: torch.empty_like(a).copy_(b.conj()),
    "clone": lambda a, b, v: a.conj().clone(),
    "index_and_cat": lambda a, b, v: torch.cat([a.conj()[[0, 2]], b[:1]]),
    "fft": lambda a, b, v: torch.fft.fft(a.conj()),
}


@pytest.mark.parametrize("name", list(CONJUGATE_OPS))
def test_conjugate_views_are_conjugated(name):
    torch.manual_seed(0)
    same(CONJUGATE_OPS[name], complex_randn(3, 3), complex_randn(3, 3), complex_randn(3))


def test_negative_views_read_and_compute_as_on_cpu():
    """`z.conj().imag` is a negative view of z's imaginary parts."""
    torch.manual_seed(0)
    z, r = complex_randn(3, 3), torch.randn(3, 3)
    same(lambda t: t.conj().imag, z)  # a host read of the view (crashed before)
    same(lambda t: t.conj().imag * 2, z)
    same(lambda t, m: t.conj().imag @ m, z, r)  # mm lets the negative view through
    same(lambda t: torch.empty(3, 3, device=t.device).copy_(t.conj().imag), z)
    t = z.to("tpu")
    assert t.conj().imag[1, 2].item() == z.conj().imag[1, 2].item()
    # A CPU scalar that is a negative view enters a tpu op with its value.
    n = torch.tensor(2 + 1j).conj().imag
    same(lambda x: x * n, r)


def test_writing_into_a_conjugate_view_through_a_matmul_raises():
    """addmm_ into a conjugate view would need the result conjugated on the
    way in: refused with a clear error (CPU supports it), nothing written."""
    torch.manual_seed(0)
    m = complex_randn(2, 2).to("tpu")
    target = m.clone()
    view = target.conj()
    with pytest.raises(NotImplementedError, match="conjugate or negative view"):
        view.addmm_(m, m)
    torch.testing.assert_close(target.cpu(), m.cpu())
    assert (torch.ones(2).to("tpu") + 1).cpu().tolist() == [2.0, 2.0]


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_complex_linspace_and_logspace(steps):
    start, end = complex(1, 2), complex(2, -3)
    for fn in (torch.linspace, torch.logspace):
        want = fn(start, end, steps)
        got = fn(start, end, steps, device="tpu")
        assert got.dtype == want.dtype == torch.complex64
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    got = torch.linspace(0, 1, steps, dtype=torch.complex64, device="tpu")
    torch.testing.assert_close(got.cpu(), torch.linspace(0, 1, steps, dtype=torch.complex64))


def test_complex_lerp_and_unsupported_ops_raise_clearly():
    torch.manual_seed(0)
    a, b = complex_randn(4), complex_randn(4)
    same(lambda x, y: torch.lerp(x, y, 0.3), a, b)
    same(lambda x, y: torch.lerp(x, y, torch.full((4,), 0.7 + 0.1j, device=x.device)), a, b)
    t = complex_randn(3, 3).to("tpu")
    with pytest.raises(NotImplementedError, match="aten::linalg_eig.*CPU_FALLBACK"):
        torch.linalg.eig(t)


def test_complex_log_sum_exps():
    """logsumexp (shifted by the largest real part), logcumsumexp and
    logaddexp of complex tensors, as CPU computes them; they raised
    NotImplementedError before."""
    torch.manual_seed(0)
    z = complex_randn(6, 7) * 3
    for dim in (0, 1):
        same(lambda t: torch.logsumexp(t, dim), z)
        same(lambda t: torch.logcumsumexp(t, dim), z)
    same(torch.logaddexp, z, complex_randn(6, 7) * 3)
    inf, nan = float("inf"), float("nan")
    rows = torch.tensor([[complex(-inf, 0), complex(1, 2)], [complex(inf, 1), complex(2, 0)],
                         [complex(nan, 0), complex(0, 1)]], dtype=torch.complex64)
    for dim in (0, 1):
        for fn in (torch.logsumexp, torch.logcumsumexp):
            torch.testing.assert_close(fn(rows.to("tpu"), dim).cpu(), fn(rows, dim), equal_nan=True)


def test_complex_logaddexp_at_infinities_and_nans():
    """Every pair of real parts (-inf, inf, nan, finite) and imaginary
    parts (0, finite, nan, inf): CPU's rules (NaN in either part of either
    gives NaN + NaN i; exp(-inf + i y) is 0 for every y)."""
    inf, nan = float("inf"), float("nan")
    values = [complex(re, im) for re in (-inf, inf, nan, 0.0, 1.5, -2.0, 80.0)
              for im in (0.0, 1.0, -3.0, nan, inf)]
    x = torch.tensor(values, dtype=torch.complex64).repeat_interleave(len(values))
    y = torch.tensor(values, dtype=torch.complex64).repeat(len(values))
    torch.testing.assert_close(torch.logaddexp(x.to("tpu"), y.to("tpu")).cpu(),
                               torch.logaddexp(x, y), equal_nan=True, **TOL)


def test_complex_renorm():
    torch.manual_seed(0)
    z = complex_randn(6, 7) * 3
    for p in (1.0, 2.0, float("inf")):
        for dim in (0, 1):
            same(lambda t: torch.renorm(t, p, dim, 3.0), z)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "tanhshrink"])
def test_complex_activation_gradients_are_conjugated(name):
    """tanh_backward and sigmoid_backward multiply by the conjugate of the
    derivative for complex inputs, as PyTorch's holomorphic convention asks;
    they used the derivative itself (silently wrong gradients, also through
    tanhshrink and the `_foreach_` forms)."""
    fn = {"tanh": torch.tanh, "sigmoid": torch.sigmoid,
          "tanhshrink": torch.nn.functional.tanhshrink}[name]
    torch.manual_seed(0)
    z, cot = complex_randn(4, 5), complex_randn(4, 5)
    grads = []
    for device in ("cpu", "tpu"):
        x = z.to(device).requires_grad_(True)
        grads.append(torch.autograd.grad(fn(x), x, cot.to(device))[0].cpu())
    torch.testing.assert_close(grads[1], grads[0], **TOL)
    x = [z.to("tpu").requires_grad_(True)]
    out = getattr(torch, "_foreach_" + name)(x) if name != "tanhshrink" else None
    if out is not None:
        got = torch.autograd.grad(out, x, [cot.to("tpu")])[0].cpu()
        torch.testing.assert_close(got, grads[0], **TOL)


REDUCTIONS = {
    "vector_norm": lambda z: torch.linalg.vector_norm(z),
    "vector_norm_1_dim": lambda z: torch.linalg.vector_norm(z, 1, dim=1),
    "norm_inf": lambda z: z.norm(float("inf")),
    "normalize": lambda z: torch.nn.functional.normalize(z),
    "var": lambda z: z.var(1),
    "std_correction_0": lambda z: z.std(correction=0),
    "var_mean_mean": lambda z: torch.var_mean(z, 0)[1],
    "vdot": lambda z: torch.vdot(z[0], z[1]),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_complex_norms_variances_and_vdot(name):
    """Norms and variances of complex tensors are real (moduli; the real and
    imaginary parts' variances summed, as CPU); vdot conjugates its first
    argument. These raised NotImplementedError before."""
    torch.manual_seed(0)
    same(REDUCTIONS[name], complex_randn(4, 5))
