// conv2d on cuDNN: NCHW f32 activations, (out, in, kh, kw) weights (PyTorch's
// layout, which is cuDNN's NCHW filter layout: no reorders), square kernel,
// stride, symmetric zero padding; bias and ReLU by our epilogue kernel;
// bias gradient by cudnnConvolutionBackwardBias.
//
// Algorithms are chosen once per prepared shape: benchmarked with
// cudnnFind*Algorithm (what PyTorch's cudnn.benchmark does), or with the
// cudnnGet*_v7 heuristics when HETFLOW_CUDNN_FIND=0 or Find fails, under the
// context's workspace limit; the shared workspace is then grown once to the
// largest of the three. The context's math mode picks the math: FMA only
// (f32), TF32 tensor cores (tf32, the default, like PyTorch's), or bf16 / f16
// tensor cores on 16-bit copies of the inputs, accumulating in f32 and
// converting the results back (x, W -> y; dy, W -> dx; x, dy -> dW).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "kernels/cuda/cudnn_util.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

bool use_find() {
  const char* e = std::getenv("HETFLOW_CUDNN_FIND");
  return e == nullptr || std::strcmp(e, "0") != 0;
}

// Picks the first (fastest) result that succeeded and fits the limit. Perf
// structs of the three kinds share these fields.
template <class Perf> const Perf* pick(const std::vector<Perf>& perf, int count, std::size_t limit) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[std::size_t(i)];
    if (p.status == CUDNN_STATUS_SUCCESS && p.memory <= limit) return &p;
  }
  return nullptr;
}

// The math type the descriptors allow while searching.
cudnnMathType_t search_math(math_mode m) { return m == math_mode::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

bool is_16bit(math_mode m) { return m == math_mode::bf16 || m == math_mode::f16; }

// The math type to run a chosen algorithm with: its own unless the mode is
// strict f32 (CUDNN_DEFAULT_MATH would still allow TF32 on Ampere and later).
cudnnMathType_t math_for(cudnnMathType_t chosen, math_mode m) {
  return m == math_mode::f32 ? CUDNN_FMA_MATH : chosen;
}

class conv2d_unit final : public unit {
public:
  conv2d_unit(context_impl& ctx, const layer_spec& s, int64_t in_c, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), in_c_(in_c), out_c_(s.out), k_(s.kernel), stride_(s.stride),
        pad_(s.padding), has_bias_(s.bias), relu_(s.relu) {
    weight_.name = name() + ".weight";
    weight_.value = ctx.make_tensor({out_c_, in_c_, k_, k_});
    weight_.grad = ctx.make_tensor({out_c_, in_c_, k_, k_});
    if (has_bias_) {
      bias_.name = name() + ".bias";
      bias_.value = ctx.make_tensor({out_c_});
      bias_.grad = ctx.make_tensor({out_c_});
    }
  }

  status init(rng& init) {
    const float bound = 1.0f / std::sqrt(float(in_c_ * k_ * k_));
    HF_RETURN_IF_ERROR(init_uniform(ctx_, weight_.value, bound, init));
    weight_.grad.zero();
    if (has_bias_) {
      HF_RETURN_IF_ERROR(init_uniform(ctx_, bias_.value, bound, init));
      bias_.grad.zero();
    }
    return {};
  }

  layer_kind kind() const noexcept override { return layer_kind::conv2d; }

  static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

  expected<shape> prepare(const shape& input) override {
    if (input.rank() != 4 || input[1] != in_c_)
      return make_error(errc::invalid_argument, "conv2d " + name() + ": expects (N, " + std::to_string(in_c_) +
                                                    ", H, W) input, got " + input.to_string());
    const int64_t oh = out_size(input[2], k_, stride_, pad_), ow = out_size(input[3], k_, stride_, pad_);
    if (oh <= 0 || ow <= 0)
      return make_error(errc::invalid_argument, "conv2d " + name() + ": input " + input.to_string() +
                                                    " is smaller than the " + std::to_string(k_) + "x" +
                                                    std::to_string(k_) + " kernel");
    shape out_shape{input[0], out_c_, oh, ow};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    HF_RETURN_IF_ERROR(in_unit(sized(ctx_, "conv2d " + name(), [&] { return plan(input, out_shape); }), "conv2d",
                               name()));
    in_shape_ = input;
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    HF_RETURN_IF_ERROR(in_unit(do_forward(x), "conv2d", name()));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    auto r = do_backward(dy, need_input_grad);
    if (!r) return in_unit(r.error(), "conv2d", name());
    return r;
  }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0) + x16_.byte_size() +
           y16_.byte_size() + w16_.byte_size() + dw16_.byte_size() + workspace_need_;
  }

private:
  status plan(const shape& input, const shape& out_shape) {
    HF_RETURN_IF_ERROR(ctx_.activate());
    const math_mode mode = ctx_.math();
    const cudnnMathType_t math = search_math(mode);
    half_ = is_16bit(mode);
    bf16_ = mode == math_mode::bf16;
    // The convolutions' own types: f32, or the 16-bit copies'.
    const cudnnDataType_t ct = !half_ ? CUDNN_DATA_FLOAT : bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    HF_RETURN_IF_ERROR(make_nchw(x_desc_, input, ct));
    HF_RETURN_IF_ERROR(make_nchw(y_desc_, out_shape, ct));
    HF_RETURN_IF_ERROR(make_nchw(y32_desc_, out_shape));
    HF_RETURN_IF_ERROR(make_nchw(b_desc_, shape{1, out_c_, 1, 1}));
    HF_CUDNN_CHECK(cudnnCreateFilterDescriptor(w_desc_.out()));
    HF_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_.get(), ct, CUDNN_TENSOR_NCHW, int(out_c_), int(in_c_), int(k_),
                                              int(k_)));
    for (conv_desc* d : {&fwd_conv_, &bwd_data_conv_, &bwd_filter_conv_}) {
      HF_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(d->out()));
      HF_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d->get(), int(pad_), int(pad_), int(stride_), int(stride_), 1,
                                                     1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(d->get(), math));
    }
    // Output buffers first: Find runs the real kernels and needs the memory
    // the model will need anyway to be taken already.
    ensure(ctx_, y_, out_shape);
    ensure(ctx_, dx_, input);
    if (relu_) ensure(ctx_, dpre_, out_shape);
    if (half_) {
      // x16_ also takes dx before conversion, y16_ the gradient dy.
      const dtype t = bf16_ ? dtype::bf16 : dtype::f16;
      ensure(ctx_, x16_, input, t);
      ensure(ctx_, y16_, out_shape, t);
      ensure(ctx_, w16_, weight_.value.shape(), t);
      ensure(ctx_, dw16_, weight_.value.shape(), t);
    }
    cudnnHandle_t h = ctx_.cudnn();
    // Shapes seen before (a last partial batch, eval batches) reuse their
    // choice: no second search each epoch.
    for (const choice& c : choices_) {
      if (!(c.input == input) || c.mode != mode) continue;
      fwd_algo_ = c.fwd;
      bwd_data_algo_ = c.bwd_data;
      bwd_filter_algo_ = c.bwd_filter;
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(fwd_conv_.get(), c.fwd_math));
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(bwd_data_conv_.get(), c.bwd_data_math));
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(bwd_filter_conv_.get(), c.bwd_filter_math));
      fwd_ws_ = c.fwd_ws;
      bwd_data_ws_ = c.bwd_data_ws;
      bwd_filter_ws_ = c.bwd_filter_ws;
      workspace_need_ = std::max({fwd_ws_, bwd_data_ws_, bwd_filter_ws_});
      return ctx_.reserve_workspace(workspace_need_);
    }
    const std::size_t limit = ctx_.workspace_limit();
    const bool find = use_find();
    choice made;
    made.input = input;
    made.mode = mode;

    // Forward.
    {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      int count = 0;
      bool ok = find && cudnnFindConvolutionForwardAlgorithm(h, x_desc_.get(), w_desc_.get(), fwd_conv_.get(),
                                                             y_desc_.get(), int(perf.size()), &count,
                                                             perf.data()) == CUDNN_STATUS_SUCCESS;
      const auto* p = ok ? pick(perf, count, limit) : nullptr;
      if (p == nullptr) {
        HF_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_desc_.get(), w_desc_.get(), fwd_conv_.get(),
                                                              y_desc_.get(), int(perf.size()), &count, perf.data()));
        p = pick(perf, count, limit);
      }
      if (p == nullptr)
        return make_error(errc::unsupported, "no cuDNN forward algorithm fits a " + std::to_string(limit >> 20) +
                                                 " MiB workspace for input " + input.to_string());
      fwd_algo_ = p->algo;
      made.fwd_math = math_for(p->mathType, mode);
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(fwd_conv_.get(), made.fwd_math));
      HF_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_.get(), w_desc_.get(), fwd_conv_.get(),
                                                             y_desc_.get(), fwd_algo_, &fwd_ws_));
    }
    // Backward data.
    {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      int count = 0;
      bool ok = find && cudnnFindConvolutionBackwardDataAlgorithm(h, w_desc_.get(), y_desc_.get(),
                                                                  bwd_data_conv_.get(), x_desc_.get(),
                                                                  int(perf.size()), &count,
                                                                  perf.data()) == CUDNN_STATUS_SUCCESS;
      const auto* p = ok ? pick(perf, count, limit) : nullptr;
      if (p == nullptr) {
        HF_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc_.get(), y_desc_.get(),
                                                                   bwd_data_conv_.get(), x_desc_.get(),
                                                                   int(perf.size()), &count, perf.data()));
        p = pick(perf, count, limit);
      }
      if (p == nullptr)
        return make_error(errc::unsupported, "no cuDNN backward-data algorithm fits a " +
                                                 std::to_string(limit >> 20) + " MiB workspace");
      bwd_data_algo_ = p->algo;
      made.bwd_data_math = math_for(p->mathType, mode);
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(bwd_data_conv_.get(), made.bwd_data_math));
      HF_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_desc_.get(), y_desc_.get(),
                                                                  bwd_data_conv_.get(), x_desc_.get(),
                                                                  bwd_data_algo_, &bwd_data_ws_));
    }
    // Backward filter.
    {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      int count = 0;
      bool ok = find && cudnnFindConvolutionBackwardFilterAlgorithm(h, x_desc_.get(), y_desc_.get(),
                                                                    bwd_filter_conv_.get(), w_desc_.get(),
                                                                    int(perf.size()), &count,
                                                                    perf.data()) == CUDNN_STATUS_SUCCESS;
      const auto* p = ok ? pick(perf, count, limit) : nullptr;
      if (p == nullptr) {
        HF_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_desc_.get(), y_desc_.get(),
                                                                     bwd_filter_conv_.get(), w_desc_.get(),
                                                                     int(perf.size()), &count, perf.data()));
        p = pick(perf, count, limit);
      }
      if (p == nullptr)
        return make_error(errc::unsupported, "no cuDNN backward-filter algorithm fits a " +
                                                 std::to_string(limit >> 20) + " MiB workspace");
      bwd_filter_algo_ = p->algo;
      made.bwd_filter_math = math_for(p->mathType, mode);
      HF_CUDNN_CHECK(cudnnSetConvolutionMathType(bwd_filter_conv_.get(), made.bwd_filter_math));
      HF_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_desc_.get(), y_desc_.get(),
                                                                    bwd_filter_conv_.get(), w_desc_.get(),
                                                                    bwd_filter_algo_, &bwd_filter_ws_));
    }
    workspace_need_ = std::max({fwd_ws_, bwd_data_ws_, bwd_filter_ws_});
    made.fwd = fwd_algo_;
    made.bwd_data = bwd_data_algo_;
    made.bwd_filter = bwd_filter_algo_;
    made.fwd_ws = fwd_ws_;
    made.bwd_data_ws = bwd_data_ws_;
    made.bwd_filter_ws = bwd_filter_ws_;
    choices_.push_back(made);
    return ctx_.reserve_workspace(workspace_need_);
  }

  status do_forward(tensor_view x) {
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "input"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    x_ = x;
    const float one = 1.0f, zero = 0.0f;
    if (!half_) {
      HF_CUDNN_CHECK(cudnnConvolutionForward(ctx_.cudnn(), &one, x_desc_.get(), x.raw(), w_desc_.get(),
                                             weight_.value.f32(), fwd_conv_.get(), fwd_algo_, ctx_.workspace(),
                                             fwd_ws_, &zero, y_desc_.get(), y_.f32()));
    } else {
      cudaStream_t s = ctx_.stream();
      HF_CUDA_CHECK(ops::to_16bit(x.f32(), x16_.bytes(), x.numel(), bf16_, s));
      HF_CUDA_CHECK(ops::to_16bit(weight_.value.f32(), w16_.bytes(), weight_.value.numel(), bf16_, s));
      HF_CUDNN_CHECK(cudnnConvolutionForward(ctx_.cudnn(), &one, x_desc_.get(), x16_.bytes(), w_desc_.get(),
                                             w16_.bytes(), fwd_conv_.get(), fwd_algo_, ctx_.workspace(), fwd_ws_,
                                             &zero, y_desc_.get(), y16_.bytes()));
      HF_CUDA_CHECK(ops::from_16bit(y16_.bytes(), y_.f32(), y_.numel(), bf16_, s));
    }
    const shape& ys = y_.shape();
    HF_CUDA_CHECK(ops::bias_relu(y_.f32(), has_bias_ ? bias_.value.f32() : nullptr, y_.numel(), out_c_,
                                 ys[2] * ys[3], relu_, ctx_.stream()));
    return {};
  }

  expected<tensor_view> do_backward(tensor_view dy, bool need_input_grad) {
    HF_RETURN_IF_ERROR(ctx_.activate());
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu(ctx_, "conv2d", name(), dy, y_, relu_, dpre_));
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = ctx_.cudnn();
    cudaStream_t s = ctx_.stream();
    // 16-bit: the gradient's copy in y16_; x16_ and w16_ still hold forward's.
    const void* gs = g.raw();
    if (half_) {
      HF_CUDA_CHECK(ops::to_16bit(g.f32(), y16_.bytes(), g.numel(), bf16_, s));
      gs = y16_.bytes();
    }
    const void* xs = half_ ? static_cast<const void*>(x16_.bytes()) : x_.raw();
    const void* ws = half_ ? static_cast<const void*>(w16_.bytes()) : static_cast<const void*>(weight_.value.f32());
    void* dws = half_ ? static_cast<void*>(dw16_.bytes()) : static_cast<void*>(weight_.grad.f32());
    HF_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_desc_.get(), xs, y_desc_.get(), gs,
                                                  bwd_filter_conv_.get(), bwd_filter_algo_, ctx_.workspace(),
                                                  bwd_filter_ws_, &zero, w_desc_.get(), dws));
    if (half_)
      HF_CUDA_CHECK(ops::from_16bit(dw16_.bytes(), weight_.grad.f32(), weight_.grad.numel(), bf16_, s));
    if (has_bias_)
      HF_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, y32_desc_.get(), g.raw(), &zero, b_desc_.get(),
                                                  bias_.grad.f32()));
    if (!need_input_grad) return tensor_view{};
    // 16-bit: dx lands in x16_ (x is no longer needed), then converts.
    void* dxs = half_ ? static_cast<void*>(x16_.bytes()) : static_cast<void*>(dx_.f32());
    HF_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_desc_.get(), ws, y_desc_.get(), gs, bwd_data_conv_.get(),
                                                bwd_data_algo_, ctx_.workspace(), bwd_data_ws_, &zero,
                                                x_desc_.get(), dxs));
    if (half_) HF_CUDA_CHECK(ops::from_16bit(x16_.bytes(), dx_.f32(), dx_.numel(), bf16_, s));
    return dx_.view();
  }

  context_impl& ctx_;
  int64_t in_c_, out_c_, k_, stride_, pad_;
  bool has_bias_, relu_;
  parameter weight_, bias_;
  bool prepared_ = false;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  // Math modes bf16 and f16: the convolutions run on these 16-bit copies.
  bool half_ = false, bf16_ = false;
  tensor x16_, y16_, w16_, dw16_;
  // x, y, w: the convolutions' types (f32 or 16-bit); y32, b: f32 (bias).
  tensor_desc x_desc_, y_desc_, y32_desc_, b_desc_;
  filter_desc w_desc_;
  conv_desc fwd_conv_, bwd_data_conv_, bwd_filter_conv_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  std::size_t fwd_ws_ = 0, bwd_data_ws_ = 0, bwd_filter_ws_ = 0, workspace_need_ = 0;
  // Algorithms chosen per input shape (and math policy).
  struct choice {
    shape input;
    math_mode mode = math_mode::tf32;
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t bwd_data{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
    cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
    std::size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
  };
  std::vector<choice> choices_;
};

}  // namespace

expected<built_unit> make_conv2d(context_impl& ctx, const layer_spec& s, const shape& in, rng& init,
                                 const std::string& prefix) {
  if (in.rank() != 3)
    return make_error(errc::invalid_argument, "conv2d " + s.name + ": input must be (C, H, W), got " +
                                                  in.to_string());
  if (s.out <= 0 || s.kernel <= 0 || s.stride <= 0 || s.padding < 0)
    return make_error(errc::invalid_argument, "conv2d " + s.name +
                                                  ": needs out > 0, kernel > 0, stride > 0, padding >= 0");
  const int64_t oh = (in[1] + 2 * s.padding - s.kernel) / s.stride + 1;
  const int64_t ow = (in[2] + 2 * s.padding - s.kernel) / s.stride + 1;
  if (oh <= 0 || ow <= 0)
    return make_error(errc::invalid_argument, "conv2d " + s.name + ": input " + in.to_string() +
                                                  " is smaller than its kernel");
  auto u = std::make_unique<conv2d_unit>(ctx, s, in[0], prefix);
  HF_RETURN_IF_ERROR(u->init(init));
  return built_unit{std::move(u), shape{s.out, oh, ow}};
}

}  // namespace hetflow::kernels::cuda
