// The NCCL stand-in's communicator (nccl_host.cc says what it emulates)
// and the wire protocol its ranks speak (nccl_exchange.cc): rank 0 is the
// hub of a star, every other rank holds one socket to it.
//
// Thread-safety: the API thread that owns the communicator and its worker
// thread share the fields under `mu`; the sockets and the counters marked
// "worker" belong to the job the worker runs (or, before the worker
// starts, to the creating thread). ncclCommAbort may come from any thread.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_COMM_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_COMM_H_

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/emulation/nccl_wire.h"

struct ncclComm {
  int rank = 0;
  int nranks = 1;
  int device = 0;  // current when the communicator was made
  bool blocking = true;
  uint64_t tag = 0;   // the id's, shared by every rank
  uint16_t port = 0;  // rank 0's listening port, from the id
  // Readable once ncclCommAbort began: every socket wait ends.
  int abort_fd = -1;

  // Worker: rank 0's listener until the ring forms; the sockets to the
  // other ranks (rank 0: peers[r] for r >= 1; other ranks: peers[0]).
  int listen_fd = -1;
  std::vector<int> peers;
  uint64_t all_reduces = 0;    // worker: all-reduces run so far
  std::vector<float> scratch;  // worker: rank 0's receive buffer

  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu: ncclInProgress while a job runs; an error stays for
  // good (jobs are posted to a communicator in ncclSuccess only).
  ncclResult_t state = ncclSuccess;
  std::string last_error;       // guarded by mu
  uint64_t last_error_seq = 0;  // guarded by mu: when, in message order
  // Guarded by mu: the worker's next job.
  std::function<trainyard::cuda_emulation::nccl::Outcome()> job;
  bool stopping = false;    // guarded by mu: the worker ends
  bool aborting = false;    // guarded by mu
  bool finalized = false;   // guarded by mu
  int waiting_callers = 0;  // guarded by mu: blocking calls awaiting jobs
  std::thread worker;
};

namespace trainyard::cuda_emulation::nccl {

// The emulation's bounds: for the ring to form, and for one collective to
// hear from a peer that is alive (NCCL itself would wait forever).
struct Bounds {
  std::chrono::milliseconds init;
  std::chrono::milliseconds collective;
};
Bounds CurrentBounds();

// One ncclAllReduce as the group recorded it.
struct AllReduceCall {
  const float* send;
  float* recv;
  size_t count;
};

// Forms the star: rank 0 accepts and checks every other rank's hello,
// then answers all of them; the others connect and wait for the answer.
// A rank with a foreign id (another tag) is turned away alone; a rank of
// this id with a bad world size, rank or device fails every rank with
// ncclInvalidUsage.
Outcome FormRing(ncclComm* comm);

// One all-reduce (sum of fp32) over the star: rank 0 sums in rank order.
Outcome AllReduce(ncclComm* comm, const AllReduceCall& call);

// Ends every connection of `comm` (the peers see EOF) and closes them.
void CloseConnections(ncclComm* comm);

// Records `message` as the latest error, of this thread and of `comm`
// (when not null), for ncclGetLastError; returns `result`.
ncclResult_t Fail(ncclComm* comm, ncclResult_t result,
                  const std::string& message);

// What ncclGetLastError(comm) returns: the later of this thread's latest
// message and `comm`'s (valid until this thread's next call).
const char* LastError(ncclComm* comm);

// Starts the communicator's thread, which runs the jobs Post hands it.
void StartWorker(ncclComm* comm);

// Hands `job` to the communicator's thread (state ncclInProgress until it
// ends). A caller that will wait for it (AwaitJob) counts itself in now,
// so that an abort waits for it to leave.
// REQUIRES: the communicator is ready (EnsureReady) and has no job.
void Post(ncclComm* comm, std::function<Outcome()> job, bool caller_waits);

// Waits for the job; its result (ncclSystemError when aborted meanwhile).
// REQUIRES: Post(..., caller_waits = true) came first.
ncclResult_t AwaitJob(ncclComm* comm);

// What a call that posted a job returns: the job's result when the
// communicator blocks (AwaitJob), else ncclInProgress.
ncclResult_t Finish(ncclComm* comm);

// NCCL's check at the start of a call: the previous operation done
// (else ncclInvalidArgument) and no error (else that error); and, here,
// not finalized (else ncclInvalidUsage). `call` names the call.
ncclResult_t EnsureReady(ncclComm* comm, const char* call);

// Stops the communicator's thread (after its job, which an abort ends at
// once), waits for blocked callers to leave, closes and frees it.
void Dispose(ncclComm* comm, bool abort);

}  // namespace trainyard::cuda_emulation::nccl

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_COMM_H_
