#!/usr/bin/env python3
"""Trains the two tiny SentencePiece models committed in tests/assets/tokenizers/.

  sp_bpe.model      BPE, 400 pieces, byte_fallback, identity normaliser that keeps extra
                    whitespace (Llama 2's settings), a user-defined "<tool>", pad id 3.
  sp_unigram.model  Unigram, 300 pieces, no byte_fallback (unknown characters become <unk>),
                    default whitespace folding, a user-defined "[sep]", a control "<ctl>".

  sp_bpe_unused.model, sp_unigram_unused.model: the same with every 7th multi-character
                    NORMAL piece marked UNUSED (SentencePiece's trainer never writes UNUSED
                    pieces, but models edited by hand do): BPE merges through them and splits
                    them again, Unigram skips them.

They are small independent references for tokenizers/sentencepiece_reference_test.cc (which
compares cctune's encoder with libsentencepiece on them) and the tokenizer files of
tests/tokenizer_recipes_test.cc. The C++ tests never run Python.

    pip install sentencepiece protobuf
    python3 tools/golden/make_sentencepiece_fixture.py   # from the repository root
"""
import io
import os
import random

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

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


def mark_unused(name, out_name):
    model = sentencepiece_model_pb2.ModelProto()
    with open(os.path.join(OUT, name), "rb") as f:
        model.ParseFromString(f.read())
    normal = [p for p in model.pieces
              if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
              and len(p.piece) > 1]
    for p in normal[::7]:
        p.type = sentencepiece_model_pb2.ModelProto.SentencePiece.UNUSED
    path = os.path.join(OUT, out_name)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    print(f"{path}: {len(normal[::7])} pieces marked UNUSED")


def main():
    os.makedirs(OUT, exist_ok=True)
    train("sp_bpe.model", model_type="bpe", vocab_size=400, byte_fallback=True,
          remove_extra_whitespaces=False, add_dummy_prefix=True, user_defined_symbols=["<tool>"],
          pad_id=3, character_coverage=1.0)
    train("sp_unigram.model", model_type="unigram", vocab_size=300, byte_fallback=False,
          user_defined_symbols=["[sep]"], control_symbols=["<ctl>"], character_coverage=0.98)
    mark_unused("sp_bpe.model", "sp_bpe_unused.model")
    mark_unused("sp_unigram.model", "sp_unigram_unused.model")


if __name__ == "__main__":
    main()
