#include "kernels/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.hpp"
#include "kernels/device_context.hpp"

namespace hetflow::kernels {
namespace {

// Where a step's change to each weight goes: nowhere (a plain step), added
// to d (d += after - before) or stored there (d = after - before): HetPipe's
// overlapped waves sum their steps in the step's own pass, with no copy of
// the weights before it.
enum class change_sink { none, add, store };
template <change_sink S> using sink_tag = std::integral_constant<change_sink, S>;

template <change_sink S> inline void put_change(float* __restrict d, int64_t j, float after, float before) {
  if constexpr (S == change_sink::add) d[j] += after - before;
  else if constexpr (S == change_sink::store) d[j] = after - before;
}

// The update loops: separate arrays (restrict) and no branches inside, so
// they vectorise (a fused select on `nesterov` kept GCC from it: 3x slower).
// d: the change's sink (unused with change_sink::none).
template <change_sink S>
void sgd_plain(float* __restrict w, const float* __restrict g, float* __restrict d, int64_t n, float lr, float wd) {
  for (int64_t j = 0; j < n; ++j) {
    const float o = w[j];
    const float x = o - lr * (g[j] + wd * o);
    w[j] = x;
    put_change<S>(d, j, x, o);
  }
}

template <change_sink S>
void sgd_momentum(float* __restrict w, const float* __restrict g, float* __restrict buf, float* __restrict d,
                  int64_t n, float lr, float mu, float wd) {
  for (int64_t j = 0; j < n; ++j) {
    const float o = w[j];
    const float v = mu * buf[j] + (g[j] + wd * o);
    buf[j] = v;
    const float x = o - lr * v;
    w[j] = x;
    put_change<S>(d, j, x, o);
  }
}

template <change_sink S>
void sgd_nesterov(float* __restrict w, const float* __restrict g, float* __restrict buf, float* __restrict d,
                  int64_t n, float lr, float mu, float wd) {
  for (int64_t j = 0; j < n; ++j) {
    const float o = w[j];
    const float e = g[j] + wd * o;
    const float v = mu * buf[j] + e;
    buf[j] = v;
    const float x = o - lr * (e + mu * v);
    w[j] = x;
    put_change<S>(d, j, x, o);
  }
}

template <change_sink S>
void adam_update(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v,
                 float* __restrict d, int64_t n, float step_size, float b1, float b2, float eps, float wd,
                 float inv_sqrt_bc2) {
  for (int64_t j = 0; j < n; ++j) {
    const float o = w[j];
    const float gj = g[j] + wd * o;
    const float mj = b1 * m[j] + (1.0f - b1) * gj;
    const float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
    m[j] = mj;
    v[j] = vj;
    const float x = o - step_size * mj / (std::sqrt(vj) * inv_sqrt_bc2 + eps);
    w[j] = x;
    put_change<S>(d, j, x, o);
  }
}

// Per-parameter optimizer buffers, created on the first step.
struct slot {
  state_tensor a, b;  // sgd: a = momentum buffer; adam: a = m, b = v
};

status check_params(std::span<parameter* const> params, std::vector<slot>& slots, bool two, const char* what) {
  if (slots.empty()) {
    slots.resize(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      const parameter& p = *params[i];
      slots[i].a.name = p.name + (two ? ".exp_avg" : ".momentum_buffer");
      slots[i].a.value = tensor::zeros(p.value.shape());
      if (two) {
        slots[i].b.name = p.name + ".exp_avg_sq";
        slots[i].b.value = tensor::zeros(p.value.shape());
      }
    }
  }
  if (slots.size() != params.size())
    return make_error(errc::invalid_argument, std::string(what) + ": parameter list changed between steps");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const parameter& p = *params[i];
    if (!(slots[i].a.value.shape() == p.value.shape()))
      return make_error(errc::invalid_argument, std::string(what) + ": parameter " + p.name + " changed shape");
    if (!p.sparse && p.grad.numel() != p.value.numel())
      return make_error(errc::invalid_argument, std::string(what) + ": parameter " + p.name + " has no gradient");
    if (p.sparse) {
      int64_t dim = p.value.shape().inner_numel();
      if (p.sparse_grad.values.numel() < int64_t(p.sparse_grad.rows.size()) * dim)
        return make_error(errc::invalid_argument, std::string(what) + ": sparse gradient of " + p.name + " is short");
      for (int64_t r : p.sparse_grad.rows)
        if (r < 0 || r >= p.value.shape()[0])
          return make_error(errc::invalid_argument, std::string(what) + ": sparse gradient row " +
                                                        std::to_string(r) + " outside " + p.name);
    }
  }
  return {};
}

// Applies `update(w, g, a, b, n)` to the whole parameter (dense) or to each
// touched row (sparse), in parallel chunks.
template <class Update> void for_each_segment(parameter& p, slot& s, Update&& update) {
  float* w = p.value.f32();
  float* a = s.a.value.f32();
  float* b = s.b.value.empty() ? nullptr : s.b.value.f32();
  if (!p.sparse) {
    const float* g = p.grad.f32();
    cpu::parallel_elements(p.value.numel(), [&](int64_t lo, int64_t hi) {
      update(w + lo, g + lo, a + lo, b ? b + lo : nullptr, hi - lo);
    });
    return;
  }
  const int64_t dim = p.value.shape().inner_numel();
  const auto& rows = p.sparse_grad.rows;
  const float* g = p.sparse_grad.values.f32();
  cpu::parallel_range(int64_t(rows.size()), std::max<int64_t>(1, cpu::serial_elements / dim),
                      [&](int64_t lo, int64_t hi) {
                        for (int64_t i = lo; i < hi; ++i) {
                          int64_t off = rows[std::size_t(i)] * dim;
                          update(w + off, g + i * dim, a + off, b ? b + off : nullptr, dim);
                        }
                      });
}

// Runs `update(tag, w, g, a, b, d, n)` over parameter p: a plain step
// (change_sink::none) without `sum`; with it, the change of each weight
// added to `sum` (add) or stored there, in the same pass over a dense
// parameter; a sparse one is copied before its rows' plain update and
// differenced after it.
template <class Update> void update_summed(parameter& p, slot& s, float* sum, bool add, Update&& update) {
  auto plain = [&](float* w, const float* g, float* a, float* b, int64_t n) {
    update(sink_tag<change_sink::none>{}, w, g, a, b, nullptr, n);
  };
  if (!sum) {
    for_each_segment(p, s, plain);
    return;
  }
  const int64_t n = p.value.numel();
  float* w = p.value.f32();
  if (p.sparse) {
    std::vector<float> before(w, w + n);
    for_each_segment(p, s, plain);
    cpu::parallel_elements(n, [&](int64_t lo, int64_t hi) {
      if (add)
        for (int64_t k = lo; k < hi; ++k) sum[k] += w[k] - before[std::size_t(k)];
      else
        for (int64_t k = lo; k < hi; ++k) sum[k] = w[k] - before[std::size_t(k)];
    });
    return;
  }
  const float* g = p.grad.f32();
  float* a = s.a.value.f32();
  float* b = s.b.value.empty() ? nullptr : s.b.value.f32();
  cpu::parallel_elements(n, [&](int64_t lo, int64_t hi) {
    if (add) update(sink_tag<change_sink::add>{}, w + lo, g + lo, a + lo, b ? b + lo : nullptr, sum + lo, hi - lo);
    else update(sink_tag<change_sink::store>{}, w + lo, g + lo, a + lo, b ? b + lo : nullptr, sum + lo, hi - lo);
  });
}

status check_sums(std::span<parameter* const> params, std::span<float* const> sums, const char* what) {
  if (sums.size() != params.size())
    return make_error(errc::invalid_argument, std::string(what) + ": " + std::to_string(sums.size()) +
                                                  " sums for " + std::to_string(params.size()) + " parameters");
  for (std::size_t i = 0; i < sums.size(); ++i)
    if (!sums[i]) return make_error(errc::invalid_argument, std::string(what) + ": no sum for " + params[i]->name);
  return {};
}

// The cpu optimizers: step() and step_summed() are one update rule's run().
class cpu_optimizer : public optimizer {
public:
  status step(std::span<parameter* const> params, double lr) final { return run(params, lr, {}, true); }
  status step_summed(std::span<parameter* const> params, double lr, std::span<float* const> sums,
                     bool add) final {
    HF_RETURN_IF_ERROR(check_sums(params, sums, what()));
    return run(params, lr, sums, add);
  }

protected:
  // sums empty: a plain step.
  virtual status run(std::span<parameter* const> params, double lr, std::span<float* const> sums, bool add) = 0;
  virtual const char* what() const noexcept = 0;
};

class sgd final : public cpu_optimizer {
public:
  explicit sgd(const optimizer_config& c) : c_(c) {}

  std::vector<state_tensor*> state() override {
    std::vector<state_tensor*> out;
    if (c_.momentum != 0.0)
      for (auto& s : slots_) out.push_back(&s.a);
    return out;
  }

private:
  const char* what() const noexcept override { return "sgd"; }
  status run(std::span<parameter* const> params, double lr_d, std::span<float* const> sums, bool add) override {
    HF_RETURN_IF_ERROR(check_params(params, slots_, false, "sgd"));
    const float lr = float(lr_d), mu = float(c_.momentum), wd = float(c_.weight_decay);
    const bool nesterov = c_.nesterov;
    for (std::size_t i = 0; i < params.size(); ++i) {
      parameter& p = *params[i];
      // Buffers start at zero, so mu*buf + d is PyTorch's "buf = d" on the
      // first step, and lazily so for sparse rows first touched later.
      update_summed(p, slots_[i], sums.empty() ? nullptr : sums[i], add,
                    [=](auto tag, float* w, const float* g, float* buf, float*, float* d, int64_t n) {
                      constexpr change_sink S = decltype(tag)::value;
                      if (mu == 0.0f) sgd_plain<S>(w, g, d, n, lr, wd);
                      else if (nesterov) sgd_nesterov<S>(w, g, buf, d, n, lr, mu, wd);
                      else sgd_momentum<S>(w, g, buf, d, n, lr, mu, wd);
                    });
      ++p.version;
    }
    ++steps_;
    return {};
  }

  optimizer_config c_;
  std::vector<slot> slots_;
};

class adam final : public cpu_optimizer {
public:
  explicit adam(const optimizer_config& c) : c_(c) {}

  std::vector<state_tensor*> state() override {
    std::vector<state_tensor*> out;
    for (auto& s : slots_) {
      out.push_back(&s.a);
      out.push_back(&s.b);
    }
    return out;
  }

private:
  const char* what() const noexcept override { return "adam"; }
  status run(std::span<parameter* const> params, double lr_d, std::span<float* const> sums, bool add) override {
    HF_RETURN_IF_ERROR(check_params(params, slots_, true, "adam"));
    const int64_t t = steps_ + 1;
    const float b1 = float(c_.beta1), b2 = float(c_.beta2), eps = float(c_.eps), wd = float(c_.weight_decay);
    const float bc1 = float(1.0 - std::pow(c_.beta1, double(t)));
    const float bc2 = float(1.0 - std::pow(c_.beta2, double(t)));
    const float step_size = float(lr_d) / bc1;
    const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
    for (std::size_t i = 0; i < params.size(); ++i) {
      parameter& p = *params[i];
      update_summed(p, slots_[i], sums.empty() ? nullptr : sums[i], add,
                    [=](auto tag, float* w, const float* g, float* m, float* v, float* d, int64_t n) {
                      adam_update<decltype(tag)::value>(w, g, m, v, d, n, step_size, b1, b2, eps, wd, inv_sqrt_bc2);
                    });
      ++p.version;
    }
    ++steps_;
    return {};
  }

  optimizer_config c_;
  std::vector<slot> slots_;
};

}  // namespace

status restore_optimizer(optimizer& opt, optimizer_kind kind, std::span<parameter* const> params, int64_t steps,
                         std::span<const tensor> state, std::span<const std::string> names, const std::string& where,
                         device_context* device) {
  if (steps <= 0 || state.empty()) return {};
  // Zero gradients, in place when the buffer fits: it may be registered
  // somewhere (a cuda replica's page-locked host copy), so it stays the same
  // memory.
  const auto memory = device != nullptr ? device->memory() : nullptr;  // null: host
  for (parameter* p : params) {
    if (p->sparse) {
      p->sparse_grad = {};
      continue;
    }
    if (p->grad.empty() || !(p->grad.shape() == p->value.shape()))
      p->grad = memory ? tensor::empty_on(memory, p->value.shape()) : tensor::empty(p->value.shape());
    if (memory) {
      HF_RETURN_IF_ERROR(memory->zero(p->grad.mutable_view().raw(), p->grad.byte_size()));
    } else {
      auto g = p->grad.f32_span();
      std::fill(g.begin(), g.end(), 0.0f);
    }
  }
  const int64_t primes = kind == optimizer_kind::adam ? steps : 1;
  for (int64_t i = 0; i < primes; ++i) HF_RETURN_IF_ERROR(opt.step(params, 0.0));
  auto st = opt.state();
  if (st.size() != state.size())
    return make_error(errc::invalid_argument, where + ": " + std::to_string(state.size()) +
                                                  " optimizer state tensors, the optimizer has " +
                                                  std::to_string(st.size()) + " (optimizer changed?)");
  for (std::size_t i = 0; i < st.size(); ++i) {
    const tensor& t = state[i];
    if (!(t.shape() == st[i]->value.shape()))
      return make_error(errc::invalid_argument, where + ": optimizer state " +
                                                    (i < names.size() ? names[i] : std::to_string(i)) +
                                                    " has shape " + t.shape().to_string() + ", here " +
                                                    st[i]->value.shape().to_string());
    HF_RETURN_IF_ERROR(device != nullptr ? device->copy(t.view(), st[i]->value.mutable_view())
                                         : copy_into(t.view(), st[i]->value.mutable_view()));
  }
  return {};
}

expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& c) {
  if (!(c.lr >= 0.0) || !(c.weight_decay >= 0.0))
    return make_error(errc::invalid_argument, "optimizer: lr and weight_decay must be >= 0");
  if (c.kind == optimizer_kind::sgd) {
    if (!(c.momentum >= 0.0 && c.momentum < 1.0))
      return make_error(errc::invalid_argument, "sgd: momentum must be in [0, 1)");
    if (c.nesterov && c.momentum == 0.0)
      return make_error(errc::invalid_argument, "sgd: nesterov needs momentum > 0");
    return std::unique_ptr<optimizer>(std::make_unique<sgd>(c));
  }
  if (!(c.beta1 >= 0.0 && c.beta1 < 1.0) || !(c.beta2 >= 0.0 && c.beta2 < 1.0) || !(c.eps > 0.0))
    return make_error(errc::invalid_argument, "adam: betas must be in [0, 1) and eps > 0");
  return std::unique_ptr<optimizer>(std::make_unique<adam>(c));
}

}  // namespace hetflow::kernels
