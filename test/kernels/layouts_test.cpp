// The cpu units that reorder their data into oneDNN's blocked layouts
// (pooling and batch norm: nChw16c on AVX-512, nChw8c on AVX2, NHWC else;
// kernels/cpu/pool.cpp, batch_norm.cpp; and pool.cpp's own max pooling over
// non-overlapping windows) at channel counts that take those
// layouts (8, 16, 24, 32) and at ones that cannot (3, 12): the output equals
// straightforward loops over NCHW, and the gradients pass finite
// differences. (gradcheck_test's cases use 2-6 channels: plain NCHW only.)
#define BOOST_TEST_MODULE kernels_layouts
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gradcheck.hpp"
#include "kernels/cpu/units.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::testing;

namespace {

const int64_t channel_counts[] = {3, 8, 12, 16, 24, 32};

// Pooling over NCHW by loops: max ignores the padding, avg divides by k * k.
tensor reference_pool(const tensor& x, bool max, int64_t k, int64_t stride, int64_t pad) {
  const shape& s = x.shape();
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  tensor y = tensor::empty({n, c, oh, ow});
  for (int64_t i = 0; i < n * c; ++i)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        float acc = max ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t a = 0; a < k; ++a)
          for (int64_t b = 0; b < k; ++b) {
            const int64_t ih = r * stride - pad + a, iw = q * stride - pad + b;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const float v = x.f32()[(i * h + ih) * w + iw];
            acc = max ? std::max(acc, v) : acc + v;
          }
        y.f32()[(i * oh + r) * ow + q] = max ? acc : acc / float(k * k);
      }
  return y;
}

// Batch norm over NCHW by loops: batch statistics (biased variance) in
// training, the given mean and variance in eval; then scale and shift.
tensor reference_batch_norm(const tensor& x, const float* scale, const float* shift, const float* mean_in,
                            const float* var_in, bool relu) {
  const shape& s = x.shape();
  const int64_t n = s[0], c = s[1], hw = s[2] * s[3];
  tensor y = tensor::empty(s);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (mean_in) {
      mean = mean_in[ch];
      var = var_in[ch];
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < hw; ++p) mean += x.f32()[(i * c + ch) * hw + p];
      mean /= double(n * hw);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < hw; ++p) {
          const double d = x.f32()[(i * c + ch) * hw + p] - mean;
          var += d * d;
        }
      var /= double(n * hw);
    }
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t at = (i * c + ch) * hw + p;
        double v = (x.f32()[at] - mean) * inv * scale[ch] + shift[ch];
        if (relu) v = std::max(v, 0.0);
        y.f32()[at] = float(v);
      }
  }
  return y;
}

void expect_equal(const std::string& what, tensor_view got, const tensor& want, float tol) {
  BOOST_REQUIRE(got.shape() == want.shape());
  float worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, std::fabs(got.f32()[i] - want.f32()[i]));
  BOOST_CHECK_MESSAGE(worst <= tol, what << ": differs from the reference by " << worst);
}

}  // namespace

BOOST_AUTO_TEST_CASE(pooling_equals_loops_and_passes_finite_differences) {
  struct pool_case {
    const char* name;
    bool max;
    int64_t k, stride, pad;
  };
  // Non-overlapping max windows (2x2/2, 3x3/3) run pool.cpp's own loop, on
  // 7x7 with a row and a column left over.
  const pool_case cases[] = {{"max 2x2", true, 2, 2, 0},   {"max 3x3/3", true, 3, 3, 0},
                             {"max 3s2p1", true, 3, 2, 1}, {"avg 3s2p1", false, 3, 2, 1}};
  for (int64_t c : channel_counts)
    for (const pool_case& pc : cases) {
      const std::string what = std::string(pc.name) + ", " + std::to_string(c) + " channels";
      auto spec = pc.max ? layer_spec::max_pool("pool", pc.k, pc.stride, pc.pad)
                         : layer_spec::avg_pool("pool", pc.k, pc.stride, pc.pad);
      const int64_t side = pc.k == pc.stride ? 7 : 6;
      auto u = build_cpu_unit(spec, shape{c, side, side});
      tensor x = random_input({3, c, side, side});
      BOOST_REQUIRE(u->prepare(x.shape()).has_value());
      auto y = u->forward(x.view(), mode::train);
      BOOST_REQUIRE_MESSAGE(y.has_value(), what);
      expect_equal(what, *y, reference_pool(x, pc.max, pc.k, pc.stride, pc.pad), 1e-6f);
      // Random normal values: ties within a finite-difference step are
      // unlikely, and a few outliers are allowed for them.
      fd_options o;
      o.max_outlier_fraction = 0.02;
      require_ok(what, check_unit(*u, x, mode::train, o, true), o);
    }
  {
    // Ties go to the first maximum (row-major), NaN wins (the last one):
    // PyTorch's rule.
    auto u = build_cpu_unit(layer_spec::max_pool("pool", 2, 2), shape{1, 2, 4});
    tensor x = tensor::zeros({1, 1, 2, 4});
    x.f32()[2] = std::nanf("");  // the second window (2, 3, 6, 7): NaN at 2 and 6
    x.f32()[6] = std::nanf("");
    x.f32()[7] = 1.0f;
    auto y = u->forward(x.view(), mode::train);
    BOOST_REQUIRE(y.has_value());
    BOOST_CHECK_EQUAL(y->f32()[0], 0.0f);
    BOOST_CHECK(std::isnan(y->f32()[1]));
    tensor dy = tensor::filled({1, 1, 1, 2}, 1.0f);
    auto dx = u->backward(dy.view(), true);
    BOOST_REQUIRE(dx.has_value());
    const float want[] = {1, 0, 0, 0, 0, 0, 1, 0};
    for (int i = 0; i < 8; ++i) BOOST_CHECK_MESSAGE(dx->f32()[i] == want[i], "dx[" << i << "] = " << dx->f32()[i]);
  }
  {
    // Large enough (4x8x64x64) for the loop to split over threads.
    auto u = build_cpu_unit(layer_spec::max_pool("pool", 2, 2), shape{8, 64, 64});
    tensor x = random_input({4, 8, 64, 64});
    auto y = u->forward(x.view(), mode::train);
    BOOST_REQUIRE(y.has_value());
    tensor want = reference_pool(x, true, 2, 2, 0);
    expect_equal("max 2x2, 4x8x64x64", *y, want, 0.0f);
    tensor dy = random_input(want.shape(), 12);
    auto dx = u->backward(dy.view(), true);
    BOOST_REQUIRE(dx.has_value());
    // Each gradient lands on its window's maximum, every other input gets 0.
    int64_t wrong = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t pl = i / 4096, r = i % 4096 / 64, q = i % 64;
      const int64_t o = pl * 1024 + r / 2 * 32 + q / 2;
      const float expect = x.f32()[i] == want.f32()[o] ? dy.f32()[o] : 0.0f;
      wrong += dx->f32()[i] != expect;
    }
    BOOST_CHECK_EQUAL(wrong, 0);
  }
  for (int64_t c : channel_counts) {
    const std::string what = "global avg, " + std::to_string(c) + " channels";
    auto u = build_cpu_unit(layer_spec::global_avg_pool("gap"), shape{c, 4, 5});
    tensor x = random_input({2, c, 4, 5});
    auto y = u->forward(x.view(), mode::train);
    BOOST_REQUIRE_MESSAGE(y.has_value(), what);
    tensor want = tensor::empty({2, c, 1, 1});
    for (int64_t i = 0; i < 2 * c; ++i) {
      double sum = 0;
      for (int64_t p = 0; p < 20; ++p) sum += x.f32()[i * 20 + p];
      want.f32()[i] = float(sum / 20);
    }
    expect_equal(what, *y, want, 1e-6f);
    require_ok(what, check_unit(*u, x, mode::train, {}, true), {});
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_equals_loops_and_passes_finite_differences) {
  for (int64_t c : channel_counts)
    for (mode m : {mode::train, mode::eval})
      for (bool relu : {false, true}) {
        const std::string what = std::string(m == mode::train ? "train" : "eval") + (relu ? " + relu" : "") +
                                 ", " + std::to_string(c) + " channels";
        auto u = build_cpu_unit(layer_spec::batch_norm("bn", relu), shape{c, 5, 5});
        std::vector<parameter*> ps;
        u->parameters(ps);
        fill_normal(ps[0]->value, 21);  // non-trivial scale and shift
        fill_normal(ps[1]->value, 22);
        std::vector<state_tensor*> st;
        u->state(st);
        fill_normal(st[0]->value, 23, 0.5f);                      // running mean
        for (float& v : st[1]->value.f32_span()) v = 0.5f + v * v;  // running var > 0
        tensor mean = tensor::from(st[0]->value.view()), var = tensor::from(st[1]->value.view());
        tensor x = random_input({4, c, 5, 5});
        auto y = u->forward(x.view(), m);
        BOOST_REQUIRE_MESSAGE(y.has_value(), what);
        const bool eval = m == mode::eval;
        expect_equal(what, *y,
                     reference_batch_norm(x, ps[0]->value.f32(), ps[1]->value.f32(), eval ? mean.f32() : nullptr,
                                          eval ? var.f32() : nullptr, relu),
                     1e-4f);
        if (relu) continue;  // finite differences across the ReLU's kink are not reliable (gradcheck_test)
        require_ok(what, check_unit(*u, x, m, {}, true), {});
      }
}

namespace {

// A residual block built as one unit (its body's and shortcut's units hand
// data on in the blocked layout, units.hpp's link_units) and the same units
// built one by one and run in sequence by hand (each reorders at its edges):
// the same output, input gradient and parameter gradients, bit for bit (a
// reorder is a copy).
void check_residual_equals_units(const std::string& what, const layer_spec& block, const shape& sample) {
  rng init(7);
  auto built = cpu::make_unit(test_context(), block, sample, init);
  BOOST_REQUIRE_MESSAGE(built.has_value(), built.error().to_string());
  unit& res = *built->u;
  auto chain = [&](const std::vector<layer_spec>& specs) {
    std::vector<std::unique_ptr<unit>> out;
    shape cur = sample;
    rng other(99);
    for (const layer_spec& s : specs) {
      auto b = cpu::make_unit(test_context(), s, cur, other);
      BOOST_REQUIRE_MESSAGE(b.has_value(), b.error().to_string());
      out.push_back(std::move(b->u));
      cur = b->sample_output;
    }
    return out;
  };
  auto body = chain(block.body), shortcut = chain(block.shortcut);
  std::vector<parameter*> rp, up;
  res.parameters(rp);
  for (auto& u : body) u->parameters(up);
  for (auto& u : shortcut) u->parameters(up);
  BOOST_REQUIRE_EQUAL(rp.size(), up.size());
  for (std::size_t i = 0; i < rp.size(); ++i) {
    fill_normal(rp[i]->value, 30 + i, 0.5f);
    up[i]->value = rp[i]->value.clone();
    ++rp[i]->version;
    ++up[i]->version;
  }
  tensor x;
  auto run_chain = [&](std::vector<std::unique_ptr<unit>>& c) {
    tensor_view v = x.view();
    for (auto& u : c) {
      auto r = u->forward(v, mode::train);
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
      v = *r;
    }
    return tensor::from(v);
  };
  // Batches of 4, 3 (every unit prepared and linked anew), 4 and 4 again
  // without the input gradient.
  const int64_t batches[] = {4, 3, 4, 4};
  for (int round = 0; round < 4; ++round) {
    const bool input_grad = round < 3;
    x = random_input(shape{batches[round], sample[0], sample[1], sample[2]}, 41 + round);
    auto y = res.forward(x.view(), mode::train);
    BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
    tensor b = run_chain(body), s = run_chain(shortcut);
    tensor want = tensor::empty(b.shape());
    for (int64_t i = 0; i < b.numel(); ++i) want.f32()[i] = std::max(b.f32()[i] + s.f32()[i], 0.0f);
    expect_equal(what + ": output", *y, want, 0.0f);
    tensor dy = random_input(want.shape(), 43 + round);
    auto dx = res.backward(dy.view(), input_grad);
    BOOST_REQUIRE_MESSAGE(dx.has_value(), dx.error().to_string());
    tensor dpre = tensor::empty(want.shape());
    for (int64_t i = 0; i < want.numel(); ++i) dpre.f32()[i] = want.f32()[i] > 0 ? dy.f32()[i] : 0.0f;
    auto back = [&](std::vector<std::unique_ptr<unit>>& c) {
      tensor_view d = dpre.view();
      for (std::size_t i = c.size(); i-- > 0;) {
        auto r = c[i]->backward(d, i > 0 || input_grad);
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
        d = *r;
      }
      return d.empty() ? tensor{} : tensor::from(d);
    };
    tensor db = back(body), ds = back(shortcut);
    if (input_grad) {
      tensor dx_want = tensor::empty(x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) dx_want.f32()[i] = db.f32()[i] + ds.f32()[i];
      expect_equal(what + ": input gradient", *dx, dx_want, 0.0f);
    }
    for (std::size_t i = 0; i < rp.size(); ++i)
      expect_equal(what + ": " + rp[i]->name, rp[i]->grad.view(), up[i]->grad, 0.0f);
    // The eval forward too (batch norm's running statistics).
    auto ye = res.forward(x.view(), mode::eval);
    BOOST_REQUIRE(ye.has_value());
    tensor ye_copy = tensor::from(*ye);
    tensor_view v = x.view();
    for (auto& u : body) v = *u->forward(v, mode::eval);
    tensor be = tensor::from(v);
    v = x.view();
    for (auto& u : shortcut) v = *u->forward(v, mode::eval);
    for (int64_t i = 0; i < be.numel(); ++i) be.f32()[i] = std::max(be.f32()[i] + v.f32()[i], 0.0f);
    expect_equal(what + ": eval output", ye_copy.view(), be, 0.0f);
  }
}

std::vector<layer_spec> conv_bn(const std::string& n, int64_t out, int64_t k, int64_t stride, int64_t pad,
                                bool relu) {
  return {layer_spec::conv2d(n, out, k, stride, pad, false, false), layer_spec::batch_norm(n + "_bn", relu)};
}

std::vector<layer_spec> cat(std::vector<layer_spec> a, const std::vector<layer_spec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(residual_blocks_hand_data_on_in_the_layout_bit_for_bit) {
  for (int64_t c : {8, 12, 16}) {
    const std::string n = std::to_string(c) + " channels";
    // basic block, identity shortcut
    check_residual_equals_units(
        "basic, " + n,
        layer_spec::residual("b", cat(conv_bn("c1", c, 3, 1, 1, true), conv_bn("c2", c, 3, 1, 1, false)), {}, true),
        shape{c, 6, 6});
    // basic block, stride 2 and a downsample shortcut
    check_residual_equals_units("basic downsample, " + n,
                                layer_spec::residual("d",
                                                     cat(conv_bn("c1", 2 * c, 3, 2, 1, true),
                                                         conv_bn("c2", 2 * c, 3, 1, 1, false)),
                                                     conv_bn("down", 2 * c, 1, 2, 0, false), true),
                                shape{c, 6, 6});
    // bottleneck
    check_residual_equals_units("bottleneck, " + n,
                                layer_spec::residual("t",
                                                     cat(cat(conv_bn("c1", c, 1, 1, 0, true),
                                                             conv_bn("c2", c, 3, 1, 1, true)),
                                                         conv_bn("c3", 4 * c, 1, 1, 0, false)),
                                                     conv_bn("down", 4 * c, 1, 1, 0, false), true),
                                shape{c, 5, 5});
  }
}

// The links form where they should: on CPUs with jit kernels for blocked
// layouts (AVX2, AVX-512) a conv -> batch norm -> conv -> batch norm chain at
// 16 channels links all 3 pairs, and again after a re-prepare; a conv with a
// fused ReLU hands nothing on. (The bit-for-bit test above passes with no
// link at all; this one fails if linking stops happening.)
BOOST_AUTO_TEST_CASE(conv_and_batch_norm_link_where_the_layouts_agree) {
  const std::string isa = cpu::cpu_context::isa_name();
  if (isa.rfind("avx2", 0) != 0 && isa.rfind("avx512", 0) != 0) {
    BOOST_TEST_MESSAGE("no blocked jit kernels on this CPU (" << isa << "): nothing to link");
    return;
  }
  auto chain_of = [](const std::vector<layer_spec>& specs, const shape& batch) {
    std::vector<std::unique_ptr<unit>> chain;
    shape sample{batch[1], batch[2], batch[3]}, cur = batch;
    rng init(3);
    for (const layer_spec& s : specs) {
      auto b = cpu::make_unit(test_context(), s, sample, init);
      BOOST_REQUIRE_MESSAGE(b.has_value(), b.error().to_string());
      auto out = b->u->prepare(cur);
      BOOST_REQUIRE(out.has_value());
      cur = *out;
      sample = b->sample_output;
      chain.push_back(std::move(b->u));
    }
    return chain;
  };
  auto specs = cat(conv_bn("c1", 16, 3, 1, 1, true), conv_bn("c2", 16, 3, 1, 1, false));
  auto chain = chain_of(specs, shape{4, 16, 6, 6});
  BOOST_CHECK_EQUAL(cpu::link_units(chain), 3);
  BOOST_CHECK_EQUAL(cpu::link_units(chain), 3);
  for (auto& u : chain) BOOST_REQUIRE(u->prepare(shape{3, 16, 6, 6}).has_value());  // re-planned: links cleared
  BOOST_CHECK_EQUAL(cpu::link_units(chain), 3);
  auto relu_first = chain_of({layer_spec::conv2d("a", 16, 3, 1, 1, true, false),
                              layer_spec::conv2d("b", 16, 3, 1, 1, false, false)},
                             shape{4, 16, 6, 6});
  BOOST_CHECK_EQUAL(cpu::link_units(relu_first), 0);
}
