"""`torch.tpu.Stream`/`Event`, the current and default streams, and the same
objects through `torch.Stream`, `torch.Event` and `torch.accelerator`: the
semantics (what a query, a wait or a synchronize promises), not timings."""
import pytest
import torch

import torch_tpu


def busy(n=1536, steps=4):
    """Launches work that runs for a while on the device (no host read)."""
    x = torch.randn(n, n).to("tpu")
    for _ in range(steps):
        x = torch.tanh(x @ x)
    return x


def test_default_and_current_stream():
    s = torch.tpu.current_stream()
    assert isinstance(s, torch.tpu.Stream) and isinstance(s, torch.Stream)
    assert s == torch.tpu.default_stream() and s.stream_id == 0
    assert s.device == torch.device("tpu", 0)
    assert torch.accelerator.current_stream() == s
    assert torch.tpu.current_stream("tpu:0") == torch.tpu.current_stream(0) == s


def test_new_streams_are_distinct_and_become_current_in_context():
    a, b = torch.tpu.Stream(), torch.tpu.Stream(priority=-1)
    assert a != b and a != torch.tpu.default_stream()
    with torch.tpu.stream(a):
        assert torch.tpu.current_stream() == a
        with torch.tpu.stream(b):
            assert torch.tpu.current_stream() == b
            assert torch.accelerator.current_stream() == b
        assert torch.tpu.current_stream() == a
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with a:  # torch.Stream's own context manager
        assert torch.tpu.current_stream() == a
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    torch.tpu.set_stream(b)
    assert torch.tpu.current_stream() == b
    torch.accelerator.set_stream(torch.tpu.default_stream())
    assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_generic_stream_and_event_are_tpu():
    s = torch.Stream("tpu")
    assert s.device.type == "tpu" and s.stream_id != 0
    e = torch.Event("tpu")
    assert isinstance(e, torch.tpu.Event) and not isinstance(torch.Event("cpu"), torch.tpu.Event)
    x = torch.ones(3).to("tpu") * 2
    e.record(s)
    e.synchronize()
    assert e.query()
    assert x.cpu().tolist() == [2.0] * 3


def test_event_query_reflects_completion():
    e = torch.tpu.Event()
    assert e.query()  # never recorded
    y = busy()
    e.record()
    assert not e.query(), "the event completed before the work it follows"
    e.synchronize()
    assert e.query()
    assert torch.isfinite(y).all().item()


def test_stream_query_and_synchronize():
    s = torch.tpu.current_stream()
    y = busy()
    assert not s.query()
    s.synchronize()
    assert s.query()
    torch.accelerator.synchronize()
    assert y.shape == (1536, 1536)


def test_event_after_nothing_pending_is_complete():
    torch.tpu.synchronize()
    e = torch.tpu.current_stream().record_event()
    assert e.query()


def test_elapsed_time():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    busy(1024, 2)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    assert end.elapsed_time(start) <= 0.0


def test_elapsed_time_errors():
    a, b = torch.tpu.Event(), torch.tpu.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    c, d = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    c.record()
    with pytest.raises(ValueError, match="recorded"):
        c.elapsed_time(d)


def test_wait_stream_and_wait_event_order_work():
    side = torch.tpu.Stream()
    x = torch.arange(4.0).to("tpu")
    side.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(side):
        y = x * 3
        done = side.record_event()
    torch.tpu.current_stream().wait_event(done)
    done.wait()  # on the current stream
    torch.tpu.current_stream().wait_stream(side)
    assert (y + 1).cpu().tolist() == [1.0, 4.0, 7.0, 10.0]


def test_event_record_flushes_fused_recording():
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        before = torch_tpu.metrics().get("flush_stream_event", 0)
        x = torch.ones(8).to("tpu")
        y = x * 2 + 1
        e = torch.tpu.Event()
        e.record()
        assert torch_tpu.metrics().get("flush_stream_event", 0) == before + 1
        e.synchronize()
        assert e.query()
        assert y.cpu().tolist() == [3.0] * 8


def test_bad_streams_are_clear_errors():
    with pytest.raises(ValueError, match="tpu stream"):
        torch.tpu.stream(42)
    with pytest.raises(ValueError, match="tpu stream"):
        torch.tpu.set_stream("tpu")
    with pytest.raises(RuntimeError, match="tpu:5"):
        torch.tpu.current_stream(5)
    with pytest.raises(RuntimeError, match="tpu:5"):
        torch.tpu.Stream("tpu:5")
    with pytest.raises(IndexError, match="tpu:5"):  # the guard's check, as for tensors
        torch.Stream("tpu:5")
    with pytest.raises(IndexError, match="tpu:5"):
        torch.accelerator.set_stream(torch.Stream(stream_id=0, device_index=5, device_type=20))
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
