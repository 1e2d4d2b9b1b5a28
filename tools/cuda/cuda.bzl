"""cuda_library: compiles .cu sources with nvcc and wraps the objects in a cc_library.

nvcc builds for sm_90 and embeds compute_90 PTX, so newer GPUs can JIT the kernels. Where
the toolkit is absent (see cuda_configure.bzl) the macro makes an empty library, and
if_cuda() lets callers add CUDA-only dependencies and defines.
"""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "CUDA_ROOT", "NVCC")
load("//tools:build_defs.bzl", "CCTUNE_MARCH_COPTS")

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-DCCTUNE_WITH_CUDA=1",
]

def if_cuda(if_true, if_false = []):
    return if_true if CUDA_ENABLED else if_false

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files (nvcc) and .cc files (the host C++ compiler).
      hdrs: headers used by both.
      deps: cc_library deps of the library (the .cc files see their headers; nvcc sees only
        this package's .h/.cuh files, so .cu files include nothing else from the tree).
      copts: extra host compiler options for the .cc files.
      **kwargs: passed to the cc_library.
    """
    if not CUDA_ENABLED:
        native.cc_library(name = name, hdrs = hdrs, **kwargs)
        return
    cu_srcs = [s for s in srcs if s.endswith(".cu")]
    cc_srcs = [s for s in srcs if not s.endswith(".cu")]
    objs = []
    for src in cu_srcs:
        obj = "_objs_cu/%s/%s.o" % (name, src[:-3])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            # The package's headers (hdrs plus every .h/.cuh), each listed once: a label
            # repeated in srcs is an error.
            srcs = [src] + hdrs + [
                h
                for h in native.glob(["**/*.h", "**/*.cuh"])
                if h not in hdrs
            ],
            outs = [obj],
            cmd = " ".join([NVCC] + NVCC_FLAGS + [
                "-I.",
                "-I$(GENDIR)",
                "-I" + CUDA_ROOT + "/include",
                "-c $(location %s)" % src,
                "-o $@",
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = cc_srcs + objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        copts = CCTUNE_MARCH_COPTS + copts,
        defines = ["CCTUNE_WITH_CUDA=1"],
        alwayslink = 1,
        **kwargs
    )
