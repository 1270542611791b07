"""Fused Eager training loops: every iteration after the optimizer's first
step is one cached program, results match CPU, and inputs released while a
program runs stay valid."""
import copy
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _train(device, steps, misses=None):
    model = _mlp().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g).to(device), torch.randint(0, 4, (64,), generator=g).to(device)
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if misses is not None:
            torch.tpu.synchronize()
            misses.append(torch_tpu.cache_stats()["misses"])
    return loss, list(model.parameters())


def test_adamw_loop_compiles_two_programs_and_matches_cpu():
    torch_tpu.clear_cache()
    misses = []
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        loss, params = _train("tpu", 6, misses)
    # Step 1 creates the optimizer state; from step 2 on every step is the
    # same program. The loop boundary found inside the third step waits for
    # the optimizer's flush, so it does not end a program with other outputs.
    assert misses[1] == misses[0] + 1 and misses[-1] == misses[1], misses
    cpu_loss, cpu_params = _train("cpu", 6)
    assert_same(loss.detach(), cpu_loss.detach(), atol=1e-5, rtol=1e-5)
    for p, q in zip(params, cpu_params):
        assert_same(p.detach(), q.detach(), atol=1e-5, rtol=1e-5)


def test_first_optimizer_step_is_one_program():
    """The first AdamW step creates its state parameter by parameter, a
    pattern with a period; inside optimizer.step() that is no loop: the step
    is one program (it used to be cut into three that never ran again)."""
    torch_tpu.clear_cache()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(20)]).to("tpu")  # 40 tensors
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(4, 8).to("tpu")
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        model(x).square().sum().backward()
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        opt.step()
        torch.tpu.synchronize()
        after = torch_tpu.metrics()
    flushes = {k: after[k] - before.get(k, 0) for k in after
               if k.startswith("flush_") and after[k] != before.get(k, 0)}
    assert flushes == {"flush_optimizer_step": 1}, flushes  # nothing pending at its start
    # Loop detection is back after the step: a repeating chain is cut again.
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        before = torch_tpu.metrics().get("flush_loop_boundary", 0)
        y = x
        for _ in range(40):
            y = torch.tanh(y * 1.5 + 0.25).abs().sqrt() - 0.5
            y = y.exp().log1p().sin().cos()
        y.cpu()
        assert torch_tpu.metrics().get("flush_loop_boundary", 0) > before


def test_repeated_loop_without_request_still_flushes_at_next_op():
    # First iteration ends at a host read; later ones have none: the repeat
    # is flushed when the next op starts, so programs stay one iteration long.
    torch_tpu.reset_metrics()
    x_cpu = torch.arange(8.0)
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        x = x_cpu.to("tpu")
        x = x * 0.5 + 1
        x.sum().item()
        for _ in range(5):
            x = x * 0.5 + 1
            x.sum()
        result = x.cpu()
    for _ in range(6):
        x_cpu = x_cpu * 0.5 + 1
    torch.testing.assert_close(result, x_cpu)
    metrics = torch_tpu.metrics()
    assert metrics.get("flush_loop_boundary", 0) >= 4, metrics
    assert metrics["ops_recorded"] <= 20, metrics


def test_inputs_released_while_program_runs_stay_valid():
    a_cpu, b_cpu = torch.randn(256, 256), torch.randn(256, 256)
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
        c = (a @ b).relu()
        torch_tpu._C._flush("explicit")  # launched, not waited for
        del a, b  # the program may still be reading them
        d = c * 2
    torch.testing.assert_close(d.cpu(), (a_cpu @ b_cpu).relu() * 2, atol=1e-4, rtol=1e-4)


def test_scalar_list_values_reuse_meta_inference():
    # AdamW passes new step sizes (a Scalar[]) every step: their values never
    # change shapes, so the cached meta inference must serve every step.
    params = [torch.randn(5, 3), torch.randn(7)]
    nums = [torch.randn(5, 3), torch.randn(7)]
    dens = [torch.rand(5, 3) + 0.5, torch.rand(7) + 0.5]
    tpu = [[t.to("tpu") for t in ts] for ts in (params, nums, dens)]
    torch._foreach_addcdiv_(*tpu, [0.5, -1.0])  # first call: the meta runs
    torch._foreach_addcdiv_(params, nums, dens, [0.5, -1.0])
    torch_tpu.reset_metrics()
    for step in range(1, 4):
        values = [0.1 * step, -0.3 / step]
        torch._foreach_addcdiv_(*tpu, values)
        torch._foreach_addcdiv_(params, nums, dens, values)
    assert torch_tpu.metrics().get("meta_cache_misses", 0) == 0, torch_tpu.metrics()
    for a, e in zip(tpu[0], params):
        assert_same(a, e)


def test_equal_python_scalars_do_not_change_the_program():
    # Scalars are program inputs: `x * a + b` is one program whether or not
    # a == b (equal values once shared one input and made another program).
    pairs = [(0.5, 0.5), (2.0, 3.0), (3.0, 3.0), (-1.0, -1.0), (0.1, 0.2)]
    x = torch.randn(8)

    def body(xt, a, b):
        z = (xt * a + b).sub(a).mul(b)  # a second use of each value in one program
        torch.testing.assert_close(z.cpu(), (x * a + b - a) * b)

    for mode in ["DEFER_AND_FUSE", "DEFER_NEVER"]:
        with torch_tpu.eager_mode(mode):
            xt = x.to("tpu")
            for _ in range(3):
                body(xt, 0.5, 0.25)  # warm-up: distinct values
            misses = torch_tpu.cache_stats()["misses"]
            for a, b in pairs:
                body(xt, a, b)
            assert torch_tpu.cache_stats()["misses"] == misses, mode


def _inference_model():
    from torch import nn
    torch.manual_seed(0)
    blocks = [m for _ in range(5) for m in (nn.LayerNorm(32), nn.Linear(32, 32), nn.GELU())]
    return nn.Sequential(nn.Embedding(64, 32), *blocks, nn.Linear(32, 64))


def _flushes():
    return sum(v for k, v in torch_tpu.metrics().items() if k.startswith("flush_"))


def test_inference_loop_flushes_once_per_forward_after_another_host_read():
    # The warm-up ends with a host read the loop does not repeat; the loop
    # body (a forward and an argmax kept until the end) repeats anyway, so
    # from the second iteration on each forward is one cached program.
    model = _inference_model().eval()
    xs = [torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(i)) for i in range(12)]
    with torch.no_grad(), torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        m = copy.deepcopy(model).to("tpu")
        m(xs[0].to("tpu")).float().abs().mean().cpu()
        torch_tpu.reset_metrics()
        preds, flushes, misses = [], [], []
        for x in xs:
            preds.append(m(x.to("tpu")).argmax(-1))
            flushes.append(_flushes())
            misses.append(torch_tpu.metrics().get("compiles", 0))
        torch.tpu.synchronize()
    steps = [b - a for a, b in zip(flushes, flushes[1:])]
    assert flushes[1] == 1 and steps[1:] == [1] * (len(steps) - 1), flushes
    assert torch_tpu.metrics().get("flush_size_cap", 0) == 0
    # Two programs: the first two forwards, found repeating, then one forward.
    assert misses[-1] == misses[2] <= 2, misses
    with torch.no_grad():
        for x, p in zip(xs, preds):
            assert torch.equal(p.cpu(), model(x).argmax(-1))


def test_item_inside_the_loop_flushes_at_the_read_and_hits_the_cache():
    model = _inference_model().eval()
    with torch.no_grad(), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        m = model.to("tpu")
        x = torch.randint(0, 64, (4, 16)).to("tpu")
        for step in range(8):
            if step == 3:
                torch_tpu.reset_metrics()
            h = m[:10](x)
            k = int(h.abs().argmax().item()) % 64  # data-dependent read mid-forward
            x = (m[10:](h).argmax(-1) + k) % 64
        metrics = torch_tpu.metrics()  # (the tail left for synchronize is another program)
        torch.tpu.synchronize()
    assert metrics.get("compiles", 0) == 0, metrics
    assert metrics.get("flush_host_read", 0) == 5, metrics


def test_chain_without_reads_is_cut_at_a_repeat_not_the_size_cap():
    import warnings
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("DEFER_AND_FUSE"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.ones(16).to("tpu")
        for _ in range(6000):
            x = x * 0.999 + 0.001
        value = x.cpu()
    torch.testing.assert_close(value, torch.ones(16))
    metrics = torch_tpu.metrics()
    assert metrics.get("flush_size_cap", 0) == 0 and metrics.get("loops_found", 0) >= 1, metrics
    assert not [w for w in caught if "size cap" in str(w.message)]


def test_size_cap_is_warned_once_per_line():
    import warnings
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("DEFER_AND_FUSE"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.ones(4).to("tpu")
        ys = []
        rng = random.Random(0)
        ops = [torch.sin, torch.cos, torch.tanh, torch.neg, torch.abs, torch.exp]
        for _ in range(4200):
            ys.append(rng.choice(ops)(x))  # a random op sequence never repeats
        torch.tpu.synchronize()
    assert torch_tpu.metrics().get("flush_size_cap", 0) >= 1
    cap = [w for w in caught if "size cap" in str(w.message)]
    assert len(cap) == 1, [str(w.message) for w in caught]
