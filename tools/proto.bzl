"""cc_proto: runs the system protoc from a genrule and wraps the C++ output in a cc_library."""

load("//tools:build_defs.bzl", "CCTUNE_MARCH_COPTS")

def cc_proto(name, src, deps = [], **kwargs):
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_protoc",
        srcs = [src],
        outs = [base + ".pb.h", base + ".pb.cc"],
        tools = ["@protoc//:protoc"],
        cmd = "$(location @protoc//:protoc) --proto_path=. --cpp_out=$(GENDIR) $(location %s)" % src,
        message = "protoc " + src,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        deps = deps + ["@protobuf//:lib"],
        copts = CCTUNE_MARCH_COPTS,
        **kwargs
    )
