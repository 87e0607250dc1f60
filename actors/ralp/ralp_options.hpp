// What the ralp_server and ralp_worker actors of one train job (strategy
// "ralp") agree on, computed alike on every node from the topology (plain
// C++: no CAF): names, the job's RALP keys, each worker's steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/profile.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"
#include "topology/profile_db.hpp"
#include "topology/ralp_cost.hpp"

namespace hetflow::actors::ralp_job {

std::string worker_name(int w);  // "ralpworker<w>"
inline constexpr const char* server_name = "ralp0";

struct ralp_options {
  int workers = 1;
  std::string server_node;  // ralp_node (default: the first node)
  int64_t cut = 0;          // ralp_cut; 0: chosen by the cost model on the server
  double timeout_s = 30;    // ps_timeout
  double link_gbps = 0;     // ralp_link_gbps; 0: the profile file's links, or the assumed ones
  std::string checkpoint_dir;   // "": no checkpoints (on the server's node)
  int64_t checkpoint_every = 0; // clocks; 0 with a checkpoint_dir: about one epoch's
  bool resume = false;          // --resume: restore the newest complete checkpoint
};

// The [job]'s ralp keys; errors name the key.
expected<ralp_options> options_of(const topology::cluster& c);

// Worker w of `workers` trains on steps j of every epoch with j % workers ==
// w: its clocks (pushes) in all.
int64_t worker_clocks(const kernels::epoch_plan& plan, int epochs, int w, int workers);

// The cost model's inputs for this job from a profile: every worker's and the
// server's profile kind (`kind_of` a node's first device; empty: `fallback`),
// the link (o.link_gbps when set, else intra_node_gbps when every worker
// shares the server's host, else inter_node_gbps), the worker batch.
topology::ralp_cost_inputs cost_inputs(const topology::cluster& c, const topology::profile_db& db,
                                       const ralp_options& o, const std::string& fallback_kind);

// The model of `spec` profiled unit by unit on a twin built on c's device
// with c's threads (profiling overwrites gradients), at c's batch, on
// `input` rows when given (else random ones): what the server's cost model
// prices the cut with (its own, and each worker's on its node).
expected<kernels::model_profile> profile_twin(const kernels::model_spec& spec, const kernels::train_config& c,
                                              const kernels::tensor* input = nullptr);

}  // namespace hetflow::actors::ralp_job
