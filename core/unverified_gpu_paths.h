// CUDA code paths that compile but that no GPU has run yet, each with a twin a GPU has run.
//
// docs/status.md lists what was written for CUDA without a GPU to run it ("Compiled for CUDA,
// never run on a GPU"). Where such a path replaced one a GPU had run, and that one is still in
// the tree, the old one stays the default until a GPU has passed the new one's tests: a user's
// first GPU run takes only code a GPU has executed, and a test or a user who wants the new path
// names it. A path leaves this table (and its twin is dropped or kept as a fallback) when a GPU
// has run it.
//
// The choice belongs to the process, like the device it runs on: the executable allows paths
// once at start-up, before any device work (titan_train's experimental.unverified_gpu_paths,
// titan_generate's --unverified-gpu-paths, every gpu test), and the ops read it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace titan {

enum class UnverifiedGpuPath {
  // model.attention_backend auto takes cuDNN's fused attention where it loads (otherwise auto
  // runs the native kernels; cudnn asks for cuDNN whatever this says).
  CudnnUnderAuto,
  // The residual add fused into RMSNorm's kernels, forward and backward (otherwise the
  // accumulate and RMSNorm kernels apart, the same bits).
  FusedResidualNorm,
  // FP8 codes and scales written by the kernel that produces a linear's input (otherwise the
  // op's kernel, then the quantize kernels).
  Fp8ProducerQuantize,
  // Initial values drawn on the device (otherwise drawn on the host and copied, the same bits).
  DeviceInit,
};

inline constexpr EnumName<UnverifiedGpuPath> kUnverifiedGpuPathList[] = {
    {UnverifiedGpuPath::CudnnUnderAuto, "cudnn_under_auto"},
    {UnverifiedGpuPath::FusedResidualNorm, "fused_residual_norm"},
    {UnverifiedGpuPath::Fp8ProducerQuantize, "fp8_producer_quantize"},
    {UnverifiedGpuPath::DeviceInit, "device_init"},
};
inline constexpr EnumNames<UnverifiedGpuPath> kUnverifiedGpuPaths{"unverified GPU path",
                                                                  kUnverifiedGpuPathList};

// Names of paths, or "all", as a config or a flag lists them, parsed; InputError naming `key`
// for any other name (the allowed ones listed).
std::vector<UnverifiedGpuPath> parse_unverified_gpu_paths(std::span<const std::string> names,
                                                          const std::string& key);

// Allows exactly `paths` from now on (none by default). Called at start-up, before any device
// work; a later call replaces the set (tests).
void allow_unverified_gpu_paths(std::span<const UnverifiedGpuPath> paths);

// Every path of the table.
void allow_every_unverified_gpu_path();

bool unverified_gpu_path_allowed(UnverifiedGpuPath path);

// The allowed paths' names, comma-separated; "none" when none is.
std::string allowed_unverified_gpu_paths_text();

}  // namespace titan
