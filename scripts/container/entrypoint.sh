#!/usr/bin/env bash
# The image's ENTRYPOINT (the pattern of the postgres image): a first argument that starts with
# '-', or none, is a training run; anything else is a command, run as it is.
#
#   docker run IMAGE                                           # the debug model, configs/debug_model.yaml
#   docker run IMAGE --training.steps 5 --optimizer.lr 1e-3    # overrides of that config
#   docker run IMAGE --config configs/llama3_8b.yaml ...       # another config (a mounted one too)
#   docker run IMAGE bash                                      # a command: bash, titan_tokenize, ...
#
# A training run is scripts/train.sh with TITAN_TRAIN set (nothing is set up or built), so the
# config, NPROC and LAUNCHER work as they do outside the container. The one thing added here:
# when NPROC is unset, a container that sees CUDA devices (`docker run --gpus all` with the CUDA
# image) starts one rank per device, as `titan_train --list-devices` counts them; with none (the
# CPU image, or no --gpus) train.sh's default of one rank holds.
set -euo pipefail

if [[ $# -gt 0 && $1 != -* ]]; then
  exec "$@"
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
binary=${TITAN_TRAIN:-$(command -v titan_train || true)}
if [[ -z $binary ]]; then
  echo "entrypoint: error: titan_train is not on PATH ($PATH) and TITAN_TRAIN is unset; set TITAN_TRAIN to the binary" >&2
  exit 2
fi
export TITAN_TRAIN=$binary

if [[ -z ${NPROC:-} ]]; then
  # A failure to list devices is not this script's to report: the run below reports it.
  devices=$("$TITAN_TRAIN" --list-devices 2>/dev/null | grep -c '^cuda:' || true)
  if [[ $devices =~ ^[1-9][0-9]*$ ]]; then
    export NPROC=$devices
    echo "entrypoint: $devices CUDA devices visible: one rank each (set NPROC to choose)" >&2
  fi
fi

exec "$root/scripts/train.sh" "$@"
