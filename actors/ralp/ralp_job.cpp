// The train job's strategy "ralp": catalog keys, expansion into ralp_server
// and ralp_worker actors, and the report's "ralp" member (ralp_job.hpp).
#include "actors/ralp/ralp_job.hpp"

#include "actors/builtin/stream_job.hpp"
#include "actors/ps/ps_job.hpp"
#include "actors/ralp/ralp_options.hpp"
#include "actors/registry.hpp"
#include "kernels/zoo.hpp"
#include "topology/data_parallel.hpp"

namespace hetflow::actors::ralp_job {

void add_train_keys(topology::type_spec& job) {
  using topology::key_spec;
  using topology::key_type;
  job.keys.push_back(key_spec{"ralp_cut", key_type::integer, false, int64_t{0},
                              "ralp: units [ralp_cut, end) run on the RALP server next to their weights, units "
                              "before it on the workers (data parallel through the server); the model's unit count: "
                              "no cut; 0: chosen by the cost model (`hetflow plan` prints the table)",
                              0.0, 1e6, {}});
  job.keys.push_back(key_spec{"ralp_link_gbps", key_type::number, false, 0.0,
                              "ralp: the server's link speed the cost model assumes, in Gb/s (0: the profile file's "
                              "links, or 100 on one host and 10 between hosts for measured profiles); on one host "
                              "the link is memory copies through the data plane, often a few GB/s",
                              0.0, 1e6, {}});
  job.keys.push_back(key_spec{"ralp_node", key_type::string, false, std::string(""),
                              "ralp: the node running the RALP server (empty: the first node)", {}, {}, {}});
}

expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c) {
  const auto& p = c.job.params;
  if (p.get_string("input", "memory") != "memory")
    return make_error(errc::unsupported, "[job] strategy = \"ralp\" reads input = \"memory\" only for now");
  if (!c.actors.empty())
    return make_error(errc::invalid_argument,
                      "[job] strategy = \"ralp\" places its own actors (ralpworker*, ralp0); remove the [[actors]] tables");
  HF_ASSIGN_OR_RETURN(ralp_options o, options_of(c));
  HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, p.get_strings("ps_workers")));
  if (o.cut > 0) {  // the model's units (one per layer of its spec), without loading data
    auto cfg = builtin::train_config_of(c, o.server_node, 0);
    if (cfg && cfg->data.kind != kernels::dataset_kind::criteo) {
      auto zo = kernels::model_options_for(*cfg);
      auto spec = zo ? kernels::make_model_spec(cfg->model, *zo) : expected<kernels::model_spec>(zo.error());
      const auto units = spec ? int64_t(spec->layers.size()) : 0;
      if (spec && o.cut > units)
        return make_error(errc::invalid_argument, "[job] ralp_cut = " + std::to_string(o.cut) + ": model " +
                                                      cfg->model + " has " + std::to_string(units) + " units (cuts 1.." +
                                                      std::to_string(units - 1) + ", " + std::to_string(units) +
                                                      " for no cut)");
    }
  }
  std::vector<topology::actor_spec> v;
  topology::actor_spec s;
  s.name = server_name;
  s.type = "ralp_server";
  s.node = o.server_node;
  v.push_back(std::move(s));
  HF_RETURN_IF_ERROR(ps_job::add_worker_actors(v, replicas, "ralp", "ralp_worker", worker_name));
  return v;
}

void add_types(registry& reg) {
  add_ralp_server(reg);
  add_ralp_worker(reg);
}

std::string summarize(const std::vector<actor_result>& results) {
  std::string workers, server;
  for (auto& r : results) {
    const bool is_worker = r.name.rfind("ralpworker", 0) == 0;
    const bool is_server = r.name == server_name;
    if (!is_worker && !is_server) continue;
    std::string entry = "{\"name\":\"" + r.name + "\",\"node\":\"" + r.node + "\"";
    if (r.metrics_json.size() > 2) {
      std::string m = r.metrics_json.substr(1, r.metrics_json.size() - 2);
      if (is_worker) {  // worker 0's epochs are at the top level
        auto e = m.find(",\"epochs\":");
        if (e != std::string::npos) m = m.substr(0, e);
      }
      entry += "," + m;
    }
    entry += "}";
    if (is_server)
      server = entry;
    else
      workers += (workers.empty() ? "" : ",") + entry;
  }
  if (workers.empty() && server.empty()) return {};
  return ",\"ralp\":{\"server\":" + (server.empty() ? std::string("null") : server) + ",\"workers\":[" + workers + "]}";
}

}  // namespace hetflow::actors::ralp_job
