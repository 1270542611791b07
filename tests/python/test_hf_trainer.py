"""The Hugging Face Trainer on tpu, unchanged: it picks tpu:0 itself, and with
ACCELERATE_TORCH_DEVICE=tpu (accelerate knows no tpu device) its accelerator
places the model, batches and autocast there. A tiny random-weight causal LM
trains a few steps; the losses match the same run with use_cpu=True."""
import os

import pytest
import torch

pytest.importorskip("accelerate", reason="the Trainer needs accelerate (scripts/setup.sh installs it)")
os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (16, 12), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(tmp_path, monkeypatch, use_cpu, bf16):
    if use_cpu:
        monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "tpu")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("cpu" if use_cpu else "tpu")), per_device_train_batch_size=8,
        max_steps=4, learning_rate=3e-3, logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=use_cpu, bf16=bf16, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    devices = {args.device.type, trainer.accelerator.device.type,
               next(trainer.model.parameters()).device.type}
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return devices, losses


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16_autocast"])
def test_trainer_picks_tpu_and_matches_cpu(tmp_path, monkeypatch, bf16):
    devices, losses = train(tmp_path, monkeypatch, use_cpu=False, bf16=bf16)
    cpu_devices, cpu_losses = train(tmp_path, monkeypatch, use_cpu=True, bf16=bf16)
    assert devices == {"tpu"} and cpu_devices == {"cpu"}
    assert len(losses) == len(cpu_losses) == 4
    # fp32 matmuls use TPU numerics (bf16 operands) by default; bf16 autocast
    # rounds activations on both sides, with CPU's and tpu's own policies.
    tol = 2e-2 if bf16 else 2e-3
    assert losses == pytest.approx(cpu_losses, rel=tol), (losses, cpu_losses)
    assert losses[-1] < losses[0]  # it trained
