// host_ring_probe: what the host's shared-memory all-reduce (shm_group, the
// path ring members of one host take) costs here, measured in this process
// so that a plan can price data parallelism's gradient sums on this host
// instead of assuming a link.
//
// `members` threads, one per would-be replica, each with its own f32 vector
// of `bytes` (the model's gradients), run collectives through one shm_group
// as ring members do: each handed to the member's worker thread and waited
// for (without the actor message around that); member 0 arrives 200 us after
// the others, which then sleep, as a step's last replica finds them; each
// member's threads on a CPU of their own where the process has enough. The
// median of `iterations` after `warmup`, in each of probe_rounds rounds of
// fresh threads, and the
// median of those, is read as the bandwidth of the ring model the cost model
// uses (topology/cost_model.hpp), t = 2 (N-1)/N * bytes / bw, with no
// latency term: exact at `bytes`, linear in the size elsewhere (the time is
// not: a vector that fits the caches sums faster). Sizes are clamped to
// 4 KiB .. max_probe_bytes, and to max_probe_total_bytes over the members (a
// larger model's sum is priced at that size's bandwidth: beyond the caches
// the time grows linearly). Errors (no shared memory, no memory, a thread
// that cannot start, a member that stalls) come back; nothing throws.
#pragma once

#include <cstdint>

#include "schemas/error.hpp"

namespace hetflow::actors::ring {

struct host_ring_cost {
  uint32_t members = 0;
  uint64_t bytes = 0;         // the size timed (clamped as above)
  double ms = 0.0;            // its median
  double gbps = 0.0;          // the ring model's bandwidth that gives `ms`, gigabits/s
};

inline constexpr uint64_t max_probe_bytes = uint64_t{64} << 20;
inline constexpr uint64_t max_probe_total_bytes = uint64_t{512} << 20;
inline constexpr int probe_rounds = 5;

expected<host_ring_cost> measure_host_ring(uint32_t members, uint64_t bytes, int warmup = 3, int iterations = 11);

}  // namespace hetflow::actors::ring
