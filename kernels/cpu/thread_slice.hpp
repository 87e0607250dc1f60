// Time slices of a node's threads under Linux's EEVDF scheduler (6.6+).
//
// A node whose compute uses all its cores shares them with the threads that
// move its messages (the data plane's progress thread, CAF's scheduler and
// multiplexer). EEVDF lets a running thread finish its slice (1.4 ms here,
// 0.7 ms x (1 + log2 cores) by default) before a woken one runs, and a
// compute thread that blocks between steps starts every burst with a fresh
// one, so every message into or out of the node can wait up to that long: a
// ps job of two one-core nodes ran its two workers in turns (perf sched:
// 0.4-0.6 ms of delay per wake-up of the progress threads). A thread whose
// own slice is shorter than the running one's preempts it at wake-up
// (kernel 6.12+, sched_setattr's sched_runtime on SCHED_OTHER): 100 us cut
// a woken thread's mean round trip from 523 to 105 us against a thread
// computing 2.5 ms bursts on its core.
//
// Kernels before 6.12 ignore the field (CFS decides wake-up preemption by
// its own granularity); failures (seccomp, an old kernel without
// sched_setattr) are reported, never fatal.
#pragma once

#include <cstdint>
#include <string>

namespace hetflow::kernels::cpu {

// Sets the calling thread's slice to `us` microseconds (the kernel clamps
// to 100 us .. 100 ms); 0 restores the default. Keeps the thread's policy
// and nice value. Threads it creates afterwards inherit it. Returns "" or
// why it failed.
std::string set_thread_slice_us(uint32_t us);

// The calling thread's slice in microseconds as the kernel reports it (0:
// not known, e.g. before 6.12 or sched_getattr failed).
uint32_t thread_slice_us();

// Every thread of this process as /proc/self/task/*/sched shows it
// ("se.slice", in ns; kernel 6.6+): how many, and the smallest and largest
// slice in microseconds. threads = 0 where the kernel shows no slice.
struct process_slices {
  int threads = 0;
  uint32_t min_us = 0, max_us = 0;
};
process_slices process_thread_slices();

}  // namespace hetflow::kernels::cpu
