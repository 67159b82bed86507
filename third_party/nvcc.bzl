"""One nvcc rule for the repository's own CUDA sources (no torch headers):
Hopper SASS plus compute_80 PTX, built by the toolkit at @cuda."""

def nvcc(name, src, out, srcs = [], flags = "", libs = ""):
    """Runs nvcc on `src` (other `srcs` are headers it includes) into `out`.
    flags: "-c" for an object, "-shared" for a library; libs: link flags,
    where $$STUBS is the toolkit's stub directory (libcuda)."""
    native.genrule(
        name = name,
        srcs = [src] + srcs,
        outs = [out],
        cmd = ("NVCC=$$(readlink -f $(location @cuda//:nvcc)); STUBS=$$(dirname $$NVCC)/../lib64/stubs; " +
               "$$NVCC -std=c++17 -O3 -Xcompiler -fPIC -I. " +
               "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80 " +
               flags + " $(location " + src + ") -o $@ " + libs),
        tags = ["no-sandbox"],  # nvcc finds its toolchain next to its real path.
        tools = ["@cuda//:nvcc"],
    )
