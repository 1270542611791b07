"""A user's script written against the reference TorchTPU's documented API
only (torch.tpu.*), run by test_reference_script.py in a fresh process per
eager mode. Every result is compared with the same computation on CPU; the
script exits non-zero at the first mismatch, naming it.

    python tests/python/reference_api_script.py DEFER_AND_FUSE
"""
import copy
import sys

import torch
import torch_tpu  # noqa: F401  (the reference's import; autoload does it too)


def same(name, actual, expected, tol=1e-5):
    actual = actual.detach().cpu()
    expected = expected.detach()
    if actual.shape != expected.shape or not torch.allclose(actual, expected, atol=tol, rtol=tol):
        sys.exit(f"MISMATCH {name}: max error {(actual - expected).abs().max().item()}")
    print(f"ok {name}")


def main(mode_name):
    mode = torch.tpu.EagerMode[mode_name]
    torch.tpu.set_eager_mode(mode)
    assert torch.tpu.eager_mode == mode
    torch.tpu.precision(torch.tpu.Precision.HIGHEST)
    torch.manual_seed(0)
    dev = torch.device("tpu")

    # Mode switching inside a block restores the mode.
    with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        x = torch.randn(16, 16)
        same("blocking_block", (x.to(dev) @ x.to(dev)).relu(), (x @ x).relu(), 1e-4)
    assert torch.tpu.eager_mode == mode

    # Streams and events, with elapsed_time.
    s = torch.tpu.Stream()
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with torch.tpu.stream(s):
        start.record()
        y = torch.randn(64, 64)
        r = (y.to(dev) @ y.to(dev)).tanh()
        end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    same("stream_result", r, (y @ y).tanh(), 1e-4)

    # Compiler options.
    with torch.tpu.compiler.custom_compiler_options({"xla_optimization_level": "O1"}):
        z = torch.randn(32, 8)
        same("compiler_options", (z.to(dev).sin() * 3).sum(0), (z.sin() * 3).sum(0), 1e-4)

    # torch.tpu.ops.
    img = torch.randn(2, 3, 8, 8)
    pooled = torch.tpu.ops.max_pool2d(img.to(dev), [2, 2], [2, 2], [0, 0], [1, 1], False)
    same("max_pool2d", pooled, torch.nn.functional.max_pool2d(img, 2))
    lhs, rhs, sizes = torch.randn(9, 4), torch.randn(3, 4, 5), torch.tensor([4, 2, 3])
    expected = torch.cat([lhs[:4] @ rhs[0], lhs[4:6] @ rhs[1], lhs[6:] @ rhs[2]])
    same("ragged_dot", torch.tpu.ops.ragged_dot(lhs.to(dev), rhs.to(dev), sizes.to(dev)),
         expected, 1e-4)

    # torch.tpu.optimizers, stepped by hand and in a SingleTraceTrainer.
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    cpu_model, tpu_model = copy.deepcopy(model), copy.deepcopy(model).to(dev)
    ref = torch.optim.AdamW(cpu_model.parameters(), lr=0.01)
    opt = torch.tpu.optimizers.AdamW(lr=0.01, use_bfloat16_moments=False)
    trainer = torch.tpu.optimizers.SingleTraceTrainer(tpu_model, opt)
    xs, ys = torch.randn(3, 6, 4), torch.randn(3, 6, 2)
    step = trainer.make_compiled_train_step(xs[0].to(dev), ys[0].to(dev))
    for i in range(3):
        ref.zero_grad()
        loss = torch.nn.functional.mse_loss(cpu_model(xs[i]), ys[i])
        loss.backward()
        ref.step()
        same(f"trainer_loss_{i}", step(xs[i].to(dev), ys[i].to(dev)), loss, 1e-4)
    for name, p in cpu_model.named_parameters():
        same(f"trainer_param_{name}", trainer.params[name], p, 1e-4)

    sgd = torch.tpu.optimizers.Sgd(lr=0.1, momentum=0.9)
    w = torch.randn(5, 3)
    group = sgd.init_param_group({"w": w.to(dev)})
    cpu_w = torch.nn.Parameter(w.clone())
    ref = torch.optim.SGD([cpu_w], lr=0.1, momentum=0.9)
    for _ in range(3):
        g = torch.randn(5, 3)
        cpu_w.grad = g
        ref.step()
        group = sgd(group, {"w": g.to(dev)})
    same("sgd", group.params["w"], cpu_w)
    torch.tpu.synchronize()
    print("done")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "DEFER_NEVER")
