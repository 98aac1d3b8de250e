// A host stand-in for the NCCL calls the project makes (cuda_include/
// nccl.h): data-parallel ranks summing fp32 buffers with ncclAllReduce,
// each rank a process of its own (yard-train) or a thread (tests), on ONE
// machine. Built for the CUDA host emulation, where "device" memory is
// host memory and every stream is synchronous (runtime.h).
//
// What is emulated. ncclGetUniqueId opens a socket listening on 127.0.0.1
// and writes its port and a random 64-bit tag into the id. The ranks form
// a star: rank 0 (which must init in the process that made the id: it
// takes over the id's socket) accepts every other rank, checks what each
// says (the tag, the number of ranks, a rank number of its own, one rank
// per emulated device of a process) and answers all of them, so a bad
// rank fails every rank with ncclInvalidUsage instead of a hang (a rank
// holding another communicator's id is turned away alone). An all-reduce
// sends each rank's buffer to rank 0, which adds them in rank order
// 0, 1, 2, ... (every run and every rank gets the same bits) and sends the
// sum back; in place and out of place. Calls between ncclGroupStart and
// ncclGroupEnd are deferred to the end of the group, which drops them all
// when one failed, as NCCL does.
//
// Non-blocking communicators (ncclConfig_t.blocking = 0) as NCCL documents
// them: init, a group's collectives and ncclCommFinalize run on the
// communicator's own thread and return ncclInProgress; the caller polls
// ncclCommGetAsyncError until it says ncclSuccess or an error, and a call
// made before then fails with ncclInvalidArgument ("Attempt to use
// communicator before the previous operation returned ncclSuccess"). An
// error stays the communicator's for good. Blocking communicators (the
// default) wait for the same work. Unlike NCCL, a collective is complete
// (the sum in recvbuff) when its group is: there is no kernel left on the
// stream, which matches the emulation's synchronous streams.
//
// Failures never hang: a peer that closes or resets its socket (it
// exited, died or aborted) fails the collective with ncclRemoteError, and
// rank 0 then ends every connection so the other ranks fail at once too;
// a peer alive but silent fails it with ncclSystemError after a bound
// (nccl_host.h: 5 min to form the ring, 60 min per collective, where NCCL
// itself would wait forever: longer than the deadlines of the project's
// callers, which abort first); ncclCommAbort, from any thread, ends every
// wait of the communicator at once and frees it.
//
// What is checked beyond NCCL's own argument checks: buffers must lie
// whole in memory cudaMalloc made while the communicator's device was
// current (NCCL checks that only with NCCL_CHECK_POINTERS=1) and be the
// same or not overlap; the ranks must call the same sequence of
// all-reduces with the same counts. Only ncclFloat32 and ncclSum are
// emulated: other valid types and operations fail with
// ncclInvalidArgument and say so in ncclGetLastError.
//
// Not emulated: NVLink, InfiniBand and NCCL's socket transport; rings,
// trees and their summation order (NCCL's is not rank order, though its
// result too is the same on every rank); asynchrony on the CUDA stream;
// timing; ranks on several machines; ncclCommInitRank inside a group;
// other collectives, ncclCommSplit, user reduction operations. An id that
// no rank 0 ever takes keeps its socket open until the process exits.
// ncclCommFinalize ends the connections at once (NCCL also frees its
// resources there) without waiting for the other ranks.
//
// ncclGetLastError(comm) returns the latest message of the calling
// thread or of `comm`, whichever came later (NCCL keeps one per process).
// A blocking init that fails leaves *comm set, in its error state, for
// ncclCommAbort, as a non-blocking one does; one refused on its arguments
// sets it to NULL.
//
// Thread-safety: as NCCL's, one thread at a time calls a communicator
// (the one that made it, or another in turn), except ncclCommAbort, which
// may come from any thread; afterwards no other thread may touch the
// communicator. Groups are per thread. Different communicators are
// independent.
#include "engine/cuda/emulation/nccl_host.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <utility>

#include "engine/cuda/emulation/nccl_comm.h"
#include "engine/cuda/emulation/runtime.h"

namespace trainyard::cuda_emulation {
namespace {

using nccl::AllReduceCall;
using nccl::EnsureReady;
using nccl::Fail;
using nccl::Outcome;
using nccl::Post;

// What ncclGetUniqueId writes at the start of the id.
constexpr uint64_t kIdMagic = 0x59444e43434c4931;  // "YDNCCLI1"
struct IdLayout {
  uint64_t magic;
  uint64_t tag;
  uint16_t port;
};
static_assert(sizeof(IdLayout) <= NCCL_UNIQUE_ID_BYTES);

// ncclGetUniqueId's listening sockets by tag, until rank 0 takes one.
struct Listeners {
  std::mutex mu;
  std::map<uint64_t, int> by_tag;
};

Listeners& Unclaimed() {
  static Listeners* listeners = new Listeners;
  return *listeners;
}

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;  // first failed call of the group
  std::vector<std::pair<ncclComm*, AllReduceCall>> calls;
};
thread_local GroupState group;

std::string Pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// NCCL's argument checks of ncclAllReduce, and the emulation's.
ncclResult_t CheckAllReduce(const void* send, const void* recv, size_t count,
                            ncclDataType_t type, ncclRedOp_t op, ncclComm* c) {
  const std::string where = "ncclAllReduce: ";
  if (c == nullptr) return Fail(c, ncclInvalidArgument, where + "comm is NULL");
  if (type < 0 || type >= ncclNumTypes) {
    return Fail(c, ncclInvalidArgument,
                where + "invalid data type " + std::to_string(type));
  }
  if (op < 0 || op >= ncclNumOps) {
    return Fail(c, ncclInvalidArgument,
                where + "invalid reduction operation " + std::to_string(op));
  }
  if (type != ncclFloat32 || op != ncclSum) {
    return Fail(c, ncclInvalidArgument,
                where +
                    "the emulation sums ncclFloat32 (ncclSum) only; got "
                    "data type " +
                    std::to_string(type) + ", operation " + std::to_string(op));
  }
  if (count == 0) return ncclSuccess;
  if (count > SIZE_MAX / sizeof(float)) {
    return Fail(c, ncclInvalidArgument, where + "count overflows");
  }
  const size_t bytes = count * sizeof(float);
  for (auto [name, p] : {std::pair{"sendbuff", send}, {"recvbuff", recv}}) {
    if (DeviceHolding(p, bytes) != c->device) {
      return Fail(c, ncclInvalidArgument,
                  where + name + " " + Pointer(p) + " (" +
                      std::to_string(bytes) +
                      " bytes) is not memory cudaMalloc made on device " +
                      std::to_string(c->device) + ", the communicator's");
    }
  }
  const auto s = reinterpret_cast<uintptr_t>(send);
  const auto r = reinterpret_cast<uintptr_t>(recv);
  if (s != r && s < r + bytes && r < s + bytes) {
    return Fail(c, ncclInvalidArgument,
                where +
                    "sendbuff and recvbuff overlap without being the "
                    "same buffer");
  }
  return ncclSuccess;
}

// Runs the group's calls: each communicator's in call order, on its
// thread. Blocking communicators are waited for.
ncclResult_t RunGroup(std::vector<std::pair<ncclComm*, AllReduceCall>> calls) {
  std::vector<ncclComm*> comms;
  for (const auto& [c, call] : calls) {
    if (std::find(comms.begin(), comms.end(), c) == comms.end()) {
      comms.push_back(c);
    }
  }
  bool pending = false;
  for (ncclComm* c : comms) {
    std::vector<AllReduceCall> mine;
    for (const auto& [owner, call] : calls) {
      if (owner == c) mine.push_back(call);
    }
    Post(
        c,
        [c, mine = std::move(mine)] {
          for (const AllReduceCall& call : mine) {
            if (Outcome o = nccl::AllReduce(c, call); !o.ok()) return o;
          }
          return Outcome{};
        },
        c->blocking);
    pending = pending || !c->blocking;
  }
  ncclResult_t result = ncclSuccess;
  for (ncclComm* c : comms) {
    if (!c->blocking) continue;
    const ncclResult_t r = nccl::AwaitJob(c);
    if (result == ncclSuccess) result = r;
  }
  if (result != ncclSuccess) return result;
  return pending ? ncclInProgress : ncclSuccess;
}

// `config`'s blocking flag; NCCL's default (no config) blocks.
ncclResult_t ReadConfig(const ncclConfig_t* config, bool* blocking) {
  *blocking = true;
  if (config == nullptr) return ncclSuccess;
  if (config->magic != 0xcafebeef || config->size < sizeof(size_t) * 2) {
    return Fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRankConfig: the config was not set from "
                "NCCL_CONFIG_INITIALIZER");
  }
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return ncclSuccess;
  if (config->blocking != 0 && config->blocking != 1) {
    return Fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRankConfig: config.blocking must be 0 or 1, "
                "not " +
                    std::to_string(config->blocking));
  }
  *blocking = config->blocking == 1;
  return ncclSuccess;
}

// The listening socket of `tag`'s id, taken from the unclaimed ones; -1
// when this process has none.
int ClaimListener(uint64_t tag) {
  Listeners& listeners = Unclaimed();
  std::lock_guard<std::mutex> lock(listeners.mu);
  auto it = listeners.by_tag.find(tag);
  if (it == listeners.by_tag.end()) return -1;
  const int fd = it->second;
  listeners.by_tag.erase(it);
  return fd;
}

// Checks the arguments of ncclCommInitRankConfig; the id's layout on
// success.
ncclResult_t CheckInit(ncclComm_t* comm, int nranks, const ncclUniqueId& id,
                       int rank, IdLayout* layout) {
  const std::string where = "ncclCommInitRankConfig: ";
  if (comm == nullptr) {
    return Fail(nullptr, ncclInvalidArgument, where + "comm is NULL");
  }
  *comm = nullptr;
  if (group.depth > 0) {
    return Fail(nullptr, ncclInvalidUsage,
                where + "inside a group: not emulated");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(nullptr, ncclInvalidArgument,
                where + "rank " + std::to_string(rank) + " of " +
                    std::to_string(nranks) + " ranks");
  }
  std::memcpy(layout, id.internal, sizeof(*layout));
  if (layout->magic != kIdMagic) {
    return Fail(nullptr, ncclInvalidArgument,
                where + "the id is not one ncclGetUniqueId made");
  }
  return ncclSuccess;
}

}  // namespace

}  // namespace trainyard::cuda_emulation

using trainyard::cuda_emulation::nccl::Outcome;
namespace emulation = trainyard::cuda_emulation;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) {
    return emulation::nccl::Fail(nullptr, ncclInvalidArgument,
                                 "ncclGetVersion: version is NULL");
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) {
    return emulation::nccl::Fail(nullptr, ncclInvalidArgument,
                                 "ncclGetUniqueId: uniqueId is NULL");
  }
  emulation::IdLayout layout{emulation::kIdMagic, 0, 0};
  std::string error;
  const int fd = emulation::nccl::ListenOnLoopback(&layout.port, &error);
  if (fd < 0) {
    return emulation::nccl::Fail(nullptr, ncclSystemError,
                                 "ncclGetUniqueId: " + error);
  }
  std::random_device random;
  while (layout.tag == 0) {
    layout.tag = (uint64_t{random()} << 32) | random();
  }
  {
    emulation::Listeners& listeners = emulation::Unclaimed();
    std::lock_guard<std::mutex> lock(listeners.mu);
    listeners.by_tag[layout.tag] = fd;
  }
  *id = {};
  std::memcpy(id->internal, &layout, sizeof(layout));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  emulation::IdLayout layout;
  if (ncclResult_t r = emulation::CheckInit(comm, nranks, id, rank, &layout);
      r != ncclSuccess) {
    return r;
  }
  bool blocking = true;
  if (ncclResult_t r = emulation::ReadConfig(config, &blocking);
      r != ncclSuccess) {
    return r;
  }
  const int listen_fd = rank == 0 ? emulation::ClaimListener(layout.tag) : -1;
  if (rank == 0 && listen_fd < 0) {
    return emulation::nccl::Fail(
        nullptr, ncclInvalidUsage,
        "ncclCommInitRankConfig: rank 0 must start in the process that "
        "made the id with ncclGetUniqueId, once per id (the emulation's "
        "rank 0 listens on the id's socket)");
  }
  const int abort_fd = eventfd(0, EFD_CLOEXEC);
  if (abort_fd < 0) {
    if (listen_fd >= 0) close(listen_fd);
    return emulation::nccl::Fail(nullptr, ncclSystemError,
                                 "ncclCommInitRankConfig: eventfd failed");
  }
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  cudaGetDevice(&c->device);
  c->blocking = blocking;
  c->tag = layout.tag;
  c->port = layout.port;
  c->abort_fd = abort_fd;
  c->listen_fd = listen_fd;
  emulation::nccl::StartWorker(c);
  emulation::nccl::Post(
      c, [c] { return emulation::nccl::FormRing(c); }, blocking);
  *comm = c;
  return emulation::nccl::Finish(c);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                              int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) {
    return emulation::nccl::Fail(comm, ncclInvalidArgument,
                                 "ncclCommGetAsyncError: comm or asyncError is "
                                 "NULL");
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  *asyncError = comm->state;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  bool finalized;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    finalized = comm->finalized;
  }
  if (finalized) {
    return emulation::nccl::Fail(comm, ncclInvalidArgument,
                                 "ncclCommFinalize: called twice");
  }
  if (ncclResult_t r = emulation::nccl::EnsureReady(comm, "ncclCommFinalize");
      r != ncclSuccess) {
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->finalized = true;
  }
  emulation::nccl::Post(
      comm,
      [comm] {
        emulation::nccl::CloseConnections(comm);
        return Outcome{};
      },
      comm->blocking);
  return emulation::nccl::Finish(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr) emulation::nccl::Dispose(comm, /*abort=*/false);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm != nullptr) emulation::nccl::Dispose(comm, /*abort=*/true);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) {
    return emulation::nccl::Fail(comm, ncclInvalidArgument,
                                 "ncclCommCount: comm or count is NULL");
  }
  if (ncclResult_t r = emulation::nccl::EnsureReady(comm, "ncclCommCount");
      r != ncclSuccess) {
    return r;
  }
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) {
    return emulation::nccl::Fail(comm, ncclInvalidArgument,
                                 "ncclCommCuDevice: comm or device is NULL");
  }
  if (ncclResult_t r = emulation::nccl::EnsureReady(comm, "ncclCommCuDevice");
      r != ncclSuccess) {
    return r;
  }
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) {
    return emulation::nccl::Fail(comm, ncclInvalidArgument,
                                 "ncclCommUserRank: comm or rank is NULL");
  }
  if (ncclResult_t r = emulation::nccl::EnsureReady(comm, "ncclCommUserRank");
      r != ncclSuccess) {
    return r;
  }
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  ncclResult_t r =
      emulation::CheckAllReduce(sendbuff, recvbuff, count, datatype, op, comm);
  if (r == ncclSuccess) r = emulation::nccl::EnsureReady(comm, "ncclAllReduce");
  emulation::GroupState& group = emulation::group;
  if (r != ncclSuccess) {
    if (group.depth > 0 && group.error == ncclSuccess) group.error = r;
    return r;
  }
  group.calls.push_back({comm,
                         {static_cast<const float*>(sendbuff),
                          static_cast<float*>(recvbuff), count}});
  if (group.depth > 0) return ncclSuccess;
  ++group.depth;  // a group of its own
  return ncclGroupEnd();
}

ncclResult_t ncclGroupStart() {
  ++emulation::group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  emulation::GroupState& group = emulation::group;
  if (group.depth == 0) {
    return emulation::nccl::Fail(nullptr, ncclInvalidUsage,
                                 "ncclGroupEnd: not in a group call");
  }
  if (--group.depth > 0) return ncclSuccess;
  auto calls = std::exchange(group.calls, {});
  // A call of the group failed: NCCL drops the whole group.
  if (ncclResult_t error = std::exchange(group.error, ncclSuccess);
      error != ncclSuccess) {
    return error;
  }
  return emulation::RunGroup(std::move(calls));
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (ncclGetLastError says more)";
    case ncclSystemError:
      return "unhandled system error (ncclGetLastError says more)";
    case ncclInternalError:
      return "internal error (ncclGetLastError says more)";
    case ncclInvalidArgument:
      return "invalid argument (ncclGetLastError says more)";
    case ncclInvalidUsage:
      return "invalid usage (ncclGetLastError says more)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclNumResults:
      break;
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  return emulation::nccl::LastError(comm);
}

}  // extern "C"
