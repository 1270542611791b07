"""torch.profiler shows the tpu: launched programs (their ops, mode and cache
tier) on the host thread and as device spans, compiles, copies with their
bytes and synchronizes, on the CPU events' clock, in prof.events(),
key_averages() and the exported Chrome trace. Every count is checked
against the engine's own metrics and every result against CPU."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_tpu
import torch.tpu.profiler as tpu_profiler

from conftest import assert_same

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
COUNTED = ("executions", "compiles", "cache_disk_hits", "transfers_to_device",
           "bytes_to_device", "transfers_to_host", "bytes_to_host")

pytestmark = pytest.mark.skipif(not tpu_profiler.available(),
                                reason="torch built without Kineto's PrivateUse1 registry")


def _counts():
    m = torch_tpu.metrics()
    return {k: m.get(k, 0) for k in COUNTED}


def _delta(before, after):
    return {k: after[k] - before[k] for k in COUNTED}


def _named(prof, name):
    return [e for e in prof.events() if e.name == name]


def _device(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def _trace(prof, tmp_path, name="trace.json"):
    path = tmp_path / name
    prof.export_chrome_trace(str(path))
    return _read_trace(path)


def _read_trace(path):
    """The events of a Chrome trace file; a file that is not JSON fails with
    the text around the point where parsing stopped."""
    text = path.read_text()
    try:
        return json.loads(text)["traceEvents"]
    except json.JSONDecodeError as e:
        pytest.fail(f"{path.name} ({len(text)} chars) is not JSON: {e}; around it: "
                    f"{text[max(0, e.pos - 300):e.pos + 300]!r}")


_RESULT = "RESULT "  # marks the line a child prints its result on


def _child_result(stdout):
    """The JSON a child script printed after _RESULT (other output, a
    library's message at exit, may follow it)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(_RESULT)]
    assert lines, f"no {_RESULT!r} line in the child's output: {stdout[-2000:]!r}"
    return json.loads(lines[-1][len(_RESULT):])


def _args(trace, name):
    return [e["args"] for e in trace if e.get("name") == name and e.get("ph") == "X"]


def _ops(x, a, b):
    return torch.relu(x * a + b).sum(dim=0)


def test_registered_and_listening_only_inside_a_profile():
    assert not torch_tpu._C._profiler_listening()
    with profile(activities=BOTH):
        assert torch_tpu._C._profiler_listening()
    assert not torch_tpu._C._profiler_listening()


def test_strict_ops_launch_once_each_and_compile_on_the_first_call_only(tmp_path):
    x, a, b = torch.randn(13, 7), torch.randn(13, 7), torch.randn(7)
    tx, ta, tb = x.to("tpu"), a.to("tpu"), b.to("tpu")
    torch_tpu.clear_cache()
    with torch_tpu.eager_mode("DEFER_NEVER"):
        runs = []
        for _ in range(2):
            before = _counts()
            with profile(activities=BOTH) as prof:
                out = _ops(tx, ta, tb)
                torch.tpu.synchronize()
            runs.append((prof, _delta(before, _counts()), _trace(prof, tmp_path)))
    assert_same(out, _ops(x, a, b))
    (first, first_m, first_t), (second, second_m, second_t) = runs
    # mul, add, relu, sum: four one-op programs each time.
    for prof, m in ((first, first_m), (second, second_m)):
        assert len(_named(prof, "tpu::launch")) == m["executions"] == 4
        programs = sorted(e.name for e in _device(prof))
        assert programs == sorted(["Strict aten::mul.Tensor", "Strict aten::add.Tensor",
                                   "Strict aten::relu", "Strict aten::sum.dim_IntList"])
    assert len(_named(first, "tpu::compile")) == first_m["compiles"] == 4
    assert len(_named(second, "tpu::compile")) == second_m["compiles"] == 0
    assert {a["cache"] for a in _args(first_t, "tpu::launch")} == {"compiled"}
    assert {a["cache"] for a in _args(second_t, "tpu::launch")} == {"memory"}
    assert {a["tier"] for a in _args(first_t, "tpu::compile")} == {"compiled"}
    for a in _args(second_t, "tpu::launch"):
        assert a["mode"] == "Strict" and a["num_ops"] == 1
        assert a["site"].endswith("test_profiler.py:" + str(_ops.__code__.co_firstlineno + 1))


def test_device_time_belongs_to_the_op_that_launched_it():
    x = torch.randn(64, 64, device="tpu")
    with torch_tpu.eager_mode("DEFER_NEVER"):
        (x @ x).sum().item()  # compiled before the profile
        with profile(activities=BOTH) as prof:
            y = x @ x
            y.sum().item()
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["Strict aten::mm"].count == 1
    assert rows["aten::mm"].self_device_time_total > 0
    assert rows["aten::mm"].self_device_time_total == rows["Strict aten::mm"].device_time_total


@pytest.mark.parametrize("mode,name", [("DEFER_NEVER", "Strict"),
                                       ("DEFER_NEVER_AND_LAUNCH_BLOCKING", "Debug")])
def test_launches_sit_inside_their_ops_on_the_cpu_clock(mode, name):
    x = torch.randn(32, 32, device="tpu")
    with torch_tpu.eager_mode(mode):
        (x + x).cpu()
        with profile(activities=BOTH) as prof:
            for _ in range(3):
                x = x + 1
            host = x.cpu()
    launches = _named(prof, "tpu::launch")
    assert len(launches) == 3
    for launch in launches:
        parent = launch.cpu_parent
        assert parent is not None and parent.name == "aten::add"
        assert parent.time_range.start <= launch.time_range.start
        assert launch.time_range.end <= parent.time_range.end
    # The device runs the programs in launch order, each after its launch.
    spans = sorted(_device(prof), key=lambda e: e.time_range.start)
    assert [s.name for s in spans] == [f"{name} aten::add.Tensor"] * 3
    for launch, span in zip(sorted(launches, key=lambda e: e.time_range.start), spans):
        assert span.time_range.start >= launch.time_range.start
        assert span.time_range.end >= span.time_range.start
    for earlier, later in zip(spans, spans[1:]):
        assert earlier.time_range.end <= later.time_range.start
    # The copy may be called before the device starts the last program (the
    # launch returns first); it returns only after that program ran.
    copy = _named(prof, "tpu::copy_to_host")[0]
    assert copy.time_range.end >= spans[-1].time_range.start
    # The copy waited for the last program: its span ends by then, however
    # late the plugin's thread ran the completion callback.
    assert spans[-1].time_range.end <= copy.time_range.end
    assert_same(x, host)


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (37, 5)), (torch.float64, (3, 4, 2)),
                                         (torch.int8, (1000,))])
def test_copies_carry_their_bytes(tmp_path, dtype, shape):
    host = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype)
    nbytes = host.numel() * host.element_size()
    before = _counts()
    with profile(activities=BOTH) as prof:
        back = host.to("tpu").cpu()
    m = _delta(before, _counts())
    assert torch.equal(back, host)
    trace = _trace(prof, tmp_path)
    to_device = [a for a in _args(trace, "tpu::copy_to_device") if a["bytes"] == nbytes]
    to_host = _args(trace, "tpu::copy_to_host")
    assert len(to_device) == 1 and to_device[0]["device"] == "tpu:0"
    assert [a["bytes"] for a in to_host] == [nbytes] == [m["bytes_to_host"]]
    assert sum(a["bytes"] for a in _args(trace, "tpu::copy_to_device")) == m["bytes_to_device"]


def _mlp(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=g).to(device), torch.randint(0, 3, (16,), generator=g).to(device)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_fused_training_steps_repeat_one_cached_program(tmp_path):
    cpu_step = _mlp("cpu")
    expected = [cpu_step() for _ in range(8)]
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        step = _mlp("tpu")
        losses = [step() for _ in range(4)]  # warm-up: the loop's programs compile
        before = _counts()
        with profile(activities=BOTH) as prof:
            losses += [step() for _ in range(4)]
        m = _delta(before, _counts())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-3, atol=1e-3)
    launches = _named(prof, "tpu::launch")
    assert len(launches) == m["executions"] > 0
    assert m["compiles"] == 0 and not _named(prof, "tpu::compile")
    programs = _device(prof)
    assert len(programs) == len(launches)
    # A step is its forward-backward program and its update (Fused Eager cuts
    # where optimizer.step() begins), SGD's a one-op program named by its op.
    assert any(p.name.startswith("Fused program ") for p in programs)
    assert all(p.name.startswith("Fused ") for p in programs)
    # Each step runs the same programs: every name occurs once per step.
    counts = {}
    for p in programs:
        counts[p.name] = counts.get(p.name, 0) + 1
    assert set(counts.values()) == {4}
    trace = _trace(prof, tmp_path)
    for a in _args(trace, "tpu::launch"):
        assert a["mode"] == "Fused" and a["cache"] == "memory" and a["num_ops"] >= 1
        assert "aten::" in a["ops"]


def test_chrome_trace_has_host_and_device_lanes_linked_by_flows(tmp_path):
    x = torch.randn(16, 16, device="tpu")
    with torch_tpu.eager_mode("DEFER_NEVER"):
        with profile(activities=BOTH) as prof:
            (torch.tanh(x) * 3).sum().item()
    trace = _trace(prof, tmp_path)
    launches = [e for e in trace if e.get("name") == "tpu::launch"]
    kernels = [e for e in trace if e.get("cat") == "kernel"]
    assert len(launches) == len(kernels) == 3
    assert {e["cat"] for e in launches} == {"privateuse1_runtime"}
    host_pid = launches[0]["pid"]
    assert all(k["pid"] != host_pid for k in kernels)  # the device's own lane
    starts = {e["id"]: e for e in trace if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in trace if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert len(starts) == len(ends) == 3 and set(starts) == set(ends)
    for i in starts:
        assert starts[i]["pid"] == host_pid and ends[i]["pid"] != host_pid
    names = {e["args"].get("name") for e in trace if e.get("ph") == "M"}
    assert "tpu" in names
    for k in kernels:
        assert k["args"]["mode"] == "Strict" and k["args"]["device"] == "tpu:0"


def test_profiling_off_costs_no_events_and_changes_no_metric():
    x = torch.randn(24, 24)
    t = x.to("tpu")

    def work():
        return (torch.sigmoid(t @ t) + 1).cpu()

    with torch_tpu.eager_mode("DEFER_NEVER"):
        work()
        before = _counts()
        plain = work()
        off = _delta(before, _counts())
        before = _counts()
        with profile(activities=BOTH) as prof:
            profiled = work()
        on = _delta(before, _counts())
    assert off == on
    assert torch.equal(plain, profiled)
    assert_same(t, x)
    assert len(_named(prof, "tpu::launch")) == on["executions"]
    assert not torch_tpu._C._profiler_listening()


def test_start_stop_repeatedly_keeps_each_profile_to_itself():
    x = torch.randn(8, device="tpu")
    with torch_tpu.eager_mode("DEFER_NEVER"):
        for n in range(1, 6):
            # Launches outside any profile, some still running at its start.
            for _ in range(3):
                x = x * 1.0
            with profile(activities=BOTH) as prof:
                for _ in range(n):
                    x = x + 1
            assert len(_named(prof, "tpu::launch")) == n
            assert len(_device(prof)) == n


def test_schedule_records_only_active_steps():
    x = torch.randn(8, device="tpu")
    traces = []
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
    with torch_tpu.eager_mode("DEFER_NEVER"):
        with profile(activities=BOTH, schedule=schedule,
                     on_trace_ready=lambda p: traces.append(
                         (len(_named(p, "tpu::launch")), len(_device(p))))) as prof:
            for step in range(8):
                for _ in range(step + 1):  # step k launches k+1 programs
                    x = x + 1
                prof.step()
    # Active steps 2,3 then 6,7: 3+4 and 7+8 launches.
    assert traces == [(7, 7), (15, 15)]


def test_tpu_profiler_config_selects_host_and_device_events():
    x = torch.randn(8, device="tpu")

    def names(config):
        with profile(activities=BOTH, experimental_config=config) as prof:
            (x + 2).cpu()
        return ({e.name for e in prof.events() if e.name.startswith("tpu::")},
                len(_device(prof)))

    with torch_tpu.eager_mode("DEFER_NEVER"):
        host, device = names(tpu_profiler.TpuProfilerConfig(device_tracer_level=0))
        assert "tpu::launch" in host and device == 0
        host, device = names(tpu_profiler.TpuProfilerConfig(host_tracer_level=0))
        assert host == set() and device == 1
        host, device = names(tpu_profiler.TpuProfilerConfig())
        assert {"tpu::launch", "tpu::copy_to_host"} <= host and device == 1
    assert torch.tpu.profiler is tpu_profiler


def test_cpu_activity_alone_shows_host_events_but_no_device_spans():
    x = torch.randn(8, device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x * 2).cpu()
    assert _named(prof, "tpu::launch") and _named(prof, "tpu::copy_to_host")
    assert not _device(prof)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(host_tracer_level=4), ValueError, "host_tracer_level"),
    (dict(device_tracer_level=True), ValueError, "device_tracer_level"),
    (dict(worker_rank=3), TypeError, "worker_rank"),
    (dict(worker_rank="a:b"), ValueError, "worker_rank"),
    (dict(experimental_options={"foo": 1}), ValueError, "unknown experimental option 'foo'"),
    (dict(experimental_options={"run_dir": "x"}), ValueError, "clashes"),
    (dict(experimental_options={"a,b": 1}, check_experimental_options=False), ValueError, "':' or ','"),
    (dict(experimental_options={"foo": 1.5}, check_experimental_options=False), TypeError, "float"),
])
def test_tpu_profiler_config_rejects_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        tpu_profiler.TpuProfilerConfig(**kwargs)


def test_tpu_profiler_config_warns_about_options_without_effect():
    with pytest.warns(UserWarning, match="XPlane"):
        tpu_profiler.TpuProfilerConfig(run_dir="/tmp/xplane", worker_rank="0")
    with pytest.warns(UserWarning, match="with_stack"):
        tpu_profiler.TpuProfilerConfig(python_tracer_level=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = tpu_profiler.TpuProfilerConfig(experimental_options={"foo": "x"},
                                                check_experimental_options=False)
    assert isinstance(config, torch.profiler._ExperimentalConfig)


def test_compiled_graph_launches_are_named_for_their_graph():
    def f(a, b):
        return torch.sin(a) * b + 1

    a, b = torch.randn(6), torch.randn(6)
    compiled = torch.compile(f, backend="tpu")
    ta, tb = a.to("tpu"), b.to("tpu")
    compiled(ta, tb)  # captured and compiled before the profile
    with profile(activities=BOTH) as prof:
        out = compiled(ta, tb)
        torch.tpu.synchronize()
    assert_same(out, f(a, b))
    graphs = [e for e in _device(prof) if e.name.startswith("Graph ")]
    assert len(graphs) == 1


_DISK_SCRIPT = textwrap.dedent("""
    import json, sys, torch, torch_tpu
    from torch.profiler import profile, ProfilerActivity
    x = torch.full((5, 3), 2.0, device="tpu")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = (torch.exp(x) - 0.5).cpu()
    prof.export_chrome_trace(sys.argv[1])
    print("RESULT " + json.dumps(y.tolist()))
""")


def test_compile_events_say_which_tier_served_the_miss(tmp_path):
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="1", TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"),
               TORCH_TPU_WARMUP="0")
    tiers = []
    for run in range(2):
        path = tmp_path / f"run{run}.json"
        out = subprocess.run([sys.executable, "-c", _DISK_SCRIPT, str(path)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        expected = torch.exp(torch.full((5, 3), 2.0)) - 0.5
        torch.testing.assert_close(torch.tensor(_child_result(out.stdout)), expected)
        trace = _read_trace(path)
        tiers.append(sorted(a["tier"] for a in _args(trace, "tpu::compile")))
        assert sorted(a["cache"] for a in _args(trace, "tpu::launch")) == tiers[-1]
    assert tiers == [["compiled", "compiled"], ["disk", "disk"]]


def test_tensorboard_handler_and_other_threads(tmp_path):
    """The trace handler the reference's users pass writes the tpu's events;
    a launch on another thread is on that thread's lane."""
    import threading

    x = torch.randn(8, device="tpu")
    results = {}

    def other():
        results["other"] = (x * 3).cpu()

    with torch_tpu.eager_mode("DEFER_NEVER"):
        (x * 3).cpu()
        with profile(activities=BOTH,
                     on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path))) as prof:
            t = threading.Thread(target=other)
            t.start()
            t.join()
            mine = (x * 3).cpu()
    assert torch.equal(results["other"], mine)
    assert_same(x * 3, mine)
    launches = _named(prof, "tpu::launch")
    assert len(launches) == 2 and len(_device(prof)) == 2
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 1
    trace = _read_trace(files[0])
    assert len([e for e in trace if e.get("cat") == "kernel"]) == 2
    assert len({e["tid"] for e in trace if e.get("name") == "tpu::launch"}) == 2


_COLLECTIVE_SCRIPT = textwrap.dedent("""
    import datetime, json, sys, threading
    import torch, torch_tpu
    import torch.distributed as dist
    from torch.profiler import profile, ProfilerActivity
    from torch.testing._internal.distributed import multi_threaded_pg

    multi_threaded_pg._install_threaded_pg()  # ranks as threads, rank r on tpu:r
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store, world, out = dist.HashStore(), 2, [None, None]

    def rank_main(rank):
        dist.init_process_group("tpu_dist", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        x = torch.arange(6, dtype=torch.float32, device=f"tpu:{rank}") * (rank + 1)
        dist.all_reduce(x)
        out[rank] = x.cpu().tolist()
        dist.destroy_process_group()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    prof.export_chrome_trace(sys.argv[1])
    print("RESULT " + json.dumps({"out": out, "native": torch_tpu.metrics().get("collectives_native", 0)}))
""")


def test_native_collectives_launch_on_every_device(tmp_path):
    path = tmp_path / "collective.json"
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_WARMUP="0")
    done = subprocess.run([sys.executable, "-c", _COLLECTIVE_SCRIPT, str(path)], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = _child_result(done.stdout)
    expected = (torch.arange(6, dtype=torch.float32) * 3).tolist()  # rank 0's + rank 1's
    assert result["out"] == [expected, expected] and result["native"] == 2
    trace = _read_trace(path)
    launches = [a for a in _args(trace, "tpu::launch") if a["mode"] == "Collective"]
    assert sorted(a["device"] for a in launches) == ["tpu:0", "tpu:1"]
    assert {a["cache"] for a in launches} == {"compiled"}
    spans = [e for e in trace if e.get("cat") == "kernel" and e["name"].startswith("Collective ")]
    assert sorted(e["pid"] for e in spans) == [0, 1]
    assert all("all_reduce" in e["name"] for e in spans)
