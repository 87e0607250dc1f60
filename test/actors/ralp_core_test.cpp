// ralp_server_core + ralp_worker_core: RALP (layers after the cut on the
// server, the lower layers data parallel through it) computes exactly what
// strategy "ps" with BSP computes: every worker's gradient at clock c with
// the weights of version c, then one optimizer step per worker in worker
// order. The reference below is that rule on one whole model (with one
// worker: single-device training). Also: BSP waits, bad messages, and the
// wire protocol's round trip.
#define BOOST_TEST_MODULE ralp_core
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "actors/ralp/ralp_options.hpp"
#include "actors/ralp/ralp_protocol.hpp"
#include "actors/ralp/ralp_server_core.hpp"
#include "actors/ralp/ralp_worker_core.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::ralp;

namespace {

kernels::model build(const std::string& name, kernels::shape input, double width) {
  kernels::zoo_options zo;
  zo.input = input;
  zo.classes = 5;
  zo.width = width;
  auto spec = kernels::make_model_spec(name, zo);
  BOOST_REQUIRE(spec.has_value());
  auto m = kernels::build_model(*spec, kernels::device::cpu(), {1, 42});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  return std::move(*m);
}

struct batch {
  kernels::tensor images;
  std::vector<int32_t> labels;
};

// Worker w's batch at clock c: deterministic; the last clock of each worker
// has fewer rows (a partial batch, as an epoch's last one).
batch make_batch(const kernels::shape& sample, int w, int64_t c, int64_t rows) {
  std::mt19937_64 r(uint64_t(w) * 7919u + uint64_t(c) * 104729u + 1);
  std::normal_distribution<float> n;
  std::vector<int64_t> dims{rows};
  for (int i = 0; i < sample.rank(); ++i) dims.push_back(sample[i]);
  batch b{kernels::tensor::empty(kernels::shape(std::span<const int64_t>(dims))), {}};
  for (auto& x : b.images.f32_span()) x = n(r);
  for (int64_t i = 0; i < rows; ++i) b.labels.push_back(int32_t(r() % 5));
  return b;
}

double lr_of(int w, int64_t c) { return 0.05 / (1.0 + 0.1 * double(c)) + 0.001 * w; }

struct scenario {
  std::string model = "mlp";
  kernels::shape input{1, 8, 8};
  double width = 0.1;
  int workers = 2;
  std::vector<int64_t> finals{4, 3};  // clocks of each worker
  std::size_t cut = 2;
  kernels::optimizer_config opt{kernels::optimizer_kind::sgd, 0.05, 0.9, false, 1e-4};
};

int64_t rows_of(const scenario& s, int w, int64_t c) { return c + 1 == s.finals[std::size_t(w)] ? 3 : 8; }

struct outcome {
  std::vector<double> losses;  // in (clock, worker) order
  std::vector<float> weights;  // every parameter, model order
};

std::vector<float> flat(const std::vector<kernels::parameter*>& ps) {
  std::vector<float> v;
  for (auto* p : ps) v.insert(v.end(), p->value.f32(), p->value.f32() + p->value.numel());
  return v;
}

// strategy "ps", bsp, on one whole model: per clock, every worker with a
// step computes its gradient with the same weights, then the updates in
// worker order.
// at_once: each worker's update applied right after its pass (not BSP).
outcome reference(const scenario& s, bool at_once = false) {
  auto m = build(s.model, s.input, s.width);
  auto opt = kernels::make_optimizer(s.opt);
  BOOST_REQUIRE(opt.has_value());
  auto params = m.parameters();
  outcome o;
  const int64_t clocks = *std::max_element(s.finals.begin(), s.finals.end());
  m.context().run([&] {
    kernels::tensor grad;
    for (int64_t c = 0; c < clocks; ++c) {
      std::vector<std::vector<kernels::tensor>> saved(std::size_t(s.workers));
      for (int w = 0; w < s.workers; ++w) {
        if (c >= s.finals[std::size_t(w)]) continue;
        auto b = make_batch(m.sample_shape(0), w, c, rows_of(s, w, c));
        auto logits = m.forward(b.images.view(), kernels::mode::train);
        BOOST_REQUIRE(logits.has_value());
        grad = kernels::tensor::empty(logits->shape());
        auto l = kernels::softmax_cross_entropy(*logits, b.labels, grad.mutable_view());
        BOOST_REQUIRE(l.has_value());
        o.losses.push_back(l->loss);
        BOOST_REQUIRE(m.backward(grad.view()).has_value());
        for (auto* p : params) {
          saved[std::size_t(w)].push_back(kernels::tensor::empty(p->grad.shape()));
          std::memcpy(saved[std::size_t(w)].back().f32(), p->grad.f32(), p->grad.byte_size());
        }
        if (at_once) BOOST_REQUIRE((*opt)->step(params, lr_of(w, c)).ok());
      }
      if (at_once) continue;
      for (int w = 0; w < s.workers; ++w) {
        if (c >= s.finals[std::size_t(w)]) continue;
        for (std::size_t i = 0; i < params.size(); ++i)
          std::memcpy(params[i]->grad.f32(), saved[std::size_t(w)][i].f32(), params[i]->grad.byte_size());
        BOOST_REQUIRE((*opt)->step(params, lr_of(w, c)).ok());
      }
    }
  });
  o.weights = flat(params);
  return o;
}

std::vector<kernels::tensor_view> views_of(const std::vector<kernels::parameter*>& ps) {
  std::vector<kernels::tensor_view> v;
  for (auto* p : ps) v.push_back(p->value.view());
  return v;
}

// The same steps through the RALP cores: each worker pulls the lower
// weights, runs the lower units, sends its activations; the server runs the
// upper units for all of them; each worker runs backward and pushes.
outcome through_ralp(const scenario& s) {
  server_config sc;
  sc.workers = s.workers;
  sc.cut = s.cut;
  sc.optimizer = s.opt;
  auto server = server_core::make(sc, build(s.model, s.input, s.width));
  BOOST_REQUIRE_MESSAGE(server.has_value(), server.error().message());
  auto& srv = **server;
  std::vector<worker_core> workers;
  for (int w = 0; w < s.workers; ++w) {
    auto wc = worker_core::make(build(s.model, s.input, s.width), s.cut);
    BOOST_REQUIRE(wc.has_value());
    workers.push_back(std::move(*wc));
  }
  std::vector<ps::pull_ticket> ready;
  for (int w = 0; w < s.workers; ++w) BOOST_REQUIRE(srv.hello(w, s.finals[std::size_t(w)], ready).ok());
  outcome o;
  const int64_t clocks = *std::max_element(s.finals.begin(), s.finals.end());
  uint64_t ticket = 1;
  for (int64_t c = 0; c < clocks; ++c) {
    bool all_step = s.workers > 1 && c + 1 < s.finals[0];
    for (int v = 0; v < s.workers; ++v) all_step = all_step && c < s.finals[std::size_t(v)];
    std::vector<upper_result> results;
    std::vector<batch> batches(std::size_t(s.workers));
    for (int w = 0; w < s.workers; ++w) {
      if (c >= s.finals[std::size_t(w)]) continue;
      BOOST_REQUIRE_MESSAGE(srv.pull(ps::pull_ticket{w, c, ticket++}), "pull at clock " << c << " waits");
      auto& wc = workers[std::size_t(w)];
      BOOST_REQUIRE(wc.install(views_of(srv.lower_params())).ok());
      batches[std::size_t(w)] = make_batch(wc.model().sample_shape(0), w, c, rows_of(s, w, c));
      auto& b = batches[std::size_t(w)];
      wc.model().context().run([&] {
        if (!wc.has_upper()) {
          auto l = wc.train_whole(b.images.view(), b.labels);
          BOOST_REQUIRE(l.has_value());
          o.losses.push_back(l->loss);
          return;
        }
        auto act = wc.forward_lower(b.images.view());
        BOOST_REQUIRE(act.has_value());
        kernels::tensor copy = kernels::tensor::empty(act->shape());
        BOOST_REQUIRE(kernels::copy_into(*act, copy.mutable_view()).ok());
        const std::size_t before = results.size();
        BOOST_REQUIRE(srv.activations(w, c, lr_of(w, c), std::move(copy), b.labels, results).ok());
        // Only the clock's last worker completes it.
        bool last = true;
        for (int v = w + 1; v < s.workers; ++v) last = last && c >= s.finals[std::size_t(v)];
        BOOST_CHECK_EQUAL(results.size() > before, last);
      });
    }
    for (auto& r : results) o.losses.push_back(r.loss.loss);
    for (int w = 0; w < s.workers; ++w) {
      if (c >= s.finals[std::size_t(w)]) continue;
      auto& wc = workers[std::size_t(w)];
      if (wc.has_upper()) {
        auto it = std::find_if(results.begin(), results.end(), [&](const upper_result& r) { return r.worker == w; });
        BOOST_REQUIRE(it != results.end());
        BOOST_CHECK_EQUAL(it->clock, c);
        wc.model().context().run([&] { BOOST_REQUIRE(wc.backward_lower(it->act_grad.view()).ok()); });
      }
      std::vector<kernels::tensor> grads;
      for (auto* p : wc.lower_params()) {
        grads.push_back(kernels::tensor::empty(p->grad.shape()));
        std::memcpy(grads.back().f32(), p->grad.f32(), p->grad.byte_size());
      }
      // BSP: worker 0's pull of the next clock waits for the other pushes.
      if (w == 0 && all_step) {
        ready.clear();
        BOOST_REQUIRE(srv.push(w, c, lr_of(w, c), std::move(grads), ready).ok());
        BOOST_CHECK(!srv.pull(ps::pull_ticket{0, c + 1, 999}));
        BOOST_CHECK(ready.empty());
        ready.clear();
        continue;
      }
      ready.clear();
      BOOST_REQUIRE(srv.push(w, c, lr_of(w, c), std::move(grads), ready).ok());
      if (w == s.workers - 1 && all_step) {
        BOOST_REQUIRE_EQUAL(ready.size(), 1u);  // the held pull of worker 0
        BOOST_CHECK_EQUAL(ready[0].id, 999u);
      }
    }
  }
  BOOST_CHECK(srv.clocks().all_finished());
  BOOST_CHECK(srv.weights_ready(ps::infinite_clock));
  auto all = srv.model().parameters();
  o.weights = flat(all);
  int64_t total = 0;
  for (auto f : s.finals) total += f;
  BOOST_CHECK_EQUAL(srv.lower_updates(), total);
  BOOST_CHECK_EQUAL(srv.upper_updates(), srv.has_upper() ? total : 0);
  return o;
}

void check_same(const outcome& a, const outcome& b, double tol) {
  BOOST_REQUIRE_EQUAL(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    BOOST_CHECK_MESSAGE(std::abs(a.losses[i] - b.losses[i]) <= tol * std::max(1.0, std::abs(a.losses[i])),
                        "loss " << i << ": " << a.losses[i] << " vs " << b.losses[i]);
  BOOST_REQUIRE_EQUAL(a.weights.size(), b.weights.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.weights.size(); ++i)
    worst = std::max(worst, double(std::abs(a.weights[i] - b.weights[i])));
  BOOST_CHECK_MESSAGE(worst <= tol, "largest weight difference " << worst);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ralp_core)

BOOST_AUTO_TEST_CASE(two_workers_equal_ps_bsp_every_cut) {
  scenario s;
  const auto ref = reference(s);
  // mlp: flatten, fc1, fc2, fc3; cut 4 = no cut (the server only serves weights).
  for (std::size_t cut : {1u, 2u, 3u, 4u}) {
    BOOST_TEST_CONTEXT("cut " << cut) {
      s.cut = cut;
      check_same(ref, through_ralp(s), 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(differs_from_applying_each_update_at_once) {
  // The comparison above can fail: applying each worker's update right
  // after its pass (what a server without the BSP barrier would do) gives
  // other weights, far outside the tolerance.
  scenario s;
  const auto a = reference(s), b = reference(s, true);
  double worst = 0;
  for (std::size_t i = 0; i < a.weights.size(); ++i) worst = std::max(worst, double(std::abs(a.weights[i] - b.weights[i])));
  BOOST_CHECK_GT(worst, 1e-4);
}

BOOST_AUTO_TEST_CASE(one_worker_equals_single_device_training) {
  scenario s;
  s.workers = 1;
  s.finals = {5};
  s.cut = 3;
  check_same(reference(s), through_ralp(s), 1e-6);
}

BOOST_AUTO_TEST_CASE(three_workers_lenet_cut_before_the_fc_head_adam) {
  scenario s;
  s.model = "lenet5";
  s.input = kernels::shape{1, 28, 28};
  s.width = 0.5;
  s.workers = 3;
  s.finals = {3, 3, 2};
  s.cut = 5;  // conv1 pool1 conv2 pool2 flatten | fc1 fc2 fc3
  s.opt = kernels::optimizer_config{kernels::optimizer_kind::adam, 0.001, 0, false, 1e-4};
  check_same(reference(s), through_ralp(s), 1e-6);
}

BOOST_AUTO_TEST_CASE(refuses_bad_messages) {
  server_config sc;
  sc.workers = 2;
  sc.cut = 2;
  auto server = server_core::make(sc, build("mlp", kernels::shape{1, 8, 8}, 0.1));
  BOOST_REQUIRE(server.has_value());
  auto& srv = **server;
  std::vector<ps::pull_ticket> ready;
  BOOST_REQUIRE(srv.hello(0, 2, ready).ok());
  BOOST_CHECK(!srv.hello(0, 3, ready).ok());  // a different step count
  std::vector<upper_result> out;
  // fc2 takes (N, 51) activations (mlp width 0.1: fc1 has 51 outputs).
  BOOST_CHECK(!srv.activations(0, 0, 0.1, kernels::tensor::empty({4, 50}), {0, 1, 2, 3}, out).ok());
  BOOST_CHECK(!srv.activations(0, 0, 0.1, kernels::tensor::empty({4, 51}), {0, 1, 2}, out).ok());
  BOOST_CHECK(!srv.activations(0, 1, 0.1, kernels::tensor::empty({4, 51}), {0, 1, 2, 3}, out).ok());  // clock 1 first
  BOOST_CHECK(!srv.activations(2, 0, 0.1, kernels::tensor::empty({4, 51}), {0, 1, 2, 3}, out).ok());  // no worker 2
  // A push before its activations; a push with the wrong gradients.
  std::vector<kernels::tensor> g;
  for (auto* p : srv.lower_params()) g.push_back(kernels::tensor::empty(p->value.shape()));
  BOOST_CHECK(!srv.push(0, 0, 0.1, std::move(g), ready).ok());
  BOOST_CHECK(!server_core::make(sc, build("mlp", kernels::shape{1, 8, 8}, 0.1)).value()->push(0, 0, 0.1, {}, ready).ok());
  sc.cut = 5;
  BOOST_CHECK(!server_core::make(sc, build("mlp", kernels::shape{1, 8, 8}, 0.1)).has_value());
  sc.cut = 0;
  BOOST_CHECK(!server_core::make(sc, build("mlp", kernels::shape{1, 8, 8}, 0.1)).has_value());
}

BOOST_AUTO_TEST_CASE(protocol_round_trip) {
  ralp_info info;
  info.worker = 1;
  info.clock = 17;
  info.lr = 0.25;
  info.loss = 1.5;
  info.correct = 3;
  kernels::tensor a = kernels::tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) a.f32()[i] = float(i) * 0.5f;
  std::vector<kernels::tensor_view> ts{a.view()};
  std::vector<int32_t> labels{4, 2};
  auto buf = make_message(kind_activations, "ralpworker1", "ralp0", info, ts, labels);
  schemas::read_limits lim;
  auto m = read_message(buf, lim, "test");
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  BOOST_CHECK_EQUAL(m->kind, uint32_t(kind_activations));
  BOOST_CHECK_EQUAL(m->sender, "ralpworker1");
  BOOST_CHECK_EQUAL(m->info.clock, 17);
  BOOST_CHECK_EQUAL(m->info.lr, 0.25);
  BOOST_CHECK_EQUAL(m->info.correct, 3);
  BOOST_REQUIRE_EQUAL(m->tensors(), 2u);
  auto t = f32_tensor(*m, 0);
  BOOST_REQUIRE(t.has_value());
  BOOST_CHECK(t->shape() == (kernels::shape{2, 3}));
  BOOST_CHECK_EQUAL(t->f32()[5], 2.5f);
  auto l = i32_values(*m, 1);
  BOOST_REQUIRE(l.has_value());
  BOOST_CHECK(*l == labels);
  BOOST_CHECK(!i32_values(*m, 0).has_value());
  BOOST_CHECK(!f32_tensor(*m, 1).has_value());
  auto e = make_message(kind_error, "ralp0", "ralpworker1", info, {}, {}, "it broke");
  auto me = read_message(e, lim, "test");
  BOOST_REQUIRE(me.has_value());
  BOOST_CHECK_EQUAL(me->text, "it broke");
}

BOOST_AUTO_TEST_CASE(unit_times_round_trip_in_a_hello) {
  std::vector<unit_time> units{{"conv1", 0.301, 0.369}, {"flatten", 0, 0}, {"fc1", 0.038, 1e-4}};
  ralp_info info;
  info.aux = 800;
  auto buf = make_message(kind_hello, "ralpworker0", "ralp0", info, {}, {}, encode_unit_times(units));
  schemas::read_limits lim;
  auto m = read_message(buf, lim, "test");
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  auto back = decode_unit_times(m->text, m->sender);
  BOOST_REQUIRE_MESSAGE(back.has_value(), back.error().message());
  BOOST_REQUIRE_EQUAL(back->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_CHECK_EQUAL((*back)[i].name, units[i].name);
    BOOST_CHECK_CLOSE((*back)[i].fwd_ms + 1, units[i].fwd_ms + 1, 1e-4);
    BOOST_CHECK_CLOSE((*back)[i].bwd_ms + 1, units[i].bwd_ms + 1, 1e-4);
  }
  // An older worker's hello (no text) is no units; anything else is refused, naming the peer.
  auto none = decode_unit_times("", "w");
  BOOST_REQUIRE(none.has_value());
  BOOST_CHECK(none->empty());
  for (const char* bad : {"conv1 0.3\n", "conv1 0.3 x\n", "conv1 -1 0.2\n", "conv1 nan 0.2\n", "conv1 0.1 0.2 3\n"}) {
    auto r = decode_unit_times(bad, "ralpworker3");
    BOOST_CHECK_MESSAGE(!r.has_value(), bad);
    if (!r) BOOST_CHECK(r.error().message().find("ralpworker3") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(large_messages_are_copied_in_pieces_whole) {
  // Over 4 MiB in all: copied in 1 MiB pieces by several threads. Sizes that
  // are not multiples of a piece, an empty tensor between, every element
  // distinct: each must land where it belongs.
  std::vector<kernels::tensor> owned;
  for (int64_t n : {int64_t{(3 << 18) + 7}, int64_t{0}, int64_t{(1 << 20) + 5}, int64_t{3}}) {
    owned.push_back(kernels::tensor::empty({n}));
    for (int64_t i = 0; i < n; ++i) owned.back().f32()[i] = float(i % 1000003) + 0.25f * float(owned.size());
  }
  std::vector<kernels::tensor_view> ts;
  for (auto& t : owned) ts.push_back(t.view());
  ralp_info info;
  auto buf = make_message(kind_activations, "a", "b", info, ts, {});
  schemas::read_limits lim;
  auto m = read_message(buf, lim, "test");
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  BOOST_REQUIRE_EQUAL(m->tensors(), owned.size());
  for (std::size_t k = 0; k < owned.size(); ++k) {
    auto t = f32_tensor(*m, k);
    BOOST_REQUIRE(t.has_value());
    BOOST_REQUIRE_EQUAL(t->numel(), owned[k].numel());
    if (owned[k].numel() > 0)
      BOOST_CHECK(std::memcmp(t->f32(), owned[k].f32(), std::size_t(owned[k].numel()) * sizeof(float)) == 0);
  }
}

BOOST_AUTO_TEST_CASE(worker_clocks_cover_every_step_once) {
  // Worker w takes steps j with j % W == w: 10 steps, 3 workers -> 4, 3, 3
  // an epoch; 2 workers of a 1-step epoch -> 1 and 0.
  kernels::epoch_plan plan{320, 32, 10};
  BOOST_CHECK_EQUAL(actors::ralp_job::worker_clocks(plan, 2, 0, 3), 8);
  BOOST_CHECK_EQUAL(actors::ralp_job::worker_clocks(plan, 2, 1, 3), 6);
  BOOST_CHECK_EQUAL(actors::ralp_job::worker_clocks(plan, 2, 2, 3), 6);
  for (int W = 1; W <= 12; ++W) {
    int64_t sum = 0;
    for (int w = 0; w < W; ++w) sum += actors::ralp_job::worker_clocks(plan, 3, w, W);
    BOOST_CHECK_EQUAL(sum, 30);
  }
  kernels::epoch_plan one{20, 32, 1};
  BOOST_CHECK_EQUAL(actors::ralp_job::worker_clocks(one, 1, 0, 2), 1);
  BOOST_CHECK_EQUAL(actors::ralp_job::worker_clocks(one, 1, 1, 2), 0);
}

BOOST_AUTO_TEST_SUITE_END()
