#!/usr/bin/env python3
"""PyTorch eager half of tools/bench_train_vs_pytorch.sh: training tokens/s of the model that
benchmarks/train_bench.cc trains, built with torchtune's llama3 builder.

~15.7M parameters: 6 layers, d 384, 6 query / 2 KV heads (head_dim 64), SwiGLU 1024, vocab
8192, untied output, RoPE base 10000; batch 4 x seq 256 of random tokens and labels; per
step: forward, F.cross_entropy (mean), backward, clip_grad_norm_(1.0), torch.optim.AdamW
(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01; PyTorch's default foreach
implementation), fp32, eager (no torch.compile), torch.set_num_threads(--threads).
GFLOP/s uses the same count as train_bench.cc: 6 * (parameters - embedding table) + 12 *
layers * seq * d per token. The last line is "RESULT tokens_per_s=... gflops=... step_ms=...
peak_rss_mib=..." (the process's peak resident set, as train_bench reports its own).

Usage: python3 tools/golden/bench_train_pytorch.py --steps 5 --warmup 1 --threads 2
"""

import argparse
import importlib
import resource
import sys
import time

try:
    import torchao.dtypes.nf4tensor  # noqa: F401
except ImportError:
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")

import torch
import torch.nn.functional as F
from torchtune.models.llama3 import llama3

VOCAB, LAYERS, HEADS, KV_HEADS, EMBED, FFN = 8192, 6, 6, 2, 384, 1024
BATCH, SEQ = 4, 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = llama3(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS,
                   embed_dim=EMBED, max_seq_len=SEQ, intermediate_dim=FFN, rope_base=10000.0)
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul = n_params - VOCAB * EMBED
    flops_per_token = 6.0 * n_matmul + 12.0 * LAYERS * SEQ * EMBED
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    print(f"pytorch eager {torch.__version__}: {n_params / 1e6:.2f}M params "
          f"({n_matmul / 1e6:.2f}M in matmuls), batch {BATCH} x seq {SEQ}, "
          f"{torch.get_num_threads()} threads, {args.warmup} warmup + {args.steps} timed steps")

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    secs = time.perf_counter() - t0
    tps = BATCH * SEQ * args.steps / secs
    print(f"last loss {loss:.4f}, {1e3 * secs / args.steps:.1f} ms/step")
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    print(f"peak RSS {rss_mib:.1f} MiB")
    print(f"RESULT tokens_per_s={tps:.1f} gflops={tps * flops_per_token / 1e9:.1f} "
          f"step_ms={1e3 * secs / args.steps:.1f} peak_rss_mib={rss_mib:.1f}")


if __name__ == "__main__":
    main()
