// What the ps_shard and ps_worker actors of one train job agree on, computed
// alike on every node from the topology (plain C++: no CAF): the job's PS
// settings, the actor names, the model they build and the placement of its
// parameters on the shards.
#pragma once

#include <string>
#include <vector>

#include "actors/ps/ps_clock.hpp"
#include "actors/ps/ps_placement.hpp"
#include "kernels/model.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors::ps_job {

std::string worker_name(int w);  // "psworker<w>"
std::string shard_name(int k);   // "ps<k>"

struct ps_options {
  ps::consistency_model model;
  int workers = 1;
  int shards = 1;
  std::vector<std::string> shard_nodes;  // per shard
  double timeout_s = 30;
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  bool resume = false;
  int drill_worker = -1;     // tests: this worker sleeps drill_delay_s before its step at clock drill_clock
  int64_t drill_clock = 0;
  double drill_delay_s = 0;
};

// The [job]'s ps keys; errors name the key.
expected<ps_options> options_of(const topology::cluster& c);

// c.model for c's dataset (without loading it) on `where` with c.seed: the
// same initial weights on every node.
expected<kernels::model> build_model_for(const kernels::train_config& c, kernels::device where, int threads);

// The shards' tensors (ps_placement over the model's parameter bytes).
ps::placement placement_of(kernels::model& m, int shards);

}  // namespace hetflow::actors::ps_job
