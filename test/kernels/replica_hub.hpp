// An in-process replica group for train_config::group: replicas on threads
// of one process sum through a thread_hub (data_parallel_test, and the gpu
// suite's cpu + cuda replicas).
#pragma once

#include <cmath>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/trainer.hpp"

namespace hetflow::kernels::testing {

// Sums in rank order under a lock; a generation count makes it a barrier.
// `fail_at` > 0: the fail_rank's call number fail_at returns an error (and
// the others then see it), as a dead replica would make the ring fail.
class thread_hub {
public:
  explicit thread_hub(int n) : n_(n) {}

  status sum(int rank, std::span<const std::span<float>> t) {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) return make_error(errc::peer_down, "a replica failed");
    if (rank == fail_rank_ && ++calls_of_failing_ == fail_at_) {
      failed_ = true;
      cv_.notify_all();
      return make_error(errc::peer_down, "replica " + std::to_string(rank) + " fails (test)");
    }
    const uint64_t gen = gen_;
    inputs_[std::size_t(rank)] = t;
    if (++arrived_ == n_) {
      // Element-wise sum in rank order, written back to every replica.
      for (std::size_t k = 0; k < t.size(); ++k)
        for (std::size_t i = 0; i < t[k].size(); ++i) {
          float acc = 0.0f;
          for (int r = 0; r < n_; ++r) acc += inputs_[std::size_t(r)][k][i];
          for (int r = 0; r < n_; ++r) inputs_[std::size_t(r)][k][i] = acc;
        }
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return {};
    }
    cv_.wait(lock, [&] { return gen_ != gen || failed_; });
    if (gen_ == gen) return make_error(errc::peer_down, "a replica failed");
    return {};
  }
  void fail(int rank, int at_call) {
    fail_rank_ = rank;
    fail_at_ = at_call;
  }

private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<const std::span<float>>> inputs_ = std::vector<std::span<const std::span<float>>>(16);
  int arrived_ = 0;
  uint64_t gen_ = 0;
  bool failed_ = false;
  int fail_rank_ = -1, fail_at_ = 0, calls_of_failing_ = 0;
};

class hub_group final : public replica_group {
public:
  hub_group(thread_hub& hub, int rank, int size) : hub_(hub), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Synchronous: sums (a barrier with the other replicas) before returning.
  std::future<status> start_sum(std::span<const std::span<float>> t) override {
    std::promise<status> p;
    p.set_value(hub_.sum(rank_, t));
    return p.get_future();
  }

private:
  thread_hub& hub_;
  int rank_, size_;
};

// Same split rule as topology::split_rows for the speeds used here.
inline std::vector<int64_t> proportional(int64_t rows, std::span<const double> speeds) {
  double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  std::vector<int64_t> out;
  int64_t given = 0;
  for (double s : speeds) {
    out.push_back(int64_t(std::floor(double(rows) * s / total)));
    given += out.back();
  }
  for (std::size_t k = 0; given < rows; k = (k + 1) % out.size(), ++given) ++out[k];
  return out;
}

// Same rule as topology::split_rows_timed, straightforwardly: each row to
// the replica whose step would then end first (ties: lower index).
inline std::vector<int64_t> timed_greedy(int64_t rows, std::span<const double> fixed_s,
                                         std::span<const double> per_row_s) {
  std::vector<int64_t> out(fixed_s.size(), 0);
  auto end = [&](std::size_t i) { return std::max(0.0, fixed_s[i]) + double(out[i] + 1) * per_row_s[i]; };
  for (int64_t k = 0; k < rows; ++k) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < out.size(); ++i)
      if (end(i) < end(best)) best = i;
    ++out[best];
  }
  return out;
}

// n replicas of `base` on n threads summing through one thread_hub (the
// given one, or their own); train_single's result per rank.
using split_fn = std::function<std::vector<int64_t>(int64_t, std::span<const double>)>;

// per_rank: changes replica r's config (e.g. its device) before it runs.
inline std::vector<expected<train_report>> run_replicas(const train_config& base, int n, bool measured,
                                                        thread_hub* hub_in = nullptr, split_fn split = proportional,
                                                        const std::function<void(int, train_config&)>& per_rank = {}) {
  thread_hub own(n);
  thread_hub& hub = hub_in != nullptr ? *hub_in : own;
  std::vector<expected<train_report>> out(std::size_t(n), make_error(errc::internal, "not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      hub_group g(hub, r, n);
      train_config c = base;
      c.group = &g;
      c.measured_split = measured;
      c.split = split;
      if (per_rank) per_rank(r, c);
      out[std::size_t(r)] = train_single(c);
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace hetflow::kernels::testing
