// ps_clock: consistency rules, the clock table, and a property test of the
// staleness bound under random message delays and reorderings.
#define BOOST_TEST_MODULE ps_clock
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <queue>
#include <random>

#include "actors/ps/ps_clock.hpp"
#include "actors/ps/ps_placement.hpp"

using namespace hetflow::ps;

BOOST_AUTO_TEST_CASE(rules) {
  BOOST_TEST(consistency_model::bsp().may_read(3, 3));
  BOOST_TEST(!consistency_model::bsp().may_read(4, 3));
  BOOST_TEST(consistency_model::ssp(2).may_read(5, 3));
  BOOST_TEST(!consistency_model::ssp(2).may_read(6, 3));
  BOOST_TEST(consistency_model::asp().may_read(1000000, 0));
  BOOST_TEST(consistency_model::ssp(2).to_string() == "ssp(2)");
  BOOST_TEST(!parse_consistency("bssp", 0));
  BOOST_TEST(!parse_consistency("ssp", -1));
  BOOST_TEST(parse_consistency("ssp", 3)->staleness == 3);
}

BOOST_AUTO_TEST_CASE(table_orders_pushes_and_releases_pulls) {
  clock_table t(2, consistency_model::bsp());
  BOOST_TEST(t.request({0, 0, 1}));   // clock 0 needs g >= 0
  BOOST_TEST(!t.request({0, 1, 2}));  // waits for both workers' first push
  auto r = t.on_push(0, 1);           // early: held
  BOOST_REQUIRE(r);
  BOOST_TEST(r->empty());
  r = t.on_push(0, 0);
  BOOST_TEST((*r == std::vector<int64_t>{0, 1}));
  BOOST_TEST(t.clock(0) == 2);
  BOOST_TEST(t.global() == 0);
  BOOST_TEST(t.slowest() == 1);
  BOOST_TEST(t.released().empty());
  BOOST_TEST(!t.on_push(0, 1));  // duplicate
  BOOST_REQUIRE(t.on_push(1, 0));
  auto rel = t.released();
  BOOST_REQUIRE(rel.size() == 1u);
  BOOST_TEST(rel[0].id == 2u);
  // A finished worker stops holding the minimum.
  BOOST_TEST(t.finish(1, 1).ok());
  BOOST_TEST(t.finished(1));
  BOOST_TEST(t.global() == 2);
  BOOST_TEST(!t.on_push(1, 1));  // past its announced end
  BOOST_TEST(t.finish(0, 2).ok());
  BOOST_TEST(t.all_finished());
  BOOST_TEST(t.global() == infinite_clock);
  BOOST_TEST(t.slowest() == -1);
  BOOST_TEST(!t.finish(0, 1).ok());  // fewer than already came
}

// The property test. W workers, S shards (each with its own clock_table, as
// the real shards have), every message (pull, weights reply, push, done)
// delivered after a random delay, so messages overtake each other, also two
// pushes of one worker to one shard. A shard applies a worker's pushes in
// tag order (the order on_push returns them) before it releases pulls, as
// ps_shard_core does. Checked, whenever a worker starts computing its update
// tagged c with the weights it pulled from every shard:
//   (1) the staleness bound: every shard's weights contain, from every worker
//       v, all of v's updates tagged <= c - s - 1 (bsp: s = 0; i.e. applied_v
//       >= min(c - s, total_v));
//   (2) the spread of computing clocks: over the workers that have not
//       finished, max(c) - min(c) <= s + 1 (bsp: 1; for bsp this is "clocks
//       never diverge by more than one");
// and at the end (3) liveness: every worker finished every step (no pull
// waits forever) and every shard applied every push exactly once.
namespace {

struct sim_result {
  int64_t violations = 0;      // of (1)
  int64_t max_spread = 0;      // of (2)
  bool completed = false;      // (3)
  int64_t max_observed_lag = 0;
};

sim_result simulate(consistency_model model, int W, int S, std::vector<int64_t> steps, uint64_t seed,
                    int64_t checked_bound) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> delay(1, 50), compute(1, 30);
  struct shard_sim {
    clock_table table;
    std::vector<int64_t> applied;
  };
  std::vector<shard_sim> shards;
  for (int s = 0; s < S; ++s) shards.push_back({clock_table(W, model), std::vector<int64_t>(std::size_t(W), 0)});
  enum kind { pull, reply, push, done, start };
  struct event {
    int64_t time;
    uint64_t order;
    kind k;
    int worker, shard;
    int64_t clock;
    std::vector<int64_t> seen;  // reply: applied counts at the shard
    bool operator>(const event& o) const { return time != o.time ? time > o.time : order > o.order; }
  };
  std::priority_queue<event, std::vector<event>, std::greater<>> q;
  uint64_t n = 0;
  int64_t now = 0;
  std::vector<int64_t> clock(std::size_t(W), 0), replies(std::size_t(W), 0);
  std::vector<std::vector<std::vector<int64_t>>> seen(static_cast<std::size_t>(W));
  std::vector<bool> finished(std::size_t(W), false);
  std::vector<int64_t> computing(std::size_t(W), -1);
  sim_result res;
  auto send = [&](kind k, int w, int s, int64_t c, std::vector<int64_t> v = {}) {
    q.push(event{now + delay(rng), n++, k, w, s, c, std::move(v)});
  };
  auto answer = [&](int s, int w, int64_t c) { send(reply, w, s, c, shards[std::size_t(s)].applied); };
  auto start_step = [&](int w) {
    if (clock[std::size_t(w)] == steps[std::size_t(w)]) {
      finished[std::size_t(w)] = true;
      for (int s = 0; s < S; ++s) send(done, w, s, clock[std::size_t(w)]);
      return;
    }
    replies[std::size_t(w)] = 0;
    seen[std::size_t(w)].assign(std::size_t(S), {});
    for (int s = 0; s < S; ++s) send(pull, w, s, clock[std::size_t(w)]);
  };
  for (int w = 0; w < W; ++w) start_step(w);
  int64_t pushes_applied = 0;
  while (!q.empty()) {
    event e = q.top();
    q.pop();
    now = e.time;
    auto& sh = shards[std::size_t(e.shard)];
    switch (e.k) {
      case pull:
        if (sh.table.request({e.worker, e.clock, 0})) answer(e.shard, e.worker, e.clock);
        break;
      case push: {
        auto in_order = sh.table.on_push(e.worker, e.clock);
        BOOST_REQUIRE(in_order);
        for (int64_t t : *in_order) {
          BOOST_REQUIRE(t == sh.applied[std::size_t(e.worker)]);
          ++sh.applied[std::size_t(e.worker)];
          ++pushes_applied;
        }
        for (auto& t : sh.table.released()) answer(e.shard, t.worker, t.clock);
        break;
      }
      case done:
        BOOST_REQUIRE(sh.table.finish(e.worker, e.clock).ok());
        for (auto& t : sh.table.released()) answer(e.shard, t.worker, t.clock);
        break;
      case reply: {
        const int w = e.worker;
        BOOST_REQUIRE(e.clock == clock[std::size_t(w)]);
        seen[std::size_t(w)][std::size_t(e.shard)] = e.seen;
        if (++replies[std::size_t(w)] < S) break;
        // Worker w starts computing its update tagged c.
        const int64_t c = clock[std::size_t(w)];
        for (int s = 0; s < S; ++s)
          for (int v = 0; v < W; ++v) {
            const int64_t need = std::min(c - checked_bound, steps[std::size_t(v)]);
            const int64_t have = seen[std::size_t(w)][std::size_t(s)][std::size_t(v)];
            if (have < need) ++res.violations;
            res.max_observed_lag = std::max(res.max_observed_lag, c - have);
          }
        computing[std::size_t(w)] = c;
        int64_t lo = infinite_clock, hi = 0;
        for (int v = 0; v < W; ++v) {
          if (finished[std::size_t(v)]) continue;
          const int64_t cv = std::max<int64_t>(computing[std::size_t(v)], 0);
          lo = std::min(lo, cv);
          hi = std::max(hi, cv);
        }
        res.max_spread = std::max(res.max_spread, hi - lo);
        q.push(event{now + compute(rng), n++, start, w, 0, c, {}});
        break;
      }
      case start: {
        const int w = e.worker;
        for (int s = 0; s < S; ++s) send(push, w, s, clock[std::size_t(w)]);
        ++clock[std::size_t(w)];
        start_step(w);
        break;
      }
    }
  }
  int64_t total = 0;
  for (auto s : steps) total += s;
  res.completed = pushes_applied == total * S;
  for (int w = 0; w < W; ++w) res.completed = res.completed && finished[std::size_t(w)];
  for (auto& sh : shards) res.completed = res.completed && sh.table.all_finished() && sh.table.waiting().empty();
  return res;
}

}  // namespace

BOOST_AUTO_TEST_CASE(staleness_bound_holds_under_random_delays) {
  std::mt19937_64 pick(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int W = 1 + int(pick() % 5), S = 1 + int(pick() % 3);
    std::vector<int64_t> steps(static_cast<std::size_t>(W));
    for (auto& s : steps) s = 5 + int64_t(pick() % 20);  // uneven: some finish early
    const int64_t s = int64_t(pick() % 4);
    for (auto model : {consistency_model::bsp(), consistency_model::ssp(s)}) {
      const int64_t bound = model.kind == consistency::bsp ? 0 : s;
      auto r = simulate(model, W, S, steps, pick(), bound);
      BOOST_TEST_CONTEXT("trial " << trial << " " << model.to_string() << " W=" << W << " S=" << S) {
        BOOST_TEST(r.completed);
        BOOST_TEST(r.violations == 0);
        BOOST_TEST(r.max_spread <= bound + 1);
      }
    }
    auto a = simulate(consistency_model::asp(), W, S, steps, pick(), 0);
    BOOST_TEST(a.completed);
  }
}

// The check has teeth: asp checked against the bsp bound does break it
// (somewhere in a few seeds with unequal speeds).
BOOST_AUTO_TEST_CASE(property_check_detects_asp_against_bsp_bound) {
  int64_t violations = 0, spread = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto r = simulate(consistency_model::asp(), 3, 2, {30, 30, 30}, seed, 0);
    violations += r.violations;
    spread = std::max(spread, r.max_spread);
  }
  BOOST_TEST(violations > 0);
  BOOST_TEST(spread > 1);
  // ... and ssp(3) against the ssp(1) bound.
  int64_t v1 = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed)
    v1 += simulate(consistency_model::ssp(3), 3, 2, {30, 30, 30}, seed, 1).violations;
  BOOST_TEST(v1 > 0);
}

BOOST_AUTO_TEST_CASE(placement_balances_bytes) {
  std::vector<int64_t> bytes{600, 24, 9600, 64, 192000, 480, 40320, 336, 3360, 40};  // lenet5-like
  for (int shards = 1; shards <= 4; ++shards) {
    auto p = place_by_bytes(bytes, shards);
    BOOST_REQUIRE(p.shard_of.size() == bytes.size());
    int64_t total = 0, largest = 0;
    for (auto b : bytes) total += b, largest = std::max(largest, b);
    int64_t sum = 0, count = 0;
    for (int s = 0; s < shards; ++s) {
      int64_t mine = 0;
      for (int i : p.tensors_of[std::size_t(s)]) {
        BOOST_TEST(p.shard_of[std::size_t(i)] == s);
        mine += bytes[std::size_t(i)];
        ++count;
      }
      BOOST_TEST(mine == p.bytes_of[std::size_t(s)]);
      BOOST_TEST(mine <= total / shards + largest);
      sum += mine;
    }
    BOOST_TEST(sum == total);
    BOOST_TEST(count == int64_t(bytes.size()));
    auto again = place_by_bytes(bytes, shards);
    BOOST_TEST(again.shard_of == p.shard_of);
  }
  // Equal tensors spread evenly.
  std::vector<int64_t> eq(8, 100);
  auto p = place_by_bytes(eq, 4);
  for (auto b : p.bytes_of) BOOST_TEST(b == 200);
}

BOOST_AUTO_TEST_CASE(placement_splits_sparse_tables_by_rows) {
  // Two tables (rows 10 and 7, 16 B per row) among dense tensors.
  std::vector<int64_t> bytes{400, 160, 50, 112, 30};
  std::vector<int64_t> sparse{0, 10, 0, 7, 0};
  for (int shards = 1; shards <= 4; ++shards) {
    auto p = place_by_bytes(bytes, shards, sparse);
    BOOST_TEST(p.shard_of[1] == -1);
    BOOST_TEST(p.shard_of[3] == -1);
    std::vector<int64_t> covered(5, 0);
    int64_t total = 0;
    for (int s = 0; s < shards; ++s) {
      int64_t mine = 0;
      for (int i : p.tensors_of[std::size_t(s)]) {
        BOOST_TEST(sparse[std::size_t(i)] == 0);
        mine += bytes[std::size_t(i)];
      }
      BOOST_REQUIRE(p.pieces_of[std::size_t(s)].size() == 2u);  // one piece of every table
      int64_t expect_begin[2] = {10 * s / shards, 7 * s / shards};
      for (std::size_t j = 0; j < 2; ++j) {
        const auto& pc = p.pieces_of[std::size_t(s)][j];
        BOOST_TEST(pc.tensor == (j == 0 ? 1 : 3));
        BOOST_TEST(pc.row_begin == expect_begin[j]);  // contiguous, in shard order
        covered[std::size_t(pc.tensor)] += pc.rows();
        mine += pc.rows() * 16;
      }
      BOOST_TEST(mine == p.bytes_of[std::size_t(s)]);
      total += mine;
    }
    BOOST_TEST(covered[1] == 10);
    BOOST_TEST(covered[3] == 7);
    BOOST_TEST(total == 400 + 160 + 50 + 112 + 30);
  }
  // Without sparse rows the placement is the dense one.
  auto a = place_by_bytes(bytes, 3), b = place_by_bytes(bytes, 3, std::vector<int64_t>(5, 0));
  BOOST_TEST(a.shard_of == b.shard_of);
}
