// The NCCL stand-in's wire protocol: forming the star and the all-reduce.
// See nccl_comm.h. Messages are fixed-size structs in the host's byte
// order: every rank runs on this machine.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/cuda/emulation/nccl_comm.h"

namespace trainyard::cuda_emulation::nccl {
namespace {

constexpr uint64_t kHelloMagic = 0x59444e43434c4831;   // "YDNCCLH1"
constexpr uint64_t kAnswerMagic = 0x59444e43434c4131;  // "YDNCCLA1"
constexpr uint64_t kReduceMagic = 0x59444e43434c5231;  // "YDNCCLR1"
// How long a new connection may take to say who it is.
constexpr auto kHelloBound = std::chrono::seconds(10);

// A rank introducing itself to rank 0.
struct Hello {
  uint64_t magic;
  uint64_t tag;
  int32_t nranks;
  int32_t rank;
  int32_t pid;
  int32_t device;
};

// Rank 0's answer to a hello or an all-reduce: ncclSuccess, or the error
// every rank reports.
struct Answer {
  uint64_t magic;
  int32_t result;
  char reason[244];
};

// What a rank sends ahead of its buffer for one all-reduce.
struct ReduceHeader {
  uint64_t magic;
  uint64_t call;  // 1 for the communicator's first all-reduce
  uint64_t count;
};

std::string Rank(int r) { return "rank " + std::to_string(r); }

Hello Introduce(const ncclComm* c) {
  return {kHelloMagic, c->tag, c->nranks, c->rank, getpid(), c->device};
}

Answer MakeAnswer(const Outcome& o) {
  Answer a{kAnswerMagic, o.result, {}};
  std::strncpy(a.reason, o.message.c_str(), sizeof(a.reason) - 1);
  return a;
}

Outcome Received(const Answer& a, const std::string& what) {
  if (a.magic != kAnswerMagic) {
    return {ncclSystemError, what + ": rank 0 sent a garbled answer"};
  }
  if (a.result == ncclSuccess) return {};
  return {static_cast<ncclResult_t>(a.result),
          std::string(a.reason, strnlen(a.reason, sizeof(a.reason)))};
}

// Why rank 0 turns `h` away ("" when it joins): the ring's size, the rank
// and one rank per device, as NCCL checks them.
std::string CheckHello(const ncclComm* c, const std::vector<Hello>& joined,
                       const Hello& h) {
  const std::string who = Rank(h.rank);
  if (h.nranks != c->nranks) {
    return who + " joined a communicator of " + std::to_string(h.nranks) +
           " ranks; rank 0's has " + std::to_string(c->nranks);
  }
  if (h.rank < 1 || h.rank >= c->nranks) {
    return "a rank joined as " + who + " of " + std::to_string(c->nranks);
  }
  if (joined[h.rank].magic == kHelloMagic) {
    return "two ranks joined as " + who;
  }
  for (int r = 0; r < c->nranks; ++r) {
    const Hello& other = joined[r];
    if (other.magic == kHelloMagic && other.pid == h.pid &&
        other.device == h.device) {
      return Rank(r) + " and " + who + " are both on emulated device " +
             std::to_string(h.device) + " of process " + std::to_string(h.pid) +
             " (one rank per GPU)";
    }
  }
  return "";
}

// Rank 0: accepts the other ranks until all are there; a failure ends it.
Outcome AcceptRanks(ncclComm* c, const Watch& watch) {
  std::vector<Hello> joined(c->nranks, Hello{});
  joined[0] = Introduce(c);
  for (int count = 1; count < c->nranks;) {
    int fd = -1;
    if (Outcome o = AcceptOne(c->listen_fd, watch, &fd); !o.ok()) {
      o.message = "only " + std::to_string(count) + " of " +
                  std::to_string(c->nranks) + " ranks joined: " + o.message;
      return o;
    }
    Hello h{};
    const Watch hello{watch.abort_fd,
                      std::min(watch.deadline, Clock::now() + kHelloBound)};
    if (!RecvAll(fd, &h, sizeof(h), hello, "a connecting rank").ok() ||
        h.magic != kHelloMagic) {
      close(fd);  // not one of ours
      continue;
    }
    if (h.tag != c->tag) {
      // A rank of another communicator: it fails, this one waits on.
      const Answer a =
          MakeAnswer({ncclInvalidUsage,
                      "the rank 0 at 127.0.0.1:" + std::to_string(c->port) +
                          " has another id (unique id mismatch)"});
      SendAll(fd, &a, sizeof(a), hello, "a foreign rank");
      close(fd);
      continue;
    }
    if (std::string problem = CheckHello(c, joined, h); !problem.empty()) {
      const Answer a = MakeAnswer({ncclInvalidUsage, problem});
      SendAll(fd, &a, sizeof(a), hello, Rank(h.rank));
      close(fd);
      return {ncclInvalidUsage, problem};
    }
    joined[h.rank] = h;
    c->peers[h.rank] = fd;
    ++count;
  }
  return {};
}

Outcome FormRingAtRoot(ncclComm* c, const Watch& watch) {
  c->peers.assign(c->nranks, -1);
  Outcome result = AcceptRanks(c, watch);
  close(c->listen_fd);
  c->listen_fd = -1;
  // Every rank that joined learns the outcome, so none waits for nothing.
  const Answer a = MakeAnswer(result);
  for (int r = 1; r < c->nranks; ++r) {
    if (c->peers[r] < 0) continue;
    Outcome sent = SendAll(c->peers[r], &a, sizeof(a), watch, Rank(r));
    if (result.ok() && !sent.ok()) result = sent;
  }
  return result;
}

Outcome FormRingAtLeaf(ncclComm* c, const Watch& watch) {
  int fd = -1;
  Outcome o = ConnectToLoopback(c->port, watch, &fd);
  if (!o.ok()) return o;
  c->peers.assign(1, fd);
  const Hello h = Introduce(c);
  if (o = SendAll(fd, &h, sizeof(h), watch, "rank 0"); !o.ok()) return o;
  Answer a{};
  if (o = RecvAll(fd, &a, sizeof(a), watch, "rank 0"); !o.ok()) return o;
  return Received(a, "joining");
}

Outcome AllReduceAtRoot(ncclComm* c, const AllReduceCall& call,
                        const Watch& watch) {
  const size_t bytes = call.count * sizeof(float);
  if (call.recv != call.send && bytes > 0) {
    std::memcpy(call.recv, call.send, bytes);
  }
  c->scratch.resize(call.count);
  // Rank order, so that every run and every rank gets the same bits.
  for (int r = 1; r < c->nranks; ++r) {
    ReduceHeader h{};
    Outcome o = RecvAll(c->peers[r], &h, sizeof(h), watch, Rank(r));
    if (o.ok() && (h.magic != kReduceMagic || h.call != c->all_reduces ||
                   h.count != call.count)) {
      o = {ncclInvalidUsage, Rank(r) + " sums " + std::to_string(h.count) +
                                 " floats in its all-reduce #" +
                                 std::to_string(h.call) +
                                 " (the ranks called different collectives)"};
    }
    if (o.ok()) {
      o = RecvAll(c->peers[r], c->scratch.data(), bytes, watch, Rank(r));
    }
    if (!o.ok()) return o;
    for (size_t i = 0; i < call.count; ++i) call.recv[i] += c->scratch[i];
  }
  const Answer a = MakeAnswer({});
  for (int r = 1; r < c->nranks; ++r) {
    Outcome o = SendAll(c->peers[r], &a, sizeof(a), watch, Rank(r));
    if (o.ok()) o = SendAll(c->peers[r], call.recv, bytes, watch, Rank(r));
    if (!o.ok()) return o;
  }
  return {};
}

Outcome AllReduceAtLeaf(ncclComm* c, const AllReduceCall& call,
                        const Watch& watch) {
  const int fd = c->peers[0];
  const size_t bytes = call.count * sizeof(float);
  const ReduceHeader h{kReduceMagic, c->all_reduces, call.count};
  Outcome o = SendAll(fd, &h, sizeof(h), watch, "rank 0");
  if (o.ok()) o = SendAll(fd, call.send, bytes, watch, "rank 0");
  Answer a{};
  if (o.ok()) o = RecvAll(fd, &a, sizeof(a), watch, "rank 0");
  if (o.ok()) o = Received(a, "all-reduce");
  if (o.ok()) o = RecvAll(fd, call.recv, bytes, watch, "rank 0");
  return o;
}

}  // namespace

Outcome FormRing(ncclComm* c) {
  const Watch watch{c->abort_fd, Clock::now() + CurrentBounds().init};
  Outcome o =
      c->rank == 0 ? FormRingAtRoot(c, watch) : FormRingAtLeaf(c, watch);
  if (!o.ok()) {
    if (o.result == ncclSystemError && Clock::now() >= watch.deadline) {
      o.message += " (the emulation gives the ring " +
                   std::to_string(CurrentBounds().init.count()) + " ms)";
    }
    o.message = Rank(c->rank) + ": forming the communicator: " + o.message;
    CloseConnections(c);
  }
  return o;
}

Outcome AllReduce(ncclComm* c, const AllReduceCall& call) {
  ++c->all_reduces;
  const Watch watch{c->abort_fd, Clock::now() + CurrentBounds().collective};
  Outcome o = c->rank == 0 ? AllReduceAtRoot(c, call, watch)
                           : AllReduceAtLeaf(c, call, watch);
  if (o.ok()) return o;
  o.message = Rank(c->rank) + ": all-reduce #" +
              std::to_string(c->all_reduces) + " of " +
              std::to_string(call.count) + " floats: " + o.message;
  if (c->rank == 0) {
    // Tell the ranks still waiting for the sum; then end every
    // connection, so none waits on a communicator that is broken.
    const Answer a = MakeAnswer(o);
    const Watch brief{c->abort_fd, Clock::now() + std::chrono::seconds(1)};
    for (int r = 1; r < c->nranks; ++r) {
      SendAll(c->peers[r], &a, sizeof(a), brief, Rank(r));
    }
  }
  CloseConnections(c);
  return o;
}

void CloseConnections(ncclComm* c) {
  for (int& fd : c->peers) {
    if (fd < 0) continue;
    ShutDown(fd);
    close(fd);
    fd = -1;
  }
  if (c->listen_fd >= 0) close(c->listen_fd);
  c->listen_fd = -1;
}

}  // namespace trainyard::cuda_emulation::nccl
