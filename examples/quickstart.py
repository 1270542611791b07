"""Quickstart: train a small MLP classifier on the `tpu` device, then infer.

Runs anywhere: without a TPU the `tpu` device is served by XLA:CPU through
PJRT, with TPU numerics. The only change from CPU code is the device string.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu  # noqa: F401  (also loaded automatically by `import torch`)


def make_data(n, seed, classes=4, dim=16):
    """Overlapping Gaussian clusters (fixed centers) in `dim` dimensions:
    learnable, but not perfectly separable."""
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 0.6
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    points = centers[labels] + torch.randn(n, dim, generator=g)
    return points, labels


def profile_first_steps(path, device):
    """A started torch.profiler over steps 1-10 (the first compile, the later
    ones hit the cache) that writes a Chrome trace to `path` and prints the
    busiest rows. On tpu it records the device too: launches, compiles,
    copies and each program's device span."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "tpu":
        activities.append(torch.profiler.ProfilerActivity.PrivateUse1)

    def done(prof):
        prof.export_chrome_trace(path)
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=15))
        print(f"wrote {path}: open it in https://ui.perfetto.dev or chrome://tracing")

    prof = torch.profiler.profile(
        activities=activities, on_trace_ready=done,
        schedule=torch.profiler.schedule(wait=0, warmup=0, active=10, repeat=1))
    prof.start()
    return prof


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="tpu", help="tpu (default) or cpu, to compare")
    parser.add_argument("--autocast", action="store_true", help="train in bf16 autocast")
    parser.add_argument("--mode", default=None,
                        help="eager mode: DEFER_NEVER (default), DEFER_AND_FUSE, ...")
    parser.add_argument("--profile", metavar="TRACE_JSON",
                        help="profile steps 1-10 with torch.profiler, write a Chrome trace")
    args = parser.parse_args()
    if args.mode:
        torch_tpu.set_eager_mode(args.mode)

    device = torch.device(args.device)
    torch.manual_seed(0)
    x_train, y_train = make_data(4096, seed=0)
    x_test, y_test = make_data(1024, seed=1)
    x_train, y_train = x_train.to(device), y_train.to(device)

    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)

    if device.type == "tpu":
        print(f"training on {device} ({torch.tpu.get_device_name()}), "
              f"eager mode {torch_tpu.get_eager_mode().name}")
    prof = profile_first_steps(args.profile, device) if args.profile else None
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, x_train.shape[0], (args.batch,), device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast):
            logits = model(x_train[idx])
            loss = F.cross_entropy(logits, y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    if device.type == "tpu":
        torch.tpu.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps / elapsed:.1f} steps/s")

    model.eval()
    with torch.no_grad():
        pred = model(x_test.to(device)).argmax(dim=1).cpu()
    accuracy = (pred == y_test).float().mean().item()
    print(f"test accuracy {accuracy:.3f}")
    with torch.no_grad():
        sample = model(x_test[:4].to(device)).softmax(dim=1)
    print("inference on 4 samples (class probabilities):")
    print(sample.cpu())


if __name__ == "__main__":
    main()
