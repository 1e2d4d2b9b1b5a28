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

def cctune_mpi_test(
        name,
        srcs = [],
        deps = [],
        binary = None,
        np = 2,
        args = [],
        expect_failure = False,
        expect_status = None,
        expect_output = [],
        expect_lines = {},
        max_seconds = 0,
        launcher = False,
        data = [],
        copts = [],
        size = "small",
        tags = [],
        **kwargs):
    """A test run on `np` ranks by mpirun (tools/run_mpi_test.sh), one thread per rank.

    Builds `<name>_bin`, a GoogleTest program of `srcs`/`deps`, unless `binary` names a
    program to run instead. Passes when mpirun exits 0 (non-zero with expect_failure, exactly
    expect_status when given), each
    extended regex of expect_output matches the ranks' output, and the run took at most
    max_seconds (0: no limit); expect_lines maps a regex to the exact number of output lines
    that match it. launcher: `binary` starts mpirun itself (cctune run --nproc_per_node).
    Tagged "mpi" and "cpu:<np>" (Bazel reserves that many cores).
    """
    if binary == None:
        cc_binary(
            name = name + "_bin",
            testonly = True,
            srcs = srcs,
            copts = CCTUNE_COPTS + CCTUNE_MARCH_COPTS + copts,
            linkopts = ["-rdynamic"],
            deps = deps + ["@gtest_main//:lib", "@gtest//:lib"],
            tags = ["manual"],
        )
        binary = ":" + name + "_bin"
    runner_args = ["--np=%d" % np]
    if expect_failure:
        runner_args.append("--expect_failure")
    if expect_status != None:
        runner_args.append("--expect_status=%d" % expect_status)
    # Regexes travel as single-quoted args; "$" is doubled for Bazel's Make-variable expansion.
    runner_args += ["'--expect_output=%s'" % p.replace("$", "$$") for p in expect_output]
    runner_args += [
        "'--expect_lines=%d:%s'" % (n, p.replace("$", "$$"))
        for p, n in expect_lines.items()
    ]
    if max_seconds:
        runner_args.append("--max_seconds=%d" % max_seconds)
    if launcher:
        runner_args.append("--launcher")
    native.sh_test(
        name = name,
        srcs = ["//tools:run_mpi_test.sh"],
        args = runner_args + ["$(location %s)" % binary] + args,
        data = [binary] + data,
        size = size,
        tags = tags + ["mpi", "cpu:%d" % np],
        **kwargs
    )
