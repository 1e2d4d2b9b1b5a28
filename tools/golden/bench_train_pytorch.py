#!/usr/bin/env python3
"""PyTorch eager half of tools/bench_train_vs_pytorch.sh: training tokens/s of the model that
benchmarks/train_bench.cc trains, built with torchtune's llama3 builder.

~15.7M parameters: 6 layers, d 384, 6 query / 2 KV heads (head_dim 64), SwiGLU 1024, vocab
8192, untied output, RoPE base 10000; batch 4 x seq 256 of random tokens and labels; per
step: forward, F.cross_entropy (mean), backward, clip_grad_norm_(1.0), torch.optim.AdamW
(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01; PyTorch's default foreach
implementation), fp32, eager (no torch.compile), torch.set_num_threads(--threads).
--model demo trains the demo model's shape instead (configs/demo: 4 layers, d 128, 8/2 heads,
SwiGLU 384, vocab 264; batch 64 x 16), as train_bench --model demo does. --dtype bf16: by
default (--bf16_mode params) the model is cast to bf16 as torchtune's `dtype: bf16` does, so
parameters, gradients and AdamW's states are bf16 (no f32 master copy; cctune's bf16 keeps f32
masters); --bf16_mode autocast keeps f32 parameters and runs the forward under
torch.autocast("cpu", bfloat16) instead (bf16 matmuls through oneDNN, f32 masters).
GFLOP/s uses the same count as train_bench.cc: 6 * (parameters - embedding table) + 12 *
layers * seq * d per token. The last line is "RESULT tokens_per_s=... gflops=... step_ms=...
peak_rss_mib=..." (the process's peak resident set, as train_bench reports its own).

Usage: python3 tools/golden/bench_train_pytorch.py --steps 5 --warmup 1 --threads 2 \
           [--model 15m|demo] [--dtype f32|bf16] [--bf16_mode params|autocast]
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

# --model: train_bench.cc's two shapes (vocab, layers, heads, kv heads, embed, ffn, max seq,
# batch, seq); "demo" is configs/demo's model with its recipe's batch of 64 x 16.
MODELS = {
    "15m": (8192, 6, 6, 2, 384, 1024, 256, 4, 256),
    "demo": (264, 4, 8, 2, 128, 384, 64, 64, 16),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--model", choices=sorted(MODELS), default="15m")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--bf16_mode", choices=["params", "autocast"], default="params",
                    help="bf16: 'params' = bf16 parameters, gradients and AdamW states "
                    "(torchtune's dtype: bf16); 'autocast' = f32 parameters (the master "
                    "copies) with the matmuls under torch.autocast('cpu', bfloat16)")
    args = ap.parse_args()
    VOCAB, LAYERS, HEADS, KV_HEADS, EMBED, FFN, MAX_SEQ, BATCH, SEQ = MODELS[args.model]
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = llama3(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS,
                   embed_dim=EMBED, max_seq_len=MAX_SEQ, intermediate_dim=FFN, rope_base=10000.0)
    bf16_params = args.dtype == "bf16" and args.bf16_mode == "params"
    use_autocast = args.dtype == "bf16" and args.bf16_mode == "autocast"
    if bf16_params:
        model = model.to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul = n_params - VOCAB * EMBED
    flops_per_token = 6.0 * n_matmul + 12.0 * LAYERS * SEQ * EMBED
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    mode = "f32" if args.dtype == "f32" else f"bf16 ({args.bf16_mode})"
    print(f"pytorch eager {torch.__version__}: model {args.model}, {mode}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{n_params / 1e6:.2f}M params "
          f"({n_matmul / 1e6:.2f}M in matmuls), batch {BATCH} x seq {SEQ}, "
          f"{torch.get_num_threads()} threads, {args.warmup} warmup + {args.steps} timed steps")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_autocast):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1),
                               ignore_index=-100)
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
