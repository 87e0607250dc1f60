#include "actors/ps/ps_placement.hpp"

#include <algorithm>
#include <numeric>

namespace hetflow::ps {

placement place_by_bytes(std::span<const int64_t> tensor_bytes, int shards) {
  shards = std::max(shards, 1);
  placement p;
  p.shard_of.assign(tensor_bytes.size(), 0);
  p.tensors_of.assign(std::size_t(shards), {});
  p.bytes_of.assign(std::size_t(shards), 0);
  std::vector<std::size_t> order(tensor_bytes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensor_bytes[a] > tensor_bytes[b]; });
  for (std::size_t i : order) {
    auto least = std::min_element(p.bytes_of.begin(), p.bytes_of.end());
    const int s = int(least - p.bytes_of.begin());
    p.shard_of[i] = s;
    *least += tensor_bytes[i];
  }
  for (std::size_t i = 0; i < tensor_bytes.size(); ++i) p.tensors_of[std::size_t(p.shard_of[i])].push_back(int(i));
  return p;
}

}  // namespace hetflow::ps
