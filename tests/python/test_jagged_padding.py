"""torch.tpu.ops.align_jagged_to_multiple / strip_jagged_padding against the
same calls on CPU jagged nested tensors, in every eager mode."""
import pytest
import torch

import torch_tpu

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]


def jagged(device, lengths=(3, 5, 2), dim=4, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, dim, generator=g).to(dtype) for n in lengths]
    return torch.nested.nested_tensor([p.to(device) for p in parts], layout=torch.jagged)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("multiple,fill", [(8, 0.0), (4, -1.5), (16, 2.0), (5, 0.0)])
def test_align_then_strip_matches_cpu(mode, multiple, fill):
    with torch_tpu.eager_mode(mode):
        outs = {}
        for device in ("cpu", "tpu"):
            nt = jagged(device)
            padded = torch.tpu.ops.align_jagged_to_multiple(nt, multiple, fill)
            stripped = torch.tpu.ops.strip_jagged_padding(padded)
            known = torch.tpu.ops.strip_jagged_padding(padded, valid_tokens=10)
            outs[device] = (padded, stripped, known, nt)
        (pc, sc, kc, ntc), (pt, st, kt, ntt) = outs["cpu"], outs["tpu"]
        assert pt.values().shape == pc.values().shape
        assert pt.values().shape[0] % multiple == 0
        torch.testing.assert_close(pt.values().cpu(), pc.values())
        torch.testing.assert_close(pt.offsets().cpu(), pc.offsets())
        for a, b in ((st, sc), (kt, kc)):
            assert a.values().shape == b.values().shape == ntc.values().shape
            torch.testing.assert_close(a.values().cpu(), b.values())
        # Each sequence keeps its tokens through the padding and back; the
        # padding rows hold the fill value.
        for a, b in zip(st.unbind(), ntc.unbind()):
            torch.testing.assert_close(a.cpu(), b)
        pad = pt.values()[ntc.values().shape[0]:].cpu()
        torch.testing.assert_close(pad, torch.full_like(pad, fill))


def test_aligned_input_is_returned_unchanged():
    nt = jagged("tpu", lengths=(4, 4))
    assert torch.tpu.ops.align_jagged_to_multiple(nt, 8) is nt
    assert torch.tpu.ops.strip_jagged_padding(nt) is nt


def test_bad_inputs():
    with pytest.raises(TypeError, match="jagged nested tensor"):
        torch.tpu.ops.align_jagged_to_multiple(torch.ones(3, device="tpu"))
    with pytest.raises(ValueError, match="positive int"):
        torch.tpu.ops.align_jagged_to_multiple(jagged("tpu"), 0)
    with pytest.raises(ValueError, match="valid_tokens is 11"):
        torch.tpu.ops.strip_jagged_padding(jagged("tpu"), valid_tokens=11)
