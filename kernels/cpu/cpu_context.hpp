// cpu_context: what the cpu backend needs to run units on one thread of
// control: a oneDNN engine and in-order stream, the thread count, and a oneTBB
// arena of that size.
//
// Thread affinity: one context per thread that runs units (a trainer, a
// pipeline stage actor). oneDNN in Debian uses the OpenMP runtime
// (DNNL_CPU_THREADING_RUNTIME == OMP), whose thread count is a per-thread
// setting; `run` sets it on the calling thread and runs `fn` inside the arena,
// so that oneDNN primitives and our oneTBB loops use the same number of
// threads. Units may be called outside `run` (tests); they then use OpenMP's
// and oneTBB's defaults.
//
// Do not oversubscribe: OpenMP workers spin at barriers (libgomp's default),
// so a 2-thread context on 2 cores that other busy threads also use runs 5-100x
// slower (measured: LeNet-5 63k -> 0.3-9k images/s), worse than 1 thread.
// Give a context only cores nothing else keeps busy, or start the process
// with OMP_WAIT_POLICY=passive (read by libgomp at load time, so it must be in
// the environment): hetflow's computing commands do (omp_policy.hpp); on idle
// cores it cost nothing measurable for LeNet-5 and the MLP on 2 threads
// (kernels_bench, 2026-11-28).
#pragma once

#include <dnnl.hpp>
#include <tbb/task_arena.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "kernels/device_context.hpp"

namespace hetflow::kernels::cpu {

class cpu_context final : public device_context {
public:
  // threads <= 0: all hardware threads.
  explicit cpu_context(int threads = 0);
  cpu_context(const cpu_context&) = delete;
  cpu_context& operator=(const cpu_context&) = delete;

  device where() const noexcept override { return device::cpu(); }
  int threads() const noexcept override { return threads_; }
  // Runs fn() on the calling thread with oneDNN and oneTBB limited to
  // threads().
  void run(const std::function<void()>& fn) override {
    bind_current_thread();
    arena_.execute(fn);
  }
  const dnnl::engine& engine() const noexcept { return engine_; }
  const dnnl::stream& stream() const noexcept { return stream_; }
  tbb::task_arena& arena() noexcept { return arena_; }

  // Sets the calling thread's OpenMP thread count (what oneDNN uses). Call
  // before creating primitives: some oneDNN kernels size their work split at
  // creation time.
  void bind_current_thread() const;

  // Which ISA oneDNN dispatches to on this machine, e.g. "avx512_core".
  static std::string isa_name();

private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  tbb::task_arena arena_;
};

}  // namespace hetflow::kernels::cpu
