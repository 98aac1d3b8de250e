// The NCCL stand-in (nccl_host.cc) with ranks as threads and as processes:
// sums in rank order, bitwise the same on every rank; ranks that do not
// belong together fail to form; a peer that goes away fails the others
// promptly; ncclCommAbort from another thread ends a pending init; the
// bounds end a wait on a peer that is alive but silent. ctest runs it with
// YARD_EMULATION_DEVICES=3.
#include <nccl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "engine/cuda/emulation/emulated_nccl_test_support.h"
#include "engine/cuda/emulation/nccl_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace trainyard::cuda_emulation::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr size_t kN = 100003;  // more than a socket buffer holds

// The environment variable that makes this binary a child rank:
// "MODE RANK WORLD ID_FILE".
constexpr char kChildVariable[] = "YARD_NCCL_TEST_CHILD";

int Devices() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

#define REQUIRE_DEVICES(n)  \
  ASSERT_GE(Devices(), (n)) \
      << "run with YARD_EMULATION_DEVICES=" << (n) << " (ctest sets it)"

ncclUniqueId NewId() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

// Rank `rank` of `world` on device `rank`, summing kN values in place and
// out of place in one group; the in-place result, or empty on failure.
std::vector<float> SumAsRank(const ncclUniqueId& id, int rank, int world) {
  DeviceBuffer data(rank, kN), out(rank, kN);
  data.Upload(Values(rank, kN));
  ncclConfig_t config = NonBlocking();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  EXPECT_TRUE(r == ncclInProgress || r == ncclSuccess) << r;
  EXPECT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.data(), out.data(), kN, ncclFloat32, ncclSum,
                          comm, nullptr),
            ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum,
                          comm, nullptr),
            ncclSuccess);
  r = ncclGroupEnd();
  EXPECT_TRUE(r == ncclInProgress || r == ncclSuccess) << r;
  EXPECT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  const std::vector<float> in_place = data.Download();
  EXPECT_TRUE(SameBits(out.Download(), in_place)) << "rank " << rank;
  EXPECT_EQ(ncclCommFinalize(comm), ncclInProgress);
  EXPECT_EQ(AwaitState(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  return in_place;
}

TEST(EmulatedNcclTest, ThreeRanksAsThreadsSumInRankOrderWithTheSameBits) {
  REQUIRE_DEVICES(3);
  const ncclUniqueId id = NewId();
  std::vector<std::vector<float>> got(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] { got[r] = SumAsRank(id, r, 3); });
  }
  for (std::thread& t : ranks) t.join();
  const std::vector<float> want = RankOrderSum(3, kN);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(SameBits(got[r], want)) << r;
  // The order matters for these values: another order rounds otherwise.
  std::vector<float> reversed = Values(2, kN);
  for (size_t i = 0; i < kN; ++i) {
    reversed[i] += Value(1, i);
    reversed[i] += Value(0, i);
  }
  EXPECT_FALSE(SameBits(reversed, want));
}

TEST(EmulatedNcclTest, BlockingCommunicatorsReturnWhenDone) {
  REQUIRE_DEVICES(2);
  const ncclUniqueId id = NewId();
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      DeviceBuffer in(r, kN), out(r, kN);
      in.Upload(Values(r, kN));
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, 2, id, r), ncclSuccess);
      int n = 0, rank = -1, device = -1;
      EXPECT_EQ(ncclCommCount(comm, &n), ncclSuccess);
      EXPECT_EQ(ncclCommUserRank(comm, &rank), ncclSuccess);
      EXPECT_EQ(ncclCommCuDevice(comm, &device), ncclSuccess);
      EXPECT_EQ(n * 100 + rank * 10 + device, 200 + r * 11);
      EXPECT_EQ(ncclAllReduce(in.data(), out.data(), kN, ncclFloat, ncclSum,
                              comm, nullptr),
                ncclSuccess);
      got[r] = out.Download();
      EXPECT_TRUE(SameBits(in.Download(), Values(r, kN)));  // untouched
      EXPECT_EQ(ncclCommFinalize(comm), ncclSuccess);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_TRUE(SameBits(got[0], RankOrderSum(2, kN)));
  EXPECT_TRUE(SameBits(got[1], RankOrderSum(2, kN)));
}

// ------------------------------------------------- ranks as processes

std::string IdFile(const std::string& name) {
  return ::testing::TempDir() + "/emulated_nccl_" + name + "_" +
         std::to_string(getpid());
}

void WriteId(const ncclUniqueId& id, const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary).write(id.internal, NCCL_UNIQUE_ID_BYTES);
  std::rename(tmp.c_str(), path.c_str());
}

// This binary again, as rank `rank` of `world` doing `mode`; -1 on failure.
pid_t SpawnRank(const std::string& mode, int rank, int world,
                const std::string& id_file) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(std::string(kChildVariable) + "=" + mode + " " +
                std::to_string(rank) + " " + std::to_string(world) + " " +
                id_file);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=EmulatedNcclChild.DISABLED_Rank";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) !=
      0) {
    return -1;
  }
  return pid;
}

// The child's exit status, or -1 (the child killed) when it runs past
// `timeout`.
int AwaitExit(pid_t pid, milliseconds timeout) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  pollfd p{pidfd, POLLIN, 0};
  const bool exited = pidfd >= 0 && poll(&p, 1, timeout.count()) == 1;
  if (pidfd >= 0) close(pidfd);
  if (!exited) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The child: "sum" checks the sum it gets; "die" leaves right after the
// communicator formed, without a word.
TEST(EmulatedNcclChild, DISABLED_Rank) {
  const char* spec = std::getenv(kChildVariable);
  ASSERT_NE(spec, nullptr);
  std::istringstream in(spec);
  std::string mode, id_file;
  int rank = 0, world = 0;
  in >> mode >> rank >> world >> id_file;
  ncclUniqueId id{};
  std::ifstream(id_file, std::ios::binary)
      .read(id.internal, NCCL_UNIQUE_ID_BYTES);
  DeviceBuffer data(0, kN);  // a process of its own: its own device 0
  data.Upload(Values(rank, kN));
  ncclConfig_t config = NonBlocking();
  ncclComm_t comm = nullptr;
  ncclCommInitRankConfig(&comm, world, id, rank, &config);
  ASSERT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  if (mode == "die") _exit(0);
  ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum, comm,
                nullptr);
  ASSERT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  EXPECT_TRUE(SameBits(data.Download(), RankOrderSum(world, kN)));
  ncclCommFinalize(comm);
  EXPECT_EQ(AwaitState(comm), ncclSuccess);
  ncclCommDestroy(comm);
}

TEST(EmulatedNcclTest, RanksAsProcessesSumInRankOrder) {
  const std::string id_file = IdFile("processes");
  const ncclUniqueId id = NewId();
  WriteId(id, id_file);
  const pid_t one = SpawnRank("sum", 1, 3, id_file);
  const pid_t two = SpawnRank("sum", 2, 3, id_file);
  ASSERT_GT(one, 0);
  ASSERT_GT(two, 0);
  DeviceBuffer data(0, kN);
  data.Upload(Values(0, kN));
  ncclConfig_t config = NonBlocking();
  ncclComm_t comm = nullptr;
  ncclCommInitRankConfig(&comm, 3, id, 0, &config);
  EXPECT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum, comm,
                nullptr);
  EXPECT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  EXPECT_TRUE(SameBits(data.Download(), RankOrderSum(3, kN)));
  ncclCommAbort(comm);
  EXPECT_EQ(AwaitExit(one, seconds(20)), 0);
  EXPECT_EQ(AwaitExit(two, seconds(20)), 0);
  std::remove(id_file.c_str());
}

TEST(EmulatedNcclTest, AProcessThatDiesFailsTheAllReduceOfTheOther) {
  const std::string id_file = IdFile("dies");
  const ncclUniqueId id = NewId();
  WriteId(id, id_file);
  const pid_t child = SpawnRank("die", 1, 2, id_file);
  ASSERT_GT(child, 0);
  DeviceBuffer data(0, kN);
  ncclConfig_t config = NonBlocking();
  ncclComm_t comm = nullptr;
  ncclCommInitRankConfig(&comm, 2, id, 0, &config);
  ASSERT_EQ(AwaitState(comm), ncclSuccess) << ncclGetLastError(comm);
  ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum, comm,
                nullptr);
  EXPECT_EQ(AwaitState(comm, seconds(5)), ncclRemoteError);
  EXPECT_THAT(ncclGetLastError(comm), HasSubstr("rank 1 closed"));
  // The error stays, and a new call is refused with it.
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum,
                          comm, nullptr),
            ncclRemoteError);
  ncclCommAbort(comm);
  EXPECT_EQ(AwaitExit(child, seconds(20)), 0);
  std::remove(id_file.c_str());
}

// ------------------------------------------------------------ failures

// Two non-blocking communicators of one id in this thread, on devices 0
// and 1, formed.
void FormTwo(ncclComm_t comms[2]) {
  const ncclUniqueId id = NewId();
  ncclConfig_t config = NonBlocking();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 2, id, r, &config),
              ncclInProgress);
  }
  for (int r = 0; r < 2; ++r) ASSERT_EQ(AwaitState(comms[r]), ncclSuccess);
}

TEST(EmulatedNcclTest, APeerAbortedMidAllReduceFailsTheOtherPromptly) {
  REQUIRE_DEVICES(2);
  for (int waiting : {0, 1}) {
    ncclComm_t comms[2] = {nullptr, nullptr};
    ASSERT_NO_FATAL_FAILURE(FormTwo(comms));
    DeviceBuffer data(waiting, kN);
    ASSERT_EQ(ncclAllReduce(data.data(), data.data(), kN, ncclFloat32, ncclSum,
                            comms[waiting], nullptr),
              ncclInProgress);
    const auto start = std::chrono::steady_clock::now();
    ncclCommAbort(comms[1 - waiting]);
    EXPECT_EQ(AwaitState(comms[waiting], seconds(5)), ncclRemoteError)
        << waiting;
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
    EXPECT_THAT(ncclGetLastError(comms[waiting]),
                HasSubstr("rank " + std::to_string(1 - waiting) + " closed"));
    ncclCommAbort(comms[waiting]);
  }
}

TEST(EmulatedNcclTest, AbortFromAnotherThreadEndsAPendingInit) {
  // Rank 0 waiting for a rank 1 that never comes, and a rank 1 waiting
  // for the answer of a rank 0 that never starts.
  for (int rank : {0, 1}) {
    const ncclUniqueId id = NewId();
    ncclConfig_t config = NonBlocking();
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, rank, &config),
              ncclInProgress);
    EXPECT_EQ(AwaitState(comm, milliseconds(50)), ncclInProgress);
    auto aborted =
        std::async(std::launch::async, [comm] { return ncclCommAbort(comm); });
    ASSERT_EQ(aborted.wait_for(seconds(5)), std::future_status::ready)
        << "rank " << rank;
    EXPECT_EQ(aborted.get(), ncclSuccess);
  }
}

// Restores the default bounds when the test ends.
class ShortBounds {
 public:
  ShortBounds(milliseconds init, milliseconds collective) {
    SetEmulatedNcclBounds(init, collective);
  }
  ~ShortBounds() { SetEmulatedNcclBounds(milliseconds(0), milliseconds(0)); }
};

TEST(EmulatedNcclTest, BoundsEndWaitsOnPeersThatAreAliveButSilent) {
  REQUIRE_DEVICES(2);
  // A ring that never forms.
  ShortBounds bounds(milliseconds(300), milliseconds(0));
  const ncclUniqueId id = NewId();
  ncclComm_t alone = nullptr;
  // Blocking: returns at the bound, the communicator left to abort.
  EXPECT_EQ(ncclCommInitRank(&alone, 2, id, 0), ncclSystemError);
  ncclResult_t state = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(alone, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSystemError);
  EXPECT_THAT(ncclGetLastError(alone), HasSubstr("only 1 of 2 ranks joined"));
  ncclCommAbort(alone);
  // An all-reduce the other rank never joins.
  SetEmulatedNcclBounds(milliseconds(0), milliseconds(300));
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_NO_FATAL_FAILURE(FormTwo(comms));
  DeviceBuffer data(0, 16);
  ncclAllReduce(data.data(), data.data(), 16, ncclFloat32, ncclSum, comms[0],
                nullptr);
  EXPECT_EQ(AwaitState(comms[0], seconds(5)), ncclSystemError);
  EXPECT_THAT(ncclGetLastError(comms[0]), HasSubstr("timed out"));
  ncclCommAbort(comms[0]);
  ncclCommAbort(comms[1]);
}

// Rank 1 joining with `id1`, `world1` ranks on `device1` against a rank 0
// of id0 and 2 ranks on device 0: both states.
std::pair<ncclResult_t, ncclResult_t> Join(const ncclUniqueId& id0,
                                           const ncclUniqueId& id1, int world1,
                                           int device1, std::string* error1) {
  ncclConfig_t config = NonBlocking();
  ncclComm_t comms[2] = {nullptr, nullptr};
  cudaSetDevice(0);
  ncclCommInitRankConfig(&comms[0], 2, id0, 0, &config);
  cudaSetDevice(device1);
  ncclCommInitRankConfig(&comms[1], world1, id1, 1, &config);
  const ncclResult_t one = AwaitState(comms[1]);
  *error1 = ncclGetLastError(comms[1]);
  const ncclResult_t zero = AwaitState(comms[0], milliseconds(200));
  ncclCommAbort(comms[0]);
  ncclCommAbort(comms[1]);
  return {zero, one};
}

TEST(EmulatedNcclTest, RanksThatDoNotBelongTogetherFailToForm) {
  REQUIRE_DEVICES(2);
  std::string error;
  // Another communicator's id: that rank alone fails; rank 0 waits on.
  ncclUniqueId id = NewId();
  ncclUniqueId foreign = id;
  foreign.internal[8] ^= 1;  // the tag
  EXPECT_EQ(Join(id, foreign, 2, 1, &error),
            std::make_pair(ncclInProgress, ncclInvalidUsage));
  EXPECT_THAT(error, HasSubstr("unique id mismatch"));
  // Another world size, or both on one device: every rank fails.
  id = NewId();
  EXPECT_EQ(Join(id, id, 3, 1, &error),
            std::make_pair(ncclInvalidUsage, ncclInvalidUsage));
  EXPECT_THAT(error, HasSubstr("rank 1 joined a communicator of 3 ranks"));
  id = NewId();
  EXPECT_EQ(Join(id, id, 2, 0, &error),
            std::make_pair(ncclInvalidUsage, ncclInvalidUsage));
  EXPECT_THAT(error, HasSubstr("both on emulated device 0"));
}

TEST(EmulatedNcclTest, AnIdIsRankZerosOnceAndMustComeFromNccl) {
  const ncclUniqueId id = NewId();
  ncclConfig_t config = NonBlocking();
  ncclComm_t first = nullptr, second = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&first, 2, id, 0, &config), ncclInProgress);
  EXPECT_EQ(ncclCommInitRankConfig(&second, 2, id, 0, &config),
            ncclInvalidUsage);
  EXPECT_EQ(second, nullptr);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("once per id"));
  ncclCommAbort(first);
  ncclUniqueId made_up{};
  std::memset(made_up.internal, 7, sizeof(made_up.internal));
  EXPECT_EQ(ncclCommInitRankConfig(&second, 2, made_up, 1, &config),
            ncclInvalidArgument);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("not one ncclGetUniqueId"));
}

}  // namespace
}  // namespace trainyard::cuda_emulation::testing
