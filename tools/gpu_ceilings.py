#!/usr/bin/env python3
"""Measures the two ceilings of the lent GPU that cctune's CUDA benchmarks are read against.

Run on the GPU machine (it has PyTorch; this machine does not need it):

    python3 tools/gpu_ceilings.py

1. Device memory bandwidth: a device-to-device copy of a 2 GiB buffer, counting bytes read
   plus bytes written (what cuda_ops_bench's GB/s counters count).
2. bf16 and fp32 matrix rate: an 8192^3 product through cuBLAS (torch.matmul) on random data
   (never zeros: they run faster), fp32 with TF32 off.

Each figure is the median of timed repeats after warm-ups, with CUDA events, and the line
printed is what docs/architecture.md's GPU section quotes. Not a test: nothing is asserted.
"""
import statistics
import sys

try:
    import torch
except ImportError:
    print("gpu_ceilings: no torch here")
    sys.exit(0)


def timed(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times), min(times), max(times)


def main():
    if not torch.cuda.is_available():
        print("gpu_ceilings: no CUDA device")
        return
    p = torch.cuda.get_device_properties(0)
    print(f"device: {p.name}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.1f} GiB, torch {torch.__version__}")
    n = 1 << 29  # 2 GiB of fp32
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    med, lo, hi = timed(lambda: dst.copy_(src), 20)
    gbs = 2 * src.numel() * 4 / med / 1e9
    print(f"copy d2d 2 GiB: {gbs:.0f} GB/s read+write (median of 20; {2*n*4/hi/1e9:.0f}-"
          f"{2*n*4/lo/1e9:.0f})")
    del src, dst
    torch.backends.cuda.matmul.allow_tf32 = False
    for dt, reps in ((torch.bfloat16, 10), (torch.float32, 3)):
        m = 8192
        a = torch.randn(m, m, device="cuda", dtype=dt)
        b = torch.randn(m, m, device="cuda", dtype=dt)
        med, lo, hi = timed(lambda: a @ b, reps)
        print(f"matmul {str(dt).split('.')[-1]} {m}^3 random: {2*m**3/med/1e12:.0f} TFLOP/s "
              f"(median of {reps}; {2*m**3/hi/1e12:.0f}-{2*m**3/lo/1e12:.0f})")
        del a, b
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
