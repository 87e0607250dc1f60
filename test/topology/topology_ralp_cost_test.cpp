// ralp_cost: the cut table of strategy "ralp". Expectations derived by hand
// from the formulas in topology/ralp_cost.hpp (numbers in the comments).
#define BOOST_TEST_MODULE topology_ralp_cost
#include <boost/test/unit_test.hpp>

#include "topology/ralp_cost.hpp"

using namespace hetflow;
using namespace hetflow::topology;

namespace {

profile_unit unit(std::string name, uint64_t params, uint64_t output, double fwd, double bwd) {
  profile_unit u;
  u.name = std::move(name);
  u.params_bytes = params;
  u.activation_bytes = output;
  u.output_bytes = output;
  u.devices["cpu"] = unit_cost{fwd, bwd};
  return u;
}

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

// A small conv stem and a huge fully connected head (400 MiB of weights), at
// batch 32.
profile_db fc_head() {
  profile_db db;
  db.batch = 32;
  db.source = "test";
  db.units = {unit("conv1", 10 * KiB, 2 * MiB, 5, 10), unit("pool", 0, MiB / 2, 1, 1),
              unit("flatten", 0, MiB / 2, 0.1, 0.1), unit("fc1", 400 * MiB, MiB / 2, 20, 40),
              unit("fc2", 160 * KiB, 32 * 40, 0.1, 0.2)};
  db.devices["cpu"] = profile_device{};
  return db;
}

ralp_cost_inputs inputs(double gbps) {
  ralp_cost_inputs in;
  in.workers = 2;
  in.worker_kinds = {"cpu", "cpu"};
  in.server_kind = "cpu";
  in.gbps = gbps;
  in.latency_us = 5;
  return in;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ralp_cost)

BOOST_AUTO_TEST_CASE(huge_fc_head_is_cut_off) {
  // 10 Gb/s, 2 workers:
  //   no cut:          2 x 2 x (400 MiB + 170 KiB) ~ 1.68 GB -> ~1342 ms + 77.5 ms compute
  //   cut 1 (pool):    acts 2 MiB: ~8.4 MB -> 6.7 ms; workers 15; server 2 x 62.5 = 125   -> ~147
  //   cut 2 (flatten): acts 0.5 MiB: ~2.1 MB -> 1.7 ms; workers 17; server 2 x 60.5 = 121 -> ~139.7
  //   cut 3 (fc1):     the same bytes; workers 17.2; server 2 x 60.3 = 120.6             -> ~139.5
  //   cut 4 (fc2):     the 400 MiB are lower weights again                                -> > 1300
  auto e = estimate_ralp(fc_head(), inputs(10));
  BOOST_REQUIRE_MESSAGE(e.has_value(), e.error().message());
  BOOST_REQUIRE_EQUAL(e->candidates.size(), 5u);  // cuts 1..4 and no cut
  BOOST_CHECK_EQUAL(e->best().cut, 3u);
  BOOST_CHECK_EQUAL(e->best().unit, "fc1");
  // bytes: W x (2 x lower params + 2 x activations + batch x 4 label bytes)
  BOOST_CHECK_EQUAL(e->best().bytes_per_step, 2 * (2 * 10 * KiB + 2 * (MiB / 2) + 32 * 4));
  BOOST_CHECK_CLOSE(e->best().worker_ms, 17.2, 1e-9);
  BOOST_CHECK_CLOSE(e->best().server_ms, 120.6, 1e-9);
  const auto* none = e->find(5);
  BOOST_REQUIRE(none != nullptr);
  BOOST_CHECK_EQUAL(none->unit, "(no cut)");
  BOOST_CHECK_EQUAL(none->bytes_per_step, 2 * 2 * (10 * KiB + 400 * MiB + 160 * KiB));
  BOOST_CHECK_CLOSE(none->worker_ms, 77.5, 1e-9);
  BOOST_CHECK_GT(none->step_ms, 1300.0);
  BOOST_CHECK_GT(e->find(4)->step_ms, 1300.0);
  BOOST_CHECK_LT(e->find(3)->step_ms, e->find(2)->step_ms);
  BOOST_CHECK(e->why.find("fc1") != std::string::npos);
  BOOST_CHECK(e->why.find("no cut") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(fast_link_keeps_plain_ps) {
  // 1000 Gb/s: no cut moves 1.68 GB in ~13.4 ms: 77.5 + 13.4 ~ 91 ms beats
  // cut 3's 17.2 + 120.6 = 137.8 ms (the server runs the head twice).
  auto e = estimate_ralp(fc_head(), inputs(1000));
  BOOST_REQUIRE(e.has_value());
  BOOST_CHECK_EQUAL(e->best().cut, 5u);
}

BOOST_AUTO_TEST_CASE(conv_only_tiny_params_never_cut) {
  // Three convs, 1 KiB of weights and 1 MiB of output each, 10 + 20 ms.
  // no cut: 90 ms + 12 KiB; cut 2: 60 + 2 x 30 = 120 ms + 4 MiB; cut 1: 30 +
  // 2 x 60 = 150 ms + 4 MiB. Whatever the link, no cut wins: a cut only adds
  // server work and bytes.
  profile_db db;
  db.batch = 16;
  db.source = "test";
  db.units = {unit("conv1", KiB, MiB, 10, 20), unit("conv2", KiB, MiB, 10, 20), unit("conv3", KiB, MiB, 10, 20)};
  db.devices["cpu"] = profile_device{};
  for (double gbps : {0.001, 1.0, 100.0, 1e6}) {
    auto e = estimate_ralp(db, inputs(gbps));
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST_CONTEXT(gbps << " Gb/s") {
      BOOST_CHECK_EQUAL(e->best().cut, 3u);
      BOOST_CHECK_EQUAL(e->best().bytes_per_step, 2u * 2u * 3u * KiB);
    }
  }
}

BOOST_AUTO_TEST_CASE(batch_scales_the_profile_and_update_counts_per_worker) {
  auto db = fc_head();
  db.devices["cpu"].update_ms = 4;
  auto in = inputs(10);
  in.batch = 64;  // twice the profile's: activations and times double
  auto e = estimate_ralp(db, in);
  BOOST_REQUIRE(e.has_value());
  const auto* c3 = e->find(3);
  BOOST_CHECK_EQUAL(c3->activation_bytes, MiB);
  BOOST_CHECK_EQUAL(c3->bytes_per_step, 2 * (2 * 10 * KiB + 2 * MiB + 64 * 4));
  BOOST_CHECK_CLOSE(c3->worker_ms, 34.4, 1e-9);
  BOOST_CHECK_CLOSE(c3->server_ms, 2 * 120.6 + 2 * 4, 1e-9);  // W x upper at batch 64, W x update
}

BOOST_AUTO_TEST_CASE(the_slowest_worker_kind_and_the_latency_price_the_step) {
  // A worker of kind "slow" (every unit 3x the time) sets the workers' term;
  // each of the 4 messages of a cut step (2 of plain PS) costs latency_us.
  profile_db db = fc_head();
  db.devices["slow"] = profile_device{};
  for (auto& u : db.units) u.devices["slow"] = {3 * u.devices["cpu"].fwd_ms, 3 * u.devices["cpu"].bwd_ms};
  auto in = inputs(10);
  in.worker_kinds = {"cpu", "slow"};
  auto e = estimate_ralp(db, in);
  BOOST_REQUIRE_MESSAGE(e.has_value(), e.error().message());
  const auto* c = e->find(3);
  BOOST_REQUIRE(c != nullptr);
  BOOST_CHECK_CLOSE(c->worker_ms, 3 * (15 + 2 + 0.2), 1e-6);
  in.latency_us = 105;
  auto f = estimate_ralp(db, in);
  BOOST_REQUIRE(f.has_value());
  BOOST_CHECK_CLOSE(f->find(3)->transfer_ms - c->transfer_ms, 4 * 0.1, 1e-6);
  BOOST_CHECK_CLOSE(f->find(5)->transfer_ms - e->find(5)->transfer_ms, 2 * 0.1, 1e-6);
}

BOOST_AUTO_TEST_CASE(refuses_bad_inputs) {
  auto in = inputs(10);
  in.server_kind = "gpu";
  BOOST_CHECK(!estimate_ralp(fc_head(), in).has_value());
  in = inputs(10);
  in.worker_kinds = {};
  BOOST_CHECK(!estimate_ralp(fc_head(), in).has_value());
  BOOST_CHECK(!estimate_ralp(fc_head(), inputs(0)).has_value());
  BOOST_CHECK(!estimate_ralp(profile_db{}, inputs(10)).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
