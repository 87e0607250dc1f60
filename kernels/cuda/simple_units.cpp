// Parameter-free units on our kernels: relu, dropout; flatten (kernels/flatten_unit.hpp) is shared with the other backend.
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"
#include "kernels/flatten_unit.hpp"

namespace hetflow::kernels::cuda {
namespace {

class relu_unit final : public unit {
public:
  relu_unit(context_impl& ctx, std::string name) : unit(std::move(name)), ctx_(ctx) {}
  layer_kind kind() const noexcept override { return layer_kind::relu; }

  expected<shape> prepare(const shape& input) override {
    HF_RETURN_IF_ERROR(sized(ctx_, "relu " + name(), [&]() -> status {
      ensure(ctx_, y_, input);
      ensure(ctx_, dx_, input);
      return {};
    }));
    in_shape_ = input;
    return input;
  }
  expected<tensor_view> forward(tensor_view x, mode) override {
    if (x.shape() != in_shape_ || y_.memory() == nullptr) HF_RETURN_IF_ERROR(prepare(x.shape()).error());
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "relu " + name()));
    HF_RETURN_IF_ERROR(ctx_.activate());
    HF_CUDA_CHECK(ops::relu_forward(x.f32(), y_.f32(), x.numel(), ctx_.stream()));
    return y_.view();
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    if (dy.numel() != y_.numel())
      return make_error(errc::invalid_argument, "relu " + name() + ": gradient size mismatch");
    HF_RETURN_IF_ERROR(ctx_.check_here(dy, "relu " + name()));
    HF_CUDA_CHECK(ops::relu_backward(dy.f32(), y_.f32(), dx_.f32(), y_.numel(), ctx_.stream()));
    return dx_.view();
  }
  uint64_t activation_bytes() const override { return y_.byte_size() + dx_.byte_size(); }

private:
  context_impl& ctx_;
  shape in_shape_;
  tensor y_, dx_;
};

// Inverted dropout with the cpu backend's masks: the same (seed, forward
// count, element) hash, so cpu and cuda drop the same elements.
class dropout_unit final : public unit {
public:
  dropout_unit(context_impl& ctx, std::string name, double p) : unit(std::move(name)), ctx_(ctx), p_(float(p)) {}
  layer_kind kind() const noexcept override { return layer_kind::dropout; }

  expected<shape> prepare(const shape& input) override {
    HF_RETURN_IF_ERROR(sized(ctx_, "dropout " + name(), [&]() -> status {
      ensure(ctx_, y_, input);
      ensure(ctx_, mask_, input);
      ensure(ctx_, dx_, input);
      return {};
    }));
    in_shape_ = input;
    return input;
  }
  void set_seed(uint64_t seed) override {
    seed_ = seed;
    calls_ = 0;
  }
  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (x.shape() != in_shape_ || y_.memory() == nullptr) HF_RETURN_IF_ERROR(prepare(x.shape()).error());
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "dropout " + name()));
    last_train_ = m == mode::train && p_ > 0.0f;
    if (!last_train_) return x;
    HF_RETURN_IF_ERROR(ctx_.activate());
    const uint64_t key = splitmix64(seed_ ^ splitmix64(++calls_));
    const float keep = 1.0f - p_;
    const float scale = keep > 0.0f ? 1.0f / keep : 0.0f;
    HF_CUDA_CHECK(ops::dropout_forward(x.f32(), y_.f32(), mask_.f32(), x.numel(), key, p_, scale, ctx_.stream()));
    return y_.view();
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    if (!last_train_) return dy;
    if (dy.numel() != mask_.numel())
      return make_error(errc::invalid_argument, "dropout " + name() + ": gradient size mismatch");
    HF_RETURN_IF_ERROR(ctx_.check_here(dy, "dropout " + name()));
    HF_CUDA_CHECK(ops::multiply(dy.f32(), mask_.f32(), dx_.f32(), dy.numel(), ctx_.stream()));
    return dx_.view();
  }
  uint64_t activation_bytes() const override { return y_.byte_size() + mask_.byte_size() + dx_.byte_size(); }

private:
  context_impl& ctx_;
  float p_;
  uint64_t seed_ = 0x5eed;
  uint64_t calls_ = 0;
  bool last_train_ = false;
  shape in_shape_;
  tensor y_, mask_, dx_;
};

}  // namespace

expected<built_unit> make_relu(context_impl& ctx, const layer_spec& s, const shape& in, rng&,
                               const std::string& prefix) {
  return built_unit{std::make_unique<relu_unit>(ctx, prefix + s.name), in};
}

expected<built_unit> make_dropout(context_impl& ctx, const layer_spec& s, const shape& in, rng&,
                                  const std::string& prefix) {
  if (!(s.p >= 0.0 && s.p < 1.0))
    return make_error(errc::invalid_argument, "dropout " + s.name + ": p must be in [0, 1)");
  return built_unit{std::make_unique<dropout_unit>(ctx, prefix + s.name, s.p), in};
}

expected<built_unit> make_flatten(context_impl&, const layer_spec& s, const shape& in, rng&,
                                  const std::string& prefix) {
  return built_unit{std::make_unique<flatten_unit>(prefix + s.name), shape{in.numel()}};
}

}  // namespace hetflow::kernels::cuda
