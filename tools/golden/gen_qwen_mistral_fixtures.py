#!/usr/bin/env python3
"""Writes the Qwen2.5 and Mistral tokenizer fixtures in tests/assets/tokenizers/.

  qwen_bpe_vocab.json, qwen_bpe_merges.txt
        a small byte-level BPE (GPT-2 byte-to-unicode alphabet, 1000 tokens) trained here with
        the Hugging Face `tokenizers` library using Qwen2's settings: NFC normaliser, Qwen2's
        pre-tokeniser regex (Split, isolated) then ByteLevel without prefix space or regex.
  qwen_bpe_tokenizer.json
        the same tokenizer as tokenizer.json, with Qwen2.5's 22 special tokens added right
        after the vocabulary (ids 1000..1021): torchtune's special_tokens_path input.
  qwen_cases.json
        reference vectors: "cases" (text -> ids, specials always parsed, as torchtune's
        Qwen2Tokenizer.encode), "decode_cases" (ids -> text), "chat_cases" (messages -> ids
        and per-token masks, torchtune's Qwen2_5Tokenizer.tokenize_messages).
  mistral_cases.json
        "chat_cases" for torchtune's MistralTokenizer (MistralChatTemplate, then
        tokenize_messages_no_special_tokens) on sp_bpe.model (committed) and, when ../shared
        has it, the Llama 2 tokenizer.model (Mistral 7B's v0.1 tokenizer is the same kind:
        SentencePiece BPE, 32000 pieces, <s>=1, </s>=2).

Reference implementations: ids of text come from `tokenizers` (what transformers'
Qwen2TokenizerFast runs) and are cross-checked here against an independent Python version of
torchtune's slow path (the `regex` module's split, bpe_ranks merging); SentencePiece ids from
`sentencepiece`. The message layouts follow torchtune's tokenize_messages code (qwen2_5 and
mistral), written out below since torchtune itself needs PyTorch.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install tokenizers sentencepiece regex
    /tmp/v/bin/python tools/golden/gen_qwen_mistral_fixtures.py   # from the repository root
"""
import json
import os
import random
import unicodedata

import regex
import sentencepiece as spm
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("CCTUNE_SHARED_DIR") or os.path.join(os.path.dirname(ROOT), "shared")
OUT = os.path.join(ROOT, "tests", "assets", "tokenizers")

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_5_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world",
         "token", "izer", "model", "train", "ing", "data", "Straße", "café", "naïve", "über",
         "中文", "日本語", "한국어", "Ωμέγα", "привет", "🙂", "🚀", "don't", "I'm", "we'll",
         "it's", "THEY'RE", "3.14159", "2024", "1234567", "x_y", "foo()", "{a: 1}", "#", "—"]

FIXED_TEXTS = [
    "Hello, world!", "Hello world", " Hello", "  leading spaces", "trailing spaces   ",
    "The quick brown fox jumps over the lazy dog.", "I'm sure they'll say it's fine, don't you?",
    "DON'T SHOUT, I'M HERE", "Numbers: 1 12 123 1234 12345 3.14159 1e-9 0x1F",
    "tabs\tand\nnewlines\r\nand   runs    of spaces\n\n\n", "\n", " ", "   ", "\t\t",
    "Straße café naïve über", "Cafe\u0301 e\u0301\u0301 A\u030a (decomposed, NFC composes them)",
    "ﬁ ligature stays (NFC, not NFKC) and Ω\u2126 ohm sign", "中文分词测试，我们去公园散步吧！",
    "日本語のテキスト。カタカナ", "한국어 텍스트", "Ωμέγα και άλφα", "привет мир",
    "emoji 🙂🚀👍🏽 and 👨‍👩‍👧", "def f(x):\n    return x ** 2  # square\n",
    "<|im_start|>user\nhi<|im_end|>\n", "a<|endoftext|>b", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|im_start|", "<|not_special|> <|image_pad|><|video_pad|>", "NEL\u0085here and nbsp\u00a0there",
    "\u2028line sep\u2029para sep", "ſ long s 's 'S 'ſ", "x" * 300, " " * 40 + "end",
    "mixed\u00a0 \u3000ideographic space", "¡¿«»‽…", "a\u0000b\u0001c\u007f",
]


def byte_level_corpus(rng, lines):
    out = []
    for _ in range(lines):
        n = rng.randint(3, 16)
        parts = []
        for _ in range(n):
            parts.append(rng.choice(WORDS))
            parts.append(rng.choice([" ", " ", " ", "  ", "\n", ", ", ". ", "\t"]))
        out.append("".join(parts))
    return out


def random_texts(rng, count):
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") +
                list(" \t\n\r'.,!?-_()[]{}<>|") + ["é", "ß", "中", "😀", "\u0301", "\u00a0",
                                                  "\u0085", "\u2003", "'s", "'LL", "<|im_end|>"])
    out = []
    for _ in range(count):
        k = rng.randint(1, 60)
        out.append("".join(rng.choice(alphabet + WORDS) for _ in range(k)))
    return out


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class SlowQwen:
    """torchtune's Qwen2Tokenizer text path, rewritten: NFC, special split, regex, ranks."""

    def __init__(self, vocab, merges, specials):
        self.encoder = vocab
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        self.specials = specials
        self.byte_encoder = bytes_to_unicode()
        self.pat = regex.compile(QWEN_PATTERN)
        self.split = regex.compile(r"(\L<options>)", options=list(specials))

    def bpe(self, word):
        word = list(word)
        while len(word) > 1:
            best = None
            for i in range(len(word) - 1):
                r = self.ranks.get((word[i], word[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, word[i], word[i + 1])
            if best is None:
                break
            _, a, b = best
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text):
        text = unicodedata.normalize("NFC", text)
        ids = []
        for part in self.split.split(text):
            if not part:
                continue
            if part in self.specials:
                ids.append(self.specials[part])
                continue
            for piece in self.pat.findall(part):
                mapped = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
                ids.extend(self.encoder[t] for t in self.bpe(mapped))
        return ids


def train_qwen():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(7)
    tok.train_from_iterator(byte_level_corpus(rng, 3000) + random_texts(rng, 3000) + FIXED_TEXTS,
                            trainer=trainer)
    assert tok.get_vocab_size() == 1000, tok.get_vocab_size()
    tok.model.save(OUT, "qwen_bpe")  # qwen_bpe-vocab.json, qwen_bpe-merges.txt
    os.replace(os.path.join(OUT, "qwen_bpe-vocab.json"), os.path.join(OUT, "qwen_bpe_vocab.json"))
    os.replace(os.path.join(OUT, "qwen_bpe-merges.txt"), os.path.join(OUT, "qwen_bpe_merges.txt"))
    tok.add_special_tokens(QWEN2_5_SPECIALS)
    tok.save(os.path.join(OUT, "qwen_bpe_tokenizer.json"))
    return tok


def decode_torchtune(tok, specials_by_id, ids, byte_decoder):
    """torchtune's Qwen2Tokenizer.decode: byte runs between special tokens, errors=replace."""
    out, run = [], []
    for i in ids:
        if i in specials_by_id:
            if run:
                out.append(bytes(run).decode("utf-8", errors="replace"))
                run = []
            out.append(specials_by_id[i])
        else:
            run.extend(byte_decoder[c] for c in tok.id_to_token(i))
    if run:
        out.append(bytes(run).decode("utf-8", errors="replace"))
    return "".join(out)


def truncate(seq, max_seq_len, end, truncation_type):
    """torchtune.data.truncate."""
    seq = seq[-max_seq_len:] if truncation_type == "left" else seq[:max_seq_len]
    if end is not None and seq[-1] != end:
        seq[-1] = end
    return seq


def qwen_tokenize_messages(encode, sp, messages, max_seq_len, add_end_tokens, truncation_type):
    """torchtune's Qwen2_5Tokenizer.tokenize_messages (prompt_template None)."""
    im_start, im_end, eos = sp["<|im_start|>"], sp["<|im_end|>"], sp["<|im_end|>"]

    def start(tokens, role):
        tokens.append(im_start)
        tokens.extend(encode(f"{role}\n"))

    def end(tokens):
        tokens.append(im_end)
        tokens.extend(encode("\n"))

    ids, mask = [], []
    n = len(messages)
    for i, m in enumerate(messages):
        tokens = []
        if m["role"] == "ipython":
            if i == 0 or messages[i - 1]["role"] != "ipython":
                start(tokens, "user")
                tokens.extend(encode("<tool_response>\n"))
            else:
                tokens.extend(encode("\n<tool_response>\n"))
        else:
            start(tokens, m["role"])
            if m["role"] == "assistant" and m.get("ipython"):
                tokens.append(sp["<tool_call>"])
                tokens.extend(encode("\n"))
        tokens.extend(encode(m["content"]))
        if m["role"] == "ipython":
            tokens.extend(encode("\n</tool_response>"))
            if i == n - 1 or messages[i + 1]["role"] != "ipython":
                end(tokens)
        else:
            if m["role"] == "assistant" and m.get("ipython"):
                tokens.extend(encode("\n"))
                tokens.append(sp["</tool_call>"])
            if m["role"] != "assistant" or i != n - 1:
                end(tokens)
        ids.extend(tokens)
        mask.extend([m["masked"]] * len(tokens))
        if max_seq_len and len(ids) >= max_seq_len:
            break
    if add_end_tokens:
        ids.append(eos)
        mask.append(mask[-1])
    if max_seq_len:
        ids = truncate(ids, max_seq_len, eos if add_end_tokens else None, truncation_type)
        mask = truncate(mask, max_seq_len, True if add_end_tokens else None, truncation_type)
    return ids, mask


def mistral_tokenize_messages(sp, messages, max_seq_len):
    """MistralChatTemplate, then torchtune's tokenize_messages_no_special_tokens."""
    templated = []
    for m in messages:
        assert m["role"] != "system"
        content = m["content"]
        if m["role"] == "user":
            content = "[INST] " + content + " [/INST] "
        templated.append(dict(m, content=content))
    # trim_leading_whitespace: SentencePieceBaseTokenizer encodes "\n" + text and drops the
    # tokens of "\n" (the dummy prefix goes with them).
    prefix = "\n"
    prefix_len = len(sp.encode(prefix))

    def encode(text, trim):
        if not trim:
            return sp.encode(text)
        return sp.encode(prefix + text)[prefix_len:]

    encodes_whitespace = any(sp.encode(c) for c in [" ", "\n", "\t", "\r", "\v"])
    ids, mask = [], []
    start_of_turn, prev_space = True, False
    last = None
    for m in templated:
        last = m
        end_of_turn = m["role"] == "assistant"
        if start_of_turn:
            ids.append(sp.bos_id())
            mask.append(m["masked"])
        trim = (not start_of_turn) and encodes_whitespace and not prev_space
        toks = encode(m["content"].rstrip(" "), trim)
        prev_space = m["content"].endswith(" ")
        ids.extend(toks)
        mask.extend([m["masked"]] * len(toks))
        if end_of_turn:
            ids.append(sp.eos_id())
            mask.append(m["masked"])
            start_of_turn = True
        else:
            start_of_turn = False
        if max_seq_len and len(ids) >= max_seq_len:
            break
    if max_seq_len:
        ids = truncate(ids, max_seq_len, sp.eos_id(), "right")
        mask = truncate(mask, max_seq_len, last["masked"], "right")
    return ids, mask


def msg(role, content, masked=None, ipython=False):
    return {"role": role, "content": content,
            "masked": role != "assistant" if masked is None else masked, "ipython": ipython}


QWEN_CONVERSATIONS = [
    [msg("user", "Hello, who are you?"), msg("assistant", "I'm a tiny model. 🙂")],
    [msg("system", "You are a helpful assistant."), msg("user", "What's 12+30?"),
     msg("assistant", "It's 42.")],
    [msg("system", "Be brief.", masked=True), msg("user", "  spaces  around  "),
     msg("assistant", "ok\n\n"), msg("user", "again"), msg("assistant", "fine", masked=True)],
    [msg("user", "call the tool"), msg("assistant", "{\"name\": \"f\", \"x\": 1}", ipython=True),
     msg("ipython", "{\"result\": 7}"), msg("ipython", "{\"result\": 8}"),
     msg("assistant", "The results are 7 and 8.")],
    [msg("user", "ends with a user message")],
    [msg("user", "Cafe\u0301 <|im_end|> inside text"), msg("assistant", "中文 reply")],
    [msg("ipython", "tool first"), msg("assistant", "ok")],
]

MISTRAL_CONVERSATIONS = [
    [msg("user", "Hello, who are you?"), msg("assistant", "I'm a tiny model.")],
    [msg("user", "What is 12+30?"), msg("assistant", " It is 42. "), msg("user", "And 1+1?"),
     msg("assistant", "2")],
    [msg("user", "  spaces  around  "), msg("assistant", "ok\nfine", masked=True)],
    [msg("user", "first part ", masked=True), msg("user", "second part"),
     msg("assistant", "answer")],
    [msg("user", "naïve café 中文 🙂"), msg("assistant", "Straße")],
]


def write(name, data):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=0)
        f.write("\n")


def qwen_fixture():
    tok = train_qwen()
    vocab = json.load(open(os.path.join(OUT, "qwen_bpe_vocab.json"), encoding="utf-8"))
    merges = []
    with open(os.path.join(OUT, "qwen_bpe_merges.txt"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            line = line.strip()
            if (i == 0 and line.startswith("#version:")) or not line:
                continue
            merges.append(line.split())
    specials = {t: tok.token_to_id(t) for t in QWEN2_5_SPECIALS}
    slow = SlowQwen(vocab, merges, specials)
    rng = random.Random(20250101)
    texts = FIXED_TEXTS + random_texts(rng, 300)
    cases = []
    disagreements = 0
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        if slow.encode(t) != ids:
            disagreements += 1
            print("slow/fast disagree:", repr(t))
        cases.append({"text": t, "ids": ids, "parse_special": True})
    assert disagreements == 0
    byte_decoder = {v: k for k, v in bytes_to_unicode().items()}
    by_id = {v: k for k, v in specials.items()}
    decode_cases = []
    for _ in range(200):
        ids = [rng.randrange(1022) if rng.random() < 0.1 else rng.randrange(1000)
               for _ in range(rng.randint(1, 20))]
        decode_cases.append({"ids": ids, "text": decode_torchtune(tok, by_id, ids, byte_decoder)})
    for c in cases[:40]:
        decode_cases.append({"ids": c["ids"], "text": decode_torchtune(tok, by_id, c["ids"],
                                                                       byte_decoder)})
    encode = lambda s: tok.encode(s, add_special_tokens=False).ids
    chat = []
    for conv in QWEN_CONVERSATIONS:
        for max_seq_len in [None, 8, 25]:
            for add_end in [True, False]:
                for ttype in ["right", "left"]:
                    if max_seq_len is None and ttype == "left":
                        continue
                    ids, mask = qwen_tokenize_messages(encode, specials, conv, max_seq_len,
                                                       add_end, ttype)
                    chat.append({"messages": conv, "max_seq_len": max_seq_len or 0,
                                 "add_end_tokens": add_end, "truncation_type": ttype,
                                 "ids": ids, "mask": [bool(x) for x in mask]})
    write("qwen_cases.json", {"generator": "tools/golden/gen_qwen_mistral_fixtures.py",
                              "tokenizer": "qwen_bpe_vocab.json + qwen_bpe_merges.txt + "
                                           "qwen_bpe_tokenizer.json (special tokens)",
                              "cases": cases, "decode_cases": decode_cases, "chat_cases": chat})


def mistral_fixture():
    models_ = {"sp_bpe.model": os.path.join(OUT, "sp_bpe.model")}
    llama2 = os.path.join(SHARED, "tokenizers", "llama2", "tokenizer.model")
    if os.path.exists(llama2):
        models_["shared:tokenizers/llama2/tokenizer.model"] = llama2
    out = {"generator": "tools/golden/gen_qwen_mistral_fixtures.py", "models": {}}
    for name, path in models_.items():
        sp = spm.SentencePieceProcessor(model_file=path)
        chat = []
        for conv in MISTRAL_CONVERSATIONS:
            for max_seq_len in [None, 6, 20]:
                ids, mask = mistral_tokenize_messages(sp, conv, max_seq_len)
                chat.append({"messages": conv, "max_seq_len": max_seq_len or 0, "ids": ids,
                             "mask": [bool(x) for x in mask]})
        out["models"][name] = chat
    write("mistral_cases.json", out)


if __name__ == "__main__":
    qwen_fixture()
    mistral_fixture()
