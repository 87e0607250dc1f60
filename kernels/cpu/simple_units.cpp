// Parameter-free units on oneTBB: relu, dropout; flatten (kernels/flatten_unit.hpp) is shared with the other backend.
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/units.hpp"
#include "kernels/flatten_unit.hpp"

namespace hetflow::kernels::cpu {
namespace {

class relu_unit final : public unit {
public:
  explicit relu_unit(std::string name) : unit(std::move(name)) {}
  layer_kind kind() const noexcept override { return layer_kind::relu; }

  expected<shape> prepare(const shape& input) override {
    in_shape_ = input;
    y_.resize(input);
    dx_.resize(input);
    return input;
  }
  expected<tensor_view> forward(tensor_view x, mode) override {
    if (x.shape() != in_shape_) (void)prepare(x.shape());
    relu_forward(x.f32(), y_.f32(), x.numel());
    return y_.view();
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    if (dy.numel() != y_.numel())
      return make_error(errc::invalid_argument, "relu " + name() + ": gradient size mismatch");
    relu_backward(dy.f32(), y_.f32(), dx_.f32(), y_.numel());
    return dx_.view();
  }
  uint64_t activation_bytes() const override { return y_.byte_size() + dx_.byte_size(); }

private:
  shape in_shape_;
  tensor y_, dx_;
};

// Inverted dropout: training zeroes each element with probability p and
// scales survivors by 1/(1-p); eval is the identity (a view of the input).
// Masks come from a counter-based hash of (seed, forward count, element), so
// a run is reproducible from its seed whatever the thread count.
class dropout_unit final : public unit {
public:
  dropout_unit(std::string name, double p) : unit(std::move(name)), p_(float(p)) {}
  layer_kind kind() const noexcept override { return layer_kind::dropout; }

  expected<shape> prepare(const shape& input) override {
    in_shape_ = input;
    y_.resize(input);
    mask_.resize(input);
    dx_.resize(input);
    return input;
  }
  void set_seed(uint64_t seed) override {
    seed_ = seed;
    calls_ = 0;
  }
  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (x.shape() != in_shape_) (void)prepare(x.shape());
    last_train_ = m == mode::train && p_ > 0.0f;
    if (!last_train_) return x;
    const uint64_t key = splitmix64(seed_ ^ splitmix64(++calls_));
    const float keep = 1.0f - p_;
    const float scale = keep > 0.0f ? 1.0f / keep : 0.0f;
    const float* in = x.f32();
    float* out = y_.f32();
    float* mask = mask_.f32();
    parallel_elements(x.numel(), [=, p = p_](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float u = to_unit_float(splitmix64(key + uint64_t(i)));
        mask[i] = u >= p ? scale : 0.0f;
        out[i] = in[i] * mask[i];
      }
    });
    return y_.view();
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    if (!last_train_) return dy;
    if (dy.numel() != mask_.numel())
      return make_error(errc::invalid_argument, "dropout " + name() + ": gradient size mismatch");
    multiply(dy.f32(), mask_.f32(), dx_.f32(), dy.numel());
    return dx_.view();
  }
  uint64_t activation_bytes() const override { return y_.byte_size() + mask_.byte_size() + dx_.byte_size(); }

private:
  float p_;
  uint64_t seed_ = 0x5eed;
  uint64_t calls_ = 0;
  bool last_train_ = false;
  shape in_shape_;
  tensor y_, mask_, dx_;
};

}  // namespace

expected<built_unit> make_relu(cpu_context&, const layer_spec& s, const shape& in, rng&,
                               const std::string& prefix) {
  return built_unit{std::make_unique<relu_unit>(prefix + s.name), in};
}

expected<built_unit> make_dropout(cpu_context&, const layer_spec& s, const shape& in, rng&,
                                  const std::string& prefix) {
  if (!(s.p >= 0.0 && s.p < 1.0))
    return make_error(errc::invalid_argument, "dropout " + s.name + ": p must be in [0, 1)");
  return built_unit{std::make_unique<dropout_unit>(prefix + s.name, s.p), in};
}

expected<built_unit> make_flatten(cpu_context&, const layer_spec& s, const shape& in, rng&,
                                  const std::string& prefix) {
  return built_unit{std::make_unique<flatten_unit>(prefix + s.name), shape{in.numel()}};
}

}  // namespace hetflow::kernels::cpu
