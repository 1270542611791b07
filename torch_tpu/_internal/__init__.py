"""The reference's `torch_tpu._internal` names that code outside it imports:
`batch_transfer` (batched host<->device copies; prefer the public
`torch.tpu.batch_to_device` / `torch.tpu.batch_to_host`), `compile`
(`async_compile`: ahead-of-time warm-up of a list of shapes), `pallas` and
`utils` (what Helion and TorchRec import)."""
