#!/usr/bin/env python3
"""Runs torchtune's own single-device configs for a few steps on small stand-in models.

torchtune's configs name real checkpoints (/tmp/Llama-3.2-1B-Instruct, ...) and Hub datasets
(tatsu-lab/alpaca, yahma/alpaca-cleaned) that are not on this machine. For each config this
script makes stand-ins in a temp dir and runs the config with only these keys overridden:
  - paths: output_dir, checkpointer.checkpoint_dir / checkpoint_files, tokenizer.path (and
    Qwen's merges_file / special_tokens_path), the Hub cache (HF_HUB_CACHE);
  - sizes: model._component_ becomes the family's component builder (or its lora_ twin) with
    a tiny width and depth, max_steps_per_epoch and batch_size;
  - device: cpu (the configs say cuda; this machine may have no GPU).
Every other key (optimizer, optimizer_in_bwd, loss, dtype, lora_*, activation
checkpointing, profiler, ...) is the config's own.

Stand-ins: a random HF checkpoint per family, written by a one-step full fine-tune of the tiny
model with no checkpointer (the recipe then saves model.safetensors + config.json); tokenizers
in torchtune's formats (a tiny tiktoken file written here; the repository's SentencePiece and
Qwen byte-level BPE fixtures); alpaca-style JSON in a Hugging Face hub cache layout.

  pip download --no-deps torchtune==0.6.1 -d /tmp/tt && (cd /tmp/tt && unzip -oq *.whl)
  bazel build //recipes:full_finetune_single_device //recipes:lora_finetune_single_device
  python3 tools/run_torchtune_configs.py --configs /tmp/tt/recipes/configs

Prints one line per config (RUN / FAIL with the error's last line) and the count; exit code
1 when any fails. --only NAME runs the configs whose path contains NAME.
"""
import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(ROOT, "tests", "assets", "tokenizers")

# The 16 single-device configs of our families and recipes, and 2 distributed ones (docs/coming_from_torchtune.md).
CONFIGS = [  # (config, family, LoRA recipe)
    ("llama3_2/1B_full_single_device", "llama3_2", False),
    ("llama3_2/3B_full_single_device", "llama3_2", False),
    ("llama3_2/1B_lora_single_device", "llama3_2", True),
    ("llama3_2/3B_lora_single_device", "llama3_2", True),
    ("llama3_2/1B_qlora_single_device", "llama3_2", True),
    ("llama3_2/3B_qlora_single_device", "llama3_2", True),
    ("llama3_1/8B_full_single_device", "llama3_1", False),
    ("llama3_1/8B_lora_single_device", "llama3_1", True),
    ("llama2/7B_lora_single_device", "llama2", True),
    ("llama2/7B_full_low_memory", "llama2", False),
    ("mistral/7B_lora_single_device", "mistral", True),
    ("qwen2_5/0.5B_full_single_device", "qwen2_5", False),
    ("llama3_1/8B_qlora_single_device", "llama3_1", True),
    ("llama2/7B_qlora_single_device", "llama2", True),
    ("llama2/13B_qlora_single_device", "llama2", True),
    ("mistral/7B_qlora_single_device", "mistral", True),
    # The distributed configs of our distributed recipes, here on a world of one (the
    # recipes' 2-rank runs are recipes/distributed_recipes_test).
    ("llama3_2/1B_full", "llama3_2", False),
    ("llama3_2/1B_lora", "llama3_2", True),
]

# family -> (model component prefix, component builder, model_type)
FAMILIES = {
    "llama3_2": ("torchtune.models.llama3_2", "llama3_2", "LLAMA3_2"),
    "llama3_1": ("torchtune.models.llama3_1", "llama3_1", "LLAMA3"),
    "llama2": ("torchtune.models.llama2", "llama2", "LLAMA2"),
    "mistral": ("torchtune.models.mistral", "mistral", "MISTRAL"),
    "qwen2_5": ("torchtune.models.qwen2", "qwen2", "QWEN2"),
}

TOKENIZERS = {
    "llama3_2": "torchtune.models.llama3.llama3_tokenizer",
    "llama3_1": "torchtune.models.llama3.llama3_tokenizer",
    "llama2": "torchtune.models.llama2.llama2_tokenizer",
    "mistral": "torchtune.models.mistral.mistral_tokenizer",
    "qwen2_5": "torchtune.models.qwen2_5.qwen2_5_tokenizer",
}

ALPACA = [
    {"instruction": "Add the numbers.", "input": "2 + 3", "output": "5"},
    {"instruction": "Name a primary colour.", "input": "", "output": "Red"},
    {"instruction": "Reverse the word.", "input": "stressed", "output": "desserts"},
    {"instruction": "Say hi.", "input": "", "output": "Hi!"},
    {"instruction": "What is the cat doing?", "input": "", "output": "The cat sleeps on the mat."},
    {"instruction": "Translate water.", "input": "to French", "output": "eau"},
    {"instruction": "Count to three.", "input": "", "output": "one two three"},
    {"instruction": "Is the sky blue?", "input": "", "output": "Yes, on a clear day."},
]


def write_tiktoken(path):
    """A byte-level tiktoken file with a few merges; returns the vocabulary size with
    Llama 3's 256 special tokens."""
    tokens = [bytes([b]) for b in range(256)]
    for m in ["th", "he", "in", "er", "an", " t", " a", "at", "on", "en", "the", " the"]:
        tokens.append(m.encode())
    with open(path, "w") as f:
        for rank, t in enumerate(tokens):
            f.write(f"{base64.b64encode(t).decode()} {rank}\n")
    return len(tokens) + 256


def write_hub(hub):
    commit = "0123456789abcdef0123456789abcdef01234567"
    for repo, name in [("tatsu-lab/alpaca", "alpaca.json"),
                       ("yahma/alpaca-cleaned", "alpaca_data_cleaned.json")]:
        folder = os.path.join(hub, "datasets--" + repo.replace("/", "--"))
        os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
        os.makedirs(os.path.join(folder, "blobs"), exist_ok=True)
        os.makedirs(os.path.join(folder, "snapshots", commit), exist_ok=True)
        with open(os.path.join(folder, "refs", "main"), "w") as f:
            f.write(commit)
        blob = os.path.join(folder, "blobs", "data")
        with open(blob, "w") as f:
            json.dump(ALPACA * 4, f)
        link = os.path.join(folder, "snapshots", commit, name)
        if not os.path.lexists(link):
            os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)


def tokenizer_overrides(family, work):
    if family in ("llama3_2", "llama3_1"):
        path = os.path.join(work, "tiktoken.model")
        vocab = write_tiktoken(path)
        return vocab, [f"tokenizer.path={path}"]
    if family in ("llama2", "mistral"):
        return 400, [f"tokenizer.path={ASSETS}/sp_bpe.model"]
    return 1022, [f"tokenizer.path={ASSETS}/qwen_bpe_vocab.json",
                  f"tokenizer.merges_file={ASSETS}/qwen_bpe_merges.txt",
                  f"tokenizer.special_tokens_path={ASSETS}/qwen_bpe_tokenizer.json"]


def size_overrides(family, builder_prefix, vocab):
    """The family's component builder with the config's builder prefix ("", "lora_" or
    "qlora_") and tiny sizes. torchtune has no qlora_ component builder: a qlora_ config
    stays QLoRA as lora_<component> with quantize_base=True (what its qlora_ model builders
    are), and gets sizes torchao's NF4 can hold (each projection a multiple of 64 * 256
    elements: embed_dim 256, k/v 256 x 128)."""
    prefix, component, _ = FAMILIES[family]
    qlora = builder_prefix == "qlora_"
    name = ("lora_" if qlora else builder_prefix) + component
    dims = (["model.embed_dim=256", "model.intermediate_dim=512"] if qlora
            else ["model.embed_dim=32", "model.intermediate_dim=64"])
    return ([f"model._component_={prefix}.{name}", f"model.vocab_size={vocab}",
             "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
             "model.max_seq_len=256"] + dims + (["model.quantize_base=True"] if qlora else []))


def standin_prefix(builder_prefix):
    """The stand-in checkpoint's sizes: QLoRA's, or everyone else's."""
    return "qlora_" if builder_prefix == "qlora_" else ""


def run(argv, env):
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.returncode, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", required=True, help="torchtune's recipes/configs folder")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin", "recipes"),
                    help="folder with the recipe binaries")
    ap.add_argument("--work", default=None, help="scratch folder (default: a new temp dir)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="tt_configs_")
    hub = os.path.join(work, "hub")
    write_hub(hub)
    env = dict(os.environ, HF_HUB_CACHE=hub, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    standins = {}
    ok = 0
    total = 0
    for config, family, lora in CONFIGS:
        if args.only and args.only not in config:
            continue
        total += 1
        fam_dir = os.path.join(work, family)
        os.makedirs(fam_dir, exist_ok=True)
        vocab, tok = tokenizer_overrides(family, fam_dir)
        path = os.path.join(args.configs, config + ".yaml")
        with open(path) as f:
            header = f.readline() + f.readline() + f.read(2000)
        recipe = (("lora" if "lora_finetune" in header else "full") + "_finetune_" +
                  ("distributed" if "finetune_distributed" in header else "single_device"))
        lines = open(path).read().splitlines()
        model_at = lines.index("model:")
        builder = next(l.split(":", 1)[1].strip() for l in lines[model_at + 1:]
                       if l.strip().startswith("_component_:"))
        builder_prefix = next((p for p in ("qlora_", "lora_") if "." + p in builder), "")
        key = (family, standin_prefix(builder_prefix))
        if key not in standins:
            # The stand-in checkpoint: a one-step full fine-tune of the family's tiny model
            # with no checkpointer (random init), which saves model.safetensors + config.json.
            out = os.path.join(fam_dir, key[1] + "standin")
            standin = os.path.join(fam_dir, key[1] + "standin.yaml")
            with open(standin, "w") as f:
                f.write(f"output_dir: {out}\nmodel:\n  _component_: placeholder\n"
                        f"tokenizer:\n  _component_: {TOKENIZERS[family]}\n"
                        "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n"
                        "checkpointer: null\nseed: 1\nbatch_size: 2\nepochs: 1\n"
                        "max_steps_per_epoch: 1\noptimizer:\n  _component_: torch.optim.AdamW\n"
                        "  lr: 1e-4\ndtype: bf16\ndevice: cpu\n")
            rc, log = run([os.path.join(args.bin, "full_finetune_single_device"), "--config",
                           standin] + tok
                          + [o for o in size_overrides(family, key[1], vocab)
                             if "lora_" not in o and "quantize_base" not in o]
                          + [f"model._component_={FAMILIES[family][0]}.{FAMILIES[family][1]}"],
                          env)
            if rc != 0:
                print(f"FAIL {config}: stand-in checkpoint: {log.strip().splitlines()[-1]}")
                continue
            standins[key] = os.path.join(out, "step_1")
        out = os.path.join(work, config.replace("/", "_"))
        overrides = [f"output_dir={out}", f"checkpointer.checkpoint_dir={standins[key]}",
                     "checkpointer.checkpoint_files=[model.safetensors]", "device=cpu",
                     f"max_steps_per_epoch={args.steps}", "batch_size=2", "epochs=1"]
        rc, log = run([os.path.join(args.bin, recipe), "--config", path] + overrides + tok
                      + size_overrides(family, builder_prefix, vocab), env)
        last = log.strip().splitlines()[-1] if log.strip() else ""
        if rc == 0:
            ok += 1
            print(f"RUN  {config} ({recipe}): {last}")
        else:
            print(f"FAIL {config} ({recipe}): {last}")
    print(f"{ok} of {total} torchtune configs ran {args.steps} steps on stand-in models "
          f"(work dir {work})")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
