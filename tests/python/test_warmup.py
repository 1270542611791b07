"""The runtime warm-up started with the client: invisible in the cache
statistics, kept on disk for the next process, off with TORCH_TPU_WARMUP=0,
and a process that exits while it runs exits cleanly."""
import os
import subprocess
import sys

import torch_tpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = """
import json, torch, torch_tpu
x = torch.ones(3, device="tpu")
torch_tpu._C._join_warmup()
total = (x * 2).sum().item()
print(json.dumps({"stats": torch_tpu.cache_stats(), "sum": total}))
"""


def _run(code, cache_dir, **env):
    full = dict(os.environ, PYTHONPATH=REPO, TORCH_TPU_DISK_CACHE="1",
                TORCH_TPU_CACHE_DIR=str(cache_dir))
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def _xc_files(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".xc"))


def test_warmup_is_stored_on_disk_and_not_counted(tmp_path):
    if "cpu" not in torch_tpu._C._platform()[3]:
        return  # the warm-up is for the CPU plugin only
    import json
    done = _run(CHILD, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["sum"] == 6.0
    files = _xc_files(tmp_path)
    # The user's programs (ones, mul, sum) are counted; the warm-up is not.
    assert result["stats"]["misses"] == len(files) - 1, (result, files)
    again = _run(CHILD, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    stats = json.loads(again.stdout.strip().splitlines()[-1])["stats"]
    assert stats["misses"] == 0 and stats["disk_hits"] == len(files) - 1, stats
    assert _xc_files(tmp_path) == files  # the warm-up loaded its own file


def test_warmup_off_writes_nothing(tmp_path):
    done = _run("import torch; torch.ones(3, device='tpu').cpu()", tmp_path,
                TORCH_TPU_WARMUP="0", TORCH_TPU_DEFER_AND_FUSE="0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_xc_files(tmp_path)) == 1  # only the ones() program


def test_exit_while_warming_up_is_clean(tmp_path):
    for i, disk in enumerate(["1", "0", "1"]):  # cold: the warm-up compiles at exit
        done = _run("import torch; torch.ones(1, device='tpu')", tmp_path / str(i),
                    TORCH_TPU_DISK_CACHE=disk)
        assert done.returncode == 0, done.stderr[-2000:]
