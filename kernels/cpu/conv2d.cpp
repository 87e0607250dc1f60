// conv2d on oneDNN: NCHW activations, square kernel, stride, symmetric zero
// padding, optional bias and fused ReLU.
//
// Primitives are created with `any` layouts for activations and weights so
// oneDNN picks its fastest (blocked, jit) kernels; with plain NCHW it falls
// back to im2col + gemm whose bias/ReLU epilogue is a scalar loop, 2-3x
// slower on LeNet's layers. Units exchange plain NCHW (except inside a
// residual block, below) and weights stay in PyTorch's (out, in, kh, kw)
// layout: staged_memory reorders at the edges (weights only when their
// version changed).
//
// Inside a residual body the activations and gradients flow between this unit
// and a batch norm in the blocked layout (inner_link, units.hpp).
// TODO(perf): the same between top-level units (conv -> pool -> conv).
#include <cmath>
#include <optional>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

class conv2d_unit final : public unit, public linkable {
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
    link_ = {};
    in_shape_ = input;
    const auto src_plain = plain_md(input);
    const auto dst_plain = plain_md(out_shape);
    const auto w_plain = plain_md(weight_.value.shape());
    const auto src_any = any_md(input), dst_any = any_md(out_shape), w_any = any_md(weight_.value.shape());
    const auto b_md = has_bias_ ? plain_md({out_c_}) : dnnl::memory::desc();
    const dnnl::memory::dims strides{stride_, stride_}, pads{pad_, pad_};
    const auto alg = dnnl::algorithm::convolution_direct;
    using fwd_t = dnnl::convolution_forward;
    using bwd_w_t = dnnl::convolution_backward_weights;
    using bwd_d_t = dnnl::convolution_backward_data;
    HF_DNNL_TRY({
      dnnl::primitive_attr attr;
      if (relu_) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(po);
      }
      auto fwd_d = has_bias_ ? fwd_t::desc(dnnl::prop_kind::forward_training, alg, src_any, w_any, b_md, dst_any,
                                           strides, pads, pads)
                             : fwd_t::desc(dnnl::prop_kind::forward_training, alg, src_any, w_any, dst_any,
                                           strides, pads, pads);
      fwd_t::primitive_desc fwd_pd(fwd_d, attr, ctx_.engine());
      fwd_ = fwd_t(fwd_pd);
      auto bw_d = has_bias_ ? bwd_w_t::desc(alg, src_any, w_any, b_md, dst_any, strides, pads, pads)
                            : bwd_w_t::desc(alg, src_any, w_any, dst_any, strides, pads, pads);
      bwd_w_t::primitive_desc bw_pd(bw_d, ctx_.engine(), fwd_pd);
      bwd_weights_ = bwd_w_t(bw_pd);
      bwd_d_t::primitive_desc bd_pd(bwd_d_t::desc(alg, src_any, w_any, dst_any, strides, pads, pads),
                                    ctx_.engine(), fwd_pd);
      bwd_data_ = bwd_d_t(bd_pd);

      src_.init(ctx_, src_plain, fwd_pd.src_desc());
      src_bw_same_ = bw_pd.src_desc() == fwd_pd.src_desc();
      if (!src_bw_same_) src_bw_.init(ctx_, src_plain, bw_pd.src_desc());
      dst_.init(ctx_, dst_plain, fwd_pd.dst_desc());
      ddst_bw_.init(ctx_, dst_plain, bw_pd.diff_dst_desc());
      ddst_bd_same_ = bd_pd.diff_dst_desc() == bw_pd.diff_dst_desc();
      if (!ddst_bd_same_) ddst_bd_.init(ctx_, dst_plain, bd_pd.diff_dst_desc());
      dsrc_.init(ctx_, src_plain, bd_pd.diff_src_desc());
      w_fwd_.init(ctx_, w_plain, fwd_pd.weights_desc());
      w_bd_same_ = bd_pd.weights_desc() == fwd_pd.weights_desc();
      if (!w_bd_same_) w_bd_.init(ctx_, w_plain, bd_pd.weights_desc());
      dw_.init(ctx_, w_plain, bw_pd.diff_weights_desc());
      weights_version_.reset();
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
    if (weights_version_ != weight_.version) {
      w_fwd_.attach(weight_.value.bytes());
      HF_RETURN_IF_ERROR(w_fwd_.to_inner(ctx_, name(), "weight reorder"));
      weights_version_ = weight_.version;
    }
    if (!link_.input) {
      src_.attach(x.raw());
      HF_RETURN_IF_ERROR(src_.to_inner(ctx_, name(), "input reorder"));
    }
    const dnnl::memory& src = link_.input ? link_.input->arg() : src_.arg();
    dst_.attach(y_.bytes());
    if (has_bias_) {
      attach(b_m_, bias_.value.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_fwd_.arg()},
                                  {DNNL_ARG_BIAS, b_m_}, {DNNL_ARG_DST, dst_.arg()}},
                                 name(), "forward"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_fwd_.arg()},
                                  {DNNL_ARG_DST, dst_.arg()}},
                                 name(), "forward"));
    }
    if (!link_.output_inner) HF_RETURN_IF_ERROR(dst_.to_plain(ctx_, name(), "output reorder"));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    HF_RETURN_IF_ERROR(check_gradient("conv2d", name(), dy, y_));
    const void* dpre = nullptr;
    if (!link_.output_grad) {  // linked: no ReLU (link_output), the gradient is staged already
      HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu("conv2d", name(), dy, y_, relu_, dpre_));
      dpre = g.raw();
      ddst_bw_.attach(dpre);
      HF_RETURN_IF_ERROR(ddst_bw_.to_inner(ctx_, name(), "gradient reorder"));
    }
    const dnnl::memory& ddst_m = link_.output_grad ? link_.output_grad->arg() : ddst_bw_.arg();
    // The forward's staged input is still valid (lockstep contract).
    const staged_memory* src = link_.input ? link_.input : &src_;  // linked: src_bw_same_ (link_input)
    if (!link_.input) {
      if (!src_bw_same_) {
        src_bw_.attach(x_.raw());
        HF_RETURN_IF_ERROR(src_bw_.to_inner(ctx_, name(), "input reorder"));
        src = &src_bw_;
      } else if (!src_.staged()) {
        src_.attach(x_.raw());
      }
    }
    dw_.attach(weight_.grad.bytes());
    if (has_bias_) {
      attach(db_m_, bias_.grad.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src->arg()}, {DNNL_ARG_DIFF_DST, ddst_m},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw_.arg()}, {DNNL_ARG_DIFF_BIAS, db_m_}},
                                 name(), "backward weights"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src->arg()}, {DNNL_ARG_DIFF_DST, ddst_m},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw_.arg()}},
                                 name(), "backward weights"));
    }
    HF_RETURN_IF_ERROR(dw_.to_plain(ctx_, name(), "weight gradient reorder"));
    if (!need_input_grad) return tensor_view{};

    const dnnl::memory* ddst = &ddst_m;
    if (!ddst_bd_same_) {  // never linked (link_output)
      ddst_bd_.attach(dpre);
      HF_RETURN_IF_ERROR(ddst_bd_.to_inner(ctx_, name(), "gradient reorder"));
      ddst = &ddst_bd_.arg();
    }
    const staged_memory* w = &w_fwd_;  // reordered by this batch's forward
    if (!w_bd_same_) {
      w_bd_.attach(weight_.value.bytes());
      HF_RETURN_IF_ERROR(w_bd_.to_inner(ctx_, name(), "weight reorder"));
      w = &w_bd_;
    } else if (!w_fwd_.staged()) {
      w_fwd_.attach(weight_.value.bytes());
    }
    dsrc_.attach(dx_.bytes());
    HF_RETURN_IF_ERROR(execute(ctx_, bwd_data_,
                               {{DNNL_ARG_DIFF_DST, *ddst}, {DNNL_ARG_WEIGHTS, w->arg()},
                                {DNNL_ARG_DIFF_SRC, dsrc_.arg()}},
                               name(), "backward data"));
    if (!link_.input_grad_inner) HF_RETURN_IF_ERROR(dsrc_.to_plain(ctx_, name(), "input gradient reorder"));
    return dx_.view();
  }

  // linkable: an output with a fused ReLU is not handed on (its backward masks
  // the plain gradient by the plain output), nor one whose two backward
  // primitives want the gradient in different layouts; an input whose weight
  // gradient wants another layout than the forward's is not taken.
  const staged_memory* link_output() const override { return relu_ || !ddst_bd_same_ ? nullptr : &dst_; }
  const staged_memory* link_output_grad() const override { return &ddst_bw_; }
  const staged_memory* link_input() const override { return src_bw_same_ ? &src_ : nullptr; }
  const staged_memory* link_input_grad() const override { return &dsrc_; }
  void set_link(const inner_link& l) override { link_ = l; }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0) + src_.inner_bytes() +
           dst_.inner_bytes() + ddst_bw_.inner_bytes() + dsrc_.inner_bytes();
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
  staged_memory src_, src_bw_, dst_, ddst_bw_, ddst_bd_, dsrc_, w_fwd_, w_bd_, dw_;
  bool src_bw_same_ = true, ddst_bd_same_ = true, w_bd_same_ = true;
  dnnl::memory b_m_, db_m_;
  std::optional<uint64_t> weights_version_;
  inner_link link_;
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
