// Tensor descriptions shared by models, optimizers and checkpoints: a name
// and a shape of fp32 elements. Memory lives in backend buffers (see
// backend.h); HostTensor is the host copy that checkpoints read and write.
// Plain values; no synchronization.
#ifndef TRAINYARD_ENGINE_CORE_TENSOR_H_
#define TRAINYARD_ENGINE_CORE_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::engine {

using Shape = std::vector<int64_t>;

// Product of the dimensions; 1 for a scalar (empty shape).
int64_t NumElements(const Shape& shape);

// "[784, 256]"
std::string ShapeString(const Shape& shape);

// An fp32 tensor in host memory. REQUIRES: data.size() == NumElements(shape).
struct HostTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_TENSOR_H_
