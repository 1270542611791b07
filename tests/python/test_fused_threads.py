"""Fused Eager with several threads: each thread records its own program, so
interleaved loops keep hitting the cache; values pending in one thread's
recording are flushed there when another thread (or the main thread, after
the recording thread ended) uses them."""
import threading

import torch

import torch_tpu

from conftest import assert_same


def _loop(w, x, steps, reads):
    for i in range(steps):
        x = (torch.tanh(x @ w * 0.05) * 0.5 + 0.1).clone()
        if i % 10 == 9:
            reads.append(x.sum().cpu())
    return x


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 32, generator=g), torch.randn(8, 32, generator=g)


def _run_threads(steps, results):
    def work(k):
        w, x = _inputs(k)
        reads = []
        _loop(w.to("tpu"), x.to("tpu"), steps, reads)
        results[k] = reads

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_two_threads_record_their_own_programs():
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        _run_threads(40, {})  # warm-up: each thread's loop compiles its programs
        torch_tpu.reset_metrics()
        results = {}
        _run_threads(300, results)
        compiles = torch_tpu.metrics().get("compiles", 0)
    # Interleaved into one recording, the threads' ops never repeated and
    # every window compiled a new program.
    assert compiles == 0, torch_tpu.metrics_report()
    for k in range(2):
        w, x = _inputs(k)
        expected = []
        _loop(w, x, 300, expected)
        assert len(results[k]) == len(expected)
        for got, want in zip(results[k], expected):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_value_pending_in_another_thread_is_flushed_there():
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        made = {}
        ready, used = threading.Event(), threading.Event()

        def producer():
            a = torch.arange(6.0).to("tpu")
            made["b"] = a * 2 + 1  # pending in this thread's recording
            ready.set()
            used.wait()
            made["c"] = made["b"] - 1  # this thread records on after the other read

        t = threading.Thread(target=producer)
        t.start()
        ready.wait()
        d = made["b"] * 10  # the main thread's op flushes the producer's recording
        assert_same(d, (torch.arange(6.0) * 2 + 1) * 10)
        used.set()
        t.join()
        # The producer ended with its last value pending: it is still readable.
        assert_same(made["c"], torch.arange(6.0) * 2)


def test_ended_thread_recording_is_flushed_for_its_readers():
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        out = {}

        def work():
            x = torch.ones(4, 4).to("tpu")
            x.add_(3)  # written in place, pending when the thread ends
            out["x"] = x
            out["y"] = x.sum(0)

        t = threading.Thread(target=work)
        t.start()
        t.join()
        # The next op of any thread flushes the orphaned recording.
        z = torch.zeros(2).to("tpu") + 1
        assert_same(out["y"], torch.full((4,), 16.0))
        assert_same(out["x"], torch.full((4, 4), 4.0))
        assert_same(z, torch.ones(2))
