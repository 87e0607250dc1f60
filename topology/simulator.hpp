// simulator: a discrete-event simulation of a HetPipe plan (hetpipe_plan.hpp)
// from profiles, for clusters larger than any machine at hand.
//
// What it models:
//   - each stage's device runs one task at a time: forward or backward of one
//     minibatch; backward first when both wait (1F1B), lowest minibatch first;
//     stage j starts a forward only while it keeps fewer than min(Nm, S - j)
//     minibatches' activations (the planner's memory model);
//   - a stage boundary is a transfer of the boundary unit's output_bytes
//     (activations forward, gradients back) that occupies the sender's and the
//     receiver's ports for bytes / bandwidth + latency: device ports at
//     intra_node_gbps on one node, node NICs at inter_node_gbps between nodes.
//     A cuda stage's transfers overlap its compute (the planner's stage_ms
//     does not assume that, so the simulation is at least as fast as the
//     plan's bound, usually); a cpu stage's cores move the bytes, as the
//     planner prices them: its device stays busy until its send has left,
//     and a receive that arrives while it computes makes its next task
//     longer by the time they overlapped (no latency added: the transfer
//     is timed on the ports alone);
//   - a VW keeps at most Nm minibatches in flight: minibatch p starts when
//     p - Nm has finished its backward at stage 0 (so its local updates are
//     applied: local staleness Nm - 1);
//   - WSP: after a stage's backward of a wave's last minibatch it pushes the
//     wave's aggregated update for its units to their PS shards (one transfer
//     per shard node); the VW's clock advances when every stage has pushed.
//     Before the first minibatch of wave w >= 1 the VW pulls fresh weights,
//     which it may start only once every VW has pushed waves 0 .. w - 2 - D
//     (every clock >= w - 1 - D): DESIGN.md's "a VW at clock c never
//     computes with weights missing updates from clocks older than c - D - 1
//     of any VW". So with D = 0 wave w overlaps the push of wave w - 1 but
//     waits for every VW's wave w - 2.
//   - PS pushes and pulls queue on their own ports (per node NIC, per
//     device bus), apart from the pipeline's transfers: a bulk push queued
//     first come, first served in front of a stage's activations would
//     stall the pipeline far more than a link that shares its bandwidth.
// What it does not model: PS apply time, data loading, bandwidth sharing
// between PS and pipeline traffic on one NIC (optimistic when the PS
// traffic is heavy), more than one transfer at a time per port.
//
// Throughput is measured between the moment every VW has finished its
// warm-up waves and the moment the first VW has finished all its waves.
#pragma once

#include <cstdint>
#include <vector>

#include "schemas/error.hpp"
#include "topology/hetpipe_plan.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::topology {

struct simulation_options {
  int waves = 40;         // per VW
  int warmup_waves = 4;   // not counted
  // Random delays (tests of the WSP invariants): each compute task takes
  // its time x (1 + U[0, jitter)), from a generator seeded with `seed`.
  double jitter = 0.0;
  uint64_t seed = 1;
  // What hetflow's runtime does (actors/hetpipe/hp_core.hpp) rather than
  // HetPipe's overlapped waves: a VW pulls wave w only after all its stages
  // pushed wave w - 1 (the pipeline drains at every wave boundary), and the
  // pull waits until every VW pushed waves 0 .. w - 1 - D (one wave stricter).
  bool drain_waves = false;
};

struct simulated_stage {
  double busy_ms = 0.0;       // compute inside the measured window
  double utilisation = 0.0;   // busy / window
};

struct simulated_virtual_worker {
  std::vector<simulated_stage> stages;
  double samples_per_s = 0.0;
  double wsp_wait_ms = 0.0;   // time with a free slot but waiting for the wave's pull (WSP)
  int64_t minibatches = 0;    // finished in all
  int pushes = 0;             // aggregated pushes (stages x waves)
};

struct simulation_result {
  double samples_per_s = 0.0;
  double window_ms = 0.0;     // measured simulated time
  double end_ms = 0.0;        // the whole simulation
  std::vector<simulated_virtual_worker> virtual_workers;
  // Invariant probes (tests): the largest (wave started) - (min clock of any
  // VW) seen when a VW starts a wave (WSP keeps it <= D + 1), and the largest
  // number of minibatches one VW had in flight (<= Nm).
  int max_wave_lead = 0;
  int max_in_flight = 0;
  bool weights_order_ok = true;  // no minibatch started before p - Nm finished
  // The most activation sets one stage held, over the planner's
  // min(Nm, S - j) (<= 1 when the memory model holds).
  double max_kept_ratio = 0.0;
};

expected<simulation_result> simulate_hetpipe(const hetpipe_plan& plan, const profile_db& db,
                                             const simulation_options& options = {});

}  // namespace hetflow::topology
