// max, average and global-average pooling on oneDNN. Max pooling keeps
// oneDNN's workspace (argmax positions) from forward to backward.
//
// oneDNN 2.6 pools NCHW data with a plain C++ loop ("simple_nchw"): on the
// 2-core AVX2 VM 8.6 ms for one forward of 32x16x32x32, as long as the 3x3
// convolution before it. Its jit kernels want a blocked layout, so the data is
// reordered into the first of blocked_tags (dnnl_util.hpp) that has jit
// kernels for both directions, as batch_norm.cpp does; NCHW when none has.
//
// Max pooling with non-overlapping windows (kernel == stride, no padding:
// VGG's 2x2/2) does not use oneDNN at all: its jit kernel took 2.6 ms for a
// forward of 64x16x28x28 on that VM (1.6 GB/s, plus the two reorders), and
// the loop below reads NCHW directly. As in PyTorch, ties go to the first
// maximum in the window's row-major order and a NaN wins (the last NaN, if
// several); backward scatters each gradient to its window's argmax (windows
// do not overlap).
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/parallel.hpp"
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
    direct_ = kind_ == layer_kind::max_pool && kh == sh && kw == sw && p == 0 && kh * kw <= 256;
    if (direct_) {
      argmax_.assign(std::size_t(out_shape.numel()), 0);
      y_.resize(out_shape);
      dx_.resize(input);
      prepared_ = true;
      return out_shape;
    }
    argmax_ = {};
    const auto src_plain = plain_md(input);
    const auto dst_plain = plain_md(out_shape);
    auto alg = kind_ == layer_kind::max_pool ? dnnl::algorithm::pooling_max
                                              : dnnl::algorithm::pooling_avg_include_padding;
    using pool_fwd = dnnl::pooling_forward;
    using pool_bwd = dnnl::pooling_backward;
    auto make = [&](const dnnl::memory::desc& src, const dnnl::memory::desc& dst) {
      pool_fwd::primitive_desc f(
          pool_fwd::desc(dnnl::prop_kind::forward_training, alg, src, dst, {sh, sw}, {kh, kw}, {p, p}, {p, p}),
          ctx_.engine());
      pool_bwd::primitive_desc b(pool_bwd::desc(alg, src, dst, {sh, sw}, {kh, kw}, {p, p}, {p, p}), ctx_.engine(),
                                 f);
      return std::pair{f, b};
    };
    HF_DNNL_TRY({
      auto pds = make(src_plain, dst_plain);
      dnnl::memory::desc src_md = src_plain, dst_md = dst_plain;
      for (tag t : blocked_tags(input[1])) {
        dnnl::memory::desc s(to_dims(input), dt::f32, t), d(to_dims(out_shape), dt::f32, t);
        auto blocked = make(s, d);
        if (is_jit(blocked.first) && is_jit(blocked.second)) {
          pds = blocked;
          src_md = s;
          dst_md = d;
          break;
        }
      }
      auto& [fwd_pd, bwd_pd] = pds;
      fwd_ = pool_fwd(fwd_pd);
      bwd_ = pool_bwd(bwd_pd);
      has_ws_ = kind_ == layer_kind::max_pool && fwd_pd.workspace_desc().get_size() > 0;
      if (has_ws_) ws_m_ = dnnl::memory(fwd_pd.workspace_desc(), ctx_.engine());
      src_.init(ctx_, src_plain, src_md);
      dst_.init(ctx_, dst_plain, dst_md);
      dsrc_.init(ctx_, src_plain, src_md);
      ddst_.init(ctx_, dst_plain, dst_md);
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
    if (direct_) {
      direct_forward(x.f32());
      return y_.view();
    }
    src_.attach(x.raw());
    HF_RETURN_IF_ERROR(src_.to_inner(ctx_, name(), "input reorder"));
    dst_.attach(y_.bytes());
    if (has_ws_)
      HF_RETURN_IF_ERROR(execute(ctx_, fwd_,
                                 {{DNNL_ARG_SRC, src_.arg()}, {DNNL_ARG_DST, dst_.arg()}, {DNNL_ARG_WORKSPACE, ws_m_}},
                                 name(), "forward"));
    else
      HF_RETURN_IF_ERROR(
          execute(ctx_, fwd_, {{DNNL_ARG_SRC, src_.arg()}, {DNNL_ARG_DST, dst_.arg()}}, name(), "forward"));
    HF_RETURN_IF_ERROR(dst_.to_plain(ctx_, name(), "output reorder"));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    if (!need_input_grad) return tensor_view{};
    HF_RETURN_IF_ERROR(check_gradient("pool", name(), dy, y_));
    if (direct_) {
      direct_backward(dy.f32());
      return dx_.view();
    }
    ddst_.attach(dy.raw());
    HF_RETURN_IF_ERROR(ddst_.to_inner(ctx_, name(), "gradient reorder"));
    dsrc_.attach(dx_.bytes());
    if (has_ws_)
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_,
                                 {{DNNL_ARG_DIFF_DST, ddst_.arg()}, {DNNL_ARG_DIFF_SRC, dsrc_.arg()},
                                  {DNNL_ARG_WORKSPACE, ws_m_}},
                                 name(), "backward"));
    else
      HF_RETURN_IF_ERROR(execute(ctx_, bwd_, {{DNNL_ARG_DIFF_DST, ddst_.arg()}, {DNNL_ARG_DIFF_SRC, dsrc_.arg()}},
                                 name(), "backward"));
    HF_RETURN_IF_ERROR(dsrc_.to_plain(ctx_, name(), "input gradient reorder"));
    return dx_.view();
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (has_ws_ ? ws_m_.get_desc().get_size() : 0) + argmax_.size() +
           src_.inner_bytes() + dst_.inner_bytes() + dsrc_.inner_bytes() + ddst_.inner_bytes();
  }

private:
  cpu_context& ctx_;
  layer_kind kind_;
  int64_t k_, stride_, pad_;
  bool prepared_ = false;
  bool has_ws_ = false;
  bool direct_ = false;          // max pooling over non-overlapping windows, without oneDNN
  std::vector<uint8_t> argmax_;  // direct_: each output's position in its window (row-major)

  // Planes per chunk: about serial_elements inputs each (parallel_range runs
  // fewer inline).
  int64_t plane_grain() const { return std::max<int64_t>(1, serial_elements / (in_shape_[2] * in_shape_[3])); }

  void direct_forward(const float* x) {
    const int64_t h = in_shape_[2], w = in_shape_[3], k = k_, oh = h / k, ow = w / k;
    float* y = y_.f32();
    uint8_t* am = argmax_.data();
    parallel_range(in_shape_[0] * in_shape_[1], plane_grain(), [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const float* xp = x + pl * h * w;
        float* yp = y + pl * oh * ow;
        uint8_t* ap = am + pl * oh * ow;
        if (k == 2) {  // VGG's and LeNet's windows, unrolled and branch-free (perf: 17% -> 11% of a VGG-11 run)
          for (int64_t r = 0; r < oh; ++r) {
            const float* r0 = xp + 2 * r * w;
            const float* r1 = r0 + w;
            for (int64_t q = 0; q < ow; ++q) {
              float m = r0[2 * q];
              uint8_t best = 0;
              auto take = [&](float v, uint8_t at) {
                const bool g = v > m || v != v;  // v != v: NaN
                m = g ? v : m;
                best = g ? at : best;
              };
              take(r0[2 * q + 1], 1);
              take(r1[2 * q], 2);
              take(r1[2 * q + 1], 3);
              yp[r * ow + q] = m;
              ap[r * ow + q] = best;
            }
          }
          continue;
        }
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t q = 0; q < ow; ++q) {
            const float* win = xp + r * k * w + q * k;
            float m = win[0];
            int best = 0;
            for (int64_t a = 0; a < k; ++a)
              for (int64_t b = 0; b < k; ++b) {
                const float v = win[a * w + b];
                if (v > m || std::isnan(v)) {
                  m = v;
                  best = int(a * k + b);
                }
              }
            yp[r * ow + q] = m;
            ap[r * ow + q] = uint8_t(best);
          }
      }
    });
  }

  void direct_backward(const float* dy) {
    const int64_t h = in_shape_[2], w = in_shape_[3], k = k_, oh = h / k, ow = w / k;
    float* dx = dx_.f32();
    const uint8_t* am = argmax_.data();
    parallel_range(in_shape_[0] * in_shape_[1], plane_grain(), [&](int64_t begin, int64_t end) {
      std::memset(dx + begin * h * w, 0, std::size_t((end - begin) * h * w) * sizeof(float));
      for (int64_t pl = begin; pl < end; ++pl) {
        float* dp = dx + pl * h * w;
        const float* gp = dy + pl * oh * ow;
        const uint8_t* ap = am + pl * oh * ow;
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t q = 0; q < ow; ++q) {
            const int64_t at = ap[r * ow + q];
            dp[(r * k + at / k) * w + q * k + at % k] = gp[r * ow + q];
          }
      }
    });
  }
  shape in_shape_;
  tensor y_, dx_;
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  staged_memory src_, dst_, dsrc_, ddst_;
  dnnl::memory ws_m_;
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
