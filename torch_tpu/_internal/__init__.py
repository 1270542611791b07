"""The reference's `torch_tpu._internal` names that code outside it imports:
`batch_transfer` (batched host<->device copies). Prefer the public
`torch.tpu.batch_to_device` / `torch.tpu.batch_to_host`."""
