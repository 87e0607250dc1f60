// Softmax cross-entropy over class logits, the classification loss of every
// zoo model (dlrm uses 2 classes: click / no click).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/tensor.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

struct loss_result {
  double loss = 0.0;    // mean over the batch
  int64_t correct = 0;  // rows whose argmax equals the label
};

// logits (N, C), labels N values in [0, C). When `grad` is not empty it
// receives dL/dlogits = (softmax - onehot) / N, shape (N, C).
// errc::invalid_argument for a label out of range or mismatched sizes.
expected<loss_result> softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                            mutable_tensor_view grad = {});

}  // namespace hetflow::kernels
