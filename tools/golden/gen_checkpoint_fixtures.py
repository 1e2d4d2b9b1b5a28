#!/usr/bin/env python3
"""Generates the small checkpoint fixtures in tests/assets/checkpoint/ (commit-ready, ~80 KB).

Needs torch, safetensors and transformers. Deterministic: fixed seeds, so a rerun with the
same library versions reproduces the same tensors (file bytes may differ: the Rust
safetensors writer orders __metadata__ keys by hash).

    python3 tools/golden/gen_checkpoint_fixtures.py            # (re)write the fixtures
    python3 tools/golden/gen_checkpoint_fixtures.py --verify DIR [--reference NAME]

Fixtures:
  dtypes.safetensors        one tensor per supported dtype (F32, BF16, F16, I64, I32, BOOL),
                            odd shapes, a scalar, an empty tensor, string metadata;
  dtypes_expected.json      for each tensor: dtype, shape and the raw bit pattern of every
                            element (written independently of the safetensors library);
  tiny_llama/               LlamaForCausalLM.save_pretrained of a tiny random Llama (GQA,
                            untied lm_head), single model.safetensors;
  tiny_llama_sharded/       the same model saved with a small max_shard_size (several
                            model-0000k-of-0000n.safetensors + model.safetensors.index.json);
  tiny_llama_tune.safetensors   the same weights in torchtune names, q/k permuted from HF's
                            half-split RoPE layout to Meta's interleaved layout here, with
                            torchtune's formula: view(n_h, 2, h_d/2, d).transpose(1, 2);
  tiny_llama_tied/          a second tiny Llama with tie_word_embeddings=True and
                            attention_bias=True (so q/k biases are permuted too);
  tiny_llama_tied_tune.safetensors   its torchtune-format dump (no output.weight).

--verify DIR loads DIR with transformers (as a user would) and checks that every parameter
equals the one in the reference fixture (default tiny_llama; --reference tiny_llama_tied),
and that the logits match on a fixed input. Used by hand on the directory that
checkpoint/hf_test writes to $TEST_UNDECLARED_OUTPUTS_DIR (see checkpoint/hf_test.cc).

--verify-stories DIR runs transformers' greedy decoding on ../shared's stories260K after the
C++ conversion (bazel run //checkpoint:convert_checkpoint -- --from_llama2c=... --to_hf=DIR)
and checks it against llama2.c's reference tokens.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "assets", "checkpoint")


def bits_of(t):
    """Raw per-element bit patterns (as Python ints) of a tensor, flattened row-major."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.float32:
        return [int(x) for x in t.view(torch.int32).numpy().astype(np.uint32)]
    if t.dtype in (torch.bfloat16, torch.float16):
        return [int(x) for x in t.view(torch.int16).numpy().astype(np.uint16)]
    if t.dtype == torch.bool:
        return [int(x) for x in t.numpy().astype(np.uint8)]
    return [int(x) for x in t.numpy()]


ST_NAME = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL",
}


def gen_dtypes():
    g = torch.Generator().manual_seed(1234)
    tensors = {
        "f32_2x3": torch.randn(2, 3, generator=g),
        "f32_odd": torch.randn(3, 5, 7, generator=g),
        "bf16_5x7": torch.randn(5, 7, generator=g).to(torch.bfloat16),
        "f16_13": (torch.randn(13, generator=g) * 100).to(torch.float16),
        "i64_9": torch.randint(-(2**40), 2**40, (9,), generator=g, dtype=torch.int64),
        "i32_3x3": torch.randint(-(2**30), 2**30, (3, 3), generator=g, dtype=torch.int32),
        "bool_11": torch.rand(11, generator=g) > 0.5,
        "scalar_f32": torch.randn((), generator=g),
        "empty_0x4": torch.zeros(0, 4),
        # A name with a dot path and non-ASCII characters.
        "layers.0.attn.q_proj.weight.\u00e9": torch.randn(4, 2, generator=g),
    }
    metadata = {"format": "pt", "note": "cctune fixture \u2713"}
    save_file(tensors, os.path.join(OUT, "dtypes.safetensors"), metadata=metadata)
    expected = {
        "metadata": metadata,
        "tensors": {
            name: {"dtype": ST_NAME[t.dtype], "shape": list(t.shape), "bits": bits_of(t)}
            for name, t in tensors.items()
        },
    }
    with open(os.path.join(OUT, "dtypes_expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def hf_to_tune_names(key):
    """HF Llama parameter name -> torchtune name (None: not a parameter torchtune keeps)."""
    fixed = {
        "model.embed_tokens.weight": "tok_embeddings.weight",
        "model.norm.weight": "norm.scale",
        "lm_head.weight": "output.weight",
    }
    if key in fixed:
        return fixed[key]
    parts = key.split(".")
    assert parts[0] == "model" and parts[1] == "layers", key
    i, rest = parts[2], ".".join(parts[3:])
    per_layer = {
        "self_attn.q_proj.weight": "attn.q_proj.weight",
        "self_attn.k_proj.weight": "attn.k_proj.weight",
        "self_attn.v_proj.weight": "attn.v_proj.weight",
        "self_attn.o_proj.weight": "attn.output_proj.weight",
        "self_attn.q_proj.bias": "attn.q_proj.bias",
        "self_attn.k_proj.bias": "attn.k_proj.bias",
        "self_attn.v_proj.bias": "attn.v_proj.bias",
        "self_attn.o_proj.bias": "attn.output_proj.bias",
        "mlp.gate_proj.weight": "mlp.w1.weight",
        "mlp.up_proj.weight": "mlp.w3.weight",
        "mlp.down_proj.weight": "mlp.w2.weight",
        "input_layernorm.weight": "sa_norm.scale",
        "post_attention_layernorm.weight": "mlp_norm.scale",
    }
    return f"layers.{i}.{per_layer[rest]}"


def hf_to_interleaved(t, n_heads, head_dim):
    """torchtune's hf_to_tune permute: rows [n_h, 2, h_d/2] -> [n_h, h_d/2, 2]."""
    rest = t.shape[1:]
    return t.reshape(n_heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(
        n_heads * head_dim, *rest)


def tune_dump(model, cfg, path):
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    out = {}
    for key, value in model.state_dict().items():
        if cfg.tie_word_embeddings and key == "lm_head.weight":
            continue
        name = hf_to_tune_names(key)
        value = value.detach().clone()
        if ".q_proj." in key:
            value = hf_to_interleaved(value, cfg.num_attention_heads, head_dim)
        elif ".k_proj." in key:
            value = hf_to_interleaved(value, cfg.num_key_value_heads, head_dim)
        out[name] = value.contiguous()
    save_file(out, path, metadata={"format": "pt"})


def make_llama(seed, **kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, **kw)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # norms too, so a mixed-up mapping cannot hide
            p.normal_(0.0, 0.5)
    return cfg, model


def gen_llama():
    cfg, model = make_llama(
        7, vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model.save_pretrained(os.path.join(OUT, "tiny_llama"))
    model.save_pretrained(os.path.join(OUT, "tiny_llama_sharded"), max_shard_size="8KB")
    tune_dump(model, cfg, os.path.join(OUT, "tiny_llama_tune.safetensors"))

    cfg, model = make_llama(
        11, vocab_size=16, hidden_size=8, intermediate_size=12, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
        attention_bias=True)
    model.save_pretrained(os.path.join(OUT, "tiny_llama_tied"))
    tune_dump(model, cfg, os.path.join(OUT, "tiny_llama_tied_tune.safetensors"))


def verify(directory, reference):
    from transformers import LlamaForCausalLM

    got = LlamaForCausalLM.from_pretrained(directory).eval()
    # A checkpoint saved in another dtype is compared with the reference rounded the same way.
    ref = LlamaForCausalLM.from_pretrained(os.path.join(OUT, reference), dtype=got.dtype).eval()
    ref_sd, got_sd = ref.state_dict(), got.state_dict()
    assert ref_sd.keys() == got_sd.keys(), (sorted(ref_sd.keys() ^ got_sd.keys()))
    for k in ref_sd:
        assert torch.equal(ref_sd[k], got_sd[k]), f"{k} differs"
    ids = torch.arange(0, 7).unsqueeze(0) % ref.config.vocab_size
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, got(ids).logits), "logits differ"
    print(f"OK: transformers loads {directory} ({got.dtype}): {len(ref_sd)} tensors equal to "
          f"{reference}, logits equal")


def verify_stories(directory):
    """Greedy decoding with transformers on stories260K converted by the C++ tool must give
    llama2.c's reference tokens (run.c -t 0 -n 200 from BOS; it stops early on BOS)."""
    from transformers import LlamaForCausalLM

    ref_path = os.path.join(ROOT, "..", "shared", "models", "stories260K", "reference",
                            "greedy_steps200_token_ids.json")
    with open(ref_path) as f:
        want = json.load(f)["token_ids_after_bos"]
    model = LlamaForCausalLM.from_pretrained(directory).eval()
    ids = torch.tensor([[1]])
    with torch.no_grad():
        for _ in range(len(want)):
            nxt = model(ids).logits[0, -1].argmax().item()
            if nxt == 1:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    got = ids[0, 1:].tolist()
    assert got == want[: len(got)] and len(got) == len(want), (
        f"first mismatch at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)}")
    print(f"OK: transformers on {directory} reproduces llama2.c's {len(want)} greedy tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", metavar="DIR")
    ap.add_argument("--reference", default="tiny_llama")
    ap.add_argument("--verify-stories", metavar="DIR",
                    help="DIR from: convert_checkpoint --from_llama2c=stories260K.bin --to_hf=DIR")
    args = ap.parse_args()
    if args.verify:
        verify(args.verify, args.reference)
        return
    if args.verify_stories:
        verify_stories(args.verify_stories)
        return
    os.makedirs(OUT, exist_ok=True)
    gen_dtypes()
    gen_llama()
    total = 0
    for dirpath, _, files in os.walk(OUT):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)  # safetensors writes 0600
            total += os.path.getsize(os.path.join(dirpath, f))
    print(f"wrote fixtures to {OUT} ({total} bytes)")


if __name__ == "__main__":
    sys.exit(main())
