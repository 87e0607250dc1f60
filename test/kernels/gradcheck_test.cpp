// Finite-difference gradient checks of every cpu unit and op.
#define BOOST_TEST_MODULE kernels_gradcheck
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

#include "gradcheck.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/interaction.hpp"
#include "kernels/loss.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::testing;

namespace {

// Distinct values spaced far apart compared with eps, in random order: no
// max-pool ties and no ReLU kinks within a finite-difference step.
tensor spaced_input(const shape& s, uint64_t seed = 9) {
  tensor x = tensor::empty(s);
  const int64_t n = x.numel();
  std::vector<int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  rng r(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[std::size_t(r.below(uint64_t(i + 1)))]);
  for (int64_t i = 0; i < n; ++i) {
    // -2.5 .. 2.5 in steps >= 0.05, skipping +-0.05 around 0.
    float v = -2.5f + 5.0f * float(perm[std::size_t(i)]) / float(n);
    if (std::fabs(v) < 0.05f) v = v < 0 ? -0.05f - 0.05f : 0.1f;
    x.f32()[i] = v;
  }
  return x;
}

void run(const std::string& name, unit& u, tensor& x, mode m, fd_options o = {}, bool need_input_grad = true) {
  fd_stats st = check_unit(u, x, m, o, need_input_grad);
  require_ok(name, st, o);
}

fd_options fused_relu() {
  fd_options o;
  o.max_outlier_fraction = 0.03;
  return o;
}

void expect_close(const std::string& what, tensor_view a, tensor_view b) {
  BOOST_REQUIRE_EQUAL(a.numel(), b.numel());
  float scale = 1e-6f;
  for (float v : b.f32_span()) scale = std::max(scale, std::fabs(v));
  BOOST_CHECK_MESSAGE(max_abs_diff(a, b) <= 1e-5f * scale, what << ": differs by " << max_abs_diff(a, b));
}

// A unit with a fused ReLU must equal the unfused unit followed by a relu
// unit, in its output and in every gradient. (The unfused units are checked
// against finite differences; finite differences across a ReLU kink are not
// reliable for weights, whose perturbation moves many outputs at once.)
void check_fused_equals_composed(unit& fused, unit& plain, tensor& x, mode m) {
  auto relu_u = build_cpu_unit(layer_spec::relu_layer("relu"), shape{1});
  auto s1 = fused.prepare(x.shape());
  auto s2 = plain.prepare(x.shape());
  BOOST_REQUIRE(s1.has_value() && s2.has_value());
  BOOST_REQUIRE(relu_u->prepare(*s2).has_value());
  auto yf = fused.forward(x.view(), m);
  auto yp = plain.forward(x.view(), m);
  BOOST_REQUIRE(yf.has_value() && yp.has_value());
  auto yr = relu_u->forward(*yp, m);
  BOOST_REQUIRE(yr.has_value());
  expect_close("output", *yf, *yr);
  int positives = 0, zeros = 0;
  for (float v : yf->f32_span()) (v > 0 ? positives : zeros)++;
  BOOST_CHECK(positives > 0 && zeros > 0);  // the ReLU did something
  tensor r = random_input(*s1, 77);
  auto df = fused.backward(r.view(), true);
  BOOST_REQUIRE(df.has_value());
  tensor dfx = tensor::from(*df);
  auto dr = relu_u->backward(r.view(), true);
  BOOST_REQUIRE(dr.has_value());
  auto dp = plain.backward(*dr, true);
  BOOST_REQUIRE(dp.has_value());
  expect_close("input gradient", dfx.view(), *dp);
  std::vector<parameter*> pf, pp;
  fused.parameters(pf);
  plain.parameters(pp);
  BOOST_REQUIRE_EQUAL(pf.size(), pp.size());
  for (std::size_t i = 0; i < pf.size(); ++i) {
    expect_close(pf[i]->name + " value", pf[i]->value.view(), pp[i]->value.view());
    expect_close(pf[i]->name + " gradient", pf[i]->grad.view(), pp[i]->grad.view());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(units)

BOOST_AUTO_TEST_CASE(linear) {
  auto u = build_cpu_unit(layer_spec::linear("fc", 7), shape{10});
  tensor x = random_input({4, 10});
  run("linear", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(linear_no_bias_from_4d_input) {
  auto u = build_cpu_unit(layer_spec::linear("fc", 5, false, false), shape{2, 3, 3});
  tensor x = random_input({3, 2, 3, 3});
  run("linear_nobias", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(linear_relu) {
  auto fused = build_cpu_unit(layer_spec::linear("fc", 9, true), shape{12});
  auto plain = build_cpu_unit(layer_spec::linear("fc", 9, false), shape{12});
  tensor x = random_input({5, 12});
  check_fused_equals_composed(*fused, *plain, x, mode::train);
}

BOOST_AUTO_TEST_CASE(linear_skips_input_grad) {
  auto u = build_cpu_unit(layer_spec::linear("fc", 6), shape{8});
  tensor x = random_input({3, 8});
  run("linear_first", *u, x, mode::train, {}, false);
}

BOOST_AUTO_TEST_CASE(conv2d_stride_padding) {
  auto u = build_cpu_unit(layer_spec::conv2d("conv", 4, 3, 2, 1), shape{3, 7, 7});
  tensor x = random_input({2, 3, 7, 7});
  run("conv2d_s2p1", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(conv2d_no_bias) {
  auto u = build_cpu_unit(layer_spec::conv2d("conv", 5, 3, 1, 0, false, false), shape{2, 6, 6});
  tensor x = random_input({2, 2, 6, 6});
  run("conv2d_nobias", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(conv2d_lenet_like) {
  auto u = build_cpu_unit(layer_spec::conv2d("conv", 6, 5), shape{1, 12, 12});
  tensor x = random_input({2, 1, 12, 12});
  run("conv2d_5x5", *u, x, mode::train, {}, false);
}

BOOST_AUTO_TEST_CASE(conv2d_relu) {
  auto fused = build_cpu_unit(layer_spec::conv2d("conv", 6, 5, 1, 0, true), shape{3, 12, 12});
  auto plain = build_cpu_unit(layer_spec::conv2d("conv", 6, 5, 1, 0, false), shape{3, 12, 12});
  tensor x = random_input({2, 3, 12, 12});
  check_fused_equals_composed(*fused, *plain, x, mode::train);
}

BOOST_AUTO_TEST_CASE(conv2d_wide_channels) {
  // 16+ channels make oneDNN choose blocked weight layouts: checks the
  // reorders of weights and gradients.
  auto u = build_cpu_unit(layer_spec::conv2d("conv", 32, 3, 1, 1), shape{16, 5, 5});
  tensor x = random_input({2, 16, 5, 5});
  fd_options o;
  o.max_checks = 60;
  run("conv2d_wide", *u, x, mode::train, o);
}

BOOST_AUTO_TEST_CASE(max_pool) {
  auto u = build_cpu_unit(layer_spec::max_pool("pool", 2, 2), shape{3, 6, 6});
  tensor x = spaced_input({2, 3, 6, 6});
  run("max_pool", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(max_pool_overlapping_padded) {
  auto u = build_cpu_unit(layer_spec::max_pool("pool", 3, 2, 1), shape{2, 7, 7});
  tensor x = spaced_input({2, 2, 7, 7});
  run("max_pool_3s2p1", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(avg_pool) {
  auto u = build_cpu_unit(layer_spec::avg_pool("pool", 3, 2, 1), shape{2, 7, 7});
  tensor x = random_input({2, 2, 7, 7});
  run("avg_pool", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(global_avg_pool) {
  auto u = build_cpu_unit(layer_spec::global_avg_pool("gap"), shape{3, 4, 5});
  tensor x = random_input({2, 3, 4, 5});
  run("global_avg_pool", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(relu) {
  auto u = build_cpu_unit(layer_spec::relu_layer("relu"), shape{3, 4});
  tensor x = spaced_input({5, 3, 4});
  run("relu", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(batch_norm_train_4d) {
  auto u = build_cpu_unit(layer_spec::batch_norm("bn"), shape{3, 4, 4});
  tensor x = random_input({4, 3, 4, 4});
  std::vector<parameter*> ps;
  u->parameters(ps);
  fill_normal(ps[0]->value, 21);  // non-trivial scale and shift
  fill_normal(ps[1]->value, 22);
  run("batch_norm_train", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(batch_norm_train_2d) {
  auto u = build_cpu_unit(layer_spec::batch_norm("bn"), shape{6});
  tensor x = random_input({8, 6});
  run("batch_norm_train_2d", *u, x, mode::train);
}

BOOST_AUTO_TEST_CASE(batch_norm_eval) {
  auto u = build_cpu_unit(layer_spec::batch_norm("bn"), shape{3, 2, 2});
  tensor x = random_input({4, 3, 2, 2});
  std::vector<state_tensor*> st;
  u->state(st);
  BOOST_REQUIRE_EQUAL(st.size(), 2u);
  fill_normal(st[0]->value, 23, 0.5f);                      // running mean
  for (float& v : st[1]->value.f32_span()) v = 0.5f + v * v;  // running var > 0
  run("batch_norm_eval", *u, x, mode::eval);
}

BOOST_AUTO_TEST_CASE(batch_norm_relu) {
  for (mode m : {mode::train, mode::eval}) {
    auto fused = build_cpu_unit(layer_spec::batch_norm("bn", true), shape{3, 3, 3});
    auto plain = build_cpu_unit(layer_spec::batch_norm("bn", false), shape{3, 3, 3});
    tensor x = random_input({4, 3, 3, 3});
    check_fused_equals_composed(*fused, *plain, x, m);
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_follow_pytorch) {
  auto u = build_cpu_unit(layer_spec::batch_norm("bn"), shape{1});
  tensor x = tensor::empty({4, 1});
  float vals[] = {1, 2, 3, 6};  // mean 3, unbiased var 14/3
  std::copy(vals, vals + 4, x.f32());
  BOOST_REQUIRE(u->forward(x.view(), mode::train).has_value());
  std::vector<state_tensor*> st;
  u->state(st);
  BOOST_CHECK_CLOSE(st[0]->value.f32()[0], 0.1f * 3.0f, 1e-3);
  BOOST_CHECK_CLOSE(st[1]->value.f32()[0], 0.9f + 0.1f * (14.0f / 3.0f), 1e-3);
}

BOOST_AUTO_TEST_CASE(dropout) {
  auto u = build_cpu_unit(layer_spec::dropout("drop", 0.3), shape{50});
  tensor x = random_input({4, 50});
  run("dropout", *u, x, mode::train);
  // Eval is the identity; train zeroes about p and scales the rest by 1/(1-p).
  auto y = u->forward(x.view(), mode::eval);
  BOOST_REQUIRE(y.has_value());
  BOOST_CHECK_EQUAL(max_abs_diff(*y, x.view()), 0.0f);
  u->set_seed(99);
  auto yt = u->forward(x.view(), mode::train);
  BOOST_REQUIRE(yt.has_value());
  int zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = yt->f32()[i];
    if (v == 0.0f) ++zeros;
    else BOOST_CHECK_CLOSE(v, x.f32()[i] / 0.7f, 1e-3);
  }
  BOOST_CHECK(zeros > 30 && zeros < 90);  // 200 * 0.3 = 60 expected
}

BOOST_AUTO_TEST_CASE(flatten) {
  auto u = build_cpu_unit(layer_spec::flatten("flat"), shape{2, 3, 4});
  tensor x = random_input({3, 2, 3, 4});
  run("flatten", *u, x, mode::train);
  auto y = u->forward(x.view(), mode::train);
  BOOST_REQUIRE(y.has_value());
  BOOST_CHECK(y->shape() == (shape{3, 24}));
  BOOST_CHECK_EQUAL(y->raw(), x.view().raw());  // a view, no copy
}

BOOST_AUTO_TEST_CASE(residual_identity_add) {
  auto u = build_cpu_unit(layer_spec::residual("res", {layer_spec::linear("fc", 6)}, {}, false), shape{6});
  tensor x = random_input({3, 6});
  run("residual_identity", *u, x, mode::train);
}

std::vector<layer_spec> block_body(bool inner_relu) {
  return {layer_spec::conv2d("c1", 4, 3, 2, 1, false, false), layer_spec::batch_norm("bn1", inner_relu),
          layer_spec::conv2d("c2", 4, 3, 1, 1, false, false), layer_spec::batch_norm("bn2")};
}
std::vector<layer_spec> block_shortcut() {
  return {layer_spec::conv2d("down", 4, 1, 2, 0, false, false), layer_spec::batch_norm("down_bn")};
}

BOOST_AUTO_TEST_CASE(residual_block_with_projection) {
  auto u = build_cpu_unit(layer_spec::residual("block", block_body(false), block_shortcut(), false), shape{2, 6, 6});
  tensor x = random_input({3, 2, 6, 6});
  fd_options o;
  o.max_checks = 40;
  o.eps = 3e-3f;  // two batch norms over 27 values per channel: strongly curved
  run("residual_block", *u, x, mode::train, o);
}

BOOST_AUTO_TEST_CASE(residual_block_relu) {
  auto fused = build_cpu_unit(layer_spec::residual("block", block_body(true), block_shortcut(), true), shape{2, 6, 6});
  auto plain = build_cpu_unit(layer_spec::residual("block", block_body(true), block_shortcut(), false), shape{2, 6, 6});
  tensor x = random_input({3, 2, 6, 6});
  check_fused_equals_composed(*fused, *plain, x, mode::train);
}

BOOST_AUTO_TEST_CASE(dlrm_features_unit) {
  dlrm_spec d{3, {7, 5, 9}, 4, {6}};
  auto u = build_cpu_unit(layer_spec::dlrm_features("dlrm", d), shape{6});
  tensor x = tensor::empty({5, 6});
  rng r(3);
  for (int64_t s = 0; s < 5; ++s) {
    for (int j = 0; j < 3; ++j) x.f32()[s * 6 + j] = r.normal();
    for (int t = 0; t < 3; ++t) x.f32()[s * 6 + 3 + t] = float(r.below(uint64_t(d.table_rows[std::size_t(t)])));
  }
  x.f32()[6 + 3] = x.f32()[3];  // a repeated id: its gradient rows must sum
  // Dense parameters (bottom MLP, fused ReLU) by finite differences.
  fd_options o = fused_relu();
  fd_stats st = check_unit(*u, x, mode::train, o, false);
  require_ok("dlrm dense params", st, o);
  // Sparse table gradients against finite differences on the touched rows.
  auto out = u->prepare(x.shape());
  BOOST_REQUIRE(out.has_value());
  tensor rw = tensor::empty(*out);
  fill_normal(rw, 11);
  auto loss = [&] {
    auto y = u->forward(x.view(), mode::train);
    BOOST_REQUIRE(y.has_value());
    return dot(*y, rw);
  };
  loss();
  BOOST_REQUIRE(u->backward(rw.view(), false).has_value());
  std::vector<parameter*> ps;
  u->parameters(ps);
  fd_stats sst;
  fd_options so;
  for (parameter* p : ps) {
    if (!p->sparse) continue;
    const int64_t dim = p->value.shape()[1];
    BOOST_REQUIRE(std::is_sorted(p->sparse_grad.rows.begin(), p->sparse_grad.rows.end()));
    tensor dense = tensor::zeros(p->value.shape());
    for (std::size_t k = 0; k < p->sparse_grad.rows.size(); ++k)
      std::copy_n(p->sparse_grad.values.f32() + int64_t(k) * dim, dim, dense.f32() + p->sparse_grad.rows[k] * dim);
    // Every element of the table: untouched rows must have zero gradient.
    compare(p->name, p->value.f32(), dense.f32(), p->value.numel(), loss, [] {}, so, sst);
  }
  require_ok("dlrm embeddings", sst, so);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops)

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_gradient) {
  tensor z = random_input({6, 5});
  std::vector<int32_t> y{0, 4, 2, 2, 1, 3};
  tensor g = tensor::empty({6, 5});
  auto r = softmax_cross_entropy(z.view(), y, g.mutable_view());
  BOOST_REQUIRE(r.has_value());
  fd_stats st;
  fd_options o;
  o.eps = 1e-3f;
  compare("softmax_ce", z.f32(), g.f32(), z.numel(), [&] { return softmax_cross_entropy(z.view(), y)->loss; },
          [] {}, o, st);
  require_ok("softmax_ce", st, o);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_values) {
  tensor z = tensor::zeros({2, 4});
  z.f32()[1] = 2.0f;  // row 0 predicts class 1
  std::vector<int32_t> y{1, 3};
  auto r = softmax_cross_entropy(z.view(), y);
  BOOST_REQUIRE(r.has_value());
  double l0 = std::log(std::exp(2.0) + 3.0) - 2.0, l1 = std::log(4.0);
  BOOST_CHECK_CLOSE(r->loss, (l0 + l1) / 2.0, 1e-4);
  BOOST_CHECK_EQUAL(r->correct, 1);  // row 1 ties -> argmax 0 != 3
  std::vector<int32_t> bad{1, 4};
  auto e = softmax_cross_entropy(z.view(), bad);
  BOOST_REQUIRE(!e.has_value());
  BOOST_CHECK(e.error().code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_CASE(embedding_bag_sum_and_mean) {
  for (auto pooling : {cpu::bag_pooling::sum, cpu::bag_pooling::mean}) {
    tensor table = random_input({6, 3});
    std::vector<int64_t> idx{0, 5, 5, 2, 1, 3, 0};
    std::vector<int64_t> off{0, 3, 3, 5};  // bags: {0,5,5}, {}, {2,1}, {3,0}
    cpu::embedding_bag_args a{table.f32(), 6, 3, idx, off, pooling};
    tensor out = tensor::empty({4, 3}), rw = random_input({4, 3}, 4);
    BOOST_REQUIRE(cpu::embedding_bag_forward(a, out.f32()).ok());
    for (int j = 0; j < 3; ++j) BOOST_CHECK_EQUAL(out.f32()[3 + j], 0.0f);  // empty bag
    sparse_rows g;
    cpu::embedding_bag_backward(a, rw.f32(), g);
    BOOST_CHECK((g.rows == std::vector<int64_t>{0, 1, 2, 3, 5}));
    tensor dense = tensor::zeros({6, 3});
    for (std::size_t k = 0; k < g.rows.size(); ++k)
      std::copy_n(g.values.f32() + k * 3, 3, dense.f32() + g.rows[k] * 3);
    fd_stats st;
    fd_options o;
    compare("embedding_bag", table.f32(), dense.f32(), table.numel(),
            [&] {
              BOOST_REQUIRE(cpu::embedding_bag_forward(a, out.f32()).ok());
              return dot(out.view(), rw);
            },
            [] {}, o, st);
    require_ok("embedding_bag", st, o);
  }
}

BOOST_AUTO_TEST_CASE(embedding_bag_rejects_bad_ids) {
  tensor table = random_input({4, 2});
  std::vector<int64_t> idx{1, 4};
  std::vector<int64_t> off{0, 1};
  tensor out = tensor::empty({2, 2});
  auto st = cpu::embedding_bag_forward({table.f32(), 4, 2, idx, off, cpu::bag_pooling::sum}, out.f32());
  BOOST_CHECK(st.code() == errc::invalid_argument);
  BOOST_CHECK(st.message().find("index 4") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(dot_interaction) {
  const int64_t n = 3, f = 4, d = 5;
  tensor t = random_input({n, f, d});
  tensor z = tensor::empty({n, cpu::interaction_pairs(f)});
  cpu::dot_interaction_forward(t.f32(), n, f, d, z.f32());
  // z[1][pair (2,1)] is <t_2, t_1> of sample 1: pair index 1 + 1 = 2.
  double ref = 0;
  for (int x = 0; x < d; ++x) ref += double(t.f32()[(1 * f + 2) * d + x]) * t.f32()[(1 * f + 1) * d + x];
  BOOST_CHECK_CLOSE(z.f32()[1 * 6 + 2], ref, 1e-3);
  tensor rw = random_input(z.shape(), 7);
  tensor dt = tensor::empty(t.shape());
  cpu::dot_interaction_backward(t.f32(), rw.f32(), n, f, d, dt.f32());
  fd_stats st;
  fd_options o;
  compare("dot_interaction", t.f32(), dt.f32(), t.numel(),
          [&] {
            cpu::dot_interaction_forward(t.f32(), n, f, d, z.f32());
            return dot(z.view(), rw);
          },
          [] {}, o, st);
  require_ok("dot_interaction", st, o);
}

BOOST_AUTO_TEST_CASE(concat_and_split) {
  tensor a = random_input({3, 2}, 1), b = random_input({3, 4}, 2);
  tensor out = tensor::empty({3, 6});
  const float* parts[] = {a.f32(), b.f32()};
  const int64_t widths[] = {2, 4};
  cpu::concat_rows(parts, widths, 3, out.f32());
  BOOST_CHECK_EQUAL(out.f32()[6 + 1], a.f32()[2 + 1]);
  BOOST_CHECK_EQUAL(out.f32()[6 + 2 + 3], b.f32()[4 + 3]);
  // Backward of concat is split: check it against finite differences too.
  tensor rw = random_input({3, 6}, 3);
  tensor da = tensor::empty({3, 2}), db = tensor::empty({3, 4});
  float* grads[] = {da.f32(), db.f32()};
  cpu::split_rows(rw.f32(), widths, 3, grads);
  fd_stats st;
  fd_options o;
  auto loss = [&] {
    cpu::concat_rows(parts, widths, 3, out.f32());
    return dot(out.view(), rw);
  };
  compare("concat a", a.f32(), da.f32(), a.numel(), loss, [] {}, o, st);
  compare("concat b", b.f32(), db.f32(), b.numel(), loss, [] {}, o, st);
  require_ok("concat", st, o);
}

BOOST_AUTO_TEST_SUITE_END()
