// cost_model: predicted step time of the strategies other than HetPipe, so
// that `hetflow plan` / `simulate` can compare them (strategy "auto").
//
// Data parallel (ring): every replica holds the whole model; the global batch
// is split in proportion to speed (topology::split_rows), so a replica with r
// rows computes for r / batch * (fwd + bwd of the profile at `batch`), scaled
// linearly, plus the kind's update_ms (the optimizer step; every replica
// applies the whole update). Memory of a replica: params * 3 (weights, gradients, optimizer
// state) + activations of its rows. A device that cannot hold that is left
// out (and the split redone). The ring then sums the gradients:
//   allreduce_ms = 2 (N-1)/N * params / bw + 2 (N-1) * latency
// with bw the slowest link the ring crosses (inter-node when the replicas
// span nodes). Replicas all on one host sum through shared memory: when the
// profile has that measured (links.host_ring_gbps, host_ring_latency_us,
// for host_ring_members replicas or any) those replace the links, and the
// compute is multiplied by links.host_ring_step_factor (the slowest of the
// co-located replicas computing at once, over one alone), and the sum
// pays two actor messages more (2 x links.latency_us: the gradients to the
// replica's ring member and the sum back; the ring's probe times the
// collective from the members' hands). A replica's
// compute (and a single device's) is its units' fwd + bwd at its rows plus
// the update, times its kind's devices[kind].step_factor (a whole step
// over its units, where the profile has it measured). No
// overlap of the sum with backward is assumed (hetflow's buckets overlap it
// for large models: this is an upper bound on step time).
// Single device: the fastest device that holds the model, alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/hetpipe_plan.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::topology {

struct dp_estimate {
  std::vector<plan_device> replicas;     // those that hold the model
  std::vector<int64_t> rows;             // of the global batch
  std::vector<std::string> left_out;     // "n3 dev0 (rtx-2060): needs 7.1 GiB, has 6.0 GiB"
  int64_t global_batch = 0;
  double compute_ms = 0.0;               // slowest replica's (fwd + bwd + update) x device_step_factor (x step_factor)
  double device_step_factor = 1.0;       // its kind's devices[kind].step_factor (1: not given)
  double step_factor = 1.0;              // links.host_ring_step_factor where it applied
  double allreduce_ms = 0.0;             // the ring's sum (with handover_ms)
  double handover_ms = 0.0;              // host ring: the gradients to the ring member and the sum back (2 x links.latency_us)
  std::string allreduce_model;           // what priced it: "host ring (shared memory)", "inter-node links", ...
  double step_ms = 0.0;
  double samples_per_s = 0.0;
};

// Memory one replica needs for `rows` samples of the profile.
uint64_t dp_replica_memory(const profile_db& db, int64_t rows);

// `global_batch` 0: db.batch per replica (the HetPipe paper's DP setting:
// each GPU a minibatch of the profile's size). `equal_split`: every replica
// the same rows (dp_split = "equal"; Horovod's way), so the slowest sets the
// pace. errc::out_of_memory when no device holds the model.
expected<dp_estimate> estimate_dp(const std::vector<plan_device>& devices, const profile_db& db,
                                  int64_t global_batch, bool equal_split = false);

// One device alone (strategy "single"), the first in `devices`.
expected<dp_estimate> estimate_single(const plan_device& device, const profile_db& db, int64_t batch);

}  // namespace hetflow::topology
