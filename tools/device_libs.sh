# Sourced by the tools/device_*.sh scripts: the one staging of shared libraries
# (here) and the one library path (on the device).
#
#   device_stage_libs [--without-torch] [--libcxx] CARRY BINARY...     (here)
#
# Copies the shared libraries the BINARYs link (ldd) into CARRY/lib, leaving out
# the C runtime, libstdc++ and the driver's (libcuda, libcupti), which the device
# has. --without-torch also leaves out LibTorch and the CUDA runtime libraries
# (the device's torch wheel has them: device_lib_path finds them); --libcxx puts
# libstdc++ in CARRY/libcxx instead of leaving it out (device_lib_path uses it
# when the device's is older).
device_stage_libs() {
  local torch=1 libcxx=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --without-torch) torch=0; shift ;;
      --libcxx) libcxx=1; shift ;;
      *) break ;;
    esac
  done
  # Absolute: the sandbox's children (the zygote, in its own working directory) inherit it.
  local carry; carry=$(cd "$1" && pwd); shift
  local skip='/(libc|libm|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libutil|libcuda|libcupti)\.so'
  [ $torch = 1 ] || skip="$skip|torch|c10|libnv|libcudart|libcublas|libcudnn"
  mkdir -p "$carry/lib"
  if [ $libcxx = 1 ]; then mkdir -p "$carry/libcxx"; fi
  local so
  ldd "$@" | awk '/=> \// {print $3}' | grep -vE "$skip" | sort -u | while read -r so; do
    case "$so" in
      *libstdc++*) if [ $libcxx = 1 ]; then cp -L "$so" "$carry/libcxx/"; fi ;;
      *) cp -nL "$so" "$carry/lib/" ;;
    esac
  done
}

#   device_lib_path CARRY PROBE_COMMAND...                              (on the device)
#
# Puts the carried .so files (CARRY/lib), the torch wheel's lib dir and the
# CUDA runtime libraries of its nvidia-* packages on LD_LIBRARY_PATH; when
# PROBE_COMMAND still reports a library "not found" (the device's libstdc++ is
# older than the build machine's), CARRY/libcxx goes first too. $PYTHON picks
# the interpreter (default python3).
device_lib_path() {
  # Absolute: the sandbox's children (the zygote, in its own working directory) inherit it.
  local carry; carry=$(cd "$1" && pwd); shift
  local py=${PYTHON:-python3} torch_lib nv_libs
  torch_lib=$($py -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
  nv_libs=$($py -c 'import glob,os,site;print(":".join(sorted({os.path.dirname(p) for sp in site.getsitepackages() for p in glob.glob(os.path.join(sp,"nvidia","**","lib","*.so*"),recursive=True)})))')
  export LD_LIBRARY_PATH="$carry/lib:$torch_lib:$nv_libs:${LD_LIBRARY_PATH:-}"
  if "$@" 2>&1 | grep -q "not found"; then
    export LD_LIBRARY_PATH="$carry/libcxx:$LD_LIBRARY_PATH"  # Device libstdc++ older than ours.
  fi
}

# The CUPTI recorder for the candidate process (CUDA_INJECTION64_PATH), built on
# the device against its own CUDA and CUPTI: prints the library's path, or
# nothing and fails where the build does (its output goes to LOG).
#
#   KPROF=$(device_build_kprof "$OUT/kprof_build.log") || KPROF=...    (device)
device_build_kprof() {
  local log=$1 cuda=${CUDA_HOME:-/usr/local/cuda} out=/tmp/kr_kprof/libkprof.so cupti_h cupti_so
  mkdir -p /tmp/kr_kprof
  cupti_h=$(dirname "$(find "$cuda/" "$cuda/extras" -name cupti.h 2>/dev/null | head -1)")
  cupti_so=$(dirname "$(find "$cuda/" -name 'libcupti.so*' 2>/dev/null | head -1)")
  g++ -std=c++17 -O2 -fPIC -shared -I. -I"$cuda/include" -I"$cupti_h" profiler_service/cupti/kprof.cc -o $out \
    -L"$cupti_so" -Wl,-rpath,"$cupti_so" -L"$cuda/lib64/stubs" -lcupti -lcuda > "$log" 2>&1 && echo $out
}
