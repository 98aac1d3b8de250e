// BlockRunner runs one block of an emulated CUDA kernel on the calling OS
// thread: each CUDA thread is a Fiber (fiber.h) that runs until its next
// synchronization point (__syncthreads, a warp collective such as
// __syncwarp, __shfl_xor_sync or __ballot_sync) and waits there until the
// threads it synchronizes with have all arrived. The block's threads are
// ranked in one order (ascending, descending or a seeded shuffle of thread
// indices) and the first runnable one in that order always runs next, so
// threads and warps early in the order run as far ahead as the kernel's
// synchronization allows. A kernel whose result depends on the order has a
// race (a missing barrier); the launcher varies the order from launch to
// launch (launch.h) so repeated runs disagree.
//
// It checks, and fails the block with a message naming threads and source
// lines, when: the threads of a block wait at different __syncthreads (or
// those of a warpgroup at different warpgroup barriers, SyncWarpgroup);
// lanes of a warp meet at different collectives or with different masks;
// a mask leaves out the calling lane, names lanes that do not exist or have
// exited; a lane exits while others wait for it; every unfinished thread
// waits and none can go on (deadlock); a tensor-core operation (warp_mma.h)
// runs in a warp that is not whole, or lanes of a warp make different
// tensor-core calls (those instructions are .aligned: every lane runs
// each one); shared memory goes
// over the block's limit. Shared memory starts poisoned (every byte 0xFF:
// NaN in fp32 and bf16, -1 in integers) in every block.
//
// The device-side primitives below act on the block that the calling OS
// thread is running, from inside one of its threads; runtime.h wraps them
// under their CUDA names.
//
// Thread-safety: a BlockRunner is used by one OS thread at a time.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_BLOCK_RUNNER_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_BLOCK_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "engine/cuda/emulation/cuda_types.h"

namespace trainyard::cuda_emulation {

class Fiber;

inline constexpr size_t kStaticSharedLimit = 48 * 1024;
inline constexpr size_t kSharedOptInLimit = 227 * 1024;  // sm_90, per block

enum class ThreadOrder { kAscending, kDescending, kShuffled };

// One block of a launch.
struct BlockJob {
  dim3 grid, block;
  uint3 block_idx;
  size_t dynamic_smem = 0;
  size_t smem_limit = kStaticSharedLimit;  // static plus dynamic bytes
  ThreadOrder order = ThreadOrder::kAscending;
  uint64_t seed = 0;                    // for kShuffled
  void (*body)(const void*) = nullptr;  // the kernel call every thread runs
  const void* body_arg = nullptr;
};

class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs every thread of the block to its end. Returns "" or what went
  // wrong first (the block's other threads are then abandoned).
  // REQUIRES: job.block has at most 1024 threads.
  std::string Run(const BlockJob& job);

  // The device-side primitives (see the free functions below).
  void SyncThreads(const std::source_location& site);
  void SyncWarpgroup(const std::source_location& site);
  uint64_t WarpCollective(int op, unsigned mask, uint64_t value, int param,
                          const std::source_location& site);
  void* StaticShared(const void* key, size_t bytes, size_t align);
  void* DynamicShared(size_t align);
  uint32_t DynamicSharedAddress(const void* p,
                                const std::source_location& site);
  const void* DynamicSharedAt(uint32_t address, size_t bytes,
                              const std::source_location& site);
  void WarpTensorOp(const char* name, const std::source_location& site);
  [[noreturn]] void Fail(const std::string& what);

 private:
  struct Thread;
  struct Warp;
  // A barrier among some of the block's threads (all of them, or one
  // warpgroup's): those still running, its arrivals so far, completions,
  // and where its first arrival waits.
  struct Barrier {
    int live = 0;
    int arrived = 0;
    uint64_t generation = 0;
    std::source_location site;
    int first = 0;
  };

  static void ThreadMain(void* thread);
  void StartBlock(const BlockJob& job);
  void RunThreads();
  bool Released(const Thread& t) const;
  void ThreadExited(Thread& t);
  const Barrier& BarrierOf(const Thread& t) const;
  // The calling thread waits at b (`warpgroup` its warpgroup's, or -1 for
  // the block's) until every running thread of b has arrived;
  // `divergent` says what a wait at another site of it means.
  void Arrive(Barrier& b, int warpgroup, const char* name,
              const char* divergent, const std::source_location& site);
  void LeaveBarrier(Barrier& b);
  void CompleteCollective(Warp& w);
  void CheckMatrixOpsAgree(const Warp& w, uint32_t lanes);
  void Record(const std::string& failure);
  std::string DeadlockReport() const;
  std::string Describe(const Thread& t) const;

  const BlockJob* job_ = nullptr;
  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  std::vector<int> order_;
  Thread* current_ = nullptr;
  std::string failure_;
  // __syncthreads's barrier, and each warpgroup's own (SyncWarpgroup).
  Barrier block_barrier_;
  std::vector<Barrier> warpgroup_barriers_;
  uint64_t completions_ = 0;  // barriers and collectives completed
  // Shared memory.
  struct GuardedMapping {
    explicit GuardedMapping(size_t usable);
    ~GuardedMapping();
    GuardedMapping(const GuardedMapping&) = delete;
    GuardedMapping& operator=(const GuardedMapping&) = delete;
    char* start;
    char* end;  // the guard page
    size_t bytes;
  };
  GuardedMapping static_arena_;
  size_t static_used_ = 0;
  std::vector<std::pair<const void*, void*>> static_vars_;
  GuardedMapping dynamic_arena_;
  char* dynamic_base_ = nullptr;
  size_t dynamic_align_ = 0;
};

// Device-side primitives: from inside an emulated thread.
enum WarpOpKind : int {
  kWarpSync,
  kWarpShflXor,
  kWarpShfl,
  kWarpShflDown,
  kWarpShflUp,
  kWarpBallot,
  kWarpAny,
  kWarpAll,
};

// __syncthreads.
void SyncThreads(const std::source_location& site);
// A barrier among the 128 threads of the calling thread's warpgroup
// (threads 128 i .. 128 i + 127 of the block, by linear index), as the
// warpgroup products converge them; the other warpgroups go on. Fails
// the block if its threads wait at different sites of it.
// REQUIRES: the block's threads are a whole number of warpgroups.
void SyncWarpgroup(const std::source_location& site);
// A warp collective of kind `op` over the lanes in `mask`: every lane puts
// in `value` (and `param`: the lane mask, source lane or delta of a
// shuffle) and gets back its result once all of them have arrived.
uint64_t WarpCollective(int op, unsigned mask, uint64_t value, int param,
                        const std::source_location& site);
// The block's copy of the __shared__ variable identified by `key`,
// poisoned when the block first reaches it.
void* StaticShared(const void* key, size_t bytes, size_t align);
// The block's dynamic shared memory, aligned to `align` and no more, so a
// kernel that assumes more alignment than it declares is caught.
void* DynamicShared(size_t align);
// The shared-memory address the GPU would give `p` (__cvta_generic_to_shared)
// for the operand descriptors of warpgroup products (warpgroup_mma.h): its
// offset into the block's dynamic shared memory window, which is smaller
// than the 256 KB a descriptor's 14 bits of 16-byte units reach. Fails the
// block, naming `site`, for a pointer outside the block's dynamic shared
// memory.
uint32_t DynamicSharedAddress(const void* p, const std::source_location& site);
// The pointer at `address` (as DynamicSharedAddress gives), after checking
// that its `bytes` lie in the block's dynamic shared memory.
const void* DynamicSharedAt(uint32_t address, size_t bytes,
                            const std::source_location& site);
// Notes one tensor-core operation (mma.sync, ldmatrix) by the calling
// lane, called from `site`; lanes of a warp must make the same ones.
void WarpTensorOp(const char* name, const std::source_location& site);
// Ends the block with a failure naming the calling thread.
[[noreturn]] void FailKernel(const std::string& what);
// Whether the calling OS thread is running an emulated block.
bool InsideKernel();

}  // namespace trainyard::cuda_emulation

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_BLOCK_RUNNER_H_
