"""Tiered compilation (XLA:CPU): a new program is compiled quickly (LLVM's
optimizations off), and once it is hot again, optimized, on a background
thread; the optimized executable replaces the quick one and computes the
same values up to the last bit (an FMA), and exactly the same under
torch.use_deterministic_algorithms, which compiles optimized at once."""
import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.skipif(torch_tpu._C._platform()[0] != "cpu",
                                reason="tiered compilation is for XLA:CPU only")


@pytest.fixture(autouse=True)
def tiered():
    # Every program (TORCH_TPU_TIERED_COMPILE=1) for these tests only; by
    # default only recompilations compile quickly.
    was = torch_tpu._C._tiered_compile()
    torch_tpu._C._set_tiered_compile("all")
    yield
    torch_tpu._C._set_tiered_compile(was)


def _step(x, w, layers=24):
    # Long enough to be tiered (short programs compile optimized at once),
    # and without a repeating op sequence (Fused Eager would cut it there).
    rng = random.Random(0)
    h = x
    for _ in range(layers):
        act = rng.choice([torch.tanh, torch.sin, torch.sigmoid, torch.cos])
        h = act(h @ w * 0.1) + h * 0.5
    return h.sum(0) + x.mean()


def test_short_program_compiles_optimized_at_once():
    torch_tpu.clear_cache()
    torch_tpu.reset_metrics()
    x = torch.arange(10.0).to("tpu")
    for _ in range(4):
        (x.sin() * 3).cpu()
    torch_tpu._C._drain_background_compiles()
    assert torch_tpu.metrics().get("tier_upgrades", 0) == 0


def test_hot_program_is_upgraded_in_the_background_with_the_same_values():
    g = torch.Generator().manual_seed(0)
    x_cpu, w_cpu = torch.randn(16, 24, generator=g), torch.randn(24, 24, generator=g)
    x, w = x_cpu.to("tpu"), w_cpu.to("tpu")
    torch_tpu.clear_cache()
    torch_tpu.reset_metrics()
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        first = _step(x, w).cpu()  # compiled quickly
        second = _step(x, w).cpu()  # first hit
        third = _step(x, w).cpu()  # second hit: queued for the optimizing compile
        torch_tpu._C._drain_background_compiles()
        fourth = _step(x, w).cpu()  # the optimized executable
    metrics = torch_tpu.metrics()
    assert metrics.get("tier_upgrades", 0) >= 1, metrics
    assert metrics.get("compiles") == 1, metrics  # the background compile is not a stall
    for r in (second, third, fourth):
        torch.testing.assert_close(r, first, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(first, _step(x_cpu, w_cpu), atol=1e-5, rtol=1e-5)


def test_deterministic_algorithms_compile_optimized_at_once():
    x = torch.linspace(-2, 2, 64).reshape(8, 8).to("tpu")
    torch_tpu.clear_cache()
    torch_tpu.reset_metrics()
    torch.use_deterministic_algorithms(True)
    try:
        with torch_tpu.eager_mode("DEFER_AND_FUSE"):
            results = [_step(x, x).cpu() for _ in range(4)]
        torch_tpu._C._drain_background_compiles()
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch_tpu.metrics().get("tier_upgrades", 0) == 0
    for r in results[1:]:
        assert torch.equal(r, results[0])


def test_program_run_once_is_not_compiled_again():
    torch_tpu.clear_cache()
    torch_tpu.reset_metrics()
    x = torch.arange(16.0).reshape(4, 4).to("tpu")
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        _step(x, x).cpu()
    torch_tpu._C._drain_background_compiles()
    assert torch_tpu.metrics().get("tier_upgrades", 0) == 0


def test_exit_while_an_optimizing_compile_runs_is_clean(tmp_path):
    # The interpreter exits right after queuing upgrades: the running compile
    # finishes, the queued ones are dropped, the process ends normally.
    script = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_eager_mode("DEFER_AND_FUSE")
        x = torch.randn(16, 16).to("tpu")
        def deep(k):
            h = x
            for i in range(24 + k):
                act = (torch.tanh, torch.sin, torch.cos)[(i * i + k) % 3]
                h = act(h @ x * 0.01) + h
            return h.sum().cpu()
        for k in range(3):
            f = lambda: deep(k)
            for _ in range(3):
                f()
        print("done", torch_tpu.metrics().get("compiles"))
    """)
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", TORCH_TPU_TIERED_COMPILE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done" in proc.stdout


def test_quick_and_optimized_executables_are_reused_from_disk(tmp_path):
    script = textwrap.dedent("""
        import random, sys, torch, torch_tpu
        torch_tpu.set_eager_mode("DEFER_AND_FUSE")
        x = torch.arange(12.0).reshape(3, 4).to("tpu")
        runs = int(sys.argv[1])
        for _ in range(runs):
            rng = random.Random(0)  # one op sequence, not periodic: one program
            h = x
            for _ in range(24):
                act = rng.choice([torch.tanh, torch.sin, torch.sigmoid, torch.cos])
                h = act(h * 2 + h.sum() * 0.01)
            v = h.cpu()
        torch_tpu._C._drain_background_compiles()
        m = torch_tpu.metrics()
        print(m.get("compiles", 0), m.get("cache_disk_hits", 0), m.get("tier_upgrades", 0))
    """)
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="1", TORCH_TPU_CACHE_DIR=str(tmp_path),
               TORCH_TPU_TIERED_COMPILE="1")

    def run(runs):
        proc = subprocess.run([sys.executable, "-c", script, str(runs)], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [float(v) for v in proc.stdout.split()[-3:]]

    # Run once: the quick executable goes to disk; the next process loads it.
    assert run(1)[:2] == [1, 0]
    compiles, disk_hits, upgrades = run(3)
    assert (compiles, disk_hits, upgrades) == (0, 1, 1)
    # Upgraded, the optimized executable is on disk too and is found first.
    assert run(1)[:2] == [0, 1]


RECOMPILES = textwrap.dedent("""
    import random, torch, torch_tpu
    torch_tpu.set_eager_mode("DEFER_AND_FUSE")

    def step(x):  # one site, shapes that vary: each length a new program
        rng = random.Random(0)  # one op sequence, not periodic: one program
        h = x
        for _ in range(32):
            act = rng.choice([torch.tanh, torch.sin, torch.sigmoid, torch.cos])
            h = act(h * 2 + h.sum(0) * 0.01)
        return h.sum(-1)

    out = []
    for n in (5, 6, 7):
        x = torch.linspace(-1, 1, n * 8).reshape(n, 8)
        got = step(x.to("tpu")).cpu()
        want = step(x)
        out.append(float((got - want).abs().max() / want.abs().max()))
    m = torch_tpu.metrics()
    print(torch_tpu._C._tiered_compile(), int(m.get("compiles", 0)),
          int(m.get("quick_compiles", 0)), max(out))
""")


@pytest.mark.parametrize("setting,want", [("recompiles", ("recompiles", 3, 2)),
                                          (None, ("recompiles", 3, 2)), ("0", ("off", 3, 0)),
                                          ("off", ("off", 3, 0)), ("all", ("all", 3, 3))])
def test_reshaped_recompilations_compile_quickly(setting, want):
    """By default (or =recompiles) a site's first program compiles optimized
    and the programs it compiles after that for other shapes quickly; 0/off
    compiles every program optimized, 1/all every program quickly."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    env.pop("TORCH_TPU_TIERED_COMPILE", None)
    if setting is not None:
        env["TORCH_TPU_TIERED_COMPILE"] = setting
    proc = subprocess.run([sys.executable, "-c", RECOMPILES], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tiering, compiles, quick, err = proc.stdout.split()[-4:]
    assert (tiering, int(compiles), int(quick)) == want
    assert float(err) < 1e-5  # quick or optimized, the values are CPU's (to the last bits)


NEW_OPS_AT_ONE_SITE = textwrap.dedent("""
    import random, torch, torch_tpu
    torch_tpu.set_eager_mode("DEFER_AND_FUSE")
    x = torch.linspace(-1, 1, 64).reshape(8, 8)

    def step(x, seed):  # one site; each seed records another op sequence
        rng = random.Random(seed)
        h = x
        for _ in range(32):
            h = rng.choice([torch.tanh, torch.sin, torch.sigmoid, torch.cos])(h * 2 + 0.5)
        return h.sum(-1)

    for seed in range(3):
        got = step(x.to("tpu"), seed).cpu()
        assert torch.allclose(got, step(x, seed), rtol=1e-5, atol=1e-6)
    m = torch_tpu.metrics()
    print(int(m.get("compiles", 0)), int(m.get("quick_compiles", 0)))
""")


def test_new_op_sequence_at_a_site_compiles_optimized():
    """A warm-up program and a loop's steady program recorded at the same
    line differ in their ops: the steady one is not a reshaped recompilation
    and must run optimized code at once (it used to run quick code, 4x
    slower, until its upgrade landed)."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    env.pop("TORCH_TPU_TIERED_COMPILE", None)
    proc = subprocess.run([sys.executable, "-c", NEW_OPS_AT_ONE_SITE], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["3", "0"]


STRICT_OP_AT_ONE_SITE = textwrap.dedent("""
    import sys, torch, torch_tpu
    torch_tpu.set_eager_mode(sys.argv[1])
    conv = torch.nn.Conv3d(4, 4, 3, padding=1, groups=4)  # one op, 27 taps: a long program
    tpu_conv = torch.nn.Conv3d(4, 4, 3, padding=1, groups=4).to("tpu")
    tpu_conv.load_state_dict(conv.state_dict())

    def layer(m, x):  # one site, three shapes
        return m(x)

    with torch.no_grad(), torch.tpu.precision("highest"):
        for n in (4, 5, 6):
            x = torch.linspace(-1, 1, 2 * 4 * n ** 3).reshape(2, 4, n, n, n)
            got = layer(tpu_conv, x.to("tpu")).cpu()
            assert torch.allclose(got, layer(conv, x), rtol=1e-5, atol=1e-5)
    m = torch_tpu.metrics()
    print(int(m.get("compiles", 0)), int(m.get("quick_compiles", 0)))
""")


@pytest.mark.parametrize("mode,quick", [("DEFER_NEVER", 0), ("DEFER_AND_FUSE", 2)])
def test_strict_op_compiles_optimized_at_a_site_that_saw_other_shapes(mode, quick):
    """In Strict each op is its own program, which compiles fast either way:
    a reshaped recompilation of one (a conv layer's line over three shapes)
    compiles optimized, while quick code ran a 3-D depthwise convolution 16x
    slower until its upgrade landed. Fused Eager's programs at the same site
    still compile quickly (the control: the site is a reshaped one)."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    env.pop("TORCH_TPU_TIERED_COMPILE", None)
    proc = subprocess.run([sys.executable, "-c", STRICT_OP_AT_ONE_SITE, mode],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    compiles, quick_compiles = map(int, proc.stdout.split()[-2:])
    assert compiles >= 3 and quick_compiles == quick, (compiles, quick_compiles)


def test_bad_tiering_environment_value_is_a_clear_error():
    env = dict(os.environ, TORCH_TPU_TIERED_COMPILE="sometimes")
    code = ("import torch, torch_tpu\n"
            "try:\n    torch.ones(2, device='tpu')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TORCH_TPU_TIERED_COMPILE" in proc.stdout and "'sometimes'" in proc.stdout, proc.stdout


def test_tiering_setting_is_checked():
    with pytest.raises(ValueError, match="'off', 'recompiles' or 'all'"):
        torch_tpu._C._set_tiered_compile("sometimes")


BACKGROUND_NICE = textwrap.dedent("""
    import os, random, torch, torch_tpu
    torch_tpu.set_eager_mode("DEFER_AND_FUSE")
    x = torch.linspace(-1, 1, 64, device="tpu")
    for _ in range(4):  # the second hit queues the upgrade
        rng = random.Random(0)  # not periodic: one program past Cache::kTierMinBytes
        h = x
        for _ in range(32):
            h = rng.choice([torch.tanh, torch.sin, torch.sigmoid, torch.cos])(h * 2 + 0.5)
        h.cpu()
    torch_tpu._C._drain_background_compiles()
    nice = [int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16])
            for t in os.listdir("/proc/self/task")]
    print(int(torch_tpu.metrics().get("tier_upgrades", 0)), max(nice))
""")


def test_background_upgrades_run_below_the_recording_thread():
    """The optimizing compiles take only what the user's threads leave: the
    worker thread runs at nice 10."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", TORCH_TPU_TIERED_COMPILE="all")
    proc = subprocess.run([sys.executable, "-c", BACKGROUND_NICE], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    upgrades, nice = proc.stdout.split()[-2:]
    assert int(upgrades) >= 1 and int(nice) == 10, proc.stdout


FIRST_OPTIMIZER_STEP = textwrap.dedent("""
    import sys, torch, torch_tpu
    torch_tpu.set_eager_mode(sys.argv[1])

    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
        x = torch.linspace(-1, 1, 8 * 16).reshape(8, 16).to(device)
        compiles = []
        for _ in range(4):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == "tpu":
                torch.tpu.synchronize()
                compiles.append(int(torch_tpu.metrics().get("quick_compiles", 0)))
        return [p.detach().cpu() for p in model.parameters()], compiles

    with torch.tpu.precision("highest"):
        got, quick = run("tpu")
        for _ in range(2):  # more optimizers: their first step's program hit again
            run("tpu")
    want, _ = run("cpu")
    err = max(float((g - w).abs().max()) for g, w in zip(got, want))
    torch_tpu._C._drain_background_compiles()
    m = torch_tpu.metrics()
    print(*quick, int(m.get("tier_upgrades", 0)), err)
""")


@pytest.mark.parametrize("mode,tiering,want", [
    ("DEFER_NEVER", None, [1, 1, 1, 1]), ("DEFER_AND_FUSE", None, [1, 1, 1, 1]),
    ("DEFER_NEVER", "0", [0, 0, 0, 0]), ("DEFER_NEVER_AND_LAUNCH_BLOCKING", None, [0, 0, 0, 0])])
def test_an_optimizers_first_step_compiles_quickly(mode, tiering, want):
    """An optimizer's first step creates its state: that update program runs
    once, so Strict and Fused Eager compile it quickly (a cold quickstart
    MLP's first Strict step 0.55 -> 0.47 s) and never upgrades it, even when
    more optimizers run it again; the steady update from step 2 on
    compiles optimized. Debug Eager runs the step op by op, and tiering off
    compiles nothing quickly. The values are CPU's."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    env.pop("TORCH_TPU_TIERED_COMPILE", None)
    if tiering is not None:
        env["TORCH_TPU_TIERED_COMPILE"] = tiering
    proc = subprocess.run([sys.executable, "-c", FIRST_OPTIMIZER_STEP, mode],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    *quick, upgrades, err = proc.stdout.split()[-6:]
    assert [int(q) for q in quick] == want
    assert int(upgrades) == 0
    assert float(err) < 1e-5
