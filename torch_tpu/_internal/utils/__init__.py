"""The reference's `torch_tpu._internal.utils` names code outside imports:
`hardware.get_tpu_device_name` (Helion's Pallas backend asks it)."""
