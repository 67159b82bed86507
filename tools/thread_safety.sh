#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety -Werror) over every
# translation unit that carries Abseil lock annotations (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...): gcc ignores the annotations, so without
# this nothing checks them. Syntax only (no code generation), so it takes
# seconds per file; run after `bazel build` (it reads the generated *.pb.h
# under bazel-bin). tools/test.sh runs it; exits non-zero on any finding.
#   tools/thread_safety.sh            every annotated translation unit
#   tools/thread_safety.sh FILE.cc... just these
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ > /dev/null || { echo "thread_safety: clang++ not installed (tools/setup.sh installs clang)"; exit 1; }
bin="$(bazel info bazel-bin 2>/dev/null || echo bazel-bin)"
annotations='ABSL_GUARDED_BY|ABSL_PT_GUARDED_BY|ABSL_EXCLUSIVE_LOCKS_REQUIRED|ABSL_SHARED_LOCKS_REQUIRED|ABSL_LOCKS_EXCLUDED'

if [ $# -gt 0 ]; then
  units=("$@")
else
  # Annotated files, and the .cc beside each annotated header (where its methods are).
  mapfile -t annotated < <(git ls-files '*.h' '*.cc' | xargs grep -lE "$annotations")
  units=()
  for f in "${annotated[@]}"; do
    case "$f" in
      *.cc) units+=("$f") ;;
      *.h) [ -f "${f%.h}.cc" ] && units+=("${f%.h}.cc") ;;
    esac
  done
  mapfile -t units < <(printf '%s\n' "${units[@]}" | sort -u)
fi

# LibTorch headers for the learner's units (the torch wheel tools/setup.sh installs).
torch_inc=()
if python3 -c 'import torch' 2> /dev/null; then
  # After the system directories: the wheel also carries an older protobuf.
  while read -r d; do torch_inc+=(-idirafter "$d"); done < <(python3 -c \
    'import torch.utils.cpp_extension as c; print("\n".join(c.include_paths()))')
fi

failed=0
for u in "${units[@]}"; do
  if ! clang++ -std=c++17 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety \
      -Wno-unknown-warning-option -I. -I"$bin" "${torch_inc[@]}" "$u" 2> /tmp/thread_safety.$$.log; then
    cat /tmp/thread_safety.$$.log
    failed=$((failed + 1))
  fi
done
rm -f /tmp/thread_safety.$$.log
echo "thread_safety: ${#units[@]} translation units, $failed with findings"
[ "$failed" -eq 0 ]
