// linear on cuBLAS (f32 activations and weights; in math modes bf16 and f16
// the products run on 16-bit copies, on tensor cores): y = x W^T + b with W in PyTorch's (out, in)
// layout, then our bias (+ ReLU) epilogue. Row-major buffers are read by
// column-major cuBLAS as their transposes:
//
//   y^T (out, N)  = W (in, out)^T . x^T (in, N)      sgemm(T, N, out, N, in)
//   dW^T (in, out) = x^T (in, N) . dpre (N, out)      sgemm(N, T, in, out, N)
//   dx^T (in, N)  = W^T... i.e. W(in,out) . dpre^T    sgemm(N, N, in, N, out)
//   db (out)      = dpre^T (out, N) . ones (N)        sgemv(N, out, N)
#include <cmath>

#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

// C (f32) = op(A) op(B), column-major as cublasSgemm. f32 and tf32: f32
// A and B, full f32 math (PyTorch's default for matmuls). bf16 and f16: A
// and B are 16-bit copies (the unit converts), on tensor cores with f32
// accumulation.
status gemm(context_impl& ctx, math_mode mode, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
            const void* a, int lda, const void* b, int ldb, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  if (mode == math_mode::f32 || mode == math_mode::tf32) {
    HF_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), ta, tb, m, n, k, &one, static_cast<const float*>(a), lda,
                                static_cast<const float*>(b), ldb, &zero, c, ldc));
    return {};
  }
  const cudaDataType_t t = mode == math_mode::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  HF_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), ta, tb, m, n, k, &one, a, t, lda, b, t, ldb, &zero, c, CUDA_R_32F, ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

bool is_16bit(math_mode m) { return m == math_mode::bf16 || m == math_mode::f16; }

class linear_unit final : public unit {
public:
  linear_unit(context_impl& ctx, const layer_spec& s, int64_t in, const std::string& prefix)
      : unit(prefix + s.name), ctx_(ctx), in_(in), out_(s.out), has_bias_(s.bias), relu_(s.relu) {
    weight_.name = name() + ".weight";
    weight_.value = ctx.make_tensor({out_, in_});
    weight_.grad = ctx.make_tensor({out_, in_});
    if (has_bias_) {
      bias_.name = name() + ".bias";
      bias_.value = ctx.make_tensor({out_});
      bias_.grad = ctx.make_tensor({out_});
    }
  }

  status init(rng& init) {
    const float bound = 1.0f / std::sqrt(float(in_));
    HF_RETURN_IF_ERROR(init_uniform(ctx_, weight_.value, bound, init));
    weight_.grad.zero();
    if (has_bias_) {
      HF_RETURN_IF_ERROR(init_uniform(ctx_, bias_.value, bound, init));
      bias_.grad.zero();
    }
    return {};
  }

  layer_kind kind() const noexcept override { return layer_kind::linear; }

  expected<shape> prepare(const shape& input) override {
    if (input.rank() < 2 || input.inner_numel() != in_)
      return make_error(errc::invalid_argument, "linear " + name() + ": expects (N, " + std::to_string(in_) +
                                                    ") input, got " + input.to_string());
    shape out_shape{input[0], out_};
    if (prepared_ && input == in_shape_) return out_shape;
    prepared_ = false;
    HF_RETURN_IF_ERROR(sized(ctx_, "linear " + name(), [&]() -> status {
      HF_RETURN_IF_ERROR(ctx_.activate());
      ensure(ctx_, y_, out_shape);
      ensure(ctx_, dx_, input);
      if (relu_) ensure(ctx_, dpre_, out_shape);
      if (is_16bit(ctx_.math())) {
        const dtype t = ctx_.math() == math_mode::bf16 ? dtype::bf16 : dtype::f16;
        ensure(ctx_, x16_, input, t);
        ensure(ctx_, w16_, weight_.value.shape(), t);
        ensure(ctx_, g16_, out_shape, t);
      }
      if (has_bias_) {
        auto ones = ctx_.ones(input[0]);
        if (!ones) return ones.error();
      }
      return {};
    }));
    in_shape_ = input;
    math_ = ctx_.math();  // as conv2d: the mode when the shape is prepared
    prepared_ = true;
    return out_shape;
  }

  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!prepared_ || x.shape() != in_shape_) {
      auto s = prepare(x.shape());
      if (!s) return s.error();
    }
    HF_RETURN_IF_ERROR(in_unit(do_forward(x), "linear", name()));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    auto r = do_backward(dy, need_input_grad);
    if (!r) return in_unit(r.error(), "linear", name());
    return r;
  }

  void parameters(std::vector<parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  uint64_t activation_bytes() const override {
    return y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0) + x16_.byte_size() +
           w16_.byte_size() + g16_.byte_size();
  }

private:
  status do_forward(tensor_view x) {
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "input"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    x_ = x;
    const int n = int(in_shape_[0]), in = int(in_), out = int(out_);
    const void* w = weight_.value.f32();
    const void* xs = x.f32();
    if (is_16bit(math_)) {
      // 16-bit copies of x and W, kept for backward.
      const bool bf16 = math_ == math_mode::bf16;
      HF_CUDA_CHECK(ops::to_16bit(x.f32(), x16_.bytes(), x.numel(), bf16, ctx_.stream()));
      HF_CUDA_CHECK(ops::to_16bit(weight_.value.f32(), w16_.bytes(), weight_.value.numel(), bf16, ctx_.stream()));
      w = w16_.bytes();
      xs = x16_.bytes();
    }
    HF_RETURN_IF_ERROR(gemm(ctx_, math_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, xs, in, y_.f32(), out));
    HF_CUDA_CHECK(ops::bias_relu(y_.f32(), has_bias_ ? bias_.value.f32() : nullptr, y_.numel(), out_, 1, relu_,
                                 ctx_.stream()));
    return {};
  }

  expected<tensor_view> do_backward(tensor_view dy, bool need_input_grad) {
    HF_RETURN_IF_ERROR(ctx_.activate());
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu(ctx_, "linear", name(), dy, y_, relu_, dpre_));
    const int n = int(in_shape_[0]), in = int(in_), out = int(out_);
    const float one = 1.0f, zero = 0.0f;
    const void* xs = x_.f32();
    const void* gs = g.f32();
    const void* w = weight_.value.f32();
    if (is_16bit(math_)) {
      HF_CUDA_CHECK(ops::to_16bit(g.f32(), g16_.bytes(), g.numel(), math_ == math_mode::bf16, ctx_.stream()));
      xs = x16_.bytes();
      gs = g16_.bytes();
      w = w16_.bytes();
    }
    HF_RETURN_IF_ERROR(gemm(ctx_, math_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, xs, in, gs, out, weight_.grad.f32(), in));
    if (has_bias_) {
      HF_ASSIGN_OR_RETURN(const float* ones, ctx_.ones(n));
      HF_CUBLAS_CHECK(cublasSgemv(ctx_.cublas(), CUBLAS_OP_N, out, n, &one, g.f32(), out, ones, 1, &zero,
                                  bias_.grad.f32(), 1));
    }
    if (!need_input_grad) return tensor_view{};
    HF_RETURN_IF_ERROR(gemm(ctx_, math_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, gs, out, dx_.f32(), in));
    return dx_.view();
  }

  context_impl& ctx_;
  math_mode math_ = math_mode::tf32;
  int64_t in_, out_;
  bool has_bias_, relu_;
  parameter weight_, bias_;
  bool prepared_ = false;
  shape in_shape_;
  tensor y_, dx_, dpre_;
  tensor_view x_;
  tensor x16_, w16_, g16_;  // math modes bf16 and f16: 16-bit copies of x, W and the gradient
};

}  // namespace

expected<built_unit> make_linear(context_impl& ctx, const layer_spec& s, const shape& in, rng& init,
                                 const std::string& prefix) {
  if (s.out <= 0) return make_error(errc::invalid_argument, "linear " + s.name + ": out features must be > 0");
  const int64_t features = in.numel();
  if (features > INT32_MAX || s.out > INT32_MAX)
    return make_error(errc::unsupported, "linear " + s.name + ": more than 2^31 features (cuBLAS int sizes)");
  auto u = std::make_unique<linear_unit>(ctx, s, features, prefix);
  HF_RETURN_IF_ERROR(u->init(init));
  return built_unit{std::move(u), shape{s.out}};
}

}  // namespace hetflow::kernels::cuda
