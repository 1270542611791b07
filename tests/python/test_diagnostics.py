"""Fused Eager diagnostics: deferred-program errors name their ops and lines;
a call site that keeps compiling warns with the cause."""
import warnings

import pytest
import torch

import torch_tpu


def test_deferred_program_error_names_ops_and_lines():
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        x = torch.ones(2 ** 36, device="tpu")  # 256 GiB: the plugin refuses at run time
        y = x * 2
        with pytest.raises(RuntimeError) as info:
            y[:2].cpu()  # y stays alive, so the program must produce all of it
    message = str(info.value)
    assert "deferred program" in message and "TPU_LAUNCH_BLOCKING" in message, message
    assert "test_diagnostics.py" in message, message
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]  # still working


def test_recompilation_warning_names_changed_dimension_once_per_site():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(3, 24):
            (torch.ones(n, 5, device="tpu") * 3).cpu()  # one site, new shapes each time
    messages = [str(w.message) for w in caught if "has compiled" in str(w.message)]
    assert len(messages) == 1, messages  # not again at the 8th and 16th run
    assert "tensor types changed" in messages[0] and "test_diagnostics.py" in messages[0]
    # It names the types that changed, not every input's, and the dimension:
    # the tensor's own (XLA:CPU's programs return shaped results, not the
    # storages' flat arrays).
    assert "tensor<5x5xf32> became tensor<6x5xf32>" in messages[0], messages[0]
    assert "the size that varies is dimension 0 of" in messages[0] and "(5 became 6)" in messages[0], messages[0]
    assert "torch.tpu.mark_dynamic" in messages[0], messages[0]
    assert len(messages[0]) < 600, messages[0]


def test_one_run_of_a_line_compiling_several_shapes_does_not_warn():
    torch.manual_seed(0)
    widths = [3, 5, 7, 9, 11]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]).to("tpu")
    x = torch.randn(2, 3, device="tpu")
    opt = torch.optim.AdamW(model.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(x).sum().backward()  # one line: four addmm shapes, their backward mm shapes
        opt.step()  # one line: optimizer state for eight shapes, through many lines of adam.py
        torch.tpu.synchronize()
    assert not [w for w in caught if "has compiled" in str(w.message)]
    assert model[0].weight.grad is not None


def test_autocast_training_warm_up_does_not_warn():
    # Under bf16 autocast the backward of one line interleaves its programs
    # with site-less copies (the f32 gradients of bf16 casts): still one run.
    torch.manual_seed(0)
    widths = [3, 5, 7, 9, 11, 13]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]).to("tpu")
    x = torch.randn(2, 3, device="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with torch.autocast("tpu", dtype=torch.bfloat16):
                out = model(x).float().sum()
            out.backward()
        torch.tpu.synchronize()
    assert not [w for w in caught if "has compiled" in str(w.message)]
    assert model[0].weight.grad.dtype == torch.float32


def test_recompiling_after_a_cache_clear_is_not_a_recompilation():
    def step():
        (torch.ones(4, 6, device="tpu") * 5).cpu()  # one site, one program

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            torch_tpu.clear_cache()
            step()
    assert not [w for w in caught if "has compiled" in str(w.message)]
