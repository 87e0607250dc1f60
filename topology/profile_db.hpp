// profile_db: per-unit profiles of one model on several device kinds, read
// from a JSON file so that plans and simulations can be made for devices that
// are not present. Plain data; the planner (hetpipe_plan.hpp), the cost model
// and the simulator read it.
//
//   {"batch": 32,
//    "units": [{"name": "conv1", "params_bytes": 1, "activation_bytes": 1,
//               "output_bytes": 1,                       // optional
//               "devices": {"titan-v": {"fwd_ms": 1.0, "bwd_ms": 2.0}}}],
//    "devices": {"titan-v": {"memory_bytes": 12884901888,
//                            "update_ms": 0.5,                // optional
//                            "wave_copy_ms": 0.1, "wave_sum_ms": 0.2,
//                            "wave_add_ms": 0.15,            // optional
//                            "step_factor": 1.08}},          // optional
//    "links": {"intra_node_gbps": 100, "inter_node_gbps": 56,
//              "latency_us": 5,                          // optional
//              "host_ring_gbps": 46, "host_ring_latency_us": 0,
//              "host_ring_members": 2,
//              "host_ring_step_factor": 1.2,             // optional: dp on one host
//              "host_stage_factor": 1.05}}               // optional: hetpipe stages of one host
//
// Defaults: output_bytes (what crosses a stage boundary, each way) =
// activation_bytes; update_ms (one optimizer step over every parameter; a
// stage pays its share by parameter bytes) 0; wave_copy_ms / wave_sum_ms (a
// HetPipe stage's per-minibatch bookkeeping with overlapped waves, over every
// parameter: one copy of the weights, and what summing the step's changes
// into the wave's update adds to the step - on a cpu in the step's own pass,
// on a cuda device d += a - b after it; see wave_ms) 0; wave_add_ms (one
// pass d += a over every parameter: with wave_copy_ms what a cpu stage and
// its local shard do per wave, see wave_sync_ms) 0;
// links.intra_node_gbps 100, inter_node_gbps 10,
// latency_us 5 (per transfer). Times are per minibatch of `batch` samples;
// activation_bytes is what one minibatch keeps from forward to backward.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::topology {

struct unit_cost {
  double fwd_ms = 0.0;
  double bwd_ms = 0.0;
};

struct profile_unit {
  std::string name;
  uint64_t params_bytes = 0;
  uint64_t activation_bytes = 0;
  uint64_t output_bytes = 0;
  std::map<std::string, unit_cost, std::less<>> devices;  // by profile kind
};

struct profile_device {
  uint64_t memory_bytes = 0;  // 0 = not given (the topology's device memory must say)
  double update_ms = 0.0;     // optimizer step over all the model's parameters (0 = not given)
  double wave_copy_ms = 0.0;  // one copy of all the model's parameters (0 = not given)
  double wave_sum_ms = 0.0;   // summing a step into a wave's update, over all the model's parameters (0 = not given)
  double wave_add_ms = 0.0;   // d += a over all the model's parameters (0 = not given)
  // A whole training step of the whole model on this kind (forward,
  // backward, the optimizer's step; the mean over passes) over what the
  // units' times and update_ms give for it (0 = not given: 1). Measured
  // profiles time it (job_profiles.cpp): what a step costs beyond its units
  // timed one by one - their slower passes (the medians leave them out),
  // the caches one leaves to the next and the step leaves to the next
  // forward. The cost model multiplies single-device and dp replicas'
  // compute by it; HetPipe's stages are priced by their units alone.
  double step_factor = 0.0;
};

struct link_profile {
  double intra_node_gbps = 100.0;  // gigabits/s between devices of one node (and a device and its host)
  double inter_node_gbps = 10.0;   // gigabits/s between nodes
  double latency_us = 5.0;         // added to every transfer
  // Data parallelism's gradient sums when every replica is on one host (the
  // ring members' shared-memory path), in the ring model of cost_model.hpp
  // (measured profiles: host_ring_probe.hpp, latency 0). 0 = not measured
  // (the links above price it).
  double host_ring_gbps = 0.0;
  double host_ring_latency_us = 0.0;
  // The replicas it was measured with (0: any; a measured profile's sum of
  // a different number of replicas is priced by the links).
  int host_ring_members = 0;
  // Those replicas computing at once (measured profiles:
  // job_profiles.cpp, colocated_step_factor): the slowest one's step
  // (forward, backward, optimizer) over one replica's alone, >= 1; it
  // multiplies dp's compute where host_ring_gbps is used. 0 = not measured.
  double host_ring_step_factor = 0.0;
  // HetPipe: cpu stages of one host computing at once (measured profiles:
  // colocated_step_factor over the whole model, as many copies as the host
  // has cpu devices), the slowest one's pass over one alone, >= 1; it
  // multiplies the units' compute and the step of every cpu stage on a host
  // with two cpu devices or more. 0 = not measured.
  double host_stage_factor = 0.0;
};

// What a measured profile's source says of its links until something
// measures them ("; links between nodes assumed: 100 Gb/s"; a HetPipe run's
// head replaces it up to the next "; ": hp_profiles.cpp).
inline constexpr const char* links_assumed_note = "; links between nodes assumed: ";

struct profile_db {
  int64_t batch = 0;
  std::vector<profile_unit> units;
  std::map<std::string, profile_device, std::less<>> devices;
  link_profile links;
  std::string source;  // the file (or "measured ...") for messages

  bool has_kind(std::string_view kind) const;
  // Adds kind `to` (unless it is there): `from`'s unit times, optimizer step
  // and wave passes times `time_factor`, its memory and step factor as they
  // are. `from` must exist.
  void add_scaled_kind(const std::string& from, const std::string& to, double time_factor);
  // Sum of fwd + bwd ms of units [first, last] on `kind` (which must exist).
  double compute_ms(std::string_view kind, std::size_t first, std::size_t last) const;
  uint64_t params_bytes(std::size_t first, std::size_t last) const;
  uint64_t activation_bytes(std::size_t first, std::size_t last) const;
  // The optimizer step's share of units [first, last] on `kind` (by parameter bytes).
  double update_ms(std::string_view kind, std::size_t first, std::size_t last) const;
  // devices[kind].step_factor, 1 where not given.
  double step_factor(std::string_view kind) const;
  // One training step of the whole model on `kind` at `rows` rows, as a
  // single device or a dp replica takes it: the units' fwd + bwd scaled
  // from `batch` to `rows`, plus the update, times step_factor(kind).
  double whole_step_ms(std::string_view kind, int64_t rows) const;
  // A HetPipe stage's bookkeeping per minibatch with overlapped waves, its
  // share of units [first, last] on `kind` (by parameter bytes): `copies`
  // copies of its weights (into the minibatch's slot, except on a cpu stage
  // with one slot, whose slot holds the local weights; and before the local
  // step on a cuda stage with several slots) and the step summed into the
  // wave's update (hp_core.cpp's forward_in_slot and local_update).
  double wave_ms(std::string_view kind, std::size_t first, std::size_t last, int copies) const;
  // A HetPipe stage's passes over its weights once per wave on the host,
  // its share of units [first, last] on `kind` (by parameter bytes), from
  // wave_copy_ms and wave_add_ms: the stage's rebase on the pulled weights
  // (a copy and its own unpushed wave added) and its push's copy of the
  // wave's update into the message; with `shard_here` (the shard of its
  // weights on its node, sharing its cores) also the shard's add of that
  // update and its copy of the weights into the pull's answer (hp_stage.cpp,
  // hp_ps.cpp). 0 where the profile times neither (cuda kinds).
  double wave_sync_ms(std::string_view kind, std::size_t first, std::size_t last, bool shard_here) const;
  // `whole_ms` (a pass over every parameter): the share of units [first,
  // last] by parameter bytes; 0 for no time or no parameters.
  double param_share(double whole_ms, std::size_t first, std::size_t last) const;
  // The same profile at another batch size: times and activation/output
  // bytes scale linearly (an approximation: small batches use devices worse).
  profile_db at_batch(int64_t batch) const;
};

// Parses `text`; errors are errc::parse_error / invalid_argument naming
// `source` and the field (e.g. "p.json: units[3].devices.titan-v.fwd_ms:
// missing"). Every unit must have fwd/bwd for every kind in "devices" (a kind
// named only under units must also be complete).
expected<profile_db> parse_profile_db(std::string_view text, const std::string& source);
expected<profile_db> load_profile_db(const std::filesystem::path& file);

// Serialises to the same JSON shape (round trip; generated profiles);
// indent < 0: on one line.
std::string to_json(const profile_db& db, int indent = 1);

// Renames every device kind K of `db` to prefix + "-" + K (`hetflow profile
// --out P --as NAME`: the profiles of one machine, named for the fleet).
void prefix_kinds(profile_db& db, const std::string& prefix);

// One profile holding every device kind of `dbs` (`hetflow profile --merge`:
// files measured on different machines for one job). They must be of one
// model at one batch: the same units in the same order with the same names
// and parameter bytes (errors name both files and the first difference); a
// kind may appear in one file only. A unit's activation and output bytes are
// the largest of the files' (what a device kept may differ a little by
// backend; planning with the largest keeps under every memory). Links are the
// first file's.
expected<profile_db> merge_profile_dbs(const std::vector<profile_db>& dbs);

// A link's transfer time for `bytes`: bytes / bandwidth + latency.
double transfer_ms(uint64_t bytes, double gbps, double latency_us);

}  // namespace hetflow::topology
