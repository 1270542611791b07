"""The Hugging Face architectures people download most, out of the box on
tpu: tiny random-weight configurations (no downloads) of 30 model classes —
encoders (BERT and its family), decoders (GPT-2 to Qwen 3), encoder-decoders
(T5, BART, Whisper), vision (ViT, CLIP, ResNet, ConvNeXt, Swin, SegFormer)
and speech (Wav2Vec2) — in inference, moved with `.to("tpu")` and nothing
else. Every output (logits, hidden states, encoder states, image and text
embeddings) equals CPU eager's. Fused Eager, the mode that records whole
forwards; float32 at "highest" precision so the comparison is tight."""
import warnings

import pytest
import torch

import torch_tpu

T = pytest.importorskip("transformers")

H = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)


def text(batch=2, length=12, vocab=100):
    """Token ids with a padding mask (the second sequence ends in 3 pads)."""
    ids = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, -3:] = 0
    return dict(input_ids=ids, attention_mask=mask)


def pixels(batch=2, size=32):
    return dict(pixel_values=torch.randn(batch, 3, size, size,
                                         generator=torch.Generator().manual_seed(1)))


def decoder_ids():
    return dict(decoder_input_ids=torch.tensor([[1, 5, 6, 7, 9], [1, 7, 8, 4, 3]]))


MODELS = {
    # encoders
    "bert": lambda: (T.BertForMaskedLM(T.BertConfig(vocab_size=100, **H)), text()),
    "roberta": lambda: (T.RobertaForMaskedLM(T.RobertaConfig(vocab_size=100, **H)), text()),
    "distilbert": lambda: (T.DistilBertForSequenceClassification(T.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64)), text()),
    "xlm_roberta": lambda: (T.XLMRobertaModel(T.XLMRobertaConfig(vocab_size=100, **H)), text()),
    "albert": lambda: (T.AlbertForMaskedLM(T.AlbertConfig(vocab_size=100, embedding_size=16, **H)),
                       text()),
    "electra": lambda: (T.ElectraForPreTraining(
        T.ElectraConfig(vocab_size=100, embedding_size=16, **H)), text()),
    "deberta_v2": lambda: (T.DebertaV2ForMaskedLM(T.DebertaV2Config(vocab_size=100, **H)), text()),
    "mpnet": lambda: (T.MPNetModel(T.MPNetConfig(vocab_size=100, **H)), text()),
    "mobilebert": lambda: (T.MobileBertForMaskedLM(T.MobileBertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, embedding_size=16, intra_bottleneck_size=16,
        true_hidden_size=16)), text()),
    # decoders
    "gpt2": lambda: (T.GPT2LMHeadModel(T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                                    bos_token_id=1, eos_token_id=2)), text()),
    "opt": lambda: (T.OPTForCausalLM(T.OPTConfig(vocab_size=100, hidden_size=32,
                                                 num_hidden_layers=2, num_attention_heads=4,
                                                 ffn_dim=64, word_embed_proj_dim=32)), text()),
    "gpt_neox": lambda: (T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=100, **H)), text()),
    "bloom": lambda: (T.BloomForCausalLM(T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2,
                                                       n_head=4)), text()),
    "falcon": lambda: (T.FalconForCausalLM(T.FalconConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)), text()),
    "llama": lambda: (T.LlamaForCausalLM(T.LlamaConfig(vocab_size=100, num_key_value_heads=2,
                                                       **H)), text()),
    "mistral": lambda: (T.MistralForCausalLM(T.MistralConfig(vocab_size=100, num_key_value_heads=2,
                                                             **H)), text()),
    "qwen2": lambda: (T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=100, num_key_value_heads=2,
                                                       **H)), text()),
    "qwen3": lambda: (T.Qwen3ForCausalLM(T.Qwen3Config(vocab_size=100, num_key_value_heads=2,
                                                       head_dim=8, **H)), text()),
    "phi3": lambda: (T.Phi3ForCausalLM(T.Phi3Config(vocab_size=100, num_key_value_heads=2,
                                                    pad_token_id=0, eos_token_id=2, **H)), text()),
    "gemma": lambda: (T.GemmaForCausalLM(T.GemmaConfig(vocab_size=100, num_key_value_heads=2,
                                                       head_dim=8, **H)), text()),
    # encoder-decoders
    "t5": lambda: (T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)),
        dict(text(), **decoder_ids())),
    "bart": lambda: (T.BartForConditionalGeneration(T.BartConfig(vocab_size=100, **SEQ2SEQ)),
                     text()),
    "whisper": lambda: (T.WhisperForConditionalGeneration(T.WhisperConfig(
        vocab_size=100, num_mel_bins=16, max_source_positions=16, max_target_positions=32,
        pad_token_id=0, decoder_start_token_id=1, **SEQ2SEQ)),
        dict(input_features=torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(1)),
             **decoder_ids())),
    # vision, multimodal, speech
    "vit": lambda: (T.ViTForImageClassification(T.ViTConfig(image_size=32, patch_size=8,
                                                            num_labels=5, **H)), pixels()),
    "clip": lambda: (T.CLIPModel(T.CLIPConfig(
        text_config=dict(vocab_size=100, bos_token_id=1, eos_token_id=2, **H),
        vision_config=dict(image_size=32, patch_size=8, **H), projection_dim=16)),
        dict(text(), **pixels())),
    "resnet": lambda: (T.ResNetForImageClassification(T.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=5)), pixels()),
    "convnext": lambda: (T.ConvNextForImageClassification(T.ConvNextConfig(
        num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=5)), pixels()),
    "swin": lambda: (T.SwinForImageClassification(T.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4, num_labels=5)), pixels()),
    "segformer": lambda: (T.SegformerForSemanticSegmentation(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=3, patch_sizes=[7, 3],
        strides=[4, 2], mlp_ratios=[2, 2])), pixels()),
    "wav2vec2": lambda: (T.Wav2Vec2ForCTC(T.Wav2Vec2Config(
        vocab_size=20, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, **H)),
        dict(input_values=torch.randn(2, 400, generator=torch.Generator().manual_seed(1)))),
}


def tensors(output):
    """Every tensor of a model output (ModelOutput, tuple or tensor), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in tensors(item)]
    return []


@pytest.fixture(autouse=True)
def fused(highest_precision):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on tiny configs
        with torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            yield


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_equals_cpu(name):
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model.eval()
    with torch.no_grad():
        expected = tensors(model(**inputs))
        model.to("tpu")
        actual = tensors(model(**{k: v.to("tpu") for k, v in inputs.items()}))
    assert len(actual) == len(expected) > 0
    for a, e in zip(actual, expected):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.cpu(), e, atol=2e-5, rtol=2e-5)
