"""What the tpu device is, for code that tunes kernels to a TPU generation
(Helion's Pallas backend asks `get_tpu_device_name`)."""
from ... import _C

# The generation Pallas kernels are laid out for when the plugin is not a
# TPU. Pallas then runs in interpret mode (plain StableHLO on XLA:CPU or
# XLA:GPU), so the name only sets the tiling and memory limits the kernel's
# author (or Helion) plans blocks for, not where it runs. TPU7x is what
# Helion's own interpret mode and JAX's Pallas TPU interpreter assume.
INTERPRET_DEVICE_NAME = "TPU7x"


def get_tpu_device_name() -> str:
    """The PJRT device kind ('TPU v5 lite', 'TPU7x', ...) where the plugin is
    a TPU; elsewhere `INTERPRET_DEVICE_NAME`, the TPU generation that Pallas
    kernels run in interpret mode are planned for (not this device's name:
    `torch.tpu.get_device_name()` gives that)."""
    platform, _, kind, _ = _C._platform()
    if platform.lower() == "tpu":
        return kind
    return INTERPRET_DEVICE_NAME
