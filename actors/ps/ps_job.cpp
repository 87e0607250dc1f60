// The train job's strategy "ps": catalog keys, expansion into ps_shard and
// ps_worker actors, and the report's "ps" member (ps_job.hpp).
#include "actors/ps/ps_job.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "actors/builtin/stream_job.hpp"
#include "actors/ps/ps_options.hpp"
#include "actors/ps/ps_shard.hpp"
#include "actors/ps/ps_worker.hpp"
#include "actors/ps/worker_report.hpp"
#include "actors/registry.hpp"
#include "topology/data_parallel.hpp"

namespace hetflow::actors::ps_job {

void add_train_keys(topology::type_spec& job) {
  using topology::key_spec;
  using topology::key_type;
  auto key = [&](std::string name, key_type t, topology::setting_value def, std::string help,
                 std::optional<double> lo = {}, std::optional<double> hi = {}, std::vector<std::string> one_of = {}) {
    job.keys.push_back(key_spec{std::move(name), t, false, std::move(def), std::move(help), lo, hi, std::move(one_of)});
  };
  key("consistency", key_type::string, std::string("bsp"),
      "ps: bsp (every worker waits for all updates of the previous clock), ssp (bounded by staleness), asp (no wait)",
      {}, {}, {"bsp", "ssp", "asp"});
  key("staleness", key_type::integer, int64_t{0},
      "ps, ssp: a worker at clock c reads weights once every worker has pushed c - staleness updates", 0.0, 1e6);
  key("ps_workers", key_type::string_list, std::vector<std::string>{},
      "ps: nodes whose devices run a worker each (empty: every node)");
  key("ps_nodes", key_type::string_list, std::vector<std::string>{},
      "ps: nodes the PS shards run on, round robin (empty: every node)");
  key("ps_shards", key_type::integer, int64_t{0}, "ps: number of PS shards (0: one per ps_nodes entry)", 0.0, 1024.0);
  key("ps_timeout", key_type::duration, 30.0,
      "ps: a pull waiting longer than this fails the job, naming the slowest worker", 0.1, 86400.0);
  key("checkpoint_every", key_type::integer, int64_t{0},
      "ps: each shard writes a checkpoint when the global clock reaches a multiple of this (0: only at the end); "
      "hetpipe: every this many waves (0: about one epoch's); single and dp (input memory): also a mid-epoch "
      "checkpoint after every this many steps of an epoch (0: after each epoch only)", 0.0,
      1e9);
  key("checkpoint_dir", key_type::string, std::string(""),
      "folder of checkpoints (empty: none). ps: the shards' (see checkpoint_every); hetpipe: the shards' and "
      "stages' (see checkpoint_every); dp and single (input memory): every replica's after each epoch. `hetflow run FILE --resume` continues from the newest one "
      "complete on every shard / replica");
  key("ps_drill_worker", key_type::integer, int64_t{-1},
      "tests only: this worker sleeps ps_drill_delay before its step at clock ps_drill_clock (-1: none)", -1.0, 1e6);
  key("ps_drill_clock", key_type::integer, int64_t{1}, "tests only: see ps_drill_worker", 0.0, 1e12);
  key("ps_drill_delay", key_type::duration, 0.0, "tests only: see ps_drill_worker", 0.0, 3600.0);
}

expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c) {
  const auto& p = c.job.params;
  if (!c.actors.empty())
    return make_error(errc::invalid_argument,
                      "[job] strategy = \"ps\" places its own actors (psworker*, ps*); remove the [[actors]] tables");
  HF_ASSIGN_OR_RETURN(ps_options o, options_of(c));
  HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, p.get_strings("ps_workers")));
  std::vector<topology::actor_spec> v;
  for (int k = 0; k < o.shards; ++k) {
    topology::actor_spec a;
    a.name = shard_name(k);
    a.type = "ps_shard";
    a.node = o.shard_nodes[std::size_t(k)];
    a.args.set("shard", int64_t{k});
    v.push_back(std::move(a));
  }
  HF_RETURN_IF_ERROR(add_worker_actors(v, replicas, "ps", "ps_worker", worker_name));
  if (p.get_string("input", "memory") == "stream") {
    // Stream shard k feeds worker k % W (builtin/stream_job.hpp).
    HF_ASSIGN_OR_RETURN(builtin::stream_options so, builtin::stream_options_of(c));
    builtin::add_stream_shard_actors(v, so);
  }
  return v;
}

status add_worker_actors(std::vector<topology::actor_spec>& v, const std::vector<topology::dp_replica>& replicas,
                         const std::string& strategy, const std::string& type, std::string (*worker_name)(int)) {
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    if (replicas[i].spec.kind != topology::device_kind::cpu)
      return make_error(errc::unsupported, "[job] strategy = \"" + strategy + "\": node '" + replicas[i].node +
                                               "' lists a non-cpu device; " + strategy +
                                               " workers run on cpu devices only for now");
    topology::actor_spec a;
    a.name = worker_name(int(i));
    a.type = type;
    a.node = replicas[i].node;
    a.args.set("rank", int64_t(i));
    a.args.set("device", int64_t(replicas[i].device));
    v.push_back(std::move(a));
  }
  return {};
}

void add_types(registry& reg) {
  add_ps_shard(reg);
  add_ps_worker(reg);
}


std::string summarize(const std::vector<actor_result>& results) {
  // Per-worker and per-shard lines of the report, from their metrics.
  std::string workers, shards;
  int64_t max_staleness = -1;
  // input = "stream": the workers' books added up, which must be whole epochs.
  builtin::stream_books_sum books;
  for (auto& r : results) {
    const bool is_worker = r.name.rfind("psworker", 0) == 0;
    const bool is_shard = !is_worker && r.name.rfind("ps", 0) == 0 && r.name.size() > 2 &&
                          std::isdigit(static_cast<unsigned char>(r.name[2]));
    if (!is_worker && !is_shard) continue;
    std::string entry = "{\"name\":\"" + r.name + "\",\"node\":\"" + r.node + "\"";
    if (r.metrics_json.size() > 2) {
      // Workers: everything but the epochs (worker 0's are at the top level).
      std::string m = r.metrics_json.substr(1, r.metrics_json.size() - 2);
      if (is_worker) {
        books.add(m);
        // The last "epochs" is the worker's own (its stream books' come before).
        auto e = m.rfind(",\"epochs\":");
        if (e != std::string::npos) m = m.substr(0, e);
        auto pos = m.find("\"max_staleness\":");
        if (pos != std::string::npos) max_staleness = std::max<int64_t>(max_staleness, std::atoll(m.c_str() + pos + 16));
      }
      entry += "," + m;
    }
    entry += "}";
    auto& list = is_worker ? workers : shards;
    list += (list.empty() ? "" : ",") + entry;
  }
  if (workers.empty() && shards.empty()) return {};
  const std::string stream = books.any() ? "," + books.json() : std::string();
  return ",\"ps\":{\"max_staleness\":" + std::to_string(max_staleness) + ",\"workers\":[" + workers +
         "],\"shards\":[" + shards + "]" + stream + "}";
}

}  // namespace hetflow::actors::ps_job
