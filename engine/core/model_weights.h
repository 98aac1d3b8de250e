// Starting a model from weights trained elsewhere: a Hugging Face folder
// (model.gpt.init_from) or another job's checkpoint (warm_start). Stateless
// functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_MODEL_WEIGHTS_H_
#define TRAINYARD_ENGINE_CORE_MODEL_WEIGHTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/core/model.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {

// Copies `tensors` into the model's parameters (fp32 masters; a bf16
// working copy follows at the first Forward), matched by name. Every
// parameter must be there with its shape; other tensors (a checkpoint's
// optimizer moments) are ignored. All are checked before any is copied, so
// a refusal leaves the model as it was: INVALID_ARGUMENT starting with
// `source` and naming the first parameter that is missing or differs.
absl::Status CopyWeightsInto(const std::vector<HostTensor>& tensors,
                             absl::string_view source, Model* model,
                             Backend* backend);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_MODEL_WEIGHTS_H_
