#!/usr/bin/env bash
# Installs what titan_train needs on Debian 12 and writes the default training corpus.
# Safe to run twice: it installs only what is missing and keeps an existing corpus.
#
#   scripts/setup.sh          (as root: installs with apt-get; otherwise prints the command)
#
# The CUDA toolkit is not a Debian package: when /usr/local/cuda/bin/nvcc exists the build
# adds the CUDA backend, otherwise it builds the CPU path only.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config   # toolchain
  libopenmpi-dev openmpi-bin                            # MPI launcher and library
  libopenblas-dev                                       # CPU GEMMs
  libcli11-dev libspdlog-dev libyaml-cpp-dev            # command line, logging, config
  libprotobuf-dev protobuf-compiler libisal-dev         # TensorBoard event files (CRC32C: ISA-L)
  libpcre2-dev libsimdjson-dev zlib1g-dev libzstd-dev   # tokenizer.json, JSON lines, .gz/.zst corpora
  python3-matplotlib python3-numpy                      # scripts/plot_metrics.py
  doctest-dev python3-protobuf python3-crc32c           # tests (an independent event-file reader)
  python3-torch                                         # tests (the independent HF Llama forward)
  clang-14 libfuzzer-14-dev                             # fuzz targets (scripts/fuzz.sh)
  bible-kjv                                             # the default corpus (King James Bible)
)

scripts/install_packages.sh "${packages[@]}"

# The corpus: the whole King James Bible as text, one verse per line (4.3 MB, 4.3M byte tokens).
mkdir -p corpus
corpus=corpus/kjv.txt
if [[ ! -s $corpus ]]; then
  bible -l10000 "Gen1:1-Rev22:21" > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
  echo "setup: wrote $corpus ($(wc -c < "$corpus") bytes)"
fi
