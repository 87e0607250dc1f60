// hp_core (strategy "hetpipe"): slice_spec, wave_plan, stage_core (slots,
// install, pipelined forward/backward, in-order local updates, the wave's
// update) and ps_core (WSP: held pushes added in (tag, worker) order once
// every unfinished worker pushed the tag; pulls answered by the clock table).
// The stage cores are checked against the whole model trained directly with
// kernels::optimizer on the same batches.
#define BOOST_TEST_MODULE hetpipe_core
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "actors/hetpipe/hp_core.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::hetpipe;

namespace {

// stage_core::wave_update, required to succeed.
std::vector<kernels::tensor> wave_update_of(hetpipe::stage_core& sc) {
  auto u = sc.wave_update();
  BOOST_REQUIRE_MESSAGE(u.has_value(), u.error().to_string());
  return std::move(*u);
}

const kernels::shape k_input{1, 8, 8};
constexpr int64_t k_classes = 5;

kernels::model_spec whole_spec() {
  kernels::zoo_options zo;
  zo.input = k_input;
  zo.classes = k_classes;
  zo.width = 0.1;
  auto spec = kernels::make_model_spec("mlp", zo);  // flatten, fc1 (relu), fc2 (relu), fc3
  BOOST_REQUIRE(spec.has_value());
  return *spec;
}

kernels::model build(const kernels::model_spec& spec, uint64_t seed = 42) {
  auto m = kernels::build_model(spec, kernels::device::cpu(), {1, seed});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  return std::move(*m);
}

kernels::optimizer_config sgd() { return {kernels::optimizer_kind::sgd, 0.05, 0.9, false, 1e-4}; }

// A stage core of units [first, last] of `whole` with nm slots (seeds differ
// from the whole model's: install() must overwrite them).
// overlap_nm > 0: overlapped waves of that Nm (rebase / wave_delta).
std::unique_ptr<stage_core> make_stage(const kernels::model& whole, std::size_t first, std::size_t last, int nm,
                                       bool is_last, int overlap_nm = 0) {
  auto spec = slice_spec(whole.spec(), first, last, whole.sample_shape(first));
  BOOST_REQUIRE_MESSAGE(spec.has_value(), spec.error().message());
  std::vector<kernels::model> slots;
  for (int s = 0; s < nm; ++s) slots.push_back(build(*spec, 1000 + uint64_t(s)));
  auto sc = stage_core::make(std::move(slots), is_last, sgd(), overlap_nm);
  BOOST_REQUIRE_MESSAGE(sc.has_value(), sc.error().message());
  return std::move(*sc);
}

struct batch {
  kernels::tensor images;
  std::vector<int32_t> labels;
};

batch make_batch(int64_t p, int64_t rows = 6) {
  std::mt19937_64 r(uint64_t(p) * 104729u + 17);
  std::normal_distribution<float> n;
  batch b{kernels::tensor::empty({rows, k_input[0], k_input[1], k_input[2]}), {}};
  for (auto& x : b.images.f32_span()) x = n(r);
  for (int64_t i = 0; i < rows; ++i) b.labels.push_back(int32_t(r() % uint64_t(k_classes)));
  return b;
}

kernels::tensor random_like(const kernels::shape& s, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> n;
  auto t = kernels::tensor::empty(s);
  for (auto& x : t.f32_span()) x = n(r);
  return t;
}

kernels::tensor copy_of(kernels::tensor_view v) { return kernels::tensor::from(v); }

std::vector<kernels::tensor_view> views_of(const std::vector<kernels::parameter*>& ps, std::size_t from = 0,
                                           std::size_t to = std::size_t(-1)) {
  std::vector<kernels::tensor_view> v;
  for (std::size_t i = from; i < ps.size() && i < to; ++i) v.push_back(ps[i]->value.view());
  return v;
}
std::vector<kernels::tensor_view> views_of(const std::vector<kernels::tensor>& ts) {
  std::vector<kernels::tensor_view> v;
  for (auto& t : ts) v.push_back(t.view());
  return v;
}

std::vector<kernels::tensor> grads_of(const std::vector<kernels::parameter*>& ps) {
  std::vector<kernels::tensor> g;
  for (auto* p : ps) g.push_back(copy_of(p->grad.view()));
  return g;
}
std::vector<kernels::tensor> values_of(const std::vector<kernels::parameter*>& ps) {
  std::vector<kernels::tensor> g;
  for (auto* p : ps) g.push_back(copy_of(p->value.view()));
  return g;
}

void check_close(std::span<const float> a, std::span<const float> b, double tol, const std::string& what) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i])) / std::max(1.0, std::fabs(double(b[i])));
    if (d > worst) worst = d, at = i;
  }
  BOOST_CHECK_MESSAGE(worst <= tol, what << ": element " << at << " differs by " << worst << " (" << a[at] << " vs "
                                         << b[at] << ")");
}

double lr_at(int64_t p) { return 0.05 / (1.0 + 0.2 * double(p)); }

// Plain training of `ref` on batches 0 .. steps - 1 (SGD momentum, lr_at);
// the losses.
std::vector<double> train_reference(kernels::model& ref, int64_t steps) {
  auto opt = kernels::make_optimizer(sgd());
  BOOST_REQUIRE(opt.has_value());
  auto rp = ref.parameters();
  std::vector<double> losses;
  ref.context().run([&] {
    for (int64_t p = 0; p < steps; ++p) {
      auto b = make_batch(p);
      auto logits = ref.forward(b.images.view(), kernels::mode::train);
      BOOST_REQUIRE(logits.has_value());
      auto g = kernels::tensor::empty(logits->shape());
      auto l = kernels::softmax_cross_entropy(*logits, b.labels, g.mutable_view());
      BOOST_REQUIRE(l.has_value());
      losses.push_back(l->loss);
      BOOST_REQUIRE(ref.backward(g.view()).has_value());
      BOOST_REQUIRE((*opt)->step(rp, lr_at(p)).ok());
    }
  });
  return losses;
}

bool all_zero(const kernels::tensor& t) {
  for (float x : t.f32_span())
    if (x != 0.0f) return false;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(slice_spec_ranges) {
  auto whole = whole_spec();
  BOOST_REQUIRE_EQUAL(whole.layers.size(), 4u);
  const kernels::shape in{51};
  auto s = slice_spec(whole, 2, 3, in);
  BOOST_REQUIRE_MESSAGE(s.has_value(), s.error().message());
  BOOST_CHECK_EQUAL(s->layers.size(), 2u);
  BOOST_CHECK_EQUAL(s->layers[0].name, whole.layers[2].name);
  BOOST_CHECK_EQUAL(s->layers[1].name, whole.layers[3].name);
  BOOST_CHECK(s->input == in);
  BOOST_CHECK_EQUAL(s->classes, whole.classes);
  auto one = slice_spec(whole, 0, 0, whole.input);
  BOOST_REQUIRE(one.has_value());
  BOOST_CHECK_EQUAL(one->layers.size(), 1u);
  auto all = slice_spec(whole, 0, 3, whole.input);
  BOOST_REQUIRE(all.has_value());
  BOOST_CHECK_EQUAL(all->layers.size(), 4u);

  for (auto [f, l] : std::vector<std::pair<std::size_t, std::size_t>>{{2, 1}, {0, 4}, {4, 4}, {1, 100}}) {
    auto bad = slice_spec(whole, f, l, in);
    BOOST_CHECK_MESSAGE(!bad.has_value(), "[" << f << ", " << l << "] accepted");
    if (!bad.has_value()) BOOST_CHECK(bad.error().code() == errc::invalid_argument);
  }
}

BOOST_AUTO_TEST_CASE(wave_plan_waves) {
  wave_plan w{10, 4};
  BOOST_CHECK_EQUAL(w.waves(), 3);
  BOOST_CHECK_EQUAL(w.first_of(0), 0);
  BOOST_CHECK_EQUAL(w.first_of(2), 8);
  BOOST_CHECK_EQUAL(w.size_of(0), 4);
  BOOST_CHECK_EQUAL(w.size_of(1), 4);
  BOOST_CHECK_EQUAL(w.size_of(2), 2);  // the last wave is shorter
  BOOST_CHECK_EQUAL(w.size_of(3), 0);
  BOOST_CHECK_EQUAL(w.wave_of(7), 1);
  BOOST_CHECK_EQUAL(w.wave_of(8), 2);
  wave_plan even{8, 4};
  BOOST_CHECK_EQUAL(even.waves(), 2);
  BOOST_CHECK_EQUAL(even.size_of(1), 4);
  wave_plan one{5, 1};
  BOOST_CHECK_EQUAL(one.waves(), 5);
  BOOST_CHECK_EQUAL(one.size_of(4), 1);
  wave_plan none{0, 3};
  BOOST_CHECK_EQUAL(none.waves(), 0);
  BOOST_CHECK_EQUAL(none.size_of(0), 0);
}

// ---------------------------------------------------------------------------
// Property 1: one stage, nm = 1, a wave per minibatch, re-installing
// base + wave_update() each wave, is plain SGD (momentum) on the whole model.
BOOST_AUTO_TEST_CASE(one_stage_nm1_is_plain_training) {
  auto spec = whole_spec();
  auto ref = build(spec);
  auto init = values_of(ref.parameters());
  auto stage = make_stage(ref, 0, 3, 1, true);
  BOOST_REQUIRE(stage->install(views_of(init)).ok());

  const int64_t steps = 5;
  auto rp = ref.parameters();
  const std::vector<double> ref_losses = train_reference(ref, steps);

  // Through the stage core: each wave (one minibatch) starts from W(c),
  // pushes u = local - W(c), and the next wave installs W(c) + u.
  std::vector<kernels::tensor> base;
  for (auto& t : init) base.push_back(copy_of(t.view()));
  for (int64_t p = 0; p < steps; ++p) {
    auto b = make_batch(p);
    stage->slot(0).context().run([&] {
      auto r = stage->forward_backward_last(p, b.images.view(), b.labels, false);
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
      BOOST_CHECK_EQUAL(r->loss.loss, ref_losses[std::size_t(p)]);
      BOOST_CHECK(r->input_grad.empty());
    });
    BOOST_REQUIRE(stage->local_update(p, lr_at(p)).ok());
    auto u = wave_update_of(*stage);
    BOOST_REQUIRE_EQUAL(u.size(), base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
      float* d = base[i].f32();
      const float* s = u[i].f32();
      for (int64_t k = 0; k < base[i].numel(); ++k) d[k] += s[k];
    }
    BOOST_REQUIRE(stage->install(views_of(base)).ok());
  }
  BOOST_CHECK_EQUAL(stage->updates(), steps);
  // Exact (0 ulp): base + (local - base) reproduces local here. Should it
  // ever round differently (local - base inexact when local and base are
  // more than a factor 2 apart), relaxing this to 1e-6 relative would still
  // catch a dropped or reordered update (~1e-3).
  for (std::size_t i = 0; i < base.size(); ++i) {
    check_close(base[i].f32_span(), rp[i]->value.f32_span(), 0.0, "parameter " + rp[i]->name);
    // The slot was re-installed with the same weights.
    auto sp = stage->slot(0).parameters();
    BOOST_CHECK(std::memcmp(sp[i]->value.f32(), base[i].f32(), base[i].byte_size()) == 0);
  }
}

// ---------------------------------------------------------------------------
// Property 2: two stages chained (units [0, 1] and [2, 3]) compute the whole
// model's loss and gradients.
BOOST_AUTO_TEST_CASE(two_stages_match_whole_model) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto wp = whole.parameters();
  const std::size_t k = 1;  // stage 0: units [0, k]
  auto s0 = make_stage(whole, 0, k, 1, false);
  auto s1 = make_stage(whole, k + 1, 3, 1, true);
  const std::size_t n0 = s0->params().size();
  BOOST_REQUIRE_EQUAL(n0 + s1->params().size(), wp.size());
  BOOST_REQUIRE(n0 > 0 && n0 < wp.size());
  BOOST_REQUIRE(s0->install(views_of(wp, 0, n0)).ok());
  BOOST_REQUIRE(s1->install(views_of(wp, n0)).ok());

  auto b = make_batch(3, 7);
  double ref_loss = 0.0;
  std::vector<kernels::tensor> ref_grads;
  kernels::tensor ref_act;
  whole.context().run([&] {
    auto act = whole.forward(b.images.view(), kernels::mode::train, 0, k + 1);
    BOOST_REQUIRE(act.has_value());
    ref_act = copy_of(*act);
    auto logits = whole.forward(b.images.view(), kernels::mode::train);
    BOOST_REQUIRE(logits.has_value());
    auto g = kernels::tensor::empty(logits->shape());
    auto l = kernels::softmax_cross_entropy(*logits, b.labels, g.mutable_view());
    BOOST_REQUIRE(l.has_value());
    ref_loss = l->loss;
    BOOST_REQUIRE(whole.backward(g.view()).has_value());
    ref_grads = grads_of(wp);
  });

  double loss = 0.0;
  s0->slot(0).context().run([&] {
    auto act = s0->forward(0, b.images.view());
    BOOST_REQUIRE_MESSAGE(act.has_value(), act.error().message());
    check_close(act->f32_span(), ref_act.f32_span(), 1e-5, "stage 0 output");
    auto r = s1->forward_backward_last(0, *act, b.labels, true);
    BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
    loss = r->loss.loss;
    BOOST_REQUIRE(!r->input_grad.empty());
    BOOST_CHECK(r->input_grad.shape() == act->shape());
    auto g0 = s0->backward(0, r->input_grad, false);
    BOOST_REQUIRE_MESSAGE(g0.has_value(), g0.error().message());
  });
  BOOST_CHECK_CLOSE(loss, ref_loss, 1e-4);  // percent: 1e-6 relative
  auto p0 = s0->slot(0).parameters();
  auto p1 = s1->slot(0).parameters();
  for (std::size_t i = 0; i < wp.size(); ++i) {
    auto* p = i < n0 ? p0[i] : p1[i - n0];
    BOOST_CHECK(p->value.shape() == wp[i]->value.shape());
    check_close(p->grad.f32_span(), ref_grads[i].f32_span(), 1e-5, "gradient of " + wp[i]->name);
  }
  // A forward-only stage has no loss.
  s0->slot(0).context().run([&] {
    BOOST_CHECK(!s0->forward_backward_last(1, b.images.view(), b.labels, false).has_value());
  });
}

// ---------------------------------------------------------------------------
// Property 3: nm = 2, two minibatches in flight in one stage: each backward
// uses its own minibatch's activations; both use W(c); slots and update
// order are enforced.
BOOST_AUTO_TEST_CASE(two_in_flight_keep_their_activations) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto init = values_of(whole.parameters());
  auto a = make_batch(10), b = make_batch(11);
  const kernels::shape out{6, k_classes};
  auto ga = random_like(out, 1), gb = random_like(out, 2);

  // Each minibatch alone on a fresh nm = 1 core with W.
  auto alone = [&](const batch& x, const kernels::tensor& g) {
    auto sc = make_stage(whole, 0, 3, 1, false);
    BOOST_REQUIRE(sc->install(views_of(init)).ok());
    sc->slot(0).context().run([&] {
      BOOST_REQUIRE(sc->forward(0, x.images.view()).has_value());
      BOOST_REQUIRE(sc->backward(0, g.view(), false).has_value());
    });
    return grads_of(sc->slot(0).parameters());
  };
  auto want_a = alone(a, ga), want_b = alone(b, gb);
  // The two gradients differ (else the check below proves nothing).
  BOOST_REQUIRE(std::memcmp(want_a[0].f32(), want_b[0].f32(), want_a[0].byte_size()) != 0);

  auto sc = make_stage(whole, 0, 3, 2, false);
  BOOST_CHECK_EQUAL(sc->slots(), 2u);
  BOOST_REQUIRE(sc->install(views_of(init)).ok());
  sc->slot(0).context().run([&] {
    BOOST_REQUIRE(sc->forward(0, a.images.view()).has_value());
    BOOST_REQUIRE(sc->forward(1, b.images.view()).has_value());
    // p = 2 needs slot 0, still held by p = 0.
    auto third = sc->forward(2, a.images.view());
    BOOST_CHECK(!third.has_value());
    // Backward of a minibatch no slot holds.
    BOOST_CHECK(!sc->backward(3, ga.view(), false).has_value());
    BOOST_REQUIRE(sc->backward(1, gb.view(), false).has_value());
    BOOST_REQUIRE(sc->backward(0, ga.view(), false).has_value());
  });
  auto got_a = grads_of(sc->slot(0).parameters());
  auto got_b = grads_of(sc->slot(1).parameters());
  for (std::size_t i = 0; i < got_a.size(); ++i) {
    check_close(got_a[i].f32_span(), want_a[i].f32_span(), 0.0, "minibatch 0 gradient " + std::to_string(i));
    check_close(got_b[i].f32_span(), want_b[i].f32_span(), 0.0, "minibatch 1 gradient " + std::to_string(i));
  }

  // Updates in minibatch order only.
  BOOST_CHECK(!sc->local_update(1, 0.05).ok());
  BOOST_CHECK_EQUAL(sc->updates(), 0);
  BOOST_REQUIRE(sc->local_update(0, 0.05).ok());
  // Slot 0 is free again: p = 2 may start (and its update must wait for 1).
  sc->slot(0).context().run([&] { BOOST_CHECK(sc->forward(2, a.images.view()).has_value()); });
  BOOST_CHECK(!sc->local_update(0, 0.05).ok());  // already done
  BOOST_REQUIRE(sc->local_update(1, 0.05).ok());
  BOOST_CHECK_EQUAL(sc->updates(), 2);

  // The wave's update = two optimizer steps from W with g(a at W) then
  // g(b at W) (both gradients at W(c): not g(b) at the weights after a).
  auto ref = build(spec);
  auto rp = ref.parameters();
  for (std::size_t i = 0; i < rp.size(); ++i) std::memcpy(rp[i]->value.f32(), init[i].f32(), init[i].byte_size());
  auto opt = kernels::make_optimizer(sgd());
  BOOST_REQUIRE(opt.has_value());
  for (auto* g : {&want_a, &want_b}) {
    for (std::size_t i = 0; i < rp.size(); ++i)
      std::memcpy(rp[i]->grad.f32(), (*g)[i].f32(), (*g)[i].byte_size());
    BOOST_REQUIRE((*opt)->step(rp, 0.05).ok());
  }
  auto u = wave_update_of(*sc);
  for (std::size_t i = 0; i < rp.size(); ++i) {
    std::vector<float> d(std::size_t(init[i].numel()));
    for (std::size_t k = 0; k < d.size(); ++k) d[k] = rp[i]->value.f32()[k] - init[i].f32()[k];
    check_close(u[i].f32_span(), d, 0.0, "wave update " + rp[i]->name);
  }
}

// ---------------------------------------------------------------------------
// Property 4: wave_update() is zero right after install, local - base after
// an update.
BOOST_AUTO_TEST_CASE(wave_update_is_local_minus_base) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto init = values_of(whole.parameters());
  auto sc = make_stage(whole, 0, 3, 1, true);
  BOOST_REQUIRE(sc->install(views_of(init)).ok());
  for (auto& t : wave_update_of(*sc)) BOOST_CHECK(all_zero(t));
  for (std::size_t s = 0; s < sc->slots(); ++s) {
    auto ps = sc->slot(s).parameters();
    for (std::size_t i = 0; i < ps.size(); ++i)
      BOOST_CHECK(std::memcmp(ps[i]->value.f32(), init[i].f32(), init[i].byte_size()) == 0);
  }

  // Bad installs.
  auto few = views_of(init);
  few.pop_back();
  BOOST_CHECK(!sc->install(few).ok());
  auto wrong = views_of(init);
  std::swap(wrong[0], wrong[1]);  // a weight matrix where a bias goes
  BOOST_CHECK(!sc->install(wrong).ok());

  auto b = make_batch(5);
  sc->slot(0).context().run([&] {
    BOOST_REQUIRE(sc->forward_backward_last(0, b.images.view(), b.labels, false).has_value());
  });
  auto g = grads_of(sc->slot(0).parameters());
  BOOST_REQUIRE(sc->local_update(0, 0.1).ok());
  // The expected local weights: one optimizer step from W with g.
  auto ref = build(spec);
  auto rp = ref.parameters();
  for (std::size_t i = 0; i < rp.size(); ++i) {
    std::memcpy(rp[i]->value.f32(), init[i].f32(), init[i].byte_size());
    std::memcpy(rp[i]->grad.f32(), g[i].f32(), g[i].byte_size());
  }
  auto opt = kernels::make_optimizer(sgd());
  BOOST_REQUIRE(opt.has_value());
  BOOST_REQUIRE((*opt)->step(rp, 0.1).ok());
  auto u = wave_update_of(*sc);
  bool any_nonzero = false;
  for (std::size_t i = 0; i < rp.size(); ++i) {
    std::vector<float> d(std::size_t(init[i].numel()));
    for (std::size_t k = 0; k < d.size(); ++k) d[k] = rp[i]->value.f32()[k] - init[i].f32()[k];
    BOOST_CHECK_MESSAGE(std::memcmp(u[i].f32(), d.data(), u[i].byte_size()) == 0, "wave update of " << rp[i]->name);
    any_nonzero = any_nonzero || !all_zero(u[i]);
  }
  BOOST_CHECK(any_nonzero);
  // The slots keep W(c): the local step does not touch them.
  auto sp = sc->slot(0).parameters();
  for (std::size_t i = 0; i < sp.size(); ++i)
    BOOST_CHECK(std::memcmp(sp[i]->value.f32(), init[i].f32(), init[i].byte_size()) == 0);
  // Re-installing zeroes the update again.
  BOOST_REQUIRE(sc->install(views_of(init)).ok());
  for (auto& t : wave_update_of(*sc)) BOOST_CHECK(all_zero(t));
}

BOOST_AUTO_TEST_CASE(stage_make_errors) {
  BOOST_CHECK(!stage_core::make({}, true, sgd()).has_value());
  auto spec = whole_spec();
  auto whole = build(spec);
  auto s01 = slice_spec(spec, 0, 1, whole.sample_shape(0));
  auto s03 = slice_spec(spec, 0, 3, whole.sample_shape(0));
  BOOST_REQUIRE(s01.has_value() && s03.has_value());
  std::vector<kernels::model> differ;
  differ.push_back(build(*s01));
  differ.push_back(build(*s03));
  auto sc = stage_core::make(std::move(differ), false, sgd());
  BOOST_CHECK(!sc.has_value());
  if (!sc.has_value()) BOOST_CHECK(sc.error().code() == errc::invalid_argument);
}

// ---------------------------------------------------------------------------
// ps_core

namespace {

kernels::tensor filled(const kernels::shape& s, float v) { return kernels::tensor::filled(s, v); }

// Units 1 (a 2x2 weight and a bias of 2) and 3 (a vector of 3).
std::map<std::size_t, std::vector<kernels::tensor>> shard_units() {
  std::map<std::size_t, std::vector<kernels::tensor>> u;
  u[1].push_back(filled({2, 2}, 1.0f));
  u[1].push_back(filled({2}, 2.0f));
  u[3].push_back(filled({3}, 3.0f));
  return u;
}

std::vector<kernels::tensor> update_of(float w, float b, float c) {
  std::vector<kernels::tensor> v;
  v.push_back(filled({2, 2}, w));
  v.push_back(filled({2}, b));
  v.push_back(filled({3}, c));
  return v;
}

std::vector<kernels::tensor> unit3(float v) {
  std::vector<kernels::tensor> t;
  t.push_back(filled({3}, v));
  return t;
}

void check_all(const kernels::tensor& t, float want, const std::string& what) {
  for (float x : t.f32_span()) BOOST_CHECK_MESSAGE(x == want, what << ": " << x << " != " << want);
}

}  // namespace

BOOST_AUTO_TEST_CASE(ps_units_in) {
  ps_core ps(shard_units(), 2, 0);
  BOOST_CHECK(ps.holds(1) && ps.holds(3) && !ps.holds(0) && !ps.holds(2));
  BOOST_CHECK((ps.units_in(0, 5) == std::vector<std::size_t>{1, 3}));
  BOOST_CHECK((ps.units_in(1, 3) == std::vector<std::size_t>{1, 3}));
  BOOST_CHECK((ps.units_in(2, 3) == std::vector<std::size_t>{3}));
  BOOST_CHECK((ps.units_in(0, 1) == std::vector<std::size_t>{1}));
  BOOST_CHECK(ps.units_in(0, 0).empty());
  BOOST_CHECK(ps.units_in(4, 9).empty());
  BOOST_CHECK(ps.units_in(2, 2).empty());
}

BOOST_AUTO_TEST_CASE(ps_staleness0_waits_for_every_worker) {
  ps_core ps(shard_units(), 2, 0);
  std::vector<ps::pull_ticket> released;
  // Wave 0's weights may be read at once.
  BOOST_CHECK(ps.pull({0, 0, 1}));
  BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(0.5f, 0.25f, -1.0f), released).ok());
  BOOST_CHECK(released.empty());
  check_all(ps.units().at(1)[0], 1.0f, "held: unit 1 weight");
  check_all(ps.units().at(1)[1], 2.0f, "held: unit 1 bias");
  check_all(ps.units().at(3)[0], 3.0f, "held: unit 3");
  BOOST_CHECK_EQUAL(ps.applied_below(), 0);
  // Worker 0 at wave 1 waits for worker 1's wave 0.
  BOOST_CHECK(!ps.pull({0, 1, 7}));
  BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(0.125f, 1.0f, 4.0f), released).ok());
  check_all(ps.units().at(1)[0], 1.0f + 0.5f + 0.125f, "unit 1 weight");
  check_all(ps.units().at(1)[1], 2.0f + 0.25f + 1.0f, "unit 1 bias");
  check_all(ps.units().at(3)[0], 3.0f - 1.0f + 4.0f, "unit 3");
  BOOST_REQUIRE_EQUAL(released.size(), 1u);
  BOOST_CHECK_EQUAL(released[0].id, 7u);
  BOOST_CHECK_EQUAL(released[0].worker, 0);
  BOOST_CHECK_EQUAL(released[0].clock, 1);
  BOOST_CHECK_EQUAL(ps.applied_below(), 1);
  BOOST_CHECK_EQUAL(ps.pushes(), 2);
  BOOST_CHECK(ps.pull({1, 1, 8}));
  BOOST_CHECK(!ps.pull({1, 2, 9}));
}

// D > 0: a pull may run ahead of the slowest VW, and each update is added
// on arrival, in each worker's wave order (an early push waits for the ones
// before it from the same worker), so a VW sees its own latest waves.
BOOST_AUTO_TEST_CASE(ps_staleness1_reads_ahead) {
  ps_core ps(shard_units(), 2, 1);
  BOOST_CHECK(ps.pull({0, 1, 1}));   // g = 0 >= 1 - 1, before any push
  BOOST_CHECK(!ps.pull({0, 2, 2}));  // needs g >= 1
  std::vector<ps::pull_ticket> released;
  BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE(ps.push(0, 1, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK(released.empty());
  check_all(ps.units().at(3)[0], 3.0f + 1.0f + 1.0f, "worker 0's waves added on arrival");
  BOOST_CHECK_EQUAL(ps.applied_below(), 0);
  // Worker 1's wave 1 arrives before its wave 0: held until wave 0 is in.
  BOOST_REQUIRE(ps.push(1, 1, 0, 3, update_of(8, 8, 8), released).ok());
  check_all(ps.units().at(3)[0], 5.0f, "an early push is held");
  BOOST_CHECK(released.empty());
  BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(2, 2, 2), released).ok());
  check_all(ps.units().at(3)[0], 5.0f + 2.0f + 8.0f, "worker 1's waves 0 and 1");
  check_all(ps.units().at(1)[0], 1.0f + 1.0f + 1.0f + 2.0f + 8.0f, "unit 1 weight");
  BOOST_REQUIRE_EQUAL(released.size(), 1u);
  BOOST_CHECK_EQUAL(released[0].id, 2u);
  BOOST_CHECK_EQUAL(ps.applied_below(), 2);
  BOOST_CHECK_EQUAL(ps.pushes(), 4);
}

// D = 0: the updates of a tag are added in worker order, whatever order they
// came in: the weights are a function of the pushes (float addition is not
// associative, so the order is observable).
BOOST_AUTO_TEST_CASE(ps_adds_in_tag_worker_order) {
  const float x = 1.0f, u0 = 1e8f, u1 = 4.0f;
  volatile float a = x, b = u0, c = u1;
  const float in_order = (a + b) + c, reversed = (a + c) + b;
  BOOST_REQUIRE(in_order != reversed);
  for (bool w1_first : {false, true}) {
    std::map<std::size_t, std::vector<kernels::tensor>> units;
    units[0].push_back(filled({4}, x));
    ps_core ps(std::move(units), 2, 0);
    std::vector<ps::pull_ticket> released;
    std::vector<kernels::tensor> up0, up1;
    up0.push_back(filled({4}, u0));
    up1.push_back(filled({4}, u1));
    if (w1_first) {
      BOOST_REQUIRE(ps.push(1, 0, 0, 0, std::move(up1), released).ok());
      BOOST_REQUIRE(ps.push(0, 0, 0, 0, std::move(up0), released).ok());
    } else {
      BOOST_REQUIRE(ps.push(0, 0, 0, 0, std::move(up0), released).ok());
      BOOST_REQUIRE(ps.push(1, 0, 0, 0, std::move(up1), released).ok());
    }
    check_all(ps.units().at(0)[0], in_order, w1_first ? "worker 1 pushed first" : "worker 0 pushed first");
  }
  // Across tags: tag 0 of both workers before tag 1 of any; an early push
  // (worker 1's tag 1 before its tag 0) is held.
  {
    std::map<std::size_t, std::vector<kernels::tensor>> units;
    units[0].push_back(filled({1}, x));
    ps_core ps(std::move(units), 2, 0);
    std::vector<ps::pull_ticket> released;
    auto one = [](float v) {
      std::vector<kernels::tensor> t;
      t.push_back(filled({1}, v));
      return t;
    };
    // tag 0: w0 = u0, w1 = -u0 ; tag 1: w0 = u1, w1 = u1.
    BOOST_REQUIRE(ps.push(0, 0, 0, 0, one(u0), released).ok());
    BOOST_REQUIRE(ps.push(0, 1, 0, 0, one(u1), released).ok());
    BOOST_REQUIRE(ps.push(1, 1, 0, 0, one(u1), released).ok());
    check_all(ps.units().at(0)[0], x, "nothing applied before worker 1's tag 0");
    BOOST_CHECK_EQUAL(ps.applied_below(), 0);
    BOOST_REQUIRE(ps.push(1, 0, 0, 0, one(-u0), released).ok());
    volatile float v = x;
    v = v + u0;
    v = v + (-u0);
    v = v + u1;
    v = v + u1;
    check_all(ps.units().at(0)[0], v, "(tag, worker) order");
    BOOST_CHECK_EQUAL(ps.applied_below(), 2);
  }
}

BOOST_AUTO_TEST_CASE(ps_bad_pushes) {
  ps_core ps(shard_units(), 2, 0);
  std::vector<ps::pull_ticket> released;
  // Too few tensors.
  auto few = update_of(1, 1, 1);
  few.pop_back();
  auto s = ps.push(0, 0, 0, 3, std::move(few), released);
  BOOST_CHECK(!s.ok());
  BOOST_CHECK(s.code() == errc::invalid_argument);
  // Too many.
  auto many = update_of(1, 1, 1);
  many.push_back(filled({3}, 1.0f));
  BOOST_CHECK(!ps.push(0, 0, 0, 3, std::move(many), released).ok());
  // Units [2, 3] here: unit 3 only: three tensors are too many.
  BOOST_CHECK(!ps.push(0, 0, 2, 3, update_of(1, 1, 1), released).ok());
  // Wrong shapes.
  auto shape = update_of(1, 1, 1);
  shape[0] = filled({4}, 1.0f);
  BOOST_CHECK(!ps.push(0, 0, 0, 3, std::move(shape), released).ok());
  auto last = update_of(1, 1, 1);
  last[2] = filled({1, 3}, 1.0f);
  BOOST_CHECK(!ps.push(0, 0, 0, 3, std::move(last), released).ok());
  // Nothing counted.
  BOOST_CHECK_EQUAL(ps.pushes(), 0);
  BOOST_CHECK_EQUAL(ps.clocks().clock(0), 0);
  // A correct push still goes through, a duplicate does not.
  BOOST_CHECK(ps.push(0, 0, 2, 3, unit3(1.0f), released).ok());
  BOOST_CHECK_EQUAL(ps.pushes(), 1);
  BOOST_CHECK(!ps.push(0, 0, 2, 3, unit3(1.0f), released).ok());
  BOOST_CHECK_EQUAL(ps.pushes(), 1);
  // Worker out of range.
  BOOST_CHECK(!ps.push(2, 0, 2, 3, unit3(1.0f), released).ok());
  check_all(ps.units().at(3)[0], 3.0f, "no update applied");
}

BOOST_AUTO_TEST_CASE(ps_finished_worker_stops_holding_back) {
  ps_core ps(shard_units(), 2, 0);
  std::vector<ps::pull_ticket> released;
  BOOST_REQUIRE(ps.finish(1, 1).ok());
  BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK(ps.clocks().finished(1));
  BOOST_CHECK(!ps.pull({0, 1, 3}));
  BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE_EQUAL(released.size(), 1u);
  BOOST_CHECK_EQUAL(released[0].id, 3u);
  check_all(ps.units().at(3)[0], 5.0f, "wave 0");
  // Worker 1 is done: worker 0's later waves go in at once.
  BOOST_REQUIRE(ps.push(0, 1, 0, 3, update_of(1, 1, 0.5f), released).ok());
  check_all(ps.units().at(3)[0], 5.5f, "wave 1");
  BOOST_CHECK_EQUAL(ps.applied_below(), 2);
  BOOST_CHECK(ps.pull({0, 2, 4}));
  BOOST_REQUIRE(ps.push(0, 2, 0, 3, update_of(1, 1, 0.25f), released).ok());
  check_all(ps.units().at(3)[0], 5.75f, "wave 2");
  BOOST_CHECK(ps.pull({0, 3, 5}));
}

// Checkpoints: with a barrier at wave 1, the weights hold exactly wave 0 of
// every worker when at_barrier() says so (wave 1 pushes wait behind it),
// with D = 0 and D = 1; moving the barrier adds them; no barrier past the end.
BOOST_AUTO_TEST_CASE(ps_barrier_is_a_consistent_cut) {
  for (int64_t d : {0, 1}) {
    ps_core ps(shard_units(), 2, d);
    BOOST_REQUIRE(ps.finish(0, 2).ok());
    BOOST_REQUIRE(ps.finish(1, 2).ok());
    ps.set_barrier(1);
    std::vector<ps::pull_ticket> released;
    BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(1.0f, 1.0f, 1.0f), released).ok());
    BOOST_REQUIRE(ps.push(0, 1, 0, 3, update_of(10.0f, 10.0f, 10.0f), released).ok());
    BOOST_CHECK(!ps.at_barrier());  // worker 1's wave 0 is missing
    BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(2.0f, 2.0f, 2.0f), released).ok());
    BOOST_CHECK(ps.at_barrier());
    check_all(ps.units().at(3)[0], 3.0f + 1.0f + 2.0f, "the cut holds wave 0 only, D = " + std::to_string(d));
    BOOST_CHECK((ps.barrier_clocks() == std::vector<int64_t>{1, 1}));
    ps.set_barrier(2);
    BOOST_CHECK(!ps.at_barrier());
    // D = 1 adds worker 0's wave 1 at once now; D = 0 once worker 1's comes too.
    check_all(ps.units().at(3)[0], d == 1 ? 16.0f : 6.0f, "after the barrier moved, D = " + std::to_string(d));
    BOOST_REQUIRE(ps.push(1, 1, 0, 3, update_of(20.0f, 20.0f, 20.0f), released).ok());
    check_all(ps.units().at(3)[0], 36.0f, "every wave in, D = " + std::to_string(d));
    BOOST_CHECK(ps.at_barrier());  // the end: waves 0 and 1 of both
    ps.set_barrier(3);
    BOOST_CHECK(!ps.at_barrier());  // nothing past the end
  }
}

BOOST_AUTO_TEST_CASE(ps_restore_checks_the_checkpoint) {
  ps_core ps(shard_units(), 2, 0);
  auto units = shard_units();
  units[3][0] = filled({3}, 7.0f);
  BOOST_REQUIRE(ps.restore(std::move(units), {4, 4}).ok());
  check_all(ps.units().at(3)[0], 7.0f, "restored unit 3");
  BOOST_CHECK_EQUAL(ps.clocks().global(), 4);
  BOOST_CHECK(ps.pull({0, 4, 1}));
  std::vector<ps::pull_ticket> released;
  BOOST_CHECK(!ps.push(0, 3, 0, 3, update_of(1.0f, 1.0f, 1.0f), released).ok());  // a wave before the checkpoint
  auto wrong = shard_units();
  wrong.erase(3);
  BOOST_CHECK(!ps.restore(std::move(wrong), {4, 4}).ok());
  auto bad_shape = shard_units();
  bad_shape[3][0] = filled({4}, 1.0f);
  BOOST_CHECK(!ps.restore(std::move(bad_shape), {4, 4}).ok());
  BOOST_CHECK(!ps.restore(shard_units(), {4}).ok());  // a checkpoint of another number of workers
}

// `set staleness D` at run time: a pull the old bound held comes out.
BOOST_AUTO_TEST_CASE(ps_set_staleness_releases_waiting_pulls) {
  ps_core ps(shard_units(), 2, 0);
  BOOST_CHECK(!ps.pull({0, 2, 5}));  // D = 0: needs g >= 2
  auto ready = ps.set_staleness(1);
  BOOST_CHECK(ready.empty());  // g = 0 < 2 - 1
  ready = ps.set_staleness(2);
  BOOST_REQUIRE_EQUAL(ready.size(), 1u);
  BOOST_CHECK_EQUAL(ready[0].id, 5u);
  BOOST_CHECK_EQUAL(ps.staleness(), 2);
  BOOST_CHECK_EQUAL(ps.clocks().model().staleness, 2);
}

// A unit without parameters (pooling) has no tensors in a checkpoint: the
// restore does not need it, but every unit with parameters must be there.
BOOST_AUTO_TEST_CASE(ps_restore_without_parameterless_units) {
  auto units = shard_units();
  units[2];  // a pooling unit: held, no tensors
  ps_core ps(std::move(units), 2, 0);
  auto ck = shard_units();
  ck[1][1] = filled({2}, 9.0f);
  BOOST_REQUIRE(ps.restore(std::move(ck), {2, 2}).ok());
  check_all(ps.units().at(1)[1], 9.0f, "restored unit 1 bias");
  BOOST_CHECK(ps.holds(2) && ps.units().at(2).empty());
  auto missing = shard_units();
  missing.erase(1);
  BOOST_CHECK(!ps.restore(std::move(missing), {2, 2}).ok());
}

// ---------------------------------------------------------------------------
// Overlapped waves (hetpipe_waves = "overlap")

namespace {

std::vector<kernels::tensor_view> delta_of(stage_core& sc, int64_t t) {
  auto d = sc.wave_delta(t);
  BOOST_REQUIRE_MESSAGE(d.has_value(), d.error().to_string());
  return *d;
}

void add_into(std::vector<kernels::tensor>& dst, const std::vector<kernels::tensor_view>& src) {
  BOOST_REQUIRE_EQUAL(dst.size(), src.size());
  for (std::size_t i = 0; i < dst.size(); ++i) {
    float* d = dst[i].f32();
    const float* s = src[i].f32();
    for (int64_t k = 0; k < dst[i].numel(); ++k) d[k] += s[k];
  }
}

std::vector<kernels::tensor> copies(const std::vector<kernels::tensor_view>& v) {
  std::vector<kernels::tensor> out;
  for (auto& x : v) out.push_back(copy_of(x));
  return out;
}

}  // namespace

// One stage, Nm = 1, the shard's overlapped rule (a pull of wave w holds the
// waves <= w - 2; the stage adds its own wave w - 1): plain SGD on the whole
// model, bit for bit, like the drained waves.
BOOST_AUTO_TEST_CASE(overlapped_one_stage_nm1_is_plain_training) {
  auto spec = whole_spec();
  auto ref = build(spec);
  auto init = values_of(ref.parameters());
  auto stage = make_stage(ref, 0, 3, 1, true, 1);
  BOOST_CHECK(stage->overlapped());
  BOOST_CHECK(!stage->install(views_of(init)).ok());  // drained waves only
  BOOST_CHECK(!stage->wave_update().has_value());
  const int64_t steps = 6;
  auto rp = ref.parameters();
  const std::vector<double> ref_losses = train_reference(ref, steps);
  // The shard: G = init + the pushed deltas of waves <= w - 2.
  std::vector<kernels::tensor> shard;
  for (auto& t : init) shard.push_back(copy_of(t.view()));
  std::vector<std::vector<kernels::tensor>> pushed;
  for (int64_t w = 0; w < steps; ++w) {
    if (w >= 2) add_into(shard, views_of(pushed[std::size_t(w - 2)]));
    const int64_t x = std::max<int64_t>(0, w - 1);
    BOOST_REQUIRE(stage->rebase(views_of(shard), std::vector<int64_t>(shard.size(), x)).ok());
    BOOST_CHECK_LE(stage->kept_deltas(), 1u);  // only wave w - 1's, not yet in G
    auto b = make_batch(w);
    stage->slot(0).context().run([&] {
      auto r = stage->forward_backward_last(w, b.images.view(), b.labels, false);
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
      BOOST_CHECK_EQUAL(r->loss.loss, ref_losses[std::size_t(w)]);
    });
    BOOST_REQUIRE(stage->local_update(w, lr_at(w)).ok());
    pushed.push_back(copies(delta_of(*stage, w)));
  }
  for (std::size_t i = 0; i < rp.size(); ++i) {  // G + the last two waves = the reference
    std::vector<kernels::tensor> v;
    v.push_back(copy_of(shard[i].view()));
    add_into(v, {pushed[std::size_t(steps - 2)][i].view()});
    add_into(v, {pushed[std::size_t(steps - 1)][i].view()});
    check_close(v[0].f32_span(), rp[i]->value.f32_span(), 1e-6, "parameter " + rp[i]->name);
  }
  // Bad rebases.
  BOOST_CHECK(!stage->rebase(views_of(shard), std::vector<int64_t>(shard.size() - 1, 0)).ok());
  auto few = views_of(shard);
  few.pop_back();
  BOOST_CHECK(!stage->rebase(few, std::vector<int64_t>(few.size(), 0)).ok());
  BOOST_CHECK(!stage->wave_delta(99).has_value());
  // A one-slot stage rebases only with its slot free (its update takes the
  // weights before its step from the slot): refused between forward and update.
  auto open = make_stage(ref, 0, 3, 1, false, 1);
  BOOST_REQUIRE(open->rebase(views_of(shard), std::vector<int64_t>(shard.size(), 0)).ok());
  auto b0 = make_batch(0);
  open->slot(0).context().run([&] { BOOST_REQUIRE(open->forward(0, b0.images.view()).has_value()); });
  BOOST_CHECK(!open->rebase(views_of(shard), std::vector<int64_t>(shard.size(), 0)).ok());
}

// Weight stashing: two minibatches in flight; the update of 0 before the
// backward of 1 does not change 1's weights (its slot keeps the local
// weights of its forward), the forward of 2 takes the updated ones, and the
// wave's delta is the sum of its steps.
BOOST_AUTO_TEST_CASE(overlapped_slots_keep_the_weights_of_their_forward) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto init = values_of(whole.parameters());
  auto sc = make_stage(whole, 0, 3, 2, false, 2);
  BOOST_REQUIRE(sc->rebase(views_of(init), std::vector<int64_t>(init.size(), 0)).ok());
  auto a = make_batch(20), b = make_batch(21);
  const kernels::shape out{6, k_classes};
  auto ga = random_like(out, 3), gb = random_like(out, 4);
  std::vector<kernels::tensor> after0;
  sc->slot(0).context().run([&] {
    BOOST_REQUIRE(sc->forward(0, a.images.view()).has_value());
    BOOST_REQUIRE(sc->forward(1, b.images.view()).has_value());
    BOOST_REQUIRE(sc->backward(0, ga.view(), false).has_value());
  });
  BOOST_REQUIRE(sc->local_update(0, 0.05).ok());
  // Slot 1 still holds the weights minibatch 1 started with.
  auto s1 = sc->slot(1).parameters();
  for (std::size_t i = 0; i < s1.size(); ++i)
    BOOST_CHECK(std::memcmp(s1[i]->value.f32(), init[i].f32(), init[i].byte_size()) == 0);
  // Its gradient is the one at W (as on a fresh drained stage).
  auto alone = make_stage(whole, 0, 3, 1, false);
  BOOST_REQUIRE(alone->install(views_of(init)).ok());
  alone->slot(0).context().run([&] {
    BOOST_REQUIRE(alone->forward(0, b.images.view()).has_value());
    BOOST_REQUIRE(alone->backward(0, gb.view(), false).has_value());
  });
  sc->slot(0).context().run([&] { BOOST_REQUIRE(sc->backward(1, gb.view(), false).has_value()); });
  auto want = grads_of(alone->slot(0).parameters()), got = grads_of(s1);
  for (std::size_t i = 0; i < got.size(); ++i)
    check_close(got[i].f32_span(), want[i].f32_span(), 0.0, "minibatch 1 gradient " + std::to_string(i));
  // Minibatch 2's forward takes the local weights after update 0.
  auto d0 = copies(delta_of(*sc, 0));
  sc->slot(0).context().run([&] { BOOST_REQUIRE(sc->forward(2, a.images.view()).has_value()); });
  auto s0 = sc->slot(0).parameters();
  for (std::size_t i = 0; i < s0.size(); ++i) {
    std::vector<kernels::tensor> v;
    v.push_back(copy_of(init[i].view()));
    add_into(v, {d0[i].view()});
    check_close(s0[i]->value.f32_span(), v[0].f32_span(), 1e-7, "slot 0 after update 0, " + s0[i]->name);
    BOOST_CHECK(!all_zero(d0[i]));
  }
  BOOST_REQUIRE(sc->local_update(1, 0.05).ok());
  // Wave 0 = minibatches 0 and 1: one delta holding both steps.
  BOOST_CHECK_EQUAL(sc->kept_deltas(), 1u);
  // Wave 1's first update opens its own delta; a rebase with X = 1 drops
  // wave 0's and adds wave 1's to G.
  sc->slot(0).context().run([&] { BOOST_REQUIRE(sc->backward(2, ga.view(), false).has_value()); });
  BOOST_REQUIRE(sc->local_update(2, 0.05).ok());
  BOOST_CHECK_EQUAL(sc->kept_deltas(), 2u);
  auto d1 = copies(delta_of(*sc, 1));
  std::vector<kernels::tensor> g;
  for (auto& t : init) g.push_back(kernels::tensor::filled(t.shape(), 0.5f));
  BOOST_REQUIRE(sc->rebase(views_of(g), std::vector<int64_t>(g.size(), 1)).ok());
  BOOST_CHECK_EQUAL(sc->kept_deltas(), 1u);
  sc->slot(0).context().run([&] { BOOST_REQUIRE(sc->forward(3, b.images.view()).has_value()); });
  auto s1b = sc->slot(1).parameters();
  for (std::size_t i = 0; i < s1b.size(); ++i) {
    std::vector<kernels::tensor> v;
    v.push_back(copy_of(g[i].view()));
    add_into(v, {d1[i].view()});
    check_close(s1b[i]->value.f32_span(), v[0].f32_span(), 0.0, "after the rebase, " + s1b[i]->name);
  }
}

// A cpu stage with one slot and overlapped waves: the slot's parameters are
// the local weights (a rebase writes them, no copy at the forward); with two
// slots each forward copies the local weights into its slot.
BOOST_AUTO_TEST_CASE(overlapped_one_cpu_slot_holds_the_local_weights) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto init = values_of(whole.parameters());
  std::vector<kernels::tensor> g;
  for (auto& t : init) g.push_back(kernels::tensor::filled(t.shape(), 0.5f));
  for (int slots : {1, 2}) {
    auto sc = make_stage(whole, 0, 3, slots, false, 2);
    BOOST_REQUIRE(sc->rebase(views_of(g), std::vector<int64_t>(g.size(), 0)).ok());
    auto sp = sc->slot(0).parameters();
    std::size_t same = 0;
    for (std::size_t i = 0; i < sp.size(); ++i)
      same += std::memcmp(sp[i]->value.f32(), g[i].f32(), g[i].byte_size()) == 0;
    BOOST_CHECK_EQUAL(same, slots == 1 ? sp.size() : std::size_t{0});
    auto b = make_batch(30);
    sc->slot(0).context().run([&] { BOOST_REQUIRE(sc->forward(0, b.images.view()).has_value()); });
    for (std::size_t i = 0; i < sp.size(); ++i)  // the forward's weights: G either way
      BOOST_CHECK(std::memcmp(sp[i]->value.f32(), g[i].f32(), g[i].byte_size()) == 0);
  }
}

BOOST_AUTO_TEST_CASE(overlapped_stage_make_errors) {
  auto spec = whole_spec();
  auto whole = build(spec);
  auto sub = slice_spec(spec, 0, 3, whole.sample_shape(0));
  BOOST_REQUIRE(sub.has_value());
  std::vector<kernels::model> three;
  for (int s = 0; s < 3; ++s) three.push_back(build(*sub));
  BOOST_CHECK(!stage_core::make(std::move(three), true, sgd(), 2).has_value());  // more slots than Nm
  std::vector<kernels::model> one;
  one.push_back(build(*sub));
  BOOST_CHECK(!stage_core::make(std::move(one), true, sgd(), -1).has_value());
}

// D = 0, overlapped: a pull of wave w is answered with exactly the waves
// <= w - 2 of every worker: wave t is added only once every worker pushed it
// and pulled t + 1, so no answer depends on when the pushes came.
BOOST_AUTO_TEST_CASE(ps_overlapped_exact_pulls_see_waves_below_w_minus_1) {
  ps_core ps(shard_units(), 2, 0, {true, 0});
  for (int w = 0; w < 2; ++w) BOOST_REQUIRE(ps.finish(w, 4).ok());
  auto ids = [](const std::vector<ps::pull_ticket>& v) {
    std::vector<uint64_t> out;
    for (auto& t : v) out.push_back(t.id);
    return out;
  };
  std::vector<ps::pull_ticket> released;
  ps.pull_overlapped({0, 0, 1});
  ps.pull_overlapped({1, 0, 2});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{1, 2}));
  BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(2, 2, 2), released).ok());
  BOOST_CHECK(released.empty());
  BOOST_CHECK(ps.take_ready().empty());
  check_all(ps.units().at(3)[0], 3.0f, "wave 0 waits for every pull of wave 1");
  // Wave 1's pulls need nothing (waves <= -1): answered with the initial
  // weights, and wave 0 goes in only after the second.
  ps.pull_overlapped({1, 1, 3});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{3}));
  check_all(ps.units().at(3)[0], 3.0f, "wave 0 still out");
  BOOST_CHECK(ps.take_ready().empty());
  BOOST_CHECK_EQUAL(ps.applied_below(), 0);
  ps.pull_overlapped({0, 1, 4});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{4}));
  check_all(ps.units().at(3)[0], 3.0f, "answered before wave 0 goes in");
  BOOST_CHECK(ps.take_ready().empty());
  check_all(ps.units().at(3)[0], 3.0f + 1.0f + 2.0f, "wave 0 in");
  BOOST_CHECK_EQUAL(ps.applied_below(), 1);
  BOOST_CHECK_EQUAL(ps.included_below(0), 1);
  BOOST_CHECK_EQUAL(ps.included_below(1), 1);
  // Wave 2 needs waves <= 0 (in); wave 3 needs wave 1 of both.
  ps.pull_overlapped({0, 2, 5});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{5}));
  BOOST_REQUIRE(ps.push(0, 1, 0, 3, update_of(4, 4, 4), released).ok());
  ps.pull_overlapped({0, 3, 6});
  BOOST_CHECK(ps.take_ready().empty());  // worker 1's wave 1 missing
  BOOST_REQUIRE(ps.push(1, 1, 0, 3, update_of(8, 8, 8), released).ok());
  BOOST_CHECK(ps.take_ready().empty());  // and worker 1's pull of wave 2
  ps.pull_overlapped({1, 2, 7});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{7}));
  check_all(ps.units().at(3)[0], 6.0f, "worker 1's wave 2 pull: waves <= 0");
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{6}));
  check_all(ps.units().at(3)[0], 18.0f, "worker 0's wave 3 pull: waves <= 1");
  BOOST_CHECK_EQUAL(ps.waiting_pulls(), 0u);
  // A finished worker does not hold the waves back: worker 0 pushes its
  // last waves; wave 2 waits for worker 1's pull of 3, wave 3 for nobody.
  BOOST_REQUIRE(ps.push(0, 2, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE(ps.push(1, 2, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE(ps.push(0, 3, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK(ps.take_ready().empty());
  BOOST_CHECK_EQUAL(ps.applied_below(), 2);
  ps.pull_overlapped({1, 3, 8});
  BOOST_CHECK((ids(ps.take_ready()) == std::vector<uint64_t>{8}));
  BOOST_REQUIRE(ps.push(1, 3, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK(ps.take_ready().empty());
  BOOST_CHECK_EQUAL(ps.applied_below(), 4);
  check_all(ps.units().at(3)[0], 22.0f, "every wave in at the end");
}

// Drained waves (checkpoints every 2): a pull of wave 2 needs waves <= 1,
// added without waiting for pulls of 2; the checkpoint at the barrier comes
// before that pull's answer.
BOOST_AUTO_TEST_CASE(ps_overlapped_drained_waves_and_barrier) {
  ps_core ps(shard_units(), 2, 0, {true, 2});
  for (int w = 0; w < 2; ++w) BOOST_REQUIRE(ps.finish(w, 6).ok());
  ps.set_barrier(2);
  std::vector<ps::pull_ticket> released;
  for (int w = 0; w < 2; ++w) ps.pull_overlapped({w, 0, uint64_t(10 + w)});
  BOOST_CHECK_EQUAL(ps.take_ready().size(), 2u);
  for (int w = 0; w < 2; ++w) BOOST_REQUIRE(ps.push(w, 0, 0, 3, update_of(1, 1, 1), released).ok());
  for (int w = 0; w < 2; ++w) ps.pull_overlapped({w, 1, uint64_t(20 + w)});
  BOOST_CHECK_EQUAL(ps.take_ready().size(), 2u);
  BOOST_CHECK(ps.take_ready().empty());
  BOOST_CHECK_EQUAL(ps.applied_below(), 1);
  for (int w = 0; w < 2; ++w) BOOST_REQUIRE(ps.push(w, 1, 0, 3, update_of(1, 1, 1), released).ok());
  ps.pull_overlapped({0, 2, 30});
  BOOST_CHECK(ps.take_ready().empty());  // at the barrier: the checkpoint first
  BOOST_CHECK(ps.at_barrier());
  BOOST_CHECK_EQUAL(ps.applied_below(), 2);
  check_all(ps.units().at(3)[0], 7.0f, "waves 0 and 1 in the checkpoint");
  ps.set_barrier(4);
  auto r = ps.take_ready();
  BOOST_REQUIRE_EQUAL(r.size(), 1u);
  BOOST_CHECK_EQUAL(r[0].id, 30u);
  BOOST_CHECK_EQUAL(ps.included_below(0), 2);
}

// D = 1, overlapped: a pull of wave w needs every worker's waves <= w - 3
// (global clock >= w - 2); updates go in on arrival and the answer says
// which of the puller's own waves are in.
BOOST_AUTO_TEST_CASE(ps_overlapped_staleness1) {
  ps_core ps(shard_units(), 2, 1, {true, 0});
  for (int w = 0; w < 2; ++w) BOOST_REQUIRE(ps.finish(w, 8).ok());
  std::vector<ps::pull_ticket> released;
  for (int64_t c = 0; c < 3; ++c) ps.pull_overlapped({0, c, uint64_t(c + 1)});
  BOOST_CHECK_EQUAL(ps.take_ready().size(), 3u);  // waves 0..2 need nothing
  BOOST_REQUIRE(ps.push(0, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_REQUIRE(ps.push(0, 1, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK_EQUAL(ps.included_below(0), 2);
  BOOST_CHECK_EQUAL(ps.included_below(1), 0);
  check_all(ps.units().at(3)[0], 5.0f, "on arrival");
  ps.pull_overlapped({0, 3, 9});
  BOOST_CHECK(ps.take_ready().empty());  // needs worker 1's wave 0
  BOOST_REQUIRE(ps.push(1, 0, 0, 3, update_of(1, 1, 1), released).ok());
  BOOST_CHECK_EQUAL(ps.take_ready().size(), 1u);
  BOOST_CHECK_EQUAL(ps.included_below(1), 1);
}

// Where the pipeline's sends wait for their bytes to leave: only where compute
// threads take every core the node's progress thread could use.
BOOST_AUTO_TEST_CASE(pipeline_send_linger_where_cores_are_all_busy) {
  using topology::device_kind;
  auto node = [](std::string name, std::string host, std::vector<topology::device_spec> devs, std::vector<int> cpus = {}) {
    topology::node_spec n;
    n.name = std::move(name);
    n.host = std::move(host);
    n.devices = std::move(devs);
    n.cpus = std::move(cpus);
    return n;
  };
  auto cpu = [](int threads) {
    topology::device_spec d;
    d.threads = threads;
    return d;
  };
  topology::device_spec gpu;
  gpu.kind = device_kind::cuda;
  const auto none = std::chrono::microseconds{0};
  auto linger = [](const topology::cluster& c, const char* n, int cpus, bool pinned) {
    return hetpipe::pipeline_send_linger(c, n, cpus, pinned);
  };
  topology::cluster c;
  // Unpinned: two one-thread nodes on a 2-CPU host take every CPU; on 3 CPUs
  // or on two hosts one is free.
  c.nodes = {node("n0", "h", {cpu(1)}), node("n1", "h", {cpu(1)})};
  BOOST_CHECK_GT(linger(c, "n0", 2, false).count(), 0);
  BOOST_CHECK_GT(linger(c, "n1", 2, false).count(), 0);
  BOOST_CHECK(linger(c, "n0", 3, false) == none);
  c.nodes[1].host = "h2";
  BOOST_CHECK(linger(c, "n0", 2, false) == none);
  // Pinned (hetflow run gives each local node its share): a node counts its
  // own threads against its own CPUs. Three one-thread nodes on 4 CPUs get
  // one CPU each.
  c.nodes = {node("n0", "h", {cpu(1)}), node("n1", "h", {cpu(1)}), node("n2", "h", {cpu(1)})};
  BOOST_CHECK_GT(linger(c, "n0", 1, true).count(), 0);
  BOOST_CHECK(linger(c, "n0", 4, false) == none);
  // cpu(2) with 3 CPUs has one to spare; a cpu device without threads uses
  // all of its node's.
  c.nodes = {node("n0", "h", {cpu(2)}), node("n1", "h", {cpu(0)})};
  BOOST_CHECK(linger(c, "n0", 3, true) == none);
  BOOST_CHECK_GT(linger(c, "n1", 5, true).count(), 0);
  BOOST_CHECK_GT(linger(c, "n1", 16, false).count(), 0);
  // A cuda device counts one thread: the GPU machine's mixed VW has CPUs to spare.
  c.nodes = {node("n0", "h", {cpu(8)}), node("n1", "h", {gpu})};
  BOOST_CHECK(linger(c, "n1", 16, false) == none);
  BOOST_CHECK(linger(c, "n0", 16, false) == none);
  // A node pinned by its `cpus`.
  c.nodes = {node("n0", "h", {cpu(1)}, {0}), node("n1", "h", {cpu(4)}, {1, 2, 3, 4, 5})};
  BOOST_CHECK_GT(linger(c, "n0", 1, true).count(), 0);
  BOOST_CHECK(linger(c, "n1", 5, true) == none);
  BOOST_CHECK(linger(c, "nobody", 2, false) == none);
}
