#!/usr/bin/env bash
# Installs every Debian package the build and tests need. Idempotent: packages already
# present are skipped, and apt is only asked when something is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap      # Bazel 4.2.3, works offline with the stand-ins under third_party/
  g++
  pkg-config
  libabsl-dev          # Abseil (Status, strings, containers)
  libyaml-cpp-dev      # YAML configs
  libprotobuf-dev      # recipe state, TensorBoard events
  protobuf-compiler    # protoc, run from a genrule
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libopenblas-dev      # f32 GEMM on CPU
  nlohmann-json3-dev   # safetensors headers, config.json
  libpcre2-dev         # Llama 3 pre-tokeniser regex
  libicu-dev           # test-only reference for tokenizers/nfc (NFC)
  libsentencepiece-dev # test-only reference for tokenizers/sentencepiece (reference test, bench)
  clang                # --config=fuzz (libFuzzer targets)
  libclang-rt-14-dev
  lld
  libopenmpi-dev       # distributed/: the MPI process group, NCCL's bootstrap
  openmpi-bin          # mpirun: the launcher, and the multi-process tests
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

# The CUDA toolkit is optional: without it the CUDA backend drops out of the build.
cuda_root="${CUDA_PATH:-/usr/local/cuda}"
if [ -x "$cuda_root/bin/nvcc" ]; then
  echo "setup: CUDA toolkit found at $cuda_root ($("$cuda_root/bin/nvcc" --version | tail -n 1))"
else
  echo "setup: no CUDA toolkit at $cuda_root; building the CPU backend only"
fi
