// train_from_source with a replica_group (train_config::group): N replicas
// on N threads, summing through an in-process group, must keep bit-identical
// weights, match single-device training within float rounding, and split
// batches as told.
#define BOOST_TEST_MODULE kernels_data_parallel
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/model.hpp"
#include "kernels/trainer.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"
#include "test/kernels/replica_hub.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::testing;

namespace {

train_config config(const std::string& model) {
  train_config c;
  c.model = model;
  c.width = 0.5;
  c.data.kind = dataset_kind::synthetic;
  c.data.sample = shape{1, 28, 28};
  c.data.train_size = 300;  // 300 / 32: a last partial batch of 12
  c.data.test_size = 101;
  c.data.classes = 10;
  c.data.noise = 4.0f;  // hard enough that the models are still learning
  c.epochs = 3;
  c.batch_size = 32;
  c.optimizer = {optimizer_kind::sgd, 0.1, 0.9};
  c.threads = 1;
  return c;
}

// A fixed uneven split (ignores speeds): the first replica takes 3/4.
std::vector<int64_t> uneven(int64_t rows, std::span<const double> speeds) {
  std::vector<int64_t> out(speeds.size(), 0);
  out[0] = rows * 3 / 4;
  int64_t left = rows - out[0];
  for (std::size_t k = 1; left > 0; k = 1 + k % (out.size() - 1), --left) ++out[k];
  return out;
}

// A cpu model of `c.model` holding the weights file `path`.
model load_model(const train_config& c, const std::string& path) {
  zoo_options zo;
  zo.input = c.data.sample;
  zo.classes = c.data.classes;
  zo.width = c.width;
  auto spec = make_model_spec(c.model, zo);
  BOOST_REQUIRE(spec.has_value());
  auto m = build_model(*spec, device::cpu(), build_options{1, 99});
  BOOST_REQUIRE(m.has_value());
  BOOST_REQUIRE(load_weights(*m, path).ok());
  return std::move(*m);
}

// Largest |a - b| over the parameters of two weights files of `c.model`.
double max_weight_diff(const train_config& c, const std::string& a, const std::string& b) {
  model ma = load_model(c, a), mb = load_model(c, b);
  auto pa = ma.parameters(), pb = mb.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    auto va = pa[i]->value.f32_span(), vb = pb[i]->value.f32_span();
    for (std::size_t k = 0; k < va.size(); ++k) worst = std::max(worst, double(std::abs(va[k] - vb[k])));
  }
  return worst;
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("hetflow-dp-" + tag + "-" + std::to_string(::getpid()) + ".weights"))
      .string();
}

}  // namespace

BOOST_AUTO_TEST_CASE(replicas_stay_identical_and_match_single_device) {
  for (std::string model : {"lenet5", "mlp"}) {
    train_config c = config(model);
    const std::string single_path = temp_path("single"), dp_path = temp_path("dp");
    c.save_weights = single_path;
    auto single = train_single(c);
    BOOST_REQUIRE_MESSAGE(single.has_value(), single.error().to_string());
    for (int n : {2, 3}) {
      c.save_weights = dp_path;  // rank 0 writes it
      auto reps = run_replicas(c, n, /*measured=*/false);
      for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
      for (int r = 1; r < n; ++r)
        BOOST_CHECK_EQUAL(reps[std::size_t(r)]->weights_checksum, reps[0]->weights_checksum);
      BOOST_REQUIRE_EQUAL(reps[0]->epochs.size(), single->epochs.size());
      for (std::size_t e = 0; e < single->epochs.size(); ++e) {
        const auto& a = reps[0]->epochs[e];
        const auto& b = single->epochs[e];
        BOOST_TEST_MESSAGE(model << " n=" << n << " epoch " << e + 1 << ": loss " << a.loss << " vs " << b.loss
                                 << ", test " << a.test_accuracy << " vs " << b.test_accuracy);
        BOOST_CHECK_CLOSE(a.loss, b.loss, 1e-3);  // percent
        BOOST_CHECK_EQUAL(a.samples, b.samples);
        BOOST_CHECK_LE(std::abs(a.test_accuracy - b.test_accuracy), 0.02);
      }
      double diff = max_weight_diff(c, single_path, dp_path);
      BOOST_TEST_MESSAGE(model << " n=" << n << ": largest weight difference to single-device " << diff);
      BOOST_CHECK_LT(diff, 1e-4);
      BOOST_CHECK_GT(diff, 0.0);  // summed in another order: not bit-equal (else the test proves little)
      std::filesystem::remove(dp_path);
      // Equal split of a full batch.
      BOOST_REQUIRE(!reps[0]->splits.empty());
      auto total = std::accumulate(reps[0]->splits[0].begin(), reps[0]->splits[0].end(), int64_t{0});
      BOOST_CHECK_EQUAL(total, 32);
      BOOST_CHECK_LE(reps[0]->splits[0].front() - reps[0]->splits[0].back(), 1);
    }
    std::filesystem::remove(single_path);
  }
}

BOOST_AUTO_TEST_CASE(an_uneven_split_and_small_buckets_still_match_single_device) {
  train_config c = config("mlp");
  const std::string single_path = temp_path("single-u"), dp_path = temp_path("dp-u");
  c.save_weights = single_path;
  auto single = train_single(c);
  BOOST_REQUIRE(single.has_value());
  c.save_weights = dp_path;
  c.bucket_bytes = 2048;  // many buckets, each summed as backward produces it
  auto reps = run_replicas(c, 3, /*measured=*/false, nullptr, uneven);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  BOOST_CHECK((reps[0]->splits[0] == std::vector<int64_t>{24, 4, 4}));
  BOOST_CHECK_EQUAL(reps[1]->weights_checksum, reps[0]->weights_checksum);
  BOOST_CHECK_EQUAL(reps[2]->weights_checksum, reps[0]->weights_checksum);
  for (std::size_t e = 0; e < single->epochs.size(); ++e)
    BOOST_CHECK_CLOSE(reps[0]->epochs[e].loss, single->epochs[e].loss, 1e-3);
  double diff = max_weight_diff(c, single_path, dp_path);
  BOOST_TEST_MESSAGE("uneven split: largest weight difference to single-device " << diff);
  BOOST_CHECK_LT(diff, 1e-4);
  std::filesystem::remove(single_path);
  std::filesystem::remove(dp_path);
}

BOOST_AUTO_TEST_CASE(replicas_without_rows_in_a_batch_still_take_part) {
  train_config c = config("mlp");
  c.data.train_size = 289;  // 9 batches of 32, then one of 1 row: 2 of 3 replicas get none
  c.epochs = 2;
  const std::string single_path = temp_path("single-z"), dp_path = temp_path("dp-z");
  c.save_weights = single_path;
  auto single = train_single(c);
  BOOST_REQUIRE(single.has_value());
  c.save_weights = dp_path;
  auto reps = run_replicas(c, 3, /*measured=*/false);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  BOOST_CHECK_EQUAL(reps[1]->weights_checksum, reps[0]->weights_checksum);
  BOOST_CHECK_EQUAL(reps[2]->weights_checksum, reps[0]->weights_checksum);
  for (std::size_t e = 0; e < single->epochs.size(); ++e) {
    BOOST_CHECK_CLOSE(reps[0]->epochs[e].loss, single->epochs[e].loss, 1e-3);
    BOOST_CHECK_EQUAL(reps[0]->epochs[e].samples, 289);
  }
  BOOST_CHECK_LT(max_weight_diff(c, single_path, dp_path), 1e-4);
  std::filesystem::remove(single_path);
  std::filesystem::remove(dp_path);
}

BOOST_AUTO_TEST_CASE(measured_split_is_the_same_on_every_replica) {
  train_config c = config("mlp");
  auto reps = run_replicas(c, 3, /*measured=*/true);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  for (int r = 1; r < 3; ++r) {
    BOOST_CHECK(reps[std::size_t(r)]->splits == reps[0]->splits);
    BOOST_CHECK_EQUAL(reps[std::size_t(r)]->weights_checksum, reps[0]->weights_checksum);
  }
  BOOST_REQUIRE_EQUAL(reps[0]->speeds.size(), std::size_t(c.epochs));  // one per epoch
  for (double s : reps[0]->speeds[0]) BOOST_CHECK_GT(s, 0.0);
  BOOST_CHECK_GT(reps[0]->epochs.back().test_accuracy, 0.5);
}

BOOST_AUTO_TEST_CASE(resplits_inside_epochs_keep_replicas_identical) {
  // 300 rows / 32: 10 steps an epoch; a re-split after steps 3, 6 and 9.
  train_config c = config("mlp");
  c.resplit_every = 3;
  auto reps = run_replicas(c, 3, /*measured=*/true);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  for (int r = 0; r < 3; ++r) {
    BOOST_CHECK_EQUAL(reps[std::size_t(r)]->resplits, 3 * c.epochs);
    BOOST_CHECK_EQUAL(reps[std::size_t(r)]->weights_checksum, reps[0]->weights_checksum);
  }
  c.resplit_every = 0;  // between epochs only
  auto per_epoch = run_replicas(c, 2, /*measured=*/true);
  BOOST_REQUIRE(per_epoch[0].has_value());
  BOOST_CHECK_EQUAL(per_epoch[0]->resplits, 0);
  c.resplit_every = 3;  // equal split: nothing to re-measure
  auto equal = run_replicas(c, 2, /*measured=*/false);
  BOOST_REQUIRE(equal[0].has_value());
  BOOST_CHECK_EQUAL(equal[0]->resplits, 0);
}

BOOST_AUTO_TEST_CASE(a_failing_replica_ends_every_replica_with_an_error) {
  train_config c = config("mlp");
  thread_hub hub(2);
  hub.fail(1, 5);
  auto reps = run_replicas(c, 2, /*measured=*/false, &hub);
  for (auto& r : reps) {
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST_MESSAGE(r.error().to_string());
  }
  BOOST_CHECK(reps[1].error().to_string().find("fails (test)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_group_needs_a_split_function_and_a_cpu_model) {
  train_config c = config("mlp");
  thread_hub hub(1);
  hub_group g(hub, 0, 1);
  c.group = &g;
  auto r = train_single(c);
  BOOST_REQUIRE(!r.has_value());
  BOOST_CHECK(r.error().to_string().find("split function") != std::string::npos);
  c.split = proportional;
  auto ok = train_single(c);  // a group of one is plain training
  BOOST_REQUIRE_MESSAGE(ok.has_value(), ok.error().to_string());
  c.group = nullptr;
  auto plain = train_single(c);
  BOOST_REQUIRE(plain.has_value());
  BOOST_CHECK_EQUAL(ok->weights_checksum, plain->weights_checksum);
}

// The path a cuda replica takes (train_config::host_mirror: gradients copied
// to a host copy of the model, sums, optimizer and batch norm averages
// there, weights copied back after each step), run on cpu: replicas with and
// without it stay bit-identical, and equal to a group where none has it (the
// same arithmetic). resnet18 has batch norm state to carry both ways.
BOOST_AUTO_TEST_CASE(host_mirrored_replicas_take_the_same_steps_bit_for_bit) {
  for (std::string model : {"mlp", "resnet18"}) {
    train_config c = config(model);
    if (model == "resnet18") {
      c.width = 0.125;
      c.epochs = 2;
    }
    auto plain = run_replicas(c, 3, /*measured=*/false);
    auto mixed = run_replicas(c, 3, /*measured=*/false, nullptr, proportional,
                              [](int r, train_config& rc) { rc.host_mirror = r != 1; });
    for (auto* reps : {&plain, &mixed})
      for (auto& r : *reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
    for (int r = 0; r < 3; ++r) {
      BOOST_CHECK_EQUAL(mixed[std::size_t(r)]->weights_checksum, plain[0]->weights_checksum);
      BOOST_CHECK_EQUAL(plain[std::size_t(r)]->weights_checksum, plain[0]->weights_checksum);
    }
    for (std::size_t e = 0; e < plain[0]->epochs.size(); ++e) {
      BOOST_TEST_MESSAGE(model << " epoch " << e + 1 << ": loss " << mixed[0]->epochs[e].loss << ", test "
                               << mixed[0]->epochs[e].test_accuracy);
      BOOST_CHECK_EQUAL(mixed[0]->epochs[e].loss, plain[0]->epochs[e].loss);
      BOOST_CHECK_EQUAL(mixed[2]->epochs[e].test_accuracy, plain[0]->epochs[e].test_accuracy);
    }
  }
}

// A replica with a large fixed cost a step (emulated: 50 ms, where a step of
// this model takes about a millisecond) gets no rows once measured: the
// split balances fixed + per-row costs (split_timed), measured by the speed
// probe at two batch sizes and refitted every 4 steps. The others train
// every row; weights stay identical. (it_train_dp: the same across
// processes, against dp_split = "speed", which keeps giving it rows.)
BOOST_AUTO_TEST_CASE(a_replica_with_a_large_fixed_step_cost_is_left_out_of_the_compute) {
  train_config c = config("mlp");
  c.epochs = 2;
  c.resplit_every = 4;
  auto slow_fixed = [](int r, train_config& rc) {
    rc.split_timed = timed_greedy;
    if (r == 2) rc.emulate_step_seconds = 0.05;
  };
  auto reps = run_replicas(c, 3, /*measured=*/true, nullptr, proportional, slow_fixed);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  for (int r = 1; r < 3; ++r) {
    BOOST_CHECK(reps[std::size_t(r)]->splits == reps[0]->splits);
    BOOST_CHECK_EQUAL(reps[std::size_t(r)]->weights_checksum, reps[0]->weights_checksum);
  }
  const auto& rep = *reps[0];
  BOOST_REQUIRE_EQUAL(rep.splits.size(), std::size_t(c.epochs));
  BOOST_REQUIRE_EQUAL(rep.fixed_seconds.size(), std::size_t(c.epochs));
  for (std::size_t e = 0; e < rep.splits.size(); ++e) {
    BOOST_TEST_MESSAGE("epoch " << e + 1 << ": split " << rep.splits[e][0] << "/" << rep.splits[e][1] << "/"
                                << rep.splits[e][2] << ", fixed ms " << rep.fixed_seconds[e][0] * 1e3 << "/"
                                << rep.fixed_seconds[e][1] * 1e3 << "/" << rep.fixed_seconds[e][2] * 1e3);
    BOOST_CHECK_EQUAL(rep.splits[e][2], 0);  // from the probe on
    BOOST_CHECK_EQUAL(rep.splits[e][0] + rep.splits[e][1], c.batch_size);
  }
  // The probe saw the fixed cost (fit from two batch sizes).
  BOOST_CHECK_GT(rep.fixed_seconds[0][2], 0.03);
  BOOST_CHECK_LT(rep.fixed_seconds[0][0], 0.03);
  BOOST_CHECK_GT(rep.epochs.back().test_accuracy, 0.5);
}

// Batch-norm running statistics are averaged weighted by the rows each
// replica trained: a replica given no rows at all (a split that leaves it
// out) does not dilute them, so the group's model - weights and statistics
// - is the single-device one (replica 0 trains every row of every batch;
// the sums add zeros). A plain mean would halve them towards the idle
// replica's initial statistics.
BOOST_AUTO_TEST_CASE(a_replica_without_rows_does_not_dilute_batch_norm_statistics) {
  train_config c = config("resnet18");
  c.width = 0.125;
  c.epochs = 2;
  const std::string single_path = temp_path("single-bn"), dp_path = temp_path("dp-bn");
  c.save_weights = single_path;
  auto single = train_single(c);
  BOOST_REQUIRE_MESSAGE(single.has_value(), single.error().to_string());
  c.save_weights = dp_path;
  auto all_to_first = [](int64_t rows, std::span<const double> speeds) {
    std::vector<int64_t> out(speeds.size(), 0);
    out[0] = rows;
    return out;
  };
  auto reps = run_replicas(c, 2, /*measured=*/false, nullptr, all_to_first);
  for (auto& r : reps) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  BOOST_CHECK_EQUAL(reps[1]->weights_checksum, reps[0]->weights_checksum);
  // Parameters bit for bit; statistics to float rounding (each replica's
  // are scaled by its rows before the sum and by 1 / rows after).
  model ms = load_model(c, single_path), md = load_model(c, dp_path);
  auto ps = ms.parameters(), pd = md.parameters();
  for (std::size_t i = 0; i < ps.size(); ++i)
    BOOST_CHECK_MESSAGE(std::equal(ps[i]->value.f32_span().begin(), ps[i]->value.f32_span().end(),
                                   pd[i]->value.f32_span().begin()),
                        ps[i]->name << " differs");
  auto ss = ms.state(), sd = md.state();
  BOOST_REQUIRE(!ss.empty());
  double worst = 0;
  for (std::size_t i = 0; i < ss.size(); ++i) {
    auto a = ss[i]->value.f32_span(), b = sd[i]->value.f32_span();
    for (std::size_t k = 0; k < a.size(); ++k)
      worst = std::max(worst, double(std::abs(a[k] - b[k])) / std::max(1e-3, double(std::abs(a[k]))));
  }
  BOOST_TEST_MESSAGE("batch-norm statistics: largest relative difference to single-device " << worst);
  BOOST_CHECK_LT(worst, 1e-5);  // a plain mean with the idle replica's would be ~0.5 off
  for (std::size_t e = 0; e < single->epochs.size(); ++e)
    BOOST_CHECK_EQUAL(reps[0]->epochs[e].test_accuracy, single->epochs[e].test_accuracy);
  std::filesystem::remove(single_path);
  std::filesystem::remove(dp_path);
}
