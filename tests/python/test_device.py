"""The `torch.tpu` device module and the device's place in PyTorch."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_availability_and_count():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    x = torch.tensor([1.0]).to("tpu")
    assert torch.tpu.is_initialized()
    torch.tpu.synchronize()
    assert (x + 1).cpu().item() == 2.0


def test_set_device_and_context_manager():
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    assert torch.tpu.current_device() == 0
    with pytest.raises(RuntimeError, match="tpu:7"):
        torch.tpu.set_device(7)
    with pytest.raises(ValueError, match="expected a tpu device"):
        torch.tpu.set_device("cpu")
    assert torch.tpu.current_device() == 0


def test_device_name_and_properties():
    props = torch.tpu.get_device_properties()
    name = torch.tpu.get_device_name()
    assert isinstance(name, str) and name
    assert name == f"{props.name} ({props.platform})"
    assert props.platform and props.platform_version
    assert os.path.exists(props.plugin)
    assert "platform=" in repr(props)
    assert torch.tpu.get_device_name(0) == name
    with pytest.raises(RuntimeError, match="tpu:7"):
        torch.tpu.get_device_properties(7)


def test_manual_seed_and_initial_seed():
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    torch.tpu.manual_seed_all(5)
    assert torch.tpu.initial_seed() == 5
    torch.tpu.seed()
    first = torch.tpu.initial_seed()
    torch.tpu.seed()
    assert torch.tpu.initial_seed() != first  # 64 random bits twice


def test_torch_manual_seed_seeds_tpu():
    torch.tpu.manual_seed(1234)
    torch.manual_seed(77)
    assert torch.tpu.initial_seed() == 77


def test_rng_state_round_trip():
    torch.tpu.manual_seed(42)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and state.device.type == "cpu"
    torch.tpu.manual_seed(43)
    assert not torch.equal(torch.tpu.get_rng_state(), state)
    torch.tpu.set_rng_state(state)
    assert torch.tpu.initial_seed() == 42
    assert torch.equal(torch.tpu.get_rng_state(), state)
    assert len(torch.tpu.get_rng_state_all()) == torch.tpu.device_count()
    with pytest.raises(ValueError, match="16 bytes"):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError):
        torch.tpu.set_rng_state(state.float())


def test_memory_statistics():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.empty(1024, device="tpu")
    assert torch.tpu.memory_allocated() == before + 4096
    assert torch.tpu.max_memory_allocated() >= before + 4096
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == before + 4096
    assert stats["allocation.all.allocated"] >= 1
    del x
    assert torch.tpu.memory_allocated() == before
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    torch.tpu.empty_cache()
    assert torch.tpu.memory_allocated(0) == before


def test_accelerator_is_tpu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch._C._get_privateuse1_backend_name() == "tpu"


def test_device_objects_and_methods():
    d = torch.device("tpu:0")
    assert d.type == "tpu" and d.index == 0
    assert torch.device("tpu").index is None
    x = torch.arange(6.0).reshape(2, 3)
    t = x.tpu()
    assert t.is_tpu and not x.is_tpu
    assert t.device == d
    assert torch.equal(t.cpu(), x)
    assert x.to("tpu:0").device == d
    assert torch.empty(2, device="tpu").device == d


def test_module_tpu():
    m = torch.nn.Linear(3, 2)
    expected = [p.detach().clone() for p in m.parameters()]
    assert m.tpu() is m
    for p, e in zip(m.parameters(), expected):
        assert p.is_tpu and p.requires_grad
        assert torch.equal(p.cpu(), e)
    m.cpu()
    assert not any(p.is_tpu for p in m.parameters())


MULTI_DEVICE = textwrap.dedent("""
    import torch, torch_tpu
    assert torch.tpu.device_count() == 2, torch.tpu.device_count()
    x = torch.tensor([1.0, 2.0, 3.0]).to("tpu:1")
    assert x.device == torch.device("tpu:1"), x.device
    y = x * 2 + 1
    assert y.device == torch.device("tpu:1"), y.device
    assert y.cpu().tolist() == [3.0, 5.0, 7.0]
    z = y.to("tpu:0")
    assert z.device == torch.device("tpu:0") and z.cpu().tolist() == [3.0, 5.0, 7.0]
    w = torch.empty(3, device="tpu:1")
    w.copy_(z)
    assert w.device.index == 1 and w.cpu().tolist() == [3.0, 5.0, 7.0]
    z.copy_(x)
    assert z.cpu().tolist() == [1.0, 2.0, 3.0]
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        assert torch.empty(2, device="tpu").device.index == 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(1)
    assert (torch.tensor([4.0]).to("tpu") + 1).device.index == 1
    torch.tpu.set_device(0)
    try:
        (x + z)
        raise SystemExit("adding tpu:1 and tpu:0 tensors did not raise")
    except RuntimeError as e:
        assert "tpu:0" in str(e) and "tpu:1" in str(e), str(e)
    for bad in (lambda: torch.empty(2, device="tpu:7"),
                lambda: torch.tensor([1.0]).to("tpu:7"),
                lambda: torch.tpu.set_device(7)):
        try:
            bad()
            raise SystemExit("tpu:7 did not raise")
        except (RuntimeError, IndexError) as e:
            assert "tpu:7" in str(e), str(e)
    assert (x + 1).cpu().tolist() == [2.0, 3.0, 4.0]
    print("MULTI_DEVICE_OK")
""")


def test_two_devices_in_subprocess():
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", MULTI_DEVICE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MULTI_DEVICE_OK" in proc.stdout


def test_num_devices_must_be_positive_integer():
    for value, message in (("zero", "must be an integer"), ("0", "at least 1")):
        env = dict(os.environ, TORCH_TPU_NUM_DEVICES=value,
                   PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-c", "import torch, torch_tpu"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert message in proc.stderr


def test_import_torch_tpu_first():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", "import torch_tpu, torch; print(torch.tpu)"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
