#include "actors/ring/host_ring_probe.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "actors/ring/shm_group.hpp"

namespace hetflow::actors::ring {
namespace {

// A member's worker thread: ring_member runs each shared-memory collective
// on one, handed over by the member and finished with a completion the
// caller waits for. The probe times that hand-over too.
class worker {
public:
  worker() : t_([this] { loop(); }) {}
  ~worker() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_one();
    t_.join();
  }
  std::future<status> run(std::function<status()> f) {
    std::packaged_task<status()> task(std::move(f));
    auto fut = task.get_future();
    {
      std::lock_guard lk(m_);
      task_ = std::move(task);
      has_ = true;
    }
    cv_.notify_one();
    return fut;
  }

private:
  void loop() {
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || has_; });
      if (stop_) return;
      auto task = std::move(task_);
      has_ = false;
      lk.unlock();
      task();
      lk.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::packaged_task<status()> task_;
  bool has_ = false;
  bool stop_ = false;
  std::thread t_;
};

// How much later than the others member 0 starts each collective: past
// shm_group's first-round spin (50 us), so the others sleep.
constexpr int arrival_stagger_us = 200;

// Median ms of `iterations` collectives of v[r] (f32, one vector per
// member) over `g`: one caller thread per member hands each collective to
// its worker and waits; member 0's times (all members end each collective
// together). The error is the first member's to fail (the others then stop
// with "aborted").
expected<double> time_size(std::vector<std::unique_ptr<shm_group>>& g, std::vector<std::vector<float>>& v,
                           int warmup, int iterations, uint64_t& next_id) {
  const auto n = static_cast<uint32_t>(g.size());
  std::atomic<bool> abort{false};
  std::atomic<int> first_failed{-1};
  std::vector<status> st(n);
  std::vector<double> times;
  const uint64_t first_id = next_id;
  next_id += uint64_t(warmup + iterations);
  auto fail = [&](uint32_t r, status s) {
    st[r] = std::move(s);
    int none = -1;
    first_failed.compare_exchange_strong(none, static_cast<int>(r));
    abort = true;
  };
  std::vector<int> cpus;  // one per member, where there are enough
  if (cpu_set_t allowed; ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= int(n))
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  std::vector<std::thread> threads;
  try {
    for (uint32_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        // Member r on the r-th CPU this process may use, as `hetflow run`
        // pins the local nodes (its worker thread inherits the mask).
        if (!cpus.empty()) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cpus[r % cpus.size()], &one);
          (void)::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
        }
        try {
          worker w;
          for (int it = 0; it < warmup + iterations; ++it) {
            // Member 0 comes last, as one replica of a step does: the
            // others have stopped spinning and sleep, and its time (the
            // step's critical path from the last arrival) includes waking
            // them. Arriving together, 2.14 MB took 0.23-0.28 ms here;
            // staggered 0.28-0.32 ms, against a median of 0.32 ms from the
            // later replica's arrival inside mlp's dp steps (2026-11-29,
            // 2-core VM; 177 KB: 0.02, 0.06 and 0.056 ms).
            if (r == 0) std::this_thread::sleep_for(std::chrono::microseconds(arrival_stagger_us));
            const auto t0 = std::chrono::steady_clock::now();
            status s = w.run([&, r, it] {
                          fused_buffer buf(ring_dtype::f32, {std::as_writable_bytes(std::span<float>(v[r]))});
                          return g[r]->all_reduce(buf, reduce_op::average, first_id + uint64_t(it), 10.0, abort);
                        })
                           .get();
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (!s.ok()) return fail(r, s);
            if (r == 0 && it >= warmup) times.push_back(ms);
          }
        } catch (const std::exception& e) {  // a worker thread that could not start
          fail(r, make_error(errc::internal, std::string("host ring probe: ") + e.what()));
        }
      });
  } catch (const std::exception& e) {  // a member thread that could not start: stop the others
    abort = true;
    for (auto& t : threads) t.join();
    return make_error(errc::internal, std::string("host ring probe: ") + e.what());
  }
  for (auto& t : threads) t.join();
  if (const int f = first_failed.load(); f >= 0) return st[std::size_t(f)];
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

expected<host_ring_cost> measure_host_ring(uint32_t members, uint64_t bytes, int warmup, int iterations) {
  if (members < 2 || members > shm_group::max_members)
    return make_error(errc::invalid_argument, "host ring probe: members must be 2.." +
                                                  std::to_string(shm_group::max_members));
  if (iterations <= 0 || warmup < 0) return make_error(errc::invalid_argument, "host ring probe: iterations must be > 0");
  bytes = std::clamp<uint64_t>(bytes, 4096, std::min(max_probe_bytes, max_probe_total_bytes / members));
  std::vector<std::vector<float>> v;
  try {
    v.assign(members, std::vector<float>(bytes / sizeof(float)));
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "host ring probe: no memory for " + std::to_string(members) + " x " +
                                               std::to_string(bytes) + " bytes");
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& m : v)
    for (auto& x : m) x = d(rng);
  std::mt19937_64 seed(std::random_device{}());
  const uint64_t nonce = seed();
  std::vector<std::unique_ptr<shm_group>> g;
  HF_ASSIGN_OR_RETURN(auto first, shm_group::create(members, nonce, {}));
  g.push_back(std::move(first));
  for (uint32_t r = 1; r < members; ++r) {
    HF_ASSIGN_OR_RETURN(auto o, shm_group::open(g[0]->name(), members, r, nonce));
    g.push_back(std::move(o));
  }
  {
    std::atomic<bool> abort{false};
    std::vector<status> st(members);
    std::vector<std::thread> t;
    try {
      for (uint32_t r = 0; r < members; ++r) t.emplace_back([&, r] { st[r] = g[r]->check_in(10.0, abort); });
    } catch (const std::exception& e) {
      abort = true;
      for (auto& x : t) x.join();
      return make_error(errc::internal, std::string("host ring probe: ") + e.what());
    }
    for (auto& x : t) x.join();
    for (auto& s : st)
      if (!s.ok()) return s.with_context("host ring probe");
  }
  uint64_t id = 1;
  host_ring_cost c;
  c.members = members;
  c.bytes = bytes;
  // Rounds of fresh threads: unpinned, where the scheduler put a member's
  // caller and worker threads lasted for a round and changed the time by up
  // to 2.5x on the 2-core VM (0.29, 0.39 or 0.75 ms for 2 MB); the median
  // round. With the members pinned (time_size) ten probes of 2.14 MB gave
  // 0.26-0.34 ms, unpinned 0.27-0.67 ms (2026-11-29).
  std::vector<double> rounds;
  for (int r = 0; r < probe_rounds; ++r) {
    HF_ASSIGN_OR_RETURN(double ms, time_size(g, v, warmup, iterations, id));
    rounds.push_back(ms);
  }
  std::sort(rounds.begin(), rounds.end());
  c.ms = rounds[rounds.size() / 2];
  // t = 2 (N-1)/N * bytes / bw  =>  bw = 2 (N-1)/N * bytes / t
  const double N = members;
  c.gbps = 2.0 * (N - 1) / N * double(bytes) / std::max(1e-6, c.ms) * 1e3 * 8 / 1e9;
  return c;
}

}  // namespace hetflow::actors::ring
