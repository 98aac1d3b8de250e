// Fuzz target: job spec text (YAML or JSON) through everything a submitted
// spec meets: the YAML-to-JSON converter and the strict JSON syntax check
// (both run on every input, whichever route it would take), ParseJobSpec,
// defaults, validation against an empty data root, the parameter count and
// the memory estimate. Beyond "no crash, hang or sanitizer report" it checks
// two properties a valid spec must have, since the worker hands specs to
// yard-train as JSON and the server stores them as protobuf:
//   - printed as JSON and parsed again, it is the same spec;
//   - encoded as protobuf and decoded again, it decodes.
// Each input is also applied as a `--set` override (ApplySpecOverride) to a
// small valid spec: an override that fails must leave the spec as it was,
// and one that yields a valid spec must round-trip as above.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "engine/job_config.h"
#include "fuzz/fuzz_report.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/json_syntax.h"
#include "spec/spec.h"
#include "spec/spec_override.h"
#include "spec/yaml_to_json.h"

namespace {

using ::trainyard::v1::JobSpec;

// An empty directory, made once and removed at exit, so that validation
// resolves paths against something real but holding nothing.
const std::string& DataRoot() {
  static const std::string* root = [] {
    char tmpl[] = "/tmp/yard-fuzz-spec-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    auto* dir = new std::string(tmpl);
    std::atexit([] { ::rmdir(DataRoot().c_str()); });
    return dir;
  }();
  return *root;
}

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_spec: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void CheckRoundTrips(const JobSpec& spec) {
  const std::string json = trainyard::spec::JobSpecToJson(spec);
  absl::StatusOr<JobSpec> back = trainyard::spec::ParseJobSpec(json);
  if (!back.ok()) {
    Fail("a valid spec printed as JSON does not parse back",
         json + "\n" + std::string(back.status().message()));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(*back, spec)) {
    Fail("a valid spec printed as JSON parses back different", json);
  }
  std::string wire;
  JobSpec decoded;
  if (!spec.SerializeToString(&wire) || !decoded.ParseFromString(wire)) {
    Fail("a valid spec does not survive protobuf encoding", json);
  }
}

// The input as an override of a small valid spec.
void CheckOverride(std::string_view text) {
  JobSpec base;
  base.set_name("fuzz");
  base.mutable_model()->mutable_mlp()->add_hidden(8);
  base.mutable_data()->mutable_mnist()->set_images("i.gz");
  base.mutable_data()->mutable_mnist()->set_labels("l.gz");
  base.mutable_batch()->set_micro_batch(4);
  base.set_steps(10);
  JobSpec spec = base;
  const absl::Status applied = trainyard::spec::ApplySpecOverride(text, spec);
  trainyard::fuzz::Report("override", applied);
  if (!applied.ok()) {
    if (!google::protobuf::util::MessageDifferencer::Equals(spec, base)) {
      Fail("a failed override changed the spec", std::string(text));
    }
    return;
  }
  trainyard::spec::ValidationOptions options;
  options.data_root = DataRoot();
  options.check_files_exist = false;
  const JobSpec full = trainyard::spec::WithDefaults(spec);
  if (trainyard::spec::ValidateJobSpec(full, options).ok()) {
    CheckRoundTrips(spec);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckOverride(text);
  (void)trainyard::spec::YamlToJson(text);
  (void)trainyard::spec::CheckJsonSyntax(text);
  absl::StatusOr<JobSpec> spec = trainyard::spec::ParseJobSpec(text);
  trainyard::fuzz::Report("parse", spec.status());
  if (!spec.ok()) return 0;
  const JobSpec full = trainyard::spec::WithDefaults(*spec);
  (void)trainyard::spec::CountParameters(*spec);
  trainyard::spec::ValidationOptions options;
  options.data_root = DataRoot();
  options.check_files_exist = false;
  const absl::Status valid = trainyard::spec::ValidateJobSpec(full, options);
  trainyard::fuzz::Report("validate", valid);
  if (!valid.ok()) return 0;
  CheckRoundTrips(*spec);
  CheckRoundTrips(full);
  for (auto device : {trainyard::engine::DeviceKind::kCpu,
                      trainyard::engine::DeviceKind::kCuda}) {
    const trainyard::engine::MemoryEstimate m =
        trainyard::engine::EstimateSpecMemory(full, device);
    if (m.total() <= 0) Fail("a valid spec needs no memory?", "");
  }
  return 0;
}
