# titan_train on Debian 12, CPU build (the CUDA backend needs an image with the CUDA toolkit,
# e.g. nvidia/cuda:13.0.0-devel, and the NVIDIA container runtime).
#
#   docker build -t titan_train .
#   docker run --rm titan_train                                  # the Quickstart's training run
#   docker run --rm titan_train scripts/test.sh                  # every test
FROM debian:12

WORKDIR /titan_train
COPY . .
RUN scripts/setup.sh && scripts/build.sh -DTITAN_CUDA=OFF && rm -rf /var/lib/apt/lists/*

# Open MPI refuses to run as root unless told; the container's only user is root.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CMD ["mpirun", "-np", "1", "--bind-to", "none", "build/titan_train", "--config", "configs/debug_model.yaml"]
