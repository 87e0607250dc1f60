// The first step of backward for units with a fused ReLU (linear, conv2d,
// batch norm, residual) and the gradient check every unit with an output
// buffer shares.
#pragma once

#include <string>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/tensor.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels::cpu {

// dy must have as many elements as the unit's output y.
inline status check_gradient(const char* kind, const std::string& name, tensor_view dy,
                             const tensor& y) {
  if (dy.numel() == y.numel()) return {};
  return make_error(errc::invalid_argument, std::string(kind) + " " + name + ": gradient " +
                                                dy.shape().to_string() + " does not match output " +
                                                y.shape().to_string());
}

// The gradient before the fused ReLU: dy itself without one, else dy masked
// by y > 0, written into `scratch` (sized like y).
inline expected<tensor_view> gradient_before_relu(const char* kind, const std::string& name,
                                                  tensor_view dy, const tensor& y, bool relu,
                                                  tensor& scratch) {
  HF_RETURN_IF_ERROR(check_gradient(kind, name, dy, y));
  if (!relu) return dy;
  relu_backward(dy.f32(), y.f32(), scratch.f32(), y.numel());
  return tensor_view(scratch.view());
}

}  // namespace hetflow::kernels::cpu
