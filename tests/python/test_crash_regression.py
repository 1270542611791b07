"""Regression: a long process must not die of the executables it compiled.

The OpInfo sweep's workers died of SIGSEGV after ~20000 distinct programs:
every executable stayed in the in-memory compile cache, XLA:CPU maps each
one's JIT code as about three memory regions, and at the kernel's
vm.max_map_count LLVM failed to map code ("LLVM compilation error: Cannot
allocate memory"); the unwinder then crashed on the C++ exception that
reported it. The memory tier is now bounded (least recently used out).
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from conftest import assert_same


@pytest.fixture
def small_cache():
    previous = torch_tpu.cache_stats()["capacity"]
    torch_tpu._C._cache_set_capacity(4)
    yield
    torch_tpu._C._cache_set_capacity(previous)


def _program(n):
    """A distinct one-op program per n: x * 3 on a float vector of n elements."""
    x = torch.arange(n, dtype=torch.float32)
    assert_same(x.to("tpu") * 3, x * 3)


def test_memory_tier_keeps_at_most_capacity(small_cache):
    before = torch_tpu.cache_stats()
    for n in range(1, 11):
        _program(n)
    stats = torch_tpu.cache_stats()
    assert stats["capacity"] == 4
    assert stats["entries"] <= 4
    assert stats["evictions"] - before["evictions"] >= 6  # 10 new programs, 4 places
    # An evicted program compiles again and still computes the right values.
    misses = stats["misses"]
    _program(1)
    assert torch_tpu.cache_stats()["misses"] > misses


def test_recently_used_programs_stay(small_cache):
    _program(2)
    for n in range(20, 26):  # more new programs than fit; 2 is used before each
        _program(2)
        _program(n)
    hits = torch_tpu.cache_stats()["hits"]
    _program(2)
    assert torch_tpu.cache_stats()["hits"] > hits


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        torch_tpu._C._cache_set_capacity(0)


# A process at the memory-map limit: fills all but HEADROOM of
# vm.max_map_count with one-page maps, then compiles more distinct programs
# than the headroom holds unless evicted executables give their maps back.
_NEAR_MAP_LIMIT = textwrap.dedent("""
    import ctypes, mmap, sys
    import torch, torch_tpu
    HEADROOM, PROGRAMS, CAPACITY = (int(a) for a in sys.argv[1:4])
    torch_tpu._C._cache_set_capacity(CAPACITY)
    (torch.ones(2, device="tpu") + 1).cpu()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    maps = lambda: sum(1 for _ in open("/proc/self/maps"))
    limit = int(open("/proc/sys/vm/max_map_count").read())
    n, page = limit - maps() - HEADROOM, mmap.PAGESIZE
    base = libc.mmap(None, n * page, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    for i in range(0, n, 2):  # alternate protections: the kernel cannot merge them
        libc.mprotect(base + i * page, page, 0)  # PROT_NONE
    for k in range(1, PROGRAMS + 1):
        x = torch.arange(k, dtype=torch.float32)
        torch.testing.assert_close((x.to("tpu") * 5).cpu(), x * 5)
    stats, metrics = torch_tpu.cache_stats(), torch_tpu.metrics()
    print("ok", limit - maps(), stats["entries"], int(metrics.get("cache_map_pressure", 0)),
          flush=True)
""")


def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


@pytest.mark.skipif(not _map_limit() or _map_limit() > 300000,
                    reason="needs Linux with a fillable vm.max_map_count")
def test_many_programs_near_the_memory_map_limit():
    # 120 programs (one mul each) need ~360 maps unbounded (capacity 10**6:
    # the process dies of SIGSEGV); 8 cached executables need a few dozen.
    _run_near_map_limit(250, 120, 8)


def _run_near_map_limit(headroom, programs, capacity):
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", TORCH_TPU_CPU_FALLBACK="0")
    proc = subprocess.run([sys.executable, "-c", _NEAR_MAP_LIMIT, str(headroom), str(programs),
                           str(capacity)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "ok" in proc.stdout, (
        f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")
    _, left, entries, pressure = proc.stdout.split()
    return int(left), int(entries), int(pressure)


@pytest.mark.skipif(not _map_limit() or _map_limit() > 300000,
                    reason="needs Linux with a fillable vm.max_map_count")
def test_map_pressure_evicts_below_the_entry_bound():
    # Executables differ in how many maps they take: past half the limit the
    # cache halves itself whatever its capacity.
    left, entries, pressure = _run_near_map_limit(3000, 80, 10 ** 6)
    assert pressure >= 1 and entries < 64 and left > 2000
