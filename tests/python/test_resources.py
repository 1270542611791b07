"""Running out of resources: an out-of-memory is torch.OutOfMemoryError naming
the op (also when it surfaces later, at a host read or synchronize) and the
process keeps working; a truncated plugin file is an error naming the file,
not SIGBUS; a damaged or misplaced disk compile cache entry is warned about
once, naming the file, and repaired.

Every case runs in a child process. The out-of-memory children cap their
address space (RLIMIT_AS) before allocating, so the allocations they ask
for (64 GiB and more) are refused at once whatever the machine's
overcommit policy."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Caps the child's address space a few GiB above what the runtime has mapped.
CAP = """
import resource, torch, torch_tpu
torch.tpu.synchronize()
(torch.ones(2, device="tpu") * 2).cpu()
_vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (_vm + (6 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
"""

# The process still computes after the error.
STILL_WORKS = """
assert (torch.arange(4.0, device="tpu") * 2).sum().item() == 12.0
torch.tpu.synchronize()
print("STILL WORKS")
"""


def _run(tmp_path, body, name="child.py", **env):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    full = dict(os.environ, PYTHONPATH=REPO, TORCH_TPU_WARMUP="0")
    full.update(env)
    done = subprocess.run([sys.executable, str(script)], env=full, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    return done, script


def _line_of(script, text):
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def _oom_child(tmp_path, body, **env):
    done, script = _run(tmp_path, CAP + textwrap.dedent(body) + STILL_WORKS, **env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "STILL WORKS" in done.stdout
    return done.stdout, script


def test_out_of_memory_at_launch_is_torch_oom_naming_op_and_line(tmp_path):
    out, script = _oom_child(tmp_path, """
        try:
            x = torch.zeros(2**40, device="tpu")  # 4 TiB
            x.cpu()
            print("NO ERROR")
        except torch.OutOfMemoryError as e:
            assert isinstance(e, RuntimeError)
            print("OOM:", e)
    """)
    assert "OOM: tpu out of memory" in out
    assert "aten::zero" in out
    assert f"{script}:{_line_of(script, 'torch.zeros(2**40')}" in out


def test_asynchronous_out_of_memory_names_the_op_at_the_host_read(tmp_path):
    # XLA:CPU allocates the 64 GiB result after the launch: the failure
    # surfaces at .item(), two lines later, and still names the matmul.
    out, script = _oom_child(tmp_path, """
        a = torch.randn(2**17, 8, device="tpu")
        b = torch.randn(8, 2**17, device="tpu")
        try:
            c = a @ b
            s = c.sum()
            print(s.item())
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        torch.tpu.synchronize()  # reported once: does not raise it again
    """)
    assert "OOM: tpu out of memory" in out
    assert "Out of memory allocating 68719476736 bytes" in out
    assert f"aten::mm at {script}:{_line_of(script, 'c = a @ b')}" in out


def test_asynchronous_out_of_memory_names_the_op_at_synchronize(tmp_path):
    out, script = _oom_child(tmp_path, """
        a = torch.randn(2**17, 8, device="tpu")
        b = torch.randn(8, 2**17, device="tpu")
        try:
            c = a @ b
            torch.tpu.synchronize()
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        del c
    """)
    assert "OOM: tpu out of memory" in out
    assert f"aten::mm at {script}:{_line_of(script, 'c = a @ b')}" in out


def test_out_of_memory_in_a_fused_program_names_its_ops(tmp_path):
    out, script = _oom_child(tmp_path, """
        torch_tpu.set_eager_mode("DEFER_AND_FUSE")
        a = torch.randn(2**17, 8, device="tpu")
        b = torch.randn(8, 2**17, device="tpu")
        try:
            print((a @ b).sum().item())  # the 64 GiB product is a temporary
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
    """)
    line = _line_of(script, "(a @ b).sum()")
    assert "OOM: tpu out of memory" in out
    assert f"aten::mm at {script}:{line}" in out
    assert f"aten::sum at {script}:{line}" in out


def _plugin():
    import torch_tpu
    return torch_tpu._C._platform()[3]


TRUNCATED_PLUGIN_CHILD = """
import torch
try:
    torch.ones(3, device="tpu")
    print("NO ERROR")
except RuntimeError as e:
    print("ERROR:", e)
"""


@pytest.mark.parametrize("keep", [1 << 20, 64 << 20])
def test_truncated_plugin_is_an_error_naming_the_file(tmp_path, keep):
    # Cut inside the segments (64 MiB) or before the section headers (1 MiB);
    # the loader maps such a file and the first op died of SIGBUS.
    folder = tmp_path / "xla_cpu_pjrt"
    folder.mkdir()
    cut = folder / "xla_cpu_pjrt.so"
    with open(_plugin(), "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(keep))
    done, _ = _run(tmp_path, TRUNCATED_PLUGIN_CHILD, TORCH_TPU_PJRT_PLUGIN=str(cut))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ERROR: PJRT plugin '{cut}' is damaged" in done.stdout
    assert f"the file is {keep} bytes" in done.stdout
    assert "pip install --force-reinstall xla-cpu-pjrt" in done.stdout


def test_plugin_that_is_not_elf_is_an_error_naming_the_file(tmp_path):
    fake = tmp_path / "plugin.so"
    fake.write_text("not a library\n")
    done, _ = _run(tmp_path, TRUNCATED_PLUGIN_CHILD, TORCH_TPU_PJRT_PLUGIN=str(fake))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ERROR: PJRT plugin '{fake}' is damaged (it is not an ELF file" in done.stdout
    assert "TORCH_TPU_PJRT_PLUGIN" in done.stdout
