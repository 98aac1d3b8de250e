// See block_runner.h. The scheduling loop resumes one thread at a time,
// always the first in the block's order whose wait is over; a thread runs
// until it next synchronizes (or ends). No thread to resume while some
// remain is a deadlock.
#include "engine/cuda/emulation/block_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "engine/cuda/emulation/fiber.h"

namespace trainyard::cuda_emulation {

// Room for a kernel's locals (the tensor-core kernels keep their fragments
// in registers: a few KB a thread), with margin.
constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr unsigned char kPoisonByte = 0xFF;
constexpr uint32_t kAllLanes = 0xffffffffu;

struct BlockRunner::Thread {
  uint3 idx{0, 0, 0};
  int linear = 0;
  enum State { kRunnable, kAtBarrier, kAtCollective, kDone } state = kRunnable;
  uint64_t wait_generation = 0;
  int wait_warpgroup = -1;  // the warpgroup barrier it waits at, if any
  const char* waiting_in = "";
  std::source_location site;
  uint64_t matrix_hash = 0;  // of the tensor-core calls made so far
  int64_t matrix_calls = 0;
  std::source_location matrix_site;  // the last one
};

struct BlockRunner::Warp {
  uint32_t exists = 0;   // lanes that are threads of the block
  uint32_t live = 0;     // lanes not yet ended
  uint32_t arrived = 0;  // lanes waiting in the open collective
  uint32_t mask = 0;     // the open collective's mask
  int op = 0;
  std::source_location site;
  int first = 0;  // the lane that opened it
  uint64_t generation = 0;
  uint64_t in[32] = {};
  uint64_t out[32] = {};
  int param[32] = {};
};

namespace {

thread_local BlockRunner* active = nullptr;

// Thrown by Fail and caught at the bottom of the failing thread's stack,
// so what the thread holds is destroyed; the rest of the block is dropped.
struct BlockAborted {};

const char* const kOpNames[] = {
    "__syncwarp",     "__shfl_xor_sync", "__shfl_sync", "__shfl_down_sync",
    "__shfl_up_sync", "__ballot_sync",   "__any_sync",  "__all_sync",
};

std::string At(const std::source_location& site) {
  return std::string(site.file_name()) + ":" + std::to_string(site.line());
}

bool SameSite(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         std::strcmp(a.file_name(), b.file_name()) == 0;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

// Shared memory lives in mappings with an inaccessible guard page after
// the usable bytes, so an overrun faults.
BlockRunner::GuardedMapping::GuardedMapping(size_t usable) {
  const size_t page = PageSize();
  bytes = RoundUp(usable, page) + page;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("cuda emulation: mapping shared memory");
    std::abort();
  }
  start = static_cast<char*>(m);
  end = start + bytes - page;
  if (mprotect(end, page, PROT_NONE) != 0) {
    std::perror("cuda emulation: protecting a guard page");
    std::abort();
  }
}

BlockRunner::GuardedMapping::~GuardedMapping() { munmap(start, bytes); }

// Dynamic memory may sit up to one alignment (at most a page) below a
// rounded-up size: two pages of slack.
BlockRunner::BlockRunner()
    : static_arena_(kStaticSharedLimit),
      dynamic_arena_(kSharedOptInLimit + 2 * 4096) {}

BlockRunner::~BlockRunner() = default;

std::string BlockRunner::Run(const BlockJob& job) {
  StartBlock(job);
  active = this;
  RunThreads();
  active = nullptr;
  if (failure_.empty()) {
    for (const Warp& w : warps_) CheckMatrixOpsAgree(w, w.exists);
  }
  job_ = nullptr;
  current_ = nullptr;
  return failure_;
}

void BlockRunner::StartBlock(const BlockJob& job) {
  job_ = &job;
  failure_.clear();
  const int n = static_cast<int>(job.block.x * job.block.y * job.block.z);
  while (static_cast<int>(fibers_.size()) < n) {
    fibers_.push_back(std::make_unique<Fiber>(kFiberStackBytes));
  }
  threads_.assign(n, Thread{});
  for (int i = 0; i < n; ++i) {
    const unsigned u = static_cast<unsigned>(i);
    threads_[i].linear = i;
    threads_[i].idx = {u % job.block.x, u / job.block.x % job.block.y,
                       u / (job.block.x * job.block.y)};
  }
  warps_.assign((n + 31) / 32, Warp{});
  for (int w = 0; w < static_cast<int>(warps_.size()); ++w) {
    const int lanes = std::min(32, n - 32 * w);
    warps_[w].exists = lanes == 32 ? kAllLanes : (1u << lanes) - 1;
    warps_[w].live = warps_[w].exists;
  }
  block_barrier_ = Barrier{};
  block_barrier_.live = n;
  warpgroup_barriers_.assign((n + 127) / 128, Barrier{});
  for (int i = 0; i < n; ++i) ++warpgroup_barriers_[i / 128].live;
  static_used_ = 0;
  static_vars_.clear();
  dynamic_base_ = nullptr;
  dynamic_align_ = 0;
  const size_t poison =
      std::min(RoundUp(job.dynamic_smem, 4096) + 2 * 4096,
               static_cast<size_t>(dynamic_arena_.end - dynamic_arena_.start));
  std::memset(dynamic_arena_.end - poison, kPoisonByte, poison);
  order_.resize(n);
  for (int i = 0; i < n; ++i) order_[i] = i;
  if (job.order == ThreadOrder::kDescending) {
    std::reverse(order_.begin(), order_.end());
  } else if (job.order == ThreadOrder::kShuffled) {
    uint64_t state = job.seed;
    for (int i = n - 1; i > 0; --i) {
      std::swap(order_[i], order_[SplitMix(state) % (i + 1)]);
    }
  }
  blockIdx = job.block_idx;
  blockDim = job.block;
  gridDim = job.grid;
  for (int i = 0; i < n; ++i) fibers_[i]->Start(&ThreadMain, &threads_[i]);
}

void BlockRunner::ThreadMain(void* thread) {
  BlockRunner* self = active;
  Thread& t = *static_cast<Thread*>(thread);
  try {
    self->job_->body(self->job_->body_arg);
    self->ThreadExited(t);
  } catch (const BlockAborted&) {
    t.state = Thread::kDone;
  }
}

void BlockRunner::RunThreads() {
  // Always resume the first runnable thread in the block's order, so the
  // threads (and warps) early in the order run as far ahead of the rest
  // as synchronization lets them; a race between a warp still reading and
  // one already writing the next data then shows. Only a completed
  // barrier or collective makes a waiting thread runnable, so the scan
  // restarts from the front only after one.
  const int n = static_cast<int>(threads_.size());
  int done = 0, cursor = 0;
  uint64_t seen = completions_;
  while (done < n) {
    while (cursor < n && (threads_[order_[cursor]].state == Thread::kDone ||
                          !Released(threads_[order_[cursor]]))) {
      ++cursor;
    }
    if (cursor == n) return Record(DeadlockReport());
    const int i = order_[cursor];
    current_ = &threads_[i];
    threadIdx = threads_[i].idx;
    fibers_[i]->Resume();
    if (!failure_.empty()) return;
    if (fibers_[i]->finished()) ++done;
    if (completions_ != seen) {
      seen = completions_;
      cursor = 0;
    }
  }
}

bool BlockRunner::Released(const Thread& t) const {
  switch (t.state) {
    case Thread::kAtBarrier:
      return BarrierOf(t).generation >= t.wait_generation;
    case Thread::kAtCollective:
      return warps_[t.linear / 32].generation >= t.wait_generation;
    default:
      return true;
  }
}

void BlockRunner::Record(const std::string& failure) {
  if (failure_.empty()) failure_ = failure;
}

void BlockRunner::Fail(const std::string& what) {
  Record(Describe(*current_) + ": " + what);
  throw BlockAborted{};
}

std::string BlockRunner::Describe(const Thread& t) const {
  return "thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) +
         "," + std::to_string(t.idx.z) + ") [warp " +
         std::to_string(t.linear / 32) + " lane " +
         std::to_string(t.linear % 32) + "]";
}

const BlockRunner::Barrier& BlockRunner::BarrierOf(const Thread& t) const {
  return t.wait_warpgroup < 0 ? block_barrier_
                              : warpgroup_barriers_[t.wait_warpgroup];
}

void BlockRunner::Arrive(Barrier& b, int warpgroup, const char* name,
                         const char* divergent,
                         const std::source_location& site) {
  Thread& t = *current_;
  if (b.arrived == 0) {
    b.site = site;
    b.first = t.linear;
  } else if (!SameSite(site, b.site)) {
    Fail("waits at " + std::string(name) + " at " + At(site) + " while " +
         Describe(threads_[b.first]) + " waits at the one at " + At(b.site) +
         " (" + divergent + ")");
  }
  ++b.arrived;
  t.state = Thread::kAtBarrier;
  t.wait_generation = b.generation + 1;
  t.wait_warpgroup = warpgroup;
  t.waiting_in = name;
  t.site = site;
  if (b.arrived == b.live) {
    ++b.generation;
    ++completions_;
    b.arrived = 0;
  }
  Fiber::Yield();
  t.state = Thread::kRunnable;
}

// A thread of b ended: the others no longer wait for it.
void BlockRunner::LeaveBarrier(Barrier& b) {
  --b.live;
  if (b.arrived > 0 && b.arrived == b.live) {
    ++b.generation;
    ++completions_;
    b.arrived = 0;
  }
}

void BlockRunner::SyncThreads(const std::source_location& site) {
  Arrive(block_barrier_, -1, "__syncthreads", "a barrier in divergent code",
         site);
}

void BlockRunner::SyncWarpgroup(const std::source_location& site) {
  const Thread& t = *current_;
  if (threads_.size() % 128 != 0) {
    Fail("a warpgroup barrier at " + At(site) + " in a block of " +
         std::to_string(threads_.size()) +
         " threads, not a whole number of warpgroups (128 threads each)");
  }
  Arrive(warpgroup_barriers_[t.linear / 128], t.linear / 128,
         "the warpgroup barrier", "a warpgroup operation in divergent code",
         site);
}

void BlockRunner::ThreadExited(Thread& t) {
  t.state = Thread::kDone;
  LeaveBarrier(block_barrier_);
  LeaveBarrier(warpgroup_barriers_[t.linear / 128]);
  Warp& w = warps_[t.linear / 32];
  const uint32_t bit = 1u << (t.linear % 32);
  w.live &= ~bit;
  if (w.arrived != 0 && (w.mask & bit)) {
    Fail("ends while lanes " + Hex(w.arrived) + " wait for it in " +
         kOpNames[w.op] + " at " + At(w.site));
  }
}

uint64_t BlockRunner::WarpCollective(int op, unsigned mask, uint64_t value,
                                     int param,
                                     const std::source_location& site) {
  Thread& t = *current_;
  Warp& w = warps_[t.linear / 32];
  const int lane = t.linear % 32;
  const uint32_t bit = 1u << lane;
  // No string may live across the Yield below: a block that fails
  // abandons its waiting threads' stacks.
  const auto call = [&] {
    return std::string(kOpNames[op]) + " at " + At(site) + " with mask " +
           Hex(mask);
  };
  if (!(mask & bit)) Fail(call() + ": the mask leaves out the calling lane");
  if (mask & ~w.exists) {
    Fail(call() + ": the mask names lanes " + Hex(mask & ~w.exists) +
         " that are not threads of the block");
  }
  if (mask & ~w.live) {
    Fail(call() + ": the mask names lanes " + Hex(mask & ~w.live) +
         " that have already ended");
  }
  if (w.arrived == 0) {
    w.op = op;
    w.mask = mask;
    w.site = site;
    w.first = lane;
  } else if (w.op != op || w.mask != mask) {
    Fail("calls " + call() + " while lane " + std::to_string(w.first) +
         " waits in " + kOpNames[w.op] + " at " + At(w.site) + " with mask " +
         Hex(w.mask));
  }
  w.in[lane] = value;
  w.param[lane] = param;
  w.arrived |= bit;
  t.state = Thread::kAtCollective;
  t.wait_generation = w.generation + 1;
  t.waiting_in = kOpNames[op];
  t.site = site;
  if (w.arrived == w.mask) CompleteCollective(w);
  Fiber::Yield();
  t.state = Thread::kRunnable;
  return w.out[lane];
}

void BlockRunner::CompleteCollective(Warp& w) {
  uint32_t ballot = 0;
  for (int l = 0; l < 32; ++l) {
    if ((w.mask >> l & 1) && w.in[l] != 0) ballot |= 1u << l;
  }
  for (int l = 0; l < 32; ++l) {
    if (!(w.mask >> l & 1)) continue;
    int src = l;
    switch (w.op) {
      case kWarpShflXor:
        src = l ^ (w.param[l] & 31);
        break;
      case kWarpShfl:
        src = w.param[l] & 31;
        break;
      case kWarpShflDown:
        src = l + w.param[l] < 32 ? l + w.param[l] : l;
        break;
      case kWarpShflUp:
        src = l - w.param[l] >= 0 ? l - w.param[l] : l;
        break;
      case kWarpBallot:
        w.out[l] = ballot;
        continue;
      case kWarpAny:
        w.out[l] = ballot != 0;
        continue;
      case kWarpAll:
        w.out[l] = ballot == w.mask;
        continue;
      default:
        continue;
    }
    if (!(w.mask >> src & 1)) {
      Fail(std::string(kOpNames[w.op]) + " at " + At(w.site) + ": lane " +
           std::to_string(l) + " reads lane " + std::to_string(src) +
           ", which is not in the mask " + Hex(w.mask));
    }
    w.out[l] = w.in[src];
  }
  CheckMatrixOpsAgree(w, w.mask);
  ++w.generation;
  ++completions_;
  w.arrived = 0;
}

void BlockRunner::CheckMatrixOpsAgree(const Warp& w, uint32_t lanes) {
  const int warp = static_cast<int>(&w - warps_.data());
  int first = -1;
  for (int l = 0; l < 32; ++l) {
    if (!(lanes >> l & 1)) continue;
    if (first < 0) {
      first = l;
      continue;
    }
    const Thread& a = threads_[32 * warp + first];
    const Thread& b = threads_[32 * warp + l];
    if (a.matrix_hash == b.matrix_hash) continue;
    std::string what = "lanes " + std::to_string(first) + " and " +
                       std::to_string(l) + " of warp " + std::to_string(warp) +
                       " made different tensor-core calls (" +
                       std::to_string(a.matrix_calls) + " and " +
                       std::to_string(b.matrix_calls) + " calls";
    if (a.matrix_calls > 0)
      what += ", the first's last at " + At(a.matrix_site);
    if (b.matrix_calls > 0)
      what += ", the other's last at " + At(b.matrix_site);
    Record(what + "); tensor-core operations are warp-wide");
    return;
  }
}

void* BlockRunner::StaticShared(const void* key, size_t bytes, size_t align) {
  for (const auto& [k, p] : static_vars_) {
    if (k == key) return p;
  }
  const size_t offset = RoundUp(static_used_, std::max<size_t>(align, 1));
  if (offset + bytes > kStaticSharedLimit) {
    Fail("static __shared__ variables need " + std::to_string(offset + bytes) +
         " bytes, over the 48 KB a block may have");
  }
  if (offset + bytes + job_->dynamic_smem > job_->smem_limit) {
    Fail("static (" + std::to_string(offset + bytes) + ") plus dynamic (" +
         std::to_string(job_->dynamic_smem) + ") shared memory is over the " +
         std::to_string(job_->smem_limit) + " bytes the kernel may use");
  }
  void* p = static_arena_.start + offset;
  std::memset(p, kPoisonByte, bytes);
  static_used_ = offset + bytes;
  static_vars_.emplace_back(key, p);
  return p;
}

void* BlockRunner::DynamicShared(size_t align) {
  align = std::max<size_t>(align, 16);
  if (align > 4096 || (align & (align - 1)) != 0) {
    Fail("extern __shared__ alignment " + std::to_string(align) +
         " is not a power of two up to 4096");
  }
  if (dynamic_base_ == nullptr) {
    if (static_used_ + job_->dynamic_smem > job_->smem_limit) {
      Fail("static plus dynamic shared memory is over the " +
           std::to_string(job_->smem_limit) + " bytes the kernel may use");
    }
    // End at the guard page (an overrun faults) unless that would align
    // the base to more than asked.
    char* base = dynamic_arena_.end - RoundUp(job_->dynamic_smem, align);
    if (reinterpret_cast<uintptr_t>(base) % (2 * align) == 0) base -= align;
    dynamic_base_ = base;
    dynamic_align_ = align;
  } else if (align > dynamic_align_) {
    Fail("extern __shared__ declarations ask for alignments " +
         std::to_string(dynamic_align_) + " and " + std::to_string(align));
  }
  return dynamic_base_;
}

uint32_t BlockRunner::DynamicSharedAddress(const void* p,
                                           const std::source_location& site) {
  const char* c = static_cast<const char*>(p);
  if (dynamic_base_ == nullptr || c < dynamic_base_ ||
      c >= dynamic_arena_.end) {
    Fail("at " + At(site) +
         ": a shared-memory operand address outside the block's dynamic "
         "shared memory");
  }
  return static_cast<uint32_t>(c - dynamic_arena_.start);
}

const void* BlockRunner::DynamicSharedAt(uint32_t address, size_t bytes,
                                         const std::source_location& site) {
  const char* c = dynamic_arena_.start + address;
  if (dynamic_base_ == nullptr || c < dynamic_base_ ||
      bytes > static_cast<size_t>(dynamic_arena_.end - c)) {
    Fail("at " + At(site) + ": a shared-memory operand of " +
         std::to_string(bytes) + " bytes at shared address " +
         std::to_string(address) +
         " is not inside the block's dynamic shared memory");
  }
  return c;
}

void BlockRunner::WarpTensorOp(const char* name,
                               const std::source_location& site) {
  Thread& t = *current_;
  const Warp& w = warps_[t.linear / 32];
  if (w.exists != kAllLanes) {
    Fail(std::string(name) + " at " + At(site) +
         ": a tensor-core operation needs a whole warp, and this warp has " +
         std::to_string(__builtin_popcount(w.exists)) + " threads");
  }
  t.matrix_hash = Mix(t.matrix_hash, reinterpret_cast<uintptr_t>(name));
  t.matrix_hash = Mix(t.matrix_hash, site.line());
  t.matrix_hash =
      Mix(t.matrix_hash, reinterpret_cast<uintptr_t>(site.file_name()));
  ++t.matrix_calls;
  t.matrix_site = site;
}

std::string BlockRunner::DeadlockReport() const {
  // Waiting threads grouped by where they wait: count and the first one.
  std::map<std::string, std::pair<int, const Thread*>> where;
  for (const Thread& t : threads_) {
    if (t.state == Thread::kDone) continue;
    auto& [count, first] =
        where[std::string(t.waiting_in) + " at " + At(t.site)];
    if (count++ == 0) first = &t;
  }
  std::string report =
      "deadlock: every unfinished thread waits and none can go on;";
  for (const auto& [site, entry] : where) {
    report.append(" ").append(std::to_string(entry.first));
    report.append(" wait in ").append(site).append(" (the first: ");
    report.append(Describe(*entry.second)).append(");");
  }
  return report;
}

void SyncThreads(const std::source_location& site) {
  active->SyncThreads(site);
}

void SyncWarpgroup(const std::source_location& site) {
  active->SyncWarpgroup(site);
}

uint64_t WarpCollective(int op, unsigned mask, uint64_t value, int param,
                        const std::source_location& site) {
  return active->WarpCollective(op, mask, value, param, site);
}

void* StaticShared(const void* key, size_t bytes, size_t align) {
  return active->StaticShared(key, bytes, align);
}

void* DynamicShared(size_t align) { return active->DynamicShared(align); }

uint32_t DynamicSharedAddress(const void* p, const std::source_location& site) {
  return active->DynamicSharedAddress(p, site);
}

const void* DynamicSharedAt(uint32_t address, size_t bytes,
                            const std::source_location& site) {
  return active->DynamicSharedAt(address, bytes, site);
}

void WarpTensorOp(const char* name, const std::source_location& site) {
  active->WarpTensorOp(name, site);
}

void FailKernel(const std::string& what) { active->Fail(what); }

bool InsideKernel() { return active != nullptr; }

}  // namespace trainyard::cuda_emulation
