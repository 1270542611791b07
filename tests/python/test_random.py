"""On-device random numbers: reproducibility, statistics, dtypes, no recompiles.

Values are not CPU's stream (the tpu draws with a counter-based generator),
so these tests check the properties PyTorch promises instead: the same seed
gives the same values, distributions have the right moments and supports,
dtypes and shapes are CPU's.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same

N = 100_000
DEV = "tpu"


def stats(x):
    x = x.cpu().double()
    return x.mean().item(), x.std().item()


# ---- reproducibility -------------------------------------------------------------

def test_manual_seed_reproduces_and_draws_differ():
    torch.manual_seed(123)
    a, b = torch.rand(64, device=DEV), torch.randn(64, device=DEV)
    torch.manual_seed(123)
    a2, b2 = torch.rand(64, device=DEV), torch.randn(64, device=DEV)
    assert torch.equal(a.cpu(), a2.cpu()) and torch.equal(b.cpu(), b2.cpu())
    c = torch.rand(64, device=DEV)  # the next draw continues the stream
    assert not torch.equal(a.cpu(), c.cpu())
    torch.manual_seed(124)
    assert not torch.equal(a.cpu(), torch.rand(64, device=DEV).cpu())


def test_tpu_manual_seed_and_generator_objects():
    torch.tpu.manual_seed(7)
    a = torch.randint(0, 1000, (32,), device=DEV)
    torch.tpu.manual_seed(7)
    assert torch.equal(a.cpu(), torch.randint(0, 1000, (32,), device=DEV).cpu())
    g1 = torch.Generator(device=DEV).manual_seed(5)
    g2 = torch.Generator(device=DEV).manual_seed(5)
    x = torch.randn(16, device=DEV, generator=g1)
    assert torch.equal(x.cpu(), torch.randn(16, device=DEV, generator=g2).cpu())
    assert not torch.equal(x.cpu(), torch.randn(16, device=DEV, generator=g1).cpu())


def test_rng_state_round_trip():
    torch.tpu.manual_seed(11)
    torch.rand(10, device=DEV)
    state = torch.tpu.get_rng_state()
    a = torch.rand(10, device=DEV)
    torch.tpu.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.rand(10, device=DEV).cpu())


def test_in_place_draws_on_views_and_out_of_place_agree_on_seed():
    torch.manual_seed(3)
    base = torch.zeros(4, 6, device=DEV)
    base[:, 1::2].uniform_(2, 3)
    cpu = base.cpu()
    assert (cpu[:, ::2] == 0).all() and (cpu[:, 1::2] >= 2).all() and (cpu[:, 1::2] < 3).all()


def programs_loaded():
    """Programs compiled or read from the disk cache: each is a program not seen before."""
    m = torch_tpu._C._metrics()
    return m.get("compiles", 0) + m.get("cache_disk_hits", 0)


def test_changing_seed_never_recompiles():
    for seed in (1, 2):  # warm up every program the draws use
        torch.manual_seed(seed)
        torch.rand(8, device=DEV), torch.randn(8, device=DEV), torch.randint(5, (8,), device=DEV)
    before = programs_loaded()
    for seed in (3, 4, 5):
        torch.manual_seed(seed)
        torch.rand(8, device=DEV), torch.randn(8, device=DEV), torch.randint(5, (8,), device=DEV)
    assert programs_loaded() == before


# ---- continuous distributions ------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rand_dtypes_bounds_and_moments(dtype):
    torch.manual_seed(0)
    x = torch.rand(N, device=DEV, dtype=dtype)
    assert x.dtype == dtype and x.shape == (N,)
    c = x.cpu()
    assert c.min() >= 0 and c.max() < 1
    mean, std = stats(x)
    assert abs(mean - 0.5) < 0.01 and abs(std - math.sqrt(1 / 12)) < 0.01


def test_uniform_range_and_narrow_type_upper_bound():
    torch.manual_seed(1)
    x = torch.empty(N, device=DEV).uniform_(-3, 5).cpu()
    assert x.min() >= -3 and x.max() < 5 and abs(x.mean().item() - 1) < 0.05
    y = torch.empty(N, device=DEV, dtype=torch.bfloat16).uniform_(100, 101).cpu()
    assert y.min() >= 100 and y.max() < 101


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_randn_moments(dtype):
    torch.manual_seed(2)
    x = torch.randn(N, device=DEV, dtype=dtype)
    assert x.dtype == dtype
    mean, std = stats(x)
    assert abs(mean) < 0.02 and abs(std - 1) < 0.02
    assert abs((x.cpu().double().abs() < 1).double().mean().item() - 0.6827) < 0.01


def test_normal_overloads():
    torch.manual_seed(4)
    m, s = stats(torch.empty(N, device=DEV).normal_(3, 2))
    assert abs(m - 3) < 0.05 and abs(s - 2) < 0.05
    mean = torch.full((N,), -1.0, device=DEV)
    std = torch.full((N,), 0.5, device=DEV)
    for x, (em, es) in [(torch.normal(mean, 2.0), (-1, 2)), (torch.normal(4.0, std), (4, 0.5)),
                        (torch.normal(mean, std), (-1, 0.5)),
                        (torch.normal(1.0, 3.0, (N,), device=DEV), (1, 3))]:
        assert x.device.type == "tpu" and x.shape == (N,)
        m, s = stats(x)
        assert abs(m - em) < 0.05 * es + 0.01 and abs(s - es) < 0.03 * es
    # mean varies per element: broadcasting of the tensor arguments
    x = torch.normal(torch.tensor([0.0, 100.0], device=DEV).repeat(1000), 1.0).cpu()
    assert abs(x[1::2].mean().item() - 100) < 0.2


def test_exponential_geometric_log_normal_cauchy():
    torch.manual_seed(5)
    x = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert x.min() >= 0 and abs(x.mean().item() - 0.5) < 0.01
    g = torch.empty(N, device=DEV).geometric_(0.25).cpu()
    assert g.min() >= 1 and (g == g.round()).all() and abs(g.mean().item() - 4) < 0.1
    ln = torch.empty(N, device=DEV).log_normal_(0.5, 0.25).cpu()
    assert ln.min() > 0 and abs(ln.log().mean().item() - 0.5) < 0.01
    assert abs(ln.log().std().item() - 0.25) < 0.01
    ca = torch.empty(N, device=DEV).cauchy_(1.0, 2.0).cpu()
    assert abs(ca.median().item() - 1) < 0.05
    assert abs(((ca - 1).abs() < 2).double().mean().item() - 0.5) < 0.01  # quartiles at +-sigma


# ---- integers -------------------------------------------------------------------------

def test_randint_bounds_and_coverage():
    torch.manual_seed(6)
    x = torch.randint(-3, 7, (N,), device=DEV)
    assert x.dtype == torch.int64
    counts = torch.bincount(x.cpu() + 3, minlength=10)
    assert counts.numel() == 10 and (counts > N / 10 * 0.9).all()
    y = torch.randint(5, (3, 4), device=DEV, dtype=torch.int32)
    assert y.dtype == torch.int32 and y.shape == (3, 4)
    assert (y.cpu() >= 0).all() and (y.cpu() < 5).all()


def test_random_defaults_per_dtype():
    torch.manual_seed(7)
    u8 = torch.empty(N, device=DEV, dtype=torch.uint8).random_().cpu()
    assert u8.min() == 0 and u8.max() == 255
    b = torch.empty(1000, device=DEV, dtype=torch.bool).random_().cpu()
    assert 0 < b.sum() < 1000
    f = torch.empty(N, device=DEV).random_().cpu()
    assert f.min() >= 0 and f.max() <= 2 ** 24 and (f == f.round()).all()
    i64 = torch.empty(N, device=DEV, dtype=torch.int64).random_().cpu()
    assert i64.min() >= 0 and i64.max() > 2 ** 60
    full = torch.empty(N, device=DEV, dtype=torch.int64).random_(-2 ** 63, None).cpu()
    assert full.min() < -2 ** 60 and full.max() > 2 ** 60
    r = torch.empty(N, device=DEV, dtype=torch.int16).random_(-5, 5).cpu()
    assert r.min() == -5 and r.max() == 4
    t = torch.empty(N, device=DEV, dtype=torch.int8).random_(3).cpu()
    assert t.min() == 0 and t.max() == 2
    fr = torch.empty(N, device=DEV, dtype=torch.int8).random_(100, None).cpu()
    assert fr.min() == 100 and fr.max() == 127


def test_like_factories():
    torch.manual_seed(8)
    base = torch.zeros(50, 40, device=DEV, dtype=torch.float64)
    for fn in (torch.rand_like, torch.randn_like, lambda t: torch.randint_like(t, 3, 9)):
        x = fn(base)
        assert x.dtype == torch.float64 and x.shape == base.shape and x.device.type == "tpu"
    r = torch.randint_like(base, 3, 9).cpu()
    assert r.min() == 3 and r.max() == 8 and (r == r.round()).all()


# ---- bernoulli and dropout ----------------------------------------------------------------

def test_bernoulli_variants():
    torch.manual_seed(9)
    x = torch.empty(N, device=DEV).bernoulli_(0.3).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0} and abs(x.mean().item() - 0.3) < 0.01
    p = torch.tensor([0.0, 1.0, 0.5], device=DEV).repeat(N // 3)
    y = torch.bernoulli(p).cpu().view(-1, 3)
    assert (y[:, 0] == 0).all() and (y[:, 1] == 1).all() and abs(y[:, 2].mean() - 0.5) < 0.02
    z = torch.empty(p.numel(), device=DEV, dtype=torch.int64).bernoulli_(p.double())
    z = z.cpu().view(-1, 3)
    assert z.dtype == torch.int64 and (z[:, 1] == 1).all()
    w = torch.bernoulli(torch.full((N,), 0.2, device=DEV), 0.9).cpu()
    assert abs(w.mean().item() - 0.9) < 0.01


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_rate_and_scale(p):
    torch.manual_seed(10)
    x = torch.ones(N, device=DEV)
    y = F.dropout(x, p, training=True).cpu()
    kept = y != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 0.01
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    assert torch.equal(F.dropout(x, p, training=False).cpu(), x.cpu())


def test_dropout_module_and_backward():
    torch.manual_seed(11)
    drop = torch.nn.Dropout(0.4)
    x = torch.randn(200, 50, device=DEV, requires_grad=True)
    y = drop(x)
    y.backward(torch.ones_like(y))  # (sum is another family's lowering)
    mask = (y != 0).cpu()
    assert_same(x.grad, mask.float() / 0.6, rtol=1e-6, atol=1e-6)
    drop.eval()
    assert torch.equal(drop(x).detach().cpu(), x.detach().cpu())


def test_native_dropout_outputs_and_backward_match_cpu_formula():
    torch.manual_seed(12)
    x = torch.randn(64, 32, dtype=torch.bfloat16)
    out, mask = torch.native_dropout(x.to(DEV), 0.3, True)
    assert out.dtype == torch.bfloat16 and mask.dtype == torch.bool
    expect = (x.float() * mask.cpu() * (1 / 0.7)).bfloat16()
    assert torch.equal(out.cpu(), expect)
    out, mask = torch.native_dropout(x.to(DEV), 0.3, False)
    assert torch.equal(out.cpu(), x) and mask.cpu().all()
    g = torch.randn(64, 32)
    m = torch.rand(64, 32) < 0.5
    assert_same(torch.ops.aten.native_dropout_backward(g.to(DEV), m.to(DEV), 1.25),
                torch.ops.aten.native_dropout_backward(g, m, 1.25))


# ---- permutations and sampling ------------------------------------------------------------

def test_randperm_is_a_permutation():
    torch.manual_seed(13)
    p = torch.randperm(1000, device=DEV)
    assert p.dtype == torch.int64
    assert torch.equal(p.cpu().sort().values, torch.arange(1000))
    assert not torch.equal(p.cpu(), torch.arange(1000))
    q = torch.randperm(10, device=DEV, dtype=torch.float32).cpu()
    assert torch.equal(q.sort().values, torch.arange(10.0))
    assert torch.randperm(0, device=DEV).numel() == 0


def test_multinomial_without_replacement():
    torch.manual_seed(14)
    probs = torch.tensor([[0.1, 0.0, 0.4, 0.5, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]], device=DEV)
    s = torch.multinomial(probs, 3).cpu()
    assert s.shape == (2, 3) and s.dtype == torch.int64
    assert set(s[0].tolist()) == {0, 2, 3}
    assert len(set(s[1].tolist())) == 3
    first = torch.multinomial(torch.tensor([1.0, 9.0], device=DEV).expand(N // 10, 2), 1).cpu()
    assert abs(first.double().mean().item() - 0.9) < 0.02


def test_multinomial_with_replacement():
    torch.manual_seed(15)
    probs = torch.tensor([0.2, 0.0, 0.3, 0.5], device=DEV)
    s = torch.multinomial(probs, N, replacement=True).cpu()
    freq = torch.bincount(s, minlength=4).double() / N
    assert freq[1] == 0
    assert torch.allclose(freq, torch.tensor([0.2, 0.0, 0.3, 0.5], dtype=torch.float64),
                          atol=0.01)


def ks_statistic(a, b):
    """The two-sample Kolmogorov-Smirnov statistic of two 1-d samples."""
    a, b = a.double().sort().values, b.double().sort().values
    both = torch.cat([a, b]).sort().values
    cdf = lambda x: torch.searchsorted(x, both, right=True).double() / len(x)  # noqa: E731
    return (cdf(a) - cdf(b)).abs().max().item()


@pytest.mark.parametrize("alpha", [0.05, 0.3, 1.0, 2.5, 10.0, 100.0])
def test_standard_gamma_matches_cpus_distribution(alpha):
    """Gamma draws (torch.distributions' Gamma, Beta, Dirichlet, Chi2,
    StudentT sample through _standard_gamma) follow the same distribution as
    CPU's: the two-sample KS statistic against CPU draws stays below its 0.1%
    critical value (1.95 * sqrt(2 / N)); alpha < 1 takes the boosted branch."""
    torch.manual_seed(21)
    concentration = torch.full((N,), alpha)
    tpu = torch._standard_gamma(concentration.to(DEV)).cpu()
    cpu = torch._standard_gamma(concentration)
    assert tpu.dtype == torch.float32 and tpu.shape == (N,)
    assert (tpu > 0).all()
    assert ks_statistic(tpu, cpu) < 1.95 * math.sqrt(2 / N)
    mean, std = stats(tpu)
    assert abs(mean - alpha) < 5 * math.sqrt(alpha / N)


def test_standard_gamma_edges_dtypes_and_seed():
    edges = torch._standard_gamma(torch.tensor([0.0, -1.0, float("nan"), float("inf")], device=DEV))
    assert edges[0].item() == torch.finfo(torch.float32).tiny  # CPU lifts 0 to the smallest normal
    assert torch.isnan(edges[1:].cpu()).all()  # never accepted: NaN, and the loop ends
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        x = torch._standard_gamma(torch.full((N,), 2.0, dtype=dtype, device=DEV))
        assert x.dtype == dtype and abs(x.double().mean().item() - 2.0) < 0.05
    g = torch.Generator(DEV).manual_seed(5)
    first = torch._standard_gamma(torch.ones(8, device=DEV), generator=g).cpu()
    g.manual_seed(5)
    assert torch.equal(torch._standard_gamma(torch.ones(8, device=DEV), generator=g).cpu(), first)


def test_dirichlet_beta_and_gamma_distributions():
    from torch import distributions as D
    torch.manual_seed(22)
    alpha = torch.tensor([0.5, 1.0, 3.0])
    d = D.Dirichlet(alpha.to(DEV)).sample((N,)).cpu()
    assert torch.allclose(d.sum(-1), torch.ones(N), atol=1e-5)
    assert torch.allclose(d.mean(0), alpha / alpha.sum(), atol=0.005)
    beta = D.Beta(torch.tensor(2.0, device=DEV), torch.tensor(5.0, device=DEV)).sample((N,)).cpu()
    assert abs(beta.mean().item() - 2 / 7) < 0.003
    gamma = D.Gamma(torch.tensor([3.0], device=DEV), torch.tensor([2.0], device=DEV)).sample((N,))
    assert abs(gamma.cpu().mean().item() - 1.5) < 0.02


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-6), (torch.float64, 1e-10)])
def test_standard_gamma_grad_matches_cpu_in_every_regime(dtype, rtol):
    """d sample / d alpha at fixed CDF (Gamma's rsample backward): CPU's series
    below x = 0.8, saddle-point expansion above alpha = 8 (its polynomial
    within 10 % of alpha), rational fit between, all in double as CPU's
    kernel computes (in float32 the saddle-point terms cancel to 1e-4 near
    x = 1.1 alpha)."""
    g = torch.Generator().manual_seed(3)
    alpha = torch.cat([torch.rand(300, generator=g) * 0.5 + 0.01, torch.rand(300, generator=g) * 8,
                       torch.rand(300, generator=g) * 40 + 8]).to(dtype)
    x = torch._standard_gamma(alpha, generator=g)
    x[-50:] = alpha[-50:] * 1.05
    x[:5] = torch.tensor([0.1, 0.5, 0.79, 0.8, 2.0], dtype=dtype)
    want = torch._standard_gamma_grad(alpha, x)
    got = torch._standard_gamma_grad(alpha.to(DEV), x.to(DEV))
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=0)


def test_gamma_and_chi2_rsample_gradients():
    """Gamma(alpha, rate).rsample() differentiates through
    _standard_gamma_grad: alpha's gradient is that of the tpu sample itself."""
    from torch import distributions as D
    alpha = torch.tensor([0.3, 1.0, 3.0, 20.0], device=DEV, requires_grad=True)
    rate = torch.tensor([1.0, 2.0, 0.5, 1.5], device=DEV)
    x = D.Gamma(alpha, rate).rsample()
    x.sum().backward()
    std = (x.detach() * rate).cpu()
    want = torch._standard_gamma_grad(alpha.detach().cpu(), std) / rate.cpu()
    torch.testing.assert_close(alpha.grad.cpu(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="expected Float|one floating point dtype"):
        torch._standard_gamma_grad(alpha.detach(), x.detach().double())


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 5e-4), (torch.float64, 1e-10)])
def test_dirichlet_grad_matches_cpu_in_every_regime(dtype, rtol):
    """Beta/Dirichlet rsample backward: series near x = 0 and x = 1 (in the
    input's type, as CPU), the saddle-point expansion when both parameters
    exceed 6 and the rational correction otherwise (in double, as CPU: in
    float32 the expansion lost up to 10 % next to the mean)."""
    g = torch.Generator().manual_seed(0)
    n = 1500
    alpha = torch.cat([torch.rand(n, generator=g) * 3 + 0.05, torch.rand(n, generator=g) * 30 + 6])
    beta = torch.cat([torch.rand(n, generator=g) * 3 + 0.05, torch.rand(n, generator=g) * 30 + 6])
    alpha, beta = torch.cat([alpha, alpha]), torch.cat([beta, beta.flip(0)])
    x = torch.distributions.Beta(alpha, beta).sample().clamp(1e-6, 1 - 1e-6)
    args = [t.to(dtype) for t in (x, alpha, alpha + beta)]
    want = torch._dirichlet_grad(*args)
    got = torch._dirichlet_grad(*[t.to(DEV) for t in args])
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=1e-9)


def test_dirichlet_and_beta_rsample_gradients():
    from torch import distributions as D
    conc = torch.tensor([[0.4, 2.0, 7.0], [8.0, 9.0, 12.0]], device=DEV, requires_grad=True)
    x = D.Dirichlet(conc).rsample()
    (x * torch.arange(3.0, device=DEV)).sum().backward()
    assert torch.isfinite(conc.grad.cpu()).all()
    a = torch.tensor([0.5, 3.0, 20.0], device=DEV, requires_grad=True)
    b = torch.tensor([2.0, 0.7, 15.0], device=DEV, requires_grad=True)
    D.Beta(a, b).rsample().sum().backward()
    assert torch.isfinite(a.grad.cpu()).all() and torch.isfinite(b.grad.cpu()).all()
    # the same backward on CPU, fed tpu's own samples, gives tpu's gradient
    xc = x.detach().cpu()
    concc = conc.detach().cpu()
    total = concc.sum(-1, keepdim=True).expand_as(concc)
    grad_x = torch.arange(3.0).expand_as(xc)
    dx = torch._dirichlet_grad(xc, concc, total)
    want = dx * (grad_x - (xc * grad_x).sum(-1, keepdim=True))
    torch.testing.assert_close(conc.grad.cpu(), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("rate", [0.1, 4.5, 9.9, 10.0, 30.0, 1000.0])
def test_poisson_matches_cpus_distribution(rate):
    """Both of CPU's samplers: products of uniforms below 10, transformed
    rejection from 10 on (the KS statistic against CPU's draws)."""
    torch.manual_seed(23)
    rates = torch.full((N,), rate)
    tpu = torch.poisson(rates.to(DEV)).cpu()
    assert torch.equal(tpu, tpu.round()) and (tpu >= 0).all()
    assert ks_statistic(tpu, torch.poisson(rates)) < 1.95 * math.sqrt(2 / N)
    edges = torch.poisson(torch.tensor([0.0, -1.0, float("nan")], device=DEV)).cpu()
    assert edges[0].item() == 0 and torch.isnan(edges[1:]).all()


# ---- argument errors (CPU's checks; NotImplementedError is a RuntimeError) ---------------

@pytest.mark.parametrize("fn,message", [
    (lambda: torch.empty(3, device=DEV).uniform_(2, 1), "from=2 > to=1"),
    (lambda: torch.empty(3, dtype=torch.long, device=DEV).uniform_(), "check_uniform_bounds"),
    (lambda: torch.empty(3, device=DEV).bernoulli_(1.5), r"p to be in \[0, 1\]"),
    (lambda: torch.randint(5, 3, (3,), device=DEV), "'from' to be less than 'to'"),
    (lambda: torch.empty(3, dtype=torch.uint8, device=DEV).random_(0, 300), "out of bounds"),
    (lambda: torch.multinomial(torch.ones(2, device=DEV), 3), "without replacement"),
    # CPU's native_dropout draws with p = 1 - 1.5: its bernoulli_ check is what CPU raises.
    (lambda: torch.native_dropout(torch.ones(3, device=DEV), 1.5, True), r"p to be in \[0, 1\]"),
])
def test_invalid_arguments_raise(fn, message):
    with pytest.raises(RuntimeError, match=message):
        fn()
