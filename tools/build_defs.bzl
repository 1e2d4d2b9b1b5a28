"""Thin macros that keep cctune's compiler options and test wiring in one place."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

CCTUNE_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]

def cctune_cc_library(name, copts = [], **kwargs):
    cc_library(name = name, copts = CCTUNE_COPTS + copts, **kwargs)

def cctune_cc_binary(name, copts = [], **kwargs):
    cc_binary(name = name, copts = CCTUNE_COPTS + copts, **kwargs)

def cctune_cc_test(name, deps = [], copts = [], size = "small", **kwargs):
    """A GoogleTest test with gmock and gtest_main."""
    cc_test(
        name = name,
        copts = CCTUNE_COPTS + copts,
        size = size,
        deps = deps + ["@gtest_main//:lib", "@gtest//:lib"],
        **kwargs
    )

def cctune_cc_benchmark(name, deps = [], copts = [], **kwargs):
    """A Google Benchmark binary (bazel run it; it is not a test)."""
    cc_binary(
        name = name,
        copts = CCTUNE_COPTS + copts,
        deps = deps + ["@benchmark//:lib"],
        **kwargs
    )
