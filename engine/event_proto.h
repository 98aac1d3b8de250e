// Engine TrainerEvents -> trainyard.v1.TrainerEvent messages, and their
// one-line protobuf JSON form (the --progress json wire format of
// yard-train). Pure functions; thread-safe.
#ifndef TRAINYARD_ENGINE_EVENT_PROTO_H_
#define TRAINYARD_ENGINE_EVENT_PROTO_H_

#include <string>

#include "engine/core/trainer_events.h"
#include "trainyard/v1/trainer.pb.h"

namespace trainyard::engine {

trainyard::v1::TrainerEvent ToProto(const TrainerEvent& event);

// MessageToJsonString with default options: one line, no trailing newline.
std::string ToJsonLine(const trainyard::v1::TrainerEvent& event);

// A short human-readable line for --progress text.
std::string ToTextLine(const TrainerEvent& event);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_EVENT_PROTO_H_
