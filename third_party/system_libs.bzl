"""Repository rules that wrap libraries already installed on the machine.

Nothing is downloaded: the rules look the libraries up when Bazel fetches the
repository (pkg-config for Debian's gRPC/Protobuf/Abseil, python3 for the torch
wheel) and generate a BUILD file with the right link flags. Roots can be moved
with environment variables, so a cluster with a CUDA LibTorch needs no edits:

  KERNELRL_TORCH_ROOT  directory holding include/ and lib/ of LibTorch
  KERNELRL_CUDA_ROOT   CUDA toolkit root (default /usr/local/cuda)
  KERNELRL_NCCL_INCLUDE  directory holding nccl.h (default: the wheel's nvidia/nccl/include)
"""

def _run(ctx, args):
    res = ctx.execute(args)
    if res.return_code != 0:
        fail("kernelrl: `%s` failed: %s" % (" ".join(args), res.stderr))
    return res.stdout.strip()

def _quoted(flags):
    return ", ".join(['"%s"' % f for f in flags])

_ABSL_MODULES = " ".join([
    "absl_status", "absl_statusor", "absl_strings", "absl_str_format", "absl_synchronization",
    "absl_time", "absl_flags", "absl_flags_parse", "absl_flags_usage", "absl_hash",
    "absl_raw_hash_set", "absl_random_random", "absl_cord", "absl_failure_signal_handler",
    "absl_stacktrace", "absl_symbolize", "absl_examine_stack",
])

def _system_grpc_impl(ctx):
    grpc = _run(ctx, ["pkg-config", "--libs", "grpc++", "protobuf"]).split(" ")
    absl = _run(ctx, ["sh", "-c", "pkg-config --libs " + _ABSL_MODULES]).split(" ")
    crypto = _run(ctx, ["pkg-config", "--libs", "libcrypto"]).split(" ")  # Debian libssl-dev
    for tool in ["protoc", "grpc_cpp_plugin"]:
        path = ctx.which(tool)
        if path == None:
            fail("kernelrl: %s not found; run tools/setup.sh" % tool)
        ctx.symlink(path, "bin/" + tool)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# Headers come from /usr/include, which the toolchain already searches.
cc_library(name = "absl", linkopts = [{absl}])
cc_library(name = "grpc", linkopts = [{grpc}, "-lgrpc++_reflection"], deps = [":absl"])
cc_library(name = "protobuf", linkopts = ["-lprotobuf"], deps = [":absl"])
cc_library(name = "gtest", linkopts = ["-lgmock", "-lgtest", "-pthread"])
cc_library(name = "gtest_main", linkopts = ["-lgmock", "-lgtest_main", "-lgtest", "-pthread"])
cc_library(name = "benchmark", linkopts = ["-lbenchmark", "-pthread"])
cc_library(name = "benchmark_main", linkopts = ["-lbenchmark_main", "-lbenchmark", "-pthread"])
# OpenSSL's libcrypto (common/sha256).
cc_library(name = "crypto", linkopts = [{crypto}])
# Debian's prometheus-cpp-dev: the registry and text serializer (core).
# common/service.cc serves the text with cpp-httplib, the tree's one HTTP server.
cc_library(name = "prometheus", linkopts = ["-lprometheus-cpp-core", "-pthread"])
# Debian's libcpp-httplib-dev (compiled, split build): its header needs the
# library's own feature defines or the class layouts differ (actor, OpenAI API).
cc_library(
    name = "httplib",
    defines = ["CPPHTTPLIB_OPENSSL_SUPPORT", "CPPHTTPLIB_ZLIB_SUPPORT", "CPPHTTPLIB_BROTLI_SUPPORT"],
    linkopts = ["-lcpp-httplib", "-pthread"],
)
# Debian's nlohmann-json3-dev: header-only, in /usr/include (common/json).
cc_library(name = "nlohmann_json")
exports_files(["bin/protoc", "bin/grpc_cpp_plugin"])
""".format(absl = _quoted(absl), grpc = _quoted(grpc), crypto = _quoted(crypto)))

system_grpc_repository = repository_rule(
    implementation = _system_grpc_impl,
    local = True,
)

def _torch_impl(ctx):
    root = ctx.os.environ.get("KERNELRL_TORCH_ROOT", "")
    if not root:
        py = ctx.which("python3")
        res = ctx.execute([py, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"]) if py else None
        if res == None or res.return_code != 0:
            # No torch: targets that need it fail with a clear message; the rest still builds.
            ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "torch", srcs = ["MISSING_TORCH_run_tools_setup_sh_or_set_KERNELRL_TORCH_ROOT"])
cc_library(name = "torch_cuda", deps = [":torch"])
cc_library(name = "c10d_nccl", deps = [":torch"])
""")
            return
        root = res.stdout.strip()
    # Mirror include/ entry by entry, leaving out the wheel's private copy of
    # google/protobuf: it is older than the system protobuf and, being earlier
    # on the search path, would shadow it in any unit that sees both.
    for entry in ctx.path(root + "/include").readdir():
        if entry.basename != "google":
            ctx.symlink(entry, "include/" + entry.basename)
    ctx.symlink(root + "/lib", "lib")
    has_cuda = ctx.path(root + "/lib/libtorch_cuda.so").exists
    # c10d's ProcessGroupNCCL header needs nccl.h: the wheel's nvidia-nccl
    # package sits next to torch in site-packages (KERNELRL_NCCL_INCLUDE overrides).
    nccl_include = ctx.os.environ.get("KERNELRL_NCCL_INCLUDE", root + "/../nvidia/nccl/include")
    has_nccl = has_cuda and ctx.path(nccl_include + "/nccl.h").exists
    if has_nccl:
        ctx.symlink(nccl_include, "nccl/include")
    # push/pop-state: --as-needed must not leak onto the libraries linked after these.
    cuda_libs = '"-Wl,--push-state,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--pop-state",' if has_cuda else ""
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# `includes` makes both roots -isystem, as LibTorch's own build does.
cc_library(
    name = "torch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = ["-L{root}/lib", "-Wl,-rpath,{root}/lib", "-ltorch", "-ltorch_cpu", "-lc10", "-pthread"],
)

# Forces the CUDA backend to be linked (and registered) even though no symbol
# of it is referenced directly.
cc_library(
    name = "torch_cuda",
    linkopts = ["-L{root}/lib", {cuda_libs}],
    deps = [":torch"],
)

# c10d with ProcessGroupNCCL (learner/dist): nccl.h and USE_C10D_NCCL; the
# symbols are in libtorch_cuda, which finds the wheel's libnccl itself.
cc_library(
    name = "c10d_nccl",
    hdrs = glob(["nccl/include/**/*.h"]),
    includes = ["nccl/include"],
    defines = {nccl_defines},
    deps = [":torch_cuda", "@cuda//:headers"],
)
""".format(root = root, cuda_libs = cuda_libs, nccl_defines = '["USE_C10D_NCCL"]' if has_nccl else "[]"))

torch_repository = repository_rule(
    implementation = _torch_impl,
    environ = ["KERNELRL_TORCH_ROOT", "KERNELRL_NCCL_INCLUDE", "PATH"],
    local = True,
)

def _cuda_impl(ctx):
    root = ctx.os.environ.get("KERNELRL_CUDA_ROOT", "/usr/local/cuda")
    ctx.symlink(root + "/include", "include")
    lib = root + "/lib64"
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inl"], allow_empty = True),
    includes = ["include"],
)
cc_library(name = "cudart", linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"], deps = [":headers"])
# The driver API links against the stub; the real libcuda comes from the driver at run time.
cc_library(name = "cuda_driver", linkopts = ["-L{lib}/stubs", "-lcuda"], deps = [":headers"])
cc_library(name = "nvrtc", linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnvrtc"], deps = [":headers"])
cc_library(name = "cupti", linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcupti"], deps = [":headers"])
cc_library(name = "cublas", linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcublas", "-lcublasLt"], deps = [":headers"])
cc_library(name = "cudnn", linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudnn"], deps = [":headers"])
filegroup(name = "nvcc", srcs = ["bin/nvcc"])
# NVML: headers only; libnvidia-ml.so.1 belongs to the driver, so code dlopens it.
cc_library(name = "nvml_headers", hdrs = glob(["nvml/include/nvml.h"]), includes = ["nvml/include"], linkopts = ["-ldl"])
""".format(lib = lib))
    ctx.symlink(root + "/bin", "bin")
    # The toolkit on the dev machine lacks nvml.h; the pip package nvidia-nvml-dev has it.
    nvml = ctx.path(root + "/include/nvml.h")
    if not nvml.exists:
        py = ctx.which("python3")
        res = ctx.execute([py, "-c", "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13/include/nvml.h'))"]) if py else None
        if res != None and res.return_code == 0:
            nvml = ctx.path(res.stdout.strip())
    if nvml.exists:
        ctx.symlink(nvml, "nvml/include/nvml.h")

cuda_repository = repository_rule(
    implementation = _cuda_impl,
    environ = ["KERNELRL_CUDA_ROOT", "PATH"],
    local = True,
)
