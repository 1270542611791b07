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
    # XLA:CPU allocates the 8 GiB result after the launch (under the
    # device's memory, over the child's address-space limit): the failure
    # surfaces at .item(), two lines later, and still names the matmul.
    out, script = _oom_child(tmp_path, """
        a = torch.randn(2**15, 8, device="tpu")
        b = torch.randn(8, 2**16, device="tpu")
        try:
            c = a @ b
            s = c.sum()
            print(s.item())
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        torch.tpu.synchronize()  # reported once: does not raise it again
    """)
    assert "OOM: tpu out of memory" in out
    assert "Out of memory allocating 8589934592 bytes" in out
    assert f"aten::mm at {script}:{_line_of(script, 'c = a @ b')}" in out


def test_asynchronous_out_of_memory_names_the_op_at_synchronize(tmp_path):
    out, script = _oom_child(tmp_path, """
        a = torch.randn(2**15, 8, device="tpu")
        b = torch.randn(8, 2**16, device="tpu")
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


CACHE_CHILD = """
import json, warnings, torch, torch_tpu
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    x = torch.ones(4, device="tpu")
    total = (x * 2).sum().item()
    y = torch.ones(4, device="tpu")  # the same programs again: no second warning
    total += (y * 2).sum().item()
m = torch_tpu.metrics()
print(json.dumps({"total": total, "warnings": [str(w.message) for w in caught],
                  "stats": torch_tpu.cache_stats(),
                  "damaged": m.get("cache_disk_damaged", 0),
                  "repaired": m.get("cache_disk_repaired", 0)}))
"""


def _cache_run(tmp_path, cache):
    done, _ = _run(tmp_path, CACHE_CHILD, TORCH_TPU_CACHE_DIR=str(cache), TORCH_TPU_DISK_CACHE="1")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["total"] == 16.0
    return result


def _entries(cache):
    return sorted(cache / p for p in os.listdir(cache) if p.endswith(".xc"))


def _ours(result):
    return [w for w in result["warnings"] if "compile cache" in w]


def test_damaged_cache_entries_warn_once_naming_the_file_and_are_replaced(tmp_path):
    cache = tmp_path / "cache"
    first = _cache_run(tmp_path, cache)
    assert _ours(first) == []
    entries = _entries(cache)
    assert len(entries) == first["stats"]["misses"] >= 3
    truncated, flipped, emptied = entries[:3]
    truncated.write_bytes(truncated.read_bytes()[:100])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    emptied.write_bytes(b"")

    second = _cache_run(tmp_path, cache)
    warned = _ours(second)
    assert len(warned) == 3 and second["damaged"] == 3, warned
    for path, why in [(truncated, "truncated"), (flipped, "checksum mismatch"), (emptied, "empty")]:
        assert any(f"compile cache file {path} is damaged ({why})" in w for w in warned), warned
    assert second["stats"]["misses"] == 3

    third = _cache_run(tmp_path, cache)  # replaced: every program loads from disk
    assert _ours(third) == [] and third["damaged"] == 0
    assert third["stats"]["misses"] == 0
    assert third["stats"]["disk_hits"] == len(entries)


def test_cache_entry_replaced_by_a_directory_is_repaired(tmp_path):
    cache = tmp_path / "cache"
    first = _cache_run(tmp_path, cache)
    entry = _entries(cache)[0]
    entry.unlink()
    (entry / "inside").mkdir(parents=True)
    (entry / "inside" / "file").write_text("x")

    second = _cache_run(tmp_path, cache)
    warned = _ours(second)
    assert len(warned) == 1 and second["repaired"] == 1, warned
    assert f"compile cache entry {entry} was a directory" in warned[0]
    assert entry.is_file()

    third = _cache_run(tmp_path, cache)
    assert _ours(third) == [] and third["stats"]["misses"] == 0
    assert third["stats"]["disk_hits"] == first["stats"]["misses"]
