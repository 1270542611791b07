"""Default-precision f32 dots take their bf16-rounded operands as bf16 with an
f32 result (on XLA:CPU by default; TORCH_TPU_BF16_DOTS=0/1 decides). XLA:CPU
runs some dots in a kernel that rejects bf16 x bf16 -> f32 (which ones depends
on the whole optimized program); those dots are compiled again with their
operands in f32. Whatever the shape, orientation, dtype or mode, every dot
must run and give the bf16-operand, f32-accumulation values. The tests run in
the default mode here and again in the other mode in a subprocess (the switch
is read once)."""
import itertools
import os
import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import torch_tpu

SIZES = (1, 2, 3, 4, 8, 17, 64, 130)


def _ref(f, *xs):
    # the default precision: operands rounded to bf16, products summed in f32+
    return f(*[x.bfloat16().double() if x.dtype == torch.float32 else x.double() for x in xs])


def _close(y, ref, k):
    tol = 1e-5 * (1 + k) ** 0.5
    torch.testing.assert_close(y.double(), ref.to(torch.float64), rtol=tol, atol=tol)


FORMS = {
    "nn": (lambda a, b: a @ b, lambda m, k, n: ((m, k), (k, n))),
    "nt": (lambda a, b: a @ b.t(), lambda m, k, n: ((m, k), (n, k))),
    "tn": (lambda a, b: a.t() @ b, lambda m, k, n: ((k, m), (k, n))),
    "tt": (lambda a, b: a.t() @ b.t(), lambda m, k, n: ((k, m), (n, k))),
}


def _cases(count, seed):
    rng = random.Random(seed)
    every = list(itertools.product(FORMS, SIZES, SIZES, SIZES))
    return rng.sample(every, count)


@pytest.mark.parametrize("form,m,k,n", _cases(24, 0))
def test_mm_forms_strict(form, m, k, n):
    f, shapes = FORMS[form]
    a, b = (torch.randn(s) for s in shapes(m, k, n))
    _close(f(a.to("tpu"), b.to("tpu")).cpu(), _ref(f, a, b), k)


@pytest.mark.parametrize("form,batch,m,k,n", [
    (form, batch, m, k, n) for (form, m, k, n), batch in zip(_cases(16, 1), itertools.cycle((1, 2, 5)))])
def test_bmm_forms_compiled(form, batch, m, k, n):
    f2, shapes = FORMS[form]
    tr = {"nn": (False, False), "nt": (False, True), "tn": (True, False), "tt": (True, True)}[form]

    def f(a, b):
        return torch.bmm(a.transpose(1, 2) if tr[0] else a, b.transpose(1, 2) if tr[1] else b)

    sa, sb = shapes(m, k, n)
    a, b = torch.randn(batch, *sa), torch.randn(batch, *sb)
    g = torch.compile(f, backend="tpu", dynamic=False)
    _close(g(a.to("tpu"), b.to("tpu")).cpu(), _ref(f, a, b), k)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 8), (3, 5, 7), (2, 64, 130)])
@pytest.mark.parametrize("compiled", [False, True])
def test_linear_forward_backward(shape, compiled):
    batch, fin, fout = shape
    torch.manual_seed(sum(shape))
    x = torch.randn(batch, fin, requires_grad=True)
    lin = torch.nn.Linear(fin, fout)
    lin_t = torch.nn.Linear(fin, fout).to("tpu")
    lin_t.load_state_dict({k: v.to("tpu") for k, v in lin.state_dict().items()})
    xt = x.detach().to("tpu").requires_grad_()

    def step(mod, inp):
        y = torch.tanh(mod(inp))
        y.square().sum().backward()
        return y

    run = torch.compile(step, backend="tpu") if compiled else step
    y = step(lin, x)
    yt = run(lin_t, xt)
    tol = dict(rtol=0.03, atol=0.03)
    torch.testing.assert_close(yt.detach().cpu(), y.detach(), **tol)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, **tol)
    torch.testing.assert_close(lin_t.weight.grad.cpu(), lin.weight.grad, **tol)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 1, 4, 8), (2, 3, 5, 16), (1, 2, 64, 32),
                                   (2, 2, 17, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_sdpa_forward_backward(shape, causal, mode):
    old = torch_tpu.get_eager_mode() if hasattr(torch_tpu, "get_eager_mode") else None
    torch_tpu.set_eager_mode(mode)
    try:
        torch.manual_seed(7)
        q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
        qt, kt, vt = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        yt = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        y.sum().backward()
        yt.sum().backward()
        for a, b in ((yt, y), (qt.grad, q.grad), (kt.grad, k.grad), (vt.grad, v.grad)):
            torch.testing.assert_close(a.detach().cpu(), b, rtol=0.05, atol=0.05)
    finally:
        if old is not None:
            torch_tpu.set_eager_mode(old)


@pytest.mark.parametrize("form,batch,m,k,n", [
    (form, batch, m, k, n) for (form, m, k, n), batch in zip(_cases(12, 2), itertools.cycle((1, 3)))]
    + [("tn", 1, 4, 4, 8)])
@pytest.mark.parametrize("compiled", [False, True])
def test_bf16_tensors_every_form(form, batch, m, k, n, compiled):
    # bf16 operands with an f32 accumulation meet the same XLA:CPU kernels
    # (bmm(a^T, b) at (1, 4, 4) x (1, 4, 8) failed in DotThunk); such a dot
    # is put back in f32 (exactly the same operand values) where needed.
    tr = {"nn": (False, False), "nt": (False, True), "tn": (True, False), "tt": (True, True)}[form]

    def f(a, b):
        return torch.bmm(a.transpose(1, 2) if tr[0] else a, b.transpose(1, 2) if tr[1] else b)

    sa, sb = FORMS[form][1](m, k, n)
    a, b = (torch.randn(batch, *s).bfloat16() for s in (sa, sb))
    g = torch.compile(f, backend="tpu", dynamic=False) if compiled else f
    y = g(a.to("tpu"), b.to("tpu")).cpu()
    torch.testing.assert_close(y, f(a.double(), b.double()).bfloat16(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_keep_their_dots(dtype):
    a, b = torch.randn(5, 17, dtype=dtype), torch.randn(17, 3, dtype=dtype)
    y = (a.to("tpu") @ b.to("tpu")).cpu()
    tol = 1e-9 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(y, (a.double() @ b.double()).to(dtype), rtol=tol, atol=tol)


def _split_on():
    return torch_tpu._C._bf16_split_dots()


def test_target_profile_recognises_xla_cpu_and_reads_the_switch():
    t = torch_tpu._C._target()
    platform = torch_tpu._C._platform()[0]
    assert t["platform"] == platform
    assert t["xla_cpu"] == (platform == "cpu")
    forced = os.environ.get("TORCH_TPU_BF16_DOTS")
    assert t["bf16_split_dots"] == (forced == "1" if forced in ("0", "1") else t["xla_cpu"])
    assert t["bf16_split_dots"] == _split_on()
    assert t["checked_bf16_dots"] == (t["xla_cpu"] or t["bf16_split_dots"])


def test_gemm_form_program_keeps_its_bf16_dots():
    if not _split_on():
        pytest.skip("bf16 split mode off")
    # The optimized program is read: a linear layer's forward and backward
    # (dots in the gemm forms) compile once, with no dot put back in f32.
    before = torch_tpu._C._bf16_split_stats()
    lin = torch.nn.Linear(24, 40).to("tpu")
    x = torch.randn(12, 24, device="tpu", requires_grad=True)
    torch.compile(lambda m, x: m(x).sum().backward(), backend="tpu")(lin, x)
    torch.tpu.synchronize()
    assert torch_tpu._C._bf16_split_stats() == before


@pytest.mark.parametrize("extra", [False, True])
def test_transposed_lhs_dot_alone_goes_to_f32(extra):
    if not _split_on():
        pytest.skip("bf16 split mode off")
    # bmm(a^T, b) at (1, 4, 4) x (1, 4, 8): XLA:CPU's optimized dot takes a
    # transposed lhs, which its bf16 gemm does not; only that dot is compiled
    # again in f32 (a partial fallback, not a whole-program one), and a gemm
    # form dot next to it (a different shape) may stay bf16.
    def f(a, b, c, d):
        y = torch.bmm(a.transpose(1, 2), b)
        return (y, c @ d) if extra else y

    a, b = torch.randn(1, 4, 4), torch.randn(1, 4, 8)
    c, d = torch.randn(9, 33), torch.randn(33, 7 + extra)
    before = torch_tpu._C._bf16_split_stats()
    g = torch.compile(f, backend="tpu", dynamic=False)
    out = g(*(t.to("tpu") for t in (a, b, c, d)))
    out = out if extra else (out,)
    ref = _ref(f, a, b, c, d)
    for o, r in zip(out, ref if extra else (ref,)):
        _close(o.cpu(), r, 33)
    after = torch_tpu._C._bf16_split_stats()
    assert after["fallbacks"] == before["fallbacks"]
    assert after["partial"] == before["partial"] + 1


@pytest.mark.skipif(os.environ.get("TORCH_TPU_BF16_DOTS") in ("0", "1"), reason="the subprocess itself")
def test_all_of_the_above_in_the_other_mode():
    other = "0" if _split_on() else "1"
    env = dict(os.environ, TORCH_TPU_BF16_DOTS=other, TORCH_TPU_DISK_CACHE="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           __file__, os.path.join(os.path.dirname(__file__), "test_precision.py")],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
