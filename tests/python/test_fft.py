"""torch.fft on tpu against CPU: complex, real and inverse real transforms
over one or more dims, every normalization, and their gradients."""
import pytest
import torch

from conftest import assert_same, check

TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_and_ifft(norm):
    x = torch.randn(3, 8, dtype=torch.complex64)
    check(lambda x: torch.fft.fft(x, norm=norm), x, **TOL)
    check(lambda x: torch.fft.ifft(x, norm=norm, dim=0), x, **TOL)
    check(lambda x: torch.fft.fft(x, n=5), torch.randn(2, 7), **TOL)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_rfft_and_irfft(norm):
    x = torch.randn(4, 10)
    check(lambda x: torch.fft.rfft(x, norm=norm), x, **TOL)
    y = torch.fft.rfft(x)
    check(lambda y: torch.fft.irfft(y, norm=norm), y, **TOL)
    check(lambda y: torch.fft.irfft(y, n=7, dim=-1, norm=norm), y, **TOL)
    check(lambda y: torch.fft.irfft(y, n=12, dim=0, norm=norm), y, **TOL)


def test_multi_dim_transforms():
    x = torch.randn(2, 3, 4, 6)
    check(lambda x: torch.fft.fft2(x), x, **TOL)
    check(lambda x: torch.fft.fftn(x), x, **TOL)  # four dims: two groups
    check(lambda x: torch.fft.rfftn(x, dim=(0, 2, 3)), x, **TOL)
    y = torch.fft.rfft2(x)
    check(lambda y: torch.fft.irfft2(y, s=(3, 6)), y, **TOL)
    check(lambda y: torch.fft.irfftn(y, norm="ortho"), y, **TOL)
    check(lambda x: torch.fft.fft(x), torch.randn(6, dtype=torch.float64))


def test_inverse_fft_gradients():
    # rfft's backward reads a complex grad through view_as_real (not lowered
    # on tpu yet); the inverse transforms' backward ops are r2c and c2c.
    y = torch.randn(3, 5, dtype=torch.complex64)
    cpu, tpu = y.clone().requires_grad_(), y.to("tpu").requires_grad_()
    loss = lambda y: torch.fft.irfft(torch.fft.ifft(y, dim=0), norm="ortho").pow(2).sum()  # noqa
    g_cpu, = torch.autograd.grad(loss(cpu), cpu)
    g_tpu, = torch.autograd.grad(loss(tpu), tpu)
    assert_same(g_tpu, g_cpu, **TOL)


def test_conjugate_views_copy_to_host_and_hfft():
    z = torch.randn(6, dtype=torch.complex64)
    t = z.to("tpu")
    assert torch.equal(t.conj().cpu(), z.conj())
    assert torch.equal(t.conj().resolve_conj().cpu(), z.conj().resolve_conj())
    torch.testing.assert_close(torch.fft.hfft(t).cpu(), torch.fft.hfft(z), atol=1e-5, rtol=1e-5)


def test_view_as_real_aliases_and_rfft_backward():
    z = torch.randn(4, dtype=torch.complex64)
    t = z.to("tpu")
    r = torch.view_as_real(t)
    assert torch.equal(r.cpu(), torch.view_as_real(z))
    r.mul_(2)  # writes through to the complex storage
    assert torch.equal(t.cpu(), z * 2)
    assert torch.equal(torch.view_as_complex(r).cpu(), z * 2)
    x = torch.randn(8)
    xt, xc = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    torch.fft.rfft(xt).abs().sum().backward()
    torch.fft.rfft(xc).abs().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
