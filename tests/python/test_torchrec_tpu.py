"""TorchRec's tpu embedding kernels (torchrec.experimental.torch_tpu, which
registers them with our torch_tpu._internal.pallas.jax_op) on tpu tensors,
against the same math in CPU PyTorch, in Strict and Fused Eager: the
TensorCore Pallas gather (TPUEmbeddingUnfused forward and backward), the
pooled lookups' backward kernels (padded, offset, batched offset) and the
pooled-embedding permute, and fbgemm's sparse permutes (a CPU round trip
in TorchRec's dispatcher). The pooled lookups' forward kernels are SparseCore
kernels (pltpu.get_tpu_info().sparse_core, tpu_sc): they need TPU hardware.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same

pytest.importorskip("jax", reason="JAX (the pallas extra, scripts/setup.sh) is not installed")
try:  # torchrec imports fbgemm_gpu, whose libraries fail to load for another torch build
    from torchrec.experimental.torch_tpu.modules.embedding_modules import TPUEmbeddingUnfused
    from torchrec.experimental.torch_tpu.pallas import impl  # noqa: F401 (registers the tpu kernels)
except (ImportError, OSError) as e:
    pytest.skip(f"torchrec (scripts/setup.sh) is not usable: {e}", allow_module_level=True)

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


@pytest.fixture(autouse=True, scope="module")
def tensorcore_lookup():
    # TorchRec's embedding_lookup picks its kernel from $LOOKUP_MODE when a
    # signature is first exported: v1_tpu is the TensorCore Pallas gather, the
    # default (v1_sc) the SparseCore one.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOKUP_MODE", "v1_tpu")
        yield


def _ids(n, num_rows, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, num_rows, (n,), generator=g, dtype=torch.int32)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _bag_weight_grad(grad_out, indices, offsets, num_rows, dim):
    """The table's gradient of a sum-pooled lookup (F.embedding_bag) on CPU;
    `offsets` ends with the number of ids, as TorchRec's do."""
    w = torch.zeros(num_rows, dim, requires_grad=True)
    F.embedding_bag(indices.long(), w, offsets.long(), mode="sum", include_last_offset=True).backward(grad_out)
    return w.grad


@pytest.mark.parametrize("mode", MODES)
def test_embedding_lookup_module_forward_backward_sgd_equal_cpu(mode):
    num_rows, dim = 40, 16
    w0, ids, grad = _randn(num_rows, dim, seed=0), _ids(24, num_rows, seed=1), _randn(24, dim, seed=2)
    with torch_tpu.eager_mode(mode):
        m = TPUEmbeddingUnfused(num_rows, dim, torch.device("tpu"), torch.float32)
        with torch.no_grad():
            m.weight.copy_(w0.to("tpu"))
        out = m(ids.to("tpu"))
        out.backward(grad.to("tpu"))
        weight_grad = m.weight.grad.clone()
        with torch.no_grad():
            m.weight.sub_(0.5 * m.weight.grad)
        stepped = m.weight.detach()
        out = out.detach()
    ref_w = w0.clone().requires_grad_()
    ref = F.embedding(ids.long(), ref_w)
    ref.backward(grad)
    assert_same(out, ref.detach())
    assert_same(weight_grad, ref_w.grad, atol=1e-6, rtol=1e-6)
    assert_same(stepped, w0 - 0.5 * ref_w.grad, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_pooled_lookup_backward_kernels_equal_embedding_bag(mode):
    num_rows, dim, pool = 30, 16, 4
    bags = 5
    grad = _randn(bags, dim, seed=3)
    padded_ids = _ids(bags * pool, num_rows, seed=4)
    offsets = torch.tensor([0, 3, 3, 9, 10, 14], dtype=torch.int32)  # an empty bag
    ids = _ids(14, num_rows, seed=5)
    with torch_tpu.eager_mode(mode):
        padded = torch.ops.torchrec.embedding_pooled_lookup_backward(
            grad.to("tpu"), padded_ids.to("tpu"), pool, num_rows, dim)
        offset = torch.ops.torchrec.embedding_pooled_lookup_offset_backward(
            grad.to("tpu"), ids.to("tpu"), offsets.to("tpu"), num_rows, dim)
    fixed = torch.arange(0, bags * pool + 1, pool, dtype=torch.int32)
    assert_same(padded, _bag_weight_grad(grad, padded_ids, fixed, num_rows, dim), atol=1e-6, rtol=1e-6)
    assert_same(offset, _bag_weight_grad(grad, ids, offsets, num_rows, dim), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_batched_pooled_lookup_backward_equals_embedding_bag_on_stacked_tables(mode):
    rows, dim = [12, 7], 16  # two tables stacked by rows; bags 0-2 read table 0, 3-4 table 1
    row_offsets = torch.tensor([0, 0, 0, 12, 12], dtype=torch.int32)
    offsets = torch.tensor([0, 2, 5, 6, 6, 9], dtype=torch.int32)
    ids = torch.cat([_ids(6, rows[0], seed=6), _ids(3, rows[1], seed=7)])
    grad = _randn(5, dim, seed=8)
    with torch_tpu.eager_mode(mode):
        out = torch.ops.torchrec.embedding_pooled_batched_lookup_offset_backward(
            grad.to("tpu"), ids.to("tpu"), offsets.to("tpu"), row_offsets.to("tpu"), sum(rows), dim)
    bag = torch.repeat_interleave(torch.arange(5), (offsets[1:] - offsets[:-1]).long())
    stacked_ids = ids + row_offsets[bag]
    assert_same(out, _bag_weight_grad(grad, stacked_ids, offsets, sum(rows), dim), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_permute_pooled_embs_forward_backward_equal_cpu(mode):
    dims = [3, 5, 8]  # three features' pooled columns, reordered 2, 0, 1
    offset_dims = torch.tensor([0, 3, 8, 16])
    permute = torch.tensor([2, 0, 1])
    x, grad = _randn(4, 16, seed=9), _randn(4, 16, seed=10)
    with torch_tpu.eager_mode(mode):
        xt = x.to("tpu").requires_grad_()
        out = torch.ops.torchrec.permute_pooled_embs(xt, offset_dims.to("tpu"), permute.to("tpu"))
        out.backward(grad.to("tpu"))
        out, x_grad = out.detach(), xt.grad
    xr = x.clone().requires_grad_()
    blocks = torch.split(xr, dims, dim=1)
    ref = torch.cat([blocks[i] for i in permute.tolist()], dim=1)
    ref.backward(grad)
    assert_same(out, ref.detach())
    assert_same(x_grad, xr.grad)


@pytest.mark.parametrize("mode", MODES)
def test_fbgemm_sparse_permutes_on_tpu_equal_cpu(mode):
    # TorchRec's dispatcher gives fbgemm's sparse-data ops tpu kernels that run
    # fbgemm's CPU kernels on copies.
    from torchrec.experimental.torch_tpu.pallas import dispatcher  # noqa: F401

    permute = torch.tensor([2, 0, 1], dtype=torch.int32)
    lengths = torch.tensor([2, 1, 3], dtype=torch.int32)
    values, weights = torch.arange(6, dtype=torch.int32), _randn(6, seed=13)
    with torch_tpu.eager_mode(mode):
        out = torch.ops.fbgemm.permute_1D_sparse_data(
            permute.to("tpu"), lengths.to("tpu"), values.to("tpu"), weights.to("tpu"), None)
        inverse = torch.ops.fbgemm.invert_permute(permute.to("tpu"))
    assert_same(list(out), list(torch.ops.fbgemm.permute_1D_sparse_data(permute, lengths, values, weights, None)))
    assert_same(inverse, torch.ops.fbgemm.invert_permute(permute))

def test_sparse_core_pooled_lookup_needs_tpu_hardware():
    # SparseCore kernels (tpu_sc) read the chip's SparseCore layout while
    # tracing: off TPU hardware the export fails, and jax_op's error names the
    # kernel. (JAX's own reason depends on what ran before: "Unsupported TPU
    # device kind: cpu", or a later tracing error once Helion's interpret
    # mode has registered a TPU description for the CPU.)
    with pytest.raises(ValueError, match=r"jax_op torchrec_pallas::embedding_pooled_lookup_offset"
                                         r"\S*: jax.export of the JAX function .* failed"):
        torch.ops.torchrec.embedding_pooled_lookup_offset(
            _ids(4, 10, seed=11).to("tpu"), torch.tensor([0, 2, 4], dtype=torch.int32).to("tpu"),
            _randn(10, 16, seed=12).to("tpu"), 16)
