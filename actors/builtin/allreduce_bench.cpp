// Job kinds "ring_check" and "allreduce_bench": a ring of ring_member
// actors across the topology's nodes (members_per_node on each, in
// topology order, or the order given by `order`), each driven by a
// ring_driver actor on its node that calls the ring the way a trainer would
// (ring::all_reduce from a detached actor, waiting on the completion).
//
//   node n0                          node n1
//   driver0 --all_reduce--> ring0 ==chunks==> ring1 <--all_reduce-- driver1
//                             ^====================|
//
// ring_check: every dtype x op x length in the job's lists (uneven lengths,
// lengths below the member count, zero) plus a request of many small tensors
// of mixed dtypes (gradient buckets). Inputs are generated so that every
// partial sum is exact (integers wrap exactly; floats are small multiples of
// 1/4 or 1/8), so each member compares its result with a locally computed
// expectation bit for bit.
//
// allreduce_bench: f32 (or `dtype`) tensors of each size in `sizes`; one
// checked collective (floats within a tolerance of the double-precision
// sum), `warmup` untimed, then `iterations` timed ones. Reports the median
// time and, as NCCL-tests define them, algorithm bandwidth (bytes / time)
// and bus bandwidth (2 (N-1)/N * bytes / time).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>

#include "actors/builtin/job_actor.hpp"
#include "actors/json.hpp"
#include "actors/ring/ring_member.hpp"

namespace hetflow::actors::builtin {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace hetflow::actors::ring;

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 8-byte aligned storage shared with a pending collective (the completion
// keeps it alive, so a job stop never leaves the ring writing freed memory).
struct storage {
  std::vector<uint64_t> words;
  explicit storage(std::size_t bytes) : words((bytes + 7) / 8) {}
  std::byte* data() { return reinterpret_cast<std::byte*>(words.data()); }
};

// Input element i of rank `rank` for case `seed`: exact partial sums.
template <class T>
T check_value(uint64_t seed, uint32_t rank, uint64_t i) {
  uint64_t h = mix(seed * 0x100000001b3ull ^ (uint64_t(rank) << 40) ^ i);
  if constexpr (std::is_same_v<T, float>) return float(int64_t(h % 2048) - 1024) * 0.25f;
  if constexpr (std::is_same_v<T, double>)
    return double(int64_t(h % (uint64_t(1) << 40)) - (int64_t(1) << 39)) * 0.125;
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(static_cast<uint32_t>(h));
  if constexpr (std::is_same_v<T, int64_t>) return static_cast<int64_t>(h);
}

template <class T>
T expected_value(uint64_t seed, uint32_t members, uint64_t i, reduce_op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    U s = 0;
    for (uint32_t m = 0; m < members; ++m) s += static_cast<U>(check_value<T>(seed, m, i));
    return static_cast<T>(s);
  } else {
    T s = 0;  // exact in T whatever the order
    for (uint32_t m = 0; m < members; ++m) s += check_value<T>(seed, m, i);
    return op == reduce_op::average ? s / static_cast<T>(members) : s;
  }
}

template <class T>
void fill_check(std::byte* p, uint64_t n, uint64_t seed, uint32_t rank) {
  T* t = reinterpret_cast<T*>(p);
  for (uint64_t i = 0; i < n; ++i) t[i] = check_value<T>(seed, rank, i);
}

template <class T>
std::string verify_check(const std::byte* p, uint64_t n, uint64_t seed, uint32_t members,
                         reduce_op op) {
  const T* t = reinterpret_cast<const T*>(p);
  for (uint64_t i = 0; i < n; ++i) {
    T want = expected_value<T>(seed, members, i, op);
    if (std::memcmp(&t[i], &want, sizeof(T)) != 0)
      return "element " + std::to_string(i) + " is " + std::to_string(t[i]) + ", expected " +
             std::to_string(want);
  }
  return {};
}

template <class F>
auto by_dtype(ring_dtype t, F&& f) {
  switch (t) {
    case ring_dtype::f32: return f(float{});
    case ring_dtype::f64: return f(double{});
    case ring_dtype::i32: return f(int32_t{});
    case ring_dtype::i64: return f(int64_t{});
  }
  return f(float{});
}

uint64_t fnv(uint64_t h, const std::byte* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ uint64_t(p[i])) * 0x100000001b3ull;
  return h;
}

struct driver_state : job_actor_state {
  std::string member;
  uint32_t rank = 0;
  uint32_t members = 1;
  std::string mode;
  topology::settings job;  // the job's keys
  static inline const char* name = "hetflow.ring_driver";
};
using driver_actor = caf::stateful_actor<driver_state>;

// One all-reduce, waited for. The buffers stay alive until the completion
// ran, even if we stop waiting (job stopping).
status run_collective(driver_actor* self, const caf::actor& member,
                      std::vector<std::shared_ptr<storage>> bufs, std::vector<ring_tensor> ts,
                      reduce_op op) {
  auto p = std::make_shared<std::promise<status>>();
  auto f = p->get_future();
  all_reduce(member, std::move(ts), op, [p, bufs](status s) { p->set_value(std::move(s)); });
  while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
    if (self->state.svc->stopping())
      return make_error(errc::cancelled, "the job is stopping");
  return f.get();
}

// Everything a ring_check driver does; an error text, or empty.
std::string run_check(driver_actor* self, const caf::actor& member, uint64_t& cases,
                      uint64_t& checksum) {
  auto& st = self->state;
  auto lengths = st.job.get_ints("lengths");
  std::vector<ring_dtype> types;
  for (auto& s : st.job.get_strings("dtypes")) types.push_back(*parse_ring_dtype(s));
  std::vector<reduce_op> ops;
  for (auto& s : st.job.get_strings("ops")) ops.push_back(*parse_reduce_op(s));
  int64_t rounds = st.job.get_int("rounds", 1);
  uint64_t seed = 1;
  for (int64_t round = 0; round < rounds; ++round) {
    for (ring_dtype t : types) {
      for (reduce_op op : ops) {
        if (op == reduce_op::average && !is_float(t)) continue;
        for (int64_t len : lengths) {
          ++seed;
          uint64_t n = static_cast<uint64_t>(len);
          auto buf = std::make_shared<storage>(n * element_size(t));
          by_dtype(t, [&](auto v) { fill_check<decltype(v)>(buf->data(), n, seed, st.rank); });
          std::vector<ring_tensor> ts{{t, {buf->data(), n * element_size(t)}}};
          if (auto s = run_collective(self, member, {buf}, ts, op); !s.ok())
            return s.to_string();
          std::string bad = by_dtype(t, [&](auto v) {
            return verify_check<decltype(v)>(buf->data(), n, seed, st.members, op);
          });
          if (!bad.empty())
            return std::string("all-reduce ") + to_string(op) + " of " + std::to_string(n) + " " +
                   to_string(t) + " over " + std::to_string(st.members) + " members: " + bad;
          checksum = fnv(checksum, buf->data(), n * element_size(t));
          ++cases;
        }
      }
    }
    // Gradient buckets: many tensors of mixed dtypes in one request; the
    // member fuses consecutive ones of one dtype up to bucket_bytes.
    static const std::pair<ring_dtype, uint64_t> layout[] = {
        {ring_dtype::f32, 3},     {ring_dtype::f32, 1000},  {ring_dtype::f32, 0},
        {ring_dtype::f32, 17},    {ring_dtype::i64, 5},     {ring_dtype::i64, 70001},
        {ring_dtype::f32, 65537}, {ring_dtype::f64, 9},     {ring_dtype::f64, 4099},
        {ring_dtype::i32, 1},     {ring_dtype::f32, 300001}, {ring_dtype::f32, 2},
    };
    std::vector<std::shared_ptr<storage>> bufs;
    std::vector<ring_tensor> ts;
    std::vector<uint64_t> seeds;
    for (auto& [t, n] : layout) {
      ++seed;
      auto buf = std::make_shared<storage>(n * element_size(t));
      by_dtype(t, [&](auto v) { fill_check<decltype(v)>(buf->data(), n, seed, st.rank); });
      bufs.push_back(buf);
      ts.push_back({t, {buf->data(), n * element_size(t)}});
      seeds.push_back(seed);
    }
    if (auto s = run_collective(self, member, bufs, ts, reduce_op::sum); !s.ok())
      return s.to_string();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      auto [t, n] = layout[i];
      std::string bad = by_dtype(t, [&](auto v) {
        return verify_check<decltype(v)>(bufs[i]->data(), n, seeds[i], st.members, reduce_op::sum);
      });
      if (!bad.empty())
        return "bucketed all-reduce, tensor " + std::to_string(i) + " (" + std::to_string(n) +
               " " + to_string(t) + "): " + bad;
      checksum = fnv(checksum, bufs[i]->data(), n * element_size(t));
    }
    ++cases;
  }
  return {};
}

// The allreduce_bench driver: fills `results` (a JSON array's elements).
std::string run_bench(driver_actor* self, const caf::actor& member, json_writer& w,
                      std::string& summary) {
  auto& st = self->state;
  ring_dtype t = *parse_ring_dtype(st.job.get_string("dtype", "f32"));
  int64_t iterations = st.job.get_int("iterations", 20);
  int64_t warmup = st.job.get_int("warmup", 3);
  for (int64_t bytes : st.job.get_ints("sizes")) {
    uint64_t n = static_cast<uint64_t>(bytes) / element_size(t);
    auto buf = std::make_shared<storage>(n * element_size(t));
    std::vector<ring_tensor> ts{{t, {buf->data(), n * element_size(t)}}};
    // Inputs in [-1, 1) * 2^-60: timed iterations sum in place and grow by N
    // each time; this keeps them finite for many iterations.
    auto input = [&](uint32_t rank, uint64_t i) {
      return (double(mix(uint64_t(rank) << 48 ^ i) >> 11) * 0x1p-52 - 1.0) * 0x1p-60;
    };
    by_dtype(t, [&](auto v) {
      using T = decltype(v);
      T* p = reinterpret_cast<T*>(buf->data());
      for (uint64_t i = 0; i < n; ++i)
        p[i] = std::is_integral_v<T> ? T(mix(uint64_t(st.rank) << 48 ^ i)) : T(input(st.rank, i));
    });
    if (auto s = run_collective(self, member, {buf}, ts, reduce_op::sum); !s.ok())
      return s.to_string();
    std::string bad = by_dtype(t, [&](auto v) -> std::string {
      using T = decltype(v);
      const T* p = reinterpret_cast<const T*>(buf->data());
      for (uint64_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          U want = 0;
          for (uint32_t m = 0; m < st.members; ++m) want += U(mix(uint64_t(m) << 48 ^ i));
          if (U(p[i]) != want) return "element " + std::to_string(i) + " differs";
        } else {
          double want = 0, mag = 0;
          for (uint32_t m = 0; m < st.members; ++m) {
            want += double(T(input(m, i)));
            mag += std::fabs(double(T(input(m, i))));
          }
          double eps = sizeof(T) == 4 ? 0x1p-23 : 0x1p-52;
          if (std::fabs(double(p[i]) - want) > st.members * eps * mag)
            return "element " + std::to_string(i) + " is " + std::to_string(double(p[i])) +
                   ", expected " + std::to_string(want);
        }
      }
      return {};
    });
    if (!bad.empty()) return "all-reduce of " + std::to_string(bytes) + " bytes: " + bad;
    uint64_t checksum = fnv(0xcbf29ce484222325ull, buf->data(), n * element_size(t));
    for (int64_t i = 0; i < warmup; ++i)
      if (auto s = run_collective(self, member, {buf}, ts, reduce_op::sum); !s.ok())
        return s.to_string();
    std::vector<double> times;
    for (int64_t i = 0; i < iterations; ++i) {
      auto t0 = clock_type::now();
      if (auto s = run_collective(self, member, {buf}, ts, reduce_op::sum); !s.ok())
        return s.to_string();
      times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    double median = times.empty() ? 0 : times[times.size() / 2];
    double mean = 0;
    for (double x : times) mean += x;
    mean = times.empty() ? 0 : mean / double(times.size());
    double algbw = median > 0 ? double(bytes) / median / 1e9 : 0;
    double busbw = median > 0 ? bus_bytes(n, st.members, t) / median / 1e9 : 0;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(checksum));
    w.begin_object().field("bytes", int64_t(bytes)).field("dtype", to_string(t));
    w.field("members", int64_t(st.members)).field("iterations", iterations);
    w.field("time_us", median * 1e6).field("time_us_mean", mean * 1e6);
    w.field("time_us_min", times.empty() ? 0.0 : times.front() * 1e6);
    w.field("algbw_gbps", algbw).field("busbw_gbps", busbw).field("checked", true);
    w.field("checksum", std::string(hex)).end_object();
    char line[200];
    std::snprintf(line, sizeof line, "%s%lld B: %.1f us, algbw %.3f GB/s, busbw %.3f GB/s",
                  summary.empty() ? "" : "; ", static_cast<long long>(bytes), median * 1e6, algbw,
                  busbw);
    summary += line;
  }
  return {};
}

caf::behavior ring_driver(driver_actor* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.member = env.spec.args.get_string("member");
  st.rank = static_cast<uint32_t>(env.spec.args.get_int("rank", 0));
  st.members = static_cast<uint32_t>(env.spec.args.get_int("members", 1));
  st.mode = env.spec.args.get_string("mode", "check");
  st.job = env.cluster.job.params;
  return {
    // Detached: this handler blocks its own thread while collectives run,
    // as a trainer's step would; the ring member's mailbox stays free.
    [self](start_atom) {
      auto& st = self->state;
      caf::actor member = st.svc->find_actor(st.member);
      if (!member) return fail_job_actor(self, "ring member '" + st.member + "' is not running");
      auto t0 = clock_type::now();
      json_writer w;
      w.begin_object().field("rank", int64_t(st.rank)).field("members", int64_t(st.members));
      std::string err, summary;
      if (st.mode == "bench") {
        w.key("results").begin_array();
        err = run_bench(self, member, w, summary);
        w.end_array();
      } else {
        uint64_t cases = 0, checksum = 0xcbf29ce484222325ull;
        err = run_check(self, member, cases, checksum);
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(checksum));
        w.field("cases", cases).field("checksum", std::string(hex));
        summary = std::to_string(cases) + " collectives checked, all exact (checksum " +
                  std::string(hex) + ")";
      }
      double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
      w.field("seconds", secs).end_object();
      close(member);
      if (!err.empty())
        return fail_job_actor(self, "rank " + std::to_string(st.rank) + " (ring member '" +
                                        st.member + "'): " + err);
      st.svc->report_done(st.me, true, summary, w.str());
      self->quit();
    },
  };
}

// The actors of a ring job: members and drivers, in ring order.
expected<std::vector<topology::actor_spec>> expand_ring_job(const topology::cluster& c,
                                                            const std::string& mode) {
  const auto& p = c.job.params;
  int64_t per_node = p.get_int("members_per_node", 1);
  std::size_t total = c.nodes.size() * static_cast<std::size_t>(per_node);
  std::vector<std::string> names, nodes;
  for (std::size_t i = 0; i < total; ++i) {
    names.push_back("ring" + std::to_string(i));
    nodes.push_back(c.nodes[i / static_cast<std::size_t>(per_node)].name);
  }
  std::vector<std::string> order = p.get_strings("order");
  if (order.empty()) order = names;
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> want = names;
  std::sort(want.begin(), want.end());
  if (sorted != want)
    return make_error(errc::invalid_argument,
                      "[job] order must list each ring member once: ring0 .. ring" +
                          std::to_string(total - 1));
  std::string drill_member = p.get_string("drill_member", "");
  if (!drill_member.empty() && std::find(names.begin(), names.end(), drill_member) == names.end())
    return make_error(errc::invalid_argument,
                      "[job] drill_member '" + drill_member + "' is not a ring member");
  if (mode == "check")
    for (int64_t len : p.get_ints("lengths"))
      if (len < 0) return make_error(errc::invalid_argument, "[job] lengths must be >= 0");
  std::vector<topology::actor_spec> v;
  for (std::size_t i = 0; i < total; ++i) {
    topology::actor_spec m;
    m.name = names[i];
    m.type = "ring_member";
    m.node = nodes[i];
    m.args.set("ring", order);
    for (auto key : {"chunk_bytes", "bucket_bytes", "window"})
      if (p.contains(key)) m.args.set(key, p.get_int(key));
    if (p.contains("timeout")) m.args.set("timeout", p.get_number("timeout"));
    if (p.contains("first_timeout")) m.args.set("first_timeout", p.get_number("first_timeout"));
    if (p.contains("hierarchical")) m.args.set("hierarchical", p.get_string("hierarchical"));
    if (p.contains("shm")) m.args.set("shm", p.get_string("shm"));
    if (p.contains("shm_slot_bytes")) m.args.set("shm_slot_bytes", p.get_int("shm_slot_bytes"));
    if (m.name == drill_member) {
      m.args.set("drill", p.get_string("drill", "none"));
      m.args.set("drill_after", p.get_int("drill_after", 0));
    }
    v.push_back(std::move(m));
    topology::actor_spec d;
    d.name = "driver" + std::to_string(i);
    d.type = "ring_driver";
    d.node = nodes[i];
    d.args.set("member", names[i]);
    d.args.set("rank", int64_t(std::find(order.begin(), order.end(), names[i]) - order.begin()));
    d.args.set("members", int64_t(total));
    d.args.set("mode", mode);
    v.push_back(std::move(d));
  }
  return v;
}

std::string summarize_ring(const std::vector<actor_result>& results) {
  // The report: rank 0's driver's metrics, and whether every member ended
  // with bit-identical results (their checksums agree).
  std::string rank0, checksum;
  bool identical = true;
  int drivers = 0;
  for (auto& r : results) {
    if (r.name.rfind("driver", 0) != 0 || r.metrics_json.empty()) continue;
    ++drivers;
    if (r.metrics_json.find("\"rank\":0,") != std::string::npos) rank0 = r.metrics_json;
    // Every "checksum":"..." value in order.
    std::string all;
    for (std::size_t pos = 0; (pos = r.metrics_json.find("\"checksum\":\"", pos)) != std::string::npos;) {
      pos += 12;
      all += r.metrics_json.substr(pos, 16);
    }
    if (drivers == 1)
      checksum = all;
    else if (all != checksum)
      identical = false;
  }
  if (rank0.empty()) return {};
  return "\"result\":" + rank0 + ",\"members_identical\":" + (identical ? "true" : "false");
}

void add_ring_keys(topology::type_spec& job) {
  using topology::key_spec;
  using topology::key_type;
  job.keys.push_back(key_spec{"members_per_node", key_type::integer, false, int64_t{1},
                              "ring members on each node", 1.0, 64.0, {}});
  job.keys.push_back(key_spec{"order", key_type::string_list, false, std::vector<std::string>{},
                              "ring order as member names ring0..; default: topology order", {}, {},
                              {}});
  for (auto& k : ring_member_keys()) {
    if (k.name == "drill" || k.name == "drill_after") continue;
    job.keys.push_back(k);
  }
  job.keys.push_back(key_spec{"drill_member", key_type::string, false, std::string(""),
                              "fault drill: the member that stalls or dies", {}, {}, {}});
  job.keys.push_back(key_spec{"drill", key_type::string, false, std::string("none"),
                              "fault drill: stall (block the mailbox) or die", {}, {},
                              {"none", "stall", "die"}});
  job.keys.push_back(key_spec{"drill_after", key_type::integer, false, int64_t{0},
                              "chunks the drill member handles before its fault", 0.0, {}, {}});
}

}  // namespace

void add_allreduce_bench(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec check{"ring_check",
                            "ring all-reduce across the nodes, every result checked exactly", {}};
  add_ring_keys(check);
  check.keys.push_back(key_spec{"lengths", key_type::size_list, false,
                                std::vector<int64_t>{0, 1, 3, 7, 1000, 65537, 1048583},
                                "elements per tensor (any, including 0 and < members)", {}, {},
                                {}});
  check.keys.push_back(key_spec{"dtypes", key_type::string_list, false,
                                std::vector<std::string>{"f32", "f64", "i32", "i64"},
                                "element types (f32, f64, i32, i64)", {}, {}, {}});
  check.keys.push_back(key_spec{"ops", key_type::string_list, false,
                                std::vector<std::string>{"sum", "average"},
                                "reductions (sum; average for floats)", {}, {}, {}});
  check.keys.push_back(key_spec{"rounds", key_type::integer, false, int64_t{1},
                                "times to run the whole set", 1.0, 1e9, {}});
  auto check_lists = [](const topology::cluster& c) -> status {
    for (auto& s : c.job.params.get_strings("dtypes"))
      if (!parse_ring_dtype(s))
        return make_error(errc::invalid_argument,
                          "[job] dtypes: '" + s + "' is not one of f32, f64, i32, i64");
    for (auto& s : c.job.params.get_strings("ops"))
      if (!parse_reduce_op(s))
        return make_error(errc::invalid_argument, "[job] ops: '" + s + "' is not sum or average");
    if (c.job.params.contains("dtype") && !parse_ring_dtype(c.job.params.get_string("dtype")))
      return make_error(errc::invalid_argument, "[job] dtype must be f32, f64, i32 or i64");
    return {};
  };
  (void)reg.add_job_kind(
      check,
      [check_lists](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        HF_RETURN_IF_ERROR(check_lists(c));
        return expand_ring_job(c, "check");
      },
      summarize_ring);

  topology::type_spec bench{"allreduce_bench",
                            "ring all-reduce timings (NCCL-tests bus bandwidth), results checked",
                            {}};
  add_ring_keys(bench);
  bench.keys.push_back(key_spec{"sizes", key_type::size_list, false,
                                std::vector<int64_t>{1 << 20, 16 << 20, 64 << 20},
                                "bytes per all-reduce", 8.0, {}, {}});
  bench.keys.push_back(key_spec{"dtype", key_type::string, false, std::string("f32"),
                                "element type", {}, {}, {"f32", "f64", "i32", "i64"}});
  bench.keys.push_back(key_spec{"iterations", key_type::integer, false, int64_t{20},
                                "timed all-reduces per size", 1.0, 1e6, {}});
  bench.keys.push_back(key_spec{"warmup", key_type::integer, false, int64_t{3},
                                "untimed all-reduces per size first", 0.0, 1e6, {}});
  (void)reg.add_job_kind(
      bench,
      [check_lists](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        HF_RETURN_IF_ERROR(check_lists(c));
        return expand_ring_job(c, "bench");
      },
      summarize_ring);

  topology::type_spec d{"ring_driver",
                        "drives a ring member as a trainer would (ring_check, allreduce_bench)", {}};
  d.keys.push_back(key_spec{"member", key_type::string, true, std::nullopt,
                            "the ring_member actor on this node", {}, {}, {}});
  d.keys.push_back(key_spec{"rank", key_type::integer, false, int64_t{0},
                            "the member's position in the ring", 0.0, {}, {}});
  d.keys.push_back(key_spec{"members", key_type::integer, false, int64_t{1},
                            "ring size", 1.0, {}, {}});
  d.keys.push_back(key_spec{"mode", key_type::string, false, std::string("check"),
                            "check or bench", {}, {}, {"check", "bench"}});
  (void)reg.add_actor_type(d, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(ring_driver, env);
  });
}

}  // namespace hetflow::actors::builtin
