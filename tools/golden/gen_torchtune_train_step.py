#!/usr/bin/env python3
"""Writes the one-training-step parity fixtures under tests/assets/train_step/ (committed).

For an untied and a tied llama3-style torchtune TransformerDecoder (2 layers, embed 32, FFN 64,
4 query / 2 KV heads, vocab 128, plain interleaved RoPE base 500000) with fixed random
weights (rounded to bf16 so they are exact in any float format), it runs one training step
in fp32 on the CPU:
  loss = mean cross-entropy over labels != -100 (F.cross_entropy, ignore_index=-100)
  backward; per-parameter and global gradient L2 norms
  torch.nn.utils.clip_grad_norm_(max_norm=MAX_NORM)
  one torch.optim.AdamW step (LR, BETAS, EPS, WEIGHT_DECAY below)
Each file step_<kind>.safetensors holds
  before.<name>   weights before the step (torchtune state-dict names), BF16 (exact)
  after.<name>    weights after the step, F32
  gnorm.<name>    F32 [1], L2 norm of that parameter's gradient before clipping
  io.tokens, io.labels (I64 [b, s])
plus string metadata with the configuration, hyperparameters, the loss and the global
pre-clip gradient norm (repr of the Python floats, full precision).

Usage: python3 tools/golden/gen_torchtune_train_step.py [--out tests/assets/train_step]
Needs torch, torchtune (0.6.1 was used) and safetensors from PyPI.
"""

import argparse
import importlib
import os
import sys

try:
    import torchao.dtypes.nf4tensor  # noqa: F401
except ImportError:
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torchtune.models.llama3 import llama3
from torchtune.modules import TiedLinear, TransformerDecoder

SEED = 20261129
BATCH, SEQ = 2, 12
VOCAB, LAYERS, HEADS, KV_HEADS, EMBED, FFN = 128, 2, 4, 2, 32, 64
MAX_SEQ_LEN, EPS_NORM, ROPE_BASE = 32, 1e-5, 500000.0
# lr is small because the first AdamW step is ill-conditioned: each update is about
# lr * g / (|g| + eps), so fp32 noise in the tiniest gradient elements (rel ~1e-3 after
# cancellation) moves those weights by ~1e-3 lr; with lr 1e-4 that stays below 1e-6.
# weight_decay is large so that its lr * wd * w term is well above the tolerance.
LR, BETAS, EPS, WEIGHT_DECAY, MAX_NORM = 1e-4, (0.9, 0.95), 1e-8, 0.5, 1.0


def build(tied):
    m = llama3(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS,
               embed_dim=EMBED, max_seq_len=MAX_SEQ_LEN, intermediate_dim=FFN,
               norm_eps=EPS_NORM, rope_base=ROPE_BASE)
    if tied:
        m = TransformerDecoder(tok_embeddings=m.tok_embeddings, layers=m.layers,
                               max_seq_len=MAX_SEQ_LEN, num_heads=HEADS, head_dim=EMBED // HEADS,
                               norm=m.norm, output=TiedLinear(m.tok_embeddings))
    return m


def randomize_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("scale"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("tok_embeddings.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
            p.copy_(p.bfloat16().float())


def make(kind, out_dir):
    tied = kind == "tied"
    gen = torch.Generator().manual_seed(SEED + tied)
    model = build(tied)
    randomize_(model, gen)
    before = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    seq = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
    tokens = seq[:, :-1].contiguous()
    labels = seq[:, 1:].clone()
    labels[0, :3] = -100  # a masked prompt
    labels[1, -2:] = -100  # padding
    labels[:, 5] = -100
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), labels.reshape(-1),
                           ignore_index=-100, reduction="mean")
    loss.backward()
    gnorms = {n: p.grad.detach().norm().reshape(1).float() for n, p in model.named_parameters()}
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_NORM)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY, foreach=False)
    opt.step()
    after = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    tensors = {}
    for k in before:
        tensors["before." + k] = before[k].bfloat16()  # exact: rounded
        tensors["after." + k] = after[k]
        tensors["gnorm." + k] = gnorms[k]
    tensors["io.tokens"] = tokens
    tensors["io.labels"] = labels.contiguous()
    meta = dict(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS,
                embed_dim=EMBED, head_dim=EMBED // HEADS, intermediate_dim=FFN,
                max_seq_len=MAX_SEQ_LEN, norm_eps=EPS_NORM, rope_base=ROPE_BASE, tied=int(tied),
                lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, weight_decay=WEIGHT_DECAY,
                max_norm=MAX_NORM, loss=loss.item(), grad_norm=total.item())
    path = os.path.join(out_dir, f"step_{kind}.safetensors")
    save_file(tensors, path, metadata={k: repr(v) if isinstance(v, float) else str(v)
                                       for k, v in meta.items()})
    print(f"{path}: loss {loss.item():.6f} grad_norm {total.item():.6f} "
          f"params {sum(p.numel() for p in model.parameters())}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/assets/train_step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for kind in ("untied", "tied"):
        make(kind, args.out)


if __name__ == "__main__":
    main()
