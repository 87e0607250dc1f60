// CPU vs CUDA parity (label gpu): every cuda unit and op against the cpu
// backend on the same weights and inputs: forward output, input gradient,
// every parameter gradient (sparse ones row by row), batch norm running
// statistics, loss, optimizer updates. Skipped (exit 77) without a device.
//
// Both backends initialise parameters from the same rng draws, so the
// parameters are compared for equality first: parity of everything after
// that needs no copying of weights.
#define BOOST_TEST_MODULE kernels_cuda_parity
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/unit_factory.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::testing;

int main(int argc, char** argv) { return run_or_skip(argc, argv); }

namespace {

cpu::cpu_context& cpu_ctx() {
  static cpu::cpu_context c(2);
  return c;
}

struct unit_pair {
  std::unique_ptr<unit> cpu, gpu;
  shape sample_output;
};

unit_pair build_both(const layer_spec& s, const shape& sample, uint64_t seed = 5) {
  rng a(seed), b(seed);
  auto c = cpu::make_unit(cpu_ctx(), s, sample, a);
  BOOST_REQUIRE_MESSAGE(c.has_value(), c.error().to_string());
  auto g = gpu().make_unit(s, sample, b);
  BOOST_REQUIRE_MESSAGE(g.has_value(), g.error().to_string());
  BOOST_REQUIRE(c->sample_output == g->sample_output);
  BOOST_CHECK_EQUAL(a.next(), b.next());  // the same number of draws
  // Same names, shapes and (bit-identical) initial values.
  std::vector<parameter*> pc, pg;
  c->u->parameters(pc);
  g->u->parameters(pg);
  BOOST_REQUIRE_EQUAL(pc.size(), pg.size());
  for (std::size_t i = 0; i < pc.size(); ++i) {
    BOOST_CHECK_EQUAL(pc[i]->name, pg[i]->name);
    BOOST_CHECK(pc[i]->value.shape() == pg[i]->value.shape());
    BOOST_CHECK(pg[i]->value.where() == gpu().where());
    check_close(pc[i]->name + " initial value", pc[i]->value.view(), pg[i]->value.view(), 0.0, 0.0);
  }
  return {std::move(c->u), std::move(g->u), c->sample_output};
}

// Distinct, well separated values: no max-pool ties, no ReLU kinks.
tensor spaced_host(const shape& s, uint64_t seed) {
  tensor x = tensor::empty(s);
  const int64_t n = x.numel();
  std::vector<int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  rng r(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[std::size_t(r.below(uint64_t(i + 1)))]);
  for (int64_t i = 0; i < n; ++i) x.f32()[i] = -2.5f + 5.0f * (float(perm[std::size_t(i)]) + 0.5f) / float(n);
  return x;
}

struct parity_options {
  mode m = mode::train;
  bool need_input_grad = true;
  bool spaced = false;  // spaced_host inputs
  int steps = 2;        // forward/backward rounds (state such as running stats evolves)
  double atol = 1e-4, rtol = 1e-3;
};

void check_parity(const std::string& name, unit_pair& u, const shape& in, parity_options o = {}) {
  BOOST_TEST_CONTEXT(name) {
    auto oc = u.cpu->prepare(in);
    auto og = u.gpu->prepare(in);
    BOOST_REQUIRE_MESSAGE(oc.has_value(), oc.error().to_string());
    BOOST_REQUIRE_MESSAGE(og.has_value(), og.error().to_string());
    BOOST_REQUIRE(*oc == *og);
    for (int step = 0; step < o.steps; ++step) {
      tensor x = o.spaced ? spaced_host(in, 9 + step) : normal_host(in, 9 + step);
      tensor xg = to_gpu(x.view());
      auto yc = u.cpu->forward(x.view(), o.m);
      auto yg = u.gpu->forward(xg.view(), o.m);
      BOOST_REQUIRE_MESSAGE(yc.has_value(), yc.error().to_string());
      BOOST_REQUIRE_MESSAGE(yg.has_value(), yg.error().to_string());
      BOOST_CHECK(yg->where() == gpu().where());
      check_close(name + " forward", *yc, *yg, o.atol, o.rtol);
      tensor dy = normal_host(*oc, 100 + step);
      tensor dyg = to_gpu(dy.view());
      auto dc = u.cpu->backward(dy.view(), o.need_input_grad);
      auto dg = u.gpu->backward(dyg.view(), o.need_input_grad);
      BOOST_REQUIRE_MESSAGE(dc.has_value(), dc.error().to_string());
      BOOST_REQUIRE_MESSAGE(dg.has_value(), dg.error().to_string());
      if (o.need_input_grad) check_close(name + " input gradient", *dc, *dg, o.atol, o.rtol);
      else BOOST_CHECK(dg->empty());
      std::vector<parameter*> pc, pg;
      u.cpu->parameters(pc);
      u.gpu->parameters(pg);
      for (std::size_t i = 0; i < pc.size(); ++i) {
        if (!pc[i]->sparse) {
          check_close(pc[i]->name + " gradient", pc[i]->grad.view(), pg[i]->grad.view(), o.atol, o.rtol);
          continue;
        }
        BOOST_CHECK(pc[i]->sparse_grad.rows == pg[i]->sparse_grad.rows);
        check_close(pc[i]->name + " sparse gradient", pc[i]->sparse_grad.values.view(),
                    pg[i]->sparse_grad.values.view(), o.atol, o.rtol);
      }
      std::vector<state_tensor*> sc, sg;
      u.cpu->state(sc);
      u.gpu->state(sg);
      BOOST_REQUIRE_EQUAL(sc.size(), sg.size());
      for (std::size_t i = 0; i < sc.size(); ++i)
        check_close(sc[i]->name, sc[i]->value.view(), sg[i]->value.view(), o.atol, o.rtol);
    }
    // A unit that keeps activations for its backward on one device keeps
    // them on the other (flatten keeps none on either).
    BOOST_CHECK_EQUAL(u.gpu->activation_bytes() > 0, u.cpu->activation_bytes() > 0);
    BOOST_CHECK(gpu().synchronize().ok());
  }
}

void parity(const std::string& name, const layer_spec& s, const shape& sample, int64_t batch,
            parity_options o = {}) {
  unit_pair u = build_both(s, sample);
  shape in{batch};
  for (int64_t d : sample.dims()) in.push_back(d);
  check_parity(name, u, in, o);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(units)

BOOST_AUTO_TEST_CASE(linear) {
  parity("linear", layer_spec::linear("fc", 7), shape{12}, 5);
  parity("linear relu", layer_spec::linear("fc", 33, true), shape{2, 3, 4}, 9, {.spaced = true});
  parity("linear no bias", layer_spec::linear("fc", 4, false, false), shape{10}, 3, {.need_input_grad = false});
  parity("linear wide", layer_spec::linear("fc", 256), shape{784}, 64, {.atol = 3e-4});
}

// precision bf16 and f16 (the context's math mode): forward and gradients
// near the cpu's f32 at the narrower format's precision, relative to each
// tensor's largest value; and the results differ from strict f32 on the same
// device (the 16-bit math ran).
BOOST_AUTO_TEST_CASE(reduced_precision) {
  struct mode_case {
    math_mode mode;
    double frac;
  };
  struct unit_case {
    std::string name;
    layer_spec spec;
    shape sample;
    int64_t batch;
  };
  const std::vector<unit_case> units = {
      {"linear", layer_spec::linear("fc", 256), shape{784}, 64},
      {"conv2d", layer_spec::conv2d("c", 64, 3, 1, 1), shape{32, 16, 16}, 8},
  };
  for (mode_case mc : {mode_case{math_mode::bf16, 3e-2}, mode_case{math_mode::f16, 1e-2}}) {
    for (const unit_case& uc : units) {
      const std::string what = std::string(to_string(mc.mode)) + " " + uc.name;
      shape in{uc.batch};
      for (int64_t d : uc.sample.dims()) in.push_back(d);
      gpu().set_math(math_mode::f32);
      unit_pair strict = build_both(uc.spec, uc.sample);
      BOOST_REQUIRE(strict.gpu->prepare(in).has_value());
      gpu().set_math(mc.mode);
      unit_pair u = build_both(uc.spec, uc.sample);
      auto oc = u.cpu->prepare(in);
      auto og = u.gpu->prepare(in);
      gpu().set_math(math_mode::f32);
      BOOST_REQUIRE_MESSAGE(oc.has_value(), oc.error().to_string());
      BOOST_REQUIRE_MESSAGE(og.has_value(), og.error().to_string());
      tensor x = normal_host(in, 21);
      tensor xg = to_gpu(x.view());
      auto yc = u.cpu->forward(x.view(), mode::train);
      auto yg = u.gpu->forward(xg.view(), mode::train);
      auto ys = strict.gpu->forward(xg.view(), mode::train);
      BOOST_REQUIRE(yc.has_value() && yg.has_value() && ys.has_value());
      check_close_scaled(what + " forward", *yc, *yg, mc.frac);
      auto [vs_strict, scale] = max_difference(*ys, *yg);
      BOOST_TEST_MESSAGE(what << " forward: worst difference from strict f32 on the gpu " << vs_strict << " of max "
                              << scale);
      BOOST_CHECK_GT(vs_strict, 0.0);
      tensor dy = normal_host(*oc, 22);
      tensor dyg = to_gpu(dy.view());
      auto dc = u.cpu->backward(dy.view(), true);
      auto dg = u.gpu->backward(dyg.view(), true);
      BOOST_REQUIRE_MESSAGE(dc.has_value(), dc.error().to_string());
      BOOST_REQUIRE_MESSAGE(dg.has_value(), dg.error().to_string());
      check_close_scaled(what + " input gradient", *dc, *dg, mc.frac);
      std::vector<parameter*> pc, pg;
      u.cpu->parameters(pc);
      u.gpu->parameters(pg);
      for (std::size_t i = 0; i < pc.size(); ++i)
        check_close_scaled(what + " " + pc[i]->name + " gradient", pc[i]->grad.view(), pg[i]->grad.view(), mc.frac);
      BOOST_CHECK(gpu().synchronize().ok());
    }
  }
}

BOOST_AUTO_TEST_CASE(conv2d) {
  parity("conv2d stride padding", layer_spec::conv2d("c", 5, 3, 2, 1), shape{3, 9, 9}, 2);
  parity("conv2d no bias", layer_spec::conv2d("c", 4, 3, 1, 0, false, false), shape{2, 7, 7}, 3);
  parity("conv2d lenet", layer_spec::conv2d("c", 6, 5), shape{1, 28, 28}, 4);
  parity("conv2d relu", layer_spec::conv2d("c", 8, 3, 1, 1, true), shape{3, 8, 8}, 2, {.spaced = true});
  parity("conv2d wide", layer_spec::conv2d("c", 64, 3, 1, 1), shape{32, 16, 16}, 8, {.atol = 5e-4, .rtol = 2e-3});
  parity("conv2d 7x7 stride 2", layer_spec::conv2d("c", 16, 7, 2, 3, false, false), shape{3, 32, 32}, 2,
         {.atol = 5e-4, .rtol = 2e-3});
  parity("conv2d skips input grad", layer_spec::conv2d("c", 4, 3), shape{2, 6, 6}, 2, {.need_input_grad = false});
}

BOOST_AUTO_TEST_CASE(pools) {
  parity("max_pool", layer_spec::max_pool("p", 2, 2), shape{3, 8, 8}, 2, {.spaced = true});
  parity("max_pool overlapping padded", layer_spec::max_pool("p", 3, 2, 1), shape{2, 9, 9}, 2, {.spaced = true});
  parity("avg_pool", layer_spec::avg_pool("p", 2, 2), shape{3, 8, 8}, 2);
  parity("avg_pool padded", layer_spec::avg_pool("p", 3, 2, 1), shape{2, 7, 7}, 3);
  parity("global_avg_pool", layer_spec::global_avg_pool("p"), shape{5, 7, 7}, 3);
}

BOOST_AUTO_TEST_CASE(relu_dropout_flatten) {
  parity("relu", layer_spec::relu_layer("r"), shape{3, 5, 5}, 4, {.spaced = true});
  // Same (seed, call, element) hash on both: the same mask, so exact parity.
  parity("dropout train", layer_spec::dropout("d", 0.3), shape{50}, 8, {.steps = 3});
  parity("dropout eval", layer_spec::dropout("d", 0.3), shape{50}, 8, {.m = mode::eval});
  parity("flatten", layer_spec::flatten("f"), shape{3, 4, 5}, 2);
}

BOOST_AUTO_TEST_CASE(batch_norm) {
  parity("batch_norm train 4d", layer_spec::batch_norm("bn"), shape{6, 5, 5}, 4, {.steps = 3, .atol = 2e-4});
  parity("batch_norm train 2d", layer_spec::batch_norm("bn"), shape{7}, 16, {.steps = 3, .atol = 2e-4});
  parity("batch_norm relu", layer_spec::batch_norm("bn", true), shape{4, 6, 6}, 3, {.spaced = true, .atol = 2e-4});
  // Eval after some training: running statistics are used as constants, in
  // forward and backward.
  unit_pair u = build_both(layer_spec::batch_norm("bn"), shape{3, 4, 4});
  check_parity("batch_norm warm-up", u, shape{5, 3, 4, 4}, {.steps = 2, .atol = 2e-4});
  check_parity("batch_norm eval", u, shape{5, 3, 4, 4}, {.m = mode::eval, .atol = 2e-4});
  check_parity("batch_norm eval, no input gradient", u, shape{5, 3, 4, 4}, {.m = mode::eval, .need_input_grad = false, .atol = 2e-4});
}

BOOST_AUTO_TEST_CASE(residual) {
  std::vector<layer_spec> body{layer_spec::conv2d("conv1", 4, 3, 1, 1, false, false),
                               layer_spec::batch_norm("bn1", true),
                               layer_spec::conv2d("conv2", 4, 3, 1, 1, false, false), layer_spec::batch_norm("bn2")};
  parity("residual identity", layer_spec::residual("block", body, {}, true), shape{4, 6, 6}, 3, {.atol = 5e-4});
  std::vector<layer_spec> down{layer_spec::conv2d("conv1", 8, 3, 2, 1, false, false),
                               layer_spec::batch_norm("bn1", true),
                               layer_spec::conv2d("conv2", 8, 3, 1, 1, false, false), layer_spec::batch_norm("bn2")};
  std::vector<layer_spec> proj{layer_spec::conv2d("proj", 8, 1, 2, 0, false, false), layer_spec::batch_norm("bnp")};
  parity("residual projection", layer_spec::residual("block", down, proj, true), shape{4, 8, 8}, 2, {.atol = 5e-4});
  parity("residual no relu", layer_spec::residual("block", {layer_spec::linear("fc", 6)}, {}, false), shape{6}, 4);
}

BOOST_AUTO_TEST_CASE(dlrm_features) {
  // Bottom MLP, embedding lookups (sparse gradients), dot interaction, concat.
  dlrm_spec d{3, {7, 5, 9}, 4, {6}};
  unit_pair u = build_both(layer_spec::dlrm_features("dlrm", d), shape{6});
  tensor x = tensor::empty({5, 6});
  rng r(3);
  for (int64_t s = 0; s < 5; ++s) {
    for (int j = 0; j < 3; ++j) x.f32()[s * 6 + j] = r.normal();
    for (int t = 0; t < 3; ++t) x.f32()[s * 6 + 3 + t] = float(r.below(uint64_t(d.table_rows[std::size_t(t)])));
  }
  x.f32()[6 + 3] = x.f32()[3];  // a repeated id: its gradient rows sum
  tensor xg = to_gpu(x.view());
  for (mode m : {mode::train, mode::eval}) {
    auto yc = u.cpu->forward(x.view(), m);
    auto yg = u.gpu->forward(xg.view(), m);
    BOOST_REQUIRE_MESSAGE(yc.has_value(), yc.error().to_string());
    BOOST_REQUIRE_MESSAGE(yg.has_value(), yg.error().to_string());
    check_close("dlrm forward", *yc, *yg);
    tensor dy = normal_host(yc->shape(), 17);
    tensor dyg = to_gpu(dy.view());
    auto dc = u.cpu->backward(dy.view(), true);
    auto dg = u.gpu->backward(dyg.view(), true);
    BOOST_REQUIRE_MESSAGE(dc.has_value(), dc.error().to_string());
    BOOST_REQUIRE_MESSAGE(dg.has_value(), dg.error().to_string());
    check_close("dlrm input gradient", *dc, *dg);
    std::vector<parameter*> pc, pg;
    u.cpu->parameters(pc);
    u.gpu->parameters(pg);
    for (std::size_t i = 0; i < pc.size(); ++i) {
      if (pc[i]->sparse) {
        BOOST_CHECK(pc[i]->sparse_grad.rows == pg[i]->sparse_grad.rows);
        check_close(pc[i]->name, pc[i]->sparse_grad.values.view(), pg[i]->sparse_grad.values.view());
      } else {
        check_close(pc[i]->name, pc[i]->grad.view(), pg[i]->grad.view());
      }
    }
  }
  // A bad id is refused with the same kind of error.
  x.f32()[3] = 7.0f;
  tensor bad = to_gpu(x.view());
  auto e = u.gpu->forward(bad.view(), mode::train);
  BOOST_REQUIRE(!e.has_value());
  BOOST_CHECK(e.error().code() == errc::invalid_argument);
  BOOST_TEST_MESSAGE(e.error().to_string());
}

BOOST_AUTO_TEST_CASE(wrong_device_input_is_an_error) {
  unit_pair u = build_both(layer_spec::linear("fc", 3), shape{4});
  tensor x = normal_host({2, 4}, 1);
  auto y = u.gpu->forward(x.view(), mode::train);
  BOOST_REQUIRE(!y.has_value());
  BOOST_CHECK(y.error().code() == errc::invalid_argument);
  BOOST_CHECK(y.error().message().find("lives on cpu") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops)

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_parity) {
  for (auto [n, c] : {std::pair<int64_t, int64_t>{37, 10}, {64, 1000}, {5, 2}}) {
    tensor z = normal_host({n, c}, 4, 3.0f);
    std::vector<int32_t> labels(static_cast<std::size_t>(n));
    rng r(8);
    for (auto& l : labels) l = int32_t(r.below(uint64_t(c)));
    tensor gc = tensor::empty({n, c});
    auto lc = softmax_cross_entropy(z.view(), labels, gc.mutable_view());
    BOOST_REQUIRE(lc.has_value());
    tensor zg = to_gpu(z.view());
    tensor gg = tensor::empty_on(gpu().memory(), {n, c});
    auto lg = gpu().softmax_cross_entropy(zg.view(), labels, gg.mutable_view());
    BOOST_REQUIRE_MESSAGE(lg.has_value(), lg.error().to_string());
    BOOST_CHECK_CLOSE(lc->loss, lg->loss, 1e-3);  // percent
    BOOST_CHECK_EQUAL(lc->correct, lg->correct);
    check_close("softmax gradient", gc.view(), gg.view(), 1e-6, 1e-3);
    auto eval_only = gpu().softmax_cross_entropy(zg.view(), labels);
    BOOST_REQUIRE(eval_only.has_value());
    BOOST_CHECK_EQUAL(eval_only->loss, lg->loss);
  }
  tensor z = to_gpu(normal_host({2, 3}, 1).view());
  std::vector<int32_t> bad{0, 3};
  auto e = gpu().softmax_cross_entropy(z.view(), bad);
  BOOST_REQUIRE(!e.has_value());
  BOOST_CHECK(e.error().code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_CASE(embedding_bag_parity) {
  const int64_t rows = 20, dim = 6;
  tensor table = normal_host({rows, dim}, 2);
  tensor tg = to_gpu(table.view());
  std::vector<int64_t> idx{3, 7, 3, 19, 0, 7, 7, 11, 2};
  std::vector<int64_t> off{0, 2, 2, 5, 8};  // bag 1 is empty
  for (bool mean : {false, true}) {
    cpu::embedding_bag_args a;
    a.table = table.f32();
    a.rows = rows;
    a.dim = dim;
    a.indices = idx;
    a.offsets = off;
    a.pooling = mean ? cpu::bag_pooling::mean : cpu::bag_pooling::sum;
    tensor oc = tensor::empty({int64_t(off.size()), dim});
    BOOST_REQUIRE(cpu::embedding_bag_forward(a, oc.f32()).ok());
    tensor og = tensor::empty_on(gpu().memory(), {int64_t(off.size()), dim});
    auto st = gpu().embedding_bag_forward(tg.view(), idx, off, mean, og.mutable_view());
    BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
    check_close(mean ? "bag mean forward" : "bag sum forward", oc.view(), og.view(), 1e-6, 1e-5);
    tensor dout = normal_host(oc.shape(), 5);
    sparse_rows gc, gg;
    cpu::embedding_bag_backward(a, dout.f32(), gc);
    tensor doutg = to_gpu(dout.view());
    st = gpu().embedding_bag_backward(rows, idx, off, mean, doutg.view(), gg);
    BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
    BOOST_CHECK(gc.rows == gg.rows);
    check_close("bag backward", gc.values.view(), gg.values.view(), 1e-6, 1e-5);
  }
  std::vector<int64_t> bad{3, 20};
  std::vector<int64_t> one{0};
  tensor og = tensor::empty_on(gpu().memory(), {1, dim});
  auto st = gpu().embedding_bag_forward(tg.view(), bad, one, false, og.mutable_view());
  BOOST_CHECK(st.code() == errc::invalid_argument);
}

// Parameters with gradients, on the host (cpu) and copied to the device.
struct param_set {
  std::vector<parameter> cpu, gpu;
};

param_set make_params(bool sparse) {
  param_set s;
  s.cpu.resize(3);
  s.gpu.resize(3);
  const shape shapes[3] = {{4, 5}, {5}, {9, 3}};
  for (int i = 0; i < 3; ++i) {
    parameter& c = s.cpu[std::size_t(i)];
    c.name = "p" + std::to_string(i);
    c.value = normal_host(shapes[i], 10 + i);
    parameter& g = s.gpu[std::size_t(i)];
    g.name = c.name;
    g.value = to_gpu(c.value.view());
    if (sparse && i == 2) {
      c.sparse = g.sparse = true;
      c.sparse_grad.rows = g.sparse_grad.rows = {1, 4, 8};
    }
  }
  return s;
}

void set_grads(param_set& s, uint64_t seed) {
  for (std::size_t i = 0; i < s.cpu.size(); ++i) {
    parameter& c = s.cpu[i];
    parameter& g = s.gpu[i];
    if (c.sparse) {
      c.sparse_grad.values = normal_host({3, c.value.shape()[1]}, seed + i);
      g.sparse_grad.values = to_gpu(c.sparse_grad.values.view());
    } else {
      c.grad = normal_host(c.value.shape(), seed + i);
      g.grad = to_gpu(c.grad.view());
    }
  }
}

void optimizer_parity(const std::string& name, const optimizer_config& cfg, bool sparse) {
  BOOST_TEST_CONTEXT(name) {
    param_set s = make_params(sparse);
    auto oc = make_optimizer(cfg);
    auto og = gpu().make_optimizer(cfg);
    BOOST_REQUIRE(oc.has_value());
    BOOST_REQUIRE_MESSAGE(og.has_value(), og.error().to_string());
    std::vector<parameter*> pc, pg;
    for (auto& p : s.cpu) pc.push_back(&p);
    for (auto& p : s.gpu) pg.push_back(&p);
    for (int step = 0; step < 4; ++step) {
      set_grads(s, 50 + 10 * uint64_t(step));
      BOOST_REQUIRE((*oc)->step(pc, 0.05 / (step + 1)).ok());
      auto st = (*og)->step(pg, 0.05 / (step + 1));
      BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
    }
    for (std::size_t i = 0; i < pc.size(); ++i) {
      check_close(pc[i]->name + " value", pc[i]->value.view(), pg[i]->value.view(), 1e-6, 1e-5);
      BOOST_CHECK_EQUAL(pc[i]->version, pg[i]->version);
    }
    auto sc = (*oc)->state();
    auto sg = (*og)->state();
    BOOST_REQUIRE_EQUAL(sc.size(), sg.size());
    for (std::size_t i = 0; i < sc.size(); ++i) {
      BOOST_CHECK_EQUAL(sc[i]->name, sg[i]->name);
      check_close(sc[i]->name, sc[i]->value.view(), sg[i]->value.view(), 1e-6, 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(optimizers) {
  for (bool sparse : {false, true}) {
    optimizer_parity("sgd", {optimizer_kind::sgd, 0.1, 0.0}, sparse);
    optimizer_parity("sgd momentum wd", {optimizer_kind::sgd, 0.1, 0.9, false, 1e-2}, sparse);
    optimizer_parity("sgd nesterov", {optimizer_kind::sgd, 0.1, 0.9, true, 1e-3}, sparse);
    optimizer_config adam{optimizer_kind::adam, 1e-2};
    adam.weight_decay = 1e-2;
    optimizer_parity("adam", adam, sparse);
  }
  optimizer_config bad{optimizer_kind::sgd, 0.1, 1.5};
  BOOST_CHECK(!gpu().make_optimizer(bad).has_value());
}

BOOST_AUTO_TEST_CASE(copies_round_trip) {
  tensor h = normal_host({3, 1000}, 7);
  tensor d = to_gpu(h.view());
  BOOST_CHECK(d.where() == gpu().where());
  tensor d2 = d.clone();
  BOOST_CHECK(d2.where() == gpu().where());
  tensor back = to_cpu(d2.view());
  check_close("round trip", h.view(), back.view(), 0.0, 0.0);
  d2.zero();
  tensor z = to_cpu(d2.view());
  BOOST_CHECK_EQUAL(*std::max_element(z.f32(), z.f32() + z.numel()), 0.0f);
  // Host-only helpers refuse device views instead of reading them.
  tensor h2 = tensor::empty({3, 1000});
  BOOST_CHECK(copy_into(d.view(), h2.mutable_view()).code() == errc::invalid_argument);
  tensor wrong = tensor::empty({7});
  BOOST_CHECK(gpu().copy(d.view(), wrong.mutable_view()).code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
