#include "topology/cluster.hpp"

namespace hetflow::topology {

const char* to_string(device_kind k) noexcept {
  switch (k) {
    case device_kind::cpu: return "cpu";
    case device_kind::cuda: return "cuda";
  }
  return "unknown";
}

const node_spec* cluster::find_node(std::string_view name) const {
  const int i = node_index(name);
  return i < 0 ? nullptr : &nodes[static_cast<size_t>(i)];
}

int cluster::node_index(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace hetflow::topology
