// Helpers for the CUDA test suites (label gpu): skipping without a device,
// one shared context, host <-> device copies and closeness checks.
//
// A suite's main() calls run_or_skip(): without a usable CUDA device it
// prints why and exits 77, which CTest reports as Skipped (SKIP_RETURN_CODE).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/device_context.hpp"
#include "kernels/random.hpp"
#include "kernels/tensor.hpp"

namespace hetflow::kernels::testing {

inline int run_or_skip(int argc, char** argv) {
  auto ctx = make_cuda_context(0);
  if (!ctx) {
    std::printf("SKIP: no usable CUDA device: %s\n", ctx.error().to_string().c_str());
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

// One context for the suite: full f32 convolutions (TF32 off) so cpu and
// cuda agree to float rounding.
inline cuda::context& gpu() {
  static std::shared_ptr<cuda::context> c = [] {
    auto r = make_cuda_context(0);
    BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
    (*r)->set_tf32(false);
    return *r;
  }();
  return *c;
}

inline tensor to_gpu(tensor_view host) {
  auto t = copy_to_device(gpu(), host);
  BOOST_REQUIRE_MESSAGE(t.has_value(), t.error().to_string());
  return std::move(*t);
}

inline tensor to_cpu(tensor_view v) {
  if (v.where().kind == device_kind::cpu) return tensor::from(v);
  auto t = copy_to_host(gpu(), v);
  BOOST_REQUIRE_MESSAGE(t.has_value(), t.error().to_string());
  return std::move(*t);
}

inline void fill_normal_host(tensor& t, uint64_t seed, float scale = 1.0f) {
  rng r(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * r.normal();
}

inline tensor normal_host(const shape& s, uint64_t seed, float scale = 1.0f) {
  tensor t = tensor::empty(s);
  fill_normal_host(t, seed, scale);
  return t;
}

// Worst |a - b| / (atol + rtol |a|) over all elements must be <= 1; `a` is
// the cpu reference. Both views may live anywhere.
inline void check_close(const std::string& what, tensor_view a, tensor_view b, double atol = 1e-4,
                        double rtol = 1e-3) {
  BOOST_REQUIRE_MESSAGE(a.numel() == b.numel(), what << ": " << a.shape().to_string() << " vs "
                                                     << b.shape().to_string());
  tensor ha = to_cpu(a), hb = to_cpu(b);
  double worst = 0.0;
  int64_t at = -1;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double x = ha.f32()[i], y = hb.f32()[i];
    // Equal values pass even with zero tolerance (0 / 0 would be NaN); a
    // NaN on either side still fails.
    const double d = std::fabs(x - y);
    const double r = d == 0.0 ? 0.0 : d / (atol + rtol * std::fabs(x));
    if (!(r <= worst)) {  // also catches NaN
      worst = r;
      at = i;
    }
  }
  BOOST_TEST_MESSAGE(what << ": worst error " << worst << "x tolerance");
  BOOST_CHECK_MESSAGE(worst <= 1.0, what << ": worst error " << worst << "x tolerance at element " << at
                                         << " (cpu " << (at >= 0 ? ha.f32()[at] : 0.0f) << ", cuda "
                                         << (at >= 0 ? hb.f32()[at] : 0.0f) << ")");
}

// Worst |a - b| over all elements, and the largest |a|; `a` is the reference.
inline std::pair<double, double> max_difference(tensor_view a, tensor_view b) {
  tensor ha = to_cpu(a), hb = to_cpu(b);
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double d = std::fabs(double(ha.f32()[i]) - double(hb.f32()[i]));
    if (!(d <= diff)) diff = d;  // NaN sticks
    scale = std::max(scale, std::fabs(double(ha.f32()[i])));
  }
  return {diff, scale};
}

// For reduced-precision math: every |a - b| <= frac * max |a|.
inline void check_close_scaled(const std::string& what, tensor_view a, tensor_view b, double frac) {
  BOOST_REQUIRE_MESSAGE(a.numel() == b.numel(), what << ": " << a.shape().to_string() << " vs "
                                                     << b.shape().to_string());
  auto [diff, scale] = max_difference(a, b);
  BOOST_TEST_MESSAGE(what << ": worst difference " << diff << " of max " << scale);
  BOOST_CHECK_MESSAGE(diff <= frac * scale, what << ": worst difference " << diff << " above " << frac
                                                 << " x max |reference| " << scale);
}

}  // namespace hetflow::kernels::testing
