"""Thin macros that keep cctune's compiler options and test wiring in one place."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

CCTUNE_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]

# The target CPU. It lives here, not in .bazelrc's --copt, because a later --copt cannot take
# an earlier one back: --config=avx2 / scalar / portable (--define=cctune_march=...) must
# replace -march=native, not follow it, so that no compile action of theirs sees "native".
CCTUNE_MARCH_COPTS = select({
    "//tools:march_x86_64_v3": ["-march=x86-64-v3"],
    "//tools:march_x86_64_v2": ["-march=x86-64-v2"],
    "//conditions:default": ["-march=native"],
})

def cctune_cc_library(name, copts = [], **kwargs):
    cc_library(name = name, copts = CCTUNE_COPTS + CCTUNE_MARCH_COPTS + copts, **kwargs)

def cctune_cc_binary(name, copts = [], linkopts = [], **kwargs):
    """A program. It exports its symbols (-rdynamic) so that a backend library it opens at run
    time (libcctune_cuda.so, core/backend_library.h) binds to its registries and allocator."""
    cc_binary(
        name = name,
        copts = CCTUNE_COPTS + CCTUNE_MARCH_COPTS + copts,
        linkopts = ["-rdynamic"] + linkopts,
        **kwargs
    )

def cctune_cc_test(name, deps = [], copts = [], size = "small", **kwargs):
    """A GoogleTest test with gmock and gtest_main."""
    cc_test(
        name = name,
        copts = CCTUNE_COPTS + CCTUNE_MARCH_COPTS + copts,
        size = size,
        deps = deps + ["@gtest_main//:lib", "@gtest//:lib"],
        **kwargs
    )

def cctune_cc_benchmark(name, deps = [], copts = [], **kwargs):
    """A Google Benchmark binary (bazel run it; it is not a test)."""
    cc_binary(
        name = name,
        copts = CCTUNE_COPTS + CCTUNE_MARCH_COPTS + copts,
        deps = deps + ["@benchmark//:lib"],
        **kwargs
    )

def cctune_fuzz_target(name, srcs, deps = [], corpus = [], dict = None, copts = [], **kwargs):
    """A libFuzzer target plus `<name>_smoke`, a bounded run of it over a seed corpus.

    Both are tagged "manual" (they link only under --config=fuzz, with clang), and the run
    is tagged "fuzz": tools/fuzz.sh builds and runs every one of them; .ci/run calls it.
      corpus: labels of seed inputs (files or filegroups), copied to a scratch folder first.
      dict:   an optional libFuzzer dictionary.
    The run's length comes from $FUZZ_SECONDS (default 20) or $FUZZ_RUNS (executions).
    """
    cc_binary(
        name = name,
        srcs = srcs,
        copts = CCTUNE_COPTS + copts,
        deps = deps,
        tags = ["manual", "fuzz_binary"],
        **kwargs
    )
    data = [":" + name] + corpus + ([dict] if dict else [])
    args = ["$(location :%s)" % name, "$(location %s)" % dict if dict else "-"]
    args += ["$(locations %s)" % f for f in corpus]
    native.sh_test(
        name = name + "_smoke",
        srcs = ["//tools:run_fuzzer.sh"],
        args = args,
        data = data,
        size = "medium",
        tags = ["manual", "fuzz"],
    )
