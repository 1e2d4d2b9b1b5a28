// Function attributes for the CPU kernels' SIMD paths. Each path is compiled for its own
// instruction set through these (not -march), so a file builds with any -march and its paths
// are picked at run time (kernels/cpu/isa.h). Shared by the GEMM, the packed GEMM and the
// quantized GEMV/GEMM (kernels/cpu/gemm, kernels/cpu/quant).
#ifndef CCTUNE_KERNELS_CPU_SIMD_TARGETS_H_
#define CCTUNE_KERNELS_CPU_SIMD_TARGETS_H_

// x86-64-v3: AVX2 + FMA + F16C (IsaLevel::kAvx2).
#define CCTUNE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
// AVX-512 F/BW/VL/DQ (IsaLevel::kAvx512), with the AVX2 set for 256-bit helpers.
#define CCTUNE_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
// + AVX512_BF16 (IsaLevel::kAvx512Bf16): vdpbf16ps, vcvtneps2bf16.
// AVX-512 with VNNI (vpdpbusd: the int8 dot products of kernels/cpu/quant).
#define CCTUNE_TARGET_AVX512VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define CCTUNE_TARGET_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
// AMX tiles (IsaLevel kAvx512Bf16 + AmxSupported(), kernels/cpu/isa.h): tdpbf16ps, with the
// AVX-512 BF16 set for packing (vcvtne2ps2bf16) and the C edge copies.
#define CCTUNE_TARGET_AMX                                                            \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16," \
                        "avx2,fma,f16c")))
// Helpers called from a target function must inline into it (a call would cross targets).
#define CCTUNE_INLINE inline __attribute__((always_inline))
// Pins a loaded vector in a register. Without it GCC folds the load into every FMA that uses
// the value (one load per use instead of one per value), which makes small tiles load-bound.
#define CCTUNE_IN_REGISTER(x) __asm__("" : "+v"(x))

#endif  // CCTUNE_KERNELS_CPU_SIMD_TARGETS_H_
