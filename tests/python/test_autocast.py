"""torch.autocast("tpu"): matmul-family ops in the autocast dtype, numerically
sensitive ops in f32, against CPU autocast."""
import pytest
import torch
import torch_tpu

from conftest import assert_same


def needs(*ops):
    """Skips where an op the test passes through is lowered on another branch."""
    missing = [op for op in ops if op not in set(torch_tpu.native_ops())]
    if missing:
        pytest.skip(f"not lowered here: {missing}")


def mlp(device, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    w1, w2 = torch.randn(16, 8, generator=g) / 3, torch.randn(4, 16, generator=g) / 4
    b1, b2 = torch.randn(16, generator=g), torch.randn(4, generator=g)
    x, grad = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
    params = [w1, w2] + ([b1, b2] if bias else [])
    params = [p.to(device).requires_grad_() for p in params]
    return params, x.to(device), grad.to(device)


def forward(params, x):
    w1, w2 = params[:2]
    b1, b2 = (params[2], params[3]) if len(params) > 2 else (None, None)
    h = torch.nn.functional.linear(x, w1, b1)
    a = h * h + h  # a smooth activation made of lowered pointwise ops
    return h, a, torch.nn.functional.linear(a, w2, b2)


def run(device, bias=False, dtype=torch.bfloat16):
    params, x, grad = mlp(device, bias)
    with torch.autocast(device, dtype=dtype):
        outs = forward(params, x)
    if not bias:  # a bias gradient is a sum, lowered on another branch
        outs[-1].backward(grad)
    return list(outs) + [p.grad for p in params if p.grad is not None]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_forward_backward_matches_cpu_autocast(dtype):
    expected, actual = run("cpu", dtype=dtype), run("tpu", dtype=dtype)
    assert [t.dtype for t in actual] == [t.dtype for t in expected]
    assert actual[0].dtype == dtype and actual[-1].dtype == torch.float32
    for a, e in zip(actual, expected):
        assert_same(a, e, atol=3e-2, rtol=2e-2)


def test_biased_linear_runs_addmm_in_bf16():
    expected, actual = run("cpu", bias=True), run("tpu", bias=True)
    assert [t.dtype for t in actual] == [t.dtype for t in expected] == [torch.bfloat16] * 3
    for a, e in zip(actual, expected):
        assert_same(a, e, atol=3e-2, rtol=2e-2)


def test_matmul_family_casts_and_others_keep_dtype():
    a, b = torch.randn(4, 8).to("tpu"), torch.randn(8, 3).to("tpu")
    s = torch.randn(2, 4, 8).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        for y in (a @ b, torch.mm(a, b), torch.addmm(torch.zeros(3).to("tpu"), a, b),
                  torch.bmm(s, s.mT), torch.baddbmm(s @ s.mT, s, s.mT), torch.mv(a, b[:, 0])):
            assert y.dtype == torch.bfloat16
        assert (a * 2).dtype == torch.float32  # an op outside the lists
        assert torch.exp(a.bfloat16()).dtype == torch.float32  # f32 list (as on CUDA)
        assert torch.dot(a[0].bfloat16(), a[1]).dtype == torch.float32  # promote
    assert (a @ b).dtype == torch.float32  # outside the region


def test_losses_and_softmax_stay_f32():
    needs("aten::mse_loss", "aten::_softmax", "aten::sum")
    x, t = torch.randn(4, 8), torch.randn(4, 8)
    for dev in ("cpu", "tpu"):
        with torch.autocast(dev, dtype=torch.bfloat16):
            y = x.to(dev) @ torch.eye(8).to(dev)
            assert y.dtype == torch.bfloat16
            assert torch.nn.functional.mse_loss(y, t.to(dev)).dtype == torch.float32
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = x.to("tpu").bfloat16()
        assert torch.softmax(y, -1).dtype == torch.float32
        assert y.sum().dtype == torch.float32


def test_default_autocast_dtype_is_bf16():
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()


def test_bf16_autocast_training_converges():
    """The quickstart model trained under bf16 autocast on tpu learns."""
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    centers = torch.randn(4, 16) * 2
    labels = torch.randint(0, 4, (512,))
    x = (centers[labels] + torch.randn(512, 16)).to("tpu")
    y = labels.to("tpu")
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        with torch.autocast("tpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0], losses[::10]
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert accuracy > 0.9
