"""kernelrl_proto: protoc + grpc_cpp_plugin in a genrule, wrapped as a cc_library.

Bazel 4's native proto rules would fetch their own protoc; the system one is
used instead so that generated code matches the system libprotobuf exactly.
"""

def kernelrl_proto(name, srcs, deps = [], grpc = True):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    plugin = "@system//:bin/grpc_cpp_plugin"
    cmd = "$(location @system//:bin/protoc) --proto_path=. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --plugin=protoc-gen-grpc=$(location %s) --grpc_out=$(GENDIR)" % plugin
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd,
        tools = ["@system//:bin/protoc"] + ([plugin] if grpc else []),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:grpc", "@system//:protobuf"],
        visibility = ["//visibility:public"],
    )
