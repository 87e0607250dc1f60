// linear (fully connected) on oneDNN inner product: forward with the bias and
// an optional fused ReLU, backward data and backward weights (which also
// yields the bias gradient). Weights stay in PyTorch's (out, in) layout, which
// oneDNN's gemm-based inner product consumes directly: no reorders per step.
#include <cmath>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

class linear_unit final : public unit {
public:
  linear_unit(cpu_context& ctx, const layer_spec& s, int64_t in, rng& init, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), in_(in), out_(s.out), has_bias_(s.bias), relu_(s.relu) {
    float bound = 1.0f / std::sqrt(float(in_));
    weight_.name = name() + ".weight";
    weight_.value = tensor::empty({out_, in_});
    weight_.grad = tensor::zeros({out_, in_});
    init_uniform(weight_.value, bound, init);
    if (has_bias_) {
      bias_.name = name() + ".bias";
      bias_.value = tensor::empty({out_});
      bias_.grad = tensor::zeros({out_});
      init_uniform(bias_.value, bound, init);
    }
  }

  layer_kind kind() const noexcept override { return layer_kind::linear; }

  expected<shape> prepare(const shape& input) override {
    if (input.rank() < 2 || input.inner_numel() != in_)
      return make_error(errc::invalid_argument, "linear " + name() + ": expects (N, " +
                                                    std::to_string(in_) + ") input, got " +
                                                    input.to_string());
    shape out_shape{input[0], out_};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    in_shape_ = input;
    const int64_t n = input[0];
    auto src_md = plain_md({n, in_});
    auto w_md = plain_md({out_, in_});
    auto b_md = has_bias_ ? plain_md({out_}) : dnnl::memory::desc();
    auto dst_md = plain_md({n, out_});
    HF_DNNL_TRY({
      dnnl::primitive_attr attr;
      if (relu_) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(po);
      }
      auto fwd_d = has_bias_ ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training,
                                                                 src_md, w_md, b_md, dst_md)
                             : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training,
                                                                 src_md, w_md, dst_md);
      dnnl::inner_product_forward::primitive_desc fwd_pd(fwd_d, attr, ctx_.engine());
      fwd_ = dnnl::inner_product_forward(fwd_pd);
      dnnl::inner_product_backward_data::primitive_desc bd_pd(
          dnnl::inner_product_backward_data::desc(src_md, w_md, dst_md), ctx_.engine(), fwd_pd);
      bwd_data_ = dnnl::inner_product_backward_data(bd_pd);
      auto bw_d = has_bias_ ? dnnl::inner_product_backward_weights::desc(src_md, w_md, b_md, dst_md)
                            : dnnl::inner_product_backward_weights::desc(src_md, w_md, dst_md);
      dnnl::inner_product_backward_weights::primitive_desc bw_pd(bw_d, ctx_.engine(), fwd_pd);
      bwd_weights_ = dnnl::inner_product_backward_weights(bw_pd);
      src_m_ = unbound_memory(src_md, ctx_);
      w_m_ = unbound_memory(w_md, ctx_);
      dst_m_ = unbound_memory(dst_md, ctx_);
      ddst_m_ = unbound_memory(dst_md, ctx_);
      dsrc_m_ = unbound_memory(src_md, ctx_);
      dw_m_ = unbound_memory(w_md, ctx_);
      if (has_bias_) {
        b_m_ = unbound_memory(b_md, ctx_);
        db_m_ = unbound_memory(b_md, ctx_);
      }
    });
    y_.resize({n, out_});
    dx_.resize(input);
    if (relu_) dpre_.resize({n, out_});
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    x_ = x;
    attach(src_m_, x.raw());
    attach(w_m_, weight_.value.bytes());
    attach(dst_m_, y_.bytes());
    if (has_bias_) {
      attach(b_m_, bias_.value.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_WEIGHTS, w_m_},
                                  {DNNL_ARG_BIAS, b_m_}, {DNNL_ARG_DST, dst_m_}},
                                 name(), "forward"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_WEIGHTS, w_m_}, {DNNL_ARG_DST, dst_m_}},
                                 name(), "forward"));
    }
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu("linear", name(), dy, y_, relu_, dpre_));
    const void* dpre = g.raw();
    attach(ddst_m_, dpre);
    attach(src_m_, x_.raw());
    attach(dw_m_, weight_.grad.bytes());
    if (has_bias_) {
      attach(db_m_, bias_.grad.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DIFF_DST, ddst_m_},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw_m_}, {DNNL_ARG_DIFF_BIAS, db_m_}},
                                 name(), "backward weights"));
    } else {
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_weights_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DIFF_DST, ddst_m_},
                                  {DNNL_ARG_DIFF_WEIGHTS, dw_m_}},
                                 name(), "backward weights"));
    }
    if (!need_input_grad) return tensor_view{};
    attach(w_m_, weight_.value.bytes());
    attach(dsrc_m_, dx_.bytes());
    HF_RETURN_IF_ERROR(execute(ctx_, bwd_data_,
                               {{DNNL_ARG_DIFF_DST, ddst_m_}, {DNNL_ARG_WEIGHTS, w_m_},
                                {DNNL_ARG_DIFF_SRC, dsrc_m_}},
                               name(), "backward data"));
    return dx_.view();
  }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  uint64_t activation_bytes() const override {
    // The output (kept for the ReLU mask and by the next unit) and the
    // gradient buffers sized per batch.
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0);
  }

private:
  cpu_context& ctx_;
  int64_t in_, out_;
  bool has_bias_, relu_;
  parameter weight_, bias_;
  bool prepared_ = false;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  dnnl::inner_product_forward fwd_;
  dnnl::inner_product_backward_data bwd_data_;
  dnnl::inner_product_backward_weights bwd_weights_;
  dnnl::memory src_m_, w_m_, b_m_, dst_m_, ddst_m_, dsrc_m_, dw_m_, db_m_;
};

}  // namespace

expected<built_unit> make_linear(cpu_context& ctx, const layer_spec& s, const shape& in, rng& init,
                                 const std::string& prefix) {
  if (s.out <= 0)
    return make_error(errc::invalid_argument, "linear " + s.name + ": out features must be > 0");
  int64_t features = in.numel();
  return built_unit{std::make_unique<linear_unit>(ctx, s, features, init, prefix), shape{s.out}};
}

}  // namespace hetflow::kernels::cpu
