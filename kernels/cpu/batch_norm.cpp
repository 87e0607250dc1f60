// Batch normalisation on oneDNN over dim 1 of (N, C) or (N, C, H, W), with
// scale and shift, optional fused ReLU, batch statistics in training and
// running statistics in eval (PyTorch semantics: momentum-weighted running
// mean and unbiased running variance).
//
// Backward works in both modes: training differentiates through the batch
// statistics, eval treats the running statistics as constants. The fused
// ReLU's derivative is applied by us from the saved output, so one backward
// primitive serves with and without ReLU.
//
// 4-D data is normalised in a blocked or channels-last layout: oneDNN's
// NCHW batch norm is a reference loop, 8-10x slower than its jit kernels
// (measured 3.7 ms vs 0.45 ms for 32x64x32x32), which more than pays for the
// reorders at the unit's edges. Which blocked layout has a jit kernel depends
// on the CPU (blocked_tags, dnnl_util.hpp): prepare() takes the first whose
// training primitives are jit, else NHWC.
// Inside a residual body the activations and gradients flow between this unit
// and its convolutions in that layout (inner_link, units.hpp); a fused ReLU's
// derivative is then applied in the layout too.
// TODO(perf): the same between top-level units.
#include <cmath>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

using nflags = dnnl::normalization_flags;

class batch_norm_unit final : public unit, public linkable {
public:
  batch_norm_unit(cpu_context& ctx, const layer_spec& s, int64_t channels, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), c_(channels), eps_(float(s.eps)), momentum_(float(s.momentum)),
        relu_(s.relu) {
    scale_.name = name() + ".weight";
    scale_.value = tensor::filled({c_}, 1.0f);
    scale_.grad = tensor::zeros({c_});
    shift_.name = name() + ".bias";
    shift_.value = tensor::zeros({c_});
    shift_.grad = tensor::zeros({c_});
    running_mean_.name = name() + ".running_mean";
    running_mean_.value = tensor::zeros({c_});
    running_var_.name = name() + ".running_var";
    running_var_.value = tensor::filled({c_}, 1.0f);
    mean_ = tensor::zeros({c_});
    var_ = tensor::zeros({c_});
  }

  layer_kind kind() const noexcept override { return layer_kind::batch_norm; }

  expected<shape> prepare(const shape& input) override {
    if ((input.rank() != 2 && input.rank() != 4) || input[1] != c_)
      return make_error(errc::invalid_argument, "batch_norm " + name() + ": expects (N, " +
                                                    std::to_string(c_) + "[, H, W]), got " +
                                                    input.to_string());
    if (prepared_ && input == in_shape_) return input;
    prepared_ = false;
    link_ = {};
    in_shape_ = input;
    const auto plain = plain_md(input);
    const nflags ss = nflags::use_scale | nflags::use_shift;
    const nflags fused = relu_ ? nflags::fuse_norm_relu : nflags::none;
    using bn_fwd = dnnl::batch_normalization_forward;
    using bn_bwd = dnnl::batch_normalization_backward;
    HF_DNNL_TRY({
      // The layout (see the top of the file).
      dnnl::memory::desc md = plain;
      if (input.rank() == 4) {
        md = dnnl::memory::desc(to_dims(input), dt::f32, tag::acdb);
        for (tag t : blocked_tags(c_)) {
          dnnl::memory::desc m(to_dims(input), dt::f32, t);
          bn_fwd::primitive_desc f(bn_fwd::desc(dnnl::prop_kind::forward_training, m, eps_, ss | fused),
                                   ctx_.engine());
          bn_fwd::primitive_desc hint(bn_fwd::desc(dnnl::prop_kind::forward_training, m, eps_, ss), ctx_.engine());
          bn_bwd::primitive_desc b(bn_bwd::desc(dnnl::prop_kind::backward, m, m, eps_, ss), ctx_.engine(), hint);
          if (is_jit(f) && is_jit(b)) {
            md = m;
            break;
          }
        }
      }
      bn_fwd::primitive_desc train_pd(bn_fwd::desc(dnnl::prop_kind::forward_training, md, eps_, ss | fused),
                                      ctx_.engine());
      fwd_train_ = bn_fwd(train_pd);
      if (relu_) ws_m_ = dnnl::memory(train_pd.workspace_desc(), ctx_.engine());
      bn_fwd::primitive_desc eval_pd(
          bn_fwd::desc(dnnl::prop_kind::forward_inference, md, eps_, ss | fused | nflags::use_global_stats),
          ctx_.engine());
      fwd_eval_ = bn_fwd(eval_pd);
      // Unfused forward descriptors only as hints for the backward ones.
      bn_fwd::primitive_desc train_hint(bn_fwd::desc(dnnl::prop_kind::forward_training, md, eps_, ss),
                                        ctx_.engine());
      bn_fwd::primitive_desc eval_hint(
          bn_fwd::desc(dnnl::prop_kind::forward_training, md, eps_, ss | nflags::use_global_stats),
          ctx_.engine());
      bwd_train_ = bn_bwd(bn_bwd::primitive_desc(bn_bwd::desc(dnnl::prop_kind::backward, md, md, eps_, ss),
                                                 ctx_.engine(), train_hint));
      bwd_eval_ = bn_bwd(bn_bwd::primitive_desc(
          bn_bwd::desc(dnnl::prop_kind::backward, md, md, eps_, ss | nflags::use_global_stats),
          ctx_.engine(), eval_hint));
      auto c_md = plain_md({c_});
      src_.init(ctx_, plain, md);
      dst_.init(ctx_, plain, md);
      dsrc_.init(ctx_, plain, md);
      ddst_.init(ctx_, plain, md);
      mean_m_ = unbound_memory(c_md, ctx_);
      var_m_ = unbound_memory(c_md, ctx_);
      scale_m_ = unbound_memory(c_md, ctx_);
      shift_m_ = unbound_memory(c_md, ctx_);
      dscale_m_ = unbound_memory(c_md, ctx_);
      dshift_m_ = unbound_memory(c_md, ctx_);
    });
    y_.resize(input);
    dx_.resize(input);
    if (relu_) dpre_.resize(input);
    prepared_ = true;
    return input;
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    x_ = x;
    last_mode_ = m;
    if (!link_.input) {
      src_.attach(x.raw());
      HF_RETURN_IF_ERROR(src_.to_inner(ctx_, name(), "input reorder"));
    }
    const dnnl::memory& src = link_.input ? link_.input->arg() : src_.arg();
    dst_.attach(y_.bytes());
    attach(scale_m_, scale_.value.bytes());
    attach(shift_m_, shift_.value.bytes());
    if (m == mode::train) {
      attach(mean_m_, mean_.bytes());
      attach(var_m_, var_.bytes());
      if (relu_)
        HF_RETURN_IF_ERROR(execute(ctx_, fwd_train_,
                                   {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst_.arg()}, {DNNL_ARG_MEAN, mean_m_},
                                    {DNNL_ARG_VARIANCE, var_m_}, {DNNL_ARG_SCALE, scale_m_},
                                    {DNNL_ARG_SHIFT, shift_m_}, {DNNL_ARG_WORKSPACE, ws_m_}},
                                   name(), "forward"));
      else
        HF_RETURN_IF_ERROR(execute(ctx_, fwd_train_,
                                   {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst_.arg()}, {DNNL_ARG_MEAN, mean_m_},
                                    {DNNL_ARG_VARIANCE, var_m_}, {DNNL_ARG_SCALE, scale_m_},
                                    {DNNL_ARG_SHIFT, shift_m_}},
                                   name(), "forward"));
      update_running_stats();
    } else {
      attach(mean_m_, running_mean_.value.bytes());
      attach(var_m_, running_var_.value.bytes());
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_eval_,
                                 {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst_.arg()}, {DNNL_ARG_MEAN, mean_m_},
                                  {DNNL_ARG_VARIANCE, var_m_}, {DNNL_ARG_SCALE, scale_m_},
                                  {DNNL_ARG_SHIFT, shift_m_}},
                                 name(), "forward (eval)"));
    }
    if (!link_.output_inner) HF_RETURN_IF_ERROR(dst_.to_plain(ctx_, name(), "output reorder"));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    HF_RETURN_IF_ERROR(check_gradient("batch_norm", name(), dy, y_));
    bool train = last_mode_ == mode::train;
    // src_ (or the linked producer's output) still holds this batch's input
    // in md's layout (lockstep contract).
    if (!link_.input && !src_.staged()) src_.attach(x_.raw());
    const dnnl::memory& src = link_.input ? link_.input->arg() : src_.arg();
    if (!link_.output_grad) {
      HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu("batch_norm", name(), dy, y_, relu_, dpre_));
      ddst_.attach(g.raw());
      HF_RETURN_IF_ERROR(ddst_.to_inner(ctx_, name(), "gradient reorder"));
    } else if (relu_) {
      // The ReLU's derivative in the layout: the staged output and gradient
      // have the same layout (link_units), element by element.
      const auto* d = static_cast<const float*>(link_.output_grad->arg().get_data_handle());
      const auto* y = static_cast<const float*>(dst_.arg().get_data_handle());
      relu_backward(d, y, static_cast<float*>(ddst_.arg().get_data_handle()),
                    int64_t(ddst_.wanted().get_size() / sizeof(float)));
    }
    const dnnl::memory& ddst = link_.output_grad && !relu_ ? link_.output_grad->arg() : ddst_.arg();
    dsrc_.attach(dx_.bytes());
    attach(mean_m_, train ? mean_.bytes() : running_mean_.value.bytes());
    attach(var_m_, train ? var_.bytes() : running_var_.value.bytes());
    attach(scale_m_, scale_.value.bytes());
    attach(shift_m_, shift_.value.bytes());
    attach(dscale_m_, scale_.grad.bytes());
    attach(dshift_m_, shift_.grad.bytes());
    // oneDNN computes diff_src along with the parameter gradients; there is
    // no cheaper weights-only variant.
    HF_RETURN_IF_ERROR(execute(ctx_, train ? bwd_train_ : bwd_eval_,
                               {{DNNL_ARG_SRC, src}, {DNNL_ARG_MEAN, mean_m_}, {DNNL_ARG_VARIANCE, var_m_},
                                {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_SCALE, scale_m_},
                                {DNNL_ARG_SHIFT, shift_m_}, {DNNL_ARG_DIFF_SRC, dsrc_.arg()}, {DNNL_ARG_DIFF_SCALE, dscale_m_},
                                {DNNL_ARG_DIFF_SHIFT, dshift_m_}},
                               name(), "backward"));
    if (!need_input_grad) return tensor_view{};
    if (!link_.input_grad_inner) HF_RETURN_IF_ERROR(dsrc_.to_plain(ctx_, name(), "input gradient reorder"));
    return dx_.view();
  }

  // linkable: every side (a fused ReLU's derivative is applied in the layout).
  const staged_memory* link_output() const override { return &dst_; }
  const staged_memory* link_output_grad() const override { return &ddst_; }
  const staged_memory* link_input() const override { return &src_; }
  const staged_memory* link_input_grad() const override { return &dsrc_; }
  void set_link(const inner_link& l) override { link_ = l; }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&scale_);
    out.push_back(&shift_);
  }
  void state(std::vector<state_tensor*>& out) override {
    out.push_back(&running_mean_);
    out.push_back(&running_var_);
  }
  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() + ws_m_.get_desc().get_size() : 0) +
           src_.inner_bytes() + dst_.inner_bytes() + dsrc_.inner_bytes() + ddst_.inner_bytes();
  }

private:
  void update_running_stats() {
    const int64_t n = in_shape_.numel() / c_;
    const float unbias = n > 1 ? float(n) / float(n - 1) : 1.0f;
    float* rm = running_mean_.value.f32();
    float* rv = running_var_.value.f32();
    const float* m = mean_.f32();
    const float* v = var_.f32();
    for (int64_t i = 0; i < c_; ++i) {
      rm[i] = (1.0f - momentum_) * rm[i] + momentum_ * m[i];
      rv[i] = (1.0f - momentum_) * rv[i] + momentum_ * v[i] * unbias;
    }
  }

  cpu_context& ctx_;
  int64_t c_;
  float eps_, momentum_;
  bool relu_;
  parameter scale_, shift_;
  state_tensor running_mean_, running_var_;
  tensor mean_, var_;  // batch statistics of the last training forward
  bool prepared_ = false;
  mode last_mode_ = mode::train;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  dnnl::batch_normalization_forward fwd_train_, fwd_eval_;
  dnnl::batch_normalization_backward bwd_train_, bwd_eval_;
  staged_memory src_, dst_, dsrc_, ddst_;
  inner_link link_;
  dnnl::memory mean_m_, var_m_, scale_m_, shift_m_, dscale_m_, dshift_m_,
      ws_m_;
};

}  // namespace

expected<built_unit> make_batch_norm(cpu_context& ctx, const layer_spec& s, const shape& in, rng&,
                                     const std::string& prefix) {
  if (in.rank() != 1 && in.rank() != 3)
    return make_error(errc::invalid_argument, "batch_norm " + s.name + ": input must be (C) or (C, H, W), got " +
                                                  in.to_string());
  if (!(s.eps > 0.0) || !(s.momentum >= 0.0 && s.momentum <= 1.0))
    return make_error(errc::invalid_argument, "batch_norm " + s.name + ": needs eps > 0 and momentum in [0, 1]");
  return built_unit{std::make_unique<batch_norm_unit>(ctx, s, in[0], prefix), in};
}

}  // namespace hetflow::kernels::cpu
