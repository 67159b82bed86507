#!/usr/bin/env bash
# Copies the built binaries and their runfiles into DEST (the image's
# /opt/kernelrl), symlinks resolved, plus the shared libraries they load that
# the runtime image does not install itself (gRPC, protobuf, Abseil...) into
# DEST/lib. torch's libraries stay where pip puts them in both images.
#   deploy/image/stage.sh DEST      (after `bazel build` of the binaries)
set -euo pipefail
dest=$1
bin="$(bazel info bazel-bin 2>/dev/null)"
targets=(learner/learner_main learner/policy_replica_main actor/actor_main sandbox/sandbox_main sandbox/measure_baselines
         profiler_service/precompute_baselines tools/health_probe)
mkdir -p "$dest/lib"
for t in "${targets[@]}"; do
  mkdir -p "$dest/$(dirname "$t")"
  cp -L "$bin/$t" "$dest/$t"
  if [ -d "$bin/$t.runfiles" ]; then cp -rL "$bin/$t.runfiles" "$dest/$t.runfiles"; fi
  ldd "$bin/$t" | awk '/=> \// {print $3}' |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libpthread|libdl|librt|libcuda)\.so|/torch/|/usr/local/cuda' |
    xargs -r -I{} cp -nL {} "$dest/lib/"
done
# The agent's skill file the actors put in every workspace (ActorConfig rollout.skill_path).
mkdir -p "$dest/sandbox" && cp sandbox/SKILL.md "$dest/sandbox/SKILL.md"
echo "staged $(du -sh "$dest" | cut -f1) into $dest"
