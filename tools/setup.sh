#!/usr/bin/env bash
# Installs what kernelrl needs on a fresh Debian 12 machine (dev or CI). Idempotent
# and quiet: does nothing when everything is already there.
#   Debian: Bazel 4 + its rule repos, gRPC/Protobuf/Abseil, GoogleTest, Google
#           Benchmark, Prometheus (promtool, and the server for the scrape test).
#   PyPI:   torch==2.11.0 (the GPU machine's version; its wheel carries LibTorch),
#           HF transformers/tokenizers and safetensors (reference clients in tests),
#           nvidia-nvml-dev (nvml.h, missing from the dev machine's CUDA toolkit).
set -euo pipefail

APT_PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-skylib bazel-rules-java
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev pkg-config g++ prometheus
  libcli11-dev
)
# libcrypto (OpenSSL) for common/sha256.
APT_PACKAGES+=(libssl-dev)
# HTTP client and server: the OpenAI-compatible policy API (actor, learner) and
# every service's /metrics and /healthz.
APT_PACKAGES+=(libcpp-httplib-dev)
# Prometheus metrics: registry and text exposition (common/metrics).
APT_PACKAGES+=(prometheus-cpp-dev)
# JSON (common/json).
APT_PACKAGES+=(nlohmann-json3-dev)
# Clang's thread-safety analysis of the Abseil lock annotations (tools/thread_safety.sh).
APT_PACKAGES+=(clang)
PIP_PACKAGES=(torch==2.11.0 transformers==5.23.0 tokenizers==0.23.3 safetensors numpy nvidia-nvml-dev==13.0.87 kubernetes-validate==1.37.0 yamllint==1.38.0)
# data_synth's similarity histogram (data/harness/plot.py).
PIP_PACKAGES+=(matplotlib)
PIP_PACKAGES+=(peft==0.21.2)  # learner:lora_test (PEFT reads the LoRA adapters we write)
PIP_PACKAGES+=(openai==3.54.0)  # learner/policy:openai_server_client_test (the OpenAI API's client)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# kubectl renders deploy/ (`kubectl kustomize`); any kubectl will do, Debian's if none.
command -v kubectl > /dev/null || missing+=(kubernetes-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/kernelrl-apt.log 2>&1 ||
    { tail -20 /tmp/kernelrl-apt.log; exit 1; }
fi

if ! python3 - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"torch": "2.11.0", "transformers": "5.23.0", "tokenizers": "0.23.3", "nvidia-nvml-dev": "13.0.87"}
for name, version in want.items():
    if not m.version(name).startswith(version): sys.exit(1)
import safetensors, numpy, kubernetes_validate, yamllint, matplotlib, peft
PY
then
  echo "setup: pip install ${PIP_PACKAGES[*]}"
  python3 -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}" > /tmp/kernelrl-pip.log 2>&1 ||
    { tail -20 /tmp/kernelrl-pip.log; exit 1; }
fi
