"""Compile-stage builder for the two layouts that need torch's extension
machinery. Runs as a contained child of the C++ compile stage (no network,
read-only filesystem except the output directory, rlimits, seccomp), never in
a GPU process.

  --layout TORCH_EXTENSION    CUDA-Agent layout: kernels/*.cu + binding .cpp
                              files -> module `kernelrl_ext` via cpp_extension.load
  --layout SINGLE_FILE_INLINE a KernelBench model_new.py calling load_inline at
                              import: imported here with load_inline/load
                              recording what they built.
Writes <out>/manifest.json."""
import argparse
import glob
import json
import os
import sys


def flags(arch):
    # Per-thread default stream, as the fast path (compile_stage.cc): launches
    # without a stream then share the executor's stream and graph capture.
    return ["-O3", "--use_fast_math", f"-arch={arch}", "--default-stream", "per-thread"]


def build_extension(ws, out, arch):
    import torch.utils.cpp_extension as cpp
    sources = sorted(glob.glob(os.path.join(ws, "kernels", "*.cu")))
    sources += sorted(p for p in glob.glob(os.path.join(ws, "**", "*.cpp"), recursive=True))
    os.makedirs(os.path.join(out, "kernelrl_ext"), exist_ok=True)
    cpp.load(name="kernelrl_ext", sources=sources, build_directory=os.path.join(out, "kernelrl_ext"),
             extra_cflags=["-O3"], extra_cuda_cflags=flags(arch), extra_include_paths=[ws], verbose=False)
    so = [p for p in os.listdir(os.path.join(out, "kernelrl_ext")) if p.endswith(".so")]
    return {"extension_dir": "kernelrl_ext", "extension_so": os.path.join("kernelrl_ext", so[0])}


VIOLATION_EXIT = 86  # compile_stage.cc maps this exit code to SANDBOX_VIOLATION
TOOLS = {"ninja", "nvcc", "c++", "g++", "gcc", "cc", "cicc", "ptxas", "fatbinary", "nvlink", "ld", "which"}


def install_audit(out):
    """The candidate's own top-level code runs here (load_inline happens at
    import): only the compiler tools torch spawns may be started."""
    allowed = [os.path.realpath(out) + os.sep, os.path.realpath(os.environ.get("TMPDIR", out)) + os.sep]

    def violation(what):
        sys.stderr.write(f"SANDBOX_VIOLATION: {what}\n")
        sys.stderr.flush()
        os._exit(VIOLATION_EXIT)

    def hook(event, args):
        if event == "subprocess.Popen":
            exe = args[0] if args[0] else (args[1][0] if args[1] else "")
            if os.path.basename(os.fsdecode(exe)) not in TOOLS:
                violation(f"starts a process: {os.fsdecode(exe)}")
        elif event in ("os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"):
            violation(f"process control ({event})")
        elif event.startswith("socket.") and event != "socket.getservbyname":
            violation(f"network ({event})")
        elif event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                      (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and isinstance(path, (str, bytes)):
                p = os.path.realpath(os.fsdecode(path))
                if not any((p + os.sep).startswith(a) for a in allowed):
                    violation(f"write to {p}")

    sys.addaudithook(hook)


def build_inline(ws, out, arch):
    import importlib.util
    import torch.utils.cpp_extension as cpp
    built = {}
    real_inline, real_load = cpp.load_inline, cpp.load

    def record(real):
        def wrapper(name, *args, **kwargs):
            kwargs["build_directory"] = os.path.join(out, name)
            os.makedirs(kwargs["build_directory"], exist_ok=True)
            kwargs.setdefault("extra_cuda_cflags", [])
            kwargs["extra_cuda_cflags"] = list(kwargs["extra_cuda_cflags"]) + flags(arch)
            kwargs["verbose"] = False
            mod = real(name, *args, **kwargs)
            built[name] = os.path.relpath(mod.__file__, out)
            return mod
        return wrapper

    cpp.load_inline = record(real_inline)
    cpp.load = record(real_load)
    install_audit(out)
    sys.path.insert(0, ws)
    spec = importlib.util.spec_from_file_location("model_new", os.path.join(ws, "model_new.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"extensions": built}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", a.arch.replace("sm_", "")[:-1] + "." + a.arch[-1])
    os.environ["TORCH_EXTENSIONS_DIR"] = a.out
    os.environ.setdefault("MAX_JOBS", "2")
    if a.layout == "TORCH_EXTENSION":
        manifest = build_extension(a.workspace, a.out, a.arch)
    else:
        manifest = build_inline(a.workspace, a.out, a.arch)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
