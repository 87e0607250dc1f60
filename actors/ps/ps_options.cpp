#include "actors/ps/ps_options.hpp"

#include "kernels/zoo.hpp"
#include "topology/data_parallel.hpp"

namespace hetflow::actors::ps_job {

using hetflow::ps::consistency_model;

std::string worker_name(int w) { return "psworker" + std::to_string(w); }
std::string shard_name(int k) { return "ps" + std::to_string(k); }

expected<ps_options> options_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  ps_options o;
  HF_ASSIGN_OR_RETURN(o.model, ps::parse_consistency(p.get_string("consistency", "bsp"), p.get_int("staleness", 0)));
  auto wnodes = p.get_strings("ps_workers");
  HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, wnodes));
  o.workers = int(replicas.size());
  auto snodes = p.get_strings("ps_nodes");
  if (snodes.empty())
    for (auto& n : c.nodes) snodes.push_back(n.name);
  for (auto& n : snodes)
    if (c.find_node(n) == nullptr)
      return make_error(errc::not_found, "[job] ps_nodes names node '" + n + "', which is not in the topology");
  o.shards = int(p.get_int("ps_shards", 0));
  if (o.shards <= 0) o.shards = int(snodes.size());
  for (int k = 0; k < o.shards; ++k) o.shard_nodes.push_back(snodes[std::size_t(k) % snodes.size()]);
  o.timeout_s = p.get_number("ps_timeout", 30.0);
  o.checkpoint_every = p.get_int("checkpoint_every", 0);
  o.checkpoint_dir = p.get_string("checkpoint_dir", "");
  o.resume = p.get_bool("resume", false);
  o.drill_worker = int(p.get_int("ps_drill_worker", -1));
  o.drill_clock = p.get_int("ps_drill_clock", 1);
  o.drill_delay_s = p.get_number("ps_drill_delay", 0.0);
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    return make_error(errc::invalid_argument, "[job] checkpoint_every needs checkpoint_dir");
  return o;
}

expected<kernels::model> build_model_for(const kernels::train_config& c, kernels::device where, int threads) {
  // The model's input (and dlrm's table sizes) from the config, without
  // loading the data: the same model on every worker and shard.
  HF_ASSIGN_OR_RETURN(kernels::zoo_options zo, kernels::model_options_for(c));
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, kernels::make_model_spec(c.model, zo));
  return kernels::build_model(spec, where, kernels::build_options{threads, c.seed});
}

ps::placement placement_of(kernels::model& m, int shards) {
  std::vector<int64_t> bytes, sparse_rows;
  for (auto* p : m.parameters()) {
    bytes.push_back(int64_t(p->value.byte_size()));
    sparse_rows.push_back(p->sparse ? p->value.shape()[0] : 0);
  }
  return ps::place_by_bytes(bytes, shards, sparse_rows);
}

}  // namespace hetflow::actors::ps_job
