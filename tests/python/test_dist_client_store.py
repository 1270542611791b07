"""The PJRT client's key-value store fed by a c10d store (csrc/pjrt/kv_store.h,
csrc/distributed/client_store.h): the C API's kv_put / kv_get / kv_try_get
callbacks, called as a plugin calls them, read and write a real TCPStore or
FileStore shared with another process; the first process group of a
multi-process job hands its store to the client when the plugin uses it.
XLA:CPU never calls the callbacks itself (it runs no collectives across
processes), so the callbacks are driven through torch_tpu._C._PjrtKvCallbacks."""
import datetime
import os
import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist

import torch_tpu
from torch_tpu import _C, _plugin

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch without distributed")

ENV = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
           PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))

# The other process: writes through the callbacks, waits (through them) for
# what this one writes with the plain store, and echoes it back plainly.
PEER = textwrap.dedent("""
    import sys, datetime
    import torch.distributed as dist
    from torch_tpu import _C
    kind, where = sys.argv[1], sys.argv[2]
    if kind == "tcp":
        host, port = where.split(":")
        store = dist.TCPStore(host, int(port), is_master=False,
                              timeout=datetime.timedelta(seconds=30))
    else:
        store = dist.FileStore(where, 2)
    kv = _C._PjrtKvCallbacks(dist.PrefixStore("pjrt", store))
    kv.put("from_peer", b"\\x00peer\\xffbytes")
    seen = kv.get("from_test", 30000)
    store.set("echo", seen)
""")


@pytest.fixture(params=["tcp", "file"])
def shared_store(request, tmp_path):
    if request.param == "tcp":
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=30))
        return store, "tcp", f"127.0.0.1:{store.port}"
    path = str(tmp_path / "store")
    return dist.FileStore(path, 2), "file", path


def test_callbacks_share_a_c10d_store_with_another_process(shared_store):
    store, kind, where = shared_store
    peer = subprocess.Popen([sys.executable, "-c", PEER, kind, where], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        kv = _C._PjrtKvCallbacks(dist.PrefixStore("pjrt", store))
        # A blocking get waits for the other process's put (binary-safe).
        assert kv.get("from_peer", 30000) == b"\x00peer\xffbytes"
        assert kv.try_get("from_peer") == b"\x00peer\xffbytes"
        # The plain store sees what the callbacks put, under the same prefix.
        kv.put("from_test", b"test\x00value")
        assert store.get("pjrt/from_test") == b"test\x00value"
        assert store.get("echo") == b"test\x00value"  # the peer's get saw it
        assert peer.wait(timeout=60) == 0, peer.stdout.read()
    finally:
        if peer.poll() is None:
            peer.kill()


def test_missing_keys_give_the_codes_the_c_api_asks_for(tmp_path):
    kv = _C._PjrtKvCallbacks(dist.FileStore(str(tmp_path / "store"), 1))
    with pytest.raises(RuntimeError, match=r"^NOT_FOUND: .*'absent' is not set"):
        kv.try_get("absent")
    with pytest.raises(RuntimeError,
                       match=r"^DEADLINE_EXCEEDED: .*'absent' was not set within 200 ms"):
        kv.get("absent", 200)
    kv.put("present", b"")
    assert kv.get("present", 200) == b""
    assert kv.try_get("present") == b""


def test_xla_cpu_is_not_given_the_store(monkeypatch):
    # It never calls the callbacks (csrc/distributed/README.md).
    monkeypatch.delenv("TORCH_TPU_PJRT_KV_STORE", raising=False)
    assert "xla_cpu" in os.path.basename(_plugin.plugin_path())
    assert not _plugin.uses_kv_store()
    monkeypatch.setenv("TORCH_TPU_PJRT_KV_STORE", "1")
    assert _plugin.uses_kv_store()
    monkeypatch.setenv("TORCH_TPU_PJRT_KV_STORE", "yes")
    with pytest.raises(ValueError, match="TORCH_TPU_PJRT_KV_STORE must be 0 or 1"):
        _plugin.uses_kv_store()


def test_sharing_after_the_client_exists_raises():
    torch_tpu._C._init()
    with pytest.raises(ValueError, match="PJRT client already exists"):
        _C._share_store_with_client(dist.HashStore())


# Each rank: init_process_group before any tpu use, then a collective.
RANK = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    import torch_tpu
    rank, init = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("tpu_dist", init_method="file://" + init, rank=rank, world_size=2)
    x = torch.full((3,), float(rank + 1), device="tpu")
    dist.all_reduce(x)
    assert x.cpu().tolist() == [3.0, 3.0, 3.0], x
    dist.destroy_process_group()
    # One write per rank: two ranks' print() calls interleave on the shared pipe.
    os.write(1, f"clients with a key-value store: {torch_tpu._C._pjrt_clients_with_kv_store()}\\n".encode())
""")


@pytest.mark.parametrize("forced", ["1", None], ids=["forced", "xla_cpu_default"])
def test_first_group_hands_its_store_to_the_client(tmp_path, forced):
    env = dict(ENV)
    env.pop("TORCH_TPU_PJRT_KV_STORE", None)
    if forced:
        env["TORCH_TPU_PJRT_KV_STORE"] = forced
    init = str(tmp_path / "init")
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
        # The client is created with the callbacks attached (and, on XLA:CPU,
        # works as without them) only when the store is handed over.
        assert f"clients with a key-value store: {1 if forced else 0}" in out, out[-3000:]


# Under torchrun: a tpu tensor before init_process_group (the client is made
# first), and the client still has the agent's store, taken at import.
TORCHRUN = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    import torch_tpu
    x = torch.full((3,), float(dist.get_rank() if dist.is_initialized() else 0) + 1, device="tpu")
    dist.init_process_group("tpu_dist")
    y = torch.full((3,), float(dist.get_rank() + 1), device="tpu")
    dist.all_reduce(y)
    assert y.cpu().tolist() == [3.0, 3.0, 3.0], y
    dist.destroy_process_group()
    # One write per rank: two ranks' print() calls interleave on the shared pipe.
    os.write(1, f"clients with a key-value store: {torch_tpu._C._pjrt_clients_with_kv_store()}\\n".encode())
""")


def test_torchrun_client_gets_the_agents_store_before_init(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(TORCHRUN)
    env = dict(ENV, TORCH_TPU_PJRT_KV_STORE="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(script)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert proc.stdout.count("clients with a key-value store: 1") == 2, proc.stdout[-4000:]
    assert "was created before init_process_group" not in proc.stdout, proc.stdout[-4000:]
