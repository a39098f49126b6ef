# Sourced by the scripts that run a bundle (scripts/bundle_gpu_binaries.sh) on a GPU machine, from
# the repository root, with $bundle the bundle's absolute path and $device cuda or cpu: the
# bundle's environment, NCCL's and cuDNN's pip folders on the loader path, and the source and
# build paths the test binaries were compiled with pointed at this checkout and the bundle.
# Sets nccl_lib and cudnn_lib (empty where pip has no such package).
# shellcheck shell=bash
: "${bundle:?set bundle to the bundle folder before sourcing}" "${device:?set device to cuda or cpu}"
# shellcheck source=/dev/null
source "$bundle/env.sh"
nccl_lib=
cudnn_lib=
if [[ $device == cuda ]]; then
  nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib'))" 2>/dev/null || true)
  # cuDNN for model.attention_backend (core/cuda/cudnn_library.h): pip's nvidia-cudnn-cu13, the
  # one PyTorch loads, unless TITAN_CUDNN_LIBRARY names another.
  cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], 'lib'))" 2>/dev/null || true)
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH${nccl_lib:+:$nccl_lib}${cudnn_lib:+:$cudnn_lib}:/usr/local/cuda/lib64
fi

# The test binaries read the sources and write scratch files where they were built: put this
# checkout and the bundle's tree at those paths when they are not there.
if [[ ! -e $TITAN_BUNDLE_SOURCE_DIR ]]; then
  mkdir -p "$(dirname "$TITAN_BUNDLE_SOURCE_DIR")" && ln -s "$(pwd)" "$TITAN_BUNDLE_SOURCE_DIR"
fi
if [[ ! -e $TITAN_BUNDLE_BUILD_DIR ]]; then ln -s "$bundle/tree" "$TITAN_BUNDLE_BUILD_DIR"; fi
