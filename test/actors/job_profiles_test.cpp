// The planners' measured profiles (actors/builtin/job_profiles.hpp): the
// co-located dp step and where measured_profiles records it.
#define BOOST_TEST_MODULE actors_job_profiles
#include <boost/test/unit_test.hpp>

#include <sched.h>

#include <cmath>
#include <string>

#include "actors/builtin/job_profiles.hpp"
#include "actors/registry.hpp"
#include "kernels/profile.hpp"
#include "topology/parser.hpp"

using namespace hetflow;
using namespace hetflow::actors;

namespace {

// Two one-thread cpu nodes on one host, a small MLP on synthetic data.
topology::cluster two_replicas(const std::string& strategy, const std::string& host2 = "127.0.0.1") {
  registry reg;
  add_builtin_types(reg);
  const std::string text = R"(
cluster = { name = "jp" }
nodes = [ { name = "a", host = "127.0.0.1", port = 7400, devices = [ { kind = "cpu", threads = 1 } ] },
          { name = "b", host = ")" + host2 + R"(", port = 7401, devices = [ { kind = "cpu", threads = 1 } ] } ]
[job]
kind = "train"
strategy = ")" + strategy + R"("
model = "mlp"
width = 0.25
dataset = "synthetic"
input_shape = [1, 8, 8]
classes = 4
train_size = 64
test_size = 16
)";
  auto r = topology::parse_topology(text, "test.toml", reg.catalog());
  for (auto& d : r.errors) BOOST_TEST_MESSAGE(topology::format(d));
  BOOST_REQUIRE(r.ok());
  return *r.model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_replica_is_not_slowed_by_itself) {
  auto c = two_replicas("dp");
  auto spec = train_model_spec(c);
  BOOST_REQUIRE(spec.has_value());
  auto f = colocated_step_factor(c, *spec, 1, 1, 8);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(*f == 1.0);
  auto bad = colocated_step_factor(c, *spec, 1, 2, 0);
  BOOST_TEST(!bad.has_value());
}

BOOST_AUTO_TEST_CASE(co_located_replicas_are_timed_together) {
  auto c = two_replicas("dp");
  auto spec = train_model_spec(c);
  BOOST_REQUIRE(spec.has_value());
  // Three replicas on (at most) two cores: each step waits for the slowest,
  // so the factor is at least 1 and finite; its size depends on the machine.
  auto f = colocated_step_factor(c, *spec, 1, 3, 16);
  BOOST_REQUIRE_MESSAGE(f.has_value(), (f ? std::string() : f.error().message()));
  BOOST_TEST(*f >= 1.0);
  BOOST_TEST(std::isfinite(*f));
  BOOST_TEST(*f < 100.0);
  // With a sum's traffic between backward and the step (not timed) and the
  // step at once in ms.
  double together = -1;
  auto g = colocated_step_factor(c, *spec, 1, 2, 16, 2, 0.02, 4 << 20, &together);
  BOOST_REQUIRE_MESSAGE(g.has_value(), (g ? std::string() : g.error().message()));
  BOOST_TEST(together > 0.0);
  BOOST_TEST(together < 10000.0);
}

BOOST_AUTO_TEST_CASE(single_and_dp_profiles_time_the_jobs_own_samples) {
  // Strategies single and dp time their models on the job's first samples,
  // normalised (kernels::sample_training_batch: repeated when the set is
  // smaller than the rows); the others on random inputs (no sample).
  auto spec = train_model_spec(two_replicas("dp"));
  BOOST_REQUIRE(spec.has_value());
  auto m = kernels::build_model(*spec, kernels::device::cpu(), {1, 1});
  BOOST_REQUIRE(m.has_value());
  for (const std::string strategy : {"single", "dp"}) {
    auto x = sample_input(two_replicas(strategy), *spec, 100);
    BOOST_REQUIRE_MESSAGE(x.has_value(), strategy);
    BOOST_CHECK(x->shape() == (kernels::shape{100, 1, 8, 8}));
    double sum = 0, sq = 0;
    const int64_t per = 64, n = 64 * per;  // the set's 64 samples
    for (int64_t i = 0; i < n; ++i) {
      sum += x->f32()[i];
      sq += double(x->f32()[i]) * x->f32()[i];
    }
    BOOST_CHECK_SMALL(sum / double(n), 1e-3);
    BOOST_CHECK_CLOSE(std::sqrt(sq / double(n)), 1.0, 1.0);
    for (int64_t i = 0; i < 36 * per; ++i) BOOST_REQUIRE_EQUAL(x->f32()[64 * per + i], x->f32()[i]);
  }
  for (const std::string strategy : {"hetpipe", "ps", "auto"})
    BOOST_CHECK_MESSAGE(!sample_input(two_replicas(strategy), *spec, 100).has_value(), strategy);
  // A model whose input is not the dataset's samples: none.
  auto other = kernels::make_model_spec("mlp", {});
  BOOST_REQUIRE(other.has_value());
  BOOST_CHECK(!sample_input(two_replicas("single"), *other, 16).has_value());
  // The profiler takes the rows given, and only a batch of them.
  kernels::profile_options po;
  po.batch = 16;
  auto rows16 = sample_input(two_replicas("single"), *spec, 16);
  BOOST_REQUIRE(rows16.has_value());
  po.input = &*rows16;
  po.iterations = 1;
  po.min_seconds = 0;
  po.warmup_seconds = 0;
  BOOST_CHECK(kernels::profile_model(*m, po).has_value());
  po.batch = 8;
  auto wrong = kernels::profile_model(*m, po);
  BOOST_REQUIRE(!wrong.has_value());
  BOOST_CHECK(wrong.error().code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_whole_step_is_timed_on_cpu_models) {
  auto c = two_replicas("single");
  auto spec = train_model_spec(c);
  BOOST_REQUIRE(spec.has_value());
  auto m = kernels::build_model(*spec, kernels::device::cpu(), {1, 1});
  BOOST_REQUIRE(m.has_value());
  auto ms = time_whole_step(c, *m, 16, 0.02);
  BOOST_REQUIRE_MESSAGE(ms.has_value(), (ms ? std::string() : ms.error().message()));
  BOOST_TEST(*ms > 0.0);
  BOOST_TEST(std::isfinite(*ms));
  BOOST_TEST(!time_whole_step(c, *m, 0).has_value());
}

BOOST_AUTO_TEST_CASE(measured_profiles_record_the_step_factor_for_dp_on_one_host_only) {
  auto dp = two_replicas("dp");
  auto db = measured_profiles(dp, 16);
  BOOST_REQUIRE_MESSAGE(db.has_value(), (db ? std::string() : db.error().message()));
  BOOST_TEST(db->links.host_ring_gbps > 0.0);
  BOOST_TEST(db->links.host_ring_members == 2);
  BOOST_TEST(db->links.host_ring_step_factor >= 1.0);
  BOOST_TEST(db->source.find("replicas computing at once: x ") != std::string::npos, db->source);

  auto single = two_replicas("single");
  auto sdb = measured_profiles(single, 16);
  BOOST_REQUIRE(sdb.has_value());
  BOOST_TEST(sdb->links.host_ring_step_factor == 0.0);
  // Every measured cpu kind has its whole step timed: a finite factor over
  // its units (a whole step does all their work, and more).
  BOOST_REQUIRE(!sdb->devices.empty());
  for (const auto& [kind, d] : sdb->devices) {
    BOOST_TEST(d.step_factor > 0.5, kind << ": " << d.step_factor);
    BOOST_TEST(d.step_factor < 100.0, kind << ": " << d.step_factor);
  }
  // Not where no cost model prices whole steps (ps and ralp price units,
  // as HetPipe's stages do).
  auto ps = two_replicas("ps");
  auto pdb = measured_profiles(ps, 16);
  BOOST_REQUIRE_MESSAGE(pdb.has_value(), (pdb ? std::string() : pdb.error().message()));
  for (const auto& [kind, d] : pdb->devices) BOOST_TEST(d.step_factor == 0.0, kind);

  // One replica per host: no host ring, no co-located step.
  auto apart = two_replicas("dp", "127.0.0.2");
  auto adb = measured_profiles(apart, 16);
  BOOST_REQUIRE(adb.has_value());
  BOOST_TEST(adb->links.host_ring_gbps == 0.0);
  BOOST_TEST(adb->links.host_ring_step_factor == 0.0);
}

BOOST_AUTO_TEST_CASE(a_slower_nodes_cpu_devices_get_their_own_scaled_kind) {
  auto ps = two_replicas("ps");
  auto db = measured_profiles(ps, 16);
  BOOST_REQUIRE_MESSAGE(db.has_value(), (db ? std::string() : db.error().message()));
  const std::string kind = ps.nodes[0].devices[0].profile;
  BOOST_REQUIRE(!kind.empty());
  BOOST_REQUIRE(db->has_kind(kind));
  const topology::profile_db before = *db;
  // Within the threshold: nothing changes.
  BOOST_TEST(scale_node_kinds(ps, *db, {0, 1}, {1.0, 1.08}, 0.10).empty());
  BOOST_TEST(ps.nodes[1].devices[0].profile == kind);
  BOOST_TEST(db->devices.size() == before.devices.size());
  // b 2.5x slower, a not measured (0).
  const std::string note = scale_node_kinds(ps, *db, {0, 1}, {0.0, 2.5}, 0.10);
  BOOST_TEST(note == "b x 2.50");
  const std::string mine = kind + "@b";
  BOOST_TEST(ps.nodes[1].devices[0].profile == mine);
  BOOST_TEST(ps.nodes[0].devices[0].profile == kind);
  BOOST_REQUIRE(db->has_kind(mine));
  const std::size_t last = db->units.size() - 1;
  BOOST_TEST(db->compute_ms(mine, 0, last) == 2.5 * before.compute_ms(kind, 0, last),
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(db->compute_ms(kind, 0, last) == before.compute_ms(kind, 0, last));
  BOOST_TEST(db->devices.at(mine).update_ms == 2.5 * before.devices.at(kind).update_ms,
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(db->devices.at(mine).memory_bytes == before.devices.at(kind).memory_bytes);
}

BOOST_AUTO_TEST_CASE(node_cpu_speeds_time_each_cpu_list) {
  // The CPU this test may use, twice, and an empty list: times, and 0.
  cpu_set_t set;
  BOOST_REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c)
    if (CPU_ISSET(c, &set)) cpu = c;
  BOOST_REQUIRE(cpu >= 0);
  // A CPU no thread can be pinned to (past CPU_SETSIZE: an empty mask): 0.
  const auto t = node_cpu_speeds({{cpu}, {cpu}, {}, {CPU_SETSIZE + 1}}, 3);
  BOOST_REQUIRE(t.size() == 4u);
  BOOST_TEST(t[0] > 0.0);
  BOOST_TEST(t[1] > 0.0);
  BOOST_TEST(t[2] == 0.0);
  BOOST_TEST(t[3] == 0.0);
  BOOST_TEST(t[0] < 1.0);  // ~5 ms a loop on a 3 GHz core
}
