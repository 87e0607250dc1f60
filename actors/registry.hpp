// registry: the explicit, start-up-time table of actor types and job kinds.
//
// No static self-registration: main() builds a registry, adds the built-in
// types (add_builtin_types), later the plugins' types, and hands it to the
// node runtime and to `validate`, which both parse topologies against
// registry.catalog().
#pragma once

#include <caf/fwd.hpp>

#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {

class node_services;

// Everything an actor factory gets. References live until the node exits.
struct actor_env {
  const topology::cluster& cluster;
  const topology::actor_spec& spec;
  std::shared_ptr<node_services> services;
};

// Spawns the actor. The actor must:
//   - wait for start_atom before sending anything (stash other messages),
//   - call services->report_done(...) exactly once when its part of the job
//     is over (ok or failed), then it may quit.
using actor_factory = std::function<caf::actor(caf::actor_system&, const actor_env&)>;

// Turns a job into the actors it needs (beyond the file's [[actors]]).
using job_expander =
    std::function<expected<std::vector<topology::actor_spec>>(const topology::cluster&)>;

// One finished actor, as reported to the head node.
struct actor_result {
  std::string name;
  std::string node;
  bool ok = false;
  std::string summary;
  std::string metrics_json;  // a JSON object or empty
};

// Top-level members of the job report (without braces), e.g.
//   "\"tensors\": 64, \"gbytes_per_s\": 1.2"
using job_summarizer = std::function<std::string(const std::vector<actor_result>&)>;

// A per-sample image transform (plugins add them; README "Write your own
// actor type"): the stream shards of a train job with input = "stream" apply
// the transforms [job] transforms lists, in that order, to every training
// sample they build, after crop/flip and normalisation - the values the
// network sees. It must be deterministic: what it does to a sample may
// depend only on the sample's values and on (seed, epoch, sample), never on
// the shard, thread or batch, so that any split of an epoch across shards
// (and a shard taking over a lost one's steps) trains the same. Called from
// several threads at once (oneTBB, one sample each).
struct sample_context {
  int64_t channels = 1, height = 1, width = 1;  // the sample is (C, H, W), row-major
  uint64_t seed = 0;                            // [job] seed
  int epoch = 0;                                // 0-based
  int64_t sample = 0;                           // the row of the training set
};
using sample_transform = std::function<void(std::span<float> sample, const sample_context& ctx)>;
// Makes the transform for a job from the job's keys: its own keys are
// [job] NAME.KEY (a TOML table `NAME = { key = ... }`), declared in the
// entry's `keys` and checked like any [job] key. An error refuses the job
// at validate time and on every node, naming the transform.
using transform_factory = std::function<expected<sample_transform>(const topology::settings& job)>;
struct transform_entry {
  std::string name;
  std::string help;
  std::vector<topology::key_spec> keys;  // names without the "NAME." prefix
  transform_factory make;
};

struct actor_type_entry {
  topology::type_spec spec;
  actor_factory spawn;
};

struct job_kind_entry {
  topology::type_spec spec;
  job_expander expand;
  job_summarizer summarize;  // may be empty
};

class registry {
public:
  status add_actor_type(topology::type_spec spec, actor_factory spawn);
  status add_job_kind(topology::type_spec spec, job_expander expand, job_summarizer summarize = {});
  status add_transform(transform_entry entry);

  const actor_type_entry* find_actor_type(std::string_view name) const;
  const job_kind_entry* find_job_kind(std::string_view name) const;
  const transform_entry* find_transform(std::string_view name) const;
  // The job's transforms ([job] transforms), made from its keys; an unknown
  // name or a factory's refusal is an error naming it.
  expected<std::vector<sample_transform>> make_transforms(const topology::settings& job) const;

  // Plain data for topology::load_topology. A job kind with a key named
  // "transforms" also gets, per transform with keys, a table key NAME whose
  // fields are the transform's keys (read back as "NAME.KEY").
  topology::catalog catalog() const;

private:
  std::vector<actor_type_entry> actor_types_;
  std::vector<job_kind_entry> job_kinds_;
  std::vector<transform_entry> transforms_;
};

// The types hetflow ships: the skeleton job (producer, transformer, checker)
// and the transport benchmark.
void add_builtin_types(registry& reg);

// All actors of a job: the file's [[actors]] plus the job kind's expansion,
// in a deterministic order every node computes alike. Checks names, types
// and nodes.
expected<std::vector<topology::actor_spec>> job_actors(const topology::cluster& c,
                                                      const registry& reg);

// The nodes whose loss the job survives (indices into c.nodes): every node
// but the first whose actors are all shards another node can take over: a
// streamed train job's "stream_shard"s (the shards that are left build a
// lost shard's steps, stream_trainer.cpp; [job] stream_failover) and a
// preprocess job's "preprocess_shard"s (another node processes a lost
// node's slice, actors/builtin/preprocess.cpp; [job] shard_failover), and a
// dp train job's "dp_replica"s and their "ring_member"s, but not replica 0's
// node (the ring drops the lost members and the replicas left train the
// epoch again, actors/ring/ring_member.cpp, kernels/trainer.cpp; [job]
// dp_failover). Empty when the key is false. The same on every node and in
// the launcher.
std::set<int> expendable_nodes(const topology::cluster& c, const std::vector<topology::actor_spec>& actors);

}  // namespace hetflow::actors
