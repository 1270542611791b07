"""Entry point for launchers that load the backend by name (Ray Train's
TorchTPU support imports this module and calls `load()`)."""


def load() -> None:
    """Imports torch_tpu (the `tpu` device) and registers the `tpu_dist`
    process-group backend."""
    from . import distributed

    distributed.register()
