"""Activations, losses and normalization on tpu against CPU, forward and backward."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, check


def lowered(op):
    return op in torch_tpu._C._lowered_ops()


def run(fn, inputs, wrt, grad_out, device):
    """fn's output and its gradients with respect to inputs[i] for i in wrt, on `device`."""
    xs = [x.detach().to(device).requires_grad_(i in wrt) for i, x in enumerate(inputs)]
    y = fn(*xs)
    return (y, *torch.autograd.grad(y, [xs[i] for i in wrt], grad_out.to(device)))


def check_grad(fn, *inputs, wrt=None, atol=None, rtol=None):
    """Output and gradients of fn on tpu equal CPU's for one random grad_output;
    gradients are taken for inputs[i], i in wrt (default: the floating ones)."""
    if wrt is None:
        wrt = [i for i, x in enumerate(inputs) if x.is_floating_point()]
    torch.manual_seed(0)
    out = fn(*inputs)
    grad_out = torch.randn(out.shape, dtype=out.dtype)
    assert_same(run(fn, inputs, wrt, grad_out, "tpu"), run(fn, inputs, wrt, grad_out, "cpu"),
                atol=atol, rtol=rtol)


def sample(*shape, scale=4.0, dtype=torch.float32):
    """Random values plus the corners activations branch on."""
    torch.manual_seed(len(shape))
    x = torch.randn(*shape) * scale
    edges = torch.tensor([0.0, 3.0, -3.0, 1.0, -1.0, 0.5, -0.5, 25.0])
    x.view(-1)[: edges.numel()] = edges
    return x.to(dtype)


# ---- activations -----------------------------------------------------------------

ACTIVATIONS = {
    "relu": F.relu,
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, 1.5),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 1.0),
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "hardshrink": lambda x: F.hardshrink(x, 0.5),
    "softshrink": lambda x: F.softshrink(x, 0.5),
    "glu": lambda x: F.glu(x, dim=0),
}


# Their backward formulas are composite and build constants with fill_.
NEEDS_FILL = {"silu", "mish"}


def skip_without_fill(name):
    if name in NEEDS_FILL and not lowered("aten::fill.Scalar"):
        pytest.skip("backward needs fill_")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_forward_backward(name):
    skip_without_fill(name)
    check_grad(ACTIVATIONS[name], sample(6, 5))


@pytest.mark.parametrize("name", sorted(NEEDS_FILL))
def test_activation_forward_only(name):
    check(ACTIVATIONS[name], sample(6, 5))


@pytest.mark.parametrize("name", ["relu", "gelu", "hardswish", "softplus", "elu"])
def test_activation_nan_propagates(name):
    x = torch.tensor([float("nan"), -1.0, 1.0])
    check(ACTIVATIONS[name], x)


@pytest.mark.parametrize("name", ["gelu", "silu", "gelu_tanh", "softplus"])
def test_activation_bfloat16(name):
    skip_without_fill(name)
    check_grad(ACTIVATIONS[name], sample(6, 5, dtype=torch.bfloat16))


def test_relu_integer():
    check(F.relu, torch.tensor([-3, 0, 2, 7], dtype=torch.int32))


def test_activation_inplace():
    def fn(x):
        x = x.clone()
        F.relu(x, inplace=True)
        F.hardtanh(x, -0.5, 2.0, inplace=True)
        return F.leaky_relu_(x, 0.1)
    check(fn, sample(4, 4))


def test_elu_backward_from_result():
    # F.elu_ saves its result and differentiates through is_result=True.
    check_grad(lambda x: F.elu_(x * 1.0, 1.3), sample(6, 5))


def test_prelu_kernel_backward_direct():
    x, w = sample(2, 3, 4), torch.tensor([0.1, -0.5, 2.0]).view(1, 3, 1)
    g = torch.randn(2, 3, 4)
    check(lambda g, x, w: torch.ops.aten._prelu_kernel_backward(g, x, w), g, x, w)
    check(lambda x, w: torch.ops.aten._prelu_kernel(x, w), x, w)


@pytest.mark.skipif(not lowered("aten::sum.dim_IntList"), reason="needs sum.dim_IntList")
def test_prelu_module():
    m = torch.nn.PReLU(3)
    check_grad(lambda x, w: F.prelu(x, w), sample(2, 3, 4), m.weight.detach() * 2)


# ---- losses ------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", ["mse", "smooth_l1", "huber", "soft_margin"])
def test_pointwise_loss(name, reduction):
    fns = {
        "mse": F.mse_loss,
        "smooth_l1": lambda x, t, **k: F.smooth_l1_loss(x, t, beta=0.7, **k),
        "huber": lambda x, t, **k: F.huber_loss(x, t, delta=0.6, **k),
        "soft_margin": F.soft_margin_loss,
    }
    x = torch.randn(4, 5)
    t = torch.randn(4, 5) if name != "soft_margin" else torch.randn(4, 5).sign()
    check_grad(lambda x, t: fns[name](x, t, reduction=reduction), x, t,
               wrt=[0] if name == "soft_margin" else [0, 1])


def test_smooth_l1_loss_beta_zero_is_l1():
    # F.smooth_l1_loss routes beta=0 to l1_loss; the ATen op handles it too.
    x, t, g = torch.randn(4, 5), torch.randn(4, 5), torch.randn(4, 5)
    A = torch.ops.aten
    check(lambda x, t: A.smooth_l1_loss(x, t, 0, 0.0), x, t)
    check(lambda g, x, t: A.smooth_l1_loss_backward(g, x, t, 0, 0.0), g, x, t)
    check(lambda x, t: A.huber_loss(x, t, 2, 1.0), x, t)


def test_loss_broadcasts_target():
    x, t = torch.randn(3, 4), torch.randn(4)
    with pytest.warns(UserWarning):
        check_grad(lambda x, t: F.mse_loss(x, t), x, t, wrt=[0])


def test_mse_loss_bfloat16():
    x, t = torch.randn(4, 8).bfloat16(), torch.randn(4, 8).bfloat16()
    check_grad(F.mse_loss, x, t, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(reduction):
    x = torch.rand(3, 4) * 0.98 + 0.01
    x[0, 0], x[0, 1] = 0.0, 1.0  # log clamps at -100
    t, w = torch.rand(3, 4), torch.rand(4)
    check_grad(lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction), x, t, wrt=[0])
    check_grad(lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=reduction), x, t, w,
               wrt=[0])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_with_logits(reduction):
    x, t = torch.randn(3, 4) * 5, torch.rand(3, 4)
    w, pw = torch.rand(4), torch.rand(4) * 3
    # Its backward is PyTorch's composite formula over elementwise ops.
    check_grad(lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction), x, t,
               wrt=[0])
    check_grad(lambda x, t, w, pw: F.binary_cross_entropy_with_logits(
        x, t, weight=w, pos_weight=pw, reduction=reduction), x, t, w, pw, wrt=[0])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    x = torch.randn(5, 4).log_softmax(1)
    target = torch.tensor([0, 3, -100, 1, 3])
    if weighted:
        check_grad(lambda x, t, w: F.nll_loss(x, t, weight=w, reduction=reduction),
                   x, target, torch.rand(4), wrt=[0])
    else:
        check_grad(lambda x, t: F.nll_loss(x, t, reduction=reduction), x, target)


def test_nll_loss_single_sample_and_ignore_index():
    x = torch.randn(4).log_softmax(0)
    check_grad(lambda x, t: F.nll_loss(x, t), x, torch.tensor(2))
    check_grad(lambda x, t: F.nll_loss(x.view(1, 4), t, ignore_index=2, reduction="sum"),
               x, torch.tensor([2]))


def test_nll_loss_all_ignored_mean_is_nan():
    x = torch.randn(2, 3)
    check(lambda x, t: torch.ops.aten.nll_loss_forward(x, t, None, 1, -100),
          x, torch.tensor([-100, -100]))


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_nll_loss2d(reduction):
    x = torch.randn(2, 3, 4, 5).log_softmax(1)
    target = torch.randint(0, 3, (2, 4, 5))
    target[0, 0, :2] = 1  # ignored below
    check_grad(lambda x, t, w: F.nll_loss(x, t, weight=w, ignore_index=1, reduction=reduction),
               x, target, torch.rand(3), wrt=[0])


@pytest.mark.skipif(not lowered("aten::_log_softmax"), reason="needs _log_softmax")
def test_cross_entropy():
    x, target = torch.randn(5, 4), torch.tensor([0, 3, 2, 1, 3])
    check_grad(lambda x, t: F.cross_entropy(x, t), x, target)


# ---- normalization -----------------------------------------------------------------


def test_layer_norm_with_affine():
    x, w, b = torch.randn(3, 4, 6), torch.randn(6), torch.randn(6)
    check_grad(lambda x, w, b: F.layer_norm(x, (6,), w, b, eps=1e-3), x, w, b,
               atol=1e-5, rtol=1e-4)


def test_layer_norm_without_affine_multi_dim():
    check_grad(lambda x: F.layer_norm(x, (4, 6)), torch.randn(3, 4, 6) * 3 + 1,
               atol=1e-5, rtol=1e-4)


def test_native_layer_norm_stats():
    x, w = torch.randn(3, 6), torch.randn(6)
    check(lambda x, w: torch.ops.aten.native_layer_norm(x, [6], w, None, 1e-5), x, w,
          atol=1e-5, rtol=1e-5)


def test_layer_norm_bfloat16():
    x = torch.randn(4, 16).bfloat16()
    w, b = torch.randn(16).bfloat16(), torch.randn(16).bfloat16()
    check_grad(lambda x, w, b: F.layer_norm(x, (16,), w, b), x, w, b, atol=2e-2, rtol=2e-2)
    # As on CPU (not CUDA or PyTorch's meta function), the saved statistics
    # of a bf16 input without f32 parameters are bf16 (csrc/aten/cpu_meta_rules.cc).
    _, mean, rstd = torch.ops.aten.native_layer_norm(x.to("tpu"), [16], None, None, 1e-5)
    assert mean.dtype == rstd.dtype == torch.bfloat16


def test_layer_norm_module():
    torch.manual_seed(0)
    cpu = torch.nn.LayerNorm(8)
    with torch.no_grad():
        cpu.weight.uniform_(0.5, 1.5)
        cpu.bias.uniform_(-1, 1)
    tpu = torch.nn.LayerNorm(8).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    x, g = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    cpu(x).backward(g)
    tpu(x.to("tpu")).backward(g.to("tpu"))
    assert_same(tpu.weight.grad, cpu.weight.grad, atol=1e-5, rtol=1e-4)
    assert_same(tpu.bias.grad, cpu.bias.grad)


def batch_norm_modules(module_type, channels):
    torch.manual_seed(0)
    cpu = module_type(channels, momentum=0.3)
    with torch.no_grad():
        cpu.weight.uniform_(0.5, 1.5)
        cpu.bias.uniform_(-1, 1)
        cpu.running_mean.uniform_(-1, 1)
        cpu.running_var.uniform_(0.5, 2)
    tpu = module_type(channels, momentum=0.3).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


def assert_same_module(tpu, cpu):
    for (name, a), (_, e) in zip(tpu.state_dict().items(), cpu.state_dict().items()):
        assert_same(a, e, atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("module_type,shape", [(torch.nn.BatchNorm2d, (4, 3, 5, 5)),
                                               (torch.nn.BatchNorm1d, (6, 3))])
def test_batch_norm_train_updates_running_stats(module_type, shape):
    cpu, tpu = batch_norm_modules(module_type, 3)
    x, g = torch.randn(*shape) * 2 + 1, torch.randn(*shape)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    yc, yt = cpu(xc), tpu(xt)
    assert_same(yt, yc, atol=1e-5, rtol=1e-4)
    yc.backward(g)
    yt.backward(g.to("tpu"))
    assert_same(xt.grad, xc.grad, atol=1e-5, rtol=1e-4)
    assert_same(tpu.weight.grad, cpu.weight.grad, atol=1e-5, rtol=1e-4)
    assert_same(tpu.bias.grad, cpu.bias.grad, atol=1e-5, rtol=1e-4)
    assert_same_module(tpu, cpu)  # running_mean, running_var, num_batches_tracked


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("module_type,shape", [(torch.nn.BatchNorm1d, (6, 3)),
                                               (torch.nn.InstanceNorm2d, (2, 3, 4, 4))])
def test_norm_over_an_input_without_grad_gives_parameter_grads(module_type, shape, training):
    """A model's first normalization over its data (no input gradient): the
    backward asks for the parameters' gradients only (output_mask [F, T, T]);
    it failed with "returned 2 values, expected 3" before."""
    torch.manual_seed(0)
    cpu = module_type(3, affine=True, track_running_stats=True).train(training)
    tpu = copy.deepcopy(cpu).to("tpu")
    x, g = torch.randn(*shape), torch.randn(*shape)
    cpu(x).backward(g)
    tpu(x.to("tpu")).backward(g.to("tpu"))
    assert_same(tpu.weight.grad, cpu.weight.grad, atol=1e-5, rtol=1e-4)
    assert_same(tpu.bias.grad, cpu.bias.grad, atol=1e-5, rtol=1e-4)
    assert_same_module(tpu, cpu)


def test_batch_norm_eval_uses_running_stats():
    cpu, tpu = batch_norm_modules(torch.nn.BatchNorm2d, 3)
    cpu.eval()
    tpu.eval()
    x = torch.randn(2, 3, 4, 4)
    check_grad(lambda x: tpu(x) if x.device.type == "tpu" else cpu(x), x,
               atol=1e-5, rtol=1e-4)
    assert_same_module(tpu, cpu)


def test_batch_norm_functional_without_stats_or_affine():
    check_grad(lambda x: F.batch_norm(x, None, None, training=True), torch.randn(4, 3, 5),
               atol=1e-5, rtol=1e-4)


def test_batch_norm_bfloat16_input_f32_stats():
    x = torch.randn(4, 3, 5).bfloat16()
    rm, rv = torch.zeros(3), torch.ones(3)
    out = check(lambda x, rm, rv: torch.ops.aten.native_batch_norm(
        x, None, None, rm, rv, True, 0.1, 1e-5), x, rm, rv, atol=2e-2, rtol=2e-2)
    assert out[1].dtype == torch.float32


def test_native_batch_norm_legit_variants():
    x, w, b = torch.randn(4, 3, 2), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    A = torch.ops.aten
    tol = dict(atol=1e-5, rtol=1e-4)
    # CPU returns empty saved stats here while the meta function (and tpu) give
    # per-channel ones: compare the output only.
    check(lambda *a: A._native_batch_norm_legit_no_training(*a, 0.1, 1e-5)[0], x, w, b, rm, rv,
          **tol)
    check(lambda *a: A._native_batch_norm_legit_functional(*a, True, 0.1, 1e-5), x, w, b, rm, rv,
          **tol)
    check(lambda *a: A._native_batch_norm_legit(*a, True, 0.1, 1e-5), x, w, b, **tol)  # no_stats

    def legit(x, w, b, rm, rv):  # mutates the running stats in place
        rm, rv = rm.clone(), rv.clone()
        return (*A._native_batch_norm_legit(x, w, b, rm, rv, True, 0.2, 1e-5), rm, rv)
    check(legit, x, w, b, rm, rv, **tol)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(affine):
    x = torch.randn(2, 6, 3, 4) * 2 + 1
    w, b = torch.randn(6), torch.randn(6)
    if affine:
        check_grad(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b, atol=1e-5, rtol=1e-4)
    else:
        check_grad(lambda x: F.group_norm(x, 2), x, atol=1e-5, rtol=1e-4)


def test_group_norm_module_and_stats():
    torch.manual_seed(0)
    cpu = torch.nn.GroupNorm(2, 4)
    tpu = torch.nn.GroupNorm(2, 4).to("tpu")
    x, g = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    cpu(x).backward(g)
    tpu(x.to("tpu")).backward(g.to("tpu"))
    assert_same(tpu.weight.grad, cpu.weight.grad, atol=1e-5, rtol=1e-4)
    check(lambda x: torch.ops.aten.native_group_norm(x, None, None, 3, 4, 5, 2, 1e-5), x,
          atol=1e-5, rtol=1e-4)


def test_gelu_module_backward():
    check_grad(torch.nn.GELU(approximate="tanh"), sample(3, 7))
