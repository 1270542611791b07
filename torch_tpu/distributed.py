"""The `tpu_dist` process-group backend (C++: csrc/distributed).

Registered when torch_tpu is imported (also through the `torch.backends`
autoload entry point), so that `init_process_group("tpu_dist")`,
`init_process_group()` with tpu tensors and
`init_process_group(backend="cpu:gloo,tpu:tpu_dist")` work. `tpu` is an
alias of `tpu_dist`.

Transports, chosen per group (`TORCH_TPU_DIST_TRANSPORT=auto|host|native`):
device-native when every rank is a thread of this process on its own tpu
device (one StableHLO collective in a PJRT program run across the ranks'
devices; sends and receives as a `collective_permute`; also in groups split
from such a group), else host-staged: collectives copy tpu tensors to the host, run
on a Gloo process group made here on the same store, rank and size (under
its own key prefix), and copy the results back in place. `torch_tpu.metrics()`
counts them per transport (`collectives_native`, `collective_bytes_native`,
`collectives_host_staged`, `collective_bytes_host_staged`).
Before each collective the ranks exchange its signature (collective, dtype,
sizes, root, reduce op, all-to-all splits) and raise a DistBackendError
naming every rank's call when they differ; `TORCH_TPU_DIST_CHECKS=0` skips
that exchange. The first multi-process group hands its store to the PJRT
client (its key-value store) when the plugin uses one (`_plugin.uses_kv_store`).
"""
import os

from . import _C

BACKEND = "tpu_dist"
ALIAS = "tpu"


def _host_group(store, rank, size, timeout_s):
    """The Gloo process group a tpu_dist group stages through, on its own
    key prefix of the group's store. Also called (from C++) for each group
    split from another."""
    import datetime

    import torch.distributed as dist

    return dist.ProcessGroupGloo(dist.PrefixStore("host_staged/", store), rank, size,
                                 datetime.timedelta(seconds=timeout_s))


_bound = False
_store_shared = False


def _share_launcher_store():
    """Under torchrun the agent's store exists before the workers start, so
    the PJRT client gets its key-value store whatever the script touches
    first (a tpu tensor before init_process_group included): called at
    import. Elsewhere the first process group hands over its store."""
    global _store_shared
    env = os.environ
    if (_store_shared or env.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            or int(env.get("WORLD_SIZE", "1")) < 2 or "MASTER_ADDR" not in env):
        return
    from . import _plugin

    if not _plugin.uses_kv_store() or _C._is_initialized():
        return
    import datetime

    import torch.distributed as dist

    if not dist.is_available():
        return
    # The prefix init_process_group's env:// store takes there, then ours.
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env["WORLD_SIZE"]),
                          False, datetime.timedelta(seconds=300))
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    _C._share_store_with_client(
        dist.PrefixStore(f"/worker/attempt_{attempt}/torch_tpu/pjrt_client", store))
    _store_shared = True


def _share_store_with_client(store, size):
    """The first group of a multi-process job hands its c10d store (under
    its own prefix) to the PJRT client, which is created at the first use of
    a tpu device and may need it to span processes (libtpu on a multi-host
    slice). Not for plugins that ignore it (`_plugin.uses_kv_store`)."""
    global _store_shared
    if _store_shared or size < 2:
        return
    _store_shared = True
    from . import _plugin

    if not _plugin.uses_kv_store():
        return
    if _C._is_initialized():
        import warnings

        warnings.warn("tpu_dist: the PJRT client was created before init_process_group, so it "
                      "has no key-value store; a plugin that spans processes may fail. Call "
                      "init_process_group before the first use of a tpu device.")
        return
    import torch.distributed as dist

    _C._share_store_with_client(dist.PrefixStore("torch_tpu/pjrt_client", store))


def _bind_local_device():
    """Under a launcher (torchrun sets LOCAL_RANK), the first group made in a
    process picks its device: tpu:LOCAL_RANK when this process's client shows
    more than LOCAL_RANK devices, else tpu:0 (one client, one device per
    process). A device the script chose before (not tpu:0) is kept."""
    global _bound
    if _bound:
        return
    _bound = True
    local = os.environ.get("LOCAL_RANK")
    if local is None or not local.isdigit():
        return
    from . import device

    if device.current_device() == 0 and int(local) < device.device_count():
        device.set_device(int(local))


def _create_backend(opts, backend_options=None):
    """The `extended_api` creator c10d calls for each new group on tpu."""
    _share_store_with_client(opts.store, opts.group_size)  # before anything makes the client
    _bind_local_device()
    timeout_s = opts.timeout.total_seconds()
    host = _host_group(opts.store, opts.group_rank, opts.group_size, timeout_s)
    # Ranks first agree on each collective's signature (one small host
    # all-gather), so a mismatch raises instead of aborting inside Gloo.
    checks = os.environ.get("TORCH_TPU_DIST_CHECKS", "1") != "0"
    transport = os.environ.get("TORCH_TPU_DIST_TRANSPORT", "auto")
    return _C._tpu_dist_backend(opts.group_rank, opts.group_size, host, _host_group,
                                timeout_s, checks, opts.store, transport)


def register() -> bool:
    """Registers `tpu_dist` (and its alias `tpu`) with torch.distributed and
    makes it the default backend for the `tpu` device. Idempotent; False
    when this torch has no distributed support."""
    import torch.distributed as dist

    if not dist.is_available() or not hasattr(dist, "ProcessGroupGloo"):
        return False
    Backend = dist.Backend
    for name in (BACKEND, ALIAS):
        if name.upper() not in Backend._plugins:
            # devices must be a list: a string is iterated letter by letter.
            Backend.register_backend(name, _create_backend, extended_api=True, devices=["tpu"])
    Backend.default_device_backend_map["tpu"] = BACKEND
    return True


__all__ = ["BACKEND", "ALIAS", "register"]
