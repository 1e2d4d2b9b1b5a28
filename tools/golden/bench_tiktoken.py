#!/usr/bin/env python3
"""Times Python tiktoken on the corpus that //tokenizers:tiktoken_bench uses. Run by hand:

    python3 tools/golden/bench_tiktoken.py [/tmp/cctune_tok_bench.txt]
    CCTUNE_TOK_BENCH_TEXT=/tmp/cctune_tok_bench.txt \
        bazel run //tokenizers:tiktoken_bench -- --benchmark_filter=Llama3

The corpus is built from this machine's gettext catalogues (/usr/share/locale/*/LC_MESSAGES:
English msgids plus translations into 16 languages) and some Python source, so it is
multilingual, natural text. It is written next to <path>.ids (tiktoken's ids, int32
little-endian), which the C++ benchmark checks before it times anything.
"""
import array
import gettext
import glob
import os
import sys
import time

import tiktoken

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_vectors  # noqa: E402

LANGS = ["de", "fr", "es", "ru", "zh_CN", "ja", "ko", "ar", "pl", "pt_BR", "uk", "vi", "tr",
         "el", "he", "hi"]
DOMAINS = ["coreutils", "libc", "bash", "dpkg", "git", "gnupg2", "glib20", "tar", "grep", "sed"]


def build_corpus():
    parts = []
    english = set()
    for lang in LANGS:
        for domain in DOMAINS:
            path = f"/usr/share/locale/{lang}/LC_MESSAGES/{domain}.mo"
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
            for key in sorted(catalog, key=str):
                msgid = key[0] if isinstance(key, tuple) else key
                if not msgid:
                    continue
                english.add(msgid)
                parts.append(catalog[key])
    parts.extend(sorted(english))
    for path in sorted(glob.glob("/usr/lib/python3*/json/*.py") +
                       glob.glob("/usr/lib/python3*/email/*.py")):
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    return "\n".join(parts)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/cctune_tok_bench.txt"
    text = build_corpus()
    data = text.encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    enc = gen_tokenizer_vectors.load_llama3()
    ids = enc.encode_ordinary(text)
    with open(path + ".ids", "wb") as f:
        array.array("i", ids).tofile(f)
    non_ascii = sum(1 for ch in text if ord(ch) > 127) / max(1, len(text))
    print(f"corpus {path}: {len(data) / 1e6:.2f} MB, {len(text)} chars "
          f"({100 * non_ascii:.0f}% non-ASCII), {len(ids)} tokens")
    # CPU time, like Google Benchmark's default, so that other load on the machine matters less.
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        enc.encode_ordinary(text)
        best = min(best, time.process_time() - start)
    print(f"tiktoken {tiktoken.__version__} encode_ordinary, 1 thread: "
          f"{len(data) / 2**20 / best:.2f} MiB/s of CPU time (best of 3: {best:.3f} s)")

if __name__ == "__main__":
    main()
