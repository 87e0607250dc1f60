// The streamed input of a `train` job (input = "stream"): pre-processing
// shard actors (stream_shard.cpp) feed the trainer (train.cpp), or with
// strategy "ps" the PS workers (actors/ps/ps_worker.cpp), through a batch
// source that pulls from the consumer's mailbox (stream_trainer.cpp).
// The wire format and the credit protocol are in stream_protocol.hpp.
//
// Who feeds whom. W consumers (1 trainer, or W ps workers), S >= W shards:
//
//   shard k feeds consumer w = k % W; consumer w's shards are
//   k = w, w + W, w + 2W, ... (m_w of them). Consumer w trains on the steps
//   j of every epoch with j % W == w (ps_job.hpp's data rule: the steps it
//   would take from memory), and its i-th step j = w + i W comes from its
//   shard number i % m_w, i.e. shard k = w + W (i % m_w).
//
//   W = 2, S = 3:  step   0  1  2  3  4  5  6  7 ...
//                  worker 0  1  0  1  0  1  0  1
//                  shard  0  1  2  1  0  1  2  1
//
// With W = 1 this is the single trainer's rule (step j from shard j % S).
//
// Every node derives the same stream_options and train_config from the
// topology file, so shards and trainer agree on the plan without a handshake;
// each batch still says which plan it follows, and the trainer checks.
#pragma once

#include <caf/fwd.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/preprocess/image_transforms.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"
#include "schemas/wire_buffer.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {
class json_writer;
class node_services;
class registry;
}  // namespace hetflow::actors

namespace hetflow::actors::builtin {

struct stream_options {
  std::vector<std::string> shard_nodes;  // shard k runs on shard_nodes[k]
  int64_t prefetch = 4;                  // credits: batches in flight per shard
  int parallelism = 0;                   // threads building one batch; 0 = from the free cores
  kernels::preprocess::augment_options augment;
  double timeout_s = 60;                 // the longest wait for one batch
  std::string fault;                     // tests only: "", "duplicate", "drop"
  int epochs = 1;                        // the job's epochs
  // A lost shard's steps go to a surviving shard of the same consumer
  // ([job] stream_failover, default true; registry.hpp's expendable_nodes).
  bool failover = true;
  // The actors that consume the batches: {"trainer"}, or the ps workers
  // "psworker<w>" in rank order (strategy "ps"), or the stage 0 of each
  // virtual worker in VW order (strategy "hetpipe": planned at run time, so
  // empty here until the head's assign message, consumers_from_head).
  std::vector<std::string> consumers{"trainer"};
  bool consumers_from_head = false;
  int shards() const noexcept { return int(shard_nodes.size()); }
  int workers() const noexcept { return int(consumers.size()); }
  // The consumer shard k feeds.
  int consumer_of(int shard) const noexcept { return shard % workers(); }
  // How many shards feed consumer w (>= 1 when shards() >= workers()).
  int shards_of(int w) const noexcept { return (shards() - w + workers() - 1) / workers(); }
  // The shard that builds step `step` (of any epoch).
  int shard_of_step(int64_t step) const noexcept {
    const int w = int(step % workers());
    return w + workers() * int((step / workers()) % shards_of(w));
  }
  // Shard k's first step of an epoch, and the distance to its next one.
  int64_t first_step(int shard) const noexcept {
    return consumer_of(shard) + int64_t(workers()) * (shard / workers());
  }
  int64_t step_stride(int shard) const noexcept { return int64_t(workers()) * shards_of(consumer_of(shard)); }
};

// From the [job] keys input, preprocess_shards, preprocess_nodes, prefetch,
// preprocess_parallelism,
// augment, crop_padding, flip, stream_timeout, stream_fault, and for
// strategy "ps" the workers (ps_workers): by default one shard per worker,
// on that worker's node; preprocess_shards below the number of workers is
// errc::invalid_argument. Strategy "hetpipe": one shard per node by
// default, the consumers left to the head (its VWs need one shard each:
// it checks). errc::not_found for a node name that is not in
// the topology.
expected<stream_options> stream_options_of(const topology::cluster& c);

// input = "stream": every consumer (a ps worker, a VW's stage 0) needs a
// shard of its own (shard k feeds consumer k mod n). errc::invalid_argument
// saying so and what to set when `shards` < `consumers` (`who`: "virtual
// workers", "ps workers").
status check_stream_shards(int64_t shards, int64_t consumers, const std::string& who);

// Appends the actor specs of the job's stream shards (stream_shard_<k>,
// type stream_shard, on o.shard_nodes[k]) to `v`.
void add_stream_shard_actors(std::vector<topology::actor_spec>& v, const stream_options& o);

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
// A lost shard's steps taken over by another (failover).
struct stream_takeover {
  int shard = 0;        // the lost shard
  std::string node;     // its node (down)
  int taker = 0;        // the shard that builds its steps from here on
  int epoch = 0;        // 1-based, where it resumed
  int64_t step = 0;     // 1-based
  double at_s = 0;      // seconds into the stream when it was noticed
};
struct stream_stats {
  std::vector<stream_epoch_stats> epochs;
  std::vector<stream_takeover> takeovers;
  int64_t dropped_late = 0;  // batches of a lost shard that arrived after its takeover (rebuilt by the taker)
  int64_t batches = 0;
  int64_t max_buffered = 0;   // most batches waiting in the trainer at once
  double wait_seconds = 0;    // training thread time spent waiting for batches
  std::string input_json;     // criteo_text: the trainer's index of the text (criteo_text::to_json)
  std::string input_key = "criteo_text";  // the report member input_json goes to
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
  std::string input_json;  // criteo_text, criteo (records)
  std::string input_key = "criteo_text";
};
// `with_test` false: the test set is left empty (ps workers other than 0).
expected<stream_trainer_data> load_stream_trainer_data(const kernels::train_config& c, bool with_test = true);

// The consumer's batch source: batches from the shards, in step order, with
// the exactly-once checks (`seed`: the job's, for replaying epoch orders).
// `worker`: the consumer's index in opts.consumers; it must ask for exactly
// its steps (j % workers == worker), and its books expect exactly their
// rows. `self` is the consumer (a blocking actor); every call must come from
// its thread. `stats` (may be null) is updated as epochs end.
//
// A mailbox shared with another protocol (a ps worker's PS replies arrive
// in the same mailbox): while next() waits, every wire message that is not
// a stream message goes to `other` (empty: it fails the job), and the other
// protocol's receive loop hands the stream messages it meets to offer().
class stream_batch_source : public kernels::batch_source {
public:
  // True when `buf` is a stream batch and was taken (buffered for its step,
  // or a protocol failure that the next next() returns); false when it is
  // some other message, left to the caller.
  virtual bool offer(const std::string& node, const wire_buffer_ref& buf) = 0;
};
using other_wire_handler = std::function<void(const std::string& node, const wire_buffer_ref& buf)>;
std::unique_ptr<stream_batch_source> make_stream_source(caf::blocking_actor* self,
                                                        std::shared_ptr<node_services> svc, const std::string& me,
                                                        const stream_options& opts, const kernels::epoch_plan& plan,
                                                        const kernels::shape& sample, int64_t classes, uint64_t seed,
                                                        stream_stats* stats, int worker = 0,
                                                        other_wire_handler other = {});

// The stream part of a consumer's report: "input": "stream", "stream": {
// shards, prefetch, shard_nodes, augment, batches, max_buffered,
// wait_seconds, [criteo_text], exactly_once, epochs: [{epoch, rows,
// id_checksum}]}. `shards`: the indices of the shards that fed it.
void write_stream_report(json_writer& w, const stream_options& opts, const std::vector<int>& shards,
                         const stream_stats& stats, int epochs);

// Several consumers' books added up, for the job's report (ps workers,
// hetpipe's stage 0s): add() each consumer's metrics JSON (what
// write_stream_report wrote into it); rows and id checksums add (the
// checksum is a sum over ids), so the sum must be whole epochs.
class stream_books_sum {
public:
  // False when `metrics` holds no stream books.
  bool add(const std::string& metrics);
  bool any() const noexcept { return any_; }
  // "stream":{"exactly_once":B,"epochs":[{"epoch":E,"rows":R,"id_checksum":"H"},...]}
  std::string json() const;

private:
  bool any_ = false, once_ = true;
  std::vector<int64_t> rows_;
  std::vector<uint64_t> sums_;
};

}  // namespace hetflow::actors::builtin
