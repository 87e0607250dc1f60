// Optimizers against the update rules written out by hand (PyTorch's).
#define BOOST_TEST_MODULE kernels_optimizer
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>

#include "kernels/optimizer.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

namespace {

parameter make_param(std::vector<float> w, std::vector<float> g) {
  parameter p;
  p.name = "p";
  p.value = tensor::empty({int64_t(w.size())});
  p.grad = tensor::empty({int64_t(g.size())});
  std::copy(w.begin(), w.end(), p.value.f32());
  std::copy(g.begin(), g.end(), p.grad.f32());
  return p;
}

std::unique_ptr<optimizer> make(const optimizer_config& c) {
  auto o = make_optimizer(c);
  BOOST_REQUIRE_MESSAGE(o.has_value(), o.error().to_string());
  return std::move(*o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay) {
  optimizer_config c{optimizer_kind::sgd, 0.1, 0.9};
  c.weight_decay = 0.01;
  auto opt = make(c);
  parameter p = make_param({1.0f, -2.0f}, {0.5f, 0.25f});
  parameter* ps[] = {&p};
  // Reference in double, PyTorch's rule.
  double w[2] = {1.0, -2.0}, g[2] = {0.5, 0.25}, buf[2] = {0, 0};
  for (int step = 0; step < 3; ++step) {
    BOOST_REQUIRE(opt->step(ps, 0.1).ok());
    for (int i = 0; i < 2; ++i) {
      double d = g[i] + 0.01 * w[i];
      buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
      w[i] -= 0.1 * buf[i];
      BOOST_CHECK_CLOSE(p.value.f32()[i], w[i], 1e-4);
    }
  }
  BOOST_CHECK_EQUAL(p.version, 3u);
  BOOST_CHECK_EQUAL(opt->steps(), 3);
  BOOST_CHECK_EQUAL(opt->state().size(), 1u);
  BOOST_CHECK_CLOSE(opt->state()[0]->value.f32()[1], buf[1], 1e-4);
}

BOOST_AUTO_TEST_CASE(sgd_plain_and_nesterov) {
  auto plain = make({optimizer_kind::sgd, 0.5});
  parameter p = make_param({1.0f}, {2.0f});
  parameter* ps[] = {&p};
  BOOST_REQUIRE(plain->step(ps, 0.5).ok());
  BOOST_CHECK_CLOSE(p.value.f32()[0], 0.0f, 1e-4);

  optimizer_config nc{optimizer_kind::sgd, 0.1, 0.5};
  nc.nesterov = true;
  auto nest = make(nc);
  parameter q = make_param({1.0f}, {1.0f});
  parameter* qs[] = {&q};
  BOOST_REQUIRE(nest->step(qs, 0.1).ok());  // buf = 1; w -= 0.1 * (1 + 0.5 * 1)
  BOOST_CHECK_CLOSE(q.value.f32()[0], 1.0f - 0.15f, 1e-4);
  BOOST_REQUIRE(nest->step(qs, 0.1).ok());  // buf = 1.5; w -= 0.1 * (1 + 0.75)
  BOOST_CHECK_CLOSE(q.value.f32()[0], 0.85f - 0.175f, 1e-4);
}

BOOST_AUTO_TEST_CASE(adam_matches_formula) {
  optimizer_config c{optimizer_kind::adam, 0.01};
  c.weight_decay = 0.1;
  auto opt = make(c);
  parameter p = make_param({0.5f, -1.0f, 2.0f}, {0.1f, -0.3f, 0.0f});
  parameter* ps[] = {&p};
  double w[3] = {0.5, -1.0, 2.0}, g[3] = {0.1, -0.3, 0.0}, m[3] = {}, v[3] = {};
  for (int t = 1; t <= 3; ++t) {
    BOOST_REQUIRE(opt->step(ps, 0.01).ok());
    for (int i = 0; i < 3; ++i) {
      double gi = g[i] + 0.1 * w[i];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      w[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
      BOOST_CHECK_CLOSE(p.value.f32()[i], w[i], 1e-3);
    }
  }
  BOOST_CHECK_EQUAL(opt->state().size(), 2u);
}

BOOST_AUTO_TEST_CASE(sparse_rows_update_only_touched_rows) {
  for (auto kind : {optimizer_kind::sgd, optimizer_kind::adam}) {
    auto opt = make({kind, 0.1, kind == optimizer_kind::sgd ? 0.9 : 0.0});
    parameter p;
    p.name = "table";
    p.value = tensor::filled({4, 2}, 1.0f);
    p.sparse = true;
    p.sparse_grad.rows = {1, 3};
    p.sparse_grad.values = tensor::filled({2, 2}, 0.5f);
    parameter* ps[] = {&p};
    BOOST_REQUIRE(opt->step(ps, 0.1).ok());
    for (int r = 0; r < 4; ++r) {
      bool touched = r == 1 || r == 3;
      for (int j = 0; j < 2; ++j) {
        float v = p.value.f32()[r * 2 + j];
        if (touched) BOOST_CHECK_LT(v, 1.0f);
        else BOOST_CHECK_EQUAL(v, 1.0f);
      }
    }
    p.sparse_grad.rows = {7};
    BOOST_CHECK(opt->step(ps, 0.1).code() == errc::invalid_argument);  // row outside the table
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_configs_and_changed_parameters) {
  BOOST_CHECK(!make_optimizer({optimizer_kind::sgd, -1.0}).has_value());
  BOOST_CHECK(!make_optimizer({optimizer_kind::sgd, 0.1, 1.0}).has_value());
  optimizer_config bad_adam{optimizer_kind::adam, 0.1};
  bad_adam.beta2 = 1.0;
  BOOST_CHECK(!make_optimizer(bad_adam).has_value());
  optimizer_config nest{optimizer_kind::sgd, 0.1};
  nest.nesterov = true;
  BOOST_CHECK(!make_optimizer(nest).has_value());

  auto opt = make({optimizer_kind::sgd, 0.1, 0.9});
  parameter a = make_param({1.0f}, {1.0f}), b = make_param({1.0f}, {1.0f});
  parameter* one[] = {&a};
  parameter* two[] = {&a, &b};
  BOOST_REQUIRE(opt->step(one, 0.1).ok());
  auto st = opt->step(two, 0.1);
  BOOST_CHECK(st.code() == errc::invalid_argument);
  BOOST_CHECK(st.message().find("parameter list changed") != std::string::npos);
}

// step_summed (HetPipe's overlapped waves on a cpu stage): the same weights
// and state as step(), and each weight's change added to the sum, equal to
// the float a copy before the step and d += after - before would give -
// bit for bit, over several steps (the first storing into a used buffer),
// for every update rule, dense (long enough to split over threads and
// vectorise) and sparse.
BOOST_AUTO_TEST_CASE(step_summed_equals_step_and_difference) {
  std::vector<optimizer_config> configs;
  configs.push_back({optimizer_kind::sgd, 0.05});
  configs.push_back({optimizer_kind::sgd, 0.05, 0.9});
  optimizer_config nest{optimizer_kind::sgd, 0.05, 0.9};
  nest.nesterov = true;
  nest.weight_decay = 0.01;
  configs.push_back(nest);
  optimizer_config wd{optimizer_kind::sgd, 0.05};
  wd.weight_decay = 0.1;
  configs.push_back(wd);
  optimizer_config ad{optimizer_kind::adam, 0.01};
  ad.weight_decay = 0.05;
  configs.push_back(ad);
  const int64_t n = 100003;  // odd: a vector loop's tail
  for (const auto& c : configs) {
    for (bool sparse : {false, true}) {
      BOOST_TEST_CONTEXT("kind " << int(c.kind) << " momentum " << c.momentum << " nesterov " << c.nesterov
                                 << " sparse " << sparse) {
        auto a = make(c), b = make(c);
        auto fill = [&](parameter& p, uint32_t seed) {
          p.name = "w";
          p.value = tensor::empty({sparse ? n / 7 : n, sparse ? 7 : 1});
          uint32_t x = seed;
          auto next = [&] {
            x = x * 1664525u + 1013904223u;
            return float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
          };
          for (float& v : p.value.f32_span()) v = next();
          if (sparse) {
            p.sparse = true;
            p.sparse_grad.rows = {0, 5, 9, 5, n / 7 - 1};  // a row twice
            p.sparse_grad.values = tensor::empty({5, 7});
            for (float& v : p.sparse_grad.values.f32_span()) v = next();
          } else {
            p.grad = tensor::empty(p.value.shape());
            for (float& v : p.grad.f32_span()) v = next();
          }
        };
        parameter pa, pb;
        fill(pa, 7);
        fill(pb, 7);
        parameter* as[] = {&pa};
        parameter* bs[] = {&pb};
        const auto count = std::size_t(pa.value.numel());
        // The first step stores into a used buffer (add = false), the others add.
        std::vector<float> da(count, 0.0f), db(count, 123.0f), before(count);
        float* sums[] = {db.data()};
        for (int step = 0; step < 3; ++step) {
          std::copy(pa.value.f32(), pa.value.f32() + count, before.begin());
          BOOST_REQUIRE(a->step(as, c.lr).ok());
          for (std::size_t k = 0; k < count; ++k) da[k] += pa.value.f32()[k] - before[k];
          BOOST_REQUIRE(b->step_summed(bs, c.lr, sums, /*add=*/step > 0).ok());
        }
        BOOST_CHECK_EQUAL(pb.version, 3u);
        BOOST_CHECK_EQUAL(b->steps(), 3);
        std::size_t weights_differ = 0, sums_differ = 0, nonzero = 0;
        for (std::size_t k = 0; k < count; ++k) {
          weights_differ += std::memcmp(&pa.value.f32()[k], &pb.value.f32()[k], sizeof(float)) != 0;
          sums_differ += std::memcmp(&da[k], &db[k], sizeof(float)) != 0;
          nonzero += db[k] != 0.0f;
        }
        BOOST_CHECK_EQUAL(weights_differ, 0u);
        BOOST_CHECK_EQUAL(sums_differ, 0u);
        BOOST_CHECK_GT(nonzero, sparse ? 20u : count / 2);  // the sums moved
        auto sa = a->state(), sb = b->state();
        BOOST_REQUIRE_EQUAL(sa.size(), sb.size());
        for (std::size_t i = 0; i < sa.size(); ++i)
          BOOST_CHECK(std::memcmp(sa[i]->value.f32(), sb[i]->value.f32(), sa[i]->value.byte_size()) == 0);
        // One sum per parameter, none missing.
        float* none[] = {nullptr};
        BOOST_CHECK(b->step_summed(bs, c.lr, none, true).code() == errc::invalid_argument);
        BOOST_CHECK(b->step_summed(bs, c.lr, {}, true).code() == errc::invalid_argument);
      }
    }
  }
}
