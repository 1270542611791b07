"""A tpu script prints nothing of its own on stderr: no plugin log lines
(absl banner, XLA:CPU's INFO lines) unless TORCH_TPU_LOG_LEVEL asks, and no
recompilation warning for an ordinary training loop's warm-up."""
import os
import subprocess
import sys

SCRIPT = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8).to("tpu"), torch.randint(0, 3, (32,)).to("tpu")
for step in range(6):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 4))
"""


def run(env_extra, script=SCRIPT):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_LOG_LEVEL", "TF_CPP_MIN_LOG_LEVEL")}
    env.update(TORCH_TPU_DISK_CACHE="0", **env_extra)  # a fresh cache: the warm-up compiles
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_training_script_prints_nothing_on_stderr():
    out = run({})
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
    assert float(out.stdout) > 0


def test_log_level_info_shows_the_plugin_lines():
    out = run({"TORCH_TPU_LOG_LEVEL": "INFO"}, "import torch; torch.ones(2, device='tpu').cpu()")
    assert out.returncode == 0, out.stderr
    assert "cpu_device_count" in out.stderr or "absl" in out.stderr, out.stderr


def test_bad_log_level_raises_naming_the_values():
    out = run({"TORCH_TPU_LOG_LEVEL": "loud"}, "import torch; torch.ones(2, device='tpu').cpu()")
    assert out.returncode != 0
    assert "TORCH_TPU_LOG_LEVEL='loud'" in out.stderr and "WARNING" in out.stderr, out.stderr
