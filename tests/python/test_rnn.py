"""Recurrent layers on tpu against CPU: nn.LSTM, nn.GRU, nn.RNN and their cells.

On an accelerator PyTorch runs an LSTM or GRU step as two matmuls and a fused
cell op (`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell`, and their backward
ops with the cell's workspace), which tpu lowers (lowering/nn_rnn.cc); before,
every nn.LSTM and nn.GRU on tpu raised NotImplementedError. Outputs, final
states and every gradient equal CPU's in each eager mode; matmuls run at
HIGHEST precision so the comparisons are tight.
"""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_tpu

pytestmark = pytest.mark.usefixtures("highest_precision")

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]
TOL = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(params=MODES)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def pair(make):
    torch.manual_seed(0)
    module = make()
    return module, copy.deepcopy(module).to("tpu")


def flat_outputs(out):
    """A module's outputs (output, states) as one list of tensors."""
    if isinstance(out, torch.Tensor):
        return [out]
    result = []
    for item in out:
        result += flat_outputs(item) if isinstance(item, (tuple, list)) else [item]
    return result


def run(module, x, hidden=None):
    """Forward, then backward of a loss reading every output; the outputs and
    the gradients of the input, the initial state and the parameters."""
    x = x.detach().clone().requires_grad_()
    args = [x]
    if hidden is not None:
        hidden = tuple(h.detach().clone().requires_grad_() for h in hidden)
        args.append(hidden if len(hidden) > 1 else hidden[0])
    outs = flat_outputs(module(*args))
    weights = [torch.linspace(-1, 1, o.numel(), device=o.device).view(o.shape) for o in outs]
    sum(((o * w).sum() for o, w in zip(outs, weights))).backward()
    grads = [x.grad] + [h.grad for h in hidden or ()] + [p.grad for p in module.parameters()]
    return outs, grads


def assert_same_run(cpu_module, tpu_module, x, hidden=None, **tol):
    want_out, want_grad = run(cpu_module, x, hidden)
    tpu_hidden = None if hidden is None else tuple(h.to("tpu") for h in hidden)
    got_out, got_grad = run(tpu_module, x.to("tpu"), tpu_hidden)
    assert len(got_out) == len(want_out)
    for got, want in zip(got_out + got_grad, want_out + want_grad):
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), want, **(tol or TOL))


LAYERS = {
    "lstm": lambda: nn.LSTM(6, 10),
    "lstm_2layer_bidirectional_batch_first": lambda: nn.LSTM(6, 10, num_layers=2,
                                                             bidirectional=True, batch_first=True),
    "lstm_projection": lambda: nn.LSTM(6, 10, proj_size=4),
    "lstm_projection_without_bias": lambda: nn.LSTM(6, 10, proj_size=4, bias=False),
    "lstm_without_bias": lambda: nn.LSTM(6, 10, bias=False),
    "gru": lambda: nn.GRU(6, 10),
    "gru_2layer_bidirectional_batch_first": lambda: nn.GRU(6, 10, num_layers=2,
                                                           bidirectional=True, batch_first=True),
    "gru_without_bias": lambda: nn.GRU(6, 10, bias=False),
    "rnn_tanh_2layer": lambda: nn.RNN(6, 10, num_layers=2),
    "rnn_relu_bidirectional": lambda: nn.RNN(6, 10, nonlinearity="relu", bidirectional=True),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_forward_and_backward_equal_cpu(name, mode):
    cpu, tpu = pair(LAYERS[name])
    torch.manual_seed(1)
    x = torch.randn(3, 5, 6)  # (L, N, H) or (N, L, H)
    assert_same_run(cpu, tpu, x)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_given_initial_state_and_unbatched_input(kind, mode):
    cpu, tpu = pair(lambda: (nn.LSTM if kind == "lstm" else nn.GRU)(6, 10, num_layers=2))
    torch.manual_seed(1)
    states = 2 if kind == "lstm" else 1
    hidden = tuple(torch.randn(2, 3, 10) for _ in range(states))
    assert_same_run(cpu, tpu, torch.randn(5, 3, 6), hidden)
    unbatched = tuple(h[:, 0] for h in hidden)  # (layers, H) with a (L, H) input
    assert_same_run(cpu, tpu, torch.randn(5, 6), unbatched)


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells_equal_cpu(cell, mode):
    cpu, tpu = pair(lambda: getattr(nn, cell)(6, 10))
    torch.manual_seed(1)
    x = torch.randn(4, 6)
    assert_same_run(cpu, tpu, x)
    states = 2 if cell == "LSTMCell" else 1
    assert_same_run(cpu, tpu, x, tuple(torch.randn(4, 10) for _ in range(states)))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_packed_sequences_equal_cpu(kind, mode):
    cpu, tpu = pair(lambda: (nn.LSTM if kind == "lstm" else nn.GRU)(
        6, 10, num_layers=2, bidirectional=True, batch_first=True))
    torch.manual_seed(1)
    x, lengths = torch.randn(4, 7, 6), torch.tensor([7, 5, 3, 2])

    def packed(module, inp):
        inp = inp.detach().clone().requires_grad_()
        out, state = module(pack_padded_sequence(inp, lengths, batch_first=True))
        y, _ = pad_packed_sequence(out, batch_first=True)
        h = state[0] if kind == "lstm" else state
        (y.sum() + h.pow(2).sum()).backward()
        return [y, h, inp.grad] + [p.grad for p in module.parameters()]

    for got, want in zip(packed(tpu, x.to("tpu")), packed(cpu, x)):
        torch.testing.assert_close(got.cpu(), want, **TOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_half_precision_computes_the_cell_in_float32(kind, dtype):
    """16-bit gates are computed in f32 and rounded once, as CUDA's fused
    cells do (CPU's unfused cell rounds after each op: within a few ulp)."""
    cpu, tpu = pair(lambda: (nn.LSTM if kind == "lstm" else nn.GRU)(6, 10).to(dtype))
    torch.manual_seed(1)
    x = torch.randn(5, 3, 6).to(dtype)
    want, got = cpu(x)[0], tpu(x.to("tpu"))[0]
    assert got.dtype == dtype
    # Against CPU's f32 run: the fused cell is at least as close as CPU's own.
    exact = copy.deepcopy(cpu).float()(x.float())[0]
    own_error = (want.float() - exact).abs().max().item()
    assert (got.cpu().float() - exact).abs().max().item() <= max(own_error, 1e-3)


def test_double_backward_through_a_cell():
    """create_graph=True takes PyTorch's differentiable cell backward."""
    cpu, tpu = pair(lambda: nn.LSTMCell(4, 5))
    torch.manual_seed(1)
    x = torch.randn(3, 4)

    def grad_of_grad(module, inp):
        inp = inp.detach().clone().requires_grad_()
        h, c = module(inp)
        (g,) = torch.autograd.grad(h.sum() + c.sum(), inp, create_graph=True)
        g.pow(2).sum().backward()
        return [g, module.weight_ih.grad, module.weight_hh.grad]

    for got, want in zip(grad_of_grad(tpu, x.to("tpu")), grad_of_grad(cpu, x)):
        torch.testing.assert_close(got.cpu(), want, **TOL)


def test_training_loop_of_a_recurrent_model(mode):
    """A small sequence classifier (LSTM, then GRU, then a linear head) trains
    on tpu as on CPU: losses and parameters after a few SGD steps."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(6, 10, batch_first=True)
            self.gru = nn.GRU(10, 8, batch_first=True)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            y, _ = self.lstm(x)
            y, h = self.gru(y)
            return self.head(y[:, -1] + h[0])

    cpu, tpu = pair(Model)
    torch.manual_seed(1)
    batches = [(torch.randn(4, 7, 6), torch.randint(0, 3, (4,))) for _ in range(3)]
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.losses = []
        for x, y in batches:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            model.losses.append(loss.item())
    torch.testing.assert_close(tpu.losses, cpu.losses, **TOL)
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.cpu(), q, **TOL)


def test_mismatched_cell_arguments_raise_a_clear_error():
    """A bad call names the argument and the size it needs; the process goes on."""
    gates = torch.randn(3, 30).to("tpu")
    with pytest.raises(RuntimeError, match=r"hidden_gates must be \[3, 30\], got \[3, 29\]"):
        torch.ops.aten._thnn_fused_gru_cell(gates, torch.randn(3, 29).to("tpu"),
                                            torch.randn(3, 10).to("tpu"))
    with pytest.raises(RuntimeError, match="a bias must have 40 elements"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(3, 40).to("tpu"),
                                             torch.randn(3, 40).to("tpu"),
                                             torch.randn(3, 10).to("tpu"),
                                             torch.randn(39).to("tpu"))
    assert (torch.ones(2).to("tpu") + 1).cpu().tolist() == [2.0, 2.0]
