// max, average (padding counted, PyTorch's count_include_pad=True) and
// global-average pooling on cuDNN, NCHW f32. Backward reads the forward's
// input and output (lockstep contract), as cuDNN's max pooling needs them.
#include "kernels/cuda/cudnn_util.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

class pool_unit final : public unit {
public:
  pool_unit(context_impl& ctx, const layer_spec& s, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), kind_(s.kind), k_(s.kernel), stride_(s.stride), pad_(s.padding) {}

  layer_kind kind() const noexcept override { return kind_; }

  expected<shape> prepare(const shape& input) override {
    const std::string who = std::string(to_string(kind_)) + " " + name();
    if (input.rank() != 4)
      return make_error(errc::invalid_argument, who + ": expects (N, C, H, W), got " + input.to_string());
    int64_t kh = k_, kw = k_, sh = stride_, sw = stride_, p = pad_;
    if (kind_ == layer_kind::global_avg_pool) {
      kh = sh = input[2];
      kw = sw = input[3];
      p = 0;
    }
    const int64_t oh = (input[2] + 2 * p - kh) / sh + 1, ow = (input[3] + 2 * p - kw) / sw + 1;
    if (oh <= 0 || ow <= 0)
      return make_error(errc::invalid_argument, who + ": input " + input.to_string() + " is smaller than the window");
    shape out_shape{input[0], input[1], oh, ow};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    HF_RETURN_IF_ERROR(in_unit(sized(ctx_, who, [&]() -> status {
                                 HF_RETURN_IF_ERROR(ctx_.activate());
                                 HF_RETURN_IF_ERROR(make_nchw(x_desc_, input));
                                 HF_RETURN_IF_ERROR(make_nchw(y_desc_, out_shape));
                                 HF_CUDNN_CHECK(cudnnCreatePoolingDescriptor(pool_.out()));
                                 // Deterministic max: ties and overlaps route the
                                 // gradient the same way on every run.
                                 const cudnnPoolingMode_t m = kind_ == layer_kind::max_pool
                                                                  ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                                  : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
                                 HF_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_.get(), m, CUDNN_NOT_PROPAGATE_NAN,
                                                                            int(kh), int(kw), int(p), int(p),
                                                                            int(sh), int(sw)));
                                 ensure(ctx_, y_, out_shape);
                                 ensure(ctx_, dx_, input);
                                 return {};
                               }),
                               to_string(kind_), name()));
    in_shape_ = input;
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    HF_RETURN_IF_ERROR(in_unit(do_forward(x), to_string(kind_), name()));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    HF_RETURN_IF_ERROR(in_unit(do_backward(dy), to_string(kind_), name()));
    return dx_.view();
  }

  uint64_t activation_bytes() const override { return y_.byte_size() + dx_.byte_size(); }

private:
  status do_forward(tensor_view x) {
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "input"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    x_ = x;
    const float one = 1.0f, zero = 0.0f;
    HF_CUDNN_CHECK(cudnnPoolingForward(ctx_.cudnn(), pool_.get(), &one, x_desc_.get(), x.raw(), &zero,
                                       y_desc_.get(), y_.f32()));
    return {};
  }

  status do_backward(tensor_view dy) {
    HF_RETURN_IF_ERROR(check_gradient("pool", name(), dy, y_));
    HF_RETURN_IF_ERROR(ctx_.activate());
    HF_RETURN_IF_ERROR(ctx_.check_here(dy, "gradient"));
    const float one = 1.0f, zero = 0.0f;
    HF_CUDNN_CHECK(cudnnPoolingBackward(ctx_.cudnn(), pool_.get(), &one, y_desc_.get(), y_.f32(), y_desc_.get(),
                                        dy.raw(), x_desc_.get(), x_.raw(), &zero, x_desc_.get(), dx_.f32()));
    return {};
  }

  context_impl& ctx_;
  layer_kind kind_;
  int64_t k_, stride_, pad_;
  bool prepared_ = false;
  shape in_shape_;
  tensor y_, dx_;
  tensor_view x_;
  tensor_desc x_desc_, y_desc_;
  pool_desc pool_;
};

}  // namespace

expected<built_unit> make_pool(context_impl& ctx, const layer_spec& s, const shape& in, rng&,
                               const std::string& prefix) {
  if (in.rank() != 3)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name +
                                                  ": input must be (C, H, W), got " + in.to_string());
  if (s.kind == layer_kind::global_avg_pool)
    return built_unit{std::make_unique<pool_unit>(ctx, s, prefix), shape{in[0], 1, 1}};
  if (s.kernel <= 0 || s.stride <= 0 || s.padding < 0 || 2 * s.padding > s.kernel)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name +
                                                  ": needs kernel > 0, stride > 0, 0 <= padding <= kernel/2");
  const int64_t oh = (in[1] + 2 * s.padding - s.kernel) / s.stride + 1;
  const int64_t ow = (in[2] + 2 * s.padding - s.kernel) / s.stride + 1;
  if (oh <= 0 || ow <= 0)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name + ": input " +
                                                  in.to_string() + " is smaller than its window");
  return built_unit{std::make_unique<pool_unit>(ctx, s, prefix), shape{in[0], oh, ow}};
}

}  // namespace hetflow::kernels::cuda
