// The streamed input of a `train` job (input = "stream"): pre-processing
// shard actors (stream_shard.cpp) feed the trainer (train.cpp) through a
// batch source that pulls from the trainer's mailbox (stream_trainer.cpp).
// The wire format and the credit protocol are in stream_protocol.hpp.
//
// Every node derives the same stream_options and train_config from the
// topology file, so shards and trainer agree on the plan without a handshake;
// each batch still says which plan it follows, and the trainer checks.
#pragma once

#include <caf/fwd.hpp>

#include <memory>
#include <string>
#include <vector>

#include "kernels/preprocess/image_transforms.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {
class node_services;
class registry;
}  // namespace hetflow::actors

namespace hetflow::actors::builtin {

struct stream_options {
  std::vector<std::string> shard_nodes;  // shard k runs on shard_nodes[k]
  int64_t prefetch = 4;                  // credits: batches in flight per shard
  kernels::preprocess::augment_options augment;
  double timeout_s = 60;                 // the longest wait for one batch
  std::string fault;                     // tests only: "", "duplicate", "drop"
  int shards() const noexcept { return int(shard_nodes.size()); }
};

// From the [job] keys input, preprocess_shards, preprocess_nodes, prefetch,
// augment, crop_padding, flip, stream_timeout, stream_fault. errc::not_found
// for a node name that is not in the topology.
expected<stream_options> stream_options_of(const topology::cluster& c);

// The train job's training configuration as node `node` sees it, training
// on the node's device number `device` (defined in train.cpp; shards use it
// for the dataset, seed, batch size and plan).
expected<kernels::train_config> train_config_of(const topology::cluster& c, const std::string& node,
                                                std::size_t device = 0);

// Registers the actor type "stream_shard" (stream_shard.cpp).
void add_stream_shard(registry& reg);

// Per-epoch books of the stream source, for the job report.
struct stream_epoch_stats {
  int epoch = 0;            // 1-based
  int64_t rows = 0;         // distinct rows received (== the plan's used rows)
  uint64_t checksum = 0;    // sample_ledger checksum of those rows
};
struct stream_stats {
  std::vector<stream_epoch_stats> epochs;
  int64_t batches = 0;
  int64_t max_buffered = 0;   // most batches waiting in the trainer at once
  double wait_seconds = 0;    // training thread time spent waiting for batches
  std::string input_json;     // criteo_text: the trainer's index of the text (criteo_text::to_json)
};

// What the trainer of a streamed job loads on its own node: the training
// set's size and sample shape (for the plan) and the test set. Images: the
// dataset, normalised with the training set's statistics (the shards use
// the same); criteo_text: the text indexed (input_json says how) and only
// the test rows parsed.
struct stream_trainer_data {
  int64_t train_rows = 0;
  kernels::shape sample;
  int64_t classes = 0;
  kernels::image_dataset test;
  std::string input_json;  // criteo_text only
};
expected<stream_trainer_data> load_stream_trainer_data(const kernels::train_config& c);

// The trainer's batch source: batches from the shards, in step order, with
// the exactly-once checks (`seed`: the job's, for replaying epoch orders). `self` is the trainer (a blocking actor); every
// call must come from its thread. `stats` (may be null) is updated as epochs
// end.
std::unique_ptr<kernels::batch_source> make_stream_source(caf::blocking_actor* self,
                                                          std::shared_ptr<node_services> svc,
                                                          const std::string& me, const stream_options& opts,
                                                          const kernels::epoch_plan& plan,
                                                          const kernels::shape& sample, int64_t classes,
                                                          uint64_t seed, stream_stats* stats);

}  // namespace hetflow::actors::builtin
