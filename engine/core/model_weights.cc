// Copying trained weights into a model. See model_weights.h.
#include "engine/core/model_weights.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace trainyard::engine {

absl::Status CopyWeightsInto(const std::vector<HostTensor>& tensors,
                             absl::string_view source, Model* model,
                             Backend* backend) {
  std::map<std::string, const HostTensor*, std::less<>> by_name;
  for (const HostTensor& t : tensors) by_name[t.name] = &t;
  for (const Parameter& p : model->parameters()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": has no weights for the ", model->kind(),
                       " parameter ", p.name));
    }
    if (it->second->shape != p.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": its ", p.name, " has shape ",
                       ShapeString(it->second->shape), ", this ", model->kind(),
                       "'s is ", ShapeString(p.shape)));
    }
  }
  for (const Parameter& p : model->parameters()) {
    backend->CopyToDevice(p.value, by_name.find(p.name)->second->data.data(),
                          p.size() * 4);
  }
  return backend->Synchronize();
}

}  // namespace trainyard::engine
