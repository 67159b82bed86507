# Sourced by the tools/device_*.sh scripts whose Bazel binaries link LibTorch.
#
#   device_lib_path CARRY PROBE_COMMAND...
#
# Puts the carried .so files (CARRY/lib), the torch wheel's lib dir and the
# CUDA runtime libraries of its nvidia-* packages on LD_LIBRARY_PATH; when
# PROBE_COMMAND still reports a library "not found" (the device's libstdc++ is
# older than the build machine's), CARRY/libcxx goes first too. $PYTHON picks
# the interpreter (default python3).
device_lib_path() {
  local carry=$1; shift
  local py=${PYTHON:-python3} torch_lib nv_libs
  torch_lib=$($py -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
  nv_libs=$($py -c 'import glob,os,site;print(":".join(sorted({os.path.dirname(p) for sp in site.getsitepackages() for p in glob.glob(os.path.join(sp,"nvidia","**","lib","*.so*"),recursive=True)})))')
  export LD_LIBRARY_PATH="$carry/lib:$torch_lib:$nv_libs:${LD_LIBRARY_PATH:-}"
  if "$@" 2>&1 | grep -q "not found"; then
    export LD_LIBRARY_PATH="$carry/libcxx:$LD_LIBRARY_PATH"  # Device libstdc++ older than ours.
  fi
}
