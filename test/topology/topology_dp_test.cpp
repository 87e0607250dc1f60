// topology/data_parallel.hpp: replicas of a dp job, ring order, batch split.
#define BOOST_TEST_MODULE topology_dp
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "topology/data_parallel.hpp"

using namespace hetflow;
using namespace hetflow::topology;

namespace {

node_spec node(std::string name, std::string host, int cpus, int gpus = 0) {
  node_spec n;
  n.name = std::move(name);
  n.host = std::move(host);
  for (int i = 0; i < cpus; ++i) n.devices.push_back(device_spec{device_kind::cpu, 0, 2, 0, "", {}});
  for (int i = 0; i < gpus; ++i) n.devices.push_back(device_spec{device_kind::cuda, i, 0, 0, "", {}});
  return n;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

BOOST_AUTO_TEST_CASE(replicas_one_per_device_in_topology_order) {
  cluster c;
  c.nodes = {node("a", "h1", 1), node("b", "h2", 1, 2), node("c", "h1", 0)};
  auto all = dp_replicas(c, {});
  BOOST_TEST_REQUIRE(all.has_value());
  BOOST_TEST_REQUIRE(all->size() == 5u);  // a:cpu, b:cpu, b:cuda0, b:cuda1, c:(cpu)
  BOOST_TEST((*all)[0].node == "a");
  BOOST_TEST((*all)[2].node == "b");
  BOOST_TEST((*all)[2].device == 1u);
  BOOST_TEST(((*all)[3].spec.kind == device_kind::cuda));
  BOOST_TEST((*all)[4].node == "c");
  BOOST_TEST(((*all)[4].spec.kind == device_kind::cpu));

  std::vector<std::string> pick{"c", "a"};
  auto some = dp_replicas(c, pick);
  BOOST_TEST_REQUIRE(some.has_value());
  BOOST_TEST_REQUIRE(some->size() == 2u);
  BOOST_TEST((*some)[0].node == "a");  // topology order, not list order

  std::vector<std::string> bad{"a", "x"};
  auto unknown = dp_replicas(c, bad);
  BOOST_TEST_REQUIRE(!unknown.has_value());
  BOOST_TEST(unknown.error().message().find("no node 'x'") != std::string::npos);
  std::vector<std::string> twice{"a", "a"};
  BOOST_TEST(!dp_replicas(c, twice).has_value());
}

BOOST_AUTO_TEST_CASE(ring_order_groups_members_by_host) {
  std::vector<std::string> hosts{"h1", "h2", "h1", "h3", "h2", "h1"};
  auto order = ring_order(hosts);
  BOOST_TEST((order == std::vector<std::size_t>{0, 2, 5, 1, 4, 3}));
  // Each host's members are contiguous: 3 hosts -> 3 boundaries around the ring.
  int crossings = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (hosts[order[i]] != hosts[order[(i + 1) % order.size()]]) ++crossings;
  BOOST_TEST(crossings == 3);
  std::vector<std::string> one{"h"};
  BOOST_TEST((ring_order(one) == std::vector<std::size_t>{0}));
  BOOST_TEST(ring_order(std::vector<std::string>{}).empty());
}

BOOST_AUTO_TEST_CASE(split_is_proportional_and_sums_to_rows) {
  std::vector<double> equal{1, 1, 1};
  BOOST_TEST((split_rows(64, equal) == std::vector<int64_t>{22, 21, 21}));  // remainder to lower index
  std::vector<double> fast_slow{3, 1};
  BOOST_TEST((split_rows(64, fast_slow) == std::vector<int64_t>{48, 16}));
  BOOST_TEST((split_rows(1, fast_slow) == std::vector<int64_t>{1, 0}));
  BOOST_TEST((split_rows(0, fast_slow) == std::vector<int64_t>{0, 0}));
  std::vector<double> one{5};
  BOOST_TEST((split_rows(7, one) == std::vector<int64_t>{7}));
  // Bad speeds count as the slowest good one; all bad: equal.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> some_bad{4, nan, -1, 4};
  BOOST_TEST((split_rows(40, some_bad) == std::vector<int64_t>{10, 10, 10, 10}));
  std::vector<double> all_bad{0, nan};
  BOOST_TEST((split_rows(9, all_bad) == std::vector<int64_t>{5, 4}));
  std::vector<int64_t> s{5, 0, 7};
  BOOST_TEST(split_offset(s, 0) == 0);
  BOOST_TEST(split_offset(s, 2) == 5);
  BOOST_TEST(split_offset(s, 3) == 12);
}

// The split_rows_timed contract, straightforwardly: every row to the replica
// whose step would then end first (ties: lower index), from zero.
std::vector<int64_t> greedy_reference(int64_t rows, const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<int64_t> out(a.size(), 0);
  for (int64_t k = 0; k < rows; ++k) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < a.size(); ++i)
      if (a[i] + double(out[i] + 1) * b[i] < a[best] + double(out[best] + 1) * b[best]) best = i;
    ++out[best];
  }
  return out;
}

double slowest_step(const std::vector<int64_t>& r, const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < r.size(); ++i)
    if (r[i] > 0) worst = std::max(worst, a[i] + double(r[i]) * b[i]);
  return worst;
}

BOOST_AUTO_TEST_CASE(timed_split_balances_fixed_and_per_row_costs) {
  // No fixed costs: the proportional split.
  std::vector<double> none{0, 0, 0}, same{1, 1, 1};
  BOOST_TEST((split_rows_timed(64, none, same) == std::vector<int64_t>{22, 21, 21}));
  std::vector<double> zero2{0, 0}, fast_slow{1.0 / 3, 1.0};
  BOOST_TEST((split_rows_timed(64, zero2, fast_slow) == std::vector<int64_t>{48, 16}));
  BOOST_TEST((split_rows_timed(0, zero2, fast_slow) == std::vector<int64_t>{0, 0}));
  // A GPU beside a CPU (ResNet-18 on the H200 run: 256 rows in ~14 ms on the
  // GPU; the CPU ~44 ms a step whatever its rows, ~22 ms a row): the CPU is
  // left out, where the proportional split would give it 2 rows.
  std::vector<double> a{0.002, 0.044}, b{0.012 / 256, 0.022};
  BOOST_TEST((split_rows_timed(256, a, b) == std::vector<int64_t>{256, 0}));
  std::vector<double> speeds{1 / b[0], 1 / b[1]};
  BOOST_TEST(split_rows(256, speeds)[1] > 0);
  // Equal per-row speeds, one with a fixed cost: it gets fewer rows, and the
  // two steps end within one row's time.
  std::vector<double> a2{0.0, 0.010}, b2{0.001, 0.001};
  auto s2 = split_rows_timed(100, a2, b2);
  BOOST_TEST(sum(s2) == 100);
  BOOST_TEST((s2[0] >= 54 && s2[0] <= 56));  // 55/45 but for rounding of the tie
  BOOST_TEST(std::abs((a2[0] + double(s2[0]) * b2[0]) - (a2[1] + double(s2[1]) * b2[1])) <= 0.001 + 1e-12);
  // Bad costs: not-finite fixed counts as the largest good one, a bad per-row
  // cost as the largest good one.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> a3{0.0, nan, -1.0}, b3{0.001, 0.001, 0.0};
  auto s3 = split_rows_timed(30, a3, b3);
  BOOST_TEST(sum(s3) == 30);
  BOOST_TEST((s3 == split_rows_timed(30, std::vector<double>{0, 0, 0}, std::vector<double>{0.001, 0.001, 0.001})));
}

BOOST_AUTO_TEST_CASE(timed_split_random_property) {
  std::mt19937_64 g(11);
  for (int trial = 0; trial < 3000; ++trial) {
    std::size_t n = 1 + g() % 8;
    std::vector<double> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = g() % 3 == 0 ? 0.0 : double(g() % 100000) * 1e-6;  // up to 0.1 s
      b[i] = double(1 + g() % 10000) * 1e-6;                    // up to 10 ms a row
    }
    int64_t rows = int64_t(g() % 3000);
    auto split = split_rows_timed(rows, a, b);
    BOOST_TEST_REQUIRE(split.size() == n);
    BOOST_TEST_REQUIRE(sum(split) == rows);
    for (int64_t r : split) BOOST_TEST_REQUIRE(r >= 0);
    // The bulk start changes nothing: the greedy from zero gives the same.
    BOOST_TEST_REQUIRE((split == greedy_reference(rows, a, b)));
    // No move of one row from the slowest replica to another shortens the slowest step.
    const double worst = slowest_step(split, a, b);
    for (std::size_t from = 0; from < n; ++from) {
      if (split[from] == 0) continue;
      for (std::size_t to = 0; to < n; ++to) {
        if (to == from) continue;
        auto moved = split;
        --moved[from];
        ++moved[to];
        BOOST_TEST_REQUIRE(slowest_step(moved, a, b) >= worst - 1e-12);
      }
    }
  }
  // Large batches take the bulk path.
  std::vector<double> a{0.001, 0.0, 0.02}, b{1e-6, 3e-6, 2e-5};
  auto big = split_rows_timed(1 << 20, a, b);
  BOOST_TEST((big == greedy_reference(1 << 20, a, b)));
}

BOOST_AUTO_TEST_CASE(split_random_speeds_property) {
  std::mt19937_64 g(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::size_t n = 1 + g() % 9;
    std::vector<double> speeds(n);
    for (auto& s : speeds) s = 1.0 + double(g() % 100000) / 7.0;
    int64_t rows = int64_t(g() % 5000);
    auto split = split_rows(rows, speeds);
    BOOST_TEST_REQUIRE(split.size() == n);
    BOOST_TEST_REQUIRE(sum(split) == rows);
    double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      double exact = double(rows) * speeds[i] / total;
      BOOST_TEST_REQUIRE(split[i] >= 0);
      BOOST_TEST_REQUIRE(std::abs(double(split[i]) - exact) < 1.0 + 1e-9);  // within one row
    }
    BOOST_TEST_REQUIRE((split_rows(rows, speeds) == split));  // deterministic
  }
}
