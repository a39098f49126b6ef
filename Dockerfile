# titan_train images: the CPU image (Debian 12, the default) and, with TITAN_DEVICE=cuda, the
# CUDA image (CUDA 13 with NCCL on Ubuntu 24.04, built for sm_90a and sm_100a). docs/containers.md
# has the details.
#
#   docker build -t titan_train .                                          # CPU
#   docker build -t titan_train:cuda --build-arg TITAN_DEVICE=cuda .       # CUDA
#   docker run --rm titan_train --training.steps 5                         # train, with overrides
#   docker run --rm --gpus all --ipc=host titan_train:cuda --config configs/llama3_8b.yaml
#   docker run --rm -it titan_train bash                                   # any other command
#
# Two stages: `build` compiles and stages the install tree (scripts/container/build_stage.sh);
# `runtime` starts again from a base without a toolchain and takes the staged files and the
# packages of the shared libraries they load. The bases are build arguments, so that a machine
# with no registry can build from a base of its own (test/system/test_container.sh does).

ARG TITAN_DEVICE=cpu
ARG CPU_BASE=debian:12
ARG CUDA_BUILD_BASE=nvidia/cuda:13.0.2-devel-ubuntu24.04
ARG CUDA_RUNTIME_BASE=nvidia/cuda:13.0.2-runtime-ubuntu24.04

# One base pair per device; only the pair of TITAN_DEVICE is built (or pulled).
FROM ${CPU_BASE} AS build-base-cpu
FROM ${CUDA_BUILD_BASE} AS build-base-cuda
FROM ${CPU_BASE} AS runtime-base-cpu
FROM ${CUDA_RUNTIME_BASE} AS runtime-base-cuda

FROM build-base-${TITAN_DEVICE} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The dependencies first, in a layer of their own that a change of the sources (or of the
# arguments below, declared after it for that reason) leaves cached.
COPY scripts/setup.sh scripts/install_packages.sh scripts/
RUN scripts/setup.sh
COPY . .
ARG TITAN_DEVICE
# CUDA architectures of the cuda build; the cpu build ignores them.
ARG TITAN_CUDA_ARCHITECTURES="90a;100a"
# ctest arguments (e.g. "-L fast") to build the tests too and run those before staging; empty: don't.
ARG TITAN_TEST=
RUN TITAN_CUDA_ARCHITECTURES="${TITAN_CUDA_ARCHITECTURES}" TITAN_TEST="${TITAN_TEST}" \
    scripts/container/build_stage.sh "${TITAN_DEVICE}" /stage

FROM runtime-base-${TITAN_DEVICE} AS runtime
COPY scripts/install_packages.sh /titan_train/scripts/
COPY scripts/container/runtime_packages.sh /titan_train/scripts/container/
COPY --from=build /stage/usr/local/share/titan_train/runtime-packages /usr/local/share/titan_train/
RUN /titan_train/scripts/container/runtime_packages.sh install /usr/local/share/titan_train/runtime-packages
COPY --from=build /stage/ /
RUN /titan_train/scripts/container/runtime_packages.sh check /usr/local/bin/titan_*

# Open MPI refuses root unless told, and the container's user is root. Its shared-memory
# transport's single-copy mode needs ptrace rights a container lacks: copy through the buffer.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
# Outputs (metrics, checkpoints) go to /titan_train/outputs: mount a volume there.
WORKDIR /titan_train
ENTRYPOINT ["/titan_train/scripts/container/entrypoint.sh"]
CMD []
