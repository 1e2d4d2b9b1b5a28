#!/usr/bin/env python3
"""Writes the torchtune parity fixtures under tests/assets/goldens/ (committed).

For MHA (32/32), GQA (32/8) and MQA (32/1) it builds, with fixed random weights:
  - a torchtune MultiHeadAttention (attention_<kind>.safetensors), and
  - a small torchtune TransformerDecoder (decoder_<kind>.safetensors),
runs them in fp32 on the CPU and saves weights, inputs and outputs. Each file holds
  model.<torchtune state-dict name>  weights, stored as BF16; the values were rounded to bf16
                                     before torchtune ran, so the fp32 forward uses exactly them
  io.<name>                          inputs and outputs (F32, I64, BOOL)
plus string metadata with the configuration. The three kinds also vary what else is covered:
  mha: RotaryPositionalEmbeddings (interleaved pairs, base 10000), untied output
  gqa: Llama3ScaledRoPE (interleaved, base 500000, factor 8), q/k RMSNorm in the attention
       fixture, tied output (TiedLinear) in the decoder
  mqa: Qwen2RotaryPositionalEmbeddings (half-split pairs, base 1e6), q/k/v biases, eps 1e-6
Sequences: prefill without a cache (causal, explicit mask, offset input_pos), then with a KV
cache: a 5-token prefill and 3 single-token decode steps, masks spanning the whole cache.

Usage: python3 tools/golden/gen_torchtune_goldens.py [--out tests/assets/goldens]
       python3 tools/golden/gen_torchtune_goldens.py --param-counts
Needs torch, torchtune (0.6.1 was used) and safetensors from PyPI.
"""

import argparse
import importlib
import os
import sys

# torchtune 0.6.1 imports NF4Tensor from torchao's old location; newer torchao moved it.
try:
    import torchao.dtypes.nf4tensor  # noqa: F401
except ImportError:
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")

import json
import struct

import torch
from torch import nn
from safetensors.torch import load_file
import torchtune
from torchtune.modules import (FeedForward, KVCache, MultiHeadAttention, RMSNorm,
                               RotaryPositionalEmbeddings, TiedLinear, TransformerDecoder,
                               TransformerSelfAttentionLayer)
from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE
from torchtune.models.qwen2._positional_embeddings import Qwen2RotaryPositionalEmbeddings

SEED = 20240613
BATCH = 2
SEQ = 8           # tokens in the no-cache prefill
PREFILL = 5       # cached prefill length; then SEQ - PREFILL decode steps
MAX_SEQ_LEN = 16  # cache and RoPE length
EMBED_DIM = 32
HEAD_DIM = 4
NUM_HEADS = 32
VOCAB = 32
FFN_DIM = 32
NUM_LAYERS = 2

KINDS = {
    # kind: (num_kv_heads, rope, rope_base, qkv_bias, qk_norm (attention only), tied, eps)
    "mha": dict(num_kv_heads=32, rope="default", rope_base=10000, qkv_bias=False,
                qk_norm=False, tied=False, eps=1e-5),
    "gqa": dict(num_kv_heads=8, rope="llama3_scaled", rope_base=500000, qkv_bias=False,
                qk_norm=True, tied=True, eps=1e-5),
    "mqa": dict(num_kv_heads=1, rope="qwen2", rope_base=1000000, qkv_bias=True,
                qk_norm=False, tied=False, eps=1e-6),
}


def make_rope(cfg):
    if cfg["rope"] == "default":
        return RotaryPositionalEmbeddings(dim=HEAD_DIM, max_seq_len=MAX_SEQ_LEN,
                                          base=cfg["rope_base"])
    if cfg["rope"] == "llama3_scaled":
        return Llama3ScaledRoPE(dim=HEAD_DIM, max_seq_len=MAX_SEQ_LEN, base=cfg["rope_base"],
                                scale_factor=8)
    return Qwen2RotaryPositionalEmbeddings(dim=HEAD_DIM, max_seq_len=MAX_SEQ_LEN,
                                           base=cfg["rope_base"])


def make_attention(cfg, rope, qk_norm):
    n_kv, bias = cfg["num_kv_heads"], cfg["qkv_bias"]
    return MultiHeadAttention(
        embed_dim=EMBED_DIM, num_heads=NUM_HEADS, num_kv_heads=n_kv, head_dim=HEAD_DIM,
        q_proj=nn.Linear(EMBED_DIM, NUM_HEADS * HEAD_DIM, bias=bias),
        k_proj=nn.Linear(EMBED_DIM, n_kv * HEAD_DIM, bias=bias),
        v_proj=nn.Linear(EMBED_DIM, n_kv * HEAD_DIM, bias=bias),
        output_proj=nn.Linear(NUM_HEADS * HEAD_DIM, EMBED_DIM, bias=False),
        pos_embeddings=rope,
        q_norm=RMSNorm(HEAD_DIM, eps=cfg["eps"]) if qk_norm else None,
        k_norm=RMSNorm(HEAD_DIM, eps=cfg["eps"]) if qk_norm else None,
        kv_cache=None, max_seq_len=MAX_SEQ_LEN, is_causal=True)


def make_decoder(cfg):
    rope = make_rope(cfg)
    layers = nn.ModuleList()
    for _ in range(NUM_LAYERS):
        mlp = FeedForward(gate_proj=nn.Linear(EMBED_DIM, FFN_DIM, bias=False),
                          down_proj=nn.Linear(FFN_DIM, EMBED_DIM, bias=False),
                          up_proj=nn.Linear(EMBED_DIM, FFN_DIM, bias=False))
        layers.append(TransformerSelfAttentionLayer(
            attn=make_attention(cfg, rope, qk_norm=False), mlp=mlp,
            sa_norm=RMSNorm(EMBED_DIM, eps=cfg["eps"]),
            mlp_norm=RMSNorm(EMBED_DIM, eps=cfg["eps"])))
    tok = nn.Embedding(VOCAB, EMBED_DIM)
    output = TiedLinear(tok) if cfg["tied"] else nn.Linear(EMBED_DIM, VOCAB, bias=False)
    return TransformerDecoder(tok_embeddings=tok, layers=layers, max_seq_len=MAX_SEQ_LEN,
                              num_heads=NUM_HEADS, head_dim=HEAD_DIM,
                              norm=RMSNorm(EMBED_DIM, eps=cfg["eps"]), output=output)


def randomize_(module, gen):
    """Random weights (norm scales around 1 so that they matter), rounded to bf16."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("scale"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("tok_embeddings.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1] if p.dim() > 1 else EMBED_DIM
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
            p.copy_(p.bfloat16().float())


def causal_rows(start, length):
    """Rows [start, start + length) of a causal mask over the whole cache: [b, length, L]."""
    full = torch.tril(torch.ones(MAX_SEQ_LEN, MAX_SEQ_LEN, dtype=torch.bool))
    return full[start:start + length].unsqueeze(0).expand(BATCH, -1, -1).contiguous()


def positions(start, length):
    return torch.arange(start, start + length).unsqueeze(0).expand(BATCH, -1).contiguous()


def metadata(kind, cfg, what):
    return {k: str(v) for k, v in dict(
        what=what, kind=kind, num_heads=NUM_HEADS, num_kv_heads=cfg["num_kv_heads"],
        head_dim=HEAD_DIM, embed_dim=EMBED_DIM, vocab_size=VOCAB, intermediate_dim=FFN_DIM,
        num_layers=NUM_LAYERS, max_seq_len=MAX_SEQ_LEN, batch=BATCH, seq=SEQ, prefill=PREFILL,
        rope=cfg["rope"], rope_base=cfg["rope_base"], qkv_bias=int(cfg["qkv_bias"]),
        qk_norm=int(cfg["qk_norm"] and what == "attention"), tied=int(cfg["tied"]),
        norm_eps=cfg["eps"], torch=torch.__version__, torchtune=torchtune.__version__,
        generator="tools/golden/gen_torchtune_goldens.py").items()}


def weights(module):
    sd = {k: v for k, v in module.state_dict().items() if "kv_cache" not in k}
    return {"model." + k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}


def gen_attention(kind, cfg, gen):
    mha = make_attention(cfg, make_rope(cfg), qk_norm=cfg["qk_norm"])
    randomize_(mha, gen)
    mha.eval()
    x = torch.randn(BATCH, SEQ, EMBED_DIM, generator=gen)
    mask = torch.rand(BATCH, SEQ, SEQ, generator=gen) < 0.6
    mask |= torch.eye(SEQ, dtype=torch.bool)  # every query sees at least itself
    input_pos = torch.stack([torch.arange(3, 3 + SEQ), torch.arange(7, 7 + SEQ)])
    io = {"x": x, "mask": mask, "input_pos": input_pos}
    with torch.no_grad():
        io["out_causal"] = mha(x, x)
        io["out_mask"] = mha(x, x, mask=mask)
        io["out_input_pos"] = mha(x, x, input_pos=input_pos)
        mha.setup_cache(BATCH, torch.float32, MAX_SEQ_LEN)
        io["cache_prefill"] = mha(x[:, :PREFILL], x[:, :PREFILL],
                                  mask=causal_rows(0, PREFILL), input_pos=positions(0, PREFILL))
        for t in range(PREFILL, SEQ):
            io[f"cache_step_{t}"] = mha(x[:, t:t + 1], x[:, t:t + 1], mask=causal_rows(t, 1),
                                        input_pos=positions(t, 1))
    return mha, io


def gen_decoder(kind, cfg, gen):
    model = make_decoder(cfg)
    randomize_(model, gen)
    model.eval()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    io = {"tokens": tokens}
    with torch.no_grad():
        io["logits"] = model(tokens)
        model.setup_caches(BATCH, torch.float32, decoder_max_seq_len=MAX_SEQ_LEN)
        io["cache_prefill_logits"] = model(tokens[:, :PREFILL], mask=causal_rows(0, PREFILL),
                                           input_pos=positions(0, PREFILL))
        for t in range(PREFILL, SEQ):
            io[f"cache_step_{t}_logits"] = model(tokens[:, t:t + 1], mask=causal_rows(t, 1),
                                                 input_pos=positions(t, 1))
    return model, io


_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64",
              torch.bool: "BOOL"}


def save_safetensors(path, tensors, meta):
    """safetensors with sorted header keys, so that reruns give byte-identical files
    (safetensors.torch.save_file orders __metadata__ differently on each run)."""
    header, blobs, offset = {"__metadata__": dict(sorted(meta.items()))}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.chmod(path, 0o644)
    back = load_file(path)  # the reference reader must agree
    assert all(torch.equal(back[k], tensors[k]) for k in tensors), path


def save(path, module, io, meta):
    tensors = weights(module)
    for k, v in io.items():
        v = v.detach()
        tensors["io." + k] = (v.float() if v.is_floating_point() else v).contiguous()
    save_safetensors(path, tensors, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


def param_counts():
    """Parameter counts of torchtune's builders, built on torch's meta device."""
    from torchtune.models import llama2, llama3, llama3_1, llama3_2, mistral, qwen2_5
    builders = [
        (llama2, "llama2_7b"), (llama2, "llama2_13b"), (llama2, "llama2_70b"),
        (llama3, "llama3_8b"), (llama3, "llama3_70b"), (llama3_1, "llama3_1_8b"),
        (llama3_1, "llama3_1_70b"), (llama3_1, "llama3_1_405b"), (llama3_2, "llama3_2_1b"),
        (llama3_2, "llama3_2_3b"), (mistral, "mistral_7b"), (qwen2_5, "qwen2_5_0_5b"),
        (qwen2_5, "qwen2_5_1_5b_base"), (qwen2_5, "qwen2_5_1_5b_instruct"),
        (qwen2_5, "qwen2_5_3b"), (qwen2_5, "qwen2_5_7b_base"), (qwen2_5, "qwen2_5_7b_instruct")]
    for module, name in builders:
        with torch.device("meta"):
            model = getattr(module, name)()
        n = sum(p.numel() for p in model.parameters())
        print(f"{name}: {n} parameters, {len(model.state_dict())} state-dict tensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--out", default=os.path.join(root, "tests", "assets", "goldens"))
    parser.add_argument("--param-counts", action="store_true",
                        help="print torchtune's parameter counts instead of writing fixtures")
    args = parser.parse_args()
    if args.param_counts:
        param_counts()
        return
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    for i, (kind, cfg) in enumerate(KINDS.items()):
        gen = torch.Generator().manual_seed(SEED + i)
        torch.manual_seed(SEED + i)  # module constructors draw from the global generator
        mha, io = gen_attention(kind, cfg, gen)
        save(os.path.join(args.out, f"attention_{kind}.safetensors"), mha, io,
             metadata(kind, cfg, "attention"))
        model, io = gen_decoder(kind, cfg, gen)
        save(os.path.join(args.out, f"decoder_{kind}.safetensors"), model, io,
             metadata(kind, cfg, "decoder"))


if __name__ == "__main__":
    main()
