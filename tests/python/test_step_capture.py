"""Step capture and replay (torch.tpu.graph, TPUGraph, torch.accelerator.Graph,
make_graphed_callables) against the same steps run eagerly on CPU."""
import copy
import resource

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


def _close(tpu_params, cpu_params, atol=2e-5, rtol=2e-5):
    for a, e in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a.detach().cpu(), e.detach(), atol=atol, rtol=rtol)


def _mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


class _Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        # No qkv bias: the key bias's gradient is zero up to rounding (softmax
        # ignores a per-row shift), and AdamW would amplify that noise.
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        a = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class _SmallGPT(nn.Module):
    """GPT-2's shape: token and position embeddings, pre-LN blocks, final
    LayerNorm, and the output projection tied to the token embedding."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, seq=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*(_Block(dim, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        hidden = self.blocks(self.tok(idx) + self.pos(positions))
        return self.ln(hidden) @ self.tok.weight.t()


def _mlp_batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g))
            for _ in range(n)]


def _gpt_batches(n, vocab=64, seq=8):
    g = torch.Generator().manual_seed(2)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, vocab, (4, seq + 1), generator=g)
        out.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    return out


def _step(model, opt, x, y):
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    return loss


def _captured_vs_cpu(make_model, batches, replays):
    """The first batch warms both up eagerly; the tpu step is then captured
    and replayed on each new batch copied into the static inputs, the CPU
    step run eagerly on the same batch; parameters compared every step."""
    torch.manual_seed(0)
    cpu_model = make_model()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, weight_decay=1e-2)
    tpu_opt = torch.optim.AdamW(tpu_model.parameters(), lr=1e-2, weight_decay=1e-2,
                                capturable=True)
    x0, y0 = batches[0]
    static_x, static_y = x0.to("tpu"), y0.to("tpu")
    _step(cpu_model, cpu_opt, x0, y0)
    _step(tpu_model, tpu_opt, static_x, static_y)
    _close(tpu_model.parameters(), cpu_model.parameters())

    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        static_loss = _step(tpu_model, tpu_opt, static_x, static_y)
    # Capture records the step without applying it (as CUDA graphs do).
    _close(tpu_model.parameters(), cpu_model.parameters())
    for x, y in batches[1:replays + 1]:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        loss = _step(cpu_model, cpu_opt, x, y)
        torch.testing.assert_close(static_loss.cpu(), loss.detach(), atol=2e-5, rtol=2e-5)
        _close(tpu_model.parameters(), cpu_model.parameters())
    _close([s["exp_avg_sq"] for s in tpu_opt.state.values()],
           [s["exp_avg_sq"] for s in cpu_opt.state.values()], atol=1e-6, rtol=1e-4)
    return g


def test_mlp_adamw_replays_match_cpu_eager(highest_precision):
    _captured_vs_cpu(_mlp, _mlp_batches(21), replays=20)


def test_small_gpt_adamw_replays_match_cpu_eager(highest_precision):
    _captured_vs_cpu(_SmallGPT, _gpt_batches(9), replays=8)


def _captured_mlp_step():
    torch.manual_seed(0)
    model = _mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    x, y = _mlp_batches(1)[0]
    static_x, static_y = x.to("tpu"), y.to("tpu")
    _step(model, opt, static_x, static_y)
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        loss = _step(model, opt, static_x, static_y)
    return g, model, static_x, loss


def test_replay_launches_one_program_and_records_no_op():
    g, _, static_x, _ = _captured_mlp_step()
    torch.tpu.synchronize()
    for _ in range(3):
        before = torch_tpu.metrics()
        g.replay()
        after = torch_tpu.metrics()
        assert after["executions"] - before["executions"] == 1
        assert after["ops_recorded"] - before["ops_recorded"] == 0


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_memory_does_not_grow_over_1000_replays():
    g, _, static_x, loss = _captured_mlp_step()
    new_x = torch.randn(32, 16)
    for _ in range(50):
        static_x.copy_(new_x)
        g.replay()
    torch.tpu.synchronize()
    device_before, rss_before = torch.tpu.memory_allocated(), _rss_bytes()
    for _ in range(1000):
        static_x.copy_(new_x)
        g.replay()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == device_before
    # The device is the host here (XLA:CPU): its arrays are in the RSS too.
    assert _rss_bytes() - rss_before < 8 * 2**20, (rss_before, _rss_bytes())
    assert torch.isfinite(loss.cpu())


def test_host_read_during_capture_names_op_and_line_and_eager_continues(highest_precision):
    torch.manual_seed(0)
    cpu_model = _mlp()
    model = copy.deepcopy(cpu_model).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    x, y = _mlp_batches(1)[0]
    tx, ty = x.to("tpu"), y.to("tpu")
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError) as info:
        with torch.tpu.graph(g):
            loss = _step(model, opt, tx, ty)
            loss.item()  # the host read
    message = str(info.value)
    assert "aten::_local_scalar_dense" in message and "item()" in message
    assert "test_step_capture.py:" in message
    assert not torch.tpu.is_current_stream_capturing()
    # The recorded ops ran eagerly: the step happened, as without capture.
    _step(cpu_model, cpu_opt, x, y)
    _close(model.parameters(), cpu_model.parameters())
    # Eager work goes on; the graph holds nothing.
    _step(model, opt, tx, ty)
    _step(cpu_model, cpu_opt, x, y)
    _close(model.parameters(), cpu_model.parameters())
    with pytest.raises(RuntimeError, match="holds no captured step"):
        g.replay()


def test_host_read_error_names_the_users_line():
    x = torch.ones(4, device="tpu")
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError) as info:
        with torch.tpu.graph(g):
            y = x * 2
            y.sum().item()
    import inspect
    line = inspect.currentframe().f_lineno - 2
    assert f"test_step_capture.py:{line}" in str(info.value)
    assert (x * 2).sum().item() == 8.0


def test_data_dependent_shape_during_capture_is_refused():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="tpu")
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="aten::nonzero"):
        with torch.tpu.graph(g):
            torch.nonzero(x)
    torch.testing.assert_close(torch.nonzero(x).cpu(), torch.nonzero(x.cpu()))


def test_synchronize_during_capture_is_refused():
    x = torch.ones(4, device="tpu")
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="synchronize"):
        with torch.tpu.graph(g):
            x.add_(1)
            torch.tpu.synchronize()
    torch.testing.assert_close(x.cpu(), torch.full((4,), 2.0))  # the add ran eagerly


def test_optimizer_with_host_step_count_is_refused():
    model = _mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # capturable=False
    x, y = (t.to("tpu") for t in _mlp_batches(1)[0])
    _step(model, opt, x, y)
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="capturable=True"):
        with torch.tpu.graph(g):
            _step(model, opt, x, y)
    assert not torch.tpu.is_current_stream_capturing()


def test_torch_accelerator_graph_and_reset(tmp_path):
    x = torch.zeros(3, device="tpu")
    g = torch.accelerator.Graph()
    with g:
        x += 1
    torch.testing.assert_close(x.cpu(), torch.zeros(3))  # captured, not run
    g.debug_dump(str(tmp_path / "step.mlir"))
    assert "stablehlo.add" in (tmp_path / "step.mlir").read_text()
    for k in range(1, 4):
        g.replay()
        torch.testing.assert_close(x.cpu(), torch.full((3,), float(k)))
    with pytest.raises(RuntimeError, match="reset"):
        g.capture_begin()
    g.reset()
    with g:
        x.mul_(2)
    g.replay()
    torch.testing.assert_close(x.cpu(), torch.full((3,), 6.0))


def test_static_output_and_new_tensors_made_in_the_step():
    a = torch.arange(4.0, device="tpu")
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        b = a * 2 + torch.ones(4, device="tpu")  # a tensor from host data, made in the step
        a.add_(b)
    for _ in range(2):
        g.replay()
    expected = torch.arange(4.0)
    for _ in range(2):
        b_cpu = expected * 2 + 1
        expected = expected + b_cpu
    torch.testing.assert_close(a.cpu(), expected)
    torch.testing.assert_close(b.cpu(), b_cpu)


def test_captures_cannot_nest():
    g1, g2 = torch.tpu.TPUGraph(), torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="already running"):
        with torch.tpu.graph(g1):
            with torch.tpu.graph(g2):
                pass
    assert not torch.tpu.is_current_stream_capturing()


def test_make_graphed_callables_matches_cpu(highest_precision):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    model = copy.deepcopy(cpu_model).to("tpu")
    sample = torch.randn(5, 8, device="tpu", requires_grad=True)
    graphed = torch.tpu.make_graphed_callables(model, (sample,))
    for k in range(3):
        x = torch.randn(5, 8)
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        out_c, out_t = cpu_model(xc), graphed(xt)
        torch.testing.assert_close(out_t.cpu(), out_c.detach(), atol=1e-5, rtol=1e-5)
        out_c.pow(2).sum().backward()
        out_t.pow(2).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-5)


def test_other_threads_work_is_not_part_of_the_step():
    import threading
    x = torch.zeros(2, device="tpu")
    seen = []

    def other():  # its host read is allowed: it is not the capturing thread
        seen.append((torch.ones(3, device="tpu") * 2).sum().item())

    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        x.add_(1)
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [6.0]
    g.replay()
    g.replay()
    torch.testing.assert_close(x.cpu(), torch.full((2,), 2.0))


def test_capture_in_fused_eager_sees_pending_eager_writes():
    a = torch.arange(4.0, device="tpu")
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        g = torch.tpu.TPUGraph()
        with torch.tpu.graph(g):
            a.mul_(2)
        assert torch.tpu.get_eager_mode() == torch.tpu.EagerMode.DEFER_AND_FUSE
        a.add_(1)  # pending in Fused Eager's recording when the replay reads it
        g.replay()
        a.add_(1)
        g.replay()
    torch.testing.assert_close(a.cpu(), ((torch.arange(4.0) + 1) * 2 + 1) * 2)


def test_misuse_raises_clear_errors():
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="not capturing"):
        g.capture_end()
    x = torch.ones(4, device="tpu")
    with torch.tpu.graph(g):
        x.mul_(3)
    x.untyped_storage().resize_(0)  # the step's input freed under the graph
    with pytest.raises(RuntimeError, match="freed, resized"):
        g.replay()
    y = torch.ones(2, device="tpu")
    assert (y * 2).sum().item() == 4.0
