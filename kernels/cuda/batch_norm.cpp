// Batch normalisation over dim 1 of (N, C) or (N, C, H, W) on cuDNN
// (CUDNN_BATCHNORM_SPATIAL; (N, C) runs as (N, C, 1, 1)), with scale and
// shift, optional fused ReLU (applied and differentiated by our kernels),
// batch statistics in training and running statistics in eval.
//
// Running statistics follow PyTorch: cuDNN's exponentialAverageFactor is
// PyTorch's momentum and cuDNN updates the running variance with the
// unbiased batch variance, as PyTorch does. Backward in training mode is
// cuDNN's (through the batch statistics, from the saved mean and inverse
// std); in eval mode the statistics are constants, which cuDNN's backward
// does not offer, so our kernel does it (like the cpu backend's
// use_global_stats backward).
#include "kernels/cuda/cudnn_util.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

class batch_norm_unit final : public unit {
public:
  batch_norm_unit(context_impl& ctx, const layer_spec& s, int64_t channels, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), c_(channels), eps_(s.eps), momentum_(s.momentum), relu_(s.relu) {
    scale_.name = name() + ".weight";
    scale_.value = ctx.make_tensor({c_});
    scale_.grad = ctx.make_tensor({c_});
    shift_.name = name() + ".bias";
    shift_.value = ctx.make_tensor({c_});
    shift_.grad = ctx.make_tensor({c_});
    running_mean_.name = name() + ".running_mean";
    running_mean_.value = ctx.make_tensor({c_});
    running_var_.name = name() + ".running_var";
    running_var_.value = ctx.make_tensor({c_});
    save_mean_ = ctx.make_tensor({c_});
    save_inv_std_ = ctx.make_tensor({c_});
  }

  status init() {
    HF_RETURN_IF_ERROR(init_filled(ctx_, scale_.value, 1.0f));
    shift_.value.zero();
    scale_.grad.zero();
    shift_.grad.zero();
    running_mean_.value.zero();
    return init_filled(ctx_, running_var_.value, 1.0f);
  }

  layer_kind kind() const noexcept override { return layer_kind::batch_norm; }

  expected<shape> prepare(const shape& input) override {
    if ((input.rank() != 2 && input.rank() != 4) || input[1] != c_)
      return make_error(errc::invalid_argument, "batch_norm " + name() + ": expects (N, " + std::to_string(c_) +
                                                    "[, H, W]), got " + input.to_string());
    if (prepared_ && input == in_shape_) return input;
    prepared_ = false;
    HF_RETURN_IF_ERROR(in_unit(sized(ctx_, "batch_norm " + name(), [&]() -> status {
                                 HF_RETURN_IF_ERROR(ctx_.activate());
                                 HF_RETURN_IF_ERROR(make_nchw(x_desc_, input));
                                 HF_RETURN_IF_ERROR(make_nchw(c_desc_, shape{1, c_, 1, 1}));
                                 ensure(ctx_, y_, input);
                                 ensure(ctx_, dx_, input);
                                 if (relu_) ensure(ctx_, dpre_, input);
                                 return {};
                               }),
                               "batch_norm", name()));
    in_shape_ = input;
    prepared_ = true;
    return input;
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    HF_RETURN_IF_ERROR(in_unit(do_forward(x, m), "batch_norm", name()));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    auto r = do_backward(dy, need_input_grad);
    if (!r) return in_unit(r.error(), "batch_norm", name());
    return r;
  }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&scale_);
    out.push_back(&shift_);
  }
  void state(std::vector<state_tensor*>& out) override {
    out.push_back(&running_mean_);
    out.push_back(&running_var_);
  }
  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0);
  }

private:
  int64_t spatial() const { return in_shape_.rank() == 4 ? in_shape_[2] * in_shape_[3] : 1; }

  status do_forward(tensor_view x, mode m) {
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "input"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    x_ = x;
    last_mode_ = m;
    const float one = 1.0f, zero = 0.0f;
    if (m == mode::train) {
      HF_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_.get(), x.raw(), x_desc_.get(), y_.f32(),
          c_desc_.get(), scale_.value.f32(), shift_.value.f32(), momentum_, running_mean_.value.f32(),
          running_var_.value.f32(), eps_, save_mean_.f32(), save_inv_std_.f32()));
    } else {
      HF_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_.get(), x.raw(), x_desc_.get(), y_.f32(),
          c_desc_.get(), scale_.value.f32(), shift_.value.f32(), running_mean_.value.f32(),
          running_var_.value.f32(), eps_));
    }
    if (relu_) HF_CUDA_CHECK(ops::relu_forward(y_.f32(), y_.f32(), y_.numel(), ctx_.stream()));
    return {};
  }

  expected<tensor_view> do_backward(tensor_view dy, bool need_input_grad) {
    HF_RETURN_IF_ERROR(ctx_.activate());
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu(ctx_, "batch_norm", name(), dy, y_, relu_, dpre_));
    if (last_mode_ == mode::train) {
      // cuDNN computes dx with the parameter gradients; no weights-only variant.
      const float one = 1.0f, zero = 0.0f;
      HF_CUDNN_CHECK(cudnnBatchNormalizationBackward(
          ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_desc_.get(), x_.raw(), x_desc_.get(),
          g.raw(), x_desc_.get(), dx_.f32(), c_desc_.get(), scale_.value.f32(), scale_.grad.f32(),
          shift_.grad.f32(), eps_, save_mean_.f32(), save_inv_std_.f32()));
    } else {
      HF_CUDA_CHECK(ops::batch_norm_frozen_backward(
          x_.f32(), g.f32(), running_mean_.value.f32(), running_var_.value.f32(), scale_.value.f32(), float(eps_),
          in_shape_[0], c_, spatial(), need_input_grad ? dx_.f32() : nullptr, scale_.grad.f32(), shift_.grad.f32(),
          ctx_.stream()));
    }
    if (!need_input_grad) return tensor_view{};
    return dx_.view();
  }

  context_impl& ctx_;
  int64_t c_;
  double eps_, momentum_;
  bool relu_;
  parameter scale_, shift_;
  state_tensor running_mean_, running_var_;
  tensor save_mean_, save_inv_std_;  // of the last training forward
  bool prepared_ = false;
  mode last_mode_ = mode::train;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  tensor_desc x_desc_, c_desc_;
};

}  // namespace

expected<built_unit> make_batch_norm(context_impl& ctx, const layer_spec& s, const shape& in, rng&,
                                     const std::string& prefix) {
  if (in.rank() != 1 && in.rank() != 3)
    return make_error(errc::invalid_argument, "batch_norm " + s.name + ": input must be (C) or (C, H, W), got " +
                                                  in.to_string());
  if (!(s.eps > 0.0) || !(s.momentum >= 0.0 && s.momentum <= 1.0))
    return make_error(errc::invalid_argument, "batch_norm " + s.name + ": needs eps > 0 and momentum in [0, 1]");
  auto u = std::make_unique<batch_norm_unit>(ctx, s, in[0], prefix);
  HF_RETURN_IF_ERROR(u->init());
  return built_unit{std::move(u), in};
}

}  // namespace hetflow::kernels::cuda
