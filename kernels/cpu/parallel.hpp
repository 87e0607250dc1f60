// oneTBB loops for the cpu backend's own (non-oneDNN) kernels.
//
// Small ranges run inline: at batch 64 most elementwise work is a few
// microseconds, less than waking a worker (and on 2-core machines a woken
// worker competes with oneDNN's OpenMP threads, which spin after each
// primitive).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>

namespace hetflow::kernels::cpu {

// Elements below which an elementwise loop runs on the calling thread.
inline constexpr int64_t serial_elements = 1 << 16;

// Calls body(begin, end) over [0, n) in chunks of at least `grain`.
template <class Body> void parallel_range(int64_t n, int64_t grain, Body&& body) {
  if (n <= 0) return;
  // One thread (inside a 1-thread cpu_context): nothing to split.
  if (n <= grain || tbb::this_task_arena::max_concurrency() <= 1) {
    body(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); },
                    tbb::static_partitioner{});
}

// A few threads (at most 4, sized by the process, not by the arena of
// whoever calls first) for service work beside a node's compute: building
// large messages, a PS shard's adds, a cuda stage's uploads. A few: the
// node may be running a cpu stage's threads too.
inline tbb::task_arena& service_arena() {
  static tbb::task_arena arena(std::min(4, tbb::info::default_concurrency()));
  return arena;
}

// Elementwise loops: body(begin, end) over [0, n).
template <class Body> void parallel_elements(int64_t n, Body&& body) {
  parallel_range(n, serial_elements, std::forward<Body>(body));
}

}  // namespace hetflow::kernels::cpu
