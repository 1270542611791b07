"""TorchTitan (PyPI `torchtitan`) trains its llama3 debug model on tpu through
its own trainer (`torchtitan.train.main`, launched by torchrun) with FSDP over
2 processes, and the losses match the same run on CPU with Gloo.

Both runs start from one seed checkpoint (TorchTitan's
`--checkpoint.create-seed-checkpoint`, made on CPU): tpu draws its own random
numbers, so an initialization on each device would differ. The model is the
debug model with `varlen` attention (flex attention refuses tpu tensors, and
refuses backward on CPU), cut to 2 layers, trained in f32 for 10 steps on a
local tokenizer and dataset (tests/python/torchtitan_assets.py). See
docs/torchtitan.md.
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STEPS = 10
LOSS = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.slow


def _titan_args(tokenizer, data):
    return ["--module", "torchtitan_configs", "--config", "llama3_debugmodel_varlen_attn_2layers",
            "--hf-assets-path", tokenizer, "--dataloader.dataset-path", data,
            "--training.seq-len", "32", "--training.local-batch-size", "2",
            "--training.steps", str(STEPS), "--training.mixed-precision-param", "float32",
            "--parallelism.spmd-backend", "partial_dtensor", "--debug.seed", "0",
            "--checkpoint.enable"]


def _run(tmp, name, nproc, args, cpu):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_DATASETS_CACHE=os.path.join(tmp, "hf_cache"),
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, HERE, os.environ.get("PYTHONPATH"))
                                          if p))
    if cpu:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the reference: no torch_tpu at all
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--standalone", os.path.join(HERE, "torchtitan_launch.py")]
    cmd += (["--cpu-reference"] if cpu else []) + args
    cmd += ["--dump-folder", os.path.join(tmp, name), "activation-checkpoint:none"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp)


def _finish(proc, what, timeout=600):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{what} timed out:\n{ANSI.sub('', out)[-6000:]}")
    out = ANSI.sub("", out)
    assert proc.returncode == 0, f"{what} failed:\n{out[-6000:]}"
    return out


def _losses(log):
    """Per-step loss as TorchTitan logs it (the global mean; each rank logs it)."""
    losses = {}
    for step, loss in LOSS.findall(log):
        losses.setdefault(int(step), float(loss))
    return [losses[s] for s in sorted(losses)]


def test_torchtitan_llama3_fsdp_on_tpu_matches_cpu(tmp_path):
    pytest.importorskip("torchtitan")
    from torchtitan_assets import write_assets

    tmp = str(tmp_path)
    tokenizer, data, _ = write_assets(os.path.join(tmp, "assets"))
    args = _titan_args(tokenizer, data)
    seed = _finish(_run(tmp, "seed", 1, args + ["--checkpoint.create-seed-checkpoint",
                                                  "--parallelism.data-parallel-shard-degree", "1"],
                        cpu=True), "seed checkpoint")
    assert "Created seed checkpoint" in seed
    runs = args + ["--checkpoint.initial-load-path", os.path.join(tmp, "seed", "checkpoint", "step-0"),
                   "--checkpoint.load-only", "--parallelism.data-parallel-shard-degree", "2"]
    # Both runs at once: each waits on its collectives part of the time.
    tpu, cpu = _run(tmp, "tpu", 2, runs, cpu=False), _run(tmp, "cpu", 2, runs, cpu=True)
    tpu_log, cpu_log = _finish(tpu, "tpu run"), _finish(cpu, "CPU reference run")
    # TorchTitan names the device type it picked (torch_tpu's, for tpu).
    assert "TPU capacity" in tpu_log and "CPU capacity" in cpu_log
    tpu_losses, cpu_losses = _losses(tpu_log), _losses(cpu_log)
    print("tpu losses:", tpu_losses, "\ncpu losses:", cpu_losses)
    assert len(tpu_losses) == STEPS and len(cpu_losses) == STEPS, (tpu_losses, cpu_losses)
    assert tpu_losses[-1] < tpu_losses[0] - 1.0, tpu_losses
    # f32 parameters and "highest" (≈ f32) matmuls on both; the attention's
    # q/k/v are cast to bf16 by TorchTitan on both, so the runs differ by
    # f32 rounding (and the rare bf16 rounding it flips): measured ≤ 2e-5.
    for step, (t, c) in enumerate(zip(tpu_losses, cpu_losses), 1):
        assert abs(t - c) <= 1e-3 * abs(c), f"step {step}: tpu {t} vs cpu {c}"
