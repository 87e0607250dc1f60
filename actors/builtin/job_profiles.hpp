// Profiles of a train job's model for the planners (HetPipe, dp, RALP):
// from the job's profile_file, or measured here on each distinct cpu device
// kind of the topology. Shared by `hetflow plan`/`simulate`/`profile` and by
// the hetpipe runtime's head, which plans the same way `hetflow plan` does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/layer_spec.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/zoo.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::actors {

// The model of a train job (model, width, and for the synthetic dataset its
// input shape and classes), as the trainer builds it.
expected<kernels::model_spec> train_model_spec(const topology::cluster& c);

// [job] insert_layers = ["AFTER:TYPE", ...]: plugins' layers to insert
// (kernels/zoo.hpp, inserted_layer); invalid_argument for an entry that is
// not AFTER:TYPE.
expected<std::vector<kernels::inserted_layer>> insert_layers_of(const topology::settings& p);

// A cpu device's thread count (threads, else the node's cpus, else every
// hardware thread).
int cpu_threads(const topology::node_spec& n, const topology::device_spec& d);

// Medians of one optimizer step (the job's optimizer) over every parameter
// of `m`, whose gradients profile_model left in place, in ms: the step, and
// on a cpu model what summing its changes into a wave's update adds to it
// (optimizer::step_summed, as a cpu HetPipe stage with overlapped waves
// steps; 0 on a cuda model). Changes m's weights.
struct update_times {
  double step_ms = 0, sum_ms = 0;
};
// The job's optimizer: [job] optimizer, lr, momentum, weight_decay with
// their defaults (the train job's and the profiles' alike).
kernels::optimizer_config optimizer_config_of(const topology::cluster& c);

// The job's first `rows` training samples as a model of `spec` takes them
// (kernels::sample_training_batch), for timing it: profiles timed on them
// see the data's speed, not random values'. Strategies single and dp only
// (the others' cost models are still tuned to random inputs; see the
// definition). Empty otherwise, when the dataset gives none (criteo kinds,
// a missing file), or when its samples are not the model's input.
std::optional<kernels::tensor> sample_input(const topology::cluster& c, const kernels::model_spec& spec, int64_t rows);

expected<update_times> time_update(const topology::cluster& c, kernels::model& m);

// The mean ms of a whole training step of cpu model `m` on `rows` random
// rows, as a single device or a dp replica takes it: forward, backward and
// the job's optimizer step, one after the other (untimed: 3 passes and
// 0.03 s at least; then 5..100 passes, until `phase_seconds` of them).
// Changes m's weights (a tiny learning rate) and gradients.
expected<double> time_whole_step(const topology::cluster& c, kernels::model& m, int64_t rows,
                                 double phase_seconds = 0.3);

// Medians in ms of one pass over every weight of a cpu model `m`, in m's
// cpu context: a copy (hp_core.hpp's copy_floats: into a minibatch's slot,
// the pulled weights into the local ones, an update or weights into a
// message) and d += a (kernels::cpu::add: a rebase adding the stage's own
// wave, the shard adding a pushed one). {0, 0} on a cuda model (its stage
// works on the device: not timed).
struct weight_passes {
  double copy_ms = 0, add_ms = 0;
};
weight_passes time_weight_passes(kernels::model& m);

// How much longer a training step of `members` dp replicas on one host
// takes, until the slowest of them is done, when they start each step
// together, as after a gradient sum, than one replica's alone (forward,
// backward, the job's optimizer step, on `rows` rows; cpu replicas of
// `threads` threads, each its own model): >= 1. It prices what co-located
// replicas take from each other (cores, caches, memory bandwidth) and the
// wait for the slowest each step. `rounds` rounds (5), each one replica alone and
// then all at once; a round's ratio is the mean over passes of the slowest
// replica's pass over the lone replica's mean pass; the median round's
// ratio. A phase is 5..60 passes (until `phase_seconds`, 0.15 s, of the lone replica's).
// The replicas are assumed alike (measured_profiles passes the first
// replica's threads). `rounds` and `phase_seconds`: fewer, shorter rounds
// (HetPipe's stages: 3 of 0.1 s).
// `sweep_bytes` > 0: each pass also reads and writes a buffer of that many
// bytes between backward and the optimizer's step, as a dp step's gradient
// sum does (measured_profiles: twice the gradients). `together_ms`, when
// given: the median round's mean over passes of the slowest replica's
// pass, in ms (the step the replicas take at once).
expected<double> colocated_step_factor(const topology::cluster& c, const kernels::model_spec& spec, int threads,
                                       uint32_t members, int64_t rows, int rounds = 5, double phase_seconds = 0.15,
                                       uint64_t sweep_bytes = 0, double* together_ms = nullptr);

// Every distinct cpu kind (by threads) of `c` measured at `batch`; cpu
// devices without a `profile` get "cpu-tN" in `c`. cuda devices need a
// profile_file. Strategy dp or auto with 2 or more replicas on one host:
// the host's shared-memory all-reduce is measured too (links.host_ring_*,
// actors/ring/host_ring_probe.hpp) at the model's parameter bytes, and
// (cpu replicas whose copies take at most 2 GiB together) the replicas'
// co-located step (links.host_ring_step_factor: colocated_step_factor's
// step at once, with a sum's memory traffic, over what the units' profiles
// and the update give for it).
// `pin_kinds` (profiles_on_pinned_nodes): the kinds' own timing runs on
// those CPUs when every cpu kind's threads fit there (*kinds_pinned says
// whether it did); the host ring and co-located steps stay unpinned.
expected<topology::profile_db> measured_profiles(topology::cluster& c, int64_t batch,
                                                 const std::vector<int>& pin_kinds = {},
                                                 bool* kinds_pinned = nullptr);

// The job's profile_file when it names one, else measured_profiles; then
// the devices' `speed` keys (topology::apply_device_speeds, noted in the
// source).
expected<topology::profile_db> profiles_at(topology::cluster& c, int64_t measure_batch);
// apply_device_speeds, its note added to db's source.
void apply_speeds(topology::cluster& c, topology::profile_db& db);

// Per-node CPU speed for measured profiles on one machine (`hetflow
// simulate` and `plan`). The nodes `hetflow run` starts here are pinned to
// their own CPUs (apps::local_node_pinning: `nodes`, indices into c.nodes,
// and each one's `cpus`, empty where unpinned), and those CPUs need not be
// alike: on the 2-core PVM guest one vCPU ran 2.5x slower than the other for
// minutes at a time, and ps and ralp, whose workers ran there, were
// predicted 21% and 38% too fast (bench/RESULTS.md, 2026-12-06). So:
// measured_profiles with the kinds' timing pinned to the first pinned
// node's CPUs (where every kind's threads fit there; else no speeds); then
// each pinned node's CPUs timed against those (node_cpu_speeds, 5
// rounds in turns, the median); a node whose time is off by more than
// node_speed_threshold gets its cpu devices' kinds as copies named
// KIND@NODE with every time (units, update, wave passes) times its factor,
// and the profile's source lists every node's factor. A profile_file, fewer
// than two pinned nodes, or strategy hetpipe or auto (a HetPipe run plans
// its stages from the plain profiles: a plan simulated on scaled ones would
// not be the one that runs) get profiles_at alone.
inline constexpr double node_speed_threshold = 0.10;
expected<topology::profile_db> profiles_on_pinned_nodes(topology::cluster& c, int64_t measure_batch,
                                                        const std::vector<int>& nodes,
                                                        const std::vector<std::vector<int>>& cpus);
// Median seconds (of `rounds`, in turns) of a fixed loop on a thread pinned
// to each CPU list; 0 where a list is empty or cannot be pinned.
std::vector<double> node_cpu_speeds(const std::vector<std::vector<int>>& cpus, int rounds);
// What profiles_on_pinned_nodes does with the factors (time on the node's
// CPUs over the reference's; factors[k] for c.nodes[nodes[k]], 0 = not
// measured): KIND@NODE copies scaled, the node's cpu devices moved to them,
// where |factor - 1| > threshold. Returns "n1 x 2.41, ..." for the nodes it
// scaled.
std::string scale_node_kinds(topology::cluster& c, topology::profile_db& db, const std::vector<int>& nodes,
                             const std::vector<double>& factors, double threshold);

}  // namespace hetflow::actors
