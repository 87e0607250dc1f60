// flatten: (N, ...) -> (N, prod(...)) as a view of the input, on any device
// (no copy, no kernel): one unit for every backend.
#pragma once

#include <string>

#include "kernels/unit.hpp"

namespace hetflow::kernels {

class flatten_unit final : public unit {
public:
  explicit flatten_unit(std::string name) : unit(std::move(name)) {}
  layer_kind kind() const noexcept override { return layer_kind::flatten; }
  expected<shape> prepare(const shape& input) override {
    in_shape_ = input;
    return shape{input[0], input.inner_numel()};
  }
  expected<tensor_view> forward(tensor_view x, mode) override {
    in_shape_ = x.shape();
    return x.reshaped({x.shape()[0], x.shape().inner_numel()});
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    if (dy.numel() != in_shape_.numel())
      return make_error(errc::invalid_argument, "flatten " + name() + ": gradient size mismatch");
    return dy.reshaped(in_shape_);
  }
  uint64_t activation_bytes() const override { return 0; }

private:
  shape in_shape_;
};

}  // namespace hetflow::kernels
