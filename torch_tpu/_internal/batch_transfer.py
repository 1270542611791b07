"""The reference's `torch_tpu._internal.batch_transfer`: copies of row ranges
(along dimension 0) between given host and tpu tensors, many at once.

For each i, `dst_arrs[i][dst_offsets_major_dim[i] : + copy_sizes_major_dim[i]]`
takes `src_arrs[i][src_offsets_major_dim[i] : + copy_sizes_major_dim[i]]`.
Sources and destinations have the same dtype and the same sizes after the
first dimension; every argument is checked before any copy starts.

- `batch_transfer_h2d(...)`: CPU sources, tpu destinations; issues every
  upload before waiting for any and returns a `TransferFuture`. The
  destinations can be used at once (ops on them wait for the data); the
  sources must stay unchanged until the future's `wait()`.
- `batch_transfer_d2h(...)`: tpu sources, CPU destinations; runs the pending
  program once, issues every download, returns a `TransferFuture`; the
  destinations hold the data after `wait()`.
- `batch_transfer_h2d_sync` / `batch_transfer_d2h_sync`: the same, waited.
- `await_all(futures)`: waits for each (all of them, even after a failure)
  and raises the first error.

The C++ side is csrc/aten/batch_transfer.h.
"""
from .. import _C

__all__ = [
    "TransferFuture", "batch_transfer_d2h", "batch_transfer_h2d", "batch_transfer_d2h_sync",
    "batch_transfer_h2d_sync", "await_all",
]

TransferFuture = _C.TransferFuture
batch_transfer_h2d = _C._batch_transfer_h2d
batch_transfer_d2h = _C._batch_transfer_d2h
await_all = _C._await_all


def batch_transfer_h2d_sync(src_arrs, dst_arrs, src_offsets_major_dim, dst_offsets_major_dim,
                            copy_sizes_major_dim) -> None:
    batch_transfer_h2d(src_arrs, dst_arrs, src_offsets_major_dim, dst_offsets_major_dim,
                       copy_sizes_major_dim).wait()


def batch_transfer_d2h_sync(src_arrs, dst_arrs, src_offsets_major_dim, dst_offsets_major_dim,
                            copy_sizes_major_dim) -> None:
    batch_transfer_d2h(src_arrs, dst_arrs, src_offsets_major_dim, dst_offsets_major_dim,
                       copy_sizes_major_dim).wait()
