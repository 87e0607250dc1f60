// The RALP strategy of the train job (strategy = "ralp"): the actor types
// ralp_server and ralp_worker, the job's expansion into them, its catalog
// keys and its part of the job report. Plain declarations (no CAF).
//
// Placement: one ralp_worker per device of each node in `ps_workers` (every
// node when empty; topology::dp_replicas' rule), one ralp_server ("ralp0")
// on `ralp_node` (default: the first node). The server runs units
// [ralp_cut, end) of the model for every worker and is the parameter server
// of units [0, ralp_cut) (ralp_server_core.hpp); ralp_cut = 0: the server
// profiles the model and takes the cut topology::estimate_ralp chooses.
//
// Data: as strategy "ps": worker w of W trains on steps j of every epoch
// with j % W == w (the single-device plan and shuffled order; `batch_size`
// is each worker's batch).
#pragma once

#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {
class registry;
struct actor_result;
}  // namespace hetflow::actors

namespace hetflow::actors::ralp_job {

// The train job's ralp keys (ralp_cut, ralp_node; workers and timeout are
// the ps keys ps_workers and ps_timeout).
void add_train_keys(topology::type_spec& train_job);
// The actors of a strategy "ralp" train job.
expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c);
// Registers ralp_server and ralp_worker.
void add_types(registry& reg);
// Report member for the train job (",\"ralp\":{...}"), empty when no ralp
// actor reported.
std::string summarize(const std::vector<actor_result>& results);

// Registered by add_types (ralp_server.cpp, ralp_worker.cpp).
void add_ralp_server(registry& reg);
void add_ralp_worker(registry& reg);

}  // namespace hetflow::actors::ralp_job
