// The parameter-server strategy of the train job (strategy = "ps"): the
// actor types ps_shard and ps_worker, the job's expansion into them, its
// catalog keys and its part of the job report. Plain declarations (no CAF).
//
// Placement: one ps_worker per device of each node in `ps_workers` (every
// node when empty; topology::dp_replicas' rule), `ps_shards` shards (0: one
// per node of `ps_nodes`, every node when empty) placed round robin on
// `ps_nodes`. Shard k holds the parameters ps_placement gives it.
//
// Data: worker w of W trains on the steps j of every epoch with j % W == w
// (the single-device epoch plan and shuffled order; `batch_size` is each
// worker's batch), so every row is used once per epoch across workers and a
// worker's clock (its pushes so far) is its data position.
//
// input = "stream": the same steps, built by stream shards instead of
// loaded from memory: stream shard k feeds worker k % W and builds worker
// w's steps only (builtin/stream_job.hpp; preprocess_shards >= W, by default
// one per worker on its node). Each worker's stream books (rows, id
// checksum per epoch) add up across workers to the whole epoch.
#pragma once

#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"
#include "topology/data_parallel.hpp"

namespace hetflow::actors {
class registry;
struct actor_result;
}  // namespace hetflow::actors

namespace hetflow::actors::ps_job {

// The train job's ps keys (consistency, staleness, ps_nodes, ...).
void add_train_keys(topology::type_spec& train_job);
// The actors of a strategy "ps" train job.
expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c);

// Appends one worker actor of `type` per replica (name worker_name(rank),
// args rank and device), for the PS-style strategies ("ps", "ralp"):
// errc::unsupported naming the node for a non-cpu device.
status add_worker_actors(std::vector<topology::actor_spec>& v, const std::vector<topology::dp_replica>& replicas,
                         const std::string& strategy, const std::string& type, std::string (*worker_name)(int));
// Registers ps_shard and ps_worker.
void add_types(registry& reg);
// Report members for the train job (",\"ps\":{...}"), empty when no ps actor
// reported.
std::string summarize(const std::vector<actor_result>& results);

}  // namespace hetflow::actors::ps_job
