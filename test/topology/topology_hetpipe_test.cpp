// Planner pieces of HetPipe: profile files, allocation policies, the
// partitioner, PS placement and the discrete-event simulator, on small
// cases whose answers can be worked out by hand.
#define BOOST_TEST_MODULE topology_hetpipe_test
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <set>

#include "topology/cost_model.hpp"
#include "topology/hetpipe_plan.hpp"
#include "topology/profile_db.hpp"
#include "topology/simulator.hpp"

using namespace hetflow;
using namespace hetflow::topology;

namespace {

// n units; each kind in `ms` costs (fwd, 2*fwd) per unit; no transfer bytes.
profile_db uniform_db(std::size_t n, std::map<std::string, double> fwd_ms, uint64_t params = 0, uint64_t act = 0,
                      uint64_t out = 0) {
  profile_db db;
  db.batch = 32;
  db.source = "test";
  db.links.latency_us = 0;
  for (std::size_t i = 0; i < n; ++i) {
    profile_unit u;
    u.name = "u";
    u.name += std::to_string(i);  // (not "u" + ...: GCC 12 -Wrestrict false positive when inlined)
    u.params_bytes = params;
    u.activation_bytes = act;
    u.output_bytes = out;
    for (auto& [k, f] : fwd_ms) u.devices[k] = unit_cost{f, 2 * f};
    db.units.push_back(u);
  }
  for (auto& [k, f] : fwd_ms) db.devices[k];
  return db;
}

plan_device dev(int node, std::size_t index, std::string kind, uint64_t mem = 0) {
  plan_device d;
  d.node = "n" + std::to_string(node);
  d.node_index = node;
  d.device = index;
  d.kind = std::move(kind);
  d.memory_bytes = mem;
  return d;
}

// dev(node, 0, kind) on host `host`.
plan_device on_host(int node, std::string host, std::string kind = "a") {
  auto d = dev(node, 0, std::move(kind));
  d.host = std::move(host);
  return d;
}

hetpipe_plan one_vw_plan(const profile_db& db, std::vector<plan_device> devs, int nm, int staleness) {
  hetpipe_options o;
  o.policy = allocation_policy::np;
  o.nm = nm;
  o.staleness = staleness;
  std::set<int> nodes;
  for (auto& d : devs) nodes.insert(d.node_index);
  std::vector<std::string> names;
  for (int i = 0; i <= *nodes.rbegin(); ++i) names.push_back("n" + std::to_string(i));
  // NP would split by node; build the single VW by hand.
  auto vw = partition_virtual_worker(devs, db, nm);
  BOOST_REQUIRE_MESSAGE(vw.has_value(), (vw ? std::string() : vw.error().message()));
  hetpipe_plan p;
  p.nm = nm;
  p.staleness = staleness;
  p.batch = db.batch;
  p.nodes = names;
  p.virtual_workers.push_back(*vw);
  p.unit_ps_node = place_ps_shards(p.virtual_workers, db, names.size(), true);
  p.sync_ms = wave_sync_ms(p.virtual_workers, p.unit_ps_node, db, names.size());
  finish_prediction(p);
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profile_files)

BOOST_AUTO_TEST_CASE(parses_the_issue_example_and_applies_defaults) {
  auto db = parse_profile_db(R"({"batch": 32, "units": [{"name": "conv1", "params_bytes": 10, "activation_bytes": 20,
    "devices": {"titan-v": {"fwd_ms": 1.0, "bwd_ms": 2.0}}}], "devices": {"titan-v": {"memory_bytes": 12884901888}},
    "links": {"intra_node_gbps": 100, "inter_node_gbps": 56}})",
                             "p.json");
  BOOST_REQUIRE_MESSAGE(db.has_value(), (db ? std::string() : db.error().message()));
  BOOST_TEST(db->batch == 32);
  BOOST_TEST(db->units.size() == 1u);
  BOOST_TEST(db->units[0].output_bytes == 20u);  // defaults to activation_bytes
  BOOST_TEST(db->devices["titan-v"].memory_bytes == 12884901888ull);
  BOOST_TEST(db->links.inter_node_gbps == 56.0);
  BOOST_TEST(db->links.latency_us == 5.0);
  BOOST_TEST(db->compute_ms("titan-v", 0, 0) == 3.0);
  auto again = parse_profile_db(to_json(*db), "again.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->units[0].devices["titan-v"].bwd_ms == 2.0);
}

BOOST_AUTO_TEST_CASE(errors_name_file_and_field) {
  auto check = [](const char* text, const std::string& want) {
    auto db = parse_profile_db(text, "bad.json");
    BOOST_REQUIRE(!db.has_value());
    BOOST_TEST_INFO(db.error().message());
    BOOST_TEST(db.error().message().find("bad.json") != std::string::npos);
    BOOST_TEST(db.error().message().find(want) != std::string::npos);
  };
  check(R"({"batch": 32, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1}}}]})", "units[0].devices.x.bwd_ms: missing");
  check(R"({"batch": 32, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}, {"name": "b", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"y": {"fwd_ms": 1, "bwd_ms": 1}}}]})", "units[1].devices.x");
  check(R"({"units": []})", "batch");
  check(R"({"batch": 32, "units": [{"name": "a", "params_bytes": -1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}]})", "units[0].params_bytes");
  check(R"({"batch": 32, "unitz": []})", "unitz");
  check(R"({"batch": 32, "units": [)", "not valid JSON");
  check(R"({"batch": 32, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "links": {"inter_node_gbps": 0}})", "links.inter_node_gbps");
}

BOOST_AUTO_TEST_CASE(machines_profiles_merge_into_one_file) {
  // Two machines' files (`hetflow profile --out F --as NAME`), then --merge.
  auto a = uniform_db(3, {{"cpu-t1", 1.0}}, 8, 100, 50);
  a.source = "a.json";
  a.devices["cpu-t1"].update_ms = 0.5;
  a.links.inter_node_gbps = 25;
  auto b = uniform_db(3, {{"cpu-t1", 3.0}, {"cuda0", 0.25}}, 8, 100, 50);
  b.source = "b.json";
  b.units[1].activation_bytes = 140;  // a backend that keeps more: the larger counts
  prefix_kinds(a, "old");
  prefix_kinds(b, "new");
  BOOST_TEST(a.has_kind("old-cpu-t1"));
  BOOST_TEST(!a.has_kind("cpu-t1"));
  BOOST_TEST(a.devices["old-cpu-t1"].update_ms == 0.5);
  auto m = merge_profile_dbs({a, b});
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? std::string() : m.error().message()));
  BOOST_TEST(m->devices.size() == 3u);
  BOOST_TEST(m->compute_ms("old-cpu-t1", 0, 2) == 9.0);
  BOOST_TEST(m->compute_ms("new-cpu-t1", 0, 2) == 27.0);
  BOOST_TEST(m->compute_ms("new-cuda0", 0, 2) == 2.25);
  BOOST_TEST(m->units[1].activation_bytes == 140u);
  BOOST_TEST(m->units[0].activation_bytes == 100u);
  BOOST_TEST(m->links.inter_node_gbps == 25.0);  // the first file's
  BOOST_TEST(m->source.find("a.json") != std::string::npos);
  BOOST_TEST(m->source.find("b.json") != std::string::npos);
  // What --merge writes reads back whole.
  auto again = parse_profile_db(to_json(*m), "fleet.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->compute_ms("new-cuda0", 0, 2) == 2.25);
  BOOST_TEST(again->devices["old-cpu-t1"].update_ms == 0.5);

  auto refused = [](const std::vector<profile_db>& dbs, const std::string& want) {
    auto r = merge_profile_dbs(dbs);
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST_INFO(r.error().message());
    BOOST_TEST(r.error().message().find(want) != std::string::npos);
  };
  refused({a, a}, "device kind 'old-cpu-t1' is in a.json and in a.json");
  auto other_batch = b;
  other_batch.batch = 64;
  refused({a, other_batch}, "batch 32 and 64");
  auto fewer = b;
  fewer.units.pop_back();
  refused({a, fewer}, "3 and 2 units");
  auto renamed = b;
  renamed.units[2].name = "fc9";
  refused({a, renamed}, "unit 2 is 'u2' and 'fc9'");
  auto wider = b;
  wider.units[0].params_bytes = 16;
  refused({a, wider}, "has 8 and 16 parameter bytes");
  refused({}, "no profile");
}

BOOST_AUTO_TEST_CASE(rescales_to_another_batch) {
  auto db = uniform_db(2, {{"a", 1.0}}, 8, 100, 50);
  auto half = db.at_batch(16);
  BOOST_TEST(half.units[0].devices["a"].fwd_ms == 0.5);
  BOOST_TEST(half.units[0].activation_bytes == 50u);
  BOOST_TEST(half.units[0].params_bytes == 8u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(partitioner)

BOOST_AUTO_TEST_CASE(equal_devices_split_evenly) {
  auto db = uniform_db(4, {{"a", 1.0}});
  auto vw = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw.has_value());
  BOOST_REQUIRE(vw->stages.size() == 2u);
  BOOST_TEST(vw->stages[0].first_unit == 0u);
  BOOST_TEST(vw->stages[0].last_unit == 1u);
  BOOST_TEST(vw->stages[1].first_unit == 2u);
  BOOST_TEST(vw->stages[1].last_unit == 3u);
  BOOST_TEST(vw->stages[0].stage_ms == 6.0);
  BOOST_TEST(vw->latency_ms == 12.0);
  BOOST_TEST(vw->period_ms == 6.0);  // max(6, 12 / 2)
}

BOOST_AUTO_TEST_CASE(optimizer_step_is_shared_by_parameter_bytes) {
  // update_ms 4 over 4 equal units: each stage of 2 units pays 2 ms after its backward.
  auto db = uniform_db(4, {{"a", 1.0}}, 100);
  db.devices["a"].update_ms = 4.0;
  auto vw = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw.has_value());
  BOOST_TEST(vw->stages[0].compute_ms == 8.0);
  BOOST_TEST(vw->stages[0].bwd_ms == 6.0);
  auto single = estimate_single(dev(0, 0, "a"), db, 32);
  BOOST_REQUIRE(single.has_value());
  BOOST_TEST(single->step_ms == 16.0);
  auto parsed = parse_profile_db(R"({"batch": 8, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "devices": {"x": {"update_ms": 0.5}}})", "u.json");
  BOOST_REQUIRE(parsed.has_value());
  BOOST_TEST(parsed->update_ms("x", 0, 0) == 0.5);
  BOOST_TEST(!parse_profile_db(R"({"batch": 8, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "devices": {"x": {"memory": 5}}})", "u.json").has_value());
}

BOOST_AUTO_TEST_CASE(overlapped_waves_bookkeeping_is_shared_by_parameter_bytes) {
  // wave_copy_ms 2, wave_sum_ms 4 over 4 equal units, Nm = 2, two stages of
  // 2 units: stage 0 (2 slots) pays the slot copy and the sum, (2 + 4) / 2
  // = 3 ms, the last stage (1 slot, which holds the local weights on a cpu)
  // the sum, 4 / 2 = 2 ms; on a cuda device stage 0 also copies its weights
  // before the step ((2 + 2 + 4) / 2 = 4 ms; a cpu stage sums in the step's
  // pass) and the last stage copies into its slot (3 ms); drained waves pay
  // none. Every cpu stage also pays its once-a-wave passes
  // (rebase and push: 2 copies, no add timed here: 2 * 2 / 2 units' share =
  // 2 ms a wave, 1 ms a minibatch at Nm = 2; per_wave_passes_... below).
  auto db = uniform_db(4, {{"a", 1.0}}, 100);
  db.devices["a"].wave_copy_ms = 2.0;
  db.devices["a"].wave_sum_ms = 4.0;
  BOOST_TEST(db.wave_ms("a", 0, 1, 2) == 4.0);
  BOOST_TEST(db.wave_ms("a", 2, 3, 1) == 3.0);
  BOOST_TEST(db.wave_ms("a", 2, 3, 0) == 2.0);
  BOOST_TEST(db.wave_ms("b", 0, 3, 2) == 0.0);  // no such kind
  auto vw = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw.has_value());
  BOOST_TEST(vw->stages[0].last_unit == 1u);
  BOOST_TEST(vw->stages[0].compute_ms == 6.0 + 3.0 + 1.0);
  BOOST_TEST(vw->stages[0].bwd_ms == 4.0 + 3.0 + 1.0);
  BOOST_TEST(vw->stages[1].compute_ms == 6.0 + 2.0 + 1.0);
  plan_device g0 = dev(0, 0, "a"), g1 = dev(0, 1, "a");
  g0.cuda = g1.cuda = true;
  auto on_cuda = partition_virtual_worker({g0, g1}, db, 2);
  BOOST_REQUIRE(on_cuda.has_value());
  BOOST_TEST(on_cuda->stages[0].last_unit == 1u);
  BOOST_TEST(on_cuda->stages[0].compute_ms == 6.0 + 4.0);
  BOOST_TEST(on_cuda->stages[1].compute_ms == 6.0 + 3.0);
  auto drained = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2, /*overlap_waves=*/false);
  BOOST_REQUIRE(drained.has_value());
  BOOST_TEST(drained->stages[0].compute_ms == 6.0 + 1.0);
  BOOST_TEST(drained->stages[1].compute_ms == 6.0 + 1.0);
  // From a file, and back.
  auto parsed = parse_profile_db(R"({"batch": 8, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "devices": {"x": {"wave_copy_ms": 0.25, "wave_sum_ms": 0.5}}})",
                                 "w.json");
  BOOST_REQUIRE(parsed.has_value());
  BOOST_TEST(parsed->wave_ms("x", 0, 0, 2) == 1.0);
  auto again = parse_profile_db(to_json(*parsed), "again.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->devices.at("x").wave_copy_ms == 0.25);
  BOOST_TEST(again->devices.at("x").wave_sum_ms == 0.5);
  // hetflow run overlaps unless the job drains.
  BOOST_TEST(hetpipe_options{}.overlap_waves);
}

BOOST_AUTO_TEST_CASE(per_wave_passes_on_cpu_stages) {
  // wave_copy_ms 2, wave_add_ms 3 over 4 equal units: a stage's rebase and
  // push (2 copies + 1 add = 7 ms for the whole model) and, with the shard
  // of its weights on its node, the shard's add and answer (+ 3 + 2 = 12
  // ms), by parameter bytes, once a wave: per minibatch / Nm.
  auto db = uniform_db(4, {{"a", 1.0}}, 100);
  db.devices["a"].wave_copy_ms = 2.0;
  db.devices["a"].wave_add_ms = 3.0;
  BOOST_TEST(db.wave_sync_ms("a", 0, 3, false) == 7.0);
  BOOST_TEST(db.wave_sync_ms("a", 0, 3, true) == 12.0);
  BOOST_TEST(db.wave_sync_ms("a", 2, 3, true) == 6.0);
  BOOST_TEST(db.wave_sync_ms("b", 0, 3, true) == 0.0);  // no such kind
  auto spread = partition_virtual_worker({dev(0, 0, "a"), dev(1, 0, "a")}, db, 2, /*overlap_waves=*/false);
  auto local = partition_virtual_worker({dev(0, 0, "a"), dev(1, 0, "a")}, db, 2, false, /*shards_local=*/true);
  BOOST_REQUIRE(spread.has_value());
  BOOST_REQUIRE(local.has_value());
  BOOST_TEST(spread->stages[0].compute_ms == 6.0 + 3.5 / 2);
  BOOST_TEST(local->stages[0].compute_ms == 6.0 + 6.0 / 2);
  BOOST_TEST(local->stages[1].bwd_ms == 4.0 + 6.0 / 2);
  // Nm spreads a wave's passes over more minibatches.
  auto local4 = partition_virtual_worker({dev(0, 0, "a"), dev(1, 0, "a")}, db, 4, false, true);
  BOOST_REQUIRE(local4.has_value());
  BOOST_TEST(local4->stages[1].compute_ms == 6.0 + 6.0 / 4);
  // cuda stages: not profiled, not priced.
  plan_device g0 = dev(0, 0, "a"), g1 = dev(1, 0, "a");
  g0.cuda = g1.cuda = true;
  auto on_cuda = partition_virtual_worker({g0, g1}, db, 2, false, true);
  BOOST_REQUIRE(on_cuda.has_value());
  BOOST_TEST(on_cuda->stages[0].compute_ms == 6.0);
  // The planner: one VW, PS "auto" = local, so its stages pay their shards' passes.
  hetpipe_options o;
  o.nm = 2;
  o.virtual_workers = 1;
  o.ps_auto = true;
  o.overlap_waves = false;
  auto plan = plan_hetpipe({dev(0, 0, "a"), dev(1, 0, "a")}, {"n0", "n1"}, db, o);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->ps_local);
  BOOST_TEST(plan->virtual_workers[0].stages[0].compute_ms == 6.0 + 6.0 / 2);
  // From a file, and back.
  auto parsed = parse_profile_db(R"({"batch": 8, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "devices": {"x": {"wave_copy_ms": 0.25, "wave_add_ms": 0.5}}})",
                                 "s.json");
  BOOST_REQUIRE(parsed.has_value());
  BOOST_TEST(parsed->wave_sync_ms("x", 0, 0, true) == 3 * 0.25 + 2 * 0.5);
  auto again = parse_profile_db(to_json(*parsed), "again.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->devices.at("x").wave_add_ms == 0.5);
}

BOOST_AUTO_TEST_CASE(fast_device_gets_more_units) {
  // "b" is twice as slow: 6 units -> 4 on a (12 ms) and 2 on b (12 ms).
  auto db = uniform_db(6, {{"a", 1.0}, {"b", 2.0}});
  auto vw = partition_virtual_worker({dev(0, 0, "b"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw.has_value());
  for (const auto& s : vw->stages) {
    const std::size_t units = s.last_unit - s.first_unit + 1;
    BOOST_TEST(units == (s.device.kind == "a" ? 4u : 2u));
    BOOST_TEST(s.stage_ms == 12.0);
  }
}

BOOST_AUTO_TEST_CASE(transfers_count_and_prefer_one_node) {
  // 1 MB boundary at 8 Gbps = 1 ms each way. Devices on one node (intra
  // 80 Gbps = 0.1 ms) beat devices on two nodes.
  auto db = uniform_db(4, {{"a", 1.0}}, 0, 0, 1000000);
  db.links.inter_node_gbps = 8;
  db.links.intra_node_gbps = 80;
  auto far = partition_virtual_worker({dev(0, 0, "a"), dev(1, 0, "a")}, db, 2);
  auto near = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(far.has_value());
  BOOST_REQUIRE(near.has_value());
  // A cpu stage pays its receives as well (its node's data plane takes the
  // cores it computes on): 6 compute + 1 send + 1 receive.
  BOOST_TEST(std::abs(far->stages[0].stage_ms - 8.0) < 1e-9);
  BOOST_TEST(std::abs(far->stages[0].send_ms - 1.0) < 1e-9);
  BOOST_TEST(std::abs(far->stages[0].receive_ms - 1.0) < 1e-9);
  BOOST_TEST(std::abs(near->stages[0].stage_ms - 6.2) < 1e-9);
  BOOST_TEST(std::abs(far->latency_ms - 14.0) < 1e-9);          // 12 + 2 x 1
  BOOST_TEST(far->bottleneck.find("1.00 send + 1.00 receive") != std::string::npos);
  // A cuda stage's host receives beside the device: 6 compute + 1 send.
  plan_device g0 = dev(0, 0, "a"), g1 = dev(1, 0, "a");
  g0.cuda = g1.cuda = true;
  auto on_cuda = partition_virtual_worker({g0, g1}, db, 2);
  BOOST_REQUIRE(on_cuda.has_value());
  BOOST_TEST(std::abs(on_cuda->stages[0].stage_ms - 7.0) < 1e-9);
  BOOST_TEST(on_cuda->stages[1].receive_ms == 0.0);
}

BOOST_AUTO_TEST_CASE(memory_limits_boundaries_and_nm) {
  // params 100 B, activations 1000 B per unit. Stage 0 of 2 keeps
  // k = min(Nm, 2) minibatches: memory = 100 u (2k + 6) + 1000 u k for a cpu
  // stage with overlapped waves and sgd with momentum (weight_copies:
  // slots' weights and gradients 2k, local weights 1, W(c) 1, momentum 1,
  // wave updates 3), and 100 u 7 + 1000 u for the last stage's one slot.
  auto db = uniform_db(4, {{"a", 1.0}}, 100, 1000);
  // Unlimited: 2 + 2 units; with Nm 2 stage 0 needs 200*10 + 2000*2 = 6000 B.
  auto free_vw = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(free_vw.has_value());
  BOOST_TEST(free_vw->stages[0].memory_bytes == 6000u);
  BOOST_TEST(free_vw->stages[0].kept_minibatches == 2);
  BOOST_TEST(free_vw->stages[1].kept_minibatches == 1);
  BOOST_TEST(free_vw->stages[1].memory_bytes == 200u * 7 + 2000u);
  // Device 0 limited to 3000 B: with Nm 2 it can hold one unit only (100*10 + 1000*2 = 3000).
  auto limited = partition_virtual_worker({dev(0, 0, "a", 3000), dev(1, 0, "a", 0)}, db, 2);
  BOOST_REQUIRE(limited.has_value());
  for (const auto& s : limited->stages)
    if (s.device.node_index == 0) BOOST_TEST(s.memory_bytes <= 3000u);
  // Nobody fits: an out_of_memory error that says so.
  auto none = partition_virtual_worker({dev(0, 0, "a", 10), dev(0, 1, "a", 10)}, db, 1);
  BOOST_REQUIRE(!none.has_value());
  BOOST_TEST((none.error().code() == errc::out_of_memory));
}

BOOST_AUTO_TEST_CASE(auto_nm_is_the_smallest_that_reaches_the_best_throughput) {
  // 2 equal stages of 3 ms: L = 6, Nm 1 -> T 6; Nm 2 -> T 3; more does not help.
  auto db = uniform_db(2, {{"a", 1.0}});
  std::vector<plan_device> devs{dev(0, 0, "a"), dev(0, 1, "a")};
  hetpipe_options o;
  o.policy = allocation_policy::np;
  o.staleness = 1;
  auto p = plan_hetpipe(devs, {"n0"}, db, o);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? std::string() : p.error().message()));
  BOOST_TEST(p->nm == 2);
  BOOST_TEST(p->virtual_workers.size() == 1u);
  BOOST_TEST(std::abs(p->predicted_samples_per_s - 32 * 1000.0 / 3.0) < 1e-6);
  // Memory forbids Nm 2 on stage 0 (params 0, act 1000 per unit -> Nm 2 needs 2000).
  auto tight_db = uniform_db(2, {{"a", 1.0}}, 0, 1000);
  std::vector<plan_device> tight{dev(0, 0, "a", 1500), dev(0, 1, "a", 1500)};
  auto q = plan_hetpipe(tight, {"n0"}, tight_db, o);
  BOOST_REQUIRE(q.has_value());
  BOOST_TEST(q->nm == 1);
}

BOOST_AUTO_TEST_CASE(a_stage_counts_every_weight_sized_buffer_it_keeps) {
  // 2 units of 1000 params bytes, no activations: each stage's memory is
  // 1000 x the weight-sized buffers it keeps (hp_core.cpp, stage_core; the
  // table at weight_copies in hetpipe_plan.cpp).
  auto db = uniform_db(2, {{"a", 1.0}}, 1000, 0);
  auto gpu0 = dev(0, 0, "a"), gpu1 = dev(0, 1, "a");
  gpu0.cuda = gpu1.cuda = true;
  auto each = [&](bool cuda, int nm, bool overlap, int states) {
    std::vector<uint64_t> out;
    auto vw = cuda ? partition_virtual_worker({gpu0, gpu1}, db, nm, overlap, false, states)
                   : partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, nm, overlap, false, states);
    BOOST_REQUIRE(vw.has_value());
    for (const auto& st : vw->stages) out.push_back(st.memory_bytes);
    return out;
  };
  using v = std::vector<uint64_t>;
  // Nm 1, overlapped, sgd with momentum: a cpu stage's one slot holds its
  // local weights (slot weights and gradients 2, W(c) 1, momentum 1, wave
  // updates 3); a cuda stage keeps its own weights and gradients (2) and
  // the pulls' upload buffer (1), W(c) stays on the host.
  BOOST_TEST(each(false, 1, true, 1) == (v{7000, 7000}));
  BOOST_TEST(each(true, 1, true, 1) == (v{9000, 9000}));
  // Nm 2: stage 0 keeps 2 slots (4), the local weights (cpu), and on cuda
  // the weights before each step.
  BOOST_TEST(each(false, 2, true, 1) == (v{10000, 7000}));
  BOOST_TEST(each(true, 2, true, 1) == (v{12000, 9000}));
  // Drained waves: one update made at the wave's end (on the host).
  BOOST_TEST(each(false, 1, false, 1) == (v{6000, 6000}));
  BOOST_TEST(each(true, 1, false, 1) == (v{6000, 6000}));
  // The optimizer's state: plain sgd none, adam two moments.
  BOOST_TEST(each(false, 1, true, 0) == (v{6000, 6000}));
  BOOST_TEST(each(false, 1, true, 2) == (v{8000, 8000}));
  // A cap between the two: the cpu pair fits, the cuda pair does not.
  auto capped = [](plan_device d) {
    d.memory_bytes = 8000;
    return d;
  };
  BOOST_TEST(partition_virtual_worker({capped(dev(0, 0, "a")), capped(dev(0, 1, "a"))}, db, 1).has_value());
  BOOST_TEST(!partition_virtual_worker({capped(gpu0), capped(gpu1)}, db, 1).has_value());
  // The job's optimizer sets the count (hetpipe_options_of).
  auto states = [](std::vector<std::pair<std::string, setting_value>> keys) {
    cluster c;
    c.job.kind = "train";
    for (auto& [k, val] : keys) c.job.params.set(k, val);
    auto o = hetpipe_options_of(c);
    BOOST_REQUIRE(o.has_value());
    return o->optimizer_states;
  };
  BOOST_TEST(states({}) == 1);
  BOOST_TEST(states({{"momentum", 0.0}}) == 0);
  BOOST_TEST(states({{"optimizer", std::string("adam")}}) == 2);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(allocation)

BOOST_AUTO_TEST_CASE(np_ed_hd) {
  // kinds by speed: v (fastest) > r > g > q; node k has 2 devices of kind k.
  auto db = uniform_db(8, {{"v", 1.0}, {"r", 1.5}, {"g", 2.0}, {"q", 3.0}});
  std::vector<plan_device> devs;
  const char* kinds[] = {"v", "r", "g", "q"};
  for (int n = 0; n < 4; ++n)
    for (std::size_t i = 0; i < 2; ++i) devs.push_back(dev(n, i, kinds[n]));
  hetpipe_options o;
  o.policy = allocation_policy::np;
  auto np = allocate_virtual_workers(devs, db, o);
  BOOST_REQUIRE(np.has_value());
  BOOST_TEST(np->size() == 4u);
  for (const auto& vw : *np) BOOST_TEST(vw[0].node_index == vw[1].node_index);
  o.policy = allocation_policy::ed;
  auto ed = allocate_virtual_workers(devs, db, o);
  BOOST_REQUIRE(ed.has_value());
  BOOST_TEST(ed->size() == 2u);  // 2 of each kind
  for (const auto& vw : *ed) {
    std::set<std::string> k;
    for (auto& d : vw) k.insert(d.kind);
    BOOST_TEST(k.size() == 4u);
  }
  o.policy = allocation_policy::hd;
  o.virtual_workers = 2;
  auto hd = allocate_virtual_workers(devs, db, o);
  BOOST_REQUIRE(hd.has_value());
  BOOST_REQUIRE(hd->size() == 2u);
  std::multiset<std::string> vw0, vw1;
  for (auto& d : (*hd)[0]) vw0.insert(d.kind);
  for (auto& d : (*hd)[1]) vw1.insert(d.kind);
  BOOST_TEST((vw0 == std::multiset<std::string>{"v", "v", "q", "q"}));
  BOOST_TEST((vw1 == std::multiset<std::string>{"r", "r", "g", "g"}));
  o.policy = allocation_policy::np;
  o.virtual_workers = 3;
  BOOST_TEST(!allocate_virtual_workers(devs, db, o).has_value());
}

BOOST_AUTO_TEST_CASE(ps_placement_local_and_spread) {
  // ED across 2 nodes: each VW has stage 0 on node 0, stage 1 on node 1 (fast kind first).
  auto db = uniform_db(4, {{"fast", 1.0}, {"slow", 1.0}}, 1000);
  std::vector<plan_device> devs{dev(0, 0, "fast"), dev(0, 1, "fast"), dev(1, 0, "slow"), dev(1, 1, "slow")};
  hetpipe_options o;
  o.policy = allocation_policy::ed;
  o.nm = 2;
  o.staleness = 1;
  o.ps_local = true;
  auto p = plan_hetpipe(devs, {"n0", "n1"}, db, o);
  BOOST_REQUIRE_MESSAGE(p.has_value(), (p ? std::string() : p.error().message()));
  BOOST_REQUIRE(p->virtual_workers.size() == 2u);
  for (const auto& vw : p->virtual_workers)
    for (const auto& s : vw.stages)
      for (std::size_t u = s.first_unit; u <= s.last_unit; ++u) BOOST_TEST(p->unit_ps_node[u] == s.device.node_index);
  o.ps_local = false;
  auto q = plan_hetpipe(devs, {"n0", "n1"}, db, o);
  BOOST_REQUIRE(q.has_value());
  BOOST_TEST(q->ps_bytes[0] == 2000u);  // spread by bytes: 2 units each
  BOOST_TEST(q->ps_bytes[1] == 2000u);
  BOOST_TEST(q->sync_ms > p->sync_ms);  // remote shards cost NIC time
  // auto: spread with two VWs, local with one.
  o.ps_auto = true;
  auto a2 = plan_hetpipe(devs, {"n0", "n1"}, db, o);
  BOOST_REQUIRE(a2.has_value());
  BOOST_TEST(!a2->ps_local);
  BOOST_TEST(a2->ps_bytes == q->ps_bytes);
  o.virtual_workers = 1;
  auto a1 = plan_hetpipe(devs, {"n0", "n1"}, db, o);
  BOOST_REQUIRE(a1.has_value());
  BOOST_REQUIRE(a1->virtual_workers.size() == 1u);
  BOOST_TEST(a1->ps_local);
  for (const auto& s : a1->virtual_workers[0].stages)
    for (std::size_t u = s.first_unit; u <= s.last_unit; ++u) BOOST_TEST(a1->unit_ps_node[u] == s.device.node_index);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(simulation)

BOOST_AUTO_TEST_CASE(two_equal_stages_reach_the_stage_bound) {
  // Stage: fwd 1 ms, bwd 2 ms. Nm 2 keeps both busy: one minibatch per 3 ms.
  auto db = uniform_db(2, {{"a", 1.0}});
  auto p = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "a")}, 2, 1000);
  auto r = simulate_hetpipe(p, db, {40, 4});
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(std::abs(r->samples_per_s - 32 * 1000.0 / 3.0) / (32 * 1000.0 / 3.0) < 0.02);
  BOOST_TEST(r->virtual_workers[0].stages[0].utilisation > 0.97);
  BOOST_TEST(r->max_in_flight == 2);
  BOOST_TEST(r->weights_order_ok);
  BOOST_TEST(r->max_kept_ratio <= 1.0);
}

BOOST_AUTO_TEST_CASE(stages_keep_no_more_activations_than_planned) {
  // Nm 8 on 3 stages with a slow middle stage: stage 0 could run far ahead,
  // but keeps at most min(8, 3) activation sets; throughput is the middle
  // stage's (6 ms per minibatch).
  auto db = uniform_db(3, {{"a", 1.0}, {"b", 2.0}});
  auto p = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "b"), dev(0, 2, "a")}, 8, 1000);
  BOOST_REQUIRE(p.virtual_workers[0].stages[1].device.kind == "b" ||
                p.virtual_workers[0].stages[0].device.kind == "b" || p.virtual_workers[0].stages[2].device.kind == "b");
  auto r = simulate_hetpipe(p, db, {40, 4});
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(r->max_kept_ratio == 1.0);  // stage 0 fills its allowance, never more
  BOOST_TEST(std::abs(r->samples_per_s - 32 * 1000.0 / 6.0) / (32 * 1000.0 / 6.0) < 0.02);
  BOOST_TEST(r->max_in_flight <= 8);
}

BOOST_AUTO_TEST_CASE(one_in_flight_pays_the_whole_latency) {
  // Nm 1: f0 f1 b1 b0 = 1 + 1 + 2 + 2 = 6 ms per minibatch; utilisation 1/2.
  auto db = uniform_db(2, {{"a", 1.0}});
  auto p = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "a")}, 1, 1000);
  auto r = simulate_hetpipe(p, db, {40, 4});
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(std::abs(r->samples_per_s - 32 * 1000.0 / 6.0) < 1.0);
  BOOST_TEST(std::abs(r->virtual_workers[0].stages[1].utilisation - 0.5) < 0.02);
  BOOST_TEST(r->max_in_flight == 1);
  BOOST_TEST(std::abs(p.predicted_samples_per_s - 32 * 1000.0 / 6.0) < 1e-6);
}

BOOST_AUTO_TEST_CASE(transfers_add_latency_between_nodes) {
  // Nm 1, 2 stages on 2 nodes, 1 ms each way: 6 + 2 = 8 ms per minibatch.
  auto db = uniform_db(2, {{"a", 1.0}}, 0, 0, 1000000);
  db.links.inter_node_gbps = 8;
  auto p = one_vw_plan(db, {dev(0, 0, "a"), dev(1, 0, "a")}, 1, 1000);
  auto r = simulate_hetpipe(p, db, {20, 2});
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(std::abs(r->samples_per_s - 32 * 1000.0 / 8.0) < 1.0);
}

BOOST_AUTO_TEST_CASE(cpu_stages_move_their_bytes_on_their_cores) {
  // 2 stages on 2 nodes, 2 units of 1 + 2 ms each, 1 MB boundaries at 8 Gb/s
  // (1 ms): a cpu stage computes 6 ms and sends and receives 1 ms each a
  // minibatch, so the pipeline runs at one minibatch per 8 ms, the
  // planner's stage_ms; cuda stages leave the bytes to the links: 7 ms, the
  // round trip of stage 0's two slots, (2 + 1 + 6 + 1 + 4) / 2, as the
  // planner's compute + send.
  auto db = uniform_db(4, {{"a", 1.0}}, 0, 0, 1000000);
  db.links.inter_node_gbps = 8;
  auto cpu = one_vw_plan(db, {dev(0, 0, "a"), dev(1, 0, "a")}, 8, 1000);
  BOOST_TEST(std::abs(cpu.virtual_workers[0].stages[0].stage_ms - 8.0) < 1e-9);
  auto rc = simulate_hetpipe(cpu, db, {40, 4});
  BOOST_REQUIRE(rc.has_value());
  BOOST_TEST_INFO("cpu: simulated " << rc->samples_per_s << ", planner " << cpu.predicted_samples_per_s);
  BOOST_TEST(std::abs(rc->samples_per_s / (32 * 1000.0 / 8.0) - 1) < 0.05);
  plan_device g0 = dev(0, 0, "a"), g1 = dev(1, 0, "a");
  g0.cuda = g1.cuda = true;
  auto gpu = one_vw_plan(db, {g0, g1}, 8, 1000);
  auto rg = simulate_hetpipe(gpu, db, {40, 4});
  BOOST_REQUIRE(rg.has_value());
  BOOST_TEST_INFO("cuda: simulated " << rg->samples_per_s);
  BOOST_TEST(std::abs(rg->samples_per_s / (32 * 1000.0 / 7.0) - 1) < 0.05);
  BOOST_TEST(std::abs(gpu.predicted_samples_per_s - 32 * 1000.0 / 7.0) < 1e-6);
}

BOOST_AUTO_TEST_CASE(staleness_zero_overlaps_one_wave) {
  // One VW, Nm 4, 2 stages: wave w needs waves up to w - 2 pushed, which the
  // local bound (p - Nm finished) already implies, so D = 0 runs as fast as a
  // large D. A push per stage per wave.
  auto db = uniform_db(2, {{"a", 1.0}});
  auto d0 = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "a")}, 4, 0);
  auto dbig = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "a")}, 4, 1000);
  auto r0 = simulate_hetpipe(d0, db, {40, 4});
  auto rb = simulate_hetpipe(dbig, db, {40, 4});
  BOOST_REQUIRE(r0.has_value());
  BOOST_REQUIRE(rb.has_value());
  BOOST_TEST(std::abs(r0->samples_per_s - rb->samples_per_s) / rb->samples_per_s < 0.01);
  BOOST_TEST(std::abs(r0->samples_per_s - 32 * 1000.0 / 3.0) / (32 * 1000.0 / 3.0) < 0.02);
  BOOST_TEST(r0->max_wave_lead <= 1);
  BOOST_TEST(r0->virtual_workers[0].pushes == 40 * 2);  // one aggregated push per stage per wave
}

BOOST_AUTO_TEST_CASE(drained_waves_pay_a_bubble_per_wave) {
  // simulate --as-run (the runtime): a wave's pull waits for the VW's own
  // previous wave, so the pipeline empties at every boundary: slower than
  // the overlapped waves (3 ms per minibatch), faster than Nm = 1 (6 ms).
  auto db = uniform_db(2, {{"a", 1.0}});
  auto p = one_vw_plan(db, {dev(0, 0, "a"), dev(0, 1, "a")}, 4, 0);
  simulation_options drained{40, 4};
  drained.drain_waves = true;
  auto ro = simulate_hetpipe(p, db, {40, 4});
  auto rd = simulate_hetpipe(p, db, drained);
  BOOST_REQUIRE(ro.has_value());
  BOOST_REQUIRE(rd.has_value());
  BOOST_TEST(rd->samples_per_s < 0.95 * ro->samples_per_s);
  BOOST_TEST(rd->samples_per_s > 1.1 * 32 * 1000.0 / 6.0);
  BOOST_TEST(rd->max_wave_lead == 0);  // never starts a wave before its own last one is pushed
  BOOST_TEST(rd->virtual_workers[0].pushes == 40 * 2);
}

BOOST_AUTO_TEST_CASE(the_planner_prices_drained_waves_with_their_bubble) {
  // One VW of 2 stages on two nodes, 2 units of 1 + 2 ms each: kind a's stages
  // take 3 ms; with kind b (2x slower) on n1 the stages are 3 and 6 ms.
  // Drained, a wave is the minibatch latency + (Nm - 1) x the slowest
  // stage: the simulator's drained runtime agrees within 3%; overlapped
  // waves keep Nm x the slowest stage.
  auto db = uniform_db(2, {{"a", 1.0}, {"b", 2.0}});
  for (const std::string kind1 : {"a", "b"}) {
    for (int nm : {1, 4, 8}) {
      hetpipe_options o;
      o.nm = nm;
      o.virtual_workers = 1;
      o.ps_local = true;
      o.overlap_waves = false;
      auto drained = plan_hetpipe({dev(0, 0, "a"), dev(1, 0, kind1)}, {"n0", "n1"}, db, o);
      o.overlap_waves = true;
      auto overlapped = plan_hetpipe({dev(0, 0, "a"), dev(1, 0, kind1)}, {"n0", "n1"}, db, o);
      BOOST_REQUIRE(drained.has_value());
      BOOST_REQUIRE(overlapped.has_value());
      const double slowest = kind1 == "a" ? 3.0 : 6.0;
      const double latency = 3.0 + slowest;
      BOOST_TEST_INFO("n1 " << kind1 << ", Nm " << nm);
      BOOST_TEST(drained->drained_waves);
      BOOST_TEST(std::abs(drained->virtual_workers[0].wave_ms - (latency + (nm - 1) * slowest)) < 1e-9);
      BOOST_TEST(std::abs(drained->predicted_samples_per_s - nm * 32 * 1e3 / (latency + (nm - 1) * slowest)) < 1e-6);
      BOOST_TEST(std::abs(overlapped->predicted_samples_per_s - 32 * 1e3 / std::max(slowest, latency / nm)) < 1e-6);
      bool noted = false;
      for (const auto& n : drained->notes) noted = noted || n.find("waves drained") != std::string::npos;
      BOOST_TEST(noted);
      simulation_options so{64, 4};
      so.drain_waves = true;
      auto sim = simulate_hetpipe(*drained, db, so);
      BOOST_REQUIRE(sim.has_value());
      BOOST_TEST(std::abs(sim->samples_per_s / drained->predicted_samples_per_s - 1) < 0.03);
    }
  }
}

BOOST_AUTO_TEST_CASE(parameter_server_bandwidth_bounds_waves) {
  // Two VWs (one per node) of 2 stages, 1 MB of weights per unit, compute
  // nearly free, 8 Gbps NICs (1 MB per ms): the PS traffic bounds the waves.
  auto db = uniform_db(2, {{"a", 0.01}}, 1000000);
  db.links.inter_node_gbps = 8;
  db.links.intra_node_gbps = 8000;
  hetpipe_options o;
  o.policy = allocation_policy::np;
  o.nm = 1;
  o.staleness = 1;
  std::vector<plan_device> devs{dev(0, 0, "a"), dev(0, 1, "a"), dev(1, 0, "a"), dev(1, 1, "a")};
  auto p = plan_hetpipe(devs, {"n0", "n1"}, db, o);  // 2 VWs, one per node; spread shards
  BOOST_REQUIRE(p.has_value());
  auto r = simulate_hetpipe(*p, db, {40, 4});
  BOOST_REQUIRE(r.has_value());
  // Per wave: every VW pushes and pulls 2 MB in all, half of it remote:
  // each NIC sends 1 MB + 1 MB (push of its VW, pull for the other) = 2 ms.
  // Compute per wave is 0.06 ms: the NICs bound it to ~1 wave per 2 ms per VW.
  const double bound = 2 * 32 * 1000.0 / 2.0;
  BOOST_TEST_INFO("simulated " << r->samples_per_s << ", planner " << p->predicted_samples_per_s);
  BOOST_TEST(r->samples_per_s <= bound * 1.05);
  BOOST_TEST(r->samples_per_s >= bound * 0.5);
  BOOST_TEST(std::abs(p->sync_ms - 2.0) < 0.1);
}

BOOST_AUTO_TEST_CASE(slow_virtual_worker_bounds_the_fast_one) {
  // VW0 on kind a (3 ms stages), VW1 on kind b (6 ms stages). With D = 0 and
  // D = 2 the fast VW cannot run ahead for long: both finish at the slow rate
  // in the long run, and the wave lead never exceeds D.
  auto db = uniform_db(2, {{"a", 1.0}, {"b", 2.0}});
  for (int D : {0, 2}) {
    std::vector<plan_device> devs{dev(0, 0, "a"), dev(0, 1, "a"), dev(1, 0, "b"), dev(1, 1, "b")};
    hetpipe_options o;
    o.policy = allocation_policy::np;
    o.nm = 2;
    o.staleness = D;
    auto p = plan_hetpipe(devs, {"n0", "n1"}, db, o);
    BOOST_REQUIRE(p.has_value());
    auto r = simulate_hetpipe(*p, db, {60, 6});
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST_INFO("D = " << D);
    BOOST_TEST(r->max_wave_lead <= D + 1);
    const double fast = r->virtual_workers[0].samples_per_s, slow = r->virtual_workers[1].samples_per_s;
    BOOST_TEST(std::abs(fast - slow) / slow < 0.1);
    BOOST_TEST(r->virtual_workers[0].wsp_wait_ms > 0.0);  // the fast one waits
    // The slow VW: 6 ms stages, Nm 2 -> at most one minibatch per 6 ms each.
    BOOST_TEST(slow <= 32 * 1000.0 / 6.0 * 1.01);
  }
}

BOOST_AUTO_TEST_CASE(wsp_invariants_under_random_delays) {
  // 3 VWs of different speeds and stage counts, compute times stretched by up
  // to 3x at random: for every D the wave lead stays <= D + 1, no minibatch
  // starts before p - Nm finished, stages keep what the memory model allows,
  // and every stage pushes once per wave.
  auto db = uniform_db(6, {{"a", 1.0}, {"b", 1.7}, {"c", 2.9}}, 1000);
  std::vector<plan_device> devs{dev(0, 0, "a"), dev(0, 1, "a"), dev(0, 2, "a"), dev(1, 0, "b"), dev(1, 1, "b"),
                                dev(2, 0, "c")};
  for (int D : {0, 1, 3})
    for (uint64_t seed : {1u, 2u, 3u}) {
      hetpipe_options o;
      o.policy = allocation_policy::np;
      o.nm = 3;
      o.staleness = D;
      auto p = plan_hetpipe(devs, {"n0", "n1", "n2"}, db, o);
      BOOST_REQUIRE(p.has_value());
      simulation_options so;
      so.waves = 30;
      so.warmup_waves = 3;
      so.jitter = 2.0;
      so.seed = seed;
      auto r = simulate_hetpipe(*p, db, so);
      BOOST_REQUIRE(r.has_value());
      BOOST_TEST_INFO("D = " << D << ", seed " << seed);
      BOOST_TEST(r->max_wave_lead <= D + 1);
      BOOST_TEST(r->weights_order_ok);
      BOOST_TEST(r->max_kept_ratio <= 1.0);
      BOOST_TEST(r->max_in_flight <= 3);
      for (std::size_t v = 0; v < r->virtual_workers.size(); ++v) {
        BOOST_TEST(r->virtual_workers[v].minibatches == 30 * 3);
        BOOST_TEST(r->virtual_workers[v].pushes == int(p->virtual_workers[v].stages.size()) * 30);
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(data_parallel_cost)

BOOST_AUTO_TEST_CASE(ring_and_memory) {
  // 2 units, 1000 B params each, 8 Gbps between nodes, latency 0: the ring of
  // 2 moves 2 * 1/2 * 2000 B = 2000 B -> 0.002 ms.
  auto db = uniform_db(2, {{"a", 1.0}, {"b", 2.0}}, 1000, 100);
  db.links.inter_node_gbps = 8;
  auto e = estimate_dp({dev(0, 0, "a"), dev(1, 0, "b")}, db, 0);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->global_batch == 64);
  BOOST_TEST(e->rows[0] + e->rows[1] == 64);
  BOOST_TEST(e->rows[0] > e->rows[1]);  // faster device, more rows
  BOOST_TEST(std::abs(e->allreduce_ms - 0.002) < 1e-9);
  // A device too small for params*3 + activations is left out.
  auto f = estimate_dp({dev(0, 0, "a"), dev(1, 0, "b", 1000)}, db, 0);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(f->replicas.size() == 1u);
  BOOST_TEST(f->left_out.size() == 1u);
  BOOST_TEST(f->allreduce_ms == 0.0);
}

BOOST_AUTO_TEST_CASE(replicas_of_one_host_sum_through_the_measured_host_ring) {
  auto db = uniform_db(2, {{"a", 1.0}}, 1000, 100);
  db.links.inter_node_gbps = 8;
  db.links.host_ring_gbps = 16;  // 2000 B -> 0.001 ms, plus 2 steps of 5 us
  db.links.host_ring_latency_us = 5;
  auto on = [](int node, std::string host) { return on_host(node, std::move(host)); };
  auto same = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(same.has_value());
  BOOST_TEST(std::abs(same->allreduce_ms - 0.011) < 1e-9);
  BOOST_TEST(same->allreduce_model == "host ring (shared memory)");
  // Two hosts: the links, as before.
  auto two = estimate_dp({on(0, "h"), on(1, "g")}, db, 0);
  BOOST_REQUIRE(two.has_value());
  BOOST_TEST(std::abs(two->allreduce_ms - 0.002) < 1e-9);
  BOOST_TEST(two->allreduce_model == "inter-node links");
  // Measured with 3 members, or hosts without a name (ring_member then
  // takes no shared memory): the links.
  db.links.host_ring_members = 3;
  auto other_n = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(other_n.has_value());
  BOOST_TEST(std::abs(other_n->allreduce_ms - 0.002) < 1e-9);
  db.links.host_ring_members = 2;
  auto unnamed = estimate_dp({on(0, ""), on(1, "")}, db, 0);
  BOOST_REQUIRE(unnamed.has_value());
  BOOST_TEST(std::abs(unnamed->allreduce_ms - 0.002) < 1e-9);
  BOOST_TEST(std::abs(estimate_dp({on(0, "h"), on(1, "h")}, db, 0)->allreduce_ms - 0.011) < 1e-9);
  // The co-located step factor multiplies the compute where the host ring
  // prices the sum, and nowhere else.
  const double alone = same->compute_ms;
  BOOST_TEST(same->step_factor == 1.0);
  db.links.host_ring_step_factor = 1.25;
  auto slowed = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(slowed.has_value());
  BOOST_TEST(slowed->step_factor == 1.25);
  BOOST_TEST(std::abs(slowed->compute_ms - 1.25 * alone) < 1e-9);
  BOOST_TEST(std::abs(slowed->step_ms - (1.25 * alone + 0.011)) < 1e-9);
  BOOST_TEST(slowed->samples_per_s < same->samples_per_s);
  auto apart = estimate_dp({on(0, "h"), on(1, "g")}, db, 0);
  BOOST_REQUIRE(apart.has_value());
  BOOST_TEST(apart->step_factor == 1.0);
  BOOST_TEST(std::abs(apart->compute_ms - alone) < 1e-9);
  db.links.host_ring_members = 3;  // measured for another replica count: neither applies
  auto other_count = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(other_count.has_value());
  BOOST_TEST(other_count->step_factor == 1.0);
  BOOST_TEST(other_count->allreduce_model == "inter-node links");
  db.links.host_ring_members = 2;
  db.links.host_ring_step_factor = 0;
  // Not measured: the links price one host too.
  db.links.host_ring_gbps = 0;
  auto unmeasured = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(unmeasured.has_value());
  BOOST_TEST(std::abs(unmeasured->allreduce_ms - 0.002) < 1e-9);
}

// The host ring's sum pays the hand-over to the ring member and back (two
// actor messages at links.latency_us); the links' ring prices its own
// latency per step and no hand-over.
BOOST_AUTO_TEST_CASE(a_host_ring_sum_pays_the_hand_over_to_the_ring_member) {
  auto db = uniform_db(2, {{"a", 1.0}}, 1000, 100);
  db.links.inter_node_gbps = 8;
  db.links.host_ring_gbps = 16;  // 2000 B -> 0.001 ms
  db.links.latency_us = 20;
  auto on = [](int node, std::string host) { return on_host(node, std::move(host)); };
  auto same = estimate_dp({on(0, "h"), on(1, "h")}, db, 0);
  BOOST_REQUIRE(same.has_value());
  BOOST_TEST(same->allreduce_model == "host ring (shared memory)");
  BOOST_TEST(std::abs(same->handover_ms - 0.04) < 1e-12);
  BOOST_TEST(std::abs(same->allreduce_ms - (0.001 + 0.04)) < 1e-9);
  BOOST_TEST(std::abs(same->step_ms - (same->compute_ms + same->allreduce_ms)) < 1e-12);
  auto apart = estimate_dp({on(0, "h"), on(1, "g")}, db, 0);
  BOOST_REQUIRE(apart.has_value());
  BOOST_TEST(apart->handover_ms == 0.0);
  BOOST_TEST(std::abs(apart->allreduce_ms - (0.002 + 0.04)) < 1e-9);  // 2000 B at 8 Gb/s, 2 x 20 us of ring steps
}

// devices[kind].step_factor (a whole step over its units, measured)
// multiplies a single device's and a dp replica's compute, under the host
// ring's factor; a HetPipe stage is priced by its units alone.
BOOST_AUTO_TEST_CASE(a_kinds_step_factor_prices_whole_steps_not_stages) {
  auto db = uniform_db(4, {{"a", 1.0}, {"b", 2.0}}, 100);
  db.devices["a"].update_ms = 4.0;
  const double single_plain = estimate_single(dev(0, 0, "a"), db, 32)->step_ms;
  auto vw_plain = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw_plain.has_value());
  BOOST_TEST(db.step_factor("a") == 1.0);  // not given
  db.devices["a"].step_factor = 1.1;
  BOOST_TEST(db.step_factor("a") == 1.1);
  BOOST_TEST(db.step_factor("b") == 1.0);
  BOOST_TEST(db.step_factor("nope") == 1.0);
  auto single = estimate_single(dev(0, 0, "a"), db, 32);
  BOOST_REQUIRE(single.has_value());
  BOOST_TEST(std::abs(single->step_ms - 1.1 * single_plain) < 1e-9);
  BOOST_TEST(single->device_step_factor == 1.1);
  // dp: each replica's compute carries its own kind's factor; the slowest
  // one's is the step's, and the host ring's factor multiplies it.
  auto on = [](int node, std::string kind) { return on_host(node, "h", std::move(kind)); };
  db.links.host_ring_gbps = 16;
  db.links.host_ring_members = 2;
  auto plain = estimate_dp({on(0, "a"), on(1, "a")}, db, 64, true);
  BOOST_REQUIRE(plain.has_value());
  db.devices["a"].step_factor = 1.5;
  auto slowed = estimate_dp({on(0, "a"), on(1, "a")}, db, 64, true);
  BOOST_REQUIRE(slowed.has_value());
  BOOST_TEST(std::abs(slowed->compute_ms - 1.5 / 1.1 * plain->compute_ms) < 1e-9);
  BOOST_TEST(slowed->device_step_factor == 1.5);
  db.links.host_ring_step_factor = 1.2;
  auto both = estimate_dp({on(0, "a"), on(1, "a")}, db, 64, true);
  BOOST_REQUIRE(both.has_value());
  BOOST_TEST(std::abs(both->compute_ms - 1.2 * slowed->compute_ms) < 1e-9);
  // Kind b computes twice as long per unit; with a's factor at 3 a is the slower replica.
  db.links.host_ring_step_factor = 0;
  db.devices["a"].step_factor = 3.0;
  auto mixed = estimate_dp({on(0, "a"), on(1, "b")}, db, 64, true);
  BOOST_REQUIRE(mixed.has_value());
  BOOST_TEST(mixed->device_step_factor == 3.0);
  // HetPipe's stages: unchanged.
  auto vw = partition_virtual_worker({dev(0, 0, "a"), dev(0, 1, "a")}, db, 2);
  BOOST_REQUIRE(vw.has_value());
  BOOST_TEST(vw->stages[0].compute_ms == vw_plain->stages[0].compute_ms);
  BOOST_TEST(vw->period_ms == vw_plain->period_ms);
  // The key round-trips and is checked.
  auto again = parse_profile_db(to_json(db), "again.json");
  BOOST_REQUIRE_MESSAGE(again.has_value(), (again ? std::string() : again.error().message()));
  BOOST_TEST(again->devices.at("a").step_factor == 3.0);
  BOOST_TEST(again->step_factor("b") == 1.0);
  const std::string units = R"("units": [{"name": "u", "params_bytes": 10, "activation_bytes": 20,
    "devices": {"k": {"fwd_ms": 1.0, "bwd_ms": 2.0}}}])";
  for (const char* bad : {"-1", "101", "\"x\""}) {
    auto b = parse_profile_db("{\"batch\": 8, " + units + R"(, "devices": {"k": {"step_factor": )" + bad + "}}}",
                              "p.json");
    BOOST_REQUIRE_MESSAGE(!b.has_value(), bad);
    BOOST_TEST(b.error().message().find("devices.k.step_factor") != std::string::npos, b.error().message());
  }
}

BOOST_AUTO_TEST_CASE(host_ring_keys_round_trip_and_are_checked) {
  const std::string units = R"("units": [{"name": "u", "params_bytes": 10, "activation_bytes": 20,
    "devices": {"k": {"fwd_ms": 1.0, "bwd_ms": 2.0}}}])";
  const std::string links =
      R"("links": {"host_ring_gbps": 40, "host_ring_latency_us": 3, "host_ring_members": 4, "host_ring_step_factor": 1.5})";
  auto db = parse_profile_db("{\"batch\": 8, " + units + ", " + links + "}", "p.json");
  BOOST_REQUIRE_MESSAGE(db.has_value(), (db ? std::string() : db.error().message()));
  BOOST_TEST(db->links.host_ring_gbps == 40.0);
  BOOST_TEST(db->links.host_ring_latency_us == 3.0);
  auto again = parse_profile_db(to_json(*db), "again.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->links.host_ring_gbps == 40.0);
  BOOST_TEST(again->links.host_ring_latency_us == 3.0);
  BOOST_TEST(again->links.host_ring_members == 4);
  BOOST_TEST(again->links.host_ring_step_factor == 1.5);
  auto fast = parse_profile_db("{\"batch\": 8, " + units + R"(, "links": {"host_ring_step_factor": 0.9}})", "p.json");
  BOOST_REQUIRE(!fast.has_value());
  BOOST_TEST(fast.error().message().find("links.host_ring_step_factor") != std::string::npos);
  auto half = parse_profile_db("{\"batch\": 8, " + units + R"(, "links": {"host_ring_members": 2.5}})", "p.json");
  BOOST_REQUIRE(!half.has_value());
  BOOST_TEST(half.error().message().find("links.host_ring_members") != std::string::npos);
  auto bad = parse_profile_db("{\"batch\": 8, " + units + R"(, "links": {"host_ring_gbps": -1}})", "p.json");
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message().find("links.host_ring_gbps") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

// A device's `speed`: its own kind, the profile kind's times divided by it;
// once only; a device whose kind the profile lacks is left alone.
BOOST_AUTO_TEST_CASE(a_device_speed_gives_it_a_scaled_kind) {
  auto db = uniform_db(4, {{"a", 1.0}}, 100);
  db.devices["a"].update_ms = 2.0;
  db.devices["a"].wave_copy_ms = 0.4;
  db.devices["a"].memory_bytes = 1u << 30;
  cluster c;
  for (int i = 0; i < 3; ++i) {
    node_spec n;
    n.name = "n" + std::to_string(i);
    n.host = "h" + std::to_string(i);
    device_spec d;
    d.profile = i == 2 ? "missing" : "a";
    d.speed = i == 0 ? 1.0 : 4.0;
    n.devices.push_back(d);
    c.nodes.push_back(n);
  }
  const std::string note = apply_device_speeds(c, db);
  BOOST_TEST(note == "n1 cpu 0 x 4");
  BOOST_TEST(c.nodes[0].devices[0].profile == "a");
  BOOST_TEST(c.nodes[1].devices[0].profile == "a@x4");
  BOOST_TEST(c.nodes[1].devices[0].speed == 1.0);
  BOOST_TEST(c.nodes[2].devices[0].profile == "missing");  // plan_devices reports it
  BOOST_REQUIRE(db.has_kind("a@x4"));
  BOOST_TEST(db.compute_ms("a@x4", 0, 3) == db.compute_ms("a", 0, 3) / 4);
  BOOST_TEST(db.devices["a@x4"].update_ms == 0.5);
  BOOST_TEST(db.devices["a@x4"].wave_copy_ms == 0.1);
  BOOST_TEST(db.devices["a@x4"].memory_bytes == 1u << 30);
  BOOST_TEST(apply_device_speeds(c, db).empty());  // applied once
  // The planner puts more of the model on the faster device.
  c.nodes.pop_back();
  auto devs = plan_devices(c, db);
  BOOST_REQUIRE(devs.has_value());
  auto vw = partition_virtual_worker(*devs, db, 1, /*overlap_waves=*/false);
  BOOST_REQUIRE(vw.has_value());
  BOOST_REQUIRE_EQUAL(vw->stages.size(), 2u);
  std::size_t on_fast = 0;
  for (const auto& s : vw->stages)
    if (s.device.kind == "a@x4") on_fast = s.last_unit - s.first_unit + 1;
  BOOST_TEST(on_fast == 3u);
}

// links.host_stage_factor: cpu devices of a host with two or more of them
// compute slower together; plan_devices gives them the factor, which
// multiplies their units' compute and step (not the waves' passes).
BOOST_AUTO_TEST_CASE(stages_of_one_host_pay_the_measured_factor) {
  auto db = uniform_db(4, {{"a", 1.0}}, 100);
  db.links.host_stage_factor = 1.5;
  cluster c;
  auto node = [](std::string name, std::string host, std::vector<device_kind> kinds) {
    node_spec n;
    n.name = std::move(name);
    n.host = std::move(host);
    for (auto k : kinds) {
      device_spec d;
      d.kind = k;
      d.profile = "a";
      n.devices.push_back(d);
    }
    return n;
  };
  c.nodes.push_back(node("n0", "h0", {device_kind::cpu}));
  c.nodes.push_back(node("n1", "h0", {device_kind::cpu, device_kind::cuda}));
  c.nodes.push_back(node("n2", "h1", {device_kind::cpu}));
  auto devs = plan_devices(c, db);
  BOOST_REQUIRE(devs.has_value());
  BOOST_REQUIRE_EQUAL(devs->size(), 4u);
  BOOST_TEST((*devs)[0].compute_factor == 1.5);  // h0: two cpu devices
  BOOST_TEST((*devs)[1].compute_factor == 1.5);
  BOOST_TEST((*devs)[2].compute_factor == 1.0);  // the cuda device
  BOOST_TEST((*devs)[3].compute_factor == 1.0);  // alone on h1
  auto vw = partition_virtual_worker({(*devs)[0], (*devs)[1]}, db, 2, /*overlap_waves=*/false);
  BOOST_REQUIRE(vw.has_value());
  BOOST_TEST(vw->stages[0].compute_ms == 6.0 * 1.5);
  BOOST_TEST(vw->stages[0].fwd_ms == 2.0 * 1.5);
  BOOST_TEST(vw->stages[1].bwd_ms == 4.0 * 1.5);
  // Not measured: 1.
  db.links.host_stage_factor = 0;
  auto plain = plan_devices(c, db);
  BOOST_REQUIRE(plain.has_value());
  BOOST_TEST((*plain)[0].compute_factor == 1.0);
  // The profile file keeps it; below 1 is refused.
  db.links.host_stage_factor = 1.25;
  auto again = parse_profile_db(to_json(db), "f.json");
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->links.host_stage_factor == 1.25);
  BOOST_TEST(!parse_profile_db(R"({"batch": 8, "units": [{"name": "a", "params_bytes": 1, "activation_bytes": 1,
      "devices": {"x": {"fwd_ms": 1, "bwd_ms": 1}}}], "links": {"host_stage_factor": 0.5}})", "f.json").has_value());
}
