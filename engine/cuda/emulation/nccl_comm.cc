// The NCCL stand-in's communicator: its thread, its state and its
// messages. See nccl_comm.h.
#include "engine/cuda/emulation/nccl_comm.h"

#include <unistd.h>

#include <atomic>
#include <utility>

#include "engine/cuda/emulation/nccl_host.h"

namespace trainyard::cuda_emulation {
namespace nccl {
namespace {

// Beyond NcclCollectiveOptions' defaults (2 min to form, 30 min per
// wait), so that the caller's deadlines, as with NCCL, end a wait first.
constexpr std::chrono::milliseconds kDefaultInitBound = std::chrono::minutes(5);
constexpr std::chrono::milliseconds kDefaultCollectiveBound =
    std::chrono::minutes(60);

std::atomic<int64_t> init_bound_ms{kDefaultInitBound.count()};
std::atomic<int64_t> collective_bound_ms{kDefaultCollectiveBound.count()};

// Latest messages: the calling thread's and (in ncclComm) each
// communicator's, ordered by a process-wide count.
std::atomic<uint64_t> message_count{0};
struct ThreadMessage {
  std::string text;
  uint64_t seq = 0;
};
thread_local ThreadMessage thread_message;
thread_local std::string returned_message;  // what ncclGetLastError hands out

void RunWorker(ncclComm* c) {
  std::unique_lock<std::mutex> lock(c->mu);
  while (true) {
    c->cv.wait(lock, [c] { return c->job != nullptr || c->stopping; });
    if (c->job == nullptr) return;
    auto job = std::exchange(c->job, nullptr);
    lock.unlock();
    const Outcome o = job();
    lock.lock();
    c->state = o.result;
    if (!o.ok()) {
      c->last_error = o.message;
      c->last_error_seq = ++message_count;
    }
    c->cv.notify_all();
  }
}

}  // namespace

const char* LastError(ncclComm* c) {
  returned_message = thread_message.text;
  if (c != nullptr) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->last_error_seq > thread_message.seq)
      returned_message = c->last_error;
  }
  return returned_message.c_str();
}

void StartWorker(ncclComm* c) { c->worker = std::thread(RunWorker, c); }

ncclResult_t Fail(ncclComm* c, ncclResult_t result,
                  const std::string& message) {
  const uint64_t seq = ++message_count;
  thread_message = {message, seq};
  if (c != nullptr) {
    std::lock_guard<std::mutex> lock(c->mu);
    c->last_error = message;
    c->last_error_seq = seq;
  }
  return result;
}

void Post(ncclComm* c, std::function<Outcome()> job, bool caller_waits) {
  std::lock_guard<std::mutex> lock(c->mu);
  c->state = ncclInProgress;
  c->job = std::move(job);
  if (caller_waits) ++c->waiting_callers;
  c->cv.notify_all();
}

ncclResult_t AwaitJob(ncclComm* c) {
  std::unique_lock<std::mutex> lock(c->mu);
  c->cv.wait(lock, [c] { return c->state != ncclInProgress || c->aborting; });
  const ncclResult_t result = c->aborting ? ncclSystemError : c->state;
  if (result != ncclSuccess) {
    thread_message = {c->aborting ? "the communicator was aborted while a "
                                    "blocking call waited on it"
                                  : c->last_error,
                      ++message_count};
  }
  --c->waiting_callers;
  c->cv.notify_all();
  return result;
}

ncclResult_t Finish(ncclComm* c) {
  return c->blocking ? AwaitJob(c) : ncclInProgress;
}

void Dispose(ncclComm* c, bool abort) {
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->stopping = true;
    if (abort) {
      c->aborting = true;
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(c->abort_fd, &one, sizeof(one));
    }
    c->cv.notify_all();
  }
  if (c->worker.joinable()) c->worker.join();
  {
    std::unique_lock<std::mutex> lock(c->mu);
    c->cv.wait(lock, [c] { return c->waiting_callers == 0; });
  }
  nccl::CloseConnections(c);
  close(c->abort_fd);
  delete c;
}

ncclResult_t EnsureReady(ncclComm* c, const char* call) {
  ncclResult_t state;
  bool finalized;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    state = c->state;
    finalized = c->finalized;
    if (state != ncclSuccess && state != ncclInProgress) {
      // The error that broke the communicator is the latest word.
      thread_message = {c->last_error, ++message_count};
    }
  }
  const std::string where = std::string(call) + ": ";
  if (state == ncclInProgress) {
    return Fail(c, ncclInvalidArgument,
                where +
                    "Attempt to use communicator before the previous "
                    "operation returned ncclSuccess (poll "
                    "ncclCommGetAsyncError)");
  }
  if (state != ncclSuccess) return state;
  if (finalized) {
    return Fail(c, ncclInvalidUsage, where + "the communicator is finalized");
  }
  return ncclSuccess;
}

Bounds CurrentBounds() {
  return {std::chrono::milliseconds(init_bound_ms.load()),
          std::chrono::milliseconds(collective_bound_ms.load())};
}

}  // namespace nccl

void SetEmulatedNcclBounds(std::chrono::milliseconds init,
                           std::chrono::milliseconds collective) {
  nccl::init_bound_ms =
      (init.count() > 0 ? init : nccl::kDefaultInitBound).count();
  nccl::collective_bound_ms =
      (collective.count() > 0 ? collective : nccl::kDefaultCollectiveBound)
          .count();
}

}  // namespace trainyard::cuda_emulation
