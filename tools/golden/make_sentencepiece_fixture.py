#!/usr/bin/env python3
"""Trains the two tiny SentencePiece models committed in tests/assets/tokenizers/.

  sp_bpe.model      BPE, 400 pieces, byte_fallback, identity normaliser that keeps extra
                    whitespace (Llama 2's settings), a user-defined "<tool>", pad id 3.
  sp_unigram.model  Unigram, 300 pieces, no byte_fallback (unknown characters become <unk>),
                    default whitespace folding, a user-defined "[sep]", a control "<ctl>".

They are small independent references for tokenizers/sentencepiece_reference_test.cc (which
compares cctune's encoder with libsentencepiece on them) and the tokenizer files of
tests/tokenizer_recipes_test.cc. The C++ tests never run Python.

    pip install sentencepiece
    python3 tools/golden/make_sentencepiece_fixture.py   # from the repository root
"""
import io
import os
import random

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "assets", "tokenizers")

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "an", "el", "or", "us", "th", "ing"]
EXTRA = ["é", "ü", "ß", "ñ", "中", "文", "日本", "Ωμέγα", "🙂", "🚀", "—", "…"]


def corpus(seed, lines):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(3, 14)):
            r = rng.random()
            if r < 0.75:
                words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
            elif r < 0.85:
                words.append(str(rng.randint(0, 99999)))
            elif r < 0.95:
                words.append(rng.choice(EXTRA))
            else:
                words.append(rng.choice([",", ".", "!", "?", "(x)", "'s", "<tool>", "[sep]"]))
        sep = rng.choice([" ", " ", " ", "  ", "\t"])
        out.append(sep.join(words).capitalize())
    return out


def train(name, **kwargs):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus(17, 3000)),
        model_writer=model,
        normalization_rule_name="identity",
        num_threads=1,
        shuffle_input_sentence=False,
        minloglevel=2,
        **kwargs)
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    print(f"{path}: {sp.get_piece_size()} pieces, {len(model.getvalue())} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    train("sp_bpe.model", model_type="bpe", vocab_size=400, byte_fallback=True,
          remove_extra_whitespaces=False, add_dummy_prefix=True, user_defined_symbols=["<tool>"],
          pad_id=3, character_coverage=1.0)
    train("sp_unigram.model", model_type="unigram", vocab_size=300, byte_fallback=False,
          user_defined_symbols=["[sep]"], control_symbols=["<ctl>"], character_coverage=0.98)


if __name__ == "__main__":
    main()
