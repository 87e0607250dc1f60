#include "actors/ralp/ralp_options.hpp"

#include "kernels/zoo.hpp"
#include "topology/data_parallel.hpp"
#include "topology/hetpipe_plan.hpp"

namespace hetflow::actors::ralp_job {

std::string worker_name(int w) { return "ralpworker" + std::to_string(w); }

expected<ralp_options> options_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  ralp_options o;
  HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, p.get_strings("ps_workers")));
  o.workers = int(replicas.size());
  if (o.workers < 1) return make_error(errc::invalid_argument, "[job] strategy = \"ralp\" has no worker device");
  o.server_node = p.get_string("ralp_node", "");
  if (o.server_node.empty()) o.server_node = c.nodes.front().name;
  if (c.find_node(o.server_node) == nullptr)
    return make_error(errc::not_found, "[job] ralp_node names node '" + o.server_node + "', which is not in the topology");
  o.cut = p.get_int("ralp_cut", 0);
  if (o.cut < 0) return make_error(errc::invalid_argument, "[job] ralp_cut must be >= 0 (0: chosen by the cost model)");
  o.timeout_s = p.get_number("ps_timeout", 30.0);
  o.link_gbps = p.get_number("ralp_link_gbps", 0.0);
  o.checkpoint_dir = p.get_string("checkpoint_dir", "");
  o.checkpoint_every = p.get_int("checkpoint_every", 0);
  if (o.checkpoint_every < 0) return make_error(errc::invalid_argument, "[job] checkpoint_every must be >= 0");
  o.resume = p.get_bool("resume", false);
  return o;
}

int64_t worker_clocks(const kernels::epoch_plan& plan, int epochs, int w, int workers) {
  const int64_t per_epoch = plan.steps > w ? (plan.steps - w + workers - 1) / workers : 0;
  return per_epoch * epochs;
}

topology::ralp_cost_inputs cost_inputs(const topology::cluster& c, const topology::profile_db& db,
                                       const ralp_options& o, const std::string& fallback_kind) {
  topology::ralp_cost_inputs in;
  in.workers = o.workers;
  in.batch = c.job.params.get_int("batch_size", 64);
  auto kind_of = [&](const std::string& node) {
    const auto* n = c.find_node(node);
    if (n != nullptr && !n->devices.empty()) {
      std::string k = topology::device_profile_kind(n->devices.front(), db);
      if (!k.empty()) return k;
    }
    return fallback_kind;
  };
  in.server_kind = kind_of(o.server_node);
  const auto* server = c.find_node(o.server_node);
  bool same_host = true;
  auto replicas = topology::dp_replicas(c, c.job.params.get_strings("ps_workers"));
  if (replicas)
    for (const auto& r : *replicas) {
      const auto* n = c.find_node(r.node);
      std::string kind = topology::device_profile_kind(r.spec, db);
      if (kind.empty()) kind = fallback_kind;
      in.worker_kinds.push_back(kind);
      if (server == nullptr || n == nullptr || n->host != server->host) same_host = false;
    }
  in.gbps = o.link_gbps > 0 ? o.link_gbps : same_host ? db.links.intra_node_gbps : db.links.inter_node_gbps;
  in.latency_us = db.links.latency_us;
  return in;
}

expected<kernels::model_profile> profile_twin(const kernels::model_spec& spec, const kernels::train_config& c,
                                              const kernels::tensor* input) {
  HF_ASSIGN_OR_RETURN(kernels::model twin, kernels::build_model(spec, c.where, {c.threads, 1}));
  kernels::profile_options po;
  po.batch = c.batch_size;
  po.input = input;
  expected<kernels::model_profile> prof = make_error(errc::internal, "not profiled");
  twin.context().run([&] { prof = kernels::profile_model(twin, po); });
  return prof;
}

}  // namespace hetflow::actors::ralp_job
