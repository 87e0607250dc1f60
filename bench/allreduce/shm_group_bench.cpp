// shm_group_bench: the shared-memory ring group (actors/ring/shm_group.hpp)
// alone, without actors or the node runtime: N forked processes on one host,
// each pinned to CPU (rank % cores) unless --no-pin, all-reduce a vector of
// f32 ITERATIONS times after WARMUP; rank 0 prints the median and the fastest
// time and checks the result.
//
//   shm_group_bench [--bytes B] [--members N] [--slot-bytes S] [--banks K]
//                   [--iterations I] [--warmup W] [--no-pin]
//
// What the actor path (`allreduce_bench`) adds on top is the difference.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "actors/ring/shm_group.hpp"

using namespace hetflow::actors::ring;

int main(int argc, char** argv) {
  uint64_t bytes = 16u << 20;
  uint32_t members = 2;
  shm_group::options opt;
  int iterations = 20, warmup = 3;
  bool pin = true;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--bytes") bytes = std::strtoull(next(), nullptr, 10);
    else if (k == "--members") members = static_cast<uint32_t>(std::atoi(next()));
    else if (k == "--slot-bytes") opt.slot_bytes = std::strtoull(next(), nullptr, 10);
    else if (k == "--banks") opt.banks = static_cast<uint32_t>(std::atoi(next()));
    else if (k == "--iterations") iterations = std::atoi(next());
    else if (k == "--warmup") warmup = std::atoi(next());
    else if (k == "--no-pin") pin = false;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (members < 1 || iterations < 1 || bytes % 4 != 0) {
    std::fprintf(stderr, "need --members >= 1, --iterations >= 1 and --bytes a multiple of 4\n");
    return 2;
  }
  auto first = shm_group::create(members, 42, opt);
  if (!first) {
    std::fprintf(stderr, "%s\n", first.error().to_string().c_str());
    return 1;
  }
  const std::string name = (*first)->name();
  uint32_t rank = 0;
  std::vector<pid_t> children;
  for (uint32_t r = 1; r < members; ++r) {
    pid_t p = ::fork();
    if (p == 0) {
      rank = r;
      break;
    }
    children.push_back(p);
  }
  std::unique_ptr<shm_group> g;
  if (rank == 0) {
    g = std::move(*first);
  } else {
    auto o = shm_group::open(name, members, rank, 42);
    (void)first->release();  // the creator's object belongs to rank 0: no unlink from here
    if (!o) {
      std::fprintf(stderr, "rank %u: %s\n", rank, o.error().to_string().c_str());
      return 1;
    }
    g = std::move(*o);
  }
  if (pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % std::max(1u, std::thread::hardware_concurrency()), &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  std::atomic<bool> abort{false};
  if (auto s = g->check_in(10.0, abort); !s.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, s.to_string().c_str());
    return 1;
  }
  std::vector<float> v(bytes / 4);
  std::vector<double> times;
  int rc = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    std::fill(v.begin(), v.end(), float(rank + 1));
    fused_buffer buf(ring_dtype::f32, {std::as_writable_bytes(std::span(v))});
    auto t0 = std::chrono::steady_clock::now();
    auto s = g->all_reduce(buf, reduce_op::sum, static_cast<uint64_t>(i), 10.0, abort);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, s.to_string().c_str());
      return 1;
    }
    const float want = float(members) * float(members + 1) / 2;
    if (!v.empty() && (v.front() != want || v.back() != want)) {
      std::fprintf(stderr, "rank %u: wrong sum %g, want %g\n", rank, double(v.front()), double(want));
      rc = 1;
    }
    if (i >= warmup) times.push_back(us);
  }
  for (pid_t p : children) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  if (rank == 0) {
    std::sort(times.begin(), times.end());
    std::printf("%u members, %llu bytes, slots %llu x %u banks%s: median %.0f us, fastest %.0f us\n", members,
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(opt.slot_bytes), opt.banks,
                pin ? ", pinned" : "", times[times.size() / 2], times.front());
  }
  return rc;
}
