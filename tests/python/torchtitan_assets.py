"""Local assets for TorchTitan runs that download nothing: a small BPE
tokenizer (Hugging Face `tokenizers` format, the one TorchTitan's
HuggingFaceTokenizer loads) and a text dataset directory that TorchTitan's
`c4_test` loader (`datasets.load_dataset(path, split="train")`) reads.

The text is made by a seeded grammar, so every run sees the same tokens and a
small model's loss falls within a few steps.

    python tests/python/torchtitan_assets.py OUT_DIR   # writes OUT_DIR/tokenizer, OUT_DIR/data
"""
import json
import os
import random
import sys

_SUBJECTS = ["the cat", "a dog", "the bird", "my friend", "the teacher", "a child",
             "the farmer", "our neighbour", "the old man", "a young girl"]
_VERBS = ["sees", "likes", "finds", "follows", "helps", "watches", "calls", "meets"]
_OBJECTS = ["the ball", "a tree", "the river", "the house", "a small boat",
            "the garden", "a red apple", "the market", "the long road", "a book"]
_ENDINGS = ["today", "in the morning", "every day", "at night", "again", "slowly"]


def sentences(n, seed=0):
    rng = random.Random(seed)
    return [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
            f"{rng.choice(_ENDINGS)}." for _ in range(n)]


def documents(n_docs=64, per_doc=24, seed=0):
    text = sentences(n_docs * per_doc, seed)
    return [" ".join(text[i * per_doc:(i + 1) * per_doc]) for i in range(n_docs)]


def write_tokenizer(path, vocab_size=400):
    """A byte-level BPE tokenizer trained on the grammar's text, with <bos>
    and <eos> (TorchTitan adds both around each document)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    os.makedirs(path, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(documents(), trainer=trainer)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>",
                   "add_bos_token": True, "add_eos_token": True}, f)
    return tok.get_vocab_size()


def write_dataset(path):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "train.jsonl"), "w") as f:
        for doc in documents():
            f.write(json.dumps({"text": doc}) + "\n")


def write_assets(out_dir):
    """Returns (tokenizer dir, dataset dir, vocabulary size)."""
    tok_dir, data_dir = os.path.join(out_dir, "tokenizer"), os.path.join(out_dir, "data")
    vocab = write_tokenizer(tok_dir)
    write_dataset(data_dir)
    return tok_dir, data_dir, vocab


if __name__ == "__main__":
    print(write_assets(sys.argv[1]))
