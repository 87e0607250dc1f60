// optimizer.hpp's SGD (momentum, Nesterov, weight decay) and Adam on the
// device: one kernel launch per parameter (dense) or per sparse gradient
// (the touched rows of an embedding table, uploaded each step). State
// tensors (momentum buffers, Adam moments) live on the device, named like
// the cpu optimizer's.
#include <cmath>

#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

struct slot {
  state_tensor a, b;  // sgd: a = momentum buffer; adam: a = m, b = v
  tensor rows;        // sparse: this step's rows on the device
};

class device_optimizer final : public optimizer {
public:
  device_optimizer(context_impl& ctx, const optimizer_config& c) : ctx_(ctx), c_(c) {}

  status step(std::span<parameter* const> params, double lr_d) override {
    HF_RETURN_IF_ERROR(ctx_.activate());
    const bool adam = c_.kind == optimizer_kind::adam;
    const char* what = adam ? "adam" : "sgd";
    HF_RETURN_IF_ERROR(sized(ctx_, what, [&] { return check(params, adam, what); }));
    const float lr = float(lr_d), wd = float(c_.weight_decay);
    const int64_t t = steps_ + 1;
    const float b1 = float(c_.beta1), b2 = float(c_.beta2), eps = float(c_.eps);
    const float bc1 = float(1.0 - std::pow(c_.beta1, double(t)));
    const float bc2 = float(1.0 - std::pow(c_.beta2, double(t)));
    const float step_size = lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
    const float mu = float(c_.momentum);
    cudaStream_t s = ctx_.stream();
    for (std::size_t i = 0; i < params.size(); ++i) {
      parameter& p = *params[i];
      slot& sl = slots_[i];
      float* w = p.value.f32();
      float* a = sl.a.value.f32();
      float* b = adam ? sl.b.value.f32() : nullptr;
      if (!p.sparse) {
        const int64_t n = p.value.numel();
        if (adam) HF_CUDA_CHECK(ops::adam_update(w, p.grad.f32(), a, b, n, step_size, b1, b2, eps, wd, inv_sqrt_bc2, s));
        else HF_CUDA_CHECK(ops::sgd_update(w, p.grad.f32(), mu == 0.0f ? nullptr : a, n, lr, mu, wd, c_.nesterov, s));
      } else if (!p.sparse_grad.rows.empty()) {
        const auto& rows = p.sparse_grad.rows;
        const int64_t dim = p.value.shape().inner_numel(), count = int64_t(rows.size());
        HF_RETURN_IF_ERROR(ctx_.upload(rows.data(), rows.size() * sizeof(int64_t), sl.rows, dtype::i64, count));
        const int64_t* r = sl.rows.data<int64_t>();
        const float* g = p.sparse_grad.values.f32();
        if (adam)
          HF_CUDA_CHECK(ops::adam_sparse_update(w, g, a, b, r, count, dim, step_size, b1, b2, eps, wd, inv_sqrt_bc2, s));
        else
          HF_CUDA_CHECK(ops::sgd_sparse_update(w, g, mu == 0.0f ? nullptr : a, r, count, dim, lr, mu, wd,
                                               c_.nesterov, s));
      }
      ++p.version;
    }
    ++steps_;
    return {};
  }

  std::vector<state_tensor*> state() override {
    std::vector<state_tensor*> out;
    const bool adam = c_.kind == optimizer_kind::adam;
    if (!adam && c_.momentum == 0.0) return out;
    for (auto& s : slots_) {
      out.push_back(&s.a);
      if (adam) out.push_back(&s.b);
    }
    return out;
  }

private:
  status check(std::span<parameter* const> params, bool two, const char* what) {
    if (slots_.empty()) {
      slots_.resize(params.size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        const parameter& p = *params[i];
        HF_RETURN_IF_ERROR(ctx_.check_here(p.value, std::string(what) + ": parameter " + p.name));
        slots_[i].a.name = p.name + (two ? ".exp_avg" : ".momentum_buffer");
        slots_[i].a.value = tensor::zeros_on(ctx_.device_memory(), p.value.shape());
        if (two) {
          slots_[i].b.name = p.name + ".exp_avg_sq";
          slots_[i].b.value = tensor::zeros_on(ctx_.device_memory(), p.value.shape());
        }
      }
    }
    if (slots_.size() != params.size())
      return make_error(errc::invalid_argument, std::string(what) + ": parameter list changed between steps");
    for (std::size_t i = 0; i < params.size(); ++i) {
      const parameter& p = *params[i];
      if (!(slots_[i].a.value.shape() == p.value.shape()))
        return make_error(errc::invalid_argument, std::string(what) + ": parameter " + p.name + " changed shape");
      HF_RETURN_IF_ERROR(ctx_.check_here(p.value, std::string(what) + ": parameter " + p.name));
      if (!p.sparse) {
        if (p.grad.numel() != p.value.numel())
          return make_error(errc::invalid_argument, std::string(what) + ": parameter " + p.name + " has no gradient");
        HF_RETURN_IF_ERROR(ctx_.check_here(p.grad, std::string(what) + ": gradient of " + p.name));
        continue;
      }
      const int64_t dim = p.value.shape().inner_numel();
      if (p.sparse_grad.rows.empty()) continue;
      if (p.sparse_grad.values.numel() < int64_t(p.sparse_grad.rows.size()) * dim)
        return make_error(errc::invalid_argument, std::string(what) + ": sparse gradient of " + p.name + " is short");
      HF_RETURN_IF_ERROR(ctx_.check_here(p.sparse_grad.values, std::string(what) + ": gradient of " + p.name));
      for (int64_t r : p.sparse_grad.rows)
        if (r < 0 || r >= p.value.shape()[0])
          return make_error(errc::invalid_argument, std::string(what) + ": sparse gradient row " + std::to_string(r) +
                                                        " outside " + p.name);
    }
    return {};
  }

  context_impl& ctx_;
  optimizer_config c_;
  std::vector<slot> slots_;
};

}  // namespace

expected<std::unique_ptr<optimizer>> context_impl::make_optimizer(const optimizer_config& c) {
  // The same checks as kernels::make_optimizer.
  if (!(c.lr >= 0.0) || !(c.weight_decay >= 0.0))
    return make_error(errc::invalid_argument, "optimizer: lr and weight_decay must be >= 0");
  if (c.kind == optimizer_kind::sgd) {
    if (!(c.momentum >= 0.0 && c.momentum < 1.0))
      return make_error(errc::invalid_argument, "sgd: momentum must be in [0, 1)");
    if (c.nesterov && c.momentum == 0.0) return make_error(errc::invalid_argument, "sgd: nesterov needs momentum > 0");
  } else if (!(c.beta1 >= 0.0 && c.beta1 < 1.0) || !(c.beta2 >= 0.0 && c.beta2 < 1.0) || !(c.eps > 0.0)) {
    return make_error(errc::invalid_argument, "adam: betas must be in [0, 1) and eps > 0");
  }
  return std::unique_ptr<optimizer>(std::make_unique<device_optimizer>(*this, c));
}

}  // namespace hetflow::kernels::cuda
