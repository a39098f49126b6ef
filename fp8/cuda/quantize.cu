// FP8 quantization on CUDA: the twins of fp8/float8_tensor.h (amax, scales, quantize,
// quantize_transposed, dequantize, transposes), bit-identical to the CPU code.
//
// Bit-identity rests on three things, each the same arithmetic as float8_tensor.cpp:
//   amax   a max of |x| in any order is exact (NaN is skipped by fmaxf as by std::max there);
//   scale  fp8_max / max(amax, eps) as one IEEE division (__fdiv_rn, so -use_fast_math cannot
//          change it), power of two by clearing the mantissa bits;
//   code   __nv_cvt_float_to_fp8(x · scale, __NV_SATFINITE, fmt) on the fp32 product, which
//          fp8/format.h's encode() reproduces bit for bit.
//
// Kernels, all memory-bound (read the input once, write a byte per element):
//   rowwise         one CTA per row: amax over the row, the scale, then the codes (a second
//                   read of the row, served from L2)
//   1x128 blocks    one warp per block: 32 lanes × 4 elements, a shuffle max, scale, codes
//   128x128 tiles   one CTA per tile, the tile held in registers (8 warps × 16 rows × 128)
//   tensorwise      an amax reduction (atomicMax on the fp32 bits, valid because amax ≥ +0),
//                   then a cast kernel that computes the scale from that amax on the device:
//                   no host sync
//   transposed      one CTA per 128 × 128 tile of x: registers → codes → shared memory (the
//                   transpose, XOR-swizzled so that 16-byte accesses hit distinct banks) →
//                   16-byte coalesced stores of xᵀ's rows. xᵀ's rowwise scales are x's column
//                   amaxes, which need every row first: a column-amax kernel runs before.
// Lanes load 4 consecutive elements (16 bytes of f32, 8 of bf16) and store 4 codes as one
// 32-bit word, so a warp reads 512 (256) contiguous bytes and writes 128. Shapes whose rows are
// not 4-element aligned take a scalar path with the same arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/launch.cuh"
#include "fp8/cuda/quantize_device.cuh"
#include "fp8/float8_tensor.h"

namespace titan::fp8 {

namespace {

using namespace device;

struct Config {
  static constexpr int kTile = 128;        // 128x128 tiles, 1x128 blocks (= kBlock)
  static constexpr int kTileWarps = 8;     // a tile CTA: 8 warps ...
  static constexpr int kRowsPerWarp = 16;  // ... of 16 rows each
  static constexpr int kTileThreads = kTileWarps * 32;
  static constexpr int kRowThreads = 256;          // rowwise: one CTA per row
  static constexpr int kBlockWarpsPerCta = 8;      // 1x128: one warp per block
  static constexpr int kElementwiseThreads = 256;  // casts, dequantize, scales
  static constexpr int kColumnAmaxRows = 512;      // rows one column-amax CTA reduces
  static constexpr int kMaxReductionCtas = 1024;   // tensorwise amax
};
static_assert(Config::kTile == kBlock);
static_assert(Config::kTileWarps * Config::kRowsPerWarp == Config::kTile);

// What a fused kernel writes into `out_scales`: the amax (compute_amax) or the scale together
// with the codes (quantize).
enum class Pass : uint8_t { Amax, Quantize };

// ---- rowwise: one CTA per row -------------------------------------------------------------------

template <class T, Format F, bool kVec, Pass P>
__global__ void __launch_bounds__(Config::kRowThreads)
    rowwise_kernel(const T* x, int64_t cols, float* out_scales, uint8_t* codes, bool power_of_two) {
  __shared__ float scratch[Config::kRowThreads / 32];
  const int64_t r = blockIdx.x;
  const T* row = x + r * cols;
  constexpr int64_t kStride = int64_t{Config::kRowThreads} * 4;
  float m = 0.0f;
  for (int64_t c = int64_t{threadIdx.x} * 4; c < cols; c += kStride) {
    float v[4];
    load_group<kVec>(row, c, cols, v);
    m = abs_max4(m, v);
  }
  const float amax = block_max<Config::kRowThreads / 32>(m, scratch);
  if constexpr (P == Pass::Amax) {
    if (threadIdx.x == 0) out_scales[r] = amax;
  } else {
    const float scale = scale_from_amax<F>(amax, power_of_two);
    if (threadIdx.x == 0) out_scales[r] = scale;
    uint8_t* out = codes + r * cols;
    for (int64_t c = int64_t{threadIdx.x} * 4; c < cols; c += kStride) {
      float v[4];
      uint8_t q[4];
      load_group<kVec>(row, c, cols, v);
      encode_group<F>(v, scale, q);
      store_group<kVec>(out, c, cols, q);
    }
  }
}

// ---- 1x128 blocks: one warp per block
// ------------------------------------------------------------

template <class T, Format F, bool kVec, Pass P>
__global__ void __launch_bounds__(Config::kBlockWarpsPerCta * 32)
    blocks_1x128_kernel(const T* x, int64_t rows, int64_t cols, int64_t blocks_per_row,
                        float* out_scales, uint8_t* codes, bool power_of_two) {
  const int64_t block = int64_t{blockIdx.x} * Config::kBlockWarpsPerCta + threadIdx.x / 32;
  if (block >= rows * blocks_per_row) return;  // whole warps leave together
  const int64_t r = block / blocks_per_row;
  const int64_t c = (block - r * blocks_per_row) * Config::kTile + (threadIdx.x % 32) * 4;
  float v[4];
  load_group<kVec>(x + r * cols, c, cols, v);
  const float amax = warp_max(abs_max4(0.0f, v));
  if constexpr (P == Pass::Amax) {
    if (threadIdx.x % 32 == 0) out_scales[block] = amax;
  } else {
    const float scale = scale_from_amax<F>(amax, power_of_two);
    if (threadIdx.x % 32 == 0) out_scales[block] = scale;  // [rows, blocks_per_row]
    uint8_t q[4];
    encode_group<F>(v, scale, q);
    store_group<kVec>(codes + r * cols, c, cols, q);
  }
}

// ---- 128x128 tiles: one CTA per tile, held in registers
// -------------------------------------------

// v[i] = x[r0 + 16·warp + i, c0 + 4·lane + (0..3)]; 0 outside x.
template <bool kVec, class T>
__device__ __forceinline__ void load_tile(const T* x, int64_t rows, int64_t cols, int64_t r0,
                                          int64_t c0, float v[Config::kRowsPerWarp][4]) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t c = c0 + lane * 4;
#pragma unroll
  for (int i = 0; i < Config::kRowsPerWarp; ++i) {
    const int64_t r = r0 + warp * Config::kRowsPerWarp + i;
    if (r < rows) {
      load_group<kVec>(x + r * cols, c, cols, v[i]);
    } else {
      v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
    }
  }
}

// The codes of the tile load_tile holds, under one scale, stored row by row into codes [rows,
// cols].
template <Format F, bool kVec>
__device__ __forceinline__ void store_tile_codes(const float v[Config::kRowsPerWarp][4],
                                                 float scale, uint8_t* codes, int64_t rows,
                                                 int64_t cols, int64_t r0, int64_t c0) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int i = 0; i < Config::kRowsPerWarp; ++i) {
    const int64_t r = r0 + warp * Config::kRowsPerWarp + i;
    if (r >= rows) break;
    uint8_t q[4];
    encode_group<F>(v[i], scale, q);
    store_group<kVec>(codes + r * cols, c0 + lane * 4, cols, q);
  }
}

template <class T, Format F, bool kVec, Pass P>
__global__ void __launch_bounds__(Config::kTileThreads)
    tiles_128x128_kernel(const T* x, int64_t rows, int64_t cols, int64_t tiles_per_row,
                         float* out_scales, uint8_t* codes, bool power_of_two) {
  __shared__ float scratch[Config::kTileWarps];
  const int64_t tile = blockIdx.x;
  const int64_t tr = tile / tiles_per_row, tc = tile - tr * tiles_per_row;
  const int64_t r0 = tr * Config::kTile, c0 = tc * Config::kTile;
  float v[Config::kRowsPerWarp][4];
  load_tile<kVec>(x, rows, cols, r0, c0, v);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < Config::kRowsPerWarp; ++i) m = abs_max4(m, v[i]);
  const float amax = block_max<Config::kTileWarps>(m, scratch);
  if constexpr (P == Pass::Amax) {
    if (threadIdx.x == 0) out_scales[tile] = amax;
  } else {
    const float scale = scale_from_amax<F>(amax, power_of_two);
    if (threadIdx.x == 0) out_scales[tile] = scale;  // [⌈rows/128⌉, ⌈cols/128⌉]
    store_tile_codes<F, kVec>(v, scale, codes, rows, cols, r0, c0);
  }
}

// ---- tensorwise: amax reduction, then a cast that derives the scale on the device ---------------

// *amax_bits (zeroed by the caller) = max |x| as fp32 bits: for values ≥ +0 (fabsf and fmaxf
// never give -0 or NaN here) the unsigned order of the bits is the order of the floats.
template <class T, bool kVec>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    tensor_amax_kernel(const T* x, int64_t n, unsigned* amax_bits) {
  __shared__ float scratch[Config::kElementwiseThreads / 32];
  float m = 0.0f;
  for (int64_t c = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 4; c < n;
       c += int64_t{gridDim.x} * blockDim.x * 4) {
    float v[4];
    load_group<kVec>(x, c, n, v);
    m = abs_max4(m, v);
  }
  m = block_max<Config::kElementwiseThreads / 32>(m, scratch);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

// The flat path of tensorwise amax and quantize, for contiguous tensors whose element count
// is a multiple of 16 on 16-byte aligned buffers (every tensor the allocator hands out): one scale
// for all, so the [rows, cols] shape does not matter and each thread moves 16 elements per
// step with 16-byte loads (two for bf16, four for f32) and one 16-byte store of codes — twice
// the width of the 4-element groups above, which left HBM half idle.
constexpr int kFlatGroup = 16;

template <class T>
__device__ __forceinline__ void load16(const T* p, float v[kFlatGroup]) {
#pragma unroll
  for (int j = 0; j < kFlatGroup; j += 4) load4(p + j, v + j);
}
// bf16: 16-byte loads of 8 values (load4 reads 8 bytes; two of them are one 16-byte load).
template <>
__device__ __forceinline__ void load16(const __nv_bfloat16* p, float v[kFlatGroup]) {
#pragma unroll
  for (int j = 0; j < kFlatGroup; j += 8) {
    uint4 q = __ldg(reinterpret_cast<const uint4*>(p + j));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[w]));
      v[j + 2 * w] = f.x, v[j + 2 * w + 1] = f.y;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    flat_amax_kernel(const T* x, int64_t groups, unsigned* amax_bits) {
  __shared__ float scratch[Config::kElementwiseThreads / 32];
  float m = 0.0f;
  for (int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * blockDim.x) {
    float v[kFlatGroup];
    load16(x + g * kFlatGroup, v);
#pragma unroll
    for (int j = 0; j < kFlatGroup; j += 4) m = abs_max4(m, v + j);
  }
  m = block_max<Config::kElementwiseThreads / 32>(m, scratch);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

template <class T, Format F>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    flat_cast_kernel(const T* x, int64_t groups, const float* amax, bool power_of_two,
                     float* derived_scale, uint8_t* codes) {
  const float scale = scale_from_amax<F>(*amax, power_of_two);
  if (blockIdx.x == 0 && threadIdx.x == 0) *derived_scale = scale;
  for (int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * blockDim.x) {
    float v[kFlatGroup];
    load16(x + g * kFlatGroup, v);
    uint8_t q[kFlatGroup];
#pragma unroll
    for (int j = 0; j < kFlatGroup; j += 4) encode_group<F>(v + j, scale, q + j);
    *reinterpret_cast<uint4*>(codes + g * kFlatGroup) =
        make_uint4(pack4(q), pack4(q + 4), pack4(q + 8), pack4(q + 12));
  }
}

// Where an element-wise cast finds its scales: given (quantize_with_scales), or one tensorwise
// scale derived from a device amax (the second kernel of tensorwise quantize; CTA 0 stores it).
struct ScaleSource {
  const float* scales = nullptr;   // shaped by the granularity
  const float* amax = nullptr;     // [1], when deriving
  float* derived_scale = nullptr;  // [1], written by CTA 0 when deriving
  bool power_of_two = false;
};

__device__ __forceinline__ int64_t scale_index(Granularity g, int64_t blocks_per_row, int64_t r,
                                               int64_t c) {
  switch (g) {
    case Granularity::Tensorwise: return 0;
    case Granularity::Rowwise: return r;
    case Granularity::Block1x128: return r * blocks_per_row + c / Config::kTile;
    case Granularity::Block128x128: return (r / Config::kTile) * blocks_per_row + c / Config::kTile;
  }
  return 0;
}

// One thread per 4-element group of a row (groups never straddle a 128 boundary, so the 4
// share one scale).
template <class T, Format F, bool kVec>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    cast_kernel(const T* x, int64_t rows, int64_t cols, Granularity granularity, ScaleSource source,
                uint8_t* codes) {
  const int64_t groups_per_row = (cols + 3) / 4;
  const int64_t blocks_per_row = (cols + Config::kTile - 1) / Config::kTile;
  float derived = 0.0f;
  if (source.amax != nullptr) {
    derived = scale_from_amax<F>(*source.amax, source.power_of_two);
    if (blockIdx.x == 0 && threadIdx.x == 0) *source.derived_scale = derived;
  }
  for (int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = g / groups_per_row, c = (g - r * groups_per_row) * 4;
    const float scale = source.amax != nullptr
                            ? derived
                            : source.scales[scale_index(granularity, blocks_per_row, r, c)];
    float v[4];
    uint8_t q[4];
    load_group<kVec>(x + r * cols, c, cols, v);
    encode_group<F>(v, scale, q);
    store_group<kVec>(codes + r * cols, c, cols, q);
  }
}

template <Format F>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    scales_from_amax_kernel(const float* amax, float* scales, int64_t n, bool power_of_two) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    scales[i] = scale_from_amax<F>(amax[i], power_of_two);
  }
}

// ---- dequantize
// -----------------------------------------------------------------------------------

// out = decode(code) / scale, the CPU's fp32 division (__fdiv_rn).
template <Format F>
__global__ void __launch_bounds__(Config::kElementwiseThreads)
    dequantize_kernel(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                      Granularity granularity, float* out) {
  const int64_t blocks_per_row = (cols + Config::kTile - 1) / Config::kTile;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float scale = scales[scale_index(granularity, blocks_per_row, r, c)];
    out[i] = __fdiv_rn(decode_fp8<F>(codes[i]), scale);
  }
}

// ---- plain transposes (high precision, or the codes of a tensorwise Float8Tensor) ---------------

// out [cols, rows] = in [rows, cols]ᵀ through a 32 × 32 shared tile of 32-bit words (elements
// of 1, 2 or 4 bytes, widened: the +1 column then keeps the transposed reads on distinct banks).
template <class T>
__global__ void transpose_kernel(const T* in, int64_t rows, int64_t cols, T* out) {
  using Word = std::conditional_t<sizeof(T) == 4, T, uint32_t>;
  __shared__ Word tile[32][33];
  const int64_t r0 = int64_t{blockIdx.y} * 32, c0 = int64_t{blockIdx.x} * 32;
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (c < cols && r < rows) out[c * rows + r] = static_cast<T>(tile[threadIdx.x][k]);
  }
}

// FP8 codes [rows, cols] -> [cols, rows] when both dims are multiples of 16: 64 × 64 byte tiles,
// one 16-byte load and one 16-byte store per thread (the byte-wide kernel above moves one byte
// per access and reaches a fraction of HBM bandwidth). Row pitch 64 + 4 bytes keeps the
// column reads of the second phase spread over the banks.
constexpr int kByteTile = 64;
__global__ void __launch_bounds__(256)
    transpose_bytes16_kernel(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  __shared__ uint8_t tile[kByteTile][kByteTile + 4];
  const int64_t r0 = int64_t{blockIdx.y} * kByteTile, c0 = int64_t{blockIdx.x} * kByteTile;
  const int t = static_cast<int>(threadIdx.x);
  {  // thread t loads row r0 + t/4, bytes c0 + 16·(t%4) … +15
    const int row = t / 4, part = t % 4;
    const int64_t r = r0 + row, c = c0 + 16 * part;
    if (r < rows && c < cols) {
      uint4 v = *reinterpret_cast<const uint4*>(in + r * cols + c);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        *reinterpret_cast<uint32_t*>(&tile[row][16 * part + 4 * w]) = words[w];
      }
    }
  }
  __syncthreads();
  {  // thread t writes output row c0 + t/4 (an input column), bytes r0 + 16·(t%4) … +15
    const int col = t / 4, part = t % 4;
    const int64_t c = c0 + col, r = r0 + 16 * part;
    if (c < cols && r < rows) {
      uint32_t words[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int k = 16 * part + 4 * w;
        words[w] = uint32_t{tile[k][col]} | uint32_t{tile[k + 1][col]} << 8 |
                   uint32_t{tile[k + 2][col]} << 16 | uint32_t{tile[k + 3][col]} << 24;
      }
      *reinterpret_cast<uint4*>(out + c * rows + r) =
          make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
}

// ---- quantize_transposed -----------------------------------------------------------------------

// colamax_bits[c] (zeroed) = max over rows of |x[r, c]|, as fp32 bits (see tensor_amax_kernel).
// A CTA reduces 128 columns over kColumnAmaxRows rows: warp w takes rows w, w + 8, …; lane l
// columns 4l … 4l + 3.
template <class T, bool kVec>
__global__ void __launch_bounds__(Config::kTileThreads)
    column_amax_kernel(const T* x, int64_t rows, int64_t cols, unsigned* colamax_bits) {
  __shared__ float partial[Config::kTileWarps][Config::kTile];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t c0 = int64_t{blockIdx.x} * Config::kTile;
  const int64_t r_begin = int64_t{blockIdx.y} * Config::kColumnAmaxRows;
  const int64_t r_end =
      r_begin + Config::kColumnAmaxRows < rows ? r_begin + Config::kColumnAmaxRows : rows;
  float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t r = r_begin + warp; r < r_end; r += Config::kTileWarps) {
    float v[4];
    load_group<kVec>(x + r * cols, c0 + lane * 4, cols, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) m[j] = fmaxf(m[j], fabsf(v[j]));
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) partial[warp][lane * 4 + j] = m[j];
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  if (t < Config::kTile && c0 + t < cols) {
    float cm = partial[0][t];
#pragma unroll
    for (int w = 1; w < Config::kTileWarps; ++w) cm = fmaxf(cm, partial[w][t]);
    atomicMax(colamax_bits + c0 + t, __float_as_uint(cm));
  }
}

// Scales of xᵀ [cols, rows]; `amax` is x's (tensorwise, [1]) or x's column amaxes (rowwise,
// [cols]), from the kernels above; block granularities reduce inside the tile.
struct TransposedScales {
  Granularity granularity = Granularity::Tensorwise;
  const float* amax = nullptr;
  float* scales = nullptr;
  bool power_of_two = false;
};

// One CTA per 128 × 128 tile of x [rows, cols]: writes the codes of xᵀ [cols, rows] for that
// tile and the scales it owns.
//
//   1. registers: thread (warp w, lane l) loads x rows r0 + 16w + i (i < 16), columns
//      c0 + 4l + j (j < 4): each warp-wide load is 512 (f32) contiguous bytes.
//   2. scales: per column of x (= per row of xᵀ) for 1x128 blocks of xᵀ, per tile for 128x128,
//      from the precomputed amax for rowwise and tensorwise.
//   3. codes: the 16 codes of one column and rows 16w … 16w + 15 are one 16-byte chunk of row
//      c of xᵀ's tile; it goes to shared chunk (w XOR (c/4 mod 8)) of that row, so that the 8
//      lanes of a 16-byte store phase (c = 4l + j, same w) hit 8 different chunks, i.e.
//      different banks (a row of 128 bytes spans all 32 banks).
//   4. stores: 8 consecutive threads write the 8 chunks of one row of xᵀ: 128 contiguous bytes,
//      reading the chunks back through the same XOR (again 8 distinct banks).
//
// codes (tensorwise only, else null): x's own codes as well, from the same registers under the
// same one scale, so that one pass writes both orientations of a tensorwise operand.
template <class T, Format F, bool kVecIn, bool kVecOut>
__global__ void __launch_bounds__(Config::kTileThreads)
    quantize_transposed_kernel(const T* x, int64_t rows, int64_t cols, int64_t tiles_per_row,
                               TransposedScales s, uint8_t* codes_t, uint8_t* codes) {
  constexpr int kChunks = Config::kTile / 16;  // 16-byte chunks in a tile row of xᵀ
  __shared__ float partial[Config::kTileWarps][Config::kTile];
  __shared__ float column_scale[Config::kTile];
  __shared__ float scratch[Config::kTileWarps];
  __shared__ uint4 chunks[Config::kTile * kChunks];  // [128 columns of x][8 chunks of 16 rows]

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(threadIdx.x);
  const int64_t tile = blockIdx.x;
  const int64_t tr = tile / tiles_per_row, tc = tile - tr * tiles_per_row;
  const int64_t r0 = tr * Config::kTile, c0 = tc * Config::kTile;
  const int64_t row_tiles = (rows + Config::kTile - 1) / Config::kTile;  // xᵀ's column blocks

  float v[Config::kRowsPerWarp][4];
  load_tile<kVecIn>(x, rows, cols, r0, c0, v);

  // 2. scales.
  if (s.granularity == Granularity::Block1x128 || s.granularity == Granularity::Block128x128) {
    float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < Config::kRowsPerWarp; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) m[j] = fmaxf(m[j], fabsf(v[i][j]));
    }
    if (s.granularity == Granularity::Block1x128) {
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][lane * 4 + j] = m[j];
      __syncthreads();
      if (t < Config::kTile) {
        float cm = partial[0][t];
#pragma unroll
        for (int w = 1; w < Config::kTileWarps; ++w) cm = fmaxf(cm, partial[w][t]);
        const float scale = scale_from_amax<F>(cm, s.power_of_two);
        column_scale[t] = scale;
        // xᵀ's scales [cols, ⌈rows/128⌉]: row c0 + t, block tr.
        if (c0 + t < cols) s.scales[(c0 + t) * row_tiles + tr] = scale;
      }
    } else {
      const float amax =
          block_max<Config::kTileWarps>(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])), scratch);
      const float scale = scale_from_amax<F>(amax, s.power_of_two);
      if (t < Config::kTile) column_scale[t] = scale;
      // xᵀ's tiles [⌈cols/128⌉, ⌈rows/128⌉]: tile (tc, tr).
      if (t == 0) s.scales[tc * row_tiles + tr] = scale;
    }
  } else if (t < Config::kTile) {
    const bool rowwise = s.granularity == Granularity::Rowwise;
    const int64_t c = c0 + t;
    const float amax = rowwise ? (c < cols ? s.amax[c] : 0.0f) : s.amax[0];
    const float scale = scale_from_amax<F>(amax, s.power_of_two);
    column_scale[t] = scale;
    if (rowwise && tr == 0 && c < cols) s.scales[c] = scale;
    if (!rowwise && tile == 0 && t == 0) s.scales[0] = scale;
  }
  __syncthreads();

  // 3a. x's codes, row by row (the kernel's one scale is every column's).
  if (codes != nullptr) store_tile_codes<F, kVecIn>(v, column_scale[0], codes, rows, cols, r0, c0);

    // 3. codes into shared memory, transposed.
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = lane * 4 + j;
    const float scale = column_scale[c];
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint8_t q[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) q[b] = encode_fp8<F>(v[4 * k + b][j] * scale);
      words[k] = pack4(q);
    }
    chunks[c * kChunks + (warp ^ ((c >> 2) & (kChunks - 1)))] =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
  __syncthreads();

  // 4. rows of xᵀ out.
  for (int k = t; k < Config::kTile * kChunks; k += Config::kTileThreads) {
    const int c = k / kChunks, chunk = k % kChunks;
    const int64_t out_row = c0 + c, out_col = r0 + chunk * 16;
    if (out_row >= cols || out_col >= rows) continue;
    const uint4 word = chunks[c * kChunks + (chunk ^ ((c >> 2) & (kChunks - 1)))];
    uint8_t* dst = codes_t + out_row * rows + out_col;
    if constexpr (kVecOut) {
      *reinterpret_cast<uint4*>(dst) = word;  // rows % 16 == 0: the chunk is whole
    } else {
      const uint32_t w4[4] = {word.x, word.y, word.z, word.w};
      for (int b = 0; b < 16 && out_col + b < rows; ++b) {
        dst[b] = static_cast<uint8_t>(w4[b / 4] >> (8 * (b % 4)));
      }
    }
  }
}

// ---- host side
// --------------------------------------------------------------------------------------

using cuda::ceil_div;

DType codes_dtype(Format format) { return format == Format::E4M3 ? DType::E4M3 : DType::E5M2; }

void require_2d_cuda(const Tensor& x, const char* what) {
  TT_CHECK(x.device().is_cuda() && x.ndim() == 2 && x.is_contiguous() &&
               (x.dtype() == DType::F32 || x.dtype() == DType::BF16),
           what, " on CUDA: needs a contiguous 2-D f32 or bf16 operand [rows, cols], got ", x,
           " on ", x.device());
}

template <class F>
decltype(auto) visit_bool(bool value, F&& f) {
  if (value) return f.template operator()<true>();
  return f.template operator()<false>();
}

// 4-element groups of a row can use vector loads: rows of a multiple of 4 elements from a base
// aligned to a whole group.
template <class T>
bool groups_aligned(const Tensor& x) {
  return x.size(1) % 4 == 0 && reinterpret_cast<uintptr_t>(x.raw_data()) % (4 * sizeof(T)) == 0;
}

bool codes_aligned(const Tensor& codes, int64_t multiple) {
  return codes.size(1) % multiple == 0 &&
         reinterpret_cast<uintptr_t>(codes.raw_data()) % static_cast<uintptr_t>(multiple) == 0;
}

uint8_t* codes_ptr(const Tensor& codes) { return static_cast<uint8_t*>(codes.raw_data()); }

Float8Tensor empty_float8(const Shape& codes_shape, const Shape& scales_shape,
                          Granularity granularity, Format format, Device device) {
  Float8Tensor q;
  q.codes = Tensor::empty(codes_shape, codes_dtype(format), device);
  q.scales = Tensor::empty(scales_shape, DType::F32, device);
  q.granularity = granularity;
  q.format = format;
  return q;
}

// The fused rowwise / 1x128 / 128x128 kernels, computing amaxes (codes null) or quantizing.
template <Pass P>
void launch_fused(const Tensor& x, Granularity granularity, Format format, bool power_of_two,
                  const Tensor& out_scales, uint8_t* codes) {
  const int64_t rows = x.size(0), cols = x.size(1);
  cudaStream_t stream = cuda::current_stream();
  cuda::visit_cuda_floating(x.dtype(), "quantize", [&]<class T>() {
    const T* in = static_cast<const T*>(x.raw_data());
    float* scales = out_scales.data<float>();
    // Codes rows are as long as x's, so only their base address can break the 4-byte stores.
    const bool vec = groups_aligned<T>(x) && reinterpret_cast<uintptr_t>(codes) % 4 == 0;
    visit_format(format, [&]<Format F>() {
      visit_bool(vec, [&]<bool kVec>() {
        switch (granularity) {
          case Granularity::Rowwise:
            if (rows > 0) {
              rowwise_kernel<T, F, kVec, P>
                  <<<static_cast<unsigned>(rows), Config::kRowThreads, 0, stream>>>(
                      in, cols, scales, codes, power_of_two);
            }
            break;
          case Granularity::Block1x128: {
            const int64_t blocks = rows * ceil_div(cols, Config::kTile);
            if (blocks > 0) {
              blocks_1x128_kernel<T, F, kVec, P>
                  <<<static_cast<unsigned>(ceil_div(blocks, Config::kBlockWarpsPerCta)),
                     Config::kBlockWarpsPerCta * 32, 0, stream>>>(
                      in, rows, cols, ceil_div(cols, Config::kTile), scales, codes, power_of_two);
            }
            break;
          }
          case Granularity::Block128x128: {
            const int64_t tiles_per_row = ceil_div(cols, Config::kTile);
            const int64_t tiles = ceil_div(rows, Config::kTile) * tiles_per_row;
            if (tiles > 0) {
              tiles_128x128_kernel<T, F, kVec, P>
                  <<<static_cast<unsigned>(tiles), Config::kTileThreads, 0, stream>>>(
                      in, rows, cols, tiles_per_row, scales, codes, power_of_two);
            }
            break;
          }
          case Granularity::Tensorwise: TT_CHECK(false, "launch_fused: tensorwise"); break;
        }
      });
    });
  });
  cuda::launch_check();
}

// amax [1] (zeroed here) = max |x|.
// Whether `t` takes the flat tensorwise kernels: contiguous, a whole number of 16-element
// groups, 16-byte aligned (every tensor the allocator hands out with such a size).
bool flat_fits(const Tensor& t) {
  return t.is_contiguous() && t.numel() > 0 && t.numel() % kFlatGroup == 0 &&
         reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
}

void launch_tensor_amax(const Tensor& x, const Tensor& amax) {
  amax.zero_();
  const int64_t n = x.numel();
  if (n == 0) return;
  if (flat_fits(x)) {
    const int64_t groups = n / kFlatGroup;
    cuda::visit_cuda_floating(x.dtype(), "compute_amax", [&]<class T>() {
      flat_amax_kernel<T>
          <<<cuda::grid_for(groups, Config::kElementwiseThreads, Config::kMaxReductionCtas),
             Config::kElementwiseThreads, 0, cuda::current_stream()>>>(
              static_cast<const T*>(x.raw_data()), groups,
              reinterpret_cast<unsigned*>(amax.data<float>()));
    });
    cuda::launch_check();
    return;
  }
  cuda::visit_cuda_floating(x.dtype(), "compute_amax", [&]<class T>() {
    const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(x.raw_data()) % (4 * sizeof(T)) == 0;
    visit_bool(vec, [&]<bool kVec>() {
      tensor_amax_kernel<T, kVec>
          <<<cuda::grid_for(ceil_div(n, 4), Config::kElementwiseThreads, Config::kMaxReductionCtas),
             Config::kElementwiseThreads, 0, cuda::current_stream()>>>(
              static_cast<const T*>(x.raw_data()), n,
              reinterpret_cast<unsigned*>(amax.data<float>()));
    });
  });
  cuda::launch_check();
}

void launch_cast(const Tensor& x, Granularity granularity, Format format, ScaleSource source,
                 const Tensor& codes) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t groups = rows * ceil_div(cols, 4);
  cuda::visit_cuda_floating(x.dtype(), "quantize", [&]<class T>() {
    visit_format(format, [&]<Format F>() {
      visit_bool(groups_aligned<T>(x) && codes_aligned(codes, 4), [&]<bool kVec>() {
        // At least one CTA even for an empty tensor: CTA 0 stores a derived scale.
        cast_kernel<T, F, kVec><<<cuda::grid_for(groups, Config::kElementwiseThreads),
                                  Config::kElementwiseThreads, 0, cuda::current_stream()>>>(
            static_cast<const T*>(x.raw_data()), rows, cols, granularity, source, codes_ptr(codes));
      });
    });
  });
  cuda::launch_check();
}

// The cast of tensorwise quantize for a flat-fitting x (and codes): derives the scale from the
// device amax and stores it in q.scales.
void launch_flat_cast(const Tensor& x, const Tensor& amax, Format format, bool power_of_two,
                      const Float8Tensor& q) {
  const int64_t groups = x.numel() / kFlatGroup;
  cuda::visit_cuda_floating(x.dtype(), "quantize", [&]<class T>() {
    visit_format(format, [&]<Format F>() {
      flat_cast_kernel<T, F><<<cuda::grid_for(groups, Config::kElementwiseThreads),
                               Config::kElementwiseThreads, 0, cuda::current_stream()>>>(
          static_cast<const T*>(x.raw_data()), groups, amax.data<float>(), power_of_two,
          q.scales.data<float>(), codes_ptr(q.codes));
    });
  });
  cuda::launch_check();
}

// The cast of tensorwise quantize: q's codes and its scale, derived on the device from amax [1].
void launch_tensorwise_cast(const Tensor& x, const Tensor& amax, Format format, bool power_of_two,
                            const Float8Tensor& q) {
  if (flat_fits(x) && flat_fits(q.codes)) {
    launch_flat_cast(x, amax, format, power_of_two, q);
    return;
  }
  ScaleSource source;
  source.amax = amax.data<float>();
  source.derived_scale = q.scales.data<float>();
  source.power_of_two = power_of_two;
  launch_cast(x, Granularity::Tensorwise, format, source, q.codes);
}

// quantize_transposed_kernel over every 128 × 128 tile of x: xᵀ's codes into codes_t [cols,
// rows], and x's own into `codes` [rows, cols] when given (tensorwise only).
void launch_transposed_tiles(const Tensor& x, const TransposedScales& s, Format format,
                             const Tensor& codes_t, uint8_t* codes) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t tiles_per_row = ceil_div(cols, Config::kTile);
  const int64_t tiles = ceil_div(rows, Config::kTile) * tiles_per_row;
  cuda::visit_cuda_floating(x.dtype(), "quantize_transposed", [&]<class T>() {
    visit_format(format, [&]<Format F>() {
      visit_bool(groups_aligned<T>(x), [&]<bool kVecIn>() {
        visit_bool(codes_aligned(codes_t, 16), [&]<bool kVecOut>() {
          quantize_transposed_kernel<T, F, kVecIn, kVecOut>
              <<<static_cast<unsigned>(tiles), Config::kTileThreads, 0, cuda::current_stream()>>>(
                  static_cast<const T*>(x.raw_data()), rows, cols, tiles_per_row, s,
                  codes_ptr(codes_t), codes);
        });
      });
    });
  });
  cuda::launch_check();
}

}  // namespace

Tensor compute_amax_cuda(const Tensor& x, Granularity granularity) {
  require_2d_cuda(x, "compute_amax");
  Tensor amax =
      Tensor::empty(scales_shape(granularity, x.size(0), x.size(1)), DType::F32, x.device());
  if (granularity == Granularity::Tensorwise) {
    launch_tensor_amax(x, amax);
  } else {
    launch_fused<Pass::Amax>(x, granularity, Format::E4M3, false, amax, nullptr);
  }
  return amax;
}

Tensor scales_from_amax_cuda(const Tensor& amax, Format format, bool power_of_two) {
  TT_CHECK(amax.device().is_cuda() && amax.dtype() == DType::F32 && amax.is_contiguous(),
           "scales_from_amax on CUDA: needs a contiguous f32 amax, got ", amax);
  Tensor scales = Tensor::empty(amax.shape(), DType::F32, amax.device());
  const int64_t n = amax.numel();
  if (n == 0) return scales;
  visit_format(format, [&]<Format F>() {
    scales_from_amax_kernel<F>
        <<<cuda::grid_for(n, Config::kElementwiseThreads), Config::kElementwiseThreads, 0,
           cuda::current_stream()>>>(amax.data<float>(), scales.data<float>(), n, power_of_two);
  });
  cuda::launch_check();
  return scales;
}

Float8Tensor quantize_with_scales_cuda(const Tensor& x, const Tensor& scales,
                                       Granularity granularity, Format format) {
  require_2d_cuda(x, "quantize");
  const int64_t rows = x.size(0), cols = x.size(1);
  TT_CHECK(scales.device() == x.device() && scales.dtype() == DType::F32 &&
               scales.is_contiguous() && scales.shape() == scales_shape(granularity, rows, cols),
           "quantize: scales ", scales, " on ", scales.device(), " for a ",
           granularity_name(granularity), " [", rows, ", ", cols, "] operand on ", x.device());
  Float8Tensor q;
  q.codes = Tensor::empty({rows, cols}, codes_dtype(format), x.device());
  q.scales = scales;
  q.granularity = granularity;
  q.format = format;
  ScaleSource source;
  source.scales = scales.data<float>();
  launch_cast(x, granularity, format, source, q.codes);
  return q;
}

Float8Tensor quantize_cuda(const Tensor& x, Granularity granularity, Format format,
                           bool power_of_two_scales) {
  require_2d_cuda(x, "quantize");
  const int64_t rows = x.size(0), cols = x.size(1);
  Float8Tensor q = empty_float8({rows, cols}, scales_shape(granularity, rows, cols), granularity,
                                format, x.device());
  if (granularity == Granularity::Tensorwise) {
    Tensor amax = Tensor::empty({1}, DType::F32, x.device());
    launch_tensor_amax(x, amax);
    launch_tensorwise_cast(x, amax, format, power_of_two_scales, q);
  } else {
    launch_fused<Pass::Quantize>(x, granularity, format, power_of_two_scales, q.scales,
                                 codes_ptr(q.codes));
  }
  return q;
}

Float8Tensor quantize_transposed_cuda(const Tensor& x, Granularity granularity, Format format,
                                      bool power_of_two_scales) {
  require_2d_cuda(x, "quantize_transposed");
  const int64_t rows = x.size(0), cols = x.size(1);
  // xᵀ is [cols, rows].
  Float8Tensor q = empty_float8({cols, rows}, scales_shape(granularity, cols, rows), granularity,
                                format, x.device());
  if (rows == 0 || cols == 0) {
    // No tile to visit: the scales of an empty operand are those of amax 0, as on the CPU.
    if (q.scales.numel() > 0) {
      Tensor zero = Tensor::zeros(q.scales.shape(), DType::F32, x.device());
      q.scales.copy_from(scales_from_amax_cuda(zero, format, power_of_two_scales));
    }
    return q;
  }
  Tensor amax;
  if (granularity == Granularity::Tensorwise) {
    amax = Tensor::empty({1}, DType::F32, x.device());
    launch_tensor_amax(x, amax);
  } else if (granularity == Granularity::Rowwise) {
    amax = Tensor::zeros({cols}, DType::F32, x.device());
    cuda::visit_cuda_floating(x.dtype(), "quantize_transposed", [&]<class T>() {
      visit_bool(groups_aligned<T>(x), [&]<bool kVec>() {
        const dim3 grid(static_cast<unsigned>(ceil_div(cols, Config::kTile)),
                        static_cast<unsigned>(ceil_div(rows, Config::kColumnAmaxRows)));
        column_amax_kernel<T, kVec><<<grid, Config::kTileThreads, 0, cuda::current_stream()>>>(
            static_cast<const T*>(x.raw_data()), rows, cols,
            reinterpret_cast<unsigned*>(amax.data<float>()));
      });
    });
    cuda::launch_check();
  }
  TransposedScales s;
  s.granularity = granularity;
  s.amax = amax.defined() ? amax.data<float>() : nullptr;
  s.scales = q.scales.data<float>();
  s.power_of_two = power_of_two_scales;
  launch_transposed_tiles(x, s, format, q.codes, nullptr);
  return q;
}

Float8Tensor quantize_tensorwise_from_amax_cuda(const Tensor& x, const Tensor& amax, Format format,
                                                bool power_of_two, Float8Tensor* transposed) {
  require_2d_cuda(x, "quantize_tensorwise_from_amax");
  TT_CHECK(amax.device() == x.device() && amax.dtype() == DType::F32 && amax.numel() == 1,
           "quantize_tensorwise_from_amax: needs an f32 [1] amax on ", x.device(), ", got ", amax,
           " on ", amax.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  Float8Tensor q =
      empty_float8({rows, cols}, Shape{1}, Granularity::Tensorwise, format, x.device());
  // One pass writes both orientations where the tile kernel can store x's codes in 4-byte words.
  const bool both = transposed != nullptr && rows > 0 && cols > 0 &&
                    reinterpret_cast<uintptr_t>(q.codes.raw_data()) % 4 == 0;
  if (both) {
    *transposed = q;  // the one scale is shared
    transposed->codes = Tensor::empty({cols, rows}, codes_dtype(format), x.device());
    TransposedScales s;
    s.amax = amax.data<float>();
    s.scales = q.scales.data<float>();
    s.power_of_two = power_of_two;
    launch_transposed_tiles(x, s, format, transposed->codes, codes_ptr(q.codes));
    return q;
  }
  launch_tensorwise_cast(x, amax, format, power_of_two, q);
  if (transposed != nullptr) *transposed = transpose_tensorwise_cuda(q);
  return q;
}

Tensor dequantize_cuda(const Float8Tensor& q) {
  const int64_t rows = q.rows(), cols = q.cols();
  TT_CHECK(q.codes.device().is_cuda() && q.scales.device() == q.codes.device() &&
               q.codes.is_contiguous() && q.scales.dtype() == DType::F32 &&
               q.scales.shape() == scales_shape(q.granularity, rows, cols),
           "dequantize on CUDA: codes ", q.codes, " on ", q.codes.device(), " with scales ",
           q.scales, " on ", q.scales.device());
  Tensor out = Tensor::empty({rows, cols}, DType::F32, q.codes.device());
  if (out.numel() == 0) return out;
  visit_format(q.format, [&]<Format F>() {
    dequantize_kernel<F><<<cuda::grid_for(out.numel(), Config::kElementwiseThreads),
                           Config::kElementwiseThreads, 0, cuda::current_stream()>>>(
        static_cast<const uint8_t*>(q.codes.raw_data()), q.scales.data<float>(), rows, cols,
        q.granularity, out.data<float>());
  });
  cuda::launch_check();
  return out;
}

namespace {

template <class T>
void launch_transpose(const Tensor& in, const Tensor& out) {
  const int64_t rows = in.size(0), cols = in.size(1);
  if (rows == 0 || cols == 0) return;
  TT_CHECK(ceil_div(rows, 32) <= 65535, "transpose of ", in, ": more than 65535 · 32 rows");
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)),
                  static_cast<unsigned>(ceil_div(rows, 32)));
  transpose_kernel<T><<<grid, dim3(32, 8), 0, cuda::current_stream()>>>(
      static_cast<const T*>(in.raw_data()), rows, cols, static_cast<T*>(out.raw_data()));
  cuda::launch_check();
}

}  // namespace

Tensor transpose_2d_cuda(const Tensor& x) {
  require_2d_cuda(x, "transpose_2d");
  Tensor t = Tensor::empty({x.size(1), x.size(0)}, x.dtype(), x.device());
  if (x.dtype() == DType::F32) {
    launch_transpose<float>(x, t);
  } else {
    launch_transpose<uint16_t>(x, t);  // bf16: a transpose moves bits
  }
  return t;
}

Float8Tensor transpose_tensorwise_cuda(const Float8Tensor& q) {
  TT_CHECK(q.codes.device().is_cuda() && q.codes.ndim() == 2 && q.codes.is_contiguous(),
           "transpose_tensorwise on CUDA: codes ", q.codes, " on ", q.codes.device());
  Float8Tensor t = q;  // the one scale is shared, as on the CPU
  t.codes = Tensor::empty({q.cols(), q.rows()}, q.codes.dtype(), q.codes.device());
  const int64_t rows = q.rows(), cols = q.cols();
  const bool aligned16 = reinterpret_cast<uintptr_t>(q.codes.raw_data()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(t.codes.raw_data()) % 16 == 0;
  if (rows % 16 == 0 && cols % 16 == 0 && aligned16 && rows > 0 && cols > 0 &&
      ceil_div(rows, kByteTile) <= 65535) {
    const dim3 grid(static_cast<unsigned>(ceil_div(cols, kByteTile)),
                    static_cast<unsigned>(ceil_div(rows, kByteTile)));
    transpose_bytes16_kernel<<<grid, 256, 0, cuda::current_stream()>>>(
        static_cast<const uint8_t*>(q.codes.raw_data()), rows, cols,
        static_cast<uint8_t*>(t.codes.raw_data()));
    cuda::launch_check();
  } else {
    launch_transpose<uint8_t>(q.codes, t.codes);
  }
  return t;
}

}  // namespace titan::fp8
