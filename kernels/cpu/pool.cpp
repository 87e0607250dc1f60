// max, average and global-average pooling on oneDNN (NCHW). Max pooling keeps
// oneDNN's workspace (argmax positions) from forward to backward.
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

class pool_unit final : public unit {
public:
  pool_unit(cpu_context& ctx, const layer_spec& s, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), kind_(s.kind), k_(s.kernel), stride_(s.stride), pad_(s.padding) {}

  layer_kind kind() const noexcept override { return kind_; }

  expected<shape> prepare(const shape& input) override {
    if (input.rank() != 4)
      return make_error(errc::invalid_argument, std::string(to_string(kind_)) + " " + name() +
                                                    ": expects (N, C, H, W), got " + input.to_string());
    int64_t kh = k_, kw = k_, sh = stride_, sw = stride_, p = pad_;
    if (kind_ == layer_kind::global_avg_pool) {
      kh = sh = input[2];
      kw = sw = input[3];
      p = 0;
    }
    int64_t oh = (input[2] + 2 * p - kh) / sh + 1;
    int64_t ow = (input[3] + 2 * p - kw) / sw + 1;
    if (oh <= 0 || ow <= 0)
      return make_error(errc::invalid_argument, std::string(to_string(kind_)) + " " + name() + ": input " +
                                                    input.to_string() + " is smaller than the window");
    shape out_shape{input[0], input[1], oh, ow};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    in_shape_ = input;
    auto src_md = plain_md(input);
    auto dst_md = plain_md(out_shape);
    auto alg = kind_ == layer_kind::max_pool ? dnnl::algorithm::pooling_max
                                              : dnnl::algorithm::pooling_avg_include_padding;
    HF_DNNL_TRY({
      dnnl::pooling_forward::primitive_desc fwd_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, alg, src_md, dst_md, {sh, sw},
                                      {kh, kw}, {p, p}, {p, p}),
          ctx_.engine());
      fwd_ = dnnl::pooling_forward(fwd_pd);
      dnnl::pooling_backward::primitive_desc bwd_pd(
          dnnl::pooling_backward::desc(alg, src_md, dst_md, {sh, sw}, {kh, kw}, {p, p}, {p, p}),
          ctx_.engine(), fwd_pd);
      bwd_ = dnnl::pooling_backward(bwd_pd);
      has_ws_ = kind_ == layer_kind::max_pool && fwd_pd.workspace_desc().get_size() > 0;
      if (has_ws_) ws_m_ = dnnl::memory(fwd_pd.workspace_desc(), ctx_.engine());
      src_m_ = unbound_memory(src_md, ctx_);
      dst_m_ = unbound_memory(dst_md, ctx_);
      dsrc_m_ = unbound_memory(src_md, ctx_);
      ddst_m_ = unbound_memory(dst_md, ctx_);
    });
    y_.resize(out_shape);
    dx_.resize(input);
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    attach(src_m_, x.raw());
    attach(dst_m_, y_.bytes());
    if (has_ws_)
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DST, dst_m_}, {DNNL_ARG_WORKSPACE, ws_m_}},
                                 name(), "forward"));
    else
      HF_RETURN_IF_ERROR(
          execute(ctx_, fwd_, {{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DST, dst_m_}}, name(), "forward"));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    HF_RETURN_IF_ERROR(check_gradient("pool", name(), dy, y_));
    attach(ddst_m_, dy.raw());
    attach(dsrc_m_, dx_.bytes());
    if (has_ws_)
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_,
                                 {{DNNL_ARG_DIFF_DST, ddst_m_}, {DNNL_ARG_DIFF_SRC, dsrc_m_},
                                  {DNNL_ARG_WORKSPACE, ws_m_}},
                                 name(), "backward"));
    else
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_, {{DNNL_ARG_DIFF_DST, ddst_m_}, {DNNL_ARG_DIFF_SRC, dsrc_m_}},
                                 name(), "backward"));
    return dx_.view();
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (has_ws_ ? ws_m_.get_desc().get_size() : 0);
  }

private:
  cpu_context& ctx_;
  layer_kind kind_;
  int64_t k_, stride_, pad_;
  bool prepared_ = false;
  bool has_ws_ = false;
  shape in_shape_;
  tensor y_, dx_;
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  dnnl::memory src_m_, dst_m_, dsrc_m_, ddst_m_, ws_m_;
};

}  // namespace

expected<built_unit> make_pool(cpu_context& ctx, const layer_spec& s, const shape& in, rng&,
                               const std::string& prefix) {
  if (in.rank() != 3)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name +
                                                  ": input must be (C, H, W), got " + in.to_string());
  if (s.kind == layer_kind::global_avg_pool)
    return built_unit{std::make_unique<pool_unit>(ctx, s, prefix), shape{in[0], 1, 1}};
  if (s.kernel <= 0 || s.stride <= 0 || s.padding < 0 || 2 * s.padding > s.kernel)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name +
                                                  ": needs kernel > 0, stride > 0, 0 <= padding <= kernel/2");
  int64_t oh = (in[1] + 2 * s.padding - s.kernel) / s.stride + 1;
  int64_t ow = (in[2] + 2 * s.padding - s.kernel) / s.stride + 1;
  if (oh <= 0 || ow <= 0)
    return make_error(errc::invalid_argument, std::string(to_string(s.kind)) + " " + s.name + ": input " +
                                                  in.to_string() + " is smaller than its window");
  return built_unit{std::make_unique<pool_unit>(ctx, s, prefix), shape{in[0], oh, ow}};
}

}  // namespace hetflow::kernels::cpu
