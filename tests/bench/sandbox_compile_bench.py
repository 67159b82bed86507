"""Compile-latency benchmark of the sandbox's build paths, same kernels, same
machine, one run (a benchmark, not a test; tools/device_sandbox.sh runs it on
the GPU machine):

  fast_path     nvcc -O3 --use_fast_math -arch=sm_90 -shared  (no torch headers;
                the exact command of sandbox/compile_stage.cc)
  cuda_agent    CUDA-Agent-style extension: pybind11 binding with <torch/types.h>,
                built by torch.utils.cpp_extension.load
  load_inline   torch.utils.cpp_extension.load_inline with <torch/extension.h>

Every build uses a fresh build directory (no ninja or ccache reuse). Prints
p50/p90 per path and the ratios against load_inline; writes JSON to --out."""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")
FLAGS = ["-O3", "--use_fast_math", "-arch=sm_90"]


def launchers(src):
    """extern "C" int name(const float* x, float* y, long long n) -> names with that exact signature."""
    return re.findall(r'extern "C" int (\w+)\(const float\* x, float\* y, long long n\)', src)


def fast_path(src_path, tmp):
    t = time.perf_counter()
    subprocess.run([NVCC, *FLAGS, "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-o",
                    os.path.join(tmp, "k.so"), src_path, "-Xlinker", "--as-needed", "-lcublas"], check=True)
    return time.perf_counter() - t


WRAP = """
torch::Tensor run(torch::Tensor x) {{
  auto y = torch::empty_like(x);
  int rc = {name}(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  TORCH_CHECK(rc == 0, "launch failed");
  return y;
}}
"""


def cuda_agent(src_path, name, tmp, tag):
    from torch.utils.cpp_extension import load
    with open(os.path.join(tmp, "binding.cpp"), "w") as f:
        f.write('#include <torch/types.h>\n#include <pybind11/pybind11.h>\n#include <torch/csrc/utils/pybind.h>\n'
                f'extern "C" int {name}(const float* x, float* y, long long n);\n' + WRAP.format(name=name) +
                'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }\n')
    t = time.perf_counter()
    load(name=f"agent_{tag}", sources=[os.path.join(tmp, "binding.cpp"), src_path], build_directory=tmp,
         extra_cuda_cflags=FLAGS, extra_cflags=["-O3"], verbose=False)
    return time.perf_counter() - t


def inline(src_path, name, tmp, tag):
    from torch.utils.cpp_extension import load_inline
    with open(src_path) as f:
        cuda = "#include <torch/extension.h>\n" + f.read() + WRAP.format(name=name)
    t = time.perf_counter()
    load_inline(name=f"inline_{tag}", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda,
                functions=["run"], build_directory=tmp, extra_cuda_cflags=FLAGS, verbose=False)
    return time.perf_counter() - t


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="sandbox/solutions")
    ap.add_argument("--torch_builds", type=int, default=2, help="kernels built with each torch path")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ.setdefault("MAX_JOBS", "4")
    sources = sorted(glob.glob(f"{a.root}/level*/*/kernels/*.cu"))
    res = {"fast_path": [], "cuda_agent": [], "load_inline": [], "kernels": []}
    for s in sources:
        with tempfile.TemporaryDirectory() as tmp:
            res["fast_path"].append(fast_path(s, tmp))
        print(f"fast_path {os.path.relpath(s, a.root)}: {res['fast_path'][-1]:.2f} s", flush=True)
    simple = [(s, launchers(open(s).read())) for s in sources]
    simple = [(s, names[0]) for s, names in simple if names][: a.torch_builds]
    for i, (s, name) in enumerate(simple):
        with tempfile.TemporaryDirectory() as tmp:
            res["cuda_agent"].append(cuda_agent(s, name, tmp, i))
        print(f"cuda_agent {name}: {res['cuda_agent'][-1]:.2f} s", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            res["load_inline"].append(inline(s, name, tmp, i))
        print(f"load_inline {name}: {res['load_inline'][-1]:.2f} s", flush=True)
        res["kernels"].append(name)
    summary = {k: {"n": len(v), "p50_s": pct(v, 0.5), "p90_s": pct(v, 0.9)} for k, v in res.items() if k != "kernels"}
    base = summary["load_inline"]["p50_s"]
    for k in summary:
        summary[k]["ratio_vs_load_inline_p50"] = summary[k]["p50_s"] / base if base == base and base > 0 else None
    print("\npath          n    p50 s   p90 s   p50 / load_inline p50")
    for k, v in summary.items():
        r = v["ratio_vs_load_inline_p50"]
        print(f"{k:12s} {v['n']:3d} {v['p50_s']:8.2f} {v['p90_s']:7.2f}   {'%.3f' % r if r is not None else '-'}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"raw": res, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
