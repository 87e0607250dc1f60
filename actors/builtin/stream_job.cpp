#include "actors/builtin/stream_job.hpp"

#include <algorithm>

namespace hetflow::actors::builtin {

expected<stream_options> stream_options_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  stream_options o;
  std::vector<std::string> nodes = p.get_strings("preprocess_nodes");
  if (nodes.empty())
    for (const auto& n : c.nodes) nodes.push_back(n.name);
  for (const auto& n : nodes)
    if (c.find_node(n) == nullptr)
      return make_error(errc::not_found, "[job] preprocess_nodes names node '" + n +
                                             "', which is not in the topology's [[nodes]]");
  int64_t shards = p.get_int("preprocess_shards", 0);
  if (shards <= 0) shards = int64_t(nodes.size());
  // Round robin over the nodes: one per node by default, more wrap around.
  for (int64_t k = 0; k < shards; ++k) o.shard_nodes.push_back(nodes[std::size_t(k) % nodes.size()]);
  o.prefetch = std::max<int64_t>(1, p.get_int("prefetch", 4));
  if (p.get_bool("augment", false)) {
    o.augment.crop_padding = int(p.get_int("crop_padding", 2));
    o.augment.flip = p.get_bool("flip", true);
  }
  o.timeout_s = p.get_number("stream_timeout", 60.0);
  o.fault = p.get_string("stream_fault", "");
  return o;
}

}  // namespace hetflow::actors::builtin
