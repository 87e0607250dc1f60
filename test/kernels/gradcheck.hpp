// Finite-difference gradient checks for units and functions (test helper).
//
// The loss is L = sum_j r_j * y_j with fixed random r, accumulated in double.
// Central differences in f32 with eps = 1e-2: outputs that a perturbation
// does not touch are recomputed bit-identically (oneDNN and our loops are
// deterministic for a fixed shape and thread count), so only the touched
// outputs carry rounding error.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/unit_factory.hpp"
#include "kernels/random.hpp"
#include "kernels/tensor.hpp"
#include "kernels/unit.hpp"

namespace hetflow::kernels::testing {

struct fd_options {
  float eps = 1e-2f;
  double atol = 2e-3;
  double rtol = 2e-2;
  // Fraction of checked elements allowed to disagree: only for units with a
  // fused ReLU, where a perturbation can cross the kink. 0 everywhere else.
  double max_outlier_fraction = 0.0;
  int max_checks = 120;  // per tensor; elements are sampled when larger
};

struct fd_stats {
  int checked = 0;
  int outliers = 0;
  double worst = 0.0;  // largest |num - ana| / (atol + rtol |ana|)
  std::string first_bad;
};

inline void fill_normal(tensor& t, uint64_t seed, float scale = 1.0f) {
  rng r(seed);
  for (float& v : t.f32_span()) v = scale * r.normal();
}

inline double dot(tensor_view y, const tensor& r) {
  double s = 0.0;
  const float* a = y.f32();
  const float* b = r.f32();
  for (int64_t i = 0; i < y.numel(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Compares numeric d loss / d values[i] (via `loss`, which must recompute
// from `values`) with analytic[i] on a sample of indices.
inline void compare(const std::string& what, float* values, const float* analytic, int64_t n,
                    const std::function<double()>& loss, const std::function<void()>& touched,
                    const fd_options& o, fd_stats& st, uint64_t seed = 3) {
  std::vector<int64_t> idx;
  if (n <= o.max_checks) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    rng r(seed);
    for (int k = 0; k < o.max_checks; ++k) idx.push_back(int64_t(r.below(uint64_t(n))));
  }
  for (int64_t i : idx) {
    const float keep = values[i];
    values[i] = keep + o.eps;
    touched();
    double lp = loss();
    values[i] = keep - o.eps;
    touched();
    double lm = loss();
    values[i] = keep;
    touched();
    double num = (lp - lm) / (2.0 * double(o.eps));
    double ana = analytic[i];
    double ratio = std::fabs(num - ana) / (o.atol + o.rtol * std::fabs(ana));
    ++st.checked;
    st.worst = std::max(st.worst, ratio);
    if (ratio > 1.0) {
      ++st.outliers;
      if (st.first_bad.empty())
        st.first_bad = what + "[" + std::to_string(i) + "]: numeric " + std::to_string(num) + " analytic " +
                       std::to_string(ana);
    }
  }
}

inline void require_ok(const std::string& name, const fd_stats& st, const fd_options& o) {
  BOOST_TEST_MESSAGE(name << ": checked " << st.checked << ", outliers " << st.outliers << ", worst ratio "
                          << st.worst);
  BOOST_REQUIRE_GT(st.checked, 0);
  BOOST_CHECK_MESSAGE(double(st.outliers) <= o.max_outlier_fraction * st.checked,
                      name << ": " << st.outliers << "/" << st.checked << " gradient mismatches; first: " << st.first_bad);
}

// Checks the input gradient (when need_input_grad) and every dense parameter
// gradient of `u` at input x.
inline fd_stats check_unit(unit& u, tensor& x, mode m, const fd_options& o = {}, bool need_input_grad = true,
                           uint64_t seed = 11) {
  auto out_shape = u.prepare(x.shape());
  BOOST_REQUIRE_MESSAGE(out_shape.has_value(), out_shape.error().to_string());
  tensor r = tensor::empty(*out_shape);
  fill_normal(r, seed);
  auto run_loss = [&]() -> double {
    u.set_seed(seed);
    auto y = u.forward(x.view(), m);
    BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
    return dot(*y, r);
  };
  u.set_seed(seed);
  auto y = u.forward(x.view(), m);
  BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
  BOOST_REQUIRE(y->shape() == *out_shape);
  auto dx = u.backward(r.view(), need_input_grad);
  BOOST_REQUIRE_MESSAGE(dx.has_value(), dx.error().to_string());
  fd_stats st;
  std::vector<parameter*> params;
  u.parameters(params);
  // Copy analytic gradients first: the FD forwards do not touch them, but be safe.
  std::vector<tensor> grads;
  for (parameter* p : params) grads.push_back(p->sparse ? tensor{} : p->grad.clone());
  if (need_input_grad) {
    BOOST_REQUIRE(!dx->empty());
    BOOST_REQUIRE(dx->shape() == x.shape());
    tensor ana = tensor::from(*dx);
    compare(u.name() + " input", x.f32(), ana.f32(), x.numel(), run_loss, [] {}, o, st);
  } else {
    BOOST_CHECK(dx->empty());
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    parameter* p = params[k];
    if (p->sparse) continue;
    compare(p->name, p->value.f32(), grads[k].f32(), p->value.numel(), run_loss, [p] { ++p->version; }, o, st);
  }
  return st;
}

// The cpu units under test: built on one 2-thread context, inputs drawn
// from N(0, 1).
inline cpu::cpu_context& test_context() {
  static cpu::cpu_context c(2);
  return c;
}

inline std::unique_ptr<unit> build_cpu_unit(const layer_spec& s, const shape& sample, uint64_t seed = 5) {
  rng init(seed);
  auto b = cpu::make_unit(test_context(), s, sample, init);
  BOOST_REQUIRE_MESSAGE(b.has_value(), b.error().to_string());
  return std::move(b->u);
}

inline tensor random_input(const shape& s, uint64_t seed = 9) {
  tensor x = tensor::empty(s);
  fill_normal(x, seed);
  return x;
}

}  // namespace hetflow::kernels::testing
