// Launchers of the tensor-core causal attention (attention_tc_kernels.cu):
// the same flash-attention forward and backward as attention_kernels.h, for
// bf16 activations only, with the products on tensor cores (bf16 operands,
// fp32 accumulation) and the softmax in fp32. LaunchAttentionForward and
// LaunchAttentionBackward (attention_kernels.h) call these for bf16 and a
// head size they take; tests call them directly. Each returns the launch
// error, if any (cudaErrorInvalidValue for a head size other than 32, 64 or
// 128, heads that do not split the channels, or a buffer that is not
// 16-byte aligned: the kernels move rows in 16-byte packs). Plain CUDA.
// Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ATTENTION_TC_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_ATTENTION_TC_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace trainyard::engine::cuda {

// Whether the tensor-core kernels take heads of `head_size` channels.
bool AttentionTcSupportsHeadSize(int64_t head_size);

// How the query-side kernels (the forward, and the backward's query
// gradient) spread a block's query rows over its warps: each warp
// holds `warp_rows` rows (16, one mma row tile, or 32, two, which share
// every key and value fragment read from shared memory: half the reads per
// product), a block has `warps` warps, so its query tile is warps x
// warp_rows rows. 16-row warps come in blocks of 4 or 8: eight share each
// key and value tile copied into shared memory between 128 query rows,
// half the copies (and L2 reads) a row of four, with the registers a
// thread of 16 x 4 (the forward: two blocks an SM where 16 x 4 has four;
// the backward's query side, at 166 registers, one). Every tiling computes each
// row with the same operations in the same order: they give the same bits and
// differ only in speed (bench/engine/attention_bench.cc times each). The
// backward's key side has one tiling (16 x 4).
//
// `warpgroup`: the 16 x 4 tiling with its products as Hopper's warpgroup
// products (wgmma, sm_90a: warpgroup_mma.h), the block's four warps
// multiplying together with the other side's tiles read straight from
// shared memory, where the other tilings run each warp's products as
// mma.sync with ldmatrix; the forward, both sides of the two-kernel
// backward and the ordered backward's key side. In the host
// emulation it gives the other tilings' bits; on the GPU the tensor
// cores' summation order may differ (cuda_attention_test holds it to the
// reference's bounds).
//
// `swizzled`: the 16 x 4 tiling with its shared-memory tiles, on both
// sides of the backward too, in rows of exactly the head size with
// 16-byte units XOR-permuted (attention_tc_tiles.cuh, Tile) instead of
// rows padded by 16 bytes: each row's copy fills whole 128-byte lines of
// shared memory, and the tiles take 1/9 less of it. The same operations
// in the same order: the same bits as 16 x 4. With `warpgroup` too
// ("wgmma-swizzled", head sizes 32 and 64): the warpgroup tiling with its
// tiles so, read by the tensor cores through descriptors of the 128- or
// 64-byte swizzle (warpgroup_mma.h) instead of as core matrices, whose
// copies fetch twice the sectors they use.
//
// `warpgroup` with 8 warps ("wgmma2", "wgmma2-swizzled"): the forward's
// and the backward query side's blocks are two warpgroups of 64 query
// rows each, sharing the key and value tiles a block copies (the key
// side, as always, one warpgroup).
struct AttentionTcTiling {
  int warp_rows = 16;
  int warps = 4;
  bool warpgroup = false;
  bool swizzled = false;
};

// The tilings the query-side kernels have, the one the launchers without
// a tiling use first.
inline constexpr AttentionTcTiling kAttentionTcTilings[] = {
    {16, 4},
    {32, 2},
    {32, 4},
    {16, 4, true},
    {16, 4, false, true},
    {16, 4, true, true},
    {16, 8},
    {16, 8, false, true},
    {16, 8, true},
    {16, 8, true, true}};

// A tiling's name: "RxW" (rows a warp x warps a block, e.g. "32x4"),
// "wgmma" and "wgmma2" for the warpgroup tilings of 4 and 8 warps, and
// "-swizzled" after the name for the swizzled ones ("16x4-swizzled").
std::string AttentionTcTilingName(AttentionTcTiling tiling);

// Whether this build has the warpgroup kernels (built for sm_90a, or the
// host emulation).
bool AttentionTcWarpgroupBuilt();

// Whether `tiling` is one of kAttentionTcTilings.
bool IsAttentionTcTiling(AttentionTcTiling tiling);

// Whether the query-side kernels have `tiling` for heads of `head_size`
// channels (32-row warps only up to 64 channels: at 128 their
// accumulators and scores would not fit in registers; the warpgroup
// tiling only where AttentionTcWarpgroupBuilt).
bool AttentionTcTakesTiling(AttentionTcTiling tiling, int64_t head_size);

// out [B, T, C] (bf16) and lse [B, NH, T] (fp32) from qkv [B, T, 3C] (bf16):
// the contract of LaunchAttentionForward with bf16 = true.
cudaError_t LaunchAttentionForwardTc(void* out, float* lse, const void* qkv,
                                     int64_t batch, int64_t seq,
                                     int64_t channels, int64_t heads,
                                     cudaStream_t stream);

// The same with a given tiling (cudaErrorInvalidValue for one it does not
// take at this head size).
cudaError_t LaunchAttentionForwardTc(AttentionTcTiling tiling, void* out,
                                     float* lse, const void* qkv, int64_t batch,
                                     int64_t seq, int64_t channels,
                                     int64_t heads, cudaStream_t stream);

// How the warpgroup product check reads b: as the attention kernels do, or
// with one of the two choices a misreading of the PTX ISA's shared-memory
// layouts would get wrong: the descriptor's leading and stride byte
// offsets exchanged, or the instruction's B major flipped (or both). A
// test that finds the product wrong on a GPU tries the others and names
// the one that gives the product: where to look in warpgroup_mma.h.
enum class WarpgroupReading {
  kAsBuilt,
  kStridesSwapped,
  kMajorFlipped,
  kBothFlipped
};

// For tests of the warpgroup tiling's product layouts: d [64, n] (fp32,
// row-major) = a [64, 64] b (bf16, row-major), with b [n, 64] when
// `b_rows_are_n` (the product takes its transpose, as the forward's
// Q K^T) else [64, n] (as its P V); n 32, 64 or 128; a from registers,
// or from shared memory if `a_in_shared` (n 64 only: as the key side's
// K Q^T); b read as `reading` says (anything but kAsBuilt gives a wrong
// product where the kernels' reading is right). The launch error, or
// cudaErrorInvalidValue for another n, a or b not 16-byte aligned, or a
// build without the warpgroup kernels. `swizzled`: b (and a in shared
// memory) as the "wgmma-swizzled" tiling keeps its tiles, swizzled rows
// read through swizzled descriptors (b_rows_are_n, or n 32 or 64).
cudaError_t LaunchWarpgroupProductCheck(float* d, const void* a, const void* b,
                                        int n, bool b_rows_are_n,
                                        bool a_in_shared,
                                        WarpgroupReading reading,
                                        cudaStream_t stream,
                                        bool swizzled = false);

// dqkv [B, T, 3C] (bf16, overwritten) from dout [B, T, C] (bf16), given the
// forward's qkv, out and lse; `delta` [B, NH, T] is scratch. The contract
// of LaunchAttentionBackward with bf16 = true.
cudaError_t LaunchAttentionBackwardTc(void* dqkv, float* delta,
                                      const void* dout, const void* out,
                                      const void* qkv, const float* lse,
                                      int64_t batch, int64_t seq,
                                      int64_t channels, int64_t heads,
                                      cudaStream_t stream);

// The same with a given tiling of the query side (cudaErrorInvalidValue
// for one it does not take at this head size).
cudaError_t LaunchAttentionBackwardTc(AttentionTcTiling tiling, void* dqkv,
                                      float* delta, const void* dout,
                                      const void* out, const void* qkv,
                                      const float* lse, int64_t batch,
                                      int64_t seq, int64_t channels,
                                      int64_t heads, cudaStream_t stream);

// How the tensor-core backward splits its work; both are deterministic
// (every sum in one fixed order, no atomic adds) and agree to fp32
// rounding, not bit for bit.
enum class AttentionTcBackward {
  // A query-side kernel (dQ, in the tiling given) and a key-side kernel
  // (dK, dV), each recomputing the scores and dout V^T: 7 products a pair
  // of query and key tiles. Scratch: delta [B, NH, T].
  kTwoKernels,
  // A pass for delta, then one kernel a key tile taking dQ, dK and dV,
  // which adds its share of dQ to fp32 sums in key-tile order through
  // turns (block_turns.h): 5 products a tile pair, plus the sums' traffic
  // (B T C floats, read and written by each key tile) and the waits.
  kOrderedDq,
};

// Floats of the `scratch` each backward takes (all 16-byte aligned).
int64_t AttentionTcBackwardScratchFloats(AttentionTcBackward backward,
                                         int64_t batch, int64_t seq,
                                         int64_t channels, int64_t heads);

// The contract of LaunchAttentionBackwardTc with the kOrderedDq backward:
// `scratch` holds AttentionTcBackwardScratchFloats(kOrderedDq, ...) floats
// (cudaErrorInvalidValue if it is not 16-byte aligned). Its turn counters
// are zeroed on the stream first. Its one kernel is a key side: the
// warpgroup tiling's where `tiling` is that one, else the 16 x 4 one (the
// query-side tilings do not enter; cudaErrorInvalidValue for a tiling the
// head size does not take).
cudaError_t LaunchAttentionBackwardTcOrdered(void* dqkv, float* scratch,
                                             const void* dout, const void* out,
                                             const void* qkv, const float* lse,
                                             int64_t batch, int64_t seq,
                                             int64_t channels, int64_t heads,
                                             cudaStream_t stream);
cudaError_t LaunchAttentionBackwardTcOrdered(
    AttentionTcTiling tiling, void* dqkv, float* scratch, const void* dout,
    const void* out, const void* qkv, const float* lse, int64_t batch,
    int64_t seq, int64_t channels, int64_t heads, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ATTENTION_TC_KERNELS_H_
