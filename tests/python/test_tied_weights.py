"""Parameters shared between modules stay one Parameter on tpu: `.to()`,
`.tpu()`, `to_empty`, `load_state_dict`, and Hugging Face models with tied
input and output embeddings trained a few steps against CPU."""
import pytest
import torch
import torch.nn as nn

import torch_tpu


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.emb(x))


@pytest.mark.parametrize("move", ["to", "to_device", "tpu", "to_empty"])
def test_moving_a_module_keeps_shared_parameters_one_object(move):
    m = Tied()
    original = m.emb.weight
    if move == "to":
        m.to("tpu")
    elif move == "to_device":
        m.to(device=torch.device("tpu", 0), dtype=torch.float32)
    elif move == "tpu":
        m.tpu()
    else:
        m.to_empty(device="tpu")
    assert m.emb.weight is m.out.weight
    assert m.emb.weight is original  # the Parameter object itself moved
    assert m.emb.weight.device.type == "tpu"
    assert len(list(m.parameters())) == 1


def test_load_state_dict_and_moving_back_keep_the_tie():
    m = Tied().to("tpu")
    src = Tied()
    m.load_state_dict(src.state_dict())
    assert m.emb.weight is m.out.weight
    torch.testing.assert_close(m.emb.weight.cpu(), src.emb.weight)
    m.cpu()
    assert m.emb.weight is m.out.weight and m.emb.weight.device.type == "cpu"


def test_a_parameter_with_a_gradient_moves_with_it():
    m = Tied()
    m(torch.tensor([1, 2])).sum().backward()
    grad = m.emb.weight.grad.clone()
    m.to("tpu")
    assert m.emb.weight.grad.device.type == "tpu"
    torch.testing.assert_close(m.emb.weight.grad.cpu(), grad)


def _train(model, device, batches, steps=3):
    model.to(device)
    # SGD: Adam would magnify float rounding in near-zero gradients.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        out = model(**{k: v.to(device) for k, v in batches[step].items()})
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _check_training(make, batches, shared):
    cpu_model, tpu_model = make(), make()
    tpu_model.load_state_dict(cpu_model.state_dict())
    expected = _train(cpu_model, "cpu", batches)
    with torch.tpu.precision("float32"):
        actual = _train(tpu_model, "tpu", batches)
    a, b = shared
    assert tpu_model.get_parameter(a) is tpu_model.get_parameter(b)
    for k, v in expected.items():
        torch.testing.assert_close(actual[k], v, rtol=2e-4, atol=2e-5, msg=k)


def test_tiny_gpt2_trains_like_cpu_with_its_embeddings_tied():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)

    def make():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(cfg)

    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(3):
        ids = torch.randint(0, 64, (2, 12), generator=g)
        batches.append({"input_ids": ids, "labels": ids})
    _check_training(make, batches, ("transformer.wte.weight", "lm_head.weight"))


def test_tiny_t5_trains_like_cpu_with_its_embeddings_tied():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_heads=4, dropout_rate=0.0, tie_word_embeddings=True,
                                decoder_start_token_id=0)

    def make():
        torch.manual_seed(0)
        return transformers.T5ForConditionalGeneration(cfg)

    g = torch.Generator().manual_seed(2)
    batches = []
    for _ in range(3):
        batches.append({"input_ids": torch.randint(1, 64, (2, 10), generator=g),
                        "labels": torch.randint(1, 64, (2, 6), generator=g)})
    _check_training(make, batches, ("shared.weight", "lm_head.weight"))
