// conv2d on oneDNN: NCHW activations, square kernel, stride, symmetric zero
// padding, optional bias and fused ReLU.
//
// Weights live in PyTorch's (out, in, kh, kw) layout. Primitives are created
// with `any` weight layouts so oneDNN picks its fastest (blocked) one; the
// canonical weights are reordered into it when they changed (parameter
// version), and the blocked weight gradient is reordered back after each
// backward.
#include <cmath>
#include <optional>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

// A copy of a tensor in a layout a primitive wants, kept up to date by reorder.
struct layout_copy {
  bool needed = false;
  dnnl::memory mem;      // owns its buffer when needed
  dnnl::reorder reorder; // canonical -> mem, or mem -> canonical
};

class conv2d_unit final : public unit {
public:
  conv2d_unit(cpu_context& ctx, const layer_spec& s, int64_t in_c, rng& init, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), in_c_(in_c), out_c_(s.out), k_(s.kernel), stride_(s.stride),
        pad_(s.padding), has_bias_(s.bias), relu_(s.relu) {
    float bound = 1.0f / std::sqrt(float(in_c_ * k_ * k_));
    weight_.name = name() + ".weight";
    weight_.value = tensor::empty({out_c_, in_c_, k_, k_});
    weight_.grad = tensor::zeros({out_c_, in_c_, k_, k_});
    init_uniform(weight_.value, bound, init);
    if (has_bias_) {
      bias_.name = name() + ".bias";
      bias_.value = tensor::empty({out_c_});
      bias_.grad = tensor::zeros({out_c_});
      init_uniform(bias_.value, bound, init);
    }
  }

  layer_kind kind() const noexcept override { return layer_kind::conv2d; }

  static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

  expected<shape> prepare(const shape& input) override {
    if (input.rank() != 4 || input[1] != in_c_)
      return make_error(errc::invalid_argument, "conv2d " + name() + ": expects (N, " +
                                                    std::to_string(in_c_) + ", H, W) input, got " +
                                                    input.to_string());
    int64_t oh = out_size(input[2], k_, stride_, pad_);
    int64_t ow = out_size(input[3], k_, stride_, pad_);
    if (oh <= 0 || ow <= 0)
      return make_error(errc::invalid_argument, "conv2d " + name() + ": input " + input.to_string() +
                                                    " is smaller than the " + std::to_string(k_) +
                                                    "x" + std::to_string(k_) + " kernel");
    shape out_shape{input[0], out_c_, oh, ow};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    in_shape_ = input;
    auto src_md = plain_md(input);
    auto dst_md = plain_md(out_shape);
    auto w_plain = plain_md(weight_.value.shape());
    auto w_any = any_md(weight_.value.shape());
    auto b_md = has_bias_ ? plain_md({out_c_}) : dnnl::memory::desc();
    dnnl::memory::dims strides{stride_, stride_}, pads{pad_, pad_};
    const auto alg = dnnl::algorithm::convolution_direct;
    HF_DNNL_TRY({
      dnnl::primitive_attr attr;
      if (relu_) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(po);
      }
      auto fwd_d = has_bias_ ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg,
                                                               src_md, w_any, b_md, dst_md, strides,
                                                               pads, pads)
                             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg,
                                                               src_md, w_any, dst_md, strides, pads,
                                                               pads);
      dnnl::convolution_forward::primitive_desc fwd_pd(fwd_d, attr, ctx_.engine());
      fwd_ = dnnl::convolution_forward(fwd_pd);
      dnnl::convolution_backward_data::primitive_desc bd_pd(
          dnnl::convolution_backward_data::desc(alg, src_md, w_any, dst_md, strides, pads, pads),
          ctx_.engine(), fwd_pd);
      bwd_data_ = dnnl::convolution_backward_data(bd_pd);
      auto bw_d = has_bias_ ? dnnl::convolution_backward_weights::desc(alg, src_md, w_any, b_md, dst_md,
                                                                       strides, pads, pads)
                            : dnnl::convolution_backward_weights::desc(alg, src_md, w_any, dst_md,
                                                                       strides, pads, pads);
      dnnl::convolution_backward_weights::primitive_desc bw_pd(bw_d, ctx_.engine(), fwd_pd);
      bwd_weights_ = dnnl::convolution_backward_weights(bw_pd);

      w_plain_m_ = unbound_memory(w_plain, ctx_);
      dw_plain_m_ = unbound_memory(w_plain, ctx_);
      auto layout_for = [&](const dnnl::memory::desc& want, bool to_want) {
        layout_copy c;
        c.needed = want != w_plain;
        if (c.needed) {
          c.mem = dnnl::memory(want, ctx_.engine());  // oneDNN-owned buffer
          c.reorder = to_want ? dnnl::reorder(w_plain_m_, c.mem) : dnnl::reorder(c.mem, dw_plain_m_);
        }
        return c;
      };
      w_fwd_ = layout_for(fwd_pd.weights_desc(), true);
      bwd_data_same_weights_ = bd_pd.weights_desc() == fwd_pd.weights_desc();
      w_bwd_ = bwd_data_same_weights_ ? layout_copy{} : layout_for(bd_pd.weights_desc(), true);
      dw_ = layout_for(bw_pd.diff_weights_desc(), false);
      weights_version_.reset();

      src_m_ = unbound_memory(src_md, ctx_);
      dst_m_ = unbound_memory(dst_md, ctx_);
      ddst_m_ = unbound_memory(dst_md, ctx_);
      dsrc_m_ = unbound_memory(src_md, ctx_);
      if (has_bias_) {
        b_m_ = unbound_memory(b_md, ctx_);
        db_m_ = unbound_memory(b_md, ctx_);
      }
    });
    y_.resize(out_shape);
    dx_.resize(input);
    if (relu_) dpre_.resize(out_shape);
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    x_ = x;
    attach(w_plain_m_, weight_.value.bytes());
    if (w_fwd_.needed && weights_version_ != weight_.version) {
      HF_RETURN_IF_ERROR(reorder_now(ctx_, w_fwd_.reorder, w_plain_m_, w_fwd_.mem, name() + " weight reorder"));
      weights_version_ = weight_.version;
    }
    attach(src_m_, x.raw());
    attach(dst_m_, y_.bytes());
    const dnnl::memory& w = w_fwd_.needed ? w_fwd_.mem : w_plain_m_;
    if (has_bias_) {
      attach(b_m_, bias_.value.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_WEIGHTS, w},
                                  {DNNL_ARG_BIAS, b_m_}, {DNNL_ARG_DST, dst_m_}},
                                 name() + " forward"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst_m_}},
                                 name() + " forward"));
    }
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (dy.numel() != y_.numel())
      return make_error(errc::invalid_argument, "conv2d " + name() + ": gradient " +
                                                    dy.shape().to_string() + " does not match output " +
                                                    y_.shape().to_string());
    const void* dpre = dy.raw();
    if (relu_) {
      relu_backward(dy.f32(), y_.f32(), dpre_.f32(), y_.numel());
      dpre = dpre_.bytes();
    }
    attach(ddst_m_, dpre);
    attach(src_m_, x_.raw());
    attach(dw_plain_m_, weight_.grad.bytes());
    const dnnl::memory& dw = dw_.needed ? dw_.mem : dw_plain_m_;
    if (has_bias_) {
      attach(db_m_, bias_.grad.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DIFF_DST, ddst_m_},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db_m_}},
                                 name() + " backward weights"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DIFF_DST, ddst_m_},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw}},
                                 name() + " backward weights"));
    }
    if (dw_.needed)
      HF_RETURN_IF_ERROR(reorder_now(ctx_, dw_.reorder, dw_.mem, dw_plain_m_, name() + " gradient reorder"));
    if (!need_input_grad) return tensor_view{};

    attach(w_plain_m_, weight_.value.bytes());
    const dnnl::memory* w = &w_plain_m_;
    if (bwd_data_same_weights_) {
      if (w_fwd_.needed) w = &w_fwd_.mem;  // reordered by this batch's forward
    } else if (w_bwd_.needed) {
      HF_RETURN_IF_ERROR(reorder_now(ctx_, w_bwd_.reorder, w_plain_m_, w_bwd_.mem, name() + " weight reorder"));
      w = &w_bwd_.mem;
    }
    attach(dsrc_m_, dx_.bytes());
    HF_RETURN_IF_ERROR(execute(ctx_, bwd_data_,
                               {{DNNL_ARG_DIFF_DST, ddst_m_}, {DNNL_ARG_WEIGHTS, *w},
                                {DNNL_ARG_DIFF_SRC, dsrc_m_}},
                               name() + " backward data"));
    return dx_.view();
  }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0);
  }

private:
  cpu_context& ctx_;
  int64_t in_c_, out_c_, k_, stride_, pad_;
  bool has_bias_, relu_;
  parameter weight_, bias_;
  bool prepared_ = false;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  dnnl::convolution_forward fwd_;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_weights_;
  dnnl::memory src_m_, dst_m_, ddst_m_, dsrc_m_, b_m_, db_m_, w_plain_m_, dw_plain_m_;
  layout_copy w_fwd_, w_bwd_, dw_;
  bool bwd_data_same_weights_ = true;
  std::optional<uint64_t> weights_version_;
};

}  // namespace

expected<built_unit> make_conv2d(cpu_context& ctx, const layer_spec& s, const shape& in, rng& init,
                                 const std::string& prefix) {
  if (in.rank() != 3)
    return make_error(errc::invalid_argument, "conv2d " + s.name + ": input must be (C, H, W), got " +
                                                  in.to_string());
  if (s.out <= 0 || s.kernel <= 0 || s.stride <= 0 || s.padding < 0)
    return make_error(errc::invalid_argument, "conv2d " + s.name +
                                                  ": needs out > 0, kernel > 0, stride > 0, padding >= 0");
  int64_t oh = (in[1] + 2 * s.padding - s.kernel) / s.stride + 1;
  int64_t ow = (in[2] + 2 * s.padding - s.kernel) / s.stride + 1;
  if (oh <= 0 || ow <= 0)
    return make_error(errc::invalid_argument, "conv2d " + s.name + ": input " + in.to_string() +
                                                  " is smaller than its kernel");
  return built_unit{std::make_unique<conv2d_unit>(ctx, s, in[0], init, prefix), shape{s.out, oh, ow}};
}

}  // namespace hetflow::kernels::cpu
