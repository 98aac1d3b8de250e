// Linked into the emulation's GoogleTest binaries: a kernel that fails one
// of the emulator's checks (block_runner.h) fails the running test with the
// emulator's message, on top of the launch error the test may check.
// Installed before main by a static initializer; the handler runs on the
// launching thread.
#include <string>

#include "engine/cuda/emulation/launch.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

const bool installed = [] {
  SetFailureHandler([](const std::string& message) {
    ADD_FAILURE() << "emulated kernel failed: " << message;
  });
  return true;
}();

}  // namespace
}  // namespace trainyard::cuda_emulation
