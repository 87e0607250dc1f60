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

// The argument checks every backend's softmax_cross_entropy makes (shapes,
// sizes, each label in [0, C)); inline so the CUDA module needs no link to
// this library.
inline status check_softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                          const mutable_tensor_view& grad) {
  if (logits.shape().rank() != 2 || logits.type() != dtype::f32)
    return make_error(errc::invalid_argument, "softmax_cross_entropy: logits must be f32 (N, C), got " +
                                                  logits.shape().to_string());
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (int64_t(labels.size()) != n)
    return make_error(errc::invalid_argument, "softmax_cross_entropy: " + std::to_string(labels.size()) +
                                                  " labels for " + std::to_string(n) + " rows");
  if (!grad.empty() && grad.numel() != n * c)
    return make_error(errc::invalid_argument, "softmax_cross_entropy: gradient buffer has the wrong size");
  for (int64_t i = 0; i < n; ++i)
    if (labels[std::size_t(i)] < 0 || labels[std::size_t(i)] >= c)
      return make_error(errc::invalid_argument, "softmax_cross_entropy: label " +
                                                    std::to_string(labels[std::size_t(i)]) + " of row " +
                                                    std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  return {};
}

}  // namespace hetflow::kernels
